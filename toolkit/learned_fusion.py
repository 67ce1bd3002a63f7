"""Fusion method `learned`: a LambdaMART model (LightGBM) scores every candidate from its cached features.

The model file is one JSON document: the feature names it reads, LightGBM's text dump of the booster, the
calibrator (`calibration.py`) that turns its scores into P(relevant), and what it was trained on. The
package ships one (`toolkit/models/learned-fusion.json`, trained by `hrt train-fusion` on the pooled dev
splits of the shared collections and the demo); `fusion.model` names another.

The scores depend on the cached features and the model only, not on any slider, so `rescore` computes the
fused lists once per (Prepared, model file) and every later slider change reuses them: blend buckets,
dedup and thresholds still apply after it. List weights, RRF k and the rank bonus do not apply to it.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from . import calibration, ltr_features
from .errors import InputError
from .files import write_text_atomic

FORMAT = "hrt-learned-fusion"
SHIPPED_MODEL = Path(__file__).resolve().parent / "models" / "learned-fusion.json"
SCORED_SCHEMA = {
    "qid": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "score": pl.Float64, "rank": pl.Int64, "score_prob": pl.Float64,
}  # fmt: skip


def _lightgbm():
    try:
        import lightgbm
    except ImportError as e:  # pragma: no cover - lightgbm is a core dependency
        raise InputError("fusion.method 'learned' needs the lightgbm package: pip install lightgbm") from e
    return lightgbm


@dataclass
class FusionModel:
    """A trained LambdaMART fusion model, its calibrator and its provenance."""

    features: list[str]
    booster_text: str
    calibration: dict | None = None
    router: dict | None = None
    info: dict[str, Any] = field(default_factory=dict)
    # The trees learn a correction on top of `scale` x 30 x (plain RRF, k = 60): where they are unsure the
    # model falls back to RRF's order (30 x RRF is ~1 for a document ranked first in both lists).
    prior: dict | None = None
    _booster: Any = field(default=None, repr=False, compare=False)

    @property
    def booster(self):
        if self._booster is None:
            self._booster = _lightgbm().Booster(model_str=self.booster_text)
        return self._booster

    def predict(self, feats: pl.DataFrame) -> np.ndarray:
        missing = [f for f in self.features if f not in feats.columns]
        if missing:
            raise InputError(f"learned fusion model needs feature(s) {', '.join(missing)} that this toolkit does not compute")
        if not len(feats):
            return np.zeros(0)
        x = feats.select(self.features).to_numpy().astype(np.float64)
        return np.asarray(self.booster.predict(x, num_threads=1), dtype=np.float64) + prior_score(feats, self.prior)

    def save(self, path: str | Path) -> Path:
        doc = {"format": FORMAT, "version": 1, "features": self.features, "prior": self.prior, "calibration": self.calibration,
               "router": self.router, "info": self.info, "booster": self.booster_text}  # fmt: skip
        return write_text_atomic(path, json.dumps(doc, indent=1) + "\n")

    @classmethod
    def load(cls, path: str | Path | None = None) -> FusionModel:
        p = resolve(path)
        try:
            doc = json.loads(p.read_text(encoding="utf-8"))
        except OSError as e:
            raise InputError(f"{p}: cannot read learned fusion model: {e.strerror or e}") from None
        except json.JSONDecodeError as e:
            raise InputError(f"{p}:{e.lineno}: not a learned fusion model (invalid JSON: {e.msg})") from None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT:
            raise InputError(f"{p}: not a learned fusion model (no \"format\": \"{FORMAT}\"); train one with `hrt train-fusion`")
        for key in ("features", "booster"):
            if key not in doc:
                raise InputError(f"{p}: learned fusion model lacks field {key!r}")
        unknown = [f for f in doc["features"] if f not in ltr_features.FEATURE_NAMES]
        if unknown:
            raise InputError(f"{p}: features {', '.join(unknown)} are not computed by this toolkit version")
        return cls(doc["features"], doc["booster"], doc.get("calibration"), doc.get("router"), doc.get("info", {}), doc.get("prior"))


def prior_score(feats: pl.DataFrame, prior: dict | None) -> np.ndarray:
    """The model's starting score before its trees: `scale` x 30 x the feature (plain RRF), or 0."""
    if not prior or not prior.get("scale"):
        return np.zeros(len(feats))
    return float(prior["scale"]) * 30.0 * feats[prior.get("feature", "rrf")].cast(pl.Float64).to_numpy()


def resolve(path: str | Path | None) -> Path:
    """The model file: `path`, or the shipped model when None."""
    p = SHIPPED_MODEL if path in (None, "") else Path(path).expanduser()
    if not p.is_file():
        hint = " (the shipped model is missing: reinstall the package)" if path in (None, "") else ""
        raise InputError(f"fusion.model: {p}: file not found{hint}")
    return p


def score(feats: pl.DataFrame, model: FusionModel) -> pl.DataFrame:
    """Ranked [qid, doc_id, chunk_id, score, rank, score_prob] for every query of `feats`.

    Ties (equal model scores) break by best list rank, then doc_id, so the order is deterministic.
    """
    if not len(feats):
        return pl.DataFrame(schema=SCORED_SCHEMA)
    s = feats.select("qid", "doc_id", "chunk_id", "best_rr").with_columns(pl.Series("score", model.predict(feats)))
    s = s.sort(["qid", "score", "best_rr", "doc_id"], descending=[False, True, True, False])
    s = s.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank"))
    prob = calibration.apply(model.calibration, calibration.inputs(s)) if model.calibration else np.full(len(s), np.nan)
    return s.with_columns(pl.Series("score_prob", prob).fill_nan(None)).select(list(SCORED_SCHEMA))


def scored_for(prep: Any, model_path: str | None) -> pl.DataFrame:
    """`score` of `prep`'s cached features under the model file, cached on `prep` until the features or the
    file change (a slider change then costs nothing here)."""
    p = resolve(model_path)
    stamp = f"learned:{p}:{p.stat().st_mtime_ns}"
    feats = prep.ltr_features if prep.ltr_features is not None else ltr_features.empty()
    return prep.derived(stamp, (feats,), lambda: score(feats, FusionModel.load(p)))


def fuse(prep: Any, model_path: str | None) -> tuple[pl.DataFrame, float]:
    """(fused [qid, doc_id, chunk_id, score, rank], seconds): the learned ranking in `fusion.fuse`'s shape."""
    t = time.perf_counter()
    s = scored_for(prep, model_path)
    return s.select("qid", "doc_id", "chunk_id", "score", "rank"), time.perf_counter() - t


def attach_prob(ranked: pl.DataFrame, prep: Any, model_path: str | None) -> pl.DataFrame:
    """`ranked` with `score_prob` (the calibrated P(relevant) of each document under the learned model)."""
    probs = scored_for(prep, model_path).select("qid", "doc_id", "score_prob")
    if "score_prob" in ranked.columns:
        ranked = ranked.drop("score_prob")
    return ranked.join(probs, on=["qid", "doc_id"], how="left", maintain_order="left")
