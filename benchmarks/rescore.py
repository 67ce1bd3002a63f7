"""Live re-scoring benchmark: one config change -> fused, blended, deduped lists and metrics for all queries.

Peers measured in the same run, on the same cached candidate lists and reranker scores:
- ranx: `ranx.fuse(method="rrf")` + `ranx.evaluate` (numba; compile time excluded by a warm-up call; ranx
  has no position-aware blend, so it does less work than the others);
- a plain per-query Python loop (dicts) doing weighted RRF with bonus, the QMD blend and the same measures.
Reranker scores: stand-in values (dense cosine) for the pool a reranker would get (fused top 40 and every
list's top 40); the cheap stages only see numbers, so timing does not need a trained model.
Our path is `toolkit.pipeline.rescore` (fusion, blend, dedup, thresholds, trace off) + `toolkit.metrics`.

A change re-runs the stage its field belongs to and every stage after it; the stages before it return their
last frames (`Prepared.staged`). So the benchmark moves one slider per stage the config lets act (a field the
config makes inert, `config.inert_settings`, is skipped: moving it re-runs only the last stage) and reports
each; the headline row is the dearest slider's. The peers re-run everything on any change.

    .venv/bin/python benchmarks/rescore.py --dataset ../shared/datasets/locomo --store /tmp/bench_locomo.duckdb [--heap kept]

`--heap kept` runs the whole benchmark (peers too) with glibc keeping freed memory for reuse, as `Session`
(the lab) and `tune` ask for (`toolkit.heap`); the page faults per change say what that saves.
"""

from __future__ import annotations

import argparse
import math
import os
import resource
import statistics
import time
from collections import defaultdict

import polars as pl

from toolkit.config import inert_settings, load_config
from toolkit.heap import keep_freed_memory
from toolkit.loaders import Dataset, load_corpus
from toolkit.metrics import aggregate, cutoff_depth, evaluate
from toolkit.pipeline import prepare, rerank_pool, rescore
from toolkit.store import Store

MEASURES = ["nDCG@10", "R@5", "R@10", "MRR@10"]
# The sliders a user moves, in pipeline order: (stage, field, its value at step i; consecutive values differ).
SLIDERS = (
    ("fusion", "fusion.rrf_k", lambda i: 40 + i),
    ("fusion", "fusion.alpha", lambda i: 0.3 + 0.01 * i),
    ("blend", "rerank.buckets", lambda i: [[3.0, 0.75 - 0.01 * (i % 7)], [10.0, 0.6], [math.inf, 0.4]]),
    ("guard", "guard.depth", lambda i: 10 + i % 5),
    ("dedup", "dedup.near_duplicate_threshold", lambda i: 0.99 - 0.002 * (i % 5)),
    ("dedup", "dedup.max_per_source", lambda i: 1 + i % 3),
    ("threshold", "threshold.low_spread", lambda i: 0.1 + 0.01 * (i % 5)),
)


def sliders(cfg) -> list[tuple[str, str, object]]:
    """The first slider of each stage that acts under `cfg`."""
    inert = inert_settings(cfg, [f for _, f, _ in SLIDERS])
    out: dict[str, tuple[str, str, object]] = {}
    for stage, f, val in SLIDERS:
        if f not in inert and stage not in out:
            out[stage] = (stage, f, val)
    return list(out.values())


def timed(fn, repeats: int) -> tuple[float, object]:
    out, ts = None, []
    for i in range(repeats):
        t = time.perf_counter()
        out = fn(i)
        ts.append(time.perf_counter() - t)
    return statistics.median(ts), out


def naive_blend(ranked: list[str], rr: dict[str, float], top_n: int = 40) -> list[str]:
    """QMD position-aware blend of one query's list: top_n with a reranker score, min-max normalised, mixed
    with 1/rank by bucket weight (ranks 1-3: .75, 4-10: .6, then .4); everything else after, in order."""
    head = [(r, d) for r, d in enumerate(ranked[:top_n], 1) if d in rr]
    if not head:
        return ranked
    lo, hi = min(rr[d] for _, d in head), max(rr[d] for _, d in head)
    block = []
    for r, d in head:
        norm = (rr[d] - lo) / (hi - lo) if hi > lo else 1.0
        wt = 0.75 if r <= 3 else 0.60 if r <= 10 else 0.40
        block.append((-(wt / r + (1 - wt) * norm), r, d))
    block.sort()
    top = {d for _, _, d in block}
    return [d for _, _, d in block] + [d for d in ranked if d not in top]


def naive(cands: list[tuple], qrels: dict[str, dict[str, int]], k: int, w: dict[str, float],
          rerank: dict[str, dict[str, float]]) -> dict[str, float]:
    """Per-query dict loop: weighted RRF + bonus, sort, position-aware blend with the reranker scores, then
    nDCG@10 / R@5 / R@10 / MRR@10."""
    by_q: dict[str, dict[str, tuple[float, int]]] = defaultdict(dict)
    for qid, list_id, doc, rank in cands:
        s, best = by_q[qid].get(doc, (0.0, 10**9))
        by_q[qid][doc] = (s + w[list_id] / (k + rank), min(best, rank))
    tot = defaultdict(float)
    for qid, rel in qrels.items():
        docs = by_q.get(qid, {})
        scored = sorted(
            ((s + (0.05 if b == 1 else 0.02 if b <= 3 else 0.0), d) for d, (s, b) in docs.items()), reverse=True
        )
        ranked = naive_blend([d for _, d in scored], rerank.get(qid, {}))[:100]
        gains = [rel.get(d, 0) for d in ranked]
        dcg = sum(g / math.log2(i + 2) for i, g in enumerate(gains[:10]))
        ideal = sorted(rel.values(), reverse=True)
        idcg = sum(g / math.log2(i + 2) for i, g in enumerate(ideal[:10]))
        n_rel = sum(1 for g in rel.values() if g > 0)
        tot["nDCG@10"] += dcg / idcg if idcg else 0.0
        tot["R@5"] += sum(1 for g in gains[:5] if g > 0) / n_rel
        tot["R@10"] += sum(1 for g in gains[:10] if g > 0) / n_rel
        tot["MRR@10"] += next((1 / (i + 1) for i, g in enumerate(gains[:10]) if g > 0), 0.0)
    return {m: v / len(qrels) for m, v in tot.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default="../shared/datasets/locomo")
    ap.add_argument("--store", default="/tmp/bench_locomo.duckdb")
    ap.add_argument("--config", default="qmd")
    ap.add_argument("--repeats", type=int, default=11)
    ap.add_argument("--no-rerank", dest="rerank", action="store_false", help="Time without reranker scores.")
    ap.add_argument("--heap", choices=["default", "kept"], default="default",
                    help="kept: glibc keeps freed memory for reuse (toolkit.heap, what Session and tune ask for), for "
                         "the whole run, peers included; default: the allocator as the process starts")
    args = ap.parse_args()
    heap = "kept" if args.heap == "kept" and keep_freed_memory() else "default"

    ds = Dataset.open(args.dataset)
    qrels = pl.concat([ds.qrels(s) for s in ds.splits()]).unique(["qid", "doc_id"])
    queries = ds.queries().join(qrels.select("qid").unique(), on="qid", how="semi")
    with Store(args.store) as st:
        st.ingest(load_corpus(ds.root), progress=True)
        cfg = load_config(args.config)
        t = time.perf_counter()
        prep = prepare(st, queries, cfg, use_cache=False)
        t_prep = time.perf_counter() - t
        # Reranker scores for the pool a reranker would be sent (the fused top 40 and every list's top 40).
        # Stand-in values: the dense cosine of the document's best chunk (no trained cross-encoder is
        # needed to time the cheap stages, which only see numbers; the real one is in quality.py).
        cands = prep.candidates
        if args.rerank:
            pool = rerank_pool(cands, 40)
            cos = st.dense_search(queries, top_k=200, level="document")
            prep.rerank_scores = pool.join(cos.select("qid", "doc_id", "chunk_id", pl.col("score").alias("rerank_score")), on=["qid", "doc_id"])
    print(f"{ds.name}: {queries.height} queries, {cands.height} candidate rows, {len(prep.rerank_scores)} reranker "
          f"scores, prepare {t_prep:.1f}s")

    moved = sliders(cfg)

    def at(i: int, f: str, val):
        return cfg.with_updates({f: val(i)})

    def ours_with(i: int, f: str, val) -> dict:
        return aggregate(evaluate(rescore(prep, at(i, f, val), trace=False).run(cutoff_depth(MEASURES)), qrels, MEASURES))

    per_stage = {}
    for stage, f, val in moved:
        ours_with(0, f, val)  # the previous change was another stage's: not timed
        per_stage[(stage, f)] = timed(lambda i, f=f, val=val: ours_with(i + 1, f, val), args.repeats)[0]
    # The headline: the dearest of them (a later stage can cost more: a change the guard makes no move on leaves
    # dedup's input as it was, while a dedup change re-runs dedup).
    (first_stage, first_field), _ = max(per_stage.items(), key=lambda kv: kv[1])
    first_val = next(v for st_, f, v in moved if f == first_field)
    ours_with(0, first_field, first_val)

    def ours(i: int, f: str = first_field, val=first_val) -> dict:
        return ours_with(i, f, val)
    faults = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    t_ours, agg = timed(ours, args.repeats)
    faults = (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - faults) / args.repeats
    depth = cutoff_depth(MEASURES)

    def ours_at_depth(i: int) -> dict:  # what the tuner does: keep only the places the measures read
        c = at(i, first_field, first_val)
        return aggregate(evaluate(rescore(prep, c, trace=False, n=max(depth, c.output.n)).run(depth), qrels, MEASURES))

    t_depth, agg_depth = timed(ours_at_depth, args.repeats)
    assert agg_depth == agg, (agg_depth, agg)  # the same values (last repeat's value in both)
    t_trace, _ = timed(lambda i: rescore(prep, at(i, first_field, first_val), trace=True), args.repeats)

    from ranx import Qrels, Run
    from ranx import evaluate as rx_eval
    from ranx import fuse as rx_fuse

    def pdf(df: pl.DataFrame):  # ranx asserts object-dtype id columns (pandas 3 defaults to its string dtype)
        out = df.to_pandas()
        for col in ("qid", "doc_id"):
            out[col] = out[col].astype(object)
        return out

    rx_q = Qrels.from_df(pdf(qrels.with_columns(pl.col("rel").cast(pl.Int64))), q_id_col="qid", doc_id_col="doc_id", score_col="rel")
    runs = []
    for lid in sorted(cands["list_id"].unique()):
        part = pdf(cands.filter(pl.col("list_id") == lid).select("qid", "doc_id", "score"))
        runs.append(Run.from_df(part, q_id_col="qid", doc_id_col="doc_id", score_col="score", name=lid))
    rx_metrics = ["ndcg@10", "recall@5", "recall@10", "mrr@10"]

    def ranx_once(i: int) -> dict:
        fused = rx_fuse(runs=runs, method="rrf", params={"k": 40 + i})
        return rx_eval(rx_q, fused, rx_metrics)

    ranx_once(0)  # numba compile
    t_ranx, rx_res = timed(ranx_once, args.repeats)

    rows = list(cands.select("qid", "list_id", "doc_id", "rank").iter_rows())
    w = {lid: 2.0 for lid in cands["list_id"].unique()}  # qmd: original-query lists x2
    qd: dict[str, dict[str, int]] = defaultdict(dict)
    for qid, doc, rel in qrels.iter_rows():
        if rel > 0:
            qd[qid][doc] = rel
    rr: dict[str, dict[str, float]] = defaultdict(dict)
    for qid, doc, score in prep.rerank_scores.select("qid", "doc_id", "rerank_score").iter_rows():
        rr[qid][doc] = max(score, rr[qid].get(doc, score))
    t_naive, nv = timed(lambda i: naive(rows, qd, 40 + i, w, rr), max(3, args.repeats // 3))

    # Same config (rrf_k = 40) for the cross-check of values: ours and the naive loop compute the same pipeline.
    agg, nv = ours(0, "fusion.rrf_k", lambda i: 40), naive(rows, qd, 40, w, rr)
    print(f"\n| slider moved ({cfg.name}; the stages before its own reuse their last frames) | median ms / change |")
    print("|---|---:|")
    for (stage, f), t in per_stage.items():
        print(f"| {f} ({stage}) | {t * 1000:.1f} |")
    print("\n| path | median ms / config change | ratio vs ours |")
    print("|---|---:|---:|")
    print(f"| toolkit rescore + metrics, {first_field} moved (the dearest slider above) | {t_ours * 1000:.1f} | 1.00 |")
    print(f"| toolkit rescore + metrics, {depth} places kept per query (as the tuner) | {t_depth * 1000:.1f} | {t_depth / t_ours:.2f} |")
    print(f"| toolkit rescore with full trace (no metrics) | {t_trace * 1000:.1f} | {t_trace / t_ours:.2f} |")
    print(f"| ranx fuse (rrf) + evaluate | {t_ranx * 1000:.1f} | {t_ranx / t_ours:.2f} |")
    print(f"| per-query Python loop | {t_naive * 1000:.1f} | {t_naive / t_ours:.2f} |")
    print(f"\nheap: {heap}; page faults per change (first row): {faults:,.0f}")
    print(f"ours {dict((k, round(v, 4)) for k, v in agg.items())}")
    print(f"ranx {dict((k, round(float(v), 4)) for k, v in rx_res.items())} (plain RRF: no bonus, no blend; x2 weights equal)")
    print(f"naive {dict((k, round(v, 4)) for k, v in nv.items())}")
    print(f"target: <= 50 ms median -> {'met' if t_ours <= 0.05 else 'MISSED'} (100 places kept); "
          f"{'met' if t_depth <= 0.05 else 'MISSED'} ({depth} places kept)")
    print(f"command: .venv/bin/python benchmarks/rescore.py --dataset {args.dataset} --store {args.store} --config {args.config} "
          f"--repeats {args.repeats} --heap {args.heap}" + ("" if args.rerank else " --no-rerank"))
    load = os.getloadavg()
    print(f"load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f}")


if __name__ == "__main__":
    main()
