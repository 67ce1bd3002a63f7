"""Read corpora and query sets: BEIR directories, JSONL, Parquet, and folders of text files.

Every error names the file and, for line-oriented formats, the line. Documents come out as plain dicts
(`doc_id, source, scope, title, text, metadata`) so the store can hash and validate them in one place.

Ingest tells the truth about what it leaves out: `load_corpus` returns a `Corpus` (a list of documents)
whose `skipped` names every file or record not indexed and why (not a text file, an empty document).
Skipping is for things that are not documents; malformed input (bad JSON, undecodable bytes in a text
file, a field of the wrong type) is still an error naming the file and line, raised before the store is
touched.

Documents given in Python (a list of dicts, a polars or pandas frame) go through the same record reader as
a JSONL line (`load_corpus` accepts them, and `Store.ingest` sends anything but a `Corpus` there), so a
missing optional field gets the same default and a missing id or text the same error, naming the record.

A record (JSONL line, Parquet or frame row, dict) is read as:

- id: `_id`, `id`, `doc_id` or `docno` (the first present), a string or an integer; text: `text`, else `contents`
  (or the field named by `text_field`), a string; `title`: a string; `source`, `scope`: a string or an
  integer, else taken from `metadata` (source defaults to the id); `vector`: a precomputed embedding.
- metadata: the `metadata` object (or JSON text) plus every other top-level field, so a flat record
  `{"id": "m1", "text": "...", "created_at": "2024-01-25", "priority": "P0"}` keeps `created_at` and
  `priority` as metadata: exported memories are mostly flat, and dropping those fields turned the
  recency and priority priors quietly neutral. A field given both at the top level and in `metadata` with
  different values is an error; null fields are left out (a frame's missing value). Values are checked as
  any metadata is (`toolkit.metatypes`: a date field must read as a date); dates and numbers from a frame
  are stored as JSON (a date as ISO 8601 text).
- a field of the wrong type is an error naming the record and the field, never turned into text (a list
  id stored as "['x']" can be found by no one).
- an engine's export is read through its wrapper (`NESTED_FIELDS`): an Elasticsearch/OpenSearch hit's `_source`
  with its `_id`, a Weaviate object's `properties` with its `id` and `vector`.
"""

from __future__ import annotations

import fnmatch
import functools
import glob
import json
import logging
import math
import mimetypes
import numbers
import os
import re
import sys
import unicodedata
from collections.abc import Iterable, Iterator, Mapping
from contextlib import suppress
from dataclasses import dataclass
from datetime import date, time
from decimal import Decimal
from pathlib import Path
from typing import Any

import polars as pl

from .errors import InputError
from .files import utf16_text
from .ids import near_miss
from .interop import named_index_as_columns
from .markup_text import drop_mdx_imports, front_matter, html_text, markdown_title, plain_value, rst_title
from .metatypes import is_date_field, parse_date, typed_values

TEXT_SUFFIXES = {".md", ".markdown", ".mdx", ".txt", ".rst", ".text"}  # .mdx: Docusaurus pages (trial BG)
# File types by name from Python's own table only, never the host's /etc/mime.types (which made .go or .yaml
# indexed on one machine and skipped on another): it names known binary formats (image/png, gzip) in a skip
# reason and tells README.Debian (read by content) from a file type (see `_folder_docs`).
_mime = functools.cache(mimetypes.MimeTypes)  # Python's defaults only: the host's files fill the module-level table
# application/* types in that table that are text: any other extension of theirs is "not indexed by default".
TEXT_APPLICATION_TYPES = frozenset({
    "application/javascript", "application/json", "application/manifest+json", "application/n-quads",
    "application/n-triples", "application/trig", "application/xml", "application/x-csh", "application/x-latex",
    "application/x-sh", "application/x-tcl", "application/x-tex", "application/x-texinfo", "application/x-troff",
    "application/x-troff-man", "application/x-troff-me", "application/x-troff-ms",
})
# A file read as text above this size gets a note before anything is embedded (a 20 MB log became 24k of an
# ingest's 26k chunks, and most of its time, without a word).
LARGE_FILE_BYTES = 5 * 1024 * 1024
# Bytes read to decide whether a file without an extension (README, NEWS, CHANGES, LICENSE) is text.
SNIFF_BYTES = 8192
BOM = b"\xef\xbb\xbf"  # a UTF-8 byte-order mark (Windows editors write one): dropped, not read as text


# The reason of a file or folder this user may not read: an ingest with --prune refuses to run beside one (`Store`).
UNREADABLE = "cannot be read (permission denied)"


@dataclass(frozen=True)
class Skipped:
    """A file or record that was not indexed: where it is and why."""

    where: str
    reason: str
    # The hidden or excluded folder it was left out with (`hrt ingest -v` names the folder once), else None.
    folder: str | None = None


class Corpus(list[dict[str, Any]]):
    """The documents of a corpus (a plain list of dicts) plus `skipped`: what was left out, and why."""

    def __init__(self, docs: list[dict[str, Any]] = (), skipped: list[Skipped] | None = None) -> None:
        super().__init__(docs)
        # Kept by reference: the folder reader fills it while `_check_unique` consumes its documents.
        self.skipped: list[Skipped] = skipped if skipped is not None else []

    def __repr__(self) -> str:
        """A count, not the documents (a notebook printed 187,040 characters of a 316-document corpus, user trial AV)."""
        first = f", first {self[0].get('doc_id')!r}" if self else ""
        return f"Corpus({len(self)} documents{first}; {self.skipped_summary() or 'nothing skipped'})"

    def skipped_summary(self) -> str:
        """'3 not indexed: 2 empty document, 1 binary content' (empty string when nothing was skipped)."""
        if not self.skipped:
            return ""
        by: dict[str, int] = {}
        for s in self.skipped:
            key = s.reason.split(" (")[0]
            by[key] = by.get(key, 0) + 1
        return f"{len(self.skipped)} not indexed: " + ", ".join(f"{n} {r}" for r, n in sorted(by.items()))


def _read_jsonl(path: Path) -> Iterator[tuple[int, dict[str, Any]]]:
    """(line number, object) for each non-blank line; bad UTF-8 or JSON names the file and line."""
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            if lineno == 1 and raw.startswith(BOM):
                raw = raw[len(BOM) :]
            try:
                line = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                utf16 = " (UTF-16?)" if lineno == 1 and utf16_text(raw) else ""
                raise InputError(f"{path}:{lineno}: not valid UTF-8{utf16} (byte {e.start}); re-encode the file as UTF-8") from e
            if not line.strip():
                continue
            try:
                obj = json.loads(line, parse_constant=_no_constant)
            except _NotJson as e:
                raise InputError(f"{path}:{lineno}: {e} is not JSON (Python's json writes it for a float that is not "
                                 "a number): write null, a number or a string") from None
            except json.JSONDecodeError as e:
                # Lines ended by a lone CR (classic Mac) are one line here: say so, or "Extra data" is all one reads.
                cr = "; its lines end with a lone CR (classic Mac): save the file with LF line ends" if "\r" in line.rstrip(
                    "\r\n") and e.msg.startswith("Extra data") else ""
                raise InputError(f"{path}:{lineno}: malformed JSON ({e.msg.removesuffix(' at')} at column {e.colno}){cr}") from e
            except RecursionError:  # thousands of nested brackets: the decoder runs out of stack
                raise InputError(f"{path}:{lineno}: metadata nested too deeply (more than {MAX_METADATA_DEPTH} "
                                 "levels of lists or objects)") from None
            if not isinstance(obj, dict):
                raise InputError(f"{path}:{lineno}: expected a JSON object, got {type(obj).__name__}")
            if "\\ud" in line.lower() and (field := _lone_surrogate(obj)) is not None:
                raise InputError(f"{path}:{lineno}: field `{field}` holds a lone UTF-16 surrogate (a \\ud800-\\udfff "
                                 "escape without its pair: a string cut in the middle of an emoji): it is not text")
            yield lineno, obj


class _NotJson(ValueError):
    pass


def _no_constant(name: str) -> Any:
    """NaN, Infinity and -Infinity are not JSON: stored as metadata they became null without a word (user trial AI)."""
    raise _NotJson(name)


_SURROGATE = re.compile("[\ud800-\udfff]")


def _lone_surrogate(value: Any, name: str = "") -> str | None:
    """The field holding a lone surrogate (JSON decodes `"\\ud800"` to one; it cannot be written as UTF-8, so
    the ingest failed later with a traceback), or None. An ASCII string is skipped at no cost (`isascii`)."""
    if isinstance(value, str):
        return name or "(record)" if not value.isascii() and _SURROGATE.search(value) else None
    items = value.items() if isinstance(value, dict) else enumerate(value) if isinstance(value, list) else ()
    for k, v in items:
        key = f"{name}.{k}" if name else str(k)
        if isinstance(k, str) and not k.isascii() and _SURROGATE.search(k):
            return key
        if (found := _lone_surrogate(v, key)) is not None:
            return found
    return None


TEXT_FIELDS = ("text", "contents")  # where a record's text is looked for when no --text-field is given
# A record's id: the first of these present (`docno`: PyTerrier's corpus iterators and frames).
ID_FIELDS = ("_id", "id", "doc_id", "docno")
# A precomputed embedding: `vector`, or `embedding` as the engines' exports (and `hrt export`'s mappings) name it
# (user trial AP: an `embedding` column was kept as 8.6 KB of metadata per document and the text embedded again).
VECTOR_FIELDS = ("vector", "embedding")
# Top-level keys that are document fields; every other key of a record (but its text field) is metadata.
DOC_FIELDS = frozenset({*ID_FIELDS, "title", "source", "scope", "metadata", "vector"})


def _record_text(obj: Mapping[str, Any], where: str, text_field: str | None, hint: str = "--text-field") -> tuple[str, str]:
    """(field name, text) of the record. A record without the field is an error naming the keys it has:
    storing it with an empty text (what happened with `body` records) loses the document silently."""
    names = (text_field,) if text_field else TEXT_FIELDS
    found = next((n for n in names if n in obj), None)
    if found is None:
        keys = ", ".join(sorted(map(str, obj))[:20]) or "none"
        wanted = f"`{text_field}`" if text_field else "`text` or `contents`"
        raise InputError(f"{where}: no text field {wanted} (the record has: {keys}); name it with {hint}")
    text = obj[found]
    if text is None:
        return found, ""
    if not isinstance(text, str):
        raise InputError(f"{where}: field `{found}` must be a string, got {type(text).__name__}")
    return found, text


def _utf16_note(data: bytes) -> str | None:
    """The text of a file that begins with a UTF-16 byte order mark, else None; one that does not decode as UTF-16
    is not text either (None: the NUL check skips it as binary)."""
    if not utf16_text(data):
        return None
    try:
        return data.decode("utf-16")
    except UnicodeDecodeError:
        return None


def _newlines(text: str) -> str:
    """Windows' (CRLF) and classic Mac's (CR) line ends as newlines: the same notes saved on another system are the
    same documents, with the same chunks and hashes. Kept, a CRLF copy of 23 notes was 23 changed documents, one
    chunk more, and other results for 14 of 40 queries (user trial AT)."""
    return text.replace("\r\n", "\n").replace("\r", "\n") if "\r" in text else text


def _ident(value: Any, where: str, name: str) -> str | None:
    """An id, source or scope as text: a string or an integer (BEIR ids are sometimes numbers). Anything else
    is an error naming the field: `str()` made "['x']" of a list id, a document no one can look up."""
    if value is None or isinstance(value, str):
        return value
    if isinstance(value, numbers.Integral) and not isinstance(value, bool):
        return str(int(value))
    raise InputError(f"{where}: field `{name}` must be a string or an integer, got {type(value).__name__}")


# Lists and objects nested in one metadata value: deeper is refused with an error naming the record (a
# few hundred levels crashed ingest with a RecursionError traceback). Real metadata is a few levels deep.
MAX_METADATA_DEPTH = 64


def _too_deep(where: str, name: str) -> InputError:
    return InputError(f"{where}: field `{name}`: metadata nested too deeply (more than {MAX_METADATA_DEPTH} levels "
                      "of lists or objects)")


def _plain(value: Any, where: str, name: str, depth: int = 0) -> Any:
    """A metadata value as JSON data. Frames hand over dates, numpy numbers and arrays, which the store's
    JSON column cannot hold: a date becomes ISO 8601 text (read back as a date by `metatypes`), a number a
    Python number; a value with no JSON form is an error naming the field, and so is one nested more than
    `MAX_METADATA_DEPTH` levels."""
    if isinstance(value, float) and math.isinf(value):  # 1e400 in JSON: stored, it became null without a word
        raise InputError(f"{where}: field `{name}`: {value} (a number beyond the float range) cannot be stored as "
                         "metadata; write it as a string")
    if isinstance(value, float) and math.isnan(value):  # a frame's missing value: null (as the comment promised; a
        return None  # NaN was stored as NaN and typed as the text 'NaN', user trial AP)
    if value is None or isinstance(value, str | bool | int | float):
        return value
    if isinstance(value, date | time):  # datetime and pandas' Timestamp are dates too
        return value.isoformat()
    if isinstance(value, Mapping | list | tuple) and depth >= MAX_METADATA_DEPTH:
        raise _too_deep(where, name)
    if isinstance(value, Mapping):
        return {str(k): _plain(v, where, f"{name}.{k}" if depth < 8 else name, depth + 1) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_plain(v, where, name, depth + 1) for v in value]
    if isinstance(value, Decimal):
        return float(value)
    if type(value).__module__ == "numpy" and hasattr(value, "tolist"):  # numpy scalars and arrays
        return _plain(value.tolist(), where, name, depth)
    raise InputError(f"{where}: field `{name}`: a {type(value).__name__} value cannot be stored as metadata "
                     "(use a string, number, boolean, list or object)")


def _record_metadata(obj: Mapping[str, Any], where: str, text_key: str) -> dict[str, Any]:
    """The record's `metadata` object merged with its other top-level fields (`DOC_FIELDS` and the text field
    aside): flat records are the usual shape of exported memories, and dropping their `created_at` or
    `priority` left the priors quietly neutral. Both are checked as metadata (a bad date names the field)."""
    meta = obj.get("metadata") or {}
    if isinstance(meta, str):
        try:
            meta = json.loads(meta, parse_constant=_no_constant)
        except _NotJson as e:
            raise InputError(f"{where}: field `metadata`: {e} is not JSON: write null, a number or a string") from None
        except json.JSONDecodeError as e:
            raise InputError(f"{where}: field `metadata` is not valid JSON") from e
        except RecursionError:
            raise _too_deep(where, "metadata") from None
    if not isinstance(meta, Mapping):
        raise InputError(f"{where}: field `metadata` must be an object")
    meta = _plain(meta, where, "metadata")  # (bounds the depth the surrogate check below walks)
    if (field := _lone_surrogate(meta, "metadata")) is not None:  # a JSON string's "\ud800", or a caller's dict
        raise InputError(f"{where}: field `{field}` holds a lone UTF-16 surrogate: it is not text")
    flat: dict[str, Any] = {}
    for k, v in obj.items():
        if k in DOC_FIELDS or k == text_key or v is None:  # None: a frame's missing value, as if absent
            continue
        if k == "embedding" and _is_numbers(v):  # the document's vector (`_doc_from_record`), not metadata
            continue
        if not isinstance(k, str):
            raise InputError(f"{where}: field name {k!r} must be a string")
        flat[k] = v = _plain(v, where, k)
        if k in meta and meta[k] != v:
            raise InputError(f"{where}: field `{k}` is given at the top level ({_short(v)}) and in `metadata` "
                             f"({_short(meta[k])}) with different values; keep one")
    # Dates must parse (the store types them again; here the error names the line and where the field is).
    typed_values(meta, where)
    typed_values(flat, where, label="field `{}`")
    return {**meta, **flat}


def _utf8(name: str) -> bool:
    """Whether a file name decoded by the file system is UTF-8 (Python keeps other bytes as lone surrogates)."""
    try:
        name.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def _short(v: Any, limit: int = 60) -> str:
    r = repr(v)
    return r if len(r) <= limit else r[: limit - 3] + "..."


# Where other engines' exports nest a document's fields: an Elasticsearch/OpenSearch hit (`_id` beside `_source`), a
# Weaviate object (`id` beside `properties`). Their own bookkeeping beside it (`_index`, `_score`, `class`, ...) is
# no field of the document.
NESTED_FIELDS = {"_source": ("_id",), "properties": ("id", "vector")}


def _unwrapped(obj: Mapping[str, Any], text_field: str | None) -> tuple[Mapping[str, Any], str | None]:
    """A record whose fields sit under `_source` or `properties` (an engine's export), with no text field at the top,
    read as those fields plus the id (and vector) beside them; `--text-field _source.body` names a field inside.
    Other records as they are (a record with a text field keeps a `properties` field as metadata)."""
    for wrapper, beside in NESTED_FIELDS.items():
        inner = obj.get(wrapper)
        if not isinstance(inner, Mapping):
            continue
        field = text_field[len(wrapper) + 1:] if text_field and text_field.startswith(f"{wrapper}.") else text_field
        if any(n in obj for n in ((text_field,) if text_field else TEXT_FIELDS)):
            return obj, text_field
        return {**{k: obj[k] for k in beside if k in obj and k not in inner}, **inner}, field
    return obj, text_field


def _doc_from_record(
    obj: Mapping[str, Any], where: str, text_field: str | None = None, hint: str = "--text-field"
) -> dict[str, Any]:
    """One record (a JSONL line, a Parquet or frame row, a dict) as a document: the only place defaults
    are filled in and fields checked, so every way into the store gets the same rules (module docstring:
    which fields are read, and that every other top-level field is metadata)."""
    obj, text_field = _unwrapped(obj, text_field)
    id_key = next((k for k in ID_FIELDS if k in obj), "id")
    doc_id = _ident(obj.get(id_key), where, id_key)
    if doc_id is None or doc_id.strip() == "":
        raise InputError(f"{where}: missing document id (one of {_fields(ID_FIELDS)})")
    text_key, text = _record_text(obj, where, text_field, hint)
    text = _newlines(text)
    title = obj.get("title")
    if title is not None and not isinstance(title, str):
        raise InputError(f"{where}: field `title` must be a string, got {type(title).__name__}")
    title = _newlines(title) if title else title
    meta = _record_metadata(obj, where, text_key)
    # The other id fields of the record are data, not the id (user trial AP: an Elasticsearch export's `_id` beside
    # the application's own `doc_id` lost the latter): kept as metadata under their names.
    meta = {**{k: v for k in ID_FIELDS if k != id_key and (v := _plain(obj.get(k), where, k)) is not None}, **meta}
    doc = {
        "doc_id": doc_id,
        "source": (_ident(obj.get("source"), where, "source") or _ident(meta.get("source"), where, "metadata.source")
                   or doc_id),
        "scope": _ident(obj.get("scope"), where, "scope") or _ident(meta.get("scope"), where, "metadata.scope") or None,
        "title": title or "",
        "text": text,
        "metadata": meta,
    }
    # `vector` always; `embedding` when it holds numbers (a record may name its embedding model so: metadata then)
    given = [k for k in VECTOR_FIELDS if obj.get(k) is not None and (k == "vector" or _is_numbers(obj[k]))]
    if len(given) > 1:
        raise InputError(f"{where}: fields `{'` and `'.join(given)}` both hold a vector: keep one (`vector`)")
    if given:  # a precomputed embedding (toolkit.vectors)
        from .vectors import check_vector

        doc["vector"] = check_vector(obj[given[0]], where, given[0])
    return doc


def _is_numbers(v: Any) -> bool:
    """A list (or array) of numbers: what a vector field holds."""
    if isinstance(v, str | bytes) or not hasattr(v, "__len__") or not len(v):
        return False
    return all(isinstance(x, numbers.Real) and not isinstance(x, bool) for x in v)


def _check_unique(
    docs: Iterator[tuple[str, dict[str, Any]]], path: Path | str, skipped: list[Skipped] | None = None
) -> Corpus:
    """Documents with unique ids; a document with no text and no title is skipped and counted (a classic
    collection such as Cranfield has a few), never fatal."""
    seen: dict[str, str] = {}
    out = Corpus(skipped=skipped)
    for where, d in docs:
        if d["doc_id"] in seen:
            raise InputError(f"{where}: duplicate document id {d['doc_id']!r} (first seen at {seen[d['doc_id']]})")
        seen[d["doc_id"]] = where
        if not d["text"].strip() and not d["title"].strip():
            out.skipped.append(Skipped(where, f"empty document (id {d['doc_id']!r}: no text and no title)"))
            continue
        out.append(d)
    if not out:
        why = f"; {out.skipped_summary()}" if out.skipped else ""
        raise InputError(f"{path}: the corpus is empty (no documents found{why})")
    return out


MAX_ID_PREFIX = 200  # characters


def check_id_prefix(prefix: object, name: str = "id_prefix") -> str:
    """`prefix` if it is a usable document-id prefix (a non-empty string of at most `MAX_ID_PREFIX`
    characters, no control characters), else an `InputError` naming `name` (`--id-prefix` for the CLI)."""
    if not isinstance(prefix, str):
        raise InputError(f"{name}: must be a string, got {type(prefix).__name__}")
    if not prefix.strip():
        raise InputError(f"{name}: must not be empty or blank (e.g. 'personal/')")
    if len(prefix) > MAX_ID_PREFIX:
        raise InputError(f"{name}: at most {MAX_ID_PREFIX} characters, got {len(prefix)}")
    bad = next((c for c in prefix if unicodedata.category(c) in {"Cc", "Cf", "Zl", "Zp"}), None)
    if bad is not None:
        raise InputError(f"{name}: must not contain control characters (found U+{ord(bad):04X})")
    return prefix


def load_corpus(
    path: str | os.PathLike[str] | Iterable[Mapping[str, Any]] | pl.DataFrame | pl.LazyFrame,
    *,
    text_field: str | None = None,
    include: Iterable[str] = (),
    exclude: Iterable[str] = (),
    id_prefix: str | None = None,
) -> Corpus:
    """Documents from a BEIR dir, a .jsonl or .parquet file, a folder of text files (.md, .markdown, .mdx, .txt, .text, .rst, and
    files without an extension whose content is UTF-8 text; any other extension, .py, .yaml or .log alike, is
    skipped as "not indexed by default" unless `include` names it), one such text file (read as it is in a folder:
    one document, id and source its file name, title its first line), or records given in Python (an
    iterable of dicts, a polars or pandas frame: each read as a JSONL line is, errors naming `record N` /
    `row N`). `.skipped` lists what was not indexed.

    Records (JSONL lines, Parquet rows, dicts, frame rows) keep every top-level field other than the id,
    text, `title`, `source`, `scope`, `metadata` and `vector` as metadata, checked as metadata is (a bad date
    names the field); a field of the wrong type (a list id, an object title) is an error (module docstring).

    A folder is a BEIR collection (only its corpus.jsonl is read) when it holds corpus.jsonl and
    queries.jsonl and/or qrels/, or corpus.jsonl and no notes (.md, .txt, .rst, ... or `include` matches;
    other files such as a store, LICENSE or README without an extension do not count). corpus.jsonl among
    notes without queries or qrels is ambiguous: the folder is then read as notes, since taking the one file
    would drop every note, and corpus.jsonl is skipped with the reason (ingest the file itself for its
    records). Files beside a BEIR collection (its README) are not listed as skipped.

    `text_field` names the field holding the text in JSONL/Parquet records (default: `text`, else
    `contents`); a record without it is an error naming the file, the line and the keys it has.
    `include`: glob patterns (`fnmatch` on the path relative to the folder, `*` crossing folders: "*.py",
    "docs/*.html") of further files in a folder to read as text, e.g. source code for a code assistant's
    memory; like .md files, they must be UTF-8. `exclude`: glob patterns, matched the same way on files and
    folders ("logs/*", "node_modules", "*.log"), of what a folder's reading leaves out (listed in `skipped`;
    `exclude` wins over `include`). Hidden files and folders are read only when an `include` names them
    (.git, .hg and .svn never). A file read as text that is
    larger than 5 MB (`LARGE_FILE_BYTES`) is named in a warning on the "toolkit" logger as it is read.

    `id_prefix` is put before every document id (`"personal/"` makes `todo.md` `personal/todo.md`): a
    folder's ids are paths relative to it, so two folders sharing a store each need their own prefix, else
    the second's `todo.md` replaces the first's. Sources, scopes and `skipped` are left as they are."""
    if id_prefix is not None:
        prefix = check_id_prefix(id_prefix)
        corpus = load_corpus(path, text_field=text_field, include=include, exclude=exclude)
        for d in corpus:
            d["doc_id"] = prefix + d["doc_id"]
        return corpus
    include, exclude = tuple(include), tuple(exclude)
    if not isinstance(path, str | os.PathLike):
        if include or exclude:
            raise InputError(f"include/exclude patterns ({', '.join(include + exclude)}) apply to a folder of files, "
                             "not to records")
        hint = "load_corpus(..., text_field=...)"
        return _check_unique(((w, _doc_from_record(r, _named(w, r), text_field, hint)) for w, r in _record_rows(path)),
                             "the documents given")
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such file or directory")
    beir = beir_corpus(p, include) if p.is_dir() else None
    note = p.is_file() and _note_file(p, include)
    if include and not note and (not p.is_dir() or beir):
        raise InputError(f"{p}: include patterns ({', '.join(include)}) apply to a folder of files, not to a collection file")
    if exclude and (not p.is_dir() or beir):
        raise InputError(f"{p}: exclude patterns ({', '.join(exclude)}) apply to a folder of files, not to one file "
                         "or a collection")
    if beir:
        p = beir
    if note:  # one note: read as it would be in its folder (id and source its file name, no scope)
        alone: list[Skipped] = []
        return _check_unique(_folder_docs(p.parent, alone, include, files=[p]), p, alone)
    if p.is_file() and p.suffix.lower() in COLLECTION_SUFFIXES - {".parquet"}:
        # A collection's corpus reaches `hrt run`, `eval` and `tune` too, which take no --text-field (user trial AT).
        hint = ("the field `text` in corpus.jsonl: `hrt run`, `eval` and `tune` read a collection's text there "
                "(`hrt ingest --text-field` reads another field into a store of its own)") if beir else "--text-field"
        return _check_unique(((f"{p}:{n}", _doc_from_record(o, f"{p}:{n}", text_field, hint)) for n, o in _read_jsonl(p)), p)
    if p.is_file() and p.suffix.lower() == ".parquet":
        try:
            rows = pl.read_parquet(p).to_dicts()
        except Exception as e:
            raise InputError(f"{p}: cannot read Parquet ({e})") from e
        return _check_unique(((f"{p} row {i}", _doc_from_record(r, f"{p} row {i}", text_field)) for i, r in enumerate(rows)), p)
    if p.is_dir():
        skipped: list[Skipped] = []
        return _check_unique(_folder_docs(p, skipped, include, exclude=exclude), p, skipped)
    hint = f"; --include '*{p.suffix}' reads it as text" if p.suffix and not _binary_type(p.name) else ""
    raise InputError(f"{p}: unsupported corpus (use a BEIR folder, .jsonl, .parquet, a folder of text files, or one "
                     f"text file: .md, .markdown, .mdx, .txt, .text, .rst{hint})")


COLLECTION_SUFFIXES = frozenset({".jsonl", ".json", ".parquet"})  # a file of records, never one note


def _note_file(p: Path, include: tuple[str, ...]) -> bool:
    """Whether a file given alone is a note: a name a folder would read as one (known text extension, an
    `include` match), or, without an extension (README, NEWS, README.Debian: `_extensionless`), text by
    content. A collection file (.jsonl, .json, .parquet) never is."""
    if p.suffix.lower() in COLLECTION_SUFFIXES:
        return False
    if _named_note(p.name, include):
        return True
    if not _extensionless(p.name):
        return False
    with p.open("rb") as fh:
        return _sniff_text(fh.read(SNIFF_BYTES)) is None


def _record_rows(source: object) -> Iterator[tuple[str, Mapping[str, Any]]]:
    """(label, record) for documents given in Python. A frame's missing values (polars null, pandas NaN/NA)
    become None, so they get the defaults a JSONL line without the field gets."""
    if isinstance(source, pl.LazyFrame):
        source = source.collect()
    if isinstance(source, pl.DataFrame):
        rows: Iterable[Any] = source.iter_rows(named=True)
        label = "row"
    elif "pandas" in sys.modules and isinstance(source, sys.modules["pandas"].DataFrame):
        pd = sys.modules["pandas"]
        records = named_index_as_columns(source).to_dict("records")
        rows = ({k: None if pd.api.types.is_scalar(v) and pd.isna(v) else v for k, v in r.items()} for r in records)
        label = "row"
    elif isinstance(source, Mapping | bytes) or not isinstance(source, Iterable):
        raise InputError(f"documents must be a path, a frame or an iterable of dicts, got {type(source).__name__}")
    else:
        rows, label = source, "record"
    for i, r in enumerate(rows):
        if not isinstance(r, Mapping):
            raise InputError(f"{label} {i}: expected a dict with `doc_id` (or `_id`, `id`) and `text`, got {type(r).__name__}")
        yield f"{label} {i}", r


def _hidden(rel: Path) -> bool:
    return any(part.startswith(".") for part in rel.parts)


def _extensionless(name: str) -> bool:
    """A name read by content: no extension (README, NEWS, Makefile), or an upper-case name whose suffix is no
    file type (README.Debian, LICENSE.MIT). Python's own table decides, never the host's, so the same folder
    indexes the same files everywhere."""
    p = Path(name)
    return not p.suffix or (p.stem.isupper() and not any(_mime().guess_type(name, strict=False)))


def _binary_type(name: str) -> str | None:
    """The known non-text file type of a name (image/png, gzip, application/pdf), else None."""
    kind, encoding = _mime().guess_type(name, strict=False)
    if encoding:
        return encoding
    if kind and not kind.startswith(("text/", "message/")) and kind not in TEXT_APPLICATION_TYPES:
        return kind
    return None


def _excluded(rel: str, exclude: tuple[str, ...], folder: bool = False) -> str | None:
    """The first `exclude` pattern matching a path relative to the folder (a folder also matches a pattern
    for everything in it: "logs/huge/*" takes the folder logs/huge), else None."""
    for pat in exclude:
        if _glob(rel, pat) or folder and pat.endswith("*") and _glob(rel + "/", pat):
            return pat
    return None


def _glob(rel: str, pat: str) -> bool:
    """A path matches a pattern whatever the case of either, as extensions are read (`.MD` is a note): `--exclude
    '*.md'` left NOTES.MD in the store (user trial AT)."""
    return fnmatch.fnmatchcase(rel.lower(), pat.lower())


def _unmatched_patterns(root: Path, rels: list[str], include: tuple[str, ...], exclude: tuple[str, ...]) -> None:
    """A warning for each --include or --exclude pattern that matches nothing in the folder: a typo, or a Windows
    path (`sub\\*`), excluded nothing without a word (user trial AT)."""
    for flag, pats in (("--include", include), ("--exclude", exclude)):
        for pat in pats:
            if not any(_excluded(r, (pat,), folder=True) for r in rels):  # (folder=True: the path itself, or under it)
                slash = " (paths in patterns take /, not \\)" if "\\" in pat else ""
                logging.getLogger("toolkit").warning("warning: %s '%s' matches nothing in %s%s", flag, pat, root, slash)


NEVER_READ = frozenset({".git", ".hg", ".svn"})  # a version control folder is history, not notes: never read


def _asked_for(rel: Path, include: tuple[str, ...]) -> bool:
    """Whether an `--include` pattern that itself names a hidden part (`.github/*`, `*/.env.example`) matches this
    hidden path: the user asked for it by name, and it was skipped as hidden without a word (user trial BD)."""
    if any(part in NEVER_READ for part in rel.parts):
        return False
    return any(_glob(rel.as_posix(), pat) for pat in include if any(p.startswith(".") for p in pat.split("/")))


def _left_out(rel: Path, exclude: tuple[str, ...], include: tuple[str, ...] = ()) -> Skipped | None:
    """Why a file is not read by its path alone: the first (outermost) hidden or excluded folder it is in,
    else the file itself hidden or excluded; None if neither. A hidden path an `include` names is read."""
    asked = _asked_for(rel, include)
    for i in range(1, len(rel.parts)):
        folder = "/".join(rel.parts[:i])
        if pat := _excluded(folder, exclude, folder=True):
            return Skipped(rel.as_posix(), f"excluded by --exclude '{pat}'", folder)
        if rel.parts[i - 1].startswith(".") and not asked:
            return Skipped(rel.as_posix(), "hidden file or folder", folder)
    if pat := _excluded(rel.as_posix(), exclude):
        return Skipped(rel.as_posix(), f"excluded by --exclude '{pat}'")
    if rel.name.startswith(".") and not asked:
        return Skipped(rel.as_posix(), "hidden file or folder")
    return None


def _named_note(rel: str, include: tuple[str, ...]) -> bool:
    """A note by its name alone (path relative to the folder): a known text extension or an `include` match."""
    return Path(rel).suffix.lower() in TEXT_SUFFIXES or any(_glob(rel, pat) for pat in include)


def _named(where: str, r: Mapping[str, Any]) -> str:
    """'record 3, document 'b'': a record in a list has no line number to find it by, so its id says which."""
    doc_id = next((r[k] for k in ID_FIELDS if k in r), None)
    ok = isinstance(doc_id, str | int) and not isinstance(doc_id, bool) and str(doc_id).strip()
    return f"{where}, document {str(doc_id)!r}" if ok else where


def beir_corpus(root: Path, include: tuple[str, ...] = ()) -> Path | None:
    """The corpus.jsonl of a folder read as a BEIR collection, else None (see `load_corpus`). Only notes
    (known text extensions, `include` matches) make a folder without queries or qrels a folder of notes:
    a store file, a LICENSE or a vectors file written next to corpus.jsonl must not change how it is read."""
    corpus = root / "corpus.jsonl"
    if not corpus.is_file():
        return None
    if (root / "queries.jsonl").is_file() or (root / "qrels").is_dir():
        return corpus
    notes = (
        x for x in root.rglob("*")
        if x.is_file() and not _hidden(rel := x.relative_to(root))
        and _named_note(rel.as_posix(), include)
    )
    return None if next(notes, None) else corpus


def _sniff_text(head: bytes) -> str | None:
    """Why the first bytes of a file without a known extension are not text, or None if they are: no NUL
    byte, and valid UTF-8 (a multi-byte character cut at the end of the sample is allowed)."""
    if b"\0" in head:
        return "binary content (NUL bytes)"
    try:
        head.decode("utf-8")
    except UnicodeDecodeError as e:
        if e.start < len(head) - 3:
            return f"not UTF-8 text (byte {e.start})"
    return None


def _outside(f: Path, real_root: Path) -> str | None:
    """The real path of `f` when it is not under `real_root` (a symlink, or a file in a linked folder, that
    leads out of the folder), else None."""
    try:
        real = f.resolve(strict=True)
    except (OSError, RuntimeError):  # vanished, or a link loop: not readable, treat as outside
        return str(f)
    return None if real.is_relative_to(real_root) else str(real)


def _identity(f: Path) -> tuple[int, int]:
    """(device, inode) of the file `f` names, through symlinks: one file under two names has one identity."""
    st = f.stat()
    return st.st_dev, st.st_ino


def _folder_docs(
    root: Path, skipped: list[Skipped], include: tuple[str, ...] = (), files: Iterable[Path] | None = None,
    exclude: tuple[str, ...] = (),
) -> Iterator[tuple[str, dict[str, Any]]]:
    """Text files under `root` (or only `files`, each under `root`: a single note): known text extensions,
    files matching an `include` pattern, and files without an extension (README, NEWS, CHANGES, LICENSE)
    recognised by content. Everything else goes to `skipped` with the reason: hidden or `exclude`d files and
    folders, a known binary type by name (image/png, gzip), binary content, and any other extension (.py,
    .yaml, .log) as "not indexed by default" with the --include that reads it; the same on every host.

    A folder's file whose real path (symlinks resolved) is outside the real folder is skipped, never read:
    a notes folder from someone else may hold `notes.md -> ~/.aws/credentials`, and indexing it would
    return the secret from a search. A symlink to another file inside the folder is read as usual. A file
    named on its own (`files`) is the caller's choice and is read wherever it points."""
    real_root = root.resolve()
    if files is None:  # one walk: the files, and the folder symlinks it does not follow
        entries = list(root.rglob("*"))
        files = sorted(x for x in entries if x.is_file())
        _unmatched_patterns(root, [x.relative_to(root).as_posix() for x in entries], include, exclude)
        # Said, as every file left out is (user trial AS: a symlinked folder's files were never read, and -v was silent).
        # A folder this user cannot list is passed over by the walk without a word (user trial BA): said, with why.
        for d in sorted(x for x in entries if x.is_dir() and not x.is_symlink() and not os.access(x, os.R_OK | os.X_OK)):
            if not _left_out(d.relative_to(root), exclude):
                skipped.append(Skipped(d.relative_to(root).as_posix(), f"{UNREADABLE}: a folder, none of its files is indexed"))
        for d in sorted(x for x in entries if x.is_symlink() and x.is_dir()):
            if not _left_out(d.relative_to(root), exclude):
                inside = d.resolve().is_relative_to(real_root)
                skipped.append(Skipped(d.relative_to(root).as_posix(), "symlinked folder, not followed (" + (
                    "its target is in the folder and read there)" if inside else
                    "ingest its target itself, or copy it into the folder)")))
        walked = True
    else:
        walked = False
    # A file reached under two names (a symlink to a file in the folder, a hard link) is read once, under the
    # name of the file itself when the walk reads it: twice would store one text as two documents (the review's
    # open item since trial AS). Files keyed by (device, inode); a name the walk would not read does not claim.
    owner: dict[tuple[int, int], str] = {}
    # Files the walk leaves out (hidden, --exclude'd), by identity, when some file read has a second name: a symlink
    # or hard link to one would read what the user hid or excluded (user trial BM: `pub/token-link.md` ->
    # `../.secrets/token.md` was indexed under --exclude private). Only then: stat-ing an excluded tree costs.
    left: dict[tuple[int, int], str] = {}
    idents: dict[Path, tuple[int, int]] = {}  # of the files the walk reads: one stat each
    if walked:
        aliased = False
        for f in files:
            rel = f.relative_to(root)
            if _left_out(rel, exclude, include) or not (_named_note(rel.as_posix(), include) or _extensionless(f.name)):
                continue
            with suppress(OSError):
                st = f.stat()
                idents[f] = (st.st_dev, st.st_ino)
                aliased = aliased or f.is_symlink() or st.st_nlink > 1
                if not f.is_symlink():
                    owner.setdefault(idents[f], rel.as_posix())
        for f in files if aliased else ():
            rel = f.relative_to(root)
            if not f.is_symlink() and _left_out(rel, exclude, include):
                with suppress(OSError):
                    left.setdefault(_identity(f), rel.as_posix())
    for f in files:
        rel = f.relative_to(root).as_posix()
        if why_not := _left_out(f.relative_to(root), exclude, include):
            skipped.append(why_not)
            continue
        if not _utf8(rel):  # a latin-1 name ("caf\xe9.md"): no id can hold it; the rest of the folder still goes in
            shown = os.fsencode(rel).decode("utf-8", "backslashreplace")
            skipped.append(Skipped(shown, "file name is not valid UTF-8: rename it"))
            continue
        if walked and (outside := _outside(f, real_root)):
            # a file deleted while the folder was read is not a symlink (user trial AS)
            why = "deleted while the folder was read" if not f.exists() and not f.is_symlink() else \
                f"symlink to outside the folder (target: {outside})"
            skipped.append(Skipped(rel, why))
            continue
        if walked and (_named_note(rel, include) or _extensionless(f.name)):  # other names are not read anyway
            ident = idents.get(f)
            if ident is not None and (hidden := left.get(ident)):
                kind = "a symlink to" if f.is_symlink() else "a hard link of"
                skipped.append(Skipped(rel, f"another name of a file left out ({kind} {hidden}, hidden or --exclude'd)"))
                continue
            first = owner.setdefault(ident, rel) if ident is not None else rel
            if first != rel:
                kind = "a symlink to" if f.is_symlink() else "a hard link of"
                skipped.append(Skipped(rel, f"same file under another name ({kind} {first}; indexed once, under that name)"))
                continue
        if rel == "corpus.jsonl":  # `beir_corpus` found notes beside it and no queries or qrels
            skipped.append(Skipped(rel, "a collection's corpus file, not a note (no queries.jsonl or qrels/ beside "
                                        "it, so the folder is read as notes; ingest the file itself for its records)"))
            continue
        if not _named_note(rel, include):
            # A known binary type (image, archive) is skipped by name; no extension ("README", "NEWS",
            # "README.Debian") is decided by content; any other extension is text only when --include says so.
            if not _extensionless(f.name) and (kind := _binary_type(f.name)):
                skipped.append(Skipped(rel, f"file type {kind} ({f.suffix}: not a document format)"))
                continue
            try:
                with f.open("rb") as fh:
                    why = _sniff_text(fh.read(SNIFF_BYTES))
            except PermissionError:  # counted and named as every file left out is (user trial BA: it stopped the ingest)
                skipped.append(Skipped(rel, UNREADABLE))
                continue
            if why:
                skipped.append(Skipped(rel, why))
                continue
            if not _extensionless(f.name):
                skipped.append(Skipped(rel, f"not indexed by default: add --include '*{f.suffix}'"))
                continue
        try:
            data = f.read_bytes()
        except PermissionError:
            skipped.append(Skipped(rel, UNREADABLE))
            continue
        text = _utf16_note(data)  # UTF-16 with its byte order mark (Notepad's "Unicode"): text; None otherwise
        if text is None and b"\0" in data or text is not None and "\0" in text:
            # Whatever the name says, a NUL is never in a text note (UTF-32 decodes as UTF-16 with NULs: binary).
            skipped.append(Skipped(rel, "binary content (NUL bytes)"))
            continue
        if text is None:
            body = data[len(BOM) :] if data.startswith(BOM) else data  # a BOM is no part of the text or its title
            try:
                text = body.decode("utf-8")
            except UnicodeDecodeError as e:
                if (text := declared_html_text(rel, body)) is None:
                    line = body[: e.start].count(b"\n") + 1
                    raise InputError(f"{f}:{line}: not valid UTF-8; re-encode the file as UTF-8") from e
        if walked and len(data) > LARGE_FILE_BYTES:
            logging.getLogger("toolkit").warning(
                "note: %s is %.1f MB of text, so it will be many chunks and much of the ingest's time; "
                "--exclude '%s' leaves it out", rel, len(data) / 2**20, rel)
        title, text, fields = _note_parts(rel, _newlines(text))
        top = rel.split("/")[0] if "/" in rel else None
        yield rel, {"doc_id": rel, "source": rel, "scope": top, "title": _cut_title(title), "text": text,
                    "metadata": {"path": rel, **fields}}


HTML_SUFFIXES = frozenset({".html", ".htm"})  # read (when --include names them) as the text a reader sees
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown", ".mdx"})  # front matter read as title and metadata


_META_CHARSET = re.compile(rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9._:-]+)""", re.I)


def declared_html_text(rel: str, body: bytes) -> str | None:
    """An HTML page that is not UTF-8, decoded as its own `<meta charset>` (or `http-equiv` Content-Type) says, as a
    browser reads it (user trial BG: one Latin-1 page of a documentation site stopped the whole ingest); None for
    any other file, or a charset Python does not know, or bytes that do not decode in it (then the UTF-8 error
    stands). Only the first 2 KB are searched, where HTML puts the declaration."""
    if Path(rel).suffix.lower() not in HTML_SUFFIXES or not (m := _META_CHARSET.search(body[:2048])):
        return None
    try:
        return body.decode(m.group(1).decode("ascii"))
    except (LookupError, UnicodeDecodeError):
        return None


def _note_parts(rel: str, text: str) -> tuple[str, str, dict[str, Any]]:
    """(title, text, metadata fields) of a file read as text. An HTML page: its visible text and <title>
    (`markup_text.html_text`; user trial: markup, scripts and the shared navigation were indexed). Markdown:
    front matter's `title` and other fields, the block itself left out of the text (a malformed one is kept as
    text, with a warning naming the file); an MDX file's imports left out; the first line past front matter and
    HTML comments as title. reStructuredText: the first section title. Anything else as `_file_title` says."""
    suffix = Path(rel).suffix.lower()
    if suffix in HTML_SUFFIXES:
        title, body = html_text(text)
        return title or (rel if body.strip() else ""), body, {}
    if suffix in MARKDOWN_SUFFIXES:
        title, fields = "", {}
        if text.startswith(("---", "+++")):
            found, text, error = front_matter(text)
            if error:
                logging.getLogger("toolkit").warning("warning: %s: %s; indexed with it as text", rel, error)
            elif found:
                title, fields = _front_fields(rel, found)
        if suffix == ".mdx":
            text = drop_mdx_imports(text)
        return title or markdown_title(text), text, fields
    if suffix == ".rst":
        return rst_title(text), text, {}
    return _file_title(rel, text), text, {}


def _front_fields(rel: str, found: Mapping[Any, Any]) -> tuple[str, dict[str, Any]]:
    """(title, metadata) of a Markdown file's front matter: `title` as the title; every other field as metadata
    (dates as ISO 8601 text, so `date` is one the recency prior reads; lists such as `tags` as lists). A date
    field (`date`, `updated`, `*_at`, ...) that reads as no date is left out with a warning: refusing it stopped the
    whole ingest for one page. `path` stays the file's path."""
    title = plain_value(found.get("title"))
    title = str(title).strip() if isinstance(title, str | int | float) and not isinstance(title, bool) else ""
    fields: dict[str, Any] = {}
    for k, v in found.items():
        key, value = str(k), plain_value(v)
        if key in ("title", "path") or value is None:
            continue
        if is_date_field(key) and not isinstance(value, list | dict) and parse_date(value) is None and not (
                isinstance(value, int | float) and not isinstance(value, bool) and abs(value) < 1e8):
            logging.getLogger("toolkit").warning(
                "warning: %s: front matter field `%s`: %r is not a date; left out", rel, key, value)
            continue
        fields[key] = value
    return title, fields


# A query's id: BEIR's `_id`, and the names other tools write (ir_datasets' `query_id`, user trial AM).
QUERY_ID_KEYS = ("_id", "id", "qid", "query_id")
_QUERY_FIELDS = frozenset({*QUERY_ID_KEYS, "text", "query", "title", "metadata", "scope"})


def _flat_query_fields(o: Mapping[str, Any], meta: Mapping[str, Any], where: str) -> dict[str, Any]:
    """A query's other top-level fields, as metadata (as a document's are): its flat `date` is its as-of time,
    and a bad one is an error naming the line. Query files once kept only `metadata`, so any other date-named
    field that does not read as a date is dropped with a warning rather than refusing a file that loaded."""
    out: dict[str, Any] = {}
    for k, v in o.items():
        if k in _QUERY_FIELDS or v is None or isinstance(v, dict | list) or k in meta:
            continue
        if k != "date" and is_date_field(str(k)) and parse_date(v) is None:
            logging.getLogger("toolkit").warning("warning: %s: field `%s`: %r is not a date; ignored", where, k, v)
            continue
        out[str(k)] = v
    typed_values(out, where, label="field `{}`")
    return out


# Extensionless files that are build or container recipes, not notes: titled by their path, as code is.
RECIPE_NAMES = frozenset({"makefile", "gnumakefile", "dockerfile", "containerfile", "jenkinsfile", "vagrantfile",
                          "gemfile", "rakefile", "procfile", "justfile"})


def _file_title(rel: str, text: str) -> str:
    """A note's first line (a Markdown heading's words); a code, config or script file's path. A repository's
    files were titled `from __future__ import annotations` (64 of them), a docstring's opening quotes (20) and
    `!/bin/sh`, and the title is indexed with every chunk, while the path a coding agent searches for
    (`Makefile`, `src/urllib3/util/retry.py`) was nowhere in the index (user trial BD). An empty file gets no
    title, so it is skipped as an empty document (not indexed by name)."""
    if not text.strip():
        return ""
    p = Path(rel)
    note = p.suffix.lower() in TEXT_SUFFIXES or (
        _extensionless(p.name) and p.name.lower() not in RECIPE_NAMES and not text.lstrip().startswith("#!"))
    if not note:
        return rel
    return next((ln.lstrip("# ").strip() for ln in text.splitlines() if ln.strip()), "")


def _cut_title(title: str, limit: int = 200) -> str:
    """A file's heading as its title, at most `limit` characters, never cut inside an emoji or a letter with its
    marks (user trial AQ: a title ended in a lone joiner)."""
    if len(title) <= limit:
        return title
    from .render import _cluster_start

    return title[: _cluster_start(title, limit)]


def load_queries(path: str | Path) -> pl.DataFrame:
    """Queries as a frame [qid, text, scope, metadata(JSON string)]; an empty query text is an error."""
    p = Path(path)
    if p.is_dir():
        p = p / "queries.jsonl"
    if not p.exists():
        raise InputError(f"{p}: no such file")
    rows, seen = [], {}
    for n, o in _read_jsonl(p):
        key = next((k for k in QUERY_ID_KEYS if o.get(k) is not None), None)
        if key is None:
            raise InputError(f"{p}:{n}: missing query id (one of {_fields(QUERY_ID_KEYS)})")
        qid = _ident(o[key], f"{p}:{n}", key)  # text or an integer, as a document's id (not "['x']" or "True")
        if qid in seen:
            raise InputError(f"{p}:{n}: duplicate query id {qid!r} (first at line {seen[qid]})")
        seen[qid] = n
        # A TREC topic's text is its `title` (user trial AP: "empty text" for a topic whose text was there).
        text = next((o[k] for k in ("text", "query", "title") if isinstance(o.get(k), str) and o[k].strip()), None)
        if text is None:
            raise InputError(f"{p}:{n}: query {qid!r} has no text (field `text`, `query` or `title`)")
        meta = o.get("metadata") or {}
        if not isinstance(meta, dict):
            raise InputError(f"{p}:{n}: field `metadata` must be an object")
        typed_values(meta, f"{p}:{n}")
        meta = {**_flat_query_fields(o, meta, f"{p}:{n}"), **meta}
        scope = o.get("scope") or meta.get("scope")
        rows.append({"qid": qid, "text": text, "scope": str(scope) if scope else None, "metadata": json.dumps(meta)})
    if not rows:
        raise InputError(f"{p}: no queries found")
    return pl.DataFrame(rows, schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8, "metadata": pl.Utf8})


_REPORTED: set[str] = set()  # qrels problems already reported in this process (each command reads qrels twice)


def _fields(keys: tuple[str, ...]) -> str:
    """`a`, `b`, `c`: the fields an error names, from the tuple the reader reads (one list, not a second)."""
    return ", ".join(f"`{k}`" for k in keys)


def _ids(path: Path, keys: tuple[str, ...]) -> frozenset[str]:
    """The record ids of a JSONL file, cached per (path, size, mtime)."""
    st = path.stat()
    return _ids_cached(str(path), st.st_size, st.st_mtime_ns, keys)


@functools.lru_cache(maxsize=16)
def _ids_cached(path: str, size: int, mtime: int, keys: tuple[str, ...]) -> frozenset[str]:
    out = set()
    for _, o in _read_jsonl(Path(path)):
        v = next((o[k] for k in keys if o.get(k) is not None), None)
        if v is not None:
            out.add(str(v))
    return frozenset(out)


def check_split(split: str) -> str:
    """A split is a file name in qrels/ (dev, test): a path (`./test`, `../x/test`) would reach the test
    judgements under another name, past every "not on test" guard."""
    if not split or any(c in split for c in "/\\") or split in (".", "..") or split != split.strip():
        raise InputError(f"split {split!r}: a split is the name of a file in qrels/ without .tsv (dev, test)")
    return split


@dataclass(frozen=True)
class Dataset:
    """A BEIR-layout directory: corpus.jsonl, queries.jsonl, qrels/<split>.tsv."""

    root: Path

    def __init__(self, root: str | Path) -> None:
        # `Dataset("data/demo")` as `Dataset.open` takes it (a str failed at `root / ...`, user trial AV); typed so
        # (user trial BP: the hint said Path only); frozen, hence:
        object.__setattr__(self, "root", Path(root))

    @classmethod
    def open(cls, path: str | Path, *, corpus: bool = True) -> Dataset:
        """The collection at `path`, checked: an error when the folder has no corpus.jsonl. `corpus=False`: judged
        queries alone (queries.jsonl and qrels/) do, for documents ingested into a store from elsewhere (a folder
        of notes): their ids are then not checked against a corpus file."""
        root = Path(path)
        if not (root / "corpus.jsonl").exists() and (corpus or not (root / "queries.jsonl").exists()):
            raise InputError(f"{root}: not a BEIR dataset directory (no corpus.jsonl" + (
                ")" if corpus else " and no queries.jsonl)"))
        return cls(root)

    @property
    def has_corpus(self) -> bool:
        return (self.root / "corpus.jsonl").exists()

    @property
    def name(self) -> str:
        return self.root.resolve().name

    def splits(self) -> list[str]:
        """The names of the judged splits: qrels/<split>.tsv."""
        return sorted(f.stem for f in (self.root / "qrels").glob("*.tsv"))

    def shared_with_test(self, split: str) -> tuple[list[str], int]:
        """(the judged queries of `split` that test judges too, sorted; how many `split` judges): the split's
        name is not the whole guard, a dev file holding test queries is test."""
        if split == "test" or "test" not in self.splits():
            return [], 0
        qids = self.qrels(split)["qid"].unique().to_list()
        # A test file judging none of the queries shares none with dev: it must not stop tuning on dev.
        return sorted(set(qids) & set(self._judged("test")["qid"].to_list())), len(qids)

    def check_apart_from_test(self, split: str, doing: str = "tuning") -> None:
        """InputError when `split` shares judged queries with the test split (`shared_with_test`): a dev file
        holding test queries tunes (or trains) on test."""
        shared, n = self.shared_with_test(split)
        if shared:
            raise InputError(
                f"{self.root / 'qrels'}: {len(shared)} of the {n} judged {split} queries are also judged in "
                f"test (e.g. {', '.join(shared[:3])}), so {doing} on {split} is {doing} on test; split them, or pass "
                "--force (force=True)"
            )

    def qrels(self, split: str, *, strict: bool = False) -> pl.DataFrame:
        """Judgements of `split` for the queries of the query file only: a judged query that is never asked
        would be averaged in as a zero. Judgements naming query ids missing from queries.jsonl or document
        ids missing from the corpus are reported once, with counts (a logged warning; an error if `strict`).
        A split left with no judged query is an error: an empty run and NaN measures exited 0 (user trial AI)."""
        from .runs import read_qrels

        out = self._judged(split, strict=strict)
        if not len(out):
            f = self.root / "qrels" / f"{split}.tsv"
            n_known = len(_ids(self.root / "queries.jsonl", QUERY_ID_KEYS))
            n_lines = len(read_qrels(f))
            held = f"its {n_lines} judgement(s) name none of the {n_known} queries in queries.jsonl" if n_lines else "it holds no judgements"
            raise InputError(f"{f}: split {split!r} has no judged query to run or evaluate: {held}")
        return out

    def qrels_problems(self, split: str) -> list[str]:
        """What the split's judgements name that the collection lacks (the warnings `qrels` logs once), in words,
        for a report to carry: a terminal's warning is gone by the time someone reads the HTML (user trial AM)."""
        return self._checked(split)[1]

    def _judged(self, split: str, *, strict: bool = False) -> pl.DataFrame:
        """`qrels` without its check that something is left."""
        q, problems = self._checked(split)
        if problems:
            msg = f"{self.root / 'qrels' / f'{split}.tsv'}: " + "; ".join(problems)
            if strict:
                raise InputError(msg + " (--strict)")
            if msg not in _REPORTED:
                _REPORTED.add(msg)
                logging.getLogger("toolkit").warning("warning: %s", msg)
        return q

    def _checked(self, split: str) -> tuple[pl.DataFrame, list[str]]:
        """(the split's judgements of queries in queries.jsonl, the problems found)."""
        from .runs import read_qrels

        check_split(split)
        f = self.root / "qrels" / f"{split}.tsv"
        if not f.exists():
            near = sorted(p.name for p in f.parent.glob(f"{glob.escape(split)}.*")) if f.parent.is_dir() else []
            unread = (f"; {', '.join(near)} {'is' if len(near) == 1 else 'are'} not read: a split's judgements are "
                      f"qrels/<split>.tsv (BEIR's TSV or TREC qrels lines)") if near else ""
            raise InputError(f"{f}: no qrels for split {split!r} (available: {', '.join(self.splits()) or 'none'}){unread}")
        q = read_qrels(f)
        known_q = sorted(self.query_ids())
        known_d = sorted(self.corpus_ids()) if self.has_corpus else None  # (judged queries alone: nothing to check)
        bad_q = q.filter(~pl.col("qid").is_in(known_q))
        bad_d = q.filter(~pl.col("doc_id").is_in(known_d)) if known_d is not None else q.clear()
        problems = []
        if len(bad_q):
            problems.append(f"{len(bad_q)} judgement(s) name {bad_q['qid'].n_unique()} query id(s) not in queries.jsonl "
                            f"(e.g. {bad_q['qid'][0]!r}; left out of every average{near_miss(bad_q['qid'], known_q)})")
        if len(bad_d):
            # A run from elsewhere may still name them, and they count there (user trial AU): only ingested runs cannot.
            problems.append(f"{len(bad_d)} judgement(s) name {bad_d['doc_id'].n_unique()} document id(s) not in the "
                            f"corpus (e.g. {bad_d['doc_id'][0]!r}; no run of this corpus can retrieve them"
                            f"{near_miss(bad_d['doc_id'], known_d)})")
        return q.filter(pl.col("qid").is_in(known_q)), problems

    def query_ids(self) -> frozenset[str]:
        """The query ids queries.jsonl holds (read once per file version)."""
        return _ids(self.root / "queries.jsonl", QUERY_ID_KEYS)

    def corpus_ids(self) -> frozenset[str]:
        """The document ids corpus.jsonl holds (read once per file version)."""
        return _ids(self.root / "corpus.jsonl", ID_FIELDS)

    def queries(self, split: str | None = None) -> pl.DataFrame:
        """All queries, or only those judged in `split`."""
        q = load_queries(self.root / "queries.jsonl")
        if split is None:
            return q
        judged = self.qrels(split).select("qid").unique()
        return q.join(judged, on="qid", how="semi").sort("qid")
