"""User-facing errors: expected mistakes become one clear message and a non-zero exit, never a traceback."""


class ToolkitError(Exception):
    """An expected problem with the user's input or environment; the message says what and where."""


class InputError(ToolkitError):
    """Bad input data: the message names the file, line or field."""


class ConfigError(InputError, ValueError):
    """A config model built in Python with a value its schema refuses (`PipelineConfig(output={"n": 0})`), the
    message naming the field. A ValueError too, as pydantic's ValidationError is, so code catching that still
    catches it (user trial BP: pydantic's error escaped the ToolkitError hierarchy)."""


class StoreError(ToolkitError):
    """The store cannot do what was asked (wrong model, missing index, missing extension)."""


class StoreBusyError(StoreError):
    """Another process holds the store's write lock (an ingest running): worth retrying, unlike other errors."""
