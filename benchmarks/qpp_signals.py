"""Post-retrieval query-performance predictors (QPP) as BM25-vs-dense routing signals, judged out of collection.

Reads the frames `benchmarks/qpp_dump.py` wrote (the `learned` preset's prepare on every dev and test split:
the original BM25 and dense lists, 100 deep; ltr_features; qrels; each query's cosine to its corpus/scope
centroid). Per query and per list it computes NQC, WIG, SMV, score ratio and slope, their BM25-minus-dense
differences, cross-list agreement (reciprocal rank of the other list's top 1, RBO p 0.9 and Kendall tau of the
top 20s) and cross-scores (BM25's view of dense's top 10 and vice versa); reports each one's Spearman correlation
with BM25 nDCG@10 minus dense nDCG@10 on the ten splits; then re-scores RRF (k 60) with
`gap rule * exp(-a * z(signal))`, z taken over the split's own queries (label-free), `a` picked on the other
four collections' dev splits.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/qpp_dump.py --stores /tmp/default/stores --out /tmp/qpp
    PYTHONPATH=$PWD .venv/bin/python benchmarks/qpp_signals.py --frames /tmp/qpp --rules SIG1,SIG2
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl
from scipy.stats import kendalltau, spearmanr

sys.path.insert(0, str(Path(__file__).resolve().parent))
from route_signals import COLLECTIONS, REL_THRESHOLD, list_run, rrf_ndcg  # noqa: E402

from toolkit.metrics import evaluate  # noqa: E402

SPLITS = ("dev", "test")
A_GRID = (-4.0, -2.0, -1.0, -0.5, -0.25, 0.0, 0.25, 0.5, 1.0, 2.0, 4.0)


def _nqc(s: np.ndarray, k: int) -> float:
    t = s[:k]
    return float(np.std(t) / abs(np.mean(t))) if len(t) > 1 and np.mean(t) != 0 else np.nan


def _smv(s: np.ndarray, k: int, ref: float) -> float:
    t = s[:k]
    mu = np.mean(t)
    if len(t) < 2 or mu <= 0 or ref == 0 or np.any(t <= 0):
        return np.nan
    return float(np.mean(t * np.abs(np.log(t / mu))) / abs(ref))


def _slope(s: np.ndarray, k: int = 20) -> float:
    t = s[:k]
    if len(t) < 3 or t[0] == 0:
        return np.nan
    return float(np.polyfit(np.arange(1, len(t) + 1), t / t[0], 1)[0])


def _rbo(a: list, b: list, p: float = 0.9, depth: int = 20) -> float:
    """Rank-biased overlap, truncated at `depth` and rescaled so identical lists score 1."""
    sa, sb, tot, w = set(), set(), 0.0, 0.0
    for d in range(1, depth + 1):
        if d <= len(a):
            sa.add(a[d - 1])
        if d <= len(b):
            sb.add(b[d - 1])
        tot += p ** (d - 1) * len(sa & sb) / d
        w += p ** (d - 1)
    return tot / w


def _tau20(a: list, b: list) -> float:
    """Kendall tau of the two top 20s over their union, a document missing from a list at rank 21."""
    u = list(dict.fromkeys(a[:20] + b[:20]))
    ra = [a[:20].index(d) + 1 if d in a[:20] else 21 for d in u]
    rb = [b[:20].index(d) + 1 if d in b[:20] else 21 for d in u]
    return float(kendalltau(ra, rb).statistic) if len(u) > 2 else np.nan


def query_signals(cand: pl.DataFrame, ltr: pl.DataFrame, q: pl.DataFrame) -> pl.DataFrame:
    lists = {}
    for lid, key in (("orig:lex", "lex"), ("orig:vec", "vec")):
        c = cand.filter(pl.col("list_id") == lid).sort("qid", "rank").group_by("qid", maintain_order=True)
        lists[key] = {r[0]: (r[1], np.asarray(r[2], dtype=float)) for r in c.agg("doc_id", "score").iter_rows()}
    qt = dict(ltr.group_by("qid").agg(pl.col("q_terms").first()).iter_rows())
    lexr = {(a, b): (c, d) for a, b, c, d in ltr.select("qid", "doc_id", "lex_ratio", "vec_score").iter_rows()}
    rows = []
    for qid, cc in q.select("qid", "cos_centroid").iter_rows():
        r: dict = {"qid": qid, "cos_centroid": cc}
        for key in ("lex", "vec"):
            docs, s = lists[key].get(qid, ([], np.array([])))
            n = len(s)
            r[f"n_{key}"] = n
            if n == 0:
                continue
            tail = s[-1]
            r[f"nqc10_{key}"] = _nqc(s, 10)
            r[f"nqc100_{key}"] = _nqc(s, 100)
            r[f"ratio1_10_{key}"] = s[0] / s[min(9, n - 1)] if s[min(9, n - 1)] > 0 else np.nan
            r[f"slope20_{key}"] = _slope(s)
            if key == "lex":
                norm = np.sqrt(max(qt.get(qid, 1) or 1, 1))
                r["wig10_lex"] = (np.mean(s[:10]) - tail) / norm          # tail (rank 100) as the corpus score
                r["nqc100t_lex"] = np.std(s) / tail if tail > 0 else np.nan  # NQC over the list, tail as corpus score
                r["smv10_lex"] = _smv(s, 10, tail)
            else:
                r["wig10_vec"] = np.mean(s[:10]) - cc                     # query-centroid cosine as the corpus score
                r["wig10t_vec"] = np.mean(s[:10]) - tail
                r["nqc100c_vec"] = np.std(s) / cc if cc > 0 else np.nan
                r["smv10_vec"] = _smv(s, 10, cc)
                r["wig1_vec"] = s[0] - cc
        if "nqc10_lex" in r and "nqc10_vec" in r:
            for f in ("nqc10", "nqc100", "ratio1_10", "slope20"):
                r[f"{f}_diff"] = r[f"{f}_lex"] - r[f"{f}_vec"]
            # standardised difference: top-1 z-score in its own list (scale-free WIG-like)
            for key in ("lex", "vec"):
                s = lists[key][qid][1]
                r[f"top1z_{key}"] = (s[0] - s.mean()) / s.std() if s.std() > 0 else np.nan
            r["top1z_diff"] = r["top1z_lex"] - r["top1z_vec"]
            dl, dv = list(lists["lex"][qid][0]), list(lists["vec"][qid][0])
            r["rr_lex1_in_vec"] = 1 / (dv.index(dl[0]) + 1) if dl[0] in dv else 0.0
            r["rr_vec1_in_lex"] = 1 / (dl.index(dv[0]) + 1) if dv[0] in dl else 0.0
            r["rr_support_diff"] = r["rr_vec1_in_lex"] - r["rr_lex1_in_vec"]
            r["rbo20"] = _rbo(dl, dv)
            r["tau20"] = _tau20(dl, dv)
            # cross scores: BM25's opinion (score / BM25 top) of dense's top 10, dense's (cos@1 - cos) of BM25's top 10
            lr = [lexr.get((qid, d), (0.0, np.nan))[0] for d in dv[:10]]
            vs = [lexr.get((qid, d), (0.0, np.nan))[1] for d in dl[:10]]
            vs = [x for x in vs if x is not None and np.isfinite(x)]
            r["lexsupport_of_vec10"] = float(np.mean([x or 0.0 for x in lr]))
            r["vecdeficit_of_lex10"] = float(lists["vec"][qid][1][0] - np.mean(vs)) if vs else np.nan
            r["cross_diff"] = r["vecdeficit_of_lex10"] - r["lexsupport_of_vec10"]
        rows.append(r)
    return pl.DataFrame(rows, infer_schema_length=None)


def load(frames: Path, name: str, split: str):
    rd = lambda k: pl.read_parquet(frames / f"{name}_{split}_{k}.parquet")  # noqa: E731
    ltr, cand, qrels, q = rd("ltr"), rd("cand"), rd("qrels"), rd("q")
    rel = REL_THRESHOLD.get(name, 1)
    per_q = [evaluate(list_run(ltr, rr), qrels, ["nDCG@10"], rel_threshold=rel).select("qid", pl.col("value").alias(rr))
             for rr in ("lex_rr", "vec_rr")]
    gap = (ltr.filter(pl.col("vec_rr") > 0).sort(["qid", "vec_rr"], descending=[False, True])
           .group_by("qid", maintain_order=True).agg((pl.col("vec_score").first() - pl.col("vec_score").head(10).last())
                                                      .alias("dense_gap")))
    cov = {rr: ltr.filter(pl.col(rr) > 0).sort(["qid", rr], descending=[False, True]).group_by("qid", maintain_order=True)
           .agg(pl.col("coverage").first().alias(f"cov1_{rr}")) for rr in ("lex_rr", "vec_rr")}
    sig = (query_signals(cand, ltr, q).join(gap, on="qid", how="left").join(cov["lex_rr"], on="qid", how="left")
           .join(cov["vec_rr"], on="qid", how="left").with_columns(cov_diff1=pl.col("cov1_lex_rr") - pl.col("cov1_vec_rr"))
           .drop("cov1_lex_rr", "cov1_vec_rr"))
    sig = sig.join(per_q[0], on="qid", how="left").join(per_q[1], on="qid", how="left")
    return ltr, qrels, sig.with_columns(pl.col("lex_rr", "vec_rr").fill_null(0.0)), rel


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--frames", type=Path, required=True)
    ap.add_argument("--rules", default="", help="comma-separated signals to re-score RRF with")
    ap.add_argument("--pair", default="", help="two signals, SIG1,SIG2: a 2-d grid gap*exp(-a1 z1 - a2 z2)")
    ap.add_argument("--no-pooled", action="store_true", help="skip the pooled-centre rules (2 min)")
    a = ap.parse_args()
    cells = [(n, s) for s in SPLITS for n in COLLECTIONS]
    data = {c: load(a.frames, *c) for c in cells}
    skip = {"qid", "lex_rr", "vec_rr"}
    names = [c for c in data[cells[0]][2].columns if c not in skip]
    corr = {}
    for c in cells:
        sig = data[c][2]
        t = (sig["lex_rr"] - sig["vec_rr"]).to_numpy()
        for f in names:
            x = sig[f].cast(pl.Float64).to_numpy() if f in sig.columns else np.full(len(t), np.nan)
            ok = np.isfinite(x) & np.isfinite(t)
            corr.setdefault(f, {})[c] = float(spearmanr(x[ok], t[ok]).statistic) if ok.sum() > 3 and np.std(x[ok]) > 0 else np.nan
    head = " | ".join(f"{n[:6]} {s}" for n, s in cells)
    print(f"| signal | {head} | one sign |\n|---|" + "---:|" * len(cells) + "---|")
    for f, v in corr.items():
        vals = [v[c] for c in cells]
        same = "**yes**" if all(x > 0 for x in vals) or all(x < 0 for x in vals) else f"{max(sum(x > 0 for x in vals), sum(x < 0 for x in vals))}/10"
        print(f"| {f} | " + " | ".join(f"{x:+.2f}" for x in vals) + f" | {same} |")
    print("\n| signal: partial Spearman given dense_gap | " + head + " | one sign |\n|---|" + "---:|" * len(cells) + "---|")
    from scipy.stats import rankdata
    for f in names:
        vals = []
        for c in cells:
            sig = data[c][2]
            t = (sig["lex_rr"] - sig["vec_rr"]).to_numpy()
            x = sig[f].cast(pl.Float64).to_numpy()
            g = sig["dense_gap"].cast(pl.Float64).to_numpy()
            ok = np.isfinite(x) & np.isfinite(t) & np.isfinite(g)
            if ok.sum() < 5 or np.std(x[ok]) == 0:
                vals.append(np.nan)
                continue
            rx, rt, rg = (rankdata(v[ok]) for v in (x, t, g))
            def res(y, rg=rg):
                return y - np.polyval(np.polyfit(rg, y, 1), rg)
            vals.append(float(np.corrcoef(res(rx), res(rt))[0, 1]))
        same = "**yes**" if all(x > 0 for x in vals) or all(x < 0 for x in vals) else f"{max(sum(x > 0 for x in vals), sum(x < 0 for x in vals))}/10"
        print(f"| {f} | " + " | ".join(f"{x:+.2f}" for x in vals) + f" | {same} |")
    if not a.rules:
        return
    gap = (pl.col("dense_gap") / 0.16).clip(0.25, 4.0)
    base = {"bm25": pl.lit(0.0), "dense": pl.lit(1e6), "rrf": pl.lit(1.0), "gap (default)": gap}
    score = {}
    for c in cells:
        ltr, qrels, sig, rel = data[c]
        zs = sig.with_columns([((pl.col(f) - pl.col(f).mean()) / pl.col(f).std()).fill_null(0.0).fill_nan(0.0).alias(f"z_{f}")
                               for f in a.rules.split(",")])
        for lab, w in base.items():
            score[(lab, c)] = rrf_ndcg(ltr, qrels, zs, w, rel)
        for f in a.rules.split(","):
            for aa in A_GRID:
                score[((f, aa), c)] = rrf_ndcg(ltr, qrels, zs, (gap * (-aa * pl.col(f"z_{f}")).exp()).clip(0.05, 4.0), rel)
                score[((f + " alone", aa), c)] = rrf_ndcg(ltr, qrels, zs, (-aa * pl.col(f"z_{f}")).exp().clip(0.05, 4.0), rel)
        print(c, "scored", flush=True)
    better = {n: max(score[("bm25", (n, "test"))], score[("dense", (n, "test"))]) for n in COLLECTIONS}
    print("\n| rule (test nDCG@10) | " + " | ".join(COLLECTIONS) + " | mean | >= better single |\n|---|" + "---:|" * 7)
    for lab in base:
        vals = [score[(lab, (n, "test"))] for n in COLLECTIONS]
        print(f"| {lab} | " + " | ".join(f"{x:.4f}" for x in vals) + f" | {np.mean(vals):.4f} | {sum(v >= better[n] - 1e-9 for v, n in zip(vals, COLLECTIONS, strict=True))} |")
    rule_names = [g for f in a.rules.split(",") for g in (f, f + " alone")]
    for f in rule_names:
        # in-sample reference: each a on test (not a selection)
        for aa in A_GRID:
            dv = np.mean([score[((f, aa), (n, "dev"))] for n in COLLECTIONS])
            tv = [score[((f, aa), (n, "test"))] for n in COLLECTIONS]
            print(f"| {f} a={aa:+} (dev mean {dv:.4f}) | " + " | ".join(f"{x:.4f}" for x in tv)
                  + f" | {np.mean(tv):.4f} | {sum(v >= better[n] - 1e-9 for v, n in zip(tv, COLLECTIONS, strict=True))} |")
    print("\n| out of collection: a picked on the other four dev splits (best dev mean) | "
          + " | ".join(COLLECTIONS) + " | mean | >= better single |\n|---|" + "---:|" * 7)
    for f in rule_names:
        vals, picks = [], []
        for n in COLLECTIONS:
            others = [m for m in COLLECTIONS if m != n]
            best = max(A_GRID, key=lambda aa: (np.mean([score[((f, aa), (m, "dev"))] for m in others]), -abs(aa)))
            vals.append(score[((f, best), (n, "test"))])
            picks.append(best)
        print(f"| {f} | " + " | ".join(f"{x:.4f} (a {p:+})" for x, p in zip(vals, picks, strict=True))
              + f" | {np.mean(vals):.4f} | {sum(v >= better[n] - 1e-9 for v, n in zip(vals, COLLECTIONS, strict=True))} |")

    if a.pair:
        f1, f2 = a.pair.split(",")
        grid = (-1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 4.0)
        sc2 = {}
        for c in cells:
            ltr, qrels, sig, rel = data[c]
            zs = sig.with_columns([((pl.col(f) - pl.col(f).mean()) / pl.col(f).std()).fill_null(0.0).fill_nan(0.0).alias(f"z_{f}")
                                   for f in (f1, f2)])
            for a1 in grid:
                for a2 in grid:
                    w = (gap * (-a1 * pl.col(f"z_{f1}") - a2 * pl.col(f"z_{f2}")).exp()).clip(0.05, 4.0)
                    sc2[(a1, a2, c)] = rrf_ndcg(ltr, qrels, zs, w, rel)
        vals, picks = [], []
        for n in COLLECTIONS:
            others = [m for m in COLLECTIONS if m != n]
            best = max(((x, y) for x in grid for y in grid),
                       key=lambda p: (np.mean([sc2[(*p, (m, "dev"))] for m in others]), -abs(p[0]) - abs(p[1])))
            vals.append(sc2[(*best, (n, "test"))])
            picks.append(best)
        print(f"\n| pair gap*exp(-a1 z({f1}) - a2 z({f2})), out of collection | " + " | ".join(f"{x:.4f} (a {p})" for x, p in zip(vals, picks, strict=True))
              + f" | {np.mean(vals):.4f} | {sum(v >= better[n] - 1e-9 for v, n in zip(vals, COLLECTIONS, strict=True))} |")
        for p in ((1.0, 0.0), (2.0, 0.0), (1.0, -1.0), (2.0, -1.0), (2.0, 1.0)):
            print(f"| fixed {p}: dev " + " ".join(f"{sc2[(*p, (n, 'dev'))]:.4f}" for n in COLLECTIONS)
                  + " | test " + " ".join(f"{sc2[(*p, (n, 'test'))]:.4f}" for n in COLLECTIONS)
                  + f" | test mean {np.mean([sc2[(*p, (n, 'test'))] for n in COLLECTIONS]):.4f} |")
    if a.no_pooled:
        return
    # Raw (unstandardised) signal, centred and scaled on the pooled dev queries of the other four collections:
    # keeps the between-collection level that a per-split z removes.
    print("\n| out of collection, pooled centre (other four dev) | " + " | ".join(COLLECTIONS)
          + " | mean | >= better single |\n|---|" + "---:|" * 7)
    for f in a.rules.split(","):
        for alone in (False, True):
            vals, picks = [], []
            for n in COLLECTIONS:
                others = [m for m in COLLECTIONS if m != n]
                pool = np.concatenate([data[(m, "dev")][2][f].cast(pl.Float64).to_numpy() for m in others])
                pool = pool[np.isfinite(pool)]
                mu, sd = float(np.median(pool)), float(np.std(pool))
                zc = ((pl.col(f) - mu) / sd).fill_null(0.0).fill_nan(0.0)
                def sc(c, aa, zc=zc, alone=alone):
                    ltr, qrels, sig, rel = data[c]
                    w = (-aa * zc).exp() * (1.0 if alone else gap)
                    return rrf_ndcg(ltr, qrels, sig, w.clip(0.05, 4.0), rel)
                dev = {aa: np.mean([sc((m, "dev"), aa) for m in others]) for aa in A_GRID}
                best = max(A_GRID, key=lambda aa: (dev[aa], -abs(aa)))
                vals.append(sc((n, "test"), best))
                picks.append(best)
            lab = f + (" alone" if alone else "")
            print(f"| {lab} | " + " | ".join(f"{x:.4f} (a {p:+})" for x, p in zip(vals, picks, strict=True))
                  + f" | {np.mean(vals):.4f} | {sum(v >= better[n] - 1e-9 for v, n in zip(vals, COLLECTIONS, strict=True))} |", flush=True)


if __name__ == "__main__":
    main()
