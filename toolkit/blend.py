"""Stage 7: guarded reranking. Mix the fused order with reranker scores so a reranker cannot bury exact hits.

An unguarded reranker that replaces the order wrecks exact matches (error codes, config keys): measured on
LoCoMo, BM25 0.455 nDCG@10, reranked top 40 0.241, QMD position blend 0.410. Position-aware blending
keeps most of the retrieval signal where retrieval is most reliable (its top ranks):

    final = w(bucket of fused_rank) * 1/fused_rank + (1 - w) * rerank_norm

Only documents within the fused top-N that have a reranker score are reranked; every other document keeps
its fused order below the reranked block, and a query without any reranker score keeps its fused list.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import polars as pl

from .config import RerankConfig
from .fusion import _SCALE, Places, in_rank_order, lookup_values, query_groups

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
# Fused columns the blend passes on when present: `_n` (each query's fused count, for `_blend_block`), fusion's codes
# `_key` and `_q` (`_out_columns`), and the learned model's `score_prob` (`learned_fusion.attach_prob`).
CARRIED = ("_n", "_key", "_q", "score_prob")


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


def rerank_by_doc(rerank_scores: pl.DataFrame) -> pl.DataFrame:
    """[qid, doc_id, rerank_score]: one score per (query, document), the best of its scored chunks."""
    return rerank_scores.group_by(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).agg(
        pl.col("rerank_score").cast(pl.Float64).max()
    )


def blend(
    fused: pl.DataFrame,
    rerank_scores: pl.DataFrame | None,
    cfg: RerankConfig,
    *,
    per_doc: bool = False,
    lookup: tuple[np.ndarray, np.ndarray, np.ndarray | None] | None = None,
    keep: int | None = None,
) -> pl.DataFrame:
    """Blended ranking [qid, doc_id, chunk_id, score, rank, fused_rank, fused_score, rerank_score,
    rerank_norm, retrieval_weight, reranked, raw_score, flags] for all queries.

    `blend`: "position" (formula above), "replace" (reranked block ordered by reranker score), "none"
    (fused order). Reranker scores are normalised per query over the reranked documents: minmax (one
    document, or all equal, gives 1.0), sigmoid (for logits) or none (raw scores). retrieval_weight is the share of the
    retrieval signal in the final score (1 for documents that were not reranked). raw_score is the
    reranker's raw score for reranked documents, the fused score otherwise. Flags: "reranked", and
    "rerank_missing" for a top-N document without a score in a query where others were reranked.
    `per_doc=True` says `rerank_scores` already is `rerank_by_doc` output (cached by `Prepared`);
    `lookup` (`fusion.pair_lookup` of it, plus `fusion.grouped_values`) replaces the join when `fused`
    carries `_key` / `_grp` codes. `keep`: return only each query's first `keep` places (what the caller
    will show), saving the work on the rest. A `fused` cut by `fuse(depth=)` (column `_n`, each query's
    full count) gives the same rows as the whole list when `depth` >= max(keep, top_n).
    """
    if not len(fused):
        return pl.DataFrame(schema=BLEND_SCHEMA)
    b = fused.select(
        pl.col("qid").cast(pl.Utf8),
        pl.col("doc_id").cast(pl.Utf8),
        pl.col("chunk_id").cast(pl.Utf8),
        pl.col("rank").cast(pl.Int64).alias("fused_rank"),
        pl.col("score").cast(pl.Float64).alias("fused_score"),
        *(c for c in CARRIED if c in fused.columns),
    )
    if lookup is not None and cfg.blend != "none" and "_key" in fused.columns and len(lookup[0]):
        keys, values, by_group = lookup
        grp = fused["_grp"].to_numpy() if by_group is not None and "_grp" in fused.columns else None
        if grp is not None and len(grp) and grp[0] >= 0:  # fused with the index's grouping: a gather
            got = by_group[grp]
        else:
            got = lookup_values((keys, values), fused["_key"].to_numpy())
        b = b.with_columns(pl.Series("rerank_score", got).fill_nan(None))
    elif rerank_scores is not None and len(rerank_scores) and cfg.blend != "none":
        # One score per (query, document): the reranker may have scored several chunks of a document.
        rs = rerank_by_doc(rerank_scores) if not per_doc else rerank_scores
        b = b.join(rs, on=["qid", "doc_id"], how="left", maintain_order="left")
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
        if keep is not None:
            b = b.filter(pl.col("fused_rank") <= keep)
        return b.with_columns(
            pl.col("fused_score").alias("score"),
            pl.col("fused_rank").alias("rank"),
            pl.lit(None, pl.Float64).alias("rerank_norm"),
            pl.lit(1.0).alias("retrieval_weight"),
            pl.col("fused_score").alias("raw_score"),
            pl.lit([], pl.List(pl.Utf8)).alias("flags"),
        ).select(_out_columns(b))
    return _blend_block(b, cfg, keep)


def _out_columns(b: pl.DataFrame) -> list[str]:
    """BLEND_SCHEMA's columns, and fusion's codes when `b` has them: the (query, document) code `_key` (dedup
    then finds each row's source by integer, `dedup.source_codes`, not by a string join) and the query code
    `_q` (`fusion.query_groups`), and the learned model's `score_prob`."""
    return [*BLEND_SCHEMA, *(c for c in CARRIED[1:] if c in b.columns)]


def _segments(g: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """(first row, row count) of each of the `n` groups numbered 0..n-1 in the sorted group ids `g`."""
    counts = np.bincount(g, minlength=n)
    return np.concatenate(([0], np.cumsum(counts)[:-1])), counts


def _group_reduce(ufunc: np.ufunc, values: np.ndarray, g: np.ndarray, n: int, empty: float) -> np.ndarray:
    """ufunc-reduce `values` per group (rows sorted by group id `g`); `empty` for groups with no rows."""
    out = np.full(n, empty)
    if len(values):
        starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        out[g[starts]] = ufunc.reduceat(values, starts)
    return out


def _rerank_norm(x: np.ndarray, m: np.ndarray, kind: str, lo_hi: Callable[[], tuple[np.ndarray, np.ndarray]]) -> np.ndarray:
    """Reranker scores `x` (NaN where `m` is false) scaled as `score_normalization` says; `lo_hi()`: each row's
    query minimum and maximum (minmax only). One arithmetic for `_blend_block` and `blend_places`."""
    if kind == "sigmoid":
        return 1.0 / (1.0 + np.exp(-x))
    if kind == "none":
        return x
    lo, hi = lo_hi()
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(hi > lo, (x - lo) / (hi - lo), np.where(m, 1.0, np.nan))


def _bucket_weights(fr: np.ndarray, cfg: RerankConfig) -> np.ndarray:
    """Retrieval weight by fused rank: the first bucket whose last rank is >= it (0 for `replace`)."""
    if cfg.blend == "replace":
        return np.zeros(len(fr))
    w = np.full(len(fr), cfg.buckets[-1][1])
    todo = np.ones(len(fr), dtype=bool)
    for bound, weight in cfg.buckets:
        hit = todo & (True if math.isinf(bound) else fr <= bound)
        w[hit] = weight
        todo &= ~hit
    return w


def _below(floor: np.ndarray, frac: np.ndarray) -> np.ndarray:
    """Scores of the documents not reranked in a reranked query: below the block's `floor`, in fused order
    (`frac` = place among them / (their number + 1)); `scores_below` is the same formula in polars."""
    return np.where(floor > 0, floor * (1.0 - frac), floor - frac)


def _blend_block(b: pl.DataFrame, cfg: RerankConfig, keep: int | None) -> pl.DataFrame:
    """The blend of queries with reranked documents, in numpy over rows sorted by (qid, fused rank).

    Runs on every slider change: polars window expressions over string query ids (`.over("qid")`) cost
    ~10x this. The arithmetic is the formula in the module docstring, in the same operation order as the
    reference expressions (`bucket_weight`, `scores_below`), so scores are bit-identical. A column `_n` (each
    query's number of fused documents) says `b` holds only the first places (`fuse(depth=)`).
    """
    # `fuse` returns rows by (qid, rank) with ranks 1..n per query; sort only when given anything else.
    if not in_rank_order(b.select("qid", pl.col("fused_rank").alias("rank"), *(["_q"] if "_q" in b.columns else []))):
        b = b.sort("qid", "fused_rank")
    g = query_groups(b)
    step = np.diff(g)
    if g[0] or (step > 1).any() or (step < 0).any():  # codes of some queries only: number the groups 0, 1, ...
        g = np.r_[0, np.cumsum(step != 0)]
    fr = b["fused_rank"].to_numpy()
    ng = int(g[-1]) + 1
    frf = fr.astype(np.float64)
    rerank = b["rerank_score"].to_numpy().astype(np.float64)  # null -> nan
    m = b["reranked"].to_numpy()
    q_reranked = np.bincount(g, weights=m, minlength=ng) > 0

    x = np.where(m, rerank, np.nan)
    gm = g[m]
    norm = _rerank_norm(x, m, cfg.score_normalization, lambda: (_group_reduce(np.minimum, x[m], gm, ng, np.nan)[g],
                                                                 _group_reduce(np.maximum, x[m], gm, ng, np.nan)[g]))
    retrieval_weight = np.where(m, _bucket_weights(fr, cfg), 1.0)
    block = np.where(m, retrieval_weight / frf + (1.0 - retrieval_weight) * norm, np.nan)

    # Documents not reranked, in a query where others were: fused order, scores strictly below the block.
    tail = q_reranked[g] & ~m
    starts, _ = _segments(g, ng)
    ctail = np.cumsum(tail)
    before = (ctail - tail)[starts]  # tail rows before each group's first row
    tail_pos = (ctail - before[g]).astype(np.float64)
    if "_n" not in b.columns:
        tail_n = np.bincount(g, weights=tail, minlength=ng)[g]
    else:  # rows past the cut are tail rows of reranked queries too (reranked rows all lie within top_n)
        tail_n = np.where(q_reranked, b["_n"].to_numpy()[starts] - np.bincount(g, weights=m, minlength=ng), 0.0)[g]
    floor = _group_reduce(np.minimum, block[m], gm, ng, np.nan)[g]
    frac = tail_pos / (tail_n + 1.0)
    with np.errstate(invalid="ignore"):
        below = _below(floor, frac)
    fused_score = b["fused_score"].to_numpy()
    score = np.where(m, block, np.where(tail, below, fused_score))
    raw = np.where(m, rerank, fused_score)

    # Reranked block first (by blended score, then fused rank), then everything else in fused order. Only
    # the first top_n rows of a query can move (reranked rows lie there), so only they are sorted.
    order = np.arange(len(b))
    head = np.flatnonzero(fr <= cfg.top_n)
    # Only the first top_n rows of each query can move. They become one row of a (queries x top_n) matrix
    # (padded with +inf) sorted along its rows: reranked first by blended score, then, stably, fused order.
    # Many small sorts; a global np.lexsort over (query, reranked, score, rank) costs ~5x this.
    width = min(cfg.top_n, int(fr.max()))
    mat = np.full((ng, width), np.inf)
    mat[g[head], fr[head] - 1] = np.where(m[head], -block[head], np.inf)
    by_row = np.argsort(mat, axis=1, kind="stable")
    taken = by_row < (np.minimum(np.bincount(g, minlength=ng), width))[:, None]  # drop the padding
    order[head] = (starts[:, None] + by_row)[taken]
    rank = np.arange(len(b)) - starts[g] + 1  # rows stay grouped: the sort's first key is the group
    qid = b.select("qid")
    if keep is not None:  # only the first `keep` places of each query are wanted
        sel = rank <= keep
        order, rank, qid = order[sel], rank[sel], qid.filter(sel)
    flag = np.where(m, 1, np.where(tail & (fr <= cfg.top_n), 2, 0))[order]
    # qid does not move (rows only change places within a query): gather the other columns only.
    out = qid.hstack(b.drop("qid")[order]).with_columns(
        pl.Series("score", score[order]),
        pl.Series("rank", rank, dtype=pl.Int64),
        pl.Series("rerank_norm", norm[order]).fill_nan(None),
        pl.Series("retrieval_weight", retrieval_weight[order]),
        pl.Series("raw_score", raw[order]),
    )
    flags = pl.Series("flags", [[], ["reranked"], ["rerank_missing"]], dtype=pl.List(pl.Utf8)).gather(flag)
    return out.with_columns(flags).select(_out_columns(out))


def blend_places(p: Places, by_group: np.ndarray | None, cfg: RerankConfig, *, keep: int | None = None) -> pl.DataFrame:
    """`blend(fuse(...), ..., lookup=..., keep=keep)` from `fusion.places` output, with fusion's codes `_key` and
    `_q`: the same rows, order and scores. `by_group`: `fusion.grouped_values` of the reranker scores (None:
    no scores).

    Why: a slider tick that shows no trace never reads the fused frame, so it is not built. Each query is a
    row of the places matrix: the reranked block's arithmetic runs on its first top_n columns only (row
    reductions instead of segment reductions), the places below it keep their column, and the only frame is
    the blended one, built once for the places kept. The arithmetic is `_blend_block`'s, in the same
    operation order, so scores are bit-identical.
    """
    nq, d = p.g.shape
    k = d if keep is None else min(keep, d)
    h = min(cfg.top_n, d)  # reranked rows lie in the first top_n places; only they can move
    rerank = np.full((nq, max(h, k)), np.nan)  # the reranker's score of each place, NaN where none
    if by_group is not None and cfg.blend != "none":
        rerank = np.append(by_group, np.nan)[p.g[:, : max(h, k)]]  # past a query's end (-1): the NaN appended
    head_rr = rerank[:, :h]
    mh = np.zeros((nq, h), dtype=bool) if cfg.blend == "none" else (p.g[:, :h] >= 0) & np.isfinite(head_rr)
    fused = p.isum[:, :k] / _SCALE
    if not mh.any():  # nothing reranked (no provider, or it failed for every query): the fused list
        return _places_frame(p, p.g[:, :k], np.arange(1, k + 1), fused, rerank[:, :k], np.nan, 1.0, False, fused, 0)
    fr = np.arange(1, h + 1)
    head_fused = p.isum[:, :h] / _SCALE
    x = np.where(mh, head_rr, np.nan)
    q_reranked = mh.any(axis=1)
    # Rows without a reranked place: lo = inf, hi = -inf, so nan like `_blend_block`'s.
    norm = _rerank_norm(x, mh, cfg.score_normalization, lambda: (np.where(mh, x, np.inf).min(axis=1)[:, None],
                                                                  np.where(mh, x, -np.inf).max(axis=1)[:, None]))
    rw = np.where(mh, _bucket_weights(fr, cfg), 1.0)
    block = np.where(mh, rw / fr.astype(np.float64) + (1.0 - rw) * norm, np.nan)

    # Documents not reranked, in a query where others were: fused order, scores strictly below the block.
    # Past the first top_n places every document of such a query is one; its place among them follows from
    # its column.
    tail = q_reranked[:, None] & ~mh & (p.g[:, :h] >= 0)
    tail_pos = np.cumsum(tail, axis=1)
    tail_n = np.where(q_reranked, p.layout.count - mh.sum(axis=1), 0.0)[:, None]
    floor = np.where(mh, block, np.inf).min(axis=1)[:, None]
    with np.errstate(invalid="ignore"):
        frac = tail_pos.astype(np.float64) / (tail_n + 1.0)
        below = _below(floor, frac)
        head_score = np.where(mh, block, np.where(tail, below, head_fused))
        score = fused
        if k > h:
            frac = (tail_pos[:, -1:] + np.arange(1, k - h + 1)).astype(np.float64) / (tail_n + 1.0)
            score = np.where(q_reranked[:, None], _below(floor, frac), fused[:, h:])

    # Reranked block first (by blended score, then fused rank), then everything else in fused order; the
    # places below top_n stay where they are. One stable sort along each query's row of its first top_n keys
    # (numpy has no segmented sort; the matrix row is the segment).
    by_row = np.argsort(np.where(mh, -block, np.inf), axis=1, kind="stable")[:, :k]
    at = (np.arange(nq)[:, None] * h + by_row).ravel()

    def rows(head: np.ndarray, rest: np.ndarray | float) -> np.ndarray:
        """(queries x kept places): the head's values in their new order, then the places below it."""
        first = head.ravel()[at].reshape(nq, -1)
        if k <= h:
            return first
        out = np.empty((nq, k), dtype=first.dtype)
        out[:, :h], out[:, h:] = first, rest
        return out

    g = rows(p.g[:, :h], p.g[:, h:k])
    fused_rank = rows(np.broadcast_to(fr, (nq, h)), np.arange(h + 1, k + 1))
    score = rows(head_score, score)
    raw = rows(np.where(mh, head_rr, head_fused), fused[:, h:])
    rerank = rows(head_rr, rerank[:, h:])
    norm = rows(norm, np.nan)
    rw = rows(rw, 1.0)
    reranked = rows(mh, False)
    flag = rows(np.where(tail, 2, mh.astype(np.int64)), 0)
    isum = rows(p.isum[:, :h], p.isum[:, h:k])
    return _places_frame(p, g, fused_rank, score, rerank, norm, rw, reranked, raw, flag, isum)


def _places_frame(
    p: Places, g: np.ndarray, fused_rank: np.ndarray, score: np.ndarray, rerank: np.ndarray, norm: np.ndarray | float,
    rw: np.ndarray | float, reranked: np.ndarray | bool, raw: np.ndarray, flag: np.ndarray | int, isum: np.ndarray | None = None,
) -> pl.DataFrame:
    """The blended frame (`_out_columns` with `_key` and `_q`) from (queries x places) matrices in output order
    (or values that broadcast to them); places past a query's fused documents (`p.n`) are dropped. `isum`: the
    fused scores in fusion's units (default: `score` is the fused score). Rows are taken by indexing frames
    (`frame[rows]`), which costs a fraction of `Series.gather` here."""
    nq, k = g.shape
    sel = None if bool((p.n >= k).all()) else np.flatnonzero((np.arange(k)[None, :] < p.n[:, None]).ravel())

    def flat(a: np.ndarray | float) -> np.ndarray:
        a = np.broadcast_to(np.asarray(a), (nq, k)).ravel()
        return a if sel is None else a[sel]

    gg = flat(g)
    return p.layout.ids[gg].hstack([
        pl.Series("score", flat(score), dtype=pl.Float64),
        pl.Series("rank", flat(np.arange(1, k + 1)[None, :]), dtype=pl.Int64),
        pl.Series("fused_rank", flat(fused_rank), dtype=pl.Int64),
        pl.Series("fused_score", flat(score) if isum is None else flat(isum) / _SCALE, dtype=pl.Float64),
        pl.Series("rerank_score", flat(rerank), dtype=pl.Float64, nan_to_null=True),
        pl.Series("rerank_norm", flat(norm), dtype=pl.Float64, nan_to_null=True),
        pl.Series("retrieval_weight", flat(rw), dtype=pl.Float64),
        pl.Series("reranked", flat(reranked), dtype=pl.Boolean),
        pl.Series("raw_score", flat(raw), dtype=pl.Float64),
        _FLAGS[flat(flag)].to_series(),
        pl.Series("_key", p.layout.key[gg], dtype=pl.Int64),
        pl.Series("_q", np.repeat(np.arange(nq), np.minimum(p.n, k)), dtype=pl.Int64),
    ])


_FLAGS = pl.DataFrame({"flags": [[], ["reranked"], ["rerank_missing"]]}, schema={"flags": pl.List(pl.Utf8)})
