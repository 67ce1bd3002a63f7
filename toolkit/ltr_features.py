"""Learning-to-rank features of every (query, candidate document), computed once in `prepare`.

The cached lists alone (ranks and scores) barely beat BM25 when a model learns from them (measured on
LoCoMo: 0.479 vs 0.486 nDCG@10); the gain lives in features of the text (0.519 with query-term coverage,
its IDF-weighted form and document length). So besides the lists' ranks and scores this module reads the
BM25 index tables (`fts_main_chunks.dict/terms/docs/stats`) in a few batched SQL statements: which query
terms each candidate contains, how rare they are, and how close together they occur in its best chunk.

Features are named so that models stay portable across collections: absolute BM25 scores and IDFs depend on
the collection's size, so each comes with a normalised twin (share of the list's top score, share of the
largest possible IDF). `FEATURES` lists them all with the direction a model may be held to (+1: more never
hurts), see docs/frames.md.
"""

from __future__ import annotations

import math
from typing import Any, get_args

import polars as pl

from .config import Stemmer
from .guard import COVERAGE_SCHEMA
from .store import QUERY_TERM_FILTER, IndexSettings

_STEMMERS = frozenset(get_args(Stemmer))

# (name, monotone direction for LightGBM: +1 increasing, -1 decreasing, 0 free). Missing list = not retrieved:
# reciprocal rank 0, normalised score 0, raw score NaN (LightGBM's missing value).
FEATURES: list[tuple[str, int]] = [
    # per list: the original query's BM25 ("lex") and dense ("vec") lists
    ("lex_rr", 1), ("lex_score", 0), ("lex_norm", 1), ("lex_ratio", 1),
    ("vec_rr", 1), ("vec_score", 0), ("vec_norm", 1), ("vec_ratio", 1),
    # expansion variants' lists (0 when the query has none)
    ("lex_exp_rr", 1), ("vec_exp_rr", 1), ("n_exp_lists", 0),
    # agreement between lists
    ("n_lists_share", 1), ("both", 0), ("best_rr", 1), ("rrf", 1), ("log_rank_gap", 0),
    # query (same for every candidate of a query)
    ("q_tokens", 0), ("q_stopword_ratio", 0), ("q_technical", 0), ("q_terms", 0),
    ("q_idf_mean", 0), ("q_idf_max", 0), ("q_idf_mean_norm", 0), ("q_idf_max_norm", 0),
    ("q_lex_top_norm", 0), ("q_vec_top", 0), ("q_overlap10", 0),
    # document / chunk
    ("doc_len", 0), ("doc_len_rel", 0), ("doc_chunks", 0), ("chunk_ord", 0), ("chunk_pos", 0), ("source_share", 0),
    # text matches
    ("coverage", 1), ("idf_coverage", 1), ("chunk_coverage", 1), ("proximity", 1), ("tech_match", 1),
    # the same signals relative to the query's other candidates (scale-free: what transfers across collections)
    ("lex_z", 1), ("vec_z", 1), ("vec_gap", -1), ("cov_rel", 1), ("idfcov_rel", 1), ("idfcov_pct", 1), ("prox_rel", 1),
    # query: how steeply each list's scores fall over its first 10 places (appended: the default recipe's column order,
    # which LightGBM's feature sampling reads, stays the one the spreads were measured with)
    ("q_lex_spread", 0), ("q_vec_spread", 0),
]  # fmt: skip
FEATURE_NAMES = [f for f, _ in FEATURES]
RELATIVE_FEATURES = ["lex_z", "vec_z", "vec_gap", "cov_rel", "idfcov_rel", "idfcov_pct", "prox_rel"]
KEY_COLUMNS = ["qid", "doc_id", "chunk_id"]
SCHEMA = {"qid": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, **{f: pl.Float64 for f in FEATURE_NAMES}}


def empty() -> pl.DataFrame:
    return pl.DataFrame(schema=SCHEMA)


def of(prep: Any) -> pl.DataFrame:
    """`prep`'s features, for the learned model and router. A `Prepared` made without them (`prepare(...,
    learned_features=False)`, which `run_pipeline` asks for a config that reads none) and then re-scored with the
    learned method would be ranked on no features at all: an error that says how to get them instead."""
    if prep.ltr_features is not None:
        return prep.ltr_features
    if prep.candidates is None or prep.candidates.is_empty():
        return empty()
    from .errors import InputError

    raise InputError("these prepared frames were made without the learning-to-rank features, which the learned "
                     "fusion method and the router read: prepare them with prepare(..., learned_features=True) (the "
                     "default, unless one_shot) or run_pipeline with the learned config")


def is_current(frame: pl.DataFrame | None) -> bool:
    """True when a cached feature frame has exactly this version's columns (else it is recomputed)."""
    return frame is not None and frame.schema == pl.Schema(SCHEMA)


def _list_features(cands: pl.DataFrame) -> pl.DataFrame:
    """Rank/score features per (qid, doc_id), from the first appearance of each document in each list."""
    c = (
        cands.sort("qid", "list_id", "rank")
        .unique(["qid", "list_id", "doc_id"], keep="first", maintain_order=True)
        .with_columns(
            (1.0 / pl.col("rank")).alias("rr"),
            pl.col("score").max().over("qid", "list_id").alias("_top"),
            pl.col("score").min().over("qid", "list_id").alias("_low"),
        )
        .with_columns(
            pl.when(pl.col("_top") > pl.col("_low"))
            .then((pl.col("score") - pl.col("_low")) / (pl.col("_top") - pl.col("_low")))
            .otherwise(1.0)
            .alias("norm"),
            pl.when(pl.col("_top") > 0).then(pl.col("score") / pl.col("_top")).otherwise(0.0).alias("ratio"),
            pl.col("list_id").n_unique().over("qid").alias("_nl"),
        )
    )
    orig = pl.col("variant") == "orig"
    lex, vec = pl.col("retriever") == "lex", pl.col("retriever") == "vec"

    def pick(cond: pl.Expr, col: str) -> pl.Expr:
        return pl.col(col).filter(cond).max()

    g = c.group_by("qid", "doc_id").agg(
        pl.col("chunk_id").sort_by("rank", "list_id").first(),
        pick(orig & lex, "rr").alias("lex_rr"), pick(orig & lex, "score").alias("lex_score"),
        pick(orig & lex, "norm").alias("lex_norm"), pick(orig & lex, "ratio").alias("lex_ratio"),
        pick(orig & vec, "rr").alias("vec_rr"), pick(orig & vec, "score").alias("vec_score"),
        pick(orig & vec, "norm").alias("vec_norm"), pick(orig & vec, "ratio").alias("vec_ratio"),
        pick(~orig & lex, "rr").alias("lex_exp_rr"), pick(~orig & vec, "rr").alias("vec_exp_rr"),
        (~orig).sum().cast(pl.Float64).alias("n_exp_lists"),
        (pl.len() / pl.col("_nl").first()).alias("n_lists_share"),
        pl.col("rr").max().alias("best_rr"),
        (1.0 / (60.0 + pl.col("rank"))).sum().alias("rrf"),
        pl.col("rank").filter(orig & lex).min().alias("_lr"),
        pl.col("rank").filter(orig & vec).min().alias("_vr"),
    )  # fmt: skip
    return g.with_columns(
        *(pl.col(f).fill_null(0.0) for f in ("lex_rr", "lex_norm", "lex_ratio", "vec_rr", "vec_norm", "vec_ratio", "lex_exp_rr", "vec_exp_rr")),
        (pl.col("_lr").is_not_null() & pl.col("_vr").is_not_null()).cast(pl.Float64).alias("both"),
        (pl.col("_lr").cast(pl.Float64).log() - pl.col("_vr").cast(pl.Float64).log()).abs().fill_null(-1.0).alias("log_rank_gap"),
    ).drop("_lr", "_vr")  # fmt: skip


def _query_list_features(cands: pl.DataFrame) -> pl.DataFrame:
    """Label-free per-query signals of how sure each list is: BM25 top score mapped x/(1+x), top cosine,
    the overlap of the two original lists' top 10 (what a router reads), and how far the lowest-scored of each list's
    first ten documents falls below the best (BM25 as a share of its top score, cosine as a difference): a list that scores its
    first ten alike is guessing (a help question's words scattered over many pages), one that falls steeply has
    found something. Leave-one-collection-out on the twelve dev splits, the two spreads lifted the mean nDCG@10
    at each of five seeds (benchmarks/RESULTS.md, twenty-eighth session)."""
    lex = cands.filter(pl.col("list_id") == "orig:lex")
    vec = cands.filter(pl.col("list_id") == "orig:vec")
    lex10, vec10 = _first_ten(lex), _first_ten(vec)
    parts = [
        lex.group_by("qid").agg((pl.col("score").max() / (1 + pl.col("score").max())).alias("q_lex_top_norm")),
        vec.group_by("qid").agg(pl.col("score").max().alias("q_vec_top")),
        lex10.join(vec10, on=["qid", "doc_id"]).group_by("qid").agg((pl.len() / 10.0).alias("q_overlap10")),
        _spread(lex10, "q_lex_spread", relative=True),
        _spread(vec10, "q_vec_spread", relative=False),
    ]
    out = cands.select("qid").unique()
    for part in parts:
        out = out.join(part, on="qid", how="left")
    return out.with_columns(pl.col("q_lex_top_norm", "q_vec_top", "q_overlap10", "q_lex_spread", "q_vec_spread").fill_null(0.0))


def _first_ten(lst: pl.DataFrame) -> pl.DataFrame:
    """The documents in a list's first 10 places, each with its best chunk's score."""
    return lst.filter(pl.col("rank") <= 10).group_by("qid", "doc_id").agg(pl.col("score").max())


def _spread(top10: pl.DataFrame, name: str, *, relative: bool) -> pl.DataFrame:
    """Per query: the best score among a list's first ten documents (`_first_ten`) minus the lowest of them, over
    the best when `relative`; 0 for one document or a best score of 0."""
    hi, lo = pl.col("score").max(), pl.col("score").min()
    gap = pl.when(hi > 0).then((hi - lo) / hi).otherwise(0.0) if relative else hi - lo
    return top10.group_by("qid").agg(gap.cast(pl.Float64).alias(name))


def _register(con, name: str, df: pl.DataFrame) -> None:
    con.register(name, df.lazy())  # not Arrow: DuckDB would import pandas (store._Connection)


# The candidates' chunks that hold each of their query's terms (`ltr_pairs` [qid, doc_id, chunk_id], `ltr_qt` [qid,
# termid, idf]). The postings are reached from the candidates' chunks, each paired with its own query's terms, and
# looked up by (chunk, term): starting from the terms read every posting of a common word once per query that holds
# it (user trial BL: 9 GB for 1,000 queries over 224k chunks, against 2 GB for the rest of prepare).
_HITS = """cand AS MATERIALIZED (SELECT DISTINCT p.qid, c.doc_id, c.chunk_id, fd.docid
               FROM (SELECT DISTINCT qid, doc_id FROM ltr_pairs) p JOIN chunks c USING (doc_id)
               JOIN fts_main_chunks.docs fd ON fd.name = c.chunk_id),
           hits AS MATERIALIZED (SELECT DISTINCT cand.qid, cand.doc_id, cand.chunk_id, qt.termid, qt.idf
               FROM cand JOIN ltr_qt qt ON qt.qid = cand.qid
               SEMI JOIN fts_main_chunks.terms t ON t.docid = cand.docid AND t.termid = qt.termid)"""


def _query_terms(store, queries: pl.DataFrame, pairs: pl.DataFrame) -> tuple[str, float]:
    """Registers `ltr_q`, `ltr_pairs` and `ltr_qt` (each query's distinct index terms with their IDF) on the store's
    connection; returns (stemmer, the largest IDF the index can give). The caller unregisters them."""
    con = store.con
    settings = store.settings or IndexSettings()
    stemmer = settings.stemmer
    if stemmer not in _STEMMERS:  # interpolated into SQL below: checked against the closed list
        raise ValueError(f"unknown stemmer {stemmer!r}")
    q = queries.select(pl.int_range(pl.len()).alias("qi"), "qid", pl.col("text").map_elements(settings.lexical_text, return_dtype=pl.Utf8).alias("lex"))
    _register(con, "ltr_q", q)
    _register(con, "ltr_pairs", pairs.select("qid", "doc_id", "chunk_id"))
    n_docs = con.execute("SELECT num_docs FROM fts_main_chunks.stats").fetchone()[0]
    qt = con.execute(
        f"""SELECT DISTINCT q.qid, d.termid, ln(((? - d.df + 0.5) / (d.df + 0.5)) + 1) AS idf
        FROM (SELECT qid, stem(tok, '{stemmer}') AS t
              FROM (SELECT qid, unnest(fts_main_chunks.tokenize(lex)) AS tok FROM ltr_q) WHERE {QUERY_TERM_FILTER}) q
        JOIN fts_main_chunks.dict d ON d.term = q.t""",
        [n_docs],
    ).pl()
    _register(con, "ltr_qt", qt)  # a registered frame, not a table: read-only stores work too
    return stemmer, (math.log((n_docs - 1 + 0.5) / 1.5 + 1) if n_docs > 1 else 1.0)


def term_coverage(store, queries: pl.DataFrame, candidates: pl.DataFrame) -> pl.DataFrame:
    """[qid, doc_id, terms]: how many of its query's distinct index terms each candidate document holds, in any
    chunk: the `coverage` feature's count, for the guard's `coverage_first` (which needs no learned features)."""
    pairs = candidates.select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).unique()
    if not len(pairs) or not store.has_lexical_index():
        return pl.DataFrame(schema=COVERAGE_SCHEMA)
    _query_terms(store, queries.filter(pl.col("qid").is_in(pairs["qid"].unique().implode())),
                 pairs.with_columns(pl.lit(None, pl.Utf8).alias("chunk_id")))
    con = store.con
    try:
        got = con.execute(f"""WITH {_HITS}
            SELECT p.qid, p.doc_id, count(DISTINCT h.termid) AS terms
            FROM (SELECT DISTINCT qid, doc_id FROM ltr_pairs) p LEFT JOIN hits h USING (qid, doc_id) GROUP BY ALL""").pl()
    finally:
        for name in ("ltr_q", "ltr_pairs", "ltr_qt"):
            con.unregister(name)
    return got.select(list(COVERAGE_SCHEMA)).cast(COVERAGE_SCHEMA).sort("qid", "doc_id")


def _text_features(store, queries: pl.DataFrame, pairs: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(per query [qid, q_terms, q_idf_*], per pair [qid, doc_id, coverage, idf_coverage, chunk_coverage,
    proximity, doc_len, doc_chunks, chunk_ord, chunk_pos]) from the FTS tables, all queries at once."""
    con = store.con
    stemmer, idf_max = _query_terms(store, queries, pairs)
    per_query = con.execute(
        "SELECT qid, count(*)::DOUBLE AS q_terms, avg(idf ORDER BY termid) AS q_idf_mean, max(idf) AS q_idf_max, "
        "avg(idf ORDER BY termid) / ? AS q_idf_mean_norm, max(idf) / ? AS q_idf_max_norm, sum(idf ORDER BY termid) AS _idf_sum "
        "FROM ltr_qt GROUP BY qid",
        [idf_max, idf_max],
    ).pl().with_columns(pl.col("q_idf_mean", "q_idf_mean_norm").round(12))  # sums in no fixed order, as idf_coverage
    # Query terms present anywhere in the candidate document (document coverage) and in its best chunk (`_HITS`).
    per_pair = con.execute(
        f"""WITH {_HITS},
           doc AS (SELECT qid, doc_id, count(*)::DOUBLE AS n, sum(idf ORDER BY termid) AS idf_n
               FROM (SELECT DISTINCT qid, doc_id, termid, idf FROM hits) GROUP BY ALL),
           best AS (SELECT h.qid, h.doc_id, count(DISTINCT h.termid)::DOUBLE AS n_chunk
               FROM hits h JOIN ltr_pairs p USING (qid, doc_id, chunk_id) GROUP BY ALL)
        SELECT p.qid, p.doc_id, coalesce(doc.n, 0) AS _n, doc.idf_n AS _idf_n, coalesce(best.n_chunk, 0) AS _n_chunk
        FROM ltr_pairs p LEFT JOIN doc USING (qid, doc_id) LEFT JOIN best USING (qid, doc_id)"""
    ).pl()
    # Proximity in the best chunk: the smallest distance (in tokens) between occurrences of two different
    # query terms, which is always between two neighbours in position order (any occurrence between them
    # has a term that differs from one of the two): a lag() over the position-sorted hits finds it.
    # Only pairs whose best chunk holds two or more query terms can have a distance.
    _register(con, "ltr_prox", per_pair.filter(pl.col("_n_chunk") >= 2).select("qid", "doc_id").join(pairs, on=["qid", "doc_id"]))
    prox = con.execute(
        f"""WITH toks AS MATERIALIZED (SELECT chunk_id, unnest(t) AS tok, unnest(range(1, len(t) + 1)) AS pos
               FROM (SELECT c.chunk_id, fts_main_chunks.tokenize(c.lex_text) AS t FROM chunks c
                     SEMI JOIN (SELECT DISTINCT chunk_id FROM ltr_prox) p ON p.chunk_id = c.chunk_id)),
           vocab AS MATERIALIZED (SELECT v.tok, d.termid FROM (SELECT DISTINCT tok FROM toks WHERE {QUERY_TERM_FILTER}) v
               JOIN fts_main_chunks.dict d ON d.term = stem(v.tok, '{stemmer}')
               SEMI JOIN (SELECT DISTINCT termid FROM ltr_qt) qt ON qt.termid = d.termid),
           occ AS (SELECT p.qid, p.doc_id, o.pos, v.termid
               FROM toks o JOIN vocab v ON v.tok = o.tok
               JOIN ltr_prox p ON p.chunk_id = o.chunk_id
               SEMI JOIN ltr_qt qt ON qt.qid = p.qid AND qt.termid = v.termid),
           gaps AS (SELECT qid, doc_id, pos - lag(pos) OVER w AS gap, termid <> lag(termid) OVER w AS differs
               FROM occ WINDOW w AS (PARTITION BY qid, doc_id ORDER BY pos, termid))
        SELECT qid, doc_id, 1.0 / min(gap) AS proximity FROM gaps WHERE differs GROUP BY ALL"""
    ).pl()
    layout = con.execute(
        """WITH cd AS (SELECT DISTINCT doc_id FROM ltr_pairs)
        SELECT c.doc_id, ln(1 + sum(coalesce(fd.len, 0)))::DOUBLE AS doc_len, count(*)::DOUBLE AS doc_chunks
        FROM chunks c SEMI JOIN cd USING (doc_id) LEFT JOIN fts_main_chunks.docs fd ON fd.name = c.chunk_id GROUP BY ALL"""
    ).pl()
    ords = con.execute(
        "SELECT c.chunk_id, c.ord::DOUBLE AS chunk_ord FROM chunks c SEMI JOIN (SELECT DISTINCT chunk_id FROM ltr_pairs) p USING (chunk_id)"
    ).pl()
    for name in ("ltr_q", "ltr_pairs", "ltr_qt", "ltr_prox"):
        con.unregister(name)
    pp = (
        pairs.select("qid", "doc_id", "chunk_id")
        .join(per_pair, on=["qid", "doc_id"], how="left")
        .join(per_query.select("qid", "q_terms", "_idf_sum"), on="qid", how="left")
        .join(prox, on=["qid", "doc_id"], how="left")
        .join(layout, on="doc_id", how="left")
        .join(ords, on="chunk_id", how="left")
    )
    terms = pl.col("q_terms").fill_null(0.0)
    pp = pp.select(
        "qid", "doc_id",
        pl.when(terms > 0).then(pl.col("_n") / terms).otherwise(0.0).alias("coverage"),
        # Rounded, and summed in term order (`ORDER BY termid` above): DuckDB's parallel sums added the IDFs in no fixed
        # order, so two computations of one store's features differed in the last bit (274 of 4,557 CACM pairs), enough
        # to move LightGBM's bins and a retrained model; rounding alone still let a sum astride a rounding step differ.
        pl.when(pl.col("_idf_sum") > 0).then(pl.col("_idf_n").fill_null(0.0) / pl.col("_idf_sum")).otherwise(0.0).round(12).alias("idf_coverage"),
        pl.when(terms > 0).then(pl.col("_n_chunk") / terms).otherwise(0.0).alias("chunk_coverage"),
        pl.col("proximity").fill_null(0.0),
        pl.col("doc_len").fill_null(0.0), pl.col("doc_chunks").fill_null(1.0),
        pl.col("chunk_ord").fill_null(0.0),
        (pl.col("chunk_ord").fill_null(0.0) / pl.col("doc_chunks").fill_null(1.0).clip(lower_bound=1.0)).alias("chunk_pos"),
    )  # fmt: skip
    return per_query.drop("_idf_sum"), pp


def _tech_match(store, pairs: pl.DataFrame, qfeat: pl.DataFrame) -> pl.DataFrame:
    """[qid, doc_id, tech_match]: share of the query's technical tokens found verbatim (case-insensitive)
    in the document's title or text; 0 for queries without any (a few queries, so a join in polars)."""
    tech = qfeat.select("qid", "technical_tokens").filter(pl.col("technical_tokens").list.len() > 0)
    if not len(tech):
        return pairs.select("qid", "doc_id", pl.lit(0.0).alias("tech_match"))
    p = pairs.join(tech, on="qid")
    docs = store.documents(p["doc_id"].unique().to_list()).select(
        "doc_id", (pl.col("title").fill_null("") + "\n" + pl.col("text").fill_null("")).str.to_lowercase().alias("body")
    )
    hits = (
        p.join(docs, on="doc_id", how="left")
        .explode("technical_tokens")
        .with_columns(pl.col("body").str.contains(pl.col("technical_tokens").str.to_lowercase(), literal=True).alias("hit"))
        .group_by("qid", "doc_id")
        .agg(pl.col("hit").cast(pl.Float64).mean().alias("tech_match"))
    )
    return pairs.select("qid", "doc_id").join(hits, on=["qid", "doc_id"], how="left").with_columns(pl.col("tech_match").fill_null(0.0))


def _relative(out: pl.DataFrame) -> pl.DataFrame:
    """Per-query relative twins of the list scores and text matches: a raw BM25 score or cosine means
    something else in every collection, a z-score within the query's list or a share of the query's best
    coverage does not. Missing from a list: z = -3, gap = 1.
    Measured leave-one-collection-out over 5 seeds they did not beat the first 38 features (RESULTS.md), so
    the default recipe does not read them; `train_fusion.TRANSFER_FEATURES` does."""

    def z(col: str) -> pl.Expr:
        m, sd = pl.col(col).mean().over("qid"), pl.col(col).std().over("qid")
        zs = pl.when(sd > 0).then((pl.col(col) - m) / sd).otherwise(0.0)
        return pl.when(pl.col(col).is_null()).then(-3.0).otherwise(zs).clip(-3.0, 3.0)

    def rel(col: str) -> pl.Expr:
        top = pl.col(col).max().over("qid")
        return pl.when(top > 0).then(pl.col(col) / top).otherwise(0.0)

    exprs = [
        z("_ls").alias("lex_z"), z("_vs").alias("vec_z"),
        (pl.col("q_vec_top") - pl.col("_vs")).fill_null(1.0).alias("vec_gap"),
    ]  # fmt: skip
    if "idf_coverage" in out.columns:  # text features (stores with a BM25 index)
        exprs += [rel("coverage").alias("cov_rel"), rel("idf_coverage").alias("idfcov_rel"), rel("proximity").alias("prox_rel"),
                  # rounded first: equal coverages summed in another order differ in the last bit, and split ties
                  (pl.col("idf_coverage").round(12).rank("average").over("qid") / pl.len().over("qid")).alias("idfcov_pct")]  # fmt: skip
    out = out.with_columns(pl.col("lex_score").fill_nan(None).alias("_ls"), pl.col("vec_score").fill_nan(None).alias("_vs"))
    return out.with_columns(exprs).drop("_ls", "_vs")


def candidate_features(store, queries: pl.DataFrame, candidates: pl.DataFrame, qfeat: pl.DataFrame) -> pl.DataFrame:
    """One row per (query, candidate document) with `KEY_COLUMNS` + `FEATURE_NAMES` (all Float64).

    `chunk_id` is the chunk of the document's best appearance (smallest rank, then list id), as in
    `fusion.fuse`. Reads the store (FTS tables, document text) and nothing a slider changes.
    """
    if not len(candidates):
        return empty()
    lists = _list_features(candidates)
    pairs = lists.select("qid", "doc_id", "chunk_id")
    qf = qfeat.select(
        "qid",
        pl.col("n_tokens").cast(pl.Float64).alias("q_tokens"),
        pl.col("stopword_ratio").cast(pl.Float64).alias("q_stopword_ratio"),
        pl.col("technical_tokens").list.len().cast(pl.Float64).alias("q_technical"),
    )
    out = lists.join(qf, on="qid", how="left").join(_query_list_features(candidates), on="qid", how="left")
    if store.has_lexical_index():
        per_query, per_pair = _text_features(store, queries.filter(pl.col("qid").is_in(pairs["qid"].unique().implode())), pairs)
        out = out.join(per_query, on="qid", how="left").join(per_pair, on=["qid", "doc_id"], how="left")
    # The candidates' sources only: the whole table, read on every one-shot search, grows with the store.
    sources = store.doc_sources(pairs["doc_id"].unique().to_list()).select("doc_id", "source")
    src = (
        pairs.join(sources, on="doc_id", how="left")
        .with_columns(pl.col("source").fill_null(pl.col("doc_id")))
        .with_columns((pl.len().over("qid", "source") / pl.len().over("qid")).alias("source_share"))
        .select("qid", "doc_id", "source_share")
    )
    out = out.join(src, on=["qid", "doc_id"], how="left").join(_tech_match(store, pairs, qfeat), on=["qid", "doc_id"], how="left")
    out = out.sort("qid", "doc_id")  # sorted first: window sums in a fixed order, the same floats each time
    if "doc_len" in out.columns:  # length against the query's other candidates: comparable across collections
        # (after the sort: the joins' row order summed these in another order per run, 2,536 of debpkg's last bits)
        out = out.with_columns((pl.col("doc_len") - pl.col("doc_len").mean().over("qid")).alias("doc_len_rel"))
    out = _relative(out)
    for f in FEATURE_NAMES:
        if f not in out.columns:
            out = out.with_columns(pl.lit(0.0).alias(f))
    nan_ok = {"lex_score", "vec_score"}  # raw scores: missing stays missing (NaN), the rest 0
    out = out.with_columns(
        *(pl.col(f).cast(pl.Float64).fill_null(float("nan") if f in nan_ok else 0.0) for f in FEATURE_NAMES)
    )
    return out.select(list(SCHEMA)).cast(SCHEMA).sort("qid", "doc_id")


