"""Learned fusion judged leave-one-collection-out: it must help on collections it never saw.

For each of the five collections (four shared + the demo): train `toolkit.train_fusion.fit` on the dev
splits of the OTHER four, then prepare + rescore this collection's test split and evaluate nDCG@10 and R@5
(binary measures at grade >= 2 on TREC DL) for:

- bm25-only, vector-only (the better of the two on test is the "single list" baseline, as in quality.py),
- hybrid-rrf (plain RRF, k = 60, equal weights),
- tuned (`toolkit.tune` of qmd on this collection's dev split: 40 TPE trials, 5-fold CV, fixed-setting check),
- learned (LOO): the model trained on the other four collections (default recipe: `DEFAULT_FEATURES`, RRF prior 2),
- learned (LOO, portable): the same with `TRANSFER_FEATURES` and no prior,
- learned (LOO, portable + pseudo): that, plus `--pseudo` pseudo-queries cut from this collection's corpus
  (label-free: no judgement of the target is read),
- routed RRF (LOO): plain RRF with the LOO model's router weighting BM25 vs dense per query,
- learned (own dev): a model trained on this collection's dev split only (in-collection reference).

p-values: paired randomisation test (toolkit.compare) of each system against the better single list and
against plain RRF, Holm-corrected across the systems of a table. Calibration: ECE (10 bins) of `score_prob`
over every scored test candidate, out of collection (LOO model) and in collection (own-dev model). Times:
pooled training on all five dev splits, and `rescore` with the learned method on the test split (first
call: model scoring of every candidate; later calls: a slider change).

    .venv/bin/python benchmarks/learned_fusion.py --stores /tmp/ltr --workdir /tmp/ltr/loo --markdown loo.md

Stores (one per collection, `<name>.duckdb`) are copies of /work/stores/*.duckdb or built by `hrt ingest`.
More collections join with `--extra FOLDER:a,b[:STORES]` (BEIR folders FOLDER/a, FOLDER/b with dev and test
qrels; stores STORES/a.duckdb, default in --stores): each is then held out in turn and trains the others' LOO models.
`--presets default` adds preset rows (not trained, same for every fold). `--seeds 0,1,2,3,4` trains the LOO model
once per seed and fold: the learned (LOO) row is then the per-query mean over the seeds (p-values on those means),
and a table lists each seed's nDCG@10, so that one seed's luck decides no win. `--targets a,b` holds out only those
collections (every collection still trains the others' models).
The test split is used for nothing but the final numbers.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
import polars as pl

from toolkit import calibration
from toolkit.compare import compare
from toolkit.config import load_config
from toolkit.learned_fusion import scored_for
from toolkit.loaders import Dataset
from toolkit.ltr_features import RELATIVE_FEATURES
from toolkit.metrics import evaluate
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store
from toolkit.train_fusion import DEFAULT_FEATURES, TRANSFER_FEATURES, collect, collect_pseudo, fit
from toolkit.tune import tune

MEASURES = ["nDCG@10", "R@5"]
COLLECTIONS = ["locomo", "cacm", "msmarco-dl19-5k", "vaswani", "demo"]
REL_THRESHOLD = {"msmarco-dl19-5k": 2}


EXTRA_DIRS: dict[str, Path] = {}  # collection -> its folder, from --extra (any BEIR-layout folder with dev/test qrels)
EXTRA_STORES: dict[str, Path] = {}  # collection -> its store, from --extra's optional third part


def dataset_dir(name: str, shared: Path) -> Path:
    if name in EXTRA_DIRS:
        return EXTRA_DIRS[name]
    return Path(__file__).resolve().parents[1] / "data" / "demo" if name == "demo" else shared / name


def store_path(name: str, stores: Path) -> Path:
    return EXTRA_STORES.get(name, stores / f"{name}.duckdb")


def add_extra(spec: str) -> list[str]:
    """`FOLDER:a,b[:STORES]`: collections a, b at FOLDER/a, FOLDER/b; stores STORES/a.duckdb (default: --stores)."""
    parts = spec.split(":")
    if len(parts) not in (2, 3) or not parts[1]:
        raise SystemExit(f"--extra {spec!r}: expected FOLDER:name1,name2[:STORES]")
    folder, extra = Path(parts[0]), parts[1].split(",")
    for n in extra:
        EXTRA_DIRS[n] = folder / n
        if len(parts) == 3:
            EXTRA_STORES[n] = Path(parts[2]) / f"{n}.duckdb"
    return extra


# Feature sets compared by `--select` (leave-one-collection-out on the DEV splits, never on test).
RAW_SCALE = {"lex_score", "q_idf_mean", "q_idf_max", "doc_len", "doc_chunks", "chunk_ord", "q_terms", "q_tokens"}
RELATIVE = set(RELATIVE_FEATURES)  # per-query twins
OLD_FEATURES = list(DEFAULT_FEATURES)  # the 38 of the first recipe, still the default
FEATURE_SETS = {
    "transfer": list(TRANSFER_FEATURES),  # the default
    "transfer-old": [f for f in TRANSFER_FEATURES if f not in RELATIVE],  # without the per-query relative twins
    "all": OLD_FEATURES,  # the first recipe's 38
    "portable": [f for f in OLD_FEATURES if f not in RAW_SCALE],
}
PARAM_SETS = {"leaves15": {}}  # 4, 7 and 31 leaves and stronger L2 were tried: none better (RESULTS.md)
PRIORS = (0.0, 2.0)


def select(dev: dict, dev_q: dict, thresholds: dict, seed: int, say, balance: float = 0.5) -> None:
    """nDCG@10 on each collection's DEV split of models trained on the other collections' dev splits."""
    names = list(dev)
    say("\n### Model selection: leave-one-collection-out on the dev splits (nDCG@10)\n",
        "| features | params | RRF prior | " + " | ".join(names) + " | mean |", "|---|---|---:|" + "---:|" * (len(names) + 1))  # fmt: skip
    base = {n: float(evaluate(_order(dev[n], "rrf"), dev_q[n].select("qid", "doc_id", "rel"), ["nDCG@10"], rel_threshold=thresholds[n])["value"].mean()) for n in names}
    say("| (plain RRF) | | | " + " | ".join(f"{base[n]:.4f}" for n in names) + f" | {np.mean(list(base.values())):.4f} |")
    for fs, feats in FEATURE_SETS.items():
        for ps, params in PARAM_SETS.items():
            for prior in PRIORS:
                vals = {}
                for target in names:
                    others = [n for n in names if n != target]
                    m, _ = fit(pl.concat([dev[n] for n in others]), pl.concat([dev_q[n] for n in others]), features=feats,
                               seed=seed, rel_threshold=thresholds, params=params, prior=prior, balance=balance)  # fmt: skip
                    d = dev[target].with_columns(pl.Series("_s", m.predict(dev[target])))
                    vals[target] = float(evaluate(_order(d, "_s"), dev_q[target].select("qid", "doc_id", "rel"), ["nDCG@10"],
                                                  rel_threshold=thresholds[target])["value"].mean())  # fmt: skip
                say(f"| {fs} | {ps} | {prior} | " + " | ".join(f"{vals[n]:.4f}" for n in names) + f" | {np.mean(list(vals.values())):.4f} |")


def _order(d: pl.DataFrame, col: str) -> pl.DataFrame:
    return (
        d.select("qid", "doc_id", pl.col(col).cast(pl.Float64).alias("score"))
        .sort(["qid", "score", "doc_id"], descending=[False, True, False])
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank"))
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    ap.add_argument("--stores", default="/tmp/stores", help="Folder with <collection>.duckdb for each collection.")
    ap.add_argument("--collections", default=",".join(COLLECTIONS))
    ap.add_argument("--workdir", default="/tmp/learned_fusion", help="Models and tuned configs are kept here.")
    ap.add_argument("--tune-budget", type=int, default=40, help="TPE trials for the tuned row (0: no tuned row).")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--seeds", default="", help="Comma-separated seeds for the learned (LOO) row: one LOO model per seed "
                    "and fold, the row's per-query values the mean over the seeds; the first is every other row's seed "
                    "(default: --seed alone).")
    ap.add_argument("--markdown", default=None, help="Also write the tables to this file.")
    ap.add_argument("--pseudo", type=int, default=300, help="Pseudo-queries of the target corpus for the adapted row (0: no row).")
    ap.add_argument("--select", action="store_true", help="Only compare feature/parameter sets, LOO on the dev splits.")
    ap.add_argument("--extra", action="append", default=[], metavar="FOLDER:NAMES[:STORES]",
                    help="More collections (comma-separated NAMES, each a BEIR folder FOLDER/name with dev and test qrels), "
                         "added to --collections; their stores are STORES/<name>.duckdb (default: in --stores). Repeatable.")  # fmt: skip
    ap.add_argument("--targets", default="", help="Comma-separated collections to hold out (default: every one); the "
                    "others still train each held-out one's LOO model.")
    ap.add_argument("--presets", default="", help="Comma-separated config presets added as rows (e.g. default).")
    ap.add_argument("--balance", type=float, default=0.5,
                    help="fit's per-query weight exponent when pooling collections: (largest collection's query count / "
                         "own count) ** balance; 0 weighs every query the same, 1 every collection the same in total.")
    args = ap.parse_args()
    seeds = [int(x) for x in args.seeds.split(",") if x.strip()] or [args.seed]
    args.seed = seeds[0]
    shared, stores, work = Path(args.shared), Path(args.stores), Path(args.workdir)
    work.mkdir(parents=True, exist_ok=True)
    names = args.collections.split(",")
    for spec in args.extra:
        names += [n for n in add_extra(spec) if n not in names]
    base = load_config("learned")
    lines: list[str] = []

    def say(*ls: str) -> None:
        print("\n".join(ls), flush=True)
        lines.extend(ls)

    # Dev features of every collection (stage cache: a second run loads them).
    dev, dev_q = {}, {}
    for n in names:
        with Store(store_path(n, stores)) as st:
            t = time.perf_counter()
            dev[n], dev_q[n] = collect(st, dataset_dir(n, shared), split="dev", config=base, name=n, progress=False)
            print(f"{n}: dev features {len(dev[n])} rows in {time.perf_counter() - t:.1f}s", flush=True)
    thresholds = {n: REL_THRESHOLD.get(n, 1) for n in names}
    if args.select:
        select(dev, dev_q, thresholds, args.seed, say, args.balance)
        if args.markdown:
            Path(args.markdown).write_text("\n".join(lines) + "\n")
        return

    t = time.perf_counter()
    pooled, prep_rep = fit(pl.concat(list(dev.values())), pl.concat(list(dev_q.values())), seed=args.seed, rel_threshold=thresholds, balance=args.balance)
    t_pooled = time.perf_counter() - t
    pooled.save(work / "pooled.json")
    say(f"\npooled training on the dev splits of {', '.join(names)}: {t_pooled:.1f}s wall "
        f"({prep_rep.best_iteration} trees; fit report {prep_rep.seconds['train']:.1f}s; balance {args.balance})")  # fmt: skip

    # One seed's leave-one-out moved a collection's nDCG@10 by up to 0.016 (manhelp; CACM 0.007, as much as its gap to
    # plain RRF): the headline row can average several seeds' models, query by query, so that a win or a loss is the
    # recipe's, not one draw's. The first seed is every other row's.
    seed_row = {s: f"learned (LOO, seed {s})" if i else "learned (LOO)" for i, s in enumerate(seeds)}
    summary, eces, timing, per_seed = [], [], [], []
    targets = [t for t in args.targets.split(",") if t] or names
    if unknown := [t for t in targets if t not in names]:
        ap.error(f"--targets {', '.join(unknown)}: not among the collections ({', '.join(names)})")
    for target in targets:
        others = [n for n in names if n != target]
        train_d, train_q = pl.concat([dev[n] for n in others]), pl.concat([dev_q[n] for n in others])
        t = time.perf_counter()
        loo, _ = fit(train_d, train_q, seed=args.seed, rel_threshold=thresholds, balance=args.balance)
        t_loo = time.perf_counter() - t
        loo_path = loo.save(work / f"loo-{target}.json")
        more = {s: fit(train_d, train_q, seed=s, rel_threshold=thresholds, balance=args.balance)[0].save(work / f"loo-{target}-seed{s}.json")
                for s in seeds[1:]}  # fmt: skip
        port, _ = fit(train_d, train_q, seed=args.seed, rel_threshold=thresholds, balance=args.balance, features=TRANSFER_FEATURES, prior=0.0)
        port_path = port.save(work / f"loo-portable-{target}.json")
        own, _ = fit(dev[target], dev_q[target], seed=args.seed, rel_threshold=thresholds, balance=args.balance)
        own_path = own.save(work / f"own-{target}.json")
        ds = Dataset.open(dataset_dir(target, shared))
        queries, qrels = ds.queries("test"), ds.qrels("test")
        rel_t = thresholds[target]
        configs = {
            "bm25-only": load_config("bm25-only"),
            "vector-only": load_config("vector-only"),
            "hybrid-rrf": load_config("hybrid-rrf"),
            "learned (LOO)": base.with_updates({"fusion.model": str(loo_path)}),
            "learned (LOO, portable)": base.with_updates({"fusion.model": str(port_path)}),
            "routed RRF (LOO)": load_config("hybrid-rrf").with_updates({"fusion.router": True, "fusion.model": str(loo_path)}),
            "learned (own dev)": base.with_updates({"fusion.model": str(own_path)}),
            **{seed_row[s]: base.with_updates({"fusion.model": str(path)}) for s, path in more.items()},
        }
        rows = []
        for preset in filter(None, args.presets.split(",")):
            configs[preset] = load_config(preset)
        with Store(store_path(target, stores)) as st:
            if args.pseudo:  # label-free adaptation: the target corpus's own pseudo-queries join the training data
                pd_, pq_ = collect_pseudo(st, args.pseudo, config=base, name=f"{target}~pseudo", seed=args.seed)
                adapted, _ = fit(pl.concat([train_d, pd_.select(dev[target].columns)]),
                                 pl.concat([train_q, pq_.select(dev_q[target].columns)]), seed=args.seed, rel_threshold=thresholds, balance=args.balance,
                                 features=TRANSFER_FEATURES, prior=0.0)  # fmt: skip
                configs["learned (LOO, portable + pseudo)"] = base.with_updates({"fusion.model": str(adapted.save(work / f"loo-pseudo-{target}.json"))})
            if args.tune_budget:
                tuned_path = work / f"tuned-{target}.yaml"
                if not tuned_path.exists():
                    tune(st, ds.root, split="dev", base="qmd", budget=args.tune_budget, out=tuned_path, seed=args.seed, progress=False)
                configs["tuned (dev)"] = load_config(tuned_path)
            for label, cfg in configs.items():
                prep = prepare(st, queries, cfg)
                t0 = time.perf_counter()
                res = rescore(prep, cfg, trace=False)
                first = time.perf_counter() - t0
                if label in ("learned (LOO)", "learned (own dev)"):
                    slider = []
                    for bucket in (0.7, 0.6, 0.5):  # a slider change: the model's scores are reused
                        c2 = cfg.with_updates({"rerank.buckets": [[3, bucket], [10, 0.6], [float("inf"), 0.4]]})
                        t0 = time.perf_counter()
                        rescore(prep, c2, trace=False)
                        slider.append(time.perf_counter() - t0)
                    rrf_cfg = load_config("hybrid-rrf")
                    t0 = time.perf_counter()
                    rescore(prep, rrf_cfg, trace=False)
                    t_rrf = time.perf_counter() - t0
                    cands = len(prep.ltr_features)
                    timing.append({"collection": target, "system": label, "candidates": cands, "first_ms": first * 1000,
                                   "slider_ms": float(np.median(slider)) * 1000, "rrf_ms": t_rrf * 1000})  # fmt: skip
                    scored = scored_for(prep, cfg.fusion.model)
                    y = calibration.labelled(scored, qrels, rel_t)
                    p = scored["score_prob"].fill_null(0.0).to_numpy()
                    eces.append({"collection": target, "model": label, "ece": calibration.ece(p, y),
                                 "mean_prob": float(p.mean()), "base_rate": float(y.mean())})  # fmt: skip
                pq = evaluate(res.run(), qrels, MEASURES, rel_threshold=rel_t)
                rows.append(pq.with_columns(pl.lit(label).alias("system")))
        per = pl.concat(rows)
        if len(seeds) > 1:
            runs = per.filter(pl.col("system").is_in(list(seed_row.values())))
            per_seed += [{"collection": target, "seed": s, "nDCG@10": runs.filter((pl.col("system") == seed_row[s]) & (pl.col("measure") == "nDCG@10"))["value"].mean()}
                         for s in seeds]  # fmt: skip
            avg = runs.group_by("qid", "measure").agg(pl.col("value").mean()).with_columns(pl.lit("learned (LOO)").alias("system"))
            per = pl.concat([per.filter(~pl.col("system").is_in(list(seed_row.values()))), avg.select(per.columns)])
        means = per.group_by("system", "measure").agg(pl.col("value").mean()).pivot(on="measure", index="system", values="value")
        single = means.filter(pl.col("system").is_in(["bm25-only", "vector-only"])).sort("nDCG@10", descending=True)["system"][0]
        long = per.select("system", "qid", "measure", "value")
        vs_single = compare(long, single).select("system", "measure", pl.col("p_holm").alias("p_single"))
        vs_rrf = compare(long, "hybrid-rrf").select("system", "measure", pl.col("p_holm").alias("p_rrf"))
        over = f"; learned (LOO): per-query mean over seeds {', '.join(map(str, seeds))}" if len(seeds) > 1 else ""
        say(f"\n### {target} (test, {per['qid'].n_unique()} queries; LOO model trained on {', '.join(others)} dev in {t_loo:.1f}s{over})\n",
            "| system | nDCG@10 | p vs single | p vs RRF | R@5 | p vs single | p vs RRF |", "|---|---:|---:|---:|---:|---:|---:|")  # fmt: skip
        presets = [p for p in args.presets.split(",") if p]
        order = ["bm25-only", "vector-only", "hybrid-rrf", *presets, "tuned (dev)", "learned (LOO)", "learned (LOO, portable)", "learned (LOO, portable + pseudo)", "routed RRF (LOO)", "learned (own dev)"]
        for s in [o for o in order if o in means["system"].to_list()]:
            cells = []
            for m in MEASURES:
                v = means.filter(pl.col("system") == s)[m][0]
                ps = vs_single.filter((pl.col("system") == s) & (pl.col("measure") == m))["p_single"]
                pr = vs_rrf.filter((pl.col("system") == s) & (pl.col("measure") == m))["p_rrf"]
                fmt = lambda x: f"{x[0]:.3g}" if len(x) and x[0] is not None else "-"  # noqa: E731
                cells += [f"{v:.4f}", fmt(ps), fmt(pr)]
            say(f"| {s}{' (single)' if s == single else ''} | " + " | ".join(cells) + " |")
            summary.append({"collection": target, "system": s, "single": single,
                            **{m: means.filter(pl.col("system") == s)[m][0] for m in MEASURES}})  # fmt: skip

    sm = pl.DataFrame(summary)
    say("\n### Summary: nDCG@10 on each test split\n")
    wide = sm.pivot(on="system", index="collection", values="nDCG@10")
    presets = [p for p in args.presets.split(",") if p]
    cols = [c for c in ["bm25-only", "vector-only", "hybrid-rrf", *presets, "tuned (dev)", "learned (LOO)", "learned (LOO, portable)", "learned (LOO, portable + pseudo)", "routed RRF (LOO)", "learned (own dev)"] if c in wide.columns]
    say("| collection | " + " | ".join(cols) + " |", "|---|" + "---:|" * len(cols))
    for r in wide.iter_rows(named=True):
        say(f"| {r['collection']} | " + " | ".join(f"{r[c]:.4f}" for c in cols) + " |")

    def wins(system: str, peers: list[str], m: str) -> int:
        """Collections where `system` beats the best of `peers` on measure `m`."""
        value = lambda c, systems: sm.filter((pl.col("collection") == c) & pl.col("system").is_in(systems))[m].max()  # noqa: E731
        return sum(1 for c in targets if value(c, [system]) > value(c, peers))

    for m in MEASURES:
        say(f"\n{m}, wins over the better single list / plain RRF:")
        for s_ in [c for c in cols if c.startswith(("learned", "routed"))]:
            say(f"- {s_}: {wins(s_, ['bm25-only', 'vector-only'], m)}/{len(targets)} / {wins(s_, ['hybrid-rrf'], m)}/{len(targets)}")

    if per_seed:
        ps = pl.DataFrame(per_seed).pivot(on="seed", index="collection", values="nDCG@10")
        say("\n### learned (LOO), nDCG@10 of each seed's models (the row above is their per-query mean)\n",
            "| collection | " + " | ".join(f"seed {s}" for s in seeds) + " | mean | max - min |", "|---|" + "---:|" * (len(seeds) + 2))
        for r in ps.iter_rows(named=True):
            v = [r[str(s)] for s in seeds]
            say(f"| {r['collection']} | " + " | ".join(f"{x:.4f}" for x in v) + f" | {np.mean(v):.4f} | {max(v) - min(v):.4f} |")

    say("\n### Calibration: ECE of score_prob over every scored test candidate (10 bins)\n",
        "| collection | model | ECE | mean score_prob | share relevant |", "|---|---|---:|---:|---:|")  # fmt: skip
    for e in eces:
        say(f"| {e['collection']} | {e['model']} | {e['ece']:.4f} | {e['mean_prob']:.4f} | {e['base_rate']:.4f} |")
    say("\n### Time of rescore with the learned method (ms; first = model scoring of every candidate)\n",
        "| collection | model | candidates | first rescore | slider change (median of 3) | plain RRF rescore |", "|---|---|---:|---:|---:|---:|")  # fmt: skip
    for r in timing:
        say(f"| {r['collection']} | {r['system']} | {r['candidates']} | {r['first_ms']:.1f} | {r['slider_ms']:.1f} | {r['rrf_ms']:.1f} |")
    if args.markdown:
        Path(args.markdown).write_text("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
