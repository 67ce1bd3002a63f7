"""User trial AT: a consultant loading clients' files made on Windows and macOS (Notepad, Excel, VS Code, joined with
`cat`) into the toolkit. Clean files in other line ends, encodings and cases gave the same numbers; each test is a
place where they did not, or where the message did not say what was different."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.errors import InputError
from toolkit.loaders import Dataset, load_corpus


def _hrt(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_notes_saved_with_windows_or_mac_line_ends_are_the_same_documents(tmp_path):
    """A CRLF copy of the same notes was 23 changed documents with one chunk more, and other results for 14 of 40
    queries; a JSONL text holding \\r\\n chunked otherwise than its \\n twin."""
    text = "# Deploy\n\nThe deploy failed.\nRetry with backoff.\n"
    for name, ends in (("lf", "\n"), ("crlf", "\r\n"), ("cr", "\r")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "a.md").write_bytes(text.replace("\n", ends).encode())
    docs = {name: load_corpus(tmp_path / name)[0] for name in ("lf", "crlf", "cr")}
    assert docs["lf"]["text"] == docs["crlf"]["text"] == docs["cr"]["text"] == text
    assert docs["lf"]["title"] == docs["crlf"]["title"] == "Deploy"
    (rec,) = load_corpus([{"_id": "x", "title": "T\r\n", "text": "one\r\ntwo\rthree"}])
    assert (rec["title"], rec["text"]) == ("T\n", "one\ntwo\nthree")


def test_a_spreadsheet_day_number_or_a_year_is_not_read_as_seconds_since_1970():
    """Excel's 45622 (26 Nov 2024) was read as 1970-01-01 12:40 and the recency prior scored the note 0; the same
    digits as text were refused. A number is a timestamp only with the 9 to 11 digits text needs; a shorter one (a
    day number, a year, a duration in a `_time` field) stays a number, with a warning, and the ingest goes on."""
    from toolkit.metatypes import typed_values

    with pytest.warns(UserWarning, match=r"field `date`: a number of fewer than 9 digits is not read as a date .*spreadsheet"):
        (doc,) = load_corpus([{"_id": "a", "text": "t", "date": 45622}])
    assert doc["metadata"]["date"] == 45622
    with pytest.warns(UserWarning, match="kept as a number, which no recency prior reads"):
        assert typed_values({"response_time": 0.35, "created_at": 2024}, "r") == [
            ("response_time", 0.35, None, "0.35"), ("created_at", 2024.0, None, "2024")]
    assert typed_values({"date": 1_732_600_000}, "r")[0][2].year == 2024
    with pytest.raises(InputError, match="looks like milliseconds"):  # still refused: 13 digits are no date either
        load_corpus([{"_id": "a", "text": "t", "date": 1_732_600_000_000}])


def test_collection_files_are_read_whatever_the_case_of_their_extension(tmp_path):
    """`hrt ingest up.JSONL` was refused, and its advice (--include '*.JSONL') ingested the corpus as one text blob."""
    up = tmp_path / "UP.JSONL"
    up.write_text(json.dumps({"_id": "a", "text": "alpha"}) + "\n" + json.dumps({"_id": "b", "text": "beta"}) + "\n")
    assert [d["doc_id"] for d in load_corpus(up)] == ["a", "b"]
    r = _hrt("ingest", up, "--store", tmp_path / "s.duckdb", "--no-embed")
    assert r.exit_code == 0 and "2 documents" in r.output, r.output


def test_exclude_matches_whatever_the_case_and_a_pattern_that_matches_nothing_is_named(tmp_path, caplog):
    """`--exclude '*.md'` kept NOTES.MD (while `.MD` reads as a note), and a Windows pattern `sub\\*` excluded nothing
    without a word."""
    (tmp_path / "w" / "sub").mkdir(parents=True)
    (tmp_path / "w" / "NOTES.MD").write_text("loud\n")
    (tmp_path / "w" / "sub" / "a.txt").write_text("quiet\n")
    docs = load_corpus(tmp_path / "w", exclude=("*.md", "sub\\*"))
    assert [d["doc_id"] for d in docs] == ["sub/a.txt"]
    assert "--exclude 'sub\\*' matches nothing in" in caplog.text and "take /, not \\" in caplog.text
    assert "'*.md' matches nothing" not in caplog.text


def test_a_config_in_a_windows_encoding_is_an_error_naming_it_and_a_byte_order_mark_is_read(tmp_path):
    """A YAML config saved as cp1252 ended `hrt run` in a UnicodeDecodeError traceback; a JSON config with a BOM (as
    Notepad saves it) was "invalid JSON: Unexpected UTF-8 BOM" while YAML with one was read."""
    from toolkit.config import load_config

    bad = tmp_path / "c.yaml"
    bad.write_bytes("name: x\ndescription: \u201ck1\u201d caf\u00e9\n".encode("cp1252"))
    with pytest.raises(InputError, match=r"c\.yaml:2: not UTF-8 text: save the config as UTF-8"):
        load_config(bad)
    bom = tmp_path / "c.json"
    bom.write_bytes(b"\xef\xbb\xbf" + json.dumps({"extends": "bm25-only", "output": {"n": 7}}).encode())
    assert load_config(bom).output.n == 7


def test_qrels_and_jsonl_from_other_tools_are_read_or_named_for_what_they_are(tmp_path):
    """Two qrels files joined (a second header in the middle) stopped at "grade 'score' is not a number"; a CSV qrels
    was "a header this reader does not know"; a JSONL with classic Mac line ends was "Extra data", and a bad control
    character "... at at column"."""
    from toolkit.runs import read_qrels

    q = tmp_path / "q.tsv"
    q.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nquery-id\tcorpus-id\tscore\nq2\td2\t1\n")
    assert read_qrels(q).rows() == [("q1", "d1", 1), ("q2", "d2", 1)]
    q.write_text("query-id,corpus-id,score\nq1,d1,1\n")
    with pytest.raises(InputError, match="separated by ',': qrels take tabs"):
        read_qrels(q)
    j = tmp_path / "c.jsonl"
    j.write_bytes(b'{"_id": "a", "text": "x"}\r{"_id": "b", "text": "y"}\r')
    with pytest.raises(InputError, match="lone CR \\(classic Mac\\)"):
        load_corpus(j)
    j.write_bytes(b'{"_id": "a", "text": "x\ty\x01"}\n')
    with pytest.raises(InputError) as e:
        load_corpus(j)
    assert "at at" not in str(e.value)


def test_judgement_ids_written_on_a_mac_say_how_they_differ(tmp_path):
    """Qrels written on macOS (NFD) beside an NFC corpus: the warning named 'requête-01' as unknown, printed exactly like
    the id queries.jsonl has; nothing said the two differ in Unicode normalisation."""
    root = tmp_path / "ds"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "caf\u00e9-1", "text": "coffee"}) + "\n")
    (root / "queries.jsonl").write_text(json.dumps({"_id": "requ\u00eate-01", "text": "coffee?"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("requ\u00eate-01\tcafe\u0301-1\t1\n")
    problems = Dataset.open(root).qrels_problems("test")
    assert any("differs from 'café-1' only by Unicode normalisation" in p for p in problems), problems


def test_a_collection_without_a_text_field_says_what_hrt_run_can_do(tmp_path):
    """`hrt run` on a corpus whose text is under `Text` said "name it with --text-field", an option it does not have."""
    root = tmp_path / "ds"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "a", "Text": "coffee"}) + "\n")
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q", "text": "coffee?"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("q\ta\t1\n")
    r = _hrt("run", "--dataset", root, "--mode", "lexical", "--store", tmp_path / "s.duckdb", "--out", tmp_path / "r.trec")
    assert r.exit_code != 0 and "the field `text` in corpus.jsonl" in r.output and "hrt ingest --text-field" in r.output, r.output


def test_review_utf32_is_binary_a_pandas_index_kept_as_a_column_loads_and_depth_past_the_cap_is_said(tmp_path, corpus_file):
    """The review of this trial's fixes: a UTF-32 file (its BOM starts as UTF-16's) was stored as NUL-laced text; a frame
    indexed by `docno` that kept the column crashed; `hrt run --depth 2000` ended in a pydantic bound."""
    import pandas as pd
    from conftest import write_beir

    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "u32.txt").write_bytes("Hello UTF-32 text\n".encode("utf-32"))
    (tmp_path / "n" / "ok.md").write_text("fine\n")
    docs = load_corpus(tmp_path / "n")
    assert [d["doc_id"] for d in docs] == ["ok.md"] and docs.skipped[0].reason == "binary content (NUL bytes)"
    df = pd.DataFrame({"docno": ["d1", "d2"], "text": ["a", "b"]})
    assert [d["doc_id"] for d in load_corpus(df.set_index("docno", drop=False))] == ["d1", "d2"]
    ds = write_beir(tmp_path / "ds", corpus_file)
    r = _hrt("run", "--dataset", ds, "--mode", "lexical", "--depth", 2000, "--store", tmp_path / "s.duckdb", "--out", tmp_path / "r.trec")
    assert r.exit_code == 0 and "--depth 2000: a query keeps at most 1000 results" in r.output, r.output


def test_space_separated_qrels_of_three_fields_read_and_a_windows_path_is_named(tmp_path):
    """`qid docid rel` separated by spaces was refused ("expected 4 fields") while TREC's four were read; `--store
    'out\\mem.duckdb'` made a file with a backslash in its name in the working folder, without a word."""
    from toolkit.runs import read_qrels

    q = tmp_path / "q.txt"
    q.write_text("q1 d1 1\nq2  d2 2\n")
    assert read_qrels(q).rows() == [("q1", "d1", 1), ("q2", "d2", 2)]
    q.write_text("qid docid rel\nq1 d1 1\n")
    assert read_qrels(q).rows() == [("q1", "d1", 1)]
    (tmp_path / "n").mkdir()
    (tmp_path / "n" / "a.md").write_text("alpha\n")
    r = _hrt("ingest", tmp_path / "n", "--store", str(tmp_path) + "/out\\mem.duckdb", "--no-embed")
    assert r.exit_code == 0 and "holds a backslash, which is part of the file name here" in r.output, r.output
