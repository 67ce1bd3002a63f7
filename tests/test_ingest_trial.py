"""Defects from a user trial of ingest and the store, each as the user met it: what they typed or called, and
what they now see. Flat records keep their fields as metadata; a field of the wrong type is an error, not
text; a data file given as --store is refused; a store created by mistake is not left behind; a store only
partly embedded says so; a single note file is a corpus."""

from __future__ import annotations

import datetime
import json

import pandas as pd
import polars as pl
import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.errors import InputError, StoreError
from toolkit.loaders import load_corpus
from toolkit.store import Store


def _jsonl(path, *rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _ingest(*args):
    return CliRunner().invoke(main, ["ingest", *map(str, args), "--no-embed"])


# 1. Top-level fields of a record are metadata -------------------------------------------------------------

def test_flat_record_fields_are_stored_as_metadata_and_typed(tmp_path):
    """Exported memories are flat ({"id", "text", "created_at", "priority"}): those fields were dropped, so the
    recency and priority priors went quietly neutral. They are metadata now, typed like `metadata` fields."""
    src = _jsonl(tmp_path / "flat.jsonl",
                 {"id": "m1", "text": "Flat record about kiwis", "created_at": "2024-01-25", "priority": "P0", "user": "alice"},
                 {"id": "m2", "text": "Nested and flat", "priority": "P1", "metadata": {"team": "ops", "priority": "P1"}})
    store = tmp_path / "s.duckdb"
    r = _ingest(src, "--store", store)
    assert r.exit_code == 0, r.output
    with Store(store, read_only=True) as st:
        meta = {d: json.loads(m) for d, m in st.documents().select("doc_id", "metadata").rows()}
        assert meta == {"m1": {"created_at": "2024-01-25", "priority": "P0", "user": "alice"},
                        "m2": {"team": "ops", "priority": "P1"}}
        assert st.value_fields() == {"created_at": "date", "priority": "text", "team": "text", "user": "text"}


def test_a_bad_date_in_a_flat_record_is_an_error_naming_the_line_and_field(tmp_path):
    src = _jsonl(tmp_path / "flat.jsonl", {"id": "ok", "text": "fine"},
                 {"id": "flat1", "text": "Flat record about kiwis", "date": "not a date at all", "priority": "P0"})
    store = tmp_path / "s.duckdb"
    r = _ingest(src, "--store", store)
    assert r.exit_code == 2 and "flat.jsonl:2: field `date`: cannot read 'not a date at all' as a date" in r.output
    assert "Traceback" not in r.output and not store.exists()


def test_a_field_given_flat_and_in_metadata_with_different_values_is_an_error(tmp_path):
    src = _jsonl(tmp_path / "both.jsonl", {"id": "a", "text": "x", "priority": "P0", "metadata": {"priority": "P2"}})
    with pytest.raises(InputError, match=r"both\.jsonl:1: field `priority` is given at the top level \('P0'\) and in "
                                         r"`metadata` \('P2'\) with different values"):
        load_corpus(src)


def test_dicts_and_frames_given_to_ingest_keep_their_columns_as_metadata(tmp_path):
    """A notebook's frame with a created_at column (a polars Datetime, a pandas Timestamp) is stored with it,
    the date as ISO text that reads back as a date; a frame's missing value is no field at all."""
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest([{"doc_id": "py", "text": "a dict", "user_id": 7}], embed=False)
        st.ingest(pl.DataFrame({"doc_id": ["pl"], "text": ["a polars row"],
                                "created_at": [datetime.datetime(2024, 3, 1, 9, 30)]}), embed=False)
        st.ingest(pd.DataFrame({"doc_id": ["pd1", "pd2"], "text": ["pandas", "pandas too"],
                                "created_at": [pd.Timestamp("2024-05-01"), pd.NaT], "priority": ["P0", None]}), embed=False)
        meta = {d: json.loads(m) for d, m in st.documents().select("doc_id", "metadata").rows()}
        assert meta == {"py": {"user_id": 7}, "pl": {"created_at": "2024-03-01T09:30:00"},
                        "pd1": {"created_at": "2024-05-01T00:00:00", "priority": "P0"}, "pd2": {}}
        dates = st.doc_values().filter(pl.col("field") == "created_at").sort("doc_id")
        assert dates["ts"].to_list() == [datetime.datetime(2024, 5, 1), datetime.datetime(2024, 3, 1, 9, 30)]
        with pytest.raises(InputError, match=r"record 0, document 'x': field `created_at`: cannot read 'soon'"):
            st.ingest([{"doc_id": "x", "text": "t", "created_at": "soon"}], embed=False)
        assert st.stats()["documents"] == 4


def test_documents_fed_back_after_an_ingest_change_only_where_edited(tmp_path):
    """The bring-your-own-corpus tutorial edits a copy of the loaded documents and ingests it: the ingest must
    not have written anything into them (a `content_hash` key would now be read as a metadata field, and
    every document would count as changed)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for i in range(3):
        (notes / f"n{i}.md").write_text(f"# Note {i}\nkiwi {i}\n")
    docs = load_corpus(notes)
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(docs, embed=False)
        assert all(set(d) == {"doc_id", "source", "scope", "title", "text", "metadata"} for d in docs)
        edited = [dict(d, text=d["text"] + "update\n") if d["doc_id"] == "n1.md" else d for d in docs]
        rep = st.ingest(edited, embed=False)
        assert (rep.changed, rep.unchanged) == (1, 2)
        assert st.documents(["n0.md"])["metadata"].to_list() == ['{"path": "n0.md"}']


# 2. A field of the wrong type is an error, not text ---------------------------------------------------------

@pytest.mark.parametrize(("record", "message"), [
    ({"id": ["x"], "text": "ok"}, "field `id` must be a string or an integer, got list"),
    ({"id": 1.5, "text": "ok"}, "field `id` must be a string or an integer, got float"),
    ({"id": "x", "text": "ok", "scope": ["a", "b"]}, "field `scope` must be a string or an integer, got list"),
    ({"id": "x", "text": "ok", "title": {"a": 1}}, "field `title` must be a string, got dict"),
    ({"id": "x", "text": "ok", "source": {"url": "u"}}, "field `source` must be a string or an integer, got dict"),
    ({"id": "x", "text": "ok", "metadata": {"scope": ["a"]}}, "field `metadata.scope` must be a string or an integer"),
])
def test_a_wrong_field_type_is_an_error_naming_the_line_and_field(tmp_path, record, message):
    src = _jsonl(tmp_path / "bad.jsonl", {"id": "fine", "text": "first"}, record)
    store = tmp_path / "s.duckdb"
    r = _ingest(src, "--store", store)
    assert r.exit_code == 2 and f"bad.jsonl:2: {message}" in r.output, r.output
    assert not store.exists()


def test_ids_may_be_integers_but_not_tuples_in_python_records(tmp_path):
    got = load_corpus([{"_id": 7, "text": "int id", "scope": 3, "source": 12}])
    assert [(d["doc_id"], d["scope"], d["source"]) for d in got] == [("7", "3", "12")]
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest([{"doc_id": "keep", "text": "stored first"}], embed=False)
        with pytest.raises(InputError, match=r"record 1: field `doc_id` must be a string or an integer, got tuple"):
            st.ingest([{"doc_id": "b", "text": "x"}, {"doc_id": ("a", "b"), "text": "tuple id"}], embed=False)
        assert st.documents()["doc_id"].to_list() == ["keep"]


# 3. A data file given as --store is refused ------------------------------------------------------------------

def test_a_data_file_given_as_store_is_refused_and_left_as_it_was(tmp_path):
    """DuckDB 1.5.5 opens a JSONL/CSV/Parquet file as an in-memory database: `hrt ingest` said it stored the
    documents, saved nothing, and `hrt info` then failed with DuckDB's in-memory message."""
    src = _jsonl(tmp_path / "c.jsonl", {"id": "a", "text": "alpha kiwis"})
    target = _jsonl(tmp_path / "target.jsonl", {"id": "t", "text": "mine"})
    before = target.read_bytes()
    pl.DataFrame({"id": ["p"], "text": ["x"]}).write_parquet(tmp_path / "t.parquet")
    (tmp_path / "empty.db").write_bytes(b"")
    for bad in (target, tmp_path / "t.parquet", tmp_path / "empty.db"):
        r = _ingest(src, "--store", bad)
        assert r.exit_code == 2 and f"{bad}: not a toolkit store (not a DuckDB database file)" in r.output, r.output
        r = CliRunner().invoke(main, ["info", "--store", str(bad)])
        assert r.exit_code == 2 and "not a toolkit store" in r.output and "in-memory" not in r.output
    assert target.read_bytes() == before
    with pytest.raises(StoreError, match="is a folder, not a toolkit store"):
        Store(tmp_path)
    store = tmp_path / "new.duckdb"  # a new path still makes a store, and it opens again
    assert _ingest(src, "--store", store).exit_code == 0
    assert json.loads(CliRunner().invoke(main, ["info", "--store", str(store)]).output)["documents"] == 1


# 4. A store created by mistake is not left behind, and says it is empty ---------------------------------------

def test_a_store_created_and_left_empty_is_removed_and_searching_it_says_it_is_empty(tmp_path):
    import toolkit

    path = tmp_path / "x" / "nope.duckdb"
    queries = pl.DataFrame({"qid": ["q"], "text": ["hello"]})
    for preset in ("default", "vector-only"):
        with toolkit.Store(path) as st, pytest.raises(StoreError, match=r"nope\.duckdb is empty \(no documents\): "
                                                                        r"ingest a corpus first, with `hrt ingest SOURCE"):
            toolkit.run_pipeline(st, queries, preset)
        assert not path.exists() and not path.with_name("nope.duckdb.wal").exists()
    r = CliRunner().invoke(main, ["search", "hello", "--store", str(path)])
    assert r.exit_code == 2 and "no such store" in r.output
    first, second = Store(path), Store(path)  # two stores on one new path: the first to close leaves it be
    first.close()
    second.ingest([{"doc_id": "a", "text": "x"}], embed=False)
    second.close()
    with Store(path, read_only=True) as st:
        assert st.stats()["documents"] == 1


# 5. A store only partly embedded says so -----------------------------------------------------------------------

def test_ingest_without_embeddings_into_an_embedded_store_says_dense_search_covers_part(store, tmp_path):
    """`hrt ingest more.jsonl --no-embed` into a store holding MiniLM vectors: dense search then ranks only the
    embedded chunks and hybrid results lean to them. The ingest report says so, with the way out."""
    assert store.embedding_coverage() == (6, 6)
    path = store.path
    store.close()
    more = _jsonl(tmp_path / "more.jsonl", *({"id": f"m{i}", "text": f"note {i} about kiwis"} for i in range(3)))
    r = _ingest(more, "--store", path)
    assert r.exit_code == 0, r.output
    assert ("dense search covers 6 of 9 chunks: ingest again without --no-embed (embed=True) to embed the rest"
            in r.output)
    with Store(path) as st:
        assert st.embedding_coverage() == (6, 9)
        rep = st.ingest(load_corpus(more), embed=False)  # nothing changed: the report still says it
        assert rep.partly_embedded and "covers 6 of 9 chunks" in rep.summary()
        rep = st.ingest([{"doc_id": "lex", "text": "x"}], embed=False)
        assert (rep.embedded_chunks, rep.total_chunks) == (6, 10)
    with Store(tmp_path / "lexical.duckdb") as st:  # a lexical-only store is a choice, not a gap
        rep = st.ingest(load_corpus(more), embed=False)
        assert not rep.partly_embedded and "dense search covers" not in rep.summary()
        assert st.embedding_coverage() == (0, 3)


# 6. A single note file is a corpus ---------------------------------------------------------------------------

def test_a_single_note_file_is_ingested_as_it_would_be_in_its_folder(tmp_path):
    notes = tmp_path / "notes"
    (notes / "ops").mkdir(parents=True)
    (notes / "note.md").write_text("# Deploy checklist\nRestart the kiwi queue first.\n")
    (notes / "README").write_text("About these notes: kiwi\n")
    (notes / "ops" / "tool.py").write_text("def kiwi():\n    pass\n")
    store = tmp_path / "s.duckdb"
    r = _ingest(notes / "note.md", "--store", store)
    assert r.exit_code == 0 and "1 document: 1 added" in r.output, r.output
    r = CliRunner().invoke(main, ["search", "kiwi", "--store", str(store), "--mode", "lexical", "--format", "json"])
    hit = json.loads(r.output)["results"][0]
    assert hit["doc_id"] == "note.md" and hit["title"] == "Deploy checklist"
    in_folder = {d["doc_id"]: d for d in load_corpus(notes)}["note.md"]  # the same document as from its folder
    assert in_folder == load_corpus(notes / "note.md")[0]
    assert [d["doc_id"] for d in load_corpus(notes / "README")] == ["README"]  # no extension: text by content
    assert [d["doc_id"] for d in load_corpus(notes / "ops" / "tool.py", include=["*.py"])] == ["tool.py"]
    (notes / "empty.md").write_text("  \n")
    with pytest.raises(InputError, match=r"empty\.md: the corpus is empty \(no documents found; 1 not indexed: 1 empty document"):
        load_corpus(notes / "empty.md")
    (notes / "data.csv").write_text("id,text\n1,kiwi\n")
    with pytest.raises(InputError, match=r"data\.csv: unsupported corpus"):
        load_corpus(notes / "data.csv")
