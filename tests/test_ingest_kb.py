"""A messy knowledge base (948 files: code, configs, logs, a copied .git): which files are indexed is the same
on every host and documented (.md, .txt, .rst, extensionless text; any other extension only with --include),
--exclude leaves files and folders out, a hidden folder is one -v line, and a huge text file is named before
anything is embedded."""

from __future__ import annotations

import logging
import mimetypes

import pytest
from click.testing import CliRunner

from toolkit import loaders
from toolkit.cli import main
from toolkit.errors import InputError
from toolkit.loaders import load_corpus

OTHER = ("go", "yaml", "toml", "tf", "ini", "log", "rs", "sql", "ts", "py", "sh", "json", "csv", "html", "c", "js")


def _kb(tmp_path):
    root = tmp_path / "kb"
    (root / "code").mkdir(parents=True)
    (root / "notes.md").write_text("# Notes\nthe gateway runbook\n")
    (root / "todo.txt").write_text("rotate the keys\n")
    (root / "guide.rst").write_text("Guide\n=====\nread me\n")
    (root / "README").write_text("about this knowledge base\n")
    (root / "README.Debian").write_text("Debian notes: starts at boot\n")
    (root / "logo.png").write_bytes(b"\x89PNG\r\n")
    (root / "index.dat").write_bytes(b"\x00\x01data")
    for ext in OTHER:
        (root / "code" / f"f.{ext}").write_text(f"text of a .{ext} file\n")
    return root


DOCUMENTED = ["README", "README.Debian", "guide.rst", "notes.md", "todo.txt"]


def _expected_other():
    return {f"code/f.{ext}": f"not indexed by default: add --include '*.{ext}'" for ext in OTHER}


def test_only_documented_types_are_indexed_and_every_other_extension_says_include(tmp_path):
    corpus = load_corpus(_kb(tmp_path))
    assert sorted(d["doc_id"] for d in corpus) == DOCUMENTED
    reasons = {s.where: s.reason for s in corpus.skipped}
    assert {k: v for k, v in reasons.items() if k.startswith("code/")} == _expected_other()
    assert reasons["logo.png"].startswith("file type image/png") and "--include" not in reasons["logo.png"]
    assert reasons["index.dat"].startswith("binary content")


def test_the_decision_does_not_depend_on_the_hosts_mime_types(tmp_path, monkeypatch):
    """A host whose /etc/mime.types maps every name to some type (or none) indexes the same files."""
    root = _kb(tmp_path)
    expected = load_corpus(root)
    for guess in (("application/rls-services+xml", None), ("text/plain", None), (None, None)):
        monkeypatch.setattr(mimetypes, "guess_type", lambda *a, _g=guess, **k: _g)
        got = load_corpus(root)
        assert [d["doc_id"] for d in got] == [d["doc_id"] for d in expected]
        assert got.skipped == expected.skipped
    assert sorted(d["doc_id"] for d in load_corpus(root, include=["*.go", "*.ts"])) == sorted(
        DOCUMENTED + ["code/f.go", "code/f.ts"])


def test_one_file_of_another_type_is_refused_with_the_include_hint(tmp_path):
    root = _kb(tmp_path)
    with pytest.raises(InputError, match=r"--include '\*\.go' reads it as text"):
        load_corpus(root / "code" / "f.go")
    assert [d["doc_id"] for d in load_corpus(root / "README.Debian")] == ["README.Debian"]


def test_exclude_leaves_out_files_and_folders_and_v_names_a_folder_once(tmp_path):
    root = _kb(tmp_path)
    (root / "logs" / "huge").mkdir(parents=True)
    for i in range(3):
        (root / "logs" / "huge" / f"gw{i}.md").write_text(f"log line {i}\n")
    (root / "logs" / "app.md").write_text("app log\n")
    (root / "draft.md").write_text("a draft\n")

    corpus = load_corpus(root, exclude=["logs/huge/*", "draft.md"])
    assert sorted(d["doc_id"] for d in corpus) == sorted(DOCUMENTED + ["logs/app.md"])
    reasons = {s.where: s.reason for s in corpus.skipped}
    assert reasons["draft.md"] == "excluded by --exclude 'draft.md'"
    assert all(reasons[f"logs/huge/gw{i}.md"] == "excluded by --exclude 'logs/huge/*'" for i in range(3))
    # exclude wins over include; a folder named bare is excluded too
    got = load_corpus(root, include=["*.go"], exclude=["code", "logs"])
    assert sorted(d["doc_id"] for d in got) == sorted(DOCUMENTED + ["draft.md"])
    with pytest.raises(InputError, match="apply to a folder of files"):
        load_corpus(root / "notes.md", exclude=["x"])

    store = str(tmp_path / "s.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(root), "--store", store, "--no-embed", "-v",
                                  "--exclude", "logs/huge/*", "--exclude", "draft.md"])
    assert r.exit_code == 0, r.output
    assert "6 documents" in r.output
    assert "3 excluded by --exclude 'logs/huge/*'" in r.output  # counted among the skipped, per file
    assert "skipped folder logs/huge (excluded by --exclude 'logs/huge/*'): 3 files" in r.output
    assert "skipped draft.md: excluded by --exclude 'draft.md'" in r.output
    assert "skipped logs/huge/gw0.md" not in r.output


def test_a_hidden_folder_is_one_verbose_line_and_indexing_is_unchanged(tmp_path):
    root = _kb(tmp_path)
    (root / ".git" / "objects").mkdir(parents=True)
    for i in range(30):
        (root / ".git" / "objects" / f"o{i}").write_text(f"object {i}\n")
    (root / ".git" / "HEAD").write_text("ref: refs/heads/main\n")
    (root / ".DS_Store").write_bytes(b"\x00")
    (root / "node_modules" / "pkg").mkdir(parents=True)  # vendor folders are read as any folder is
    (root / "node_modules" / "pkg" / "README.md").write_text("# pkg\n")

    corpus = load_corpus(root)
    assert sorted(d["doc_id"] for d in corpus) == sorted(DOCUMENTED + ["node_modules/pkg/README.md"])
    hidden = [s for s in corpus.skipped if s.reason == "hidden file or folder"]
    assert len(hidden) == 32  # still counted per file: 31 in .git, and .DS_Store

    r = CliRunner().invoke(main, ["ingest", str(root), "--store", str(tmp_path / "s.duckdb"), "--no-embed", "-v"])
    assert r.exit_code == 0, r.output
    assert "32 hidden file or folder" in r.output
    assert "skipped folder .git (hidden): 31 files" in r.output
    assert "skipped .DS_Store: hidden file or folder" in r.output
    assert "skipped .git/" not in r.output and r.output.count(".git") == 1


def test_a_huge_text_file_is_named_while_loading_before_any_embedding(tmp_path, monkeypatch, caplog):
    monkeypatch.setattr(loaders, "LARGE_FILE_BYTES", 4096)
    root = _kb(tmp_path)
    (root / "logs" / "huge").mkdir(parents=True)
    (root / "logs" / "huge" / "gateway.md").write_text("GET /health 200\n" * 1000)  # 16 KB
    with caplog.at_level(logging.WARNING, logger="toolkit"):
        corpus = load_corpus(root)  # the note is out before load_corpus returns: before the store embeds
    assert "logs/huge/gateway.md" in {d["doc_id"] for d in corpus}
    notes = [r.getMessage() for r in caplog.records if "gateway.md" in r.getMessage()]
    assert len(notes) == 1 and "MB" in notes[0] and "--exclude 'logs/huge/gateway.md'" in notes[0]
    assert not [r for r in caplog.records if "notes.md" in r.getMessage()]

    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="toolkit"):
        r = CliRunner().invoke(main, ["ingest", str(root), "--store", str(tmp_path / "s.duckdb"), "--no-embed"])
    assert r.exit_code == 0, r.output
    assert "note: logs/huge/gateway.md is" in caplog.text
    r = CliRunner().invoke(main, ["ingest", str(root), "--store", str(tmp_path / "t.duckdb"), "--no-embed",
                                  "--exclude", "logs/huge/*"])
    assert r.exit_code == 0, r.output


def test_hrt_embed_takes_the_same_exclude_as_the_ingest(tmp_path):
    """`hrt embed` had --include only: files excluded at ingest were embedded into the vectors file anyway."""
    import polars as pl

    root = tmp_path / "kb"
    (root / "logs").mkdir(parents=True)
    (root / "a.md").write_text("the gateway runbook\n")
    (root / "logs" / "noise.md").write_text("debug debug debug\n")
    out = tmp_path / "v.parquet"
    r = CliRunner().invoke(main, ["embed", str(root), "--exclude", "logs", "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert pl.read_parquet(out).height == 1


def test_prune_refuses_to_remove_documents_whose_files_are_still_there(tmp_path):
    """A re-index with --prune but without the earlier --include removed every .py document though the files
    were all still there (58 of 60 'removed'); only documents whose files are gone may be pruned."""
    root = tmp_path / "kb"
    root.mkdir()
    (root / "a.md").write_text("the gateway runbook\n")
    (root / "retry.py").write_text("def compute_retry_backoff():\n    return 250\n")
    (root / "gone.md").write_text("an old note\n")
    store = str(tmp_path / "s.duckdb")
    run = CliRunner()
    assert run.invoke(main, ["ingest", str(root), "--store", store, "--no-embed", "--include", "*.py"]).exit_code == 0
    (root / "gone.md").unlink()
    r = run.invoke(main, ["ingest", str(root), "--store", store, "--no-embed", "--prune"])
    assert r.exit_code == 2 and "--prune would remove 1 stored document(s) whose files are still in" in r.output
    assert "'retry.py'" in r.output and "nothing was changed" in r.output
    r = run.invoke(main, ["ingest", str(root), "--store", store, "--no-embed", "--prune", "--include", "*.py"])
    assert r.exit_code == 0 and "1 removed" in r.output  # only gone.md
    r = run.invoke(main, ["search", "compute_retry_backoff", "--store", store, "--mode", "lexical"])
    assert "retry.py" in r.output
