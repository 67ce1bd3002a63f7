"""Keep credentials out of configs, messages, caches and exports.

Three checks, used by the config (URLs and environment-variable names) and by the HTTP providers (answer
bodies quoted in errors, which end up printed and stored in the stage cache):
- `url_credentials`: a URL with user:password@ or a credential-looking query parameter is refused;
- `looks_like_secret`: a value pasted where the NAME of an environment variable belongs;
- `scrub`: the key values a provider sent (`header_secrets`), in every spelling a server may echo them
  back in, and anything else that looks like a credential, are replaced by `[redacted]`. Patterns alone
  miss a key with no telltale shape (`hunter2pass`), so the providers pass the value they read.
Rejected values are never echoed: the messages say what is wrong, not what was given.
Written by hand: no maintained library does this for arbitrary text (detect-secrets scans files for commits).
"""

from __future__ import annotations

import functools
import json
import re
from collections.abc import Iterable, Mapping
from typing import Any
from urllib.parse import parse_qsl, quote, quote_plus, urlsplit

REDACTED = "[redacted]"

# Query parameter names that carry credentials (compared without '-', '_' and case).
_CREDENTIAL_PARAMS = {
    "accesstoken", "token", "auth", "authorization", "signature", "sig", "password", "passwd", "pwd", "pass",
    "key", "apikey", "secret", "clientsecret", "secretkey", "accesskey", "privatekey", "sessiontoken",
    "idtoken", "refreshtoken", "bearer", "credential", "credentials", "xamzsignature", "xamzcredential",
    "xamzsecuritytoken", "xgoogsignature", "xgoogcredential", "code", "jwt", "session", "sessionid",
}
_CREDENTIAL_SUFFIXES = ("token", "secret", "password", "apikey", "signature", "key", "auth")

# Prefixes of common API tokens.
_TOKEN_PREFIX = r"(?:sk|pk|rk)[-_](?:live|test|proj|ant)?[-_]?|ghp_|gho_|ghs_|ghu_|github_pat_|glpat-|xox[abprs]-|hf_|AKIA|ASIA|AIza"

_SCRUBS = [
    # Authorization headers and bearer tokens, as echoed by a server.
    (re.compile(r"(?i)\b(authorization|proxy-authorization)(\"?\s*[:=]\s*\"?)(?:bearer|basic|token)?\s*[^\s\",;}]+"), r"\1\2" + REDACTED),
    (re.compile(r"(?i)\bbearer\s+[A-Za-z0-9._~+/=-]+"), "Bearer " + REDACTED),
    # key=value and "key": "value" pairs whose key names a credential.
    (re.compile(r"(?i)([\"']?\b[\w-]*(?:api[_-]?key|apikey|token|secret|password|passwd|signature|sig|auth|credential)s?[\"']?\s*[:=]\s*[\"']?)[^\s\"'&,;}]+"), r"\1" + REDACTED),
    # Known token shapes anywhere.
    (re.compile(r"\b(?:" + _TOKEN_PREFIX + r")[A-Za-z0-9._-]{8,}"), REDACTED),
    (re.compile(r"\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]+"), REDACTED),  # JWT
    # Long unbroken runs mixing letters and digits (random tokens), 24+ characters.
    (re.compile(r"\b(?=[A-Za-z0-9_+/=-]*[0-9])(?=[A-Za-z0-9_+/=-]*[A-Za-z])[A-Za-z0-9_+/=-]{24,}"), REDACTED),
]


_AUTH_SCHEMES = {"bearer", "basic", "token"}


def header_secrets(headers: Mapping[str, str]) -> tuple[str, ...]:
    """The credential values among request `headers` (`Authorization: Bearer KEY` gives KEY): what `scrub`
    must remove from anything that quotes the answer to that request."""
    out = []
    for name, value in headers.items():
        n = _norm(name)
        if not value or not (n in _CREDENTIAL_PARAMS or n.endswith(_CREDENTIAL_SUFFIXES)):
            continue
        scheme, _, rest = value.strip().partition(" ")
        out.append(rest.strip() if scheme.lower() in _AUTH_SCHEMES and rest.strip() else value)
    return tuple(out)


def _forms(secret: str) -> set[str]:
    """How a server may spell `secret` back: raw, JSON-escaped (also with `\\/` and `\\uXXXX`), as a
    Python repr, and percent-encoded (upper- or lower-case hex, `+` or `%20` for a space)."""
    forms = {secret, json.dumps(secret)[1:-1], json.dumps(secret, ensure_ascii=False)[1:-1], repr(secret)[1:-1]}
    forms |= {f.replace("/", "\\/") for f in forms}
    pct = {quote(secret, safe=""), quote(secret), quote_plus(secret)}
    forms |= pct | {re.sub(r"%[0-9A-F]{2}", lambda m: m.group(0).lower(), f) for f in pct}
    return {f for f in forms if f}


@functools.lru_cache(maxsize=32)
def _all_forms(secrets: tuple[str, ...]) -> tuple[str, ...]:
    """Every spelling of every secret, longest first (so a longer spelling wins over one inside it)."""
    return tuple(sorted(set().union(*(_forms(s) for s in secrets if s)), key=len, reverse=True))


@functools.lru_cache(maxsize=32)
def _secrets_pattern(secrets: tuple[str, ...]) -> re.Pattern[str] | None:
    forms = _all_forms(secrets)
    return re.compile("|".join(map(re.escape, forms))) if forms else None


def redact_values(text: str, secrets: Iterable[str] = ()) -> str:
    """`text` with every spelling of the known `secrets` replaced by `[redacted]`, and nothing else changed."""
    pat = _secrets_pattern(_key(secrets))
    return text if pat is None else pat.sub(REDACTED, text)


def redact_data(data: Any, secrets: Iterable[str] = ()) -> Any:
    """Decoded JSON with `redact_values` applied to every string (keys included); numbers are untouched."""
    secrets = tuple(secrets)
    if isinstance(data, str):
        return redact_values(data, secrets)
    if isinstance(data, dict):
        return {redact_data(k, secrets): redact_data(v, secrets) for k, v in data.items()}
    if isinstance(data, list):
        return [redact_data(v, secrets) for v in data]
    return data


def scrub(text: str, secrets: Iterable[str] = (), limit: int | None = None) -> str:
    """`text` with the known `secrets` (see `redact_values`) and anything else credential-like replaced by
    `[redacted]`: for errors, statuses, caches and output. `limit` shortens the result, after scrubbing, so
    a cut never leaves the first part of a key standing."""
    secrets = _key(secrets)
    cut = limit is not None and len(text) > limit
    if cut:  # scrub a window, not a 20 MB body; what a replacement pulls into view is scrubbed too
        forms = _all_forms(secrets)
        text = text[: 2 * limit + 2 * (len(forms[0]) if forms else 0) + 200]
    text = redact_values(text, secrets)
    for pat, rep in _SCRUBS:
        text = pat.sub(rep, text)
    if cut:
        text = _drop_partial_tail(text, secrets)[:limit]
    return text


def _key(secrets: Iterable[str]) -> tuple[str, ...]:
    return tuple(sorted({s for s in secrets if s}))


def _drop_partial_tail(text: str, secrets: tuple[str, ...]) -> str:
    """`text` without a trailing beginning of a secret (a window cut through it)."""
    for form in _all_forms(secrets):
        for k in range(min(len(form) - 1, len(text)), 0, -1):
            if text.endswith(form[:k]):
                text = text[:-k]
                break
    return text


def _norm(name: str) -> str:
    return re.sub(r"[-_.\s]", "", name).lower()


def url_credentials(url: str) -> str | None:
    """Why `url` carries credentials (user:password@, or a credential-looking query parameter), or None.
    The reason names the parameter, never its value."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return "it cannot be parsed"
    if parts.username is not None or parts.password is not None or "@" in parts.netloc:
        return "it has user:password@ in the host part"
    for name, _ in parse_qsl(parts.query, keep_blank_values=True) + parse_qsl(parts.fragment, keep_blank_values=True):
        n = _norm(name)
        if n in _CREDENTIAL_PARAMS or n.endswith(_CREDENTIAL_SUFFIXES):
            return f"query parameter {name[:40]!r} looks like a credential"
    return None


def looks_like_secret(value: str) -> bool:
    """Heuristic for a value pasted where a NAME belongs: a known token prefix, or a long part mixing
    letters and digits that no one would name a variable (`live_9f8e7d...`, `AbCd1234...`)."""
    if re.match(_TOKEN_PREFIX + r"|Bearer\s", value):
        return True
    mixed = any(c.islower() for c in value) and any(c.isupper() for c in value) and any(c.isdigit() for c in value)
    if len(value) >= 20 and mixed and "_" not in value:
        return True
    for part in re.split(r"[_\W]+", value):
        if len(part) >= 8 and re.search(r"\d", part) and re.search(r"[A-Za-z]", part) and sum(c.isdigit() for c in part) >= 3:
            return True
    return len(value) > 64
