"""Two folders, one store: a folder's document ids are paths relative to it, so `work/todo.md` and
`personal/todo.md` are both `todo.md`. The second ingest used to replace the first note without a word
(`1 changed`); now it warns, naming both folders and `--id-prefix`, which keeps both notes."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.errors import InputError
from toolkit.loaders import load_corpus
from toolkit.store import Store


def _folders(tmp_path: Path) -> tuple[Path, Path]:
    work, personal = tmp_path / "work", tmp_path / "personal"
    work.mkdir()
    personal.mkdir()
    (work / "todo.md").write_text("# Work todo\nShip the quarterly zebra report.\n")
    (personal / "todo.md").write_text("# Personal todo\nBuy giraffe food.\n")
    return work, personal


def _ingest(src: Path, store: Path, *args: str):
    r = CliRunner().invoke(main, ["ingest", str(src), "--store", str(store), "--no-embed", *args])
    assert r.exit_code == 0, r.output
    return r


def _hits(store: Path, query: str) -> list[str]:
    r = CliRunner().invoke(main, ["search", query, "--store", str(store), "--mode", "lexical", "--format", "json"])
    assert r.exit_code == 0, r.output
    return [h["doc_id"] for h in json.loads(r.stdout)["results"]]


def test_second_folder_replacing_the_first_ones_note_warns_naming_both_and_the_option(tmp_path):
    work, personal = _folders(tmp_path)
    store = tmp_path / "col.duckdb"
    first = _ingest(work, store)
    assert "warning" not in first.stderr
    r = _ingest(personal, store)
    warning = next(line for line in r.stderr.splitlines() if line.startswith("warning:"))
    assert "1 document(s)" in warning and str(personal.resolve()) in warning and str(work.resolve()) in warning
    assert "'todo.md'" in warning and "--id-prefix personal/" in warning
    assert "1 changed (1 of them replacing another source's document)" in r.stdout  # the summary says it too
    with Store(store) as st:
        assert st.ingest_roots() == [str(work.resolve()), str(personal.resolve())]


def test_one_file_then_another_folders_file_warns_too(tmp_path):
    work, personal = _folders(tmp_path)
    store = tmp_path / "col.duckdb"
    _ingest(work / "todo.md", store)
    r = _ingest(personal / "todo.md", store)
    assert "warning: 1 document(s) of " + str((personal / "todo.md").resolve()) in r.stderr
    assert str((work / "todo.md").resolve()) in r.stderr and "--id-prefix" in r.stderr


def test_id_prefix_keeps_both_notes_searchable(tmp_path):
    work, personal = _folders(tmp_path)
    store = tmp_path / "col.duckdb"
    _ingest(work, store)
    r = _ingest(personal, store, "--id-prefix", "personal/")
    assert "warning" not in r.stderr and "1 added" in r.stdout
    assert _hits(store, "zebra") == ["todo.md"]
    assert _hits(store, "giraffe") == ["personal/todo.md"]
    # Python callers get the same option from load_corpus; `skipped` is kept.
    (personal / "logo.png").write_bytes(b"\x89PNG\r\n")
    corpus = load_corpus(personal, id_prefix="personal/")
    assert [d["doc_id"] for d in corpus] == ["personal/todo.md"] and [s.where for s in corpus.skipped] == ["logo.png"]


def test_reingesting_the_same_folder_or_a_new_folder_without_clashes_says_nothing(tmp_path):
    work, personal = _folders(tmp_path)
    store = tmp_path / "col.duckdb"
    _ingest(work, store)
    (work / "todo.md").write_text("# Work todo\nShip the zebra report on Monday.\n")  # an edit, not a clash
    r = _ingest(work, store)
    assert "1 changed" in r.stdout and "warning" not in r.stderr and "replacing" not in r.stdout
    (personal / "todo.md").rename(personal / "groceries.md")
    r = _ingest(personal, store)
    assert "1 added" in r.stdout and "warning" not in r.stderr
    # The folder's note read alone after an edit is the same file, not another folder's.
    (work / "todo.md").write_text("# Work todo\nZebra report shipped.\n")
    r = _ingest(work / "todo.md", store)
    assert "1 changed" in r.stdout and "warning" not in r.stderr
    with Store(store) as st:  # each root once, however often it was ingested
        assert st.ingest_roots() == [str(p.resolve()) for p in (work, personal, work / "todo.md")]


def test_a_jsonl_ingest_records_its_root_and_warns_with_the_records_ids(tmp_path):
    work, _ = _folders(tmp_path)
    store = tmp_path / "col.duckdb"
    data = tmp_path / "data.jsonl"
    data.write_text(json.dumps({"id": "todo.md", "text": "A record that happens to share the id."}) + "\n")
    _ingest(work, store)
    r = _ingest(data, store)
    assert "ids are the records' ids" in r.stderr and "--id-prefix data/" in r.stderr
    with Store(store) as st:
        assert str(data.resolve()) in st.ingest_roots()


@pytest.mark.parametrize(("prefix", "why"), [("", "empty"), ("  ", "empty"), ("a\nb", "control characters"),
                                             ("x" * 201, "at most 200")])
def test_a_bad_prefix_is_a_clear_error_naming_the_option(tmp_path, prefix, why):
    work, _ = _folders(tmp_path)
    store = tmp_path / "col.duckdb"
    r = CliRunner().invoke(main, ["ingest", str(work), "--store", str(store), "--no-embed", "--id-prefix", prefix])
    assert r.exit_code == 2 and "error: --id-prefix:" in r.stderr and why in r.stderr
    assert "Traceback" not in r.output and not store.exists()
    with pytest.raises(InputError, match="id_prefix"):
        load_corpus(work, id_prefix=prefix)
