"""Ingest tells the truth: what it leaves out is counted and, with -v, named with the reason; files without
an extension are read by content; an empty document is skipped, not fatal; malformed input still stops with
the file and line named and the store untouched."""

from __future__ import annotations

import json

import duckdb
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.loaders import load_corpus


def _folder(tmp_path):
    root = tmp_path / "docs"
    (root / "pkg").mkdir(parents=True)
    (root / "pkg" / "README").write_text("avahi daemon readme: mDNS service discovery\n")
    (root / "pkg" / "NEWS").write_text("Version 0.8 fixes CVE-2021-3468 in the avahi daemon\n")
    (root / "pkg" / "README.Debian").write_text("Debian notes: avahi-daemon starts at boot\n")
    (root / "notes.md").write_text("# Notes\nplain markdown\n")
    (root / "empty.md").write_text("   \n")
    (root / "pkg" / "changelog.Debian.gz").write_bytes(b"\x1f\x8b\x08\x00binary")
    (root / "pkg" / "blob").write_bytes(b"\x00\x01\x02ELF")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n")
    return root


def test_folder_with_extensionless_files_and_an_empty_document(tmp_path):
    root = _folder(tmp_path)
    corpus = load_corpus(root)
    assert sorted(d["doc_id"] for d in corpus) == ["notes.md", "pkg/NEWS", "pkg/README", "pkg/README.Debian"]
    reasons = {s.where.split(":")[0]: s.reason for s in corpus.skipped}
    assert set(reasons) == {"empty.md", "pkg/changelog.Debian.gz", "pkg/blob", "logo.png"}
    assert reasons["empty.md"].startswith("empty document")
    assert "binary" in reasons["pkg/blob"] and "gzip" in reasons["pkg/changelog.Debian.gz"]

    store = str(tmp_path / "s.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(root), "--store", store, "--no-embed"])
    assert r.exit_code == 0, r.output
    assert "4 documents" in r.output and "4 not indexed" in r.output and "-v names them" in r.output
    r = CliRunner().invoke(main, ["ingest", str(root), "--store", store, "--no-embed", "-v"])
    assert r.exit_code == 0, r.output
    for line in ("skipped empty.md: empty document", "skipped pkg/blob: binary content", "skipped logo.png: file type image/png"):
        assert line in r.output
    r = CliRunner().invoke(main, ["search", "CVE-2021-3468", "--store", store, "--mode", "lexical", "--format", "json"])
    assert json.loads(r.output)["results"][0]["doc_id"] == "pkg/NEWS"


def test_include_reads_other_text_files_and_the_skip_reason_says_how(tmp_path):
    """A code assistant's memory holds source files: `--include '*.py'` indexes them (in any folder, named by
    their relative path); without it each is skipped with a reason that names the option."""
    root = _folder(tmp_path)
    (root / "pkg" / "daemon.py").write_text("def resolve_mdns(name):\n    raise AvahiTimeoutError(name)\n")
    (root / "data.csv").write_text("id,text\n1,avahi\n")
    corpus = load_corpus(root)
    reasons = {s.where: s.reason for s in corpus.skipped}
    assert reasons["pkg/daemon.py"] == "not indexed by default: add --include '*.py'"
    assert "--include" not in reasons["logo.png"] and "--include" not in reasons["pkg/changelog.Debian.gz"]

    corpus = load_corpus(root, include=["*.py"])
    assert "pkg/daemon.py" in {d["doc_id"] for d in corpus} and "data.csv" in {s.where for s in corpus.skipped}
    store = str(tmp_path / "s.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(root), "--store", store, "--no-embed", "--include", "*.py", "--include", "*.csv"])
    assert r.exit_code == 0, r.output
    assert "6 documents" in r.output
    r = CliRunner().invoke(main, ["search", "AvahiTimeoutError", "--store", store, "--mode", "lexical", "--format", "json"])
    assert json.loads(r.output)["results"][0]["doc_id"] == "pkg/daemon.py"

    (root / "pkg" / "bad.py").write_bytes(b"x = 1\ny = '\xe9'\n")  # latin-1: declared text, so it must be UTF-8
    r = CliRunner().invoke(main, ["ingest", str(root), "--store", store, "--no-embed", "--include", "*.py"])
    assert r.exit_code != 0 and "pkg/bad.py:2: not valid UTF-8" in r.output
    beir = tmp_path / "c.jsonl"
    beir.write_text('{"_id": "1", "text": "x"}\n')
    r = CliRunner().invoke(main, ["ingest", str(beir), "--store", store, "--include", "*.py"])
    assert r.exit_code != 0 and "apply to a folder of files" in r.output

def test_empty_document_in_a_collection_is_skipped_and_counted(tmp_path):
    """Cranfield has documents with no text: the ingest goes on, and says so."""
    p = tmp_path / "corpus.jsonl"
    rows = [{"_id": "1", "title": "flow", "text": "boundary layer"}, {"_id": "471", "title": "", "text": ""},
            {"_id": "2", "text": "shock waves"}]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    corpus = load_corpus(p)
    assert [d["doc_id"] for d in corpus] == ["1", "2"]
    assert [(s.where, s.reason.split(" (")[0]) for s in corpus.skipped] == [(f"{p}:2", "empty document")]
    r = CliRunner().invoke(main, ["ingest", str(p), "--store", str(tmp_path / "s.duckdb"), "--no-embed", "-v"])
    assert r.exit_code == 0, r.output
    assert "2 documents" in r.output and "1 not indexed: 1 empty document" in r.output and "id '471'" in r.output


def test_malformed_input_stops_with_file_and_line_and_leaves_the_store_untouched(tmp_path):
    good = tmp_path / "good.jsonl"
    good.write_text(json.dumps({"_id": "a", "text": "alpha"}) + "\n")
    store = str(tmp_path / "s.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(good), "--store", store, "--no-embed"]).exit_code == 0
    cases = {
        "json.jsonl": (b'{"_id": "b", "text": "beta"}\n{"_id": "c", "text": \n', "json.jsonl:2: malformed JSON"),
        "bytes.jsonl": (b'{"_id": "b", "text": "beta"}\n{"_id": "c", "text": "caf\xe9"}\n', "bytes.jsonl:2: not valid UTF-8"),
        "type.jsonl": (b'{"_id": "b", "text": "beta"}\n{"_id": "c", "text": 42}\n', "type.jsonl:2: field `text` must be a string"),
    }
    for name, (data, msg) in cases.items():
        bad = tmp_path / name
        bad.write_bytes(data)
        r = CliRunner().invoke(main, ["ingest", str(bad), "--store", store, "--no-embed", "--prune"])
        assert r.exit_code == 2 and msg in r.output and "Traceback" not in r.output, r.output
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "README").write_text("fine")
    (folder / "bad.md").write_bytes(b"# t\nok\n\xff\n")
    r = CliRunner().invoke(main, ["ingest", str(folder), "--store", store, "--no-embed", "--prune"])
    assert r.exit_code == 2 and "bad.md:3: not valid UTF-8" in r.output
    con = duckdb.connect(store, read_only=True)
    assert con.execute("SELECT doc_id, text FROM documents").fetchall() == [("a", "alpha")]
    con.close()


def test_a_stray_corpus_jsonl_among_notes_is_named_not_obeyed(tmp_path):
    """7 notes and a corpus.jsonl (no queries, no qrels) used to ingest as '1 documents', -v naming nothing:
    the notes are indexed, and corpus.jsonl is counted and named with the reason."""
    root = tmp_path / "notes5"
    root.mkdir()
    for i in range(7):
        (root / f"note{i}.md").write_text(f"# Note {i}\nthe deploy of service {i} failed\n")
    (root / "corpus.jsonl").write_text(json.dumps({"_id": "x", "text": "exported record"}) + "\n")
    (root / "core.md").write_bytes(b"# crash\n\x00\x00\x7fELF")
    r = CliRunner().invoke(main, ["ingest", str(root), "--store", str(tmp_path / "n5.duckdb"), "--no-embed", "-v"])
    assert r.exit_code == 0, r.output
    assert "7 documents" in r.output and "2 not indexed" in r.output
    assert "skipped corpus.jsonl: a collection's corpus file, not a note (no queries.jsonl or qrels/" in r.output
    assert "skipped core.md: binary content (NUL bytes)" in r.output


def test_a_file_name_with_spaces_is_a_legitimate_document_id(tmp_path):
    """Folder notes are named by their path, so ids with spaces must stay storable and searchable (a TREC
    run cannot hold them; that is checked where runs are written, not at ingest)."""
    root = tmp_path / "notes"
    root.mkdir()
    (root / "my note.md").write_text("# Deploy\nECONNREFUSED on port 5432\n")
    store = str(tmp_path / "s.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(root), "--store", store, "--no-embed"]).exit_code == 0
    r = CliRunner().invoke(main, ["search", "ECONNREFUSED", "--store", store, "--mode", "lexical", "--format", "json"])
    assert json.loads(r.output)["results"][0]["doc_id"] == "my note.md"


def test_ingest_says_when_stored_documents_are_gone_from_the_source(tmp_path):
    """A user trial deleted notes and re-ran `hrt ingest`: the deleted notes stayed searchable with no word.
    Without --prune the ingest now counts and names them; with it, they are removed and nothing is said."""
    folder = tmp_path / "notes"
    folder.mkdir()
    for name in ("a.md", "b.md", "c.md"):
        (folder / name).write_text(f"# {name}\nsome text about {name}\n")
    store = str(tmp_path / "s.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(folder), "--store", store, "--no-embed"]).exit_code == 0
    (folder / "b.md").unlink()
    r = CliRunner().invoke(main, ["ingest", str(folder), "--store", store, "--no-embed"])
    assert r.exit_code == 0 and "note: 1 stored document(s) are not in" in r.output and "'b.md'" in r.output
    r = CliRunner().invoke(main, ["ingest", str(folder), "--store", store, "--no-embed", "--prune"])
    assert r.exit_code == 0 and "stored document(s) are not in" not in r.output
    r = CliRunner().invoke(main, ["ingest", str(folder), "--store", store, "--no-embed"])
    assert "stored document(s) are not in" not in r.output
