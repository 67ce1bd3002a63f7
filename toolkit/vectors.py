"""Precomputed vectors: embeddings made elsewhere (another model, a cluster via `hrt embed --engine ray`).

Two ways in, one mechanism: the store embeds chunk bodies ("title\\ntext") and caches vectors by (model, sha1 of
the body), so precomputed vectors are an `Embedder` that looks bodies up instead of running a model.

- A vectors file (Parquet or JSONL; what `hrt embed` writes): columns `text_hash`, `vector` and `model`, one
  row per chunk, made with the same chunk settings as the ingest (a missing chunk is an error naming it).
- A corpus whose documents carry a `vector` field: the vector of the whole document, so each such document
  must be one chunk (raise --chunk-size otherwise); the model that made them is named at ingest.

The model id is recorded in the store like any other, so queries must come from the same model (the
store refuses another one, naming both).
"""

from __future__ import annotations

import hashlib
import json
import math
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from .chunking import chunk_body, chunk_text
from .errors import InputError
from .files import JSON_LINES_SUFFIXES

VECTOR_FIELD = "vector"


def _sha1(s: str) -> str:
    return hashlib.sha1(s.encode("utf-8")).hexdigest()


class _Vector(list):
    """A checked vector that remembers where it came from ("notes.parquet row 3"), for later errors."""

    where: str = ""


def _where(v: Any, fallback: str) -> str:
    return getattr(v, "where", "") or fallback


def _check_lengths(vectors: list[tuple[str, Any]], source: str) -> None:
    """All vectors one length, else an InputError naming the first one whose length differs (and where)."""
    if not vectors:
        return
    first_label, first = vectors[0]
    for label, v in vectors[1:]:
        if len(v) != len(first):
            raise InputError(
                f"{_where(v, f'{source}: {label}')}: vector of {len(v)} numbers, but {_where(first, first_label)} "
                f"has {len(first)}: all vectors must come from one model, with one size"
            )


def check_vector(v: Any, where: str, field: str = VECTOR_FIELD) -> list[float]:
    """A finite, non-zero list of numbers, or an InputError naming where it came from (and its `field`)."""
    if not isinstance(v, list | tuple | np.ndarray) or len(v) == 0:
        raise InputError(f"{where}: field `{field}` must be a non-empty list of numbers")
    try:
        out = [float(x) for x in v]
    except (TypeError, ValueError) as e:
        raise InputError(f"{where}: field `{field}` must hold numbers only") from e
    if not all(math.isfinite(x) for x in out) or not any(out):
        raise InputError(f"{where}: field `{field}` has NaN/infinite values or is all zeros")
    checked = _Vector(out)
    checked.where = where
    return checked


# Vector sizes of models whose size is known without loading them: the packaged one.
KNOWN_DIMS = {"all-MiniLM-L6-v2": 384}


class PrecomputedEmbedder:
    """Looks chunk bodies up by sha1 in a table of supplied vectors (L2-normalised here)."""

    computes = False  # an ingest says its vectors were supplied, not computed (`IngestReport.embeddings_how`)

    backend = "precomputed"

    def __init__(self, model_id: str, by_hash: dict[str, list[float]], *, source: str = "supplied vectors") -> None:
        if not model_id:
            raise InputError(f"{source}: name the model that made the vectors (--model / model=)")
        _check_lengths([(f"vector {i}", v) for i, v in enumerate(by_hash.values())], source)
        dims = {len(v) for v in by_hash.values()}
        self.model_id, self.source = model_id, source
        self._dim = dims.pop() if dims else 0
        known = KNOWN_DIMS.get(model_id.removeprefix("sentence-transformers/"))
        if known and self._dim and self._dim != known:  # refused here, not at the first search (user trial AP)
            raise InputError(f"{source}: vectors of {self._dim} numbers, but {model_id} makes {known}-d vectors: name the "
                             "model that made them (--model / model=)")
        self._by_hash = by_hash

    @property
    def dim(self) -> int:
        return self._dim

    def supplies(self, text_hash: str) -> bool:
        """Whether a vector was supplied for this chunk body: it replaces a cached one (`Store` ingest)."""
        return text_hash in self._by_hash

    def stamp(self, title: str, text: str, chunk_size: int, chunk_overlap: int) -> str:
        """A fingerprint of the vectors supplied for a document's chunks: part of its content hash, so new
        vectors for the same text are a change, not "unchanged" with the old vectors kept."""
        h = hashlib.sha1()
        for c in chunk_text(text, chunk_size, chunk_overlap) or []:
            v = self._by_hash.get(_sha1(chunk_body(title, c.text)))
            h.update(b"-" if v is None else np.asarray(v, dtype=np.float32).tobytes())
        return h.hexdigest()[:16]

    def embed(self, texts: list[str], *, progress: bool = False) -> np.ndarray:
        hashes = [_sha1(t) for t in texts]
        missing = [i for i, h in enumerate(hashes) if h not in self._by_hash]
        if missing:
            first = texts[missing[0]][:80].replace("\n", " ")
            raise InputError(
                f"{self.source}: no vector for {len(missing)} of {len(texts)} chunks (first: {first!r}); the vectors "
                "must be made from the same corpus with the same chunk settings (hrt embed --chunk-size/--chunk-overlap)"
            )
        arr = np.asarray([self._by_hash[h] for h in hashes], dtype=np.float32).reshape(len(texts), self._dim)
        return arr / np.linalg.norm(arr, axis=1, keepdims=True)


def read_vectors(path: str | Path) -> PrecomputedEmbedder:
    """The vectors file `hrt embed` writes (Parquet or JSONL: text_hash, vector, model)."""
    p = Path(path)
    if not p.exists():
        raise InputError(f"{p}: no such vectors file")
    try:
        df = pl.read_parquet(p) if p.suffix.lower() == ".parquet" else pl.read_ndjson(p)
    except Exception as e:
        raise InputError(f"{p}: cannot read vectors ({e})") from e
    need = {"text_hash", VECTOR_FIELD, "model"}
    if not need <= set(df.columns):
        raise InputError(f"{p}: a vectors file needs columns {sorted(need)}; it has {df.columns}")
    models = df["model"].unique().to_list()
    if len(models) != 1:
        raise InputError(f"{p}: vectors of several models {sorted(map(str, models))}: one file, one model")
    matrix = _vector_matrix(df[VECTOR_FIELD])
    if matrix is not None:  # one float32 row view per vector: a Python float per number took 14x the file (trial BL)
        by_hash: dict[str, Any] = dict(zip(df["text_hash"].to_list(), matrix, strict=True))
        return PrecomputedEmbedder(str(models[0]), by_hash, source=str(p))
    by_hash = {}  # ragged, non-numeric or bad rows: checked one by one, so the error names the first bad row
    for i, (h, v) in enumerate(zip(df["text_hash"].to_list(), df[VECTOR_FIELD].to_list(), strict=True)):
        by_hash[h] = check_vector(v, f"{p} row {i}")
    return PrecomputedEmbedder(str(models[0]), by_hash, source=str(p))


def _vector_matrix(col: pl.Series) -> np.ndarray | None:
    """Every row of a vectors column as one float32 matrix, when all are lists of numbers of one length, finite and
    not all zero (what `check_vector` asks of each); None otherwise, for the row-by-row check to name the row."""
    dtype = col.dtype
    if not isinstance(dtype, pl.List | pl.Array) or not dtype.inner.is_numeric() or col.null_count() or not len(col):
        return None
    if isinstance(dtype, pl.List):
        lens = col.list.len()
        if lens.min() != lens.max() or not lens.min():
            return None
        col = col.list.to_array(int(lens.min()))
    with np.errstate(over="ignore"):  # a float64 past float32's range becomes inf, and is refused below
        matrix = col.to_numpy().astype(np.float32, copy=False)
    if matrix.ndim != 2 or not np.isfinite(matrix).all() or not matrix.any(axis=1).all():
        return None
    return matrix


def document_vectors(docs: list[dict[str, Any]], chunk_size: int, chunk_overlap: int, model: str | None) -> PrecomputedEmbedder:
    """Vectors carried by the documents themselves (a `vector` field): each document must be one chunk."""
    _check_lengths([(f"document {d['doc_id']!r}", d[VECTOR_FIELD]) for d in docs if d.get(VECTOR_FIELD) is not None],
                   "corpus vectors")
    by_hash: dict[str, list[float]] = {}
    for d in docs:
        v = d.get(VECTOR_FIELD)
        if v is None:
            raise InputError(f"document {d['doc_id']!r} has no `{VECTOR_FIELD}` while others do: give every document one, or none")
        chunks = chunk_text(d["text"], chunk_size, chunk_overlap)
        if len(chunks) != 1:
            raise InputError(
                f"document {d['doc_id']!r} carries a vector but is split into {len(chunks)} chunks at chunk size "
                f"{chunk_size} ({len(d['text'])} characters): raise --chunk-size, or embed chunks with `hrt embed`"
            )
        by_hash[_sha1(chunk_body(d["title"], chunks[0].text))] = v
    return PrecomputedEmbedder(model or "", by_hash, source="corpus vectors")


def write_vectors(frame: pl.DataFrame, out: str | Path, model: str, meta: dict[str, Any] | None = None) -> Path:
    """Write [doc_id, chunk_id, text_hash, vector] + model as Parquet (or JSONL by suffix) for `hrt ingest --vectors`."""
    out = Path(out)
    out.parent.mkdir(parents=True, exist_ok=True)
    df = frame.with_columns(pl.lit(model).alias("model"))
    if out.suffix.lower() in JSON_LINES_SUFFIXES:
        df.write_ndjson(out)
    else:
        df.write_parquet(out, metadata={"hrt": json.dumps(meta or {})})
    return out
