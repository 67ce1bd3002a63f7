"""Stage 8: near-duplicate removal and source-level dedup with fill ("I asked for 5 and got 1").

Near duplicates first: a result whose embedding has cosine >= threshold with a higher-ranked kept result is
dropped (only the top `depth` per query is compared; that is where it matters and what stays cheap). Then
sources: at most `max_per_source` results per source in a first pass; the remaining slots of the n are
filled from the next-best sources, and only when unseen sources run out with further results of sources
already shown (flag "extra_from_source"), round by round. Results are renumbered 1..n, and scores of
filled results are set strictly below the first pass, so sorting by score gives the same order (trec_eval
ranks by score).
"""

from __future__ import annotations

import numpy as np
import polars as pl

from .blend import scores_below
from .config import DedupConfig
from .errors import ToolkitError

REMOVED_SCHEMA = {
    "qid": pl.Utf8,
    "doc_id": pl.Utf8,
    "chunk_id": pl.Utf8,
    "rank": pl.Int64,
    "reason": pl.Utf8,
    "kept_instead": pl.Utf8,
}


def _add_flag(flags: pl.Expr, cond: pl.Expr, flag: str) -> pl.Expr:
    return pl.when(cond).then(flags.list.concat(pl.lit([flag], pl.List(pl.Utf8)))).otherwise(flags)


def near_duplicates(
    ranked: pl.DataFrame, vectors: pl.DataFrame, threshold: float, depth: int
) -> pl.DataFrame:
    """[qid, doc_id, kept_instead] of results to drop: cosine >= threshold to a higher-ranked kept result.

    `ranked` must be sorted by (qid, rank). Greedy in rank order; a result without a vector is never a
    duplicate. The kept result named is the most similar one.
    """
    top = ranked.filter(pl.col("rank") <= depth).select("qid", "doc_id", "chunk_id", "rank")
    top = top.join(vectors.select("chunk_id", "vec"), on="chunk_id", how="left", maintain_order="left")
    has = top["vec"].is_not_null().to_numpy()
    if not has.any():
        return pl.DataFrame(schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "kept_instead": pl.Utf8})
    vec = top["vec"].filter(top["vec"].is_not_null())
    if isinstance(vec.dtype, pl.List):
        vec = vec.list.to_array(len(vec[0]))
    present = vec.cast(pl.Array(pl.Float32, vec.dtype.size)).to_numpy()
    mat = np.zeros((len(top), present.shape[1]), dtype=np.float32)
    mat[has] = present
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    mat = np.divide(mat, norms, out=np.zeros_like(mat), where=norms > 0)

    qid = top["qid"].to_list()
    doc = top["doc_id"].to_list()
    new_q = top.select(pl.col("qid") != pl.col("qid").shift(1)).to_series().fill_null(True).to_numpy()
    bounds = np.r_[np.flatnonzero(new_q), len(top)]
    drop_q, drop_d, kept_by = [], [], []
    # One matrix product per query block (numpy); the greedy pass only visits rows that have a
    # near-identical earlier row, which are few.
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):
        sim = mat[s:e] @ mat[s:e].T
        close = np.triu(sim >= threshold, k=1)
        suspects = np.flatnonzero(close.any(axis=0))
        if not len(suspects):
            continue
        kept = np.ones(e - s, dtype=bool)
        for j in suspects:
            earlier = close[:j, j] & kept[:j]
            if earlier.any():
                kept[j] = False
                i = np.flatnonzero(earlier)[np.argmax(sim[:j, j][earlier])]
                drop_q.append(qid[s + j])
                drop_d.append(doc[s + j])
                kept_by.append(doc[s + i])
    return pl.DataFrame(
        {"qid": drop_q, "doc_id": drop_d, "kept_instead": kept_by},
        schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "kept_instead": pl.Utf8},
    )


def dedup(
    ranked: pl.DataFrame,
    doc_source: pl.DataFrame | None,
    cfg: DedupConfig,
    *,
    vectors: pl.DataFrame | None = None,
    n: int,
    depth: int | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept, removed). kept = the input columns plus `source` and `flags`, at most n rows per query,
    ranks renumbered 1..n; removed = [qid, doc_id, chunk_id, rank, reason, kept_instead] with reason
    "near_duplicate" or "source_limit" (a result of the original top n pushed out by the source limit).

    `vectors` [chunk_id, vec] is needed when near-duplicate removal is on; `depth` (default max(3n, 50))
    is how many top results per query are compared.
    """
    depth = depth or max(3 * n, 50)
    r = ranked.sort("qid", "rank")
    if "flags" not in r.columns:
        r = r.with_columns(pl.lit([], pl.List(pl.Utf8)).alias("flags"))
    if "source" in r.columns:
        r = r.drop("source")
    if doc_source is not None and len(doc_source):
        src = doc_source.select(pl.col("doc_id").cast(pl.Utf8), pl.col("source").cast(pl.Utf8)).unique(
            "doc_id", keep="first"
        )
        r = r.join(src, on="doc_id", how="left", maintain_order="left")
    else:
        r = r.with_columns(pl.lit(None, pl.Utf8).alias("source"))
    # A document without a source is its own source.
    r = r.with_columns(pl.coalesce(pl.col("source"), pl.col("doc_id")).alias("source"))
    removed: list[pl.DataFrame] = []

    if cfg.near_duplicate_enabled and len(r):
        if vectors is None:
            raise ToolkitError(
                "near-duplicate dedup needs the chunk vectors (store.chunk_vectors); ingest with embeddings or disable dedup.near_duplicate_enabled"
            )
        dups = near_duplicates(r, vectors, cfg.near_duplicate_threshold, depth)
        if len(dups):
            gone = r.join(dups, on=["qid", "doc_id"], how="inner")
            removed.append(
                gone.select(
                    "qid",
                    "doc_id",
                    "chunk_id",
                    "rank",
                    pl.lit("near_duplicate").alias("reason"),
                    "kept_instead",
                )
            )
            r = r.join(dups.select("qid", "doc_id"), on=["qid", "doc_id"], how="anti", maintain_order="left")

    if cfg.source_enabled and len(r):
        r = r.with_columns(
            (pl.int_range(pl.len(), dtype=pl.Int64).over("qid", "source") // cfg.max_per_source).alias(
                "_tier"
            ),
            pl.col("doc_id").first().over("qid", "source").alias("_source_best"),
        )
        extra = pl.col("_tier") > 0
        if cfg.fill == "sources_only":
            out = r.filter(~extra)
        else:
            # Round-robin over sources: every source's first results, then their next ones, ...
            floor = pl.when(~extra).then(pl.col("score")).min().over("qid")
            out = r.sort(["qid", "_tier", "rank"]).with_columns(
                pl.when(extra)
                .then(
                    scores_below(floor, extra.cast(pl.Int64).cum_sum().over("qid"), extra.sum().over("qid"))
                )
                .otherwise(pl.col("score"))
                .alias("score"),
                _add_flag(pl.col("flags"), extra, "extra_from_source").alias("flags"),
            )
        out = out.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("_new_rank"))
        pushed = r.filter(extra & (pl.col("rank") <= n)).join(
            out.filter(pl.col("_new_rank") <= n).select("qid", "doc_id"), on=["qid", "doc_id"], how="anti"
        )
        removed.append(
            pushed.select(
                "qid",
                "doc_id",
                "chunk_id",
                "rank",
                pl.lit("source_limit").alias("reason"),
                pl.col("_source_best").alias("kept_instead"),
            )
        )
        r = out.drop("_tier", "_source_best", "_new_rank")

    kept = r.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank")).filter(
        pl.col("rank") <= n
    )
    rem = (
        pl.concat([x.cast(REMOVED_SCHEMA) for x in removed])
        if removed
        else pl.DataFrame(schema=REMOVED_SCHEMA)
    )
    return kept, rem
