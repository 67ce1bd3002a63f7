"""The optional HNSW vector index (DuckDB vss): same answers as exact search on a small corpus, kept in the
file across reopenings and ingests, bounded inputs, and memory-bounded score blocks."""

from __future__ import annotations

import polars as pl
import pytest

from toolkit import store as store_mod
from toolkit.errors import InputError, StoreError
from toolkit.loaders import load_corpus
from toolkit.store import Store

pytest.importorskip("duckdb_extension_vss")


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
    assert st.vector_index["kind"] == "hnsw"
    docs = load_corpus(corpus_file)
    docs[3]["text"] = "ECONNREFUSED again: the deploy failed on the database port."
    st.ingest(docs)
    exact = st.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False)
    approx = st.dense_search(QUERIES, top_k=3, vectors=qv, scope_filter=False, index="hnsw")
    assert approx.select(cols).equals(exact.select(cols))
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
        assert st.vector_index == {"kind": "hnsw", "metric": "cosine", "m": 16, "ef_construction": 128}


def test_memory_limit_is_set_or_refused(tmp_path):
    with Store(tmp_path / "m.duckdb", memory_limit="512MB") as st:
        assert st.con.execute("SELECT current_setting('memory_limit')").fetchone()[0] in ("512.0 MiB", "488.2 MiB")
    with pytest.raises(InputError, match="memory_limit"):
        Store(tmp_path / "m2.duckdb", memory_limit="1GB'; DROP TABLE meta; --")
