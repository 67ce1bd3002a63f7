"""User trial N: a long-running agent writing one memory at a time through the Python API, killed at any
moment. Each test is a defect as the trial met it."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

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
        Store._update_fts = lambda self, ids, s: self._build_fts(s)  # that version rebuilt on every write
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
    from toolkit.errors import StoreError

    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(3), embed=False)
    with Store(store, read_only=True) as st, pytest.raises(StoreError, match=r"mem\.duckdb: this Store was opened read-only"):
        st.ingest(_docs(4), embed=False)
    with Store(store, read_only=True) as st:
        assert len(st.doc_sources()) == 3
        assert st.ingest(_docs(3), embed=False).unchanged == 3  # nothing to write: still a no-op, no error


def test_priority_values_match_without_case_and_unmapped_ones_are_named(tmp_path):
    """Trial N: "p0" got x1 while "P0" got x4, and "high" under the P0-P3 map silently counted as the lowest
    tier. Values now match without case or surrounding space; values the map lacks are named in a warning."""
    import warnings

    import polars as pl

    from toolkit.config import load_config
    from toolkit.pipeline import prepare, rescore

    docs = [{"doc_id": d, "text": "the tls certificate for api example com expires in march", "metadata": {"priority": p}}
            for d, p in (("upper", "P0"), ("lower", "p0"), ("spaced", " P0 "), ("high", "high"), ("urgent", "urgent"), ("low", "P3"),
                         ("unit_sep", "P0\x1f"))]
    store = tmp_path / "mem.duckdb"
    cfg = load_config("agent-memory").with_updates({"retrieval.dense.enabled": False})
    with Store(store) as st:
        st.ingest(docs, embed=False)
        queries = pl.DataFrame({"qid": ["q"], "text": ["when does the tls certificate expire"]})
        prep = prepare(st, queries, cfg)
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            res = rescore(prep, cfg, trace=False)
    factor = dict(res.final.select("doc_id", "prior_priority").iter_rows())
    assert factor["upper"] == factor["lower"] == factor["spaced"] == 4.0 and factor["low"] == 1.0
    said = [str(w.message) for w in caught if "priority_map" in str(w.message)]
    assert len(said) == 1 and "'high', 'urgent'" in said[0] and "count as factor 1" in said[0], said
    # Trial O: one folding for values and for the warning ("P0\x1f" got factor 1 and no warning).
    assert factor["unit_sep"] == 1.0 and "'P0\\x1f'" in said[0], said


def test_an_undated_memory_can_count_as_old_instead_of_new(tmp_path):
    """Trial N: an undated memory outranked one dated today (recency 1.0 forever). `recency_missing: floor`
    gives it the floor's factor; the default (`fresh`) is unchanged and documented."""
    from datetime import datetime

    import polars as pl

    from toolkit.config import PriorsConfig
    from toolkit.metatypes import typed_values, values_frame
    from toolkit.priors import apply_priors

    ranked = pl.DataFrame({"qid": ["q"] * 3, "doc_id": ["undated", "today", "old"], "score": [1.0, 0.99, 0.98],
                           "rank": [1, 2, 3], "flags": [[], [], []]}, schema_overrides={"flags": pl.List(pl.Utf8)})
    meta = {"today": {"date": "2024-06-01"}, "old": {"date": "2021-12-01"}}
    dv = values_frame([(d, *v) for d, m in meta.items() for v in typed_values(m, d)], "doc_id")
    now = datetime(2024, 6, 1)
    base = PriorsConfig(recency_field="date", recency_half_life_days=1000, recency_floor=0.8)
    fresh = apply_priors(ranked, dv, None, base, now=now)
    assert fresh["doc_id"].to_list()[0] == "undated"
    floor = apply_priors(ranked, dv, None, base.model_copy(update={"recency_missing": "floor"}), now=now)
    assert floor["doc_id"].to_list() == ["today", "old", "undated"]
    assert dict(floor.select("doc_id", "prior_recency").iter_rows())["undated"] == pytest.approx(0.8)
    zero = apply_priors(ranked, dv, None, base.model_copy(update={"recency_missing": "floor", "recency_floor": 0.0}), now=now)
    assert zero["doc_id"].to_list()[-1] == "undated" and zero["score"].is_finite().all()


def test_the_lock_message_names_a_long_running_holder(tmp_path):
    """Trial N: `hrt search` against a store an agent keeps open said "try again when it is done", which a
    holder that never finishes makes useless advice."""
    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(3), embed=False)
        p = subprocess.run([sys.executable, "-m", "toolkit.cli", "search", "deploy", "--store", str(store), "--mode", "lexical"],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
        w = subprocess.run([sys.executable, "-m", "toolkit.cli", "delete", "m1", "--store", str(store)],
                           capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 75, p.stderr
    # Trial BN: the advice was to `cp` the file with its .wal, which loses writes of a store in use: Store.backup.
    assert "agent that keeps the store open" in p.stderr and "Store.backup(path)" in p.stderr
    # Trial O: a writer told to "copy the file and open the copy" deletes from the copy; the holder keeps it.
    assert w.returncode == 75 and "write through that process" in w.stderr and "backup" not in w.stderr, w.stderr


def test_delete_by_id_removes_one_memory_and_refuses_ids_it_does_not_hold(tmp_path):
    """Trial N: deleting one memory meant re-ingesting all the others with prune=True (and a mistake deleted
    everything not passed in). `Store.delete` removes just these ids, everywhere they are stored."""
    import polars as pl

    from toolkit.errors import InputError

    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(5) + [{"doc_id": "secret", "text": "the root password is hunter2", "metadata": {"priority": "P0"}}], embed=False)
        def hits(text: str) -> list[str]:
            return st.lexical_search(pl.DataFrame({"qid": ["q"], "text": [text]}), top_k=5)["doc_id"].to_list()

        assert hits("hunter2") == ["secret"]
        gen = st.generation()
        with pytest.raises(InputError, match=r"no document with id 'nope'.*nothing was deleted"):
            st.delete(["secret", "nope"])
        assert st.generation() == gen and len(st.doc_sources()) == 6  # refused whole
        assert st.delete("secret") == 1
        assert hits("hunter2") == [] and hits("deploy freeze") and st.generation() != gen
        counts = st.con.execute("SELECT (SELECT count(*) FROM documents), (SELECT count(*) FROM chunks), "
                                "(SELECT count(*) FROM doc_values WHERE doc_id = 'secret'), "
                                "(SELECT num_docs FROM fts_main_chunks.stats)").fetchone()
        assert counts == (5, 5, 0, 5)
        assert st.delete(["secret", "m1"], missing_ok=True) == 1 and st.delete([]) == 0
    p = subprocess.run([sys.executable, "-m", "toolkit.cli", "delete", "m2", "m3", "--store", str(store)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0 and "deleted 2 document(s)" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "toolkit.cli", "delete", "m0", "ghost", "--store", str(store)],
                       capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode != 0 and "no document with id 'ghost'" in p.stderr and "Traceback" not in p.stderr
    with Store(store, read_only=True) as st:
        assert sorted(st.doc_sources()["doc_id"]) == ["m0", "m4"]


def test_a_store_whose_memories_were_all_deleted_finds_nothing(store):
    """Trial O: deleting every memory, then searching, raised DuckDB's raw BinderException (BM25 over an index
    with no documents formatted avgdl NULL into its SQL). A cleared memory now answers with no results, by every
    path, where a store never ingested into still says it is empty."""
    import polars as pl

    from toolkit.errors import StoreError
    from toolkit.pipeline import run_pipeline

    q = pl.DataFrame({"qid": [f"q{i}" for i in range(20)], "text": ["deploy failed ECONNREFUSED"] * 20})
    assert store.delete(store.doc_sources()["doc_id"].to_list()) == 6
    assert store.lexical_search(q).is_empty() and store.lexical_search(q[:1]).is_empty()
    assert store.lexical_search_sql(q[:1]).is_empty() and store.dense_search(q[:1]).is_empty()
    for cfg in ("default", "bm25-only", "vector-only", "agent-memory"):
        assert run_pipeline(store, q[:1], cfg).final.is_empty(), cfg
    with Store(store.path.parent / "never.duckdb") as never, pytest.raises(StoreError, match="is empty"):
        never.lexical_search(q)


def test_delete_works_in_a_process_that_searched_through_the_cli_first(tmp_path):
    """Trial O: after `hrt search` ran in-process (it binds parameters without pandas), `Store.delete` failed
    with "internal frame name 'asked' not allowed" and deleted nothing."""
    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(3), embed=False)
    code = """
        from toolkit.cli import main
        try:
            main(["search", "deploy", "--store", STORE, "--mode", "lexical"], standalone_mode=False)
        except SystemExit:
            pass
        with Store(STORE) as st:
            assert st.delete(["m1"]) == 1 and st.delete(["m9"], missing_ok=True) == 0
            print("OK", sorted(st.doc_sources()["doc_id"].to_list()))
    """
    src = "import sys\nfrom toolkit.store import Store\nSTORE = sys.argv[1]\n" + textwrap.dedent(code)
    p = subprocess.run([sys.executable, "-c", src, str(store)], capture_output=True, text=True, timeout=120,
                       env={**os.environ, "PYTHONPATH": ROOT})
    assert p.returncode == 0 and "OK ['m0', 'm2']" in p.stdout, p.stderr


def test_threads_writing_and_searching_one_store_neither_fail_nor_lose_writes(tmp_path):
    """Trial O: with one thread writing, the batched BM25 of another failed ("axis 1 index 336 exceeds matrix
    dimension 334": it read the postings after a commit its layout predated), and two writing threads lost
    about half their writes to "Conflict on update". Reads now take one snapshot; writes queue on a lock."""
    import threading

    import polars as pl

    store = tmp_path / "mem.duckdb"
    st = Store(store)
    st.ingest(_docs(200), embed=False)
    q = pl.DataFrame({"qid": [f"q{i}" for i in range(12)], "text": [f"deploy freeze m{i}x" for i in range(12)]})
    errors: list[str] = []
    searches = 0
    done = threading.Event()

    def write(prefix: str) -> None:
        try:
            for i in range(25):
                st.ingest([{"doc_id": f"{prefix}{i}", "text": f"fresh memory {prefix}{i} about a new term t{prefix}{i}"}], embed=False)
        except Exception as e:  # noqa: BLE001 - collected and asserted on below
            errors.append(f"write {prefix}: {e!r}")

    def search() -> None:
        nonlocal searches
        while not done.is_set():
            try:
                st.lexical_search(q, top_k=5)
                searches += 1
            except Exception as e:  # noqa: BLE001
                errors.append(f"search: {e!r}")

    writers = [threading.Thread(target=write, args=(p,)) for p in ("a", "b")]
    reader = threading.Thread(target=search)
    reader.start()
    for t in writers:
        t.start()
    for t in writers:
        t.join(timeout=300)
    done.set()
    reader.join(timeout=60)
    try:
        assert errors == [] and searches > 10, (errors[:3], searches)
        ids = set(st.doc_sources()["doc_id"].to_list())
        assert {f"{p}{i}" for p in "ab" for i in range(25)} <= ids
        assert st._lexical_index_whole()
    finally:
        st.close()


def test_delete_messages_ids_and_the_in_place_threshold(tmp_path):
    """Trial O's smaller findings: a read-only delete said "the ingest"; the CLI's missing-id error named the
    API's missing_ok; an integer id (stored as "1") could not be deleted as 1; stdin stripped ids' own spaces;
    a changed chunk counted twice against the in-place threshold (6 of 50 updated documents rebuilt)."""
    from toolkit.errors import StoreError

    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(50) + [{"doc_id": 1, "text": "an integer id"}, {"doc_id": " padded ", "text": "spaces"}], embed=False)
        rep = st.ingest([{"doc_id": f"m{i}", "text": f"changed memory {i}"} for i in range(6)], embed=False)
        assert rep.changed == 6 and rep.fts_in_place, rep.summary()
        assert st.delete([1]) == 1
    with Store(store, read_only=True) as st, pytest.raises(StoreError, match="the deletion has something to write"):
        st.delete(["m7"])
    run = {"capture_output": True, "text": True, "timeout": 120, "env": {**os.environ, "PYTHONPATH": ROOT}}
    p = subprocess.run([sys.executable, "-m", "toolkit.cli", "delete", "nope", "--store", str(store)], **run)
    assert p.returncode == 2 and "--missing-ok" in p.stderr, p.stderr
    p = subprocess.run([sys.executable, "-m", "toolkit.cli", "delete", "-", "--store", str(store)], input=" padded \n\n", **run)
    assert p.returncode == 0 and "deleted 1 document(s)" in p.stderr, p.stderr


def test_a_search_does_not_wait_for_a_long_write_to_cache_its_stages(tmp_path):
    """Writes queue on a per-file lock (trial O); caching a search's stages must not queue behind a long ingest
    (minutes of embedding): it is skipped, as that write's commit empties the cache anyway."""
    import threading

    import polars as pl

    from toolkit.pipeline import run_pipeline
    from toolkit.store import _write_lock

    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(20), embed=False)
        holding, release = threading.Event(), threading.Event()

        def long_write() -> None:
            with _write_lock(store):
                holding.set()
                release.wait(60)

        writer = threading.Thread(target=long_write)
        writer.start()
        holding.wait(10)
        result: list = []
        search = threading.Thread(target=lambda: result.append(run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["deploy"]}), "bm25-only")))
        search.start()
        search.join(30)
        release.set()
        writer.join(10)
        assert result and not result[0].final.is_empty()


def test_a_search_inside_the_callers_transaction_keeps_that_transaction(tmp_path):
    """Review: the snapshot a BM25 search reads in began its own transaction; inside a caller's BEGIN, DuckDB
    refused that BEGIN and aborted the caller's transaction, whose COMMIT then stored nothing, silently."""
    import polars as pl

    store = tmp_path / "mem.duckdb"
    with Store(store) as st:
        st.ingest(_docs(20), embed=False)
        for n in (1, 12):  # the SQL path (a few queries) and the batched path
            st.con.execute("BEGIN TRANSACTION")
            st.con.execute("INSERT INTO meta VALUES (?, 'x')", [f"user_key{n}"])
            hits = st.lexical_search(pl.DataFrame({"qid": [f"q{i}" for i in range(n)], "text": ["deploy freeze"] * n}), top_k=3)
            st.con.execute("COMMIT")
            assert len(hits) == 3 * n
            assert st.con.execute("SELECT count(*) FROM meta WHERE key = ?", [f"user_key{n}"]).fetchone()[0] == 1


def test_a_store_object_sees_another_ones_deletions_and_additions(tmp_path):
    """Review: whether the store was emptied was remembered per object, so after another Store object on the
    same file deleted everything a search raised DuckDB's BinderException, and after it re-ingested a search
    found nothing."""
    import polars as pl

    q = pl.DataFrame({"qid": ["q"], "text": ["deploy freeze"]})
    store = tmp_path / "mem.duckdb"
    with Store(store) as b:
        b.ingest(_docs(3), embed=False)
        a = Store(store)
        try:
            assert len(a.lexical_search(q)) == 3
            b.delete(["m0", "m1", "m2"])
            assert a.lexical_search(q).is_empty() and a.lexical_search_sql(q).is_empty()
            b.ingest(_docs(2), embed=False)
            assert len(a.lexical_search(q)) == 2
        finally:
            a.close()


def test_deleting_a_note_by_its_name_without_the_extension_names_the_stored_id(tmp_path):
    """User trial BI: the README's `hrt delete note-17 note-18` after `hrt ingest notes/` failed with "no document
    with id 'note-17'": a folder's ids are paths with their extension, and the error did not say so."""
    from click.testing import CliRunner

    from toolkit.cli import main

    notes = tmp_path / "notes"
    notes.mkdir()
    for n in (17, 18):
        (notes / f"note-{n}.md").write_text(f"# Note {n}\nsome text {n}\n")
    store = str(tmp_path / "mem.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(notes), "--store", store, "--no-embed"]).exit_code == 0
    r = CliRunner().invoke(main, ["delete", "note-17", "note-18", "--store", store])
    assert r.exit_code == 2 and "(stored ids of that name: 'note-17.md', 'note-18.md')" in r.output, r.output
    r = CliRunner().invoke(main, ["delete", "note-17.md", "note-18.md", "--store", store])
    assert r.exit_code == 0, r.output


def test_a_service_searching_one_query_at_a_time_moves_to_the_term_matrix_and_a_write_does_not_force_a_rebuild(
        tmp_path, monkeypatch):
    """A long-lived Store answering one query at a time ran BM25 as a SQL join for ever (0.2-0.3 s a query at 89k
    chunks, 25 ms on the term matrix); one that had built the matrix once rebuilt all of it for the next single
    query after every write (2-3 s at 89k). The SQL time a generation spends now buys the matrix once it reaches
    the build's expected price; the results are the same either way."""
    import polars as pl

    from toolkit import store as store_mod

    st = Store(tmp_path / "svc.duckdb", embedder=None)
    st.ingest(_docs(30), embed=False)
    sql_calls = []
    real_sql = st.lexical_search_sql
    monkeypatch.setattr(st, "lexical_search_sql", lambda *a, **k: sql_calls.append(1) or real_sql(*a, **k))
    monkeypatch.setattr(store_mod, "_MATRIX_MIN_RENT_S", 0.0)

    def one(text: str, price: float) -> tuple[str, list[tuple[str, float]]]:
        """Which way one query went (sql, build, matrix) when the build is expected to cost `price` seconds."""
        monkeypatch.setattr(Store, "_bm25_matrix_price", lambda self: price)
        built, n_sql = getattr(st, "_lex_cache", None), len(sql_calls)
        got = st.lexical_search(pl.DataFrame({"qid": ["q"], "text": [text]}), top_k=5)
        way = "sql" if len(sql_calls) > n_sql else "build" if st._lex_cache is not built else "matrix"
        return way, list(zip(got["doc_id"].to_list(), got["score"].round(9).to_list(), strict=True))

    never, now = 1e9, 0.0  # a build not worth it yet / its price already paid in SQL time
    ways, hits = zip(*(one("deploy freeze memory 7", never) for _ in range(3)), strict=True)
    assert ways == ("sql",) * 3 and len(set(map(tuple, hits))) == 1
    assert one("deploy freeze memory 7", now) == ("build", hits[0])
    assert one("deploy freeze memory 7", now) == ("matrix", hits[0])
    st.ingest(_docs(1, "w"), embed=False)  # the matrix is stale now
    way, after = one("deploy freeze memory w0x", never)
    assert way == "sql" and after[0][0] == "w0"  # not rebuilt for one query, and the write is found
    assert one("deploy freeze memory w0x", now) == ("build", after)
    st.close()
