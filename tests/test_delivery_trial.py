"""User trial S: a developer wiring `hrt search` into an agent as its memory tool, who relies on what each
result delivers. Each test is a defect as the trial met it: a quality floor that deleted the source fill's
good results, a 2,000-character view that dropped every snippet and cut the last result mid-line without a
word, and snippets that ignored the version number the user asked about."""

from __future__ import annotations

import json

import polars as pl

from toolkit.config import load_config
from toolkit.loaders import load_corpus
from toolkit.pipeline import run_pipeline
from toolkit.render import render, snippet
from toolkit.store import Store


def test_min_score_judges_a_filled_result_by_its_own_score(tmp_path):
    """One source holds the best eight hits: source dedup shows one of them and fills with the rest, placed
    below the other sources. A min_score every result's own score clears dropped the filled ones (their
    placeholder scores sit below the first pass)."""
    docs = [{"_id": f"s-{i}", "text": f"kafka consumer lag alert runbook step {i}: kafka consumer lag grows",
             "metadata": {"source": "runbook"}} for i in range(8)]
    docs += [{"_id": f"o-{i}", "text": f"notes {i} about kafka", "metadata": {"source": f"other-{i}"}} for i in range(2)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    q = pl.DataFrame({"qid": ["q"], "text": ["kafka consumer lag"]})
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(load_corpus(tmp_path / "c.jsonl"), embed=False)
        base = load_config("bm25-only").with_updates({"dedup.source_enabled": True, "output.n": 10})
        plain = run_pipeline(st, q, base).final
        own = run_pipeline(st, q, load_config("bm25-only").with_updates({"output.n": 10})).final
        floor = float(own["score"].min())  # every result's own score is at least this
        gated = run_pipeline(st, q, base.with_updates({"threshold.min_score": floor})).final
    assert plain.height == 10 and "extra_from_source" in plain["flags"].explode().to_list()
    assert gated["doc_id"].to_list() == plain["doc_id"].to_list()


def _rows(n: int, path_len: int = 120) -> list[dict]:
    long = "/".join(["deeply-nested-folder"] * (path_len // 21))
    return [{"rank": i + 1, "doc_id": f"{long}/doc-{i}.md", "source": f"{long}/doc-{i}.md", "title": f"{long}/doc-{i}.md",
             "score": 1.0 - i / 100, "text": f"heliotrope scheduler runs the nightly job number {i} " * 8,
             "flags": ["duplicates_collapsed"], "also_in": [f"{long}/copy-{i}-{j}.md" for j in range(6)]} for i in range(n)]


def test_the_compact_view_shows_fewer_whole_results_rather_than_results_without_text():
    out = render(_rows(5), query="heliotrope scheduler", max_chars=2000)
    assert len(out) <= 2000
    shown = [line for line in out.splitlines() if line[:1].isdigit()]
    snippets = [line for line in out.splitlines() if "heliotrope scheduler" in line]
    assert len(snippets) == len(shown) >= 1  # every result shown has its text
    if len(shown) < 5:
        assert f"note: {5 - len(shown)} more result" in out and "--format json" in out
    flags = [line for line in out.splitlines() if line.startswith("   flags: ")]
    assert len(flags) == len(shown)  # the last result whole too: nothing cut mid-result


def test_a_snippet_looks_for_the_number_the_user_asked_about():
    text = "## Section 16\n" + "filler words about migrations " * 12 + "then for version 17 run the migrate tool with --safe"
    got = snippet(text, 80, "migration version 17 section 17")
    assert "17" in got and "version 17" in got
