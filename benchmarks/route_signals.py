"""Which label-free per-query signal tells whether BM25 or dense will win? Correlations, and rules re-scored.

`default` sets each query's dense weight from the dense list's own gap (`toolkit/adapt.py`). A second signal
earns a place only if it points the same way on every collection, dev and test, and if a rule built on it
lifts the collection where one list dominates without costing the others. This benchmark measures both:

1. for every query-level signal `prepare` can give without judgements (the learned-fusion features of the
   lists' top documents: term coverage, proximity, IDF, agreement, the dense gap), its Spearman correlation
   with "BM25's nDCG@10 minus dense's" on each collection's dev and test split;
2. RRF re-scored with the gap rule times `exp(-a * signal)`, for a few `a`, beside BM25, dense, plain RRF and
   the gap rule alone (which reproduces `default` without the exact-token guard and copy collapse).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/route_signals.py --stores /tmp/default/stores

`--stores DIR` holds `NAME.duckdb` for each collection, opened read-only (as `benchmarks/default_sweep.py`).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl
from scipy.stats import spearmanr

from toolkit.config import load_config
from toolkit.loaders import Dataset
from toolkit.metrics import evaluate
from toolkit.pipeline import prepare

COLLECTIONS = ["locomo", "cacm", "msmarco-dl19-5k", "vaswani", "demo"]
REL_THRESHOLD = {"msmarco-dl19-5k": 2}
DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"
QUERY_FEATURES = ["q_overlap10", "q_vec_top", "q_lex_top_norm", "q_idf_mean_norm", "q_terms", "q_stopword_ratio",
                  "q_tokens"]
DOC_FEATURES = ["coverage", "idf_coverage", "proximity"]
RULE_SIGNALS = ["cov_diff1", "idfcov_diff1", "cov_diff3"]


def load(stores: Path, shared: Path, name: str, split: str) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(learning-to-rank features of every candidate, qrels) of one judged split; the `learned` preset's prepare
    computes the features (`docs/frames.md`)."""
    from toolkit.store import Store

    ds = Dataset.open(DEMO if name == "demo" else shared / name)
    qrels, queries = ds.qrels(split), ds.queries(split)
    queries = queries.join(qrels.select("qid").unique(), on="qid", how="semi")
    with Store(stores / f"{name}.duckdb", read_only=True) as st:
        prep = prepare(st, queries, load_config("learned"))
    return prep.ltr_features, qrels


def list_run(ltr: pl.DataFrame, rr: str) -> pl.DataFrame:
    """One original list as a run, ordered by its reciprocal rank."""
    return (ltr.filter(pl.col(rr) > 0).sort(["qid", rr], descending=[False, True])
            .with_columns(rank=pl.int_range(1, pl.len() + 1).over("qid"), score=pl.col(rr))
            .select("qid", "doc_id", "rank", "score"))


def signals(ltr: pl.DataFrame) -> pl.DataFrame:
    """One row per query: its query features, the mean document features of each list's top 1 / 3 / 10, the
    dense gap (cos@1 - cos@10) and the differences BM25 top minus dense top of coverage and IDF coverage."""
    s = ltr.group_by("qid").agg(pl.col(QUERY_FEATURES).first())
    for rr in ("lex_rr", "vec_rr"):
        top = (ltr.filter(pl.col(rr) > 0).sort(["qid", rr], descending=[False, True]).group_by("qid", maintain_order=True)
               .agg(pl.col(f).head(k).mean().alias(f"{f}@{rr[:3]}{k}") for f in DOC_FEATURES for k in (1, 3, 10)))
        s = s.join(top, on="qid", how="left")
    gap = (ltr.filter(pl.col("vec_rr") > 0).sort(["qid", "vec_rr"], descending=[False, True])
           .group_by("qid", maintain_order=True).agg((pl.col("vec_score").first() - pl.col("vec_score").head(10).last())
                                                      .alias("dense_gap")))
    s = s.join(gap, on="qid", how="left")
    return s.with_columns(
        *[(pl.col(f"coverage@lex{k}") - pl.col(f"coverage@vec{k}")).alias(f"cov_diff{k}") for k in (1, 3, 10)],
        *[(pl.col(f"idf_coverage@lex{k}") - pl.col(f"idf_coverage@vec{k}")).alias(f"idfcov_diff{k}") for k in (1, 3, 10)],
    )


def rrf_ndcg(ltr: pl.DataFrame, qrels: pl.DataFrame, sig: pl.DataFrame, dense_weight: pl.Expr, rel: int) -> float:
    """nDCG@10 of RRF (k 60) of the two original lists with a per-query dense weight."""
    rrf = [pl.when(pl.col(rr) > 0).then(1 / (60 + 1 / pl.col(rr))).otherwise(0.0) for rr in ("lex_rr", "vec_rr")]
    run = (ltr.join(sig.select("qid", wd=dense_weight), on="qid", how="left")
           .with_columns(score=rrf[0] + pl.col("wd") * rrf[1])
           .sort(["qid", "score"], descending=[False, True])
           .with_columns(rank=pl.int_range(1, pl.len() + 1).over("qid")))
    return float(evaluate(run.select("qid", "doc_id", "rank", "score"), qrels, ["nDCG@10"], rel_threshold=rel)["value"].mean())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", type=Path, required=True)
    ap.add_argument("--shared", type=Path, default=SHARED)
    args = ap.parse_args()
    gap = (pl.col("dense_gap") / 0.16).clip(0.25, 4.0)  # `default`'s adapt rule
    rules = {"bm25": pl.lit(0.0), "dense": pl.lit(1e6), "rrf": pl.lit(1.0), "gap (default)": gap}
    rules |= {f"gap * exp(-{a} {s})": (gap * (-a * pl.col(s).fill_null(0.0)).exp()).clip(0.05, 4.0)
              for s in RULE_SIGNALS for a in (1, 2, 4, 8)}
    corr: dict[str, dict] = {}
    score: dict[tuple, float] = {}
    cells = [(n, split) for split in ("dev", "test") for n in COLLECTIONS]
    for name, split in cells:
        ltr, qrels = load(args.stores, args.shared, name, split)
        rel = REL_THRESHOLD.get(name, 1)
        per_q = [evaluate(list_run(ltr, rr), qrels, ["nDCG@10"], rel_threshold=rel).select("qid", pl.col("value").alias(rr))
                 for rr in ("lex_rr", "vec_rr")]
        sig = signals(ltr).join(per_q[0], on="qid").join(per_q[1], on="qid")
        target = (sig["lex_rr"] - sig["vec_rr"]).to_numpy()
        for c in sig.columns:
            if c not in ("qid", "lex_rr", "vec_rr"):
                x = sig[c].cast(pl.Float64).to_numpy()
                ok = np.isfinite(x) & np.isfinite(target)
                corr.setdefault(c, {})[(name, split)] = float(spearmanr(x[ok], target[ok]).statistic)
        for label, w in rules.items():
            score[(label, name, split)] = rrf_ndcg(ltr, qrels, sig, w, rel)
        print(f"{split} {name}: {sig.height} queries", flush=True)
    head = " | ".join(f"{n} {s}" for n, s in cells)
    print(f"\n| signal (Spearman with BM25 - dense nDCG@10) | {head} | same sign |\n|---|" + "---:|" * len(cells) + "---|")
    for c, v in corr.items():
        vals = [v[x] for x in cells]
        same = "yes" if all(x > 0 for x in vals) or all(x < 0 for x in vals) else ""
        print(f"| {c} | " + " | ".join(f"{x:+.3f}" for x in vals) + f" | {same} |")
    for split in ("dev", "test"):
        print(f"\n| rule ({split}, nDCG@10) | " + " | ".join(COLLECTIONS) + " | mean | >= better single |\n|---|"
              + "---:|" * (len(COLLECTIONS) + 2))
        for label in rules:
            vals = [score[(label, n, split)] for n in COLLECTIONS]
            wins = sum(score[(label, n, split)] >= max(score[("bm25", n, split)], score[("dense", n, split)]) - 1e-9
                       for n in COLLECTIONS)
            print(f"| {label} | " + " | ".join(f"{x:.4f}" for x in vals) + f" | {np.mean(vals):.4f} | {wins} |")


if __name__ == "__main__":
    main()
