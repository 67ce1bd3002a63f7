"""What the `learned` fusion method adds to a slider change, against plain RRF in the same run (issue #12 target:
scoring all LoCoMo test candidates with the model inside `rescore` adds at most 30 ms per change).

One `prepare` of the test split with the `learned` preset (the shipped model; its features are cached there
and serve both methods). Then, after a warm-up of each, rounds interleave two slider changes:
- learned: a change of the blend buckets (the model's candidate scores are computed once per Prepared and
  reused; fusion, blend, dedup and thresholds run again);
- plain RRF (`hybrid-rrf`): a change of `fusion.rrf_k`, the same stages after fusion.
The first learned `rescore` (the model scores every candidate) is timed on its own. Median of `--repeats`.

    PYTHONPATH=. .venv/bin/python benchmarks/learned_rescore.py --dataset ../shared/datasets/locomo --store /tmp/locomo.duckdb
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

from toolkit.config import load_config
from toolkit.loaders import Dataset
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="../shared/datasets/locomo")
    ap.add_argument("--store", required=True, help="A store of the dataset with embeddings (opened read-only).")
    ap.add_argument("--split", default="test")
    ap.add_argument("--repeats", type=int, default=21)
    args = ap.parse_args()

    ds = Dataset.open(args.dataset)
    queries = ds.queries(args.split)
    learned, rrf = load_config("learned"), load_config("hybrid-rrf")
    with Store(args.store, read_only=True) as st:
        t = time.perf_counter()
        prep = prepare(st, queries, learned)
        t_prep = time.perf_counter() - t
    t = time.perf_counter()
    rescore(prep, learned, trace=False)
    t_first = time.perf_counter() - t
    rescore(prep, rrf, trace=False)  # warm-up: the fusion index and other per-Prepared caches

    def learned_change(i: int) -> None:
        rescore(prep, learned.with_updates({"rerank.buckets": [[3, 0.5 + i / 100], [10, 0.6], [float("inf"), 0.4]]}), trace=False)

    def rrf_change(i: int) -> None:
        rescore(prep, rrf.with_updates({"fusion.rrf_k": 40 + i}), trace=False)

    times: dict[str, list[float]] = {"learned": [], "rrf": []}
    for i in range(args.repeats):
        for name, fn in (("learned", learned_change), ("rrf", rrf_change)):
            t = time.perf_counter()
            fn(i)
            times[name].append((time.perf_counter() - t) * 1000)
    med = {k: statistics.median(v) for k, v in times.items()}
    n_cands = len(prep.ltr_features)
    print(f"{ds.name} {args.split}: {queries.height} queries, {n_cands} scored candidates, prepare {t_prep:.1f} s")
    print("\n| rescore (trace off) | median ms |")
    print("|---|---:|")
    print(f"| learned, first call (the model scores every candidate) | {t_first * 1000:.1f} |")
    print(f"| learned, a slider change (blend buckets) | {med['learned']:.1f} |")
    print(f"| plain RRF, a slider change (rrf_k) | {med['rrf']:.1f} |")
    added = med["learned"] - med["rrf"]
    print(f"\nadded by the learned method per slider change: {added:+.1f} ms -> target (<= +30 ms) "
          f"{'met' if added <= 30 else 'MISSED'}")
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
