"""Stage 3-4: run every query variant through its retrievers and stack the lists into one long frame.

`lex` variants go to BM25 only, `vec`/`hyde` to dense only, the original to both; a query routed as
conversational may skip its lexical lists. Each (query, variant, retriever) is one list, named
`<variant>:<retriever>` (e.g. `orig:lex`), which is what fusion weights refer to.
"""

from __future__ import annotations

import polars as pl

from .fusion import CANDIDATE_COLUMNS
from .store import Store

_SEP = "\x1f"


def retrieve(
    store: Store,
    queries: pl.DataFrame,
    variants: pl.DataFrame,
    *,
    lexical: dict | None,
    dense: dict | None,
    level: str = "document",
    scope_filter: bool = True,
    skip_lexical: pl.DataFrame | None = None,
    filters: dict | None = None,
    progress: bool = False,
) -> pl.DataFrame:
    """Candidates [qid, list_id, variant, retriever, doc_id, chunk_id, rank, score] for all queries at once.

    `lexical`/`dense` are keyword arguments for the store's search (e.g. `{"top_k": 100, "k1": 1.2}`), or
    None to switch that retriever off.
    """
    v = variants.join(queries.select("qid", "scope"), on="qid", how="left").with_columns(
        (pl.col("qid") + _SEP + pl.col("variant")).alias("key")
    )
    frames = []
    if lexical is not None:
        lv = v.filter(pl.col("kind").is_in(["orig", "lex"]))
        if skip_lexical is not None:
            skip = skip_lexical.filter(pl.col("skip_lexical")).select("qid")
            lv = lv.join(skip, on="qid", how="anti")
        if len(lv):
            res = store.lexical_search(
                lv.select(pl.col("key").alias("qid"), "text", "scope"),
                level=level,
                scope_filter=scope_filter,
                filters=filters,
                **lexical,
            )
            frames.append(_label(res, "lex"))
    if dense is not None:
        dv = v.filter(pl.col("kind").is_in(["orig", "vec", "hyde"]))
        if len(dv):
            res = store.dense_search(
                dv.select(pl.col("key").alias("qid"), "text", "scope"),
                level=level,
                scope_filter=scope_filter,
                filters=filters,
                progress=progress,
                **dense,
            )
            frames.append(_label(res, "vec"))
    if not frames:
        return empty_candidates()
    return pl.concat(frames).select(CANDIDATE_COLUMNS).sort("qid", "list_id", "rank")


def _label(res: pl.DataFrame, retriever: str) -> pl.DataFrame:
    parts = pl.col("qid").str.split_exact(_SEP, 1)
    return res.with_columns(
        parts.struct.field("field_0").alias("qid"),
        parts.struct.field("field_1").alias("variant"),
        pl.lit(retriever).alias("retriever"),
    ).with_columns((pl.col("variant") + ":" + pl.col("retriever")).alias("list_id"))


def empty_candidates() -> pl.DataFrame:
    return pl.DataFrame(
        schema={
            "qid": pl.Utf8,
            "list_id": pl.Utf8,
            "variant": pl.Utf8,
            "retriever": pl.Utf8,
            "doc_id": pl.Utf8,
            "chunk_id": pl.Utf8,
            "rank": pl.Int64,
            "score": pl.Float64,
        }
    )


def name_first(candidates: pl.DataFrame, named: pl.DataFrame, top_k: int) -> pl.DataFrame:
    """BM25's list for each query whose identifier names a document by its id (`Store.named_documents`: "commit d1434e0"
    in memory whose ids are commit hashes, a memory's UUID): that document goes first, scored the list's top score plus
    the IDF of a term only it holds (the highest any term can have), and the list is cut to `top_k`. An id is not text,
    so BM25 alone never found it (user trial BW: 25 queries by a commit's short hash scored 0 under every config); with
    its own score plus that IDF, a short revert that quotes the hash, or one that holds the query's other words, still
    outranked it (review CB: bm25-only put "d7fa0d5 commit details" 5th). At chunk level the document's best chunk in
    the list, else its first, carries it. The exact-token guard then treats the id as held by that document, before any
    text that quotes it (`guard.exact_matches`, `named`)."""
    if not len(named) or not len(candidates):
        return candidates if not len(named) else _named_only(named, top_k)
    bonus = named.group_by("qid", "doc_id").agg(pl.col("chunk_id").first(), pl.col("idf").first())
    mine = (pl.col("list_id") == "orig:lex") & pl.col("qid").is_in(bonus["qid"].unique().implode())
    lex, rest = candidates.filter(mine), candidates.filter(~mine)
    top = lex.group_by("qid").agg(pl.col("score").max().alias("_top"))
    bonus = bonus.join(top, on="qid", how="left").with_columns((pl.col("_top").fill_null(0.0) + pl.col("idf")).alias("idf")).drop("_top")
    best = pl.col("rank") == pl.col("rank").min().over("qid", "doc_id")  # the document's best chunk carries it
    held = lex.join(bonus.select("qid", "doc_id", "idf"), on=["qid", "doc_id"], how="left").with_columns(
        pl.when(best & pl.col("idf").is_not_null()).then(pl.col("idf")).otherwise(pl.col("score")).alias("score")).drop("idf")
    new = _named_only(bonus.join(lex, on=["qid", "doc_id"], how="anti"), None)
    both = pl.concat([held, new])
    return pl.concat([rest, _ranked(both, top_k)]).sort("qid", "list_id", "rank")


def _named_only(named: pl.DataFrame, top_k: int | None) -> pl.DataFrame:
    rows = named.unique(["qid", "doc_id"]).select(
        pl.col("qid"), pl.lit("orig:lex").alias("list_id"), pl.lit("orig").alias("variant"), pl.lit("lex").alias("retriever"),
        "doc_id", "chunk_id", pl.lit(None, pl.Int64).alias("rank"), pl.col("idf").alias("score")).cast(empty_candidates().schema)
    return rows if top_k is None else _ranked(rows, top_k)


def _ranked(lists: pl.DataFrame, top_k: int) -> pl.DataFrame:
    """Ranks by score (rounded to 1e-9, as the BM25 paths order), ties in the former order, a new document after them."""
    return (lists.with_columns(pl.col("score").round(9))
            .sort("qid", "score", "rank", descending=[False, True, False], nulls_last=True)
            .with_columns(pl.int_range(1, pl.len() + 1).over("qid").cast(pl.Int64).alias("rank"))
            .filter(pl.col("rank") <= top_k).select(CANDIDATE_COLUMNS))
