"""Remote (`/v1/embeddings`) embeddings through the commands that ingest automatically (run, report, tune),
retries that honour `Retry-After`, and provider notes that keep the cause when shortened."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from conftest import write_beir
from fake_servers import fake_server_fixture  # noqa: F401 - the fixture is used by name

from toolkit.cli import main
from toolkit.rerank import ProviderError
from toolkit.store import Store


@pytest.fixture
def beir(tmp_path, corpus_file):
    return write_beir(tmp_path / "ds", corpus_file, scoped=False)


def _config(path, url, model="fake-embed", name="remote"):
    path.write_text(json.dumps({"name": name, "retrieval": {"dense": {"enabled": True, "provider": "http", "url": url,
                                                                      "model": model, "retries": 0}}}))
    return path


def _inputs(server, since):
    """Texts sent for embedding since request `since`."""
    return [t for r in server.requests[since:] if r["path"] == "/v1/embeddings" for t in r["body"]["input"]]


def _ingest(beir, store, server):
    r = CliRunner().invoke(main, ["ingest", str(beir), "--store", str(store), "--embed-url", server.embeddings_url,
                                  "--model", "fake-embed"])
    assert r.exit_code == 0, r.output
    with Store(store, read_only=True) as st:
        assert st.embedding_backend == "http" and st.embedding_model == "fake-embed"


def test_run_on_a_store_embedded_by_the_endpoint_embeds_only_the_queries(tmp_path, beir, fake_server):
    store = tmp_path / "s.duckdb"
    _ingest(beir, store, fake_server)
    before = len(fake_server.requests)
    cfg = _config(tmp_path / "c.json", fake_server.embeddings_url)
    out = tmp_path / "run.trec"
    r = CliRunner().invoke(main, ["run", "--dataset", str(beir), "--config", str(cfg), "--store", str(store), "--out", str(out)])
    assert r.exit_code == 0, r.output
    lines = out.read_text().splitlines()
    assert lines and {ln.split()[0] for ln in lines} == {"q1", "q2", "q3"}
    queries = {json.loads(ln)["text"] for ln in (beir / "queries.jsonl").read_text().splitlines()}
    sent = _inputs(fake_server, before)
    assert sent and set(sent) <= queries  # the unchanged corpus was not embedded again, and no "dimension probe"
    assert "embedder fallback" not in r.output


def test_run_embeds_a_changed_document_through_the_endpoint(tmp_path, beir, fake_server):
    store = tmp_path / "s.duckdb"
    _ingest(beir, store, fake_server)
    docs = [json.loads(ln) for ln in (beir / "corpus.jsonl").read_text().splitlines()]
    docs[2]["text"] = "max_pool_size is 80 in production now; staging uses 20."
    (beir / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    before = len(fake_server.requests)
    cfg = _config(tmp_path / "c.json", fake_server.embeddings_url)
    r = CliRunner().invoke(main, ["run", "--dataset", str(beir), "--config", str(cfg), "--store", str(store),
                                  "--out", str(tmp_path / "run.trec")])
    assert r.exit_code == 0, r.output
    assert any("max_pool_size is 80" in t for t in _inputs(fake_server, before))
    with Store(store, read_only=True) as st:
        embedded, chunks = st.embedding_coverage()
        assert embedded == chunks and st.embedding_backend == "http"


def test_report_and_tune_use_the_configs_endpoint(tmp_path, beir, fake_server):
    store = tmp_path / "s.duckdb"
    _ingest(beir, store, fake_server)
    before = len(fake_server.requests)
    cfg = _config(tmp_path / "c.json", fake_server.embeddings_url)
    r = CliRunner().invoke(main, ["report", "--dataset", str(beir), "--config", f"remote={cfg}", "--config", "lex=bm25-only",
                                  "--store", str(store), "--latency-sample", "0", "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    queries = {json.loads(ln)["text"] for ln in (beir / "queries.jsonl").read_text().splitlines()}
    assert set(_inputs(fake_server, before)) <= queries
    r = CliRunner().invoke(main, ["tune", "--dataset", str(beir), "--split", "test", "--base", str(cfg), "--store", str(store), "--budget", "2",
                                  "--folds", "2", "--force", "--out", str(tmp_path / "tuned.yaml")])
    assert r.exit_code == 0, r.output


def test_report_refuses_two_embedders_for_one_store(tmp_path, beir, fake_server):
    store = tmp_path / "s.duckdb"
    _ingest(beir, store, fake_server)
    a = _config(tmp_path / "a.json", fake_server.embeddings_url)
    b = _config(tmp_path / "b.json", fake_server.embeddings_url, model="other-embed", name="other")
    before = len(fake_server.requests)
    r = CliRunner().invoke(main, ["report", "--dataset", str(beir), "--config", str(a), "--config", str(b),
                                  "--store", str(store), "--out", str(tmp_path / "r.html")])
    assert r.exit_code != 0
    assert "different models" in r.output and "'fake-embed'" in r.output and "'other-embed'" in r.output
    assert len(fake_server.requests) == before


# ---------------------------------------------------------------------------------------------- provider notes

def test_a_nan_embedding_note_names_the_cause_within_the_shortened_reason(tmp_path, beir, fake_server):
    import polars as pl

    from toolkit.config import load_config
    from toolkit.pipeline import run_pipeline
    from toolkit.providers import REASON_CHARS, reason

    store = tmp_path / "s.duckdb"
    _ingest(beir, store, fake_server)
    fake_server.mode = "nan"
    cfg = load_config(str(_config(tmp_path / "c.json", fake_server.embeddings_url)))
    q = pl.DataFrame({"qid": ["q9"], "text": ["deploy never embedded before"], "scope": [None]},
                     schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8})
    with Store(store, read_only=True) as st:
        res = run_pipeline(st, q, cfg)
    assert res.per_query["embedder"].to_list() == ["fallback"]
    (line,) = res.per_query["provider_notes"].to_list()[0]
    shown = line.split("(", 1)[1].rsplit("): ", 1)[0]
    assert len(shown) <= REASON_CHARS and shown.startswith("embeddings contain NaN"), line
    assert "127.0.0.1" in shown  # the endpoint follows the cause
    assert reason("rr: rerank result needs an integer 'index' and a numeric 'relevance_score': "
                  "{'index': 0, 'relevance_score': nan}").startswith("non-finite relevance_score (nan)")
    assert reason("rr: ReadError: boom") == "ReadError: boom; rr"  # an exception name stays with its cause


# ---------------------------------------------------------------------------------------------- Retry-After

def _waits(monkeypatch):
    import toolkit.rerank as rerank

    waits: list[float] = []
    monkeypatch.setattr(rerank, "_sleep", waits.append)
    return waits


def _embed_once(server, retries=2):
    from toolkit.config import DenseConfig
    from toolkit.embed import make_embedder

    emb = make_embedder(**DenseConfig(provider="http", url=server.embeddings_url, model="fake-embed",
                                      retries=retries).embedder_args())
    try:
        return emb.embed(["deploy server"])
    finally:
        emb.close()


def test_a_429_retry_after_in_seconds_is_waited(fake_server, monkeypatch):
    waits = _waits(monkeypatch)
    fake_server.limit_first, fake_server.retry_after = 2, "2"
    assert _embed_once(fake_server).shape == (1, 8)
    assert waits == [2.0, 2.0] and fake_server.count() == 3


def test_a_retry_after_http_date_and_a_huge_one_are_capped(fake_server, monkeypatch):
    from email.utils import formatdate

    from toolkit.rerank import RETRY_AFTER_MAX_S, retry_after_seconds

    waits = _waits(monkeypatch)
    fake_server.limit_first, fake_server.limit_status, fake_server.retry_after = 1, 503, "20"
    _embed_once(fake_server)  # within the call's bound (timeout x attempts): waited as asked
    assert waits == [20.0]
    # Past that bound (user trial AN: an hour's Retry-After stalled a 1 s-timeout search for 62 s): not waited at all.
    fake_server.limit_first, fake_server.retry_after = len(fake_server.requests) + 1, "86400"
    with pytest.raises(ProviderError, match=r"unavailable, retry after 86400 s: past this call.s bound of \d+ s"):
        _embed_once(fake_server)
    assert waits == [20.0]
    assert retry_after_seconds("86400") == RETRY_AFTER_MAX_S
    assert retry_after_seconds(formatdate(1_000_010.0, usegmt=True), now=1_000_000.0) == 10.0
    assert retry_after_seconds(formatdate(999_990.0, usegmt=True), now=1_000_000.0) == 0.0  # already past
    assert retry_after_seconds("soon") is None and retry_after_seconds(None) is None


def test_without_retry_after_the_backoff_applies(fake_server, monkeypatch):
    waits = _waits(monkeypatch)
    fake_server.limit_first = 2
    _embed_once(fake_server)
    assert waits == [0.5, 1.0]


def test_the_reranker_honours_retry_after_too(fake_server, monkeypatch):
    from toolkit.rerank import HttpReranker

    waits = _waits(monkeypatch)
    fake_server.limit_first, fake_server.retry_after = 1, "3"
    rr = HttpReranker(fake_server.rerank_url, retries=1)
    assert len(rr.score("deploy", ["deploy server", "lunch"])) == 2
    assert waits == [3.0]


def test_lexical_only_report_and_tune_on_a_store_the_endpoint_embedded(tmp_path, beir, fake_server):
    """`hrt report --config bm25-only` on such a store was refused ("this ingest would embed with the local
    model"): the automatic ingest embedded although no config reads a vector."""
    store = tmp_path / "s.duckdb"
    _ingest(beir, store, fake_server)
    before = len(fake_server.requests)
    r = CliRunner().invoke(main, ["report", "--dataset", str(beir), "--split", "test", "--config", "bm25-only",
                                  "--store", str(store), "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    space = tmp_path / "space.yaml"  # no fusion field: fusing BM25 alone moves nothing (a space of those is refused)
    space.write_text("threshold.min_score: {float: [0.0, 1.0]}\n")
    r = CliRunner().invoke(main, ["tune", "--dataset", str(beir), "--split", "test", "--force", "--base", "bm25-only",
                                  "--store", str(store), "--out", str(tmp_path / "t.yaml"), "--budget", "3", "--folds", "2",
                                  "--space", str(space)])
    assert r.exit_code == 0, r.output
    assert len(fake_server.requests) == before  # nothing was embedded, locally or remotely
