"""Embedding backends on the same chunks in the same run: torch vs ONNX Runtime fp32 vs ONNX int8.

Per collection (a copy of a store built with torch vectors, e.g. /work/stores/*.duckdb):
- texts/s: a sample of `--sample` chunk bodies (evenly spaced), embedded by each backend after one untimed
  warm-up batch; median of `--repeats`; ratio to torch from the same run (target ONNX >= 2.5x torch);
- cosine agreement with torch on that sample (min and mean; target >= 0.99);
- nDCG@10 of dense-only retrieval on the test split with `--ndcg` collections: every chunk re-embedded by
  the backend (torch = the store's own vectors), queries embedded by the same backend (target within 0.005).

    python benchmarks/embeddings.py --stores /tmp/x/demo.duckdb,/tmp/x/cacm.duckdb --datasets ../shared/datasets \\
        --ndcg demo --sample 256 --repeats 3
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

from toolkit.embed import make_embedder
from toolkit.loaders import Dataset
from toolkit.metrics import aggregate, evaluate
from toolkit.store import Store

BACKENDS = ("torch", "onnx", "onnx-int8")


def bodies(st: Store) -> list[str]:
    ch = st.chunks()
    return [f"{t}\n{x}" if t else x for t, x in zip(ch["title"].to_list(), ch["text"].to_list(), strict=True)]


def ndcg(st: Store, ds: Dataset, backend: str, emb) -> float:
    """Dense-only nDCG@10 on the test split with chunk and query vectors from `backend`."""
    queries = ds.queries("test")
    m = st._dense_matrix()  # the store's chunk layout; vectors swapped for the backend's
    if backend != "torch":
        ch = st.chunks().with_row_index("i")
        order = pl.DataFrame({"chunk_id": m["chunk_ids"]}).join(ch, on="chunk_id", how="left")
        texts = [f"{t}\n{x}" if t else x for t, x in zip(order["title"].to_list(), order["text"].to_list(), strict=True)]
        m["vecs"] = emb.embed(texts)
    qv = emb.embed(queries["text"].to_list())
    res = st._block_topk(m, lambda lo, hi: qv[lo:hi] @ m["vecs"].T, queries, scope_filter=True, allowed=None,
                         level="document", top_k=100, block=256)
    if backend != "torch":
        st._dense_cache = None  # the swapped vectors must not leak into the next backend
    return aggregate(evaluate(res.select("qid", "doc_id", "rank", "score"), ds.qrels("test"), ["nDCG@10"]))["nDCG@10"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", required=True, help="Comma-separated store copies (named <collection>.duckdb).")
    ap.add_argument("--datasets", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    ap.add_argument("--ndcg", default="demo", help="Collections to compute nDCG@10 for (re-embeds all chunks).")
    ap.add_argument("--sample", type=int, default=256)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    embs = {b: make_embedder(backend=b) for b in BACKENDS}
    for e in embs.values():
        e.embed(["warm up: load and export the model"])
    want_ndcg = set(args.ndcg.split(",")) if args.ndcg else set()
    rows = []
    for path in args.stores.split(","):
        name = Path(path).stem
        with Store(path) as st:
            allb = bodies(st)
            idx = np.linspace(0, len(allb) - 1, min(args.sample, len(allb))).astype(int)
            sample = [allb[i] for i in idx]
            vecs, rate = {}, {}
            for b, e in embs.items():
                e.embed(sample[:16])
                ts = []
                for _ in range(args.repeats):
                    t0 = time.perf_counter()
                    vecs[b] = e.embed(sample)
                    ts.append(time.perf_counter() - t0)
                rate[b] = len(sample) / statistics.median(ts)
                print(f"{name} {b}: {rate[b]:.1f} texts/s", file=sys.stderr, flush=True)
            nd = {}
            if name in want_ndcg:
                root = Path(args.datasets) / ("demo" if name == "demo" else name)
                if name == "demo":
                    root = Path(__file__).resolve().parents[1] / "data" / "demo"
                ds = Dataset.open(root)
                for b, e in embs.items():
                    nd[b] = ndcg(st, ds, b, e)
            for b in BACKENDS:
                cos = (vecs[b] * vecs["torch"]).sum(axis=1)
                rows.append((name, b, len(sample), rate[b], rate[b] / rate["torch"], cos.min(), cos.mean(), nd.get(b)))
    load = os.getloadavg()
    print(f"Load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs\n")
    print("| collection | backend | texts | texts/s | x torch | cos min | cos mean | nDCG@10 (dense, test) |")
    print("|---|---|---|---|---|---|---|---|")
    for name, b, n, r, x, cmin, cmean, nd in rows:
        print(f"| {name} | {b} | {n} | {r:.1f} | {x:.2f} | {cmin:.5f} | {cmean:.5f} | {'' if nd is None else f'{nd:.4f}'} |")


if __name__ == "__main__":
    main()
