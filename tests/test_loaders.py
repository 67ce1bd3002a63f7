import json

import pytest

from toolkit.errors import InputError
from toolkit.loaders import Dataset, load_corpus, load_queries


def test_jsonl_error_names_file_and_line(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n')
    with pytest.raises(InputError, match=r"c\.jsonl:2: malformed JSON"):
        load_corpus(p)


def test_duplicate_ids_name_both_lines(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_text('{"_id": "a", "text": "x"}\n\n{"_id": "a", "text": "y"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:3: duplicate document id 'a' \(first seen at .*c\.jsonl:1\)"):
        load_corpus(p)


def test_non_utf8_and_empty(tmp_path):
    p = tmp_path / "c.jsonl"
    p.write_bytes(b'{"_id": "a", "text": "ok"}\n{"_id": "b", "text": "caf\xe9"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:2: not valid UTF-8"):
        load_corpus(p)
    e = tmp_path / "e.jsonl"
    e.write_text("\n")
    with pytest.raises(InputError, match="empty"):
        load_corpus(e)
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "bad.md").write_bytes(b"# Title\nline two \xff\n")
    with pytest.raises(InputError, match=r"bad\.md:2: not valid UTF-8"):
        load_corpus(folder)


def test_folder_parquet_and_beir(tmp_path):
    import polars as pl

    root = tmp_path / "notes"
    (root / "ops").mkdir(parents=True)
    (root / "ops" / "runbook.md").write_text("# Restart the queue\nSteps...")
    (root / "readme.txt").write_text("hello")
    (root / "image.png").write_bytes(b"\x89PNG")
    docs = {d["doc_id"]: d for d in load_corpus(root)}
    assert set(docs) == {"ops/runbook.md", "readme.txt"}
    assert docs["ops/runbook.md"]["source"] == "ops/runbook.md" and docs["ops/runbook.md"]["scope"] == "ops"
    assert docs["ops/runbook.md"]["title"] == "Restart the queue"

    pq = tmp_path / "c.parquet"
    pl.DataFrame({"id": ["1", "2"], "text": ["a", "b"], "metadata": [json.dumps({"scope": "s"}), "{}"]}).write_parquet(pq)
    d = load_corpus(pq)
    assert [x["doc_id"] for x in d] == ["1", "2"] and d[0]["scope"] == "s"

    beir = tmp_path / "beir"
    (beir / "qrels").mkdir(parents=True)
    (beir / "corpus.jsonl").write_text(json.dumps({"_id": "01", "title": "t", "text": "x", "metadata": {"scope": "c1"}}) + "\n")
    (beir / "queries.jsonl").write_text(
        json.dumps({"_id": "007", "text": "what?", "metadata": {"scope": "c1"}}) + "\n" + json.dumps({"_id": "8", "text": "other"}) + "\n"
    )
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n007\t01\t1\n")
    ds = Dataset.open(beir)
    assert load_corpus(beir)[0]["doc_id"] == "01"
    qs = ds.queries("test")
    assert qs["qid"].to_list() == ["007"] and qs["scope"].to_list() == ["c1"]
    with pytest.raises(InputError, match="no qrels for split 'dev'"):
        ds.qrels("dev")


def test_empty_query_is_rejected(tmp_path):
    p = tmp_path / "q.jsonl"
    p.write_text('{"_id": "1", "text": "ok"}\n{"_id": "2", "text": "  "}\n')
    with pytest.raises(InputError, match=r"q\.jsonl:2: query .2. has no text"):
        load_queries(p)


def test_records_and_frames_get_the_defaults_and_errors_of_a_jsonl_line():
    """Documents built in Python (dicts, polars or pandas frames) are read as a JSONL line is: optional fields
    defaulted, and a missing id or text named by record index and field."""
    import pandas as pd
    import polars as pl

    want = [{"doc_id": "a", "source": "a", "scope": None, "title": "", "text": "hello ECONNREFUSED", "metadata": {}}]
    assert list(load_corpus([{"doc_id": "a", "text": "hello ECONNREFUSED"}])) == want
    assert list(load_corpus(pl.DataFrame({"doc_id": ["a"], "text": ["hello ECONNREFUSED"]}))) == want
    assert list(load_corpus(pd.DataFrame({"_id": ["a"], "text": ["hello ECONNREFUSED"], "title": [float("nan")]}))) == want
    got = load_corpus([{"_id": 7, "title": "T", "text": "x", "metadata": '{"scope": "ops"}'}, {"id": "e", "text": ""}])
    assert [(d["doc_id"], d["scope"], d["title"]) for d in got] == [("7", "ops", "T")]
    assert [(s.where, s.reason.split(" (")[0]) for s in got.skipped] == [("record 1", "empty document")]
    with pytest.raises(InputError, match=r"record 1: missing document id \(one of `_id`"):
        load_corpus([{"_id": "a", "text": "x"}, {"text": "y"}])
    with pytest.raises(InputError, match=r"row 0, document 'a': no text field `text` or `contents` \(the record has: doc_id, title\)"):
        load_corpus(pl.DataFrame({"doc_id": ["a"], "title": ["t"]}))
    with pytest.raises(InputError, match=r"record 1: duplicate document id 'a' \(first seen at record 0\)"):
        load_corpus([{"_id": "a", "text": "x"}, {"_id": "a", "text": "y"}])
    with pytest.raises(InputError, match="record 0: expected a dict"):
        load_corpus(["just text"])


def test_a_byte_order_mark_is_not_part_of_a_note_or_a_jsonl_record(tmp_path):
    """Windows editors start files with a UTF-8 BOM: it must not end up in a title, a text or a first id."""
    bom = b"\xef\xbb\xbf"
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_bytes(bom + "# Title here\ncafé\n".encode())
    (notes / "b.txt").write_bytes(bom + b"plain\n\xff\n")
    with pytest.raises(InputError, match=r"b\.txt:2: not valid UTF-8"):  # the line is still right past the BOM
        load_corpus(notes)
    (notes / "b.txt").write_bytes(bom + b"plain\n")
    docs = {d["doc_id"]: d for d in load_corpus(notes)}
    assert docs["a.md"]["title"] == "Title here" and docs["a.md"]["text"] == "# Title here\ncafé\n"
    assert docs["b.txt"]["text"] == "plain\n"
    corpus, queries = tmp_path / "c.jsonl", tmp_path / "q.jsonl"
    corpus.write_bytes(bom + b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": "y"}\n')
    queries.write_bytes(bom + b'{"_id": "q1", "text": "x?"}\n')
    assert [d["doc_id"] for d in load_corpus(corpus)] == ["a", "b"]
    assert load_queries(queries)["qid"].to_list() == ["q1"]
    corpus.write_bytes(b'{"_id": "a", "text": "x"}\n' + bom + b'{"_id": "b", "text": "y"}\n')
    with pytest.raises(InputError, match=r"c\.jsonl:2: malformed JSON"):  # only a file starts with a BOM
        load_corpus(corpus)


def test_a_note_with_nul_bytes_is_skipped_as_binary(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "ok.md").write_text("# ok\nfine\n")
    (root / "dump.md").write_bytes(b"# looks like markdown\n\x00\x01\x02 core dump")
    (root / "wide.txt").write_bytes("hi".encode("utf-16"))  # with its byte order mark: text (user trial AT)
    (root / "bare16.txt").write_bytes("hi".encode("utf-16-le"))  # without: nothing says it is text
    corpus = load_corpus(root)
    assert [(d["doc_id"], d["text"]) for d in corpus] == [("ok.md", "# ok\nfine\n"), ("wide.txt", "hi")]
    reasons = {s.where: s.reason for s in corpus.skipped}
    assert reasons == {"dump.md": "binary content (NUL bytes)", "bare16.txt": "binary content (NUL bytes)"}
    assert corpus.skipped_summary() == "2 not indexed: 2 binary content"


def test_a_stray_corpus_jsonl_does_not_make_a_notes_folder_a_beir_collection(tmp_path):
    """BEIR is corpus.jsonl with queries.jsonl and/or qrels/ (or corpus.jsonl alone). A corpus.jsonl among notes
    used to drop every note without a word; the notes are read and corpus.jsonl is named with the reason."""
    notes = tmp_path / "notes"
    (notes / "ops").mkdir(parents=True)
    for i in range(6):
        (notes / f"n{i}.md").write_text(f"# note {i}\nbody {i}\n")
    (notes / "ops" / "runbook.txt").write_text("restart the queue\n")
    (notes / "corpus.jsonl").write_text('{"_id": "x", "text": "a record"}\n')
    corpus = load_corpus(notes)
    assert len(corpus) == 7 and "x" not in {d["doc_id"] for d in corpus}
    assert [s.where for s in corpus.skipped] == ["corpus.jsonl"]
    assert "no queries.jsonl or qrels/" in corpus.skipped[0].reason
    assert [d["doc_id"] for d in load_corpus(notes / "corpus.jsonl")] == ["x"]
    assert [d["doc_id"] for d in load_corpus(notes, include=["*.py"])] == [d["doc_id"] for d in corpus]

    alone = tmp_path / "alone"
    alone.mkdir()
    (alone / "corpus.jsonl").write_text('{"_id": "x", "text": "a record"}\n')
    (alone / ".DS_Store").write_bytes(b"\x00")
    (alone / "s.duckdb").write_bytes(b"\x00store")  # `hrt ingest alone --store alone/s.duckdb`, then again
    (alone / "LICENSE").write_text("CC0\n")
    assert [d["doc_id"] for d in load_corpus(alone)] == ["x"]
    (alone / "tool.py").write_text("x = 1\n")
    assert [d["doc_id"] for d in load_corpus(alone, include=["*.py"])] == ["LICENSE", "tool.py"]  # --include: notes
    for extra in ("queries.jsonl", "qrels"):  # a real collection: its README is documentation, as before
        beir = tmp_path / extra
        beir.mkdir()
        (beir / "corpus.jsonl").write_text('{"_id": "x", "text": "a record"}\n')
        (beir / "README.md").write_text("# about this collection\n")
        (beir / extra).mkdir() if extra == "qrels" else (beir / extra).write_text('{"_id": "q", "text": "?"}\n')
        got = load_corpus(beir)
        assert [d["doc_id"] for d in got] == ["x"] and got.skipped == []
        with pytest.raises(InputError, match="apply to a folder of files"):
            load_corpus(beir, include=["*.md"])
