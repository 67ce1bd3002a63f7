"""User trial AB: the Python API inside one long-running web service: a thread pool serving searches while a
background thread writes memories into the same Store. Each test is a defect the trial found."""

from __future__ import annotations

import collections
import threading

import numpy as np
from fake_servers import embed_fake

from toolkit.config import load_config
from toolkit.pipeline import run_pipeline
from toolkit.store import Store


class _FastEmbedder:
    """A deterministic 8-d embedder: the race is in the store, not the model, and this one costs nothing."""

    model_id, backend, dim = "fake-8", "fake", 8

    def embed(self, texts, *, progress=False):
        v = np.asarray([embed_fake(t) for t in texts], dtype=np.float32).reshape(len(texts), 8)
        return v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-9)


def test_dense_searches_beside_a_writer_thread_never_fail(tmp_path):
    """Dense searches raised IndexError ("index 365 is out of bounds") and TypeError ("'NoneType' object is not
    subscriptable") while another thread wrote: the dense matrix's layout and vectors were read in separate
    statements, and a write dropped the cache between a search building it and returning it."""
    st = Store(tmp_path / "svc.duckdb", embedder=_FastEmbedder())
    st.ingest([{"doc_id": f"d{i}", "text": f"note {i} about deploys, retries and ECONNREFUSED"} for i in range(40)])
    cfg = load_config("vector-only")
    stop, errors, ok = threading.Event(), collections.Counter(), [0]

    def writer():
        for i in range(40):
            st.ingest([{"doc_id": f"m{i}", "text": f"memory {i} about deploys and ECONNREFUSED"}])
            if i % 2:
                st.delete([f"m{i - 1}"])
        stop.set()

    def searcher():
        while not stop.is_set():
            try:
                res = run_pipeline(st, {"q": "why does the deploy fail"}, cfg)
                assert len(res.final)
                ok[0] += 1
            except Exception as e:  # noqa: BLE001 - counted, then asserted on
                errors[f"{type(e).__name__}: {e}"] += 1

    threads = [threading.Thread(target=writer), *(threading.Thread(target=searcher) for _ in range(4))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    st.close()
    assert not errors and ok[0] > 20, (dict(errors), ok[0])


def test_the_stage_cache_is_bounded_and_a_service_can_skip_it(tmp_path, monkeypatch):
    """`run_pipeline` per search cached ~100 KB of frames for every distinct query, cleared only by a write: a
    read-mostly service grew its store by about 1 GB an hour. The cache keeps the most recent query sets, and
    `run_pipeline(..., one_shot=True)` writes nothing."""
    import toolkit.store

    monkeypatch.setattr(toolkit.store, "STAGE_CACHE_KEYS", 4)  # the rule, not the shipped size (32), is tested
    STAGE_CACHE_KEYS = 4  # noqa: N806
    path = tmp_path / "svc.duckdb"
    with Store(path) as st:
        st.ingest([{"doc_id": f"d{i}", "text": f"note {i} about deploys"} for i in range(20)], embed=False)
        cfg = load_config("bm25-only")
        for i in range(STAGE_CACHE_KEYS + 8):
            run_pipeline(st, {"q": f"deploy note {i}"}, cfg)
        keys = st.con.execute("SELECT count(DISTINCT key) FROM stage_cache").fetchone()[0]
        newest = run_pipeline(st, {"q": f"deploy note {STAGE_CACHE_KEYS + 7}"}, cfg).timings
        before = st.con.execute("SELECT count(*) FROM stage_cache").fetchone()[0]
        run_pipeline(st, {"q": "a new question"}, cfg, one_shot=True)
        after = st.con.execute("SELECT count(*) FROM stage_cache").fetchone()[0]
    assert keys == STAGE_CACHE_KEYS and "cache_load" in newest  # the most recent set is still cached
    assert after == before


def test_a_one_shot_search_leaves_no_query_vector_in_the_store(store):
    """A service answering with `one_shot=True` still cached every distinct question's vector: about 3 KB of the
    file per question, never removed (user trial AK: 1,000 questions, +3 MB). The stage cache path keeps caching
    them, for evaluation runs that ask the same queries again."""
    from toolkit.pipeline import run_pipeline

    def cached() -> int:
        return store.con.execute("SELECT count(*) FROM embedding_cache").fetchone()[0]

    before = cached()
    for i in range(5):
        res = run_pipeline(store, {"q": f"deploy failure number {i}"}, "default", one_shot=True)
        assert len(res.final)
    assert cached() == before
    again = run_pipeline(store, {"q": "deploy failure number 0"}, "default", one_shot=True)
    fresh = run_pipeline(store, {"q": "deploy failure number 0"}, "default")
    assert again.final["doc_id"].to_list() == fresh.final["doc_id"].to_list()
    assert cached() == before + 1  # the second, cached run stored its vector


def test_a_store_closed_under_a_search_names_itself_in_the_searching_thread(store):
    """A service closed its Store on shutdown while a worker thread still searched: the worker died on DuckDB's bare
    "Connection Error: Connection already closed!", which names no store and reads like a driver bug."""
    import polars as pl
    import pytest

    from toolkit.errors import StoreError

    queries = pl.DataFrame({"qid": [str(i) for i in range(40)], "text": ["deploy failed ECONNREFUSED"] * 40})
    errors, started = [], threading.Event()

    def search() -> None:
        try:
            while True:
                store.lexical_search(queries, top_k=5)
                started.set()
        except Exception as e:  # the loop ends with the store's close
            errors.append(e)
            started.set()

    t = threading.Thread(target=search)
    t.start()
    assert started.wait(60)
    store.close()
    t.join(60)
    assert len(errors) == 1 and isinstance(errors[0], StoreError), errors
    assert str(store.path) in str(errors[0])
    with pytest.raises(StoreError, match="is closed"):
        store.lexical_search(queries, top_k=5)


def test_two_threads_closing_a_store_under_a_search_neither_raise_and_its_repr_does_not_either(store):
    """The review: a shutdown hook and a signal handler closing at once made the second close raise, and a log line's
    repr of the store during the close's wait raised too."""
    import polars as pl

    queries = pl.DataFrame({"qid": [str(i) for i in range(40)], "text": ["deploy failed ECONNREFUSED"] * 40})
    started, errors = threading.Event(), []

    def search() -> None:
        try:
            while True:
                store.lexical_search(queries, top_k=5)
                started.set()
        except Exception:  # ends with the close
            started.set()

    def close() -> None:
        try:
            repr(store)
            store.close()
        except Exception as e:
            errors.append(e)

    t = threading.Thread(target=search)
    t.start()
    assert started.wait(60)
    closers = [threading.Thread(target=close) for _ in range(2)]
    for c in closers:
        c.start()
    for c in [*closers, t]:
        c.join(60)
    assert errors == [] and repr(store).endswith(", closed)")


def test_a_statement_interrupted_by_close_raises_a_store_error_naming_the_store(store, monkeypatch, caplog):
    """`close` waits `_Calls.WAIT_S` for other threads' calls, then interrupts their statements. The interrupted
    thread got DuckDB's own `InterruptException` ("Interrupted!"), not the StoreError every other use of a closed
    store raises (the nineteenth session's note: no test held this)."""
    import pytest

    from toolkit import store as store_mod
    from toolkit.errors import StoreError

    monkeypatch.setattr(store_mod._Calls, "WAIT_S", 0.3)
    real = store.con.frame
    running = threading.Event()

    def endless(query, parameters=None):  # the worker's statement runs until interrupted
        running.set()
        return real("SELECT count(*) FROM range(100000000000) a WHERE hash(a.range) = 0")

    errors: list[BaseException] = []

    def worker() -> None:
        try:
            store.documents()
        except BaseException as e:  # noqa: BLE001  the test reads it
            errors.append(e)

    monkeypatch.setattr(store.con, "frame", endless)
    interrupt = store.con.interrupt_cursors

    def interrupt_then_pause() -> None:  # the worker sees its interrupt before close marks the store closed: the
        interrupt()  # race that let DuckDB's exception through 1 run in ~10
        t.join(10)

    monkeypatch.setattr(store.con, "interrupt_cursors", interrupt_then_pause)
    t = threading.Thread(target=worker)
    t.start()
    assert running.wait(30)
    with caplog.at_level("WARNING", logger="toolkit"):
        store.close()
    t.join(30)
    assert not t.is_alive() and len(errors) == 1
    with pytest.raises(StoreError, match="closed while this call ran"):
        raise errors[0]
    assert str(store.path) in str(errors[0])
    assert "their statements are interrupted" in caplog.text
