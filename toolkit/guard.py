"""Exact-token guard (a rescore stage, after fusion and blending): BM25's exact hit stays on top.

A query that carries an exact identifier (`CVE-2022-41903`, `ECONNREFUSED`, `v2.14.3`, `retryBackoffMs`,
`max_pool_size`, `/etc/hosts`) is the case dense search blurs and fusion dilutes: measured on a corpus of
release notes, plain hybrid RRF put the only file naming a CVE at rank 6 while BM25 ranked it first. The
rule: the best-ranked of BM25's first `guard.depth` documents for the original query that contains one of
the query's identifier tokens verbatim ends in the top `guard.max_rank` of the final list (moved up just
above the result at that place, flag `exact_token_kept`), first when the query is only that identifier (a
lookup) or, with `sole_first`, when no other candidate holds the rarest identifier it holds; nothing else moves.
Not only BM25's first document: stemming ranks a near-miss (`ERR_STREAM_PREMATURE_CLOSED` for `..._CLOSE`,
`enable_cache` for `enable_caching`) and a stopword inside a flag (`--no-cache` searched as `cache`) blurs BM25
too, and then its first document does not hold the identifier (user trial Q).

Its input is computed once in `prepare` (`exact_matches`: which candidates contain which query token as a
whole identifier, case-insensitive, in the document's title or text: see `_contains_word`), so switching the
guard on or off, or moving `max_rank` or `depth`, is a live re-score. BM25's first document, when it holds
an identifier, is always the one kept on top; otherwise, when a deeper hit is already in the top `max_rank`,
nothing moves ("held"), and beyond BM25's first document a bare short version or number (`3.11`, `#12`) does
not count (`strong`).

`coverage_first` is the same kind of label-free rule for any query: BM25's first document goes first when it holds
more of the query's words than any other candidate (flag `covers_most_terms`; its input, `coverage`, is prepared too).
"""

from __future__ import annotations

import re

import numpy as np
import polars as pl

from .config import GuardConfig
from .features import REFERENCE_WORDS, SYSTEM_NAMES, TECH_ACRONYMS, technical_tokens
from .fusion import in_rank_order

EXACT_SCHEMA = {"qid": pl.Utf8, "doc_id": pl.Utf8, "tokens": pl.List(pl.Utf8), "whole": pl.Boolean, "named": pl.Boolean}
FLAG = "exact_token_kept"
COVER_FLAG = "covers_most_terms"
DENSE_FLAG = "dense_top_kept"
COVERAGE_SCHEMA = {"qid": pl.Utf8, "doc_id": pl.Utf8, "terms": pl.Int64}  # ltr_features.term_coverage


def identifier_tokens(text: str) -> list[str]:
    """The technical tokens of a query that name one thing exactly: codes, versions, paths, file names,
    camelCase / snake_case identifiers, errno-style constants. Plain acronyms (JSON, HTTP, API) are topic
    words, not identifiers, and do not trigger the guard. Bounded time on long queries: only the first
    `features.TECHNICAL_MAX_CHARS` characters are analysed, in windows (see `features.technical_tokens`)."""
    out = []
    for t in technical_tokens(text):
        if t.upper() in TECH_ACRONYMS:
            continue
        structured = any(c.isdigit() for c in t) or any(c in "_-./:\\$%@#" for c in t)
        mixed_case = any(c.islower() for c in t) and any(c.isupper() for c in t[1:])
        constant = t.isupper() and len(t) >= 5
        if structured or mixed_case or constant or t.upper() in SYSTEM_NAMES:
            out.append(t)
    return out


# A hash written short (git's seven hex digits and up, docker's twelve): it may name a stored id by its start.
_SHORT_HASH = re.compile(r"(?=[0-9a-f]*\d)(?=\d*[a-f])[0-9a-f]{7,64}", re.I)
# A forge's web address of a commit ("https://github.com/duckdb/duckdb/commit/daa81697e31a"): the hash after /commit/.
_COMMIT_URL = re.compile(r"/commits?/([0-9a-f]{7,64})(?![0-9a-z])", re.I)


def short_hash(token: str) -> bool:
    """Whether `token` may be a hash written short, naming the stored id it starts (`Store.named_documents`)."""
    return _SHORT_HASH.fullmatch(token) is not None


def id_tokens(text: str) -> list[str]:
    """The query's identifiers that may name a stored id, once each: its identifier tokens, and the hash of a commit's
    web address (review CB: the whole address was one token and named nothing)."""
    toks = identifier_tokens(text)
    return list(dict.fromkeys(toks + [m.group(1) for t in toks if "/" in t for m in _COMMIT_URL.finditer(t)]))


def whole_identifier(text: str, tokens: list[str]) -> bool:
    """Whether the query is nothing but one identifier (`REQUESTS_CA_BUNDLE`, `2.34.2`, a quoted `get_terminal_size`):
    a lookup, whose verbatim holder belongs first, not only in the top `max_rank` (user trial BD: a file that does not
    hold the token stayed at rank 1 above BM25's exact hit)."""
    return len(tokens) == 1 and text.strip().strip("\"'`").strip().lower() == tokens[0].lower()


def _is_word_char(c: str) -> bool:
    return c.isalnum() or c == "_"


# A word joined to an identifier by a hyphen, as German (and English) compounds write it: "ERR_IMPORT_LOCK-Meldung",
# "2.4.1-Update", "ECONNREFUSED-related". Four letters or more, no digit: "-dir" of `--no-cache-dir` and "-rc1"
# of a pre-release still continue the identifier, and so does a pre-release word ("2.4.1-beta" is another version).
_COMPOUND_WORD = re.compile(
    r"-(?!(?:alpha|beta|preview|snapshot|nightly|final|post|release|candidate)\b)[^\W\d_]{4,}(?:-[^\W\d_]{2,})*(?![\w-])")


def _ends_here(text: str, j: int, joined: bool = False) -> bool:
    """Whether an identifier found just before `text[j]` ends there: no word character follows, and no "-" or
    "." that continues it (`--no-cache` is not in `--no-cache-dir`, nor `v2.14` in `v2.14.30`; a sentence's
    full stop still ends it). A hyphen and plain words end it (`_COMPOUND_WORD`: "ERR_X-Fehler-Meldung"), unless
    the identifier is `joined` by hyphens, slashes or @ itself: `gpt-4` goes on in `gpt-4-turbo`, `/etc/nginx` in
    `/etc/nginx-proxy`, `@acme/retry` in `@acme/retry-utils`."""
    if j == len(text) or not _is_word_char(text[j]):
        if j + 1 < len(text) and text[j] in "-." and text[j + 1].isalnum():
            return text[j] == "-" and not joined and _COMPOUND_WORD.match(text, j) is not None
        return True
    return False


def _contains_word(text: str, tok: str) -> bool:
    r"""Whether `tok` occurs in `text` as a whole identifier (both lowercased): no word character just before
    it, and `_ends_here` after it. By `str.find`, which skips ahead in C."""
    i, n = text.find(tok), len(tok)
    while i != -1:
        if (i == 0 or not _is_word_char(text[i - 1])) and _ends_here(text, i + n, any(c in tok for c in "-/@")):
            return True
        i = text.find(tok, i + 1)
    return False


_V_VERSION = re.compile(r"^v\d+(?:\.\d+)+$")
_REFERENCE = re.compile(r"^#\d+$")
# Where a forge's web address names an issue or a pull request: "Closes https://github.com/duckdb/duckdb/issues/23623".
_REFERENCE_PATHS = ("/issues/", "/pull/", "/pulls/", "/merge_requests/")


# A reference written with its word in a text ("Fixed issue 16075", "see PR 24375"): the word just before the number.
_REFERENCE_WORD = re.compile(rf"(?<![a-z])(?:{REFERENCE_WORDS}|mr)\s*#?\s*$", re.I)


def _holds(low: str, tok: str) -> bool:
    """`_contains_word`, and a `v`-prefixed version is held by its bare form too (`v2.34.2` by `2.34.2`, as BM25
    now searches it: `analysis.query_lexical_text`), and a reference `#23623` also by "gh#23623" or "pr#23623", by
    a web address that names it (".../issues/23623", ".../pull/23623") and by its word ("fixed issue 23623"): user
    trial BW and its review."""
    if _contains_word(low, tok) or (_V_VERSION.match(tok) is not None and _contains_word(low, tok[1:])):
        return True
    if _REFERENCE.match(tok) is None:
        return False
    n = tok[1:]
    return (_names_number(low, tok) or any(_names_number(low, path + n) for path in _REFERENCE_PATHS)
            or _names_number(low, n, lambda i: _REFERENCE_WORD.search(low, max(0, i - 20), i) is not None))


def _names_number(low: str, needle: str, before=None) -> bool:
    """Whether `needle` (ending in a number) occurs with no digit or word character after it, and, when `before` is
    given, `before(start)` holds (the bare number: no digit or word character before it either)."""
    i = low.find(needle)
    while i != -1:
        j = i + len(needle)
        if (j == len(low) or not _is_word_char(low[j])) and (
                before is None or ((i == 0 or not _is_word_char(low[i - 1])) and before(i))):
            return True
        i = low.find(needle, i + 1)
    return False


def exact_matches(queries: pl.DataFrame, candidates: pl.DataFrame, texts: pl.DataFrame,
                  named: pl.DataFrame | None = None) -> pl.DataFrame:
    """[qid, doc_id, tokens, whole, named]: the candidates of each query whose title or text contains one of the query's
    identifier tokens verbatim (only pairs with at least one; `whole`: the query is only that identifier). `texts` =
    [doc_id, title, text]; `named` = [qid, token, doc_id]: a document whose id a token names holds that token too
    (`Store.named_documents`), and is marked `named`."""
    toks = {q: identifier_tokens(t) for q, t in zip(queries["qid"].cast(pl.Utf8), queries["text"], strict=True)}
    toks = {q: t for q, t in toks.items() if t}
    if not toks or not len(candidates):
        return pl.DataFrame(schema=EXACT_SCHEMA)
    pairs = (
        candidates.select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8))
        .filter(pl.col("qid").is_in(list(toks)))
        .unique()
    )
    body = texts.select(
        pl.col("doc_id").cast(pl.Utf8),
        (pl.col("title").fill_null("") + "\n" + pl.col("text").fill_null("")).alias("body"),
    )
    pairs = pairs.join(body, on="doc_id", how="inner")
    # Each text lowercased once, then each token found by `str.find` and its neighbours checked: no library
    # matches word-bounded literals in polars with per-row patterns. A regex per token scanned every text in
    # full (its lookbehind defeats the literal-prefix search): a pasted log excerpt of 100 identifier-like
    # words took 31 s against a 20 MB log among the candidates.
    lowered: dict[str, str] = {}
    by_id: dict[tuple[str, str], list[str]] = {}  # (qid, doc_id) -> the tokens that name it (a commit URL's hash too)
    for q, d, t in () if named is None else zip(named["qid"].to_list(), named["doc_id"].to_list(), named["token"].to_list(), strict=True):
        by_id.setdefault((q, d), []).append(t)
    found = []
    for q, d, b in zip(pairs["qid"].to_list(), pairs["doc_id"].to_list(), pairs["body"].to_list(), strict=True):
        low = lowered.get(d)
        if low is None:
            low = lowered[d] = b.lower()
        held = [t for t in toks[q] if _holds(low, t.lower())]
        found.append(held + [t for t in by_id.get((q, d), []) if t not in held])
    whole = {q for q, t in zip(queries["qid"].cast(pl.Utf8), queries["text"], strict=True) if q in toks and whole_identifier(t, toks[q])}
    named_pairs = set(by_id)
    out = pairs.select("qid", "doc_id").with_columns(
        pl.Series("tokens", found, dtype=pl.List(pl.Utf8)), pl.col("qid").is_in(list(whole)).alias("whole"),
        pl.Series("named", [(q, d) in named_pairs for q, d in zip(pairs["qid"].to_list(), pairs["doc_id"].to_list(), strict=True)],
                  dtype=pl.Boolean))
    return out.filter(pl.col("tokens").list.len() > 0).sort("qid", "doc_id")


# A bare short version or number ("3.11", "2.0", "#12", "404") also names chapters, prices and scores: it counts
# only in BM25's first document (the issue's rule), not deeper, where it would carry an incidental match up.
_WEAK = re.compile(r"^(?:v?\d+(?:\.\d+){0,2}|#\d{1,3})$", re.I)  # "#24375" names one pull request (review BZ)


def strong(token: str) -> bool:
    """Whether an identifier names one thing on its own (letters and structure, an address, a long version)."""
    return not _WEAK.match(token)


def guarded(candidates: pl.DataFrame, exact: pl.DataFrame | None, depth: int = 1) -> pl.DataFrame:
    """[qid, doc_id, tokens, whole, named, bm25_rank]: every one of BM25's first `depth` documents (of each query's
    original BM25 list) that contains a query identifier verbatim, with the identifiers it contains (`whole`: the
    query is only that identifier); beyond BM25's first document only `strong` identifiers count. Sorted by
    (qid, bm25_rank)."""
    schema = {**EXACT_SCHEMA, "bm25_rank": pl.Int64}
    if exact is None or not len(exact) or not len(candidates):
        return pl.DataFrame(schema=schema)
    top = candidates.filter((pl.col("list_id") == "orig:lex") & (pl.col("rank") <= depth)).select(
        pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("rank").cast(pl.Int64).alias("bm25_rank")
    )
    whole = pl.col("whole") if "whole" in exact.columns else pl.lit(False)  # frames built before the column
    named = pl.col("named") if "named" in exact.columns else pl.lit(False)
    hits = top.join(exact.select("qid", "doc_id", "tokens", whole.alias("whole"), named.alias("named")), on=["qid", "doc_id"], how="inner")
    tokens = [t if r == 1 else [x for x in t if strong(x)] for t, r in zip(hits["tokens"].to_list(), hits["bm25_rank"].to_list(), strict=True)]
    hits = hits.with_columns(pl.Series("tokens", tokens, dtype=pl.List(pl.Utf8))).filter(pl.col("tokens").list.len() > 0)
    return hits.sort("qid", "bm25_rank").select(*schema)


def _holders(hits: pl.DataFrame, exact: pl.DataFrame) -> pl.Series:
    """Per row of `hits` [qid, tokens]: how many of its query's candidates hold the rarest of its identifiers (`exact`
    counts every list's candidates). One is a signal that needs no judgements: measured on the dev splits of ten
    collections, moving such a sole holder first helped 63 queries and hurt 4, while moving a hit that shares its
    identifier with other candidates (a package name many descriptions mention) hurt 18 of 21. The rarest, not any:
    in "libx11 2:1.7.1-1" fifteen candidates name the package and one the version."""
    rows = hits.select(pl.int_range(pl.len()).alias("_i"), "qid", "tokens").explode("tokens")
    held = exact.select("qid", "doc_id", "tokens").explode("tokens")
    n = (rows.join(held, on=["qid", "tokens"]).group_by("_i", "tokens").agg(pl.col("doc_id").n_unique().alias("_n"))
         .group_by("_i").agg(pl.col("_n").min()))
    return (pl.DataFrame({"_i": pl.int_range(len(hits), eager=True)}).join(n, on="_i", how="left")
            .sort("_i")["_n"].fill_null(0))


def keep_exact(
    ranked: pl.DataFrame, candidates: pl.DataFrame, exact: pl.DataFrame | None, cfg: GuardConfig
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(ranked with guarded documents moved into the top `max_rank`, [qid, exact_token, exact_tokens] per
    query: "kept" = moved up, "held" = already there, absent = no exact hit to guard; `exact_tokens` = the
    query identifiers the guarded document holds, so the output can say which).

    `ranked` is sorted by (qid, rank) with ranks 1..n. A moved document takes the place `max_rank` with a
    score between its new neighbours', so the order stays the order of the scores."""
    status = pl.DataFrame(schema={"qid": pl.Utf8, "exact_token": pl.Utf8, "exact_tokens": pl.List(pl.Utf8)})
    if not cfg.exact_token:
        return ranked, status
    g = guarded(candidates, exact, cfg.depth)
    if not len(g) or not len(ranked):
        return ranked, status
    # Per query, the place m its hit must reach: `max_rank`, or 1 when the query is only the identifier. The hit
    # that counts: BM25's first document when it holds an identifier (the issue's rule: it ends in the top m);
    # else one of the deeper hits already in the top m if any (then nothing moves: "held"), else the best
    # BM25-ranked hit in the list (moved up: "kept"). A hit the list does not hold cannot be moved.
    m = pl.col("_m")
    present = g.join(ranked.select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), "rank"), on=["qid", "doc_id"])
    # A document named by its id goes first, before any holder of the id in text (a revert quoting a hash: review CB).
    first = pl.col("whole") | pl.col("named") | (pl.lit(cfg.sole_first) & (_holders(present, exact) == 1))
    present = present.with_columns(pl.when(first).then(1).otherwise(cfg.max_rank).cast(pl.Int64).alias("_m"))
    # For a lookup (m = 1) any holder already first will do: BM25's first is not moved above it (the review).
    chosen = (
        present.with_columns((pl.col("rank") <= m).alias("_in"), (pl.col("bm25_rank") == 1).alias("_first"))
        .with_columns((pl.col("_in") & (m == 1)).alias("_done"))
        .sort("qid", "named", "_done", "_first", "_in", "bm25_rank", descending=[False, True, True, True, True, False])
        .unique("qid", keep="first", maintain_order=True)
    )
    status = chosen.select(
        "qid", pl.when(pl.col("_in")).then(pl.lit("held")).otherwise(pl.lit("kept")).alias("exact_token"),
        pl.col("tokens").alias("exact_tokens"),
    )
    return _lift(ranked, chosen.filter(~pl.col("_in")).select("qid", "doc_id", "_m"), FLAG), status


def coverage_first(ranked: pl.DataFrame, targets: pl.DataFrame | None, on: bool) -> pl.DataFrame:
    """`ranked` with BM25's first document moved first (flag `covers_most_terms`) in every query where it holds more
    of the query's index terms than any other candidate of any list (`targets`: `coverage_targets`, which depends on
    the prepared frames only, so `rescore` computes it once per `Prepared`).

    The label-free signal of the exact-token guard's `sole_first`, for every query: no other candidate matches the
    query as fully as BM25's choice. Measured on ten collections (nDCG@10 of `default`, dev then test): LoCoMo
    +0.025 / +0.039 (p 1e-4 each; 51 and 69 queries helped, 25 and 22 hurt), manpages +0.009 / +0.008 (p 0.001,
    0.004), every other collection +0.001 to +0.021 or equal, except MS MARCO dev -0.0035 (one query). Rules measured
    beside it and not taken: only a document holding every term (half the LoCoMo gain), IDF-weighted coverage
    (pyapi -0.006 and Vaswani -0.004 on dev)."""
    if not on or targets is None or not len(targets) or not len(ranked):
        return ranked
    return _lift(ranked, targets, COVER_FLAG)


def dense_firsts(candidates: pl.DataFrame) -> pl.DataFrame:
    """[qid, doc_id]: each query's first document of its original dense list (`keep_dense`'s targets)."""
    return (candidates.filter((pl.col("list_id") == "orig:vec") & (pl.col("rank") == 1))
            .select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).unique("qid", keep="first"))


def keep_dense(ranked: pl.DataFrame, firsts: pl.DataFrame, max_rank: int) -> pl.DataFrame:
    """`ranked` with dense search's first document (`firsts`: `dense_firsts`, which depends on the prepared frames only,
    so `rescore` computes it once per `Prepared`) moved up to place `max_rank` when it sits below (flag
    `dense_top_kept`); 0 leaves `ranked` as it is. The exact-token guard's mirror for a match
    by meaning: on help questions worded without the documents' words (user trial CA's `manhelp`), dense's first was
    relevant on 112 of 312 queries and `default` put it below rank 3 on 32, under documents both lists found. Measured
    at 3 on twelve collections (nDCG@10 of `default`, dev / test): manhelp +0.030 / +0.026, the demo +0.012 / +0.011,
    manpages and pkgsummary +0.002 to +0.006, LoCoMo -0.0014 / -0.0015, changelogs -0.0026 / -0.0028 (p < 0.05), the rest
    within 0.005; place 1 lost on ten of them, 2 lost more on LoCoMo and CACM."""
    if not max_rank or not len(ranked) or not len(firsts):
        return ranked
    return _lift(ranked, firsts.with_columns(pl.lit(max_rank, pl.Int64).alias("_m")), DENSE_FLAG)


def coverage_targets(candidates: pl.DataFrame, coverage: pl.DataFrame | None) -> pl.DataFrame:
    """[qid, doc_id, _m = 1]: per query, BM25's first document when it holds more of the query's index terms than
    any other candidate (`coverage`: `ltr_features.term_coverage`)."""
    if coverage is None or not len(coverage):
        return pl.DataFrame(schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "_m": pl.Int64})
    first = (candidates.filter((pl.col("list_id") == "orig:lex") & (pl.col("rank") == 1))
             .select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).unique("qid", keep="first"))
    top = first.join(coverage, on=["qid", "doc_id"]).rename({"terms": "_t1"})
    rest = coverage.join(first, on=["qid", "doc_id"], how="anti").group_by("qid").agg(pl.col("terms").max().alias("_t2"))
    return (top.join(rest, on="qid", how="left").filter((pl.col("_t1") > 0) & (pl.col("_t1") > pl.col("_t2").fill_null(-1)))
            .select("qid", "doc_id", pl.lit(1, pl.Int64).alias("_m")))


def _lift(ranked: pl.DataFrame, targets: pl.DataFrame, flag: str) -> pl.DataFrame:
    """`ranked` with each target [qid, doc_id, _m] (at most one per query) below place `_m` moved to it, flagged
    `flag`; nothing else moves. A moved document takes the place with a score between its new neighbours', so the
    order stays the order of the scores. (A chunk-level list can hold a document twice: its rows below `_m` all
    move, in their order.)"""
    if not in_rank_order(ranked):
        ranked = ranked.sort("qid", "rank")
    below = (ranked.select(pl.int_range(pl.len(), dtype=pl.Int64).alias("_i"), "qid", "doc_id", "rank")
             .join(targets, on=["qid", "doc_id"]).filter(pl.col("rank") > pl.col("_m")))
    if not len(below):
        return ranked
    # A query's rows are consecutive with ranks 1..n, so a place is a position: a move permutes the positions from
    # place _m down to the moved row, and no other row moves or changes rank. (Splitting the frame, sorting the
    # changed queries and then every row by string query id took 23 ms a slider change on LoCoMo.)
    n, i, m = len(ranked), below["_i"].to_numpy(), below["_m"].to_numpy()
    dest = i - below["rank"].to_numpy() + m  # the position of place _m in the row's query
    score = ranked["score"].cast(pl.Float64).to_numpy().copy()
    s_m, s_up = score[dest], score[np.maximum(dest - 1, 0)]
    # The new score sits between the scores now at places m-1 and m (just above the one at m for m = 1).
    score[i] = np.where(m > 1, (s_up + s_m) / 2, s_m + np.maximum(np.abs(s_m) * 1e-6, 1e-12))
    width = i - dest + 1
    span = np.unique(np.arange(width.sum()) + np.repeat(dest - (np.cumsum(width) - width), width))
    to = np.full(n, -1)
    to[i] = dest
    moved = to[span] >= 0
    # In each span: the moved rows first (in their order), then the others in theirs.
    perm = np.arange(n)
    perm[span] = span[np.lexsort((span, ~moved, np.where(moved, to[span], span)))]
    flags = ranked["flags"].gather(i).list.concat(pl.lit([flag], pl.List(pl.Utf8)))
    own = np.arange(n)
    own[i] = n + np.arange(len(i))  # a moved row's flags: the flagged copy appended after the others
    return ranked[perm].with_columns(
        ranked["rank"], pl.Series("score", score[perm]).cast(ranked.schema["score"]),
        pl.concat([ranked["flags"], flags]).rechunk().gather(own[perm]).alias("flags"))
