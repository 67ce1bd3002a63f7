"""Keep credentials out of configs, messages, caches and exports.

Three checks, used by the config (URLs and environment-variable names) and by the HTTP providers (answer
bodies quoted in errors, which end up printed and stored in the stage cache):
- `url_credentials`: a URL with user:password@ or a credential-looking query parameter is refused;
- `looks_like_secret`: a value pasted where the NAME of an environment variable belongs;
- `scrub`: anything in a text that looks like a credential is replaced by `[redacted]`.
Rejected values are never echoed: the messages say what is wrong, not what was given.
Written by hand: no maintained library does this for arbitrary text (detect-secrets scans files for commits).
"""

from __future__ import annotations

import re
from urllib.parse import parse_qsl, urlsplit

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


def scrub(text: str) -> str:
    """`text` with anything credential-like replaced by `[redacted]` (for errors, caches and output)."""
    for pat, rep in _SCRUBS:
        text = pat.sub(rep, text)
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
