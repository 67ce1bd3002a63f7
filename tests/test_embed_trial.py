"""Findings of a user trial with embeddings made elsewhere: wrong query dimensions, another model at ingest,
stores of precomputed vectors searched without a model, ragged vectors, and a failed first ingest."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from fake_servers import embed_fake, fake_server_fixture  # noqa: F401 - the fixture is used by name

from toolkit.cli import main
from toolkit.config import DenseConfig, load_config
from toolkit.embed import DEFAULT_MODEL, make_embedder
from toolkit.errors import InputError, StoreError
from toolkit.loaders import load_corpus
from toolkit.pipeline import run_pipeline
from toolkit.rerank import ProviderError
from toolkit.store import Store


def _http(server, model="fake-embed", **kw):
    return make_embedder(**DenseConfig(provider="http", url=server.embeddings_url, model=model, **kw).embedder_args())


def _http_store(path, corpus_file, server) -> None:
    with Store(path, embedder=_http(server)) as st:
        st.ingest(load_corpus(corpus_file))
        assert st.embedding_dim == 8 and st.embedding_backend == "http"


def _query(text="deploy server"):
    return pl.DataFrame({"qid": ["q"], "text": [text], "scope": [None]}, schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8})


def _vector_corpus(tmp_path, dims=None, name="vec.parquet"):
    from conftest import DOCS

    rows = [{"_id": d["_id"], "title": d["title"], "text": d["text"], "metadata": json.dumps(d["metadata"]),
             "vector": embed_fake(d["title"] + "\n" + d["text"], (dims or {}).get(i, 8))} for i, d in enumerate(DOCS)]
    p = tmp_path / name
    pl.DataFrame(rows).write_parquet(p)
    return p


@pytest.mark.parametrize("preset", ["vector-only", "default"])
def test_query_endpoint_of_another_dimension_is_a_clear_error(tmp_path, corpus_file, fake_server, preset):
    path = tmp_path / "h.duckdb"
    _http_store(path, corpus_file, fake_server)
    fake_server.embed_dim = 5  # the same model name, another size: a configuration error, not an outage
    cfg = load_config(preset).with_updates(
        {"retrieval.dense.provider": "http", "retrieval.dense.url": fake_server.embeddings_url, "retrieval.dense.model": "fake-embed"}
    )
    with Store(path, read_only=True) as st, pytest.raises(StoreError, match=r"8-d embeddings of 'fake-embed' but 'fake-embed' \(from http://.*\) makes 5-d"):
        run_pipeline(st, _query(), cfg)
    with Store(path) as st:  # writable: the cache path checks too
        with pytest.raises(StoreError, match=r"8-d embeddings.*5-d"):
            st.query_vectors(["deploy server"], embedding={"provider": "http", "url": fake_server.embeddings_url, "model": "fake-embed"})
        with pytest.raises(StoreError, match=r"8-d embeddings.*the query vectors have 3-d"):
            st.dense_search(_query(), vectors=np.ones((1, 3), dtype=np.float32))


def test_local_model_of_another_dimension_is_a_clear_error(tmp_path):
    path = tmp_path / "p.duckdb"
    # 8-d vectors labelled as the packaged model, which makes 384-d ones: refused at ingest (user trial AP; the first
    # search refused them before)
    with Store(path) as st, pytest.raises(InputError, match=r"vectors of 8 numbers, but .*all-MiniLM-L6-v2 makes 384-d"):
        st.ingest(load_corpus(_vector_corpus(tmp_path)), model=DEFAULT_MODEL)
    # vectors of another model searched with the packaged one: the store's size is named
    with Store(path) as st:
        st.ingest(load_corpus(_vector_corpus(tmp_path)), model="org/eight-d")
    with Store(path, read_only=True) as st, pytest.raises(StoreError, match=r"8-d embeddings of 'org/eight-d'"):
        st.dense_search(_query(), embedding={"model": "org/eight-d"}, vectors=np.ones((1, 384), dtype=np.float32))


def test_ingest_with_another_endpoint_model_is_refused_naming_both(tmp_path, corpus_file, fake_server, monkeypatch):
    path = tmp_path / "h.duckdb"
    _http_store(path, corpus_file, fake_server)
    before = fake_server.count()
    with Store(path, embedder=_http(fake_server, model="other-emb")) as st, pytest.raises(StoreError, match=r"built with embedding model 'fake-embed'.*http endpoint.*'other-emb'"):
        st.ingest(load_corpus(corpus_file))
    assert fake_server.count() == before  # refused before anything was embedded
    monkeypatch.setenv("EMB_KEY", "k")
    r = CliRunner().invoke(main, ["ingest", str(corpus_file), "--store", str(path), "--embed-url", fake_server.embeddings_url,
                                  "--model", "other-emb", "--api-key-env", "EMB_KEY"])
    assert r.exit_code != 0 and "'fake-embed'" in r.output and "'other-emb'" in r.output, r.output
    # a plain ingest (the local model): names the local model too, and says how to ingest into this store
    with Store(path) as st, pytest.raises(StoreError, match=r"'fake-embed' made by an http endpoint.*local model .*all-MiniLM-L6-v2.*--embed-url"):
        st.ingest(load_corpus(corpus_file))


def test_precomputed_store_searched_without_a_model_says_so_without_loading_one(tmp_path, monkeypatch):
    path = tmp_path / "pq.duckdb"
    with Store(path) as st:
        st.ingest(load_corpus(_vector_corpus(tmp_path)), model="my-vec-model")
        assert st.embedding_backend == "precomputed"

    def no_model(*a, **k):
        raise AssertionError("no embedder may be made (a hub download) for a label of precomputed vectors")

    monkeypatch.setattr("toolkit.store.make_embedder", no_model)
    with Store(path, read_only=True) as st, pytest.raises(StoreError, match=r"precomputed vectors of 'my-vec-model': set retrieval.dense.*--mode lexical"):
        run_pipeline(st, _query(), load_config("default"))
    r = CliRunner().invoke(main, ["search", "deploy server", "--store", str(path)])
    assert r.exit_code != 0 and "precomputed vectors of 'my-vec-model'" in r.output, r.output
    r = CliRunner().invoke(main, ["search", "deploy server", "--store", str(path), "--mode", "lexical"])
    assert r.exit_code == 0, r.output


def test_ragged_corpus_vectors_name_the_file_and_row(tmp_path):
    src = _vector_corpus(tmp_path, dims={3: 5}, name="ragged.parquet")
    with Store(tmp_path / "r.duckdb") as st, pytest.raises(InputError, match=r"ragged.parquet row 3: vector of 5 numbers, but .*ragged.parquet row 0 has 8"):
        st.ingest(load_corpus(src), model="m")


def test_failed_first_ingest_leaves_no_store_file(tmp_path, corpus_file, fake_server):
    fake_server.mode = "500"
    path = tmp_path / "new.duckdb"
    emb = _http(fake_server, retries=0)
    with Store(path, embedder=emb) as st, pytest.raises(ProviderError):
        st.ingest(load_corpus(corpus_file))
    assert not path.exists() and not (tmp_path / "new.duckdb.wal").exists()
    # a store that existed before, or that a later ingest filled, is kept
    fake_server.mode = "good"
    with Store(path, embedder=emb) as st:
        with pytest.raises(InputError):  # a failed first ingest, then one that fills the store
            st.ingest([])
        st.ingest(load_corpus(corpus_file))
    assert path.exists()
    fake_server.mode = "500"
    with Store(path, embedder=emb) as st, pytest.raises(ProviderError):
        st.ingest([{"_id": "new", "text": "a new document"}])
    with Store(path, read_only=True) as st:
        assert st.stats()["documents"] == 6


def test_precomputed_vectors_of_the_packaged_model_are_still_searched_with_it(tmp_path, embedder):
    from conftest import DOCS

    rows = [{"_id": d["_id"], "title": d["title"], "text": d["text"],
             "vector": embedder.embed([d["title"] + "\n" + d["text"]])[0].tolist()} for d in DOCS]
    with Store(tmp_path / "m.duckdb") as st:
        st.ingest(rows, model=DEFAULT_MODEL)
        assert st.embedding_backend == "precomputed"
    with Store(tmp_path / "m.duckdb", read_only=True) as st:  # no model named: the recorded one loads locally
        hits = st.dense_search(_query("team lunch moved to thursday"), top_k=1, scope_filter=False)
        assert hits["doc_id"][0] == "d4"


def test_a_failed_http_ingest_keeps_the_batches_it_paid_for(tmp_path, fake_server):
    """An endpoint that died after a few batches made the re-run embed everything again (192 of 349 vectors
    thrown away): each http batch is cached as it arrives, the error says so, and the re-run sends the rest."""
    docs = [{"_id": f"d{i}", "text": f"note number {i} about deploys"} for i in range(10)]
    path = tmp_path / "paid.duckdb"
    emb = _http(fake_server, retries=0, batch_size=2)
    fake_server.fail_after = 3  # three batches of two, then HTTP 500
    with Store(path, embedder=emb) as st, pytest.raises(ProviderError, match=r"6 of 10 embeddings were computed before this and are kept"):
        st.ingest(docs)
    assert path.exists()  # what was paid for is in the file
    fake_server.fail_after, fake_server.requests = None, []
    with Store(path, embedder=emb) as st:
        rep = st.ingest(docs)
        assert st.stats()["documents"] == 10
    sent = [t for r in fake_server.requests for t in (r["body"].get("input") or [])]
    assert len([t for t in sent if t.startswith("note number")]) == 4 and len(sent) == 4  # no "dimension probe"
    assert "4 computed, 6 from cache" in rep.summary()
