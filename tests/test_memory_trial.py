"""User trial N: a long-running agent writing one memory at a time through the Python API, killed at any
moment. Each test is a defect as the trial met it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

from toolkit.store import Store

ROOT = str(Path(__file__).resolve().parents[1])


def _child(code: str, store: Path) -> None:
    """Run `code` in a fresh process (with `store` as STORE) that ends without closing anything, as a kill -9."""
    src = "import os, sys\nfrom toolkit.store import Store\nSTORE = sys.argv[1]\n" + textwrap.dedent(code) + "\nos._exit(0)\n"
    subprocess.run([sys.executable, "-c", src, str(store)], check=True, timeout=300,
                   env={**os.environ, "PYTHONPATH": ROOT})


def _docs(n: int, prefix: str = "m") -> list[dict]:
    return [{"doc_id": f"{prefix}{i}", "text": f"memory number {i} about the deploy freeze {prefix}{i}x"} for i in range(n)]


def test_single_writes_after_a_checkpoint_then_a_kill_replay_and_lose_nothing(tmp_path):
    """DuckDB checkpointed by itself after ~130 single writes; later writes then sat in a WAL that could not be
    replayed ("Cannot drop entry fts_main_chunks"), and the store never opened again. The BM25 index is now
    dropped one object at a time, which replays."""
    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(50), embed=False)
    _child("""
        st = Store(STORE)
        st.con.execute("CHECKPOINT")
        for i in range(5):
            st.ingest([{"doc_id": f"k{i}", "text": f"remember kx{i}"}], embed=False)
    """, store)
    assert Path(f"{store}.wal").exists()  # the five writes are in the WAL, to be replayed
    with Store(store, read_only=True) as st:
        assert sum(d.startswith("k") for d in st.doc_sources()["doc_id"].to_list()) == 5
        assert "k4" in st.lexical_search(__import__("polars").DataFrame({"qid": ["q"], "text": ["kx4"]}), top_k=3)["doc_id"].to_list()


def test_an_unreplayable_wal_of_an_earlier_version_is_moved_aside_and_the_store_opens(tmp_path, caplog):
    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(50), embed=False)
    # A writer of an earlier version (the index re-created with overwrite=1, whose DROP ... CASCADE DuckDB cannot
    # replay), killed after DuckDB's own checkpoint and a few more writes.
    _child("""
        Store._drop_fts = lambda self: self.con.execute("PRAGMA drop_fts_index('chunks')") if self.has_lexical_index() else None
        st = Store(STORE)
        for i in range(5):  # DuckDB's own checkpoint after the second write, as it came after ~130 in the trial
            st.ingest([{"doc_id": f"k{i}", "text": f"remember kx{i}"}], embed=False)
            if i == 1:
                st.con.execute("CHECKPOINT")
    """, store)
    assert Path(f"{store}.wal").exists()
    with caplog.at_level(logging.WARNING, logger="toolkit"), Store(store, read_only=True) as st:
        ids = st.doc_sources()["doc_id"].to_list()
    assert len(ids) >= 50 and all(f"m{i}" in ids for i in range(50))  # everything up to the checkpoint
    assert "could not be replayed" in caplog.text and "moved to" in caplog.text
    assert list(tmp_path.glob("mem.duckdb.wal.unreplayable-*"))  # kept for inspection, not deleted


def test_one_store_shared_by_threads_searching_and_writing(tmp_path):
    """An agent serving two users from one Store deadlocked the whole process (0% CPU, no error): a DuckDB
    connection is not for two threads at once. Each thread now gets its own cursor of the store's database."""
    import threading

    import polars as pl

    from toolkit.config import load_config
    from toolkit.pipeline import run_pipeline

    st = Store(tmp_path / "mem.duckdb")
    st.ingest(_docs(300), embed=False)
    cfg = load_config("bm25-only")
    want = {k: run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": [f"deploy freeze m{k}x"]}), cfg).final["doc_id"][0]
            for k in range(4)}
    got, errors = [], []

    def search(k: int) -> None:
        try:
            for _ in range(10):
                got.append(run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": [f"deploy freeze m{k}x"]}), cfg).final["doc_id"][0] == want[k])
        except Exception as e:  # noqa: BLE001 - collected and asserted below
            errors.append(repr(e))

    def write() -> None:
        try:
            for i in range(5):
                st.ingest(_docs(300) + [{"doc_id": f"w{i}", "text": f"written while others search w{i}x"}], embed=False)
        except Exception as e:  # noqa: BLE001
            errors.append(repr(e))

    threads = [threading.Thread(target=search, args=(k,), daemon=True) for k in range(4)]
    threads.append(threading.Thread(target=write, daemon=True))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a thread hung"
    assert not errors and len(got) == 40 and all(got)
    assert "w4" in st.doc_sources()["doc_id"].to_list()
    st.close()


def test_writing_through_a_read_only_store_is_a_store_error_naming_it(tmp_path):
    import pytest

    from toolkit.errors import StoreError

    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(3), embed=False)
    with Store(store, read_only=True) as st, pytest.raises(StoreError, match=r"mem\.duckdb: this Store was opened read-only"):
        st.ingest(_docs(4), embed=False)
    with Store(store, read_only=True) as st:
        assert len(st.doc_sources()) == 3
        assert st.ingest(_docs(3), embed=False).unchanged == 3  # nothing to write: still a no-op, no error
