"""User-facing errors: expected mistakes become one clear message and a non-zero exit, never a traceback."""


class ToolkitError(Exception):
    """An expected problem with the user's input or environment; the message says what and where."""


class InputError(ToolkitError):
    """Bad input data: the message names the file, line or field."""


class ConfigError(InputError, ValueError):
    """A config model built in Python with a value its schema refuses (`PipelineConfig(output={"n": 0})`), the
    message naming the field. A ValueError too, as pydantic's ValidationError is, so code catching that still
    catches it (user trial BP: pydantic's error escaped the ToolkitError hierarchy)."""


class ProviderError(ToolkitError):
    """One provider call failed (HTTP error, timeout, malformed answer). Guarded stages degrade on it; raised where
    nothing can stand in (an embedding endpoint down at ingest). Defined here, not in `toolkit.rerank`, so that
    catching it imports nothing heavy."""


class ModelLoadError(InputError):
    """A model the config names cannot be loaded (a `rerank.model` path that does not exist, a hub id neither cached
    nor reachable): a configuration error, not a provider's failure, so it is raised, never a fallback (user trial BP)."""


class StoreError(ToolkitError):
    """The store cannot do what was asked (wrong model, missing index, missing extension)."""


class StoreBusyError(StoreError):
    """Another process holds the store's write lock (an ingest running): worth retrying, unlike other errors."""


class StoreDamagedError(StoreError):
    """DuckDB finds the store file damaged (a checksum that does not match, a truncated file): rebuild it or restore a
    backup; `hrt` exits 74 for it wherever DuckDB notices, at open or at a later read (user trial BR: a damaged header
    exited 2, a damaged block 74)."""


def count_arg(value: object, name: str) -> int | None:
    """`value` as a count of results (`rescore(n=)`, `Result.run(depth=)`): None (the default) or an integer >= 1.
    0 became the default through `n or default`, and a negative count an empty result (user trial BP)."""
    if value is None:
        return None
    if isinstance(value, bool) or not hasattr(value, "__index__") or value.__index__() < 1:  # type: ignore[operator]
        raise InputError(f"{name} {value!r}: expected an integer >= 1 (or None for the default)")
    return value.__index__()  # type: ignore[attr-defined]


def install_hint(package: str, extra: str | None = None) -> str:
    """How to install what is missing, said one way everywhere (user trial BO: `to_pandas` raised a bare
    ModuleNotFoundError, `to_ranx` named only the package, Ray named the extra, usearch both): the package, and the
    toolkit's extra that brings it with the rest of that feature."""
    own = f"`pip install {package}`"
    return f"{own}, or the toolkit's {extra} extra: `pip install 'hybrid-retrieval-toolkit[{extra}]'`" if extra else own
