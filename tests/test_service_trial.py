"""User trial Z: a memory service (one writer, several readers, a notebook session on the same store). Nothing
acknowledged was lost; each test is where the service broke: threads searching one new text through a shared
Store cached its vector once each and every later search of it failed, and processes taking turns on the file
failed at once instead of waiting, with a message that blamed writers when a reader held it."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import polars as pl
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.loaders import load_corpus
from toolkit.pipeline import run_pipeline
from toolkit.store import Store

ROOT = str(Path(__file__).resolve().parents[1])
MEMORIES = [{"_id": f"m{i}", "text": f"memory {i}: the kafka consumer lag alert was fixed by restart step {i}"} for i in range(8)]


def _store(tmp_path: Path, embedder) -> Path:
    path = tmp_path / "mem.duckdb"
    with Store(path, embedder=embedder) as st:
        st.ingest(load_corpus(MEMORIES))
    return path


def test_threads_searching_one_new_text_through_a_shared_store_cache_it_once(tmp_path, embedder):
    path = _store(tmp_path, embedder)
    errors: list[str] = []
    with Store(path, embedder=embedder) as st:
        def search(text: str, gate: threading.Barrier) -> None:
            gate.wait()
            try:
                run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": [text]}), "default")
            except Exception as e:  # noqa: BLE001 - every failure is the finding
                errors.append(f"{type(e).__name__}: {e}")

        for i in range(4):
            gate = threading.Barrier(3)
            threads = [threading.Thread(target=search, args=(f"who restarted the consumer {i}", gate)) for _ in range(3)]
            for t in threads:
                t.start()
            for t in threads:
                t.join()
        dup = st.con.execute("SELECT count(*) - count(DISTINCT (model, text_hash)) FROM embedding_cache").fetchone()[0]
        again = run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["who restarted the consumer 2"]}), "default")
    assert errors == [] and dup == 0 and again.final.height > 0


def test_a_store_an_earlier_version_filled_twice_is_repaired_when_opened_for_writing(tmp_path, embedder, caplog):
    """The damage the race left: a text cached twice (its search then read a 768-d "vector") and a chunk with a
    vector per copy. Opening the store for writing keeps one of each, and says so."""
    path = _store(tmp_path, embedder)
    with Store(path, embedder=embedder) as st:
        st.con.execute("INSERT INTO embedding_cache SELECT * FROM embedding_cache LIMIT 3")
        st.con.execute("INSERT INTO embeddings SELECT * FROM embeddings WHERE chunk_id = 'm1#0'")
        st.con.execute("UPDATE meta SET value = '1' WHERE key = 'schema_version'")  # as the earlier version left it
    with Store(path, embedder=embedder) as st:
        assert "duplicate rows removed from embedding_cache" in caplog.text
        assert st.con.execute("SELECT count(*) FROM embeddings WHERE chunk_id = 'm1#0'").fetchone()[0] == 1
        text = st.con.execute("SELECT c.text FROM chunks c WHERE chunk_id = 'm1#0'").fetchone()[0]
        assert run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": [text]}), "vector-only").final["doc_id"][0] == "m1"


def _hold(path: Path, seconds: float, *, read_only: bool) -> subprocess.Popen:
    """Another process that opens the store and keeps it for `seconds` (it prints "open" once it holds it)."""
    code = textwrap.dedent(f"""
        import time
        from toolkit.store import Store
        with Store({str(path)!r}, read_only={read_only}):
            print("open", flush=True)
            time.sleep({seconds})
    """)
    p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.stdout.readline().strip() == "open"
    return p


def test_a_writer_waits_its_turn_with_wait_and_the_message_names_a_reader_as_a_holder(tmp_path, embedder):
    path = _store(tmp_path, embedder)
    reader = _hold(path, 3.0, read_only=True)  # a notebook session or a web worker reading the store
    try:
        r = CliRunner().invoke(main, ["delete", "m1", "--store", str(path)])
        assert r.exit_code == 75
        assert "a search or a notebook session reading it" in r.output and "--wait SECONDS" in r.output
        r = CliRunner().invoke(main, ["delete", "m2", "--store", str(path), "--wait", "60"])  # waits for the reader
        assert r.exit_code == 0, r.output
    finally:
        reader.wait(timeout=60)
    with Store(path, read_only=True) as st:
        assert sorted(st.doc_sources()["doc_id"].to_list()) == sorted(f"m{i}" for i in range(8) if i != 2)
    writer = _hold(path, 2.0, read_only=False)
    try:
        r = CliRunner().invoke(main, ["search", "kafka lag", "--store", str(path), "--mode", "lexical", "--wait", "60"])
        assert r.exit_code == 0 and "m" in r.stdout, r.output
    finally:
        writer.wait(timeout=60)


def test_a_deleted_memory_leaves_no_vector_in_the_cache_unless_another_chunk_has_its_text(tmp_path, embedder):
    memories = [*MEMORIES, {"_id": "copy", "text": MEMORIES[2]["text"]}]
    path = tmp_path / "mem.duckdb"
    with Store(path, embedder=embedder) as st:
        st.ingest(load_corpus(memories))

        def cached(doc_id: str) -> int:
            return st.con.execute("SELECT count(*) FROM embedding_cache e JOIN chunks c USING (text_hash) "
                                  "WHERE c.doc_id = ?", [doc_id]).fetchone()[0]

        h1 = st.con.execute("SELECT text_hash FROM chunks WHERE doc_id = 'm1'").fetchone()[0]
        assert cached("m1") == 1 and st.delete(["m1", "m2"]) == 2
        assert st.con.execute("SELECT count(*) FROM embedding_cache WHERE text_hash = ?", [h1]).fetchone()[0] == 0
        assert cached("copy") == 1  # m2's text lives on in "copy": its vector stays
