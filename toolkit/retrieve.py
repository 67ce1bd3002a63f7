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
