"""Does a recency prior help, and for which questions? Tune the half-life on dev, report on test by type.

For each base config: prepare the dev queries once, re-score them with the recency prior
(`priors.recency_field`) at every half-life of --half-lives (the stage is live: no new retrieval), pick the
half-life with the best mean nDCG@10 over all dev queries, then run test with and without the prior and
compare per question type (query metadata field --group-by) with the paired randomisation test
(toolkit.compare; p per type, and Holm-corrected across the types of a base config).

The reference time is each query's own `metadata.date` when it has one (LongMemEval-style data). LoCoMo's
questions carry no date: `--query-date last-session` dates every question with the last session of its
conversation (its scope), which is when the questions are asked in the LoCoMo setting. With floor 0 the
reference only matters for documents dated after it (no penalty); rankings within a query otherwise depend
on the document ages' differences, not on the reference.

    cp /work/stores/locomo.duckdb /tmp/priors/locomo.duckdb   # opening it types the old store's dates in place
    .venv/bin/python benchmarks/priors.py --dataset ../shared/datasets/locomo --store /tmp/priors/locomo.duckdb \\
        --group-by category --query-date last-session
    .venv/bin/python benchmarks/knowledge_update.py --out /tmp/ku
    .venv/bin/python benchmarks/priors.py --dataset /tmp/ku --store /tmp/ku.duckdb --group-by question_type
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import polars as pl

from toolkit.compare import compare, holm
from toolkit.config import load_config
from toolkit.loaders import Dataset, load_corpus
from toolkit.metrics import evaluate
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store

MEASURES = ["nDCG@10", "R@5", "MRR@10"]


def date_by_last_session(st: Store, queries: pl.DataFrame, field: str) -> pl.DataFrame:
    """Queries with `metadata.date` set to the latest document date of their scope (ISO, UTC)."""
    last = (
        st.doc_values().filter((pl.col("field") == field) & pl.col("ts").is_not_null())
        .join(st.doc_sources().select("doc_id", "scope"), on="doc_id")
        .group_by("scope").agg(pl.col("ts").max().alias("last"))
    )
    got = dict(last.iter_rows())
    meta = []
    for scope, m in zip(queries["scope"].to_list(), queries["metadata"].to_list(), strict=True):
        d = json.loads(m or "{}")
        if scope in got:
            d["date"] = got[scope].isoformat()
        meta.append(json.dumps(d))
    return queries.with_columns(pl.Series("metadata", meta, dtype=pl.Utf8))


def groups(queries: pl.DataFrame, field: str) -> pl.DataFrame:
    return queries.select("qid", pl.col("metadata").map_elements(lambda m: str(json.loads(m or "{}").get(field)), return_dtype=pl.Utf8).alias("group"))


def by_group(pq: pl.DataFrame, grp: pl.DataFrame, measure: str) -> dict[str, float]:
    """Mean of `measure` per group and over all queries."""
    m = pq.filter(pl.col("measure") == measure).join(grp, on="qid")
    out = dict(m.group_by("group").agg(pl.col("value").mean()).iter_rows())
    out["all"] = m["value"].mean()
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--dataset", required=True, type=Path)
    ap.add_argument("--store", required=True, type=Path, help="A store file of your own (a copy): the stage cache writes into it.")
    ap.add_argument("--base", default="bm25-only,hybrid-rrf,qmd", help="Comma-separated base configs.")
    ap.add_argument("--group-by", default="category", help="Query metadata field with the question type.")
    ap.add_argument("--query-date", choices=["own", "last-session"], default="own")
    ap.add_argument("--date-field", default="date", help="Document date field (priors.recency_field).")
    ap.add_argument("--half-lives", default="1,7,30,90,365,1000,3000,10000,30000", help="Half-lives (days) tried on dev.")
    ap.add_argument("--floors", default="0,0.5,0.8", help="priors.recency_floor values tried on dev (with every half-life).")
    ap.add_argument("--out", type=Path, default=None, help="JSON file for every number printed.")
    a = ap.parse_args()

    ds = Dataset.open(a.dataset)
    grid = [(float(h), float(f)) for f in a.floors.split(",") for h in a.half_lives.split(",")]
    report: dict = {"dataset": str(a.dataset), "query_date": a.query_date, "bases": {}}
    with Store(a.store) as st:
        t = time.perf_counter()
        rep = st.ingest(load_corpus(ds.root), progress=True)
        print(f"ingest: {rep.summary()} ({time.perf_counter() - t:.1f} s)", flush=True)
        n_dated = st.doc_values().filter((pl.col("field") == a.date_field) & pl.col("ts").is_not_null()).height
        print(f"documents with a typed {a.date_field}: {n_dated}", flush=True)
        split_q = {}
        for split in ("dev", "test"):
            q = ds.queries(split)
            if a.query_date == "last-session":
                q = date_by_last_session(st, q, a.date_field)
            split_q[split] = q
        for base_name in a.base.split(","):
            base = load_config(base_name)
            prior = {"priors.recency_field": a.date_field}
            # Dev: one prepare, one rescore per (half-life, floor).
            q, qrels = split_q["dev"], ds.qrels("dev")
            grp = groups(q, a.group_by)
            prep = prepare(st, q, base)
            dev = {"none": by_group(evaluate(rescore(prep, base, trace=False).run(10), qrels, MEASURES), grp, "nDCG@10")}
            for hl, floor in grid:
                cfg = base.with_updates({**prior, "priors.recency_half_life_days": hl, "priors.recency_floor": floor})
                dev[(hl, floor)] = by_group(evaluate(rescore(prep, cfg, trace=False).run(10), qrels, MEASURES), grp, "nDCG@10")
            best = max(grid, key=lambda k: dev[k]["all"])
            kinds = sorted(k for k in dev["none"] if k != "all")
            # Types whose dev mean the chosen setting raised: the prior is routed to them (the type is known).
            helped = [k for k in kinds if dev[best][k] > dev["none"][k]]
            print(f"\n{base_name}: dev nDCG@10 by (half-life days, floor); best overall {best}; it helps on dev: {helped}", flush=True)
            print("half-life,floor  " + "  ".join(f"{k:>16}" for k in ["all", *kinds]))
            for h, row in dev.items():
                print(f"{h!s:>15}  " + "  ".join(f"{row.get(k, float('nan')):>16.4f}" for k in ["all", *kinds]))
            # Test: without vs with the prior at the half-life chosen on dev.
            q, qrels = split_q["test"], ds.qrels("test")
            grp = groups(q, a.group_by)
            prep = prepare(st, q, base)
            cfg = base.with_updates({**prior, "priors.recency_half_life_days": best[0], "priors.recency_floor": best[1]})
            t = time.perf_counter()
            with_prior = rescore(prep, cfg, trace=False)
            took = time.perf_counter() - t
            runs = {"base": rescore(prep, base, trace=False), "recency": with_prior}
            pq = pl.concat([evaluate(r.run(), qrels, MEASURES).with_columns(pl.lit(s).alias("system")) for s, r in runs.items()])
            # Routed: the prior only on the question types it helped on dev, the base run elsewhere.
            on = grp.filter(pl.col("group").is_in(helped))["qid"].implode()
            routed = pq.filter(((pl.col("system") == "recency") & pl.col("qid").is_in(on)) | ((pl.col("system") == "base") & ~pl.col("qid").is_in(on)))
            pq = pl.concat([pq, routed.with_columns(pl.lit("recency routed by type").alias("system"))])
            rows = []
            for g in ["all", *sorted(grp["group"].unique().to_list())]:
                ids = grp["qid"] if g == "all" else grp.filter(pl.col("group") == g)["qid"]
                c = compare(pq.filter(pl.col("qid").is_in(ids.implode())), "base")
                for r in c.iter_rows(named=True):
                    rows.append({"group": g, "n": len(ids), **{k: r[k] for k in ("system", "measure", "baseline_mean", "mean", "delta", "wins", "losses", "p_value")}})
            res = pl.DataFrame(rows)
            nd = res.filter((pl.col("measure") == "nDCG@10") & (pl.col("group") != "all") & (pl.col("system") == "recency"))
            res = res.join(nd.select("group", "system", pl.Series("p_holm_types", holm(nd["p_value"].to_numpy()))), on=["group", "system"], how="left")
            print(f"{base_name}: test, recency (half-life {best[0]} d, floor {best[1]}; chosen on dev) vs no prior; "
                  f"rescore with the prior {took * 1000:.0f} ms")
            with pl.Config(tbl_rows=100, tbl_cols=20, tbl_width_chars=220, float_precision=4):
                print(res.filter(pl.col("measure") == "nDCG@10").sort("system", maintain_order=True))
            report["bases"][base_name] = {"dev": {str(k): v for k, v in dev.items()}, "best": best, "helped_on_dev": helped,
                                          "test": res.to_dicts(), "rescore_ms": took * 1000}
    if a.out:
        a.out.write_text(json.dumps(report, indent=2, default=str))
        print(f"-> {a.out}")


if __name__ == "__main__":
    main()
