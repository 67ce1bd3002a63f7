"""Switching the reranker through the environment, with no config edit (as agent-memory does).

| variable | meaning | seed aliases (agent-memory), in order |
|---|---|---|
| `HRT_RERANK_PROVIDER` | `none`/`off`, `http` (also `openai`, `jina`, `cohere`: a `/v1/rerank` endpoint), `cross-encoder` | `AGENT_MEMORY_RERANK_PROVIDER` |
| `HRT_RERANK_MODEL` | model name sent to the endpoint, or the CrossEncoder path/id | `AGENT_MEMORY_RERANK_MODEL` |
| `HRT_RERANK_BASE_URL` | base URL; `/rerank` is appended unless the URL ends with it | `AGENT_MEMORY_RERANK_BASE_URL`, `OPENAI_BASE_URL` |
| `HRT_RERANK_API_KEY_ENV` | the NAME of the variable holding the API key | `AGENT_MEMORY_RERANK_API_KEY`, `OPENAI_API_KEY` (the key itself: its own name is used) |
| `HRT_RERANK_TIMEOUT` | http: seconds one request may take (`rerank.timeout_s`, a positive number; default 10) | none |
| `HRT_RERANK_RETRIES` | http: retries after a failed call (`rerank.retries`, a whole number >= 0; default 2) | none |

Precedence: a config whose `rerank.provider` is not `none` wins, and the environment is ignored (`hrt
search -v` says so); otherwise the environment, when it names a provider, sets `rerank.provider`,
`model`, `url`, `api_key_env`, `timeout_s` and `retries`; otherwise there is no reranker. A failing or hanging
endpoint costs up to timeout x (batches + retries) seconds per search (10 s x 4 for the default 40 candidates in
batches of 32), all of a query's batches, retries and pauses together, hence the last two variables.
Key values are never read here, let alone printed: only variable names travel (the reranker reads the key
when it connects).
"""

from __future__ import annotations

import math
import os
from collections.abc import Mapping
from dataclasses import dataclass, field

from .config import PipelineConfig, RerankConfig
from .errors import InputError
from .redact import looks_like_secret

PROVIDER_VARS = ("HRT_RERANK_PROVIDER", "AGENT_MEMORY_RERANK_PROVIDER")
MODEL_VARS = ("HRT_RERANK_MODEL", "AGENT_MEMORY_RERANK_MODEL")
URL_VARS = ("HRT_RERANK_BASE_URL", "AGENT_MEMORY_RERANK_BASE_URL", "OPENAI_BASE_URL")
KEY_NAME_VAR = "HRT_RERANK_API_KEY_ENV"
KEY_VARS = ("AGENT_MEMORY_RERANK_API_KEY", "OPENAI_API_KEY")
TIMEOUT_VAR = "HRT_RERANK_TIMEOUT"  # agent-memory has no such setting: no alias
RETRIES_VAR = "HRT_RERANK_RETRIES"
PROVIDERS = {"none": "none", "off": "none", "http": "http", "openai": "http", "jina": "http", "cohere": "http",
             "cross-encoder": "cross-encoder"}


@dataclass(frozen=True)
class RerankSource:
    """Where the reranker settings came from: "config", "environment" or "none", with the variables read."""

    source: str
    variables: tuple[str, ...] = ()
    ignored: tuple[str, ...] = field(default=())

    def describe(self, cfg: PipelineConfig) -> str:
        """One line for `hrt search -v`: provider, model, endpoint, key variable NAME, and the source."""
        r = cfg.rerank
        what = r.provider
        details = [f"model {r.model}" if r.model else "", f"url {r.url}" if r.url else "", f"path {r.path}" if r.path else "",
                   f"key from ${r.api_key_env}" if r.api_key_env else
                   f"no key: none of {KEY_NAME_VAR}, {', '.join(KEY_VARS)} is set" if r.provider == "http" and self.source == "environment" else "",
                   f"timeout {r.timeout_s:g}s" if TIMEOUT_VAR in self.variables else "",
                   f"{r.retries} retr{'y' if r.retries == 1 else 'ies'}" if RETRIES_VAR in self.variables else ""]
        details = [d for d in details if d]
        if details:
            what += " (" + ", ".join(details) + ")"
        if self.source == "environment":
            return f"reranker: {what} from the environment ({', '.join(self.variables)})"
        if self.source == "config":
            note = f"; environment ignored ({', '.join(self.ignored)}): the config file wins" if self.ignored else ""
            return f"reranker: {what} from the config file{note}"
        return "reranker: none (no provider in the config file, none in HRT_RERANK_PROVIDER or AGENT_MEMORY_RERANK_PROVIDER)"


def _first(env: Mapping[str, str], names: tuple[str, ...]) -> tuple[str | None, str | None]:
    for n in names:
        v = env.get(n, "").strip()
        if v:
            return n, v
    return None, None


def _limits(name: str) -> tuple[float | None, float | None, float | None]:
    """(gt, ge, le) of a `RerankConfig` field: the config stays the one place the bounds are written."""
    meta = RerankConfig.model_fields[name].metadata
    return tuple(next((getattr(m, k) for m in meta if getattr(m, k, None) is not None), None) for k in ("gt", "ge", "le"))


def _shown(var: str, raw: str) -> str:
    """`VAR='value'` for an error message, or only `VAR` when the value may be a pasted key."""
    return f"{var} (value not shown: it looks like a key)" if looks_like_secret(raw) or len(raw) > 24 else f"{var}={raw!r}"


def _env_timeout(raw: str) -> float:
    """`HRT_RERANK_TIMEOUT` as seconds, within `rerank.timeout_s`'s bounds, or a clear `InputError`."""
    gt, _, le = _limits("timeout_s")
    try:
        value = float(raw)
    except ValueError:
        value = math.nan
    if not (math.isfinite(value) and (gt is None or value > gt) and (le is None or value <= le)):
        raise InputError(f"{_shown(TIMEOUT_VAR, raw)}: must be a number of seconds greater than {gt:g} and at most "
                         f"{le:g} (rerank.timeout_s: how long one reranker call may take), e.g. 2 or 0.5")
    return value


def _env_retries(raw: str) -> int:
    """`HRT_RERANK_RETRIES` as a count, within `rerank.retries`'s bounds, or a clear `InputError`."""
    _, ge, le = _limits("retries")
    value = int(raw) if raw.isascii() and raw.isdigit() else -1
    if value < (ge or 0) or (le is not None and value > le):
        raise InputError(f"{_shown(RETRIES_VAR, raw)}: must be a whole number from {ge or 0} to {le} "
                         "(rerank.retries: retries after a failed reranker call), e.g. 0")
    return value


def resolve_rerank(cfg: PipelineConfig, environ: Mapping[str, str] | None = None) -> tuple[PipelineConfig, RerankSource]:
    """`cfg` with the reranker the environment names (see the module docstring), and where it came from."""
    env = os.environ if environ is None else environ
    pvar, provider = _first(env, PROVIDER_VARS)
    if cfg.rerank.provider != "none":
        names = (*PROVIDER_VARS, *MODEL_VARS, *URL_VARS[:2], KEY_NAME_VAR, TIMEOUT_VAR, RETRIES_VAR)
        set_vars = tuple(n for n in names if env.get(n, "").strip())
        return cfg, RerankSource("config", ignored=set_vars if pvar else ())
    if pvar is None:
        return cfg, RerankSource("none")
    kind = PROVIDERS.get(provider.lower())
    if kind is None:
        raise InputError(f"{pvar}={provider!r}: unknown reranker provider; use one of {', '.join(PROVIDERS)}")
    if kind == "none":
        return cfg, RerankSource("environment", (pvar,))
    used = [pvar]
    updates: dict[str, object] = {"rerank.provider": kind}
    mvar, model = _first(env, MODEL_VARS)
    if model:
        updates["rerank.model"], used = model, [*used, mvar]
    if kind == "http":
        uvar, url = _first(env, URL_VARS)
        if not url:
            raise InputError(f"{pvar}={provider}: the http reranker needs a base URL in {' or '.join(URL_VARS)}")
        url = url.rstrip("/")
        updates["rerank.url"] = url if url.endswith("/rerank") else url + "/rerank"
        used.append(uvar)
        key_name, kvar = env.get(KEY_NAME_VAR, "").strip(), None
        if key_name and not key_name.replace("_", "a").isalnum():  # never echo it: it may be a pasted key
            raise InputError(f"{KEY_NAME_VAR} must hold the NAME of the variable with the key (letters, digits, _), not the key")
        if key_name:
            updates["rerank.api_key_env"], used = key_name, [*used, KEY_NAME_VAR]
        else:
            kvar, _ = _first(env, KEY_VARS)  # the variable holds the key: its NAME goes into the config
            if kvar:
                updates["rerank.api_key_env"], used = kvar, [*used, kvar]
        for var, field_name, parse in ((TIMEOUT_VAR, "timeout_s", _env_timeout), (RETRIES_VAR, "retries", _env_retries)):
            raw = env.get(var, "").strip()
            if raw:
                updates[f"rerank.{field_name}"], used = parse(raw), [*used, var]
    try:
        out = cfg.with_updates(updates)
    except InputError as e:
        raise InputError(f"reranker from the environment ({', '.join(used)}): {e}") from None
    if kind == "http":  # a key "named" for the URL: by HRT_RERANK_API_KEY_ENV, or the URL's own family's key variable
        _warn_key_sent(out.rerank, named=bool(key_name) or (uvar, kvar) in _SAME_FAMILY)
    return out, RerankSource("environment", tuple(used))


# A base URL and a key variable of one family: agent-memory's pair, OpenAI's pair (the review: a warning for them said
# "no HRT_RERANK_API_KEY_ENV names it" of the key the seed's own variables name).
_SAME_FAMILY = {("AGENT_MEMORY_RERANK_BASE_URL", "AGENT_MEMORY_RERANK_API_KEY"), ("OPENAI_BASE_URL", "OPENAI_API_KEY")}


def _warn_key_sent(r: RerankConfig, *, named: bool) -> None:
    """Where an environment-chosen reranker sends a key, said before the first request (user trial AN: an internal
    reranker's URL in HRT_RERANK_BASE_URL took the unrelated $OPENAI_API_KEY over plain http, without a word; a
    config file saying the same warned)."""
    import warnings
    from urllib.parse import urlsplit

    from .config import KNOWN_PROVIDER_HOSTS, ConfigWarning, _loopback, cleartext_hop

    if not r.api_key_env:  # a local endpoint without auth is common: `describe` (hrt search -v) says it
        return
    host = urlsplit(r.url).hostname or ""
    if hop := cleartext_hop(r.url):
        warnings.warn(f"reranker from the environment sends the value of ${r.api_key_env} over unencrypted http {hop}",
                      ConfigWarning, stacklevel=3)
    elif not named and host not in KNOWN_PROVIDER_HOSTS and not _loopback(host):
        warnings.warn(f"reranker from the environment sends the value of ${r.api_key_env} (found set; no {KEY_NAME_VAR} "
                      f"names it) to {host}: set {KEY_NAME_VAR} to the variable that endpoint's key is in",
                      ConfigWarning, stacklevel=3)
