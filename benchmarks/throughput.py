"""Ingest and query-throughput benchmark of the store against plain peers, with a quality sanity check.

Per shared collection, in one run:
1. ingest: a first and a second (unchanged) ingest, lexical-only and with embeddings; target second <= 5% of first;
2. lexical: our batched `Store.lexical_search` vs DuckDB's per-query `match_bm25` (sampled, extrapolated)
   vs bm25s (index built once, all queries at once); target bm25s q/s <= 3x ours;
3. dense: our batched `Store.dense_search(vectors=...)` vs a plain numpy brute force on the same vectors vs
   the per-query `dense_search_sql` (sampled); target numpy q/s <= 2x ours; top-10 agreement with numpy;
4. quality: nDCG@10 on the test split (ir_measures) beside the reference numbers of the shared README.

It also records where the time goes (DuckDB operator profile of the lexical SQL, cProfile of the dense path),
so a missed target comes with the evidence needed to fix it. Run `python benchmarks/throughput.py --help`.
"""

from __future__ import annotations

import argparse
import contextlib
import cProfile
import io
import json
import os
import platform
import pstats
import re
import shutil
import statistics
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from toolkit.analysis import lexical_text
from toolkit.errors import InputError
from toolkit.loaders import Dataset, load_corpus
from toolkit.store import Store

REPO = Path(__file__).resolve().parents[1]
ALL_DATASETS = "locomo,cacm,vaswani,msmarco-dl19-5k"
QUICK_DATASET = "locomo"
TOP_K = 100
TARGET_INGEST = 0.05  # second ingest / first ingest
TARGET_LEX = 3.0  # bm25s q/s / ours q/s
TARGET_DENSE = 2.0  # numpy q/s / ours q/s


def log(msg: str) -> None:
    """Progress goes to stderr so stdout stays the markdown report."""
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------------------------------------- timing
@dataclass
class Timing:
    """Wall-clock seconds of `repeats` timed runs after one untimed warm-up run."""

    times: list[float]
    warmup: float
    n_queries: int

    @property
    def median(self) -> float:
        return statistics.median(self.times)

    @property
    def qps(self) -> float:
        return self.n_queries / self.median if self.median > 0 else float("inf")

    def as_dict(self) -> dict[str, Any]:
        return {
            "times": self.times,
            "warmup": self.warmup,
            "n_queries": self.n_queries,
            "median": self.median,
            "qps": self.qps,
        }


def timed(
    fn: Callable[[], Any], repeats: int, n_queries: int, *, warmup: Callable[[], Any] | None = None
) -> tuple[Timing, Any]:
    """Run `warmup` (default `fn`) once untimed (JIT compiles, caches, lazy loads), then `fn` `repeats` times."""
    t0 = time.perf_counter()
    (warmup or fn)()
    w = time.perf_counter() - t0
    times, out = [], None
    for _ in range(repeats):
        t0 = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t0)
    return Timing(times, w, n_queries), out


def clock(fn: Callable[[], Any]) -> tuple[float, Any]:
    t0 = time.perf_counter()
    out = fn()
    return time.perf_counter() - t0, out


def sample_rows(df: pl.DataFrame, n: int) -> pl.DataFrame:
    """An evenly spaced, deterministic sample (covers every scope of LoCoMo, unlike the first n rows)."""
    if len(df) <= n:
        return df
    return df[np.linspace(0, len(df) - 1, n).round().astype(int).tolist()]


def loadavg() -> str:
    with contextlib.suppress(OSError):
        return " ".join(f"{x:.2f}" for x in os.getloadavg())
    return "n/a"


# ---------------------------------------------------------------------------------------------- peers
def doc_texts(docs: list[dict[str, Any]]) -> list[str]:
    """title + newline + text: what the reference numbers index (and what our chunk bodies start with)."""
    return [f"{d['title']}\n{d['text']}" if d["title"] else d["text"] for d in docs]


def bm25s_stemmer(kind: str) -> tuple[Any, str]:
    """The stemmer for bm25s: `auto` = PyStemmer if installed, else none; `duckdb` = the Snowball porter stemmer
    our index uses (DuckDB's `stem`), applied by bm25s to its vocabulary, for a like-for-like quality check."""
    if kind == "duckdb":
        import duckdb

        from toolkit.store import fts_extension_path

        con = duckdb.connect()
        con.execute(f"LOAD '{fts_extension_path()}'")

        def stem(words: list[str]) -> list[str]:  # bm25s calls this once per tokenize() with the unique words
            return con.execute(
                "SELECT list_transform(?::VARCHAR[], w -> stem(w, 'porter'))", [words]
            ).fetchone()[0]

        return stem, "DuckDB porter (the stemmer of our index)"
    if kind == "auto":
        try:
            import Stemmer  # PyStemmer, the stemmer bm25s recommends
        except ImportError:
            return None, "none (PyStemmer not installed)"
        return Stemmer.Stemmer("english"), "PyStemmer english (Snowball)"
    return None, "none"


@dataclass
class Bm25sIndex:
    """bm25s set up like the reference: lowercase, English stopwords, k1=1.2, b=0.75, Lucene idf.

    Scope (LoCoMo): `split=True` builds one index per query scope, so a scoped query only ever sees its scope's
    documents, exactly as our SQL filter does (plus one index over everything for unscoped queries);
    `split=False` keeps one index and passes bm25s's `weight_mask` per scope (same results, more work).
    """

    backend: str
    stemmer: Any
    # scope -> (retriever, doc ids of its rows, weight mask or None)
    by_scope: dict[str | None, tuple[Any, np.ndarray, np.ndarray | None]] = field(default_factory=dict)

    @classmethod
    def build(
        cls,
        docs: list[dict[str, Any]],
        query_scopes: set[str | None],
        backend: str,
        stemmer: Any,
        split: bool = True,
    ) -> Bm25sIndex:
        import bm25s

        def index(texts: list[str]) -> Any:
            tok = bm25s.tokenize(texts, lower=True, stopwords="en", stemmer=stemmer, show_progress=False)
            r = bm25s.BM25(k1=1.2, b=0.75, method="lucene", backend=backend)
            r.index(tok, show_progress=False)
            return r

        idx = cls(backend, stemmer)
        texts, ids = doc_texts(docs), np.array([d["doc_id"] for d in docs], dtype=object)
        scopes = np.array([d["scope"] for d in docs], dtype=object)
        whole = None if split and None not in query_scopes else index(texts)
        for sc in query_scopes:
            keep = np.ones(len(docs), bool) if sc is None else scopes == sc
            if not keep.any():
                continue
            if sc is None:
                idx.by_scope[sc] = (whole, ids, None)
            elif split:
                idx.by_scope[sc] = (
                    index([t for t, k in zip(texts, keep, strict=True) if k]),
                    ids[keep],
                    None,
                )
            else:
                idx.by_scope[sc] = (whole, ids, keep.astype(np.float32))
        return idx

    def retrieve(
        self, texts: list[str], scopes: list[str | None], k: int
    ) -> list[tuple[str | None, np.ndarray, np.ndarray, np.ndarray]]:
        """(scope, query positions, doc index matrix, score matrix) per scope; tokenisation is part of the timed work."""
        import bm25s

        toks = bm25s.tokenize(
            texts, lower=True, stopwords="en", stemmer=self.stemmer, return_ids=False, show_progress=False
        )
        out = []
        for sc, (r, ids, mask) in self.by_scope.items():
            pos = np.array([i for i, s in enumerate(scopes) if s == sc], dtype=np.int64)
            if len(pos) == 0:
                continue
            kk = min(k, len(ids) if mask is None else int(mask.sum()))
            docs, scores = r.retrieve(
                [toks[i] for i in pos], k=kk, show_progress=False, n_threads=0, weight_mask=mask
            )
            out.append((sc, pos, docs, scores))
        return out

    def to_frame(
        self, res: list[tuple[str | None, np.ndarray, np.ndarray, np.ndarray]], qids: list[str]
    ) -> pl.DataFrame:
        """A run frame; zero scores (no query term in the document, or masked out) are dropped, as our SQL
        never returns such documents."""
        parts = []
        for sc, pos, docs, scores in res:
            ids = self.by_scope[sc][1]
            n, k = docs.shape
            parts.append(
                pl.DataFrame(
                    {
                        "qid": np.repeat(np.array(qids, dtype=object)[pos], k).tolist(),
                        "doc_id": ids[docs.ravel()].tolist(),
                        "rank": np.tile(np.arange(1, k + 1), n),
                        "score": scores.ravel().astype(np.float64),
                    }
                )
            )
        return pl.concat(parts).filter(pl.col("score") > 0) if parts else pl.DataFrame()


@dataclass
class DenseMatrix:
    """The store's chunk vectors, re-normalised, in document order: the numpy peer's whole working set."""

    vecs: np.ndarray  # (n_chunks, d)
    starts: np.ndarray  # first chunk of each document
    doc_ids: np.ndarray
    doc_scope_code: np.ndarray  # int code of each document's scope, -1 = none
    scope_codes: dict[str, int]

    @classmethod
    def from_store(cls, store: Store) -> DenseMatrix:
        df = store.con.execute(
            "SELECT c.doc_id, d.scope, e.vec FROM chunks c JOIN embeddings e USING (chunk_id) "
            "JOIN documents d USING (doc_id) ORDER BY c.doc_id, c.ord"
        ).pl()
        v = np.asarray(df["vec"].to_list(), dtype=np.float32)
        v /= np.linalg.norm(v, axis=1, keepdims=True)
        d = df["doc_id"].to_numpy()
        starts = np.flatnonzero(np.r_[True, d[1:] != d[:-1]])
        scope = df["scope"].to_list()
        codes = {s: i for i, s in enumerate(sorted({s for s in scope if s is not None}))}
        return cls(v, starts, d[starts], np.array([codes.get(scope[i], -1) for i in starts]), codes)

    @property
    def multi_chunk(self) -> bool:
        return len(self.starts) != len(self.vecs)


def numpy_dense(
    m: DenseMatrix, qv: np.ndarray, q_scope: np.ndarray, k: int, block: int = 1024
) -> tuple[np.ndarray, np.ndarray]:
    """Plain brute force: q @ V.T, max over a document's chunks, scope mask, argpartition top k, sort.

    Returns (doc index, score) matrices; -inf marks padding where a scope holds fewer than k documents.
    q_scope: the query's scope code, -1 = unscoped, -2 = a scope no document has (nothing may be returned).
    """
    nq, nd = len(qv), len(m.starts)
    kk = min(k, nd)
    idx_out = np.empty((nq, kk), dtype=np.int64)
    sc_out = np.empty((nq, kk), dtype=np.float32)
    for lo in range(0, nq, block):  # blocks bound memory (block x n_chunks floats), not a per-query loop
        s = qv[lo : lo + block] @ m.vecs.T
        if m.multi_chunk:
            s = np.maximum.reduceat(s, m.starts, axis=1)
        qs = q_scope[lo : lo + block]
        if (qs != -1).any():
            s = np.where((qs[:, None] == -1) | (m.doc_scope_code[None, :] == qs[:, None]), s, -np.inf)
        part = np.argpartition(-s, kk - 1, axis=1)[:, :kk] if kk < nd else np.tile(np.arange(nd), (len(s), 1))
        ps = np.take_along_axis(s, part, axis=1)
        order = np.lexsort((part, -ps), axis=1)  # score desc, then document order: the same tie-break as ours
        idx_out[lo : lo + block] = np.take_along_axis(part, order, axis=1)
        sc_out[lo : lo + block] = np.take_along_axis(ps, order, axis=1)
    return idx_out, sc_out


def numpy_to_frame(m: DenseMatrix, idx: np.ndarray, sc: np.ndarray, qids: list[str]) -> pl.DataFrame:
    n, k = idx.shape
    df = pl.DataFrame(
        {
            "qid": np.repeat(np.array(qids, dtype=object), k).tolist(),
            "doc_id": m.doc_ids[idx.ravel()].tolist(),
            "rank": np.tile(np.arange(1, k + 1), n),
            "score": sc.ravel().astype(np.float64),
        }
    )
    return df.filter(pl.col("score").is_finite())


# ---------------------------------------------------------------------------------------------- measures
def read_test_qrels(ds: Dataset) -> pl.DataFrame | None:
    f = ds.root / "qrels" / "test.tsv"
    if not f.exists():
        return None
    return pl.read_csv(
        f, separator="\t", schema_overrides={"query-id": pl.Utf8, "corpus-id": pl.Utf8, "score": pl.Int64}
    )


def ndcg10(run: pl.DataFrame, qrels: pl.DataFrame) -> float:
    """Mean nDCG@10 over every judged test query (a query with no results counts 0, which pytrec_eval would
    silently skip). The run is scored by its rank, so ties are evaluated in the order the retriever gave."""
    import ir_measures
    from ir_measures import nDCG

    judged = qrels["query-id"].unique().to_list()
    q = [ir_measures.Qrel(a, b, c) for a, b, c in qrels.iter_rows()]
    r = run.filter(pl.col("qid").is_in(judged))
    docs = [
        ir_measures.ScoredDoc(a, b, float(TOP_K + 1 - c))
        for a, b, c in r.select("qid", "doc_id", "rank").iter_rows()
    ]
    per = {m.query_id: m.value for m in ir_measures.iter_calc([nDCG @ 10], q, docs)}
    return float(np.mean([per.get(qid, 0.0) for qid in judged]))


def reference_ndcg(shared: Path) -> dict[str, dict[str, float]]:
    """The reference table of the shared README: collection -> {bm25s, duckdb, dense, rrf}."""
    f = shared / "README.md"
    if not f.exists():
        return {}
    out = {}
    for line in f.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 5 and all(re.fullmatch(r"\d\.\d+", c) for c in cells[1:]):
            out[cells[0].split()[0]] = dict(
                zip(("bm25s", "duckdb", "dense", "rrf"), map(float, cells[1:]), strict=True)
            )
    return out


def top10_agreement(a: pl.DataFrame, b: pl.DataFrame, qids: list[str]) -> tuple[float, float]:
    """(share of queries whose top-10 doc lists are identical in order, mean overlap of the top-10 sets)."""

    def lists(df: pl.DataFrame) -> dict[str, list[str]]:
        t = (
            df.filter(pl.col("rank") <= 10)
            .sort("qid", "rank")
            .group_by("qid", maintain_order=True)
            .agg("doc_id")
        )
        return dict(zip(t["qid"].to_list(), t["doc_id"].to_list(), strict=True))

    la, lb = lists(a), lists(b)
    same = [la.get(q, []) == lb.get(q, []) for q in qids]
    overlap = [
        len(set(la.get(q, [])) & set(lb.get(q, []))) / max(1, len(la.get(q, []) or lb.get(q, [])))
        for q in qids
    ]
    return float(np.mean(same)), float(np.mean(overlap))


# ---------------------------------------------------------------------------------------------- profiles
def duckdb_profile(store: Store, fn: Callable[[], Any], path: Path, top: int = 6) -> dict[str, Any]:
    """One run under DuckDB's JSON profiler: total latency and the operators that took the most time."""
    store.con.execute("SET enable_profiling = 'json'")
    store.con.execute(f"SET profiling_output = '{path}'")
    try:
        fn()
    finally:
        store.con.execute("SET enable_profiling = 'no_output'")
        store.con.execute("RESET profiling_output")
    prof = json.loads(path.read_text())
    ops: list[dict[str, Any]] = []

    def walk(n: dict[str, Any]) -> None:
        if n.get("operator_type"):
            info = n.get("extra_info") or {}
            what = (
                info.get("Conditions")
                or info.get("Groups")
                or info.get("Table")
                or info.get("CTE Name")
                or info.get("Expression")
                or ""
            )
            ops.append(
                {
                    "op": n["operator_type"],
                    "s": float(n.get("operator_timing", 0.0)),
                    "rows": int(n.get("operator_cardinality", 0)),
                    "what": str(what)[:60],
                }
            )
        for c in n.get("children", []):
            walk(c)

    walk(prof)
    widest = (
        max(ops, key=lambda o: (o["rows"], o["op"] == "CROSS_PRODUCT")) if ops else None
    )  # a blown-up intermediate shows up here
    ops.sort(key=lambda o: -o["s"])
    return {
        "latency": float(prof.get("latency", 0.0)),
        "cpu_time": float(prof.get("cpu_time", 0.0)),
        "top": ops[:top],
        "widest": widest,
    }


def py_profile(fn: Callable[[], Any], top: int = 6) -> list[dict[str, Any]]:
    """cProfile of one run, functions by own time (`dense_search`'s own time includes its matrix products)."""
    pr = cProfile.Profile()
    pr.enable()
    fn()
    pr.disable()
    st = pstats.Stats(pr, stream=io.StringIO())
    rows = [
        {"fn": f"{Path(f).name}:{ln}({name})" if f != "~" else name, "ncalls": nc, "tottime": tt}
        for (f, ln, name), (_, nc, tt, _ct, _) in st.stats.items()  # type: ignore[attr-defined]
    ]
    rows.sort(key=lambda r: -r["tottime"])
    return rows[:top]


# ---------------------------------------------------------------------------------------------- one collection
def fresh_store(path: Path) -> Store:
    for p in (path, path.with_name(path.name + ".wal")):
        p.unlink(missing_ok=True)
    return Store(path)


def bench_ingest(ds: Dataset, path: Path, embed: bool, repeats: int) -> tuple[Store, dict[str, Any]]:
    """First ingest into an empty store, then a second ingest of the unchanged corpus; corpus loading excluded.

    Lexical-only first ingests take a second or two, so they are repeated on fresh stores like everything else;
    a first ingest with embeddings takes minutes and runs once. The (idempotent) second ingest is repeated.
    """
    firsts: list[float] = []
    store = None
    for _ in range(1 if embed else repeats):
        if store is not None:
            store.close()
        store = fresh_store(path)
        docs = load_corpus(ds.root)
        t, r1 = clock(lambda s=store, d=docs: s.ingest(d, embed=embed))
        firsts.append(t)
    assert store is not None
    seconds: list[float] = []
    for _ in range(repeats):
        docs = load_corpus(ds.root)  # ingest writes content hashes into the dicts: give it a pristine corpus
        t, r2 = clock(lambda d=docs: store.ingest(d, embed=embed))
        seconds.append(t)
    docs = load_corpus(ds.root)
    prof = py_profile(lambda: store.ingest(docs, embed=embed), top=4)
    g = {
        "first": statistics.median(firsts),
        "firsts": firsts,
        "second": statistics.median(seconds),
        "seconds": seconds,
        "first_report": r1.summary(),
        "second_report": r2.summary(),
        "second_profile": prof,
    }
    g["ratio"] = g["second"] / g["first"]
    log(
        f"  ingest embed={embed}: first {g['first']:.2f}s ({r1.summary()}); second {g['second']:.3f}s ({r2.summary()})"
    )
    return store, g


def bench_lexical(
    store: Store,
    docs: list[dict[str, Any]],
    queries: pl.DataFrame,
    samp: pl.DataFrame,
    args: argparse.Namespace,
) -> tuple[dict[str, Any], pl.DataFrame, pl.DataFrame]:
    """Our batched SQL, DuckDB's per-query `match_bm25` (sampled) and bm25s: timings, plus our and bm25s's runs."""
    qids, texts, scopes = queries["qid"].to_list(), queries["text"].to_list(), queries["scope"].to_list()
    nq = len(queries)
    lx: dict[str, Any] = {}
    t, ours = timed(lambda: store.lexical_search(queries, top_k=TOP_K, level="document"), args.repeats, nq)
    lx["ours"] = t.as_dict()
    lx["ours_tokenise_py"] = clock(lambda: [lexical_text(x) for x in texts])[0]
    lx["ours_profile"] = duckdb_profile(
        store,
        lambda: store.lexical_search(queries, top_k=TOP_K, level="document"),
        args.workdir / "lexical-profile.json",
    )
    sample_texts, warm = samp["text"].to_list(), samp["text"].head(5).to_list()
    t, _ = timed(
        lambda: [store.match_bm25(x, top_k=TOP_K) for x in sample_texts],
        args.repeats,
        len(samp),
        warmup=lambda: [store.match_bm25(x, top_k=TOP_K) for x in warm],
    )
    lx["match_bm25"] = t.as_dict()
    stemmer, lx["bm25s_stemmer"] = bm25s_stemmer(args.bm25s_stemmer)
    variants = [(f"bm25s {b} backend", b, True) for b in args.bm25s_backends]
    if any(s is not None for s in scopes):
        variants.append(
            (
                f"bm25s {args.bm25s_backends[0]} backend, one index + weight_mask",
                args.bm25s_backends[0],
                False,
            )
        )
    lx["bm25s"] = []
    run = pl.DataFrame()
    for i, (label, backend, split) in enumerate(variants):
        t_idx, idx = clock(
            lambda b=backend, sp=split: Bm25sIndex.build(docs, set(scopes), b, stemmer, split=sp)
        )
        t, out = timed(lambda ix=idx: ix.retrieve(texts, scopes, TOP_K), args.repeats, nq)
        lx["bm25s"].append(
            t.as_dict()
            | {"label": label, "index_s": t_idx, "n_indexes": len({id(v[0]) for v in idx.by_scope.values()})}
        )
        if i == 0:
            run = idx.to_frame(out, qids)
    lx["ratio"] = lx["bm25s"][0]["qps"] / lx["ours"]["qps"]
    return lx, ours, run


def bench_dense(
    store: Store, ds: Dataset, queries: pl.DataFrame, samp: pl.DataFrame, args: argparse.Namespace
) -> tuple[dict[str, Any], pl.DataFrame, pl.DataFrame]:
    """Our batched numpy path, a plain numpy brute force on the same vectors, the per-query SQL path (sampled)."""
    qids, texts, scopes = queries["qid"].to_list(), queries["text"].to_list(), queries["scope"].to_list()
    nq = len(queries)
    dn: dict[str, Any] = {}
    if store.stats()["embeddings"] == 0:  # --no-embed-ingest: the vectors are needed now (untimed as ingest)
        dn["backfill_s"] = clock(lambda: store.ingest(load_corpus(ds.root), embed=True))[0]
    dn["query_embed_s"], qv = clock(lambda: store.query_vectors(texts))
    # The warm-up call also reads the vectors out of DuckDB (cached per store generation).
    t, ours = timed(lambda: store.dense_search(queries, top_k=TOP_K, vectors=qv), args.repeats, nq)
    dn["ours"] = t.as_dict()
    dn["ours_profile"] = py_profile(lambda: store.dense_search(queries, top_k=TOP_K, vectors=qv))
    t_mat, m = clock(lambda: DenseMatrix.from_store(store))
    q = qv / np.linalg.norm(qv, axis=1, keepdims=True)
    q_scope = np.array([-1 if s is None else m.scope_codes.get(s, -2) for s in scopes])
    t, (ni, ns) = timed(lambda: numpy_dense(m, q, q_scope, TOP_K), args.repeats, nq)
    t_frame, np_run = clock(lambda: numpy_to_frame(m, ni, ns, qids))
    dn["numpy"] = t.as_dict() | {
        "matrix_load_s": t_mat,
        "to_frame_s": t_frame,
        "multi_chunk_docs": int(len(m.vecs) - len(m.starts)),
    }
    pos_of = {x: i for i, x in enumerate(qids)}
    s_pos = [pos_of[x] for x in samp["qid"]]
    sql_runs: list[pl.DataFrame] = []

    def run_sql(pos: list[int], keep: bool = False) -> None:
        for p in pos:
            df = store.dense_search_sql(texts[p], scope=scopes[p], top_k=TOP_K, vector=qv[p])
            if keep:
                sql_runs.append(df.select("doc_id", "rank").with_columns(qid=pl.lit(qids[p])))

    t, _ = timed(lambda: run_sql(s_pos), args.repeats, len(samp), warmup=lambda: run_sql(s_pos[:5]))
    dn["sql"] = t.as_dict()
    run_sql(s_pos, keep=True)
    dn["ratio"] = dn["numpy"]["qps"] / dn["ours"]["qps"]
    dn["agree_numpy"] = top10_agreement(ours, np_run, qids)
    dn["agree_sql_sample"] = top10_agreement(
        ours.filter(pl.col("qid").is_in(samp["qid"].to_list())), pl.concat(sql_runs), samp["qid"].to_list()
    )
    return dn, ours, np_run


def bench_collection(
    name: str, args: argparse.Namespace, refs: dict[str, dict[str, float]]
) -> dict[str, Any]:
    root = args.shared / name
    if not (root / "corpus.jsonl").exists():
        raise InputError(
            f"{root}: no such shared collection (expected {root / 'corpus.jsonl'}); see --shared"
        )
    ds = Dataset.open(root)
    res: dict[str, Any] = {"name": name}
    log(f"{name}: ingest")
    store, res["ingest_lex"] = bench_ingest(ds, args.workdir / f"{name}-lex.duckdb", False, args.repeats)
    if not args.no_embed_ingest:
        store.close()
        store, res["ingest_emb"] = bench_ingest(ds, args.workdir / f"{name}.duckdb", True, args.repeats)
    docs = load_corpus(ds.root)
    queries = ds.queries()  # every query of queries.jsonl, with its scope
    samp = sample_rows(queries, args.sample)
    res |= {
        "docs": len(docs),
        "chunks": store.stats()["chunks"],
        "n_queries": len(queries),
        "scoped": queries["scope"].null_count() < len(queries),
    }

    log(f"{name}: lexical ({len(queries)} queries, {args.repeats} repeats)")
    res["lexical"], ours_lex, bm25s_run = bench_lexical(store, docs, queries, samp, args)
    if not args.skip_dense:
        log(f"{name}: dense")
        res["dense"], ours_dense, np_run = bench_dense(store, ds, queries, samp, args)
    qrels = read_test_qrels(ds)
    if qrels is not None:
        ql = {"n_test": qrels["query-id"].n_unique(), "ref": refs.get(name, {})}
        ql |= {"ours_bm25": ndcg10(ours_lex, qrels), "bm25s": ndcg10(bm25s_run, qrels)}
        if not args.skip_dense:
            ql |= {"ours_dense": ndcg10(ours_dense, qrels), "numpy_dense": ndcg10(np_run, qrels)}
        res["quality"] = ql
    store.close()
    log(f"{name}: done")
    return res


# ---------------------------------------------------------------------------------------------- report
def mark(ok: bool) -> str:
    return "yes" if ok else "**NO**"


def fmt(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.1f}" if x >= 10 else f"{x:.2f}"


def report_collection(r: dict[str, Any], args: argparse.Namespace) -> str:
    """The per-collection tables: timings, ratios against the targets, quality, and where the time goes."""
    lx = r["lexical"]
    out = [
        f"### {r['name']}",
        "",
        f"{r['docs']:,} documents, {r['chunks']:,} chunks, {r['n_queries']:,} queries"
        f"{' (each filtered to its scope)' if r['scoped'] else ''}; top {TOP_K} per query, document level; "
        f"median of {args.repeats} timed run(s) after one untimed warm-up.",
        "",
        "| ingest | first (s) | second, unchanged corpus (s) | second / first | target <= 5% |",
        "|---|---:|---:|---:|---|",
    ]
    for key, label in (("ingest_lex", "lexical only"), ("ingest_emb", "with embeddings (first: 1 run)")):
        if key in r:
            g = r[key]
            out.append(
                f"| {label} | {g['first']:.2f} | {g['second']:.3f} | {g['ratio']:.1%} | {mark(g['ratio'] <= TARGET_INGEST)} |"
            )
    out += [
        "",
        "| lexical retriever | queries timed | median (s) | queries/s |",
        "|---|---:|---:|---:|",
        f"| ours: `lexical_search` (one batched SQL) | {lx['ours']['n_queries']} | {lx['ours']['median']:.3f} | "
        f"{fmt(lx['ours']['qps'])} |",
        f"| DuckDB `match_bm25`, one SQL per query (sample, extrapolated) | {lx['match_bm25']['n_queries']} | "
        f"{lx['match_bm25']['median']:.3f} | {fmt(lx['match_bm25']['qps'])} |",
    ]
    for g in lx["bm25s"]:
        out.append(
            f"| {g['label']}: tokenise + retrieve (index build {g['index_s']:.2f} s, {g['n_indexes']} index(es)) | "
            f"{g['n_queries']} | {g['median']:.3f} | {fmt(g['qps'])} |"
        )
    others = "".join(f"; {g['label']} / ours = {g['qps'] / lx['ours']['qps']:.1f}x" for g in lx["bm25s"][1:])
    out += [
        "",
        f"**{lx['bm25s'][0]['label']} / ours = {lx['ratio']:.1f}x** (target <= {TARGET_LEX:.0f}x: "
        f"{mark(lx['ratio'] <= TARGET_LEX)}){others}. bm25s stemmer: {lx['bm25s_stemmer']}.",
    ]
    if "dense" in r:
        dn = r["dense"]
        out += [
            "",
            "| dense retriever | queries timed | median (s) | queries/s |",
            "|---|---:|---:|---:|",
            f"| ours: `dense_search(vectors=...)` | {dn['ours']['n_queries']} | {dn['ours']['median']:.4f} | "
            f"{fmt(dn['ours']['qps'])} |",
            f"| numpy brute force (`q @ V.T`, doc max, scope mask, argpartition) | {dn['numpy']['n_queries']} | "
            f"{dn['numpy']['median']:.4f} | {fmt(dn['numpy']['qps'])} |",
            f"| (numpy brute force + building the same run frame, {dn['numpy']['to_frame_s'] * 1000:.1f} ms more) | "
            f"{dn['numpy']['n_queries']} | {dn['numpy']['median'] + dn['numpy']['to_frame_s']:.4f} | "
            f"{fmt(dn['numpy']['n_queries'] / (dn['numpy']['median'] + dn['numpy']['to_frame_s']))} |",
            f"| `dense_search_sql`, one SQL per query (sample, extrapolated) | {dn['sql']['n_queries']} | "
            f"{dn['sql']['median']:.3f} | {fmt(dn['sql']['qps'])} |",
            "",
            f"**numpy / ours = {dn['ratio']:.2f}x** (target <= {TARGET_DENSE:.0f}x: {mark(dn['ratio'] <= TARGET_DENSE)}). "
            f"Top-10 identical (same order) to numpy's for {dn['agree_numpy'][0]:.1%} of queries (mean top-10 overlap "
            f"{dn['agree_numpy'][1]:.1%}); to `dense_search_sql` on the sample: {dn['agree_sql_sample'][0]:.1%}. "
            f"Query embedding, excluded from the timings: {dn['query_embed_s']:.1f} s"
            + (
                f"; embedding backfill (untimed ingest): {dn['backfill_s']:.0f} s."
                if "backfill_s" in dn
                else "."
            ),
        ]
    if "quality" in r:
        q, ref = r["quality"], r["quality"]["ref"]

        def rf(k: str) -> str:
            return f"{ref[k]:.3f}" if k in ref else "n/a"

        out += [
            "",
            f"| nDCG@10, test split ({q['n_test']} queries) | measured | reference (shared README) |",
            "|---|---:|---:|",
            f"| ours BM25 (`lexical_search`) | {q['ours_bm25']:.3f} | {rf('duckdb')} (DuckDB FTS) |",
            f"| bm25s (stemmer: {lx['bm25s_stemmer']}) | {q['bm25s']:.3f} | {rf('bm25s')} (bm25s, Snowball) |",
        ]
        if "ours_dense" in q:
            out += [
                f"| ours dense (`dense_search`, MiniLM) | {q['ours_dense']:.3f} | {rf('dense')} (MiniLM) |",
                f"| numpy dense (same vectors) | {q['numpy_dense']:.3f} | {rf('dense')} (MiniLM) |",
            ]
    prof = lx["ours_profile"]
    w = prof["widest"]
    out += [
        "",
        "Where the time goes (one extra profiled run each):",
        "",
        f"- lexical: Python query analysis (`lexical_text`) {lx['ours_tokenise_py'] * 1000:.0f} ms; DuckDB latency "
        f"{prof['latency']:.3f} s (CPU {prof['cpu_time']:.3f} s on {os.cpu_count()} threads). Top operators: "
        + "; ".join(f"{o['op']} {o['s']:.3f} s, {o['rows']:,} rows [{o['what']}]" for o in prof["top"][:4])
        + (f". Widest intermediate: {w['op']} {w['rows']:,} rows [{w['what']}]." if w else "."),
    ]
    for key, label in (("ingest_lex", "lexical-only"), ("ingest_emb", "embedded")):
        if key in r:
            out.append(
                f"- second {label} ingest (cProfile, own time): "
                + "; ".join(
                    f"{p['fn']} {p['tottime'] * 1000:.0f} ms x{p['ncalls']}" for p in r[key]["second_profile"]
                )
            )
    if "dense" in r:
        out.append(
            "- dense (cProfile, own time; `dense_search`'s own time includes its matrix products): "
            + "; ".join(
                f"{p['fn']} {p['tottime'] * 1000:.1f} ms x{p['ncalls']}"
                for p in r["dense"]["ours_profile"][:5]
            )
        )
    return "\n".join(out)


def report_summary(rs: list[dict[str, Any]]) -> str:
    """One row per collection: the three target ratios and the quality check at a glance."""
    out = [
        "| collection | queries | ingest 2nd/1st, lexical / embedded (<= 5%) | lexical q/s: ours / bm25s / match_bm25 "
        "| bm25s / ours (<= 3x) | dense q/s: ours / numpy / SQL | numpy / ours (<= 2x) | top-10 = numpy "
        "| nDCG@10: ours BM25 / bm25s / ours dense (reference) |",
        "|---|---:|---|---|---|---|---|---:|---|",
    ]
    for r in rs:
        lx, dn, q = r["lexical"], r.get("dense"), r.get("quality")
        ratios = [r["ingest_lex"]["ratio"]] + ([r["ingest_emb"]["ratio"]] if "ingest_emb" in r else [])
        ing = " / ".join(f"{x:.1%}" for x in ratios) + (" ok" if max(ratios) <= TARGET_INGEST else " MISSED")
        lex = f"{fmt(lx['ours']['qps'])} / {fmt(lx['bm25s'][0]['qps'])} / {fmt(lx['match_bm25']['qps'])}"
        lex_r = f"{lx['ratio']:.1f}x {'ok' if lx['ratio'] <= TARGET_LEX else 'MISSED'}"
        if dn:
            dense = f"{fmt(dn['ours']['qps'])} / {fmt(dn['numpy']['qps'])} / {fmt(dn['sql']['qps'])}"
            dense += f" | {dn['ratio']:.2f}x {'ok' if dn['ratio'] <= TARGET_DENSE else 'MISSED'} | {dn['agree_numpy'][0]:.1%}"
        else:
            dense = "skipped | | "
        if q:
            ref = q["ref"]

            def pair(v: float, k: str, ref: dict[str, float] = ref) -> str:
                return f"{v:.3f} ({ref[k]:.3f})" if k in ref else f"{v:.3f}"

            qual = f"{pair(q['ours_bm25'], 'duckdb')} / {pair(q['bm25s'], 'bm25s')} / " + (
                pair(q["ours_dense"], "dense") if "ours_dense" in q else "n/a"
            )
        else:
            qual = "no test qrels"
        out.append(f"| {r['name']} | {r['n_queries']:,} | {ing} | {lex} | {lex_r} | {dense} | {qual} |")
    return "\n".join(out)


# ---------------------------------------------------------------------------------------------- main
def parse_args(argv: list[str] | None) -> argparse.Namespace:
    ap = argparse.ArgumentParser(
        description=__doc__.split("\n\n")[0], formatter_class=argparse.ArgumentDefaultsHelpFormatter
    )
    ap.add_argument("--datasets", default=ALL_DATASETS, help="comma-separated collections under --shared")
    ap.add_argument(
        "--shared", type=Path, default=Path("../shared/datasets"), help="folder of the shared collections"
    )
    ap.add_argument(
        "--repeats", type=int, default=5, help="timed runs per measurement (the median is reported)"
    )
    ap.add_argument(
        "--sample", type=int, default=100, help="queries timed on the slow one-SQL-per-query paths"
    )
    ap.add_argument(
        "--workdir",
        type=Path,
        default=None,
        help="folder for the store files (default: a temp dir under /tmp, removed after)",
    )
    ap.add_argument(
        "--no-embed-ingest",
        action="store_true",
        help="time the ingest lexical-only; the dense section then adds the embeddings untimed",
    )
    ap.add_argument("--skip-dense", action="store_true", help="no dense section (and no embedding at all)")
    ap.add_argument(
        "--bm25s-backends",
        default="numpy,numba",
        help="bm25s backends to time; the first is the peer of the target",
    )
    ap.add_argument(
        "--bm25s-stemmer",
        choices=["auto", "none", "duckdb"],
        default="auto",
        help="auto: PyStemmer if installed, else none; duckdb: the porter stemmer of our own index",
    )
    ap.add_argument(
        "--json", type=Path, default=None, help="also write every measurement as JSON to this file"
    )
    ap.add_argument(
        "--quick",
        action="store_true",
        help=f"smoke run in well under a minute: {QUICK_DATASET} only, 1 repeat, sample 20, lexical only (no embedding)",
    )
    a = ap.parse_args(argv)
    if a.quick:
        a.datasets, a.repeats, a.sample, a.no_embed_ingest, a.skip_dense = QUICK_DATASET, 1, 20, True, True
    a.datasets = [d.strip() for d in a.datasets.split(",") if d.strip()]
    a.bm25s_backends = [b.strip() for b in a.bm25s_backends.split(",") if b.strip()]
    if not a.datasets or not a.bm25s_backends:
        ap.error("--datasets and --bm25s-backends need at least one name each")
    if a.repeats < 1 or a.sample < 1:
        ap.error("--repeats and --sample must be >= 1")
    a.shared = a.shared.expanduser().resolve()
    if not a.shared.is_dir():
        ap.error(f"--shared {a.shared}: no such folder (the shared collections live beside the repository)")
    return a


@contextlib.contextmanager
def workdir(path: Path | None) -> Iterator[Path]:
    """The store files' folder: never inside the repository; a temp dir made here is removed afterwards."""
    if path is None:
        tmp = Path(tempfile.mkdtemp(prefix="hrt-bench-", dir="/tmp"))
        try:
            yield tmp
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        return
    p = path.expanduser().resolve()
    if p == REPO or REPO in p.parents:
        raise InputError(f"--workdir {p} is inside the repository {REPO}; benchmarks never write there")
    p.mkdir(parents=True, exist_ok=True)
    yield p


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cmd = " ".join(["python benchmarks/throughput.py", *(sys.argv[1:] if argv is None else argv)])
    refs = reference_ndcg(args.shared)
    started, load0 = datetime.now().astimezone(), loadavg()
    try:
        with workdir(args.workdir) as wd:
            args.workdir = wd
            log(f"workdir {wd}")
            results = [bench_collection(n, args, refs) for n in args.datasets]
    except InputError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    minutes = (datetime.now().astimezone() - started).total_seconds() / 60
    import bm25s
    import duckdb

    print(
        "## Throughput (foundation)\n\n"
        f"Command (from the repository root): `{cmd}`  \n"
        f"Date: {started:%Y-%m-%d %H:%M %Z}; wall time {minutes:.1f} min. Machine: {os.cpu_count()} cores, no GPU "
        f"({platform.platform()}); Python {platform.python_version()}, DuckDB {duckdb.__version__}, "
        f"bm25s {bm25s.__version__}, numpy {np.__version__}, polars {pl.__version__}. "
        f"Load average (1/5/15 min) at start: {load0}; at end: {loadavg()}.\n"
    )
    print(report_summary(results) + "\n")
    for r in results:
        print(report_collection(r, args) + "\n")
    if args.json:
        payload = {"command": cmd, "date": started.isoformat(), "results": results}
        args.json.write_text(json.dumps(payload, indent=1, default=str))
    return 0


if __name__ == "__main__":
    sys.exit(main())
