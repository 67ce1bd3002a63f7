"""Embedding backends on the same chunks in the same run: torch vs ONNX Runtime fp32 vs ONNX int8.

Per collection (a copy of a store, e.g. /work/stores/*.duckdb; its own vectors are reused for the backend that
made them, `Store.embedding_backend`):
- texts/s: a sample of `--sample` chunk bodies (evenly spaced), embedded by each backend after one untimed
  warm-up batch; `--repeats` rounds interleaved over the backends (a burst of load on a shared machine hits
  every backend alike), median per backend; ratio to torch from the same run (target ONNX >= 2.5x torch);
- cosine agreement with torch on that sample (min and mean; target >= 0.99);
- nDCG@10 of dense-only retrieval (document level, scope filter on) on the test split (`--ndcg`): every chunk
  embedded by the backend (saved under `--vec-cache` as Parquet and reused by later runs), queries embedded by
  the same backend (target within 0.005 of torch).

Both runtimes get the same levers: `--threads` (ONNX Runtime intra-op threads and torch's thread count),
`--batch-size`, and both sort texts by length before batching (sentence-transformers always does; the ONNX
embedder does too), so that padding stays small.

    python benchmarks/embeddings.py --stores /tmp/x/cacm.duckdb,/tmp/x/locomo.duckdb --ndcg all --sample 256
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

from toolkit.chunking import chunk_body
from toolkit.embed import make_embedder
from toolkit.loaders import Dataset
from toolkit.metrics import aggregate, evaluate
from toolkit.store import Store

BACKENDS = ("torch", "onnx", "onnx-int8")
REPO = Path(__file__).resolve().parents[1]


def chunk_texts(st: Store, chunk_ids: pl.Series) -> list[str]:
    """The embedded body of each chunk, in the order of `chunk_ids`."""
    ch = pl.DataFrame({"chunk_id": chunk_ids}).join(st.chunks(), on="chunk_id", how="left")
    return [chunk_body(t, x) for t, x in zip(ch["title"].to_list(), ch["text"].to_list(), strict=True)]


def chunk_vectors(st: Store, name: str, backend: str, emb, cache: Path) -> np.ndarray:
    """Every chunk's vector from `backend`, in the store's dense-matrix order: the store's own when it was made by
    that backend, else from the Parquet cache, else embedded now (and cached)."""
    m = st._dense_matrix()
    if (st.embedding_backend or "torch") == backend:
        return m["vecs"]
    path = cache / f"{name}-{backend}.parquet"
    if path.exists():
        df = pl.read_parquet(path)
        got = pl.DataFrame({"chunk_id": m["chunk_ids"]}).join(df, on="chunk_id", how="left")
        if got["vec"].null_count() == 0:
            return np.ascontiguousarray(np.vstack(got["vec"].to_numpy()), dtype=np.float32)
    t0 = time.perf_counter()
    vecs = emb.embed(chunk_texts(st, m["chunk_ids"]))
    print(f"{name} {backend}: {len(vecs)} chunks embedded in {time.perf_counter() - t0:.0f}s", file=sys.stderr, flush=True)
    cache.mkdir(parents=True, exist_ok=True)
    pl.DataFrame({"chunk_id": m["chunk_ids"], "vec": list(vecs)}).write_parquet(path)
    return vecs


def ndcg(st: Store, ds: Dataset, vecs: np.ndarray, emb) -> float:
    """Dense-only nDCG@10 on the test split with these chunk vectors and the backend's query vectors."""
    queries = ds.queries("test")
    m = dict(st._dense_matrix(), vecs=vecs)  # the store's chunk layout with the backend's vectors
    qv = emb.embed(queries["text"].to_list())
    res = st._block_topk(m, lambda lo, hi: qv[lo:hi] @ m["vecs"].T, queries, scope_filter=True, allowed=None,
                         level="document", top_k=100, block=256)
    return aggregate(evaluate(res.select("qid", "doc_id", "rank", "score"), ds.qrels("test"), ["nDCG@10"]))["nDCG@10"]


def dataset_root(name: str, datasets: str) -> Path:
    return REPO / "data" / "demo" if name == "demo" else Path(datasets) / name


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--stores", required=True, help="Comma-separated store copies (named <collection>.duckdb).")
    ap.add_argument("--datasets", default="/work/shared/datasets", help="BEIR folders named like the stores.")
    ap.add_argument("--ndcg", default="", help="Collections to compute nDCG@10 for ('all' = every store given).")
    ap.add_argument("--vec-cache", default="/tmp/hrt-embeddings", help="Where whole-collection vectors are kept.")
    ap.add_argument("--sample", type=int, default=256, help="Chunks per collection for texts/s (0: no timing).")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--threads", type=int, default=2, help="ONNX Runtime intra-op threads and torch threads.")
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--backends", default=",".join(BACKENDS), help="Which backends (torch is the reference of the ratios).")
    args = ap.parse_args()

    import torch

    torch.set_num_threads(args.threads)
    backends = [b for b in BACKENDS if b in args.backends.split(",")]
    embs = {b: make_embedder(backend=b, batch_size=args.batch_size) for b in backends}
    for b, e in embs.items():
        if b != "torch":
            e.threads = args.threads
        e.embed(["warm up: load and export the model"])
    stores = args.stores.split(",")
    want_ndcg = {Path(p).stem for p in stores} if args.ndcg == "all" else set(filter(None, args.ndcg.split(",")))
    rows = []
    for path in stores:
        name = Path(path).stem
        with Store(path, read_only=True) as st:
            rate, vecs = {}, {}
            if args.sample:
                ids = st._dense_matrix()["chunk_ids"]
                idx = np.linspace(0, len(ids) - 1, min(args.sample, len(ids))).astype(int)
                sample = chunk_texts(st, ids.gather(idx))
                ts: dict[str, list[float]] = {b: [] for b in backends}
                for e in embs.values():
                    e.embed(sample[:16])
                for _ in range(args.repeats):
                    for b, e in embs.items():
                        t0 = time.perf_counter()
                        vecs[b] = e.embed(sample)
                        ts[b].append(time.perf_counter() - t0)
                rate = {b: len(sample) / statistics.median(t) for b, t in ts.items()}
                print(f"{name}: " + ", ".join(f"{b} {r:.1f} texts/s" for b, r in rate.items()), file=sys.stderr, flush=True)
            nd = {}
            if name in want_ndcg:
                ds = Dataset.open(dataset_root(name, args.datasets))
                for b, e in embs.items():
                    nd[b] = ndcg(st, ds, chunk_vectors(st, name, b, e, Path(args.vec_cache)), e)
                    print(f"{name} {b}: nDCG@10 {nd[b]:.4f}", file=sys.stderr, flush=True)
            for b in backends:
                cos = (vecs[b] * vecs["torch"]).sum(axis=1) if "torch" in vecs else np.array([np.nan])
                rows.append((name, b, len(vecs.get(b, [])), rate.get(b, np.nan), rate.get(b, np.nan) / rate.get("torch", np.nan),
                             cos.min(), cos.mean(), nd.get(b), (nd[b] - nd["torch"]) if b in nd and "torch" in nd else None))
    load = os.getloadavg()
    print(f"Load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}; {os.cpu_count()} CPUs; "
          f"threads {args.threads}, batch size {args.batch_size}\n")
    print("| collection | backend | texts | texts/s | x torch | cos min | cos mean | nDCG@10 (dense, test) | vs torch |")
    print("|---|---|---|---|---|---|---|---|---|")
    for name, b, n, r, x, cmin, cmean, nd, dd in rows:
        print(f"| {name} | {b} | {n} | {r:.1f} | {x:.2f} | {cmin:.5f} | {cmean:.5f} | "
              f"{'' if nd is None else f'{nd:.4f}'} | {'' if dd is None else f'{dd:+.4f}'} |")


if __name__ == "__main__":
    main()
