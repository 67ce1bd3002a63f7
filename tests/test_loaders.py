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
    with pytest.raises(InputError, match=r"q\.jsonl:2: query '2' has an empty text"):
        load_queries(p)
