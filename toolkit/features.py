"""Stage 1: query features and routing, and the strong-signal test that lets a query skip expansion.

Two query shapes break hybrid retrieval in opposite ways: a stopword-heavy conversational question ("when
did Caroline go to the support group?") drowns BM25 in common words, while a query carrying an exact token
(`ECONNREFUSED`, `retryBackoffMs`, `CVE-2017-3156`, `v2.14.3`) is what dense embeddings blur. The features
are always computed (the panels group metrics by them); the routing policy acts on them only when
`routing.enabled`.

Technical-token detection is a set of hand-written regexes: no library classifies identifiers, codes and
versions in free text, and the rules must stay readable and testable (see tests/test_features.py).
"""

from __future__ import annotations

import errno
import functools
import importlib.util
import re
import signal
from pathlib import Path

import polars as pl

from .analysis import windows
from .config import ExpansionConfig, RoutingConfig

FEATURE_SCHEMA = {
    "qid": pl.Utf8,
    "n_tokens": pl.Int64,
    "stopword_ratio": pl.Float64,
    "technical": pl.Boolean,
    "technical_tokens": pl.List(pl.Utf8),
    "conversational": pl.Boolean,
    "route": pl.Utf8,
    "skip_lexical": pl.Boolean,
    "skip_expansion": pl.Boolean,
}

# Short all-caps words that are technical on their own (protocols, formats, tools). Ordinary acronyms
# ("I", "OK", "USA", "NASA", "LGBTQ") must not make a question technical, so all-caps words count only
# if listed here, if they are errno/signal names, or if they look like constants (see _keep).
# fmt: off
TECH_ACRONYMS = frozenset([
    "API", "APIS", "AWS", "CLI", "CORS", "CPU", "CSRF", "CSS", "CSV", "DNS", "GCP", "GPU", "GRPC", "HTML",
    "HTTP", "HTTPS", "IAM", "JSON", "JWT", "K8S", "LDAP", "NFS", "OOM", "PID", "RAM", "REST", "RPC", "S3",
    "SAML", "SDK", "SMTP", "SQL", "SSH", "SSL", "SSO", "TCP", "TLS", "TTL", "UDP", "URI", "URL", "UUID",
    "VPC", "VPN", "XML", "YAML",
])
# fmt: on
_FILE_EXT = (
    "py|pyi|ipynb|js|mjs|cjs|ts|tsx|jsx|json|jsonl|yaml|yml|toml|ini|cfg|conf|env|md|rst|txt|csv|tsv|parquet|"
    "sql|duckdb|db|sqlite|sh|bash|zsh|ps1|go|rs|java|kt|scala|c|cc|cpp|h|hpp|cs|rb|php|swift|lua|r|html|css|"
    "scss|xml|lock|log|tf|proto|gradle|pem|crt|key|whl|tar|gz|tgz|zip|dll|so|exe|pdf|docx|xlsx|"
    "patch|diff|m4|symbols|service|spec|cmake|mk"  # a distribution's files (user trial BT)
)
# A unit is a whole word: "3.11 security", "18.2 minimal" and "2.4 weekly" are versions (the units' prefixes hid them).
_UNITS = r"(?:(?:%|percent|hours?|hrs?|minutes?|mins?|seconds?|secs?|days?|weeks?|months?|years?|stars?|km|miles?|kg|lbs?|times|x|uhr)(?!\w))"
# A currency beside a number: "1.000 €", "12.500,00 EUR", "€ 2.500" are amounts written with European separators
# (on one line: "Python 3.11" ending a line before "$ pip install" is a version).
_MONEY = r"(?:€|£|eur\b|euros?\b|chf\b|usd\b|gbp\b)"
_NOT_AFTER_MONEY = r"(?<!€ )(?<!EUR )(?<!eur )(?<!CHF )(?<!USD )"
# A date written with dots ("26.11.2026", "3.5.2026"): day, month, a four-digit year.
_DOTTED_DATE = re.compile(r"^(?:0?[1-9]|[12]\d|3[01])\.(?:0?[1-9]|1[0-2])\.(?:19|20)\d\d$"
                          r"|^(?:0[1-9]|[12]\d|3[01])\.(?:0[1-9]|1[0-2])\.\d\d$")  # 03.05.26: two digits each

# A version's pre-release suffix: "-rc.1", "-beta", "-alpha.2", "-SNAPSHOT" (known words only: "2.14.3-compatible"
# is the version 2.14.3, and "2.14.3-2.15.0" or "v2.14.3-v2.15.0" are two versions).
_VERSION_SUFFIX = r"(?:-(?:alpha|beta|rc|pre|preview|dev|snapshot|nightly|final|ga|lts|post)\d*(?:\.[0-9A-Za-z]+)*\b)?"

# The words that name an issue or a pull request before its number (features' "reference" kind; guard._holds reads
# them in a document's text). "MR" only in capitals: "Mr 25" is a name.
REFERENCE_WORDS = r"issue|ticket|PR|bug|pull\s+request|merge\s+request"

# Words that join a versioned name as an English compound ("gcc-4.9-based", "3.11-compatible"), not as a platform.
_COMPOUND_SUFFIX = (r"(?:based|compatible|related|specific|only|style|like|free|aware|friendly|ready|enabled|dependent|"
                    r"powered|series|compliant|capable|safe|bit|era)")

# (kind, pattern). Longer/more specific patterns first: overlapping shorter matches are dropped.
_PATTERNS: list[tuple[str, re.Pattern[str]]] = [
    ("uuid", re.compile(r"\b[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}\b")),
    ("digest", re.compile(r"\b(?:md5|sha1|sha224|sha256|sha384|sha512):[0-9a-fA-F]{8,}\b", re.I)),
    # An IPv4 address with its port or CIDR mask, and host:port ("10.0.3.17:5432", "10.0.0.0/8",
    # "localhost:8080", "db.internal:5432"): the port or mask is part of what names the thing.
    (
        "address",
        re.compile(
            r"(?<![\w.])\d{1,3}(?:\.\d{1,3}){3}(?::\d{1,5}\b|/\d{1,2}\b)?(?![.\d])|(?<![\w.-])(?:[A-Za-z][\w-]*(?:\.[\w-]+)+|[A-Za-z][\w-]{2,}):(?:\d{3,5}|80|22|25|53)\b(?![.:]\d)"
        ),
    ),
    ("email", re.compile(r"(?<![\w.+-])[\w.+-]*\w@[\w-]+(?:\.[\w-]+)+\b")),  # mitya57@debian.org was two tokens
    (
        "url",
        re.compile(
            r"\b(?:https?|ftp)://[^\s\"'<>]+|\bwww\.[\w-]+\.[\w.-]+[^\s\"'<>]*|\b[\w-]+(?:\.[\w-]+)*\.(?:com|org|net|io|dev|ai|app)\b(?:/[^\s\"'<>]*)?"
        ),
    ),
    (
        "path",
        re.compile(
            r"(?<![\w/~.])(?:~|\.{1,2})/[\w.\-]+(?:/[\w.\-]+)*/?|(?<![\w/])/[\w.\-]+(?:/[\w.\-]+)+/?|\b[A-Za-z]:\\[\w.\\\-]+|\b[\w.\-]+(?:/[\w.\-]+){2,}"
        ),
    ),
    (
        "file",
        re.compile(
            rf"(?<![\w/])(?:[\w.\-]+/)*[\w\-]*\w\.(?:{_FILE_EXT})(?:\.\d+)*\b|(?<![\w/])\.(?:env|bashrc|zshrc|profile|gitignore|npmrc|dockerignore|editorconfig)\b",
            re.I,
        ),
    ),
    (
        "version",
        re.compile(
            rf"(?<![\w$€£.])v\d+(?:\.\d+)*\b{_VERSION_SUFFIX}"
            rf"|{_NOT_AFTER_MONEY}(?<![\w$€£.])\d+\.\d+(?:\.\d+)+\b(?![ \t]?{_MONEY})(?!,\d\d(?!\d)){_VERSION_SUFFIX}"
            rf"|{_NOT_AFTER_MONEY}(?<![\w$€£.])\d+\.\d+\b(?!\s*{_UNITS})(?!-\d+(?:\.\d+)?\s*{_UNITS})(?![ \t]?{_MONEY})(?!\.\d)(?!,\d\d(?!\d))"
            rf"|\b[A-Za-z]+\d+(?:\.\d+)+\b",
            re.I,
        ),
    ),
    # A Debian or RPM package version: upstream, revision, epoch ("2.5.5-5", "1:9.2p1-2+deb12u2", "2.36-9+deb12u4",
    # "1.2.3-1ubuntu0.1"; user trial BT: cut to "2.5.5", or to "2p1" and "deb12u2", so the guard let the only
    # changelog entry naming the version fall from BM25 #1 to rank 8). The revision is a whole number, dotted only
    # before a + or ~ ("4.1~deb12u1"): "2.14.3-2.15.0" and "3.9-3.11" stay two versions, "1.5-2 hours" none.
    (
        "version",
        re.compile(
            rf"{_NOT_AFTER_MONEY}(?<![\w$€£.:+~-])(?:\d+:)?(?:\d+(?:\.\d+)+(?:[a-z]+\d*)?(?:[+~][0-9a-z.]+)?|\d+[+~][0-9a-z.]+)"
            rf"-\d+(?:(?:\.\d+)+(?=[+~]))?(?:[a-z]+[0-9a-z.]*)?(?:[+~][0-9a-z.+~]*)?(?!\.?\d)(?!\w)(?!\s*{_UNITS})",
            re.I,
        ),
    ),
    # A name and its version joined by a hyphen ("gcc-4.9", "automake-1.14", "OpenSSL-1.1.1b", "gnome-shell-42.1"): cut
    # at the dot, "gcc-4" and "4.9" were found in no document that writes the whole (user trial BT).
    # A platform after it stays on ("ubuntu-24.04-arm", "python-3.11-slim-bookworm", "node-18.2-alpine3.18"; user trial
    # BW: cut, the query's own token was not found in the text it came from); a compound word does not ("gcc-4.9-based").
    ("version", re.compile(r"(?<![\w.-])[A-Za-z][\w+]*(?:-[A-Za-z][\w+]*)*-v?\d+(?:\.\d+)+(?:[a-z]+\d*)?"
                           rf"(?:-(?!{_COMPOUND_SUFFIX}(?![\w.]))[a-z][a-z\d]*(?:\.\d+)*)*\b(?!\.\d)")),
    ("code", re.compile(r"\b[A-Za-z]+\d*(?:-[A-Za-z\d]+)+\b")),
    # An issue, pull request or bug named with its word ("PR #24375", "issue 16075", "pull request 17125", "PR#24375"):
    # the token is the reference as the fixing commit or changelog writes it, "#24375" (`technical_tokens` rewrites it).
    # Kept whole ("PR #24375"), the guard never fired: commits write "(#24375)" or "Fixes #16075" (user trial BW). Not
    # a plural ("tickets 45 minutes"), "Mr"/"Mrs", a date, range or amount ("bug 2023-10-12", "ticket 45 minutes").
    ("reference", re.compile(rf"\b(?:(?i:{REFERENCE_WORDS})|MR)\s*#?\s*(?P<n>\d{{2,}})"
                             rf"(?![\w%]|[-./:,]\d|\s*{_UNITS})")),
    # A reference to an issue or merge request of a named project ("GH#56", "dbus!403", "freedesktop/freedesktop#540",
    # "PKCS#12"): nothing was found in them (user trial BT).
    ("ref", re.compile(r"(?<![\w/.#!-])[A-Za-z][\w.-]*(?:/[\w.-]+)?[#!]\d+\b")),
    (
        "status",
        re.compile(
            r"\b(?:HTTP|HTTPS|status|error|err|errno|code|port|exit|signal|pid|build)\s*#?\s*\d{2,}\b",
            re.I,
        ),
    ),
    # A flag with its value ("--max-old-space-size=4096": the value is what differs between two runbooks).
    ("flag", re.compile(r"(?<![\w-])--[a-z][\w-]+(?:=[^\s\"'`,;]+)?")),
    ("call", re.compile(r"\b[A-Za-z_][\w.]*\(\)")),
    # Environment variables ($HOME, ${PATH}, %APPDATA%), scoped packages (@acme/retry), issue numbers (#4521),
    # Rust/C++ paths (foo::bar::Baz).
    ("envvar", re.compile(r"(?<![\w$])\$\{?[A-Za-z_][A-Za-z0-9_]+\}?|(?<![\w%])%[A-Za-z_][A-Za-z0-9_]+%(?!\w)")),
    ("package", re.compile(r"(?<![\w@])@[\w-]+/[\w.-]*\w")),
    ("issue", re.compile(r"(?<![\w#&])#\d{2,}\b")),
    ("scope", re.compile(r"\b[A-Za-z_]\w*(?:::[A-Za-z_]\w*)+\b")),
    # Dotted names (os.path.join, java.lang.NullPointerException, pool.max_connections); not abbreviations
    # ("e.g.", "i.e.", "U.S."): at least two parts of two or more characters.
    ("dotted", re.compile(r"\b[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)+\b")),
    ("snake", re.compile(r"\b[A-Za-z][A-Za-z0-9]*(?:_[A-Za-z0-9]+)+\b|\b_+[A-Za-z]\w*")),  # and __init__, __clsl
    ("camel", re.compile(r"\b[a-z]+[A-Z][A-Za-z0-9]*\b")),
    # PascalCase with an inner capital (PostgreSQL, TypeError); not Mc/Mac names (McDonald, MacArthur).
    ("pascal", re.compile(r"\b(?!Mc[A-Z][a-z]+\b)(?!Mac[A-Z][a-z]+\b)[A-Z][a-z0-9]+[A-Z][A-Za-z0-9]*\b")),
    # PascalCase that starts with an acronym (HTTPError, OOMKilled, JSONDecodeError, XMLHttpRequest, DBus); two
    # lower-case letters at least and not a plural ending (_keep), so "URLs", "CEOs", "OSes" are not one.
    ("acronym_pascal", re.compile(r"\b[A-Z]{2,}[a-z]{2,}[A-Za-z0-9]*\b")),
    ("alnum", re.compile(r"\b(?=[A-Za-z]*\d)(?=\d*[A-Za-z])[A-Za-z\d]{2,}\b")),
    ("caps", re.compile(r"\b[A-Z][A-Z0-9]{1,}\b")),
    # errno and signal names typed in lower case (econnrefused, sigterm): see _keep.
    ("system", re.compile(r"\b[a-z]{5,}\b")),
]
# Letters+digits words that are ordinary English: ordinals, decades, times, quantities ("2nd", "1990s", "5pm").
_ORDINARY_ALNUM = re.compile(
    r"^\d+(?:st|nd|rd|th|s|am|pm|d|k|m|km|kg|lb|lbs|h|hr|hrs|min|mins|yo|x)$|^[a-z]\d$", re.I
)
_CAPS_TECH = re.compile(r"^(?:[A-Z]{8,}|[A-Z]+\d[A-Z\d]*)$")
# errno and signal names from the standard library (ENOENT, ECONNREFUSED, SIGTERM, ...).
SYSTEM_NAMES = frozenset(errno.errorcode.values()) | frozenset(s.name for s in signal.Signals)
# Hyphenated words with digits that are ordinary English ("mid-2020", "covid-19", "top-10").
_ORDINARY_PREFIX = frozenset(["mid", "pre", "post", "late", "early", "circa", "covid", "top", "over", "under", "age", "class", "grade", "size"])  # fmt: skip
# Legal forms of companies with an inner capital, in every business text: not identifiers.
_LEGAL_FORMS = frozenset(["GmbH", "gGmbH", "mbH", "SpA", "SrL"])
# A word for the stopword share: letters of any script and digits ("Straße", "¿Cómo" are one word each).
_TOKEN = re.compile(r"[^\W_]+(?:['’][^\W_]+)?")


def shouted(text: str) -> bool:
    """Whether `text` is written mostly in capitals, function words included ("PRODUCTION DATABASE IS DOWN"):
    then a long all-caps word is an ordinary word typed in capitals, not a constant (see `_keep`). Two constants
    alone ("NXDOMAIN SERVFAIL") are not shouting; three capitals words, or capitals with a stopword, are.
    (errno and signal names count whatever the case.)"""
    words = _CAPS_WORD.findall(text[:TECHNICAL_MAX_CHARS])
    caps = [w for w in words if w.isupper()]
    stop = english_stop_words()
    return len(caps) >= 2 and len(caps) >= 0.6 * len(words) and (len(caps) >= 3 or any(w.lower() in stop for w in caps))


_CAPS_WORD = re.compile(r"\b[A-Za-z]{2,}\b")
_CAPITALISED = re.compile(r"^[A-Z][a-z]+$")
_HONORIFICS = frozenset(["mr", "mrs", "ms", "dr", "st", "jr", "sr", "prof", "mt", "ft", "no", "vol", "fig", "gen", "gov", "sen", "rep"])
_ACRONYM_PLURAL = re.compile(r"^[A-Z]{2,}(?:e?s|ies)$")
_FILE_LINE = re.compile(rf"^[\w.\-]*\w\.(?:{_FILE_EXT}):\d+$", re.I)


def _keep(kind: str, tok: str, shouting: bool = False) -> bool:
    if kind == "alnum":
        return not _ORDINARY_ALNUM.match(tok)
    if kind == "caps":
        # All caps counts if it is a known technical acronym or looks like an errno/signal name
        # (ECONNREFUSED, ENOENT, SIGTERM), a long constant (NXDOMAIN), or carries digits (S3, K8S). In a
        # query typed in capitals a long all-caps word is just a word (PRODUCTION, DATABASE).
        if tok in TECH_ACRONYMS or tok in SYSTEM_NAMES:
            return True
        return bool(_CAPS_TECH.match(tok)) and not (shouting and tok.isalpha())
    if kind == "system":
        return tok.upper() in SYSTEM_NAMES
    if kind == "dotted":
        # Not abbreviations (e.g., U.S.), an honorific before a name ("Mr.Smith", "St.Louis"), nor a word, a full
        # stop and the next sentence without the space ("crashed.Then"); React.Component, System.Text are names.
        parts = tok.split(".")
        if sum(len(part) >= 2 for part in parts) < 2:
            return False
        if len(parts) == 2 and _CAPITALISED.match(parts[1]):
            return parts[0].lower() not in _HONORIFICS and not parts[0].islower()
        return True
    if kind == "address":
        return not _FILE_LINE.match(tok)  # config.yaml:12 is a file and a line: the file is the identifier
    if kind == "acronym_pascal":  # not a plural of an acronym ("OSes", "IDEs", "CPUs"); DBus, OOMKilled are names
        m = _ACRONYM_PLURAL.match(tok)
        return tok.upper() not in TECH_ACRONYMS and m is None
    if kind == "code":
        # A code carries letters and digits (PG-40001, CVE-2017-3156, utf-8), and is not an ordinary
        # hyphenated word ("mid-2020", "COVID-19", "3-year-old" never matches: codes start with letters).
        return any(c.isdigit() for c in tok) and tok.split("-")[0].lower() not in _ORDINARY_PREFIX
    if kind == "path":
        return any(c.isalpha() for c in tok)  # "05/08/2023" is a date
    if kind == "version":  # "26.11.2026" is a date; "pre-1.2", "mid-2.5" are a word and a version
        return not _DOTTED_DATE.match(tok) and tok.split("-")[0].lower() not in _ORDINARY_PREFIX
    if kind == "file":
        # Not a one-letter abbreviation chain ("d.h.", "i.d.R.", "z.B." in German): a one-letter name with a
        # one-letter extension. "a.py" and "x.rs" stay files.
        name, _, ext = tok.rpartition(".")
        return not (len(name.lstrip("-")) == 1 and len(ext) == 1)
    if kind in ("pascal", "camel"):
        return tok not in _LEGAL_FORMS
    return True


# Longest text analysed for technical tokens: a query is analysed in windows of `analysis.WINDOW`
# characters (cut at whitespace) up to this length, and the rest is not looked at. The patterns retry from
# every start position inside a long run of characters ("a-a-a-..."), so one scan of 20,000 characters took
# 15 s; windows make the time linear and the cap bounds it.
TECHNICAL_MAX_CHARS = 10_000


def technical_tokens(text: str) -> list[str]:
    """The technical tokens of `text` in order of appearance (identifiers, codes, versions, files, URLs, paths).

    Bounded time: text longer than `analysis.WINDOW` (1,000) characters is scanned in windows of that size
    cut at whitespace, and only its first `TECHNICAL_MAX_CHARS` (10,000) characters are looked at. Up to
    1,000 characters the result is that of one scan over the whole text; beyond, a token that needs text
    across a window cut (a version followed by a unit word, "error 404" with the number in the next window)
    or that is longer than a window can come out differently, and tokens past the cap are not found."""
    pieces = windows(text[:TECHNICAL_MAX_CHARS])
    shouting = shouted(text)
    spans: list[tuple[int, int, str]] = []
    for kind, pat in _PATTERNS:
        for m, off in ((m, off) for off, piece in pieces for m in pat.finditer(piece)):
            s, e = m.span()
            s, e = s + off, e + off
            tok = m.group(0).rstrip(".,;:!?")
            if tok.endswith(")") and tok.count("(") < tok.count(")"):
                tok = tok.rstrip(")")  # "(see config.py)" - a closing parenthesis of the sentence
            e = s + len(tok)
            if kind == "reference":
                tok = "#" + m.group("n")
            if not tok or not _keep(kind, tok, shouting):
                continue
            if any(s >= a and e <= b for a, b, _ in spans):
                continue  # inside a longer match already kept
            spans = [(a, b, t) for a, b, t in spans if not (a >= s and b <= e)]
            spans.append((s, e, tok))
    return list(dict.fromkeys(t for _, _, t in sorted(spans)))


def _tokens(text: str) -> list[str]:
    return [t.lower() for t in _TOKEN.findall(text)]


@functools.cache
def english_stop_words() -> frozenset[str]:
    """scikit-learn's English stop-word list, read from its module file without importing scikit-learn:
    `import sklearn` pulls scipy.stats and pandas (about 2 s of a cold `hrt search` that needs one frozenset)."""
    spec = importlib.util.find_spec("sklearn")
    path = Path(spec.origin).parent / "feature_extraction" / "_stop_words.py" if spec and spec.origin else None
    if path is None or not path.exists():  # another layout: the public import, slower but the same list
        from sklearn.feature_extraction.text import ENGLISH_STOP_WORDS

        return frozenset(ENGLISH_STOP_WORDS)
    mod_spec = importlib.util.spec_from_file_location("_hrt_sklearn_stop_words", path)
    mod = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(mod)
    return frozenset(mod.ENGLISH_STOP_WORDS)


def _is_stopword(tok: str) -> bool:
    # scikit-learn's list has no contractions: "what's"/"i'm" count by their base, negated auxiliaries
    # ("didn't", "doesn't") are function words too.
    stop = english_stop_words()
    if tok in stop:
        return True
    base, sep, suffix = tok.replace("’", "'").partition("'")
    return bool(sep) and (base in stop or (suffix == "t" and base.endswith("n")))


def _text_features(text: str) -> dict:
    toks = _tokens(text or "")
    n = len(toks)
    stop = sum(_is_stopword(t) for t in toks)
    tech = technical_tokens(text or "")
    return {"n_tokens": n, "stopword_ratio": stop / n if n else 0.0, "technical_tokens": tech}


def query_features(queries: pl.DataFrame, routing: RoutingConfig) -> pl.DataFrame:
    """Features [qid, n_tokens, stopword_ratio, technical, technical_tokens, conversational, route,
    skip_lexical, skip_expansion], one row per query.

    Conversational = no technical token, at least `conversational_min_tokens` tokens and a stopword ratio
    of at least `conversational_stopword_ratio`. Route is technical > conversational > default. The
    policy columns (skip_*) are False unless `routing.enabled`. The technical-query lexical boost is not
    here: fusion applies it to the `technical` flag (`fusion.list_weights`), so it stays a live setting.
    """
    if not len(queries):
        return pl.DataFrame(schema=FEATURE_SCHEMA)
    # Regex work per query string: runs once per query set in `prepare`, not on slider changes.
    rows = [_text_features(t) for t in queries["text"].to_list()]
    f = pl.DataFrame(
        {
            "qid": queries["qid"].cast(pl.Utf8),
            "n_tokens": [r["n_tokens"] for r in rows],
            "stopword_ratio": [r["stopword_ratio"] for r in rows],
            "technical_tokens": [r["technical_tokens"] for r in rows],
        },
        schema={
            "qid": pl.Utf8,
            "n_tokens": pl.Int64,
            "stopword_ratio": pl.Float64,
            "technical_tokens": pl.List(pl.Utf8),
        },
    )
    on = routing.enabled
    technical = pl.col("technical_tokens").list.len() > 0
    conversational = (
        ~technical
        & (pl.col("n_tokens") >= routing.conversational_min_tokens)
        & (pl.col("stopword_ratio") >= routing.conversational_stopword_ratio)
    )
    f = f.with_columns(technical.alias("technical"), conversational.alias("conversational"))
    return f.with_columns(
        pl.when(pl.col("technical"))
        .then(pl.lit("technical"))
        .when(pl.col("conversational"))
        .then(pl.lit("conversational"))
        .otherwise(pl.lit("default"))
        .alias("route"),
        (pl.col("conversational") & on & routing.conversational_skip_lexical).alias("skip_lexical"),
        (pl.col("conversational") & on & routing.conversational_skip_expansion).alias("skip_expansion"),
    ).select(list(FEATURE_SCHEMA))


def strong_signal(lex_candidates: pl.DataFrame, expansion: ExpansionConfig) -> pl.DataFrame:
    """[qid, strong_signal, top_norm, gap] from each query's original-query BM25 list (QMD's skip test).

    Scores are mapped x -> |x|/(1+|x|) so the thresholds do not depend on corpus size; gap = top minus
    second (the whole top score when there is one hit). Only queries with an original lexical list
    appear; whether to act on the flag is the caller's (`expansion.strong_signal_skip`).
    """
    c = lex_candidates
    if "list_id" in c.columns:
        c = c.filter(pl.col("list_id") == "orig:lex")
    else:
        c = c.filter((pl.col("variant") == "orig") & (pl.col("retriever") == "lex"))
    norm = pl.col("score").abs() / (1 + pl.col("score").abs())
    top2 = (
        c.select("qid", "rank", norm.alias("norm"))
        .sort(["qid", "rank"])
        .group_by("qid", maintain_order=True)
        .agg(
            pl.col("norm").first().alias("top_norm"),
            pl.col("norm").get(1, null_on_oob=True).fill_null(0.0).alias("second"),
        )
    )
    return top2.select(
        pl.col("qid").cast(pl.Utf8),
        (
            (pl.col("top_norm") >= expansion.strong_signal_min)
            & (pl.col("top_norm") - pl.col("second") >= expansion.strong_signal_gap)
        ).alias("strong_signal"),
        pl.col("top_norm").cast(pl.Float64),
        (pl.col("top_norm") - pl.col("second")).cast(pl.Float64).alias("gap"),
    )
