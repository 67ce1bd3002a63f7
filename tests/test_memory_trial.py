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


def test_single_writes_then_a_kill_leave_no_wal_and_lose_nothing(tmp_path):
    """DuckDB checkpointed by itself after ~130 single writes; later writes then sat in a WAL that could not be
    replayed, and the store never opened again. Every write is now checkpointed."""
    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(50), embed=False)
    _child("""
        st = Store(STORE)
        st.con.execute("CHECKPOINT")
        for i in range(5):
            st.ingest([{"doc_id": f"k{i}", "text": f"remember kx{i}"}], embed=False)
    """, store)
    assert not Path(f"{store}.wal").exists()
    with Store(store, read_only=True) as st:
        assert sum(d.startswith("k") for d in st.doc_sources()["doc_id"].to_list()) == 5


def test_a_wal_cut_short_between_commit_and_checkpoint_is_moved_aside_and_the_store_opens(tmp_path, caplog):
    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(50), embed=False)
    # A writer killed after its COMMIT but before its checkpoint: the WAL holds the BM25 index's re-creation.
    _child("""
        Store._checkpoint = lambda self: None
        st = Store(STORE)
        for i in range(5):  # DuckDB's own checkpoint after the second write, as it came after ~130 in the trial
            st.ingest([{"doc_id": f"k{i}", "text": f"remember kx{i}"}], embed=False)
            if i == 1:
                st.con.execute("CHECKPOINT")
    """, store)
    assert Path(f"{store}.wal").exists()
    with caplog.at_level(logging.WARNING, logger="toolkit"), Store(store, read_only=True) as st:
        ids = st.doc_sources()["doc_id"].to_list()
    assert len(ids) >= 50 and all(f"m{i}" in ids for i in range(50))  # every completed write is there
    assert "could not be replayed" in caplog.text and "moved to" in caplog.text
    assert list(tmp_path.glob("mem.duckdb.wal.unreplayable-*"))  # kept for inspection, not deleted
