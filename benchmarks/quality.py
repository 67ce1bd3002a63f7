"""Retrieval quality of every preset (and optional tuned configs) on each shared collection's test split.

For each collection: ingest (cached), prepare + rescore each config over the test queries, evaluate
nDCG@10, R@5, R@10, MRR@10 (binary measures at grade >= 2 on TREC DL), and test each config against the
better single retriever (bm25-only or vector-only, chosen by nDCG@10) with a paired randomisation test and
Holm correction across configs.

    .venv/bin/python benchmarks/quality.py --stores /tmp/stores
    .venv/bin/python benchmarks/quality.py --extra tuned=out/tuned-{name}.yaml   # {name} = collection
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import polars as pl

from toolkit.compare import compare
from toolkit.config import list_presets, load_config
from toolkit.loaders import Dataset, load_corpus
from toolkit.metrics import evaluate
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store

MEASURES = ["nDCG@10", "R@5", "R@10", "MRR@10"]
COLLECTIONS = ["locomo", "cacm", "vaswani", "msmarco-dl19-5k"]
REL_THRESHOLD = {"msmarco-dl19-5k": 2}


def run_collection(name: str, shared: Path, stores: Path, configs: dict[str, str], split: str) -> pl.DataFrame:
    ds = Dataset.open(shared / name)
    qrels = ds.qrels(split)
    queries = ds.queries(split)
    rows = []
    with Store(stores / f"{name}.duckdb") as st:
        st.ingest(load_corpus(ds.root), progress=True)
        for label, src in configs.items():
            cfg = load_config(src.format(name=name))
            t = time.perf_counter()
            res = rescore(prepare(st, queries, cfg), cfg, trace=False)
            took = time.perf_counter() - t
            pq = evaluate(res.run(), qrels, MEASURES, rel_threshold=REL_THRESHOLD.get(name, 1))
            rows.append(pq.with_columns(pl.lit(label).alias("system"), pl.lit(took).alias("seconds")))
    return pl.concat(rows)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    ap.add_argument("--stores", default="/tmp/stores", help="Folder for one store per collection (reused).")
    ap.add_argument("--collections", default=",".join(COLLECTIONS))
    ap.add_argument("--split", default="test")
    ap.add_argument("--extra", action="append", default=[], help="LABEL=CONFIG ({name} = collection name).")
    ap.add_argument("--markdown", default=None, help="Also write the tables to this file.")
    args = ap.parse_args()

    configs = {p: p for p in list_presets()}
    for e in args.extra:
        label, _, src = e.partition("=")
        configs[label] = src
    stores = Path(args.stores)
    stores.mkdir(parents=True, exist_ok=True)
    out = []
    for name in args.collections.split(","):
        per = run_collection(name, Path(args.shared), stores, configs, args.split)
        means = per.group_by("system", "measure").agg(pl.col("value").mean()).pivot(on="measure", index="system", values="value")
        secs = per.group_by("system").agg(pl.col("seconds").first())
        single = means.filter(pl.col("system").is_in(["bm25-only", "vector-only"])).sort("nDCG@10", descending=True)["system"][0]
        sig = compare(per.filter(pl.col("measure") == "nDCG@10").select("system", "qid", "measure", "value"), single)
        table = means.join(secs, on="system").join(
            sig.select("system", "p_value", "p_holm", "significant"), on="system", how="left"
        ).sort("nDCG@10", descending=True)
        lines = [f"\n### {name} ({args.split}, {per['qid'].n_unique()} queries; significance vs {single}, nDCG@10)\n",
                 "| config | nDCG@10 | R@5 | R@10 | MRR@10 | p (Holm) | s |", "|---|---:|---:|---:|---:|---:|---:|"]
        for r in table.iter_rows(named=True):
            p = "" if r["system"] == single or r["p_holm"] is None else f"{r['p_holm']:.3g}{' *' if r['significant'] else ''}"
            lines.append(
                f"| {r['system']} | {r['nDCG@10']:.4f} | {r['R@5']:.4f} | {r['R@10']:.4f} | {r['MRR@10']:.4f} | {p} | {r['seconds']:.1f} |"
            )
        print("\n".join(lines), flush=True)
        out.extend(lines)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
