"""User trial AM: an applied researcher who brings their own collection (graded judgements with zeros, TREC and
BEIR qrels, padded ids, a judged document the ingest skips) and wants numbers a paper can print. Every value
agreed with ir_measures and ranx; each test is a place where the output left out what the numbers stood on."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import DOCS

from toolkit.cli import main
from toolkit.config import load_config
from toolkit.errors import InputError
from toolkit.loaders import Dataset, load_queries
from toolkit.runs import read_qrels, write_run
from toolkit.tune import ANCHORS, inert_in_space


def _collection(root, *, empty_judged: bool = False):
    """The six DOCS (plus an empty record when asked), four test queries graded 0-3 with zeros (pooled), one of
    them with nothing relevant at grade 2, and a judgement of a query the query file lacks."""
    (root / "qrels").mkdir(parents=True)
    docs = [*DOCS, *([{"_id": "d7", "title": "", "text": ""}] if empty_judged else [])]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    qs = [("q1", "deploy failed ECONNREFUSED"), ("q2", "retry backoff"), ("q3", "pool size production"), ("q4", "stripe 429")]
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in qs))
    grades = [("q1", "d1", 3), ("q1", "d5", 0), ("q2", "d2", 2), ("q2", "d6", 1), ("q3", "d3", 1), ("q3", "d4", 0),
              ("q4", "d6", 2), ("q9", "d1", 1), *([("q2", "d7", 2)] if empty_judged else [])]
    (root / "qrels" / "test.tsv").write_text("".join(f"{q} 0 {d} {g}\n" for q, d, g in grades))  # TREC qrels lines
    return root


def _runs(tmp_path, ds):
    """Two lexical runs of the collection: BM25, and BM25 with its two first places swapped."""
    r = CliRunner().invoke(main, ["run", "--dataset", str(ds), "--split", "test", "--config", "bm25-only",
                                  "--store", str(tmp_path / "s.duckdb"), "--out", str(tmp_path / "a.trec")])
    assert r.exit_code == 0, r.output
    from toolkit.runs import read_run

    a = read_run(tmp_path / "a.trec")
    b = a.with_columns(pl.when(pl.col("rank") <= 2).then(3 - pl.col("rank")).otherwise(pl.col("rank")).alias("rank"))
    b = b.with_columns((1.0 / pl.col("rank")).alias("score"))
    write_run(b, tmp_path / "b.trec")
    return r


def test_eval_says_what_counted_as_relevant_and_how_many_queries_in_every_format(tmp_path):
    """The relevance threshold was nowhere in the table, the JSON or the report: a paper's table must say
    "relevant = grade >= 2"."""
    ds = _collection(tmp_path / "c")
    _runs(tmp_path, ds)
    a, b = str(tmp_path / "a.trec"), str(tmp_path / "b.trec")
    base = ["eval", "--dataset", str(ds), "--split", "test", "--run", a, "--run", b, "--rel-threshold", "2"]
    table = CliRunner().invoke(main, base)
    assert table.exit_code == 0, table.output
    assert "queries: 4 judged in test; relevant: grade >= 2 on the binary measures" in table.output
    doc = json.loads(CliRunner().invoke(main, [*base, "--format", "json"]).stdout)
    assert doc["rel_threshold"] == 2 and doc["relevant"].startswith("grade >= 2") and doc["queries"] == 4
    assert set(doc["Judged@10"]) == {a, b}
    # A paper's table: CSV and LaTeX, p (Holm) against the baseline beside the second run's values.
    csv = CliRunner().invoke(main, [*base, "--format", "csv"])
    lines = csv.stdout.splitlines()
    assert lines[0] == "run,nDCG@10,nDCG@10 p_holm,R@5,R@5 p_holm,R@10,R@10 p_holm,MRR@10,MRR@10 p_holm"
    assert lines[1].startswith(f"{a},") and lines[2].startswith(f"{b},") and len(lines) == 3
    assert "relevant: grade >= 2" in csv.stderr
    tex = CliRunner().invoke(main, [*base, "--format", "latex"]).stdout
    assert tex.startswith("\\begin{tabular}{lrrrr}") and "\\toprule" in tex and "% * = p (Holm) <= 0.05 against" in tex
    assert a.replace("_", "\\_") in tex


def test_the_same_run_twice_is_refused_and_the_baseline_is_matched_as_a_file(tmp_path, monkeypatch):
    ds = _collection(tmp_path / "c")
    _runs(tmp_path, ds)
    monkeypatch.chdir(tmp_path)
    r = CliRunner().invoke(main, ["eval", "--dataset", str(ds), "--split", "test", "--run", "a.trec", "--run", "./a.trec"])
    assert r.exit_code == 2 and "is the same file as --run 'a.trec'" in r.output
    # `./b.trec` names the file given as `b.trec` (it was refused as "not one of the --run files")
    r = CliRunner().invoke(main, ["eval", "--dataset", str(ds), "--split", "test", "--run", "a.trec", "--run", "b.trec",
                                  "--baseline", "./b.trec"])
    assert r.exit_code == 0, r.output
    assert "p (Holm) vs b.trec" in r.output


def test_shallow_pooled_judgements_are_said_and_judged_at_k_is_a_measure(tmp_path):
    """Qrels that judge non-relevant documents too (a pool) but miss most of a run's top 10: the values are lower
    bounds, and Judged@10 (ir_measures' measure) was 'unknown'."""
    ds = _collection(tmp_path / "c")
    # Ten places per query, the judged documents among unjudged ones (a system the pool never saw).
    docs = ["d1", "d2", "d3", "d6", *(f"new{i}" for i in range(6))]
    write_run(pl.DataFrame({"qid": [q for q in ("q1", "q2", "q3", "q4") for _ in docs], "doc_id": docs * 4,
                            "rank": list(range(1, 11)) * 4, "score": [1.0 / r for r in range(1, 11)] * 4}), tmp_path / "a.trec")
    r = CliRunner().invoke(main, ["eval", "--dataset", str(ds), "--split", "test", "--run", str(tmp_path / "a.trec"),
                                  "--measures", "nDCG@10,Judged@10"])
    assert r.exit_code == 0, r.output
    assert "only 12% of its top 10 documents are judged (Judged@10 0.125)" in r.stderr and "lower bounds" in r.stderr
    assert float(r.stdout.splitlines()[1].split()[-1]) == 0.125  # q1: d1 of 10 judged; q2: d2, d6; q3: d3; q4: d6
    # Relevant-only qrels (BEIR's, LoCoMo's) leave every top 10 mostly unjudged by design: no note.
    (ds / "qrels" / "test.tsv").write_text("q1 0 d1 3\nq2 0 d2 2\nq3 0 d3 1\nq4 0 d6 2\n")
    r = CliRunner().invoke(main, ["eval", "--dataset", str(ds), "--split", "test", "--run", str(tmp_path / "a.trec")])
    assert r.exit_code == 0 and "judged (Judged@10" not in r.stderr


def test_a_judged_document_the_ingest_skipped_is_named_by_run(tmp_path):
    """An empty judged record: `hrt run` and `hrt eval` exited 0 without a word (the skip summary only shows when
    the ingest changes something)."""
    ds = _collection(tmp_path / "c", empty_judged=True)
    for _ in range(2):  # the second run finds the store as it was: still said
        r = _runs(tmp_path, ds)
        assert "1 judged document(s) of the test qrels are not in the store (e.g. 'd7': empty document" in r.stderr
        assert "count as misses" in r.stderr


def test_the_report_says_its_queries_threshold_and_what_was_dropped(tmp_path):
    """The HTML held no query count, no threshold, nothing about a judgement of an unknown query or a query with
    nothing relevant; and a --group-by field no query has gave one "None" group in silence."""
    ds = _collection(tmp_path / "c", empty_judged=True)
    out = tmp_path / "rep.html"
    args = ["report", "--dataset", str(ds), "--split", "test", "--config", "bm25-only", "--config", "hybrid-rrf",
            "--store", str(tmp_path / "s.duckdb"), "--latency-sample", "0", "--rel-threshold", "2", "--out", str(out)]
    r = CliRunner().invoke(main, [*args, "--group-by", "category"])
    assert r.exit_code == 2 and "group by 'category': no query has that metadata field" in r.output
    assert not out.exists()
    r = CliRunner().invoke(main, args)
    assert r.exit_code == 0, r.output
    page = out.read_text()
    assert "Queries: <b>4</b> judged in test" in page and "Relevant: grade &gt;= 2 on the binary measures" in page
    assert "1 of 4 judged queries have no document graded &gt;= 2 (q3)" in page
    assert "name 1 query id(s) not in queries.jsonl (e.g. &#x27;q9&#x27;" in page
    assert "judged document(s) of the test qrels are not in the store (e.g. &#x27;d7&#x27;" in page


def test_qrels_and_queries_as_other_tools_write_them(tmp_path):
    """`qrels/test.qrels` was "no qrels (available: none)"; `query_id` in queries.jsonl gave "0 queries"; a header
    `qid docid rel` stopped at "relevance grade 'rel' is not a number"."""
    ds = _collection(tmp_path / "c")
    (ds / "qrels" / "test.tsv").rename(ds / "qrels" / "test.qrels")
    with pytest.raises(InputError, match=r"test\.qrels is not read: a split's judgements are qrels/<split>\.tsv"):
        Dataset.open(ds).qrels("test")
    (ds / "queries.jsonl").write_text(json.dumps({"query_id": "001", "text": "deploy"}) + "\n")
    assert load_queries(ds)["qid"].to_list() == ["001"]
    for header in ("qid\tdocid\trel", "query_id iteration doc_id relevance"):
        row = "001\td1\t2" if "\t" in header else "001 0 d1 2"
        (tmp_path / "h.tsv").write_text(f"{header}\n{row}\n")
        assert read_qrels(tmp_path / "h.tsv").rows() == [("001", "d1", 2)]
    (tmp_path / "h.tsv").write_text("query\tdocument\tgrade\n001\td1\t2\n")
    with pytest.raises(InputError, match=r"h\.tsv:1: 'query\\tdocument\\tgrade' reads as a header this reader does not know"):
        read_qrels(tmp_path / "h.tsv")


def test_tune_leaves_out_what_cannot_move_the_base_and_plain_rrf_is_plain(tmp_path):
    """A bm25-only base: 40 trials of dense weight and alpha, all scoring the same. And `default`'s "plain rrf"
    kept its per-query dense weight, scoring the base's value exactly."""
    bm25 = load_config("bm25-only")
    space = {"fusion.dense_weight": {"float": [0.1, 3]}, "fusion.alpha": {"float": [0, 1]}}
    assert set(inert_in_space(space, bm25)) == set(space)
    from toolkit.tune import tune

    with pytest.raises(InputError, match="nothing in it can change the base's ranking.*one list is fused"):
        tune(None, {"q": "x"}, pl.DataFrame({"qid": ["q"], "doc_id": ["d"], "rel": [1]}), base=bm25, space=space)
    routed = load_config("qmd").with_updates({"routing.enabled": False})
    assert inert_in_space({"routing.technical_lexical_boost": {"float": [1, 4]}, "fusion.rrf_k": {"int": [5, 90]}}, routed) == {
        "routing.technical_lexical_boost": "routing.enabled is false"}
    # A learned model reorders even one list (the review: bm25-only 0.627, learned 0.681 on the demo's dev split).
    assert inert_in_space({"fusion.method": ["rrf", "learned"]}, bm25) == {}
    # Some fields inert, others not: those are left out with a warning naming them, and the search runs.
    assert set(inert_in_space({**space, "threshold.min_score": {"float": [0, 0.5]}}, bm25)) == set(space)
    assert ANCHORS["plain rrf"]["adapt.dense_gap"] is False
    assert load_config("default").with_updates(ANCHORS["plain rrf"]).adapt.dense_gap is False
