"""Which fusion should `default` use? A grid over the live fusion fields, chosen on dev, judged on test.

The `default` preset must hold up on collections nobody here sees, so a choice is only as good as the rule
that makes it. This benchmark prepares each collection's dev and test queries once with `default` (every
grid point differs only in rescore fields: fusion method, normalisation, alpha and the adapt rule's gap
scale), re-scores the grid, and reports:

- the grid's best points on dev by two rules (most collections at or above the better single list, then
  the smallest shortfall; and the best mean), with the same points on test;
- the rule judged out of collection: for each collection, the point the rule picks on the *other*
  collections' dev splits, scored on this collection's test split, beside BM25, dense, RRF and `default`.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/default_sweep.py --stores /tmp/stores --markdown sweep.md [--grid rrf-k]

`--stores DIR` holds `NAME.duckdb` for each collection (`hrt ingest ../shared/datasets/NAME`, and `data/demo`
for the demo; opened read-only).
"""

from __future__ import annotations

import argparse
import itertools
from pathlib import Path

import numpy as np
import polars as pl

from toolkit.config import load_config
from toolkit.loaders import Dataset
from toolkit.metrics import evaluate
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store

COLLECTIONS = ["locomo", "cacm", "msmarco-dl19-5k", "vaswani", "demo"]
REL_THRESHOLD = {"msmarco-dl19-5k": 2}
DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"
SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"
FIXED = {"adapt.dense_gap": False, "guard.exact_token": False}
REFERENCES = {
    "bm25": {**FIXED, "fusion.dense_weight": 0.0},
    "dense": {**FIXED, "fusion.lexical_weight": 0.0},
    "rrf": FIXED,
    "default": {},
}


def grid() -> dict[str, dict]:
    """RRF with the default's adapt rule at several gap scales, and convex fusion (minmax / zscore) over
    alpha x gap scale, with the adapt rule off too."""
    points = {f"rrf gap {gs}": {"adapt.gap_scale": gs} for gs in (0.08, 0.12, 0.16, 0.24, 0.32)}
    for norm, alpha in itertools.product(("minmax", "zscore"), (0.5, 0.6, 0.65, 0.7, 0.75, 0.8)):
        base = {"fusion.method": "convex", "fusion.normalization": norm, "fusion.alpha": alpha}
        points[f"convex {norm} a {alpha} fixed"] = {**base, "adapt.dense_gap": False}
        for gs in (0.08, 0.12, 0.16, 0.2, 0.24, 0.32):
            points[f"convex {norm} a {alpha} gap {gs}"] = {**base, "adapt.gap_scale": gs}
    return points


def k_grid() -> dict[str, dict]:
    """RRF's k with the adapt rule's gap scale and weight bounds: does a sharper RRF (small k, so the leading
    list's first places count more) let the per-query dense weight close the gap to the better single list?"""
    return {
        f"rrf k {k} gap {gs} min {lo} max {hi}": {"fusion.rrf_k": k, "adapt.gap_scale": gs, "adapt.min_weight": lo,
                                                   "adapt.max_weight": hi}
        for k, gs, lo, hi in itertools.product((5, 10, 20, 30, 60), (0.08, 0.16, 0.32), (0.25, 0.1, 0.05), (4.0, 10.0))
    }


GRIDS = {"fusion": grid, "rrf-k": k_grid}


def scores(stores: Path, shared: Path, split: str, points: dict[str, dict]) -> dict[tuple[str, str], float]:
    """Mean nDCG@10 of every (point, collection) on `split`; one `prepare` per collection."""
    base = load_config("default")
    out = {}
    for name in COLLECTIONS:
        ds = Dataset.open(DEMO if name == "demo" else shared / name)
        qrels, queries = ds.qrels(split), ds.queries(split)
        queries = queries.join(qrels.select("qid").unique(), on="qid", how="semi")
        with Store(stores / f"{name}.duckdb", read_only=True) as st:
            prep = prepare(st, queries, base)
        for label, updates in {**REFERENCES, **points}.items():
            run = rescore(prep, base.with_updates(updates), trace=False).run()
            pq = evaluate(run, qrels, ["nDCG@10"], rel_threshold=REL_THRESHOLD.get(name, 1))
            out[(label, name)] = float(pq["value"].mean())
        print(f"{split} {name}: {len(points) + len(REFERENCES)} configs", flush=True)
    return out


def shortfall(t: dict, label: str, colls: list[str]) -> tuple[int, float, float]:
    """(collections at or above the better single list, worst difference to it, mean)."""
    d = [t[(label, c)] - max(t[("bm25", c)], t[("dense", c)]) for c in colls]
    return sum(x >= 0 for x in d), min(d), float(np.mean([t[(label, c)] for c in colls]))


RULES = {
    "most wins, then least shortfall": lambda t, p, c: max(p, key=lambda x: shortfall(t, x, c)[:2]),
    "best mean": lambda t, p, c: max(p, key=lambda x: shortfall(t, x, c)[2]),
}


def report(dev: dict, test: dict, points: list[str]) -> str:
    cols = " | ".join(COLLECTIONS)
    lines = ["### Best grid points on dev, and the same points on test (nDCG@10)", "",
             f"| point | split | {cols} | mean | >= better single | worst shortfall |",
             "|---|---|" + "---:|" * (len(COLLECTIONS) + 3)]
    top = sorted(points, key=lambda x: shortfall(dev, x, COLLECTIONS)[:2], reverse=True)[:6]
    top += [x for x in sorted(points, key=lambda x: -shortfall(dev, x, COLLECTIONS)[2])[:3] if x not in top]
    for label in list(REFERENCES) + top:
        for split, t in (("dev", dev), ("test", test)):
            w, worst, mean = shortfall(t, label, COLLECTIONS)
            vals = " | ".join(f"{t[(label, c)]:.4f}" for c in COLLECTIONS)
            lines.append(f"| {label} | {split} | {vals} | {mean:.4f} | {w} | {worst:+.4f} |")
    lines += ["", "### The rule out of collection: picked on the other collections' dev splits, scored on this "
              "collection's test split", ""]
    lines += out_of_collection_rows(dev, test, points, COLLECTIONS)
    return "\n".join(lines)


def out_of_collection_rows(dev: dict, test: dict, points: list[str], names: list[str]) -> list[str]:
    """The table of each rule judged out of collection: per collection, the point the rule picks on the other
    collections' dev splits, scored on this one's test split, beside the reference configs (`dense_floor.py` too)."""
    lines = ["| rule | " + " | ".join(names) + " | mean |", "|---|" + "---:|" * (len(names) + 1)]
    for label in REFERENCES:
        lines.append(f"| {label} | " + " | ".join(f"{test[(label, c)]:.4f}" for c in names)
                     + f" | {np.mean([test[(label, c)] for c in names]):.4f} |")
    for rule, pick in RULES.items():
        cells = []
        for c in names:
            chosen = pick(dev, points, [x for x in names if x != c])
            cells.append((test[(chosen, c)], chosen))
        lines.append(f"| {rule} | " + " | ".join(f"{v:.4f} ({p.split(' (')[0]})" for v, p in cells)
                     + f" | {np.mean([v for v, _ in cells]):.4f} |")
    return lines


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", type=Path, required=True)
    ap.add_argument("--shared", type=Path, default=SHARED)
    ap.add_argument("--markdown", type=Path)
    ap.add_argument("--grid", choices=sorted(GRIDS), default="fusion",
                    help="fusion: method, normalisation, alpha x gap scale (default); rrf-k: k x the adapt rule's bounds")
    args = ap.parse_args()
    points = GRIDS[args.grid]()
    dev = scores(args.stores, args.shared, "dev", points)
    test = scores(args.stores, args.shared, "test", points)
    md = report(dev, test, list(points))
    print(md)
    if args.markdown:
        args.markdown.write_text(md + "\n")


if __name__ == "__main__":
    pl.Config.set_tbl_rows(50)
    main()
