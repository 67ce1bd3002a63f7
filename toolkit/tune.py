"""Tune the cheap pipeline fields on a dev split, with k-fold cross-validation over queries.

Every trial is one `rescore` of all queries from the stage cache plus one evaluation; folds only slice the
per-query values. For each fold the trial that is best on the other folds is scored on the held-out fold,
so the reported held-out score never saw its own queries (selection among the same trial history; the
search itself is not re-run per fold, which keeps it cheap and still honest about selection).
"""

from __future__ import annotations

import json
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import optuna
import polars as pl
import yaml

from .compare import compare
from .config import PipelineConfig, load_config, save_config
from .errors import InputError
from .interop import qrels_frame, queries_frame
from .loaders import Dataset
from .metrics import cutoff_depth, evaluate
from .pipeline import Prepared, prepare, rescore
from .store import Store

CHEAP_PREFIXES = (
    "fusion.",
    "rerank.blend",
    "rerank.buckets",
    "rerank.score_normalization",
    "dedup.",
    "threshold.",
    "routing.technical_lexical_boost",
)
DEFAULT_SPACE: dict[str, Any] = {
    "fusion.method": {"choice": ["rrf", "convex"]},
    "fusion.rrf_k": {"int": [5, 120]},
    "fusion.lexical_weight": {"float": [0.1, 3.0]},
    "fusion.dense_weight": {"float": [0.1, 3.0]},
    "fusion.alpha": {"float": [0.0, 1.0]},
    "fusion.normalization": {"choice": ["minmax", "zscore", "rank", "fixed"]},
    "fusion.rank_bonus@1": {"float": [0.0, 0.1]},
    "fusion.rank_bonus@3": {"float": [0.0, 0.05]},
}
# Fixed settings the search must beat on held-out folds: the base itself, each list alone and plain RRF.
# On a dev split of a few dozen queries a 40-trial search overfits (measured: MS MARCO DL19 dev, 24
# queries, search 0.792 in-sample but 0.771 held-out, dense alone 0.788), so the tuner chooses between
# "search" and "best fixed setting" by the same cross-validation and keeps the fixed one unless the
# search wins on held-out folds.
ANCHORS: dict[str, dict[str, Any]] = {
    "base": {},
    "lexical only": {"fusion.method": "rrf", "fusion.lexical_weight": 1.0, "fusion.dense_weight": 0.0,
                     "fusion.rank_bonus": []},
    "dense only": {"fusion.method": "rrf", "fusion.lexical_weight": 0.0, "fusion.dense_weight": 1.0,
                   "fusion.rank_bonus": []},
    "plain rrf": {"fusion.method": "rrf", "fusion.rrf_k": 60, "fusion.lexical_weight": 1.0,
                  "fusion.dense_weight": 1.0, "fusion.rank_bonus": []},
}


@dataclass
class TuneReport:
    """What a tuning run found. `cv_heldout` is the honest number (selection never saw its fold);
    `best_dev` is optimistic (picked on the same queries). `sensitivity` is descriptive, not causal."""

    base: str
    measure: str
    method: str
    trials: int
    folds: int
    stratify: str | None
    base_dev: float
    best_dev: float
    cv_heldout: float
    p_value: float
    best_params: dict[str, Any]
    chosen: str  # "search", or the name of the fixed setting (ANCHORS) that beat it on held-out folds
    cv_heldout_search: float
    cv_heldout_anchors: float
    anchors: dict[str, float]  # each fixed setting's mean on the whole split
    diff: dict[str, Any]
    sensitivity: dict[str, float]
    history: list[dict[str, Any]] = field(default_factory=list)
    seconds: dict[str, float] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return json.loads(json.dumps(asdict(self), default=str))


def load_space(space: dict | str | Path | None) -> dict[str, Any]:
    if space is None:
        return dict(DEFAULT_SPACE)
    if isinstance(space, dict):
        return space
    p = Path(space)
    try:
        d = yaml.safe_load(p.read_text())
    except (OSError, yaml.YAMLError) as e:
        raise InputError(f"{p}: cannot read the search space ({e})") from e
    if not isinstance(d, dict):
        raise InputError(f"{p}: a search space maps config paths to distributions")
    return d


def _apply(cfg: PipelineConfig, params: dict[str, Any]) -> PipelineConfig:
    """Config with `params`; `fusion.rank_bonus@1` / `@3` set the bonus of rank 1 and of ranks 2-3."""
    plain = {k: v for k, v in params.items() if "@" not in k}
    if any("@" in k for k in params):
        b1 = params.get("fusion.rank_bonus@1", dict(cfg.fusion.rank_bonus).get(1, 0.0))
        b3 = params.get("fusion.rank_bonus@3", dict(cfg.fusion.rank_bonus).get(3, 0.0))
        plain["fusion.rank_bonus"] = [[1, float(b1)], [3, float(b3)]]
    return cfg.with_updates(plain)


def _validate(space: dict[str, Any], base: PipelineConfig, origin: str) -> None:
    for key, dist in space.items():
        if not key.startswith(CHEAP_PREFIXES):
            raise InputError(
                f"{origin}: {key}: changes the cached (expensive) stages; tune only {', '.join(CHEAP_PREFIXES)}"
            )
        if not (
            isinstance(dist, list)
            or (
                isinstance(dist, dict)
                and len(dist) == 1
                and next(iter(dist)) in ("int", "float", "choice", "grid")
            )
        ):
            raise InputError(
                f"{origin}: {key}: expected {{int|float: [lo, hi]}}, {{choice: [...]}} or a list"
            )
        lo_hi = dist.get("int", dist.get("float")) if isinstance(dist, dict) else None
        if lo_hi is not None and (len(lo_hi) != 2 or lo_hi[0] > lo_hi[1]):
            raise InputError(f"{origin}: {key}: range must be [lo, hi] with lo <= hi")
        # Every choice and both range ends must make a valid config, so no trial fails on a typo.
        samples = (
            list(lo_hi)
            if lo_hi is not None
            else list(dist if isinstance(dist, list) else next(iter(dist.values())))
        )
        if not samples:
            raise InputError(f"{origin}: {key}: no values to try")
        for sample in samples:
            try:
                _apply(base, {key: sample})
            except InputError as e:
                raise InputError(f"{origin}: {key}: {e}") from None


def _suggest(trial: optuna.Trial, key: str, dist: Any) -> Any:
    if isinstance(dist, list):
        return trial.suggest_categorical(key, dist)
    kind, val = next(iter(dist.items()))
    if kind == "int":
        return trial.suggest_int(key, int(val[0]), int(val[1]))
    if kind == "float":
        return trial.suggest_float(key, float(val[0]), float(val[1]))
    return trial.suggest_categorical(key, list(val))


def _grid(space: dict[str, Any]) -> dict[str, list[Any]]:
    out = {}
    for key, dist in space.items():
        if isinstance(dist, list):
            out[key] = dist
        else:
            kind, val = next(iter(dist.items()))
            if kind == "int":
                out[key] = sorted({int(round(x)) for x in np.linspace(val[0], val[1], 5)})
            elif kind == "float":
                out[key] = [float(x) for x in np.linspace(val[0], val[1], 5)]
            else:
                out[key] = list(val)
    return out


def cv_heldout(scores: np.ndarray, fold: np.ndarray) -> tuple[np.ndarray, list[int]]:
    """Per-query held-out values: for each fold, the trial (row of `scores`, trials x queries) with the best
    mean on the other folds, read on that fold. Returns (values per query, chosen trial per fold)."""
    held = np.zeros(scores.shape[1])
    chosen = []
    for f in np.unique(fold):
        train, test = fold != f, fold == f
        best_t = int(np.argmax(scores[:, train].mean(axis=1))) if train.any() else 0
        held[test] = scores[best_t, test]
        chosen.append(best_t)
    return held, chosen


def make_folds(qids: list[str], folds: int, seed: int, groups: list[str] | None = None) -> np.ndarray:
    """Fold number per query: random, or stratified by `groups` (each group dealt round-robin)."""
    rng = np.random.default_rng(seed)
    fold = np.empty(len(qids), dtype=np.int64)
    keys = groups or [""] * len(qids)
    offset = 0
    for g in sorted(set(keys)):
        idx = np.array([i for i, k in enumerate(keys) if k == g])
        rng.shuffle(idx)
        fold[idx] = (np.arange(len(idx)) + offset) % folds
        offset += len(idx)
    return fold


def tune_dataset(store: Store, dataset_dir: str | Path, split: str = "dev", **kw: Any) -> tuple[PipelineConfig, TuneReport]:
    """`tune` on the judged queries of a BEIR-layout folder's `split` (the folder's name goes into the
    tuned config's description)."""
    ds = Dataset.open(dataset_dir)
    return tune(store, ds.queries(split), ds.qrels(split), split=split, source=ds.name, **kw)


def tune(
    store: Store,
    queries: Any,
    qrels: Any = None,
    *,
    split: str = "dev",
    prepared: Prepared | None = None,
    source: str = "in-memory queries",
    base: str | PipelineConfig = "qmd",
    space: dict | str | Path | None = None,
    method: str = "tpe",
    budget: int = 40,
    measure: str = "nDCG@10",
    folds: int = 5,
    stratify: str | None = None,
    seed: int = 0,
    out: str | Path | None = None,
    force: bool = False,
    progress: bool = True,
    anchors: bool = True,
) -> tuple[PipelineConfig, TuneReport]:
    """Search `space` around `base` on `queries` judged by `qrels`; returns the best config and an honest report.

    `queries` and `qrels` are frames (polars or pandas; toolkit, PyTerrier, BEIR or ir_measures column
    names, see `toolkit.interop`); a dataset folder as `queries` is `tune_dataset(store, folder, split)`.
    `prepared` (from `pipeline.prepare` on these queries with `base`'s retrieval settings) skips the
    expensive stages; `split` only labels the queries (tuning on "test" is refused unless `force`).

    With `anchors`, the search result is kept only if its cross-validated held-out score beats that of
    picking the best fixed setting (`ANCHORS`) the same way; otherwise that fixed setting is returned
    (`report.chosen` says which). `cv_heldout` is the chosen procedure's held-out score; having chosen
    between two procedures on it makes it very slightly optimistic.
    """
    if split == "test" and not force:
        raise InputError(
            "refusing to tune on the test split (tune on dev, report on test); pass force=True to override"
        )
    if split == "test":
        warnings.warn("tuning on the test split: its scores are not results", stacklevel=2)
    t_all = time.perf_counter()
    base_cfg = load_config(base)
    sp = load_space(space)
    _validate(sp, base_cfg, str(space) if isinstance(space, (str, Path)) else "space")
    if isinstance(queries, str | Path):
        ds = Dataset.open(queries)
        queries, qrels, source = ds.queries(split), ds.qrels(split), ds.name
    queries, qrels = queries_frame(queries), qrels_frame(qrels)
    # Near-duplicate dedup needs chunk vectors from prepare: fetch them once if the space can switch it on.
    prep_cfg = (
        base_cfg.with_updates({"dedup.near_duplicate_enabled": True})
        if "dedup.near_duplicate_enabled" in sp
        else base_cfg
    )
    t0 = time.perf_counter()
    prep = prepare(store, queries, prep_cfg, progress=progress) if prepared is None else _check_prepared(prepared, queries, sp)
    t_prep = time.perf_counter() - t0
    # Only judged queries count: an unjudged query has no score to tune on.
    judged = queries.filter(pl.col("qid").is_in(qrels["qid"].unique().implode()))
    qids = judged["qid"].to_list()
    if not 2 <= folds <= len(qids):
        raise InputError(f"folds={folds}: need 2 <= folds <= {len(qids)} (judged {split} queries)")
    groups = None
    if stratify:
        if "metadata" not in judged.columns:
            raise InputError(f"stratify={stratify!r}: {split} queries carry no metadata")
        groups = [str(json.loads(m or "{}").get(stratify)) for m in judged["metadata"].to_list()]
        if len(set(groups)) == 1 and groups[0] == "None":
            raise InputError(f"stratify={stratify!r}: no {split} query has that metadata field")
    fold = make_folds(qids, folds, seed, groups)
    order = pl.DataFrame({"qid": qids})

    def per_query(cfg: PipelineConfig) -> np.ndarray:
        pq = evaluate(rescore(prep, cfg, trace=False).run(cutoff_depth([measure])), qrels, [measure])
        # A join keeps the query order fixed across trials; a query with no result row scores 0.
        got = order.join(pq.select("qid", "value"), on="qid", how="left")
        return got["value"].fill_null(0.0).to_numpy().astype(float)

    history: list[tuple[dict[str, Any], np.ndarray]] = []

    def objective(trial: optuna.Trial) -> float:
        params = {k: _suggest(trial, k, d) for k, d in sp.items()}
        try:
            vals = per_query(_apply(base_cfg, params))
        except InputError:
            raise optuna.TrialPruned() from None
        history.append((params, vals))
        return float(vals.mean())

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    if method == "grid":
        grid = _grid(sp)
        sampler: optuna.samplers.BaseSampler = optuna.samplers.GridSampler(grid, seed=seed)
        budget = min(budget, int(np.prod([len(v) for v in grid.values()])))
    elif method == "random":
        sampler = optuna.samplers.RandomSampler(seed=seed)
    elif method == "tpe":
        sampler = optuna.samplers.TPESampler(seed=seed)
    else:
        raise InputError(f"unknown method {method!r} (grid, random, tpe)")
    t0 = time.perf_counter()
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.optimize(objective, n_trials=budget, show_progress_bar=progress)
    t_trials = time.perf_counter() - t0
    if not history:
        raise InputError("no trial produced a valid config; check the search space")

    base_vals = per_query(base_cfg)
    scores = np.stack([v for _, v in history])  # trials x queries
    held, _ = cv_heldout(scores, fold)
    # Anchors are fusion settings: they compete only with a search that moves fusion fields.
    use_anchors = anchors and any(k.startswith("fusion.") for k in sp)
    # The base's per-query values are already known; the other fixed settings are one rescore each.
    anchor_vals = {a: per_query(_apply(base_cfg, p)) if p else base_vals for a, p in ANCHORS.items()} if use_anchors else {}
    held_anchor = cv_heldout(np.stack(list(anchor_vals.values())), fold)[0] if anchor_vals else None
    if held_anchor is not None and held_anchor.mean() >= held.mean():
        chosen = max(anchor_vals, key=lambda a: anchor_vals[a].mean())
        best_params, best_vals, held_chosen = dict(ANCHORS[chosen]), anchor_vals[chosen], held_anchor
    else:
        best_i = int(np.argmax(scores.mean(axis=1)))
        chosen, best_params, best_vals, held_chosen = "search", history[best_i][0], scores[best_i], held
    best_cfg = _apply(base_cfg, best_params).with_updates(
        {
            "name": f"{base_cfg.name}-tuned",
            "description": f"{base_cfg.name} tuned on {source} {split} for {measure}",
        }
    )
    sig = compare(
        pl.DataFrame(
            {
                "system": ["base"] * len(qids) + ["best"] * len(qids),
                "qid": qids * 2,
                "measure": measure,
                "value": np.r_[base_vals, best_vals],
            }
        ),
        "base",
    )
    report = TuneReport(
        base=base_cfg.name,
        measure=measure,
        method=method,
        trials=len(history),
        folds=folds,
        stratify=stratify,
        base_dev=float(base_vals.mean()),
        best_dev=float(best_vals.mean()),
        cv_heldout=float(held_chosen.mean()),
        p_value=float(sig.filter(pl.col("system") == "best")["p_value"][0]),
        best_params=best_params,
        chosen=chosen,
        cv_heldout_search=float(held.mean()),
        cv_heldout_anchors=float(held_anchor.mean()) if held_anchor is not None else float("nan"),
        anchors={n: float(v.mean()) for n, v in anchor_vals.items()},
        diff={
            k: {"base": a, "best": b}
            for k, (a, b) in base_cfg.diff(best_cfg).items()
            if k not in ("name", "description")
        },
        sensitivity=_sensitivity(history),
        history=[{"params": p, "score": float(v.mean())} for p, v in history],
        seconds={
            "prepare": t_prep,
            "trials": t_trials,
            "per_trial": t_trials / max(len(history), 1),
            "total": time.perf_counter() - t_all,
        },
    )
    if out is not None:
        save_config(best_cfg, out)
        Path(out).with_suffix(".report.json").write_text(json.dumps(report.to_dict(), indent=2))
    return best_cfg, report


def _check_prepared(prep: Prepared, queries: pl.DataFrame, space: dict[str, Any]) -> Prepared:
    """Given prepared frames must cover the queries (and carry vectors when the space can switch on
    near-duplicate dedup); otherwise the tuner would score queries without candidates as misses."""
    missing = queries.join(prep.queries.select("qid"), on="qid", how="anti")
    if len(missing):
        raise InputError(
            f"prepared: {len(missing)} of the queries were not prepared (e.g. {missing['qid'][0]!r}); "
            "prepare the same query set"
        )
    if "dedup.near_duplicate_enabled" in space and prep.vectors is None:
        raise InputError("prepared: the space switches near-duplicate dedup on, but the frames carry no vectors; "
                         "prepare with dedup.near_duplicate_enabled: true")
    return prep


def _sensitivity(history: list[tuple[dict[str, Any], np.ndarray]]) -> dict[str, float]:
    """Descriptive only: the spread (max - min) of the mean objective across each field's values, binned
    into terciles for numbers. With few trials it mixes in the other fields' effects."""
    out = {}
    for key in history[0][0]:
        vals = [p.get(key) for p, _ in history]
        obj = np.array([v.mean() for _, v in history])
        if all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in vals) and len(set(vals)) > 3:
            cuts = np.quantile(vals, [1 / 3, 2 / 3])
            bins = np.digitize(vals, cuts)
        else:
            bins = np.array([str(v) for v in vals])
        means = [obj[bins == b].mean() for b in np.unique(bins)]
        out[key] = float(max(means) - min(means)) if len(means) > 1 else 0.0
    return out
