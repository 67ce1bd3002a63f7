"""Retrieval quality of every preset, a config tuned on dev, and that config with a reranker trained on dev,
on each shared collection's test split; with the time each step took.

For each collection: ingest (cached), tune the `qmd` preset's fusion fields on the dev split (TPE, 5-fold
CV; `toolkit.tune`, which keeps a fixed setting such as one list alone when the search loses to it on
held-out folds), train a CrossEncoder reranker on the dev judgements (`toolkit.train`, held-out dev
queries for early stopping), then prepare + rescore each config over the test queries, evaluate
nDCG@10, R@5, R@10, MRR@10 (binary measures at grade >= 2 on TREC DL), and test each config against the
better single retriever (bm25-only or vector-only, chosen by nDCG@10) with a paired randomisation test and
Holm correction across configs.

    .venv/bin/python benchmarks/quality.py --stores /tmp/stores --workdir /tmp/quality
    .venv/bin/python benchmarks/quality.py --no-tune --no-train        # presets only
    .venv/bin/python benchmarks/quality.py --extra mine=my.yaml        # more configs ({name} = collection)

Tuned configs and reranker models are kept in --workdir and reused by a second run (delete to redo). The
test split is never used for any choice: tuning and early stopping both see dev queries only.
"""

from __future__ import annotations

import argparse
import json
import math
import time
from pathlib import Path

import polars as pl

from toolkit.compare import compare
from toolkit.config import list_presets, load_config
from toolkit.loaders import Dataset, load_corpus
from toolkit.metrics import evaluate
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store
from toolkit.train import recommend_for_model, train_reranker
from toolkit.tune import tune

MEASURES = ["nDCG@10", "R@5", "R@10", "MRR@10"]
COLLECTIONS = ["locomo", "cacm", "vaswani", "msmarco-dl19-5k"]
REL_THRESHOLD = {"msmarco-dl19-5k": 2}
DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"  # `--collections demo`: the repository's demo


def run_collection(
    name: str, shared: Path, stores: Path, configs: dict[str, str], split: str, *, workdir: Path, tune_budget: int,
    train: bool, epochs: int, pseudo: int | str, steps: list[dict],
) -> pl.DataFrame:
    ds = Dataset.open(DEMO if name == "demo" else shared / name)
    qrels = ds.qrels(split)
    queries = ds.queries(split)
    rows = []

    def timed(step: str, fn):
        t = time.perf_counter()
        out = fn()
        steps.append({"collection": name, "step": step, "seconds": time.perf_counter() - t})
        return out

    configs = {label: load_config(src.format(name=name)) for label, src in configs.items()}
    with Store(stores / f"{name}.duckdb") as st:
        timed("ingest (chunk, embed, index; cached after the first run)", lambda: st.ingest(load_corpus(ds.root), progress=True))
        if tune_budget:
            tuned_path = workdir / f"tuned-{name}.yaml"
            if not tuned_path.exists():
                rep = timed(f"tune on dev (TPE {tune_budget} trials, 5-fold CV)", lambda: tune(
                    st, ds.root, split="dev", base="qmd", budget=tune_budget, out=tuned_path, seed=0)[1])
                print(f"{name}: tuned on dev: base {rep.base_dev:.4f} -> best {rep.best_dev:.4f} ({rep.chosen}); "
                      f"CV held-out: search {rep.cv_heldout_search:.4f}, best fixed setting "
                      f"{rep.cv_heldout_anchors:.4f}; fixed settings on dev {rep.anchors}", flush=True)
            configs["tuned"] = load_config(tuned_path)
            # What the tuner kept ("search", or the fixed setting that beat it on held-out folds), for the table.
            tuned_label = f"tuned ({json.loads(tuned_path.with_suffix('.report.json').read_text()).get('chosen', 'search')})"
            if train:
                model = workdir / f"reranker-{name}"
                if not (model / "training_report.json").exists():
                    trep = timed(f"train reranker on dev ({epochs} epochs)", lambda: train_reranker(
                        st, ds.root, split="dev", out=model, epochs=epochs, seed=0, first_stage=tuned_path,
                        pseudo=pseudo))
                    print(f"{name}: {trep.summary()}", flush=True)
                rr = {"rerank.provider": "cross-encoder", "rerank.model": str(model), "rerank.blend": "position",
                      "rerank.top_n": 40}
                configs["tuned+reranker (QMD blend)"] = configs["tuned"].with_updates(
                    {**rr, "name": "tuned+reranker", "rerank.buckets": [[3, 0.75], [10, 0.60], [math.inf, 0.40]]})
                # The blend the trainer chose on its held-out dev queries (retrieval only if the reranker
                # did not help there); computed now for models trained before the trainer recorded it.
                rep = timed("reranker: blend choice on held-out dev", lambda: recommend_for_model(st, ds.root, model, tuned_path))
                configs["tuned+reranker (blend chosen on dev)"] = configs["tuned"].with_updates(
                    {**rr, "name": "tuned+reranker-dev-blend", "rerank.buckets": [list(b) for b in rep["recommended_buckets"]]})
                print(f"{name}: blend chosen on held-out dev: {rep['recommended_buckets']} ({rep['blend_grid']})", flush=True)
        if "tuned" in configs:
            configs = {(tuned_label if k == "tuned" else k): v for k, v in configs.items()}
        for label, cfg in configs.items():
            t = time.perf_counter()
            prep = timed(f"candidate lists + stage cache: {label}", lambda cfg=cfg: prepare(st, queries, cfg))
            res = rescore(prep, cfg, trace=cfg.rerank.provider != "none")
            took = time.perf_counter() - t
            pq = evaluate(res.run(), qrels, MEASURES, rel_threshold=REL_THRESHOLD.get(name, 1))
            rows.append(pq.with_columns(pl.lit(label).alias("system"), pl.lit(took).alias("seconds")))
            if cfg.rerank.provider != "none":
                print(f"{name}: {label}: {blend_effect(res.trace, qrels, REL_THRESHOLD.get(name, 1))}", flush=True)
    return pl.concat(rows)


def blend_effect(trace: pl.DataFrame, qrels: pl.DataFrame, rel_threshold: int, k: int = 10) -> str:
    """What the reranker blend did to the relevant documents of the test queries: how many it pushed out
    of the top k that fusion had put there, and how many it brought in (the failure-case data of the lab)."""
    from toolkit.panels import failure_cases

    rel = qrels.filter(pl.col("rel") >= rel_threshold).select("qid", "doc_id")
    top = trace.filter(pl.col("stage").is_in(["fuse", "blend"]) & (pl.col("rank") <= k)).join(rel, on=["qid", "doc_id"])
    fused = set(top.filter(pl.col("stage") == "fuse").select("qid", "doc_id").iter_rows())
    blended = set(top.filter(pl.col("stage") == "blend").select("qid", "doc_id").iter_rows())
    fails = failure_cases(trace, qrels, k=k, rel_threshold=rel_threshold)
    by = fails.group_by("culprit").len().sort("culprit")
    culprits = ", ".join(f"{c} {n}" for c, n in by.iter_rows())
    return (f"relevant documents in the top {k}: fused {len(fused)}, after the blend {len(blended)} "
            f"(pushed out {len(fused - blended)}, brought in {len(blended - fused)}); failure cases by stage: {culprits}")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    ap.add_argument("--stores", default="/tmp/stores", help="Folder for one store per collection (reused).")
    ap.add_argument("--collections", default=",".join(COLLECTIONS), help="Shared collections (and `demo`).")
    ap.add_argument("--configs", default=None, help="Comma-separated presets to compare (default: every preset).")
    ap.add_argument("--split", default="test")
    ap.add_argument("--extra", action="append", default=[], help="LABEL=CONFIG ({name} = collection name).")
    ap.add_argument("--markdown", default=None, help="Also write the tables to this file.")
    ap.add_argument("--workdir", default="/tmp/quality", help="Where tuned configs and reranker models are kept.")
    ap.add_argument("--tune-budget", type=int, default=40, help="TPE trials on dev (0 with --no-tune).")
    ap.add_argument("--no-tune", action="store_true", help="Skip the tuned configs (and the reranker).")
    ap.add_argument("--no-train", action="store_true", help="Skip training the reranker.")
    ap.add_argument("--epochs", type=int, default=3, help="Reranker training epochs (best on held-out dev kept).")
    ap.add_argument("--pseudo", default="0", help="Pseudo-queries from the corpus added to reranker training (or auto).")
    args = ap.parse_args()
    workdir = Path(args.workdir)
    workdir.mkdir(parents=True, exist_ok=True)
    steps: list[dict] = []

    configs = {p: p for p in (args.configs.split(",") if args.configs else list_presets())}
    for e in args.extra:
        label, _, src = e.partition("=")
        configs[label] = src
    stores = Path(args.stores)
    stores.mkdir(parents=True, exist_ok=True)
    out = []
    for name in args.collections.split(","):
        per = run_collection(
            name, Path(args.shared), stores, configs, args.split, workdir=workdir,
            tune_budget=0 if args.no_tune else args.tune_budget, train=not args.no_train, epochs=args.epochs,
            pseudo=args.pseudo if args.pseudo == "auto" else int(args.pseudo), steps=steps,
        )
        means = per.group_by("system", "measure").agg(pl.col("value").mean()).pivot(on="measure", index="system", values="value")
        secs = per.group_by("system").agg(pl.col("seconds").first())
        singles = means.filter(pl.col("system").is_in(["bm25-only", "vector-only"])).sort("nDCG@10", descending=True)["system"]
        single = singles[0] if len(singles) else next(iter(configs))  # without the single lists: the first config named
        sig = compare(per.filter(pl.col("measure").is_in(["nDCG@10", "R@5"])).select("system", "qid", "measure", "value"), single)

        def p_of(system: str, measure: str, sig: pl.DataFrame = sig, single: str = single) -> str:
            r = sig.filter((pl.col("system") == system) & (pl.col("measure") == measure))
            if system == single or not len(r) or r["p_holm"][0] is None:
                return ""
            return f"{r['p_holm'][0]:.3g}{' *' if r['significant'][0] else ''}"

        table = means.join(secs, on="system").sort("nDCG@10", descending=True)
        lines = [f"\n### {name} ({args.split}, {per['qid'].n_unique()} queries; p: randomisation test vs {single}, Holm)\n",
                 "| config | nDCG@10 | p | R@5 | p | R@10 | MRR@10 | s |", "|---|---:|---:|---:|---:|---:|---:|---:|"]
        for r in table.iter_rows(named=True):
            lines.append(
                f"| {r['system']} | {r['nDCG@10']:.4f} | {p_of(r['system'], 'nDCG@10')} | {r['R@5']:.4f} | "
                f"{p_of(r['system'], 'R@5')} | {r['R@10']:.4f} | {r['MRR@10']:.4f} | {r['seconds']:.1f} |"
            )
        print("\n".join(lines), flush=True)
        out.extend(lines)
    lines = ["\n### Time per step on this machine (seconds)\n", "| collection | step | seconds |", "|---|---|---:|"]
    lines += [f"| {r['collection']} | {r['step']} | {r['seconds']:.1f} |" for r in steps]
    print("\n".join(lines), flush=True)
    out.extend(lines)
    if args.markdown:
        Path(args.markdown).write_text("\n".join(out) + "\n")


if __name__ == "__main__":
    main()
