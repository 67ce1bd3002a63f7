"""User trial AS: a data engineer syncing a wiki folder into a store from cron (`hrt ingest FOLDER --prune`), with
runs that overlap and folders that share a store. The store matched a fresh ingest after every kind of edit; each
test is a place where it did not."""

from __future__ import annotations

import logging
import subprocess
import sys
import threading

from click.testing import CliRunner

from toolkit.cli import main
from toolkit.store import Store


def _hrt(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _replace_and_sync(tmp_path, store, folder: str, prefix: str, gone: str, new: str) -> list[str]:
    """Delete `folder/gone`, add `folder/new`, sync the folder with --prune under `prefix`: one document removed;
    the store's ids after it."""
    (tmp_path / folder / gone).unlink()
    (tmp_path / folder / new).write_text(f"{new}\n")
    r = _hrt("ingest", tmp_path / folder, "--store", store, "--no-embed", "--id-prefix", prefix, "--prune")
    assert r.exit_code == 0 and "1 removed" in r.output, r.output
    with Store(store, read_only=True) as st:
        return sorted(st.doc_sources()["doc_id"])


def _folders(tmp_path, files: dict[str, str]) -> None:
    """{"a/todo.md": text, ...} written under tmp_path, folders made."""
    for rel, text in files.items():
        (tmp_path / rel).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / rel).write_text(text)


def test_a_run_that_waited_for_the_store_reads_the_folder_as_it_is_then(tmp_path):
    """Two cron runs waiting with --wait: the one that had read the folder first could take the store second and
    write an older copy over a newer one (2 of 5 tries). The folder is read once the store is the run's."""
    notes = tmp_path / "q"
    notes.mkdir()
    (notes / "x.md").write_text("version ONE\n")
    store = tmp_path / "s.duckdb"
    assert _hrt("ingest", notes, "--store", store, "--no-embed").exit_code == 0
    # Another process holds the store (DuckDB's lock is per process) until told to let go.
    code = ("import sys, time\nfrom toolkit.store import Store\nst = Store(sys.argv[1])\nprint('held', flush=True)\n"
            "sys.stdin.readline()\nst.close()\n")
    holder = subprocess.Popen([sys.executable, "-c", code, str(store)], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    result = {}

    def run():
        result["r"] = _hrt("ingest", notes, "--store", store, "--no-embed", "--prune", "--wait", "60")

    class Waiting(logging.Handler):  # the run says it waits for the store before it reads anything
        def emit(self, record: logging.LogRecord) -> None:
            if "waiting up to" in record.getMessage():
                waiting.set()

    waiting, handler = threading.Event(), Waiting()
    logging.getLogger("toolkit").addHandler(handler)
    try:
        t = threading.Thread(target=run)
        t.start()
        assert waiting.wait(60), "the run never waited for the store"
    finally:
        logging.getLogger("toolkit").removeHandler(handler)
    (notes / "x.md").write_text("version TWO\n")
    holder.communicate("go\n", timeout=30)
    t.join(90)
    assert result["r"].exit_code == 0, result["r"].output
    with Store(store, read_only=True) as st:
        assert st.documents(["x.md"])["text"][0].strip() == "version TWO"


def test_prune_with_an_id_prefix_removes_only_that_folders_documents(tmp_path):
    """Two folders synced into one store, each with its own --id-prefix and --prune: each run removed the other
    folder's documents, every time, without a word (300 wiki documents gone)."""
    _folders(tmp_path, {"a/todo.md": "todo of a\n", "b/todo.md": "todo of b\n"})
    store = tmp_path / "s.duckdb"
    for _ in range(2):
        for name in ("a", "b"):
            r = _hrt("ingest", tmp_path / name, "--store", store, "--no-embed", "--id-prefix", f"{name}/", "--prune")
            assert r.exit_code == 0 and "0 removed" in r.output, r.output
    assert _replace_and_sync(tmp_path, store, "a", "a/", gone="todo.md", new="done.md") == ["a/done.md", "b/todo.md"]


def test_a_symlinked_folder_is_named_as_not_followed(tmp_path):
    """`-v` named every file left out but not the files of a symlinked folder, which were never read."""
    _folders(tmp_path, {"wiki/a.md": "alpha\n", "shared/b.md": "beta\n"})
    (tmp_path / "wiki" / "shared-link").symlink_to(tmp_path / "shared", target_is_directory=True)
    r = _hrt("ingest", tmp_path / "wiki", "--store", tmp_path / "s.duckdb", "--no-embed", "-v")
    assert r.exit_code == 0, r.output
    assert "skipped shared-link: symlinked folder, not followed" in r.stderr


def test_prune_keeps_documents_another_folder_still_holds_under_nested_or_no_prefixes(tmp_path):
    """The review of the prefix fix: a prefix is text, so `--id-prefix wiki/ --prune` removed what `wiki/eng/`
    put there, and a plain `--prune` every prefixed folder's documents."""
    _folders(tmp_path, {"a/a.md": "alpha\n", "b/b.md": "beta\n"})
    store = tmp_path / "s.duckdb"
    assert _hrt("ingest", tmp_path / "b", "--store", store, "--no-embed", "--id-prefix", "wiki/eng/", "--prune").exit_code == 0
    r = _hrt("ingest", tmp_path / "a", "--store", store, "--no-embed", "--id-prefix", "wiki/", "--prune")
    assert r.exit_code == 0 and "0 removed" in r.output and "--prune kept 1 stored document(s)" in r.stderr, r.output
    r = _hrt("ingest", tmp_path / "a", "--store", store, "--no-embed", "--prune")  # no prefix at all
    assert r.exit_code == 0 and "--prune kept" in r.stderr, r.output
    with Store(store, read_only=True) as st:
        assert "wiki/eng/b.md" in st.doc_sources()["doc_id"].to_list()
    # b.md gone from its folder: the next sync of that folder removes it. (A plain --prune of folder a took its own
    # old wiki/ copy above: the same folder, not another one.)
    assert _replace_and_sync(tmp_path, store, "b", "wiki/eng/", gone="b.md", new="c.md") == ["a.md", "wiki/eng/c.md"]


def test_a_missing_source_is_said_before_the_store_is_waited_for(tmp_path):
    r = _hrt("ingest", tmp_path / "nope", "--store", tmp_path / "new" / "s.duckdb", "--no-embed")
    assert r.exit_code == 2 and "nope: no such file or folder" in r.output
    assert not (tmp_path / "new").exists()


def test_a_pruned_files_text_leaves_no_vector_in_the_cache(tmp_path, embedder):
    """`hrt delete` drops a memory's cached vector (user trial Z), but a file removed from a synced folder with
    --prune kept its vectors in the embedding cache for ever: the removed text stayed recoverable from its vector,
    and the cache grew by every removal. A text another document still has keeps its vector, and so does a changed
    file's old text (a reverted edit, or earlier chunk settings, are not embedded again)."""
    from toolkit.loaders import load_corpus

    _folders(tmp_path, {"w/gone.md": "the secret rotation plan\n", "w/edit.md": "draft one of the runbook\n",
                        "w/same.md": "shared paragraph\n", "w/twin.md": "shared paragraph\n"})
    path = tmp_path / "s.duckdb"

    def sync() -> None:
        with Store(path, embedder=embedder) as st:
            st.ingest(load_corpus(tmp_path / "w"), prune=True)

    sync()
    with Store(path, read_only=True) as st:
        hashes = {t.strip(): h for t, h in st.con.execute("SELECT text, text_hash FROM chunks").fetchall()}
        assert st.con.execute("SELECT count(DISTINCT text_hash) FROM embedding_cache").fetchone()[0] == 3
    (tmp_path / "w/gone.md").unlink()
    (tmp_path / "w/edit.md").write_text("draft two of the runbook\n")
    (tmp_path / "w/twin.md").unlink()
    sync()
    with Store(path, read_only=True) as st:
        left = {t: st.con.execute("SELECT count(*) FROM embedding_cache WHERE text_hash = ?", [h]).fetchone()[0]
                for t, h in hashes.items()}
    assert left == {"the secret rotation plan": 0, "draft one of the runbook": 1, "shared paragraph": 1}


def test_a_file_deleted_while_the_folder_is_read_is_named_as_deleted_not_as_a_symlink(tmp_path, monkeypatch):
    """The walk lists the files, then reads them: a file cron's other job deleted in between was skipped as a
    "symlink to outside the folder", a reason that sent the reader looking for a link that never existed."""
    from toolkit import loaders

    _folders(tmp_path, {"w/a.md": "alpha\n", "w/b.md": "beta\n"})
    utf8 = loaders._utf8

    def delete_b_on_its_turn(rel: str) -> bool:  # called per file between the walk and the read
        if rel == "b.md":
            (tmp_path / "w/b.md").unlink()
        return utf8(rel)

    monkeypatch.setattr(loaders, "_utf8", delete_b_on_its_turn)
    docs = loaders.load_corpus(tmp_path / "w")
    assert [d["doc_id"] for d in docs] == ["a.md"]
    assert [(s.where, s.reason) for s in docs.skipped] == [("b.md", "deleted while the folder was read")]


def test_clear_cache_vectors_drops_the_texts_a_document_held_before_its_edits(tmp_path, embedder):
    """The review: a file edited, then removed with --prune, left its earlier text's vector in the cache for good;
    `hrt clear-cache --vectors` drops every cached vector no chunk has."""
    from toolkit.loaders import load_corpus

    path = tmp_path / "s.duckdb"
    for text in ("plan A\n", "plan B\n"):
        _folders(tmp_path, {"w/p.md": text, "w/keep.md": "kept\n"})
        with Store(path, embedder=embedder) as st:
            st.ingest(load_corpus(tmp_path / "w"), prune=True)
    (tmp_path / "w" / "p.md").unlink()
    with Store(path, embedder=embedder) as st:
        st.ingest(load_corpus(tmp_path / "w"), prune=True)
    r = _hrt("clear-cache", "--store", path, "--vectors")
    assert r.exit_code == 0 and "and 1 cached vector(s) no chunk has" in r.output, r.output
    with Store(path, read_only=True) as st:
        assert st.con.execute("SELECT count(*) FROM embedding_cache").fetchone()[0] == 1  # kept.md's
