"""Stage 6: fuse the candidate lists of every query into one ranking (weighted RRF or convex combination).

Runs on every slider change, so all queries are fused at once: ids become integer codes, and grouping is
one sort plus numpy segment reductions (1,536 queries x 2 lists x 100 candidates: tens of milliseconds).

RRF:    score(d) = sum_l w_l / (k + rank_l(d)) + bonus(best rank of d in any list)
Convex: score(d) = sum_l c_l * norm_l(d), c_l = w_l * side_l / sum_m (w_m * side_m) over the query's lists,
        side = alpha for dense lists, 1 - alpha for lexical; a document missing from a list gets 0 there.
        The coefficients sum to 1, so with minmax, rank or fixed normalisation (values in [0, 1]) the fused
        score stays in [0, 1]: list and variant weights (original x2 ...) set each list's share, they do
        not scale the score. No rank bonus is added.
A list whose weight is 0 takes no part (its documents do not enter the fused list through it).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

from .config import FusionConfig, RoutingConfig
from .errors import InputError

# The FusionConfig fields that only some methods read (`fuse` for rrf and convex; `learned_fusion.fuse`
# scores the cached features and reads none of them). Fields not named here act under every method. The
# tuner draws a field only in trials whose method reads it, so a report never lists an inert change.
READ_BY: dict[str, frozenset[str]] = {
    "rrf_k": frozenset({"rrf"}),
    "rank_bonus": frozenset({"rrf"}),
    "alpha": frozenset({"convex"}),
    "normalization": frozenset({"convex"}),
    **{f: frozenset({"rrf", "convex"}) for f in ("lexical_weight", "dense_weight", "original_weight", "expansion_weight")},
}


def reads(method: str, path: str) -> bool:
    """Whether fusion `method` reads config field `path` ("fusion.alpha"; any non-fusion field: True)."""
    section, _, name = path.partition(".")
    return section != "fusion" or method in READ_BY.get(name, frozenset({method}))


FUSED_SCHEMA = {"qid": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "score": pl.Float64, "rank": pl.Int64}
WEIGHT_SCHEMA = {"qid": pl.Utf8, "list_id": pl.Utf8, "weight": pl.Float64}


# The columns of every retrieved list (docs/frames.md, `candidates`): what retrieval writes and fusion reads.
CANDIDATE_COLUMNS = ["qid", "list_id", "variant", "retriever", "doc_id", "chunk_id", "rank", "score"]


def _need(candidates: pl.DataFrame, columns: list[str] | tuple[str, ...]) -> None:
    """Hand-built candidates (docs/frames.md) need these columns: a missing one was a polars error deep in fusion."""
    if missing := [c for c in columns if c not in candidates.columns]:
        raise InputError(f"candidates: missing column(s) {', '.join(missing)} (docs/frames.md, `candidates`)")


def list_table(candidates: pl.DataFrame, features: pl.DataFrame | None) -> pl.DataFrame:
    """[qid, list_id, variant, retriever, technical]: the lists of each query, what `list_weights` needs.
    It depends only on the cached stages, so `Prepared` computes it once per slider session; sorted by (qid,
    list_id), `list_weights`' order, whose sort then finds its work done (half its time on a slider tick).
    Candidates built by hand (docs/frames.md) are checked here, once: a missing column was a polars error, and a
    list of another `retriever` than lex or vec was weighted as a dense list without a word (user trial AZ)."""
    _need(candidates, CANDIDATE_COLUMNS)
    lists = candidates.select("qid", "list_id", "variant", "retriever").unique()
    if len(odd := lists.filter(~pl.col("retriever").is_in(["lex", "vec"]))):
        raise InputError(f"candidates: list {odd['list_id'][0]!r} has retriever {odd['retriever'][0]!r}: fusion weighs "
                         "lex (BM25) and vec (dense) lists; give your own list one of those, with its weight in "
                         "fusion.lexical_weight or fusion.dense_weight")
    if features is not None and len(features):
        lists = lists.join(features.select("qid", "technical"), on="qid", how="left")
    else:
        lists = lists.with_columns(pl.lit(None, pl.Boolean).alias("technical"))
    return lists.sort("qid", "list_id")


def list_weights(
    candidates: pl.DataFrame,
    features: pl.DataFrame | None,
    cfg: FusionConfig,
    routing: RoutingConfig | None = None,
    *,
    lists: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """[qid, list_id, weight] = retriever weight x variant weight (original vs expansion) x lexical boost.

    The boost (`routing.technical_lexical_boost`) multiplies the lexical lists of technical queries (the
    features' label-free `technical` flag) when routing is enabled. It is applied here, in the live stage,
    so a boost slider or tuner trial acts without re-running `prepare`. Lists of a skipped route are already
    absent from `candidates`. `lists`: `list_table` output, if cached.
    """
    if lists is None:
        lists = list_table(candidates, features)
    on = isinstance(routing, RoutingConfig) and routing.enabled  # None (or False, as callers once passed): off
    boost = routing.technical_lexical_boost if on else 1.0
    retriever_w = (
        pl.when(pl.col("retriever") == "lex")
        .then(pl.lit(cfg.lexical_weight))
        .otherwise(pl.lit(cfg.dense_weight))
    )
    variant_w = (
        pl.when(pl.col("variant") == "orig")
        .then(pl.lit(cfg.original_weight))
        .otherwise(pl.lit(cfg.expansion_weight))
    )
    lex_boost = (
        pl.when((pl.col("retriever") == "lex") & pl.col("technical").fill_null(False))
        .then(pl.lit(float(boost)))
        .otherwise(pl.lit(1.0))
    )
    return lists.select(
        pl.col("qid").cast(pl.Utf8),
        pl.col("list_id").cast(pl.Utf8),
        (retriever_w * variant_w * lex_boost).cast(pl.Float64).alias("weight"),
    ).sort("qid", "list_id")


# Contributions are summed as integers in units of 2**-32 (~2e-10): integer addition is associative, so
# the fused score (and every tie-break after it) is identical whatever the order of the input rows.
_SCALE = float(2**32)


def _normalize(
    score: np.ndarray, rank: np.ndarray, lex: np.ndarray, group: np.ndarray, n_groups: int, method: str
) -> np.ndarray:
    """Per-list normalisation for convex fusion; `group` numbers each (query, list).

    minmax: (x-min)/(max-min); zscore: (x-mean)/std (population); rank: 1-(rank-1)/n; fixed:
    |x|/(1+|x|) for lexical lists, (cos+1)/2 for dense ones. A list with no spread (one document, or every
    score equal) gives each of its documents 1.0: tied scores stay tied. (Rank normalisation there turned four
    byte-identical documents' equal scores into 1.0 / 0.75 / 0.5 / 0.25 and hid the tie notes: user trial AY.)
    """
    n = np.bincount(group, minlength=n_groups).astype(np.float64)
    if method == "rank":
        return 1.0 - (rank - 1) / n[group]
    if method == "fixed":
        return np.where(lex, np.abs(score) / (1.0 + np.abs(score)), (score + 1.0) / 2.0)
    if method == "minmax":
        lo = np.full(n_groups, np.inf)
        hi = np.full(n_groups, -np.inf)
        np.minimum.at(lo, group, score)
        np.maximum.at(hi, group, score)
        lo_r, span = lo[group], (hi - lo)[group]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(span > 0, (score - lo_r) / span, 1.0)
    if method == "zscore":
        mean = np.bincount(group, weights=score, minlength=n_groups) / np.maximum(n, 1)
        dev = score - mean[group]  # two passes: exact zero spread for a constant list
        sd = np.sqrt(np.bincount(group, weights=dev * dev, minlength=n_groups) / np.maximum(n, 1))[group]
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.where(sd > 0, dev / sd, 1.0)
    raise ValueError(f"unknown normalization {method!r}")


def normalized_scores(candidates: pl.DataFrame, method: str) -> pl.Series:
    """The per-list normalised score of each candidate row (what convex fusion adds up), for panels."""
    if not len(candidates):
        return pl.Series("norm", [], dtype=pl.Float64)
    group = (
        candidates.select(pl.struct("qid", "list_id").rank("dense").cast(pl.Int64) - 1).to_series().to_numpy()
    )
    norm = _normalize(
        candidates["score"].cast(pl.Float64).to_numpy(),
        candidates["rank"].cast(pl.Int64).to_numpy(),
        (candidates["retriever"] == "lex").to_numpy(),
        group,
        int(group.max()) + 1,
        method,
    )
    return pl.Series("norm", norm, dtype=pl.Float64)


def _order(keys: list[tuple[np.ndarray, int]]) -> np.ndarray:
    """Argsort by several non-negative integer keys (most significant first), each with its maximum.

    Packing them into one uint64 lets numpy's single-key SIMD sort do the work (several times faster
    than a multi-key sort here); np.lexsort is the fallback when the keys need more than 63 bits.
    """
    bits = [max(int(m), 1).bit_length() for _, m in keys]
    if sum(bits) <= 63:
        packed = np.zeros(len(keys[0][0]), dtype=np.uint64)
        for (k, _), b in zip(keys, bits, strict=True):
            packed = (packed << np.uint64(b)) | k.astype(np.uint64)
        return np.argsort(packed, kind="stable")  # radix/timsort: faster here than quicksort, same order for unique keys
    return np.lexsort([k for k, _ in reversed(keys)])


def _dense_rank_desc(x: np.ndarray) -> np.ndarray:
    """0 for the largest value, 1 for the next distinct one, ... (np.unique's inverse, without its slow path)."""
    o = np.argsort(-x)
    xs = x[o]
    dense = np.empty(len(x), dtype=np.int64)
    dense[o] = np.cumsum(np.r_[False, xs[1:] != xs[:-1]])
    return dense


def _codes(s: pl.Series, values: pl.Series) -> np.ndarray:
    """Integer code of each value in sorted order (codes compare like the strings)."""
    return s.cast(pl.Utf8).cast(pl.Enum(values)).to_physical().cast(pl.Int64).to_numpy()


@dataclass(frozen=True)
class FusionIndex:
    """The candidate rows as integer codes, and their order by (query, document, list, rank): everything
    `fuse` needs that does not depend on the config. Built once per `Prepared` (`index`), it saves the
    string encoding and the larger of fusion's two sorts on every slider change."""

    qids: pl.Series
    docs: pl.Series
    lists: pl.Series
    q: np.ndarray
    d: np.ndarray
    li: np.ndarray
    rank: np.ndarray
    lex: np.ndarray
    score: np.ndarray
    chunk_id: pl.Series
    order: np.ndarray
    grouping: tuple[np.ndarray, ...]  # `_grouping` of all rows: what fuse uses when every list has weight > 0
    # The grouping's rows as (query, list) codes and ranks, and which (query, list) pairs have rows: RRF then
    # looks each row's contribution up in a (weight x rank) table instead of computing it per row.
    grouped_ql: np.ndarray
    grouped_rank: np.ndarray
    present: np.ndarray


def _grouping(
    q: np.ndarray, d: np.ndarray, li: np.ndarray, rank: np.ndarray, nl: int, nd: int, o: np.ndarray
) -> tuple[np.ndarray, ...]:
    """Group candidate rows `o` (in (query, doc, list, rank) order) by (query, document).

    Returns (rows kept, first position of each document in them, best rank, row of the best appearance,
    query code, doc code). A document's first row in each list is its best there; later rows of the same
    list (chunk-level repeats) are dropped. The best appearance is the smallest (rank, list code, row).
    """
    nr = len(q)
    key = (q * nd + d)[o]
    lr = (rank * nl + li)[o]  # (rank, list code) in one integer: order of appearances within a document
    new_doc = np.r_[True, key[1:] != key[:-1]]
    lo = lr % nl
    first_in_list = new_doc | np.r_[True, lo[1:] != lo[:-1]]
    if not first_in_list.all():
        o, key, lr, new_doc = o[first_in_list], key[first_in_list], lr[first_in_list], new_doc[first_in_list]
    starts = np.flatnonzero(new_doc)
    best = np.minimum.reduceat(lr * nr + o, starts)
    best_rank, best = best // nr // nl, best % nr
    return o, starts, best_rank, best, key[starts] // nd, key[starts] % nd


def pair_lookup(ix: FusionIndex, frame: pl.DataFrame, value: str) -> tuple[np.ndarray, np.ndarray]:
    """(sorted (query, document) codes, values) of `frame` [qid, doc_id, value] in `ix`'s coding, for
    `np.searchsorted` lookups of fused rows' `_key`. Pairs outside the candidates are dropped: no fused
    row can ask for them."""
    known = frame.filter(pl.col("qid").is_in(ix.qids.implode()) & pl.col("doc_id").is_in(ix.docs.implode()))
    keys = _codes(known["qid"], ix.qids) * len(ix.docs) + _codes(known["doc_id"], ix.docs)
    o = np.argsort(keys)
    return keys[o], known[value].cast(pl.Float64).to_numpy()[o]


def coded(frame: pl.DataFrame, ix: FusionIndex) -> pl.DataFrame:
    """`frame` [qid, doc_id, ...] (a ranking made without `fuse`: the learned model's) with `fuse`'s codes `_key` and
    `_q`, so the later stages find sources by integer and group queries without string ids, and `_grp`, the row's
    own place: values aligned with the frame's rows (`aligned_values`) are then found by a gather. As it is when a
    row names a query or document the candidates lack."""
    q = frame["qid"].cast(pl.Utf8).cast(pl.Enum(ix.qids), strict=False).to_physical()
    d = frame["doc_id"].cast(pl.Utf8).cast(pl.Enum(ix.docs), strict=False).to_physical()
    if q.null_count() or d.null_count():
        return frame
    q, d = q.cast(pl.Int64).to_numpy(), d.cast(pl.Int64).to_numpy()
    return frame.with_columns(pl.Series("_key", q * len(ix.docs) + d), pl.Series("_grp", np.arange(len(frame))),
                              pl.Series("_q", q))


def aligned_values(frame: pl.DataFrame, lookup: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """`pair_lookup` values aligned with the rows of `coded(frame)` (NaN where none): `grouped_values` for a
    ranking `fuse` did not make."""
    return lookup_values(lookup, frame["_key"].to_numpy())


def grouped_values(ix: FusionIndex, lookup: tuple[np.ndarray, np.ndarray]) -> np.ndarray:
    """`pair_lookup` values aligned with `ix.grouping`'s documents (NaN where none): fused rows then find
    theirs by their `_grp` place, a gather instead of a binary search per row."""
    *_, gq, gd = ix.grouping
    return lookup_values(lookup, gq * len(ix.docs) + gd)


def lookup_values(lookup: tuple[np.ndarray, np.ndarray], want: np.ndarray) -> np.ndarray:
    """The values of `pair_lookup` output for the (query, document) codes `want`; NaN where none."""
    keys, values = lookup
    if not len(keys):
        return np.full(len(want), np.nan)
    at = np.minimum(np.searchsorted(keys, want), len(keys) - 1)
    return np.where(keys[at] == want, values[at], np.nan)


def index(candidates: pl.DataFrame) -> FusionIndex:
    """Encode `candidates` for `fuse` (see FusionIndex)."""
    _need(candidates, ("qid", "list_id", "doc_id", "chunk_id", "rank", "score"))
    qids = candidates["qid"].cast(pl.Utf8).unique().sort()
    docs = candidates["doc_id"].cast(pl.Utf8).unique().sort()
    lists = candidates["list_id"].cast(pl.Utf8).unique().sort()
    q = _codes(candidates["qid"], qids)
    d = _codes(candidates["doc_id"], docs)
    li = _codes(candidates["list_id"], lists)
    rank = candidates["rank"].cast(pl.Int64).to_numpy()
    if len(rank) and rank.min() < 1:
        raise InputError(f"candidates: ranks are 1-based, found rank {int(rank.min())}")
    order = _order([(q * len(docs) + d, len(qids) * len(docs)), (li, len(lists)), (rank, int(rank.max()))]) if len(rank) else rank
    grouping = _grouping(q, d, li, rank, len(lists), len(docs), order) if len(rank) else ()
    ql = q * len(lists) + li
    present = np.zeros(len(qids) * len(lists), dtype=bool)
    present[ql] = True
    kept = grouping[0] if grouping else order
    return FusionIndex(
        grouped_ql=ql[kept], grouped_rank=rank[kept], present=present,
        qids=qids, docs=docs, lists=lists, q=q, d=d, li=li, rank=rank,
        lex=(candidates["retriever"] == "lex").to_numpy(), score=candidates["score"].cast(pl.Float64).to_numpy(),
        chunk_id=candidates["chunk_id"].cast(pl.Utf8), order=order,
        grouping=grouping,
    )


def weight_table(ix: FusionIndex, weights: pl.DataFrame | None) -> np.ndarray:
    """The weight of each (query, list) code of `ix` (query code x lists + list code); 1 where `weights` names none."""
    nl = len(ix.lists)
    table = np.ones(len(ix.qids) * nl)
    if weights is not None and len(weights):
        # Weights of queries or lists without candidates have nothing to weigh: their codes come out null. One
        # select: each separate polars call costs more than the casts on a few thousand rows.
        c = weights.select(
            *(pl.col(c).cast(pl.Utf8).cast(pl.Enum(v), strict=False).to_physical().cast(pl.Int64).alias(c)
              for c, v in (("qid", ix.qids), ("list_id", ix.lists))),
            pl.col("weight").cast(pl.Float64),
        )
        known = (c["qid"].is_not_null() & c["list_id"].is_not_null()).to_numpy()
        code = c["qid"].fill_null(0).to_numpy() * nl + c["list_id"].fill_null(0).to_numpy()
        table[code[known]] = c["weight"].to_numpy()[known]
    return table


def _rrf_tables(table: np.ndarray, cfg: FusionConfig, n_ranks: int, n_best: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """(weight code of each (query, list), (weight code x rank) RRF contributions, bonus by best rank), in units
    of 2**-32: a contribution depends only on its list's weight and its rank, so it is looked up, not computed
    per row."""
    wv, wcode = np.unique(table, return_inverse=True)
    ibonus = np.round(rank_bonus(cfg, np.arange(n_best)) * _SCALE).astype(np.int64)
    return wcode.ravel(), _rrf_contributions(wv, cfg, n_ranks), ibonus


def _rrf_contributions(weights: np.ndarray, cfg: FusionConfig, n_ranks: int) -> np.ndarray:
    """(weight x rank) table of w / (k + rank) in units of 2**-32."""
    return np.round(np.nan_to_num(weights[:, None] / (cfg.rrf_k + np.arange(n_ranks)), nan=0.0) * _SCALE).astype(np.int64)


@dataclass(frozen=True)
class Layout:
    """The index's grouped documents laid out for `places`: each query is a row of a (queries x width) matrix
    holding its documents in (best rank, doc) order, fusion's tie-break, so that ordering a query is one sort
    of (score, column) keys; and each document's list appearances by layer (its k-th appearance in layer k), so
    an RRF score is a gather per layer instead of a segmented sum. Config-free: built once per `Prepared`."""

    width: int
    slot: np.ndarray  # flat matrix position of each grouped document (`FusionIndex.grouping` order)
    col: np.ndarray  # its column, as uint64
    at: np.ndarray  # (queries x width) the grouped document at each position, -1 past the query's documents
    count: np.ndarray  # grouped documents per query
    # Per layer: (its documents, None for all of them (layer 0), their (query, list) codes, their ranks, their
    # (list, rank) codes: list code x `n_ranks` + rank).
    layers: tuple[tuple[np.ndarray | None, np.ndarray, np.ndarray, np.ndarray], ...]
    # [qid, doc_id, chunk_id] of each grouped document (as `fuse` names them): a row gather gives a list's ids.
    ids: pl.DataFrame
    key: np.ndarray  # its (query, document) code, `fuse`'s `_key`


def layout(ix: FusionIndex) -> Layout | None:
    """`ix` as a `Layout`; None when there is nothing to lay out or the matrix would be over half padding (a few
    queries with far more candidates than the rest)."""
    if not len(ix.grouping):
        return None
    o, starts, best_rank, _, gq, gd = ix.grouping
    nq = len(ix.qids)
    count = np.bincount(gq, minlength=nq)
    width = int(count.max())
    if nq * width > 2 * len(gq):  # skewed query sizes: the padded matrices cost more than the segments (the review)
        return None
    first = np.r_[0, np.cumsum(count)[:-1]]
    by_slot = np.lexsort((gd, best_rank, gq))  # rows stay grouped by query: gq is the first key
    col = np.empty(len(gq), dtype=np.int64)
    col[by_slot] = np.arange(len(gq)) - first[gq[by_slot]]
    slot = gq * width + col
    at = np.full(nq * width, -1, dtype=np.int64)
    at[slot] = np.arange(len(gq))
    n_app = np.diff(np.r_[starts, len(o)])
    layers = []
    nl, nr = len(ix.lists), int(ix.rank.max()) + 1
    for k in range(int(n_app.max())):
        docs = np.flatnonzero(n_app > k)
        ql, rank = ix.grouped_ql[starts[docs] + k], ix.grouped_rank[starts[docs] + k]
        layers.append((None if k == 0 else docs, ql, rank, ql % nl * nr + rank))
    ids = pl.DataFrame([ix.qids.gather(gq).alias("qid"), ix.docs.gather(gd).alias("doc_id"),
                        ix.chunk_id.gather(ix.grouping[3]).alias("chunk_id")]).rechunk()
    return Layout(width, slot, col.astype(np.uint64), at.reshape(nq, width), count, tuple(layers), ids, gq * len(ix.docs) + gd)


@dataclass(frozen=True)
class Places:
    """Each query's first fused places as one matrix row: what `blend.blend_places` turns into the blended list
    without building the fused frame."""

    g: np.ndarray  # (queries x places) grouped document at each place (`FusionIndex.grouping` index), -1 past the end
    isum: np.ndarray  # (queries x places) its fused score in units of 2**-32
    n: np.ndarray  # places filled per query
    layout: Layout  # what they were laid out by (`Layout.count`: each query's number of fused documents)


def places(
    ix: FusionIndex, lay: Layout | None, weights: pl.DataFrame | None, cfg: FusionConfig, depth: int | None = None
) -> Places | None:
    """`fuse(candidates, weights, cfg, idx=ix, depth=depth)` as `Places`: the same documents, order and
    scores. None where the layout does not hold (no `lay`, a list of weight 0, learned fusion, keys past 63
    bits): then `fuse` it is."""
    if lay is None or cfg.method not in ("rrf", "convex"):
        return None
    table = weight_table(ix, weights)
    if not (table[ix.present] > 0).all():
        return None
    o, starts, best_rank = ix.grouping[:3]
    if cfg.method == "convex":
        isum = np.add.reduceat(_convex_contrib(ix, table, cfg)[o], starts)
    else:
        nr, nl = int(ix.rank.max()) + 1, len(ix.lists)
        wcode, itab, ibonus = _rrf_tables(table, cfg, nr, int(best_rank.max()) + 1)
        present = np.flatnonzero(ix.present)
        by_list = np.ones(nl)
        by_list[present % nl] = table[present]
        if (table[present] == by_list[present % nl]).all():  # each list weighs the same in every query (no boost):
            itab, wcode = _rrf_contributions(by_list, cfg, nr), None  # contributions by (list, rank)
        itab = itab.ravel()
        isum = ibonus[best_rank]
        for docs, ql, rank, lr in lay.layers:  # integer sums: the same whatever the order of the terms
            got = itab[lr] if wcode is None else itab[wcode[ql] * nr + rank]
            if docs is None:
                isum += got
            else:
                isum[docs] += got
    s_key = isum.max() - isum
    cbits = lay.width.bit_length()
    if int(s_key.max()).bit_length() + cbits > 63:  # the padding must sort after every key
        return None
    nq = len(lay.count)
    # numpy has no segmented sort: each query's keys fill a row of a padded matrix, sorted along its rows.
    mat = np.full(nq * lay.width, np.iinfo(np.uint64).max, dtype=np.uint64)  # padding sorts last
    mat[lay.slot] = (s_key.astype(np.uint64) << np.uint64(cbits)) | lay.col
    mat = mat.reshape(nq, lay.width)
    d = lay.width if depth is None else min(depth, lay.width)
    # Keys are unique within a row (the column is in them), so any sort gives fusion's order: score desc,
    # then best rank, then doc. A partition first only pays when few places are kept.
    top = np.sort(np.partition(mat, d - 1, axis=1)[:, :d] if 4 * d < lay.width else mat, axis=1)[:, :d]
    n = np.minimum(lay.count, d)
    at = np.arange(nq)[:, None] * lay.width + (top & np.uint64((1 << cbits) - 1)).astype(np.int64)
    valid = np.arange(d)[None, :] < n[:, None]
    g = np.where(valid, lay.at.ravel()[np.minimum(at, nq * lay.width - 1)], -1)  # padding: any place, masked
    return Places(g, np.where(valid, isum[g], 0), n, lay)


def fuse(
    candidates: pl.DataFrame,
    weights: pl.DataFrame | None,
    cfg: FusionConfig,
    *,
    idx: FusionIndex | None = None,
    depth: int | None = None,
) -> pl.DataFrame:
    """Fused ranking [qid, doc_id, chunk_id, score, rank] for all queries, sorted by qid and rank.

    chunk_id is the chunk of the document's best-ranked appearance (ties: list_id order). A document
    that appears several times in one list (chunk-level retrieval) counts once there, at its best rank.
    Ties are broken by score, then best rank across lists, then doc_id, so the result does not depend on
    the order of the input rows. Lists missing from `weights` get weight 1; weight 0 drops a list.
    `idx`: `index(candidates)`, when the caller keeps it between calls. `depth` (with `idx`): only each
    query's first `depth` places, for a caller that shows no more (a slider tick then builds and blends a
    fraction of the rows); each row carries `_n`, its query's number of fused documents.
    """
    if not len(candidates):
        return pl.DataFrame(schema=FUSED_SCHEMA)
    # Strings become sorted integer codes once and the grouping is a sort plus segment reductions in
    # numpy: a full re-fusion of every query has to fit in a slider tick.
    ix = idx if idx is not None else index(candidates)
    nd, nl = len(ix.docs), len(ix.lists)
    q, d, li, rank = ix.q, ix.d, ix.li, ix.rank

    table = weight_table(ix, weights)
    if cfg.method == "rrf" and (table[ix.present] > 0).all():
        # The usual slider tick: every list takes part, so the index's grouping holds, and a row's contribution
        # depends only on its list's weight and its rank. The same arithmetic as below, on the (weights x
        # ranks) table, then one gather per row instead of six passes over the rows: identical integers.
        o, starts, best_rank, best, gq, gd = ix.grouping
        wcode, itab, ibonus = _rrf_tables(table, cfg, int(rank.max()) + 1, int(best_rank.max()) + 1)
        isum = np.add.reduceat(itab.ravel()[wcode[ix.grouped_ql] * itab.shape[1] + ix.grouped_rank], starts)
        return _fused_frame(ix, isum + ibonus[best_rank], best_rank, best, gq, gd, None, idx is not None, depth)
    ql = q * nl + li
    weight = table[ql]

    if cfg.method == "rrf":
        icontrib = np.round(np.nan_to_num(weight / (cfg.rrf_k + rank), nan=0.0) * _SCALE).astype(np.int64)
    else:
        icontrib = _convex_contrib(ix, table, cfg)

    live = weight > 0
    if not live.any():
        return pl.DataFrame(schema=FUSED_SCHEMA)
    if live.all():  # the usual case: the grouping does not depend on the config, and the index has it
        o, starts, best_rank, best, gq, gd = ix.grouping
    else:
        o, starts, best_rank, best, gq, gd = _grouping(q, d, li, rank, nl, nd, ix.order[live[ix.order]])
    isum = np.add.reduceat(icontrib[o], starts)
    if cfg.method == "rrf":
        isum = isum + np.round(rank_bonus(cfg, best_rank) * _SCALE).astype(np.int64)
    return _fused_frame(ix, isum, best_rank, best, gq, gd, None if live.all() else -1, idx is not None, depth)


def _convex_contrib(ix: FusionIndex, table: np.ndarray, cfg: FusionConfig) -> np.ndarray:
    """Each candidate row's convex contribution (coefficient x normalised score) in units of 2**-32; `table`:
    `weight_table`."""
    nq, nl = len(ix.qids), len(ix.lists)
    ql = ix.q * nl + ix.li
    weight = table[ql]
    lex = ix.lex
    norm = _normalize(ix.score, ix.rank, lex, ql, nq * nl, cfg.normalization)
    coef = weight * np.where(lex, 1.0 - cfg.alpha, cfg.alpha)
    per_list = np.zeros(nq * nl)
    per_list[ql] = coef  # every row of a (query, list) has the same coefficient
    total = per_list.reshape(nq, nl).sum(axis=1)[ix.q]
    with np.errstate(divide="ignore", invalid="ignore"):
        contrib = np.where(total > 0, coef / total, 0.0) * norm
    return np.round(np.nan_to_num(contrib, nan=0.0) * _SCALE).astype(np.int64)


def _fused_frame(
    ix: FusionIndex, isum: np.ndarray, best_rank: np.ndarray, best: np.ndarray, gq: np.ndarray, gd: np.ndarray,
    grp: int | None, codes: bool, depth: int | None,
) -> pl.DataFrame:
    """`fuse`'s output from the grouped documents' integer scores: sorted, ranked, cut to `depth` places.
    `codes`: add `_key`, `_grp` (the row's place in `ix.grouping`, or `grp` when another grouping was used)
    and, with `depth`, `_n`."""
    qids, docs = ix.qids, ix.docs
    nq, nd = len(qids), len(docs)
    # Final order: query, score desc, best rank, doc_id. The exact integer score packs directly when the
    # bits allow, otherwise its dense rank stands in for it.
    s_key = isum.max() - isum
    cut = depth is not None and codes
    top = _first_places(gq, s_key, best_rank, gd, nd, depth) if cut else None
    if top is not None:  # each query's first places picked without the full sort
        f, pos, n_fused = top
    else:
        if (
            int(s_key.max()).bit_length() + nq.bit_length() + int(best_rank.max()).bit_length() + nd.bit_length()
            > 63
        ):
            s_key = _dense_rank_desc(isum)
        f = _order([(gq, nq), (s_key, int(s_key.max())), (best_rank, int(best_rank.max())), (gd, nd)])
        sq = gq[f]
        block = np.flatnonzero(np.r_[True, sq[1:] != sq[:-1]])
        count = np.diff(np.r_[block, len(sq)])
        pos = np.arange(len(sq)) - np.repeat(block, count) + 1
        n_fused = None
        if cut:
            top_rows = pos <= depth
            n_fused = np.repeat(count, count)[top_rows]
            pos, f = pos[top_rows], f[top_rows]
    gq, gd, isum, best = gq[f], gd[f], isum[f], best[f]
    out = pl.DataFrame(
        {
            "qid": qids.gather(gq),
            "doc_id": docs.gather(gd),
            "chunk_id": ix.chunk_id.gather(best),
            "score": isum / _SCALE,
            "rank": pos,
        },
        schema=FUSED_SCHEMA,
    )
    if not codes:
        return out
    # With a kept index, each row also carries its (query, document) code `_key` (for `lookup_values`) and
    # its place `_grp` in `idx.grouping` when that grouping was used (-1 otherwise; for gathers of
    # `grouped_values`), so the blend stage finds reranker scores by integer, not by a string join.
    # `_q`, the query's code (ascending, as the rows), lets later stages group and check order by integer.
    out = out.with_columns(pl.Series("_key", gq * nd + gd), pl.Series("_grp", f if grp is None else np.full(len(f), grp)),
                           pl.Series("_q", gq))
    return out if n_fused is None else out.with_columns(pl.Series("_n", n_fused, dtype=pl.Int64))


def _first_places(
    gq: np.ndarray, s_key: np.ndarray, best_rank: np.ndarray, gd: np.ndarray, nd: int, depth: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """Each query's first `depth` places without sorting every grouped document: (rows in final order, their
    place 1..depth, their query's document count), or None when the full sort is the better way.

    Rows are grouped by query (`gq` ascending). Each query's rows go into one row of a (queries x most rows)
    matrix of packed (score, best rank, doc) keys, unique within a query; `np.argpartition` picks the
    `depth` smallest per row and only those are sorted. numpy has no segmented top-k, hence by hand.
    """
    bits = int(s_key.max()).bit_length() + int(best_rank.max()).bit_length() + max(nd, 1).bit_length()
    if bits > 63 or not len(gq) or depth < 1:
        return None
    qs = np.flatnonzero(np.r_[True, gq[1:] != gq[:-1]])
    cnt = np.diff(np.r_[qs, len(gq)])
    width = int(cnt.max())
    if depth >= width or len(qs) * width > 4 * len(gq):  # nothing to cut, or a very uneven matrix
        return None
    b_rank, b_doc = int(best_rank.max()).bit_length(), max(nd, 1).bit_length()
    key = (
        (s_key.astype(np.uint64) << np.uint64(b_rank + b_doc))
        | (best_rank.astype(np.uint64) << np.uint64(b_doc))
        | gd.astype(np.uint64)
    )
    mat = np.full((len(qs), width), np.iinfo(np.uint64).max, dtype=np.uint64)
    mat.ravel()[np.arange(len(gq)) + np.repeat(np.arange(len(qs)) * width - qs, cnt)] = key  # flat: one gather
    part = np.argpartition(mat, depth - 1, axis=1)[:, :depth]
    cols = np.take_along_axis(part, np.argsort(np.take_along_axis(mat, part, axis=1), axis=1), axis=1)
    valid = cols < cnt[:, None]  # the padding sorts last
    f = (qs[:, None] + cols)[valid]
    pos = np.broadcast_to(np.arange(1, depth + 1), cols.shape)[valid]
    count = np.broadcast_to(cnt[:, None], cols.shape)[valid]
    return f, pos.astype(np.int64), count


def rank_bonus(cfg: FusionConfig, best_rank: np.ndarray) -> np.ndarray:
    """Bonus by best rank: bands [(1, .05), (3, .02)] give rank 1 -> .05, ranks 2-3 -> .02, else 0 (RRF adds
    it; `hrt search` shows it beside the list ranks)."""
    out = np.zeros(len(best_rank))
    done = np.zeros(len(best_rank), dtype=bool)
    for upto, bonus in cfg.rank_bonus:
        hit = ~done & (best_rank <= upto)
        out[hit] = bonus
        done |= hit
    return out


def query_groups(frame: pl.DataFrame) -> np.ndarray:
    """Each row's query as an integer that changes exactly where the query does: `fuse`'s query code `_q`
    when the rows carry it (a fifth of the cost of a run id over string query ids on every check), else
    the run id of `qid`."""
    if "_q" in frame.columns and not frame["_q"].null_count():
        return frame["_q"].to_numpy()
    return frame["qid"].rle_id().cast(pl.Int64).to_numpy()


def in_rank_order(frame: pl.DataFrame) -> bool:
    """True when `frame` holds each query's rows together with ranks 1, 2, 3, ... in order (what `fuse` and
    `blend` return). Later stages check this in O(rows) and skip a sort on string query ids."""
    if not len(frame):
        return True
    g = query_groups(frame)
    rank = frame["rank"].to_numpy()
    # Each row after the first: one more than the row above in the same query, else 1 (a new query).
    return bool(rank[0] == 1 and np.all(np.where(g[1:] == g[:-1], np.diff(rank), rank[1:]) == 1))
