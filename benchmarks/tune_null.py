"""How often `hrt tune`'s gate ships a change when nothing is better than the base, and how often its held-out 95%
interval covers the true gain, before and after the selection-aware test (`toolkit.tune.selection_test`).

Each simulated split mirrors what `tune` hands its gate (`decide`): n judged queries dealt into 5 folds; fixed settings
(the base first, then 3 anchors); per fold, the trials of a search run on the other folds (read on that fold); and
the trials of the search over the whole split (the alternative that would ship is the best of everything on the split).
Per-query scores are IR-like: each query has a reference value drawn from a marginal of per-query nDCG@10 (synthetic:
30% at 0, 30% at 1, the rest Beta(2, 2); or, with `--dataset`, BM25's real per-query nDCG@10 on a shared collection),
and each config keeps it with probability 0.6 (the same ranking as the others on that query, a tie) or else draws its
own value from the marginal. The trials of one search share a second reference (they are near each other), so they
are more alike among themselves than with the base. Scenarios:

- `null`: every config is exchangeable with the base on every query: no true gain (the audit's case; the interval
  should cover 0 in 95%, the rule should ship in ~2.5%: "gain > 0 and two-sided p < 0.05");
- `null, one candidate set for every fold`: as `null`, but every fold chooses among the same candidates (the fixed
  settings and the whole-split search, `cv_heldout`; as the statistics audit simulated `decide`): the folds' choices
  then share the most data;
- `null, 2 anchors worse`: as `null`, but two anchors (think "lexical only", "dense only") lose on half the queries
  (their value is the lower of theirs and a fresh draw): still nothing better, so still ~2.5% or less;
- `gain`: half the trials of every search and one anchor are better (on each query, with probability `--effect`, the
  higher of their value and a fresh draw): how often each rule ships it (power).

Before = the gate as it was: the paired sign-flip test (`compare.randomization_test`, refined below 2 x alpha) on the
nested held-out per-query scores against the base's, with the percentile bootstrap interval. After = `tune.decide`.

    PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/tune_null.py                  # ~3 min on 2 cores
    PYTHONPATH=$PWD nice -n 10 .venv/bin/python benchmarks/tune_null.py --dataset ../shared/datasets/locomo

Monte Carlo standard errors: ~0.005 on a 2.5% rate and ~0.007 on 95% coverage at 1,000 splits.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np

from toolkit.compare import _seed, randomization_test
from toolkit.tune import cv_heldout, decide, nested_heldout

SHARED = "null, one candidate set for every fold"
SCENARIOS = ("null", SHARED, "null, 2 anchors worse", "gain")


def marginal_synthetic(size: int, rng: np.random.Generator) -> np.ndarray:
    u = rng.random(size)
    return np.where(u < 0.3, 0.0, np.where(u < 0.6, 1.0, rng.beta(2, 2, size)))


def split(rng: np.random.Generator, pool: np.ndarray, n: int, trials: int, folds: int, scenario: str, effect: float,
          ) -> tuple[np.ndarray, np.ndarray, dict[int, np.ndarray], np.ndarray]:
    """One simulated split: (fold per query, fixed settings x queries with the base first, per-fold searched trials,
    the whole-split search's trials)."""
    def draw(*shape: int) -> np.ndarray:
        return pool[rng.integers(0, pool.size, size=shape)]

    ref = draw(n)

    def configs(k: int, own_ref: np.ndarray) -> np.ndarray:
        return np.where(rng.random((k, n)) < 0.6, own_ref, draw(k, n))

    fixed = configs(4, ref)  # base, then 3 anchors
    searches = []
    for _ in range(folds + 1):  # one search per fold, and the one over the whole split
        family = np.where(rng.random(n) < 0.6, ref, draw(n))
        searches.append(configs(trials, family))
    if scenario == "null, 2 anchors worse":
        worse = rng.random((2, n)) < 0.5
        fixed[2:4] = np.where(worse, np.minimum(fixed[2:4], draw(2, n)), fixed[2:4])
    elif scenario == "gain":
        for s in searches:
            better = rng.random((trials // 2, n)) < effect
            s[: trials // 2] = np.where(better, np.maximum(s[: trials // 2], draw(trials // 2, n)), s[: trials // 2])
        better = rng.random(n) < effect
        fixed[1] = np.where(better, np.maximum(fixed[1], draw(n)), fixed[1])
    fold = rng.permutation(np.arange(n) % folds)
    return fold, fixed, dict(enumerate(searches[:folds])), searches[folds]


def percentile_ci(d: np.ndarray, seed: list[int], b: int = 2_000) -> tuple[float, float]:
    """The interval the gate printed before (percentile bootstrap, as `compare` had it)."""
    means = d[np.random.default_rng(seed).integers(0, d.size, size=(b, d.size))].mean(axis=1)
    lo, hi = np.quantile(means, [0.025, 0.975])
    return float(lo), float(hi)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=None, help="BEIR folder whose BM25 per-query nDCG@10 is the marginal "
                    "(a lexical store is built in --workdir); default: synthetic")
    ap.add_argument("--workdir", default="/tmp/hrt-intervals")
    ap.add_argument("--queries", type=int, default=32)
    ap.add_argument("--trials", type=int, default=20, help="trials per search")
    ap.add_argument("--folds", type=int, default=5)
    ap.add_argument("--splits", type=int, default=1_000, help="simulated splits of each of the two null scenarios")
    ap.add_argument("--other-splits", type=int, default=400, help="simulated splits of the other scenarios")
    ap.add_argument("--effect", type=float, default=0.25, help="share of queries a better config may improve (gain)")
    ap.add_argument("--alpha", type=float, default=0.05)
    ap.add_argument("--scenarios", default="1,2,3,4", help="which scenarios, by number (1 = null, ...)")
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()
    if a.dataset:
        from interval_coverage import real_scores

        pool = real_scores(Path(a.dataset), Path(a.workdir))["bm25"]
        source = f"BM25 nDCG@10 of {Path(a.dataset).name} ({pool.size} queries)"
    else:
        pool = marginal_synthetic(100_000, np.random.default_rng(9))
        source = "synthetic nDCG@10 (30% 0, 30% 1, Beta(2, 2))"
    print(f"{a.queries} queries, {a.folds} folds, base + 3 anchors + {a.trials} trials per search; marginal: {source}; "
          f"alpha {a.alpha}\n")
    print("| scenario | splits | shipped, before | shipped, after | interval covers 0, before | after | CPU s per gate, after |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for scenario in [SCENARIOS[int(i) - 1] for i in a.scenarios.split(",")]:
        splits = a.splits if scenario.startswith("null") and "worse" not in scenario else a.other_splits
        shared = scenario == SHARED
        if not splits:
            continue
        rng = np.random.default_rng([a.seed, len(scenario)])
        ship_old = ship_new = cov_old = cov_new = 0
        seconds = 0.0
        for rep in range(splits):
            fold, fixed, searched, whole = split(rng, pool, a.queries, a.trials, a.folds, scenario, a.effect)
            pool_scores = np.vstack([fixed, whole])
            best = int(np.argmax(pool_scores.mean(axis=1)))
            # Before: the paired test on the nested held-out per-query values.
            d = (cv_heldout(pool_scores, fold)[0] if shared else nested_heldout(fixed, searched, fold)) - fixed[0]
            p = randomization_test(d, seed=_seed(rep, d), refine_below=2 * a.alpha)
            ci = percentile_ci(d, _seed(rep + 1, d))
            ship_old += best != 0 and d.mean() > 0 and p < a.alpha
            cov_old += ci[0] <= 0 <= ci[1]
            # After: the gate as `tune` calls it.
            per_fold = {f: np.vstack([fixed, searched[f]]) for f in searched}
            t0 = time.process_time()
            names = ["base"] + [f"config {i}" for i in range(1, len(pool_scores))]
            dec = decide(names, pool_scores, fold, measure="m", alpha=a.alpha, per_fold=None if shared else per_fold,
                         seed=rep)
            seconds += time.process_time() - t0
            ship_new += dec.chosen != "base"
            cov_new += dec.ci[0] <= 0 <= dec.ci[1]
        cover = f"{cov_old / splits:.3f} | {cov_new / splits:.3f}" if scenario in ("null", SHARED) else "- | -"
        print(f"| {scenario} | {splits:,} | {ship_old / splits:.3f} | {ship_new / splits:.3f} | {cover} | "
              f"{seconds / splits:.3f} |", flush=True)


if __name__ == "__main__":
    main()
