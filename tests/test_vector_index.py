"""The optional HNSW vector index (usearch, a file beside the store): same answers as exact search on a small
corpus, kept across reopenings and rebuilt by ingests, bounded inputs, and memory-bounded score blocks."""

from __future__ import annotations

import json
import os

import duckdb
import numpy as np
import polars as pl
import pytest

from toolkit import store as store_mod
from toolkit.errors import InputError, StoreError
from toolkit.loaders import load_corpus
from toolkit.store import Store

if not os.environ.get("CI"):  # CI installs the `dev` extra, which brings usearch: there it must not skip
    pytest.importorskip("usearch")


def q(*texts: str) -> pl.DataFrame:
    return pl.DataFrame(
        {"qid": [f"q{i}" for i in range(len(texts))], "text": list(texts), "scope": [None] * len(texts)}
    )


QUERIES = q(
    "deploy failed ECONNREFUSED", "retry backoff policy", "pool size in production", "lunch on thursday"
)




def test_hnsw_matches_exact_on_a_small_corpus_and_survives_reopen_and_ingest(
    store, corpus_file, embedder, tmp_path
):
    qv = store.query_vectors(QUERIES["text"].to_list())
    exact = store.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False)
    with pytest.raises(StoreError, match="no vector index"):
        store.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False, index="hnsw")
    store.build_vector_index(m=8, ef_construction=32)
    approx = store.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False, index="hnsw")
    cols = ["qid", "doc_id", "chunk_id", "rank"]
    assert approx.select(cols).equals(exact.select(cols))
    assert approx["score"].to_list() == pytest.approx(exact["score"].to_list(), abs=1e-5)
    store.close()

    # Reopened: the index is still there, and an ingest that changes a document keeps it in step.
    st = Store(tmp_path / "s.duckdb", embedder=embedder)
    assert st.vector_index["kind"] == "hnsw" and st.vector_index_path.exists()
    built_for = st.vector_index["generation"]
    docs = load_corpus(corpus_file)
    docs[3]["text"] = "ECONNREFUSED again: the deploy failed on the database port."
    assert st.ingest(docs).summary().endswith("; HNSW vector index rebuilt")  # said, not done in silence
    exact = st.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False)
    approx = st.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False, index="hnsw")
    assert approx.select(cols).equals(exact.select(cols))
    assert st.vector_index["generation"] == st.generation() != built_for  # rebuilt for the new chunks
    assert st.vector_index["m"] == 8 and st.vector_index["ef_construction"] == 32
    st.close()
    with Store(tmp_path / "s.duckdb", read_only=True) as ro:
        assert (
            ro.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False, index="hnsw")
            .select(cols)
            .equals(exact.select(cols))
        )
        with pytest.raises(StoreError, match="read-only"):
            ro.build_vector_index()


def test_scoped_queries_use_exact_search(store):
    scoped = QUERIES.with_columns(pl.lit("platform").alias("scope"))
    qv = store.query_vectors(scoped["text"].to_list())
    store.build_vector_index()
    got = store.dense_search(scoped, top_k=5, vectors=qv, index="hnsw")
    assert got.equals(store.dense_search(scoped, top_k=5, vectors=qv))


@pytest.mark.parametrize(
    ("kw", "bad"), [("m", 1), ("m", "16); DROP TABLE chunks; --"), ("ef_construction", True)]
)
def test_index_settings_are_checked_before_any_sql(store, kw, bad):
    with pytest.raises(InputError, match=kw):
        store.build_vector_index(**{kw: bad})
    assert store.con.execute("SELECT count(*) FROM chunks").fetchone()[0] == 6
    with pytest.raises(InputError, match="index"):
        store.dense_search(QUERIES, vectors=store.query_vectors(QUERIES["text"].to_list()), index="ivf")


def test_score_blocks_are_bounded_by_cells_not_queries(store, monkeypatch):
    """With a tiny cell budget every block holds one query, and the results do not change."""
    qv = store.query_vectors(QUERIES["text"].to_list())
    want_d = store.dense_search(QUERIES, top_k=4, vectors=qv, scope_filter=False)
    want_l = store.lexical_search(QUERIES, top_k=4, scope_filter=False)
    seen = []
    real = store._block_topk

    def spy(m, score_fn, queries, **kw):
        def fn(lo, hi):
            seen.append(hi - lo)
            return score_fn(lo, hi)

        return real(m, fn, queries, **kw)

    monkeypatch.setattr(store_mod, "BLOCK_CELLS", 6)
    monkeypatch.setattr(store, "_block_topk", spy)
    # One query per matrix product may round the last float bit differently (BLAS kernels): ids and ranks
    # must match exactly, scores to float32 precision.
    for got, want in (
        (store.dense_search(QUERIES, top_k=4, vectors=qv, scope_filter=False), want_d),
        (store.lexical_search(QUERIES, top_k=4, scope_filter=False), want_l),
    ):
        assert got.drop("score").equals(want.drop("score"))
        assert got["score"].to_list() == pytest.approx(want["score"].to_list(), rel=1e-6)
    assert seen and max(seen) == 1


def test_cli_ingest_builds_the_index_and_reports_it(tmp_path, corpus_file):
    from click.testing import CliRunner

    from toolkit.cli import main

    store = tmp_path / "cli.duckdb"
    r = CliRunner().invoke(main, ["ingest", str(corpus_file), "--store", str(store), "--vector-index", "hnsw"])
    assert r.exit_code == 0, r.output
    assert "HNSW vector index built" in r.output
    with Store(store, read_only=True) as st:
        vi = st.vector_index
        assert {k: vi[k] for k in ("kind", "engine", "metric", "m", "ef_construction", "ef_search", "count")} == {
            "kind": "hnsw", "engine": "usearch", "metric": "cosine", "m": 16, "ef_construction": 128,
            "ef_search": 512, "count": 6,
        }
        assert vi["generation"] == st.generation()


def test_memory_limit_is_set_or_refused(tmp_path):
    with Store(tmp_path / "m.duckdb", memory_limit="512MB") as st:
        assert st.con.execute("SELECT current_setting('memory_limit')").fetchone()[0] in ("512.0 MiB", "488.2 MiB")
    with pytest.raises(InputError, match="memory_limit"):
        Store(tmp_path / "m2.duckdb", memory_limit="1GB'; DROP TABLE meta; --")


def test_a_stale_or_missing_index_file_is_searched_exactly_not_misread(store, tmp_path, caplog):
    """The index's keys are positions in one generation's chunk layout: a file that does not belong to the
    store's current generation must never be searched. An ingest interrupted after its commit, before the
    rebuild, left such an index, and every hnsw search failed until the next ingest: it searches exactly, and
    says so."""
    import logging

    qv = store.query_vectors(QUERIES["text"].to_list())
    exact = store.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False)
    store.build_vector_index()
    vi = store.vector_index
    store._set_meta("vector_index", json.dumps({**vi, "generation": "other"}))
    with caplog.at_level(logging.WARNING, logger="toolkit"):
        got = store.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False, index="hnsw")
    assert got.equals(exact) and "built for an earlier state of the store" in caplog.text and "searching exactly" in caplog.text
    store._set_meta("vector_index", json.dumps(vi))
    store._ann_cache = None
    store.vector_index_path.unlink()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="toolkit"):
        got = store.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False, index="hnsw")
    assert got.equals(exact) and "is missing" in caplog.text


def test_hnsw_recall_against_exact_on_a_larger_random_corpus(tmp_path):
    """Past a toy corpus the graph is approximate: with the defaults (int8 graph, 4x fetch re-ranked exactly)
    recall@10 against exact search stays high, and every returned score is the exact one."""
    rng = np.random.default_rng(0)
    n, dim = 3000, 32
    centres = rng.normal(size=(30, dim))
    vecs = (centres[rng.integers(0, 30, n)] + 0.6 * rng.normal(size=(n, dim))).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    docs = [{"doc_id": f"d{i:05d}", "title": "", "text": f"doc {i}", "source": "s", "scope": None, "metadata": {},
             "vector": v} for i, v in enumerate(vecs.tolist())]
    with Store(tmp_path / "r.duckdb") as st:
        st.ingest(docs, model="test/random")
        queries = q(*[f"query {i}" for i in range(200)])
        qv = vecs[rng.integers(0, n, 200)] + 0.3 * rng.normal(size=(200, dim)).astype(np.float32)
        qv = (qv / np.linalg.norm(qv, axis=1, keepdims=True)).astype(np.float32)
        exact = st.dense_search(queries, top_k=10, vectors=qv)
        st.build_vector_index()
        approx = st.dense_search(queries, top_k=10, vectors=qv, index="hnsw")
    both = exact.join(approx, on=["qid", "doc_id"], suffix="_a")
    assert len(both) / len(exact) >= 0.95
    np.testing.assert_allclose(both["score"].to_numpy(), both["score_a"].to_numpy(), atol=1e-5)


def test_a_store_with_duckdbs_vss_index_drops_it_on_open(tmp_path, embedder, corpus_file):
    """Stores written before usearch kept DuckDB's vss HNSW index inside the file (it needed the extension
    for every later write): opening one for writing drops it and builds the usearch index with its settings in
    its place (user trial W: it was dropped in silence), and exact search is unchanged."""
    pytest.importorskip("duckdb_extension_vss")
    from toolkit.store import vss_extension_path

    path = tmp_path / "old.duckdb"
    with Store(path, embedder=embedder) as st:
        st.ingest(load_corpus(corpus_file))
        st._set_meta("vector_index", json.dumps({"kind": "hnsw", "metric": "cosine", "m": 16, "ef_construction": 128}))
    con = duckdb.connect(str(path))  # as the older toolkit did (a Store now loads no extension once open)
    con.execute("LOAD '" + vss_extension_path() + "'")
    con.execute("SET hnsw_enable_experimental_persistence = true")
    con.execute("CREATE INDEX embeddings_hnsw ON embeddings USING HNSW (vec) WITH (metric = 'cosine')")
    con.close()
    with Store(path, embedder=embedder) as st:
        assert st.vector_index["engine"] == "usearch" and st.vector_index["m"] == 16
        assert st.con.execute("SELECT count(*) FROM duckdb_indexes() WHERE index_name = 'embeddings_hnsw'").fetchone()[0] == 0
        st.ingest(load_corpus(corpus_file))  # a write to `embeddings` without the extension loaded
        assert len(st.dense_search(QUERIES, top_k=3, scope_filter=False)) == 12


def test_a_config_searches_the_index_the_ingest_built(store):
    """`hrt ingest --vector-index hnsw` built an index no search path used: `retrieval.dense.index: hnsw` asks
    for it, gives exact search's lists on a small corpus, and a rebuild with other settings is a new stage."""
    from toolkit.config import load_config
    from toolkit.pipeline import prepare_key, run_pipeline

    exact = load_config("vector-only")
    hnsw = exact.with_updates({"retrieval.dense.index": "hnsw", "retrieval.dense.ef_search": 64})
    with pytest.raises(StoreError, match="no vector index"):
        run_pipeline(store, QUERIES, hnsw)
    store.build_vector_index(m=8, ef_construction=32)
    cols = ["qid", "doc_id", "rank"]
    want = run_pipeline(store, QUERIES, exact).final.select(cols)
    assert run_pipeline(store, QUERIES, hnsw).final.select(cols).equals(want)
    key = prepare_key(store, QUERIES, hnsw)
    assert key != prepare_key(store, QUERIES, exact)
    store.build_vector_index(m=16, ef_construction=64)
    assert prepare_key(store, QUERIES, hnsw) != key


def test_every_chunk_is_found_by_its_own_vector(tmp_path):
    """HNSW strands nodes no search reaches, whatever ef_search: here 1-10 of 8,000 clustered vectors per
    build (more with usearch's concurrent add, unum-cloud/USearch#735), and 5 CACM chunks were unfindable by
    dense search. The stranded rows are listed at build time and scored exactly: each chunk finds itself."""
    rng = np.random.default_rng(0)
    centres = rng.normal(size=(20, 32))
    vecs = (centres[rng.integers(0, 20, 8000)] + 0.2 * rng.normal(size=(8000, 32))).astype(np.float32)
    vecs /= np.linalg.norm(vecs, axis=1, keepdims=True)
    index, stranded = store_mod.hnsw_index(vecs, m=16, ef_construction=128, ef_search=512)
    keys = np.asarray(index.search(vecs, 10).keys)
    assert set(np.flatnonzero(~(keys == np.arange(8000)[:, None]).any(axis=1))) <= set(stranded.tolist())
    with Store(tmp_path / "v.duckdb") as st:
        st.ingest([{"doc_id": f"d{i:04d}", "text": f"note {i}", "vector": v.tolist()} for i, v in enumerate(vecs)],
                  model="ext", embed=True)
        st.build_vector_index()
        assert json.loads(st._vector_index_stamp_path.read_text())["stranded"] is not None
        qs = pl.DataFrame({"qid": [f"q{i}" for i in range(8000)], "text": [""] * 8000, "scope": [None] * 8000},
                          schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8})
        got = st.dense_search(qs, vectors=vecs, top_k=1, index="hnsw", scope_filter=False)
    assert got.filter(pl.col("rank") == 1)["doc_id"].to_list() == [f"d{i:04d}" for i in range(8000)]


def test_an_index_whose_graph_misses_many_vectors_warns_that_exact_search_is_better(store, monkeypatch, caplog):
    """User trial BL: at 224k random vectors the graph reached 39% of them; searches scanned the rest exactly, at
    recall 0.72 and 5x exact search's time, and the build said nothing."""
    real = store_mod.hnsw_index

    def most_stranded(vecs, **kw):
        index, _ = real(vecs, **kw)
        return index, np.arange(len(vecs) // 2)  # half the vectors unreachable

    monkeypatch.setattr(store_mod, "hnsw_index", most_stranded)
    with caplog.at_level("WARNING", logger="toolkit"):
        store.build_vector_index()
    assert any("are not reached by the HNSW graph" in r.getMessage() and "keep the default exact search" in r.getMessage()
               for r in caplog.records)
    monkeypatch.setattr(store_mod, "hnsw_index", real)
    caplog.clear()
    with caplog.at_level("WARNING", logger="toolkit"):
        store.build_vector_index()
    assert not [r for r in caplog.records if "HNSW graph" in r.getMessage()]
