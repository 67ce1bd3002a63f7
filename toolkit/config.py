"""One typed config for a whole pipeline: every knob a widget shows is a field here.

Configs are plain YAML/JSON files (presets ship in `toolkit/presets/`). Validation is strict (unknown keys,
wrong types and out-of-range values are errors naming the file and the dotted field) because a typo in a
tuning file silently falling back to a default is the worst kind of wrong result. Types are strict too:
no coercion (`top_k: true` or `top_k: "50"` is an error; an int is accepted where a float is meant), and
floats must be finite unless a field says otherwise (the last rerank bucket ends at `.inf`). A field the rest
of the config switches off (`fusion.alpha` under rrf, the reranker's settings with no provider) is no error,
but a file or mapping that sets one loads with an `InertSettingWarning` naming it (`_SWITCHED_OFF`). Models are
frozen: change a config with `cfg.with_updates({"fusion.rrf_k": 30})`, which returns a new validated config.
A file may not repeat a key (YAML and JSON would keep the last one silently).

Relative paths in a config file (`fusion.model`, `expansion.path`, `rerank.path`, and `rerank.model` or
`retrieval.dense.model` when they name a local folder) are read from the file's folder, so a config and the
models beside it work from any working directory; `load_config` makes them absolute. A path found only in the
working directory (the old rule) is still used, with a warning; one found nowhere is an error naming the file
when the config reads it. Configs built in Python (`with_updates`, a mapping) keep paths relative to the
working directory (`save_config` writes them absolute), and presets name no local paths.

The stage boundary is declared here, once per field, by its type:

    top_k: Prepare[int] = Field(100, ge=1)        # read by pipeline.prepare: a change re-runs retrieval
    rrf_k: Rescore[int] = Field(60, gt=0)         # never read by prepare: a change only re-scores

`Prepare` fields are everything the expensive, cached stages read (`pipeline.prepare`: features, expansion,
retrieval, reranker scores, vectors); `Rescore` fields are read only by the live stages (`pipeline.rescore`:
fusion, blending, dedup, thresholds, output). `PrepareInput[bool]` is a prepare flag that only adds an
input when on (near-duplicate dedup's vectors), so frames prepared with it on also serve it off. Adding a
field is one line with its stage; a leaf without one fails at import. Everything else derives from the declaration: `pipeline.prepare_key` and the lab's
cache signature hash `prepare_settings(cfg)`, and the tuner accepts exactly `fields(Stage.RESCORE)`.
The contract is that `prepare` reads no rescore field, so `rescore(prepare(a), b) == rescore(prepare(b), b)`
whenever `a` and `b` differ only in rescore fields (tests/test_stage_boundary.py checks it for every one).
"""

from __future__ import annotations

import contextlib
import difflib
import fnmatch
import functools
import hashlib
import ipaddress
import json
import math
import os
import re
import socket
import unicodedata
import warnings
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from datetime import date, datetime
from decimal import Decimal
from enum import StrEnum
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, ClassVar, Literal, NamedTuple, NoReturn, TypeVar
from urllib.parse import urlsplit

from pydantic import (
    AfterValidator,
    AllowInfNan,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    Strict,
    ValidationError,
    field_validator,
    model_validator,
)

from .errors import ConfigError, InputError
from .files import utf16_text, write_text_atomic
from .redact import looks_like_secret, url_credentials

SCHEMA_VERSION = 1
PRESETS_DIR = Path(__file__).resolve().parent / "presets"
# The presets as parsed from their YAML, each with the SHA-256 of its file (`_read_preset`).
PARSED_PRESETS = PRESETS_DIR / "parsed.json"
# The preset used wherever no config is named (`hrt search`, `hrt run --mode hybrid`, `hrt tune`, the lab).
DEFAULT_PRESET = "default"

# DuckDB FTS stemmers (PRAGMA create_fts_index `stemmer`), plus "none".
# fmt: off
Stemmer = Literal[
    "arabic", "basque", "catalan", "danish", "dutch", "english", "finnish", "french", "german", "greek",
    "hindi", "hungarian", "indonesian", "irish", "italian", "lithuanian", "nepali", "norwegian", "porter",
    "portuguese", "romanian", "russian", "serbian", "spanish", "swedish", "tamil", "turkish", "none",
]
# fmt: on
Stopwords = Literal["english", "none"]  # DuckDB FTS stopword lists (a table name is never accepted)

_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _check_env_name(v: str | None) -> str | None:
    # Messages never repeat the value: a rejected "name" is often a pasted key (#16).
    if v is None:
        return v
    if looks_like_secret(v):
        raise ValueError(
            "looks like a secret value (not shown); put the NAME of the environment variable that holds it (e.g. RERANK_API_KEY)"
        )
    if not _ENV_NAME.match(v):
        raise ValueError("is not an environment variable name (letters, digits, underscore; value not shown)")
    return v


def _check_url(v: str | None) -> str | None:
    if v is None:
        return v
    why = url_credentials(v)
    if why:
        raise ValueError(
            f"the URL carries credentials ({why}); put the key in an environment variable and name it in api_key_env"
        )
    if not re.match(r"^https?://", v, re.I):
        raise ValueError("must start with http:// or https://")
    if _link_local(urlsplit(v).hostname or ""):
        raise ValueError("points at a link-local address (a cloud's instance metadata service answers there, with the "
                         "machine's credentials): no model provider does")
    return v


def endpoint_url(url: str | None, path: str) -> str | None:
    """`url` with `path` (`/embeddings`, `/rerank`, `/chat/completions`) appended when it is an OpenAI-style base
    URL, ending in `/v1` or `/v1/`; any other URL as it is."""
    if url is None or not path:
        return url
    parts = urlsplit(url)
    base = parts.path.rstrip("/")
    return parts._replace(path=base + path).geturl() if base.endswith("/v1") else url


def _ip(host: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address | None:
    """The address a host name spells, in any form the resolver reads (`0xa9fea9fe`, `169.254.169.254`, `[fe80::1]`)."""
    try:
        return ipaddress.ip_address(host)
    except ValueError:
        pass
    try:
        return ipaddress.ip_address(socket.inet_ntoa(socket.inet_aton(host)))
    except OSError:
        return None


# Metadata services answer at these names and addresses (AWS's IPv6 one is not link-local).
_METADATA_HOSTS = {"metadata.google.internal", "metadata", "fd00:ec2::254"}


def _link_local(host: str) -> bool:
    ip = _ip(host)
    mapped = getattr(ip, "ipv4_mapped", None)  # ::ffff:169.254.169.254 reaches the IPv4 address
    return (host.lower().rstrip(".") in _METADATA_HOSTS or (ip is not None and (ip.is_link_local or str(ip) in _METADATA_HOSTS))
            or (mapped is not None and mapped.is_link_local))


def _loopback(host: str) -> bool:
    ip = _ip(host)
    return host.lower() == "localhost" or (ip is not None and ip.is_loopback)


PROXY_VARS = "HTTP_PROXY/HTTPS_PROXY/ALL_PROXY"


def env_proxy(url: str) -> str | None:
    """The proxy (`host:port`, never its credentials) a request to `url` goes through, read from the environment
    as the providers' client (httpx) reads it: HTTP_PROXY, HTTPS_PROXY, ALL_PROXY (or lower case), minus the hosts
    NO_PROXY lists. None when the request goes direct."""
    try:  # httpx's own reading, so the answer is what the client does (NO_PROXY's rules differ from urllib's)
        import httpx
        from httpx._utils import URLPattern, get_environment_proxies

        target = httpx.URL(url)
        mounts = sorted(((URLPattern(k), v) for k, v in get_environment_proxies().items()), key=lambda kv: kv[0])
        proxy = next((v for pattern, v in mounts if pattern.matches(target)), None)
    except (ImportError, AttributeError, ValueError, TypeError):  # another httpx: any proxy named applies (errs towards warning)
        from urllib.request import getproxies

        found = getproxies()
        proxy = found.get(urlsplit(url).scheme.lower()) or found.get("all")
    if not proxy:
        return None
    try:
        parts = urlsplit(proxy if "://" in proxy else f"http://{proxy}")
        host = parts.hostname or "?"
    except ValueError:  # a malformed proxy variable (`http://u:p@[bad`): named as such, never printed (trial BM)
        return "(a proxy the environment names, not a valid URL)"
    host = f"[{host}]" if ":" in host else host
    try:
        return f"{host}:{parts.port}" if parts.port else host
    except ValueError:  # a port that is not a number: the host alone
        return host


def cleartext_hop(url: str) -> str | None:
    """Who off this machine can read a request to `url` (and its key): "to HOST" for plain http to another machine,
    "to HOST through the proxy P (...)" when the environment sends it through a proxy on another machine (user trial
    BJ: a loopback endpoint was not warned about, and HTTP_PROXY took the key in cleartext to the proxy). None over
    https (a proxy only tunnels it) or when nothing leaves the machine."""
    parts = urlsplit(url)
    if parts.scheme.lower() != "http":
        return None
    host = parts.hostname or ""
    proxy = env_proxy(url)
    try:
        proxy_host = urlsplit(f"http://{proxy}").hostname or "" if proxy else ""
    except ValueError:
        proxy_host = "?"  # not parsed: not known to be this machine
    if proxy and not _loopback(proxy_host):
        return f"to {host} through the proxy {proxy} ({PROXY_VARS} in the environment; NO_PROXY={host} goes direct)"
    return None if _loopback(host) else f"to {host}"


# Where model providers' APIs live: a key sent there from a config is what configs are for. Any other host is
# named when a config file sends a key to it (`key_destinations`).
KNOWN_PROVIDER_HOSTS = ("api.openai.com", "api.jina.ai", "api.cohere.com", "api.cohere.ai", "api.voyageai.com",
                        "api.mistral.ai", "api.together.xyz", "api.fireworks.ai", "api.deepinfra.com", "openrouter.ai")


def key_destinations(cfg: PipelineConfig) -> list[tuple[str, str, str]]:
    """(section, variable, URL) of each provider `cfg` switches on that sends an environment variable's value.
    A config names the variable, so a config someone else wrote can name any of your secrets (user trial AJ)."""
    sections = [("retrieval.dense", cfg.retrieval.dense, cfg.retrieval.dense.enabled and cfg.retrieval.dense.provider == "http"),
                ("rerank", cfg.rerank, cfg.rerank.provider == "http"), ("expansion", cfg.expansion, cfg.expansion.provider == "http")]
    return [(name, s.api_key_env, s.url) for name, s, on in sections if on and s.api_key_env and s.url]


def _warn_key_destinations(cfg: PipelineConfig, origin: str, stacklevel: int) -> None:
    """A config file that sends a key anywhere but a known provider's API or this machine says so, and so does one
    sending a key over unencrypted http to another machine: the value leaves with the first request."""
    for section, var, url in key_destinations(cfg):
        host = urlsplit(url).hostname or ""
        hop = cleartext_hop(url)
        if hop is None and (host in KNOWN_PROVIDER_HOSTS or _loopback(host)):
            continue
        how = f" over unencrypted http {hop}" if hop else f" to {host}"
        warnings.warn(f"{origin}: {section} sends the value of ${var}{how}: a config names the variable it "
                      "sends, so check a config you did not write before running it", ConfigWarning, stacklevel=stacklevel)


def _no_pasted_key(data: Any) -> Any:
    """A friendlier message than 'extra inputs' for the most dangerous typo: a key pasted into the config."""
    if isinstance(data, dict):
        for k in ("api_key", "apikey", "key", "token", "secret"):
            if k in data:
                raise ValueError(
                    f"'{k}' is not allowed: never store keys in a config; set api_key_env to the NAME of the environment variable"
                )
    return data


class Stage(StrEnum):
    """Which side of the stage boundary reads a field (see the module docstring)."""

    PREPARE = "prepare"  # the expensive, cached stages read it: a change re-runs `pipeline.prepare`
    RESCORE = "rescore"  # only the live stages read it: a change re-scores the cached frames


class _AddsInput:
    """Marks a prepare flag whose only effect on the cached stages is an extra input when on (the chunk
    vectors of near-duplicate dedup), which `rescore` ignores when the flag is off: frames prepared with it
    on also serve a config with it off (`pipeline.check_prepared`), e.g. a tutorial comparing dedup on/off."""


_T = TypeVar("_T")
Prepare = Annotated[_T, Stage.PREPARE]
Rescore = Annotated[_T, Stage.RESCORE]
PrepareInput = Annotated[_T, Stage.PREPARE, _AddsInput]  # a Prepare[bool] of that kind


def _inf_word(v: Any) -> Any:
    """JSON has no infinity: `save_config` writes the string "inf", which reads back as the float."""
    return math.inf if isinstance(v, str) and v.strip().lower() in ("inf", "+inf", ".inf", "infinity") else v


_READ_ONLY = "a config is frozen: change it with cfg.with_updates({...}), which returns a new config"


def _read_only(self: object, *args: object, **kwargs: object) -> NoReturn:
    raise TypeError(_READ_ONLY)


class FrozenList(list):  # type: ignore[type-arg]
    """A config's list value, read-only (user trial BP: `rank_bonus` and `tuned_on` were plain lists, so an in-place
    edit of one config changed every config sharing the default, and its hash). A list still: it equals the list of
    the same items, and JSON, `_plain` and isinstance checks see a list. Mutating it raises TypeError."""

    __slots__ = ()
    append = extend = insert = remove = pop = clear = sort = reverse = _read_only
    __setitem__ = __delitem__ = __iadd__ = __imul__ = _read_only

    def __reduce__(self) -> tuple[Any, ...]:  # pickle and copy rebuild it rather than append to it
        return (type(self), (list(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(tuple(self))


class FrozenDict(dict):  # type: ignore[type-arg]
    """A config's mapping value (`retrieval.filters`, `priors.priority_map`, a `tuned_on` record), read-only for the
    reason `FrozenList` is. A dict still: it equals the dict of the same items. Mutating it raises TypeError."""

    __slots__ = ()
    clear = pop = popitem = setdefault = update = _read_only
    __setitem__ = __delitem__ = __ior__ = _read_only

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (dict(self),))

    def __hash__(self) -> int:  # type: ignore[override]
        return hash(frozenset(self.items()))


_K, _V = TypeVar("_K"), TypeVar("_V")
# What a config's container fields hold, typed read-only for a checker (Sequence, Mapping) and frozen at run time.
FrozenSeq = Annotated[Sequence[_T], AfterValidator(FrozenList)]
FrozenMap = Annotated[Mapping[_K, _V], AfterValidator(FrozenDict)]

# A list of pairs: YAML and JSON give lists, so the pair itself may be a list (its items stay strict).
_Band = Annotated[tuple[int, float], Strict(False)]
_Bucket = Annotated[
    tuple[Annotated[float, AllowInfNan(True), BeforeValidator(_inf_word)], float], Strict(False)
]


@contextlib.contextmanager
def _config_errors(model: type[BaseModel]) -> Iterator[None]:
    """A model built in Python: pydantic's ValidationError as a `ConfigError` naming the model's fields."""
    try:
        yield
    except ValidationError as e:
        raise ConfigError(_format_errors(e, model.__name__, model)) from None


class _Model(BaseModel):
    model_config = ConfigDict(
        extra="forbid", frozen=True, validate_default=True, strict=True, allow_inf_nan=False,
        ser_json_inf_nan="strings",  # a bucket's inf as "Infinity": JSON has no inf, and null did not read back (user trial AH)
    )

    if not TYPE_CHECKING:  # (a checker keeps pydantic's typed signatures)
        def __init__(self, /, **data: Any) -> None:
            """Pydantic's ValidationError as a `ConfigError` naming the field (user trial BP)."""
            with _config_errors(type(self)):
                super().__init__(**data)

        __init__.__pydantic_base_init__ = True  # pydantic's validation (a section inside a config) never calls it

        @classmethod
        def model_validate(cls, *args: Any, **kwargs: Any) -> Any:
            with _config_errors(cls):
                return super().model_validate(*args, **kwargs)

        @classmethod
        def model_validate_json(cls, *args: Any, **kwargs: Any) -> Any:
            with _config_errors(cls):
                return super().model_validate_json(*args, **kwargs)

    def __hash__(self) -> int:
        """Frozen, so hashable as a dict key or `functools.cache` argument: pydantic's own hash failed on the list
        fields ("unhashable type: 'list'"). Lists become tuples and mappings sorted items; equal configs hash equal."""
        return hash((type(self).__name__, _hashable(self.model_dump())))


def _hashable(value: Any) -> Any:
    if isinstance(value, dict):
        return tuple(sorted((k, _hashable(v)) for k, v in value.items()))
    if isinstance(value, set | frozenset):
        return frozenset(_hashable(v) for v in value)
    if isinstance(value, list | tuple):
        return tuple(_hashable(v) for v in value)
    return value


# ------------------------------------------------------------------ retrieval
class _Endpoint(_Model):
    """A section that may call a provider over HTTP: its `url` and `api_key_env` are checked the same way
    everywhere (no credentials in URLs, a variable NAME rather than a pasted key)."""

    @model_validator(mode="before")
    @classmethod
    def _no_key(cls, d: Any) -> Any:
        return _no_pasted_key(d)

    @field_validator("api_key_env", check_fields=False)
    @classmethod
    def _env(cls, v: str | None) -> str | None:
        return _check_env_name(v)

    # The path an OpenAI-style base URL ("http://host/v1", as OPENAI_BASE_URL holds it) takes for this section's
    # endpoint: user trial BJ, `--embed-url http://host/v1` was a bare 404 while HRT_RERANK_BASE_URL took that form.
    api_path: ClassVar[str] = ""

    @field_validator("url", check_fields=False)
    @classmethod
    def _url(cls, v: str | None) -> str | None:
        return endpoint_url(_check_url(v), cls.api_path)


class LexicalConfig(_Model):
    """The BM25 lists (DuckDB full-text search over the store's chunks)."""

    enabled: Prepare[bool] = Field(True, description="Retrieve a BM25 list (DuckDB full-text search) for each query variant.")
    top_k: Prepare[int] = Field(100, ge=1, le=10_000, description="Places in each BM25 list (documents or chunks, by `retrieval.level`).")
    k1: Prepare[float] = Field(1.2, ge=0.0, le=10.0, description="BM25 term-frequency saturation (higher: repeated terms count for more).")
    b: Prepare[float] = Field(0.75, ge=0.0, le=1.0, description="BM25 length normalisation (0: none, 1: full).")
    # DuckDB's `match_bm25` scores each distinct query term once; Lucene (Elasticsearch, OpenSearch), bm25s and
    # rank_bm25 sum a repeated term, each occurrence adding idf * w again. Counted after analysis, so two words
    # with one stem are one term repeated (docs/bm25.md).
    query_term_frequency: Prepare[bool] = Field(False, description="Count a query term once per occurrence, as Lucene (Elasticsearch, OpenSearch), bm25s and rank_bm25 do: `error error code` weighs `error` twice. false: each distinct term once (DuckDB's match_bm25).")
    # The index is built at ingest (`hrt ingest --stemmer/--stopwords/--no-compounds`) and belongs to the store. Unset,
    # a pipeline runs on whatever index the store has; set, `prepare` checks the store was built so and
    # stops with a clear error otherwise (a config tuned on one index says so when run on another).
    stemmer: Prepare[Stemmer | None] = Field(None, description="The stemmer the store's BM25 index must have been built with (`hrt ingest --stemmer`); unset: whatever the store has.")
    stopwords: Prepare[Stopwords | None] = Field(None, description="The stopword list the store's BM25 index must have been built with; unset: whatever the store has.")
    compounds: Prepare[bool | None] = Field(None, description="Whether the store's BM25 index must have been built with the compound forms of technical tokens (true) or without them, as plain BM25 (false: `hrt ingest --no-compounds`); unset: whatever the store has.")


class DenseConfig(_Endpoint):
    """The dense lists: cosine between the query's embedding and the store's chunk vectors."""

    api_path: ClassVar[str] = "/embeddings"

    enabled: Prepare[bool] = Field(True, description="Retrieve a dense list (cosine between query and chunk embeddings) for each query variant.")
    top_k: Prepare[int] = Field(100, ge=1, le=10_000, description="Places in each dense list.")
    # exact: every stored vector, one matrix product per block of queries. hnsw: the store's usearch index
    # (`hrt ingest --vector-index hnsw`; approximate, for ~100k chunks and up; scoped or filtered queries
    # still search exactly), with ef_search unset meaning the index's own (512 unless built otherwise).
    index: Prepare[Literal["exact", "hnsw"]] = Field("exact", description="exact: every stored vector; hnsw: the store's approximate usearch index (`hrt ingest --vector-index hnsw`).")
    ef_search: Prepare[int | None] = Field(None, ge=1, le=10_000, description="HNSW search breadth (higher: better recall, slower); unset: the index's own.")
    # Local: the store's embeddings fix the model, so unset (null) means the store's own; set, `prepare`
    # checks it against the store. http: the model name the endpoint serves (required).
    model: Prepare[str | None] = Field(None, min_length=1, description="The query embedding model: local, unset means the store's own (set, it is checked against it); http, the name the endpoint serves.")
    # How queries are embedded (`toolkit.embed.make_embedder`). Local: auto = ONNX Runtime when installed
    # (same vectors as torch within float tolerance), else torch; onnx-int8 is a different model id.
    # http: an OpenAI-compatible /v1/embeddings endpoint serving `model`.
    backend: Prepare[Literal["auto", "torch", "onnx", "onnx-int8"]] = Field("auto", description="How a local model embeds queries: auto (ONNX Runtime when installed, else torch), torch, onnx, or onnx-int8 (a model of its own).")
    provider: Prepare[Literal["local", "http"]] = Field("local", description="local (the packaged model) or http (an OpenAI-compatible /v1/embeddings endpoint).")
    url: Prepare[str | None] = Field(None, description="The http provider's /v1/embeddings URL (a base URL ending in /v1 gets /embeddings appended).")
    api_key_env: Prepare[str | None] = Field(None, description="NAME of the environment variable holding the http provider's key (never the key itself).")
    dimensions: Prepare[int | None] = Field(None, ge=1, le=65_536, description="Vector size to ask an http provider for (models that can shorten their vectors); unset: the model's own.")
    batch_size: Prepare[int] = Field(64, ge=1, le=4096, description="Texts per embedding request or batch.")
    timeout_s: Prepare[float] = Field(30.0, gt=0.0, le=600.0, description="Seconds an http embedding request may take; an embedding call of n batches ends within timeout_s x (n + retries).")
    retries: Prepare[int] = Field(2, ge=0, le=10, description="Retries of a failed http embedding request (with backoff).")

    @model_validator(mode="after")
    def _provider_needs(self) -> DenseConfig:
        if self.provider == "http" and not self.url:
            raise ValueError("provider 'http' needs retrieval.dense.url (an OpenAI-compatible /v1/embeddings endpoint)")
        if self.provider == "http" and not self.model:
            raise ValueError("provider 'http' needs retrieval.dense.model (the model name the endpoint serves)")
        return self

    def embedder_args(self) -> dict[str, Any]:
        """Keyword arguments of `toolkit.embed.make_embedder` for embedding queries. A local model is the
        store's own (None); an http provider names its model."""
        args = self.model_dump(include={"backend", "provider", "url", "api_key_env", "dimensions", "batch_size",
                                        "timeout_s", "retries"})
        return args | {"model": self.model if self.provider == "http" else None}


_FILTER_KEY = re.compile(r"\w+(\.\w+)*")
FILTER_KEY_RULE = "a metadata field name (letters, digits and '_'; a dot between names for a nested field)"
JSON_NUMBER = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?(?:[eE][+-]?[0-9]+)?")  # a filter value compared as a number too


def filter_values_equal(a: str, b: str) -> bool:
    """Whether two filter values select the same documents (`Store._filter_terms`' equality: NFC text, or equal
    numbers): `user: 7` and `--where user=7.0` are one filter, not a clash."""
    if unicodedata.normalize("NFC", a) == unicodedata.normalize("NFC", b):
        return True
    return bool(JSON_NUMBER.fullmatch(a) and JSON_NUMBER.fullmatch(b)) and Decimal(a) == Decimal(b)


def filter_value(key: str, value: Any) -> str:
    """A filter's value as the store compares it: the text metadata holds it as (YAML and Python give `draft: false`
    and `priority: 0` as a bool and a number; JSON metadata holds `false` and `0`). One rule for the config and for
    `Store.ids_where`, which compared `str(False)`, "False", and so found nothing (user trial BP). ValueError for
    what is not one value."""
    if isinstance(value, dict | list | tuple | set) or value is None:
        raise ValueError(f"filters[{key!r}]: one value to equal (text, number or true/false), got {value!r}")
    return json.dumps(value) if isinstance(value, bool) else str(value)


def filter_key_ok(key: str) -> bool:
    """A metadata field a filter may name: it goes into a JSON path in SQL (`$.key`, a dot for a nested field), so
    only words joined by single dots (user trial BK: `.user`, `user.` and `a..b` passed and crashed the search)."""
    return _FILTER_KEY.fullmatch(key) is not None


class RetrievalConfig(_Model):
    """Which lists are retrieved for each query variant, and at what level."""

    # What one place in a BM25 or dense list is: a document (scored by its best chunk, top_k documents) or a
    # chunk (top_k chunks, several of one document possible). Either way fusion ranks documents, each at its
    # best chunk's place, and a result is one document shown by that chunk (user trial S expected several
    # chunks of one document as results; qrels judge documents, so runs rank documents).
    level: Prepare[Literal["document", "chunk"]] = Field("document", description="What one place of a BM25 or dense list is: a document (scored by its best chunk) or a chunk.")
    lexical: LexicalConfig = LexicalConfig()
    dense: DenseConfig = DenseConfig()
    scope_filter: Prepare[bool] = Field(True, description="A query with a scope sees only documents of that scope.")
    # Equality on a document's metadata, applied by both lists before ranking (an agent's memories of one user,
    # one session, one kind), so a filtered-out document takes no place of the top_k. `hrt search --where`.
    filters: Prepare[FrozenMap[str, str]] = Field({}, description="Only documents whose metadata field equals the value (all must hold), e.g. {user: ana}; `hrt search --where user=ana`.")

    @field_validator("filters", mode="before")
    @classmethod
    def _filters(cls, v: Any) -> Any:
        if not isinstance(v, dict):
            return v
        for k in v:
            if not filter_key_ok(str(k)):
                raise ValueError(f"filters key {k!r}: {FILTER_KEY_RULE}")
        return {str(k): filter_value(str(k), x) for k, x in v.items()}


# ------------------------------------------------------------------ routing
class RoutingConfig(_Model):
    """Per-query routes from the query's words: conversational and technical queries."""

    # Routes decide which lists are retrieved and expanded (prepare); the boost only weighs the lexical
    # lists of technical queries in fusion (rescore).
    enabled: Prepare[bool] = Field(False, description="Route each query by its words: conversational queries may skip BM25 and expansion, technical ones get the lexical boost.")
    conversational_stopword_ratio: Prepare[float] = Field(0.5, ge=0.0, le=1.0, description="Share of stopwords from which a query (with no technical token) counts as conversational.")
    conversational_min_tokens: Prepare[int] = Field(4, ge=0, le=1000, description="Fewest words a conversational query has.")
    conversational_skip_lexical: Prepare[bool] = Field(True, description="Conversational queries get no BM25 list (needs dense retrieval on).")
    conversational_skip_expansion: Prepare[bool] = Field(True, description="Conversational queries are not expanded.")
    technical_lexical_boost: Rescore[float] = Field(1.0, gt=0.0, le=100.0, description="Weight multiplying the BM25 lists of queries with a technical token (camelCase, snake_case, error codes, versions, paths) in fusion.")


# ------------------------------------------------------------------ expansion
class ExpansionConfig(_Endpoint):
    """Query expansion: rewrites and hypothetical answers searched beside the query as asked."""

    api_path: ClassVar[str] = "/chat/completions"

    provider: Prepare[Literal["none", "file", "http"]] = Field("none", description="Query expansion: none, file (precomputed JSONL) or http (an OpenAI-compatible chat endpoint).")
    path: Prepare[str | None] = Field(None, description="The file provider's JSONL of expansions.")
    url: Prepare[str | None] = Field(None, description="The http provider's chat completions URL (a base URL ending in /v1 gets /chat/completions appended).")
    model: Prepare[str | None] = Field(None, description="The model the http provider serves.")
    api_key_env: Prepare[str | None] = Field(None, description="NAME of the environment variable holding the expansion provider's key.")
    timeout_s: Prepare[float] = Field(20.0, gt=0.0, le=600.0, description="Wall-clock deadline of one expansion call (connect and all reads).")
    budget_s: Prepare[float] = Field(300.0, gt=0.0, le=86_400.0, description="Seconds all expansion calls of one run may take; then expansion is switched off for the rest.")
    max_lex: Prepare[int] = Field(2, ge=0, le=10, description="Keyword rewrites per query (searched by BM25).")
    max_vec: Prepare[int] = Field(2, ge=0, le=10, description="Semantic rewrites per query (searched by dense retrieval).")
    max_hyde: Prepare[int] = Field(1, ge=0, le=10, description="Hypothetical answers per query (HyDE; searched by dense retrieval).")
    strong_signal_skip: Prepare[bool] = Field(True, description="Skip expansion when BM25 already has a clear winner (see strong_signal_min and _gap).")
    strong_signal_min: Prepare[float] = Field(0.85, ge=0.0, le=1.0, description="Normalised BM25 top score (|x|/(1+|x|)) from which the signal counts as strong.")
    strong_signal_gap: Prepare[float] = Field(0.15, ge=0.0, le=1.0, description="Gap between BM25's first and second normalised scores that a strong signal needs too.")

    @model_validator(mode="after")
    def _provider_needs(self) -> ExpansionConfig:
        if self.provider == "file" and not self.path:
            raise ValueError("provider 'file' needs expansion.path (a JSONL of precomputed expansions)")
        if self.provider == "http" and not self.url:
            raise ValueError(
                "provider 'http' needs expansion.url (an OpenAI-compatible chat completions endpoint)"
            )
        return self


# ------------------------------------------------------------------ fusion
class FusionConfig(_Model):
    """How the BM25 and dense lists of every variant become one ranking."""

    # learned: a LambdaMART model (`hrt train-fusion`) scores the cached features; weights, k, bonus unused.
    method: Rescore[Literal["rrf", "convex", "learned"]] = Field("rrf", description="How the lists are fused: rrf (reciprocal ranks), convex (alpha-weighted normalised scores) or learned (a LambdaMART model).")
    model: Rescore[str | None] = Field(None, description="The learned fusion model file (`hrt train-fusion`); unset: the shipped model.")
    # rrf/convex: weight BM25 vs dense per query by the model's learned router (2p and 2(1 - p)).
    router: Rescore[bool] = Field(False, description="Weight BM25 against dense per query by the learned model's router (rrf and convex).")
    rrf_k: Rescore[int] = Field(60, gt=0, le=10_000, description="RRF's k: each list gives 1/(k + rank); smaller k favours the top places.")
    lexical_weight: Rescore[float] = Field(1.0, ge=0.0, le=100.0, description="Weight of the BM25 lists in fusion.")
    dense_weight: Rescore[float] = Field(1.0, ge=0.0, le=100.0, description="Weight of the dense lists in fusion.")
    original_weight: Rescore[float] = Field(2.0, ge=0.0, le=100.0, description="Weight of the lists of the query as asked (QMD counts it twice against its expansions).")
    expansion_weight: Rescore[float] = Field(1.0, ge=0.0, le=100.0, description="Weight of the lists of each expansion.")
    # (last rank of the band, bonus): [(1, .05), (3, .02)] = rank 1 gets .05, ranks 2-3 get .02 (RRF only).
    rank_bonus: Rescore[FrozenSeq[_Band]] = Field([(1, 0.05), (3, 0.02)], description="RRF bonus by a document's best rank in any list: (last rank of the band, bonus), e.g. [(1, .05), (3, .02)].")
    alpha: Rescore[float] = Field(0.5, ge=0.0, le=1.0, description="Convex fusion: the dense share (1 - alpha for BM25).")
    normalization: Rescore[Literal["minmax", "zscore", "rank", "fixed"]] = Field("minmax", description="Convex fusion: how each list's scores are put on one scale (minmax, zscore, rank, or fixed: |x|/(1+|x|) and (cos+1)/2).")

    @field_validator("rank_bonus")
    @classmethod
    def _bands(cls, v: Sequence[tuple[int, float]]) -> Sequence[tuple[int, float]]:
        last = 0
        for i, (r, bonus) in enumerate(v):
            if r <= last:
                raise ValueError(
                    f"band {i}: ranks must be >= 1 and strictly increasing (got {r} after {last})"
                )
            if not 0.0 <= bonus <= 1.0:
                raise ValueError(f"band {i}: bonus must be in [0, 1] (got {bonus})")
            last = r
        return v


# ------------------------------------------------------------------ rerank
class RerankConfig(_Endpoint):
    """The reranker, and how its scores are blended with the fused order (guarded: only the top_n, by position)."""

    api_path: ClassVar[str] = "/rerank"

    # Scores are prepared whenever a provider is set, for every document a fused top_n could hold
    # (`pipeline.rerank_pool`); how (and whether) they are blended is decided live.
    provider: Prepare[Literal["none", "cross-encoder", "http", "file", "python"]] = Field("none", description="The reranker: none, cross-encoder (a local model), http (a /v1/rerank endpoint), file (precomputed scores) or python (an object of yours, passed as reranker= to prepare, run_pipeline, tune, Session or Lab).")
    model: Prepare[str | None] = Field(None, description="The cross-encoder's path or id, or the model an http endpoint serves.")
    url: Prepare[str | None] = Field(None, description="The http reranker's /v1/rerank URL (a base URL ending in /v1 gets /rerank appended).")
    api_key_env: Prepare[str | None] = Field(None, description="NAME of the environment variable holding the reranker's key.")
    timeout_s: Prepare[float] = Field(10.0, gt=0.0, le=600.0, description="Wall-clock deadline of one reranker request (connect and all reads); a query's requests, retries and pauses together end within timeout_s x (batches + retries).")
    budget_s: Prepare[float] = Field(300.0, gt=0.0, le=86_400.0, description="Seconds all reranker calls of one run may take; then reranking is switched off for the rest.")
    retries: Prepare[int] = Field(2, ge=0, le=10, description="Retries of a failed reranker call (with backoff).")
    # http: documents per request (TEI refuses more than its --max-client-batch-size, 32 by default, with a 413),
    # and characters of the query and of each passage sent (a cross-encoder reads ~512 tokens; a provider may
    # refuse a longer input, and a 216 KB title cost every query holding it its reranking: user trial AN).
    batch_size: Prepare[int] = Field(32, ge=1, le=1000, description="Documents per http rerank request.")
    max_chars: Prepare[int] = Field(4000, ge=100, le=1_000_000, description="Characters of the query and of each document sent to an http reranker (longer ones are cut, with a warning).")
    path: Prepare[str | None] = Field(None, description="The file provider's precomputed scores.")
    top_n: Prepare[int] = Field(40, ge=1, le=1000, description="How many fused places are reranked.")
    blend: Rescore[Literal["replace", "position", "none"]] = Field("position", description="How reranker scores enter: position (mixed with the fused order by bucket weight), replace (the reranker's order), or none.")
    # (last fused rank of the bucket, retrieval weight); YAML writes inf as .inf.
    buckets: Rescore[FrozenSeq[_Bucket]] = Field([(3.0, 0.75), (10.0, 0.60), (math.inf, 0.40)], description="Position blend: (last fused rank of the bucket, retrieval weight), the last ending at .inf; e.g. ranks 1-3 keep 75% retrieval.")
    # none: the provider's raw score (agent-memory replaces the fused score with the relevance_score as is).
    score_normalization: Rescore[Literal["minmax", "sigmoid", "none"]] = Field("minmax", description="How reranker scores are scaled before blending: minmax per query, sigmoid, or none (raw).")

    @field_validator("buckets")
    @classmethod
    def _buckets(cls, v: Sequence[tuple[float, float]]) -> Sequence[tuple[float, float]]:
        if not v:
            raise ValueError("at least one bucket is needed; the last must end at .inf")
        last = 0.0
        for i, (bound, w) in enumerate(v):
            if math.isnan(bound) or bound < 1 or bound <= last:
                raise ValueError(
                    f"bucket {i}: rank bounds must be >= 1 and strictly increasing (got {bound} after {last})"
                )
            if not 0.0 <= w <= 1.0:
                raise ValueError(f"bucket {i}: retrieval weight must be in [0, 1] (got {w})")
            last = bound
        if not math.isinf(v[-1][0]):
            raise ValueError(f"the last bucket must end at .inf (infinity), got {v[-1][0]}")
        return v

    @model_validator(mode="after")
    def _provider_needs(self) -> RerankConfig:
        need = {
            "cross-encoder": ("model", "a CrossEncoder path or id"),
            "http": ("url", "a /v1/rerank endpoint"),
            "file": ("path", "a file of precomputed scores"),
        }
        if self.provider in need:
            fld, what = need[self.provider]
            if not getattr(self, fld):
                raise ValueError(f"provider '{self.provider}' needs rerank.{fld} ({what})")
        return self


# ------------------------------------------------------------------ adapt
class AdaptConfig(_Model):
    """A per-query dense weight from a label-free signal: how clearly the dense list's top stands out."""

    # Per-query dense list weight = clip(dense top-1 minus top-10 cosine / gap_scale) (adapt.py).
    # All live: the gaps are read from the cached dense lists.
    dense_gap: Rescore[bool] = Field(False, description="Weight the dense list per query by how clearly its top result stands out (first minus tenth cosine).")
    gap_scale: Rescore[float] = Field(0.16, gt=0.0, le=2.0, description="The gap that gives the dense list weight 1 (weight = gap / gap_scale, clipped).")
    min_weight: Rescore[float] = Field(0.25, ge=0.0, le=100.0, description="Lowest per-query dense weight.")
    max_weight: Rescore[float] = Field(4.0, ge=0.0, le=100.0, description="Highest per-query dense weight.")

    @model_validator(mode="after")
    def _range(self) -> AdaptConfig:
        # clip(x, lo, hi) with lo > hi is lo for every x: the gap would silently stop mattering.
        if self.min_weight > self.max_weight:
            raise ValueError(
                f"adapt.min_weight ({self.min_weight:g}) is above adapt.max_weight ({self.max_weight:g}): "
                "every query would get min_weight; set min_weight <= max_weight"
            )
        return self


# ------------------------------------------------------------------ guard
class GuardConfig(_Model):
    """The exact-token guard: BM25's verbatim hit of a query identifier stays near the top."""

    # BM25's first document, when it holds a query identifier verbatim, ends in the top max_rank; else, unless a
    # deeper hit among BM25's first `depth` is there already, the best-ranked one is moved up (guard.py). Live:
    # prepare finds every query's exact-token hits whatever these say.
    exact_token: Rescore[bool] = Field(False, description="Keep BM25's exact hit of a query identifier (CVE id, error code, version, path, camelCase or snake_case name) near the top.")
    max_rank: Rescore[int] = Field(3, ge=1, le=100, description="The place the guarded exact hit ends at or above "
                                   "(a query that is only the identifier: first).")
    depth: Rescore[int] = Field(10, ge=1, le=100, description="How deep in BM25's list an exact hit is looked for.")
    # Measured on ten collections' dev splits (guard._holders): first helps when no other candidate holds the identifier.
    sole_first: Rescore[bool] = Field(False, description="A guarded hit that is the only candidate holding the identifier "
                                      "goes first, not only into the top max_rank.")
    # Not an identifier rule: any query. Measured on ten collections' dev splits (guard.coverage_first).
    coverage_first: Rescore[bool] = Field(False, description="BM25's first document goes first when it holds more of the "
                                          "query's words than any other candidate (not while a reranker blends or priors re-weight).")
    # The mirror of the exact-token guard, for a match by meaning (guard.keep_dense; user trial CA).
    dense_max_rank: Rescore[int] = Field(0, ge=0, le=100, description="Dense search's first document ends at or above this "
                                         "place (0: off; not while a reranker blends or priors re-weight).")


# ------------------------------------------------------------------ dedup, threshold, output
class DedupConfig(_Model):
    """Duplicates removed from the results: byte-identical copies, one source's many results, near-duplicates."""

    # Identical documents (same documents.text_hash: byte for byte after NFC normalisation) collapse into the best-ranked copy (dedup.py).
    identical_enabled: Rescore[bool] = Field(False, description="Collapse byte-identical documents into one result that names the others.")
    source_enabled: Rescore[bool] = Field(False, description="Keep at most max_per_source results of one source.")
    max_per_source: Rescore[int] = Field(1, ge=1, le=1000, description="Results one source may keep (source dedup).")
    fill: Rescore[Literal["sources_then_chunks", "sources_only"]] = Field("sources_then_chunks", description="After source dedup: fill the freed places with further results of the same sources (sources_then_chunks) or not (sources_only).")
    # Switching it on makes `prepare` fetch the candidates' vectors; the threshold is applied live.
    near_duplicate_enabled: PrepareInput[bool] = Field(False, description="Drop results whose best chunk is a near-duplicate (cosine >= near_duplicate_threshold) of a better-ranked one.")
    near_duplicate_threshold: Rescore[float] = Field(0.90, gt=0.0, le=1.0, description="Cosine from which two results count as near-duplicates.")


class ThresholdConfig(_Model):
    """Results dropped by score, and when a query's scores are flagged as barely differing."""

    # 0 keeps everything: zscore fusion and the tail below a reranked block can score below zero.
    min_score: Rescore[float] = Field(0.0, ge=0.0, description="Final score below which results are dropped (0 keeps everything).")
    # None: the spread "barely differ" means on the config's own score scale, read through `low_spread(cfg)`.
    low_spread: Rescore[float | None] = Field(None, ge=0.0, description="Spread of the top scores below which a query is flagged 'scores barely differ'; unset: a value fitting the config's score scale.")
    # Calibrated P(relevant) (`score_prob`, fusion.method learned only); 0 keeps everything.
    min_prob: Rescore[float] = Field(0.0, ge=0.0, le=1.0, description="Calibrated probability of relevance below which results are dropped (fusion.method learned only; 0 keeps everything).")
    # keep: the whole list comes back flagged low_confidence, so a caller always has something to show; empty: an
    # agent's "I don't know" (user trial BX: min_prob 0.5 never emptied a query).
    none_pass: Rescore[Literal["keep", "empty"]] = Field("keep", description="When no result of a query reaches min_score "
                                                          "or min_prob: keep its list, every result flagged low_confidence "
                                                          "(keep), or return no result (empty).")


OUTPUT_N_MAX = 1000  # results a query keeps at most (`output.n`; `hrt run --depth` is capped by it)


class OutputConfig(_Model):
    """How many results are shown, and how."""

    format: Rescore[Literal["compact", "detailed", "json"]] = Field("compact", description="How `hrt search` shows results: compact (for an agent's context), detailed, or json.")
    n: Rescore[int] = Field(5, ge=1, le=OUTPUT_N_MAX, description="Results shown per query.")
    max_chars: Rescore[int] = Field(2000, ge=200, le=1_000_000, description="Characters the compact output may take in all (excerpts are shortened to fit).")
    excerpt_chars: Rescore[int] = Field(240, ge=20, le=100_000, description="Characters of each result's excerpt, at most.")


# ------------------------------------------------------------------ priors
_FIELD_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_.-]*$")


def _check_field(v: str | None) -> str | None:
    if v is not None and not _FIELD_NAME.match(v):
        raise ValueError(f"{v!r} is not a metadata field name (letters, digits, '_', '.', '-')")
    return v


class PriorsConfig(_Model):
    """Document priors applied after blending (toolkit/priors.py). A prior is off while its field is None;
    a document without the field (or with a value the mapping lacks) gets the neutral factor 1. All live: prepare
    reads every typed field of the candidates, whichever the priors use."""

    combine: Rescore[Literal["multiply", "add"]] = Field("multiply", description="How prior factors apply to a score: multiply, or add (score + add_weight x sum(factor - 1)).")
    # Only the blended top_n are re-weighted; the rest keep their order below them (agent-memory: limit * 2).
    top_n: Rescore[int | None] = Field(None, ge=1, le=10_000, description="Only the first top_n blended results are re-weighted by priors; unset: all.")
    add_weight: Rescore[float] = Field(1.0, ge=0.0, le=100.0, description="Weight of the factors when combine is add.")
    recency_field: Rescore[str | None] = Field(None, description="A date field of the documents (e.g. date, updated_at) whose age decays the score; unset: no recency prior.")
    recency_half_life_days: Rescore[float] = Field(30.0, gt=0.0, le=1e6, description="Age in days at which the recency factor falls halfway to its floor.")
    recency_floor: Rescore[float] = Field(0.0, ge=0.0, le=1.0, description="Lowest recency factor: factor = floor + (1 - floor) x 0.5 ** (age / half_life).")
    recency_query_field: Rescore[str] = Field("date", description="The query's date field (its reference time); a query without one uses as_of, else the clock.")
    # A document dated after the reference: decay by how far ahead it is (flagged dated_after_reference),
    # exclude it (it did not exist yet: "as of" questions), or fresh (factor 1: dates ahead on purpose, deadlines).
    recency_future: Rescore[Literal["decay", "exclude", "fresh"]] = Field("decay", description="A document dated after the reference: decay by how far ahead it is, exclude it, or fresh (factor 1).")
    # A document without a date: as new as can be (factor 1, "fresh") or as old as the floor allows ("floor").
    recency_missing: Rescore[Literal["fresh", "floor"]] = Field("fresh", description="A document without a date: fresh (factor 1) or floor (as old as the floor allows).")
    priority_field: Rescore[str | None] = Field(None, description="A metadata field whose value (e.g. 0-3 for P0-P3) picks a multiplier from priority_map; unset: no priority prior.")
    priority_map: Rescore[FrozenMap[str, float]] = Field({"0": 4.0, "1": 3.0, "2": 2.0, "3": 1.0}, description="Multiplier per priority value (the default: agent-memory's P0..P3).")
    use_field: Rescore[str | None] = Field(None, description="A numeric field (e.g. an access count): factor = 1 + use_weight x ln(1 + value); unset: no use prior.")
    use_weight: Rescore[float] = Field(0.25, ge=0.0, le=100.0, description="Weight of the use prior.")
    # The reference time of queries without a date (ISO date or date-time, UTC); None = the clock, what live
    # search wants. For evaluation that must not drift (`hrt run --as-of` sets it for one run).
    as_of: Rescore[str | None] = Field(None, description="Reference time (ISO date or date-time, UTC) of queries without a date; unset: the clock.")

    @field_validator("as_of", mode="before")
    @classmethod
    def _as_of_text(cls, v: Any) -> Any:
        # YAML reads an unquoted `as_of: 2026-11-26` as a date (and a date-time as a datetime): keep it as ISO text.
        return v.isoformat() if isinstance(v, date | datetime) else v

    @field_validator("as_of")
    @classmethod
    def _as_of(cls, v: str | None) -> str | None:
        if v is not None:
            try:
                datetime.fromisoformat(v)
            except (TypeError, ValueError):
                raise ValueError(f"as_of {v!r}: expected an ISO date or date-time, e.g. 2026-11-26 or 2026-11-26T09:30") from None
        return v

    @field_validator("recency_field", "recency_query_field", "priority_field", "use_field")
    @classmethod
    def _names(cls, v: str | None) -> str | None:
        return _check_field(v)

    @field_validator("priority_map")
    @classmethod
    def _map(cls, v: Mapping[str, float]) -> Mapping[str, float]:
        for k, f in v.items():
            if not (math.isfinite(f) and f >= 0):
                raise ValueError(f"priority_map[{k!r}]: a multiplier must be a finite number >= 0 (got {f})")
        return v


# Fields that only label a config (what it is called, where it was tuned): no stage reads them, and a diff
# of two configs' settings leaves them out.
LABELS = ("schema_version", "name", "description", "tuned_on")


def low_spread(cfg: PipelineConfig) -> float:
    """`threshold.low_spread`, or for a config that does not set it the spread that means "barely differ" on the
    scale its final scores come on (user trial S: a custom RRF config inherited 0.10, a spread RRF never
    reaches, and every query said "scores barely differ"). Read where it is used, so a lab slider, `extends` or
    an environment reranker changing the fusion changes it too:
    - plain RRF: the gap between the first and the fifth place of the heaviest original list,
      w x (1/(k+1) - 1/(k+5)) (0.001 at k 60 and weight 1: the `default` preset's measured choice);
    - RRF with a rank bonus (its top places sit 0.02-0.05 apart), a reranker blend, convex fusion (scores in
      [0, 1]): 0.01, as `qmd` (without a reranker), `bm25-only` and `vector-only` set it (about one LoCoMo query
      in ten flagged; qmd's file suggests ~0.1 once a reranker blends, a value not measured here);
    - the learned model's scores: 0.10, as measured for `learned`."""
    if cfg.threshold.low_spread is not None:
        return cfg.threshold.low_spread
    f = cfg.fusion
    if f.method == "learned":
        return 0.10
    if f.method == "convex" or cfg.rerank.provider != "none" or f.rank_bonus:
        return 0.01
    r = cfg.retrieval
    w = f.original_weight * max(f.lexical_weight if r.lexical.enabled else 0.0, f.dense_weight if r.dense.enabled else 0.0)
    return round((w or 1.0) * (1.0 / (f.rrf_k + 1) - 1.0 / (f.rrf_k + 5)), 6)


class PipelineConfig(_Model):
    """Every setting of one retrieval pipeline, validated and frozen (see `toolkit.config`).

    Load one with `load_config` (a preset name, a YAML/JSON file or a mapping), change it with
    `with_updates`, compare two with `diff`; `flat` lists every field by its dotted path.
    """

    # Labels: no stage reads them, so they sit on the live side (changing them recomputes nothing).
    schema_version: Rescore[int] = Field(SCHEMA_VERSION, description="Version of the config format this file was written for (this toolkit reads 1).")
    name: Rescore[str] = Field("custom", description="What the config is called: run tags, report columns and lab titles use it.")
    description: Rescore[str] = Field("", description="A sentence on what the config is for (free text; `hrt tune` writes its verdict here).")
    # Where `hrt tune` chose these settings, one record per tuning: {"dataset", "split", "query_keys"}
    # (`provenance.query_keys`). A run or report on those queries says its numbers are in-sample
    # (`cli._in_sample_note`), whatever the dataset folder is called.
    tuned_on: Rescore[FrozenSeq[FrozenMap[str, Any]] | None] = Field(None, description="Where `hrt tune` chose these settings ({dataset, split, query_keys} per tuning): runs on those queries are flagged in-sample.")
    retrieval: RetrievalConfig = RetrievalConfig()
    routing: RoutingConfig = RoutingConfig()
    expansion: ExpansionConfig = ExpansionConfig()
    fusion: FusionConfig = FusionConfig()
    rerank: RerankConfig = RerankConfig()
    adapt: AdaptConfig = AdaptConfig()
    guard: GuardConfig = GuardConfig()
    dedup: DedupConfig = DedupConfig()
    threshold: ThresholdConfig = ThresholdConfig()
    output: OutputConfig = OutputConfig()
    priors: PriorsConfig = PriorsConfig()

    @field_validator("schema_version")
    @classmethod
    def _version(cls, v: int) -> int:
        if v != SCHEMA_VERSION:
            raise ValueError(f"unsupported schema_version {v}: this toolkit reads version {SCHEMA_VERSION}")
        return v

    @field_validator("tuned_on")
    @classmethod
    def _tuned_on(cls, v: Sequence[Mapping[str, Any]] | None) -> Sequence[Mapping[str, Any]] | None:
        if v is None:
            return v
        out = []
        for i, r in enumerate(v):
            keys = r.get("query_keys")
            if not (isinstance(r.get("dataset"), str) and isinstance(r.get("split"), str) and isinstance(keys, list | tuple)
                    and all(isinstance(k, str) for k in keys)):
                raise ValueError(f"tuned_on[{i}]: expected {{dataset: name, split: name, query_keys: [hashes]}} (written by hrt tune)")
            out.append(FrozenDict(dataset=r["dataset"], split=r["split"], query_keys=FrozenList(keys)))
        return FrozenList(out)

    @model_validator(mode="after")
    def _coherent(self) -> PipelineConfig:
        r = self.retrieval
        if not (r.lexical.enabled or r.dense.enabled):
            raise ValueError("retrieval: enable at least one of lexical and dense")
        f = self.fusion
        if f.method != "learned":  # (the router multiplies these weights: zero stays zero)
            # What each list's scores are multiplied by in fusion (fusion.py; convex: 1 - alpha for BM25, alpha for
            # dense). All zero fuses nothing: RRF returned no result, convex ranked by dense with every score 0.
            convex = f.method == "convex"
            lex = f.lexical_weight * ((1.0 - f.alpha) if convex else 1.0) if r.lexical.enabled else 0.0
            den = f.dense_weight * (f.alpha if convex else 1.0) if r.dense.enabled else 0.0
            variants = f.original_weight + (f.expansion_weight if self.expansion.provider != "none" else 0.0)
            if (lex == 0.0 and den == 0.0) or variants == 0.0:
                raise ValueError(
                    f"fusion: every enabled list has weight 0 (lexical_weight {f.lexical_weight}, dense_weight "
                    f"{f.dense_weight}" + (f", alpha {f.alpha}" if convex else "") + f", original_weight {f.original_weight}"
                    + (f", expansion_weight {f.expansion_weight}" if self.expansion.provider != "none" else "")
                    + "): nothing would be fused"
                )
        if self.threshold.min_prob > 0 and self.fusion.method != "learned":
            raise ValueError("threshold.min_prob needs calibrated scores: set fusion.method to learned (or min_prob to 0)")
        if self.routing.enabled and self.routing.conversational_skip_lexical and not r.dense.enabled:
            raise ValueError(
                "routing.conversational_skip_lexical with dense retrieval disabled would leave conversational queries with no results"
            )
        return self

    # -------------------------------------------------------------- helpers for tuners and widgets
    def to_dict(self) -> dict[str, Any]:
        """Plain data (lists, not tuples; inf stays a float) that YAML and `config_from_dict` round-trip."""
        return _plain(self.model_dump())

    def get(self, path: str) -> Any:
        """Value at a dotted path, e.g. `cfg.get("fusion.rrf_k")`."""
        if path in FIELD_STAGES:  # that field dumped alone: a lab update read every control's value, each a whole dump
            parts = path.split(".")
            include: Any = True
            for part in reversed(parts):
                include = {part: include}
            node = _plain(self.model_dump(include=include))
            for part in parts:
                node = node[part]
            return node
        node, key = _slot(self.to_dict(), path)
        return node[key]

    def with_updates(self, updates: Mapping[str, Any]) -> PipelineConfig:
        """A new validated config with dotted-path updates applied: `{"fusion.rrf_k": 30, "rerank.top_n": 20}`.

        A dict given for a section merges into it (`{"fusion": {"rrf_k": 30}}` is `{"fusion.rrf_k": 30}`, so the
        section's other fields keep their values), while a dict-valued field such as `priors.priority_map` is
        replaced as a whole. Paths are checked against the schema, with a suggestion for a typo."""
        d = self.to_dict()
        for path, value in _leaf_updates(updates):
            node, key = _slot(d, path)
            node[key] = _plain(_unwrap(value))
        return _validate(d, origin="<updates>")  # no inert-settings warning: a slider may sit on a switched-off field

    def flat(self) -> dict[str, Any]:
        """Every field as `{dotted.path: value}` (for run logs, tuner records and diffs). The keys are the
        schema's fields (`FIELD_STAGES`): a dict- or list-valued field is one value, not walked into."""
        d = self.to_dict()
        out: dict[str, Any] = {}
        for path in FIELD_STAGES:
            node, key = _slot(d, path)
            out[path] = node[key]
        return out

    def diff(self, other: PipelineConfig) -> dict[str, tuple[Any, Any]]:
        """Fields that differ: `{dotted.path: (self value, other value)}` (None where one side lacks the path)."""
        a, b = self.flat(), other.flat()
        return {k: (a.get(k), b.get(k)) for k in dict.fromkeys([*a, *b]) if a.get(k) != b.get(k)}




def _field_guide(model: type[BaseModel]) -> None:
    """`model`'s docstring followed by its fields and what each does, so that `help(cfg.fusion)` explains every knob
    (user trial AV: pydantic's own base-class text stood there). The words are written once, as each field's
    `Field(description=...)`, which the JSON schema carries too; a section field is described by its class."""
    rows = []
    for name, f in model.model_fields.items():
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):  # a section: its class's first sentence
            words = (f.annotation.__doc__ or "").strip().split("\n")[0].split(". ")[0]
        else:
            words = f.description or ""
        if words:
            rows.append(f"    {name}: {words}")
    if rows:
        model.__doc__ = f"{(model.__doc__ or '').rstrip()}\n\n    Fields:\n" + "\n".join(rows) + "\n"


for _section in (LexicalConfig, DenseConfig, RetrievalConfig, RoutingConfig, ExpansionConfig, FusionConfig, RerankConfig,
                 AdaptConfig, GuardConfig, DedupConfig, ThresholdConfig, OutputConfig, PriorsConfig, PipelineConfig):
    _field_guide(_section)

# ------------------------------------------------------------------ the stage boundary, derived
def _leaves(model: type[BaseModel], prefix: str = "") -> Iterator[tuple[str, Any]]:
    """(dotted path, field info) of every leaf field; sections (nested models) are walked, not declared."""
    for name, f in model.model_fields.items():
        if isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel):
            yield from _leaves(f.annotation, prefix + name + ".")
        else:
            yield prefix + name, f


def _declared(model: type[BaseModel]) -> dict[str, Stage]:
    """{dotted path: stage} of every leaf field."""
    out: dict[str, Stage] = {}
    for path, f in _leaves(model):
        stages = {m for m in f.metadata if isinstance(m, Stage)}
        if len(stages) != 1:
            raise TypeError(f"config field {path}: declare its stage once, as Prepare[...] or Rescore[...]")
        out[path] = stages.pop()
    return out


FIELD_STAGES: dict[str, Stage] = _declared(PipelineConfig)
# What each field does, by dotted path (its `Field(description=...)`): the lab's tooltips and `hrt` help read it.
FIELD_HELP: dict[str, str] = {path: f.description or "" for path, f in _leaves(PipelineConfig)}
# `PrepareInput` fields: frames prepared with the flag on serve a config with it off.
INPUT_FLAGS: frozenset[str] = frozenset(path for path, f in _leaves(PipelineConfig) if _AddsInput in f.metadata)
# Dotted paths of the sections (nested models): "retrieval", "retrieval.dense", "fusion", ...
_SECTIONS: frozenset[str] = frozenset(p.rsplit(".", i)[0] for p in FIELD_STAGES for i in range(1, p.count(".") + 1))


def fields(stage: Stage) -> tuple[str, ...]:
    """Dotted paths of the fields on one side of the boundary, e.g. `fields(Stage.RESCORE)` (the tunable ones)."""
    return tuple(p for p, s in FIELD_STAGES.items() if s is stage)


def stage_of(path: str) -> Stage:
    """The declared stage of a dotted field path; an unknown path is an error with a suggestion."""
    if path not in FIELD_STAGES:
        close = difflib.get_close_matches(path, list(FIELD_STAGES), n=1)
        raise InputError(f"unknown config field {path}" + (f" (did you mean {close[0]}?)" if close else ""))
    return FIELD_STAGES[path]


def prepare_settings(cfg: PipelineConfig) -> dict[str, Any]:
    """{path: value} of the prepare fields: what the cached stages depend on, and all they depend on.

    The one rule beyond the declaration: a section whose `provider` is "none" contributes only that, since
    `prepare` reads nothing else of it (editing an unused reranker's top_n must not invalidate the cache).
    """
    flat = cfg.flat()
    off = {p.rsplit(".", 1)[0] for p in FIELD_STAGES if p.endswith(".provider") and flat[p] == "none"}
    return {
        p: flat[p]
        for p, s in FIELD_STAGES.items()
        if s is Stage.PREPARE and (p.rsplit(".", 1)[0] not in off or p.endswith(".provider"))
    }


# ------------------------------------------------------------------ settings the rest of a config switches off
class ConfigWarning(UserWarning):
    """A config loads, but something in it deserves a word (`hrt` prints these as `warning: ...`)."""


class InertSettingWarning(ConfigWarning):
    """A config file or mapping sets fields that the rest of it switches off (`inert_settings`)."""


class _Off(NamedTuple):
    """While `off(*values of the switches)` holds, `fields` of the first switch's section do nothing: "*" is
    every field of that section but the switches and `but`, "recency_*" the ones named so; a dotted name
    ("guard.coverage_first") is that field of any section."""

    switches: tuple[str, ...]
    off: Callable[..., bool]
    fields: tuple[str, ...] = ("*",)
    but: tuple[str, ...] = ()
    note: str = ""


def _is(value: Any) -> Callable[..., bool]:
    """Every switch holds `value` (strictly: False is not 0)."""
    return lambda *vs: all(type(v) is type(value) and v == value for v in vs)


def _is_not(value: Any) -> Callable[..., bool]:
    return lambda v: v != value


# A setting the rest of the config switches off does nothing, and a file that sets it (alpha tuned under
# rrf, buckets with no reranker) would otherwise load in silence, as a mistyped key no longer does. Which
# settings each switch silences is declared here, once; a field silenced by several rules is named with the
# first. The fusion fields each method reads are `fusion.READ_BY` (`inert_settings` asks `fusion.reads`).
STANDS_ASIDE = ("guard.coverage_first", "guard.dense_max_rank")  # label-free rules that yield to a reranker and priors
_SWITCHED_OFF: tuple[_Off, ...] = (
    _Off(("retrieval.lexical.enabled",), _is(False)),
    # Near-duplicate dedup checks the store's vectors against the dense model (and backend) even so.
    _Off(("retrieval.dense.enabled",), _is(False), but=("model", "backend")),
    _Off(("retrieval.dense.enabled", "dedup.near_duplicate_enabled"), _is(False), ("model", "backend")),
    _Off(("retrieval.dense.index",), _is_not("hnsw"), ("ef_search",)),
    _Off(("retrieval.dense.provider",), _is("local"), ("url", "api_key_env", "dimensions", "timeout_s", "retries")),
    _Off(("retrieval.dense.provider",), _is("http"), ("backend",)),
    _Off(("routing.enabled",), _is(False)),
    _Off(("expansion.provider",), _is("none")),
    _Off(("rerank.provider",), _is("none"), note="unless HRT_RERANK_PROVIDER switches a reranker on in hrt search or hrt run"),
    *(_Off((f"{s}.provider",), _is_not("http"), ("url", "api_key_env")) for s in ("expansion", "rerank")),
    _Off(("rerank.provider",), _is_not("http"), ("max_chars", "batch_size")),
    *(_Off((f"{s}.provider",), _is_not("file"), ("path",)) for s in ("expansion", "rerank")),
    _Off(("rerank.blend",), _is_not("position"), ("buckets",)),
    _Off(("rerank.blend",), _is("none"), ("top_n", "score_normalization")),
    _Off(("fusion.method", "fusion.router"), lambda m, r: not _reads("fusion.model", {"method": m, "router": r}), ("model",)),
    _Off(("adapt.dense_gap",), _is(False)),
    _Off(("adapt.dense_gap", "fusion.method"), lambda on, method: on is True and method == "learned",
         note="the learned model weighs no list per query"),
    _Off(("fusion.method",), _is("learned"), ("adapt.dense_gap",), note="the learned model weighs no list per query"),
    _Off(("guard.exact_token",), _is(False), but=("coverage_first", "dense_max_rank")),
    # The word and dense-first rules were measured without a blending reranker or priors, and stand aside for them
    # (`pipeline.coverage_stands_aside` asks these two rules).
    _Off(("rerank.provider", "rerank.blend"), lambda provider, blend: provider != "none" and blend != "none",
         STANDS_ASIDE, note="while a reranker's scores shape the order"),
    _Off(("priors.recency_field", "priors.priority_field", "priors.use_field"), lambda *f: any(x is not None for x in f),
         STANDS_ASIDE, note="while priors re-weight the list"),
    _Off(("dedup.source_enabled",), _is(False), ("max_per_source", "fill")),
    _Off(("dedup.near_duplicate_enabled",), _is(False), ("near_duplicate_threshold",)),
    _Off(("threshold.min_score", "threshold.min_prob"), lambda s, p: s == 0 and p == 0, ("none_pass",)),
    _Off(("priors.recency_field", "priors.priority_field", "priors.use_field"), _is(None), ("combine", "top_n", "add_weight")),
    _Off(("priors.recency_field",), _is(None), ("recency_*", "as_of")),
    _Off(("priors.priority_field",), _is(None), ("priority_*",)),
    _Off(("priors.use_field",), _is(None), ("use_*",)),
    _Off(("priors.combine",), _is_not("add"), ("add_weight",)),
)


def _silenced(rule: _Off) -> tuple[str, ...]:
    """The dotted paths a rule names; a switch or pattern that matches no field fails at import."""
    section = rule.switches[0].rpartition(".")[0]
    names = [p.rpartition(".")[2] for p in FIELD_STAGES if p.rpartition(".")[0] == section]
    out: list[str] = []
    if not set(rule.switches) <= FIELD_STAGES.keys():
        raise TypeError(f"inert-settings rule: {', '.join(rule.switches)}: not all config fields")
    for pattern in rule.fields:
        if "." in pattern:  # a field of another section, by its path
            if pattern not in FIELD_STAGES:
                raise TypeError(f"inert-settings rule on {', '.join(rule.switches)}: {pattern!r} is no config field")
            out.append(pattern)
            continue
        hit = [n for n in names if fnmatch.fnmatchcase(n, pattern) and f"{section}.{n}" not in rule.switches and n not in rule.but]
        if not hit:
            raise TypeError(f"inert-settings rule on {', '.join(rule.switches)}: {pattern!r} names no field of {section}")
        out += [f"{section}.{n}" for n in hit]
    return tuple(out)


_INERT_RULES = tuple((rule, _silenced(rule)) for rule in _SWITCHED_OFF)


def _shown(v: Any) -> str:
    return "unset" if v is None else str(v).lower() if isinstance(v, bool) else repr(v)


def inert_settings(cfg: PipelineConfig, paths: Iterable[str] | None = None, *, ignore: Iterable[str] = ()) -> dict[str, str]:
    """{field: why it does nothing} for the fields (of `paths`; default all) that the rest of `cfg` switches
    off, e.g. {"fusion.alpha": "fusion.method 'rrf' does not read it"}, in schema order. `ignore`: switches whose
    rules of their own (no other switch) are left out: the lab keeps the blend's controls live before a reranker
    is set (`rerank.provider`), as its note says."""
    flat = cfg.flat()
    skip = set(ignore)
    todo = set(FIELD_STAGES if paths is None else paths)
    why: dict[str, str] = {}
    if any(p.startswith("fusion.") for p in todo):
        from . import fusion  # imports this module (and polars): only when a fusion field is asked about

        method = flat["fusion.method"]
        why |= {p: f"fusion.method {method!r} does not read it" for p in todo if not fusion.reads(method, p)}
    for rule, silenced in _INERT_RULES:
        if len(rule.switches) == 1 and rule.switches[0] in skip:
            continue
        values = [flat[s] for s in rule.switches]
        if any(p in todo for p in silenced) and rule.off(*values):
            shown = [_shown(v) for v in values]
            if len(rule.switches) > 1 and len(set(shown)) == 1:
                state = f"{', '.join(rule.switches[:-1])} and {rule.switches[-1]} are {shown[0]}"
            else:
                state = " and ".join(f"{s} is {v}" for s, v in zip(rule.switches, shown, strict=True))
            for p in silenced:
                if p in todo:
                    why.setdefault(p, state + (f" ({rule.note})" if rule.note else ""))
    return {p: why[p] for p in FIELD_STAGES if p in why}


@functools.cache
def _default_flat() -> dict[str, Any]:
    return PipelineConfig().flat()


@functools.cache
def _preset_dormant(name: str) -> dict[str, Any]:
    """{field: value} of the settings a shipped preset sets and switches off itself (a reranker's blend,
    ready for HRT_RERANK_PROVIDER; `rank_bonus: []` under convex): deliberate there, and in a copy of it."""
    cfg = _validate(_read_preset(PRESETS_DIR / f"{name}.yaml"), f"preset {name}")
    flat = cfg.flat()
    return {p: flat[p] for p in inert_settings(cfg)}


def _written(d: Any, path: str) -> bool:
    for part in path.split("."):
        if not isinstance(d, Mapping) or part not in d:
            return False
        d = d[part]
    return True


def _extended(d: Mapping[str, Any], origin: str, folder: Path | None, chain: tuple[str, ...]) -> dict[str, Any]:
    """`d` laid over the config its `extends` names (user trial Y: a file setting one field silently started
    from the schema's defaults, not the `default` preset the CLI uses without a config). Sections merge field by
    field; a dict-valued field (`priors.priority_map`) is replaced whole. Unnamed, a file takes its own name (its
    stem) and a mapping `<base>-custom`, so a run of it is not tagged as the preset's."""
    target = d["extends"]
    if not isinstance(target, str) or not target.strip():
        raise InputError(f"{origin}: extends: expected the name of a preset or the path of a config file, got {target!r}")
    # A file is looked for beside this one only, never in the working directory (which would make the file
    # mean another config when run from elsewhere); anything else names a preset.
    near = folder / target if folder is not None else Path(target)
    is_file = near.suffix.lower() in (".yaml", ".yml", ".json") or "/" in target or "\\" in target
    if is_file and not near.is_file():
        raise InputError(f"{origin}: extends: {near}: config file not found (a path in `extends` is relative to the "
                         "file that names it)")
    try:
        base = _load(near if is_file else target, chain)
    except InputError as e:
        raise InputError(f"{origin}: extends: {e}") from None
    merged = base.to_dict()
    for path, value in _leaf_updates({k: v for k, v in d.items() if k != "extends"}):  # as `with_updates` lays them
        try:
            node, key = _slot(merged, path)
        except InputError as e:
            raise InputError(f"{origin}: {e}") from None
        node[key] = value
    if "name" not in d:
        # A file is named after itself: two files extending `default` were both "default-custom", one run tag for
        # two configs (user trial AZ). A mapping, or a file named like a preset, is `<base>-custom`.
        stem = Path(origin).stem if folder is not None else ""
        if stem and stem != base.name and stem not in list_presets():
            merged["name"] = stem
        else:
            merged["name"] = base.name if base.name.endswith("-custom") else f"{base.name}-custom"
    if "description" not in d:
        merged["description"] = f"{base.name} with the changes of {origin}"
    return merged


def _from_data(d: Mapping[str, Any], origin: str, *, edited: bool = False, folder: Path | None = None,
               chain: tuple[str, ...] = (), stacklevel: int = 3) -> PipelineConfig:
    """A config from a file's content or a mapping, with one `InertSettingWarning` naming each field `d` sets
    that the rest of it switches off. Only what the writer chose counts: not a value equal to the default, nor
    one a config named after a preset shares with it where the preset switches it off too (`_preset_dormant`).
    A file with every section is a snapshot (what `save_config` writes: the lab's export, `hrt tune --out`), not
    a list of choices, so it is not checked, as `with_updates`, which built it, is not; unless `edited`: a YAML
    snapshot whose body no longer matches the digest `save_config` wrote in its first line (user trial X: `rrf_k`
    edited by hand in an exported convex config loaded in silence). Its base preset is found by name then
    (`qmd-tuned`, `qmd-lab`). With `extends`, `d` is laid over that config, and only `d`'s own fields count."""
    cfg = _validate(_extended(d, origin, folder, chain) if isinstance(d, Mapping) and "extends" in d else d, origin)
    if set(PipelineConfig.model_fields) - set(LABELS) <= d.keys() and not edited:  # (saved before a label existed too)
        return cfg
    flat, default = cfg.flat(), _default_flat()
    inert = inert_settings(cfg, [p for p in FIELD_STAGES if _written(d, p) and flat[p] != default[p]])
    base = re.sub(r"(-(lab|tuned|custom))+$", "", flat["name"])
    if inert and base in list_presets():
        dormant = _preset_dormant(base)
        inert = {p: why for p, why in inert.items() if p not in dormant or dormant[p] != flat[p]}
    by_why: dict[str, list[str]] = {}
    for p, why in inert.items():
        by_why.setdefault(why, []).append(p)
    said = []
    for why, ps in by_why.items():
        if len(ps) == 1:
            said.append(f"{ps[0]} is set but {why}")
        else:
            them = why.removesuffix(" it") + " them" if why.endswith(" it") else why
            said.append(f"{', '.join(ps[:-1])} and {ps[-1]} are set but {them}")
    if said:
        warnings.warn(
            f"{origin}: settings with no effect: " + "; ".join(said),
            InertSettingWarning,
            stacklevel=stacklevel,  # the caller of config_from_dict (3) or load_config (4, through `_load`)
        )
    return cfg


# ------------------------------------------------------------------ plumbing
def _unwrap(v: Any) -> Any:
    """numpy scalars (tuners produce them) -> Python scalars, so int fields accept them."""
    if hasattr(v, "item") and not isinstance(v, list | tuple | dict | str):
        try:
            return v.item()
        except (TypeError, ValueError):
            return v
    return v


def _plain(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _plain(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_plain(x) for x in v]
    return v


def _slot(d: dict[str, Any], path: str) -> tuple[dict[str, Any], str]:
    """(the dict holding the field at `path`, its key) in `d` (a `to_dict`), for a schema path only: a typo
    gets a suggestion, and a path that goes on past a field (`fusion.alpha.x`) says the field is a value."""
    parts = path.split(".")
    node = d
    for i, part in enumerate(parts[:-1]):
        if ".".join(parts[: i + 1]) in FIELD_STAGES:
            field_ = ".".join(parts[: i + 1])
            raise InputError(f"unknown config field {path}: {field_} is a value, not a section")
        if not isinstance(node.get(part), dict):
            raise InputError(f"unknown config field {_suggest(path, i, node)}")
        node = node[part]
    if path not in FIELD_STAGES and not (path in _SECTIONS and parts[-1] in node):
        raise InputError(f"unknown config field {_suggest(path, len(parts) - 1, node)}")
    return node, parts[-1]


def _leaf_updates(updates: Mapping[str, Any]) -> Iterator[tuple[str, Any]]:
    """(path, value) pairs with a dict given for a section spread over its fields, recursively."""
    for path, value in updates.items():
        if path in _SECTIONS and isinstance(value, Mapping):
            yield from _leaf_updates({f"{path}.{k}": v for k, v in value.items()})
        else:
            yield path, value


def _suggest(path: str, i: int, node: Any) -> str:
    parts = path.split(".")
    msg = ".".join(parts[: i + 1])
    if isinstance(node, dict):
        close = difflib.get_close_matches(parts[i], list(node), n=1)
        if close:
            msg += f" (did you mean {'.'.join([*parts[:i], close[0]])}?)"
    return msg


def _loc(loc: tuple) -> str:
    out = ""
    for p in loc:
        if isinstance(p, int):
            out += f"[{p}]"
        else:
            out += ("." if out else "") + str(p)
    return out


def _format_errors(e: ValidationError, origin: str, model: type[BaseModel] | None = None) -> str:
    lines = []
    for err in e.errors():
        loc = tuple(err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        if err["type"] == "extra_forbidden" and loc:
            known = _known_fields(loc[:-1], model or PipelineConfig)
            close = difflib.get_close_matches(str(loc[-1]), known, n=1)
            msg = "unknown field" + (
                f" (did you mean {close[0]}?)" if close else f"; known: {', '.join(known)}"
            )
        if err["type"] == "string_type" and isinstance(err.get("input"), bool):  # `name: off` in YAML
            msg += " (YAML reads unquoted yes/no/on/off/true/false as a boolean: quote the text)"
        if err["type"] == "string_type" and loc and loc[-1] == "[key]":  # `priority_map: {0: 4.0}` in YAML
            key, loc = err.get("input"), loc[:-2]
            kind = "boolean" if isinstance(key, bool) else "number" if isinstance(key, int | float) else type(key).__name__
            msg = f"key {key!r} must be a string: quote it (\"{key}\": ...), YAML reads an unquoted {key} as a {kind}"
        where = _loc(loc)
        lines.append(f"{origin}: {where}: {msg}" if where else f"{origin}: {msg}")
    return "\n".join(lines)


def _known_fields(loc: tuple, model: Any) -> list[str]:
    for p in loc:
        f = model.model_fields.get(p) if isinstance(p, str) and hasattr(model, "model_fields") else None
        if f is None or not (isinstance(f.annotation, type) and issubclass(f.annotation, BaseModel)):
            return []
        model = f.annotation
    return list(model.model_fields)


def config_from_dict(d: dict[str, Any], origin: str = "<file>") -> PipelineConfig:
    """Validate a plain dict (parsed YAML/JSON) into a config; errors name `origin` and the dotted field. Fields
    it sets that the rest of it switches off get one `InertSettingWarning` (see `_from_data`)."""
    return _from_data(d, origin)


def _validate(d: Any, origin: str) -> PipelineConfig:
    """`config_from_dict` without the warning (`with_updates`, presets)."""
    if not isinstance(d, dict):
        raise InputError(
            f"{origin}: a config must be a mapping of sections (retrieval, fusion, ...), got {type(d).__name__}"
        )
    version = d.get("schema_version", SCHEMA_VERSION)
    if type(version) is not int:  # "1" (or true, which equals 1) is a type error, not a version
        raise InputError(
            f"{origin}: schema_version: must be the integer {SCHEMA_VERSION} (got {version!r}, a {type(version).__name__})"
        )
    if version != SCHEMA_VERSION:
        raise InputError(
            f"{origin}: schema_version: unsupported schema_version {version!r}: this toolkit reads version {SCHEMA_VERSION}"
        )
    try:
        return PipelineConfig.__pydantic_validator__.validate_python(d)  # (errors named by `origin`, not the class)
    except ValidationError as e:
        raise InputError(_format_errors(e, origin)) from None


def list_presets() -> list[str]:
    """Names of the shipped presets (`load_config(name)` loads one)."""
    return sorted(p.stem for p in PRESETS_DIR.glob("*.yaml"))


class _DuplicateKey(ValueError):
    pass


def _unique_pairs(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """json `object_pairs_hook`: a repeated key is an error (json keeps the last value silently)."""
    out: dict[str, Any] = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateKey(k)
        out[k] = v
    return out


_RETYPED = frozenset(f"tag:yaml.org,2002:{t}" for t in ("int", "float", "bool", "timestamp"))  # YAML 1.1's readings


@functools.cache
def _data_loader() -> type:
    """`DataLoader`, made at its first use: PyYAML is imported where a YAML file is read or written, not with this
    module (~10 ms of every cold `hrt search`, which reads its preset from `PARSED_PRESETS`)."""
    import yaml

    class DataLoader(yaml.SafeLoader):
        """yaml.safe_load, except that a key repeated in one mapping is an error (YAML keeps the last silently), and
        that a file may use at most `MAX_ALIASES` aliases: a 29 KB file of 3,000 aliases of one long list took 12 s
        and 400 MB to load (user trial AJ); a config's `<<` merges need a few."""

        MAX_ALIASES = 100

        def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node | None:
            if self.check_event(yaml.AliasEvent):
                self._aliases = getattr(self, "_aliases", 0) + 1
                if self._aliases > self.MAX_ALIASES:
                    raise yaml.composer.ComposerError(None, None, f"more than {self.MAX_ALIASES} aliases (*name): not a config",
                                                      self.peek_event().start_mark)
            return super().compose_node(parent, index)

        def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
            for key_node, value_node in node.value:
                if key_node.value == "filters" and isinstance(value_node, yaml.MappingNode):
                    # A filter's value is matched as written: YAML 1.1 read `user: 010` as 8, `1:20` as 80 and `on` as
                    # true, and the filter selected another tenant (user trial BM). Its plain scalars stay text.
                    for pair in value_node.value:
                        for scalar in pair:  # numbers, booleans and dates only: a null stays null, `<<` a merge
                            if isinstance(scalar, yaml.ScalarNode) and scalar.style is None and scalar.tag in _RETYPED:
                                scalar.tag = "tag:yaml.org,2002:str"
            lines: dict[Any, int] = {}
            for key_node, _ in node.value:  # before merging: keys a `<<` merge brings in may be overridden
                if key_node.tag == "tag:yaml.org,2002:merge":
                    continue
                key = self.construct_object(key_node, deep=True)
                try:
                    if key in lines:
                        raise yaml.constructor.ConstructorError(
                            None, None, f"duplicate key {key!r} (first on line {lines[key]}): only one value would be kept",
                            key_node.start_mark,
                        )
                    lines[key] = key_node.start_mark.line + 1
                except TypeError:  # an unhashable key: the base constructor reports it
                    continue
            return super().construct_mapping(node, deep=deep)

    DataLoader.__module__, DataLoader.__qualname__ = __name__, "DataLoader"
    return DataLoader


def __getattr__(name: str) -> Any:
    if name == "DataLoader":  # `from toolkit.config import DataLoader` imports PyYAML then
        return _data_loader()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _read(path: Path) -> dict[str, Any]:
    return _read_text(path)[0]


def _read_preset(path: Path) -> dict[str, Any]:
    """A shipped preset's content, as `_read` parses it: from `PARSED_PRESETS` while it holds the preset's file as it
    is (the same SHA-256), else from the YAML. JSON reads back every value a preset holds (tests/test_config.py
    checks the file against the YAML), and the content is validated as any config's is: only PyYAML's import and
    parse are saved (~12 ms of a cold `hrt search`). `write_parsed_presets` rewrites the file after a preset changes."""
    try:
        raw = path.read_bytes()
        entry = json.loads(PARSED_PRESETS.read_bytes()).get(path.stem)
    except (OSError, ValueError):
        entry = None
    if isinstance(entry, dict) and entry.get("sha256") == hashlib.sha256(raw).hexdigest():
        return entry["data"]
    return _read(path)


def parsed_presets() -> dict[str, dict[str, Any]]:
    """{preset name: {"sha256": of its file, "data": its content}}: what `PARSED_PRESETS` should hold."""
    return {p.stem: {"sha256": hashlib.sha256(p.read_bytes()).hexdigest(), "data": _read(p)}
            for p in sorted(PRESETS_DIR.glob("*.yaml"))}


def write_parsed_presets() -> Path:
    """Rewrite `PARSED_PRESETS` from the presets' YAML (after a preset changes):
    `python -c "from toolkit.config import write_parsed_presets as w; w()"`."""
    return write_text_atomic(PARSED_PRESETS, json.dumps(parsed_presets(), indent=1, ensure_ascii=False) + "\n")


def _read_text(path: Path) -> tuple[dict[str, Any], str]:
    """(the parsed config, the file's text): the text for `_edited_snapshot`, without reading the file twice."""
    try:
        raw = path.read_bytes()
    except OSError as e:
        raise InputError(f"{path}: cannot read config: {e.strerror or e}") from None
    try:  # a byte order mark (Windows editors) is no part of the config, in YAML or JSON
        text = raw.decode("utf-8-sig")
    except UnicodeDecodeError as e:  # a config saved as cp1252 or UTF-16 ended in a traceback (user trial AT)
        line = raw[: e.start].count(b"\n") + 1
        utf16 = " (UTF-16?)" if utf16_text(raw) else ""
        raise InputError(f"{path}:{line}: not UTF-8 text{utf16}: save the config as UTF-8") from None
    try:
        if path.suffix.lower() == ".json":
            data = json.loads(text, object_pairs_hook=_unique_pairs)
        else:
            data = _load_yaml(text, path)
    except _DuplicateKey as e:
        raise InputError(f"{path}: invalid JSON: key {e.args[0]!r} appears twice in one object (only one value is kept)") from None
    except json.JSONDecodeError as e:
        raise InputError(f"{path}:{e.lineno}: invalid JSON: {e.msg}") from None
    except RecursionError:  # thousands of nested brackets: the parser runs out of stack
        raise InputError(f"{path}: nested too deeply to be a config") from None
    if data is None:  # an empty file (or only comments) is a mistake, not "all defaults"
        raise InputError(f"{path}: the config file is empty; write the fields to set (or `{{}}` for all defaults)")
    return data, text


def _load_yaml(text: str, path: Path) -> Any:
    """A YAML config file's text parsed (PyYAML is imported here: `_data_loader`), a parse error as an InputError."""
    import yaml

    try:
        return yaml.load(text, Loader=_data_loader())  # a SafeLoader: plain data only
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        where = f"{path}:{mark.line + 1}" if mark is not None else str(path)
        raise InputError(f"{where}: invalid YAML: {getattr(e, 'problem', None) or e}") from None


# Fields whose value may be a path: "file" ones always are; "model" ones are when the path exists (else a
# hub id) and never for an http provider (then the name the endpoint serves).
_PATH_FIELDS = {
    "fusion.model": "file",
    "expansion.path": "file",
    "rerank.path": "file",
    "rerank.model": "model",
    "retrieval.dense.model": "model",
}


def _reads(path: str, section: dict[str, Any], d: Mapping[str, Any] | None = None) -> bool:
    """Whether a config reads path field `path` of `section` (its section dict; `d`, the whole config as plain
    data, for the dense model, which near-duplicate dedup reads too). A file it does not read is no error yet."""
    if path == "fusion.model":
        return section.get("method") == "learned" or section.get("router") is True
    if path == "rerank.model":
        return section.get("provider") == "cross-encoder"
    if path == "retrieval.dense.model":
        dedup = (d or {}).get("dedup") or {}
        return section.get("provider") == "local" and (section.get("enabled") is not False or dedup.get("near_duplicate_enabled") is True)
    return section.get("provider") == "file"


def read_paths(cfg: PipelineConfig) -> dict[str, str | None]:
    """{field: value} of the path fields (`_PATH_FIELDS`) this config reads (None where unset: a default
    applies): the files and folders whose content, not only their name, decides its results
    (`pipeline.prepare_key` stamps them). A model field may hold a hub id instead of a path."""
    d = cfg.to_dict()
    out = {}
    for path in _PATH_FIELDS:
        *names, key = path.split(".")
        section = d
        for name in names:
            section = section[name]
        if _reads(path, section, d):
            out[path] = section.get(key)
    return out


def _relative_paths(d: Any) -> Iterator[tuple[str, str, dict[str, Any], str]]:
    """(field, kind, its section dict, value) of each relative path in `d` (a config as plain data)."""
    for path, kind in _PATH_FIELDS.items():
        *names, key = path.split(".")
        section = d
        for name in names:
            section = section.get(name) if isinstance(section, dict) else None
        value = section.get(key) if isinstance(section, dict) else None
        if not isinstance(value, str) or not value or os.path.isabs(os.path.expanduser(value)):
            continue
        if kind == "model" and section.get("provider") == "http":
            continue
        yield path, kind, section, value


def _file_relative(d: Any, cfg_file: Path, origin: str) -> Any:
    """`d` (a config file's content) with its relative paths made absolute from the file's folder (see the
    module docstring): the working directory decided before, so a config meant another file when run elsewhere."""
    folder = cfg_file.parent.absolute()
    for path, kind, section, value in _relative_paths(d):
        key = path.rsplit(".", 1)[-1]
        here, cwd = folder / value, Path(value).absolute()
        if here.exists():
            section[key] = str(here)
        elif cwd.exists():
            warnings.warn(
                f"{origin}: {path}: {value} is not in the config file's folder ({here}) but is in the working "
                f"directory ({cwd}); using that one for now: relative paths are read from the config file's folder",
                ConfigWarning,
                stacklevel=3,
            )
            section[key] = str(cwd)
        elif kind == "file":
            if _reads(path, section):
                raise InputError(
                    f"{origin}: {path}: {value}: no such file (relative paths are read from the config file's folder, {folder})"
                )
            section[key] = str(here)
    return d


def load_config(path_or_name: str | Path | PipelineConfig | Mapping[str, Any]) -> PipelineConfig:
    """Load a config from a YAML/JSON file, or a shipped preset by name (`qmd`, `bm25-only`, ...). A mapping
    is read as a file's content would be (`{"fusion": {"rrf_k": 20}}`: sections and fields left out take the
    schema's defaults, `PipelineConfig()`: RRF with QMD's original-query weight 2 and rank bonus, no guard,
    adaptive weight or copy collapsing; not the `default` preset's). `extends: default` (a preset name, or a
    config file's path relative to this one) starts from that config instead: the file then lists only what it
    changes. In Python, `load_config("qmd").with_updates({...})` does the same."""
    return _load(path_or_name, ())


def _load(path_or_name: Any, chain: tuple[str, ...]) -> PipelineConfig:
    """`load_config`, with the files `extends` has followed so far (a cycle is an error, not a recursion)."""
    if isinstance(path_or_name, PipelineConfig):
        return path_or_name
    if isinstance(path_or_name, Mapping):
        return _from_data(dict(path_or_name), origin="<mapping>", chain=chain, stacklevel=4)
    if not isinstance(path_or_name, str | Path):
        raise InputError(
            f"config: expected a preset name, a file path, a mapping or a PipelineConfig, got {type(path_or_name).__name__}"
        )
    p = Path(path_or_name)
    name = str(path_or_name)
    preset = PRESETS_DIR / f"{name}.yaml"
    # A preset's name is the preset, even where a file of that name lies in the working directory: a cloned
    # folder holding a file `default` made `--config default` send a key to its URL (user trial AJ). A Path, or
    # a name with a folder in it (`./default`), is a file.
    if isinstance(path_or_name, str) and "/" not in name and "\\" not in name and preset.is_file():
        if p.is_file():
            warnings.warn(f"config {name!r} is the preset of that name, not the file {name} in {Path.cwd()} "
                          f"(./{name} names the file)", ConfigWarning, stacklevel=3)
        return _validate(_read_preset(preset), origin=f"preset {name} ({preset.name})")  # unchecked: see `_preset_dormant`
    if p.is_file():
        here = str(p.resolve())
        if here in chain:
            raise InputError(f"{path_or_name}: extends goes round in a circle ({' -> '.join([*chain, here])})")
        data, text = _read_text(p)
        cfg = _from_data(_file_relative(data, p, origin=str(path_or_name)), origin=str(path_or_name),
                         edited=_edited_snapshot(text), folder=p.parent, chain=(*chain, here), stacklevel=4)
        if not chain:  # the file asked for, with whatever it extends
            _warn_key_destinations(cfg, str(path_or_name), stacklevel=4)
        return cfg
    if p.is_dir():
        raise InputError(f"{path_or_name}: a directory, not a config file (a YAML or JSON file, or a preset name)")
    if p.suffix.lower() in (".yaml", ".yml", ".json"):
        raise InputError(f"{path_or_name}: config file not found")
    close = difflib.get_close_matches(name, list_presets(), n=1)
    files = [f for f in (p.with_name(p.name + ext) for ext in (".yaml", ".yml", ".json")) if f.is_file()]
    # `--config rr` beside rr.yaml: the file is named whole (user trial AZ), a preset by its name alone.
    hint = f" (did you mean the file {files[0]}?)" if files else f" (did you mean {close[0]}?)" if close else ""
    raise InputError(
        f"{name}: neither a config file nor a preset{hint}; presets: {', '.join(list_presets())}"
    )


def save_config(cfg: PipelineConfig | str | Path, path: str | Path) -> Path:
    """Write YAML (.yaml/.yml) or JSON (.json); both load back to an equal config (inf included). A relative
    path is written absolute: a config built in Python reads it from the working directory, a file from its
    folder, so the file means the same files wherever it is loaded (a model name stays a name). `cfg` may be a preset
    name or a file too, as everywhere a config goes."""
    p = Path(path)
    suffix = p.suffix.lower()
    if suffix not in (".yaml", ".yml", ".json"):
        raise InputError(f"{path}: config files end in .yaml, .yml or .json")
    text = config_text(cfg, "json" if suffix == ".json" else "yaml")
    try:
        return write_text_atomic(p, text)
    except OSError as e:  # user trial BP: FileNotFoundError named the temporary file, not the config
        raise InputError(f"{path}: cannot write the config: {e.strerror or e}") from None


def config_text(cfg: PipelineConfig | str | Path, fmt: str = "yaml") -> str:
    """The text `save_config` writes, every field resolved (`extends` applied, relative paths absolute): what
    `hrt config show` prints, for a CI log or a review."""
    d = load_config(cfg).to_dict()
    for path_, kind, section, value in _relative_paths(d):
        if kind == "file" or Path(value).exists():
            section[path_.rsplit(".", 1)[-1]] = str(Path(value).absolute())
    if fmt == "yaml":
        import yaml

        body = yaml.safe_dump(d, sort_keys=False, allow_unicode=True)
        return f"{_SNAPSHOT_MARK}{_digest(body)}{_SNAPSHOT_NOTE}\n{body}"
    if fmt == "json":  # JSON has no infinity; the string "inf" is what pydantic reads back as a float.
        return json.dumps(_json_safe(d), indent=2, ensure_ascii=False) + "\n"
    raise InputError(f"config format {fmt!r}: yaml or json")


# The first line of a YAML file `save_config` writes: a digest of the rest, so a load can tell a snapshot edited by
# hand (checked for settings that do nothing, as any hand-written file is) from one as saved (JSON has no comments).
_SNAPSHOT_MARK = "# hrt snapshot "
_SNAPSHOT_NOTE = ": every setting as save_config wrote them; after an edit, settings that do nothing are named on load"


def _digest(body: str) -> str:
    return hashlib.sha1(body.encode("utf-8")).hexdigest()[:16]


def _edited_snapshot(text: str) -> bool:
    """Whether a config file's `text` is a YAML snapshot `save_config` wrote whose body changed since (its digest
    line says)."""
    first, _, body = text.partition("\n")
    if not first.startswith(_SNAPSHOT_MARK):
        return False
    return first[len(_SNAPSHOT_MARK):].split(":", 1)[0] != _digest(body)


def _json_safe(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_json_safe(x) for x in v]
    if isinstance(v, float) and math.isinf(v):
        return "inf" if v > 0 else "-inf"
    return v
