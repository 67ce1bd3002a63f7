"""Ids that almost meet: an id a file names that the collection lacks, told apart from one it has by case, Unicode
normalisation, spaces or a byte order mark only. Files made on other systems differ so (macOS writes é as e plus a
combining accent, Excel keeps a byte order mark, an id padded with a no-break space), and the two ids then print
alike in every warning: the warning must say what differs (user trial AT)."""

from __future__ import annotations

import unicodedata
from collections.abc import Iterable


def _key(s: str) -> str:
    return unicodedata.normalize("NFC", s.replace("\ufeff", "").replace("\xa0", " ")).strip().casefold()


def _why(unknown: str, known: str) -> str:
    if unicodedata.normalize("NFC", unknown) == unicodedata.normalize("NFC", known):
        return "Unicode normalisation (one is NFD, as macOS writes names: save the file as NFC)"
    if "\ufeff" in unknown or "\ufeff" in known:
        return "a byte order mark"
    if unknown.casefold() == known.casefold():
        return "case"
    return "spaces, case or normalisation"


def near_miss(unknown: Iterable[str], known: Iterable[str], limit: int = 1000) -> str:
    """"; 'café-01' differs from 'café-01' only by Unicode normalisation (...)" for the first of `unknown` (looked at
    up to `limit`) that meets one of `known` once both are folded, else ""."""
    wanted = {}
    for i, u in enumerate(unknown):
        if i >= limit:
            break
        wanted.setdefault(_key(u), u)
    if not wanted:
        return ""
    for k in known:
        u = wanted.get(_key(k))
        if u is not None and u != k:
            return f"; {u!r} differs from {k!r} only by {_why(u, k)}"
    return ""
