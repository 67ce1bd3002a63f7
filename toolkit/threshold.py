"""Stage 9: score thresholds and per-query confidence notes.

An agent reading memory needs to know when to distrust the list: nothing cleared the minimum score
("low_confidence"), the scores barely differ so the order is close to arbitrary ("low_differentiation"), or
BM25 ran and no document holds any of the query's words, so every result is a nearest neighbour by meaning
only ("no_term_match": a nonsense query, or one in words the memory never used).
A query is never left empty by the threshold: if nothing passes, its best results stay, flagged.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .config import ThresholdConfig
from .dedup import FILL_FROM
from .errors import InputError
from .fusion import in_rank_order, query_groups

PER_QUERY_SCHEMA = {
    "qid": pl.Utf8,
    "n_results": pl.Int64,
    "top_score": pl.Float64,
    "spread": pl.Float64,
    "low_confidence": pl.Boolean,
    "low_differentiation": pl.Boolean,
    "no_term_match": pl.Boolean,
}

EVIDENCE_SCHEMA = {"qid": pl.Utf8, "n_lists": pl.Int64, "no_term_match": pl.Boolean}


def unmet_note(per_query: pl.DataFrame, cfg: ThresholdConfig) -> str | None:
    """Words for a threshold that no result of some queries reached, or None. Those queries keep their whole
    list (flagged low_confidence), so a threshold set too high changes nothing in a run or its metrics, and
    `hrt run` and `hrt report` were silent about it where `hrt search` said so (user trial AY)."""
    if not (cfg.min_score > 0 or cfg.min_prob > 0) or "low_confidence" not in per_query.columns:
        return None
    answered = per_query.filter(pl.col("n_results") > 0) if "n_results" in per_query.columns else per_query
    unmet = int(answered["low_confidence"].sum())
    if not unmet:
        return None
    field = f"threshold.min_score {cfg.min_score:g}" if cfg.min_score > 0 else f"threshold.min_prob {cfg.min_prob:g}"
    if cfg.min_score > 0 and cfg.min_prob > 0:
        field += f" / min_prob {cfg.min_prob:g}"
    where = "any query" if unmet == len(answered) else f"{unmet} of {len(answered)} queries"
    return (f"no result of {where} reached {field}; a query keeps its whole list when nothing passes (flagged "
            "low_confidence), so there the threshold removed nothing")


def list_evidence(candidates: pl.DataFrame, features: pl.DataFrame | None, lexical: bool) -> pl.DataFrame:
    """[qid, n_lists, no_term_match] per query of `features` (or of the candidates without them): how many
    candidate lists returned anything, and whether BM25 was asked (`lexical`, and the query not routed past
    it, `skip_lexical`) and returned nothing."""
    if features is not None and len(features):
        skip = pl.col("skip_lexical").fill_null(False) if "skip_lexical" in features.columns else pl.lit(False)
        queries = features.select(pl.col("qid").cast(pl.Utf8), skip.alias("_skip"))
    else:
        queries = candidates.select(pl.col("qid").cast(pl.Utf8)).unique().with_columns(pl.lit(False).alias("_skip"))
    per = candidates.group_by(pl.col("qid").cast(pl.Utf8)).agg(
        pl.col("list_id").n_unique().cast(pl.Int64).alias("n_lists"),
        (pl.col("retriever") == "lex").any().alias("_lex") if "retriever" in candidates.columns else pl.lit(False).alias("_lex"),
    )
    out = queries.join(per, on="qid", how="left").with_columns(
        pl.col("n_lists").fill_null(0),
        (pl.lit(lexical) & ~pl.col("_skip") & ~pl.col("_lex").fill_null(False)).alias("no_term_match"),
    )
    return out.select(list(EVIDENCE_SCHEMA)).cast(EVIDENCE_SCHEMA)


def strictly_decreasing(ranked: pl.DataFrame) -> pl.DataFrame:
    """Make scores strictly decreasing with rank within each query (rows sorted by qid, rank).

    trec_eval and ir_measures order a run by score and break ties by doc id, not by our rank: two tied
    RRF scores would be evaluated in another order than the one shown. Queries with a tie (or a score
    above its predecessor) get f_i = min_{j<=i}(s_j + j*d) - i*d with d = 1e-12 x the query's largest
    |score|: every step is at least d, the shown digits do not change, other queries are untouched.
    """
    # Windows over an integer query code (`query_groups`), not the string: half the time on a lab update.
    if not len(ranked):
        return ranked
    g = query_groups(ranked)
    s = ranked["score"].to_numpy()
    with np.errstate(invalid="ignore"):
        hit = (g[1:] == g[:-1]) & (s[1:] >= s[:-1])  # a null score (nan) is never a tie
    if not hit.any():
        return ranked
    # Per-query running minimum on a (queries x places) matrix, only for queries with a tie: a polars
    # `cum_min().over(query)` cost ~6 ms per lab update with RRF's many ties; numpy has no segmented
    # accumulate, hence the matrix (the same arithmetic in the same order, so the same floats).
    new_q = np.r_[True, g[1:] != g[:-1]]
    starts = np.flatnonzero(new_q)
    gid = np.cumsum(new_q) - 1
    fix = np.zeros(len(starts), dtype=bool)
    fix[gid[1:][hit]] = True
    rows = np.flatnonzero(fix[gid])  # the rows of the queries to fix, still grouped
    step = np.maximum(np.fmax.reduceat(np.abs(s), starts) * 1e-12, 1e-300)[gid[rows]]
    sub = np.cumsum(fix) - 1  # a query's row in the matrix
    pos = rows - starts[gid[rows]]
    i = ranked["rank"].to_numpy()[rows].astype(np.float64)
    shape = (int(fix.sum()), int(pos.max()) + 1)
    v = s[rows] + i * step
    if len(v) == shape[0] * shape[1]:  # every query as long as the longest (n places each): a reshape
        fixed = np.fmin.accumulate(v.reshape(shape), axis=1).ravel() - i * step  # fmin: a null does not spread
    else:
        mat = np.full(shape, np.inf)
        mat[sub[gid[rows]], pos] = v
        fixed = np.fmin.accumulate(mat, axis=1)[sub[gid[rows]], pos] - i * step
    score = s.copy()
    score[rows] = np.where(np.isnan(s[rows]), s[rows], fixed)
    out = pl.Series("score", score, dtype=pl.Float64)
    return ranked.with_columns(out.fill_nan(None) if np.isnan(s).any() else out)


def apply_threshold(
    ranked: pl.DataFrame, cfg: ThresholdConfig, *, n: int | None = None, evidence: pl.DataFrame | None = None,
    rank_only: bool = False, low_spread: float | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(ranked with flags, per-query [qid, n_results, top_score, spread, low_confidence, low_differentiation,
    no_term_match]).

    Results scoring below `min_score`, or with a calibrated `score_prob` below `min_prob` (learned fusion),
    are dropped (0 = keep everything); a query where nothing passes keeps
    its list with every row flagged "low_confidence", or under `none_pass: empty` returns none (n_results 0,
    low_confidence). spread = top score minus the last score of the
    returned list, or of its first `n` results when given (what the user is shown); null with fewer than
    two results. low_differentiation = spread < low_spread. Scores come out strictly decreasing with rank
    (see `strictly_decreasing`), so evaluating the run by score gives exactly this order.
    `evidence` (`list_evidence`) adds no_term_match and a row for each of its queries that has no result
    (n_results 0); with `rank_only` (RRF: scores made from ranks alone) a
    query whose candidates come from one list is never low_differentiation: its scores are 1/(k + rank)
    whatever the list's own scores said, so their spread measures nothing.
    """
    ordered = in_rank_order(ranked)
    r = ranked if ordered else ranked.sort("qid", "rank")
    if "flags" not in r.columns:
        r = r.with_columns(pl.lit([], pl.List(pl.Utf8)).alias("flags"))
    if not len(r):  # no query has a result; with `evidence`, each still gets its row (n_results 0)
        empty = {k: v for k, v in PER_QUERY_SCHEMA.items() if k != "no_term_match"}
        none = pl.DataFrame(schema=empty)
        if evidence is None:
            return r, none.with_columns(pl.lit(False).alias("no_term_match")).cast(PER_QUERY_SCHEMA)
        pq = evidence.join(none, on="qid", how="left").with_columns(
            pl.lit(0, pl.Int64).alias("n_results"), pl.lit(False).alias("low_confidence"), pl.lit(False).alias("low_differentiation"))
        return r, pq.select(list(PER_QUERY_SCHEMA)).cast(PER_QUERY_SCHEMA)
    use_prob = cfg.min_prob > 0
    emptied = None
    if use_prob and ("score_prob" not in r.columns or r["score_prob"].null_count() == len(r)):
        # Without calibrated probabilities every row would fail and be flagged low confidence.
        raise InputError(
            f"threshold.min_prob {cfg.min_prob} needs calibrated scores (score_prob), but there are none: use "
            "fusion.method learned with a fusion.model that has a calibration (one trained with --holdout > 0), "
            "or set threshold.min_prob to 0"
        )
    if cfg.min_score > 0 or use_prob:
        # A result the source fill moved below the first pass is judged on its own score, not the placeholder.
        own = pl.coalesce(pl.col(FILL_FROM), pl.col("score")) if FILL_FROM in r.columns else pl.col("score")
        passes = own >= cfg.min_score
        if use_prob:  # the calibrated probability (learned fusion); a row without one does not pass
            passes = passes & (pl.col("score_prob").fill_null(0.0) >= cfg.min_prob)
        r = r.with_columns(passes.alias("_pass"), passes.any().over("qid").alias("_any"))
        if cfg.none_pass == "empty":
            emptied = r.filter(~pl.col("_any")).select("qid").unique(maintain_order=True)
        r = r.filter(pl.col("_pass") | (~pl.col("_any") & (cfg.none_pass == "keep"))).with_columns(
            pl.when(~pl.col("_any"))
            .then(pl.col("flags").list.concat(pl.lit(["low_confidence"], pl.List(pl.Utf8))))
            .otherwise(pl.col("flags"))
            .alias("flags"),
            pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank"),
        )
        low_conf = ~pl.col("_any").first()
        r_out = r.drop("_pass", "_any")
    else:
        low_conf = pl.lit(False)
        r_out = r
    r_out = strictly_decreasing(r_out.drop(FILL_FROM, strict=False))
    per_query = _blocks_per_query(r, n) if ordered and "_any" not in r.columns else None
    if per_query is None:
        cols = r.select("qid", "rank", "score", *(["_any"] if "_any" in r.columns else []))  # not the whole frame
        shown = cols.filter(pl.col("rank") <= n) if n else cols
        per_query = shown.group_by("qid", maintain_order=True).agg(
            pl.len().cast(pl.Int64).alias("n_results"),
            pl.col("score").first().alias("top_score"),
            pl.when(pl.len() >= 2).then(pl.col("score").first() - pl.col("score").last()).alias("spread"),
            low_conf.alias("low_confidence"),
        )
    # `config.low_spread(cfg)` when given (the config's own scale when it sets none), else the field; unset: 0.01.
    limit = low_spread if low_spread is not None else cfg.low_spread if cfg.low_spread is not None else 0.01
    low_diff = (pl.col("spread") < limit).fill_null(False)
    if emptied is not None and len(emptied):  # nothing passed and nothing is returned: low confidence, 0 results
        per_query = pl.concat([per_query, emptied.join(per_query.select("qid"), on="qid", how="anti").with_columns(
            pl.lit(0, pl.Int64).alias("n_results"), pl.lit(True).alias("low_confidence"))], how="diagonal_relaxed")
    if evidence is not None:  # every query evidence knows, those left without results too (n_results 0)
        per_query = evidence.join(per_query, on="qid", how="left").with_columns(
            pl.col("n_results").fill_null(0), pl.col("low_confidence").fill_null(False))
        if rank_only:
            low_diff = low_diff & (pl.col("n_lists").fill_null(0) != 1)
    per_query = per_query.with_columns(
        low_diff.alias("low_differentiation"),
        (pl.col("no_term_match").fill_null(False) if evidence is not None else pl.lit(False)).alias("no_term_match"),
    )
    return r_out, per_query.select(list(PER_QUERY_SCHEMA)).cast(PER_QUERY_SCHEMA)


def _blocks_per_query(r: pl.DataFrame, n: int | None) -> pl.DataFrame | None:
    """`apply_threshold`'s per-query group-by without a threshold ([qid, n_results, top_score, spread,
    low_confidence] of each query's first `n` rows), from the rows' query blocks: `r` is in rank order (ranks 1,
    2, ... per query), so a query's shown rows are the first min(rows, n) of its block. None unless fusion's query
    codes `_q` say each query is one block, and no score is null (a null would read as NaN here)."""
    if "_q" not in r.columns or r["_q"].null_count() or r["score"].null_count():
        return None
    g = r["_q"].to_numpy()
    first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    if (np.diff(g[first]) <= 0).any():  # a query in two blocks: the group-by merges them
        return None
    rows = np.diff(np.r_[first, len(g)])
    shown = np.minimum(rows, n) if n else rows
    score = r["score"].to_numpy()
    per_query = r.select("qid")[first].with_columns(
        pl.Series("n_results", shown, dtype=pl.Int64),
        pl.Series("top_score", score[first], dtype=pl.Float64),
        pl.Series("_last", score[first + shown - 1], dtype=pl.Float64),
    )
    return per_query.select(
        "qid", "n_results", "top_score",
        pl.when(pl.col("n_results") >= 2).then(pl.col("top_score") - pl.col("_last")).alias("spread"),
        pl.lit(False).alias("low_confidence"),
    )
