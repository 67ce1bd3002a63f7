"""The polars-expression blend the numpy `toolkit.blend` replaced (kept as a test oracle): the same formulas
written as window expressions over string query ids, ~10x slower, easier to read."""

from __future__ import annotations

import math

import polars as pl

from toolkit.config import RerankConfig

BLEND_SCHEMA = {
    "qid": pl.Utf8,
    "doc_id": pl.Utf8,
    "chunk_id": pl.Utf8,
    "score": pl.Float64,
    "rank": pl.Int64,
    "fused_rank": pl.Int64,
    "fused_score": pl.Float64,
    "rerank_score": pl.Float64,
    "rerank_norm": pl.Float64,
    "retrieval_weight": pl.Float64,
    "reranked": pl.Boolean,
    "raw_score": pl.Float64,
    "flags": pl.List(pl.Utf8),
}


def scores_below(floor: pl.Expr, pos: pl.Expr, count: pl.Expr) -> pl.Expr:
    """Scores for `count` items placed after a block whose lowest score is `floor`: strictly below it and
    strictly decreasing with `pos` (1..count). They stay positive when the floor is, so a min_score of 0
    never drops them; they go below a non-positive floor by at most 1."""
    frac = pos.cast(pl.Float64) / (count.cast(pl.Float64) + 1.0)
    return pl.when(floor > 0).then(floor * (1.0 - frac)).otherwise(floor - frac)


def bucket_weight(buckets: list[tuple[float, float]], fused_rank: pl.Expr) -> pl.Expr:
    """Retrieval weight of the first bucket whose last rank is >= fused_rank ([(3, .75), (10, .6), (inf, .4)])."""
    expr = None
    for bound, w in buckets:
        cond = pl.lit(True) if math.isinf(bound) else fused_rank <= bound
        expr = pl.when(cond).then(pl.lit(w)) if expr is None else expr.when(cond).then(pl.lit(w))
    return expr.otherwise(pl.lit(buckets[-1][1]))


def blend_reference(fused: pl.DataFrame, rerank_scores: pl.DataFrame | None, cfg: RerankConfig) -> pl.DataFrame:
    """Blended ranking [qid, doc_id, chunk_id, score, rank, fused_rank, fused_score, rerank_score,
    rerank_norm, retrieval_weight, reranked, raw_score, flags] for all queries.

    `blend`: "position" (formula above), "replace" (reranked block ordered by reranker score), "none"
    (fused order). Reranker scores are normalised per query over the reranked documents: minmax (one
    document, or all equal, gives 1.0) or sigmoid (for logits). retrieval_weight is the share of the
    retrieval signal in the final score (1 for documents that were not reranked). raw_score is the
    reranker's raw score for reranked documents, the fused score otherwise. Flags: "reranked", and
    "rerank_missing" for a top-N document without a score in a query where others were reranked.
    """
    if not len(fused):
        return pl.DataFrame(schema=BLEND_SCHEMA)
    b = fused.select(
        pl.col("qid").cast(pl.Utf8),
        pl.col("doc_id").cast(pl.Utf8),
        pl.col("chunk_id").cast(pl.Utf8),
        pl.col("rank").cast(pl.Int64).alias("fused_rank"),
        pl.col("score").cast(pl.Float64).alias("fused_score"),
    )
    if rerank_scores is not None and len(rerank_scores) and cfg.blend != "none":
        # One score per (query, document): the reranker may have scored several chunks of a document.
        rs = rerank_scores.group_by(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).agg(
            pl.col("rerank_score").cast(pl.Float64).max()
        )
        b = b.join(rs, on=["qid", "doc_id"], how="left")
    else:
        b = b.with_columns(pl.lit(None, pl.Float64).alias("rerank_score"))

    if cfg.blend == "none":
        reranked = pl.lit(False)
    else:
        reranked = (
            (pl.col("fused_rank") <= cfg.top_n)
            & pl.col("rerank_score").is_not_null()
            & pl.col("rerank_score").is_finite()
        )
    b = b.with_columns(reranked.fill_null(False).alias("reranked"))
    if not b["reranked"].any():
        # Nothing reranked (no provider, or it failed for every query): the fused list, rows and all.
        return b.with_columns(
            pl.col("fused_score").alias("score"),
            pl.col("fused_rank").alias("rank"),
            pl.lit(None, pl.Float64).alias("rerank_norm"),
            pl.lit(1.0).alias("retrieval_weight"),
            pl.col("fused_score").alias("raw_score"),
            pl.lit([], pl.List(pl.Utf8)).alias("flags"),
        ).select(list(BLEND_SCHEMA))
    b = b.with_columns(pl.col("reranked").any().over("qid").alias("_q_reranked"))

    x = pl.when(pl.col("reranked")).then(pl.col("rerank_score"))
    if cfg.score_normalization == "sigmoid":
        norm = 1.0 / (1.0 + (-x).exp())
    elif cfg.score_normalization == "none":
        norm = x
    else:
        lo, hi = x.min().over("qid"), x.max().over("qid")
        norm = (
            pl.when(hi > lo)
            .then((x - lo) / (hi - lo))
            .otherwise(pl.when(pl.col("reranked")).then(pl.lit(1.0)))
        )
    b = b.with_columns(norm.alias("rerank_norm"))

    w = pl.lit(0.0) if cfg.blend == "replace" else bucket_weight(cfg.buckets, pl.col("fused_rank"))
    b = b.with_columns(pl.when(pl.col("reranked")).then(w).otherwise(pl.lit(1.0)).alias("retrieval_weight"))
    blended = pl.col("retrieval_weight") / pl.col("fused_rank").cast(pl.Float64) + (
        1.0 - pl.col("retrieval_weight")
    ) * pl.col("rerank_norm")
    b = b.with_columns(pl.when(pl.col("reranked")).then(blended).alias("_block"))

    # Documents not reranked, in a query where others were: fused order, scores strictly below the block.
    tail = pl.col("_q_reranked") & ~pl.col("reranked")
    b = b.with_columns(
        pl.col("_block").min().over("qid").alias("_floor"),
        pl.when(tail).then(pl.col("fused_rank")).rank("ordinal").over("qid").alias("_tail_pos"),
        tail.sum().over("qid").alias("_tail_n"),
    )
    score = (
        pl.when(pl.col("reranked"))
        .then(pl.col("_block"))
        .when(tail)
        .then(scores_below(pl.col("_floor"), pl.col("_tail_pos"), pl.col("_tail_n")))
        .otherwise(pl.col("fused_score"))
    )
    flags = (
        pl.when(pl.col("reranked"))
        .then(pl.lit(["reranked"], pl.List(pl.Utf8)))
        .when(tail & (pl.col("fused_rank") <= cfg.top_n))
        .then(pl.lit(["rerank_missing"], pl.List(pl.Utf8)))
        .otherwise(pl.lit([], pl.List(pl.Utf8)))
    )
    b = b.with_columns(
        score.alias("score"),
        pl.when(pl.col("reranked"))
        .then(pl.col("rerank_score"))
        .otherwise(pl.col("fused_score"))
        .alias("raw_score"),
        flags.alias("flags"),
    )
    # Reranked block first (by blended score), then everything else in fused order.
    b = b.sort(
        ["qid", "reranked", "_block", "fused_rank"], descending=[False, True, True, False], nulls_last=True
    )
    b = b.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank"))
    return b.select(list(BLEND_SCHEMA))
