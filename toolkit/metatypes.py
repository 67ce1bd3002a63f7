"""Typed metadata values: dates and numbers read once at ingest, so stages compare them vectorised.

Metadata stays a JSON object on each document; in addition, every top-level scalar value becomes one row
[field, num, ts, text] that the store keeps as typed columns (`doc_values`: DOUBLE, TIMESTAMP, VARCHAR).

- **Dates.** A field is a date field when its name is `date`, `datetime`, `timestamp`, `created`, `updated`
  or `modified`, or ends in `_at`, `_date` or `_time` (case-insensitive; `created_at`, `session_date`). Its
  value must be ISO 8601 (either case: `2024-01-25t09:30z`), one of `DATE_FORMATS`, an RFC 2822 date as
  e-mail and HTTP headers write it (`Tue, 24 Nov 2026 10:00:00 +0100`), or seconds since 1970-01-01 UTC (a
  number, or a string of 9 to 11 digits); anything else is an error naming the file, line and field, because a
  date that silently reads as "missing" makes the recency prior neutral without anyone noticing. Times with a
  zone are converted to UTC; times without one are taken as UTC.
- **Numbers.** A JSON number (not a boolean) in any field is kept in `num` (an access count, a priority).
- **Text.** Every scalar is also kept as text (numbers without a trailing `.0`), for mappings such as
  the priority prior's `{"P0": 4, "P1": 3}`.

Hand-written rather than `dateutil.parser`: a fuzzy parser reads "May" or "12" as a date; one closed list
of formats, documented here, is what lets a bad value be an error instead of a guess.
"""

from __future__ import annotations

import json
import math
import re
import warnings
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any

import polars as pl

from .errors import InputError

# Tried in order after ISO 8601 (`datetime.fromisoformat`: 2024-01-25, 2024-01-25T09:30, 2024-01-25 09:30:00Z,
# 2024-01-25T09:30:00+02:00). Month names in English, any case.
DATE_FORMATS: tuple[str, ...] = (
    "%Y/%m/%d",
    "%Y/%m/%d %H:%M",
    "%Y/%m/%d %H:%M:%S",
    "%d %B %Y",  # 8 May 2023
    "%d %b %Y",  # 8 May 2023 / 8 Sep 2023
    "%d %B, %Y",  # 8 May, 2023
    "%d %b, %Y",
    "%B %d, %Y",  # May 8, 2023
    "%b %d, %Y",
    "%B %d %Y",
    "%b %d %Y",
    "%I:%M %p on %d %B, %Y",  # LoCoMo session times: 1:56 pm on 8 May, 2023
    "%I:%M %p on %d %b, %Y",
    "%Y/%m/%d (%a) %H:%M",  # LongMemEval session dates: 2023/05/20 (Sat) 02:21
)
_EPOCH_TEXT = re.compile(r"^-?\d{9,11}(?:\.\d+)?$")
_EPOCH_MIN, _EPOCH_MAX = 1e8, 1e11  # the same 9 to 11 digits for a number
# RFC 2822 (e-mail, HTTP): an optional weekday, then day, English month, year, time and zone.
_RFC2822 = re.compile(r"^(?:[A-Za-z]{3},\s*)?\d{1,2}\s+[A-Za-z]{3}\s+\d{4}\s+\d{1,2}:\d{2}")
DATE_FIELD = re.compile(r"^(date|datetime|timestamp|created|updated|modified)$|(_at|_date|_time)$", re.I)
VALUES_SCHEMA = {"field": pl.Utf8, "num": pl.Float64, "ts": pl.Datetime("us"), "text": pl.Utf8}


def is_date_field(name: str) -> bool:
    return bool(DATE_FIELD.search(name))


def parse_date(value: Any) -> datetime | None:
    """A naive UTC datetime, or None when `value` is none of the accepted forms."""
    if isinstance(value, bool):
        return None
    if isinstance(value, int | float):
        # Seconds since 1970 as a number of 9 to 11 digits, as for text (1973 to 5138): 45622 (a spreadsheet's serial
        # day) or 2024 (a year) read as seconds was a date in January 1970, silently (user trial AT).
        if not math.isfinite(value) or not _EPOCH_MIN <= abs(value) < _EPOCH_MAX:
            return None
        try:
            return datetime.fromtimestamp(float(value), UTC).replace(tzinfo=None)
        except (ValueError, OverflowError, OSError):
            return None
    if not isinstance(value, str) or not value.strip():
        return None
    s = value.strip()
    if _EPOCH_TEXT.match(s):  # "1764000000": seconds as text, as some exporters write numbers
        return parse_date(float(s))
    d = None
    for text in (s, s.upper()):  # ISO 8601 allows a lower-case t and z
        try:
            d = datetime.fromisoformat(text)
            break
        except ValueError:
            continue
    for fmt in DATE_FORMATS if d is None else ():
        try:
            d = datetime.strptime(s, fmt)
            break
        except ValueError:
            continue
    if d is None and _RFC2822.match(s):
        try:
            d = parsedate_to_datetime(s)
        except (TypeError, ValueError):
            d = None
        if d is not None and d.tzinfo is None and re.search(r"[A-Za-z]\s*$", s):
            d = None  # a zone name the standard does not define (CET, XYZ) would silently read as UTC
    if d is None:
        return None
    try:
        return d.astimezone(UTC).replace(tzinfo=None) if d.tzinfo is not None else d
    except (ValueError, OverflowError):  # 0001-01-01T00:00+01:00 is before year 1 in UTC
        return None


def _text(v: Any) -> str:
    if isinstance(v, float) and v.is_integer():
        return str(int(v))
    return v if isinstance(v, str) else json.dumps(v)


def typed_values(
    meta: dict[str, Any] | None, where: str, *, strict: bool = True, label: str = "metadata.{}"
) -> list[tuple[str, float | None, datetime | None, str]]:
    """(field, num, ts, text) for each top-level scalar of `meta`. `strict`: an unparseable value in a date
    field raises `InputError` naming `where` and the field; otherwise it is kept as text only (used when an
    old store is migrated, so that it still opens). `label` names the field in that error as the user wrote
    it (a flat record's `created_at` is a top-level field, not `metadata.created_at`)."""
    out = []
    for k, v in (meta or {}).items():
        if v is None or isinstance(v, dict | list):
            continue
        num = float(v) if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v) else None
        ts = None
        if is_date_field(k):
            ts = parse_date(v)
            if ts is None and num is not None and abs(num) < _EPOCH_MIN:
                # Too few digits to be seconds since 1970: a duration (`response_time: 0.35`), a year, a spreadsheet's day
                # number. Once read as a date in January 1970 (recency x0.00); refused, it stopped ingests that had
                # loaded (the review): kept as a number, not a date, said once per field.
                serial = " (a spreadsheet's serial day number? export the column as dates, e.g. 2024-11-26)" if (
                    10_000 <= num < 100_000) else ""
                warnings.warn(f"{label.format(k)}: a number of fewer than 9 digits is not read as a date (seconds since "
                              f"1970 have 9 to 11){serial}; kept as a number, which no recency prior reads",
                              UserWarning, stacklevel=2)
                out.append((str(k), num, None, _text(v)))
                continue
            if ts is None and strict:
                digits = str(v).strip().lstrip("-").split(".")[0]
                ms = (isinstance(v, int | float) and not isinstance(v, bool) and 1e11 < abs(v) < 1e14) or (
                    isinstance(v, str) and digits.isdigit() and 12 <= len(digits) <= 14)
                hint = " (it looks like milliseconds since 1970, e.g. JavaScript's Date.now(): divide by 1000)" if ms else ""
                raise InputError(
                    f"{where}: {label.format(k)}: cannot read {v!r} as a date{hint}; accepted: ISO 8601 (2024-01-25, "
                    f"2024-01-25T09:30:00Z), RFC 2822 (Tue, 24 Nov 2026 10:00:00 +0100), seconds since 1970 (a number or "
                    f"a string of 9 to 11 digits), or one of {', '.join(DATE_FORMATS)} "
                    "(a field named date/…_at/…_date/…_time is read as a date: rename it if it is not one)"
                )
            num = None  # a date's number is its timestamp, not a count
        out.append((str(k), num, ts, _text(v)))
    return out


def values_frame(rows: list[tuple[Any, ...]], key: str) -> pl.DataFrame:
    """[key, field, num, ts, text] from (key, field, num, ts, text) tuples."""
    schema = {key: pl.Utf8, **VALUES_SCHEMA}
    return pl.DataFrame(rows, schema=schema, orient="row") if rows else pl.DataFrame(schema=schema)


def query_values(queries: pl.DataFrame) -> pl.DataFrame:
    """[qid, field, num, ts, text] of the queries' metadata (JSON strings); a bad date names the query."""
    if "metadata" not in queries.columns:
        return values_frame([], "qid")
    rows = []
    for qid, meta in zip(queries["qid"].to_list(), queries["metadata"].to_list(), strict=True):
        if not meta:
            continue
        try:
            m = json.loads(meta) if isinstance(meta, str) else meta
        except json.JSONDecodeError as e:
            raise InputError(f"query {qid!r}: metadata is not valid JSON ({e.msg})") from None
        if isinstance(m, dict):
            rows += [(str(qid), *v) for v in typed_values(m, f"query {qid!r}")]
    return values_frame(rows, "qid")
