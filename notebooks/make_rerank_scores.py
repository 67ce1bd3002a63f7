"""Precompute the stand-in reranker scores that tutorial 03 reads through the `file` reranker provider.

Why a stand-in: no trained cross-encoder ships offline, and a tutorial must run the same everywhere. The
"reranker" here is the packaged all-MiniLM-L6-v2 bi-encoder: score = cosine(query embedding, passage
embedding), rounded to 6 decimals. It is a semantic model that cannot see exact tokens, so it behaves
like the rerankers that bury error codes when they replace the retrieval order; it is NOT a cross-encoder
and its scores say nothing about how a real one would do on this data.

Pairs: for every demo query, the passages the pipeline sends to a reranker under the `qmd` preset
(rerank.top_n = 40): the documents in the fused top 40 or in any retrieval list's top 40, each represented
by its chunk with the most query-term hits (`rerank.best_chunk`, as `pipeline.prepare` picks it). The file
reranker keys scores by (query text, passage text), so the file works with any store built from the demo.

    .venv/bin/python notebooks/make_rerank_scores.py      # rewrites notebooks/data/rerank_scores.parquet

Deterministic: the same corpus and model give the same file (scores rounded, rows sorted).
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np
import polars as pl

from toolkit import rerank
from toolkit.config import load_config
from toolkit.loaders import Dataset, load_corpus
from toolkit.pipeline import prepare, rerank_pool
from toolkit.store import Store

ROOT = Path(__file__).resolve().parents[1]
DEPTH = 40  # = rerank.top_n of the qmd preset and of tutorial 03


def pool(store: Store, queries: pl.DataFrame, depth: int = DEPTH) -> pl.DataFrame:
    """[qid, query, doc_id, chunk_id, text]: the passages `prepare` would send to a reranker."""
    cfg = load_config("qmd").with_updates({"rerank.top_n": depth})
    prep = prepare(store, queries, cfg, use_cache=False)
    docs = rerank_pool(prep.candidates, depth)
    return rerank.doc_passages(store.chunks(), queries, docs)


def cosine_scores(store: Store, pairs: pl.DataFrame) -> np.ndarray:
    """cos(query, chunk) from the store's chunk embeddings and freshly embedded queries (same model)."""
    qtext = pairs["query"].unique(maintain_order=True).to_list()
    qv = store.query_vectors(qtext)
    qv = qv / np.linalg.norm(qv, axis=1, keepdims=True)
    qrow = dict(zip(qtext, range(len(qtext)), strict=True))
    cv = store.chunk_vectors(pairs["chunk_id"].unique().to_list())
    mat = np.stack(cv["vec"].to_list()).astype(np.float64)
    mat = mat / np.linalg.norm(mat, axis=1, keepdims=True)
    crow = dict(zip(cv["chunk_id"].to_list(), range(len(cv)), strict=True))
    qi = np.array([qrow[t] for t in pairs["query"].to_list()])
    ci = np.array([crow[c] for c in pairs["chunk_id"].to_list()])
    return np.einsum("ij,ij->i", qv[qi].astype(np.float64), mat[ci])


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", default=str(ROOT / "data" / "demo"))
    ap.add_argument("--store", default=None, help="an existing store of the dataset (default: a temporary one)")
    ap.add_argument("--out", default=str(ROOT / "notebooks" / "data" / "rerank_scores.parquet"))
    args = ap.parse_args()
    ds = Dataset.open(args.dataset)
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(args.store) if args.store else Path(tmp) / "demo.duckdb"
        if not path.exists():
            with Store(path) as st:
                st.ingest(load_corpus(ds.root))
        with Store(path, read_only=True) as store:
            pairs = pool(store, ds.queries())
            scores = cosine_scores(store, pairs)
    rows = pairs.with_columns(pl.Series("score", np.round(scores, 6))).sort("qid", "doc_id")
    out = Path(args.out)
    out.parent.mkdir(parents=True, exist_ok=True)
    # Parquet, not JSONL: the ~340 distinct passages repeat across queries, and dictionary encoding keeps the
    # file at ~65 KB instead of 1.2 MB. Read it with `pl.read_parquet(path)`.
    rows.select("qid", "doc_id", "score", "query", "text").write_parquet(out, compression="zstd", compression_level=19)
    print(f"wrote {len(rows)} scored pairs for {rows['qid'].n_unique()} queries to {out}")


if __name__ == "__main__":
    main()
