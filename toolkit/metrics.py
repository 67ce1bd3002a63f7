"""Evaluation measures over all queries at once, agreeing with trec_eval (as used by ir_measures/pytrec_eval).

Widgets re-score every query on each change, so every measure is one polars expression inside a single
group-by over the whole run: no per-query Python loop (1,536 queries x 100 results: ~40 ms CPU for the
default measures on these 2 cores). The tests check agreement with ir_measures
(pytrec_eval backend) per query to 1e-6 on real BM25 runs and on runs with tied scores.

Conventions (those of trec_eval, so numbers are comparable with published ones):

- Order (`ties="trec"`, the default): the run's `rank` column is ignored. Each query's documents are
  ordered by score descending with the score taken as a 32-bit float, as trec_eval stores it, ties broken
  by doc id descending (byte-wise string order). So two scores 1e-9 apart tie, as they do in trec_eval.
  `ties="rank"` orders by the `rank` column instead (the ranking as written; trec order breaks repeats).
  Runs written by `runs.write_run` (and `Result.run()`) have float32-strict scores: both orders agree.
  A document repeated for one query keeps its best-placed occurrence.
- Query set: every query with at least one judgement, of any grade. A query with no rows in the run
  scores 0 on every measure (trec_eval `-c`). `only_run_queries=True` evaluates only the judged queries
  that appear in the run, which is what ir_measures does by default. Run queries without judgements are
  never evaluated. A query judged with only grades <= 0 (or below `rel_threshold`) has no relevant
  document and scores 0 on every measure, as in trec_eval, pytrec_eval and BEIR's evaluation (it used to
  be left out, which made the mean differ from theirs on TREC-style qrels). A run none of whose queries
  is judged (ids that do not match) warns with `IdMismatchWarning`; `id_warnings` says more.
- Relevance: binary measures (R, P, RR, AP, Hit, Rprec) count `rel >= rel_threshold` as relevant (TREC DL /
  msmarco uses 2; trec_eval `-l`, ir_measures `rel=`). nDCG ignores the threshold and uses the raw grade as
  gain (`gain="linear"`, trec_eval's default) or `2**grade - 1` (`gain="exp"`); grades <= 0 gain nothing.
  The ideal DCG is computed from ALL judged documents of the query, not only the retrieved ones.
- Denominators: R@k and AP divide by the number of relevant judged documents (not min(R, k)); P@k divides
  by k even when fewer documents were retrieved; a query with no relevant document scores 0.
- RR@k: trec_eval has no cutoff for RR; RR@k is RR over the top k in the order above. (ir_measures'
  default pipeline computes RR@k with its msmarco provider, which can break ties differently.)
- Judged@k (ir_measures' Judged): the share of the run's top k that is judged at all (any grade, 0 too), over
  the min(k, retrieved) documents shown; not a trec_eval measure. Shallow judgements make every other value a
  lower bound: unjudged documents count as not relevant.
- Labels: the `measure` column holds each measure string as the caller wrote it ("MRR@10" stays
  "MRR@10"), so `aggregate(...)["MRR@10"]` finds it.

Measures (case-insensitive, `@k` a positive cutoff): nDCG[@k], R[@k] / Recall[@k], P@k, RR[@k] / MRR[@k],
AP[@k] / MAP[@k], Hit@k / Success@k, Rprec, Judged[@k]; and the trec_eval spellings ndcg_cut_10, P_5, recall_100, map,
map_cut_10, recip_rank, success_1 (the label keeps the spelling given).
"""

from __future__ import annotations

import re
import warnings
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

import numpy as np
import polars as pl

from .errors import InputError

DEFAULT_MEASURES = ("nDCG@10", "R@5", "R@10", "MRR@10")

# name (lowercase) -> (kind, cutoff rule: "optional" | "required" | "none")
_NAMES: dict[str, tuple[str, str]] = {
    "ndcg": ("ndcg", "optional"),
    "r": ("recall", "optional"),
    "recall": ("recall", "optional"),
    "p": ("precision", "required"),
    "precision": ("precision", "required"),
    "rr": ("rr", "optional"),
    "mrr": ("rr", "optional"),
    "ap": ("ap", "optional"),
    "map": ("ap", "optional"),
    "hit": ("success", "required"),
    "success": ("success", "required"),
    "rprec": ("rprec", "none"),
    "judged": ("judged", "optional"),
}
KNOWN = (
    "nDCG[@k], R[@k] (Recall), P@k, RR[@k] / MRR[@k], AP[@k] / MAP[@k], Hit@k / Success@k, Rprec, Judged[@k]; "
    "trec_eval names: ndcg, ndcg_cut_k, P_k, recall_k, map, map_cut_k, recip_rank, success_k, Rprec"
)
_MEASURE_RE = re.compile(r"^\s*([A-Za-z]+)\s*(?:@\s*(\d+))?\s*$")
# trec_eval names (`-m` spellings, as pytrec_eval and ir_measures.parse_trec_measure take them) -> kind.
_TREC_NAMES = {"ndcg_cut": "ndcg", "ndcg": "ndcg", "p": "precision", "recall": "recall", "map_cut": "ap",
               "recip_rank": "rr", "success": "success", "rprec": "rprec"}
_PARAMS_RE = re.compile(r"^\s*([A-Za-z]+)\((.*)\)\s*(@\s*\d+)?\s*$")  # ir_measures P(rel=2)@5
# trec_eval's names: as its output spells them (ndcg_cut_10, P_5) and as its -m option takes them (ndcg_cut.10, P.5).
_TREC_RE = re.compile(r"^\s*(ndcg_cut|ndcg|P|recall|map_cut|recip_rank|success|Rprec)(?:[_.](\d+))?\s*$", re.IGNORECASE)


@dataclass(frozen=True)
class Measure:
    """A parsed measure: `label` is the caller's spelling, `kind` the computation, `k` the cutoff (None = all)."""

    label: str
    kind: str
    k: int | None


def parse_measure(text: Any) -> Measure:
    """'nDCG@10' -> Measure('nDCG@10', 'ndcg', 10); unknown names raise InputError listing the known ones.
    An ir_measures measure object (`ir_measures.nDCG@10`, `AP`, `RR@10`) is read by its str(), which is the
    ir_measures name ("nDCG@10"); one with parameters (`P(rel=2)@5`) is refused with the evaluate argument
    that does the same for all measures, since a threshold or gain here is per call, not per measure."""
    if not isinstance(text, str) and type(text).__module__.startswith("ir_measures"):
        text = str(text)
    p = _PARAMS_RE.match(text) if isinstance(text, str) else None
    if p is not None:
        raise InputError(
            f"measure {text!r}: per-measure parameters are not supported; write {p.group(1)}{p.group(3) or ''} and "
            "pass rel_threshold= (for rel=) or gain='exp' (for an exponential nDCG gain) to evaluate"
        )
    t = _TREC_RE.match(text) if isinstance(text, str) and ("_" in text or "." in text) else None
    if t is not None and (t.group(2) is not None) == (t.group(1).lower() in ("ndcg_cut", "p", "recall", "map_cut", "success")):
        # A trec_eval name: the label keeps the caller's spelling, the cutoff comes after the underscore.
        k = int(t.group(2)) if t.group(2) is not None else None
        if k is not None and k < 1:
            raise InputError(f"measure {text!r}: cutoff must be >= 1")
        return Measure(text.strip(), _TREC_NAMES[t.group(1).lower()], k)
    m = _MEASURE_RE.match(text) if isinstance(text, str) else None
    entry = _NAMES.get(m.group(1).lower()) if m else None
    if m is None or entry is None:
        raise InputError(f"measure {text!r}: unknown; known measures: {KNOWN}")
    kind, rule = entry
    k = int(m.group(2)) if m.group(2) is not None else None
    if k is not None and k < 1:
        raise InputError(f"measure {text!r}: cutoff must be >= 1")
    if rule == "required" and k is None:
        raise InputError(f"measure {text!r}: needs a cutoff, e.g. {m.group(1)}@10")
    if rule == "none" and k is not None:
        raise InputError(
            f"measure {text!r}: takes no cutoff (Rprec cuts at the number of relevant documents)"
        )
    return Measure(text.strip(), kind, k)


def parse_measures(measures: Any) -> list[Measure]:
    """Parse and de-duplicate (keeping order) a measure list; a single string (or ir_measures measure) is
    one measure."""
    items = [measures] if isinstance(measures, str) or not isinstance(measures, Iterable) else list(measures)
    if not items:
        raise InputError(f"measures: empty list; known measures: {KNOWN}")
    out: dict[str, Measure] = {}
    for t in items:
        p = parse_measure(t)
        out.setdefault(p.label, p)
    return list(out.values())


def _need(frame: pl.DataFrame, cols: Iterable[str], what: str) -> None:
    missing = [c for c in cols if c not in frame.columns]
    if missing:
        raise InputError(
            f"{what}: missing column(s) {', '.join(missing)} (have {', '.join(frame.columns) or 'none'})"
        )


def _gain(rel: pl.Expr, gain: str) -> pl.Expr:
    g = rel.cast(pl.Float64)
    if gain == "exp":
        g = pl.lit(2.0).pow(g) - 1.0
    return pl.when(rel > 0).then(g).otherwise(0.0)


def _to_source(frame: pl.DataFrame, doc_source: pl.DataFrame) -> pl.DataFrame:
    """Replace doc_id by its source; documents without a mapping are their own source."""
    m = doc_source.select(pl.col("doc_id").cast(pl.Utf8), pl.col("source").cast(pl.Utf8)).unique(
        "doc_id", keep="first"
    )
    return (
        frame.join(m, on="doc_id", how="left", maintain_order="left")  # keeps the trec_eval order
        .with_columns(pl.coalesce("source", "doc_id").alias("doc_id"))
        .drop("source")
    )


def evaluate(
    run: pl.DataFrame,
    qrels: pl.DataFrame,
    measures: str | Iterable[str | object] | object = DEFAULT_MEASURES,  # (object: an ir_measures measure, user trial BP)
    *,
    rel_threshold: int = 1,
    gain: Literal["linear", "exp"] = "linear",
    level: Literal["doc", "document", "source"] = "doc",
    doc_source: pl.DataFrame | None = None,
    only_run_queries: bool = False,
    ties: Literal["trec", "rank"] = "trec",
) -> pl.DataFrame:
    """Per-query values [qid, measure, value] of `measures` for `run` [qid, doc_id, score, ...] against
    `qrels` [qid, doc_id, rel]; see the module docstring for the trec_eval conventions followed.

    `gain`: "linear" (nDCG gains the grade, as trec_eval) or "exp" (2^grade - 1). `ties`: "trec" (each query's run
    re-sorted by score as float32, ties by doc id descending, as trec_eval) or "rank" (the rank column's order).
    A judged query the run lacks scores 0 and counts in the mean (trec_eval -c); `only_run_queries=True` averages
    over the run's queries only. `level="source"` evaluates sources instead of documents (one result per source, as dedup by source
    would show it): each doc id is mapped through `doc_source` [doc_id, source], each query's list keeps
    the first (best-placed) document of every source, and a source's grade is the max grade of its docs.
    """
    ms = parse_measures(measures)
    if not isinstance(run, pl.DataFrame) or "qid" not in run.columns or "doc_id" not in run.columns:
        from .interop import run_frame  # pandas, ranx, ir_measures, PyTerrier names

        run = run_frame(run)
    if not isinstance(qrels, pl.DataFrame) or "rel" not in qrels.columns:
        from .interop import qrels_frame

        qrels = qrels_frame(qrels)
    _need(run, ("qid", "doc_id", "score"), "run")
    _need(qrels, ("qid", "doc_id", "rel"), "qrels")
    if gain not in ("linear", "exp"):
        raise InputError(f"gain {gain!r}: expected 'linear' or 'exp'")
    if ties not in ("trec", "rank"):
        raise InputError(f"ties {ties!r}: expected 'trec' (score as float32, then doc id) or 'rank'")
    if ties == "rank":
        _need(run, ("rank",), "run (ties='rank')")
    level = "doc" if level == "document" else level  # the config's word (`retrieval.level: document`) too
    if level not in ("doc", "source"):
        raise InputError(f"level {level!r}: expected 'doc' or 'source'")
    if not isinstance(rel_threshold, int) or isinstance(rel_threshold, bool) or rel_threshold < 1:
        raise InputError(f"rel_threshold {rel_threshold!r}: expected an integer grade >= 1")

    if not run.schema["score"].is_numeric():  # user trial BP: a text column raised polars' InvalidOperationError
        raise InputError(f"run: column score holds {run.schema['score']}, not numbers: cast it to a float first")
    r = run.select(
        pl.col("qid").cast(pl.Utf8),
        pl.col("doc_id").cast(pl.Utf8),
        pl.col("score").cast(pl.Float64),
        *([pl.col("rank").cast(pl.Int64)] if ties == "rank" else []),
    )
    bad = r.filter(
        pl.col("score").is_null()
        | pl.col("score").is_nan()
        | pl.col("qid").is_null()
        | pl.col("doc_id").is_null()
    )
    if len(bad):
        raise InputError(
            f"run: query {bad['qid'][0]!r}, document {bad['doc_id'][0]!r}: null id or null/NaN score"
        )
    if level == "source":
        if doc_source is None:
            raise InputError("level='source' needs doc_source [doc_id, source]")
        _need(doc_source, ("doc_id", "source"), "doc_source")
    r = _trec_order(r, doc_source if level == "source" else None, by_rank=ties == "rank")
    q, queries, per_q = _judged(qrels, ms, rel_threshold, gain, doc_source if level == "source" else None)
    judged = queries
    if only_run_queries:
        queries = queries.join(r.select("qid").unique(), on="qid", how="semi")

    depth = None if any(m.k is None or m.kind == "rprec" for m in ms) else max(m.k for m in ms)
    if depth is not None:
        r = r.filter(pl.col("pos") <= depth)
    # Order-preserving join: the cumulative count of relevant documents (AP) relies on the trec_eval order.
    r = r.join(q, on=["qid", "doc_id"], how="left", maintain_order="left").with_columns(
        pl.col("rel").fill_null(0), *([pl.col("rel").is_not_null().cast(pl.Float64).alias("j")] if any(m.kind == "judged" for m in ms) else [])
    )
    r = r.with_columns(
        (pl.col("rel") >= rel_threshold).cast(pl.Float64).alias("b"),
        _gain(pl.col("rel"), gain).alias("g"),
        (1.0 / (pl.col("pos") + 1).cast(pl.Float64).log(2)).alias("disc"),
    )
    if any(m.kind == "ap" for m in ms):
        r = r.with_columns(pl.col("b").cum_sum().over("h").alias("cb"))

    if any(m.kind == "rprec" for m in ms):
        r = r.join(per_q.select("qid", "nrel"), on="qid", how="left").with_columns(
            pl.col("nrel").fill_null(0.0)
        )

    # Numerators per query in one group-by over the run, then the denominators from the judgements.
    b, pos = pl.col("b"), pl.col("pos")
    num: list[pl.Expr] = []
    for i, m in enumerate(ms):
        k = m.k
        if m.kind == "ndcg":
            e = _cut(pl.col("g") * pl.col("disc"), k).sum()
        elif m.kind in ("recall", "precision"):
            e = _cut(b, k).sum()
        elif m.kind == "rr":
            e = _cut(b / pos, k).max()
        elif m.kind == "ap":
            e = _cut(b * pl.col("cb") / pos, k).sum()
        elif m.kind == "success":
            e = _cut(b, k).max()
        elif m.kind == "judged":  # over the documents shown: min(k, retrieved), as ir_measures
            e = _cut(pl.col("j"), k).sum()
            num.append((pl.len() if k is None else (pl.col("pos") <= k).sum()).cast(pl.Float64).alias(f"shown{i}"))
        else:  # rprec
            e = pl.when(pos <= pl.col("nrel")).then(b).otherwise(0.0).sum()
        num.append(e.alias(f"m{i}"))
    cols = [f"m{i}" for i in range(len(ms))]
    wide = r.group_by("h").agg(pl.col("qid").first(), *num).drop("h")
    shown = [f"shown{i}" for i, m in enumerate(ms) if m.kind == "judged"]
    if len(wide) and len(judged) and not wide["qid"].is_in(judged["qid"].implode()).any():
        # One is_in over a row per query (microseconds): ids that share nothing would otherwise be silent zeros.
        warnings.warn("evaluate: " + _unjudged(len(wide), wide["qid"].min(), judged["qid"].min(), "the qrels", len(judged)),
                      IdMismatchWarning, stacklevel=2)
    out = (
        queries.join(per_q, on="qid", how="left")
        .join(wide, on="qid", how="left")
        .with_columns(pl.col(cols + shown).fill_null(0.0))
    )
    nrel = pl.col("nrel")
    fin: list[pl.Expr] = []
    for c, m in zip(cols, ms, strict=True):
        if m.kind == "ndcg":
            fin.append(_ratio(pl.col(c), pl.col(f"idcg_{m.k}")).alias(c))
        elif m.kind in ("recall", "ap", "rprec"):
            fin.append(_ratio(pl.col(c), nrel).alias(c))
        elif m.kind == "precision":
            fin.append((pl.col(c) / float(m.k)).alias(c))
        elif m.kind == "judged":
            fin.append(_ratio(pl.col(c), pl.col(f"shown{c[1:]}")).alias(c))
    out = out.with_columns(fin).select("qid", *cols).sort("qid")
    # Long form, query by query in the order of `measures`: each row's values as a list, exploded (no sort).
    return out.select(
        "qid",
        pl.concat_list([pl.lit(m.label, pl.Utf8) for m in ms]).alias("measure"),
        pl.concat_list([pl.col(c).cast(pl.Float64) for c in cols]).alias("value"),
    ).explode("measure", "value")


# The judgement side of `evaluate` depends on the qrels and the measures only: a slider tick evaluates new
# runs against the same qrels, so it is kept for the last few (qrels, doc_source) frames (by identity, as
# `pipeline.Prepared.derived` keeps frames; the entry holds them, so their ids cannot be reused).
_JUDGED: dict[tuple, tuple] = {}


def _judged(
    qrels: pl.DataFrame, ms: list, rel_threshold: int, gain: str, doc_source: pl.DataFrame | None
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """([qid, doc_id, rel] best grade per judged pair, [qid] of the evaluated queries, per-query facts [qid,
    nrel, idcg_k...]: the number of relevant documents and the ideal DCG at each nDCG cutoff)."""
    key = (id(qrels), id(doc_source), tuple(m.label for m in ms), rel_threshold, gain)
    hit = _JUDGED.get(key)
    if hit is not None:
        return hit[0]
    rel = qrels["rel"]
    if not rel.dtype.is_numeric():
        raise InputError(f"qrels: column rel holds {rel.dtype}, not integer grades")
    if rel.dtype.is_float():  # a grade 0.5 was cast to 0, silently non-relevant (user trial BP); 1.0 is a grade
        frac = qrels.filter(pl.col("rel").is_not_null() & ((pl.col("rel") != pl.col("rel").round(0)) | pl.col("rel").is_infinite()))
        if len(frac):
            raise InputError(f"qrels: query {frac['qid'][0]!r}, document {frac['doc_id'][0]!r}: grade {frac['rel'][0]!r} "
                             "is not an integer (trec_eval's grades are)")
    q = qrels.select(
        pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("rel").cast(pl.Int64)
    )
    conflict = q.group_by("qid", "doc_id").agg(pl.col("rel").n_unique().alias("n")).filter(pl.col("n") > 1)
    if len(conflict):  # `runs.read_qrels` refuses them in a file; a frame is evaluated with the highest grade, but said
        warnings.warn(f"qrels: {len(conflict)} (query, document) pair(s) judged with different grades, e.g. query "
                      f"{conflict['qid'][0]!r} document {conflict['doc_id'][0]!r}: the highest grade is used", UserWarning, stacklevel=3)
    if doc_source is not None:
        q = _to_source(q, doc_source)
    q = q.group_by("qid", "doc_id").agg(pl.col("rel").max())
    queries = q.select("qid").unique()
    q_aggs: list[pl.Expr] = [(pl.col("rel") >= rel_threshold).sum().cast(pl.Float64).alias("nrel")]
    ndcg_ks = sorted({m.k for m in ms if m.kind == "ndcg"}, key=lambda k: (k is None, k or 0))
    ideal = q
    if ndcg_ks:
        ideal = ideal.with_columns(_gain(pl.col("rel"), gain).alias("g")).sort(["qid", "g"], descending=[False, True])
        ideal = ideal.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("pos"))
        ideal = ideal.with_columns((1.0 / (pl.col("pos") + 1).cast(pl.Float64).log(2)).alias("disc"))
        q_aggs += [_cut(pl.col("g") * pl.col("disc"), k).sum().alias(f"idcg_{k}") for k in ndcg_ks]
    out = (q, queries, ideal.group_by("qid").agg(q_aggs))
    if len(_JUDGED) >= 8:
        _JUDGED.pop(next(iter(_JUDGED)))
    _JUDGED[key] = (out, qrels, doc_source)
    return out


class IdMismatchWarning(UserWarning):
    """Run and qrels ids that do not meet (every value 0); a class of its own so callers can filter it."""


def _unjudged(n_run: int, run_id: Any, qrels_id: Any, where: str, n_judged: int | None = None) -> str:
    """The words for a run none of whose queries is judged (`evaluate`'s warning and `id_warnings`)."""
    judged = f"{n_judged} judged queries; " if n_judged is not None else ""
    return (f"0 of {n_run} run queries have judgements in {where} ({judged}run ids e.g. {run_id!r}, qrels ids e.g. "
            f"{qrels_id!r}), so every value is 0: do the query ids match?")


def id_warnings(run: pl.DataFrame, qrels: pl.DataFrame, where: str = "the qrels", missing_score_0: bool = True) -> list[str]:
    """What makes an evaluation of `run` against `qrels` all (or partly) zeros by id mismatch rather than by
    retrieval, in words, for a caller to report: no run query judged, judged queries missing from the run,
    or no retrieved document of a judged query judged at all. Empty in the normal case. A few semi-joins
    over the ids; not called by `evaluate` (see its own, cheaper check). `missing_score_0=False`: the caller
    averages over the queries a run answers (trec_eval without -c), so a missing query is left out, not 0."""
    out: list[str] = []
    judged = qrels.select(pl.col("qid").cast(pl.Utf8)).unique()
    run_q = run.select(pl.col("qid").cast(pl.Utf8)).unique()
    if not len(run_q) and len(judged):  # an empty file (a truncated write, a run cut to depth 0): not a result
        return [f"the run holds no results, so every value is 0 ({len(judged)} judged queries in {where})"]
    if not len(judged) or not len(run_q):
        return out
    hit = run_q.join(judged, on="qid", how="semi")
    if not len(hit):
        return [_unjudged(len(run_q), run_q["qid"].min(), judged["qid"].min(), where)]
    if len(hit) < len(judged):
        missing = judged.join(hit, on="qid", how="anti")["qid"].sort()
        extra = run_q.join(judged, on="qid", how="anti")["qid"].sort()
        # Both sides named: "010" in the run beside "10" in the qrels is a padding to see at once (user trial AM).
        out.append(f"{len(missing)} of {len(judged)} judged queries in {where} are not in the run (e.g. "
                   f"{', '.join(map(repr, missing[:3]))}); "
                   + ("each scores 0" if missing_score_0 else "each is left out of the run's mean")
                   + (f"; the run's {len(extra)} other queries have no judgements there (e.g. {', '.join(map(repr, extra[:3]))})"
                      if len(extra) else ""))
    rows = run.select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).join(hit, on="qid", how="semi")
    docs = qrels.select(pl.col("doc_id").cast(pl.Utf8)).unique()
    if len(rows) and not len(rows.join(docs, on="doc_id", how="semi")):
        out.append(
            f"none of the {len(rows)} documents the run retrieved for judged queries is judged in {where} (run ids "
            f"e.g. {rows['doc_id'].min()!r}, qrels ids e.g. {docs['doc_id'].min()!r}): do the doc ids match the corpus?"
        )
    return out


def unknown_run_ids(run: pl.DataFrame, query_ids: Collection[str] | pl.Series,
                    doc_ids: Collection[str] | pl.Series | None, where: str) -> list[str]:
    """Run lines naming query or document ids `where` (the collection) lacks, in words: trec_eval drops them in
    silence, and so did `hrt eval` while some ids met. Two files joined with their byte order marks, document ids
    uppercased or written in NFD by a Mac made 1 to 35 queries score lower with no word (user trial AT). An id that
    differs from a known one only by case, normalisation or spaces is shown beside it (`ids.near_miss`). `doc_ids`
    None: no corpus to check against (judged queries of a store ingested from elsewhere)."""
    from .ids import near_miss

    out = []
    # As Series once (a caller evaluating several runs passes them so): a set of 8.8M ids made a list per call, ~5 s.
    query_ids, doc_ids = (x if isinstance(x, pl.Series) else pl.Series(list(x or ()), dtype=pl.Utf8) for x in (query_ids, doc_ids))
    if len(query_ids):
        qs = run.select(pl.col("qid").cast(pl.Utf8)).unique().filter(~pl.col("qid").is_in(query_ids.implode()))["qid"].sort()
        if len(qs):
            out.append(f"{len(qs)} query id(s) are not in {where}'s queries (e.g. {', '.join(map(repr, qs[:3]))}); their "
                       f"lines are not scored{near_miss(qs, query_ids)}")
    if len(doc_ids):
        ds = run.select(pl.col("doc_id").cast(pl.Utf8)).filter(~pl.col("doc_id").is_in(doc_ids.implode()))["doc_id"]
        if len(ds):
            distinct = ds.unique().sort()
            out.append(f"{len(ds)} line(s) name {len(distinct)} document id(s) not in {where}'s corpus (e.g. "
                       f"{', '.join(map(repr, distinct[:3]))}); they count as not relevant{near_miss(distinct, doc_ids)}")
    return out


def run_depth(run: pl.DataFrame) -> tuple[int, bool]:
    """(the length of the run's longest query list, whether the run was cut there: at least 90% of its queries have
    that many results; a run whose lists end where retrieval ran out, on a small corpus, was not cut). (0, False)
    for an empty run."""
    if not len(run):
        return 0, False
    lens = run.group_by("qid").len()["len"]
    top = int(lens.max())
    return top, bool((lens == top).mean() >= 0.9)


def depth_notes(depths: Mapping[str, tuple[int, bool]], measures: Iterable[str]) -> list[str]:
    """Measures that look past the depth a run was cut at (`run_depth`), in words: R@100 of a run cut at 10 ranks
    counts ranks it never returned, and two runs of unequal depth then differ by depth, not ranking (user trial AU:
    a 'significant' R@100 win was one of depth alone). Measures without a cutoff (AP, nDCG, R) are named only when
    the runs' depths differ, one of them cut."""
    ms = parse_measures(measures)
    out = []
    for name, (d, cut) in depths.items():
        past = [m.label for m in ms if m.k is not None and m.kind != "judged" and m.k > d > 0] if cut else []
        if past:
            out.append(f"{name} holds at most {d} result{'' if d == 1 else 's'} per query: its {', '.join(past)} "
                       f"{'counts' if len(past) == 1 else 'count'} ranks past {d} that it never returned (as trec_eval does)")
    if len({d for d, _ in depths.values()}) > 1 and any(cut for _, cut in depths.values()):
        lo = min(d for d, cut in depths.values() if cut)
        deep = [m.label for m in ms if m.kind != "judged" and (m.k is None or m.k > lo)]
        if deep:
            shown = ", ".join(f"{n} {d}{'' if cut else ' (not cut)'}" for n, (d, cut) in depths.items())
            out.append(f"the runs differ in depth ({shown} results per query at most): their {', '.join(deep)} differ "
                       "by depth as well as by ranking")
    return out


def relevant_words(rel_threshold: int) -> str:
    """What counted as relevant, in the words every evaluation output states (user trial AM)."""
    return f"grade >= {rel_threshold} on the binary measures (R, P, RR, AP, Hit, Rprec); nDCG gains the grades"


def no_relevant(qrels: pl.DataFrame, rel_threshold: int = 1) -> list[str]:
    """Judged queries with no document graded `rel_threshold` or more: each counts 0 on every binary measure
    (and on nDCG when no grade is > 0), as in trec_eval; worth saying, since they pull the mean down."""
    best = qrels.group_by(pl.col("qid").cast(pl.Utf8)).agg(pl.col("rel").max())
    return sorted(best.filter(pl.col("rel") < rel_threshold)["qid"].to_list())


def cutoff_depth(measures: str | Iterable[str]) -> int | None:
    """The deepest rank any of `measures` looks at (None when one has no cutoff, e.g. MAP or R-prec).
    A run cut to this depth (in its trec_eval order) evaluates exactly like the whole run."""
    ms = parse_measures(measures)
    return None if any(m.k is None or m.kind == "rprec" for m in ms) else max(m.k for m in ms)


def _query_key(qid: pl.Expr) -> pl.Expr:
    """A numeric stand-in for the qid to group and sort on (collisions are detected by the caller)."""
    return qid.hash()


def _trec_order(r: pl.DataFrame, doc_source: pl.DataFrame | None, by_rank: bool = False) -> pl.DataFrame:
    """[qid, doc_id, score] -> + h (query key) and pos (1-based place), each query's rows in trec_eval order
    (score as float32 descending, doc id descending) or, `by_rank`, in rank order with that as tie-break.

    Sorting on the string qid costs ~4x a numeric key here, so rows are grouped by a 64-bit hash of the
    qid; a hash collision (checked, not assumed away) falls back to sorting on the string itself.
    Repeated documents (or sources) keep their first, i.e. best, place; the duplicate test is a cheap
    hash check first, so the exact (slower) de-duplication only runs when something may be repeated.
    """
    if doc_source is None and not by_rank and _already_trec_ordered(r):
        # A ranked list straight from the pipeline (queries in order, scores strictly falling): the sort would
        # leave it as it is, so only the keys are added.
        r = r.with_columns(pl.col("qid").rle_id().cast(pl.UInt64).alias("h"), pl.col("score").cast(pl.Float32).alias("s32"))
    else:
        r = _trec_sorted(r, by_rank)
    if doc_source is not None:
        r = _to_source(r, doc_source)
    if r.select(pl.struct("qid", "doc_id").hash().is_duplicated().any()).item():
        first = pl.struct("qid", "doc_id").is_first_distinct()
        if doc_source is None:  # (by source, many documents of one source are expected)
            rep = r.filter(~first)
            if len(rep):  # trec_eval refuses such a run, as `runs.read_run` does; a frame is evaluated, but said
                warnings.warn(f"run: {len(rep)} repeated (query, document) row(s), e.g. query {rep['qid'][0]!r} document "
                              f"{rep['doc_id'][0]!r}: each counts once, at its best place (trec_eval refuses such a run)",
                              UserWarning, stacklevel=3)
        r = r.filter(first)
    # Each query's rows are together (sorted by `h`): places from the row number, not a window over `h`.
    h = r["h"].to_numpy()
    first = np.flatnonzero(np.r_[True, h[1:] != h[:-1]]) if len(h) else np.zeros(0, dtype=np.int64)
    pos = np.arange(1, len(h) + 1) - np.repeat(first, np.diff(np.r_[first, len(h)]))
    return r.with_columns(pl.Series("pos", pos, dtype=pl.Int64))


def _trec_sorted(r: pl.DataFrame, by_rank: bool) -> pl.DataFrame:
    """`r` sorted into trec_eval order (see `_trec_order`), with the query key `h` and `s32`."""
    r = r.with_columns(_query_key(pl.col("qid")).alias("h"), pl.col("score").cast(pl.Float32).alias("s32"))
    keys, desc = (["rank", "s32", "doc_id"], [False, True, True]) if by_rank else (["s32", "doc_id"], [True, True])
    # Single-threaded: measured faster on 2 busy cores than polars' parallel sort for ~150k rows.
    r = r.sort(["h", *keys], descending=[False, *desc], multithreaded=False)
    mixed = r.select(
        ((pl.col("h") == pl.col("h").shift()) & (pl.col("qid") != pl.col("qid").shift())).any()
    ).item()
    if mixed:
        r = r.sort(["h", "qid", *keys], descending=[False, False, *desc])
        r = r.with_columns(
            (pl.col("qid") != pl.col("qid").shift()).fill_null(True).cum_sum().cast(pl.UInt64).alias("h")
        )
    return r


def _already_trec_ordered(r: pl.DataFrame) -> bool:
    """True when `r` [qid, score] is in trec_eval order already: qids sorted (so each query's rows are
    together) and, within a query, float32 scores strictly decreasing (so the doc-id tie-break never acts)."""
    if len(r) < 2:
        return True
    if not r["qid"].is_sorted():
        return False
    s32, q = pl.col("score").cast(pl.Float32), pl.col("qid")
    return bool(r.select(((q != q.shift()) | (s32 < s32.shift())).slice(1).all()).item())


def _cut(e: pl.Expr, k: int | None) -> pl.Expr:
    """`e` at positions within the cutoff, 0 beyond it (run and ideal ranking both have a `pos` column)."""
    return e if k is None else pl.when(pl.col("pos") <= k).then(e).otherwise(0.0)


def _ratio(num: pl.Expr, den: pl.Expr) -> pl.Expr:
    """num / den, 0 when den is 0 (trec_eval's value for a query with nothing relevant)."""
    return pl.when(den > 0).then(num / den).otherwise(0.0)


def evaluate_systems(
    runs: Mapping[str, pl.DataFrame], qrels: pl.DataFrame, measures=DEFAULT_MEASURES, **kw
) -> pl.DataFrame:
    """`evaluate` for several named runs, stacked as [system, qid, measure, value] (the input of `compare`)."""
    return pl.concat(
        [
            evaluate(run, qrels, measures, **kw).select(pl.lit(name).alias("system"), pl.all())
            for name, run in runs.items()
        ]
    )


def aggregate(per_query: pl.DataFrame) -> dict[str, float]:
    """Mean of each measure over the queries, in the order the measures first appear."""
    _need(per_query, ("measure", "value"), "per-query frame")
    means = per_query.group_by("measure", maintain_order=True).agg(pl.col("value").mean())
    return {m: float(v) for m, v in zip(means["measure"], means["value"], strict=True)}


def to_wide(per_query: pl.DataFrame, index: str | list[str] = "qid") -> pl.DataFrame:
    """One row per query (or per `index`), one column per measure, measures in their original order."""
    _need(per_query, ("measure", "value"), "per-query frame")
    return per_query.pivot(on="measure", index=index, values="value", maintain_order=True)
