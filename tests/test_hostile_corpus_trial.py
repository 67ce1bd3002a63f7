"""Defects from a user trial with hostile data (persona AI: a data platform feeding the toolkit whatever its
users export), each as the user met it: two exports in one folder sharing an id, ids a TREC reader splits,
escape sequences in file names and scopes, lone surrogates and NaN in JSON, a split without judged
queries, and URL-long ids in the compact view."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.pipeline import run_pipeline
from toolkit.render import render
from toolkit.runs import check_trec_ids
from toolkit.store import Store


def _hrt(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _jsonl(path, *rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_a_second_export_in_the_same_folder_that_shares_an_id_warns_that_it_replaced_the_first(tmp_path):
    """Daily exports sit in one folder. The second one's record "k1" replaced the first one's without a word:
    both files' records were taken for the same origin (folder + id)."""
    (tmp_path / "exports").mkdir()
    first = _jsonl(tmp_path / "exports" / "monday.jsonl", {"_id": "k1", "text": "zebra crossing"})
    second = _jsonl(tmp_path / "exports" / "tuesday.jsonl", {"_id": "k1", "text": "tiger stripes"})
    store = tmp_path / "s.duckdb"
    assert _hrt("ingest", first, "--store", store, "--no-embed").exit_code == 0
    r = _hrt("ingest", second, "--store", store, "--no-embed")
    assert r.exit_code == 0, r.output
    assert f"1 document(s) of {second} replaced documents with the same id ingested from {first}" in r.stderr
    # An update from another file is a thing a memory does (user trial BK): the advice must not be to keep both.
    assert "If they are updates of those documents, nothing is wrong; if both are to be kept" in r.stderr
    assert "1 of them replacing another source's document" in r.stdout
    # The same file again after an edit is an update of its own record: no warning.
    _jsonl(second, {"_id": "k1", "text": "tiger stripes, edited"})
    r = _hrt("ingest", second, "--store", store, "--no-embed")
    assert r.exit_code == 0 and "replaced" not in r.stderr, r.output


@pytest.mark.parametrize("ch", ["\x1c", "\x1d", "\x1e", "\x1f"])
def test_ids_that_python_reads_as_whitespace_are_refused_before_a_run(tmp_path, ch):
    """`hrt run` wrote a run whose id held U+001C; `hrt eval` then failed on it ("malformed line"): Python's
    splitlines breaks lines there and str.split() splits fields, the regex class did not see whitespace."""
    with pytest.raises(Exception, match="contains whitespace"):
        check_trec_ids(pl.Series([f"sep{ch}fs"]), "document", "corpus")
    ds = tmp_path / "ds"
    (ds / "qrels").mkdir(parents=True)
    _jsonl(ds / "corpus.jsonl", {"_id": f"sep{ch}fs", "text": "alpha beta"}, {"_id": "d2", "text": "gamma"})
    _jsonl(ds / "queries.jsonl", {"_id": "q1", "text": "alpha"})
    (ds / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td2\t1\n")
    out = tmp_path / "run.trec"
    r = _hrt("run", "--dataset", ds, "--split", "test", "--mode", "lexical", "--store", tmp_path / "s.duckdb", "--out", out)
    assert r.exit_code == 2 and "contains whitespace, which a TREC run file cannot hold" in r.stderr, r.output
    assert not out.exists()


def test_escape_sequences_in_file_names_and_scopes_reach_stderr_escaped(tmp_path):
    """`hrt ingest -v` named a skipped file, and `hrt search --scope` listed the stored scopes, with their OSC
    sequence raw: the terminal's title was set by a file name."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "ok.md").write_text("a note about OUTTOKEN")
    (notes / "bin\x1b]0;pwned\x07.txt").write_bytes(b"\x00\x01")
    store = tmp_path / "s.duckdb"
    r = _hrt("ingest", notes, "--store", store, "--no-embed", "-v")
    assert r.exit_code == 0, r.output
    assert "skipped bin\\x1b]0;pwned\\x07.txt: binary content" in r.stderr
    assert "\x1b" not in r.stderr and "\x07" not in r.stderr

    memories = _jsonl(tmp_path / "m.jsonl", {"_id": "a", "text": "OUTTOKEN here", "scope": "evil\x1b]0;scope\x07\u202e"})
    store2 = tmp_path / "m.duckdb"
    assert _hrt("ingest", memories, "--store", store2, "--no-embed").exit_code == 0
    r = _hrt("search", "OUTTOKEN", "--store", store2, "--scope", "nosuch", "--mode", "lexical")
    assert "the store has 1 scope: evil\\x1b]0;scope\\x07\\u202e" in r.stderr, r.output
    assert not any(c in r.stderr for c in "\x1b\x07\u202e")


def test_lone_surrogates_nan_and_overflowing_numbers_are_errors_naming_the_line_and_field(tmp_path):
    """A string cut in the middle of an emoji ("\\ud800" in JSON) ended the ingest with a traceback, whose own
    handler failed too; NaN, Infinity and 1e400 in metadata were stored as null without a word."""
    store = tmp_path / "s.duckdb"
    assert _hrt("ingest", _jsonl(tmp_path / "ok.jsonl", {"_id": "ok", "text": "kept \ud83d\ude00"}), "--store", store, "--no-embed").exit_code == 0
    cases = {
        '{"_id": "s1", "text": "lone \\ud800 here"}': "bad.jsonl:1: field `text` holds a lone UTF-16 surrogate",
        '{"_id": "s2", "text": "ok", "metadata": {"tags": ["x", "\\uDC00"]}}': "bad.jsonl:1: field `metadata.tags.1` holds a lone UTF-16 surrogate",
        '{"_id": "s3", "text": "ok", "score": NaN}': "bad.jsonl:1: NaN is not JSON",
        '{"_id": "s4", "text": "ok", "score": -Infinity}': "bad.jsonl:1: -Infinity is not JSON",
        '{"_id": "s5", "text": "ok", "size": 1e400}': "bad.jsonl:1: field `size`: inf (a number beyond the float range)",
    }
    for line, message in cases.items():
        bad = tmp_path / "bad.jsonl"
        bad.write_text(line + "\n", encoding="utf-8")
        r = _hrt("ingest", bad, "--store", store, "--no-embed")
        assert r.exit_code == 2 and message in r.stderr and "Traceback" not in r.output, (line, r.output)
    with Store(store, read_only=True) as st:  # nothing stored was lost, the valid pair of surrogates is text
        assert st.documents(["ok"])["text"].to_list() == ["kept \U0001f600"] and st.stats()["documents"] == 1


def test_a_split_without_judged_queries_stops_run_and_eval_instead_of_an_empty_run_and_nan(tmp_path):
    """qrels with a header only, or naming only unknown queries: `hrt run` crashed in the exact-token guard
    (a Null-typed filter of zero queries) and `hrt eval` printed nan and exited 0."""
    ds = tmp_path / "ds"
    (ds / "qrels").mkdir(parents=True)
    _jsonl(ds / "corpus.jsonl", {"_id": "d0", "text": "alpha beta"})
    _jsonl(ds / "queries.jsonl", {"_id": "q1", "text": "alpha"})
    (tmp_path / "r.trec").write_text("q1 Q0 d0 1 1.0 x\n")
    for qrels, why in [("query-id\tcorpus-id\tscore\n", "it holds no judgements"),
                       ("query-id\tcorpus-id\tscore\nq9\td0\t1\n", "its 1 judgement(s) name none of the 1 queries")]:
        (ds / "qrels" / "test.tsv").write_text(qrels)
        r = _hrt("run", "--dataset", ds, "--split", "test", "--mode", "lexical", "--store", tmp_path / "s.duckdb",
                 "--out", tmp_path / "out.trec")
        assert r.exit_code == 2 and f"split 'test' has no judged query to run or evaluate: {why}" in r.stderr, r.output
        r = _hrt("eval", "--dataset", ds, "--split", "test", "--run", tmp_path / "r.trec")
        assert r.exit_code == 2 and "no judged query" in r.stderr and "nan" not in r.stdout, r.output
    # The pipeline itself answers zero queries with empty frames, for every kind of preset.
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest([{"doc_id": "d0", "text": "alpha beta"}], embed=False)
        none = pl.DataFrame(schema={"qid": pl.Utf8, "text": pl.Utf8})
        for preset in ("bm25-only", "default"):
            res = run_pipeline(st, none, preset)
            assert res.final.is_empty() and res.per_query.is_empty()


def test_url_long_ids_are_shortened_in_the_middle_so_five_results_keep_their_text_within_the_bound():
    """Ids of 1,500 characters (URLs): the compact view showed one result on one header line and dropped four;
    a 10,000-character id left no snippet at all."""
    base = "https://example.com/search?q=" + "abc%20" * 250
    rows = [{"rank": i, "score": 1.0 - i / 10, "doc_id": f"{base}&page={i}", "source": f"{base}&page={i}",
             "title": f"Result {i}", "text": f"URLTOKEN appears in result {i} with enough words to make a snippet"}
            for i in range(1, 6)]
    out = render(rows, query="URLTOKEN")
    assert len(out) <= 2000 and "not shown" not in out, out
    heads = [ln for ln in out.splitlines() if ln[:2] in {f"{i}." for i in range(1, 6)}]
    assert len(heads) == 5
    for i, head in enumerate(heads, start=1):
        assert "[https://example.com/search" in head and f"&page={i}]" in head and "…" in head  # start, end
    assert out.count("URLTOKEN appears in result") == 5
    one = render([{**rows[0], "doc_id": "x" * 10_000}], query="URLTOKEN")
    assert "URLTOKEN appears in result 1" in one and len(one) <= 2000


def test_an_id_that_fits_is_shown_whole_for_a_reader_to_copy():
    """Ids are shortened only when the five results would not fit otherwise: an agent copies an id from the
    compact view into `hrt delete` (review of the fix above)."""
    url = "https://docs.example.com/section/" + "sub/" * 30 + "page.html"
    out = render([{"rank": 1, "score": 0.5, "doc_id": url, "source": url, "text": "hello there"}], query="hello")
    assert f"[{url}]" in out or url in out.splitlines()[0] and "…" not in out.splitlines()[0]


def test_a_beir_folder_after_its_own_corpus_file_is_not_another_source(tmp_path):
    """`hrt ingest data/corpus.jsonl`, an edit, then `hrt ingest data/` (a BEIR folder reading that same file):
    the records were taken for another folder's (review of the first fix)."""
    data = tmp_path / "data"
    data.mkdir()
    _jsonl(data / "corpus.jsonl", {"_id": "a", "text": "alpha"}, {"_id": "b", "text": "beta"})
    _jsonl(data / "queries.jsonl", {"_id": "q", "text": "alpha"})
    store = tmp_path / "s.duckdb"
    assert _hrt("ingest", data / "corpus.jsonl", "--store", store, "--no-embed").exit_code == 0
    _jsonl(data / "corpus.jsonl", {"_id": "a", "text": "alpha, edited"}, {"_id": "b", "text": "beta"})
    r = _hrt("ingest", data, "--store", store, "--no-embed")
    assert r.exit_code == 0 and "replaced" not in r.stderr and "1 changed" in r.stdout, r.output


def test_a_test_split_judging_nothing_does_not_stop_work_on_dev(tmp_path):
    """Tuning on dev asks whether dev shares queries with test; a test file judging no known query made that
    question an error (review of the empty-split fix)."""
    from toolkit.loaders import Dataset

    ds = tmp_path / "ds"
    (ds / "qrels").mkdir(parents=True)
    _jsonl(ds / "corpus.jsonl", {"_id": "d0", "text": "alpha"})
    _jsonl(ds / "queries.jsonl", {"_id": "q1", "text": "alpha"})
    (ds / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td0\t1\n")
    (ds / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq9\td0\t1\n")
    d = Dataset.open(ds)
    d.check_apart_from_test("dev")  # no error: nothing is shared
    assert d.shared_with_test("dev") == ([], 1) and len(d.qrels("dev")) == 1


def test_metadata_given_as_a_json_string_gets_the_same_checks(tmp_path):
    """`"metadata": "{\\"score\\": NaN}"` was stored as invalid JSON text, and a surrogate in it gave a message
    naming no line or field (review of the JSON fixes)."""
    store = tmp_path / "s.duckdb"
    for meta, message in [('{"score": NaN}', "m.jsonl:1: field `metadata`: NaN is not JSON"),
                          ('{"tag": "\\ud800"}', "m.jsonl:1: field `metadata.tag` holds a lone UTF-16 surrogate")]:
        f = _jsonl(tmp_path / "m.jsonl", {"_id": "a", "text": "alpha", "metadata": meta})
        r = _hrt("ingest", f, "--store", store, "--no-embed")
        assert r.exit_code == 2 and message in r.stderr, r.output


def test_a_closed_stderr_still_ends_in_the_exit_code_of_the_error(tmp_path):
    """With file descriptor 2 closed (`2>&-`), Python has no sys.stderr: wrapping it crashed every message."""
    import os
    import subprocess
    import sys

    code = "import sys; from toolkit.cli import main; sys.argv = ['hrt', 'search', 'q', '--store', sys.argv[1]]; main()"
    r = subprocess.run([sys.executable, "-c", code, str(tmp_path / "missing.duckdb")], preexec_fn=lambda: os.close(2),
                       capture_output=False, stdout=subprocess.DEVNULL, timeout=120)
    assert r.returncode == 2


def test_prune_refused_for_a_file_skipped_this_time_says_why_and_what_to_do(tmp_path):
    """A note that became binary made `--prune` advise "give this ingest the --include of the one that added them",
    which does not fit: the file was skipped this time, and needs fixing or deleting. An emptied note is a deleted
    one (a fresh ingest would not hold it; user trial AS: refusing it stopped every later sync): pruned."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(3):
        (notes / f"n{i}.md").write_text(f"note {i} text")
    store = tmp_path / "s.duckdb"
    assert _hrt("ingest", notes, "--store", store, "--no-embed").exit_code == 0
    (notes / "n1.md").write_bytes(b"\x00\x01\x02binary\x00" * 20)
    r = _hrt("ingest", notes, "--store", store, "--no-embed", "--prune")
    assert r.exit_code == 2, r.output
    assert "(e.g. 'n1.md', skipped: " in r.stderr and "fix those files, or delete them" in r.stderr
    with Store(store, read_only=True) as st:
        assert st.stats()["documents"] == 3  # nothing was changed
    (notes / "n1.md").write_text("")
    r = _hrt("ingest", notes, "--store", store, "--no-embed", "--prune")
    assert r.exit_code == 0 and "1 removed" in r.output, r.output
    with Store(store, read_only=True) as st:
        assert sorted(st.doc_sources()["doc_id"]) == ["n0.md", "n2.md"]
