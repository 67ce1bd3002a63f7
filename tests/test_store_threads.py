"""User trial BH: a long-lived memory service sharing one writable Store between threads. Its write-ahead log grew
without bound (no checkpoint could run), a search warned of a stale BM25 index that was current, and every thread
that ever used the store kept a cursor until it closed."""

from __future__ import annotations

import threading
import time
import warnings
from pathlib import Path

from toolkit.analysis import ANALYSIS_VERSION
from toolkit.config import load_config
from toolkit.pipeline import run_pipeline
from toolkit.store import StaleTextWarning, Store


def _memory(tag: str, i: int) -> dict[str, str]:
    return {"doc_id": f"{tag}-{i}", "text": f"memory {tag}{i}: the deploy to node {i % 5} failed, café notes {i}"}


def _in_thread(fn) -> None:
    t = threading.Thread(target=fn)
    t.start()
    t.join()


def test_a_thread_idle_after_reading_one_row_holds_no_checkpoint_out(tmp_path):
    """The cause of trial BH's log growth (122 MB in a minute): a result read with fetchone stayed open on its cursor
    until the thread's next statement, and its transaction kept every checkpoint out, DuckDB's own at 16 MB and an
    explicit one ("there are other write transactions active"). A service's thread reads a row and then waits."""
    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest([_memory("base", i) for i in range(30)], embed=False)
    st = Store(path)  # a store file opened again, as a service does
    try:
        st.con.execute("SELECT count(*) FROM documents").fetchone()  # this thread reads one row, then only waits
        said: dict[str, str] = {}

        def writer() -> None:
            st.ingest([_memory("new", 1)], embed=False)
            try:
                st.con.execute("CHECKPOINT")
                said["checkpoint"] = "ok"
            except Exception as e:  # noqa: BLE001 - asserted on below
                said["checkpoint"] = str(e)

        _in_thread(writer)
        assert said["checkpoint"] == "ok"
    finally:
        st.close()


def test_no_stale_text_warning_while_another_thread_writes(tmp_path):
    """`lexical_analysis` read the generation and the analysis stamp in two statements: a write committed between
    them made a current index look stale, and a search warned StaleTextWarning (trial BH, two threads only)."""
    st = Store(tmp_path / "s.duckdb")
    st.ingest([_memory("base", i) for i in range(20)], embed=False)  # non-ASCII text: a stale index would be said
    stop, wrong, errors = threading.Event(), [], []

    def writer() -> None:
        i = 0
        while not stop.is_set():
            st.ingest([_memory("w", i)], embed=False)
            st.delete([f"w-{i}"])
            i += 1

    def reader() -> None:
        cfg = load_config("bm25-only")
        try:
            with warnings.catch_warnings():
                warnings.simplefilter("error", StaleTextWarning)
                while not stop.is_set():
                    if (got := st.lexical_analysis) != ANALYSIS_VERSION:
                        wrong.append(got)
                    run_pipeline(st, {"q": "deploy café"}, cfg, one_shot=True)
        except Exception as e:  # noqa: BLE001 - asserted on below
            errors.append(repr(e))

    threads = [threading.Thread(target=writer), threading.Thread(target=reader)]
    for t in threads:
        t.start()
    time.sleep(4)
    stop.set()
    for t in threads:
        t.join()
    st.close()
    assert not wrong and not errors, (wrong[:3], errors[:3])


def test_cursors_of_ended_threads_are_released(tmp_path):
    """Each thread gets its own cursor; a service whose pool replaces its threads kept one per thread ever started.
    A new thread now closes the cursors of those that ended, and the store still closes cleanly."""
    st = Store(tmp_path / "s.duckdb")
    st.ingest([_memory("m", i) for i in range(5)], embed=False)
    pool = [threading.Thread(target=run_pipeline, args=(st, {"q": "deploy"}, "bm25-only"), kwargs={"one_shot": True})
            for _ in range(4)]  # alive together: four threads, four cursors
    for t in pool:
        t.start()
    for t in pool:
        t.join()
    _in_thread(lambda: run_pipeline(st, {"q": "deploy"}, "bm25-only", one_shot=True))
    assert len(st.con._cursors) == 1  # the last thread's, until the next thread comes
    done, go = threading.Event(), threading.Event()

    def live() -> None:
        st.stats()
        done.set()
        go.wait(30)

    t = threading.Thread(target=live)
    t.start()
    try:
        assert done.wait(30)
        assert list(st.con._cursors) == [t.ident]  # a live thread's cursor is kept
    finally:
        go.set()
        t.join()
    st.close()
    assert not st.con._cursors


def test_backup_of_a_store_in_use_holds_every_acknowledged_write(tmp_path):
    """User trial BN: a `cp` of a live store and its .wal lost acknowledged writes and brought deleted ones back (23
    of 33 copies), and the busy error advised exactly that copy. `Store.backup` copies what the store holds now."""
    path = tmp_path / "s.duckdb"
    st = Store(path)
    try:
        st.ingest([_memory("base", i) for i in range(20)], embed=False)
        acked: list[str] = []
        deleted: list[str] = []
        stop = threading.Event()

        def writer() -> None:
            i = 0
            while not stop.is_set():
                st.ingest([_memory("w", i)], embed=False)
                acked.append(f"w-{i}")
                if i % 3 == 2:
                    st.delete([f"w-{i - 1}"])
                    deleted.append(f"w-{i - 1}")
                i += 1

        t = threading.Thread(target=writer)
        t.start()
        time.sleep(0.5)
        # acknowledged before the backup began (only w-1, w-4, ... are ever deleted: the others are kept for good)
        added, removed = {x for x in acked if int(x[2:]) % 3 != 1}, set(deleted)
        out = st.backup(tmp_path / "b.duckdb")
        stop.set()
        t.join()
        assert not Path(f"{out}.wal").exists() and added
        with Store(out, read_only=True) as copy:
            held = set(copy.doc_sources()["doc_id"].to_list())
        assert added | {f"base-{i}" for i in range(20)} <= held and not removed & held
    finally:
        st.close()


def test_backup_refuses_a_stale_log_beside_its_destination_and_names_this_threads_transaction(tmp_path):
    """The second review: a `dest.wal` of an earlier file was replayed onto the fresh backup (another database's
    table appeared in it); and a backup inside the caller's own BEGIN retried for 30 s, then blamed other threads."""
    import pytest

    from toolkit.errors import InputError, StoreBusyError

    st = Store(tmp_path / "s.duckdb")
    try:
        st.ingest([_memory("base", i) for i in range(3)], embed=False)
        Path(tmp_path / "b.duckdb.wal").write_bytes(b"an old log")
        with pytest.raises(InputError, match=r"b\.duckdb\.wal: a write-ahead log of an earlier file"):
            st.backup(tmp_path / "b.duckdb")
        Path(tmp_path / "b.duckdb.wal").unlink()
        st.con.execute("BEGIN")
        st.con.execute("INSERT INTO meta VALUES ('x', 'y')")
        t0 = time.monotonic()
        with pytest.raises(StoreBusyError, match="this thread has a transaction open"):
            st.backup(tmp_path / "b.duckdb")
        assert time.monotonic() - t0 < 1.0
        st.con.execute("ROLLBACK")
        assert st.backup(tmp_path / "b.duckdb").exists()
    finally:
        st.close()
