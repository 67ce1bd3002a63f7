"""Output for one query's results: compact (for an agent's context window), detailed, or JSON.

An agent pays for every character of memory it reads, so `compact` is the default: at most three lines
per result (rank, final score and where it came from: each list's rank and score, e.g. `bm25 #1 12.4 ·
dense #13 0.61`, and the factors of the memory priors that moved it; source and title; an excerpt; flags
in words if any), five results within 2,000 characters, excerpts shortened to fit. Notes say when the list should not be trusted (low confidence,
scores that barely differ, a provider that fell back). `detailed` shows each result's best chunk with its
line numbers and all flags, and falls back to compact when it would exceed `max_chars`. `json` is one object per result with a snippet, never a
whole document; its schema is `docs/search-output.schema.json` (described in docs/output.md).
"""

from __future__ import annotations

import json
import math
import re
import unicodedata
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from .errors import InputError
from .terminal import BIDI, C1, CONTROLS, escape

_WS = re.compile(r"\s+")
# C0 controls, DEL, the C1 controls and the bidi controls (`terminal`). Whitespace among them (tab, newline,
# CR, VT, FF, 0x1c-0x1f, 0x85) is collapsed to a space first where a field is made one line; what is left is
# shown as a visible escape (`\x1b`), never sent to the terminal.
_CTRL = re.compile(f"[{CONTROLS}]")
_CTRL_NO_NL = re.compile(f"(?!\n)[{CONTROLS}]")


def clean(text: Any) -> str:
    """A data field (title, source, doc id, text, metadata) made safe for a terminal and one line: runs of
    whitespace (newlines, tabs, CR included) become one space, any other control character a visible
    escape such as `\x1b`. A title with newlines cannot forge result lines; an ANSI/OSC sequence
    cannot clear the screen or rewrite what was printed."""
    return _CTRL.sub(escape, _WS.sub(" ", "" if text is None else str(text)))


def _visible(text: str) -> str:
    """The last guard on the whole output: any control character but the newlines this module writes
    (e.g. in a provider's error message) is shown escaped."""
    return _CTRL_NO_NL.sub(escape, text)


_C1 = re.compile(f"[{C1}{BIDI}]")


def _json_c1(text: str) -> str:
    """JSON output with DEL, the C1 controls and the bidi controls written as JSON escapes (U+009B,
    U+202E): json.dumps escapes only C0, and `ensure_ascii=False` keeps other non-ASCII text (accents, CJK)
    readable. Those characters can only occur inside JSON strings, where the escape decodes to the same
    character."""
    return _C1.sub(lambda m: f"\\u{ord(m.group()):04x}", text)


def _rows(results: pl.DataFrame | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = results.to_dicts() if isinstance(results, pl.DataFrame) else [dict(r) for r in results]
    return sorted(rows, key=lambda r: (r.get("rank") is None, r.get("rank") or 0))


def _num(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.4f}" if abs(x) < 1000 else f"{x:.1f}"


def _flags(r: Mapping[str, Any]) -> list[str]:
    f = r.get("flags")
    return [str(x) for x in f] if f else []


# Flags in words for the compact and detailed views (JSON keeps the identifiers).
_FLAG_WORDS = {
    "exact_token_kept": "exact token kept (moved up: it holds the query's identifier verbatim or as its id)",
    "covers_most_terms": "moved first: BM25's top result, holding more of the query's words than any other",
    "dense_top_kept": "dense top kept (moved up: dense search's first result)",
    "reranked": "reranked",
    "extra_from_source": "extra result from a source already shown",
    "low_confidence": "low confidence",
    "reranker_fallback": "reranker fallback (retrieval order)",
    "expansion_fallback": "expansion fallback (original query only)",
    "dated_after_reference": "dated after the query's as-of time (priors.recency_future: exclude leaves it out)",
}
_LIST_NAMES = {"lex": "bm25", "vec": "dense"}


def _flag_words(r: Mapping[str, Any]) -> list[str]:
    out = []
    for f in _flags(r):
        if f == "duplicates_collapsed":
            also = [clean(x) for x in r.get("also_in") or []]
            shown = ", ".join(also[:3]) + (", …" if len(also) > 3 else "")
            n = int(r.get("copies") or len(also))
            here = f"stands for {n} more cop{'ies' if n != 1 else 'y'}"
            out.append(f"{here}, also in {len(also)} source{'s' if len(also) != 1 else ''}: {shown}" if also
                       else f"{here} from the same source")
        else:
            out.append(_FLAG_WORDS.get(f, clean(f).replace("_", " ")))
    return out


def origins(candidates: pl.DataFrame, results: pl.DataFrame, fusion: Any = None) -> pl.DataFrame:
    """[qid, doc_id, origins]: for each result, its best rank and that rank's score in every candidate list
    (`origins` = list of {list, rank, score}, best rank first), read from the prepared candidates. Given the
    config's `fusion` section, RRF with a rank bonus adds `rank_bonus`: what the bonus added for the result's
    best list rank (user trial R: the shown score did not add up without it)."""
    schema = {"qid": pl.Utf8, "doc_id": pl.Utf8, "origins": pl.List(pl.Struct({"list": pl.Utf8, "rank": pl.Int64, "score": pl.Float64}))}
    bonus = fusion is not None and fusion.method == "rrf" and bool(fusion.rank_bonus)
    if bonus:
        schema["rank_bonus"] = pl.Float64
    if not len(candidates) or not len(results):
        return pl.DataFrame(schema=schema)
    name = pl.col("retriever").replace_strict(_LIST_NAMES, default=pl.col("retriever"))
    label = pl.when(pl.col("variant") == "orig").then(name).otherwise(name + "[" + pl.col("variant") + "]")
    mine = candidates.join(results.select("qid", "doc_id").unique(), on=["qid", "doc_id"], how="semi")
    if bonus:  # the bonus goes by the best rank among the lists fusion counts (a list of weight 0 is not fused)
        from .fusion import list_weights, rank_bonus

        weighted = list_weights(mine, None, fusion).filter(pl.col("weight") > 0).select("qid", "list_id")
        mine = mine.join(weighted.with_columns(pl.lit(True).alias("_weighted")), on=["qid", "list_id"], how="left")
    else:
        mine = mine.with_columns(pl.lit(True).alias("_weighted"))
    best = (
        mine
        .sort("rank")
        .group_by("qid", "doc_id", "list_id", maintain_order=True)
        .first()
        .select("qid", "doc_id", pl.struct(label.alias("list"), pl.col("rank").cast(pl.Int64), pl.col("score").cast(pl.Float64)).alias("o"),
                "rank", pl.col("_weighted").fill_null(False))
        .sort("qid", "doc_id", "rank")
    )
    out = best.group_by("qid", "doc_id", maintain_order=True).agg(
        pl.col("o").alias("origins"), pl.col("rank").filter(pl.col("_weighted")).min().fill_null(0).alias("_best"))
    if bonus:
        out = out.with_columns(pl.Series("rank_bonus", rank_bonus(fusion, out["_best"].to_numpy()), dtype=pl.Float64))
    return out.drop("_best").cast(schema)


def _origin_text(r: Mapping[str, Any]) -> str:
    """`bm25 #1 12.4 · dense #13 0.61 · rank bonus +0.05` (empty when the row carries no origins)."""
    parts = [f"{o['list']} #{o['rank']} {_short(o['score'])}" for o in r.get("origins") or []]
    if parts and r.get("rank_bonus"):
        parts.append(f"rank bonus +{r['rank_bonus']:g}")
    return " · ".join(parts)


def _short(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.3g}" if abs(x) < 100 else f"{x:.1f}"


def _fused(r: Mapping[str, Any]) -> Any:
    """The fused score, before blending: the pipeline's `fused_score` column. `raw_score` is only a fallback
    for rows without it: on a reranked row it holds the reranker's own score, not the fused one."""
    return r["fused_score"] if r.get("fused_score") is not None else r.get("raw_score")


def _rerank_text(r: Mapping[str, Any]) -> str:
    x = r.get("rerank_score")
    return f"rerank {_num(x)}" if r.get("reranked") and isinstance(x, int | float) and math.isfinite(x) else ""


def _fused_differs(r: Mapping[str, Any]) -> bool:
    """The pre-blend (fused) score is worth showing only where blending changed the score. With priors the
    blended score is `score_before_priors`: what the priors changed is shown as priors, not as a blend."""
    raw = _fused(r)
    score = r["score_before_priors"] if r.get("score_before_priors") is not None else r.get("score")
    if not isinstance(raw, int | float) or not isinstance(score, int | float) or not math.isfinite(raw):
        return False
    return abs(raw - score) > 1e-9 * max(1.0, abs(score))


_PRIORS = (("priority", "prior_priority"), ("recency", "prior_recency"), ("use", "prior_use"))


def _prior_factors(r: Mapping[str, Any]) -> list[tuple[str, float]]:
    """(prior, factor) of the priors that moved this result (factor not 1), strongest first."""
    out = [(name, float(r[c])) for name, c in _PRIORS
           if isinstance(r.get(c), int | float) and math.isfinite(r[c]) and abs(r[c] - 1.0) > 1e-9]
    return sorted(out, key=lambda x: -abs(math.log(max(x[1], 1e-12))))


def _prior_text(r: Mapping[str, Any]) -> str:
    """`priors: priority x4.00 · recency x0.83` (empty when no prior changed the score)."""
    parts = [f"{name} x{f:.2f}" if abs(f - 1.0) >= 0.005 else f"{name} x{f:.4f}" for name, f in _prior_factors(r)]
    return f"priors: {' · '.join(parts)}" if parts else ""


def _priors_field(r: Mapping[str, Any]) -> dict[str, Any] | None:
    """The JSON result's `priors`: each factor (null for a prior that is off) and the score before them;
    null when the config has no priors (the rows then carry no `score_before_priors`)."""
    if "score_before_priors" not in r:
        return None
    return {"score_before": r.get("score_before_priors"), **{name: r.get(c) for name, c in _PRIORS}}


def _body(r: Mapping[str, Any]) -> str:
    return str(r.get("excerpt") or r.get("text") or "")


def _shown_body(r: Mapping[str, Any]) -> str:
    """`_body` for the terminal views: one line, control characters escaped (`clean`)."""
    return clean(_body(r))


def shorten(text: str, limit: int) -> str:
    """One line of at most `limit` characters, cut at a word boundary with an ellipsis, never inside a
    character cluster (an accent, an emoji with its skin tone or joiners, a flag)."""
    t = _WS.sub(" ", text).strip()
    if len(t) <= limit:
        return t
    if limit <= 1:
        return "…"[:limit]
    cut = t[: _cluster_start(t, limit - 1)]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "…"


def shorten_middle(text: str, limit: int) -> str:
    """An id or path of at most `limit` characters: its start and its end, an ellipsis between (ids differ
    at their ends as often as at their starts: `.../2024-06-01.md`, `...?page=2`)."""
    if len(text) <= limit:
        return text
    head = _cluster_start(text, limit // 2)  # the start takes the odd character: limit // 2 + (limit - 1) // 2 + 1
    tail = len(text) - (limit - 1) // 2
    while tail < len(text) and _cluster_start(text, tail) != tail:
        tail += 1
    return text[:head] + "…" + text[tail:]


def _cluster_start(t: str, i: int) -> int:
    """The largest cut point <= i that does not split a grapheme cluster of `t` (Unicode's extended clusters, as
    the `regex` module's \\X finds them): not inside an accent, an emoji with its skin tone or joiners, a flag, a
    Devanagari or Thai letter with its vowel signs, decomposed Hangul, a tag flag (user trials L and AQ: the hand
    rules before missed Indic and Thai marks, jamo and tag sequences). ASCII has no clusters to split."""
    if i <= 0 or i >= len(t) or t.isascii():
        return max(0, min(i, len(t)))
    import regex  # ~10 ms, and only text with non-ASCII characters needs it

    last = 0
    for m in regex.finditer(r"\X", t):
        if m.end() > i:
            return last if m.start() < i else i
        last = m.end()
    return i


# A word: letters and digits with their marks (a Hindi or Thai word's vowel signs are marks, not separators).
_TERM = r"[\w\p{M}][\w\p{M}.\-/:]*[\w\p{M}]|\w"
_ASCII_TERM = re.compile(r"\w[\w.\-/:]*\w|\w")


def _fold(text: str) -> tuple[str, list[int]]:
    """(`text` lower-cased, NFKC'd character by character (full-width ＥＣＯＮＮ is econn, as BM25 reads it),
    without accents and without combining marks, the position in `text` of each character kept): BM25 strips
    accents, so "resume" finds "résumé", "مرحبا" finds "مَرْحَبًا" (user trial AQ), and the snippet must show them."""
    if text.isascii():
        return text.lower(), list(range(len(text)))
    out, pos = [], []
    for i, c in enumerate(text):
        if unicodedata.category(c) == "Mn":  # a mark on the letter before: stripped, as BM25 strips accents
            continue
        k = unicodedata.normalize("NFKC", c)
        k = k if len(k) == 1 else c
        low = k.lower() if len(k.lower()) == 1 else k
        # Accents off Latin, Greek and Cyrillic letters only: a Hangul syllable's first jamo or a kana without its
        # voicing mark is another character (CJK query pairs are matched as they are).
        base = unicodedata.normalize("NFD", low)[0]
        out.append(base if ord(base) < 0x0250 or 0x0370 <= ord(base) < 0x0530 else low)
        pos.append(i)
    return "".join(out), pos


def _snippet_terms(query: str) -> set[str]:
    """What `snippet` looks for: the query's words of 3+ characters that are not stopwords, numbers and short
    codes of 2+ characters with a digit ("17", "v2": user trial S saw "version 17" ignored), and for Chinese,
    Japanese or Korean text (no spaces between words) its character pairs, as BM25 matches them."""
    from .analysis import cjk_pattern
    from .features import _is_stopword  # the query router's stop list; render stays light to import

    def wanted(w: str) -> bool:
        return (len(w) >= 3 or (len(w) == 2 and any(c.isdigit() for c in w))) and not _is_stopword(w.lower())

    if query.isascii():  # no marks to keep with their letters: the standard library's words (and no regex import)
        words = _ASCII_TERM.findall(query)
    else:
        import regex

        words = regex.findall(_TERM, unicodedata.normalize("NFC", query))
    cjk = None if query.isascii() else cjk_pattern()  # an ASCII query has no CJK text (nor compiles its patterns)
    out = {_fold(w)[0] for w in words if wanted(w) and not (cjk and cjk.search(w))}
    for run in cjk_pattern(run=True).findall(unicodedata.normalize("NFKC", query)) if cjk else []:
        run = "".join(c for c in run if unicodedata.category(c) != "Mn")  # as `_fold` strips them from the text
        out |= {run[i : i + 2] for i in range(len(run) - 1)} or {run}
    return out


def snippet(text: str, limit: int, query: str | None = None) -> str:
    """`shorten`, but from where the query's words are: a long chunk whose match sits past its first
    `limit` characters would otherwise show a snippet without the identifier the user searched for.
    The window (starting a little before a hit) that holds the most distinct query terms wins, the
    chunk's head on a tie; a window that does not start at the head begins with an ellipsis."""
    t = _WS.sub(" ", text).strip()
    if not query or len(t) <= limit or limit < 40:
        return shorten(t, limit)
    t = unicodedata.normalize("NFC", t)  # decomposed accents (as macOS writes) fold like composed ones
    low, pos = _fold(t)  # `pos`: where in `t` each character of `low` stands
    hits: list[tuple[int, str]] = []
    for term in _snippet_terms(query):
        at = low.find(term)
        if at < 0 and len(term) >= 6:  # "failures" in the query, "failed" in the text: a crude stem
            term = term[:5]
            at = low.find(term)
        while at >= 0 and len(hits) < 200:
            hits.append((at, term))
            at = low.find(term, at + len(term))
    if not hits:
        return shorten(t, limit)

    hits = [(pos[at], term) for at, term in hits]  # in `t`'s offsets (a stripped mark made `low` shorter)

    def covered(start: int) -> int:
        return len({term for at, term in hits if start <= at and at + len(term) <= start + limit - 2})

    lead = limit // 5
    best, best_n, first = 0, covered(0), 0
    for at, _ in sorted(hits):
        start = max(0, at - lead)
        if (n := covered(start)) > best_n:
            best, best_n, first = start, n, at
    if best == 0:
        return shorten(t, limit)
    space = t.find(" ", best, min(best + 20, first))  # begin at a word, before the hit (a script without spaces has none)
    best = space + 1 if space >= 0 else _cluster_start(t, best)  # never inside a cluster (a flag read as another)
    return "…" + shorten(t[best:], limit - 1)


def note_lines(notes: Mapping[str, Any] | None) -> list[str]:
    """Warnings for the reader: low confidence, low differentiation, and any `messages` given."""
    if not notes:
        return []
    out = []
    if notes.get("low_confidence"):
        missed = "note: no result reached the threshold (threshold.min_score, or min_prob for a calibrated model, whichever is set); "
        out.append(missed + ("none is returned (threshold.none_pass: empty)" if notes.get("n_results") == 0 else
                             "these are the closest matches (low confidence; threshold.none_pass: empty returns none)"))
    if notes.get("no_term_match"):
        out.append("note: BM25 found no document holding any of the query's indexed words (stopwords and symbols are not "
                   "indexed): any result here comes from dense search alone, by meaning")
    if notes.get("exact_token") == "kept" and notes.get("exact_tokens"):  # which token the flag is about
        toks = ", ".join(clean(str(t)) for t in notes["exact_tokens"])
        out.append(f"note: exact token {toks}: BM25's best-ranked document holding it verbatim or as its id was moved up (flag "
                   "'exact token kept')")
    if notes.get("low_differentiation"):
        spread = notes.get("spread")
        s = f" (spread {spread:.3g})" if isinstance(spread, int | float) else ""
        out.append(f"note: scores barely differ{s}; the order among these results is weak")
    out.extend(f"note: {m}" for m in notes.get("messages") or [])
    return out


JSON_SCHEMA_VERSION = 1  # `schema_version` of `--format json` (docs/search-output.schema.json holds it as a const)


def route_lines(notes: Mapping[str, Any] | None) -> list[str]:
    """Which way the query went, for the detailed format (`--format json` has it under notes.route): the per-query
    dense weight of `adapt` and why (user trial BQ read it only from JSON), or under the learned model, which weighs
    no list, which list its first 10 results follow (`adapt.followed_routes`)."""
    route, weight = (notes or {}).get("route"), (notes or {}).get("dense_weight")
    lex, vec = (notes or {}).get("bm25_top10"), (notes or {}).get("dense_top10")
    if isinstance(route, str) and isinstance(lex, int) and isinstance(vec, int):
        return [f"route: {route} (the first 10 results hold {lex} of BM25's first 10 and {vec} of dense search's)"]
    if not isinstance(route, str) or not isinstance(weight, int | float):
        return []
    gap = (notes or {}).get("dense_gap")
    why = f": its 1st cosine stands {gap:.3f} above its 10th" if isinstance(gap, int | float) else ""
    return [f"route: {route} (dense list weighted {weight:.2f} against BM25's 1{why})"]


def tie_lines(rows: list[Mapping[str, Any]]) -> list[str]:
    """A note naming results whose scores tie (within the 1e-12 steps `threshold.strictly_decreasing` puts
    between them): RRF gives equal scores to documents at mirrored ranks, and the order shown among them is a
    tie-break, not a judgement (user trial S: "scores barely differ" missed them when the rest spread out)."""
    scores = [r.get("score") for r in rows]
    if len(scores) < 2 or not all(isinstance(x, int | float) and math.isfinite(x) for x in scores):
        return []
    tol = 1e-9 * max(abs(x) for x in scores)
    groups, start = [], 0
    for i in range(1, len(scores) + 1):
        if i == len(scores) or abs(scores[i - 1] - scores[i]) > tol:
            if i - start > 1:
                groups.append((rows[start].get("rank", start + 1), rows[i - 1].get("rank", i)))
            start = i
    if not groups:
        return []
    named = [f"{a}-{b}" for a, b in groups]
    said = ", ".join(named[:-1]) + f" and {named[-1]}" if len(named) > 1 else named[0]
    return [f"note: tied scores at results {said}: their order is a tie-break (best list rank, then id), not a "
            "difference in relevance"]


def provider_lines(notes: Mapping[str, Any] | None) -> list[str]:
    """Provider fallbacks (`reranker unavailable (HTTP 500): retrieval order kept`), shown first: the list
    is then not what the config asked for, and the reader must know it (#16)."""
    return [f"warning: {m}" for m in (notes or {}).get("provider_notes") or []]


def provider_field(notes: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JSON output's `providers` field: each provider's status for this query, and the warnings."""
    n = notes or {}
    return {k: n.get(k) for k in ("reranker", "expander", "embedder")} | {"warnings": list(n.get("provider_notes") or [])}


def _header(r: Mapping[str, Any], title_chars: int, id_chars: int | None = None) -> str:
    parts = [f"{r.get('rank', '?')}. score {_num(r.get('score'))}"]
    why = " · ".join(x for x in (f"fused {_num(_fused(r))}" if _fused_differs(r) else "", _rerank_text(r), _origin_text(r)) if x)
    if _prior_text(r):  # after a semicolon: the priors' factors are not one more list
        pri = f"{_prior_text(r)}, before priors {_num(r.get('score_before_priors'))}"
        why = f"{why}; {pri}" if why else pri
    if why:
        parts[0] += f" ({why})"
    if r.get("score_prob") is not None:  # calibrated P(relevant), fusion.method learned
        parts[0] += f" · P(relevant) {r['score_prob']:.2f}"
    label = clean(r.get("doc_id", ""))
    if r.get("source") and clean(r["source"]) != label:  # a memory without a source is named once (user trial Z)
        parts.append(shorten_middle(clean(r["source"]), max(title_chars, 12)))
    if id_chars is not None:  # a URL id of 1,500 characters took the whole budget (user trial AI); JSON keeps it whole
        label = shorten_middle(label, id_chars)
    if r.get("title"):
        label = f"{shorten(clean(r['title']), title_chars)} [{label}]"
    parts.append(label)
    return " · ".join(parts)


FLAGS_CHARS = 200  # a flags line (its "also in" list of long paths) is cut here, not the results after it
MIN_SNIPPET = 40  # a result shown with less of its text than this is not worth its place: fewer results instead


def _layout(rows: list[dict[str, Any]], notes: list[str], max_chars: int, excerpt_chars: int) -> tuple[list[str], list[str], int]:
    """(headers, flags lines, snippet length) that fit `rows` into `max_chars`, shortening titles first."""
    # Ids are whole while they fit (an agent copies one into `hrt delete`), then shortened in the middle.
    for title_chars, id_chars in ((60, None), (30, 60), (12, 24)):
        heads = [_header(r, title_chars, id_chars) for r in rows]
        flags = [("   flags: " + ", ".join(_flag_words(r))) if _flags(r) else "" for r in rows]
        flags = [f if len(f) <= FLAGS_CHARS else f[: FLAGS_CHARS - 1] + "…" for f in flags]
        fixed = sum(len(x) + 1 for x in notes) + sum(len(h) + 1 for h in heads) + sum(len(f) + 1 for f in flags if f)
        room = (max_chars - fixed) // len(rows) - 4  # "   " indent + newline per excerpt line
        limit = min(excerpt_chars, room)
        if limit >= MIN_SNIPPET or title_chars == 12:
            break
    return heads, flags, limit


def _compact(rows: list[dict[str, Any]], notes: list[str], max_chars: int, excerpt_chars: int, query: str | None = None) -> str:
    """Results within `max_chars`: titles shortened first, then, rather than results without their text or a
    list cut mid-line, fewer results, with a note saying how many more there are (user trial S: 5 results of
    long paths filled 2,000 characters with no snippet, the fifth cut mid-header, and nothing said so)."""
    if not rows:
        return _visible("\n".join([*notes, "no results"]))[:max_chars]
    # The notes take at most half the budget, whole lines in their order: with a small budget they left no room for a
    # single result (review CB: --max-chars 300 printed a fallback note, the route and "4 more results not shown").
    kept, room = [], max_chars // 2
    for line in notes:
        if len(line) + 1 <= room:
            kept.append(line)
            room -= len(line) + 1
    notes = kept
    shown, lead = rows, list(notes)
    heads, flags, limit = _layout(shown, lead, max_chars, excerpt_chars)
    while limit < MIN_SNIPPET and len(shown) > 1:
        shown = shown[:-1]
        more = len(rows) - len(shown)
        lead = [*notes, f"note: {more} more result{'s' if more > 1 else ''} not shown: the compact view keeps to "
                        f"{max_chars:,} characters (ask for fewer with -n, or --format json for all)" if max_chars >= 600
                else f"note: {more} more not shown (-n, --format json)"]
        heads, flags, limit = _layout(shown, lead, max_chars, excerpt_chars)
    lines = list(lead)
    for r, h, f in zip(shown, heads, flags, strict=True):
        lines.append(h)
        if limit > 0 and _shown_body(r):
            lines.append("   " + snippet(_shown_body(r), limit, query))
        if f:
            lines.append(f)
    out = _visible("\n".join(lines))
    # Only a single pathological result (a header longer than the budget) gets here: cut rather than overflow.
    return out if len(out) <= max_chars else out[: max_chars - 1] + "…"


def _detailed(rows: list[dict[str, Any]], notes: list[str]) -> str:
    blocks = list(notes)
    for r in rows:
        head = f"#{r.get('rank', '?')}  score {_num(r.get('score'))}"
        if _fused_differs(r):
            head += f"  fused {_num(_fused(r))}"
        if _rerank_text(r):
            head += f"  {_rerank_text(r)}"
        if _origin_text(r):
            head += f"  ({_origin_text(r)})"
        if _prior_text(r):
            head += f"  {_prior_text(r)} (before priors {_num(r.get('score_before_priors'))})"
        if _flags(r):
            head += "  [" + ", ".join(_flag_words(r)) + "]"
        # Every data field on one line, control characters escaped (`clean`): a newline in a title or text
        # would otherwise forge result blocks, an escape sequence rewrite the terminal.
        meta = f"source: {clean(r.get('source')) or '-'}  doc: {clean(r.get('doc_id', '-'))}"
        if r.get("chunk_id") is not None:
            meta += f"  chunk: {clean(r['chunk_id'])}"
        lines = [head, meta]
        if r.get("title"):
            lines.append(f"title: {clean(r['title'])}")
        where = chunk_lines(r.get("text"), r.get("excerpt"), r.get("start_char"))
        if where:  # the matched chunk as its file has it, each line numbered (a line can forge no result block)
            first, last, body = where
            width = len(str(last))
            lines.append(f"lines {first}-{last}:")
            lines += [f"{n:>{width}} | {_code_line(x)}" for n, x in enumerate(body.split("\n"), first)]
        else:
            lines.append(clean(r.get("text") or r.get("excerpt") or ""))
        blocks.append("\n".join(lines))
    return _visible("\n\n".join(blocks) if rows else "\n".join([*notes, "no results"]))


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Mapping):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    if v is None or isinstance(v, str | int | float | bool):
        return v
    return str(v)


def _metadata(v: Any) -> dict[str, Any]:
    """Metadata as an object: the store hands it over as a JSON string."""
    if isinstance(v, str):
        try:
            v = json.loads(v) if v.strip() else {}
        except json.JSONDecodeError:
            return {"value": v}
    return dict(v) if isinstance(v, Mapping) else {}


def chunk_lines(doc_text: Any, chunk_text: Any, start_char: Any = None) -> tuple[int, int, str] | None:
    """(first line, last line, the chunk's lines as its file has them): where a result sits in its file, for an
    agent or an editor to open, with indentation kept (user trial BD: no line numbers, code flattened onto one
    line). The chunk is found in its document from its stored start (the chunker trims its edges) and its first
    line is taken whole. None when the chunk is not in the text (a document changed since it was chunked)."""
    if not doc_text or not chunk_text:
        return None
    doc, chunk = str(doc_text), str(chunk_text)
    at = doc.find(chunk, max(0, int(start_char or 0)))
    if at < 0:
        at = doc.find(chunk)
    if at < 0:
        return None
    end = at + len(chunk)
    first = doc.count("\n", 0, at) + 1
    return first, first + doc.count("\n", at, end), doc[doc.rfind("\n", 0, at) + 1 : end]


def _code_line(line: str) -> str:
    """One line of a chunk for the terminal: indentation kept (tabs as 4 spaces), control characters escaped."""
    return _CTRL.sub(escape, line.expandtabs(4))


def _json_result(r: Mapping[str, Any], excerpt_chars: int, query: str | None = None) -> dict[str, Any]:
    """One result for `--format json` (the fields of docs/search-output.schema.json, nothing else)."""
    where = chunk_lines(r.get("text"), r.get("excerpt"), r.get("start_char"))
    return {
        "rank": r.get("rank"),
        "doc_id": r.get("doc_id"),
        "chunk_id": r.get("chunk_id"),
        "source": r.get("source"),
        "title": r.get("title") or "",
        "score": r.get("score"),
        "fused_score": _fused(r) if _fused_differs(r) else None,
        "priors": _priors_field(r),
        "score_prob": r.get("score_prob"),
        "reranked": bool(r.get("reranked")),
        "rerank_score": r.get("rerank_score"),
        # The blend's inputs (user trial R: a blended score could not be checked from the CLI alone).
        "fused_rank": r.get("fused_rank"),
        "retrieval_weight": r.get("retrieval_weight") if r.get("reranked") else None,
        "origins": [dict(o) for o in r.get("origins") or []],
        "rank_bonus": r.get("rank_bonus"),
        "flags": _flags(r),
        "also_in": [str(x) for x in r.get("also_in") or []],
        "copies": int(r.get("copies") or 0),
        "snippet": snippet(_body(r), excerpt_chars, query),
        "start_line": where[0] if where else None,
        "end_line": where[1] if where else None,
        "chunk_text": where[2] if where else None,
        "metadata": _metadata(r.get("metadata")),
    }


def render(
    results: pl.DataFrame | Iterable[Mapping[str, Any]],
    *,
    notes: Mapping[str, Any] | None = None,
    fmt: str = "compact",
    max_chars: int = 2000,
    excerpt_chars: int = 240,
    query: str | None = None,
) -> str:
    """Render one query's results. Rows carry rank, score (final), fused_score (before blending; else
    raw_score), rerank_score and reranked, prior_* factors and score_before_priors (when priors are on),
    origins (see `origins`), source, doc_id, title, text and/or excerpt, flags, also_in, metadata;
    `notes` is the query's per-query row (low_confidence, low_differentiation, no_term_match, spread, exact_token)
    plus optional `messages` (list of strings, e.g. a provider that fell back)."""
    rows = _rows(results)
    # "no results" says all that no_term_match would (its note is about results found by meaning alone).
    lines = provider_lines(notes) + note_lines(notes if rows else {**(notes or {}), "no_term_match": False}) + tie_lines(rows)
    if fmt == "json":
        out = [_json_result(r, excerpt_chars, query) for r in rows]
        skip = {"qid", "messages", "n_results", "reranker", "expander", "embedder", "provider_notes"}
        note = {k: v for k, v in dict(notes or {}).items() if k not in skip}
        from . import __version__

        # Versions first, so a program can branch on them before reading the rest (user trial BR: none in the output)
        doc = {"schema_version": JSON_SCHEMA_VERSION, "toolkit_version": __version__, "query": query, "n_results": len(out), "notes": _json_safe(note), "providers": _json_safe(provider_field(notes)),
               "messages": lines, "results": _json_safe(out)}
        return _json_c1(json.dumps(doc, ensure_ascii=False, indent=2))
    if fmt == "detailed":
        out = _detailed(rows, route_lines(notes) + lines)
        if len(out) <= max_chars:
            return out
        # The route stays: it is the query's, one line, and the reason to ask for detail (user trial CA).
        lines = [f"note: detailed output ({len(out):,} chars) exceeds max_chars={max_chars:,}; showing compact",
                 *route_lines(notes), *lines]
        return _compact(rows, lines, max_chars, excerpt_chars, query)
    if fmt == "compact":
        return _compact(rows, lines, max_chars, excerpt_chars, query)
    raise InputError(f"unknown output format {fmt!r}: use compact, detailed or json")
