"""Stage 8: collapsing copies, near-duplicate removal and source-level dedup with fill ("I asked for 5
and got 1").

Byte-identical documents first (same `text_hash`, e.g. one README shipped by five packages): the
best-ranked copy stays and says where else the text lives (`also_in`: the sources of the other copies among
the query's own candidates, plus those of near-duplicates removed for it; flag `duplicates_collapsed`).
Only the query's candidates, never the whole store: retrieval already applied the query's scope (and
filters), so a copy the query may not see is neither collapsed nor named (a copy shares its original's
scores, so every visible copy within the lists' depth is a candidate). Then near duplicates: a result whose embedding has cosine >= threshold with a higher-ranked kept result is
dropped (only the top `depth` per query is compared; that is where it matters and what stays cheap). Then
sources: at most `max_per_source` results per source in a first pass; the remaining slots of the n are
filled from the next-best sources, and only when unseen sources run out with further results of sources
already shown (flag "extra_from_source"), round by round. Results are renumbered 1..n, and scores of
filled results are set strictly below the first pass, so sorting by score gives the same order (trec_eval
ranks by score).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .config import DedupConfig
from .errors import ToolkitError
from .fusion import in_rank_order, query_groups

REMOVED_SCHEMA = {
    "qid": pl.Utf8,
    "doc_id": pl.Utf8,
    "chunk_id": pl.Utf8,
    "rank": pl.Int64,
    "reason": pl.Utf8,
    "kept_instead": pl.Utf8,
}
COLLAPSED = "duplicates_collapsed"


def _add_flag(flags: pl.Expr, cond: pl.Expr, flag: str) -> pl.Expr:
    return pl.when(cond).then(flags.list.concat(pl.lit([flag], pl.List(pl.Utf8)))).otherwise(flags)


def _unit_matrix(vectors: pl.DataFrame) -> tuple[pl.DataFrame, np.ndarray]:
    """([chunk_id, vi], unit-length float32 matrix) with one row per distinct chunk."""
    v = vectors.select(pl.col("chunk_id").cast(pl.Utf8), "vec").filter(pl.col("vec").is_not_null())
    v = v.unique("chunk_id", keep="first", maintain_order=True)
    if not len(v):
        return v.select("chunk_id", pl.lit(0, pl.Int64).alias("vi")), np.zeros((0, 1), dtype=np.float32)
    vec = v["vec"]
    if isinstance(vec.dtype, pl.List):
        vec = vec.list.to_array(len(vec[0]))
    mat = vec.cast(pl.Array(pl.Float32, vec.dtype.size)).to_numpy()
    norms = np.linalg.norm(mat, axis=1, keepdims=True)
    mat = np.divide(mat, norms, out=np.zeros_like(mat), where=norms > 0)
    return v.select("chunk_id").with_row_index("vi").select("chunk_id", pl.col("vi").cast(pl.Int64)), mat


# Near-identical pairs are kept from this cosine up (or from a lower threshold when one is set), so a threshold
# slider above it filters cached pairs instead of multiplying vectors again.
EDGE_FLOOR = 0.9


def edge_floor(threshold: float) -> float:
    """The cosine `near_edges` keeps pairs from for `threshold`: one cache serves every threshold above the floor."""
    return min(threshold, EDGE_FLOOR)


@dataclass(frozen=True)
class NearEdges:
    """The near-identical pairs (cosine >= `floor`) among a prepared set's candidate chunks: config-free, so
    computed once per prepared set and floor, not on every slider change (the products cost ~210 ms a change
    on LoCoMo). `pairs` [va, vb, sim] hold every ordered pair of distinct chunks (a store whose queries share
    candidates, like a memory bank), or, with a `qid` column, the pairs within each query's candidates
    (whichever takes fewer multiply-adds)."""

    index: pl.DataFrame  # [chunk_id, vi]: the row of each chunk's unit vector
    pairs: pl.DataFrame
    floor: float


def near_edges(vectors: pl.DataFrame, candidates: pl.DataFrame, floor: float) -> NearEdges:
    """`NearEdges` of `candidates` [qid, chunk_id, ...] from `vectors` [chunk_id, vec]."""
    index, unit = _unit_matrix(vectors)
    c = (candidates.select(pl.col("qid").cast(pl.Utf8), pl.col("chunk_id").cast(pl.Utf8)).unique()
         .join(index, on="chunk_id").sort("qid", "vi"))
    used = np.unique(c["vi"].to_numpy())
    sizes = c.group_by("qid", maintain_order=True).len()["len"].to_numpy().astype(np.int64)
    # Large blocked products run ~10x faster per multiply-add than many small ones (LoCoMo: 0.6 s vs 5.3 s with
    # 5,877 distinct chunks), hence the factor 8.
    if len(used) ** 2 < 8 * int((sizes**2).sum()):
        u = unit[used]
        pa, pb, ps = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float32)]
        for s in range(0, len(used), 1024):
            sim = u[s : s + 1024] @ u.T
            i, j = np.nonzero(sim >= floor)
            keep = i + s != j
            pa.append(used[i[keep] + s])
            pb.append(used[j[keep]])
            ps.append(sim[i[keep], j[keep]])
        pairs = pl.DataFrame({"va": np.concatenate(pa), "vb": np.concatenate(pb), "sim": np.concatenate(ps)})
        return NearEdges(index, pairs, floor)
    vi = c["vi"].to_numpy()
    bounds = np.r_[0, np.cumsum(sizes)]
    at, pa, pb, ps = [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.int64)], [np.zeros(0, np.float32)]
    for s, e in zip(bounds[:-1], bounds[1:], strict=True):  # one small product per query
        if e - s < 2:
            continue
        m = unit[vi[s:e]]
        sim = m @ m.T
        i, j = np.nonzero(sim >= floor)
        keep = i != j
        at.append(np.full(int(keep.sum()), s))
        pa.append(vi[s:e][i[keep]])
        pb.append(vi[s:e][j[keep]])
        ps.append(sim[i[keep], j[keep]])
    pairs = pl.DataFrame({"qid": c["qid"].gather(np.concatenate(at)), "va": np.concatenate(pa), "vb": np.concatenate(pb),
                          "sim": np.concatenate(ps)})
    return NearEdges(index, pairs, floor)


def near_duplicates(
    ranked: pl.DataFrame, vectors: pl.DataFrame | None, threshold: float, depth: int, edges: NearEdges | None = None
) -> pl.DataFrame:
    """[qid, doc_id, kept_instead] of results to drop: cosine >= threshold to a higher-ranked kept result.

    Greedy in rank order over each query's top `depth`; a result without a vector is never a duplicate.
    The kept result named is the most similar one. `edges`: `near_edges` of the candidates `ranked` came
    from at a floor <= threshold (`Prepared` keeps them); else they are computed here from `vectors`.
    """
    drop, kept = _near_rows(ranked, vectors, threshold, depth, edges)
    doc = ranked["doc_id"].cast(pl.Utf8)
    return pl.DataFrame({"qid": ranked["qid"].cast(pl.Utf8).gather(drop), "doc_id": doc.gather(drop), "kept_instead": doc.gather(kept)},
                        schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "kept_instead": pl.Utf8})


def _near_rows(
    ranked: pl.DataFrame, vectors: pl.DataFrame | None, threshold: float, depth: int, edges: NearEdges | None
) -> tuple[np.ndarray, np.ndarray]:
    """`near_duplicates` as row positions of `ranked`: (the rows to drop, the row each is a near-copy of)."""
    none = (np.zeros(0, np.int64), np.zeros(0, np.int64))
    if edges is None or edges.floor > threshold:
        edges = near_edges(vectors, ranked.filter(pl.col("rank") <= depth), threshold)
    pairs = edges.pairs.filter(pl.col("sim") >= threshold)
    if not len(ranked) or not len(pairs):
        return none
    # Only rows whose chunk is in some pair take part (duplicates are the exception): they are picked out first, and
    # only they are joined and sorted (every row was, ~6 ms of a threshold change on LoCoMo's 243k rows).
    ends = edges.index.filter(pl.col("vi").is_in(pl.concat([pairs["va"], pairs["vb"]]).unique().implode()))
    top = (
        ranked.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_pos"), pl.col("qid").cast(pl.Utf8), "chunk_id", "rank")
        .filter((pl.col("rank") <= depth) & pl.col("chunk_id").is_in(ends["chunk_id"].implode()))
        .join(ends, on="chunk_id", how="inner")
        .sort("qid", "rank")
    )
    # Each two rows of one query whose chunks are a near-identical pair, the earlier row first.
    rows = top.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("row"), "qid", pl.col("vi").alias("v"))
    on = ["qid"] if "qid" in pairs.columns else []
    a = rows.filter(pl.col("v").is_in(pairs["va"].unique().implode()))
    b = rows.filter(pl.col("v").is_in(pairs["vb"].unique().implode())).select(
        pl.col("row").alias("row_b"), "qid", pl.col("v").alias("vb"))
    e = (a.join(pairs, left_on=[*on, "v"], right_on=[*on, "va"]).join(b, on=["qid", "vb"])
         .filter(pl.col("row") < pl.col("row_b")))
    if not len(e):
        return none
    i, j, sim = e["row"].to_numpy(), e["row_b"].to_numpy(), e["sim"].to_numpy()
    # Greedy in rank order: a row goes if an earlier row that is still kept is near-identical. Edges are
    # few (duplicates are the exception), so a loop over them is cheap.
    order = np.lexsort((i, j))
    gone: set[int] = set()
    drop_rows, kept_rows = [], []
    cur, cands = -1, []
    for a, b, s in [
        *zip(i[order].tolist(), j[order].tolist(), sim[order].tolist(), strict=True),
        (-1, -1, 0.0),
    ]:
        if b != cur:
            if cands:
                gone.add(cur)
                drop_rows.append(cur)
                kept_rows.append(max(cands, key=lambda c: (c[0], -c[1]))[1])
            cur, cands = b, []
        if a >= 0 and a not in gone:
            cands.append((s, a))
    pos = top["_pos"].to_numpy()
    return pos[np.asarray(drop_rows, np.int64)], pos[np.asarray(kept_rows, np.int64)]


def _runs(key: np.ndarray) -> np.ndarray:
    """For a sorted key array: index of the first element of each element's run of equal keys."""
    first = np.r_[True, key[1:] != key[:-1]]
    return np.maximum.accumulate(np.where(first, np.arange(len(key)), 0))


def _source_pass(r: pl.DataFrame, cfg: DedupConfig, n: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Round-robin over sources for rows sorted by (qid, rank): every source's first `max_per_source`
    results, then their next ones, ... (or only the first pass with fill="sources_only"). Integer codes
    and numpy: string windows over (query, source) cost ~10x more on every slider change."""
    m = len(r)
    qc = (
        np.cumsum(r.select(pl.col("qid") != pl.col("qid").shift(1)).to_series().fill_null(True).to_numpy())
        - 1
    )
    sources = r["source"].unique().sort()
    sc = r["source"].cast(pl.Enum(sources)).to_physical().cast(pl.Int64).to_numpy()
    # Position of each row within its (query, source), in rank order: a stable sort keeps rank order.
    by_src = np.argsort(qc * len(sources) + sc, kind="stable")
    head = _runs((qc * len(sources) + sc)[by_src])
    pos = np.empty(m, dtype=np.int64)
    pos[by_src] = np.arange(m) - head
    source_best = np.empty(m, dtype=np.int64)
    source_best[by_src] = by_src[head]
    tier = pos // cfg.max_per_source
    extra = tier > 0

    if cfg.fill == "sources_only":
        order = np.flatnonzero(~extra)
    else:
        order = np.argsort(qc * (int(tier.max()) + 1) + tier, kind="stable")
    q_o, extra_o = qc[order], extra[order]
    q_head = _runs(q_o)
    new_rank = np.arange(len(order)) - q_head + 1
    score = r["score"].cast(pl.Float64).to_numpy()
    score_o = score[order]
    if extra_o.any():
        # Filled results score strictly below the first pass of their query (rule of blend.scores_below).
        starts = np.flatnonzero(np.r_[True, q_o[1:] != q_o[:-1]])
        floor = np.minimum.reduceat(np.where(extra_o, np.inf, score_o), starts)
        count = np.add.reduceat(extra_o.astype(np.int64), starts)
        qi = np.cumsum(np.r_[True, q_o[1:] != q_o[:-1]]) - 1
        cum = np.cumsum(extra_o) - np.r_[0, np.cumsum(extra_o)][q_head]
        f, frac = floor[qi], cum / (count[qi] + 1.0)
        below = np.where(f > 0, f * (1.0 - frac), f - frac)
        score_o = np.where(extra_o, below, score_o)
    out = r[order].with_columns(
        pl.Series("score", score_o, dtype=pl.Float64),
        # A filled result's own score, for `threshold.min_score` (user trial S: the rewritten score below the
        # first pass made the threshold drop fill results that score well above it).
        pl.Series(FILL_FROM, np.where(extra_o, score[order], np.nan), dtype=pl.Float64).fill_nan(None),
        _add_flag(pl.col("flags"), pl.lit(pl.Series(extra_o)), "extra_from_source").alias("flags"),
    )
    # Results of the original top n that the source limit pushed out of the new top n.
    shown = np.zeros(m, dtype=bool)
    shown[order[new_rank <= n]] = True
    rank = r["rank"].to_numpy()
    gone = np.flatnonzero(extra & (rank <= n) & ~shown)
    pushed = r[gone].select(
        "qid",
        "doc_id",
        "chunk_id",
        "rank",
        pl.lit("source_limit").alias("reason"),
        pl.Series("kept_instead", r["doc_id"].gather(source_best[gone]), dtype=pl.Utf8),
    )
    return out, pushed


def source_codes(docs: pl.Series, doc_source: pl.DataFrame | None) -> pl.Series:
    """The source of each document of `docs` (fusion's sorted document codes), the document itself where it
    has none: with it, `dedup` finds a row's source by its `_key` code (a gather) instead of a string join,
    ~7x less on every slider tick (LoCoMo, 153k rows: 4.5 -> 0.6 ms). `Prepared` keeps it."""
    frame = _with_source(docs.cast(pl.Utf8).alias("doc_id").to_frame(), doc_source)
    return frame.select(pl.coalesce("source", "doc_id").alias("source")).to_series().rechunk()  # a gather from 2 chunks: 4x


def _with_source(r: pl.DataFrame, doc_source: pl.DataFrame | None) -> pl.DataFrame:
    """`r` with the `source` of its `doc_id` (null where `doc_source` names none)."""
    if doc_source is None or not len(doc_source):
        return r.with_columns(pl.lit(None, pl.Utf8).alias("source"))
    src = doc_source.select(pl.col("doc_id").cast(pl.Utf8), pl.col("source").cast(pl.Utf8)).unique("doc_id", keep="first")
    return r.join(src, on="doc_id", how="left", maintain_order="left")


@dataclass(frozen=True)
class Collapsed:
    """The first half of `dedup`, which reads none of its thresholds: the rows in (qid, rank) order with `flags` and
    `source`, identical copies collapsed. `rescore` keeps it while only the near-duplicate threshold or the source
    limit moves (about half of dedup's time on LoCoMo)."""

    rows: pl.DataFrame
    gone: pl.DataFrame | None  # the identical copies removed (REMOVED_SCHEMA's columns)
    same: pl.DataFrame | None  # `_collapse_identical`'s [qid, key, other]
    copies: pl.DataFrame | None  # `_copy_keys` (None: identical copies are not collapsed)
    ordered: bool  # the input was in rank order already
    passthrough: bool  # no rule can remove a row


def others_on(cfg: DedupConfig) -> bool:
    """A rule besides identical copies is on: `collapse`'s `others`."""
    return cfg.near_duplicate_enabled or cfg.source_enabled


def collapse(
    ranked: pl.DataFrame,
    doc_source: pl.DataFrame | None,
    *,
    identical: bool,
    others: bool,
    n: int,
    chunk_copies: pl.DataFrame | None = None,
    sources: pl.Series | None = None,
) -> Collapsed:
    """`dedup`'s first half (`Collapsed`); its arguments are dedup's (`identical`: `identical_enabled`, `others`:
    near-duplicate or source dedup on)."""
    ordered = in_rank_order(ranked)
    r = ranked if ordered else ranked.sort("qid", "rank")
    copies = _copy_keys(doc_source, chunk_copies) if identical else None
    passthrough = not (others or copies is not None)
    if passthrough and ordered and len(r) and r["rank"].max() > n:  # nothing can be removed: the top n as they are
        r = r.filter(pl.col("rank") <= n)  # (ranks already 1..n: a blend that kept n places left nothing to cut)
    if "flags" not in r.columns:
        r = r.with_columns(pl.lit([], pl.List(pl.Utf8)).alias("flags"))
    if "source" in r.columns:
        r = r.drop("source")
    if sources is not None and "_key" in r.columns:
        # A row index of a frame, not `Series.gather`: the same values, a third of the time here.
        r = r.with_columns(sources.alias("source").to_frame()[r["_key"].to_numpy() % len(sources)].to_series())
    else:  # a document without a source is its own source
        r = _with_source(r, doc_source).with_columns(pl.coalesce(pl.col("source"), pl.col("doc_id")).alias("source"))
    if "_key" in r.columns:
        r = r.drop("_key")
    gone = same = None
    if copies is not None and len(r):
        r, gone, same = _collapse_identical(r, copies)
    return Collapsed(r, gone, same, copies, ordered, passthrough)


def dedup(
    ranked: pl.DataFrame,
    doc_source: pl.DataFrame | None,
    cfg: DedupConfig,
    *,
    vectors: pl.DataFrame | None = None,
    n: int,
    depth: int | None = None,
    chunk_copies: pl.DataFrame | None = None,
    sources: pl.Series | None = None,
    edges: NearEdges | None = None,
    collapsed: Collapsed | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(kept, removed). kept = the input columns plus `source` and `flags`, at most n rows per query,
    ranks renumbered 1..n; removed = [qid, doc_id, chunk_id, rank, reason, kept_instead] with reason
    "near_duplicate" or "source_limit" (a result of the original top n pushed out by the source limit).

    `vectors` [chunk_id, vec] is needed when near-duplicate removal is on; `depth` (default max(3n, 50))
    is how many top results per query are compared. `chunk_copies` [chunk_id, text_hash, source]
    (`Store.chunk_copies`) makes results chunks: copies are then identical chunks, not identical documents
    (two chunks of one document are not copies of each other). `sources`: `source_codes(idx.docs,
    doc_source)` for rows that carry fusion's `_key` (query x document code); the same sources, by gather.
    `edges`: `near_edges` of the candidates, which near-duplicate removal then filters instead of comparing vectors.
    `collapsed`: `collapse` of these same arguments, when the caller keeps it across settings it does not read.
    """
    depth = depth or max(3 * n, 50)
    if collapsed is None:
        collapsed = collapse(ranked, doc_source, identical=cfg.identical_enabled, others=others_on(cfg), n=n,
                             chunk_copies=chunk_copies, sources=sources)
    r, copies, same, ordered = collapsed.rows, collapsed.copies, collapsed.same, collapsed.ordered
    identical, passthrough = copies is not None, collapsed.passthrough
    removed: list[pl.DataFrame] = [collapsed.gone] if collapsed.gone is not None else []

    if cfg.near_duplicate_enabled and len(r):
        if vectors is None and edges is None:
            raise ToolkitError(
                "near-duplicate dedup needs the chunk vectors (store.chunk_vectors); ingest with embeddings or disable dedup.near_duplicate_enabled"
            )
        drop, near = _near_rows(r, vectors, cfg.near_duplicate_threshold, depth, edges)
        if len(drop):
            removed.append(r[drop].select("qid", "doc_id", "chunk_id", "rank", pl.lit("near_duplicate").alias("reason"),
                                          r["doc_id"].gather(near).alias("kept_instead")))
            keep = np.ones(len(r), dtype=bool)
            keep[drop] = False
            r = r.filter(pl.Series(keep))  # by position: an anti join on (qid, doc_id) strings cost ~6 ms a change

    annotate = identical or cfg.near_duplicate_enabled
    on = copies.columns[0] if identical else "doc_id"
    if cfg.source_enabled and len(r):
        if annotate:
            r = _also_in(r, doc_source, removed, same, on)
        r, pushed = _source_pass(r, cfg, n)
        removed.append(pushed)
        kept = _renumbered(r, n)
    else:  # the rows past n are cut first: nothing is said of them (a third of LoCoMo's rows, ~4 ms a change)
        kept = r if passthrough and ordered else _renumbered(r, n)
        if annotate and len(kept):
            kept = _also_in(kept, doc_source, removed, same, on)
    rem = (
        pl.concat([x.cast(REMOVED_SCHEMA) for x in removed])
        if removed
        else pl.DataFrame(schema=REMOVED_SCHEMA)
    )
    return kept, rem


def _renumbered(r: pl.DataFrame, n: int) -> pl.DataFrame:
    """`r` (each query's rows together, in order) ranked 1, 2, ... within its query, cut to the first `n`. Read off the
    query boundaries: a window over the query ids cost ~7 ms of each change on LoCoMo (243k rows)."""
    if not len(r):
        return r.with_columns(pl.col("rank").cast(pl.Int64))
    rank = np.arange(len(r), dtype=np.int64) - _runs(query_groups(r)) + 1
    return r.with_columns(pl.Series("rank", rank, dtype=pl.Int64)).filter(pl.Series(rank <= n))


FILL_FROM = "_fill_from"  # the score a filled result had before the fill placed it below the first pass


def _copy_keys(doc_source: pl.DataFrame | None, chunk_copies: pl.DataFrame | None) -> pl.DataFrame | None:
    """[doc_id or chunk_id, text_hash, source]: what a result is (its chunk for chunk results, else its
    document) with its content hash; None when the store gave no hashes. One frame, so identical documents
    and identical chunks collapse by the same code."""
    src = pl.coalesce(pl.col("source").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).alias("source")
    if chunk_copies is not None:
        return chunk_copies.select(pl.col("chunk_id").cast(pl.Utf8), pl.col("text_hash").cast(pl.Utf8), src)
    if doc_source is None or "text_hash" not in doc_source.columns:
        return None
    return doc_source.select(pl.col("doc_id").cast(pl.Utf8), pl.col("text_hash").cast(pl.Utf8), src).unique("doc_id")


def _collapse_identical(r: pl.DataFrame, copies: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """Keep the best-ranked of each query's results with the same text hash (rows sorted by qid, rank).

    (kept, removed rows, [qid, key, other]: the source of each copy collapsed into the kept result `key`).
    Copies come from the query's own rows only, so its scope holds: another scope's copy is not a row."""
    on = copies.columns[0]
    # Only a result whose text another document (or chunk) of the store shares can have a copy: 2 of LoCoMo's
    # 5,882 documents. So only their rows are grouped; every row was joined and grouped before (a string join
    # of 153k rows: ~50 ms of each slider change on LoCoMo).
    shared = copies.filter(pl.col("text_hash").is_not_null() & (pl.len().over("text_hash") > 1)).select(on, "text_hash")
    hit = r.with_row_index("_i").filter(pl.col(on).is_in(shared[on].implode()))
    hit = hit.join(shared, on=on, how="left", maintain_order="left").with_columns(
        (~pl.struct("qid", "text_hash").is_first_distinct()).alias("_copy"))
    firsts = hit.filter(~pl.col("_copy")).select("qid", "text_hash", pl.col("doc_id").alias("_first"), pl.col(on).alias("_first_key"))
    dup = hit.filter("_copy").join(firsts, on=["qid", "text_hash"], how="left", maintain_order="left")
    gone = dup.select(
        "qid", "doc_id", "chunk_id", "rank", pl.lit("identical").alias("reason"), pl.col("_first").alias("kept_instead")
    )
    same = dup.select("qid", pl.col("_first_key").alias(on), pl.col("source").alias("other"))
    if len(dup):
        r = r.filter(~pl.int_range(pl.len(), dtype=pl.UInt32).is_in(dup["_i"].implode()))
    return r, gone, same


def _also_in(
    r: pl.DataFrame, doc_source: pl.DataFrame | None, removed: list[pl.DataFrame], same: pl.DataFrame | None, on: str
) -> pl.DataFrame:
    """Add `also_in` (sorted sources where the result's text also lives: the identical copies collapsed into
    it, `same` from `_collapse_identical`, and the near-duplicates removed in its favour; both are rows of the
    query, so nothing outside its scope is named), `copies` (how many results it stands for, those of its own
    source included: user trial S, a near-copy removed from the same file left no trace) and flag
    `duplicates_collapsed` where `copies` is not 0."""
    parts = []
    near = [x for x in removed if len(x) and (x["reason"] == "near_duplicate").any()]
    # Only rows something collapsed into are read, found by row number: joining every row by (query, key) strings
    # cost ~30 ms of a slider change on LoCoMo (153k rows, a handful of copies).
    into = pl.lit(False)
    if same is not None and len(same):
        into = into | pl.col(on).is_in(same[on].unique().implode())
    if near:
        into = into | pl.col("doc_id").is_in(pl.concat(near)["kept_instead"].unique().implode())
    mine = r.with_row_index("_i").filter(into).select("_i", "qid", *dict.fromkeys(["doc_id", on]), "source", "flags")
    if same is not None and len(same) and near:
        # Copies collapsed into a result that was then removed as a near-duplicate belong to the result kept
        # instead (review: X2, identical to X, vanished from the count when X went as Y's near-copy).
        gone = pl.concat(near).filter(pl.col("reason") == "near_duplicate")
        gone = gone.select("qid", pl.col("doc_id" if on == "doc_id" else "chunk_id").alias(on), "kept_instead")
        to = mine.select("qid", pl.col("doc_id").alias("kept_instead"), pl.col(on).alias("_to"))
        moved = same.join(gone, on=["qid", on], how="inner").join(to, on=["qid", "kept_instead"], how="inner")
        same = pl.concat([same.join(gone.select("qid", on), on=["qid", on], how="anti"),
                          moved.select("qid", pl.col("_to").alias(on), "other")])
    if same is not None and len(same):
        parts.append(same.join(mine, on=["qid", on], how="inner").select("_i", "source", "flags", "other"))
    if near:
        src = (
            doc_source.select(pl.col("doc_id").cast(pl.Utf8), pl.col("source").cast(pl.Utf8))
            if doc_source is not None
            else pl.DataFrame(schema={"doc_id": pl.Utf8, "source": pl.Utf8})
        )
        nd = pl.concat(near).filter(pl.col("reason") == "near_duplicate").join(src, on="doc_id", how="left")
        nd = nd.select("qid", pl.col("kept_instead").alias("doc_id"), pl.coalesce("source", "doc_id").alias("other"))
        parts.append(nd.join(mine, on=["qid", "doc_id"], how="inner").select("_i", "source", "flags", "other"))
    if not parts:
        return r.with_columns(pl.lit([], pl.List(pl.Utf8)).alias("also_in"), pl.lit(0, pl.Int64).alias("copies"))
    also = (
        pl.concat(parts)
        .group_by("_i")
        .agg(
            pl.col("other").filter(pl.col("other") != pl.col("source")).unique().sort().alias("also_in"),
            pl.len().cast(pl.Int64).alias("copies"),
            pl.col("flags").first().list.concat(pl.lit([COLLAPSED], pl.List(pl.Utf8))).alias("_flags"),
        )
    )
    # The flag is added to the few rows here, not by a condition over every row (a list per row: 15 ms on LoCoMo).
    r = r.with_row_index("_i").join(also, on="_i", how="left", maintain_order="left")
    return r.with_columns(pl.col("also_in").fill_null(pl.lit([], pl.List(pl.Utf8))), pl.col("copies").fill_null(0),
                          pl.coalesce("_flags", "flags").alias("flags")).drop("_i", "_flags")
