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


def test_the_wal_is_folded_while_two_threads_write_and_search(tmp_path):
    """Two threads writing, searching and deleting through one Store: the log stays near DuckDB's threshold (here
    lowered to 256 KB) instead of growing until the store closes (122 MB in a minute in the trial)."""
    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest([_memory("base", i) for i in range(30)], embed=False)
    st = Store(path)  # a store file opened again, as a service does
    st.con.execute("SET checkpoint_threshold = '256KB'")
    st.stats()  # the service's own thread reads the store, then only waits
    st.con.execute("SELECT count(*) FROM chunks WHERE text LIKE '%deploy%'").fetchone()  # and runs SQL of its own
    cfg, stop, errors, wal_max = load_config("bm25-only"), threading.Event(), [], [0]

    def worker(tag: str) -> None:
        i = 0
        while not stop.is_set():
            try:
                st.ingest([_memory(tag, i)], embed=False)
                run_pipeline(st, {"q": f"memory {tag}{i} deploy"}, cfg, one_shot=True)
                if i % 2:
                    st.delete([f"{tag}-{i - 1}"])
            except Exception as e:  # noqa: BLE001 - asserted on below
                errors.append(repr(e))
                return
            i += 1

    threads = [threading.Thread(target=worker, args=(tag,)) for tag in ("a", "b")]
    for t in threads:
        t.start()
    deadline = time.monotonic() + 4
    while time.monotonic() < deadline:
        time.sleep(0.05)
        wal = Path(f"{path}.wal")
        wal_max[0] = max(wal_max[0], wal.stat().st_size if wal.exists() else 0)
    stop.set()
    for t in threads:
        t.join()
    try:
        assert not errors, errors
        assert wal_max[0] < 2_000_000, wal_max[0]
        st.con.execute("CHECKPOINT")  # nothing left holds it
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
