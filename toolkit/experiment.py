"""Compare named configs on one query set in one call, as PyTerrier's `pt.Experiment` and ranx's `compare` do.

    import toolkit
    toolkit.experiment(store, queries, qrels, {"bm25": "bm25-only", "qmd": "qmd"},
                       ["nDCG@10", "recip_rank"], baseline="bm25")

Configs that share a prepare key (`pipeline.prepare_key`: everything the expensive stages read) are
prepared once and re-scored per config, so comparing ten fusion settings costs one retrieval. The
statistics are those of `compare.compare` (paired test per measure, Holm's correction across systems,
win/tie/loss); this module only runs the systems and lays the numbers out.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import polars as pl

from .compare import compare
from .config import PipelineConfig, load_config
from .errors import InputError
from .interop import qrels_frame, queries_frame
from .metrics import IdMismatchWarning, cutoff_depth, evaluate, parse_measures
from .pipeline import Result, prepare, prepare_key, rescore
from .provenance import InSampleWarning, in_sample_notes
from .store import Store, need_store

DEFAULT_MEASURES = ("nDCG@10", "R@10", "MRR@10")
CORRECTIONS = ("holm", "bonferroni", "none")


def _systems(configs: Mapping[str, Any] | Iterable[Any]) -> dict[str, PipelineConfig]:
    """{name: config}; a list of configs (preset names, paths, PipelineConfig) is named by each config."""
    if isinstance(configs, Mapping):
        items = [(str(k), v) for k, v in configs.items()]
    elif isinstance(configs, str | Path | PipelineConfig):
        items = [(None, configs)]
    else:
        items = [(None, c) for c in configs]
    out: dict[str, PipelineConfig] = {}
    for name, c in items:
        cfg = load_config(c)
        name = name or cfg.name
        if name in out:
            raise InputError(f"experiment: two systems named {name!r}; pass a dict {{name: config}}")
        out[name] = cfg
    if not out:
        raise InputError("experiment: no configs given")
    return out


def run_systems(
    store: Store, queries: Any, systems: Mapping[str, PipelineConfig], *, progress: bool = False
) -> tuple[dict[str, Result], dict[str, str]]:
    """Run every config, preparing once per prepare key. Returns ({name: Result}, {name: prepare key})."""
    queries = queries_frame(queries)
    keys = {name: prepare_key(store, queries, cfg) for name, cfg in systems.items()}
    results: dict[str, Result] = {}
    for key in dict.fromkeys(keys.values()):  # first-seen order
        names = [n for n, k in keys.items() if k == key]
        prep = prepare(store, queries, systems[names[0]], progress=progress)
        for n in names:
            results[n] = rescore(prep, systems[n], trace=False)
    return results, keys


def experiment(
    store: Store,
    queries: Any,
    qrels: Any,
    configs: Mapping[str, Any] | Iterable[Any],
    measures: str | Iterable[str] = DEFAULT_MEASURES,
    *,
    baseline: str | int | None = None,
    correction: str = "holm",
    test: str = "randomization",
    alpha: float = 0.05,
    per_query: bool = False,
    progress: bool = False,
    rel_threshold: int = 1,
) -> pl.DataFrame:
    """One row per system: the mean of each measure and, with a `baseline` (a name, or an index into the
    configs), per measure the delta, wins/ties/losses (`m +`, `m =`, `m -`), the paired test's p-value,
    the p-value corrected across systems (`correction`: holm, bonferroni or none), `m reject` (corrected
    p <= alpha) and `m ci low` / `m ci high`, the 95% interval of the delta (`compare.bootstrap_ci`). Measure names may be toolkit, ir_measures or trec_eval spellings. `queries` and `qrels`
    may be polars or pandas frames with toolkit, PyTerrier, BEIR or ir_measures columns. `rel_threshold`:
    the grade binary measures count as relevant (2 for TREC DL; nDCG uses every grade).

    `per_query=True` returns the per-query values [name, qid, measure, value] instead (what `compare`
    takes). The frame is polars; `.to_pandas()` gives the PyTerrier-shaped pandas frame. Judged documents
    that are not in the store (ids that do not match, so silent zeros) warn with `IdMismatchWarning`; a
    config tuned on these queries, or whose fusion model was trained on them, with `InSampleWarning`.
    """
    if correction not in CORRECTIONS:
        raise InputError(f"correction {correction!r}: expected one of {', '.join(CORRECTIONS)}")
    systems = _systems(configs)
    labels = [m.label for m in parse_measures(measures)]
    q = queries_frame(queries)
    qr = qrels_frame(qrels).join(q.select("qid"), on="qid", how="semi")
    if not len(qr):
        raise InputError("experiment: no judgement matches a query id of the query set")
    names = list(systems)
    if isinstance(baseline, int) and not isinstance(baseline, bool):
        if not -len(names) <= baseline < len(names):
            raise InputError(f"baseline index {baseline}: only {len(names)} systems")
        baseline = names[baseline]
    if baseline is not None and baseline not in systems:
        raise InputError(f"baseline {baseline!r}: no such system (have {', '.join(names)})")

    _warn_unknown_docs(need_store(store), qr)  # before the runs, which may take minutes
    for line in in_sample_notes(systems, q["qid"].to_list(), q["text"].to_list()):  # as `hrt run` says it
        warnings.warn(line, InSampleWarning, stacklevel=2)
    results, _ = run_systems(store, q, systems, progress=progress)
    depth = cutoff_depth(labels)
    pq = pl.concat(
        [evaluate(results[n].run(depth), qr, labels, rel_threshold=rel_threshold).select(pl.lit(n).alias("name"), "qid", "measure", "value") for n in names]
    )
    if per_query:
        return pq

    means = pq.group_by("name", "measure", maintain_order=True).agg(pl.col("value").mean())
    out = pl.DataFrame({"name": names})
    for m in labels:
        out = out.join(means.filter(pl.col("measure") == m).select("name", pl.col("value").alias(m)), on="name", how="left")
    if baseline is None:
        return out

    cmp = compare(pq.rename({"name": "system"}), baseline, test=test, alpha=alpha)
    if correction == "bonferroni":
        n_other = max(len(names) - 1, 1)
        cmp = cmp.with_columns(pl.min_horizontal(pl.col("p_value") * n_other, pl.lit(1.0)).alias("p_corr"))
    elif correction == "holm":
        cmp = cmp.with_columns(pl.col("p_holm").alias("p_corr"))
    else:
        cmp = cmp.with_columns(pl.col("p_value").alias("p_corr"))
    for m in labels:
        c = cmp.filter(pl.col("measure") == m).select(
            pl.col("system").alias("name"),
            pl.col("delta").alias(f"{m} delta"),
            pl.col("wins").alias(f"{m} +"),
            pl.col("ties").alias(f"{m} ="),
            pl.col("losses").alias(f"{m} -"),
            pl.col("p_value").alias(f"{m} p-value"),
            pl.col("p_corr").alias(f"{m} p-value corrected"),
            (pl.col("p_corr") <= alpha).fill_null(False).alias(f"{m} reject"),
            pl.col("ci_low").alias(f"{m} ci low"),  # 95% interval of the delta (`compare.bootstrap_ci`)
            pl.col("ci_high").alias(f"{m} ci high"),
        )
        out = out.join(c, on="name", how="left")
    # The baseline's own row: delta 0, no test (PyTerrier leaves these empty too).
    return out.with_columns(
        pl.when(pl.col("name") == baseline).then(pl.lit(0.0)).otherwise(pl.col(f"{m} delta")).alias(f"{m} delta") for m in labels
    )


def _warn_unknown_docs(store: Store, qrels: pl.DataFrame) -> None:
    """Warn when judged documents are not in the store: no system can retrieve them, so with ids that do not
    match (a path prefix, a missing extension) every value is a silent 0. One semi-join in the store."""
    judged = qrels["doc_id"].unique()
    found = store.documents(judged.to_list()).select("doc_id")
    missing = judged.filter(~judged.is_in(found["doc_id"].implode()))
    if len(missing):
        warnings.warn(
            f"experiment: {len(missing)} of {len(judged)} judged documents are not in the store (e.g. "
            f"{missing.sort()[0]!r}); no system can retrieve them, so they count as misses"
            + (" and every value is 0: do the qrels' doc ids match the store's?" if not len(found) else ""),
            IdMismatchWarning,
            stacklevel=3,
        )


def group_by_prepare(store: Store, queries: Any, configs: Mapping[str, Any] | Iterable[Any]) -> dict[str, list[str]]:
    """{prepare key: [system names]}: which configs share their expensive stages (one retrieval each)."""
    systems = _systems(configs)
    q = queries_frame(queries)
    out: dict[str, list[str]] = {}
    for name, cfg in systems.items():
        out.setdefault(prepare_key(store, q, cfg), []).append(name)
    return out


__all__ = ["experiment", "group_by_prepare", "run_systems"]
