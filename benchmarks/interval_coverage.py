"""Coverage of the interval every report of a mean difference prints (`toolkit.compare.bootstrap_ci`), on IR-like
per-query differences: most queries unchanged (tied at 0), the rest skewed.

A population of per-query differences is fixed; each simulated dataset draws n queries from it (with replacement),
and an interval covers when it holds the population's mean. Populations:

- `synthetic`: the statistics audit's shape (user trial BE): half the queries tied at 0, the rest exponential
  (scale 0.15) shifted by -0.05 (right-skewed, mean ~0.05);
- `<collection> <config> - bm25` (with `--dataset`): the real per-query nDCG@10 differences between BM25 and a
  lexical variant (k1/b, source dedup) on every judged query of a shared collection (LoCoMo: 1,535 queries, ~75% tied,
  skew -2.4 to +1.6). Only a lexical store is built (no embeddings: ~20 s for LoCoMo, in `--workdir`, reused).

Intervals (95%): `percentile` (the bootstrap the toolkit printed before, 2,000 resamples), `toolkit` (what
`bootstrap_ci` does now: the symmetric studentised bootstrap, clipped to [-1, 1]), and for reference `t` (Student's
t interval) and `BCa` (`scipy.stats.bootstrap`, 2,000 resamples).

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/interval_coverage.py                     # synthetic, ~1 min
    PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/interval_coverage.py \\
        --dataset ../shared/datasets/locomo --workdir /tmp/hrt-intervals                               # + LoCoMo, ~3 min

Prints one row per population and n: each interval's coverage (Monte Carlo standard error ~0.007 at 1,000 datasets)
and median width.
"""

from __future__ import annotations

import argparse
import time
import warnings
from pathlib import Path

import numpy as np

from toolkit.compare import bootstrap_ci

VARIANTS = {"k1=0.6,b=0.4": {"retrieval.lexical.k1": 0.6, "retrieval.lexical.b": 0.4},
            "k1=2,b=0.9": {"retrieval.lexical.k1": 2.0, "retrieval.lexical.b": 0.9},
            "source dedup": {"dedup.source_enabled": True}}


def real_scores(dataset: Path, workdir: Path) -> dict[str, np.ndarray]:
    """Per-query nDCG@10 of BM25 (`bm25-only`) and its `VARIANTS` on every judged query (dev and test) of a BEIR
    folder, from a lexical store in `workdir` (built once)."""
    import polars as pl

    from toolkit.config import load_config
    from toolkit.loaders import Dataset, load_corpus
    from toolkit.metrics import evaluate
    from toolkit.pipeline import prepare, rescore
    from toolkit.store import Store

    ds = Dataset.open(dataset)
    splits = [s for s in ("dev", "test") if (ds.root / "qrels" / f"{s}.tsv").exists()]
    queries = pl.concat([ds.queries(s) for s in splits]).unique("qid", keep="first", maintain_order=True)
    qrels = pl.concat([ds.qrels(s) for s in splits]).unique()
    order = pl.DataFrame({"qid": sorted(set(qrels["qid"]) & set(queries["qid"]))})
    workdir.mkdir(parents=True, exist_ok=True)
    out = {}
    with Store(workdir / f"{ds.name}-lexical.duckdb") as st:
        st.ingest(load_corpus(ds.root), embed=False)
        base = load_config("bm25-only")
        for label, upd in {"bm25": {}, **VARIANTS}.items():
            cfg = base.with_updates(upd)
            pq = evaluate(rescore(prepare(st, queries, cfg), cfg, trace=False).run(), qrels, ["nDCG@10"])
            out[label] = order.join(pq.select("qid", "value"), on="qid", how="left")["value"].fill_null(0.0).to_numpy()
    return out


def synthetic(size: int, rng: np.random.Generator) -> np.ndarray:
    return np.where(rng.random(size) < 0.5, 0.0, rng.exponential(0.15, size) - 0.05)


def percentile(d: np.ndarray, rng: np.random.Generator, b: int = 2_000) -> tuple[float, float]:
    """The interval `compare` printed before (percentile bootstrap of the mean)."""
    means = d[rng.integers(0, d.size, size=(b, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)


def t_interval(d: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    from scipy.special import stdtrit

    half = stdtrit(d.size - 1, 0.975) * d.std(ddof=1) / np.sqrt(d.size)
    return float(d.mean() - half), float(d.mean() + half)


def bca(d: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    from scipy import stats

    if np.all(d == d[0]):
        return float(d[0]), float(d[0])
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # degenerate jackknife on tied samples
        ci = stats.bootstrap((d,), np.mean, n_resamples=2_000, method="BCa", rng=rng, vectorized=True).confidence_interval
    lo, hi = float(ci.low), float(ci.high)
    return (d.mean(), d.mean()) if np.isnan(lo) else (lo, hi)


def toolkit_interval(d: np.ndarray, rng: np.random.Generator) -> tuple[float, float]:
    return bootstrap_ci(d, 2_000, 0.95, seed=int(rng.integers(2**31)), bounds=(-1.0, 1.0))


METHODS = {"percentile (before)": percentile, "toolkit (now)": toolkit_interval, "t": t_interval, "BCa": bca}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", action="append", default=[], help="BEIR folder whose real per-query differences to draw "
                    "from (repeatable); none: the synthetic population only")
    ap.add_argument("--workdir", default="/tmp/hrt-intervals", help="where the lexical stores go (reused)")
    ap.add_argument("--sizes", default="10,30,100", help="queries per simulated dataset")
    ap.add_argument("--datasets", type=int, default=1_000, help="simulated datasets per population and size")
    ap.add_argument("--methods", default=",".join(METHODS), help="comma-separated, of: " + ", ".join(METHODS))
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    pops = {"synthetic (50% tied, skewed)": synthetic(200_000, np.random.default_rng(9))}
    for ds in a.dataset:
        scores = real_scores(Path(ds), Path(a.workdir))
        for label in VARIANTS:
            d = scores[label] - scores["bm25"]
            pops[f"{Path(ds).name} {label} - bm25 ({np.mean(d == 0):.0%} tied)"] = d
    methods = {k: METHODS[k] for k in a.methods.split(",")}
    sizes = [int(s) for s in a.sizes.split(",")]
    print(f"coverage of the population mean by 95% intervals, {a.datasets:,} datasets each (MC s.e. ~0.007); "
          "median width in brackets")
    print("| population | n | " + " | ".join(methods) + " |")
    print("|---|---:|" + "---:|" * len(methods))
    t0 = time.perf_counter()
    for pname, pop in pops.items():
        mu = pop.mean()
        for n in sizes:
            rng = np.random.default_rng([a.seed, n])
            cov = dict.fromkeys(methods, 0)
            width: dict[str, list[float]] = {k: [] for k in methods}
            for _ in range(a.datasets):
                d = pop[rng.integers(0, pop.size, n)]
                for k, f in methods.items():
                    lo, hi = f(d, rng)
                    cov[k] += lo <= mu <= hi
                    width[k].append(hi - lo)
            print(f"| {pname} | {n} | " + " | ".join(f"{cov[k] / a.datasets:.3f} ({np.median(width[k]):.3f})"
                                                    for k in methods) + " |", flush=True)
    print(f"\n{time.perf_counter() - t0:.0f} s")


if __name__ == "__main__":
    main()
