"""The store: one DuckDB file holding documents, chunks, embeddings, the FTS index and every cache.

The `Store` class owns all I/O of the toolkit. Stages receive frames from it and never open the file.

Design notes
- Ingest computes embeddings first (each batch saved to `embedding_cache` as it is made, so an interrupted
  run resumes), then swaps documents, chunks and embeddings in ONE transaction with the FTS rebuild: a crash
  leaves the store exactly as it was.
- Tables carry no PRIMARY KEY constraints: DuckDB checks them eagerly inside a transaction, which breaks
  delete-then-reinsert of a changed document; uniqueness is kept by the ingest logic and tested.
- BM25 scores use the natural log (Lucene/bm25s convention), i.e. DuckDB's `match_bm25` times ln(10) (its
  macro uses the base-10 `log`). Rankings are identical; the fixed |x|/(1+|x|) map then means what QMD meant.
"""

from __future__ import annotations

import functools
import glob
import hashlib
import json
import logging
import math
import os
import re
import shutil
import stat
import sys
import threading
import time
import unicodedata
import weakref
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from contextlib import contextmanager, suppress
from dataclasses import asdict, dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, get_args

import duckdb
import numpy as np
import polars as pl

from . import interrupts
from .analysis import ANALYSIS_VERSION, CHANGED_SINCE_3, FTS_IGNORE, lexical_text, query_lexical_text
from .chunking import chunk_body, chunk_text
from .config import FILTER_KEY_RULE, JSON_NUMBER, Stemmer, Stopwords, filter_key_ok, filter_value
from .embed import DEFAULT_MODEL, Embedder, embedder_model_id, make_embedder
from .errors import InputError, StoreBusyError, StoreDamagedError, StoreError, ToolkitError, install_hint
from .files import replace_durably
from .metatypes import VALUES_SCHEMA, typed_values, values_frame
from .progress import progress_bar

if TYPE_CHECKING:
    from .loaders import Corpus

# 2: every write stamps `analysis_generation`. Toolkits from 2026-11-25 on (commit 8094e62) refuse a store of a newer
# schema (even to search it); older ones do not check, and their writes are noticed by the stamp instead.
SCHEMA_VERSION = "2"
STAGE_CACHE_KEYS = 32  # query sets x prepare settings kept in the stage cache, the most recent first
# A score block is (queries x chunks) floats. Capping its cells keeps memory flat as the corpus grows: a
# million-chunk store scores 32 queries per block (about 256 MB of float64) instead of 256 (2 GB).
BLOCK_CELLS = 32_000_000
# `hrt search` reads through numpy instead of importing pyarrow up to this many documents: the numpy path is
# ~2.5x slower per row, so at ~100k documents its extra time on the document-source read (~25 ms) still
# stays below pyarrow's import (~60 ms).
LEAN_MAX_DOCUMENTS = 100_000
# The names the store registers frames under (the closed list `_register` checks before naming one in SQL).
_REGISTERED = frozenset({"want", "need", "newvec", "gone", "gone_hashes", "newvalues", "newdocs", "newchunks", "ids", "vids",
                         "cids", "rq", "rp"})
_SQL_PATH_MAX_QUERIES = 8  # below this many queries, and with no term matrix read yet, BM25 runs in SQL
_MATRIX_MIN_RENT_S = 0.5  # `Store._bm25_in_sql`: SQL time a generation spends before the matrix's price is asked
_MATRIX_S_PER_POSTING = 0.7e-6  # `Store._bm25_matrix_price` before this store has built a matrix
# From this many chunks on, BM25 top-k works on the sparse scores (`Store._sparse_topk`) instead of blocks.
SPARSE_TOPK_MIN_CHUNKS = 50_000
SPARSE_BLOCK = 64  # queries per sparse product; blocks run on a thread pool, one thread per core
CAND_SCHEMA = {"qid": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "rank": pl.Int64, "score": pl.Float64}


# The closed lists the FTS settings are checked against: `PRAGMA create_fts_index` takes no bound
# parameters, so these two values go into SQL text and must never be anything else (#16).
STEMMERS: tuple[str, ...] = get_args(Stemmer)
STOPWORDS: tuple[str, ...] = get_args(Stopwords)


@dataclass(frozen=True)
class IndexSettings:
    """Index-time settings: changing any of them re-chunks (chunking), re-analyses every chunk's BM25 text and
    rebuilds the FTS index (compounds), or rebuilds the FTS index (stemmer, stopwords).

    `compounds`: index (and query) the compound forms of technical tokens beside the words (`max_pool_size` also as
    `max pool size`, `v2.1.0` as `v2_1_0`: `analysis.lexical_text`). False gives plain BM25 over DuckDB's tokenizer,
    stemmer and stopwords, a baseline a paper can cite (`hrt ingest --no-compounds`, docs/bm25.md); CJK and other
    unspaced scripts keep their character terms either way. The store's BM25 text is made only by `lexical_text`
    and `query_text` below, so documents and queries cannot be analysed apart."""

    chunk_size: int = 1000
    chunk_overlap: int = 150
    stemmer: str = "porter"
    stopwords: str = "english"
    compounds: bool = True

    def __post_init__(self) -> None:
        for name, value, allowed in (("stemmer", self.stemmer, STEMMERS), ("stopwords", self.stopwords, STOPWORDS)):
            if value not in allowed:
                plain = isinstance(value, str) and re.fullmatch(r"[\w-]{1,40}", value)
                shown = repr(value) if plain else "(not a plain name)"
                raise InputError(f"--{name} / lexical.{name}: unknown {name} {shown}; use one of {', '.join(allowed)}")
        for name in ("chunk_size", "chunk_overlap"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise InputError(f"--{name.replace('_', '-')}: must be a non-negative integer, got {v!r}")
        if not isinstance(self.compounds, bool):
            raise InputError(f"--compounds / lexical.compounds: must be true or false, got {self.compounds!r}")

    def lexical_text(self, text: str) -> str:
        """A chunk's BM25 text under these settings (`analysis.lexical_text`)."""
        return lexical_text(text, compounds=self.compounds)

    def query_text(self, text: str) -> str:
        """A query's BM25 text under these settings (`analysis.query_lexical_text`): analysed as the documents were."""
        return query_lexical_text(text, compounds=self.compounds)

    def fts_key(self) -> tuple[Any, ...]:
        """What the BM25 index is built from beside the chunks: another value rebuilds it whole."""
        return (self.stemmer, self.stopwords, self.compounds)

    def record(self) -> dict[str, Any]:
        """The settings as the store's meta, `Store.index_record` and `hrt info` show them: `compounds` only when off, so a store
        with the defaults reads as before (an older toolkit opens it; a learned model's record of its training
        stores, made before the field, compares equal)."""
        out = asdict(self)
        if self.compounds:
            del out["compounds"]
        return out


@dataclass
class IngestReport:
    documents: int
    added: int
    changed: int
    unchanged: int
    removed: int
    chunks_written: int
    embeddings_computed: int
    embeddings_from_cache: int
    fts_rebuilt: bool
    # Records left out of documents given as dicts or a frame (empty ones), as `Corpus.skipped` says.
    skipped: list[Any] = field(default_factory=list)
    # After the ingest: chunks of the store with an embedding, and all its chunks (`Store.embedding_coverage`).
    embedded_chunks: int = 0
    total_chunks: int = 0
    # What the ingest did to the HNSW index beside the store: "rebuilt", "removed" (no vectors left), or None.
    vector_index: str | None = None
    # The BM25 index was updated for the changed chunks only (`toolkit.fts_update`), not rebuilt whole.
    fts_in_place: bool = False
    # How the new vectors came: "computed" by the embedder, or "supplied" (`--vectors`: read, not embedded).
    embeddings_how: str = "computed"
    # Of the changed documents, those whose text is as stored and whose title changed (a new toolkit titling
    # code files by their path: every file of a repository "changed" without an edit, and was embedded again).
    retitled: int = 0

    @property
    def partly_embedded(self) -> bool:
        """Some chunks but not all have embeddings: dense search ranks only those, so hybrid results lean to
        them without a word (a `--no-embed` ingest into a store that holds vectors)."""
        return 0 < self.embedded_chunks < self.total_chunks

    def summary(self) -> str:
        partly = (
            f"; dense search covers {self.embedded_chunks:,} of {self.total_chunks:,} chunks: ingest again without "
            "--no-embed (embed=True) to embed the rest"
            if self.partly_embedded else ""
        )
        return (
            f"{self.documents} document{'s' if self.documents != 1 else ''}: {self.added} added, {self.changed} changed"
            + (f" ({self.retitled:,} in their title only)" if self.retitled else "") + ", "
            f"{self.unchanged} unchanged, {self.removed} removed; {self.chunks_written} chunk{'s' if self.chunks_written != 1 else ''} "
            "written; embeddings: "
            f"{self.embeddings_computed} {self.embeddings_how}, {self.embeddings_from_cache} from cache; "
            f"BM25 index {('updated in place' if self.fts_in_place else 'rebuilt') if self.fts_rebuilt else 'unchanged'}{partly}"
            + (f"; HNSW vector index {self.vector_index}" if self.vector_index else "")
        )


def _describe(emb: Embedder) -> str:
    """'fake-emb' (from http://host/v1/embeddings): a model and, for an endpoint, where it was asked."""
    url = getattr(emb, "url", None)
    return f"{emb.model_id!r}" + (f" (from {url})" if url else "")


# What the toolkit's own embedders record as `embedding_backend`; anything else is an embedder of the caller's.
OWN_BACKENDS = ("torch", "onnx", "onnx-int8", "http", "precomputed")


def _check_embedder(emb: Any) -> None:
    """An embedder of your own (`toolkit.embed.Embedder`) needs a `model_id` (cached vectors are keyed by it) and
    an `embed(texts)`: said when the Store is made, not as an AttributeError deep in an ingest (user trial AZ)."""
    name = type(emb).__name__
    mid = getattr(emb, "model_id", None)
    if not isinstance(mid, str) or not mid.strip():
        raise ToolkitError(f"embedder {name}: needs a `model_id` string naming the model (cached vectors are kept under "
                           f"it, and the store records it); got {mid!r}")
    if not callable(getattr(emb, "embed", None)):
        raise ToolkitError(f"embedder {name} ({mid!r}): needs a method `embed(texts) -> array (len(texts), dim)`")


def _vectors(emb: Embedder, texts: list[str]) -> np.ndarray:
    """`emb.embed(texts)` as the store keeps vectors: float32, one row per text, each of length 1. Dense search
    scores by the inner product of unit vectors (the cosine): an embedder of your own that returned a list, or
    vectors that are not unit length, failed with an AttributeError or showed "cosines" of 499 (user trial AZ).
    The toolkit's own embedders return unit vectors already, which pass through unchanged."""
    v = np.asarray(emb.embed(texts), dtype=np.float32)
    if v.ndim != 2 or v.shape[0] != len(texts):
        raise ToolkitError(f"embedder {_describe(emb)} returned an array of shape {v.shape} for {len(texts)} texts: "
                           f"expected ({len(texts)}, dim)")
    if not np.isfinite(v).all():  # NaN or inf: a NaN query vector found nothing, without a word (review)
        row = int(np.flatnonzero(~np.isfinite(v).all(axis=1))[0])
        raise ToolkitError(f"embedder {_describe(emb)} returned a vector with NaN or infinite values (text {row + 1} of "
                           f"{len(texts)}: {texts[row][:60]!r})")
    norms = np.linalg.norm(v, axis=1, keepdims=True)
    off = (np.abs(norms - 1.0) > 1e-3) & (norms > 0)  # (an all-zero vector stays so: cosine 0 with every text)
    return np.where(off, v / np.where(norms > 0, norms, 1.0), v).astype(np.float32) if off.any() else v


def _local_model(label: str) -> bool:
    """Whether a recorded model id loads without the network: the packaged model, a path, or a hub model
    already in the local Hugging Face cache."""
    from .embed import INT8_SUFFIX, resolve_model

    label = label.removesuffix(INT8_SUFFIX)
    try:
        if Path(resolve_model(label)[1]).expanduser().exists():
            return True
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(label, "config.json"), str)
    except Exception:  # not a valid hub id, hub client missing: not loadable here
        return False


def sha1(s: str) -> str:
    return hashlib.sha1(s.encode("utf-8")).hexdigest()


def text_identity(text: str) -> str:
    """documents.text_hash, what identical copies are collapsed by: the sha1 of the NFC form, so a page
    synced from macOS (decomposed accents) and the same page written on Linux are one (user trial AC). NFC
    text hashes as before; DuckDB's `sha1(nfc_normalize(text))` gives the same value (`Store._migrate`)."""
    return sha1(text if text.isascii() else unicodedata.normalize("NFC", text))


DUCKDB_MAGIC = (8, b"DUCK")  # offset and bytes of the magic in a DuckDB database file's header


def _check_store_file(path: Path) -> None:
    """Refuse an existing path that is not a DuckDB database file, before DuckDB sees it: DuckDB 1.5.5 opens a
    JSONL/CSV/Parquet file as an in-memory database with a view over it, so `hrt ingest c.jsonl --store
    c.jsonl` reported success and saved nothing."""
    if path.is_dir():
        raise StoreError(f"{path}: is a folder, not a toolkit store (a store is one DuckDB file, e.g. notes.duckdb)")
    at, magic = DUCKDB_MAGIC
    try:
        with path.open("rb") as f:
            head = f.read(at + len(magic))
    except OSError as e:
        raise StoreError(f"{path}: cannot read the store ({e.strerror})") from e
    if head[at:] != magic:
        raise StoreError(f"{path}: not a toolkit store (not a DuckDB database file): name a store made by "
                         "`hrt ingest`, or a new path to make one (e.g. notes.duckdb)")


def _packaged_extension(module: str, name: str, label: str, missing: str) -> str:
    """Path of a DuckDB extension shipped inside a pip package (`duckdb-extension-<name>`): this machine cannot
    download extensions, so they load from the package by path."""
    import importlib

    try:
        pkg = importlib.import_module(module)
    except ImportError as e:
        raise StoreError(missing) from e
    p = Path(pkg.__file__).parent / "extensions" / f"v{duckdb.__version__}" / f"{name}.duckdb_extension"
    if not p.exists():
        raise StoreError(f"no {label} extension for DuckDB {duckdb.__version__} at {p}; pin duckdb==1.5.5")
    return str(p)


def vss_extension_path() -> str:
    """DuckDB's vector similarity search extension (HNSW), from `duckdb-extension-vss`."""
    return _packaged_extension(
        "duckdb_extension_vss", "vss", "vss",
        "an HNSW vector index needs DuckDB's vss extension: `pip install duckdb-extension-vss==1.5.5` "
        "(or the toolkit's `scale` extra); this machine cannot download extensions",
    )


def _stated_limit_bytes(stated: str) -> int:
    """Bytes for a limit as DuckDB states it ("18.8 GiB", "953.6 MiB"). DuckDB shows no byte value and its
    display truncates, so setting the stated text back drifts down a step each time; the middle of the
    stated step reads back as the same text, so a restored limit is stable and within half a step."""
    m = re.fullmatch(r"([\d.]+)\s*(bytes|KiB|MiB|GiB|TiB|PiB)", stated.strip())
    if m is None:
        raise StoreError(f"cannot read DuckDB's memory limit {stated!r}")
    number, unit = m.groups()
    step = 10.0 ** -len(number.partition(".")[2])
    scale = 1 << (10 * ["bytes", "KiB", "MiB", "GiB", "TiB", "PiB"].index(unit))
    return int(float(number) * scale) if unit == "bytes" else int((float(number) + step / 2) * scale)


def _usearch() -> Any:
    """The usearch package (`usearch.index`), or a StoreError naming the extra that brings it."""
    try:
        from usearch import index
    except ImportError as e:
        raise StoreError(f"an HNSW vector index needs usearch: {install_hint('usearch', 'scale')}") from e
    return index


def hnsw_index(vecs: np.ndarray, *, m: int, ef_construction: int, ef_search: int) -> tuple[Any, np.ndarray]:
    """(usearch HNSW index over `vecs`, cosine, int8, keys = row numbers; the rows it does not find).

    HNSW can strand nodes: a search from the entry point never reaches them, whatever ef_search. usearch's
    concurrent `add` strands more (unum-cloud/USearch#735: 1-10 of 4,000-8,000 clustered vectors per 2-thread
    build, a different set each time; 5 CACM chunks were never found again), but a one-thread build strands
    some too. So after the build every vector is searched for itself, and the rows not among their own top 2
    are returned: `_dense_hnsw` scores those exactly for every query, so no chunk is lost to the graph. The
    self-search runs at ef_search 16: a stranded node is missed at any ef, and a cheap search flags more
    rows that are merely hard to find (1.2% of 60k real vectors with near copies, against 0.2% at ef 128),
    which costs each query a small exact product, while ef 128 took longer than the build itself."""
    index = _usearch().Index(ndim=vecs.shape[1], metric="cos", dtype="i8", connectivity=m,
                             expansion_add=ef_construction, expansion_search=16)
    threads = os.cpu_count() or 1
    index.add(np.arange(len(vecs), dtype=np.uint64), vecs, threads=threads)
    found = index.search(vecs, min(2, len(vecs)), threads=threads)
    keys = np.asarray(found.keys).reshape(len(vecs), -1)
    stranded = np.flatnonzero(~(keys == np.arange(len(vecs))[:, None]).any(axis=1))
    index.expansion_search = ef_search
    return index, stranded


@contextmanager
def _file_lock(path: Path) -> Iterator[None]:
    """An exclusive advisory lock on `path` between processes (fcntl; where that is missing, e.g. on Windows,
    no lock: builders then race as before, and the rename still keeps any half-built file out of sight)."""
    try:
        import fcntl
    except ImportError:  # pragma: no cover - not on POSIX
        yield
        return
    with open(path, "a+b") as fh:
        fcntl.flock(fh, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(fh, fcntl.LOCK_UN)


# A query's tokens that can be BM25 terms: the index dropped the documents' stopwords before stemming, so a query's
# must go before stemming too. DuckDB's own `match_bm25` stems them and looks them up: "using" became "us" (the stem
# of "usefulness"), "several" "sever", "the" matched "thes", and a query of stopwords alone found documents (trial BF:
# 12 of 28 CACM and 38 of 50 Vaswani test queries scored such terms). Lucene, Elasticsearch and bm25s drop them.
QUERY_TERM_FILTER = "tok <> '' AND tok NOT IN (SELECT sw FROM fts_main_chunks.stopwords)"


def _qtf(on: bool, count: str = "count(*)") -> str:
    """SQL factor of a query term's IDF: its count in the query (`query_term_frequency`, as Lucene) or 1 (distinct
    terms, as DuckDB's `match_bm25`). A bool is checked: only these two texts reach the SQL."""
    if not isinstance(on, bool | np.bool_):
        raise InputError(f"query_term_frequency must be true or false, got {on!r}")
    return f"{count}::DOUBLE" if on else "1"


def _signature_checked(path: str) -> str:
    """`path`, once DuckDB has checked its signature in this process (`_checked_signature`); a file replaced since
    (another inode, size or time: a reinstall under a long-lived kernel) is checked again."""
    st = os.stat(path)
    return _checked_signature(path, (st.st_ino, st.st_size, st.st_mtime_ns))


def _memory_connection() -> duckdb.DuckDBPyConnection:
    """An in-memory DuckDB connection without the progress bar, which DuckDB draws on stdout for a statement past
    2 s: on a busy machine the extension check drew one into `hrt search`'s output (a loaded CI run's lexical
    search printed "100% ▕███▏" before its results), and compacting a large store would too. (Not a connect option:
    DuckDB refuses it as a global one.)"""
    con = duckdb.connect(":memory:")
    con.execute("SET enable_progress_bar = false")
    return con


@functools.cache
def _checked_signature(path: str, stamp: tuple[int, int, int]) -> str:
    """`path`, after DuckDB's own signature check of the extension file, made once per process in a throw-away
    in-memory database. A store then loads the file with `allow_unsigned_extensions`: the check (a SHA-256 of an
    11 MB file) cost ~35 ms of CPU on every store opened, and a process opening stores briefly (a memory service,
    a script, the test suite's ~800 stores) paid it each time for a file that had not changed. Every store opens
    with the same setting, so two Stores on one file in a process never disagree about it."""
    con = _memory_connection()
    try:
        con.execute("LOAD '" + path.replace("'", "''") + "'")
    except duckdb.Error as e:
        raise StoreError(f"{path}: DuckDB refuses this extension file ({str(e).splitlines()[0]}); reinstall its "
                         "package (duckdb-extension-fts / duckdb-extension-vss ==1.5.5)") from None
    finally:
        con.close()
    return path


def fts_extension_path() -> str:
    """DuckDB's full-text search extension, from `duckdb-extension-fts` (never downloaded)."""
    return _packaged_extension(
        "duckdb_extension_fts", "fts", "FTS",
        "the DuckDB full-text-search extension is missing: `pip install duckdb-extension-fts==1.5.5` "
        "(this machine cannot download extensions)",
    )


_DDL = """
CREATE TABLE IF NOT EXISTS meta(key VARCHAR, value VARCHAR);
CREATE TABLE IF NOT EXISTS documents(doc_id VARCHAR, source VARCHAR, scope VARCHAR, title VARCHAR, text VARCHAR,
    metadata JSON, content_hash VARCHAR, text_hash VARCHAR);
CREATE TABLE IF NOT EXISTS chunks(chunk_id VARCHAR, doc_id VARCHAR, ord INTEGER, start_char INTEGER,
    end_char INTEGER, text VARCHAR, text_hash VARCHAR, lex_text VARCHAR);
CREATE TABLE IF NOT EXISTS embedding_cache(model VARCHAR, text_hash VARCHAR, vec FLOAT[]);
CREATE TABLE IF NOT EXISTS rerank_cache(model VARCHAR, query_hash VARCHAR, text_hash VARCHAR, score DOUBLE);
CREATE TABLE IF NOT EXISTS stage_cache(key VARCHAR, name VARCHAR, data BLOB, created TIMESTAMP DEFAULT current_timestamp);
CREATE TABLE IF NOT EXISTS doc_values(doc_id VARCHAR, field VARCHAR, num DOUBLE, ts TIMESTAMP, text VARCHAR);
"""


def _chunk_layout(chunks: pl.DataFrame) -> dict[str, Any]:
    """The chunk layout both batched search paths share, from [chunk_id, doc_id, scope] rows ordered by
    (doc_id, ord): ids as Series (gathered into results), each document's first and end column, the
    document of each chunk, and scopes as integer codes (masking is one broadcast per block of queries)."""
    doc_ids = chunks["doc_id"].to_numpy()
    starts = np.flatnonzero(np.r_[True, doc_ids[1:] != doc_ids[:-1]])
    doc_scope = chunks["scope"].to_numpy()[starts]
    names = {s: i for i, s in enumerate(sorted({x for x in doc_scope.tolist() if x is not None}))}
    return {
        "chunk_ids": chunks["chunk_id"].cast(pl.Utf8),
        "doc_ids": chunks["doc_id"].cast(pl.Utf8),
        "starts": starts,
        "doc_ends": np.r_[starts[1:], len(doc_ids)],
        "doc_of_chunk": np.repeat(np.arange(len(starts)), np.diff(np.r_[starts, len(doc_ids)])),
        "doc_scope": doc_scope,
        "scope_names": names,
        "doc_scope_code": np.array([names.get(x, -2) for x in doc_scope.tolist()]),
    }


def _candidates(m: dict[str, Any], queries: pl.DataFrame, *parts: list[np.ndarray]) -> pl.DataFrame:
    """The candidate frame from the top-k kernels' per-block pieces (query rows, chunk columns, ranks, scores)."""
    out_q, out_k, out_r, out_s = parts
    if not out_q:
        return pl.DataFrame(schema=CAND_SCHEMA)
    chunk_idx = np.concatenate(out_k)
    return pl.DataFrame(
        {
            "qid": queries["qid"].cast(pl.Utf8).gather(np.concatenate(out_q)),
            "doc_id": m["doc_ids"].gather(chunk_idx),
            "chunk_id": m["chunk_ids"].gather(chunk_idx),
            "rank": np.concatenate(out_r),
            "score": np.concatenate(out_s),
        },
        schema=CAND_SCHEMA,
    )


class _Closed:
    """Stands in for the DuckDB connection of a closed store, so that any later use names the store instead
    of DuckDB's bare "Connection already closed!". Nothing is checked per query: the open path is untouched."""

    def __init__(self, path: Path) -> None:
        self._path = path

    def __getattr__(self, name: str) -> NoReturn:
        self.refuse()

    def refuse(self) -> NoReturn:
        raise StoreError(f"store {self._path} is closed (use it inside its `with` block, or open it again)")


class _Calls:
    """The store's calls under way, per thread, so that `close` lets the other threads' calls finish first. A service
    closing its Store on shutdown while a worker searched killed the worker with DuckDB's bare "Connection already
    closed!", or "No open result set" when the close fell between a statement and its fetch."""

    WAIT_S = 30.0  # how long `close` waits for them; then it interrupts their statements and closes, with a warning

    def __init__(self, path: Path) -> None:
        self._path = path
        self._cond = threading.Condition()
        self._by_thread: dict[int, int] = {}
        self._closing = False

    @contextmanager
    def running(self) -> Iterator[None]:
        tid = threading.get_ident()
        with self._cond:
            if self._closing and tid not in self._by_thread:  # begun after the close: it would not be waited for
                _Closed(self._path).refuse()
            self._by_thread[tid] = self._by_thread.get(tid, 0) + 1
        try:
            yield
        finally:
            with self._cond:
                self._by_thread[tid] -= 1
                if not self._by_thread[tid]:
                    del self._by_thread[tid]
                    self._cond.notify_all()

    @property
    def closing(self) -> bool:
        """`close` has begun: it waits for the other threads' calls, then interrupts them."""
        return self._closing

    def wait_for_others(self, timeout_s: float) -> int:
        """Refuse new calls of other threads, and wait until none is inside a call, for at most `timeout_s`; the
        calls still running."""
        me = threading.get_ident()
        with self._cond:
            self._closing = True
            self._cond.wait_for(lambda: all(t == me for t in self._by_thread), timeout_s)
            return sum(n for t, n in self._by_thread.items() if t != me)


_Cls = TypeVar("_Cls", bound=type)


def _counted(cls: _Cls) -> _Cls:
    """Every public method and property of `cls` runs inside `self._calls.running()` (`_Calls`): one rule, so a
    method added later is covered too. Private helpers run inside a public call. Typed to return its argument's
    type: typed as `type`, pyright saw `Store` as a bare `type` and every Store in a caller's code as Any (user
    trial BP)."""
    import functools

    def wrap(fn: Callable[..., Any]) -> Callable[..., Any]:
        @functools.wraps(fn)
        def call(self: Any, *args: Any, **kwargs: Any) -> Any:
            with self._calls.running():
                try:
                    return fn(self, *args, **kwargs)
                except duckdb.InterruptException:
                    # `_closing` too: close interrupts before it swaps in `_Closed`, and the interrupted thread may
                    # get here first (it raised DuckDB's own exception 1 run in ~10 of `make test`)
                    if not (self._calls.closing or isinstance(getattr(self.con, "_con", None), _Closed)):
                        raise
                    # `close` interrupted it after its wait: an expected StoreError, not DuckDB's own (user trial BN)
                    raise StoreError(f"{self.path}: the store was closed while this call ran; its statement was "
                                     "interrupted") from None
        return call

    for name, member in list(vars(cls).items()):
        if name.startswith("_") or name == "close":
            continue
        if isinstance(member, property) and member.fget is not None:
            setattr(cls, name, property(wrap(member.fget), member.fset, member.fdel, member.__doc__))
        elif callable(member) and not isinstance(member, staticmethod | classmethod | type):
            setattr(cls, name, wrap(member))
    return cls


class _Result:
    """A statement's result whose `fetchone`/`fetchmany` read the whole result at once (rows kept here, handed out
    in order), so that no result is left part-read on its cursor. DuckDB streams a SELECT's result: until it is
    read to the end or the cursor runs its next statement, the statement's transaction and table scan stay open,
    and the scan holds DuckDB's checkpoint lock (measured on 1.5.5). A thread that read one row of a count and
    then went idle, or ended, kept every checkpoint out: two threads sharing a writable Store grew the WAL to
    122 MB in a minute (user trial BH), and an explicit CHECKPOINT was refused ("other write transactions
    active"). The store's `fetchone` reads are single rows, so reading them whole costs nothing.
    Everything else (`fetchall`, `pl`, `fetchnumpy`, `arrow`, `description`) is the cursor's own; those read whole."""

    __slots__ = ("_cur", "_rows")

    def __init__(self, cur: duckdb.DuckDBPyConnection) -> None:
        self._cur = cur
        self._rows: list[tuple[Any, ...]] | None = None

    def _buffered(self) -> list[tuple[Any, ...]]:
        if self._rows is None:
            self._rows = self._cur.fetchall()
            self._rows.reverse()  # popped from the end: first row first
        return self._rows

    def fetchone(self) -> tuple[Any, ...] | None:
        rows = self._buffered()
        return rows.pop() if rows else None

    def fetchmany(self, size: int = 1) -> list[tuple[Any, ...]]:
        rows = self._buffered()
        return [rows.pop() for _ in range(min(size, len(rows)))]

    def fetchall(self) -> list[tuple[Any, ...]]:
        if self._rows is None:
            return self._cur.fetchall()
        rows, self._rows = self._rows[::-1], []
        return rows

    def __getattr__(self, name: str) -> Any:
        return getattr(self._cur, name)


class _Connection:
    """A DuckDB connection whose bound parameters do not import pandas (in a process that asks for it).

    DuckDB 1.5's Python client compares every bound value with `pandas.NaT` and `pandas.NA` before converting it
    (`GetPythonObjectType` in its python_conversion.cpp), and so imports pandas at the first bound parameter of
    the process: more than `import duckdb, polars` costs, in every `hrt search`. While pandas is not imported no
    value can be NaT or NA, so for the duration of such a call the import is refused (`sys.modules["pandas"] =
    None`); DuckDB treats pandas as optional and skips the comparison, and the next call tries again. Only where
    `refuse_pandas` was set (the `hrt` command) and only while a single Python thread runs, so that no other code
    can be refused pandas meanwhile. Frames reach SQL as polars LazyFrames (`Store._register`): a registered
    Arrow table would make DuckDB import pyarrow.dataset, which imports pandas too.
    Everything else is the DuckDB connection's own (`__getattr__`)."""

    refuse_pandas = False

    def __init__(self, con: duckdb.DuckDBPyConnection) -> None:
        self._con: duckdb.DuckDBPyConnection | _Closed = con
        self.small = True  # the store's whole-table reads are small (set by `Store` where it matters)
        # A DuckDB connection used by two threads at once deadlocked the process (user trial N: an agent
        # serving two users from one Store): each other thread gets its own cursor on the same database,
        # as DuckDB's documentation asks, with its own transactions and registered frames.
        self._owner = threading.get_ident()
        self._cursors: dict[int, duckdb.DuckDBPyConnection] = {}
        # The thread each cursor was made for: its cursor is closed once it has ended (`release_ended`), and a
        # new thread that got an ended one's id (the OS reuses them) gets a cursor of its own.
        self._cursor_threads: dict[int, weakref.ref[threading.Thread]] = {}
        self._cursor_lock = threading.Lock()

    @property
    def _active(self) -> duckdb.DuckDBPyConnection | _Closed:
        """The connection of the calling thread: the one opened, or a cursor of it made for this thread."""
        con = self._con
        tid = threading.get_ident()
        if tid == self._owner or isinstance(con, _Closed):
            return con
        with self._cursor_lock:  # both read together: `release_ended` in another thread deletes both (the review)
            cur, ref = self._cursors.get(tid), self._cursor_threads.get(tid)
        if cur is None or ref is None or ref() is not threading.current_thread():
            self.release_ended()  # a service's thread pool churns threads: each new one reclaims the ended ones'
            with self._cursor_lock:
                cur = self._cursors[tid] = con.cursor()
                self._cursor_threads[tid] = weakref.ref(threading.current_thread())
            cur.execute("SET enable_progress_bar = false")
        return cur

    def release_ended(self) -> int:
        """Close the cursors of threads that have ended (how many): each holds DuckDB's per-connection state (its
        registered frames, a client context) until the store closes, and a thread pool that replaces its threads
        made one per thread ever started. A thread that ended cannot be using its cursor."""
        with self._cursor_lock:
            ended = [tid for tid, ref in self._cursor_threads.items() if (t := ref()) is None or not t.is_alive()]
            for tid in ended:
                with suppress(duckdb.Error):
                    self._cursors[tid].close()
                del self._cursors[tid], self._cursor_threads[tid]
        return len(ended)

    def interrupt_cursors(self) -> None:
        """Interrupt the statements the other threads' cursors run (`Store.close` after its wait)."""
        with self._cursor_lock:
            for cur in self._cursors.values():
                with suppress(duckdb.Error):
                    cur.interrupt()

    def close_cursors(self) -> None:
        """Close the other threads' cursors (before the connection itself)."""
        with self._cursor_lock:
            for cur in self._cursors.values():
                with suppress(duckdb.Error):
                    cur.close()
            self._cursors.clear()
            self._cursor_threads.clear()

    def __getattr__(self, name: str) -> Any:
        return getattr(self._active, name)

    @property
    def lean(self) -> bool:
        """In a process that asked for lean imports (`hrt search`), on a small store, while pyarrow is not
        imported yet. Past `LEAN_MAX_DOCUMENTS` the whole-table reads a search makes (document sources) cost
        more through numpy than importing pyarrow does."""
        return self.refuse_pandas and self.small and "pyarrow" not in sys.modules

    def frame(self, query: str, parameters: Any = None) -> pl.DataFrame:
        """The query's result as a polars frame: through Arrow (`.pl()`), or, when `lean`, from numpy columns,
        since importing pyarrow alone costs a fifth of a cold search and those results are a few rows.
        (Through numpy a million rows take ~2.5x as long as through Arrow, so nothing else goes that way.)"""
        res = self.execute(query, parameters)
        if not self.lean:
            return res.pl()
        types = [str(d[1]) for d in res.description]
        # NULLs come as masked arrays, text as object arrays: typed from the result, not guessed from the values.
        cols = res.fetchnumpy()
        return pl.DataFrame([pl.Series(name, values.tolist(), dtype=pl.Utf8) if t == "VARCHAR" else pl.Series(name, values)
                             for (name, values), t in zip(cols.items(), types, strict=True)])

    def execute(self, query: str, parameters: Any = None) -> _Result:
        """The statement run on the calling thread's connection; its result is read whole (`_Result` says why)."""
        if parameters is None or not self.refuse_pandas or "pandas" in sys.modules or threading.active_count() > 1:
            return _Result(self._active.execute(query, parameters))
        sys.modules["pandas"] = None  # type: ignore[assignment]  # refuses `import pandas` (ImportError)
        try:
            return _Result(self._active.execute(query, parameters))
        finally:
            if "pandas" in sys.modules and sys.modules["pandas"] is None:
                del sys.modules["pandas"]


def _literal(text: str) -> str:
    """A SQL string literal (single quotes doubled), for the statements that take no bound parameters (ATTACH)."""
    return "'" + text.replace("'", "''") + "'"


def _quoted(name: str) -> str:
    """A SQL identifier, double-quoted (DuckDB's catalog names for DROP statements, which take no parameters)."""
    return '"' + name.replace('"', '""') + '"'


def duckdb_threads(threads: int | None = None) -> int | None:
    """DuckDB's worker threads for a store: `threads`, else $HRT_DUCKDB_THREADS, else None (DuckDB's default, one
    per core). Processes that already fill the cores (parallel jobs, test workers) set 1: on 2 cores two workers'
    DuckDB threads competing for the other's core cost the test suite ~15% of its CPU time (benchmarks/RESULTS.md)."""
    if threads is None:
        raw = os.environ.get("HRT_DUCKDB_THREADS", "").strip()
        if not raw:
            return None
        if not raw.isdigit() or int(raw) < 1:
            raise InputError(f"HRT_DUCKDB_THREADS must be a whole number of threads (1 or more), got {raw!r}")
        threads = int(raw)
    if isinstance(threads, bool) or not isinstance(threads, int) or threads < 1:
        raise InputError(f"threads must be a whole number of threads (1 or more), got {threads!r}")
    return threads


def exact_products(q: np.ndarray, vecs: np.ndarray, row: np.ndarray, col: np.ndarray) -> np.ndarray:
    """q[row] . vecs[col] for each pair, each summed the same way whatever else is computed with it. A BLAS matrix
    product's rows depend on the block's shape (its kernels sum in other orders): a query asked alone ordered five
    identical notes otherwise than the same query run with its split (user trial AL). So the matrix product only
    picks candidates, and their scores are these (float32 products and sums, returned as float64): numpy's pairwise
    sum over each pair's own d numbers (measured: the same bits for a pair in any batch; BLAS's gemv is not, nor a
    4-row gemm). Pairs grouped by query (as the callers give them) take one broadcast product per query (2.5x the
    speed of gathering the query's vector for every pair, the same bits); others go in slices of 8,192 pairs."""
    out = np.empty(len(row), np.float64)
    if len(row) and bool(np.all(row[1:] >= row[:-1])):
        bounds = np.flatnonzero(np.r_[True, row[1:] != row[:-1], True])
        for a, z in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
            out[a:z] = (vecs[col[a:z]] * q[row[a]]).sum(axis=1)
        return out
    for s in range(0, len(row), 8192):
        out[s : s + 8192] = (q[row[s : s + 8192]] * vecs[col[s : s + 8192]]).sum(axis=1)
    return out


# A candidate whose matrix-product score lies this close below the k-th is scored exactly too: the kernels' rounding
# (a few float32 steps) must not decide which documents make the top k.
PICK_SLACK = 1e-5


def _may_prune(prune: bool | str | frozenset[str], doc_id: str) -> bool:
    """Whether `Store.ingest(prune=...)` removes `doc_id` when the input lacks it."""
    if isinstance(prune, frozenset):
        return doc_id in prune
    return not isinstance(prune, str) or doc_id.startswith(prune)


def _connect_waiting(path: Path, read_only: bool, wait_s: float, config: dict[str, str]) -> duckdb.DuckDBPyConnection:
    """`_connect_replaying`, tried again while another process holds the file's lock, for up to `wait_s`
    seconds (backing off from 20 ms to 0.5 s). DuckDB has no lock timeout of its own."""
    start = time.monotonic()
    deadline, pause, said = start + max(0.0, wait_s), 0.02, -60.0
    while True:
        try:
            return _connect_replaying(path, read_only, config)
        except duckdb.Error as e:
            left = deadline - time.monotonic()
            if "Could not set lock" not in str(e) or left <= 0:
                raise
        waited = time.monotonic() - start
        if waited - said >= 60.0:  # say it at once, then once a minute: a wait of minutes must not look like a hang
            logging.getLogger("toolkit").warning(
                "warning: waiting up to %.0f more s for %s: another process holds it (--wait 0 fails at once)",
                left, path)
            said = waited
        time.sleep(min(pause, left))  # the last try at the deadline itself
        pause = min(pause * 2, 0.5)


def _connect_replaying(path: Path, read_only: bool, config: dict[str, str]) -> duckdb.DuckDBPyConnection:
    """`duckdb.connect`, and the way out of a WAL DuckDB cannot replay: one written by a toolkit before
    `Store._drop_fts` (its re-creation of the BM25 index's schema fails to replay, "Cannot drop entry
    fts_main_chunks"), after which the store never opened again (user trial N). The WAL is moved aside (kept,
    renamed, for inspection) and the store opens as of its last checkpoint, with a warning that says so:
    writes after that checkpoint are in the moved file, not in the store. Without this, nothing opens it."""
    try:
        return duckdb.connect(str(path), read_only=read_only, config=config)
    except duckdb.Error as e:
        wal = Path(f"{path}.wal")
        if "replaying WAL" not in str(e) or "fts_main" not in str(e) or not wal.exists():
            raise
        kept = wal.with_name(f"{wal.name}.unreplayable-{int(time.time())}")
        os.replace(wal, kept)
        logging.getLogger("toolkit").warning(
            "warning: %s: its write-ahead log (written by an earlier version) could not be replayed; it was moved to %s "
            "and the store opened as of its last checkpoint: writes made after it are not in the store (ingest them "
            "again)", path, kept)
        return duckdb.connect(str(path), read_only=read_only, config=config)


STALE_SCAN_MAX_CHUNKS = 20_000  # chunks scanned for text an older analysis indexed otherwise (~0.1 s at most)


class StaleTextWarning(UserWarning):
    """A store whose BM25 text an older toolkit made, which misses words the current analysis finds (`Store.stale_text`)."""


def need_store(obj: Any, what: str = "store") -> Store:
    """`obj` if it is a `Store`; else an error saying how to make one. A path passed where a Store goes failed with
    "'str' object has no attribute 'settings'" (user trial AV)."""
    if isinstance(obj, Store):
        return obj
    if isinstance(obj, str | os.PathLike):
        raise InputError(f"{what}: got a path ({obj}); pass an open store: `with toolkit.Store({str(obj)!r}) as st: ...`")
    raise InputError(f"{what}: expected a toolkit.Store, got {type(obj).__name__}")


def bind_without_pandas() -> None:
    """For a short single-threaded process (the `hrt` command): bound parameters do not import pandas (`_Connection`)."""
    _Connection.refuse_pandas = True


def _rank_flat(
    m: dict[str, Any], row: np.ndarray, col: np.ndarray, val: np.ndarray, *, level: str, top_k: int, few: bool = False
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """Top-k per query from flat (query row, chunk column, score) triples grouped by row (and sorted by column
    within a row where documents have several chunks and the level is document), for the sparse BM25 and the
    HNSW paths: each document's max at its first chunk reaching it (document level),
    then score desc and document (or chunk) order, ties with the k-th score kept before the exact order.
    Returns (row, column, rank, score). Hand-written: numpy/scipy have no segmented top-k. `few`: each row holds
    about top_k triples (dense search's exact candidates), so one sort of them all beats a partition per row."""
    doc = m["doc_of_chunk"][col]
    if level == "document" and len(m["starts"]) != len(m["doc_of_chunk"]) and len(val):
        starts = np.flatnonzero(np.r_[True, (row[1:] != row[:-1]) | (doc[1:] != doc[:-1])])
        top = np.maximum.reduceat(val, starts)
        lens = np.diff(np.r_[starts, len(val)])
        first = np.where(val >= np.repeat(top, lens), np.arange(len(val)), len(val))
        best = np.minimum.reduceat(first, starts)
        row, col, val, doc = row[best], col[best], val[best], doc[best]
    key = doc if level == "document" else col
    # Per query, keep the top_k values (and anything tied with the k-th), then order exactly.
    if few:
        sel = np.lexsort((key, -val, row))
        r = row[sel]
        rank = np.arange(len(sel)) - np.searchsorted(r, r) + 1
        ok = rank <= top_k
        return r[ok], col[sel][ok], rank[ok], val[sel][ok]
    n_rows = int(row[-1]) + 1 if len(row) else 0
    bounds = np.searchsorted(row, np.arange(n_rows + 1))
    pick = []
    for a, z in zip(bounds[:-1].tolist(), bounds[1:].tolist(), strict=True):
        if z - a <= top_k:
            pick.append(np.arange(a, z))
        else:
            kth = np.partition(val[a:z], z - a - top_k)[z - a - top_k]
            pick.append(a + np.flatnonzero(val[a:z] >= kth))
    sel = np.concatenate(pick) if pick else np.zeros(0, np.int64)
    sel = sel[np.lexsort((key[sel], -val[sel], row[sel]))]
    r = row[sel]
    rank = np.arange(len(sel)) - np.searchsorted(r, r) + 1
    ok = rank <= top_k
    return r[ok], col[sel][ok], rank[ok], val[sel][ok]


STRANDED_WARN_SHARE = 0.1  # an HNSW index whose graph misses more of the vectors than this is worse than none
INGEST_BATCH = 20_000  # documents chunked and inserted at a time (bounds ingest memory; see `Store.ingest`)
_CHUNK_SCHEMA = {
    "chunk_id": pl.Utf8,
    "doc_id": pl.Utf8,
    "ord": pl.Int32,
    "start_char": pl.Int32,
    "end_char": pl.Int32,
    "text": pl.Utf8,
    "text_hash": pl.Utf8,
    "lex_text": pl.Utf8,
}
_DOC_COLUMNS = ("doc_id", "source", "scope", "title", "text", "metadata", "content_hash", "text_hash")


def _chunk_rows(docs: list[dict[str, Any]], settings: IndexSettings, *, lexical: bool = True) -> list[tuple]:
    """Chunk rows in `_CHUNK_SCHEMA` order, plus the embedded body (title and text) as the ninth field. Without
    `lexical` the BM25 text (the costliest part) is None: the embedding pass of an ingest of several batches needs
    only the hashes and bodies, and the insert pass analyses each chunk (user trial BL: twice, a quarter of an
    ingest's time with supplied vectors)."""
    rows = []
    for d in docs:
        for c in chunk_text(d["text"], settings.chunk_size, settings.chunk_overlap) or []:
            body = chunk_body(d["title"], c.text)
            rows.append((f"{d['doc_id']}#{c.ord}", d["doc_id"], c.ord, c.start, c.end, c.text, sha1(body),
                         settings.lexical_text(body) if lexical else None, body))
    return rows


def _docs_frame(docs: list[dict[str, Any]], content_hash: Mapping[str, str]) -> pl.DataFrame:
    return pl.DataFrame(
        {
            "doc_id": [d["doc_id"] for d in docs],
            "source": [d["source"] for d in docs],
            "scope": [d["scope"] for d in docs],
            "title": [d["title"] for d in docs],
            "text": [d["text"] for d in docs],
            "metadata": [json.dumps(d["metadata"], ensure_ascii=False) for d in docs],
            "content_hash": [content_hash[d["doc_id"]] for d in docs],
            "text_hash": [text_identity(d["text"]) for d in docs],
        },
        schema=dict.fromkeys(_DOC_COLUMNS, pl.Utf8),
    )


def no_such_store(path: str | Path) -> StoreError:
    """The error for a store path with no file: a search opens it read-only, `hrt delete` checks first (opened
    for writing, a missing path would become an empty store)."""
    return StoreError(f"{path}: no such store (create it with `hrt ingest SOURCE --store {path}`)")


def compact_store(path: str | Path, *, wait_s: float = 0.0) -> tuple[int, int]:
    """Rewrite the store into a fresh file and put it in place of the old one: (bytes before, bytes after).

    DuckDB reuses the blocks deleted and replaced rows freed, but never clears them: after `hrt delete`, a user's
    deleted memories (and the old text of a replaced one) stay readable in the file with `strings` (user trial BK).
    A copy holds only live rows; it is smaller when much was freed, and may be a little larger otherwise (DuckDB
    lays the copied tables out anew: 1,200 -> 1,245 MB after deleting 6% of a 224k-chunk store, user trial BL). The store is checked and its write-ahead log
    folded by opening it as a Store first (a file that is no store, or holds SQL of its own, is refused as any open
    refuses it); the copy is made while this process holds the file for writing, so no other process writes in
    between, counted against the original, given the original's permissions, and renamed over it (a symlink's
    target is the file rewritten). Killed midway, the original is whole and the copy is removed by the next run."""
    src = Path(path).expanduser()
    if not src.exists():
        raise no_such_store(path)
    src = src.resolve()  # the file itself: replacing a symlink would leave the text in its target (the review)
    with Store(src, wait_s=wait_s) as st:  # validated, sandbox-checked, log folded at close
        counts = st.con.execute("SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM chunks)").fetchone()
        # Macros other than the full-text index's own are SQL someone put in the file (one named like a built-in runs
        # in its place: user trial BM); a compaction would carry them into the fresh file. (13 ms: not on every open.)
        planted = [f"{r[0]}.{r[1]}" for r in st.con.execute(
            "SELECT schema_name, function_name FROM duckdb_functions() WHERE NOT internal AND function_type IN "
            "('macro', 'table_macro') AND NOT (schema_name = 'fts_main_chunks' AND function_name IN ('match_bm25', "
            "'tokenize'))").fetchall()]
    if planted:
        raise StoreError(f"{src}: holds macro(s) {', '.join(planted[:5])}, which no toolkit store has (a store changed to "
                         "run SQL of its own): not compacted")
    if not _unused(src):  # another Store on the file would go on writing into the replaced file
        raise StoreBusyError(f"{src}: open elsewhere (another Store in this process, or another process): close it "
                             "before compacting")
    for stale in src.parent.glob(f".{glob.escape(src.name)}.compact-*"):  # a killed run's copy: live data, removed
        if not _pid_alive(stale.name.rsplit("-", 1)[-1].removesuffix(".wal")):
            with suppress(OSError):  # (a folder planted under that name stays, and is not ours to remove)
                stale.unlink(missing_ok=True)
    info = src.stat()
    if info.st_nlink > 1:  # the other names keep the old file, deleted text and all (user trial BM)
        raise StoreError(f"{src}: the file has {info.st_nlink - 1} other hard link(s) (a backup made with `ln`?): "
                         "compacting would leave the deleted text readable under those names; remove them first")
    mode, before = info.st_mode, info.st_size
    tmp = src.with_name(f".{src.name}.compact-{os.getpid()}")
    tmp.unlink(missing_ok=True)
    # A plain connection of its own: a Store's refuses file access (`_sandbox`), and this one must attach two files.
    # It runs no SQL the file holds (COPY FROM DATABASE copies macros and tables, it does not call them).
    con = _memory_connection()
    try:
        # ATTACH takes no bound parameters: the paths as SQL string literals (quotes doubled)
        try:
            con.execute(f"ATTACH {_literal(str(src))} AS src")  # for writing: other processes kept out until the move
        except duckdb.IOException as e:  # another process opened it after the checks above
            raise StoreBusyError(f"{src}: another process opened the store while it was being compacted; nothing "
                                 f"changed: try again ({str(e).splitlines()[0]})") from None
        try:
            con.execute(f"ATTACH {_literal(str(tmp))} AS dst")
            con.execute("SET enable_external_access = false")
            con.execute("COPY FROM DATABASE src TO dst")
            got = con.execute("SELECT (SELECT count(*) FROM dst.documents), (SELECT count(*) FROM dst.chunks)").fetchone()
            con.execute("DETACH dst")
        except duckdb.InterruptException:
            raise
        except duckdb.Error as e:  # a full disk, a folder not writable: the copy's trouble, not a damaged store. A full
            # disk at the copy's commit is a TransactionException ("Failed to commit: Could not write file"), not an
            # IOException: it came out as "could not complete the operation" without the store's name (file-size test)
            raise StoreError(f"{src}: could not write the compacted copy beside it ({str(e).splitlines()[0]}); the store "
                             "is unchanged") from None
        if got != counts:
            raise StoreError(f"{src}: the compacted copy holds {got[0]:,} documents and {got[1]:,} chunks, the store "
                             f"{counts[0]:,} and {counts[1]:,}: not replaced (nothing changed)")
        os.chmod(tmp, stat.S_IMODE(mode))  # a private store (0600) must not come back readable by all (the review)
        with suppress(PermissionError):  # the owner and group too, where this user may set them (trial BM: root's)
            os.chown(tmp, info.st_uid, info.st_gid)
        replace_durably(tmp, src)
    finally:
        con.close()
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return before, src.stat().st_size


def _unused(path: Path) -> bool:
    """Whether no other connection has the file open: a second `Store` on the same path in this process shares
    DuckDB's database, and would go on writing into a removed or replaced file (DuckDB refuses a read-only
    connection while another one is open, and so does another process's lock)."""
    try:
        duckdb.connect(str(path), read_only=True).close()
    except duckdb.Error:
        return False
    return True


def _pid_alive(text: str) -> bool:
    """Whether `text` is the id of a running process (a compaction's copy is named by its pid)."""
    try:
        os.kill(int(text), 0)
    except (ValueError, ProcessLookupError):
        return False
    except PermissionError:  # another user's process: alive
        return True
    return True


_WRITE_LOCKS: dict[str, threading.RLock] = {}
_WRITE_LOCKS_GUARD = threading.Lock()


def _process_lock(path: Path, kind: str) -> threading.RLock:
    """One lock of `kind` per store file in this process (`_write_lock`, `_cache_lock`)."""
    key = f"{kind}:{path.resolve()}"
    with _WRITE_LOCKS_GUARD:
        return _WRITE_LOCKS.setdefault(key, threading.RLock())


def _cache_lock(path: Path) -> threading.RLock:
    """Around the embedding cache's check-and-insert (not around the embedding itself, nor held for a whole
    ingest as `_write_lock` is, so searches do not wait on an ingest): threads searching one new text at once
    each inserted its vector, and the duplicate rows then joined as one 1152-d "vector" that failed every later
    search of that text (user trial Z)."""
    return _process_lock(path, "cache")


def _write_lock(path: Path) -> threading.RLock:
    """One lock per store file in this process: every write takes it. DuckDB refuses the second of two
    overlapping write transactions ("Conflict on update": each write updates the index statistics and the
    store's meta rows), so two threads writing through one Store (or two Stores on one file) lost about half
    their writes to a StoreError (user trial O); they now queue. Other processes cannot write at all (DuckDB's
    file lock)."""
    return _process_lock(path, "write")


@_counted
class Store:
    """A DuckDB file with the corpus, its indexes and caches. Use as a context manager or call `close()`: a close
    waits for the other threads' calls under way (up to `_Calls.WAIT_S`), and later calls raise a StoreError."""

    def __init__(
        self, path: str | Path, *, read_only: bool = False, embedder: Embedder | None = None, memory_limit: str | None = None,
        wait_s: float = 0.0, threads: int | None = None, verify_extension: bool = True,
    ) -> None:
        """`wait_s`: how long to keep trying when another process holds the file (DuckDB lets one process write,
        or several read, never both), before the `StoreBusyError`; 0 fails at once (user trial Z: a memory
        service's writer and readers, each opening the store briefly, failed instead of waiting their turn).
        `memory_limit` (e.g. "4GB"): DuckDB's working-memory cap for this store; past it DuckDB spills to
        disk. Its default is 80% of the machine's memory, too much to share a laptop with a large index build.
        `threads`: DuckDB's worker threads (default $HRT_DUCKDB_THREADS, else one per core). DuckDB keeps one
        database per file in a process, so Stores on one file share the setting: the last one given wins.
        `verify_extension`: DuckDB checks the packaged extension's signature once per process, before the first
        store loads it (`_signature_checked`); `False` (`hrt search`) skips even that, a SHA-256 of its 11 MB
        file (~35 ms of a cold search). The check adds nothing to what importing its package already trusts: the
        file lies in that package, whose code runs first; and once it is loaded, the sandbox lets no other
        extension load. Every store is opened with `allow_unsigned_extensions` (a setting of the database, not
        of the connection), so DuckDB refuses another connection to the file in this process that does not ask
        the same: run SQL of your own through `Store.con`."""
        # "~/notes.duckdb" quoted past the shell: DuckDB expands the ~ itself, so every check here must too (the
        # existence check read ./~/notes.duckdb while DuckDB wrote $HOME/notes.duckdb, user trial AG)
        self.path = Path(path).expanduser()
        if not (isinstance(wait_s, int | float) and not isinstance(wait_s, bool) and 0 <= wait_s < math.inf):
            raise InputError(f"wait_s: seconds to wait for the store, 0 or more, got {wait_s!r}")  # trial BP: -5 passed
        self.read_only = read_only
        threads = duckdb_threads(threads)  # checked before anything is created
        fts = _signature_checked(fts_extension_path()) if verify_extension else fts_extension_path()  # and this
        if embedder is not None:
            _check_embedder(embedder)
        self._calls = _Calls(self.path)  # the calls under way, which `close` lets finish
        self._registered: dict[str, str] = {}  # `_register`'s frames: a temp table (the lean path) or a view
        self._closing = threading.Lock()
        self._dense_lock = threading.Lock()  # one thread builds the dense matrix of a generation
        self._embedder_lock = threading.Lock()
        self._memo: dict[Any, Any] = {}  # metadata reads, cleared by `_forget` on every write
        # the file's generation and vector index record the memo belongs to (`generation`)
        self._seen_generation: tuple[str | None, str | None] | None = None
        self._session_rerank: dict[str, dict[tuple[str, str], float]] = {}  # read-only: scores kept in memory
        if read_only and not self.path.exists():
            raise no_such_store(self.path)
        if self.path.exists():
            _check_store_file(self.path)
        # A store file this object creates is removed again at `close` while it is still empty (`_drop_if_empty`):
        # a failed first `hrt ingest`, or a mistyped path given to `Store(...)` and searched, must not leave an
        # empty store behind (the next `hrt search` would find it and say it has no index).
        self._created = not read_only and not self.path.exists()
        self._drop_if_empty = self._created
        if not read_only:
            try:
                self.path.parent.mkdir(parents=True, exist_ok=True)
            except OSError as e:  # ("[Errno 13] Permission denied: '.hrt'" named neither the store nor a way out: trial BA)
                raise StoreError(f"{self.path}: cannot create its folder {self.path.parent} ({e.strerror or e}); "
                                 "give a store path in a writable folder (--store)") from None
        try:
            config = {"allow_unsigned_extensions": "true"}  # the same for every store: see `verify_extension`
            self.con = _Connection(_connect_waiting(self.path, read_only, wait_s, config))
        except duckdb.Error as e:
            if "Could not set lock" in str(e):  # another process writes to it: a harness may retry (exit 75)
                # A long-running holder (an agent keeping its memory open) never lets go: say so (user trial N).
                # A copy serves a search; a write to a copy would be lost to the holder (user trial O).
                instead = ("search through that process, or have it make a copy with Store.backup(path) and open the "
                           "copy (a `cp` of a file in use, with or without its .wal, can miss or undo writes)"
                           if read_only else
                           "write through that process, or have it close the store first: a change made to a copy is "
                           "not in this file")
                # Readers hold the file too (user trial Z: a notebook's read-only Session kept a writer out).
                holder = ("an ingest or another write running (try again when it is done), or a long-running process "
                          "such as an agent that keeps the store open" if read_only else
                          "an ingest running (try again when it is done), a search or a notebook session reading it "
                          "(readers keep writers out while they have it open), or a long-running process such as an "
                          "agent that keeps it open")
                waited = f"; waited {wait_s:g} s" if wait_s > 0 else "; --wait SECONDS (wait_s) waits for it"
                raise StoreBusyError(f"{self.path}: the store is in use by another process, which holds its lock: "
                                     f"{holder} (DuckDB lets one process open a file for writing, or several for "
                                     f"reading, not both: {instead}){waited} ({str(e).splitlines()[0]})") from e
            if "different configuration than existing connections" in str(e):  # this process has it open already
                other = "writable" if read_only else "read-only"
                raise StoreError(f"{self.path}: this process has the store open already in another way (a {other} Store "
                                 f"object, e.g. from an earlier notebook cell, or a connection of your own: "
                                 f"duckdb.connect(path) without config={{'allow_unsigned_extensions': 'true'}}, which every "
                                 f"Store asks): use that one, or close it first, and run SQL of your own through "
                                 f"Store.con; DuckDB opens a file one way per process ({str(e).splitlines()[0]})") from e
            if isinstance(e, duckdb.IOException) and ("Corrupt database file" in str(e) or "checksum" in str(e)):
                raise StoreDamagedError(f"{self.path}: the store file is damaged ({str(e).splitlines()[0]}): restore "
                                        "a backup (Store.backup) or ingest again into a new store") from e
            raise StoreError(f"{self.path}: cannot open the store ({e})") from e
        # No progress bar: DuckDB draws one on stdout for any query past 2 s, so a query slowed by a busy
        # machine printed bars into notebook outputs and `hrt` output (a tutorial's checked cell failed so).
        self.con.execute("SET enable_progress_bar = false")
        if threads is not None:  # a setting, not a connect option: another Store on the file may open without it
            self.con.execute(f"SET threads = {int(threads)}")  # checked by `duckdb_threads`
        self.con.execute("LOAD '" + fts.replace("'", "''") + "'")
        # An older store's vss HNSW index needs its extension to be dropped (`_drop_vss_index`); loaded now, since
        # the sandbox below loads nothing, and found in the catalog, which runs none of the file's SQL.
        if not read_only and self.con.execute(
                "SELECT count(*) FROM duckdb_indexes() WHERE index_name = 'embeddings_hnsw'").fetchone()[0]:
            vss = _signature_checked(vss_extension_path()) if verify_extension else vss_extension_path()
            self.con.execute("LOAD '" + vss.replace("'", "''") + "'")
        self._sandbox()  # before any query reads the file's tables: one of them may be a planted view
        if memory_limit is not None:
            if not re.fullmatch(r"\d+(\.\d+)?\s*(KB|MB|GB|TB|KiB|MiB|GiB|TiB)", memory_limit.strip(), re.I):
                raise InputError(f"memory_limit must look like '4GB' or '512MB', got {memory_limit!r}")
            self.con.execute("SET memory_limit = ?", [memory_limit.strip()])
        self._memory_limit = memory_limit.strip() if memory_limit is not None else None
        # The limit in force, for `release_table_pages` to restore. Restored by SET, never by RESET: in
        # DuckDB 1.5.5 `RESET memory_limit` shows the default again but leaves the buffer pool at the lowered
        # limit (queries then spill, and those that cannot fail with "failed to pin block").
        # Literal SQL here and in the restore, not bound values: binding makes DuckDB import pandas (`_Connection`).
        stated = self.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]
        self._restore_limit = self._memory_limit or f"{_stated_limit_bytes(stated)}B"
        self._check_is_store()
        if not read_only:
            had_values = self._has_table("doc_values")
            self.con.execute(_DDL)
            if self._meta("schema_version") is None:
                self._set_meta("schema_version", SCHEMA_VERSION)
            if not had_values:
                self._migrate_doc_values()
            self._migrate()
        elif self._meta("schema_version") is None:
            raise StoreError(f"{self.path}: not a toolkit store (no schema_version)")
        self._caches_off: str | None = None  # why the store's caches cannot be written (`_cache_write_failed`)
        self._embedder = embedder
        self._given_embedder = embedder  # the caller's own: never swapped for another model without a word
        if _Connection.refuse_pandas and self._has_table("documents"):
            self.con.small = self.con.execute("SELECT count(*) FROM documents").fetchone()[0] <= LEAN_MAX_DOCUMENTS
        self._dense_cache: tuple[str, dict[str, Any]] | None = None
        vi = self._meta("vector_index")
        if vi and '"usearch"' not in vi and not read_only:
            self._drop_vss_index()

    def _sandbox(self) -> None:
        """A store is data, and a store file may come from someone else: once the extensions the toolkit loads by
        path are loaded, SQL kept in the file (a view, or a macro in the full-text index's schema) can read no
        file, fetch nothing and load no extension. A planted `fts_main_chunks.tokenize` read a local file into the
        error of every search, and a view over `meta` blocked `hrt info` on a FIFO (user trial AJ). The toolkit
        itself reads and writes files through Python, never through DuckDB."""
        self.con.execute("SET autoinstall_known_extensions = false")
        self.con.execute("SET autoload_known_extensions = false")
        self.con.execute("SET enable_external_access = false")
        # The toolkit makes no views: one where it keeps a table (`chunks` over a renamed table, adding a file's
        # text to every chunk) is someone else's SQL (4 ms per open).
        views = [f"{s}.{v}" for s, v in self.con.execute(
            "SELECT schema_name, view_name FROM duckdb_views() WHERE NOT internal AND NOT temporary").fetchall()]
        if views:
            self.close()
            raise StoreError(f"{self.path}: holds view(s) {', '.join(views[:5])}, which no toolkit store has (another "
                             "program's DuckDB file, or a store changed to run SQL of its own when read): not opened")

    def _check_is_store(self) -> None:
        """Refuse a DuckDB file that is not a toolkit store before anything is written to it (`hrt ingest
        --store` naming someone else's database added eight tables to it, or crashed half-way on a `documents`
        table of its own), and a store written by a newer toolkit (this one would write to it in silence)."""
        # The version first: a store has one, so the usual open (every `hrt search`) costs no table listing.
        try:
            if self.read_only:  # with the other meta keys a search reads (`_meta`): one round trip
                version = self._meta("schema_version")
            else:
                row = self.con.execute("SELECT value FROM meta WHERE key = 'schema_version'").fetchone()
                version = row[0] if row else None
        except duckdb.Error:  # no meta table, or someone else's of another shape
            version = None
        if version is not None and not (version.isdigit() and int(version) <= int(SCHEMA_VERSION)):
            self.close()
            raise StoreError(f"{self.path}: written by a newer toolkit (store schema version {version}; this one reads "
                             f"up to {SCHEMA_VERSION}): upgrade hybrid-retrieval-toolkit to use it")
        if version is not None:
            return
        tables = sorted(r[0] for r in self.con.execute(
            "SELECT table_name FROM information_schema.tables WHERE table_schema = 'main'").fetchall())
        if tables and not {"meta", "documents", "chunks"} <= set(tables):
            shown = ", ".join(tables[:5]) + (f", ... ({len(tables)} tables)" if len(tables) > 5 else "")
            self.close()
            raise StoreError(f"{self.path}: not a toolkit store: a DuckDB database with other tables ({shown}); "
                             "name a new file for the store")

    def _migrate(self) -> None:
        """Bring a store written by an earlier version up to date in place (nothing is rebuilt):
        documents.text_hash (sha1 of the text's NFC form, for collapsing identical documents) is added and filled."""
        # The table's own columns, not information_schema's listing of every column of every table (15 ms of each
        # writable open, the FTS index's tables included, against 0.4 ms).
        cols = {r[0] for r in self.con.execute("SELECT name FROM pragma_table_info('main.documents')").fetchall()}
        if "text_hash" not in cols:
            self.con.execute("ALTER TABLE documents ADD COLUMN text_hash VARCHAR")
        if self.con.execute("SELECT count(*) FROM documents WHERE text_hash IS NULL").fetchone()[0]:
            self.con.execute("UPDATE documents SET text_hash = sha1(nfc_normalize(text)) WHERE text_hash IS NULL")
        if self._meta("text_hash_form") != "nfc":  # once per store: hashes of decomposed text written before
            # Only text with a combining mark or a Hangul jamo can differ from its NFC form; the filter saves
            # hashing every document of a large store (686k documents: 2 s instead of 15-28 s).
            self.con.execute("UPDATE documents SET text_hash = sha1(nfc_normalize(text)) "
                             "WHERE regexp_matches(text, '[\\p{M}\\x{1100}-\\x{11FF}]') "
                             "AND text_hash <> sha1(nfc_normalize(text))")
            self._set_meta("text_hash_form", "nfc")
        self._drop_duplicate_vectors()

    def _drop_duplicate_vectors(self) -> None:
        """Keep one row per (model, text) of the embedding cache and one vector per chunk: threads searching one
        new text at once through a shared Store cached it once each (user trial Z), and an ingest then gave its
        chunk a vector per copy; every later search of that text failed on a vector three times too long."""
        if self._meta("schema_version") == SCHEMA_VERSION:  # written by this version since: no race left any
            return
        for table, key in (("embedding_cache", "model, text_hash"), ("embeddings", "chunk_id")):
            if not self._has_table(table):
                continue
            extra = self.con.execute(f"SELECT count(*) - count(DISTINCT ({key})) FROM {table}").fetchone()[0]
            if extra and table == "embeddings" and (vi := self.vector_index):  # its count no longer matches:
                self._set_meta("vector_index", json.dumps({**vi, "generation": None}))  # the next write rebuilds it
            if extra:
                self.con.execute(f"DELETE FROM {table} WHERE rowid IN (SELECT rowid FROM (SELECT rowid, row_number() "
                                 f"OVER (PARTITION BY {key} ORDER BY rowid) AS n FROM {table}) WHERE n > 1)")
                logging.getLogger("toolkit").warning("note: %s: %d duplicate rows removed from %s (left by concurrent "
                                                     "searches in an earlier version)", self.path, extra, table)

    @classmethod
    def open_built(cls, path: str | Path, build: Callable[[Store], object], *, read_only: bool = True, **kwargs: Any) -> Store:
        """Open the store at `path`, building it first with `build(store)` when it does not exist yet.

        Safe when several processes ask at once (tutorials open in parallel, test workers): one of them builds
        into a temporary file under an exclusive lock and renames it into place, the others wait on the lock
        and then open the finished store. A failed build leaves no store behind, so the next call builds again.
        `kwargs` go to `Store` (e.g. `embedder=`)."""
        path = Path(path)
        if not path.exists():
            path.parent.mkdir(parents=True, exist_ok=True)
            with _file_lock(Path(f"{path}.lock")):
                if not path.exists():  # another process may have built it while we waited
                    tmp = path.with_name(f".{path.name}.{os.getpid()}.building")
                    hnsw = Path(f"{tmp}.hnsw")
                    try:
                        with cls(tmp, **kwargs) as st:
                            build(st)
                            st._drop_if_empty = False  # what the build made, even empty, is the store
                        if hnsw.exists():
                            os.replace(hnsw, f"{path}.hnsw")
                        os.replace(tmp, path)
                    finally:
                        for leftover in (tmp, hnsw, Path(f"{tmp}.wal")):
                            leftover.unlink(missing_ok=True)
        return cls(path, read_only=read_only, **kwargs)

    # ------------------------------------------------------------------ basics
    def close(self) -> None:
        """Close the file (again is a no-op); any later use of the store raises a StoreError naming it. A store
        file this object created and nothing was stored in (a failed first ingest, a mistyped path) is removed."""
        with self._closing:  # two threads closing at once (a shutdown hook and a signal handler): the second waits
            if isinstance(self.con._con, _Closed):
                return
            if still := self._calls.wait_for_others(_Calls.WAIT_S):
                logging.getLogger("toolkit").warning(
                    "warning: closing store %s while %d call(s) of other threads still run after %.0f s: their "
                    "statements are interrupted", self.path, still, _Calls.WAIT_S)
                self.con.interrupt_cursors()  # else closing a cursor waits for its statement to end
            drop = self._drop_if_empty and self._is_empty()
            con, self.con._con = self.con._con, _Closed(self.path)  # later calls name the store
            self.con.close_cursors()
            con.close()
            if drop and _unused(self.path):
                for f in (self.path, Path(f"{self.path}.wal")):
                    f.unlink(missing_ok=True)

    def _is_empty(self) -> bool:
        """Nothing stored but the schema: no documents, no cached embeddings, scores or frames."""
        try:
            return not any(
                self.con.execute(f"SELECT count(*) FROM {t}").fetchone()[0]
                for t in ("documents", "chunks", "embedding_cache", "rerank_cache", "stage_cache", "doc_values")
            )
        except duckdb.Error:
            return False

    def release_table_pages(self) -> None:
        """Drop the table pages DuckDB keeps cached after a whole-table scan whose result now lives in Python.

        DuckDB evicts cached pages only under pressure, so after reading the vectors (1.5 GB at a million
        chunks) or the postings into numpy, its copies stay resident up to `memory_limit` and add to the peak
        (`benchmarks/scale.py`). Lowering the limit makes the buffer manager evict them and hand the memory
        back; it is then restored. Only table pages (tag BASE_TABLE) are targeted: the floor keeps every
        other use (hash tables, temporary data) in memory. The pages come back from the OS file cache on
        the next read. No DuckDB setting or call does this directly (checked on 1.5.5)."""
        other = self.con.execute(
            "SELECT coalesce(sum(memory_usage_bytes) FILTER (WHERE tag <> 'BASE_TABLE'), 0) FROM duckdb_memory()"
        ).fetchone()[0]
        try:
            self.con.execute(f"SET memory_limit = '{int(other) + (64 << 20)}B'")
        except duckdb.Error:
            pass  # too little evictable to meet the floor: DuckDB evicted what it could
        finally:
            self.con.execute(f"SET memory_limit = '{self._restore_limit}'")  # checked in __init__

    def __reduce__(self):
        """A connection to a file cannot travel to another process: say what to do instead of pickle's "cannot
        pickle '_thread.lock' object" (user trial AH)."""
        raise TypeError(f"a Store cannot be pickled or sent to another process: open one there, Store({str(self.path)!r}, "
                        "read_only=True) for searches (a Result, a config and a Prepared can be sent)")

    def __repr__(self) -> str:
        """Path and state, without a query (a closed store must print too)."""
        if isinstance(self.con._con, _Closed):
            return f"Store({str(self.path)!r}, closed)"
        mode = "read-only" if self.read_only else "writable"
        try:  # a log line of another thread while the store closes must not raise
            model = f", embedding model {self.embedding_model or 'none'}"
        except (StoreError, duckdb.Error):
            model = ""
        return f"Store({str(self.path)!r}, {mode}{model})"

    def __enter__(self) -> Store:
        if isinstance(self.con._con, _Closed):  # a closed store entered silently and failed at its first use
            self.con._con.refuse()
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def _meta(self, key: str) -> str | None:
        # Memoised: a search reads settings and index presence on every call, and each read is a ~2 ms
        # round trip, the larger part of a batched search on a small collection. Every write clears the memo;
        # another Store object on the same file (one process shares the database between connections) may
        # write too, and `generation` clears it when it sees the file's generation move.
        memo = self._memo  # (the dict a write's `_forget` replaces: a value read before it goes to the old one)
        if ("meta", key) not in memo:
            try:
                if self.read_only:
                    if ("meta", "*") not in memo:
                        self._read_all_meta()
                    return self._memo.get(("meta", key))
                row = self.con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
            except duckdb.CatalogException:
                return None
            memo[("meta", key)] = row[0] if row else None
            return row[0] if row else None
        return memo[("meta", key)]

    def _read_all_meta(self) -> None:
        """Memoise every meta key in one round trip, for a read-only store (a search reads about ten keys, a round
        trip each otherwise). Right for as long as the store is open: no process can write to a file opened
        read-only (DuckDB lets no writer in), which is also why `generation` need not drop this memo."""
        rows = self.con.execute("SELECT key, value FROM meta").fetchall()
        self._memo[("meta", "*")] = True  # every key read: a key not among the rows has no value
        for k, v in rows:
            self._memo.setdefault(("meta", k), v)  # a key's first row, as its own query's `fetchone` read it
        self._seen_generation = (self._memo.get(("meta", "generation")), self._memo.get(("meta", "vector_index")))

    def _rollback(self) -> None:
        """Roll back after a failed write, keeping the failure's own error: when DuckDB has already ended the
        transaction (a failed COMMIT on a full disk), ROLLBACK raises "no transaction is active", which hid it."""
        with suppress(duckdb.Error):
            self.con.execute("ROLLBACK")

    def _forget(self) -> None:
        """Drop memoised metadata (after a write, a rollback, or anything else that may have changed it)."""
        self._memo = {}

    def _set_meta(self, key: str, value: str) -> None:
        self._forget()
        self.con.execute("DELETE FROM meta WHERE key = ?", [key])
        self.con.execute("INSERT INTO meta VALUES (?, ?)", [key, value])

    @property
    def embedding_model(self) -> str | None:
        return self._meta("embedding_model")

    @property
    def embedding_backend(self) -> str | None:
        """How the stored vectors were made: torch, onnx, onnx-int8, http or precomputed (None: before this
        was recorded, i.e. torch)."""
        return self._meta("embedding_backend")

    @property
    def embedding_dim(self) -> int | None:
        d = self._meta("embedding_dim")
        return int(d) if d else None

    @property
    def settings(self) -> IndexSettings | None:
        s = self._meta("index_settings")
        return IndexSettings(**json.loads(s)) if s else None

    def index_record(self) -> dict[str, Any]:
        """The embedding model and index settings every feature of a search depends on: what a learned fusion
        model records of the stores it learned from, and compares with the store it is used on."""
        return {"embedding_model": self.embedding_model, **(self.settings.record() if self.settings else {})}

    def generation(self) -> str:
        """Changes whenever the corpus or an index changes: cache keys of derived data include it.
        Read from the file on every call, never memoised: another Store object on the same file may have
        ingested since (one round trip). A generation this object has not seen also drops its memo, and so does
        a vector index record it has not seen: building the index leaves the corpus, hence the generation, as it
        was, but another object's memo would go on saying there is no index. A read-only store's cannot move
        (`_read_all_meta`): the one read with its meta."""
        if self.read_only and self._seen_generation is not None:
            return self._seen_generation[0] or "0"
        return self._generation_rows().get("generation") or "0"

    def _generation_rows(self, also: tuple[str, ...] = ()) -> dict[str, str]:
        """`generation`'s read: the meta rows of the generation, the vector index record and the keys `also`, in one
        statement (one snapshot of the file); the memo dropped when the first two moved. {} without a meta table."""
        keys = ("generation", "vector_index", *also)
        try:
            # The keys are the store's own names (literals: a bound list would import pandas, `_Connection`).
            listed = ", ".join(f"'{k}'" for k in keys if k.isidentifier())
            rows = dict(self.con.execute(f"SELECT key, value FROM meta WHERE key IN ({listed})").fetchall())
        except duckdb.CatalogException:
            return {}
        seen = (rows.get("generation"), rows.get("vector_index"))
        if seen != self._seen_generation:
            self._forget()
            self._seen_generation = seen
        return rows

    def ingest_roots(self) -> list[str]:
        """The absolute paths of the folders and files `hrt ingest` has read into this store (oldest first):
        document ids are paths relative to their folder, so two folders' `todo.md` share an id."""
        v = self._meta("ingest_roots")
        return json.loads(v) if v else []

    def add_ingest_root(self, root: str | Path) -> None:
        """Record `root` (made absolute) among `ingest_roots`."""
        roots = self.ingest_roots()
        r = str(Path(root).resolve())
        if r not in roots:
            self._set_meta("ingest_roots", json.dumps([*roots, r]))

    def stats(self) -> dict[str, Any]:
        """Counts of what the store holds (documents, sources, scopes, chunks, vectors, caches), as `hrt info` shows."""
        n_docs, n_src, n_scope = self.con.execute(
            "SELECT count(*), count(DISTINCT source), count(DISTINCT scope) FROM documents"
        ).fetchone()
        n_chunks = self.con.execute("SELECT count(*) FROM chunks").fetchone()[0]
        n_emb = self._count_embeddings()
        return {
            "store": str(self.path),
            "documents": n_docs,
            "sources": n_src,
            "scopes": n_scope,
            "chunks": n_chunks,
            "embeddings": n_emb,
            "embedding_model": self.embedding_model,
            "embedding_dim": self.embedding_dim,
            "embedding_backend": self.embedding_backend,
            "index_settings": self.settings.record() if self.settings else None,  # compounds named only when off
            # ("0": written since by an older toolkit; any other than analysis.ANALYSIS_VERSION: `stale_text`)
            "schema_version": self._meta("schema_version"),
            "lexical_analysis": self.lexical_analysis,
            "bm25_text_current": not self.stale_text(),
            "vector_index": self.vector_index,
            "generation": self.generation(),
            # cached scores per reranker (`hrt clear-cache --model` takes these names)
            "reranker_scores": dict(self.con.execute("SELECT model, count(*) FROM rerank_cache GROUP BY model ORDER BY model").fetchall()),
        }

    def stale_text_once(self) -> str | None:
        """The stale-text note (`stale_text_words`) the first time it is asked of this Store object, if the index is
        stale (`stale_text`, read once), else None: what `pipeline.prepare` warns an API caller once, who got
        0 results for a Japanese query on an old store without a word (user trial AW; `hrt search` says its own)."""
        if "stale_said" in self._memo:
            return None
        self._memo["stale_said"] = True  # asked once, stale or not: the scan reads every chunk
        if not self.stale_text(scan_max_chunks=STALE_SCAN_MAX_CHUNKS):
            return None
        what, redo = self.stale_text_words()
        return f"{self.path}: BM25 may miss words in non-ASCII text: {what}; {redo}"

    def stale_text_words(self) -> tuple[str, str]:
        """(what an index made by this store's older text analysis misses, how to redo it), for every note that says
        so (`hrt search`, `hrt info`, `pipeline.prepare`'s warning): a store analysed by version 3 or 4 misses only
        Indic, Thai, Lao, Khmer and Myanmar words; an older one also CJK and full-width forms (user trial AW: the note
        named the CJK change to a version-3 store that already had it)."""
        since = self.lexical_analysis
        what = ("this store's BM25 text was made by an older toolkit (text analysis " + since + "), before Indic vowel "
                "signs and Thai, Lao, Khmer and Myanmar words were indexed" if since in ("3", "4") else
                "this store's BM25 text was made by an older toolkit, before words inside unspaced Chinese, Japanese or "
                "Korean text and full-width or decomposed forms were indexed")
        redo = ("run `hrt ingest` on its folder again (or `Store.ingest` anything into it) to re-index them: only chunks "
                "with such text are redone")
        return what, redo

    def stale_text(self, *, scan_max_chunks: int | None = None) -> bool:
        """Whether BM25 may miss words here that the current text analysis finds: the index's text was made by
        an older analysis (or written since by an older toolkit) and some chunk holds text the newer analyses index
        otherwise (`_restale`). The next `ingest` redoes those chunks. `scan_max_chunks`: a store with more chunks
        is not scanned (the scan reads every chunk's text: a quarter second at 60k) and counts as stale."""
        if self.lexical_analysis == ANALYSIS_VERSION or not self._has_table("chunks"):
            return False
        if scan_max_chunks is not None and self.embedding_coverage()[1] > scan_max_chunks:
            return True
        memo = self._memo  # a write's `_forget` meanwhile sends the value read before it to the old memo
        if "stale_scan" not in memo:  # until the next write: a search asks twice (the warning, its note)
            memo["stale_scan"] = self._non_ascii_chunks()
        return memo["stale_scan"]

    def _count_embeddings(self) -> int:
        if not self._has_table("embeddings"):
            return 0
        return self.con.execute("SELECT count(*) FROM embeddings").fetchone()[0]

    def embedding_coverage(self) -> tuple[int, int]:
        """(chunks with an embedding, all chunks), from two counts. Dense search ranks only the first: a store
        ingested partly with --no-embed gives hybrid results that lean to its embedded part, so callers warn
        when 0 < embedded < all. (Ingest deletes a chunk's embedding with the chunk, so every row counts.)"""
        return self._count_embeddings(), self.con.execute("SELECT count(*) FROM chunks").fetchone()[0]

    def _emptied(self) -> bool:
        """Every document was deleted from a store that held some (`delete`): searches find nothing, as an
        agent whose memory was cleared expects, where a store never ingested into is an error (`_refuse_empty`)."""
        self.generation()  # drops the memo when another Store object on this file wrote since
        if "emptied" not in self._memo:
            self._memo["emptied"] = (self.settings is not None and self._has_table("documents")
                                     and not self.con.execute("SELECT count(*) FROM documents").fetchone()[0])
        return self._memo["emptied"]

    def _refuse_empty(self) -> None:
        """A store with no documents says so (a new path opened by mistake, an ingest never run): "no BM25
        index" sent users looking for an index option."""
        if not self._has_table("documents") or not self.con.execute("SELECT count(*) FROM documents").fetchone()[0]:
            raise StoreError(f"{self.path} is empty (no documents): ingest a corpus first, with "
                             f"`hrt ingest SOURCE --store {self.path}` or `Store.ingest(docs)`")

    def _no_embeddings(self) -> NoReturn:
        """Dense search without vectors: an empty store says it is empty, a lexical-only one how to embed."""
        self._refuse_empty()
        raise StoreError(f"{self.path} has no embeddings; ingest with embeddings (the default) to use dense search, "
                         "or search with BM25 alone (hrt search --mode lexical; a config with retrieval.dense.enabled: false)")

    def _has_table(self, name: str, schema: str = "main") -> bool:
        if self.read_only:  # one listing for every table a search asks about (`_read_all_meta` says why it stays right)
            if "tables" not in self._memo:
                self._memo["tables"] = set(self.con.execute(
                    "SELECT table_schema, table_name FROM information_schema.tables").fetchall())
            return (schema, name) in self._memo["tables"]
        return bool(
            self.con.execute(
                "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                [schema, name],
            ).fetchone()[0]
        )

    def has_lexical_index(self) -> bool:
        if "fts" not in self._memo:
            self._memo["fts"] = self._has_table("dict", "fts_main_chunks")
        return self._memo["fts"]

    def _lexical_index_whole(self) -> bool:
        """The BM25 index holds exactly the stored chunks. A store file moved over another beside that one's
        leftover WAL (a killed process's) got the old file's index replayed onto it: its new chunks were never
        found by BM25, and every later ingest said "BM25 index unchanged". Checked at each ingest (one join)."""
        if not self.has_lexical_index():
            return False
        strays = self.con.execute(
            "SELECT (SELECT count(*) FROM chunks c ANTI JOIN fts_main_chunks.docs d ON d.name = c.chunk_id) + "
            "(SELECT count(*) FROM fts_main_chunks.docs d ANTI JOIN chunks c ON d.name = c.chunk_id)").fetchone()[0]
        return strays == 0

    # ------------------------------------------------------------------ embedding
    def embedder(self, model: str | None = None, **options: Any) -> Embedder:
        """The embedder for this store: the one given, else one made by `make_embedder(model, **options)`
        for `model`, the store's recorded model, or the default (`options`: backend, provider, url...)."""
        provider = options.get("provider", "local")
        backend = options.get("backend", "auto")
        e = self._embedder
        if (model is None and e is not None and self.embedding_model in (None, e.model_id)
                and backend in ("auto", getattr(e, "backend", backend))):
            return e  # the embedder given to the store (http, precomputed, a test's model) fits it
        given = self._given_embedder
        if model is None and given is not None and backend == "auto" and self.embedding_model not in (None, given.model_id):
            self._check_model(given)  # refused with both names: it was dropped for the store's model (user trial AZ)
        want = model or self.embedding_model or DEFAULT_MODEL
        made_by = self.embedding_backend
        if provider == "local" and model is None and made_by not in (None, *OWN_BACKENDS) and not _local_model(want):
            # An embedder of the caller's made these vectors: no model by that name can be loaded (the attempt
            # retried the model hub for over a minute before failing, user trial AZ).
            raise StoreError(
                f"{self.path} holds vectors of {want!r} made by an embedder of your own (backend {made_by!r}): open the "
                "store with that embedder (Store(path, embedder=...)) to search it densely; the CLI cannot load it: use "
                "--mode lexical (retrieval.dense.enabled: false)"
            )
        if provider == "local" and model is None and self.embedding_backend == "http":
            raise StoreError(
                f"{self.path} holds vectors of {want!r} made by an http endpoint: embed queries the same way "
                f"(retrieval.dense.provider: http, retrieval.dense.url, retrieval.dense.model: {want})"
            )
        if provider == "local" and model is None and self.embedding_backend == "precomputed" and not _local_model(want):
            # The label names vectors made elsewhere; unless it is a model found on this machine (e.g. what
            # `hrt embed` recorded), it is no model to load: never try it as a hub id over the network.
            raise StoreError(
                f"{self.path} holds precomputed vectors of {want!r}: set retrieval.dense (a local model path, or "
                "provider: http) to embed queries with that model, or use --mode lexical"
            )
        want_id = embedder_model_id(want, backend, provider)
        with self._embedder_lock:  # threads asking at once share one embedder (and so one loaded model)
            e = self._embedder
            if e is None or e.model_id != want_id or (backend != "auto" and getattr(e, "backend", backend) != backend):
                self._embedder = e = make_embedder(want, **options)
        return e

    def _ingest_embedder(self, docs: list[dict[str, Any]], settings: IndexSettings, model: str | None, backend: str) -> Embedder:
        """Vectors the documents carry (`toolkit.vectors`, model named by `model`), else the store's embedder."""
        if any("vector" in d for d in docs):
            from .vectors import document_vectors

            return document_vectors(docs, settings.chunk_size, settings.chunk_overlap, model)
        e = self._embedder
        if model is None and e is not None and backend in ("auto", getattr(e, "backend", backend)):
            return e  # the embedder given to the store: `_check_model` refuses it if the store has another model
        have, how = self.embedding_model, self.embedding_backend
        if model is None and have is not None and how in ("http", "precomputed"):
            made = "by an http endpoint" if how == "http" else "elsewhere (precomputed)"
            way = (f"the endpoint that made them (hrt ingest --embed-url URL --model {have})" if how == "http"
                   else f"vectors of that model (hrt ingest --vectors FILE, or a corpus `vector` field with --model {have})")
            raise StoreError(
                f"{self.path} holds vectors of {have!r} made {made}, but this ingest would embed with the local "
                f"model {embedder_model_id(None, backend)!r}: ingest with {way}, or --no-embed for lexical only, "
                "or use a new store file for the other model"
            )
        return self.embedder(model, backend=backend)

    def _check_model(self, emb: Embedder, *, dim_too: bool = True) -> None:
        """Refuse to mix models in one store. The dimension check loads the model, so it is optional."""
        have, dim = self.embedding_model, self.embedding_dim
        if have is not None and have != emb.model_id:
            how = {"http": ", made by an http endpoint", "precomputed": ", precomputed"}.get(self.embedding_backend or "", "")
            raise StoreError(
                f"{self.path} was built with embedding model {have!r} (dim {dim}{how}); you asked for "
                f"{_describe(emb)}. Use that model, or a new store file for the other model."
            )
        if dim_too and dim is not None:
            self._check_dim(emb, int(emb.dim))

    def _check_dim(self, emb: Embedder | None, got: int) -> None:
        """Refuse vectors whose size is not the store's (a configuration error, never a provider outage)."""
        dim = self.embedding_dim
        if dim is None or got == dim:
            return
        who = f"{_describe(emb)} makes" if emb is not None else "the query vectors have"
        raise StoreError(
            f"{self.path} holds {dim}-d embeddings of {self.embedding_model!r} but {who} {got}-d vectors: "
            "embed with the model (and dimensions) that made the store, or use a new store file for the other model"
        )

    def embed_cached(self, texts: Sequence[str], emb: Embedder, *, progress: bool = False, store: bool = True) -> np.ndarray:
        """Embeddings for `texts`, computing only those not yet in the cache (keyed by model and text hash).
        `store=False` (or a read-only store): what is computed is not added to the cache."""
        hashes = [sha1(t) for t in texts]
        if self.read_only or not store or self._caches_off is not None:  # what the cache has, the rest in memory
            return self._embed_read_only(list(texts), hashes, emb)
        made: dict[str, np.ndarray] = {}
        try:
            self._fill_embedding_cache(dict(zip(hashes, texts, strict=True)), emb, progress=progress, computed=made)
        except Exception as e:  # noqa: BLE001 - see `_cache_write_failed`
            self._cache_write_failed(e)  # the vectors made before it failed are used, not asked for again (paid)
            return self._embed_read_only(list(texts), hashes, emb, known=made)
        self._register("want", pl.DataFrame({"text_hash": hashes, "i": range(len(hashes))}))
        got = self.con.execute(  # vectors: always through Arrow (numpy would hand over an array per row)
            "SELECT w.i, c.vec FROM want w JOIN (SELECT e.text_hash, any_value(e.vec) AS vec FROM embedding_cache e "
            "SEMI JOIN want x USING (text_hash) WHERE e.model = ? GROUP BY e.text_hash) c ON c.text_hash = w.text_hash "
            "ORDER BY w.i",  # (one row per text even in a cache an earlier version filled twice: `_migrate`)
            [emb.model_id],
        ).pl(rows_per_batch=max(1, len(hashes)))  # buffers for these rows, not 1M (`_read_dense_matrix`)
        self.release_table_pages()  # the join scanned the whole cache, chunk vectors included
        return np.asarray(got["vec"].to_list(), dtype=np.float32).reshape(len(texts), -1)

    def _embed_read_only(self, texts: list[str], hashes: list[str], emb: Embedder,
                         known: dict[str, np.ndarray] | None = None) -> np.ndarray:
        if not texts:  # (not emb.dim: an endpoint would be asked for its size, a local model loaded)
            return np.zeros((0, self.embedding_dim or 0), dtype=np.float32)
        self._register("want", pl.DataFrame({"text_hash": hashes}))
        have = dict(
            self.con.execute(
                "SELECT c.text_hash, any_value(c.vec) FROM embedding_cache c SEMI JOIN want w USING (text_hash) "
                "WHERE c.model = ? GROUP BY c.text_hash",
                [emb.model_id],
            ).fetchall()
        ) | (known or {})
        todo = [i for i, h in enumerate(hashes) if h not in have]
        fresh = _vectors(emb, [texts[i] for i in todo]) if todo else None
        out = np.zeros((len(texts), emb.dim if todo else len(next(iter(have.values())))), dtype=np.float32)
        for i, h in enumerate(hashes):
            if h in have:
                out[i] = have[h]
        for j, i in enumerate(todo):
            out[i] = fresh[j]
        return out

    def _retitled(self, changed: list[dict[str, Any]]) -> int:
        """How many of these stored documents come with the same text and another title."""
        if not changed:
            return 0
        self._register("ids", pl.DataFrame({"doc_id": [d["doc_id"] for d in changed]}, schema={"doc_id": pl.Utf8}))
        stored = {i: (t, h) for i, t, h in self.con.execute(
            "SELECT doc_id, title, text_hash FROM documents SEMI JOIN ids USING (doc_id)").fetchall()}
        return sum(1 for d in changed if (old := stored.get(d["doc_id"])) and old[0] != d["title"]
                   and old[1] == text_identity(d["text"]))

    def _register(self, name: str, df: pl.DataFrame) -> None:
        # Lazy: DuckDB scans a LazyFrame through polars' Arrow export; an Arrow table would import pandas (_Connection).
        sql_types = {pl.Utf8: "VARCHAR", pl.Int64: "BIGINT", pl.Float64: "DOUBLE"}
        if self.con.lean and all(t in sql_types for t in df.schema.values()):
            # `hrt search` (a handful of ids): the columns go in as bound lists, so pyarrow is not imported.
            # Only the name and the column names are SQL text: checked against the store's own names first.
            if name not in _REGISTERED or not all(c.isidentifier() for c in df.columns):
                raise ValueError(f"internal frame name {name!r} / columns {df.columns} not allowed in SQL text")
            cols = ", ".join(f'unnest(?::{sql_types[t]}[]) AS "{c}"' for c, t in df.schema.items())
            if self._registered.get(name) == "view":  # a table cannot replace a view of the same name
                self.con.unregister(name)
            self.con.execute(f"CREATE OR REPLACE TEMP TABLE {name} AS SELECT {cols}", [df[c].to_list() for c in df.columns])
            self._registered[name] = "table"
            return
        if self._registered.get(name) == "table":  # nor a view be made beside a table: `hrt search --batch` answered its
            # first hybrid query and failed the second ("want" already exists), pyarrow having come in between
            self.con.execute(f"DROP TABLE IF EXISTS temp.main.{name}")  # name: one of `_REGISTERED` (a table is lean's)
        self.con.register(name, df.lazy())
        self._registered[name] = "view"

    def _fill_embedding_cache(self, by_hash: dict[str, str], emb: Embedder, *, progress: bool,
                              computed: dict[str, np.ndarray] | None = None) -> tuple[int, int]:
        """Compute and cache the missing embeddings; returns (computed, already cached). `computed` collects the
        vectors as they are made, for a caller that still needs them when caching them fails (`embed_cached`)."""
        if not by_hash:
            return 0, 0
        self._register("need", pl.DataFrame({"text_hash": list(by_hash)}))
        missing = [
            r[0]
            for r in self.con.execute(
                "SELECT n.text_hash FROM need n ANTI JOIN (SELECT text_hash FROM embedding_cache WHERE model = ?) c "
                "ON c.text_hash = n.text_hash",
                [emb.model_id],
            ).fetchall()
        ]
        supplies = getattr(emb, "supplies", None)
        if supplies is not None:
            # Supplied vectors replace the cached ones of their texts: corrected vectors, or a text changed
            # and changed back with a new vector, must not get the vector cached before.
            lacking = set(missing)
            replace = [h for h in by_hash if h not in lacking and supplies(h)]
            if replace:
                self.con.execute("DELETE FROM embedding_cache WHERE model = ? AND list_contains(?::VARCHAR[], text_hash)",
                                 [emb.model_id, replace])
                missing += replace
        if missing:  # an endpoint's size is checked on its first answer below: no extra "probe" request
            self._check_model(emb, dim_too=getattr(emb, "backend", None) != "http")
        # Each batch is cached as it arrives (outside the ingest's transaction), so a failed ingest keeps what
        # it computed. An endpoint is paid per request and fails mid-way more often: its own batches are cached
        # one by one (a 500 at 95% of a paid ingest re-sent everything of its 512-text group before).
        batch = min(512, emb.batch_size) if getattr(emb, "backend", None) == "http" else 512
        bar = progress_bar(total=len(missing), desc="embedding", unit="text", show=progress and bool(missing))
        done = 0
        try:
            for i in range(0, len(missing), batch):
                part = missing[i : i + batch]
                vecs = _vectors(emb, [by_hash[h] for h in part])
                self._check_dim(emb, vecs.shape[1])  # never cache vectors of another size than the store's
                if computed is not None:
                    computed.update(zip(part, vecs, strict=True))
                df = pl.DataFrame({"text_hash": part, "vec": vecs.tolist()}, schema={"text_hash": pl.Utf8, "vec": pl.List(pl.Float32)})
                self._register("newvec", df)
                with _cache_lock(self.path):  # another thread may have cached the same text meanwhile
                    self.con.execute("INSERT INTO embedding_cache SELECT ?, n.text_hash, n.vec FROM newvec n ANTI JOIN "
                                     "(SELECT text_hash FROM embedding_cache WHERE model = ?) c USING (text_hash)",
                                     [emb.model_id, emb.model_id])
                self.con.unregister("newvec")
                done += len(part)
                bar.update(len(part))
        except ToolkitError as e:
            if not done:
                raise
            raise type(e)(f"{e} ({done} of {len(missing)} embeddings were computed before this and are kept in "
                          f"{self.path.name}'s cache: running the ingest again sends only the other {len(missing) - done})") from e
        finally:
            bar.close()
        self.con.unregister("need")
        return len(missing), len(by_hash) - len(missing)

    # ------------------------------------------------------------------ ingest
    def ingest(
        self,
        docs: Corpus | Iterable[Mapping[str, Any]] | pl.DataFrame | pl.LazyFrame,
        *,
        settings: IndexSettings | None = None,
        embed: bool = True,
        model: str | None = None,
        backend: str = "auto",
        prune: bool | str | frozenset[str] = False,
        progress: bool = False,
    ) -> IngestReport:
        """Add or update documents (idempotent). `prune=True` also removes stored documents not in `docs`; a string
        prunes only the stored ids that start with it (a folder ingested with its own id prefix), a set only the
        ids in it (`hrt ingest --prune`: not another folder's documents).
        `backend`: the local embedding runtime (`toolkit.embed.make_embedder`).

        `docs` is a `Corpus` from `load_corpus`, or dicts / a polars or pandas frame, which go through
        `load_corpus` first: the same defaults and checks as a JSONL line, errors naming `record N`, all
        before anything is written; empty records are skipped (logged, and listed in the report's `skipped`)."""
        # A failed first ingest into a file this object created leaves it empty: `close` removes it.
        with _write_lock(self.path):
            return self._ingest(docs, settings=settings, embed=embed, model=model, backend=backend, prune=prune,
                                progress=progress)

    def _check_writable(self, what: str = "the ingest") -> None:
        """StoreError when an ingest (or a deletion) that has something to write meets a read-only Store: DuckDB's
        own "attached in read-only mode" escaped as a raw InvalidInputException (user trial N). An ingest with
        nothing to write stays a no-op on a read-only store."""
        if self.read_only:
            raise StoreError(f"{self.path}: this Store was opened read-only (read_only=True) and {what} has "
                             "something to write: open it with Store(path) to write to it")
        folder = self.path.parent
        if not os.access(folder, os.W_OK):  # DuckDB's commit then failed with a traceback (user trial BA)
            raise StoreError(f"{self.path}: its folder {folder} is not writable, and DuckDB writes its log "
                             f"({self.path.name}.wal) beside the store file, so {what} cannot be stored: make the folder "
                             "writable, or work on a copy of the store in a writable folder (searches can read it as it is)")

    def _ingest(
        self,
        docs: Corpus | Iterable[Mapping[str, Any]] | pl.DataFrame | pl.LazyFrame,
        *,
        settings: IndexSettings | None,
        embed: bool,
        model: str | None,
        backend: str,
        prune: bool | str | frozenset[str],
        progress: bool,
    ) -> IngestReport:
        from .loaders import UNREADABLE, Corpus, load_corpus

        if not isinstance(docs, Corpus):
            docs = load_corpus(docs)
            if docs.skipped:
                logging.getLogger("toolkit").warning("warning: %s (see IngestReport.skipped)", docs.skipped_summary())
        if not docs:
            raise InputError("the corpus is empty: nothing to ingest")
        settings = settings or self.settings or IndexSettings()
        old_settings = self.settings
        rechunk_all = old_settings is not None and (
            (old_settings.chunk_size, old_settings.chunk_overlap) != (settings.chunk_size, settings.chunk_overlap)
        )
        emb = self._ingest_embedder(docs, settings, model, backend) if embed else None
        if emb is not None:
            self._check_model(emb, dim_too=False)

        chunk_key = f"{settings.chunk_size}/{settings.chunk_overlap}"
        # Kept aside, not written into the caller's documents: a document dict fed back (an edited copy, as in
        # the bring-your-own-corpus tutorial) would carry `content_hash` in as a metadata field.
        # Supplied vectors (`toolkit.vectors`) are content too: new vectors for the same text are a change.
        vstamp = getattr(emb, "stamp", None)
        content_hash = {
            d["doc_id"]: sha1(json.dumps([d["title"], d["text"], d["source"], d["scope"], d["metadata"], chunk_key]
                                         + ([vstamp(d["title"], d["text"], settings.chunk_size, settings.chunk_overlap)]
                                            if vstamp else []),
                                         sort_keys=True))
            for d in docs
        }
        existing = dict(self.con.execute("SELECT doc_id, content_hash FROM documents").fetchall())
        incoming = {d["doc_id"] for d in docs}
        todo = [d for d in docs if rechunk_all or existing.get(d["doc_id"]) != content_hash[d["doc_id"]]]
        # A prefix prunes only the ids under it: another folder's documents (its own --id-prefix) stay (user trial AS:
        # two folders synced into one store with --prune removed each other's documents, every run, without a word).
        removed = sorted(i for i in set(existing) - incoming if _may_prune(prune, i)) if prune else []
        if removed and (unread := [s.where for s in getattr(docs, "skipped", []) if s.reason.startswith(UNREADABLE)]):
            # Pruned, the documents stored from what this user cannot read would be lost for a permission (trial BA).
            raise InputError(f"{len(unread)} file(s) or folder(s) {UNREADABLE} (e.g. {unread[0]}): --prune would remove "
                             "the documents stored from them; make them readable, --exclude them, or ingest without --prune "
                             "(nothing was changed)")
        added = sum(1 for d in todo if d["doc_id"] not in existing)
        retitled = self._retitled([d for d in todo if d["doc_id"] in existing])
        if rechunk_all and (kept_old := sorted(set(existing) - incoming - set(removed))):
            # The documents left out would keep the old chunks while `index_settings` names the new size: one
            # store with two chunkings (BM25 lengths and dense scores mixed), reported as one.
            raise InputError(
                f"changing the chunking ({old_settings.chunk_size}/{old_settings.chunk_overlap} -> "
                f"{settings.chunk_size}/{settings.chunk_overlap}) re-chunks every document, but {len(kept_old):,} stored "
                f"document(s) are not in this input (e.g. {kept_old[0]!r}): "
                + ("they are not this folder's to remove (another prefix or folder): ingest those too with the new "
                   "chunking, or use a new store file" if prune else
                   "ingest the whole corpus, add --prune (prune=True) to remove them, or use a new store file for the "
                   "new chunking"))

        # Everything is checked before anything is written: empty documents, then typed metadata (dates,
        # numbers; a bad date stops the ingest here).
        for d in todo:
            if not d["text"].strip() and not d["title"].strip():
                raise InputError(f"document {d['doc_id']!r} has no text and no title")
        value_rows = [(d["doc_id"], *v) for d in todo for v in typed_values(d["metadata"], f"document {d['doc_id']!r}")]

        # Documents are chunked a batch at a time (here for the embeddings, below for the insert), so only one
        # batch's chunk texts are held: all of them at once was about 3 GB at a million chunks.
        batches = [todo[i : i + INGEST_BATCH] for i in range(0, len(todo), INGEST_BATCH)]
        only_rows = None  # a single batch's rows, chunked once and kept for the insert
        computed = cached = 0
        need_embed = emb is not None and bool(todo or self._chunks_without_embeddings())
        if todo or removed or need_embed:  # refused before any embedding work is spent on it
            self._check_writable()
        if emb is not None and need_embed:
            for part in batches:
                rows = _chunk_rows(part, settings, lexical=len(batches) == 1)  # one batch: its rows are inserted too
                c, k = self._fill_embedding_cache({r[6]: r[8] for r in rows}, emb, progress=progress)
                computed, cached = computed + c, cached + k
                only_rows = rows if len(batches) == 1 else None
            c, k = self._embed_unchanged_chunks(emb, progress=progress)
            computed, cached = computed + c, cached + k

        fts_changed = old_settings is None or old_settings.fts_key() != settings.fts_key()
        # Compound forms switched on or off: every stored chunk's BM25 text is made again (`_reanalyse_text`).
        relex_all = old_settings is not None and old_settings.compounds != settings.compounds
        # A store indexed by an earlier `lexical_text` (analysis versions 1-2) is brought up to date here.
        reanalyse = self.lexical_analysis != ANALYSIS_VERSION
        whole = bool(fts_changed or not self._lexical_index_whole() or (reanalyse and self._non_ascii_chunks()))
        rebuild = whole or bool(todo or removed)
        if not rebuild and not need_embed:
            if reanalyse and not self.read_only:
                self._set_meta("lexical_analysis", ANALYSIS_VERSION)  # nothing it would change
                self._set_meta("analysis_generation", self.generation())
            hnsw = self._refresh_vector_index() if not self.read_only else None  # `<store>.hnsw` moved in from elsewhere
            return IngestReport(len(docs), 0, 0, len(docs), 0, 0, 0, 0, False, list(docs.skipped),
                                *self.embedding_coverage(), vector_index=hnsw)

        self._check_writable()  # a rebuild for other settings or an older analysis writes too
        self.con.execute("BEGIN TRANSACTION")
        try:
            gone = [d["doc_id"] for d in todo] + removed
            touched = self._chunk_ids(gone) if rebuild and not whole else []
            # A pruned document's vectors go (below); a changed one's old text keeps its vector cached, so that a
            # reverted edit or a return to earlier chunk settings is not embedded again (`hrt delete` drops them).
            gone_hashes = self._remove_documents(removed)
            self._remove_documents([d["doc_id"] for d in todo])
            if value_rows:
                self._register("newvalues", values_frame(value_rows, "doc_id"))
                self.con.execute("INSERT INTO doc_values SELECT doc_id, field, num, ts, text FROM newvalues")
            chunks_written = 0
            bar = progress_bar(total=len(todo), desc="writing", unit="doc", show=progress and len(todo) >= 200)
            for part in batches:
                self._register("newdocs", _docs_frame(part, content_hash))
                self.con.execute("INSERT INTO documents BY NAME SELECT * FROM newdocs")
                rows = only_rows if only_rows is not None else _chunk_rows(part, settings)
                self._register("newchunks", pl.DataFrame([r[:8] for r in rows], schema=_CHUNK_SCHEMA, orient="row"))
                self.con.execute("INSERT INTO chunks SELECT * FROM newchunks")
                chunks_written += len(rows)
                # A registered frame lives as long as its name: let each batch's go.
                self.con.unregister("newdocs")
                self.con.unregister("newchunks")
                del rows
                bar.update(len(part))
            bar.close()
            if emb is not None and need_embed:
                # An integer in the DDL (a type size cannot be a bound parameter). The store's or the cached
                # vectors' size first: asking an endpoint's `dim` sends it a request when nothing new was embedded.
                cached_dim = self.con.execute("SELECT len(vec) FROM embedding_cache WHERE model = ? LIMIT 1", [emb.model_id]).fetchone()
                dim = self.embedding_dim or (int(cached_dim[0]) if cached_dim else int(emb.dim))
                self.con.execute(f"CREATE TABLE IF NOT EXISTS embeddings(chunk_id VARCHAR, model VARCHAR, vec FLOAT[{dim}])")
                self.con.execute(
                    f"INSERT INTO embeddings SELECT c.chunk_id, ?, ec.vec::FLOAT[{dim}] FROM chunks c "
                    "JOIN embedding_cache ec ON ec.text_hash = c.text_hash AND ec.model = ? "
                    "ANTI JOIN embeddings e ON e.chunk_id = c.chunk_id "
                    "QUALIFY row_number() OVER (PARTITION BY c.chunk_id) = 1",  # one vector per chunk, whatever the cache
                    [emb.model_id, emb.model_id],
                )
                self._set_meta("embedding_model", emb.model_id)
                self._set_meta("embedding_dim", str(dim))
                self._set_meta("embedding_backend", getattr(emb, "backend", "custom"))
            self._drop_unused_vectors(gone_hashes)  # after the new chunks: a text a changed file took on keeps its vector
            if relex_all:
                self._reanalyse_text(settings, every_chunk=True)
            elif reanalyse and (redone := self._reanalyse_text(settings)):  # said once: the next ingest finds nothing to redo
                logging.getLogger("toolkit").warning(
                    "note: %s: re-indexed the BM25 text of %d chunk(s) made by an older text analysis (version %s; once)",
                    self.path, redone, self.lexical_analysis)
            in_place = False
            if whole:
                # A step of its own, said: a large ingest otherwise sat silent after its last bar (user trial BL: 10 s
                # at 30k documents); the bar cannot move during DuckDB's build, but it names the step and its time.
                step = progress_bar(total=1, desc="BM25 index", unit="build", show=progress and chunks_written >= 20_000)
                self._build_fts(settings)
                step.update()
                step.close()
            elif rebuild:
                in_place = self._update_fts([*touched, *self._chunk_ids([d["doc_id"] for d in todo])], settings)
            self._set_meta("lexical_analysis", ANALYSIS_VERSION)
            self._set_meta("index_settings", json.dumps(settings.record()))
            self._commit_write(analysed=True)
        except BaseException as e:
            self._failed_write(e, "ingest")
        hnsw = self._after_write()
        return IngestReport(
            documents=len(docs),
            added=added,
            changed=len(todo) - added,
            retitled=retitled,
            unchanged=len(docs) - len(todo),
            removed=len(removed),
            chunks_written=chunks_written,
            embeddings_computed=computed,
            embeddings_from_cache=cached,
            fts_rebuilt=rebuild,
            fts_in_place=in_place,
            skipped=list(docs.skipped),
            embedded_chunks=(coverage := self.embedding_coverage())[0],
            total_chunks=coverage[1],
            vector_index=hnsw,
            embeddings_how="computed" if getattr(emb, "computes", True) else "supplied",
        )

    def delete(self, doc_ids: Iterable[str] | str, *, missing_ok: bool = False) -> int:
        """Remove these documents (their chunks, vectors, typed metadata and BM25 postings) in one transaction;
        returns how many were removed. An id the store does not hold is an InputError naming it, before anything
        is removed, unless `missing_ok` (as `Path.unlink`): a typo must not pass as a deletion. Deleting one
        memory used to mean re-ingesting every other one with `prune=True` (user trial N)."""
        # Ids are text in the store (an ingested integer id 1 is "1"): compared as such.
        ids = [doc_ids] if isinstance(doc_ids, str) else list(dict.fromkeys(map(str, doc_ids)))
        if not ids:
            return 0
        with _write_lock(self.path):
            return self._delete(ids, missing_ok)

    def ids_where(self, filters: dict[str, Any]) -> list[str]:
        """Ids of the documents whose metadata passes every filter (as `retrieval.filters` matches them): one user's
        memories to delete when they ask to be forgotten, without keeping an id list of one's own (user trial BK)."""
        if not filters:
            raise InputError("ids_where: give at least one filter (field -> value)")
        fsql, fparams = self._filter_sql(filters)
        # fsql: keys checked by `_filter_terms` (a JSON path of words), values bound
        return [r[0] for r in self.con.execute(f"SELECT doc_id FROM documents d WHERE true {fsql} ORDER BY doc_id",
                                               fparams).fetchall()]

    def stored_form(self, column: str, value: str) -> str:
        """The spelling the store holds of `value` in documents' `column` ("doc_id" or "scope"), when it differs only
        in Unicode normalisation: a folder name macOS wrote decomposed (NFD) looks the same as the composed one
        typed (user trial AQ: `--scope 한국어` and `hrt delete 한국어/메모.md` found nothing). `value` when none."""
        if column not in ("doc_id", "scope") or value.isascii():
            return value
        rows = self.con.execute(f"SELECT DISTINCT {column} FROM documents WHERE nfc_normalize({column}) = nfc_normalize(?) "
                                f"LIMIT 2", [value]).fetchall()
        return rows[0][0] if len(rows) == 1 else value

    def lost_scopes(self, scopes: Sequence[str]) -> list[str]:
        """The scopes of `scopes` no stored document has (compared in the store's spelling: `stored_form`)."""
        have = {r[0] for r in self.con.execute("SELECT DISTINCT scope FROM documents WHERE scope IS NOT NULL").fetchall()}
        return sorted(q for q in set(scopes) if self.stored_form("scope", q) not in have)

    def named_documents(self, asks: pl.DataFrame, filters: dict[str, Any] | None = None) -> pl.DataFrame:
        """[qid, token, doc_id, chunk_id, idf] for `asks` [qid, token, scope, short]: the document a query's identifier
        names by its id - the id itself (as typed, else the only id equal to it but for case), or, for a `short` token (a
        hash written short: seven or more hex digits, as git and docker print them), the only stored id that starts with
        it. Within the query's scope and the filters; `chunk_id` is the document's first chunk, `idf` BM25's IDF of a term
        only that document holds (`retrieve.name_first`)."""
        out = {"qid": pl.Utf8, "token": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "idf": pl.Float64}
        if not len(asks) or not self.has_lexical_index() or self._emptied():
            return pl.DataFrame(schema=out)
        asks = self._stored_scopes(asks)
        fsql, fparams = self._filter_sql(filters)
        short = asks.filter(pl.col("short"))
        # fsql: filter keys checked by `_filter_terms`, values bound. The prefix join only for short hashes (usually
        # none): an OR in one join condition compared every token with every id.
        prefix = ("""UNION ALL SELECT a.qid, a.tok, d.doc_id, 2 FROM (SELECT unnest(?::VARCHAR[]) AS qid,
                     unnest(?::VARCHAR[]) AS tok, unnest(?::VARCHAR[]) AS scope) a JOIN documents d
                   ON starts_with(lower(d.doc_id), lower(a.tok)) AND length(d.doc_id) > length(a.tok)
                   WHERE (a.scope IS NULL OR d.scope = a.scope)""" + fsql) if len(short) else ""
        found = self.con.execute(
            f"""SELECT a.qid, a.tok, d.doc_id, CASE WHEN d.doc_id = a.tok THEN 0 ELSE 1 END FROM (SELECT unnest(?::VARCHAR[]) AS qid,
                    unnest(?::VARCHAR[]) AS tok, unnest(?::VARCHAR[]) AS scope) a JOIN documents d ON lower(d.doc_id) = lower(a.tok)
                WHERE (a.scope IS NULL OR d.scope = a.scope) {fsql} {prefix}""",
            [asks["qid"].to_list(), asks["token"].to_list(), asks["scope"].to_list(), *fparams,
             *([short["qid"].to_list(), short["token"].to_list(), short["scope"].to_list(), *fparams] if len(short) else [])],
        ).fetchall()
        if not found:  # the usual answer, in one cheap statement
            return pl.DataFrame(schema=out)
        # The id the token is (as typed, then in any case: an upper-case SHA or UUID) wins over the ids it starts; two
        # candidates of the best kind (ids equal but for case, or two ids a short hash starts) name neither.
        by: dict[tuple[str, str], dict[int, set[str]]] = {}
        for q, tok, doc, kind in found:
            by.setdefault((q, tok), {}).setdefault(kind, set()).add(doc)
        best = {k: v[min(v)] for k, v in by.items()}
        named = {k: next(iter(d)) for k, d in best.items() if len(d) == 1}
        if not named:
            return pl.DataFrame(schema=out)
        docs = sorted(set(named.values()))
        first = dict(self.con.execute("SELECT doc_id, first(chunk_id ORDER BY ord) FROM chunks WHERE doc_id IN "
                                      "(SELECT unnest(?::VARCHAR[])) GROUP BY doc_id", [docs]).fetchall())
        n = self.con.execute("SELECT num_docs FROM fts_main_chunks.stats").fetchone()[0]
        idf = math.log((n - 1 + 0.5) / (1 + 0.5) + 1)  # BM25's IDF (docs/bm25.md) of a term one chunk holds
        rows = sorted((q, tok, d, first[d], idf) for (q, tok), d in named.items() if d in first)
        return pl.DataFrame(rows, schema=out, orient="row")

    def ids_starting(self, prefix: str, *, scope: str | None = None, limit: int = 3) -> list[str]:
        """Up to `limit` stored ids longer than `prefix` that start with it in any case (within `scope`), as
        `named_documents` matches a short hash: why one named nothing."""
        sql = ("SELECT doc_id FROM documents WHERE starts_with(lower(doc_id), lower(?)) AND length(doc_id) > length(?) "
               "AND (?::VARCHAR IS NULL OR scope = ?) ORDER BY doc_id LIMIT ?")
        scope = self.stored_form("scope", scope) if scope is not None else None
        return [r[0] for r in self.con.execute(sql, [prefix, prefix, scope, scope, int(limit)]).fetchall()]

    def _stored_scopes(self, queries: pl.DataFrame) -> pl.DataFrame:
        """`queries` with each scope in the store's spelling (`stored_form`), for every search path (the CLI mapped
        `--scope` alone, and the API's scopes stayed unmatched). ASCII scopes cost nothing."""
        if "scope" not in queries.columns:
            return queries
        asked = [x for x in queries["scope"].drop_nulls().unique().to_list() if not x.isascii()]
        mapping = {x: got for x in asked if (got := self.stored_form("scope", x)) != x}
        return queries.with_columns(pl.col("scope").replace(mapping)) if mapping else queries

    def _delete(self, ids: list[str], missing_ok: bool) -> int:
        held = {r[0] for r in self.con.execute("SELECT doc_id FROM documents WHERE doc_id IN (SELECT unnest(?::VARCHAR[]))",
                                               [ids]).fetchall()}
        if len(held) < len(set(ids)):  # an id typed composed, stored decomposed (or the reverse): the stored spelling
            ids = [i if i in held else self.stored_form("doc_id", i) for i in ids]
            held |= {r[0] for r in self.con.execute("SELECT doc_id FROM documents WHERE doc_id IN (SELECT unnest(?::VARCHAR[]))",
                                                    [ids]).fetchall()}
        if (absent := [i for i in ids if i not in held]) and not missing_ok:
            more = f" and {len(absent) - 3} more" if len(absent) > 3 else ""
            # A folder's notes are stored under their path with its extension (user trial BI: `hrt delete note-17`
            # for note-17.md only said the id was absent): the stored ids an absent one is the stem of are named.
            near = [r[0] for r in self.con.execute(
                r"SELECT doc_id FROM documents WHERE regexp_replace(doc_id, '\.[^./]+$', '') IN (SELECT unnest(?::VARCHAR[])) "
                "ORDER BY doc_id LIMIT 3", [absent[:3]]).fetchall()]
            hint = f" (stored ids of that name: {', '.join(map(repr, near))})" if near else ""
            raise InputError(f"{self.path}: no document with id {', '.join(map(repr, absent[:3]))}{more}{hint}: nothing "
                             "was deleted (missing_ok=True, or --missing-ok, skips ids the store does not hold)")
        gone = [i for i in ids if i in held]
        if not gone:
            if not self.read_only:
                self._refresh_vector_index()  # an HNSW rebuild a Ctrl-C cut short after the last deletion: redone
            return 0
        self._check_writable("the deletion")
        settings = self.settings or IndexSettings()
        self.con.execute("BEGIN TRANSACTION")
        try:
            touched = self._chunk_ids(gone)
            self._drop_unused_vectors(self._remove_documents(gone))
            self._update_fts(touched, settings)
            self._commit_write()
        except BaseException as e:
            self._failed_write(e, "deletion")
        self._after_write()
        return len(gone)

    def _remove_documents(self, gone: Sequence[str]) -> list[str]:
        """Delete documents with everything stored per document (inside the caller's transaction). Returns the text
        hashes of their chunks, for `_drop_unused_vectors` once the replacing chunks (if any) are written."""
        if not gone:
            return []
        self._register("gone", pl.DataFrame({"doc_id": list(gone)}, schema={"doc_id": pl.Utf8}))
        hashes = [r[0] for r in self.con.execute(
            "SELECT DISTINCT text_hash FROM chunks WHERE doc_id IN (SELECT doc_id FROM gone)").fetchall()]
        self.con.execute("DELETE FROM documents WHERE doc_id IN (SELECT doc_id FROM gone)")
        if self._has_table("embeddings"):
            self.con.execute("DELETE FROM embeddings WHERE chunk_id IN "
                             "(SELECT chunk_id FROM chunks WHERE doc_id IN (SELECT doc_id FROM gone))")
        self.con.execute("DELETE FROM chunks WHERE doc_id IN (SELECT doc_id FROM gone)")
        self.con.execute("DELETE FROM doc_values WHERE doc_id IN (SELECT doc_id FROM gone)")
        self.con.unregister("gone")
        return hashes

    def _drop_unused_vectors(self, hashes: Sequence[str]) -> None:
        """A removed document's chunks leave no vector behind, unless another chunk still has their text (inside the
        caller's transaction). User trial Z found a deleted memory's vector in the embedding cache under its text's
        hash; a file pruned from a synced folder (`--prune`) left its vectors the same way: the text of a document
        removed from the folder stayed recoverable from its vector, and the cache grew with every removal. Texts the
        document held before an edit stay cached (a revert embeds nothing) until `hrt clear-cache --vectors`."""
        if not hashes:
            return
        self._register("gone_hashes", pl.DataFrame({"text_hash": list(hashes)}, schema={"text_hash": pl.Utf8}))
        self.con.execute("DELETE FROM embedding_cache WHERE text_hash IN (SELECT g.text_hash FROM gone_hashes g "
                         "ANTI JOIN chunks c USING (text_hash))")
        self.con.unregister("gone_hashes")

    def _chunk_ids(self, doc_ids: Sequence[str]) -> list[str]:
        if not doc_ids:
            return []
        return [r[0] for r in self.con.execute("SELECT chunk_id FROM chunks WHERE doc_id IN (SELECT unnest(?::VARCHAR[]))",
                                               [list(doc_ids)]).fetchall()]

    # Past this share of the store's chunks changed, one rebuild is cheaper than updating postings in place.
    _IN_PLACE_SHARE = 0.2

    def _update_fts(self, chunk_ids: Sequence[str], settings: IndexSettings) -> bool:
        """Bring the BM25 index up to date after these chunks were removed, added or changed: in place when few
        changed (`toolkit.fts_update`, which scores as a rebuild would: a test checks), else rebuilt whole.
        A rebuild per write cost 45 ms at 300 memories and 0.6 s at 30,000 (user trial N). True: in place."""
        from . import fts_update

        chunk_ids = list(dict.fromkeys(chunk_ids))  # a changed chunk is named as old and new: counted once
        total = self.con.execute("SELECT count(*) FROM chunks").fetchone()[0]
        if (self._has_table("dict", self._FTS_SCHEMA) and len(chunk_ids) <= max(1, self._IN_PLACE_SHARE * total)
                and fts_update.update_fts(self.con, removed=chunk_ids, added=chunk_ids, stemmer=settings.stemmer)):
            return True
        self._build_fts(settings)
        return False

    def _commit_write(self, *, analysed: bool = False) -> None:
        """A new generation, the stage cache emptied, then COMMIT (the end of every write transaction).
        `analysed`: the write brought every chunk's BM25 text to this toolkit's analysis (an ingest does)."""
        current = analysed or self.lexical_analysis == ANALYSIS_VERSION  # (read before the generation moves)
        gen = sha1(self.generation() + os.urandom(8).hex())[:12]
        self._set_meta("generation", gen)
        # Which generation this toolkit wrote last with every chunk in its text analysis: a later generation
        # without it was written by an older toolkit (`lexical_analysis` then calls the index's text unknown;
        # user trial W: an older version's ingest into a current store indexed new chunks by its own analysis,
        # never to be redone). A write that redoes nothing (a delete) keeps an earlier mismatch as it was.
        if current:
            self._set_meta("analysis_generation", gen)
        if (was := self._meta("schema_version")) != SCHEMA_VERSION:
            self._set_meta("schema_version", SCHEMA_VERSION)
            if was is not None:  # said once, at the write that does it (user trial AW: nothing said it, ever)
                logging.getLogger("toolkit").warning(
                    "note: %s: store format moved from schema version %s to %s (once): a toolkit that reads version %s "
                    "at most now refuses to open it (upgrade it); the documents, vectors and indexes are unchanged",
                    self.path, was, SCHEMA_VERSION, was)
        # Every cached stage frame is keyed by the old generation (`pipeline.prepare_key`): none can be read
        # again. Kept, they grew the file without bound under an agent's write-search loop (61.9 MB for
        # 800 memories after 500 cycles against 2.6 MB fresh, user trial N).
        self.con.execute("DELETE FROM stage_cache")
        interrupts.check()  # a Ctrl-C that a library swallowed (`interrupts`) must not commit the write
        self.con.execute("COMMIT")

    def _cache_write_failed(self, e: BaseException) -> None:
        """A cache write (stage frames, reranker scores, query vectors) the file system refused: a store in a folder
        this user cannot write (DuckDB's log goes beside it) failed whole runs with a traceback, over caches (user
        trial BA). Said once; the results do not depend on them."""
        if not isinstance(e, duckdb.IOException | duckdb.TransactionException):
            raise e
        self._rollback()
        if self._caches_off is None:
            self._caches_off = str(e).splitlines()[0]
            logging.getLogger("toolkit").warning(
                "note: %s: its caches cannot be written (%s): nothing is cached, the results are unaffected", self.path,
                self._caches_off)

    def _failed_write(self, e: BaseException, what: str) -> NoReturn:
        """Roll back and re-raise; a full disk or an unwritable folder becomes a StoreError saying nothing changed."""
        self._rollback()
        self._forget()
        if isinstance(e, duckdb.IOException | duckdb.TransactionException):
            raise StoreError(f"{self.path}: the {what} could not be written ({str(e).splitlines()[0]}); nothing of "
                             "it was stored: the store is as it was") from e
        raise e

    def _after_write(self) -> str | None:
        """Caches dropped and the vector index brought up to date after a committed write (what it did, or None)."""
        self._forget()
        self._dense_cache = None
        self.release_table_pages()  # the batches' pages: the next reads are the search matrices, from disk anyway
        self._fold_wal()
        return self._refresh_vector_index()

    def _fold_wal(self) -> None:
        """Checkpoint once the write-ahead log has passed DuckDB's threshold (`checkpoint_threshold`, 16 MiB). DuckDB
        checkpoints by itself at a commit, but a commit that updated rows (every write does: the BM25 statistics) only
        while no other transaction is open: with threads sharing the store, one of them is nearly always inside a
        statement, and the log grew past 30 MB in a minute of two threads writing and searching (user trial BH). A
        CHECKPOINT needs only that no statement scans or writes at that moment; refused, it is tried after the next
        write. Run under the write lock, so no other write of this process is under way."""
        try:
            size = os.stat(f"{self.path}.wal").st_size
        except OSError:  # no log: nothing to fold
            return
        # Read each time: a database setting, which a caller may have changed through `Store.con`.
        if size < _stated_limit_bytes(self.con.execute("SELECT current_setting('checkpoint_threshold')").fetchone()[0]):
            return
        with suppress(duckdb.TransactionException):
            self.con.execute("CHECKPOINT")

    def _embed_unchanged_chunks(self, emb: Embedder, *, progress: bool) -> tuple[int, int]:
        """Cache embeddings for stored chunks that have none (e.g. the store was built with embed=False).
        Reads the texts only of chunks the cache lacks: with supplied vectors that is none of them."""
        lacking = "chunks c" + (" ANTI JOIN embeddings e USING (chunk_id)" if self._has_table("embeddings") else "")
        cached_sql = "(SELECT DISTINCT text_hash FROM embedding_cache WHERE model = ?) ec"
        cached = self.con.execute(
            f"SELECT count(DISTINCT c.text_hash) FROM {lacking} SEMI JOIN {cached_sql} ON ec.text_hash = c.text_hash",
            [emb.model_id],
        ).fetchone()[0]
        rows = self.con.execute(
            "SELECT c.text_hash, any_value(CASE WHEN d.title <> '' THEN d.title || chr(10) || c.text ELSE c.text END) "
            f"FROM {lacking} JOIN documents d USING (doc_id) ANTI JOIN {cached_sql} ON ec.text_hash = c.text_hash "
            "GROUP BY c.text_hash",
            [emb.model_id],
        ).fetchall()
        computed, _ = self._fill_embedding_cache(dict(rows), emb, progress=progress)
        return computed, cached

    def _chunks_without_embeddings(self) -> int:
        if not self._has_table("embeddings"):
            return self.con.execute("SELECT count(*) FROM chunks").fetchone()[0]
        return self.con.execute("SELECT count(*) FROM chunks ANTI JOIN embeddings USING (chunk_id)").fetchone()[0]

    @property
    def lexical_analysis(self) -> str:
        """The `analysis.ANALYSIS_VERSION` the BM25 index's text was made with ("1" for a store from before
        the version was recorded; "0", unknown, when a toolkit that does not record it wrote the store after
        this one: `analysis_generation` is not the store's generation); `ingest` brings another one up to date."""
        if self.read_only:  # nothing can write to it: its memo is one consistent read (`_read_all_meta`)
            gen, got, stamp = self.generation(), self._meta("lexical_analysis"), self._meta("analysis_generation")
        else:
            # One statement, so one snapshot: read one by one, a write another thread committed in between paired
            # the old generation with the new stamp, and a search warned of a stale index (StaleTextWarning) that
            # was current (user trial BH, two threads writing and searching one Store).
            rows = self._generation_rows(("lexical_analysis", "analysis_generation"))
            gen, got, stamp = rows.get("generation") or "0", rows.get("lexical_analysis"), rows.get("analysis_generation")
        got = got or "1"
        return "0" if stamp is not None and stamp != gen else got

    # `chunk_body` in SQL, and the chunks whose body holds a non-ASCII character (RE2 pattern bound as `?`).
    _BODY = "CASE WHEN d.title <> '' THEN d.title || chr(10) || c.text ELSE c.text END"
    _NON_ASCII_SQL = f"FROM chunks c JOIN documents d USING (doc_id) WHERE regexp_matches({_BODY}, ?)"
    _NON_ASCII = r"[^\x{00}-\x{7f}]"

    def _restale(self) -> str:
        """The chunks the move from the store's analysis version to this one indexes differently, as an RE2 pattern
        of their text: from 3 (the last version shipped before 4), only Indic, Thai, Lao, Khmer and Myanmar text
        (`analysis.CHANGED_SINCE_3`: the review found every store with a curly quote re-indexed whole); from an
        older or unknown one, any non-ASCII text."""
        return CHANGED_SINCE_3 if self.lexical_analysis == "3" else self._NON_ASCII

    def _non_ascii_chunks(self) -> bool:
        """Whether any stored chunk holds text a change of analysis version indexes differently (`_restale`), hence
        what `_reanalyse_text` redoes."""
        return self.con.execute("SELECT EXISTS (SELECT 1 " + self._NON_ASCII_SQL + ")", [self._restale()]).fetchone()[0]

    def _reanalyse_text(self, settings: IndexSettings, *, every_chunk: bool = False) -> int:
        """Recompute `lex_text` under `settings` of the chunks an older analysis indexed differently (`_restale`), or of
        `every_chunk` (compound forms switched on or off); the caller rebuilds the BM25 index. Returns how many changed."""
        if every_chunk:
            rows = self.con.execute("SELECT c.chunk_id, " + self._BODY + ", c.lex_text FROM chunks c JOIN documents d "
                                    "USING (doc_id)").fetchall()
        else:
            rows = self.con.execute("SELECT c.chunk_id, " + self._BODY + ", c.lex_text " + self._NON_ASCII_SQL,
                                    [self._restale()]).fetchall()
        changed = [(cid, new) for cid, body, old in rows if (new := settings.lexical_text(body)) != old]
        if changed:
            self._register("relex", pl.DataFrame(changed, schema={"chunk_id": pl.Utf8, "lex_text": pl.Utf8}, orient="row"))
            self.con.execute("UPDATE chunks SET lex_text = r.lex_text FROM relex r WHERE chunks.chunk_id = r.chunk_id")
            self.con.unregister("relex")
        return len(changed)

    _FTS_SCHEMA = "fts_main_chunks"

    def _drop_fts(self) -> None:
        """Drop the BM25 index's schema one object at a time: macros, then tables, then the empty schema.
        DuckDB 1.5.5 cannot replay its own `DROP SCHEMA ... CASCADE` of an FTS schema from a WAL ("Cannot drop
        entry fts_main_chunks because there are entries that depend on it"), which is what
        `create_fts_index(overwrite=1)` logs: once DuckDB had checkpointed by itself in a long-running writer,
        a kill -9 after one more write left a store that never opened again (user trial N). Dropped in this
        order, every statement replays."""
        sch = self._FTS_SCHEMA
        if not self.con.execute("SELECT count(*) FROM information_schema.schemata WHERE schema_name = ?", [sch]).fetchone()[0]:
            return
        # Names from DuckDB's own catalog of this one schema, quoted: nothing of the user's reaches this SQL.
        for name, kind in self.con.execute("SELECT function_name, function_type FROM duckdb_functions() WHERE schema_name = ? "
                                           "AND function_type IN ('macro', 'table_macro')", [sch]).fetchall():
            self.con.execute("DROP " + ("MACRO TABLE" if kind == "table_macro" else "MACRO") + " IF EXISTS "
                             + sch + "." + _quoted(name))
        for (name,) in self.con.execute("SELECT table_name FROM information_schema.tables WHERE table_schema = ?", [sch]).fetchall():
            self.con.execute("DROP TABLE IF EXISTS " + sch + "." + _quoted(name))
        self.con.execute("DROP SCHEMA IF EXISTS " + sch)

    def _build_fts(self, s: IndexSettings) -> None:
        # The PRAGMA takes no bound parameters: the values are checked against the closed lists (again here,
        # so no path around `IndexSettings` can put anything else into this SQL text).
        if s.stemmer not in STEMMERS or s.stopwords not in STOPWORDS or "'" in FTS_IGNORE:
            raise InputError(f"FTS settings outside the known lists: stemmer {s.stemmer!r}, stopwords {s.stopwords!r}")
        self._drop_fts()
        self.con.execute(
            "PRAGMA create_fts_index('chunks', 'chunk_id', 'lex_text', "
            f"stemmer='{s.stemmer}', stopwords='{s.stopwords}', ignore='{FTS_IGNORE}', "
            "strip_accents=1, lower=1)"
        )

    # ------------------------------------------------------------------ reads
    def documents(self, doc_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """Documents as a frame (all, or the given ids)."""
        if doc_ids is None:
            return self.con.frame("SELECT doc_id, source, scope, title, text, metadata::VARCHAR AS metadata FROM documents")
        self._register("ids", pl.DataFrame({"doc_id": list(doc_ids)}, schema={"doc_id": pl.Utf8}))
        return self.con.frame(
            "SELECT d.doc_id, source, scope, title, text, metadata::VARCHAR AS metadata FROM documents d SEMI JOIN ids USING (doc_id)"
        )

    def _migrate_doc_values(self) -> None:
        """A store written before typed metadata: type every stored document's metadata in place. Lenient
        (a value that does not read as a date is kept as text only), so that an old store always opens."""
        docs = self.con.execute("SELECT doc_id, metadata::VARCHAR FROM documents").fetchall()
        rows = [(d, *v) for d, m in docs for v in typed_values(json.loads(m) if m else {}, d, strict=False)]
        if rows:
            self._register("newvalues", values_frame(rows, "doc_id"))
            self.con.execute("INSERT INTO doc_values SELECT doc_id, field, num, ts, text FROM newvalues")

    def doc_values(self, doc_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """Typed metadata [doc_id, field, num, ts, text] (all documents, or the given ids). A store opened
        read-only before its migration has no `doc_values` table: the values are then typed on the fly."""
        schema = {"doc_id": pl.Utf8, **VALUES_SCHEMA}
        if doc_ids is not None:
            self._register("vids", pl.DataFrame({"doc_id": list(doc_ids)}, schema={"doc_id": pl.Utf8}))
        some = doc_ids is not None
        if self._has_table("doc_values"):
            sql = "SELECT doc_id, field, num, ts, text FROM doc_values"
            out = self.con.frame(sql + " SEMI JOIN vids USING (doc_id)" if some else sql)
            return out.cast(schema) if len(out) else pl.DataFrame(schema=schema)
        sql = "SELECT doc_id, metadata::VARCHAR FROM documents"
        docs = self.con.execute(sql + " SEMI JOIN vids USING (doc_id)" if some else sql).fetchall()
        rows = [(d, *v) for d, m in docs for v in typed_values(json.loads(m) if m else {}, d, strict=False)]
        return values_frame(rows, "doc_id")

    def value_fields(self) -> dict[str, str]:
        """Typed metadata fields and their kind ("date", "number" or "text"), for the priors' field pickers."""
        v = self.doc_values()
        kinds = v.group_by("field").agg(pl.col("ts").is_not_null().any().alias("d"), pl.col("num").is_not_null().any().alias("n"))
        return {f: "date" if d else "number" if n else "text" for f, d, n in kinds.sort("field").iter_rows()}

    def doc_sources(self, doc_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """[doc_id, source, scope, text_hash] of every document, or of `doc_ids` (a one-shot search reads its
        candidates' only, not the whole table); a store of an earlier version opened read-only (not migrated: no
        hash, or hashes of the raw bytes) gets `text_identity` computed on the fly."""
        fresh = "sha1(nfc_normalize(text))"
        where, args = ("WHERE doc_id IN (SELECT unnest(?::VARCHAR[]))", [list(doc_ids)]) if doc_ids is not None else ("", None)
        try:
            # A migrated store holds every hash (`_migrate` fills them, ingest writes them): its texts are not read, which
            # at 150k documents cost a one-shot search 73-257 ms for 100 candidates (user trial BL).
            stored = "text_hash" if self._meta("text_hash_form") == "nfc" else fresh  # else: hashes of the raw bytes
            return self.con.frame(f"SELECT doc_id, source, scope, {stored} AS text_hash FROM documents {where}", args)
        except duckdb.BinderException:
            return self.con.frame(f"SELECT doc_id, source, scope, {fresh} AS text_hash FROM documents {where}", args)

    def chunk_copies(self) -> pl.DataFrame:
        """[chunk_id, doc_id, text_hash, source] of every chunk whose text another chunk shares (`text_identity`:
        the same NFC form, whatever the documents' titles): what chunk-level results collapse by. Only shared texts, so it stays
        small; hashed here, in prepare, because the ingest hash covers title + text (the embedded body)."""
        return self.con.frame(
            "WITH h AS (SELECT chunk_id, doc_id, sha1(nfc_normalize(text)) AS text_hash FROM chunks) "
            "SELECT h.chunk_id, h.doc_id, h.text_hash, d.source FROM h JOIN documents d USING (doc_id) "
            "WHERE h.text_hash IN (SELECT text_hash FROM h GROUP BY text_hash HAVING count(*) > 1)"
        )

    def chunks(self, chunk_ids: Sequence[str] | None = None) -> pl.DataFrame:
        """Chunks with their document's title and source: [chunk_id, doc_id, ord, start_char, text, text_hash, title,
        source]."""
        sql = (
            "SELECT c.chunk_id, c.doc_id, c.ord, c.start_char, c.text, c.text_hash, d.title, d.source FROM chunks c "
            "JOIN documents d USING (doc_id)"
        )
        if chunk_ids is None:
            return self.con.frame(sql)
        self._register("cids", pl.DataFrame({"chunk_id": list(chunk_ids)}, schema={"chunk_id": pl.Utf8}))
        return self.con.frame(sql + " SEMI JOIN cids USING (chunk_id)")

    def has_embeddings(self) -> bool:
        """Whether the store holds an embeddings table (`chunk_vectors` reads it)."""
        return self._has_table("embeddings")

    def chunk_vectors(self, chunk_ids: Sequence[str]) -> pl.DataFrame:
        """[chunk_id, vec] for near-duplicate detection."""
        if not self._has_table("embeddings"):
            raise StoreError(f"{self.path} has no embeddings; ingest with embeddings to use near-duplicate dedup")
        self._register("cids", pl.DataFrame({"chunk_id": list(chunk_ids)}, schema={"chunk_id": pl.Utf8}))
        return self.con.execute("SELECT chunk_id, vec FROM embeddings SEMI JOIN cids USING (chunk_id)"
                                ).pl(rows_per_batch=max(1, len(chunk_ids)))  # buffers for these rows, not 1M (`_read_dense_matrix`)

    # ------------------------------------------------------------------ rerank cache
    def get_rerank(self, model: str, rows: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
        if not rows:
            return {}
        if self.read_only or self._caches_off is not None:  # this session's scores first (`put_rerank`), then the file's
            mem = self._session_rerank.get(model, {})
            found = self._get_rerank_file(model, [r for r in rows if r not in mem])
            return found | {r: mem[r] for r in rows if r in mem}
        return self._get_rerank_file(model, rows)

    def _get_rerank_file(self, model: str, rows: list[tuple[str, str]]) -> dict[tuple[str, str], float]:
        if not rows:
            return {}
        self._register("rq", pl.DataFrame(rows, schema={"query_hash": pl.Utf8, "text_hash": pl.Utf8}, orient="row"))
        got = self.con.execute(
            "SELECT r.query_hash, r.text_hash, any_value(r.score) FROM rerank_cache r SEMI JOIN rq "
            "USING (query_hash, text_hash) WHERE r.model = ? GROUP BY ALL",
            [model],
        ).fetchall()
        return {(q, t): s for q, t, s in got}

    def put_rerank(self, model: str, rows: list[tuple[str, str, float]]) -> None:
        """Cache reranker scores. A read-only store (`hrt search`) keeps them in memory for this session:
        a read-only command never writes, and the scores are still reused within it."""
        if not rows:
            return
        if self.read_only or self._caches_off is not None:
            self._session_rerank.setdefault(model, {}).update({(q, t): s for q, t, s in rows})
            return
        self._register(
            "rp", pl.DataFrame(rows, schema={"query_hash": pl.Utf8, "text_hash": pl.Utf8, "score": pl.Float64}, orient="row")
        )
        try:
            self.con.execute(
                "INSERT INTO rerank_cache SELECT ?, query_hash, text_hash, score FROM rp "
                "ANTI JOIN (SELECT * FROM rerank_cache WHERE model = ?) r USING (query_hash, text_hash)",
                [model, model],
            )
        except Exception as e:  # noqa: BLE001 - see `_cache_write_failed`
            self._cache_write_failed(e)
            self._session_rerank.setdefault(model, {}).update({(q, t): s for q, t, s in rows})

    # ------------------------------------------------------------------ stage cache
    def backup(self, dest: str | Path, *, timeout_s: float = 30.0) -> Path:
        """Copy the store, as of now, to `dest` while this process serves it: the write-ahead log is folded into the
        file (a CHECKPOINT, retried while other threads' statements hold it out) and the file copied while this
        process's writes wait, so the copy holds every write acknowledged before the call (the `.wal` then holds
        none). A `cp` of a live file and its `.wal` lost acknowledged writes and brought deleted ones back (user
        trial BN: 23 of 33 copies); another process cannot back up a store this one has open."""
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only; a backup folds the write-ahead log, which writes")
        out = Path(dest).expanduser()
        if out.resolve() == self.path.resolve():
            raise InputError(f"{out}: the backup must be another file than the store")
        if Path(f"{out}.wal").exists():  # DuckDB would replay it onto the fresh copy (the review: another file's rows)
            raise InputError(f"{out}.wal: a write-ahead log of an earlier file of that name lies beside it, and would be "
                             "replayed onto the backup: remove it (or close what holds that file) first")
        tmp = out.with_name(f".{out.name}.backup-{os.getpid()}")
        with _write_lock(self.path):  # this process's writes wait; other processes cannot write (DuckDB's file lock)
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    self.con.execute("CHECKPOINT")
                    break
                except duckdb.TransactionException as e:
                    if "transaction local changes" in str(e):  # this thread's own BEGIN: waiting cannot end it
                        raise StoreBusyError(f"{self.path}: this thread has a transaction open (BEGIN without COMMIT): "
                                             "commit or roll it back before a backup") from None
                    if time.monotonic() > deadline:  # another thread's statement, or a transaction it left open
                        raise StoreBusyError(f"{self.path}: another thread's statement or open transaction kept the log "
                                             f"from being folded for {timeout_s:g} s: no backup made") from None
                    time.sleep(0.02)
            try:
                for src, to in ((self.path, out), (self.vector_index_path, Path(f"{out}.hnsw")),
                                (self._vector_index_stamp_path, Path(f"{out}.hnsw.json"))):
                    if src == self.path or src.exists():  # the HNSW index beside it too, or the copy searches exactly
                        shutil.copyfile(src, tmp)
                        replace_durably(tmp, to)
                    else:  # an earlier backup's index would not be this copy's
                        to.unlink(missing_ok=True)
            finally:
                tmp.unlink(missing_ok=True)
        return out

    def clear_caches(self, *, rerank: bool = True, model: str | None = None, vectors: bool = False) -> dict[str, int]:
        """Drop cached reranker scores (all, or one provider's: its `cache_key`, "model@url" for http) and the stage
        frames built from them; {table: rows dropped}. The corpus, its vectors and indexes are untouched: the next
        search asks the provider again. For an endpoint that now serves other weights under the same name (user
        trial AN: the old scores were reused for ever, and no command dropped them)."""
        self._check_writable("clearing the caches")
        lock = _write_lock(self.path)
        with lock:
            out = {}
            self.con.execute("BEGIN TRANSACTION")
            try:
                if rerank:
                    where, args = ("WHERE model = ?", [model]) if model else ("", [])
                    out["rerank_cache"] = self.con.execute(f"SELECT count(*) FROM rerank_cache {where}", args).fetchone()[0]
                    self.con.execute(f"DELETE FROM rerank_cache {where}", args)
                out["stage_cache"] = self.con.execute("SELECT count(DISTINCT key) FROM stage_cache").fetchone()[0]
                self.con.execute("DELETE FROM stage_cache")  # frames hold reranker scores: none may outlive them
                if vectors:  # texts no chunk holds: a document's text before an edit, a query's (review: they stayed)
                    orphans = "FROM embedding_cache e WHERE NOT EXISTS (SELECT 1 FROM chunks c WHERE c.text_hash = e.text_hash)"
                    out["embedding_cache"] = self.con.execute("SELECT count(*) " + orphans).fetchone()[0]
                    self.con.execute("DELETE " + orphans)
                self.con.execute("COMMIT")
            except BaseException:
                self.con.execute("ROLLBACK")
                raise
        self._memo.clear()
        return out

    def put_frames(self, key: str, frames: dict[str, pl.DataFrame | None]) -> None:
        """Keep the outputs of expensive stages under `key` (Parquet bytes: exact types, compact). Skipped while
        another thread writes: that write's commit empties the cache anyway, and a search must not wait for a
        long ingest to cache what it already computed."""
        lock = _write_lock(self.path)
        if self._caches_off is not None or not lock.acquire(blocking=False):
            return
        try:
            self._put_frames(key, frames)
        except Exception as e:  # noqa: BLE001 - only the file system's refusals are absorbed (`_cache_write_failed`)
            self._cache_write_failed(e)
        finally:
            lock.release()

    def _put_frames(self, key: str, frames: dict[str, pl.DataFrame | None]) -> None:
        import io

        self.con.execute("BEGIN TRANSACTION")
        try:
            self.con.execute("DELETE FROM stage_cache WHERE key = ?", [key])
            for name, df in frames.items():
                if df is None:
                    continue
                buf = io.BytesIO()
                df.write_parquet(buf)
                self.con.execute("INSERT INTO stage_cache(key, name, data) VALUES (?, ?, ?)", [key, name, buf.getvalue()])
            # Bounded: the most recent STAGE_CACHE_KEYS query sets. A service calling `run_pipeline` per search
            # wrote ~100 KB per distinct query that only a write cleared (1,000 searches: +36 MB, user trial AB).
            # Never the entry just written (`created` is local wall-clock time: a writer in another time zone
            # would rank its own entry oldest).
            self.con.execute(f"DELETE FROM stage_cache WHERE key <> ? AND key NOT IN (SELECT key FROM stage_cache "
                             f"WHERE key <> ? GROUP BY key ORDER BY max(created) DESC, key LIMIT {int(STAGE_CACHE_KEYS) - 1})",
                             [key, key])
            self.con.execute("COMMIT")
        except BaseException:
            self._rollback()
            raise

    def get_frames(self, key: str) -> dict[str, pl.DataFrame] | None:
        """The frames stored under `key`, or None when nothing is cached for it."""
        import io

        try:
            rows = self.con.execute("SELECT name, data FROM stage_cache WHERE key = ?", [key]).fetchall()
        except duckdb.CatalogException:
            return None
        return {name: pl.read_parquet(io.BytesIO(data)) for name, data in rows} or None

    # ------------------------------------------------------------------ lexical search
    @staticmethod
    def _filter_terms(filters: dict[str, Any], alias: str = "d") -> list[tuple[str, str, str, list[Any]]]:
        """(key, SQL that a document's metadata holds the key, SQL that it equals the value; the values bound) per
        filter. Equal means: the same text after Unicode NFC (a macOS client types NFD: user trial BK), or, for a
        value written as a number and a field stored as a JSON number, the same number (`1` matches a stored `1.0`;
        the text "007" is not the number 7)."""
        # Built-ins by their qualified names: a store file may hold a macro named like one, which an unqualified call
        # would run (user trial BM: a planted `nfc_normalize` made every filter match, and `delete --where` took all).
        out = []
        for k, v in filters.items():
            if not isinstance(k, str) or not filter_key_ok(k):  # the key goes into the JSON path: checked, as the
                raise InputError(f"metadata filter key {k!r}: {FILTER_KEY_RULE}")  # config checks it
            try:
                v = filter_value(k, v)  # noqa: PLW2901  `draft: False` as the config reads it (user trial BP)
            except ValueError as e:
                raise InputError(str(e)) from None
            got = f"system.main.json_extract_string({alias}.metadata, '$.{k}')"
            eq, params = f"system.main.nfc_normalize({got}) = system.main.nfc_normalize(?)", [v]
            if JSON_NUMBER.fullmatch(str(v)):
                # A stored float equals the value as a float; a stored integer equals an integral value exactly (as
                # HUGEINT: ids past 2**53 stay apart). A shared decimal rounding (DECIMAL(38, 10)) made 7.00000000004
                # equal 7, and 1e-11 equal 0 (user trial BM).
                typed, d = f"system.main.json_type({alias}.metadata, '$.{k}')", Decimal(str(v))
                same = []
                if math.isfinite(f := float(d)) and (f != 0 or d == 0):  # 1e-400 is no float: it is not 0.0 (review)
                    same.append(f"({typed} = 'DOUBLE' AND TRY_CAST({got} AS DOUBLE) = ?)")
                    params.append(f)
                if d == d.to_integral_value() and abs(d) < 2**126:
                    same.append(f"({typed} IN ('BIGINT', 'UBIGINT') AND TRY_CAST({got} AS HUGEINT) = CAST(? AS HUGEINT))")
                    params.append(str(int(d)))
                if same:
                    eq = f"({eq} OR {' OR '.join(same)})"
            out.append((k, f"{got} IS NOT NULL", eq, params))
        return out

    def _filter_sql(self, filters: dict[str, Any] | None, alias: str = "d") -> tuple[str, list[Any]]:
        if not filters:
            return "", []
        terms = self._filter_terms(filters, alias)
        return " AND " + " AND ".join(eq for _, _, eq, _ in terms), [p for *_, ps in terms for p in ps]

    def filter_counts(self, filters: dict[str, Any]) -> dict[str, tuple[int, int]]:
        """{field: (documents that have the field, documents whose value equals the filter's)} for each filter: why a
        filtered search found nothing (no such field, or no such value) is then said, not guessed."""
        terms = self._filter_terms(filters)
        if not terms:
            return {}
        cols = ", ".join(f"count(*) FILTER (WHERE {has}), count(*) FILTER (WHERE {eq})" for _, has, eq, _ in terms)
        # cols: keys checked by `_filter_terms` (a JSON path of words), values bound
        row = self.con.execute(f"SELECT {cols} FROM documents d", [p for *_, ps in terms for p in ps]).fetchone()
        return {k: (row[2 * i], row[2 * i + 1]) for i, (k, *_) in enumerate(terms)}

    def _allowed_docs(self, m: dict[str, Any], filters: dict[str, Any] | None) -> np.ndarray | None:
        """Boolean mask over the layout's documents passing the metadata filters (None: no filter)."""
        if not filters:
            return None
        fsql, fparams = self._filter_sql(filters)
        # fsql: filter keys checked by `_filter_terms` (`config.filter_key_ok`), values bound in fparams.
        ok = {r[0] for r in self.con.execute(f"SELECT doc_id FROM documents d WHERE true {fsql}", fparams).fetchall()}
        return np.array([d in ok for d in m["doc_ids"].gather(m["starts"]).to_list()])

    def lexical_search(
        self,
        queries: pl.DataFrame,
        *,
        top_k: int = 100,
        level: str = "document",
        k1: float = 1.2,
        b: float = 0.75,
        query_term_frequency: bool = False,
        scope_filter: bool = True,
        filters: dict[str, Any] | None = None,
        block: int = 256,
    ) -> pl.DataFrame:
        """BM25 for all queries -> [qid, doc_id, chunk_id, rank, score], as a sparse matrix product.

        Queries are tokenised and stemmed by the FTS index's own macros (one SQL for all queries); the
        chunk term weights come from the FTS tables once per store generation. Same scores and rankings
        as `lexical_search_sql` (a test checks), several times faster: no join per query term.
        `query_term_frequency`: a term repeated in the query counts once per occurrence (Lucene, bm25s), not once.
        """
        if not self.has_lexical_index():
            self._refuse_empty()
            raise StoreError(f"{self.path} has no BM25 index; run `hrt ingest` first")
        if self._emptied():
            return pl.DataFrame(schema=CAND_SCHEMA)
        queries = self._stored_scopes(queries) if scope_filter else queries
        if self._bm25_in_sql(len(queries), k1, b):
            t0 = time.perf_counter()
            try:
                return self.lexical_search_sql(queries, top_k=top_k, level=level, k1=k1, b=b,
                                               query_term_frequency=query_term_frequency,
                                               scope_filter=scope_filter, filters=filters)
            finally:
                gen, spent = self._bm25_sql_spent
                self._bm25_sql_spent = (gen, spent + time.perf_counter() - t0)
        import scipy.sparse as sp

        settings = self.settings or IndexSettings()
        # The query texts go in as one list parameter (no frame registration: a fixed ~2 ms per call).
        lex = [settings.query_text(t) for t in queries["text"].to_list()]
        with self._snapshot():  # the matrix and the query terms' ids and df from one state of the index
            m = self._lexical_matrix(k1, b)
            # A query row's weight of a term: its IDF, times its count in the query with `query_term_frequency`
            # (the same product as `lexical_search_sql`'s qterm, so both paths give the same floats).
            qt = self.con.execute(
                f"""SELECT q.qi, d.termid, ln((({m["n_docs"]} - d.df + 0.5) / (d.df + 0.5)) + 1) * {_qtf(query_term_frequency)} AS idf
                FROM (SELECT qi, stem(tok, $2) AS t
                      FROM (SELECT qi, unnest(fts_main_chunks.tokenize(lex)) AS tok
                            FROM (SELECT generate_subscripts($1, 1) - 1 AS qi, unnest($1) AS lex))
                      WHERE {QUERY_TERM_FILTER}) q
                JOIN fts_main_chunks.dict d ON d.term = q.t GROUP BY q.qi, d.termid, d.df""",
                [lex, settings.stemmer],
            ).fetchnumpy()
        qmat = sp.csr_matrix((qt["idf"], (qt["qi"], qt["termid"])), shape=(len(queries), m["wt"].shape[0]))
        allowed = self._allowed_docs(m, filters)
        if len(m["chunk_ids"]) >= SPARSE_TOPK_MIN_CHUNKS:
            return self._sparse_topk(m, qmat, queries, scope_filter=scope_filter, allowed=allowed, level=level, top_k=top_k)
        return self._block_topk(
            m, lambda lo, hi: (qmat[lo:hi] @ m["wt"]).toarray(), queries, scope_filter=scope_filter,
            allowed=allowed, level=level, top_k=top_k, block=block, matched_only=True,
        )

    def _bm25_in_sql(self, n_queries: int, k1: float, b: float) -> bool:
        """Whether BM25 for these few queries runs in SQL rather than on the term matrix.

        A few queries in a fresh process (`hrt search`): one SQL join over the postings of their terms beats
        reading every posting into a matrix (and importing scipy) for them. A long-lived Store (a memory service)
        that goes on searching pays the join every time (~0.2-0.3 s a query at 89k chunks, 25 ms on the matrix),
        and one whose matrix a write made stale rebuilt it for its next single query (2-3 s at 89k, every write).
        So the matrix is built, or rebuilt, once the SQL time this store generation has spent on few-query searches
        reaches what the build is expected to cost: rent until the rent paid equals the price, which never pays more
        than twice the better of the two choices made in hindsight. Both paths give the same results (a test)."""
        if n_queries > _SQL_PATH_MAX_QUERIES:
            return False
        cache, gen = getattr(self, "_lex_cache", None), self.generation()
        if cache is not None and cache[0] == (gen, k1, b):
            return False
        spent_gen, spent = getattr(self, "_bm25_sql_spent", (None, 0.0))
        if spent_gen != gen:
            self._bm25_sql_spent = (gen, 0.0)
            return True
        if spent < _MATRIX_MIN_RENT_S:  # spared the postings count for the first searches
            return True
        return spent < self._bm25_matrix_price()

    def _bm25_matrix_price(self) -> float:
        """Seconds a term matrix build is expected to take: as long as the last one of this object took (a write
        changes a corpus little), else the postings at `_MATRIX_S_PER_POSTING` (6.3M postings took 3.4-5 s here)."""
        if (last := getattr(self, "_matrix_build_s", None)) is not None:
            return last
        return self.con.execute("SELECT count(*) FROM fts_main_chunks.terms").fetchone()[0] * _MATRIX_S_PER_POSTING

    def _sparse_topk(
        self, m: dict[str, Any], qmat: Any, queries: pl.DataFrame, *, scope_filter: bool, allowed: np.ndarray | None,
        level: str, top_k: int,
    ) -> pl.DataFrame:
        """`_block_topk` for BM25 on large stores: the same masks, document maxima, tie-breaks and output,
        but over the sparse (query, chunk) scores only. A query matches a small share of a large corpus, so
        this skips the dense (queries x chunks) blocks whose writing, masking and partitioning are the wall
        past ~100k chunks (`benchmarks/scale.py`). Blocks of queries run on a thread pool (one per core): the
        sparse product (scipy's sparsetools) and the numpy work release the GIL."""
        from concurrent.futures import ThreadPoolExecutor

        q_code = self._query_scope_codes(m, queries, scope_filter)
        doc_of, doc_code = m["doc_of_chunk"], m["doc_scope_code"]
        block = SPARSE_BLOCK
        by_doc = level == "document" and len(m["starts"]) != len(doc_of)

        def one(lo: int) -> tuple[np.ndarray, ...]:
            sc = (qmat[lo : lo + block] @ m["wt"]).tocsr()
            if by_doc:  # document maxima need columns ascending = document order (chunks are laid out by document)
                sc.sort_indices()
            row = np.repeat(np.arange(sc.shape[0]), np.diff(sc.indptr))
            col = sc.indices.astype(np.int64)
            val = np.round(sc.data, 9)
            doc = doc_of[col]
            qc = q_code[lo : lo + block][row]
            keep = (val > 0) & ((qc == -1) | (doc_code[doc] == qc))
            if allowed is not None:
                keep &= allowed[doc]
            r, c, rank, v = _rank_flat(m, row[keep], col[keep], val[keep], level=level, top_k=top_k)
            return lo + r, c, rank, v

        starts = list(range(0, len(queries), block))
        with ThreadPoolExecutor(min(os.cpu_count() or 1, max(len(starts), 1))) as pool:
            parts = list(pool.map(one, starts))
        pieces = [list(x) for x in zip(*parts, strict=True)] if parts else [[], [], [], []]
        return _candidates(m, queries, *pieces)

    def lexical_search_sql(
        self,
        queries: pl.DataFrame,
        *,
        top_k: int = 100,
        level: str = "document",
        k1: float = 1.2,
        b: float = 0.75,
        query_term_frequency: bool = False,
        scope_filter: bool = True,
        filters: dict[str, Any] | None = None,
    ) -> pl.DataFrame:
        """BM25 for all queries in one SQL statement over the FTS tables (the reference for `lexical_search`).

        DuckDB's `match_bm25` (same tokenizer, stemmer, distinct query terms, k1, b) batched, except that a query's
        stopwords are dropped before stemming, as the index dropped the documents' (`QUERY_TERM_FILTER`):
        `match_bm25` scores one query per call (~50 queries/s), this join scores ~1,000+/s. With
        `query_term_frequency` a term repeated in the query (after stemming) counts once per occurrence, as Lucene's,
        bm25s's and rank_bm25's BM25 do, instead of once.
        """
        if not self.has_lexical_index():
            self._refuse_empty()
            raise StoreError(f"{self.path} has no BM25 index; run `hrt ingest` first")
        if self._emptied():
            return pl.DataFrame(schema=CAND_SCHEMA)
        settings = self.settings or IndexSettings()
        q = queries.select(
            "qid",
            (pl.col("scope") if scope_filter and "scope" in queries.columns else pl.lit(None, pl.Utf8)).alias("scope"),
        )
        # A loop, not `map_elements`: polars reads the function's bytecode first (~3 ms of a cold `hrt search`).
        lex = [None if t is None else settings.query_text(t) for t in queries["text"].to_list()]
        fsql, fparams = self._filter_sql(filters)
        # Shape of the query, tuned on LoCoMo (1,536 queries, 3x faster than a straight join):
        # - postings carry their document's scope and BM25 term weight, so the query join is an equality
        #   join on (term, scope) (an OR in the join condition made DuckDB build a cross product);
        # - queries and chunks are integers while grouping; strings are joined back for the top-k only;
        # - the order (of documents, and of a document's chunks) uses the score rounded to 1e-9, so float
        #   summation order cannot flip exact ties (two chunks with the same postings, trial O).
        with self._snapshot():  # the statistics formatted into the SQL and the postings from one state
            n_docs, avgdl = self.con.execute("SELECT num_docs, avgdl FROM fts_main_chunks.stats").fetchone()
            k1, b = float(k1), float(b)  # numbers only into the SQL text below (values from the config)
            # The queries are bound as lists and the rows fetched as tuples (this path serves a handful of queries):
            # a registered frame or an Arrow result would import pyarrow, a fifth of a cold `hrt search`.
            key = "m.doc_i" if level == "document" else "m.chunk_i"
            sql = f"""
            WITH qin AS (SELECT generate_subscripts(?::VARCHAR[], 1) - 1 AS qi, unnest(?::VARCHAR[]) AS qid,
                     unnest(?::VARCHAR[]) AS lex, unnest(?::VARCHAR[]) AS scope),
            meta AS MATERIALIZED (SELECT fd.docid, fd.len, c.chunk_id, c.doc_id, d.scope,
                     dense_rank() OVER (ORDER BY c.doc_id) AS doc_i, row_number() OVER (ORDER BY c.doc_id, c.ord) AS chunk_i
                   FROM fts_main_chunks.docs fd JOIN chunks c ON c.chunk_id = fd.name
                   JOIN documents d ON d.doc_id = c.doc_id WHERE true {fsql}),
            qt AS MATERIALIZED (SELECT qi, scope, t, count(*) AS n
                   FROM (SELECT qi, scope, stem(tok, ?) AS t
                         FROM (SELECT qi, scope, unnest(fts_main_chunks.tokenize(lex)) AS tok FROM qin) WHERE {QUERY_TERM_FILTER})
                   GROUP BY qi, scope, t),
            qterm AS MATERIALIZED (SELECT qt.qi, qt.scope, d.termid,
                     ln((({n_docs} - d.df + 0.5) / (d.df + 0.5)) + 1) * {_qtf(query_term_frequency, "qt.n")} AS idf
                   FROM qt JOIN fts_main_chunks.dict d ON d.term = qt.t),
            post AS MATERIALIZED (SELECT t.termid, t.docid, any_value(m.scope) AS scope,
                     count(*) * ({k1} + 1) / (count(*) + {k1} * (1 - {b} + {b} * any_value(m.len) / {avgdl})) AS w
                   FROM fts_main_chunks.terms t JOIN meta m ON m.docid = t.docid
                   WHERE t.termid IN (SELECT termid FROM qterm) GROUP BY t.termid, t.docid),
            hits AS (SELECT q.qi, p.docid, q.idf * p.w AS s FROM qterm q JOIN post p ON p.termid = q.termid AND p.scope = q.scope
                     UNION ALL
                     SELECT q.qi, p.docid, q.idf * p.w AS s FROM qterm q JOIN post p ON p.termid = q.termid WHERE q.scope IS NULL),
            sc AS (SELECT qi, docid, sum(s) AS score FROM hits GROUP BY qi, docid),
            best AS (SELECT sc.qi, {key} AS key, first(sc.docid ORDER BY round(sc.score, 9) DESC, m.chunk_i) AS docid, max(sc.score) AS score
                     FROM sc JOIN meta m ON m.docid = sc.docid GROUP BY sc.qi, {key}),
            top AS (SELECT qi, docid, score, row_number() OVER (PARTITION BY qi ORDER BY round(score, 9) DESC, key) AS rank
                    FROM best QUALIFY rank <= {int(top_k)})
            SELECT qin.qid, m.doc_id, m.chunk_id, top.rank, top.score
            FROM top JOIN meta m ON m.docid = top.docid JOIN qin ON qin.qi = top.qi ORDER BY qin.qid, top.rank
            """
            qids, scopes = q["qid"].to_list(), q["scope"].to_list()
            rows = self.con.execute(sql, [lex, qids, lex, scopes, *fparams, settings.stemmer]).fetchall()
        # Scores rounded to 1e-9 as the matrix paths round theirs, by the same function: the sums' last bits depend
        # on the summation order, and a long-lived store moves from this path to the matrix (`_bm25_in_sql`), which
        # must not move a result's score (min-max normalisation in convex fusion magnified 1e-16 into a new order).
        out = pl.DataFrame(rows, schema=CAND_SCHEMA, orient="row")
        return out.with_columns(pl.Series("score", np.round(out["score"].to_numpy(), 9), dtype=pl.Float64)) if rows else out

    @contextmanager
    def _snapshot(self) -> Iterator[None]:
        """Several reads as one snapshot (a read transaction on this thread's cursor): a write committed by
        another thread between them made the batched BM25 read postings with doc and term ids its layout lacked
        ("index 336 exceeds matrix dimension 334", user trial O). Inside a transaction already (the caller's
        own BEGIN): that one. Detected before any BEGIN, because a refused BEGIN aborts the open transaction and
        the caller's later COMMIT silently stores nothing: two statements outside a transaction get two
        transaction ids, inside one the same. A read-only store needs none: nothing writes to it while it is open."""
        if self.read_only or len({self.con.execute("SELECT txid_current()").fetchone()[0] for _ in range(2)}) == 1:
            yield
            return
        self.con.execute("BEGIN TRANSACTION")
        try:
            yield
        finally:
            with suppress(duckdb.Error):
                self.con.execute("COMMIT")

    def _lexical_matrix(self, k1: float, b: float) -> dict[str, Any]:
        """BM25 term weights of every chunk as a sparse (chunks x terms) matrix, read once per store generation
        and (k1, b) from the FTS index tables; columns follow the chunk layout of `_block_topk`."""
        import scipy.sparse as sp

        key = (self.generation(), k1, b)
        if getattr(self, "_lex_cache", None) is None or self._lex_cache[0] != key:
            t0 = time.perf_counter()
            lay = pl.from_arrow(
                self.con.execute(
                    "SELECT c.chunk_id, c.doc_id, d.scope, fd.docid, fd.len FROM chunks c JOIN documents d USING (doc_id) "
                    "JOIN fts_main_chunks.docs fd ON fd.name = c.chunk_id ORDER BY c.doc_id, c.ord"
                ).arrow()
            )
            n_docs_fts, avgdl = self.con.execute("SELECT num_docs, avgdl FROM fts_main_chunks.stats").fetchone()
            # FTS docids are arbitrary BIGINTs (row ids): map them to columns by binary search.
            fts_ids = lay["docid"].to_numpy()
            by_id = np.argsort(fts_ids)
            post = self.con.execute("SELECT termid, docid, count(*)::DOUBLE AS tf FROM fts_main_chunks.terms GROUP BY ALL").fetchnumpy()
            n_terms = int(self.con.execute("SELECT max(termid) + 1 FROM fts_main_chunks.dict").fetchone()[0] or 0)
            cols = by_id[np.searchsorted(fts_ids, post.pop("docid"), sorter=by_id)]
            tf = np.asarray(post.pop("tf"), dtype=np.float64)
            w = tf * (k1 + 1) / (tf + k1 * (1 - b + b * lay["len"].to_numpy().astype(np.float64)[cols] / avgdl))
            del tf
            # Terms x chunks, built as such (query rows pick their terms' postings): one conversion, not a
            # chunks x terms matrix transposed and converted again (two more copies of ~40M postings at 1M).
            wt = sp.csr_matrix((w, (np.asarray(post.pop("termid")), cols)), shape=(n_terms, len(lay)))
            del w, cols
            wt.sort_indices()
            self._lex_cache = (
                key,
                {
                    "wt": wt,
                    "n_docs": n_docs_fts,
                    **_chunk_layout(lay),
                },
            )
            self.release_table_pages()
            self._matrix_build_s = time.perf_counter() - t0  # `_bm25_matrix_price`
        return self._lex_cache[1]

    def match_bm25(self, text: str, *, top_k: int = 10, k1: float = 1.2, b: float = 0.75) -> pl.DataFrame:
        """DuckDB's own per-query `match_bm25` at chunk level (reference path for tests and benchmarks)."""
        return self.con.frame(
            "SELECT chunk_id, fts_main_chunks.match_bm25(chunk_id, ?, k := ?, b := ?) AS score FROM chunks "
            "WHERE score IS NOT NULL ORDER BY score DESC, chunk_id LIMIT ?",
            [(self.settings or IndexSettings()).query_text(text), k1, b, top_k],
        )

    # ------------------------------------------------------------------ dense search
    def _dense_matrix(self) -> dict[str, Any]:
        """Chunk vectors in doc order, read once per store generation (the batched path's working set).

        Threads sharing the store (a service's searches beside its writer, user trial AB): the layout and the
        vectors are read in one snapshot, one thread builds while the others wait for it, and the result is
        returned from a local, since a write in another thread drops `_dense_cache` at any moment (reads in
        separate statements had raised "index 365 is out of bounds" and "'NoneType' object is not subscriptable")."""
        cache = self._dense_cache
        if cache is not None and cache[0] == self.generation():
            return cache[1]
        with self._dense_lock:
            cache = self._dense_cache
            with self._snapshot():
                gen = self.generation()
                if cache is None or cache[0] != gen:
                    cache = (gen, self._read_dense_matrix())
                    self._dense_cache = cache
            self.release_table_pages()
        return cache[1]

    def _read_dense_matrix(self) -> dict[str, Any]:
        if not self._has_table("embeddings") or self._count_embeddings() == 0:
            self._no_embeddings()
        # The layout (ids, scopes, each chunk's embeddings row) is sorted; the vectors are not: they stream
        # in storage order, a batch at a time, into their sorted rows of one preallocated matrix. Sorting
        # and converting them whole held about three copies of every vector (5 GB at a million chunks).
        lay = self.con.execute(  # the dense path reads the vectors through Arrow anyway
            "SELECT c.chunk_id, c.doc_id, d.scope, e.rowid AS erow FROM chunks c JOIN embeddings e "
            "USING (chunk_id) JOIN documents d USING (doc_id) ORDER BY c.doc_id, c.ord"
        ).pl()
        erow = lay["erow"].to_numpy()
        slot = np.full(int(erow.max()) + 1, -1, dtype=np.int64)
        slot[erow] = np.arange(len(erow))
        vecs = None
        # Rowid ranges as literals: DuckDB 1.5.5 pushes `rowid BETWEEN a AND b` down to the scan (bound
        # parameters it does not), and `.pl()` keeps the search process free of pandas, which iterating an
        # Arrow reader imports (tests/test_cold_start.py).
        step = 122_880  # DuckDB's row group: each range reads one
        for lo in range(0, int(self.con.execute("SELECT max(rowid) FROM embeddings").fetchone()[0]) + 1, step):
            # `rows_per_batch`: DuckDB sizes the Arrow buffers for a whole batch (1M rows by default: a 2 GiB
            # reservation for 384-d vectors, which failed a search of a 316-document store under `ulimit -v`, trial BA).
            batch = self.con.execute(f"SELECT rowid, vec FROM embeddings WHERE rowid BETWEEN {lo} AND {lo + step - 1}"
                                     ).pl(rows_per_batch=min(step, len(erow)))
            if not len(batch):
                continue
            rid = batch["rowid"].to_numpy()
            inside = rid < len(slot)  # a row the layout does not know (it cannot, in one snapshot; never index past it)
            rows = np.where(inside, slot[np.minimum(rid, len(slot) - 1)], -1)
            flat = batch["vec"].to_numpy()  # FLOAT[dim] -> (rows, dim) float32
            if vecs is None:
                vecs = np.empty((len(erow), flat.shape[1]), dtype=np.float32)
            keep = rows >= 0
            vecs[rows[keep]] = flat[keep]
        return {"vecs": vecs, **_chunk_layout(lay.drop("erow"))}

    def query_vectors(
        self, texts: Sequence[str], *, model: str | None = None, embedding: dict[str, Any] | None = None,
        progress: bool = False, cache: bool = True,
    ) -> np.ndarray:
        """Query vectors from the store's model (or `model`); `embedding`: `make_embedder` options. `cache=False`
        reads vectors the cache has and computes the others without storing them (a service's one-shot searches:
        each distinct question added a vector to the file, for good)."""
        opts = dict(embedding or {})
        emb = self.embedder(opts.pop("model", None) or model, **opts)
        self._check_model(emb, dim_too=False)
        qv = self.embed_cached(list(texts), emb, progress=progress, store=cache)
        if len(texts):
            self._check_dim(emb, qv.shape[1])
        return qv

    def dense_search(
        self,
        queries: pl.DataFrame,
        *,
        top_k: int = 100,
        level: str = "document",
        scope_filter: bool = True,
        filters: dict[str, Any] | None = None,
        vectors: np.ndarray | None = None,
        embedding: dict[str, Any] | None = None,
        block: int = 256,
        progress: bool = False,
        index: str = "exact",
        ef_search: int | None = None,
        cache_queries: bool = True,
    ) -> pl.DataFrame:
        """Cosine top-k for all queries by one matrix product per block of queries (vectors L2-normalised).

        Returns the same rankings as `dense_search_sql` (DuckDB `array_cosine_similarity`), which a test checks.
        `index="hnsw"` asks the store's HNSW index instead (`build_vector_index`; approximate, see
        `_dense_hnsw`); scoped queries and metadata filters always use the exact path.
        """
        if self._dense_cache is None and self._count_embeddings() == 0:
            if self._emptied():
                return pl.DataFrame(schema=CAND_SCHEMA)
            self._no_embeddings()  # before the query vectors: no model loaded, nothing cached in an empty store
        qv = vectors if vectors is not None else self.query_vectors(
            queries["text"].to_list(), embedding=embedding, progress=progress, cache=cache_queries
        )
        if index not in ("exact", "hnsw"):
            raise InputError(f"dense index must be 'exact' or 'hnsw', got {index!r}")
        queries = self._stored_scopes(queries) if scope_filter else queries
        if vectors is not None and len(qv):
            self._check_dim(None, np.asarray(qv).reshape(len(qv), -1).shape[1])
        scoped = scope_filter and "scope" in queries.columns and queries["scope"].is_not_null().any()
        if index == "hnsw" and not scoped and not filters and self._ann() is not None:
            return self._dense_hnsw(queries, qv, top_k=top_k, level=level, ef_search=ef_search)
        m = self._dense_matrix()
        allowed = self._allowed_docs(m, filters)
        return self._block_topk(m, lambda lo, hi: qv[lo:hi] @ m["vecs"].T, queries, scope_filter=scope_filter,
                                allowed=allowed, level=level, top_k=top_k, block=block, exact=np.asarray(qv, dtype=np.float32))

    # ------------------------------------------------------------------ HNSW (usearch)
    # DuckDB's own HNSW (the vss extension, itself built on usearch) answers one query per SQL statement
    # (~3 ms each whatever the corpus size): its lateral join and `vss_join` plan brute-force cross products
    # (DuckDB 1.5.5; see RESULTS.md "Scale"). usearch searches a whole batch of queries on all cores in one call.
    # The index is a file beside the store (`<store>.hnsw`), owned by the store: built by `build_vector_index`,
    # its keys are column positions of the `_dense_matrix` layout of the store generation it was built for,
    # and an ingest that changes that generation rebuilds it (`_refresh_vector_index`). The store records the
    # generation too, but a store file copied, ingested and moved over the original takes its record along and
    # leaves the old `<store>.hnsw`: so `<store>.hnsw.json`, written with the index, says what it was built from.
    @property
    def vector_index_path(self) -> Path:
        return Path(f"{self.path}.hnsw")

    @property
    def _vector_index_stamp_path(self) -> Path:
        return Path(f"{self.path}.hnsw.json")

    def _vector_index_mismatch(self, vi: dict[str, Any]) -> str | None:
        """Why `<store>.hnsw` was not built from this store's state (None: it was): its stamp file's generation
        and vector count against the store's."""
        try:
            built = json.loads(self._vector_index_stamp_path.read_text())
        except (OSError, ValueError):
            return (f"{self._vector_index_stamp_path.name} is missing or unreadable; an index built by an older toolkit "
                    "has none, and the store's next write rebuilds it")
        if not isinstance(built, dict) or built.get("generation") != vi.get("generation"):
            return "it was built for another generation of the store"
        if built.get("count") != self._count_embeddings():
            return f"it holds {built.get('count')} vectors, the store {self._count_embeddings()}"
        return None

    @property
    def vector_index(self) -> dict[str, Any] | None:
        """Settings of the store's HNSW index (None: exact search only)."""
        v = self._meta("vector_index")
        return json.loads(v) if v else None

    def _drop_vss_index(self) -> None:
        """Stores from before usearch kept DuckDB's vss HNSW index in the file: drop it (DuckDB cannot write to
        the table without the extension loaded) and record a usearch index with its settings for the next write
        to build, with a word (user trial W: the first write dropped the index in silence, and the next HNSW
        search failed)."""
        if self.read_only:
            return
        old = json.loads(self._meta("vector_index") or "{}")
        if self.con.execute("SELECT count(*) FROM duckdb_indexes() WHERE index_name = 'embeddings_hnsw'").fetchone()[0]:
            self.con.execute("DROP INDEX IF EXISTS embeddings_hnsw")  # (vss loaded in `__init__`)
        self.con.execute("DELETE FROM meta WHERE key = 'vector_index'")
        self._forget()
        if self._has_table("embeddings") and self._count_embeddings():
            # Recorded as a usearch index of no generation: the next write (`_refresh_vector_index`) builds it with
            # the old settings, once, and searches until then are exact (a build here ran again on that write).
            settings = {k: old[k] for k in ("m", "ef_construction", "ef_search") if isinstance(old.get(k), int)}
            self._set_meta("vector_index", json.dumps({"kind": "hnsw", "engine": "usearch", "metric": "cosine", "m": 16,
                                                       "ef_construction": 128, "ef_search": 512, **settings,
                                                       "generation": None, "count": 0}))
            logging.getLogger("toolkit").warning(
                "note: %s: the HNSW vector index was DuckDB's vss index of an older toolkit; the store's next write "
                "builds it in the current format (%s)", self.path, self.vector_index_path)

    def build_vector_index(self, *, m: int = 16, ef_construction: int = 128, ef_search: int = 512) -> None:
        """(Re)build the HNSW index (usearch, cosine) over the chunk vectors, on all cores, into `<store>.hnsw`
        (`hnsw_index`: the chunks the graph strands are listed beside it and always scored exactly).

        Exact search is the default and stays available; the index pays off past ~100k chunks
        (`benchmarks/scale.py`). The graph holds int8-quantised vectors (2.5x faster to build than float32, a
        quarter of the size); searches fetch 4x top_k candidates and re-rank them on the exact float32 vectors.
        Recall falls as the graph grows, so the default ef_search is 512, the lowest measured value that keeps
        recall@10 >= 0.95 at 1M chunks (RESULTS.md "Scale": 0.996 / 0.980 at 100k / 1M, 1,700 / 1,460 q/s;
        ef_search 128 gives 0.97 / 0.92 at 3x the speed). Recall depends on the data: on a worst case of tight
        isotropic clusters it is 0.77 at 1M (raise ef_search there; `dense_search(ef_search=...)` per call).
        """
        if self.read_only:
            raise StoreError(f"{self.path}: opened read-only; building the vector index writes to the store")
        if not self._has_table("embeddings") or self._count_embeddings() == 0:
            raise StoreError(f"{self.path} has no embeddings to index; ingest with embeddings first")
        for name, v, lo, hi in (("m", m, 2, 128), ("ef_construction", ef_construction, 8, 4096), ("ef_search", ef_search, 1, 10_000)):
            if not isinstance(v, int) or isinstance(v, bool) or not lo <= v <= hi:
                raise InputError(f"vector index {name} must be an integer in [{lo}, {hi}], got {v!r}")
        vecs = self._dense_matrix()["vecs"]
        index, stranded = hnsw_index(vecs, m=m, ef_construction=ef_construction, ef_search=ef_search)
        if len(stranded) > STRANDED_WARN_SHARE * len(vecs):  # user trial BL: 61% stranded, recall 0.72, 5x slower
            logging.getLogger("toolkit").warning(
                "warning: %s: %d of %d vectors (%.0f%%) are not reached by the HNSW graph, so every search also scans "
                "them exactly: on these vectors the index is slower and less accurate than exact search (vectors "
                "spread evenly in all directions, as random ones, are the worst case); keep the default exact search",
                self.path, len(stranded), len(vecs), 100 * len(stranded) / len(vecs))
        tmp = Path(f"{self.vector_index_path}.tmp")
        index.save(str(tmp))
        stamp_tmp = Path(f"{self._vector_index_stamp_path}.tmp")
        stamp_tmp.write_text(json.dumps({"generation": self.generation(), "count": len(vecs),
                                         "stranded": stranded.tolist()}))
        os.replace(tmp, self.vector_index_path)  # a crash mid-save leaves the previous index whole
        os.replace(stamp_tmp, self._vector_index_stamp_path)  # (a crash between: a mismatch, exact search)
        self._ann_cache = None
        self._set_meta("vector_index", json.dumps({
            "kind": "hnsw", "engine": "usearch", "metric": "cosine", "m": m, "ef_construction": ef_construction,
            "ef_search": ef_search, "generation": self.generation(), "count": len(vecs),
        }))

    def _refresh_vector_index(self) -> str | None:
        """After an ingest: rebuild the index with its settings if the chunks changed or `<store>.hnsw` is not
        the one built for this store (moved over from a copy): it would be stale. Says what it did, for the
        ingest's summary ("rebuilt", "removed"; None: nothing)."""
        vi = self.vector_index
        if vi and (vi.get("generation") != self.generation() or self._vector_index_mismatch(vi)):
            if self._count_embeddings() == 0:
                self.con.execute("DELETE FROM meta WHERE key = 'vector_index'")
                self._forget()
                self.vector_index_path.unlink(missing_ok=True)
                self._vector_index_stamp_path.unlink(missing_ok=True)
                return "removed (no vectors left)"
            self.build_vector_index(m=vi["m"], ef_construction=vi["ef_construction"], ef_search=vi.get("ef_search", 512))
            return "rebuilt"
        return None

    def _ann(self) -> Any:
        """The usearch index of this generation, memory-mapped (read once per process; the OS shares pages).
        None, with a warning, when `<store>.hnsw` was built from another state of the store: searching it would
        return wrong documents, so the caller searches exactly."""
        gen = self.generation()  # first: it drops a memo that predates another Store object's build
        vi = self.vector_index
        if not vi:
            raise StoreError(f"{self.path} has no vector index; build one with `hrt ingest SOURCE --store STORE --vector-index hnsw` (exact search needs none)")
        cached = getattr(self, "_ann_cache", None)
        if cached is None or cached[0] != (vi.get("generation"), gen):
            # An index that cannot serve this state of the store is never searched (its keys would name other
            # chunks): exact search answers instead, and says why. An ingest interrupted after its commit but
            # before the rebuild leaves one built for an earlier state; the next ingest rebuilds it.
            why = ("it is to be built by the store's next write (an index of an older toolkit's format)"
                   if vi.get("generation") is None
                   else "it was built for an earlier state of the store (an ingest ended before rebuilding it)"
                   if vi.get("generation") != gen
                   else "the file is missing" if not self.vector_index_path.exists()
                   else self._vector_index_mismatch(vi))
            if vi.get("engine") != "usearch":  # user trial W: a KeyError traceback on every search
                logging.getLogger("toolkit").warning(
                    "warning: %s: its HNSW index is DuckDB's vss index of an older toolkit, which this one no longer "
                    "reads: searching exactly instead; the store's next write (`hrt ingest`, `hrt delete`) rebuilds "
                    "it", self.path)
                index = None
            elif why:
                logging.getLogger("toolkit").warning(
                    "warning: %s does not belong to this store (%s): searching exactly instead; rebuild it with "
                    "`hrt ingest SOURCE --store %s --vector-index hnsw` or `Store.build_vector_index()`",
                    self.vector_index_path, why, self.path)
                index = None
            else:
                index = _usearch().Index.restore(str(self.vector_index_path), view=True)
            stranded = np.asarray(json.loads(self._vector_index_stamp_path.read_text()).get("stranded", []) if index else [], dtype=np.int64)
            self._ann_cache = cached = ((vi.get("generation"), gen), index, stranded)
        return cached[1]

    def _dense_hnsw(self, queries: pl.DataFrame, qv: np.ndarray, *, top_k: int, level: str, ef_search: int | None) -> pl.DataFrame:
        """Approximate top-k through the HNSW index: one batched usearch search over all queries on all cores
        fetches 4x top_k chunks, re-ranked by their exact float32 scores (the same scores as exact search).
        At document level each document keeps its best fetched chunk, so a document with many near chunks can
        leave fewer than top_k documents: approximate by design."""
        index = self._ann()
        if ef_search is not None and (not isinstance(ef_search, int) or isinstance(ef_search, bool) or not 1 <= ef_search <= 10_000):
            raise InputError(f"ef_search must be an integer in [1, 10000], got {ef_search!r}")
        m = self._dense_matrix()
        fetch = min(4 * int(top_k), len(m["chunk_ids"]))
        index.expansion_search = max(ef_search or self.vector_index.get("ef_search", 512), fetch)
        q = np.ascontiguousarray(qv, dtype=np.float32)
        found = index.search(q, fetch, threads=os.cpu_count() or 1)
        keys = np.asarray(found.keys).reshape(len(q), -1)
        # usearch answers a one-row batch with `Matches` (no `counts`; its keys are the found ones only)
        counts = np.asarray(found.counts if hasattr(found, "counts") else [keys.shape[1]]).reshape(len(q))
        row, slot = np.nonzero(np.arange(keys.shape[1])[None, :] < counts[:, None])
        col = keys[row, slot].astype(np.int64)
        stranded = self._ann_cache[2]  # rows the graph does not reach (`hnsw_index`): each query's best of them, exactly
        if len(stranded):
            take = min(fetch, len(stranded))
            sims = q @ m["vecs"][stranded].T
            best = np.argpartition(-sims, take - 1, axis=1)[:, :take] if take < len(stranded) else np.tile(np.arange(take), (len(q), 1))
            n_cols = len(m["chunk_ids"])
            pairs = np.unique(np.r_[row * n_cols + col, np.repeat(np.arange(len(q)), take) * n_cols + stranded[best.ravel()]])
            row, col = pairs // n_cols, pairs % n_cols
        val = exact_products(q, m["vecs"], row, col)  # the same numbers exact search gives
        order = np.lexsort((col, row))  # by query, then layout (= document) order, as `_rank_flat` wants
        ranked = _rank_flat(m, row[order], col[order], val[order], level=level, top_k=top_k)
        return _candidates(m, queries, *([x] for x in ranked))

    @staticmethod
    def _query_scope_codes(m: dict[str, Any], queries: pl.DataFrame, scope_filter: bool) -> np.ndarray:
        """Each query's scope as the layout's integer code (-1: no filter; -3: a scope no document has), so
        that masking is one comparison per block of queries."""
        scopes = queries["scope"].to_list() if scope_filter and "scope" in queries.columns else [None] * len(queries)
        names = m["scope_names"]
        return np.array([-1 if x is None else names.get(x, -3) for x in scopes], dtype=np.int64)

    @staticmethod
    def _exact_block(m: dict[str, Any], qv: np.ndarray, vals: np.ndarray, kth: np.ndarray, lo: int, level: str,
                     top_k: int, out: tuple[list, list, list, list]) -> None:
        """The dense block's results from exact scores: every key at or above its query's k-th value less
        `PICK_SLACK` (masked keys are -inf), all chunks of those documents scored by `exact_products`, then each
        document's max at its first chunk reaching it and the order score desc, document order (`_rank_flat`)."""
        rows, keys = np.nonzero(np.isfinite(vals) & (vals >= (kth - PICK_SLACK)[:, None]))
        if level == "document":  # keys are documents: each of their chunks
            starts, ends = m["starts"], m["doc_ends"]
            lens = ends[keys] - starts[keys]
            seg = np.r_[0, np.cumsum(lens)[:-1]] if len(lens) else np.zeros(0, np.int64)
            cols = np.repeat(starts[keys], lens) + np.arange(int(lens.sum())) - np.repeat(seg, lens)
            rows = np.repeat(rows, lens)
        else:
            cols = keys
        val = exact_products(qv, m["vecs"], lo + rows, cols)
        order = np.lexsort((cols, rows))  # by query, then layout (= document) order, as `_rank_flat` wants
        if not len(order):
            return
        r, c, rank, score = _rank_flat(m, rows[order], cols[order], val[order], level=level, top_k=top_k, few=True)
        for dst, part in zip(out, (lo + r, c, rank, score), strict=True):
            dst.append(part)

    @staticmethod
    def _best_chunk(m: dict[str, Any], sims: np.ndarray, rows: np.ndarray, docs: np.ndarray) -> np.ndarray:
        """Column of the best chunk (first reaching the document's max score) for each picked (row, doc).

        Only for the picked top-k: most documents have one chunk, which is then its own best; the others
        are scanned over their few chunks (cheaper than an argmax over every document of the block)."""
        starts, ends = m["starts"], m["doc_ends"]
        out = starts[docs].copy()
        multi = np.flatnonzero(ends[docs] - starts[docs] > 1)
        if len(multi):  # every chunk of those documents as one flat array, then a segmented argmax
            lens = (ends - starts)[docs[multi]]
            seg = np.r_[0, np.cumsum(lens)[:-1]]
            cols = np.repeat(starts[docs[multi]], lens) + np.arange(lens.sum()) - np.repeat(seg, lens)
            vals = sims[np.repeat(rows[multi], lens), cols]
            top = np.maximum.reduceat(vals, seg)
            first = np.where(vals >= np.repeat(top, lens), np.arange(len(vals)), len(vals))
            out[multi] = cols[np.minimum.reduceat(first, seg)]
        return out

    def _block_topk(
        self,
        m: dict[str, Any],
        score_fn: Any,
        queries: pl.DataFrame,
        *,
        scope_filter: bool,
        allowed: np.ndarray | None,
        level: str,
        top_k: int,
        block: int,
        matched_only: bool = False,
        exact: np.ndarray | None = None,
    ) -> pl.DataFrame:
        """Top-k per query from chunk score blocks (`score_fn(lo, hi)` -> queries x chunks), shared by the
        dense and the lexical paths: scope and filter masks, document-level max with its best chunk, and
        the order score desc then document order. `matched_only` drops zero scores (BM25 non-matches);
        ties are then judged on scores rounded to 1e-9 so float summation order cannot flip them. `exact` (the
        query vectors, dense): the block's products only pick the candidates (and any within `PICK_SLACK` of the
        k-th), whose every chunk is then scored by `exact_products`, so a query's results do not depend on the
        queries beside it."""
        n_q = len(queries)
        block = max(1, min(block, BLOCK_CELLS // max(len(m["chunk_ids"]), 1)))
        doc_code = m["doc_scope_code"]
        q_code = self._query_scope_codes(m, queries, scope_filter)
        out_q, out_k, out_r, out_s = [], [], [], []
        for lo in range(0, n_q, block):
            sims = score_fn(lo, min(lo + block, n_q))  # (nq, n_chunks)
            if level == "document" and len(m["starts"]) == sims.shape[1]:  # one chunk per document
                keys, chunk_sims, key_code, key_ok = sims, None, doc_code, allowed
            elif level == "document":
                keys = np.maximum.reduceat(sims, m["starts"], axis=1)
                chunk_sims = sims  # the best chunk is found below, for the picked documents only
                key_code, key_ok = doc_code, allowed
            else:
                keys, chunk_sims = sims, None
                key_code = doc_code[m["doc_of_chunk"]]
                key_ok = allowed[m["doc_of_chunk"]] if allowed is not None else None
            qc = q_code[lo : lo + block, None]
            if (qc == -1).all() and key_ok is None and not matched_only:
                vals = keys  # nothing to mask (dense, no scope, no filter): rank the raw scores
            else:
                mask = (qc == -1) | (key_code[None, :] == qc)
                if key_ok is not None:
                    mask &= key_ok[None, :]
                if matched_only:
                    mask &= keys > 0
                # Dense scores stay float32 (exact in float64 later); BM25 sums are rounded to 1e-9 in float64.
                vals = np.where(mask, keys.astype(np.float64) if matched_only else keys, -np.inf)
            if matched_only:
                vals = np.round(vals, 9)
            k = min(top_k, vals.shape[1])
            part = np.argpartition(-vals, k - 1, axis=1)[:, :k] if k < vals.shape[1] else np.tile(np.arange(k), (len(vals), 1))
            pv = np.take_along_axis(vals, part, 1)
            if exact is not None:
                self._exact_block(m, exact, vals, pv.min(axis=1), lo, level, top_k, (out_q, out_k, out_r, out_s))
                continue
            # argpartition picks arbitrarily among values tied with the k-th: redo those (rare) rows exactly,
            # so the top-k is "score desc, then document order" like the SQL paths.
            kth = pv.min(axis=1)
            for row in np.flatnonzero(np.isfinite(kth) & ((vals >= kth[:, None]).sum(axis=1) > k)):
                cand = np.flatnonzero(vals[row] >= kth[row])
                part[row] = cand[np.lexsort((cand, -vals[row, cand]))][:k]
            pv = np.take_along_axis(vals, part, 1)
            order = np.lexsort((part, -pv), axis=-1)
            part, pv = np.take_along_axis(part, order, 1), np.take_along_axis(pv, order, 1)
            rows, cols = np.nonzero(np.isfinite(pv))
            picked = part[rows, cols]
            out_q.append(lo + rows)
            out_k.append(self._best_chunk(m, chunk_sims, rows, picked) if chunk_sims is not None else picked)
            out_r.append(cols + 1)
            out_s.append(pv[rows, cols].astype(np.float64))
        return _candidates(m, queries, out_q, out_k, out_r, out_s)

    def dense_search_sql(
        self, text: str, *, scope: str | None = None, top_k: int = 10, level: str = "document", vector: np.ndarray | None = None
    ) -> pl.DataFrame:
        """One query through DuckDB's `array_cosine_similarity` (the reference path; also what `hrt search` uses)."""
        dim = self.embedding_dim
        if dim is None:
            raise StoreError(f"{self.path} has no embeddings")
        v = vector if vector is not None else self.query_vectors([text])[0]
        group = "c.doc_id" if level == "document" else "c.chunk_id"
        return self.con.frame(
            f"""WITH s AS (SELECT c.doc_id, c.chunk_id, array_cosine_similarity(e.vec, ?::FLOAT[{dim}]) AS score
                FROM embeddings e JOIN chunks c USING (chunk_id) JOIN documents d USING (doc_id)
                WHERE ? IS NULL OR d.scope = ?),
            best AS (SELECT {group} AS key, any_value(doc_id) AS doc_id, arg_max(chunk_id, score) AS chunk_id,
                     max(score) AS score FROM s c GROUP BY {group})
            SELECT doc_id, chunk_id, row_number() OVER (ORDER BY score DESC, key) AS rank, score FROM best
            ORDER BY rank LIMIT ?""",
            [v.tolist(), scope, scope, top_k],
        )

