"""Rendering one query's results: compact within budget, detailed with fallback, JSON."""

from __future__ import annotations

import json
import math

import polars as pl
import pytest

from toolkit.errors import InputError
from toolkit.render import render, shorten


def results(n: int = 5, words: int = 400) -> list[dict]:
    return [
        {
            "rank": i,
            "score": 1.0 / i,
            "raw_score": 8.0 - i,
            "source": f"incident-{i}",
            "doc_id": f"d{i}",
            "chunk_id": f"d{i}#0",
            "title": f"Deploy failure report number {i}",
            "text": " ".join(f"w{i}x{j}" for j in range(words)),
            "flags": ["reranked", "extra_from_source"] if i == 5 else [],
        }
        for i in range(1, n + 1)
    ]


def blocks(text: str) -> list[list[str]]:
    """Lines grouped per result (a result starts with "<rank>. score")."""
    out: list[list[str]] = []
    for line in text.splitlines():
        if line[:1].isdigit() and ". score " in line:
            out.append([line])
        elif out:
            out[-1].append(line)
    return out


def test_compact_fits_five_long_results_in_2000_chars():
    out = render(results(), fmt="compact", max_chars=2000, excerpt_chars=240)
    assert len(out) <= 2000
    b = blocks(out)
    assert len(b) == 5 and all(len(x) <= 4 for x in b)
    assert b[0][0] == "1. score 1.0000 (fused 7.0000) · incident-1 · Deploy failure report number 1 [d1]"
    assert b[0][1].startswith("   w1x0 w1x1") and b[0][1].endswith("…") and len(b[0][1]) <= 3 + 240
    assert b[4][-1] == "   flags: reranked, extra result from a source already shown"


def test_compact_shortens_excerpts_to_fit_a_small_budget():
    out = render(results(), max_chars=700, excerpt_chars=240)
    assert len(out) <= 700
    assert len(blocks(out)) == 5 and all(x[1].startswith("   w") for x in blocks(out))
    short = render(results(words=5), max_chars=2000)
    assert "w3x4" in short and "…" not in short  # short texts are shown whole


def test_notes_for_low_differentiation_and_low_confidence():
    out = render(
        results(3),
        notes={
            "low_differentiation": True,
            "spread": 0.004,
            "low_confidence": True,
            "messages": ["rerank skipped: no reranker configured"],
        },
    )
    lines = out.splitlines()
    assert lines[0].startswith("note: no result reached the threshold (threshold.min_score, or min_prob")
    assert lines[1] == "note: scores barely differ (spread 0.004); the order among these results is weak"
    assert lines[2] == "note: rerank skipped: no reranker configured"
    assert "note" not in render(results(3), notes={"low_differentiation": False, "low_confidence": False})


def test_detailed_shows_full_text_and_flags_then_falls_back():
    rows = results(2, words=20)
    out = render(rows, fmt="detailed", max_chars=5000)
    assert rows[0]["text"] in out and rows[1]["text"] in out
    assert (
        "source: incident-1  doc: d1  chunk: d1#0" in out and "title: Deploy failure report number 2" in out
    )
    flagged = render(results(5, words=3), fmt="detailed", max_chars=5000)
    assert "[reranked, extra result from a source already shown]" in flagged
    long = render(results(), fmt="detailed", max_chars=2000)
    assert len(long) <= 2000 and long.startswith("note: detailed output (")
    assert "showing compact" in long.splitlines()[0] and len(blocks(long)) == 5


def test_json_and_dataframe_input():
    rows = results(2, words=3)
    rows[1]["raw_score"] = math.nan
    doc = json.loads(render(pl.DataFrame(rows[::-1]), fmt="json", notes={"spread": 0.5}))
    assert [r["rank"] for r in doc["results"]] == [1, 2]  # sorted by rank
    assert doc["results"][1]["fused_score"] is None and doc["results"][0]["fused_score"] == 7.0
    assert doc["results"][0]["snippet"] == rows[0]["text"] and "text" not in doc["results"][0]
    assert doc["notes"] == {"spread": 0.5} and doc["n_results"] == 2
    assert render([], notes={"low_confidence": True}).endswith("no results")
    with pytest.raises(InputError, match="unknown output format"):
        render(rows, fmt="xml")


def test_shorten_cuts_at_a_word_boundary():
    assert shorten("alpha beta   gamma\ndelta", 100) == "alpha beta gamma delta"
    assert shorten("alpha beta gamma delta", 14) == "alpha beta…"
    assert len(shorten("x" * 50, 10)) == 10


def test_provenance_and_flags_in_words():
    rows = results(2, words=3)
    rows[0]["raw_score"] = rows[0]["score"]  # no blend: the fused score is not repeated
    rows[0]["origins"] = [{"list": "bm25", "rank": 1, "score": 12.41}, {"list": "dense", "rank": 13, "score": 0.6123}]
    rows[0]["flags"] = ["exact_token_kept", "duplicates_collapsed"]
    rows[0]["also_in"] = ["a/README", "b/README", "c/README", "d/README", "e/README"]
    out = render(rows)
    head = out.splitlines()[0]
    assert head == "1. score 1.0000 (bm25 #1 12.4 · dense #13 0.612) · incident-1 · Deploy failure report number 1 [d1]"
    assert "flags: exact token kept (moved up: it holds the query's identifier verbatim or as its id), stands for 5 more copies, also in 5 sources: a/README, b/README, c/README, …" in out
    assert "raw" not in out


def test_the_snippet_shows_where_the_query_matched():
    """A user trial: the identifier searched for sat at character 854 of a 919-character chunk, and the
    snippet (the chunk's first 240 characters) did not show it. Compact and JSON output now start the
    snippet a little before the query's terms; a match in the head keeps the head."""
    from toolkit.render import snippet

    filler = " ".join(f"alpha{i} beta gamma" for i in range(60))
    text = f"{filler} The unique marker ZXQ_SENTINEL_42 appears only here. {filler}"
    got = snippet(text, 240, "where is ZXQ_SENTINEL_42")
    assert "ZXQ_SENTINEL_42" in got and got.startswith("…") and len(got) <= 240
    assert snippet(text, 240, "alpha1 beta") == shorten(text, 240)  # the head already holds it
    assert snippet(text, 240, None) == shorten(text, 240)
    row = {"rank": 1, "doc_id": "long.md", "score": 0.5, "text": text}
    for fmt in ("compact", "json"):
        assert "ZXQ_SENTINEL_42" in render([row], fmt=fmt, query="ZXQ_SENTINEL_42"), fmt


def test_a_reranked_result_shows_its_fused_score_and_the_rerankers_apart():
    """A user trial: for every reranked result "fused" (and JSON fused_score) printed the reranker's score,
    because the blend keeps that in raw_score. The fused score is the pipeline's fused_score column."""
    row = {"rank": 1, "doc_id": "plat-065", "score": 0.9286, "fused_score": 0.1156, "raw_score": 0.6875,
           "rerank_score": 0.6875, "reranked": True, "text": "deploy fails with ECONNREFUSED"}
    head = render([row], fmt="compact").splitlines()[0]
    assert "fused 0.1156" in head and "rerank 0.6875" in head and "fused 0.6875" not in head
    got = json.loads(render([row], fmt="json"))["results"][0]
    assert got["fused_score"] == 0.1156 and got["rerank_score"] == 0.6875
    assert "fused 0.1156" in render([row], fmt="detailed")


def test_priors_show_as_factors_and_not_as_a_fused_score():
    """A user trial: with agent-memory (priors, no reranker) compact printed `fused 0.0156` for a score the
    priors had changed, JSON had no place for the factors, and the docs said fused_score is null unless a
    reranker blend changed the score. The priors now show as themselves; fused stays for the blend."""
    row = {"rank": 1, "doc_id": "color", "score": 0.0568, "fused_score": 0.0156, "raw_score": 0.0156,
           "score_before_priors": 0.0156, "prior_priority": 4.0, "prior_recency": 0.9095, "prior_use": 1.0,
           "origins": [{"list": "dense", "rank": 4, "score": -0.0291}], "text": "Dave's favorite color is orange."}
    head = render([row]).splitlines()[0]
    assert head.startswith("1. score 0.0568 (dense #4 -0.0291; priors: priority x4.00 · recency x0.91, before priors 0.0156)")
    assert "fused" not in head and "use x" not in head  # a factor of 1 did nothing
    assert "priors: priority x4.00 · recency x0.91 (before priors 0.0156)" in render([row], fmt="detailed")
    got = json.loads(render([row], fmt="json"))["results"][0]
    assert got["fused_score"] is None
    assert got["priors"] == {"score_before": 0.0156, "priority": 4.0, "recency": 0.9095, "use": 1.0}
    # A reranker blend before the priors: both show, each named.
    blended = {**row, "score_before_priors": 0.7, "rerank_score": 0.7, "reranked": True}
    assert "(fused 0.0156 · rerank 0.7000 · dense #4 -0.0291; priors: priority x4.00" in render([blended])
    # Neutral factors (no metadata): no priors part; no priors in the config: JSON priors is null.
    plain = {**row, "score": 0.0156, "prior_priority": 1.0, "prior_recency": 1.0}
    assert "priors" not in render([plain]) and json.loads(render([plain], fmt="json"))["results"][0]["priors"]["use"] == 1.0
    assert json.loads(render(results(1, words=3), fmt="json"))["results"][0]["priors"] is None


def test_compact_with_priors_stays_within_2000_chars():
    rows = results()
    for r in rows:
        r.update(fused_score=r["raw_score"], score_before_priors=r["raw_score"], prior_priority=3.0, prior_recency=0.8312,
                 prior_use=1.17, score=r["raw_score"] * 3.0 * 0.8312 * 1.17)
    out = render(rows, max_chars=2000)
    assert len(out) <= 2000 and len(blocks(out)) == 5
    assert all("priors: priority x3.00 · recency x0.83 · use x1.17, before priors" in b[0] for b in blocks(out))


def test_snippets_find_cjk_words_and_never_split_a_character_cluster():
    """Trial L: a two-character Chinese query (饺子) got the note's head instead of the hit; a Turkish İ (two
    characters once lower-cased) moved the window past the hit; cuts left a lone skin tone or half a flag."""
    import unicodedata

    from toolkit.render import shorten, snippet

    text = "今天天气很好。" * 30 + "我们晚上吃饺子吧。" + "明天见。" * 20
    assert "饺子" in snippet(text, 60, "饺子")
    assert "zzkeyword" in snippet("İİİİ " * 60 + "zzkeyword here " + "x " * 100, 60, "zzkeyword")
    # Each cluster with the places inside it where a cut is allowed (between two flags, not inside one).
    for base, cluster, ok in (("x" * 30, "👍🏽", {0, 2}), ("x" * 30, "🇩🇪🇫🇷", {0, 2, 4}),
                              ("x" * 30, "👨\u200d👩\u200d👧", {0, 5}), ("x" * 20, unicodedata.normalize("NFD", "é"), {0, 2})):
        text = base + cluster + "y" * 10
        for n in range(len(base) + 1, len(base) + len(cluster) + 2):
            cut = shorten(text, n).rstrip("…")
            assert text.startswith(cut) and (len(cut) <= len(base) or len(cut) - len(base) in ok or len(cut) > len(base) + len(cluster)), (cluster, n, cut)


def test_the_detailed_format_says_which_way_the_query_went_and_why():
    """User trial BQ: `default`'s per-query route and dense weight were in `--format json` only (notes.route), so a
    reader of the detailed output could not see why a dense-only hit sat low (a bm25-led query, weight 0.28)."""
    rows = [{"rank": 1, "score": 0.03, "doc_id": "d1", "source": "a.md", "text": "deploy notes"}]
    notes = {"route": "bm25-led", "dense_weight": 0.28, "dense_gap": 0.045}
    detailed = render(rows, notes=notes, fmt="detailed")
    assert detailed.splitlines()[0] == ("route: bm25-led (dense list weighted 0.28 against BM25's 1: its 1st cosine "
                                        "stands 0.045 above its 10th)")
    assert "route:" not in render(rows, notes=notes, fmt="compact")  # the compact budget is the results'
    assert "route:" not in render(rows, notes={}, fmt="detailed")  # a config without the adapt rule has no route


def test_detailed_output_too_long_for_its_budget_keeps_the_route_and_the_budget_is_a_search_option(demo_store):
    """User trial CA: `--format detailed -n 3` fell back to compact above output.max_chars (2,000) and dropped the route
    line, the one reason to ask for detail; no search option moved the budget."""
    from click.testing import CliRunner

    from toolkit.cli import main

    rows = [{"rank": i, "score": 0.03, "doc_id": f"d{i}", "source": "a.md", "text": "deploy notes " * 200} for i in (1, 2, 3)]
    notes = {"route": "bm25-led", "dense_weight": 0.28, "dense_gap": 0.045}
    fell_back = render(rows, notes=notes, fmt="detailed", max_chars=900)
    assert "showing compact" in fell_back and "route: bm25-led (dense list weighted 0.28" in fell_back
    store, q = str(demo_store.path), "console getting HTTP 429 from /v1/console"
    short = CliRunner().invoke(main, ["search", q, "--store", store, "--format", "detailed", "-n", "8", "--max-chars", "900"])
    tiny = CliRunner().invoke(main, ["search", q, "--store", store, "--format", "detailed", "-n", "8", "--max-chars", "200"])
    full = CliRunner().invoke(main, ["search", q, "--store", store, "--format", "detailed", "-n", "8", "--max-chars", "100000"])
    assert short.exit_code == 0 and full.exit_code == 0, (short.output, full.output)
    assert "showing compact" in short.stdout and "route:" in short.stdout and len(short.stdout) <= 901
    # A budget too small for the notes keeps a result, not the notes (review CB: 300 printed notes and no result).
    assert tiny.exit_code == 0 and "\n1. score" in tiny.stdout and len(tiny.stdout) <= 201, tiny.stdout
    assert "showing compact" not in full.stdout and full.stdout.startswith("route:") and len(full.stdout) > 2000
    said = CliRunner().invoke(main, ["search", q, "--store", store, "-v"])  # compact, the route on stderr
    assert said.exit_code == 0 and "route:" in said.stderr and "route:" not in said.stdout
