"""`hrt train-fusion`: LambdaMART (LightGBM's lambdarank) over the cached-stage features of judged queries.

Why LambdaMART and not another cross-encoder: a few hundred tree parameters learn from every judged pair
of every collection at once, train in seconds on a CPU, and read the features that decide relevance
(lists' ranks and scores, query-term coverage, proximity, exact technical tokens; `ltr_features.py`).
LightGBM is the well-kept implementation; we add only the data plumbing and an honest report.

Procedure (seeded): each collection's queries are split into training and held-out queries; a model is
trained on the training queries with early stopping on the held-out ones (nDCG@10); the held-out
queries then give the report's gain (against plain RRF and each list alone, all evaluated with
`metrics.evaluate` over every judged held-out query: optimistic, since they also chose the number of
trees) and the calibrator's data (`calibration.py`, fitted on held-out predictions only; its reported ECE
is cross-fitted over two halves of those queries, so no row is scored by a calibrator fitted on it). The
shipped model is then refitted on all queries with the number of trees early stopping chose: the report
describes the first model, not the saved one (the report's `notes` say so). The trees read
`DEFAULT_FEATURES` and start from 2 x 30 x plain RRF (`prior`), so where they know nothing the order is RRF's (both chosen leave-one-collection-out on the dev
splits over 5 seeds, benchmarks/RESULTS.md). Monotone constraints hold a model to "a better list rank or more query terms never hurts"
(`ltr_features.FEATURES`). Collections are weighted so that a large one (LoCoMo's 761
queries) does not drown the small ones: per-query weight (largest / own size) ** `balance`.
"""

from __future__ import annotations

import contextlib
import json
import math
import numbers
import sys
import time
import warnings
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import calibration, ltr_features, router
from .booster import lightgbm_package
from .compare import MIN_QUERIES
from .config import PipelineConfig, load_config, prepare_settings
from .errors import InputError
from .files import write_text_atomic
from .learned_fusion import FusionModel, feature_settings, prior_score
from .loaders import Dataset, check_split
from .metrics import evaluate
from .pipeline import PREPARE_VERSION, prepare
from .provenance import query_keys

BASELINES = {"rrf": "rrf", "lexical": "lex_rr", "dense": "vec_rr"}  # feature whose order is the baseline
# The features a model reads by default: every feature but the per-query relative twins (40: the first 38 and the two
# lists' score spreads, added in the twenty-eighth session).
DEFAULT_FEATURES = [f for f in ltr_features.FEATURE_NAMES if f not in ltr_features.RELATIVE_FEATURES]
# A portable alternative: list ranks, per-query relative scores and text matches, without raw BM25 scores,
# cosines, IDFs, lengths or query-level features (which tell the trees which collection a query comes
# from). Leave-one-collection-out over 5 seeds it did NOT beat DEFAULT_FEATURES with the RRF prior (dev
# 0.606 vs 0.613 mean nDCG@10, test 0.608 vs 0.610; benchmarks/RESULTS.md "Learned fusion"), so it is
# an option (`fit(features=TRANSFER_FEATURES, prior=0)`), used with pseudo-queries in the benchmark.
TRANSFER_FEATURES = [
    "lex_rr", "vec_rr", "lex_ratio", "lex_norm", "vec_norm", "rrf", "best_rr", "both", "n_lists_share",
    "coverage", "idf_coverage", "chunk_coverage", "proximity", "tech_match", "doc_len_rel",
    "lex_z", "vec_z", "vec_gap", "cov_rel", "idfcov_rel", "prox_rel",
]  # fmt: skip
DEFAULT_PARAMS: dict[str, Any] = {
    "objective": "lambdarank",
    "metric": "ndcg",
    "eval_at": [10],
    "learning_rate": 0.05,
    "num_leaves": 15,
    "min_data_in_leaf": 40,
    "feature_fraction": 0.8,
    "bagging_fraction": 0.8,
    "bagging_freq": 1,
    "lambda_l2": 1.0,
    "lambdarank_truncation_level": 30,
    "num_threads": 1,  # OpenMP threads spin-wait: on a busy 2-core machine 2 threads ran 17x slower
    "deterministic": True,
    "force_row_wise": True,
    "verbose": -1,
}


NO_CALIBRATION = (
    "the model has no calibration (it needs held-out queries with relevant and non-relevant candidates: "
    "--holdout > 0): it gives no score_prob and threshold.min_prob cannot be used with it"
)
MIN_TRAIN_QUERIES = 3  # judged queries with a relevant and a non-relevant candidate, below which nothing is learned


def _no_calibration(holdout: float, n_held: int) -> str:
    """NO_CALIBRATION with the reason that applies (a one-query split blamed `--holdout > 0` at 0.2)."""
    if holdout <= 0:
        return NO_CALIBRATION
    return ("the model has no calibration: its " + (f"{n_held} held-out queries" if n_held else "held-out share")
            + " gave no relevant and non-relevant candidates to fit one on (judge more queries): it gives no "
            "score_prob and threshold.min_prob cannot be used with it")
ECE_UNMEASURED = "too few held-out queries to fit a calibrator on one half and measure it on the other"


@dataclass
class FusionTrainReport:
    collections: dict[str, dict[str, Any]]
    features: list[str]
    importance: dict[str, float]
    held_out: dict[str, dict[str, float]]
    best_iteration: int
    seconds: dict[str, float]
    calibration_ece_held_out: float | None
    # The same over each held-out query's first 10 only: what a reader and min_prob see. Over all 100 candidates the
    # easy irrelevant tail flatters it (user trial BX: the shipped report's 0.004 beside 0.02-0.35 on the top 10).
    calibration_ece_top10_held_out: float | None = None
    params: dict[str, Any] = field(default_factory=dict)
    out: str | None = None
    calibrated: bool = False  # the model has a calibrator (score_prob); its ECE may still be unmeasured
    no_calibration: str = ""  # why not, when not
    held_out_queries: dict[str, list[str]] = field(default_factory=dict)  # collection -> held-out query ids
    early_stopped: bool = False  # the held-out queries chose the number of trees: their nDCG is optimistic
    # What the numbers are and are not (also in the report JSON): see `_notes`.
    notes: list[str] = field(default_factory=list)

    def summary(self) -> str:
        lines = [f"learned fusion: {self.best_iteration} trees, {len(self.features)} features, "
                 f"trained in {self.seconds.get('train', 0):.1f}s (features {self.seconds.get('features', 0):.1f}s)"]  # fmt: skip
        which = "held-out (also used for early stopping: optimistic)" if self.early_stopped else "held-out"
        for name, h in self.held_out.items():
            lines.append(
                f"  {which} {name} ({h['queries']} queries) nDCG@10: learned {h['learned']:.4f}, rrf {h['rrf']:.4f}, "
                f"lexical {h['lexical']:.4f}, dense {h['dense']:.4f}"
                + (f", routed RRF {h['routed_rrf']:.4f}" if "routed_rrf" in h else "")
            )
        for name, h in self.held_out.items():  # a plain verdict: the numbers above, said
            base = {k: h[k] for k in ("rrf", "lexical", "dense") if k in h}
            best = max(base, key=lambda k: base[k]) if base else None
            if best is not None and h["learned"] < base[best]:
                lines.append(f"  verdict {name}: learned is below {best} alone on the held-out queries "
                             f"({h['learned']:.4f} < {base[best]:.4f}): on this collection, prefer {best}")
        if not self.calibrated:  # `fit` warned (once: the CLI prints warnings as `warning:` lines)
            lines.append("  calibration: none: no score_prob, threshold.min_prob cannot be used with this model")
        elif self.calibration_ece_held_out is not None:
            lines.append(f"  calibration ECE (cross-fitted: held-out rows scored by a calibrator fitted on the other "
                         f"held-out queries): {self.calibration_ece_held_out:.4f} over every candidate"
                         + (f", {self.calibration_ece_top10_held_out:.4f} over each query's first 10"
                            if self.calibration_ece_top10_held_out is not None else ""))  # fmt: skip
        else:
            lines.append(f"  calibration ECE: not measured ({ECE_UNMEASURED})")
        lines += [f"  note: {n}" for n in self.notes]
        top = sorted(self.importance.items(), key=lambda kv: -kv[1])[:6]
        lines.append("  top features (gain share): " + ", ".join(f"{k} {v:.2f}" for k, v in top))
        if self.out:
            lines.append(f"  model -> {self.out}")
        return "\n".join(lines)


def collect(
    store: Any, dataset_dir: str | Path, *, split: str = "dev", config: str | PipelineConfig = "learned",
    name: str | None = None, progress: bool = False,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(features of the split's candidates with [collection, label], qrels with [collection]).

    `label` is the judged grade (unjudged = 0). Candidates come from `config`'s retrieval settings, read
    through the stage cache (a second call costs a cache load)."""
    ds = Dataset.open(dataset_dir)
    name = name or ds.name
    queries, qrels = ds.queries(split), ds.qrels(split)
    prep = prepare(store, queries, load_config(config), progress=progress)
    feats = ltr_features.of(prep)
    grades = qrels.group_by("qid", "doc_id").agg(pl.col("rel").max().clip(lower_bound=0))
    data = feats.join(grades, on=["qid", "doc_id"], how="left").with_columns(
        pl.col("rel").fill_null(0).cast(pl.Int64).alias("label"), pl.lit(name).alias("collection")
    ).drop("rel")
    return data, qrels.with_columns(pl.lit(name).alias("collection"))


def collect_pseudo(
    store: Any, n: int = 300, *, config: str | PipelineConfig = "learned", name: str = "pseudo", seed: int = 0, min_words: int = 12,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """`collect`'s output for `n` pseudo-queries cut from the store's own chunks (`pseudo_queries.py`; the
    source document is the one relevant answer): label-free training data from a collection with no
    judgements. Measured leave-one-collection-out (benchmarks/RESULTS.md): they teach the model the
    collection's own text, which helps where BM25 is strong and hurts where dense search is, because a
    query cut from a document always shares its words; hence an option, not the default."""
    from .pseudo_queries import pseudo_queries

    chunks = store.chunks().join(store.doc_sources().select("doc_id", "scope"), on="doc_id", how="left")
    pq, pqrels, _ = pseudo_queries(chunks, n, seed=seed, min_words=min_words)
    prep = prepare(store, pq.select("qid", "text", "scope"), load_config(config))
    feats = ltr_features.of(prep)
    data = feats.join(pqrels.select("qid", "doc_id", pl.col("rel").alias("label")), on=["qid", "doc_id"], how="left").with_columns(
        pl.col("label").fill_null(0).cast(pl.Int64), pl.lit(name).alias("collection"))  # fmt: skip
    return data, pqrels.with_columns(pl.lit(name).alias("collection"))


def _split_queries(data: pl.DataFrame, holdout: float, seed: int) -> pl.DataFrame:
    """`data` with a boolean `held_out` per query (a `holdout` share of each collection's queries)."""
    rng = np.random.default_rng(seed)
    parts = []
    for name in sorted(data["collection"].unique().to_list()):
        qids = np.array(sorted(data.filter(pl.col("collection") == name)["qid"].unique().to_list()))
        rng.shuffle(qids)
        n_out = int(round(len(qids) * holdout)) if holdout > 0 else 0
        n_out = min(max(n_out, 1 if holdout > 0 and len(qids) > 1 else 0), len(qids) - 1)
        parts.append(pl.DataFrame({"collection": name, "qid": qids.tolist(), "held_out": [i < n_out for i in range(len(qids))]}))
    return data.join(pl.concat(parts), on=["collection", "qid"], how="left")


def _dataset(lgb, d: pl.DataFrame, features: list[str], balance: float, sizes: dict[str, int], prior: dict | None, **kw):
    """LightGBM dataset of `d` sorted by (collection, qid): groups per query, collection weights, prior as init score."""
    d = d.sort("collection", "qid", "doc_id")
    groups = d.group_by("collection", "qid", maintain_order=True).len()["len"].to_numpy()
    biggest = max(sizes.values())
    w = d["collection"].replace_strict({k: (biggest / v) ** balance for k, v in sizes.items()}, return_dtype=pl.Float64)
    x = d.select(features).to_numpy().astype(np.float64)
    return lgb.Dataset(x, d["label"].to_numpy(), group=groups, weight=w.to_numpy(), init_score=prior_score(d, prior), **kw)


def _useful(d: pl.DataFrame) -> pl.DataFrame:
    """Queries with at least one relevant and one other candidate (the rest carry no ranking gradient)."""
    ok = d.group_by("collection", "qid").agg(((pl.col("label") > 0).any() & (pl.col("label") == 0).any()).alias("ok"))
    return d.join(ok.filter("ok").select("collection", "qid"), on=["collection", "qid"])


def _ranked(d: pl.DataFrame, score: np.ndarray) -> pl.DataFrame:
    return (
        d.select("collection", "qid", "doc_id", pl.Series("score", score, dtype=pl.Float64))
        .sort(["collection", "qid", "score", "doc_id"], descending=[False, False, True, False])
        .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("collection", "qid").alias("rank"))
    )


def _ndcg(run: pl.DataFrame, qrels: pl.DataFrame, rel_threshold: dict[str, int]) -> dict[str, float]:
    out = {}
    for name in sorted(qrels["collection"].unique().to_list()):
        r = run.filter(pl.col("collection") == name).select("qid", "doc_id", "rank", "score")
        q = qrels.filter(pl.col("collection") == name).select("qid", "doc_id", "rel")
        pq = evaluate(r, q, ["nDCG@10"], rel_threshold=rel_threshold.get(name, 1))
        out[name] = float(pq["value"].mean()) if len(pq) else float("nan")
    return out


def _fit_router(d: pl.DataFrame, qrels: pl.DataFrame, rel_threshold: dict[str, int], balance: float,
                sizes: dict[str, int], seed: int) -> dict | None:
    """The router of `d`'s queries: labels per collection (which original list wins), then one regression."""
    parts = []
    for name in sorted(d["collection"].unique().to_list()):
        f = d.filter(pl.col("collection") == name)
        lab = router.labels(f, qrels.filter(pl.col("collection") == name).select("qid", "doc_id", "rel"), rel_threshold.get(name, 1))
        parts.append(router.query_inputs(f).join(lab, on="qid"))
    q = pl.concat(parts) if parts else pl.DataFrame()
    if not len(q):
        return None
    biggest = max(sizes.values())
    w = q["collection"].replace_strict({k: (biggest / v) ** balance for k, v in sizes.items()}, return_dtype=pl.Float64)
    return router.fit(q.select(router.INPUTS).to_numpy().astype(np.float64), q["lex_better"].to_numpy(), w.to_numpy(), seed=seed)


def _routed_rrf(d: pl.DataFrame, rt: dict) -> np.ndarray:
    """Weighted RRF (k = 60) of the two original lists with the router's per-query weights, from features."""
    p = router.query_inputs(d).with_columns(pl.Series("p_lex", router.p_lexical(rt, router.query_inputs(d))))
    x = d.select("collection", "qid", "lex_rr", "vec_rr").join(p.select("collection", "qid", "p_lex"), on=["collection", "qid"], how="left", maintain_order="left")
    part = lambda rr: pl.when(pl.col(rr) > 0).then(1.0 / (60.0 + 1.0 / pl.col(rr))).otherwise(0.0)  # noqa: E731
    return x.select(2 * pl.col("p_lex") * part("lex_rr") + 2 * (1 - pl.col("p_lex")) * part("vec_rr")).to_series().to_numpy()


def fit(
    data: pl.DataFrame, qrels: pl.DataFrame, *, features: list[str] | None = None, seed: int = 0,
    holdout: float = 0.2, rounds: int = 400, balance: float = 0.5, prior: float = 2.0, rel_threshold: dict[str, int] | None = None,
    params: dict[str, Any] | None = None, progress: bool = False,
) -> tuple[FusionModel, FusionTrainReport]:
    """Train on `data` (from `collect`, one or several collections concatenated); see the module doc."""
    lgb = lightgbm_package()
    features = features or list(DEFAULT_FEATURES)
    rel_threshold = rel_threshold or {}
    if not 0.0 <= holdout < 1.0:
        raise InputError(f"holdout {holdout}: expected a share in [0, 1)")
    mono = dict(ltr_features.FEATURES)
    p = {**DEFAULT_PARAMS, **(params or {}), "seed": seed, "monotone_constraints": [mono[f] for f in features]}
    sizes = {c: n for c, n in data.group_by("collection").agg(pl.col("qid").n_unique()).iter_rows()}
    data = _split_queries(data, holdout, seed)
    t0 = time.perf_counter()
    n_useful = _useful(data).select("collection", "qid").n_unique()
    if n_useful < MIN_TRAIN_QUERIES:
        raise InputError(f"only {n_useful} judged queries have both a relevant and a non-relevant candidate: a ranking "
                         f"model needs at least {MIN_TRAIN_QUERIES} (judge more queries, or use fusion.method rrf)")
    train_d = _useful(data.filter(~pl.col("held_out")))
    if not len(train_d):
        raise InputError("no training query has a judged-relevant candidate: nothing to learn from")
    prior_d = {"feature": "rrf", "scale": prior} if prior else None
    dtrain = _dataset(lgb, train_d, features, balance, sizes, prior_d, feature_name=features, free_raw_data=False)
    callbacks = [lgb.log_evaluation(50)] if progress else []
    held = data.filter(pl.col("held_out"))
    held_useful = _useful(held)
    best_iter = rounds
    # LightGBM's Python callbacks print to stdout; the CLI's stdout carries the summary only.
    with contextlib.redirect_stdout(sys.stderr):
        if len(held_useful):
            dvalid = _dataset(lgb, held_useful, features, balance, sizes, prior_d, reference=dtrain)
            booster = lgb.train(p, dtrain, rounds, valid_sets=[dvalid], valid_names=["held-out"],
                                callbacks=[*callbacks, lgb.early_stopping(40, verbose=progress)])  # fmt: skip
            best_iter = max(int(booster.best_iteration or rounds), 10)
        else:
            booster = lgb.train(p, dtrain, rounds, callbacks=callbacks)
    t_first = time.perf_counter() - t0

    held_out: dict[str, dict[str, float]] = {}
    cal, ece, ece10 = None, None, None
    if len(held):
        hq = qrels.join(held.select("collection", "qid").unique(), on=["collection", "qid"])
        hs = held.sort("collection", "qid", "doc_id")
        learned_run = _ranked(hs, booster.predict(hs.select(features).to_numpy(), num_iteration=best_iter) + prior_score(hs, prior_d))
        res = {"learned": _ndcg(learned_run, hq, rel_threshold)}
        for label, feat in BASELINES.items():
            res[label] = _ndcg(_ranked(hs, hs[feat].to_numpy()), hq, rel_threshold)
        for name in res["learned"]:
            n_q = hq.filter(pl.col("collection") == name)["qid"].n_unique()
            held_out[name] = {"queries": n_q, **{k: v[name] for k, v in res.items()}}
        # Calibrator: held-out predictions of the model that did not see those queries.
        rel = hq.with_columns(pl.col("collection").replace_strict(rel_threshold, default=1, return_dtype=pl.Int64).alias("_t"))
        rel = rel.filter(pl.col("rel") >= pl.col("_t")).select("collection", "qid", "doc_id", pl.lit(1.0).alias("_y")).unique()
        lab = learned_run.join(rel, on=["collection", "qid", "doc_id"], how="left", maintain_order="left")
        yv_bin = lab["_y"].fill_null(0.0).to_numpy()
        x_cal = calibration.inputs(lab.with_columns((pl.col("collection") + "\x1f" + pl.col("qid")).alias("qid")))
        if len(np.unique(yv_bin)) == 2:
            cal = calibration.fit_platt(x_cal, yv_bin, seed=seed)
            ece, ece10 = _cross_fitted_ece(x_cal, yv_bin, (lab["collection"] + "\x1f" + lab["qid"]).to_numpy(), seed,
                                           top=(lab["rank"] <= 10).to_numpy())

    why_uncalibrated = "" if cal is not None else _no_calibration(holdout, held.select("collection", "qid").n_unique())
    if why_uncalibrated:
        warnings.warn(why_uncalibrated, UserWarning, stacklevel=2)

    # Router (router.py): fitted on the training queries, judged on the held-out ones, then refitted on all.
    rt = _fit_router(data.filter(~pl.col("held_out")), qrels, rel_threshold, balance, sizes, seed)
    if rt is not None and len(held):
        hs = held.sort("collection", "qid", "doc_id")
        res = _ndcg(_ranked(hs, _routed_rrf(hs, rt)), hq, rel_threshold)
        for name, v in res.items():
            held_out[name]["routed_rrf"] = v
    rt_all = _fit_router(data, qrels, rel_threshold, balance, sizes, seed)

    # Refit on every query with the chosen number of trees (the shipped model sees all judgements).
    t0 = time.perf_counter()
    all_d = _useful(data)
    final = lgb.train({k: v for k, v in p.items() if k != "metric"}, _dataset(lgb, all_d, features, balance, sizes, prior_d, feature_name=features), best_iter)
    t_final = time.perf_counter() - t0
    gain = final.feature_importance("gain")
    total = float(gain.sum()) or 1.0
    info = {
        "trained_on": {name: {"queries": n, "rel_threshold": rel_threshold.get(name, 1)} for name, n in sizes.items()},
        "best_iteration": best_iter, "seed": seed, "holdout": holdout, "balance": balance, "prior": prior,
        "lightgbm": lgb.__version__, "prepare_version": PREPARE_VERSION,
    }  # fmt: skip
    model = FusionModel(features, final.model_to_string(), cal, rt_all, info, prior_d)
    early_stopped = bool(len(held_useful))
    report = FusionTrainReport(
        collections={k: {"queries": v} for k, v in sizes.items()}, features=features,
        importance={f: float(x) / total for f, x in zip(features, gain, strict=True)}, held_out=held_out,
        best_iteration=best_iter, seconds={"train": t_first + t_final}, calibration_ece_held_out=ece, calibration_ece_top10_held_out=ece10,
        params={k: v for k, v in p.items() if k != "monotone_constraints"}, calibrated=cal is not None,
        early_stopped=early_stopped, notes=_notes(held_out, early_stopped, cal is not None, ece)
        + ([] if gain.sum() > 0 else [  # every gain share 0.00 was all a tiny training set showed (user trial AY)
            "no tree found a split (too few judged queries, or no feature that tells relevant from not): the model "
            f"ranks by its RRF prior alone (prior {prior:g}); judge more queries"]),
        no_calibration=why_uncalibrated,
        held_out_queries={c: sorted(g["qid"].unique().to_list()) for (c,), g in held.group_by("collection")},
    )  # fmt: skip
    return model, report


def _cross_fitted_ece(x: np.ndarray, y: np.ndarray, groups: np.ndarray, seed: int,
                      top: np.ndarray | None = None) -> tuple[float | None, float | None]:
    """ECE of the Platt calibrator on rows it was not fitted on, over every row and over the `top` rows: the held-out
    queries split in two halves, each half scored by a calibrator fitted on the other (an ECE over the fitting rows
    flatters it). (None, None) when a half lacks relevant or non-relevant rows to fit on."""
    qids = np.unique(groups)
    np.random.default_rng(seed).shuffle(qids)
    first = np.isin(groups, qids[: len(qids) // 2])
    prob = np.empty(len(y))
    for part in (first, ~first):
        if not part.any() or len(np.unique(y[~part])) < 2:
            return None, None
        prob[part] = calibration.apply(calibration.fit_platt(x[~part], y[~part], seed=seed), x[part])
    return calibration.ece(prob, y), (calibration.ece(prob[top], y[top]) if top is not None and top.any() else None)


def _notes(held_out: dict[str, dict[str, float]], early_stopped: bool, calibrated: bool, ece: float | None) -> list[str]:
    """What the report's numbers are and are not, for the summary and the report JSON."""
    notes = []
    if held_out:
        if early_stopped:
            notes.append("held-out nDCG@10 is optimistic: the held-out queries also chose the number of trees (early stopping)")
        notes.append("the held-out numbers describe a model trained without the held-out queries; the saved model is "
                     "refit on all queries (held-out ones included) with the same number of trees")  # fmt: skip
    if calibrated:
        notes.append("the saved calibrator is fitted on all held-out rows (scores of the model trained without them, not "
                     "of the refit one); its ECE is "
                     + ("cross-fitted over two halves of the held-out queries" if ece is not None else f"not measured ({ECE_UNMEASURED})"))
    for name, h in held_out.items():
        if h["queries"] < MIN_QUERIES:
            notes.append(f"{name}: only {h['queries']} held-out queries: a difference measured on fewer than {MIN_QUERIES} "
                         "queries is unreliable (raise --holdout or judge more queries)")  # fmt: skip
    return notes


def _check_sources(sources: Any) -> None:
    """Each source is (open Store, dataset folder, rel threshold): said with the position, where a pair, or the
    items in another order, failed as "not enough values to unpack" or a TypeError inside (user trial AY)."""
    from .store import Store

    if isinstance(sources, tuple | str | Path) or not isinstance(sources, list | Sequence):
        raise InputError("train_fusion: sources must be a list of (store, dataset folder, rel threshold) triples")
    for i, src in enumerate(sources):
        ok = (isinstance(src, tuple | list) and len(src) == 3 and isinstance(src[0], Store)
              and isinstance(src[1], str | Path) and isinstance(src[2], numbers.Integral) and not isinstance(src[2], bool))
        if not ok:
            got = ", ".join(type(x).__name__ for x in src) if isinstance(src, tuple | list) else type(src).__name__
            raise InputError(f"train_fusion: sources[{i}] is ({got}); expected (store, dataset folder, rel threshold), "
                             "e.g. (Store('locomo.duckdb'), 'data/locomo', 1)")


def train_fusion(
    sources: list[tuple[Any, str | Path, int]], out: str | Path, *, split: str = "dev",
    config: str | PipelineConfig = "learned", seed: int = 0, holdout: float = 0.2, rounds: int = 400,
    balance: float = 0.5, prior: float = 2.0, force: bool = False, progress: bool = False,
    pseudo_stores: list[Any] | None = None, pseudo: int = 300,
) -> FusionTrainReport:
    """Train one model on the `split` of every (open store, dataset dir, rel threshold) in `sources`, write
    it to `out` (model JSON) and its report beside it (`<out stem>.report.json`).

    `pseudo_stores`: stores of collections without judgements (the one the model is meant for) whose
    corpus gives `pseudo` pseudo-queries each as extra training data (`collect_pseudo`)."""
    check_split(split)
    if split == "test" and not force:
        raise InputError("refusing to train on the test split (train on dev, report on test); pass --force (force=True) to override")
    if split == "test":
        warnings.warn("training on the test split: the model's scores on it are not results (the model file says so)",
                      UserWarning, stacklevel=2)
    _check_sources(sources)
    t0 = time.perf_counter()
    frames, qrels, thresholds = [], [], {}
    names: set[str] = set()
    provenance: dict[str, dict[str, Any]] = {}
    for store, ds_dir, rel_t in sources:
        ds = Dataset.open(ds_dir)
        name = ds.name
        if name in names:
            raise InputError(f"{ds_dir}: collection {name!r} given twice")
        names.add(name)
        if not force:
            ds.check_apart_from_test(split, "training")
        if progress:
            print(f"features: {name} ({split})", file=sys.stderr, flush=True)
        d, q = collect(store, ds_dir, split=split, config=config, name=name, progress=progress)
        frames.append(d)
        qrels.append(q)
        thresholds[name] = rel_t
        # What the model learned from, so a later run on the same queries is said to be in-sample
        # (`learned_fusion.training_overlap`), and which index its features came from.
        asked = ds.queries(split).join(q.select("qid").unique(), on="qid", how="semi")
        provenance[name] = {"dataset": str(ds.root.resolve()), "split": split, "qids": sorted(q["qid"].unique().to_list()),
                            "query_keys": query_keys(asked["qid"].to_list(), asked["text"].to_list()),
                            "store": store.index_record()}
    for i, store in enumerate(pseudo_stores or []):
        name = f"{Path(store.path).stem}~pseudo{i}"
        if progress:
            print(f"features: {name} ({pseudo} pseudo-queries)", file=sys.stderr, flush=True)
        d, q = collect_pseudo(store, pseudo, config=config, name=name, seed=seed)
        frames.append(d.select(frames[0].columns) if frames else d)
        qrels.append(q.select(qrels[0].columns) if qrels else q)
    t_feat = time.perf_counter() - t0
    model, rep = fit(pl.concat(frames), pl.concat(qrels), seed=seed, holdout=holdout, rounds=rounds, balance=balance, prior=prior,
                     rel_threshold=thresholds, progress=progress)  # fmt: skip
    rep.seconds["features"] = t_feat
    for name, prov in provenance.items():
        model.info.setdefault("trained_on", {}).setdefault(name, {}).update(prov)
    model.info["settings"] = feature_settings(prepare_settings(load_config(config)))
    rep.out = str(model.save(out))
    write_text_atomic(Path(out).with_suffix(".report.json"), json.dumps(_json_safe(asdict(rep)), indent=1) + "\n")
    return rep


def _json_safe(v: Any) -> Any:
    if isinstance(v, dict):
        return {k: _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    if isinstance(v, float) and not math.isfinite(v):
        return None
    return v
