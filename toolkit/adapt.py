"""Per-query list weights from a label-free signal (a rescore stage, before fusion): how clearly the dense
list's top result stands out.

No fixed fusion weight suits every collection: measured on the dev splits, BM25 alone beats equal RRF on
LoCoMo (0.493 vs 0.461 nDCG@10) while dense alone beats it on MS MARCO (0.788 vs 0.765). What we can read
without judgements is the shape of each query's lists. The dense list's gap between its first and tenth
cosine (`d1 - d10`) was the one signal whose correlation with "dense beats BM25 on this query" had the
same sign on the two collections where one list dominates (+0.44 MS MARCO, +0.23 LoCoMo dev). So the
dense list's weight is `clip(gap / adapt.gap_scale, min_weight, max_weight)` for each query: a flat dense
list (no document stands out) counts less, a dense list with a clear winner counts more.

Routes (per_query column `route`): "dense-led" (weight above 1.25), "bm25-led" (below 0.8), "balanced".
Under the learned model, which weighs no list per query, the route says which list its first results follow
(`followed_routes`).

A query the dense model cannot read gets the lowest weight: mostly letters outside the Latin script while the
store's vectors come from an English-only model (`embed.ENGLISH_ONLY_MODELS`). Its gap is noise there: for a
Japanese query the packaged MiniLM put a ramen menu first with a clear gap, and `default` ranked BM25's only
match 4th (user trial AQ).
"""

from __future__ import annotations

import unicodedata

import polars as pl

from .config import AdaptConfig

ROUTE_SCHEMA = {"qid": pl.Utf8, "dense_gap": pl.Float64, "dense_weight": pl.Float64, "route": pl.Utf8}
FOLLOW_SCHEMA = {"qid": pl.Utf8, "bm25_top10": pl.Int64, "dense_top10": pl.Int64, "route": pl.Utf8}
FOLLOW_MARGIN = 3  # first-10 documents one list must hold beyond the other's for the query to count as led by it


def dense_gap(candidates: pl.DataFrame, depth: int = 10) -> pl.DataFrame:
    """[qid, dense_gap]: first minus `depth`-th cosine of each query's original dense list (minus its last
    when shorter; 0 with one document)."""
    d = candidates.filter(pl.col("list_id") == "orig:vec").filter(pl.col("rank") <= depth)
    return (
        d.sort("qid", "rank")
        .group_by("qid", maintain_order=True)
        .agg((pl.col("score").first() - pl.col("score").last()).cast(pl.Float64).alias("dense_gap"))
        .with_columns(pl.col("qid").cast(pl.Utf8))
    )


def unread_queries(queries: pl.DataFrame, model: str | None) -> list[str]:
    """Query ids whose letters are mostly (over half, of two or more) outside the Latin script, when `model` (the
    store's embedding model id) is English-only; [] for any other model, whose languages are not known here."""
    from .embed import ENGLISH_ONLY_MODELS

    if not model or not model.startswith(ENGLISH_ONLY_MODELS):
        return []
    out = []
    for qid, text in queries.select("qid", "text").iter_rows():
        letters = [c for c in text if c.isalpha()]
        latin = sum(c.isascii() or unicodedata.name(c, "").startswith("LATIN") for c in letters)
        if len(letters) >= 2 and latin * 2 < len(letters):
            out.append(str(qid))
    return out


def routes(gaps: pl.DataFrame, cfg: AdaptConfig, unread: list[str] | None = None) -> pl.DataFrame:
    """[qid, dense_gap, dense_weight, route] for each query with a dense list; `unread` queries (`unread_queries`)
    get `min_weight`."""
    w = (pl.col("dense_gap") / cfg.gap_scale).clip(cfg.min_weight, cfg.max_weight)
    if unread:
        w = pl.when(pl.col("qid").is_in(pl.Series(unread, dtype=pl.Utf8).implode())).then(pl.lit(cfg.min_weight)).otherwise(w)
    return gaps.with_columns(w.alias("dense_weight")).with_columns(
        pl.when(pl.col("dense_weight") > 1.25)
        .then(pl.lit("dense-led"))
        .when(pl.col("dense_weight") < 0.8)
        .then(pl.lit("bm25-led"))
        .otherwise(pl.lit("balanced"))
        .alias("route")
    ).select(list(ROUTE_SCHEMA))


def adapt_weights(weights: pl.DataFrame, route: pl.DataFrame) -> pl.DataFrame:
    """Multiply every dense list's weight [qid, list_id, weight] by its query's `dense_weight`."""
    dense = pl.col("list_id").str.ends_with(":vec")
    return (
        weights.join(route.select("qid", "dense_weight"), on="qid", how="left")
        .with_columns(
            pl.when(dense)
            .then(pl.col("weight") * pl.col("dense_weight").fill_null(1.0))
            .otherwise(pl.col("weight"))
            .alias("weight")
        )
        .drop("dense_weight")
    )


def list_firsts(candidates: pl.DataFrame) -> pl.DataFrame:
    """[qid, doc_id, list_id] of the original BM25 and dense lists' first 10 (what `followed_routes` counts)."""
    firsts = candidates.filter(pl.col("list_id").is_in(["orig:lex", "orig:vec"]) & (pl.col("rank") <= 10))
    return firsts.select(pl.col("qid").cast(pl.Utf8), "doc_id", "list_id").unique()


def followed_routes(final: pl.DataFrame, firsts: pl.DataFrame, qids: pl.Series) -> pl.DataFrame:
    """[qid, bm25_top10, dense_top10, route] for each of `qids`: how many of the final first 10 results are in
    BM25's first 10 and in dense search's (`firsts`: `list_firsts`), and the route that reads: "bm25-led" when BM25's
    count is larger by `FOLLOW_MARGIN` or more, "dense-led" the other way, else "balanced". For a fusion that weighs
    no list per query (the learned model) this says which way a query went after the fact: a description, not a
    setting."""
    top = final.filter(pl.col("rank") <= 10).select(pl.col("qid").cast(pl.Utf8), "doc_id")
    hits = top.join(firsts, on=["qid", "doc_id"]).group_by("qid").agg(
        (pl.col("list_id") == "orig:lex").sum().cast(pl.Int64).alias("bm25_top10"),
        (pl.col("list_id") == "orig:vec").sum().cast(pl.Int64).alias("dense_top10"))
    lead = pl.col("bm25_top10") - pl.col("dense_top10")
    return (
        pl.DataFrame({"qid": qids.cast(pl.Utf8).unique(maintain_order=True)})
        .join(hits, on="qid", how="left", maintain_order="left")
        .with_columns(pl.col("bm25_top10", "dense_top10").fill_null(0))
        .with_columns(pl.when(lead >= FOLLOW_MARGIN).then(pl.lit("bm25-led"))
                      .when(lead <= -FOLLOW_MARGIN).then(pl.lit("dense-led"))
                      .otherwise(pl.lit("balanced")).alias("route"))
        .select(list(FOLLOW_SCHEMA))
    )
