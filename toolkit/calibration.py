"""Calibration: a ranking score -> the probability that the document is relevant.

RRF or LambdaMART scores rank well but mean nothing on their own (an RRF score of 0.03, a LambdaMART
margin of 1.7), so a threshold on them means something different in every config. A calibrator fitted on
held-out judged queries maps them to P(relevant), which a threshold (`threshold.min_prob`) and an agent
can read the same way everywhere. LambdaMART scores are only comparable within a query, so the calibrator
also sees the score's gap to the query's top score and the log of its rank: Platt scaling (a logistic
regression, scikit-learn) over these three inputs. Its few coefficients live in the model file.
"""

from __future__ import annotations

import numpy as np
import polars as pl

INPUTS = ["score", "gap", "log_rank"]


def inputs(scored: pl.DataFrame) -> np.ndarray:
    """The calibrator's inputs for rows [qid, score, rank] (any order): score, gap to the query's top, ln rank."""
    x = scored.select(
        pl.col("score").cast(pl.Float64),
        (pl.col("score").max().over("qid") - pl.col("score")).cast(pl.Float64).alias("gap"),
        pl.col("rank").cast(pl.Float64).log().alias("log_rank"),
    )
    return x.to_numpy()


def fit_platt(x: np.ndarray, y: np.ndarray, *, seed: int = 0) -> dict:
    """Platt scaling over `inputs` columns -> {"kind", "inputs", "coef", "intercept"} (JSON-ready)."""
    from sklearn.linear_model import LogisticRegression

    if len(np.unique(y)) < 2:
        raise ValueError("calibration needs both relevant and non-relevant held-out rows")
    lr = LogisticRegression(C=1.0, max_iter=1000, random_state=seed).fit(x, y)
    return {"kind": "platt", "inputs": INPUTS, "coef": lr.coef_[0].tolist(), "intercept": float(lr.intercept_[0])}


def problem(cal: object) -> str | None:
    """What is wrong with a calibrator read from a model file (the fields its kind needs), or None."""
    if not isinstance(cal, dict):
        return "expected an object {kind, inputs, coef, intercept} or null"
    kind = cal.get("kind")
    if kind != "platt":
        return f"kind {kind!r} is not supported (expected 'platt')"
    missing = [k for k in ("coef", "intercept") if k not in cal]
    if missing:
        return f"kind 'platt' needs field(s) {', '.join(missing)}"
    if "inputs" in cal and cal["inputs"] != INPUTS:
        return f"inputs {cal['inputs']!r}: expected {INPUTS}"
    coef, icpt = cal["coef"], cal["intercept"]
    if not isinstance(coef, list) or len(coef) != len(INPUTS) or not all(_finite(c) for c in coef):
        return f"coef must be {len(INPUTS)} finite numbers (one per input {', '.join(INPUTS)})"
    if not _finite(icpt):
        return "intercept must be a finite number"
    return None


def _finite(v: object) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and bool(np.isfinite(v))


def apply(cal: dict, x: np.ndarray) -> np.ndarray:
    """P(relevant) for `inputs` rows under a fitted calibrator."""
    z = x @ np.asarray(cal["coef"], dtype=np.float64) + float(cal["intercept"])
    return 1.0 / (1.0 + np.exp(-np.clip(z, -50, 50)))


def reliability(prob: np.ndarray, relevant: np.ndarray, bins: int = 10) -> pl.DataFrame:
    """[bin, lo, hi, n, mean_prob, observed] over equal-width probability bins (empty bins left out)."""
    prob = np.asarray(prob, dtype=np.float64)
    relevant = np.asarray(relevant, dtype=np.float64)
    b = np.minimum((prob * bins).astype(np.int64), bins - 1)
    n = np.bincount(b, minlength=bins)
    sp = np.bincount(b, weights=prob, minlength=bins)
    sy = np.bincount(b, weights=relevant, minlength=bins)
    keep = n > 0
    idx = np.arange(bins)[keep]
    return pl.DataFrame(
        {
            "bin": idx,
            "lo": idx / bins,
            "hi": (idx + 1) / bins,
            "n": n[keep],
            "mean_prob": sp[keep] / n[keep],
            "observed": sy[keep] / n[keep],
        },
        schema={"bin": pl.Int64, "lo": pl.Float64, "hi": pl.Float64, "n": pl.Int64, "mean_prob": pl.Float64, "observed": pl.Float64},
    )


def ece(prob: np.ndarray, relevant: np.ndarray, bins: int = 10) -> float:
    """Expected calibration error: sum over bins of (rows in bin / rows) x |mean predicted - observed|."""
    r = reliability(prob, relevant, bins)
    total = int(r["n"].sum())
    if not total:
        return float("nan")
    return float(((r["n"] / total) * (r["mean_prob"] - r["observed"]).abs()).sum())


def labelled(scored: pl.DataFrame, qrels: pl.DataFrame, rel_threshold: int = 1) -> np.ndarray:
    """1.0 where (qid, doc_id) of `scored` is judged relevant (rel >= rel_threshold), else 0 (unjudged too)."""
    rel = qrels.filter(pl.col("rel") >= rel_threshold).select(
        pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.lit(1.0).alias("_y")
    ).unique(["qid", "doc_id"])
    return scored.select("qid", "doc_id").join(rel, on=["qid", "doc_id"], how="left", maintain_order="left")["_y"].fill_null(0.0).to_numpy()
