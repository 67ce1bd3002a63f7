"""Defects a user trial found: a session (and the lab) kept serving results of the corpus before an ingest,
with no notice, and kept a prepare whose reranker had fallen back after the provider recovered."""

from __future__ import annotations

import copy
import re

import polars as pl
import pytest
from conftest import DOCS
from fake_servers import FakeServer, fake_server_fixture  # noqa: F401 - the `fake_server` fixture

from toolkit import session as session_mod
from toolkit.config import load_config
from toolkit.metrics import aggregate, evaluate
from toolkit.pipeline import run_pipeline
from toolkit.session import Session
from toolkit.store import Store

QUERIES = pl.DataFrame({"qid": ["q1", "q3"], "text": ["deploy fails with ECONNREFUSED", "back off when the limit is hit"]})
QRELS = pl.DataFrame({"qid": ["q1", "q3"], "doc_id": ["d1", "d6"], "rel": [1, 1]})
MEASURES = ("nDCG@10", "MRR@10")
EDITED = copy.deepcopy(DOCS)
EDITED[0].update(title="Garden", text="Gardening: tomatoes need water every day.")  # d1, the answer to q1


def _docs(docs: list[dict]) -> list[dict]:
    return [{"doc_id": d["_id"], "source": d["metadata"]["source"], "scope": d["metadata"]["scope"], "title": d["title"],
             "text": d["text"], "metadata": d["metadata"]} for d in docs]


@pytest.fixture
def store(tmp_path, embedder):
    st = Store(tmp_path / "s.duckdb", embedder=embedder)
    st.ingest(_docs(DOCS))
    yield st
    st.close()


def _final(res) -> pl.DataFrame:
    return res.final.select("qid", "doc_id", "rank")


@pytest.mark.parametrize("writer", ["same", "other"])  # "other": a second Store object on the file ingests
def test_an_ingest_is_seen_by_the_next_update_and_said(store, embedder, writer):
    """Before: after the ingest `set` re-scored the old frames (d1's old text still first for q1), the baseline
    metrics, the typed-query lists and the excerpt of `d1#0` were the old corpus's, and `message` was ''."""
    s = Session(store, QUERIES, QRELS, config="default", baseline="bm25-only", measures=MEASURES)
    assert s.metrics["MRR@10"] == 1.0 and s.deltas is not None
    s.inspect(text="deploy fails with ECONNREFUSED")
    assert "ECONNREFUSED" in s.chunk_texts(["d1#0"])["text"][0]
    if writer == "other":
        with Store(store.path, embedder=embedder) as other:
            other.ingest(_docs(EDITED), prune=True)
    else:
        store.ingest(_docs(EDITED), prune=True)

    assert s.set("fusion.rrf_k", 61)
    assert _final(s.result).equals(_final(run_pipeline(store, QUERIES, s.config)))
    assert s.metrics["MRR@10"] < 1.0
    assert "the store changed" in s.message and "prepared again" in s.message, s.message
    base = run_pipeline(store, QUERIES, load_config("bm25-only"))
    assert s.deltas.filter(pl.col("measure") == "MRR@10")["baseline"][0] == pytest.approx(
        aggregate(evaluate(base.run(10), QRELS, list(MEASURES)))["MRR@10"])
    assert s.chunk_texts(["d1#0"])["text"][0].startswith("Gardening")
    assert "Gardening" not in s.inspected.filter(pl.col("doc_id") == "d1")["excerpt"].str.join("")  # typed: d1 no longer matches
    assert s.set("fusion.rrf_k", 60) and s.message == ""  # said once


def test_inspect_after_an_ingest_shows_the_new_corpus(store):
    """Before: `inspect(qid=...)` drew the old trace and the old excerpt of `d1#0` until some slider moved."""
    s = Session(store, QUERIES, QRELS, config="default", baseline=None)
    s.inspect(qid="q1")
    store.ingest(_docs(EDITED), prune=True)
    lists = s.inspect(qid="q1")
    assert not lists.filter(pl.col("doc_id") == "d1")["excerpt"].str.contains("ECONNREFUSED").any()
    assert "the store changed" in s.message


def test_the_lab_says_the_store_changed_and_refresh_redraws(store):
    """Before: the lab drew the old corpus's results under an empty status line, and had no `refresh`."""
    from toolkit.lab import Lab

    lab = Lab(store, QUERIES, QRELS, config="default", baseline=None, live_figures=False)
    store.ingest(_docs(EDITED), prune=True)
    assert lab.refresh()
    assert _final(lab.result).equals(_final(run_pipeline(store, QUERIES, lab.config)))
    assert "the store changed" in lab.message and "the store changed" in lab._status.value
    store.ingest(_docs(DOCS), prune=True)  # and back: `inspect` notices too, and every panel is drawn again
    updates = lab.updates
    lab.inspect(qid="q1")
    assert lab.updates == updates + 1 and "the store changed" in lab.message
    assert _final(lab.result).equals(_final(run_pipeline(store, QUERIES, lab.config)))


def _http_reranked(url: str):
    return load_config("default").with_updates({"rerank.provider": "http", "rerank.url": url, "rerank.model": "m",
                                                "rerank.retries": 0, "rerank.blend": "replace"})


def test_a_fallen_back_reranker_is_asked_again_after_the_cool_down(store, fake_server, monkeypatch):
    """Before: the degraded prepare was kept: after the endpoint recovered every change still gave the
    retrieval order, status "fallback", and `message` ''."""
    fake_server.mode = "500"
    s = Session(store, QUERIES, QRELS, config=_http_reranked(fake_server.rerank_url), baseline=None)
    assert set(s.result.per_query["reranker"]) == {"fallback"}
    assert re.search(r"reranker fallback 2/2 \(HTTP 500\).*asking again in \d+ s", s.message), s.message
    fake_server.mode = "good"
    asked = fake_server.count()
    assert s.set("fusion.rrf_k", 50)  # within the cool-down: the endpoint is not asked on every slider tick
    assert fake_server.count() == asked and "asking again in" in s.message
    monkeypatch.setattr(session_mod, "RETRY_DEGRADED_S", 0.0)
    assert s.set("fusion.rrf_k", 51)
    assert fake_server.count() > asked and set(s.result.per_query["reranker"]) == {"ok"} and s.message == ""
    assert _final(s.result).equals(_final(run_pipeline(store, QUERIES, s.config)))


def test_refresh_asks_a_fallen_back_reranker_again_now(store, fake_server):
    """Before: there was no way to leave the fallback but to restart the session."""
    fake_server.mode = "500"
    s = Session(store, QUERIES, QRELS, config=_http_reranked(fake_server.rerank_url), baseline=None)
    fake_server.mode = "good"
    assert s.refresh() and set(s.result.per_query["reranker"]) == {"ok"} and s.message == ""
