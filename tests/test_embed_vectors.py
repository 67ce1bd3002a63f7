"""Embeddings you bring: the http embedder against a local fake server, and precomputed vectors at ingest."""

from __future__ import annotations

import json
import time

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from fake_servers import embed_fake, fake_server_fixture  # noqa: F401 - the fixture is used by name

from toolkit.cli import main
from toolkit.config import DenseConfig, load_config
from toolkit.embed import make_embedder
from toolkit.errors import InputError, StoreError, ToolkitError
from toolkit.loaders import load_corpus
from toolkit.pipeline import run_pipeline
from toolkit.rerank import ProviderError
from toolkit.store import Store


def _best(query: str) -> str:
    """The document a dot product of fake embeddings ranks first (what dense search must return)."""
    from conftest import DOCS

    qv = np.asarray(embed_fake(query))
    sims = []
    for d in DOCS:
        v = np.asarray(embed_fake(d["title"] + "\n" + d["text"]))
        sims.append(float(qv @ v / np.linalg.norm(v) / np.linalg.norm(qv)))
    return DOCS[int(np.argmax(sims))]["_id"]


def _http(server, **kw):
    args = DenseConfig(provider="http", url=server.embeddings_url, model="fake-embed", **kw).embedder_args()
    return make_embedder(**args)


def test_http_embedder_batches_normalises_and_keeps_order(fake_server, monkeypatch):
    monkeypatch.setenv("EMBED_KEY", "s3cret-value")
    emb = _http(fake_server, batch_size=2, api_key_env="EMBED_KEY")
    texts = ["deploy failed", "retry backoff", "pool size", "lunch"]
    got = emb.embed(texts)
    want = np.asarray([embed_fake(t) for t in texts], dtype=np.float32)
    want /= np.linalg.norm(want, axis=1, keepdims=True)
    np.testing.assert_allclose(got, want, atol=1e-6)  # the server answers in reverse order: put back by index
    assert emb.model_id == "fake-embed" and emb.dim == 8
    assert fake_server.count("/v1/embeddings") == 2  # 4 texts in batches of 2
    req = fake_server.requests[0]
    assert req["body"] == {"model": "fake-embed", "input": texts[:2]}
    assert req["headers"]["authorization"] == "Bearer s3cret-value"


def test_http_embedder_asks_for_dimensions_and_refuses_wrong_ones(fake_server):
    emb = _http(fake_server, dimensions=16)
    assert emb.embed(["x"]).shape == (1, 16)
    assert fake_server.requests[-1]["body"]["dimensions"] == 16
    fake_server.mode = "wrong_dim"
    with pytest.raises(ProviderError, match="returned 17-d vectors, expected 16"):
        emb.embed(["x"])


def test_http_embedder_retries_then_fails_clearly(fake_server):
    fake_server.fail_first = 2
    emb = _http(fake_server, retries=2)
    emb.backoff_s = 0.01
    assert emb.embed(["ok after retries"]).shape == (1, 8)
    assert fake_server.count() == 3
    fake_server.mode = "500"
    with pytest.raises(ProviderError, match=r"HTTP 500.*3 attempts"):
        emb.embed(["always failing"])
    fake_server.mode = "wrong_shape"
    with pytest.raises(ProviderError, match="expected"):
        emb.embed(["shape"])


def test_http_embedder_refuses_components_that_are_not_numbers(fake_server):
    """numpy turned ["0.5", "0.1"] into a vector: an endpoint answering strings is broken, and says so."""
    emb = _http(fake_server)
    for bad in (["0.5", "0.1"], [0.5, None], [[0.5], 0.1]):
        with pytest.raises(ProviderError, match="embedding components must be JSON numbers"):
            emb._parse({"data": [{"index": 0, "embedding": bad}]}, 1)
    assert emb._parse({"data": [{"index": 0, "embedding": [3, 4.0]}]}, 1)[0].tolist() == pytest.approx([0.6, 0.8])


def test_http_embedder_times_out(fake_server):
    fake_server.mode, fake_server.delay_s = "slow", 5.0
    emb = _http(fake_server, timeout_s=0.3, retries=1)
    emb.backoff_s = 0.01
    t0 = time.monotonic()
    with pytest.raises(ProviderError, match="timed out"):
        emb.embed(["slow"])
    assert time.monotonic() - t0 < 3.0


def test_api_key_by_name_only_and_never_printed(fake_server, monkeypatch):
    with pytest.raises(ValueError, match="environment variable"):
        DenseConfig(provider="http", url=fake_server.embeddings_url, model="m", api_key_env="sk-abcdefABCDEF1234567890")
    with pytest.raises(ValueError, match="api_key"):
        DenseConfig.model_validate({"provider": "http", "url": fake_server.embeddings_url, "api_key": "x"})
    monkeypatch.delenv("MISSING_KEY", raising=False)
    with pytest.raises(ToolkitError, match="'MISSING_KEY' is not set"):
        _http(fake_server, api_key_env="MISSING_KEY")


def test_store_ingested_over_http_is_searched_over_http_only(tmp_path, corpus_file, fake_server):
    path = tmp_path / "h.duckdb"
    with Store(path, embedder=_http(fake_server)) as st:
        rep = st.ingest(load_corpus(corpus_file))
        assert rep.embeddings_computed == 6 and st.embedding_model == "fake-embed" and st.embedding_backend == "http"
    cfg = load_config("vector-only").with_updates(
        {"retrieval.dense.provider": "http", "retrieval.dense.url": fake_server.embeddings_url, "retrieval.dense.model": "fake-embed"}
    )
    q = pl.DataFrame({"qid": ["q"], "text": ["team lunch offsite thursday"], "scope": [None]}, schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8})
    with Store(path, read_only=True) as st:
        top = run_pipeline(st, q, cfg).final.sort("rank")
        assert top["doc_id"][0] == _best("team lunch offsite thursday")
    with Store(path, read_only=True) as st:  # a fresh store object: no embedder from the run above
        with pytest.raises(StoreError, match="made by an http endpoint"):
            run_pipeline(st, q, load_config("vector-only"))
        other = cfg.with_updates({"retrieval.dense.model": "another-model"})
        with pytest.raises(StoreError, match="'fake-embed'.*'another-model'"):
            run_pipeline(st, q, other)


def _corpus_with_vectors(tmp_path, docs, fmt="jsonl"):
    rows = [{"_id": d["_id"], "title": d["title"], "text": d["text"], "metadata": d["metadata"],
             "vector": embed_fake(d["title"] + "\n" + d["text"])} for d in docs]
    if fmt == "jsonl":
        p = tmp_path / "vec.jsonl"
        p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    else:
        p = tmp_path / "vec.parquet"
        pl.DataFrame([r | {"metadata": json.dumps(r["metadata"])} for r in rows]).write_parquet(p)
    return p


@pytest.mark.parametrize("fmt", ["jsonl", "parquet"])
def test_corpus_vectors_are_ingested_with_their_model_and_checked_at_query_time(tmp_path, fmt, fake_server):
    from conftest import DOCS

    path = tmp_path / f"p-{fmt}.duckdb"
    src = _corpus_with_vectors(tmp_path, DOCS, fmt)
    with Store(path) as st:
        with pytest.raises(InputError, match="name the model"):
            st.ingest(load_corpus(src))
        rep = st.ingest(load_corpus(src), model="fake-embed")
        assert rep.embeddings_computed == 6 and st.embedding_backend == "precomputed"
        vec = st.chunk_vectors(["d4#0"])["vec"][0]
        want = np.asarray(embed_fake(DOCS[3]["title"] + "\n" + DOCS[3]["text"]))
        np.testing.assert_allclose(vec, want / np.linalg.norm(want), atol=1e-6)
        # the default local model is another model: refused, naming both
        with pytest.raises(StoreError, match="'fake-embed'.*all-MiniLM-L6-v2"):
            st.query_vectors(["lunch"], model="all-MiniLM-L6-v2")
    cfg = load_config("vector-only").with_updates(
        {"retrieval.dense.provider": "http", "retrieval.dense.url": fake_server.embeddings_url, "retrieval.dense.model": "fake-embed"}
    )
    q = pl.DataFrame({"qid": ["q"], "text": ["Lunch team lunch moved to Thursday offsite"]})
    with Store(path, read_only=True) as st:
        assert run_pipeline(st, q, cfg).final.sort("rank")["doc_id"][0] == _best(q["text"][0])


def test_corpus_vectors_bad_input_names_the_document_and_loses_nothing(tmp_path):
    from conftest import DOCS

    src = _corpus_with_vectors(tmp_path, DOCS)
    lines = src.read_text().splitlines()
    bad = json.loads(lines[2]) | {"vector": [1.0, "x"]}
    (tmp_path / "bad.jsonl").write_text("\n".join([*lines[:2], json.dumps(bad)]) + "\n")
    with pytest.raises(InputError, match=r"bad.jsonl:3: field `vector` must hold numbers"):
        load_corpus(tmp_path / "bad.jsonl")
    long = json.loads(lines[0]) | {"text": "word " * 400}
    (tmp_path / "long.jsonl").write_text(json.dumps(long) + "\n")
    with Store(tmp_path / "l.duckdb") as st:
        st.ingest(load_corpus(src), model="fake-embed")
        before = st.stats()
        with pytest.raises(InputError, match=r"'d1' carries a vector but is split into \d+ chunks"):
            st.ingest(load_corpus(tmp_path / "long.jsonl"), model="fake-embed")
        assert st.stats() == before


def test_cli_ingest_over_http_and_from_a_vectors_file(tmp_path, corpus_file, fake_server, monkeypatch):
    from toolkit.vectors import write_vectors

    run = CliRunner()
    monkeypatch.setenv("EMBED_KEY", "s3cret-value")
    r = run.invoke(main, ["ingest", str(corpus_file), "--store", str(tmp_path / "h.duckdb"), "--embed-url",
                          fake_server.embeddings_url, "--model", "fake-embed", "--api-key-env", "EMBED_KEY"])
    assert r.exit_code == 0, r.output
    assert "6 computed" in r.output and "s3cret" not in r.output
    r = run.invoke(main, ["ingest", str(corpus_file), "--store", str(tmp_path / "x.duckdb"), "--embed-url",
                          fake_server.embeddings_url, "--model", "m", "--api-key-env", "sk-abcdefABCDEF1234567890"])
    assert r.exit_code == 2 and "sk-abcdef" not in r.output and "environment variable" in r.output

    # a vectors file as `hrt embed` writes it: chunk text hashes, vectors, one model
    with Store(tmp_path / "h.duckdb", read_only=True) as st:
        chunks = st.chunks()
        vecs = st.chunk_vectors(chunks["chunk_id"].to_list())
    frame = chunks.join(vecs, on="chunk_id").select("doc_id", "chunk_id", "text_hash", pl.col("vec").alias("vector"))
    out = write_vectors(frame, tmp_path / "v.parquet", "fake-embed")
    r = run.invoke(main, ["ingest", str(corpus_file), "--store", str(tmp_path / "v.duckdb"), "--vectors", str(out)])
    assert r.exit_code == 0, r.output
    with Store(tmp_path / "v.duckdb", read_only=True) as st:
        assert st.embedding_model == "fake-embed" and st.embedding_backend == "precomputed"
        np.testing.assert_allclose(np.stack(st.chunk_vectors(["d2#0"])["vec"].to_list()),
                                   np.stack(vecs.filter(pl.col("chunk_id") == "d2#0")["vec"].to_list()), atol=1e-6)
    short = write_vectors(frame.head(3), tmp_path / "short.parquet", "fake-embed")
    r = run.invoke(main, ["ingest", str(corpus_file), "--store", str(tmp_path / "s.duckdb"), "--vectors", str(short)])
    assert r.exit_code == 2 and "no vector for 3 of 6 chunks" in r.output


def test_a_vectors_file_is_read_as_one_matrix_with_the_same_vectors_and_errors(tmp_path):
    """User trial BL: `read_vectors` made a Python float of every number, 4.5 GB for a 325 MB file. Now one float32
    matrix (rows of it per hash) when the file is regular, the same vectors out, and a bad row still named."""
    from toolkit.vectors import read_vectors

    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(5, 8)).astype(np.float32)
    p = tmp_path / "v.parquet"
    pl.DataFrame({"text_hash": [f"h{i}" for i in range(5)], "vector": vecs.tolist(), "model": ["m"] * 5}).write_parquet(p)
    e = read_vectors(p)
    rows = list(e._by_hash.values())
    assert all(isinstance(r, np.ndarray) and r.base is rows[0].base for r in rows)  # views of one matrix
    assert np.array_equal(np.stack(rows), vecs)
    bad = vecs.tolist()
    bad[3] = [0.0] * 8
    pl.DataFrame({"text_hash": [f"h{i}" for i in range(5)], "vector": bad, "model": ["m"] * 5}).write_parquet(p)
    with pytest.raises(InputError, match=r"v\.parquet row 3: field `vector` has NaN/infinite values or is all zeros"):
        read_vectors(p)
