"""User trial S: a developer wiring `hrt search` into an agent as its memory tool, who relies on what each
result delivers. Each test is a defect as the trial met it: a quality floor that deleted the source fill's
good results, a 2,000-character view that dropped every snippet and cut the last result mid-line without a
word, and snippets that ignored the version number the user asked about."""

from __future__ import annotations

import json
from pathlib import Path

import polars as pl
import pytest

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


def test_a_custom_rrf_config_does_not_say_scores_barely_differ_for_every_query(tmp_path):
    """A config file that names only its fusion (RRF, as a user writes one) inherited low_spread 0.10, a
    spread RRF's 1/(k + rank) scores never reach: every query got "scores barely differ". Without a
    `threshold.low_spread` the config now reads its fusion scale's (`config.low_spread`), also after a change of
    fusion (a lab slider, `extends`), and an explicit one is kept."""
    from toolkit.config import config_from_dict, low_spread

    docs = [{"_id": "hit", "text": "zookeeper quorum lost after the ensemble restart", "metadata": {"source": "a"}}]
    docs += [{"_id": f"n-{i}", "text": f"weekly notes {i} about lunch and parking", "metadata": {"source": f"n{i}"}}
             for i in range(12)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    q = pl.DataFrame({"qid": ["q"], "text": ["zookeeper quorum lost"]})
    cfg = config_from_dict({"name": "mine", "fusion": {"method": "rrf", "rank_bonus": [], "original_weight": 1.0}})
    assert cfg.threshold.low_spread is None and 0.001 < low_spread(cfg) < 0.002
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(load_corpus(tmp_path / "c.jsonl"))
        res = run_pipeline(st, q, cfg)
    assert res.final["doc_id"][0] == "hit"  # first in both lists: the top-5 spread is RRF's widest
    assert not res.per_query["low_differentiation"].any()
    assert res.per_query["spread"][0] < 0.10  # what the old default compared it with
    assert low_spread(cfg.with_updates({"fusion.method": "convex"})) == 0.01  # (a slider moved: its scale follows)
    assert low_spread(cfg.with_updates({"fusion.rrf_k": 10})) > 0.02
    assert low_spread(cfg.with_updates({"fusion.original_weight": 2.0})) == 2 * low_spread(cfg)
    assert low_spread(config_from_dict({"fusion": {"method": "rrf"}})) == 0.01  # the rank bonus spreads the top: qmd's
    assert low_spread(config_from_dict({"threshold": {"low_spread": 0.3}})) == 0.3
    assert low_spread(load_config("learned")) == 0.1 == low_spread(load_config("default"))  # presets' own
    assert low_spread(load_config("guarded-rrf")) == 0.001


def test_near_copies_from_the_same_source_leave_a_count(tmp_path):
    """Near-duplicate removal dropped four near-copies of one file's paragraph and the result said nothing: its
    `also_in` lists other sources only. It now says how many results it stands for (`copies`), in JSON and
    in the compact view."""
    docs = [{"_id": f"r-{i}", "text": f"Rollback step {i}: when the canary fails health checks run helm rollback "
             f"release {i} and verify canary traffic returns to baseline.", "metadata": {"source": "ops/runbook.md"}}
            for i in range(5)]
    docs += [{"_id": f"n-{i}", "text": f"weekly notes {i} about lunch and parking", "metadata": {"source": f"n{i}"}}
             for i in range(6)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    q = pl.DataFrame({"qid": ["q"], "text": ["canary rollback helm"]})
    cfg = load_config("default").with_updates({"dedup.near_duplicate_enabled": True, "dedup.near_duplicate_threshold": 0.9})
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(load_corpus(tmp_path / "c.jsonl"))
        res = run_pipeline(st, q, cfg)
        rows = res.final.to_dicts()
    top = rows[0]
    assert top["doc_id"].startswith("r-") and top["also_in"] == [] and top["copies"] == 4
    assert "duplicates_collapsed" in top["flags"]
    assert "stands for 4 more copies from the same source" in render(rows, query="canary rollback helm")
    got = json.loads(render(rows, fmt="json", query="canary rollback helm"))["results"][0]
    assert got["copies"] == 4 and got["also_in"] == []


def test_hrt_search_shows_the_rank_bonus_that_makes_the_score_add_up(tmp_path):
    """qmd's RRF adds +0.05 for a first place and +0.02 for places 2-3; `hrt search` showed each list's rank and
    the final score, which did not add up without the bonus (user trial R). It is now shown, and in JSON."""
    from click.testing import CliRunner

    from toolkit.cli import main

    docs = [{"_id": "hit", "text": "zookeeper quorum lost after the ensemble restart", "metadata": {"source": "a"}}]
    docs += [{"_id": f"n-{i}", "text": f"weekly notes {i} about lunch and parking", "metadata": {"source": f"n{i}"}}
             for i in range(8)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    store = str(tmp_path / "s.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(tmp_path / "c.jsonl"), "--store", store]).exit_code == 0
    r = CliRunner().invoke(main, ["search", "zookeeper quorum lost", "--store", store, "--config", "qmd", "-n", "2"])
    assert r.exit_code == 0, r.output
    assert "rank bonus +0.05) · a" in r.output.splitlines()[0]
    r = CliRunner().invoke(main, ["search", "zookeeper quorum lost", "--store", store, "--config", "qmd", "-n", "2",
                                  "--format", "json"])
    top = json.loads(r.stdout)["results"][0]
    ranks = [o["rank"] for o in top["origins"] if o["list"] in ("bm25", "dense")]
    assert top["rank_bonus"] == 0.05 and min(ranks) == 1
    assert abs(top["fused_score"] if top["fused_score"] is not None else top["score"]) > 0.05
    r = CliRunner().invoke(main, ["search", "zookeeper quorum lost", "--store", store, "-n", "2", "--format", "json"])
    assert json.loads(r.stdout)["results"][0]["rank_bonus"] is None  # default adds none


def test_tied_scores_are_named_even_when_the_rest_of_the_list_spreads_out():
    """RRF gives documents at mirrored ranks (BM25 #1 + dense #3, BM25 #3 + dense #1) the same score; the shown
    order among them is a tie-break. "Scores barely differ" looks at the whole top n, so it said nothing while
    the two results the user compares first were tied (trial S)."""
    a, b = 1 / 61 + 1 / 63, 1 / 63 + 1 / 61
    rows = [{"rank": i + 1, "doc_id": f"d{i}", "source": f"s{i}", "title": "", "score": s, "text": "kafka lag runbook"}
            for i, s in enumerate([a, b - 1e-14, 0.02, 0.015, 0.015 * (1 - 1e-13)])]
    out = render(rows, query="kafka lag", notes={"spread": a - 0.015, "low_differentiation": False})
    assert "note: tied scores at results 1-2 and 4-5: their order is a tie-break" in out
    assert "barely differ" not in out
    doc = json.loads(render(rows, fmt="json", query="kafka lag"))
    assert any("tied scores at results 1-2 and 4-5" in m for m in doc["messages"])
    distinct = [{**r, "score": 1.0 - r["rank"] / 10} for r in rows]
    assert "tied" not in render(distinct, query="kafka lag")


def test_the_shown_rank_bonus_ignores_a_list_fusion_does_not_count():
    """With `fusion.dense_weight: 0` a document first in the dense list showed "+0.05" while fusion had added
    0.02 for its BM25 place 3 (review of trial R's fix): the bonus is read from the weighted lists only."""
    from toolkit.render import origins

    cands = pl.DataFrame({"qid": ["q", "q"], "list_id": ["orig:lex", "orig:vec"], "variant": ["orig", "orig"],
                          "retriever": ["lex", "vec"], "doc_id": ["d", "d"], "chunk_id": ["d#0", "d#0"], "rank": [3, 1],
                          "score": [9.0, 0.8]})
    top = pl.DataFrame({"qid": ["q"], "doc_id": ["d"]})
    qmd = load_config("qmd")
    assert origins(cands, top, qmd.fusion)["rank_bonus"][0] == 0.05
    assert origins(cands, top, qmd.with_updates({"fusion.dense_weight": 0.0}).fusion)["rank_bonus"][0] == 0.02
    assert "rank_bonus" not in origins(cands, top).columns


def test_copies_of_a_result_removed_as_a_near_duplicate_count_for_the_result_kept(tmp_path):
    """X2 is byte-identical to X, and X is a near-copy of Y: X2 collapsed into X, X was removed for Y, and Y said
    `copies=1, also_in=["b"]`, losing X2 (review of trial S's fix). Y stands for both."""
    base = "Rollback step: when the canary fails health checks run helm rollback release and verify canary traffic."
    docs = [{"_id": "Y", "text": base + " Extra canary rollback helm words.", "metadata": {"source": "a"}},
            {"_id": "X", "text": base, "metadata": {"source": "b"}},
            {"_id": "X2", "text": base, "metadata": {"source": "c"}}]
    docs += [{"_id": f"n-{i}", "text": f"weekly notes {i} about lunch and parking", "metadata": {"source": f"n{i}"}}
             for i in range(6)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    cfg = load_config("default").with_updates({"dedup.near_duplicate_enabled": True, "dedup.near_duplicate_threshold": 0.9})
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(load_corpus(tmp_path / "c.jsonl"))
        top = run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["canary rollback helm"]}), cfg).final.row(0, named=True)
    assert top["doc_id"] == "Y" and top["copies"] == 2 and top["also_in"] == ["b", "c"]


def test_the_lab_shows_the_low_spread_in_force_when_the_config_sets_none(demo_store):
    """`threshold.low_spread` unset reads as the fusion's own scale (`config.low_spread`); the lab's control
    shows that value and follows a change of fusion, where syncing the widget to the unset field would fail."""
    from toolkit.lab import Lab
    from toolkit.loaders import Dataset

    ds = Dataset.open(Path(__file__).resolve().parents[1] / "data" / "demo")
    cfg = load_config("hybrid-rrf").with_updates({"threshold.low_spread": None, "fusion.rank_bonus": []})
    lab = Lab(demo_store, ds.queries("dev"), ds.qrels("dev"), config=cfg, baseline=None, debounce_s=30.0)
    try:
        w = lab.controls["threshold.low_spread"]
        assert w.value == pytest.approx(0.001009, abs=1e-6)
        assert lab.set("fusion.rrf_k", 10)
        assert w.value == pytest.approx(1 / 11 - 1 / 15, abs=1e-6) and lab.session.config.threshold.low_spread is None
    finally:
        lab.close()
