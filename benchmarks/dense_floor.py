"""How low may `default`'s per-query dense weight go? A grid over `adapt.min_weight`, chosen on dev, judged on test.

`default` fuses BM25 and dense lists by weighted RRF (k = 60) with the dense weight
w = clip((cos@1 - cos@10) / gap_scale, min_weight, max_weight). When w < (k + 1) / (k + 100) = 61/160 ~ 0.38,
dense rank 1 scores w / 61, below BM25 rank 100 (1 / 160): every document that only the dense list found lands
after all 100 BM25 hits, or out of a 100-deep run. A floor w_min = (k + 1) / (k + N) guarantees that dense
rank 1 still outranks BM25 rank N. This benchmark re-scores `default` with the floor in {0.25 (shipped), 0.38,
0.5, 0.6, 0.75, 1.0} and the three "dense #1 above BM25 #N" floors (N = 30, 50, 100), gap scale 0.16 and
max weight 4 kept, on the shared collections (and any more given by path), and reports:

- the grid's best points on dev by `default_sweep.py`'s two rules (most collections at or above the better
  single list, then the smallest shortfall; and the best mean), with the same points on test;
- for the point the first rule picks on all dev splits: test nDCG@10 and R@5 per collection beside `default`,
  BM25, dense and plain RRF, with paired randomisation-test p-values against `default` (`toolkit.compare`,
  Holm-corrected across the four systems compared with it);
- leave-one-collection-out: for each collection, the point each rule picks on the other collections' dev
  splits, scored on this collection's test split;
- the test queries whose relevant document only the dense list found (in its top 10, absent from BM25's 100)
  and where fusion ranked it under `default` and under the chosen point.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/dense_floor.py --stores /tmp/default/stores \
        --extra /tmp/trialBQ:manpages,debpkg,pkgsummary --markdown floor.md

`--extra ROOT:NAME,NAME` adds collections in BEIR layout at ROOT/NAME with stores ROOT/stores/NAME.duckdb
(`--extra NAME=DATASET[@STORE]` names one collection by path). Stores are opened read-only; every grid point
differs from `default` only in rescore fields, so each split is prepared once. Per-query values are written
to `--out` (parquet) so the tables can be redone without re-scoring (`--from-cache`).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from default_sweep import DEMO, REFERENCES, REL_THRESHOLD, RULES, SHARED, out_of_collection_rows, shortfall

from toolkit.compare import compare
from toolkit.config import load_config
from toolkit.loaders import Dataset
from toolkit.metrics import evaluate
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store

SHARED_COLLECTIONS = ["locomo", "cacm", "msmarco-dl19-5k", "vaswani", "demo"]
MEASURES = ["nDCG@10", "R@5"]
RRF_K = 60


def grid() -> dict[str, dict]:
    """`default` with its dense-weight floor moved; gap scale 0.16 and max weight 4 as shipped."""
    floors = {f"min {w}": w for w in (0.25, 0.38, 0.5, 0.6, 0.75, 1.0)}
    floors.update({f"min {(RRF_K + 1) / (RRF_K + n):.4f} (dense#1 > bm25#{n})": (RRF_K + 1) / (RRF_K + n)
                   for n in (100, 50, 30)})
    return {label: {"adapt.min_weight": w, "adapt.gap_scale": 0.16, "adapt.max_weight": 4.0} for label, w in floors.items()}


def collections(shared: Path, stores: Path, extra: list[str]) -> dict[str, tuple[Path, Path]]:
    """{name: (dataset folder, store file)}: the shared five, then each `--extra`."""
    out = {n: (DEMO if n == "demo" else shared / n, stores / f"{n}.duckdb") for n in SHARED_COLLECTIONS}
    for e in extra:
        if "=" in e:
            name, _, rest = e.partition("=")
            data, _, store = rest.partition("@")
            out[name] = (Path(data), Path(store) if store else stores / f"{name}.duckdb")
        else:
            root, _, names = e.rpartition(":")
            for name in names.split(","):
                out[name] = (Path(root) / name, Path(root) / "stores" / f"{name}.duckdb")
    return out


def score(colls: dict[str, tuple[Path, Path]], points: dict[str, dict]) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Per-query values [collection, split, system, qid, measure, value] of every reference and grid point (and
    the query's dense weight as measure "dense_weight"), and
    [collection, split, system, qid, doc_id, dense_rank, fused_rank, dense_weight] for relevant documents that the dense list
    put in its top 10 and BM25's list does not hold (fused_rank null: not in the run)."""
    base = load_config("default")
    rows, dense_only = [], []
    for name, (data, store) in colls.items():
        ds = Dataset.open(data)
        thr = REL_THRESHOLD.get(name, 1)
        for split in ("dev", "test"):
            qrels, queries = ds.qrels(split), ds.queries(split)
            queries = queries.join(qrels.select("qid").unique(), on="qid", how="semi")
            with Store(store, read_only=True) as st:
                prep = prepare(st, queries, base)
            c = prep.candidates.filter(pl.col("variant") == "orig").with_columns(pl.col("qid").cast(pl.Utf8))
            rel = qrels.filter(pl.col("rel") >= thr).select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8))
            dense = c.filter((pl.col("retriever") == "vec") & (pl.col("rank") <= 10)).group_by("qid", "doc_id").agg(
                pl.col("rank").min().alias("dense_rank"))
            lex = c.filter(pl.col("retriever") != "vec").select("qid", "doc_id").unique()
            only = rel.join(dense, on=["qid", "doc_id"]).join(lex, on=["qid", "doc_id"], how="anti")
            for label, updates in {**REFERENCES, **points}.items():
                res = rescore(prep, base.with_updates(updates), trace=False)
                run = res.run()
                pq_notes = res.per_query  # adapt off (the references): no dense_weight column
                weight = pl.col("dense_weight") if "dense_weight" in pq_notes.columns else pl.lit(None)
                w = pq_notes.select(pl.col("qid").cast(pl.Utf8), weight.cast(pl.Float64).alias("dense_weight"))
                pq = evaluate(run, qrels, MEASURES, rel_threshold=thr)
                pq = pl.concat([pq.select(pl.col("qid").cast(pl.Utf8), "measure", pl.col("value").cast(pl.Float64)),
                                w.select("qid", pl.lit("dense_weight").alias("measure"), pl.col("dense_weight").alias("value"))])
                rows.append(pq.with_columns(
                    pl.lit(name).alias("collection"), pl.lit(split).alias("split"), pl.lit(label).alias("system")))
                fused = run.select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("rank").alias("fused_rank"))
                dense_only.append(only.join(fused, on=["qid", "doc_id"], how="left").join(w, on="qid", how="left").with_columns(
                    pl.lit(name).alias("collection"), pl.lit(split).alias("split"), pl.lit(label).alias("system")))
            print(f"{split} {name}: {len(queries)} queries, {len(points) + len(REFERENCES)} configs", flush=True)
    cols = ["collection", "split", "system", "qid", "measure", "value"]
    dcols = ["collection", "split", "system", "qid", "doc_id", "dense_rank", "fused_rank", "dense_weight"]
    return pl.concat(rows).select(cols), pl.concat([d.select(dcols) for d in dense_only])


def means(per: pl.DataFrame, split: str, measure: str = "nDCG@10") -> dict[tuple[str, str], float]:
    """{(system, collection): mean of `measure`} on `split`."""
    m = per.filter((pl.col("split") == split) & (pl.col("measure") == measure)).group_by("system", "collection").agg(
        pl.col("value").mean())
    return {(s, c): v for s, c, v in m.iter_rows()}


def report(per: pl.DataFrame, dense_only: pl.DataFrame, names: list[str], points: list[str]) -> str:
    dev, test = means(per, "dev"), means(per, "test")
    cols = " | ".join(names)
    lines = ["### Grid points on dev, best first by each rule, and the same points on test (nDCG@10)", "",
             f"| point | split | {cols} | mean | >= better single | worst shortfall |",
             "|---|---|" + "---:|" * (len(names) + 3)]
    by_wins = sorted(points, key=lambda x: shortfall(dev, x, names)[:2], reverse=True)
    by_mean = sorted(points, key=lambda x: -shortfall(dev, x, names)[2])
    for label in list(REFERENCES) + by_wins:
        for split, t in (("dev", dev), ("test", test)):
            w, worst, mean = shortfall(t, label, names)
            vals = " | ".join(f"{t[(label, c)]:.4f}" for c in names)
            lines.append(f"| {label} | {split} | {vals} | {mean:.4f} | {w} | {worst:+.4f} |")
    chosen = RULES["most wins, then least shortfall"](dev, points, names)
    best_mean = RULES["best mean"](dev, points, names)
    lines += ["", f"Rule 'most wins, then least shortfall' on all {len(names)} dev splits picks **{chosen}**; "
              f"'best mean' picks **{best_mean}** (dev order by mean: {', '.join(by_mean[:4])}).", ""]

    systems = {"chosen": chosen, "default": "default", "bm25": "bm25", "dense": "dense", "rrf": "rrf"}
    lines += [f"### Test: chosen point ({chosen}) against `default`, BM25, dense and plain RRF "
              "(p: paired randomisation test against `default`, Holm across the four)", "",
              "| collection | queries | measure | " + " | ".join(f"{k} | p" if k != "default" else k for k in systems) + " |",
              "|---|---:|---|" + "---:|" * (2 * len(systems) - 1)]
    for c in names:
        t = per.filter((pl.col("split") == "test") & (pl.col("collection") == c))
        t = t.filter(pl.col("measure").is_in(MEASURES))
        frame = pl.concat([t.filter(pl.col("system") == s).with_columns(pl.lit(k).alias("system")) for k, s in systems.items()])
        sig = compare(frame.select("system", "qid", "measure", "value"), "default")
        for m in MEASURES:
            cells = []
            for k in systems:
                v = frame.filter((pl.col("system") == k) & (pl.col("measure") == m))["value"].mean()
                if k == "default":
                    cells.append(f"{v:.4f}")
                    continue
                r = sig.filter((pl.col("system") == k) & (pl.col("measure") == m))
                p = r["p_holm"][0] if len(r) else None
                cells.append(f"{v:.4f} | {'' if p is None else f'{p:.3g}'}{' *' if len(r) and r['significant'][0] else ''}")
            lines.append(f"| {c} | {t['qid'].n_unique()} | {m} | " + " | ".join(cells) + " |")

    lines += ["", "### Leave one collection out: the point picked on the other collections' dev splits, "
              "scored on this collection's test split (nDCG@10)", ""]
    lines += out_of_collection_rows(dev, test, points, names)

    low = (RRF_K + 1) / (RRF_K + 100)
    lines += ["", f"### Test queries whose relevant document only the dense list found (dense top 10, not in BM25's "
              f"100): its fused rank under `default` and under {chosen}", "",
              f"low w: `default` gave the query a dense weight below (k+1)/(k+100) = {low:.4f} (all queries / these).", "",
              "| collection | queries | low w: all / these | relevant docs | dense rank 1-4 | default: median rank | "
              "in top 10 | missing | chosen: median rank | in top 10 | missing |",
              "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for c in names:
        d = dense_only.filter((pl.col("split") == "test") & (pl.col("collection") == c))
        cells = []
        for s in ("default", chosen):
            r = d.filter(pl.col("system") == s)["fused_rank"]
            med = r.fill_null(10_000).median() if len(r) else None
            med_s = "" if med is None else (">100" if med > 100 else f"{med:.0f}")
            cells.append(f"{med_s} | {(r <= 10).sum()} | {r.null_count()}")
        first = d.filter(pl.col("system") == "default")
        wq = per.filter((pl.col("split") == "test") & (pl.col("collection") == c) & (pl.col("system") == "default")
                        & (pl.col("measure") == "dense_weight"))
        n_low = (wq["value"] < low).sum()
        these = first.filter(pl.col("dense_weight") < low)["qid"].n_unique()
        lines.append(f"| {c} | {first['qid'].n_unique()} | {n_low} / {these} | {len(first)} | "
                     f"{(first['dense_rank'] <= 4).sum()} | " + " | ".join(cells) + " |")

    lines += ["", "### Those documents on all test splits together, by grid point: fused rank", "",
              "| point | docs | median rank | in top 10 | in top 20 | in top 50 | missing (beyond 100) |",
              "|---|---:|---:|---:|---:|---:|---:|"]
    test_only = dense_only.filter(pl.col("split") == "test")
    for label in ["default", *points]:
        r = test_only.filter(pl.col("system") == label)["fused_rank"]
        lines.append(f"| {label} | {len(r)} | {r.fill_null(10_000).median():.0f} | {(r <= 10).sum()} | {(r <= 20).sum()} | "
                     f"{(r <= 50).sum()} | {r.null_count()} |")
    return "\n".join(lines)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stores", type=Path, required=True, help="Folder with NAME.duckdb of the shared collections.")
    ap.add_argument("--shared", type=Path, default=SHARED)
    ap.add_argument("--extra", action="append", default=[],
                    help="ROOT:NAME,NAME (data ROOT/NAME, store ROOT/stores/NAME.duckdb) or NAME=DATASET[@STORE].")
    ap.add_argument("--only", help="Comma-separated collections to use (default: all).")
    ap.add_argument("--out", type=Path, default=Path("/tmp/dense_floor.parquet"), help="Per-query values (cache).")
    ap.add_argument("--from-cache", action="store_true", help="Redo the tables from --out without re-scoring.")
    ap.add_argument("--markdown", type=Path)
    args = ap.parse_args()
    colls = collections(args.shared, args.stores, args.extra)
    if args.only:
        colls = {n: colls[n] for n in args.only.split(",")}
    points = grid()
    dense_path = args.out.with_name(args.out.stem + ".dense_only.parquet")
    if args.from_cache:
        per, dense_only = pl.read_parquet(args.out), pl.read_parquet(dense_path)
    else:
        per, dense_only = score(colls, points)
        per.write_parquet(args.out)
        dense_only.write_parquet(dense_path)
    md = report(per, dense_only, list(colls), list(points))
    print(md)
    if args.markdown:
        args.markdown.write_text(md + "\n")


if __name__ == "__main__":
    main()
