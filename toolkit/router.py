"""A learned router: per query, how far to trust the BM25 list against the dense one, from label-free signals.

The hand-written route (features.py: conversational vs technical) acts on the query text only. This router
also reads how sure each list is (BM25 top score, top cosine, their top-10 overlap) and how rare the query's
terms are, all computed in `prepare` (`ltr_features`, the `q_*` columns), and a logistic regression
(scikit-learn) trained on judged queries predicts P(the BM25 list beats the dense list on nDCG@10). Weighted
RRF then uses lexical weight 2p and dense weight 2(1 - p) for that query (`fusion.router: true`), so p = 0.5
is plain equal-weight fusion. The router lives in the learned fusion model file (`router` field).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import polars as pl

from .metrics import evaluate

INPUTS = ["q_tokens", "q_stopword_ratio", "q_technical", "q_terms", "q_idf_mean_norm", "q_idf_max_norm",
          "q_lex_top_norm", "q_vec_top", "q_overlap10"]  # fmt: skip


def query_inputs(feats: pl.DataFrame) -> pl.DataFrame:
    """[qid, *INPUTS]: one row per query of a `ltr_features` frame (the `q_*` columns repeat per candidate)."""
    keys = [c for c in ("collection", "qid") if c in feats.columns]
    return feats.group_by(keys, maintain_order=True).agg(pl.col(c).first() for c in INPUTS)


def _order_run(feats: pl.DataFrame, rr: str) -> pl.DataFrame:
    r = feats.filter(pl.col(rr) > 0).select("qid", "doc_id", (1.0 / pl.col(rr)).round(0).cast(pl.Int64).alias("rank"))
    return r.with_columns((1.0 / pl.col("rank")).alias("score"))


def labels(feats: pl.DataFrame, qrels: pl.DataFrame, rel_threshold: int = 1) -> pl.DataFrame:
    """[qid, lex_better] for the queries where one original list beats the other on nDCG@10 (ties left out)."""
    vals = []
    for name, rr in (("lex", "lex_rr"), ("vec", "vec_rr")):
        pq = evaluate(_order_run(feats, rr), qrels, ["nDCG@10"], rel_threshold=rel_threshold)
        vals.append(pq.select("qid", pl.col("value").alias(name)))
    both = vals[0].join(vals[1], on="qid", how="full", coalesce=True).fill_null(0.0)
    return both.filter((pl.col("lex") - pl.col("vec")).abs() > 1e-9).select("qid", (pl.col("lex") > pl.col("vec")).alias("lex_better"))


def fit(x: np.ndarray, y: np.ndarray, weight: np.ndarray | None = None, *, seed: int = 0) -> dict[str, Any] | None:
    """Standardised logistic regression -> JSON-ready router, or None when the labels are all one class."""
    from sklearn.linear_model import LogisticRegression

    if len(np.unique(y)) < 2:
        return None
    mean, scale = x.mean(axis=0), x.std(axis=0)
    scale = np.where(scale > 0, scale, 1.0)
    lr = LogisticRegression(C=0.5, max_iter=2000, random_state=seed).fit((x - mean) / scale, y, sample_weight=weight)
    return {"kind": "logistic", "inputs": INPUTS, "mean": mean.tolist(), "scale": scale.tolist(),
            "coef": lr.coef_[0].tolist(), "intercept": float(lr.intercept_[0])}  # fmt: skip


def problem(rt: Any) -> str | None:
    """What is wrong with a router read from a model file, or None. `p_lexical` trusts these fields: a NaN
    coefficient there silently empties every ranking and a short one is a numpy shape error."""
    if not isinstance(rt, dict):
        return "expected an object {kind, inputs, mean, scale, coef, intercept} or null"
    if rt.get("kind") != "logistic":
        return f"kind {rt.get('kind')!r} is not supported (expected 'logistic')"
    missing = [k for k in ("inputs", "mean", "scale", "coef", "intercept") if k not in rt]
    if missing:
        return f"kind 'logistic' needs field(s) {', '.join(missing)}"
    inputs = rt["inputs"]
    if not isinstance(inputs, list) or not inputs or not all(isinstance(i, str) for i in inputs):
        return "inputs must be a non-empty list of query signal names"
    unknown = [i for i in inputs if i not in INPUTS]
    if unknown:
        return f"inputs {', '.join(unknown)} are not computed by this toolkit version (expected names among {', '.join(INPUTS)})"
    if len(set(inputs)) != len(inputs):
        return "inputs name a signal more than once"
    for key in ("mean", "scale", "coef"):
        v = rt[key]
        if not isinstance(v, list) or len(v) != len(inputs) or not all(_finite(x) for x in v):
            return f"{key} must be {len(inputs)} finite numbers (one per input), got {_describe(v)}"
    if any(x <= 0 for x in rt["scale"]):
        return "scale must be positive numbers (each input is divided by its scale)"
    if not _finite(rt["intercept"]):
        return f"intercept must be a finite number, got {rt['intercept']!r}"
    return None


def _finite(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def _describe(v: Any) -> str:
    if not isinstance(v, list):
        return repr(v)[:40]
    bad = [x for x in v if not _finite(x)]
    return f"{len(v)} values" + (f" including {bad[0]!r}" if bad else "")


def p_lexical(router: dict[str, Any], q: pl.DataFrame) -> np.ndarray:
    """P(BM25 beats dense) for the rows of `query_inputs` output."""
    x = q.select(router["inputs"]).to_numpy().astype(np.float64)
    z = ((x - np.asarray(router["mean"])) / np.asarray(router["scale"])) @ np.asarray(router["coef"]) + router["intercept"]
    return 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))


def routed_weights(weights: pl.DataFrame, lists: pl.DataFrame, p: pl.DataFrame) -> pl.DataFrame:
    """`weights` [qid, list_id, weight] times 2p for BM25 lists and 2(1 - p) for dense ones; `lists` holds
    each list's retriever (`fusion.list_table`), `p` is [qid, p_lex]. Queries without a p keep theirs."""
    f = (
        weights.join(lists.select("qid", "list_id", "retriever"), on=["qid", "list_id"], how="left")
        .join(p, on="qid", how="left")
        .with_columns(pl.col("p_lex").fill_null(0.5))
    )
    factor = pl.when(pl.col("retriever") == "lex").then(2.0 * pl.col("p_lex")).otherwise(2.0 * (1.0 - pl.col("p_lex")))
    return f.select("qid", "list_id", (pl.col("weight") * factor).alias("weight"))


def p_for(prep: Any, model_path: str | None) -> pl.DataFrame:
    """[qid, p_lex] of `prep`'s queries under the router of a learned fusion model file (cached on `prep`)."""
    from .errors import InputError
    from .learned_fusion import FusionModel, resolve
    from .ltr_features import of

    path = resolve(model_path)
    feats = of(prep)

    def build() -> pl.DataFrame:
        m = FusionModel.read(path)
        if not m.router:
            raise InputError(f"fusion.router: {path} holds no router (retrain it with `hrt train-fusion`)")
        q = query_inputs(feats)
        return q.select("qid").with_columns(pl.Series("p_lex", p_lexical(m.router, q), dtype=pl.Float64))

    return prep.derived(f"router:{path}:{path.stat().st_mtime_ns}", (feats,), build)
