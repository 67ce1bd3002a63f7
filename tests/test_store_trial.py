"""Defects from a trial of the store as a long-lived agent memory (interruptions, foreign files, settings
changed between runs), each as the user met it."""

from __future__ import annotations

import duckdb
import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.errors import StoreError
from toolkit.store import Store

DOCS = [{"doc_id": f"d{i}", "text": f"note {i} about the boathouse keys and the walrus {i}"} for i in range(4)]


def _tables(path) -> list[str]:
    con = duckdb.connect(str(path))
    try:
        return sorted(r[0] for r in con.execute("SELECT table_name FROM information_schema.tables").fetchall())
    finally:
        con.close()


@pytest.mark.parametrize("ddl", ["CREATE TABLE users(id INT, name VARCHAR)",
                                 "CREATE TABLE documents(id INT); CREATE TABLE meta(k VARCHAR)"])
def test_ingest_refuses_a_database_that_is_not_a_store_and_leaves_it_as_it_was(tmp_path, ddl):
    """`hrt ingest --store` naming someone else's DuckDB file added eight tables to it (or crashed half-way
    on its own `documents` table, leaving it altered), while search and info refused it."""
    path = tmp_path / "foreign.duckdb"
    con = duckdb.connect(str(path))
    con.execute(ddl)
    con.close()
    before = _tables(path)
    with pytest.raises(StoreError, match=r"not a toolkit store: a DuckDB database with other tables"):
        Store(path)
    corpus = tmp_path / "c.jsonl"
    corpus.write_text('{"_id": "a", "text": "hello"}\n')
    r = CliRunner().invoke(main, ["ingest", str(corpus), "--store", str(path), "--no-embed"])
    assert r.exit_code == 2 and "not a toolkit store" in r.output and "Traceback" not in r.output
    assert _tables(path) == before


def test_a_store_of_a_newer_toolkit_is_refused_not_written(tmp_path):
    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest(DOCS, embed=False)
        st._set_meta("schema_version", "99")
    for ro in (False, True):
        with pytest.raises(StoreError, match=r"written by a newer toolkit \(store schema version 99; this one reads up to 2\)"):
            Store(path, read_only=ro)


def test_a_new_chunk_size_on_part_of_the_corpus_is_refused_not_mixed(tmp_path):
    """`hrt ingest A.jsonl --chunk-size 300` on a store of A and B re-chunked A only: two chunk sizes in one
    store, and `hrt info` reported 300."""
    from toolkit.errors import InputError
    from toolkit.store import IndexSettings

    long = [{"doc_id": f"{k}{i}", "text": ("The walrus keeps the boathouse keys. " * 30) + k} for k in "ab" for i in range(2)]
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(long, embed=False)
        chunks = st.con.execute("SELECT count(*) FROM chunks").fetchone()[0]
        small = IndexSettings(chunk_size=300, chunk_overlap=50)
        with pytest.raises(InputError, match=r"re-chunks every document, but 2 stored document\(s\) are not in this input \(e\.g\. 'b0'\)"):
            st.ingest(long[:2], settings=small, embed=False)
        assert st.settings.chunk_size == 1000 and st.con.execute("SELECT count(*) FROM chunks").fetchone()[0] == chunks
        st.ingest(long, settings=small, embed=False)  # the whole corpus: every document re-chunked
        assert st.settings.chunk_size == 300
        assert st.con.execute("SELECT max(end_char - start_char) FROM chunks").fetchone()[0] <= 300


def test_an_index_that_lost_step_with_the_chunks_is_rebuilt_by_the_next_ingest(tmp_path):
    """A store moved over a file whose killed writer left a WAL got that file's BM25 index replayed onto it:
    its new note was never found, and re-ingesting said "BM25 index unchanged". The ingest checks the index
    against the chunks and rebuilds it."""
    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest(DOCS, embed=False)
        # the index of an older state: one chunk fewer than the table holds
        st.con.execute("DELETE FROM fts_main_chunks.docs WHERE name = 'd3#0'")
        rep = st.ingest(DOCS, embed=False)
        assert rep.fts_rebuilt and "BM25 index rebuilt" in rep.summary()
        assert st.con.execute("SELECT count(*) FROM fts_main_chunks.docs").fetchone()[0] == len(DOCS)
        assert not st.ingest(DOCS, embed=False).fts_rebuilt  # in step again: nothing to do


def test_a_full_disk_says_so_and_leaves_the_store_as_it_was(tmp_path):
    """A write failing at commit (`ulimit -f`) ended in `TransactionException: cannot rollback - no transaction
    is active`: the rollback's error hid the cause. Now one StoreError names the cause and what was kept."""
    import subprocess
    import sys

    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest(DOCS, embed=False)
    code = (
        "import resource, sys\n"
        "from toolkit.store import Store\n"
        "from toolkit.errors import StoreError\n"
        f"resource.setrlimit(resource.RLIMIT_FSIZE, ({path.stat().st_size + 20_000}, resource.RLIM_INFINITY))\n"
        "docs = [{'doc_id': f'big{i}', 'text': ' '.join(f'word{i}x{j}' for j in range(100))} for i in range(500)]\n"
        "try:\n"
        f"    with Store({str(path)!r}) as st:\n"
        "        st.ingest(docs, embed=False)\n"
        "except StoreError as e:\n"
        "    print(e)\n"
        "    sys.exit(3)\n"
    )
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert r.returncode == 3, (r.stdout, r.stderr[-2000:])
    assert "the ingest could not be written" in r.stdout and "the store is as it was" in r.stdout
    with Store(path, read_only=True) as st:
        assert st.stats()["documents"] == len(DOCS)


def test_a_damaged_store_file_is_one_line_not_a_traceback(tmp_path):
    """DuckDB's checksums catch a damaged file; the user got a raw `_duckdb.IOException` traceback."""
    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest([{"doc_id": f"d{i}", "text": f"walrus note {i} " * 50} for i in range(300)], embed=False)
    size = path.stat().st_size
    with open(path, "r+b") as f:
        for off in range(size // 3, size - 4096, 16384):
            f.seek(off)
            f.write(b"\xff" * 64)
    r = CliRunner().invoke(main, ["search", "walrus", "--store", str(path), "--mode", "lexical"])
    assert r.exit_code == 74 and "Traceback" not in r.output, r.output  # its own code: rebuild (user trial BB)
    assert "error: a store file is damaged or cannot be read: IO Error: Corrupt database file" in r.output


def test_the_default_search_of_a_store_without_embeddings_is_bm25_said(tmp_path):
    """`hrt search QUERY` (hybrid by default) on a store ingested with --no-embed failed with "has no
    embeddings"; it searches with BM25 and says so. An explicit hybrid or dense request still fails, saying how
    to search lexically."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(f'{{"_id": "{d["doc_id"]}", "text": "{d["text"]}"}}\n' for d in DOCS))
    store = str(tmp_path / "s.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(corpus), "--store", store, "--no-embed"]).exit_code == 0
    r = CliRunner().invoke(main, ["search", "walrus 2", "--store", store])
    shown = [line for line in r.stdout.splitlines() if not line.startswith("note: tied scores")]  # (d0, d1, d3 tie)
    assert r.exit_code == 0 and shown[0].startswith("1. score ") and "barely differ" not in r.stdout, r.output
    assert "note: the store has no embeddings (ingested with --no-embed): searching with BM25 alone" in r.stderr
    r = CliRunner().invoke(main, ["search", "walrus", "--store", store, "--mode", "hybrid"])
    assert r.exit_code == 2 and "hrt search --mode lexical" in r.output


def test_an_unwritable_cache_folder_falls_back_to_torch_and_says_so(tmp_path, monkeypatch, caplog):
    """With HOME or HRT_CACHE_DIR unwritable every default hybrid search and ingest crashed on the ONNX
    export (PermissionError): `auto` embeds with torch (the same vectors) and says why."""
    import logging

    pytest.importorskip("onnxruntime")
    from toolkit.embed import make_embedder

    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("HRT_CACHE_DIR", str(blocker / "cache"))  # cannot be created, even by root
    with caplog.at_level(logging.WARNING, logger="toolkit"):
        emb = make_embedder(backend="auto")
    assert emb.backend == "torch"
    assert "the ONNX export cannot be written to" in caplog.text and "set HRT_CACHE_DIR to a writable folder" in caplog.text


def test_a_negative_wait_and_entering_a_closed_store_are_refused(tmp_path):
    """User trial BP: `Store(path, wait_s=-5)` was accepted, and `with store:` on a closed store entered without a
    word, failing only at the first call inside."""
    import math

    from toolkit.errors import InputError

    for bad in (-5, math.nan, math.inf, "2", True):
        with pytest.raises(InputError, match="wait_s: seconds to wait for the store, 0 or more"):
            Store(tmp_path / "w.duckdb", wait_s=bad)
    assert not (tmp_path / "w.duckdb").exists()
    st = Store(tmp_path / "w.duckdb", embedder=None, wait_s=0.5)
    st.ingest([{"doc_id": "a", "text": "one memory"}], embed=False)
    st.close()
    with pytest.raises(StoreError, match=r"w\.duckdb is closed"), st:
        pass


def test_damage_in_the_files_first_blocks_exits_74_as_damage_anywhere_else(tmp_path):
    """User trial BR: the same DuckDB checksum error exited 2 ("cannot open the store") when the damage was in the
    blocks read at open, and 74 ("damaged: rebuild") when in a later block, so a "74: rebuild" branch missed it."""
    import shutil

    from toolkit.errors import StoreDamagedError

    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest([{"doc_id": f"d{i}", "text": f"walrus note {i}"} for i in range(20)], embed=False)
    for off in (5000, 12400):  # the header's second copy, the first block
        bad = tmp_path / f"bad{off}.duckdb"
        shutil.copy(path, bad)
        with open(bad, "r+b") as f:
            f.seek(off)
            f.write(b"\xde\xad\xbe\xef" * 2)
        r = CliRunner().invoke(main, ["search", "walrus", "--store", str(bad), "--mode", "lexical"])
        assert r.exit_code == 74 and "Traceback" not in r.output, (off, r.output)
        assert f"{bad}: the store file is damaged (IO Error: Corrupt database file" in r.output
        with pytest.raises(StoreDamagedError, match="restore a backup"):
            Store(bad, read_only=True)
