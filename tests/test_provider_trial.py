"""User trial AN: a platform engineer wiring the toolkit to the company's model serving (a reranker behind
`/v1/rerank` or TEI, an embeddings endpoint), who tests the failures that stack really has. Each test is a defect
the trial found: a Retry-After that stalled a search past its timeout, a key sent over plain http to another
machine without a word, a 401 that read like an outage, a fallback a library caller never heard of, Voyage's
answers and a redirect misread, and a report that ignored the reranker `hrt run` used."""

from __future__ import annotations

import json
import time
import warnings

import pytest
from click.testing import CliRunner
from conftest import write_beir
from fake_servers import fake_server_fixture  # noqa: F401 - the fixture is used by name

from toolkit import providers
from toolkit.cli import main
from toolkit.config import ConfigWarning, load_config
from toolkit.rerank import HttpReranker, ProviderError
from toolkit.rerank_env import resolve_rerank


def test_a_retry_after_past_the_calls_bound_is_not_waited(fake_server):
    """Retry-After: 3600 with a 1 s timeout and 2 retries: the search took 62 s (30 s waited twice)."""
    fake_server.limit_first, fake_server.retry_after = 10, "3600"
    rr = HttpReranker(fake_server.rerank_url, timeout_s=1.0, retries=2)
    t0 = time.monotonic()
    with pytest.raises(ProviderError, match=r"rate limited, retry after 3600 s: past this call's bound of 3 s") as e:
        rr.score("deploy", ["deploy server", "lunch"])
    assert time.monotonic() - t0 < 2.5 and len(fake_server.requests) == 1
    assert providers.reason(str(e.value)) == "rate limited, retry after 3600 s"
    # An HTTP date past the bound is not waited either, and a 503 says "unavailable".
    from email.utils import formatdate

    fake_server.limit_first, fake_server.limit_status = len(fake_server.requests) + 5, 503
    fake_server.retry_after = formatdate(time.time() + 600, usegmt=True)
    with pytest.raises(ProviderError, match=r"unavailable, retry after 59\d(\.\d+)? s: past this call's bound"):
        rr.score("deploy", ["deploy server"])


def test_an_environment_reranker_says_where_it_sends_a_key():
    """HRT_RERANK_BASE_URL at an internal reranker took the unrelated $OPENAI_API_KEY over plain http without a
    word; the same in a config file warned."""
    cfg = load_config("agent-memory")
    env = {"HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": "http://10.1.2.3:8080/v1", "OPENAI_API_KEY": "sk-x"}
    with pytest.warns(ConfigWarning, match=r"sends the value of \$OPENAI_API_KEY over unencrypted http to 10\.1\.2\.3"):
        resolve_rerank(cfg, env)
    with pytest.warns(ConfigWarning, match=r"\$OPENAI_API_KEY \(found set; no HRT_RERANK_API_KEY_ENV names it\) to rr\.internal"):
        resolve_rerank(cfg, {**env, "HRT_RERANK_BASE_URL": "https://rr.internal/v1"})
    with warnings.catch_warnings():  # named on purpose, over https; a URL and key of one family; loopback: nothing to say
        warnings.simplefilter("error")
        resolve_rerank(cfg, {**env, "HRT_RERANK_BASE_URL": "https://rr.internal/v1", "HRT_RERANK_API_KEY_ENV": "RR_KEY"})
        resolve_rerank(cfg, {"HRT_RERANK_PROVIDER": "http", "AGENT_MEMORY_RERANK_BASE_URL": "https://rr.internal/v1",
                             "AGENT_MEMORY_RERANK_API_KEY": "k"})
        resolve_rerank(cfg, {**env, "HRT_RERANK_BASE_URL": "http://127.0.0.1:8080/v1"})
    out, src = resolve_rerank(cfg, {"HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": "http://127.0.0.1:9/v1"})
    assert "no key: none of HRT_RERANK_API_KEY_ENV, AGENT_MEMORY_RERANK_API_KEY, OPENAI_API_KEY is set" in src.describe(out)


def test_an_auth_failure_says_so_and_a_library_caller_hears_of_the_fallback(fake_server, monkeypatch, tmp_path, corpus_file):
    """A 401 read "reranker unavailable (HTTP 401)", like an outage; and `run_pipeline` served un-reranked results
    with no warning or log record (only per_query said it)."""
    from toolkit.pipeline import run_pipeline
    from toolkit.store import Store

    monkeypatch.setenv("RR_KEY", "wrong-key-123")
    fake_server.mode = "500"
    rr = HttpReranker(fake_server.rerank_url, api_key_env="RR_KEY", retries=0)
    fake_server.limit_first, fake_server.limit_status = len(fake_server.requests) + 1, 401
    with pytest.raises(ProviderError, match=r"HTTP 401 auth failed, key refused \(sent as Authorization: Bearer\), from"):
        rr.score("q", ["a"])
    fake_server.limit_first = len(fake_server.requests) + 1
    with pytest.raises(ProviderError, match=r"HTTP 401 auth failed, no key sent \(api_key_env names"):
        HttpReranker(fake_server.rerank_url, retries=0).score("q", ["a"])

    ds = write_beir(tmp_path / "ds", corpus_file)
    cfg = load_config("bm25-only").with_updates({"rerank.provider": "http", "rerank.url": fake_server.rerank_url,
                                                 "rerank.api_key_env": "RR_KEY", "rerank.retries": 0})
    fake_server.limit_first = len(fake_server.requests) + 100
    from toolkit.loaders import Dataset, load_corpus

    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(load_corpus(ds), embed=False)
        with pytest.warns(providers.ProviderFallbackWarning, match=r"reranker fallback \d+/\d+ \(HTTP 401 auth failed, key refused\)"):
            res = run_pipeline(st, Dataset.open(ds).queries("test"), cfg, one_shot=True)
    assert (res.per_query["reranker"] == "fallback").all()


def test_voyage_answers_are_read_and_a_redirect_is_named(fake_server):
    fake_server.mode = "voyage"
    assert HttpReranker(fake_server.rerank_url).score("deploy server", ["deploy server", "lunch"]) == [2.0, 0.0]
    fake_server.mode = "redirect"
    with pytest.raises(ProviderError, match=r"HTTP 308 redirect from .* to https://rerank\.internal/v1/rerank: set that URL") as e:
        HttpReranker(fake_server.rerank_url, retries=0).score("q", ["a"])
    assert providers.reason(str(e.value)) == "HTTP 308 redirect"


def test_a_shortened_reason_keeps_its_numbers():
    """"the reranker scored 3 of the 15 documents sent (top_n was 1…": the 15 cut to a 1."""
    err = "rr: the reranker scored 3 of the 15 documents sent (top_n was 15)"
    assert providers.reason(err) == "scored 3 of the 15 documents sent"


def test_report_uses_the_reranker_the_environment_names(fake_server, tmp_path, monkeypatch, corpus_file):
    """`hrt run` reranked with HRT_RERANK_*, `hrt report` on the same config and environment made no call and said
    "ok"."""
    ds = write_beir(tmp_path / "ds", corpus_file)
    monkeypatch.setenv("HRT_RERANK_PROVIDER", "http")
    monkeypatch.setenv("HRT_RERANK_BASE_URL", fake_server.rerank_url.removesuffix("/rerank"))
    r = CliRunner().invoke(main, ["report", "--dataset", str(ds), "--split", "test", "--config", "bm25-only",
                                  "--store", str(tmp_path / "s.duckdb"), "--latency-sample", "0", "--out", str(tmp_path / "r.html")])
    assert r.exit_code == 0, r.output
    assert "bm25-only: reranker: http" in r.stderr and "from the environment (HRT_RERANK_PROVIDER, HRT_RERANK_BASE_URL)" in r.stderr
    assert any(q["path"] == "/v1/rerank" for q in fake_server.requests)
    assert json.dumps(fake_server.requests[-1]["body"]).count("documents") == 1


def test_requests_hold_at_most_batch_size_documents_cut_to_max_chars(fake_server, caplog):
    """Every call sent the whole pool (49 documents where TEI takes 32 by default: a 413 on every query), and a
    216 KB title and a 105 KB query went whole (a provider refusing long inputs lost every query holding them)."""
    import logging

    docs = [f"deploy note {i}" for i in range(70)]
    docs[5] = "deploy " + "x" * 10_000
    rr = HttpReranker(fake_server.rerank_url, batch_size=32, max_chars=4000)
    with caplog.at_level(logging.WARNING, logger="toolkit"):
        scores = rr.score("deploy " + "q" * 6000, docs)
        rr.score("deploy", ["y" * 5000])  # said once per reranker
    sent = [q["body"] for q in fake_server.requests]
    assert [len(b["documents"]) for b in sent[:3]] == [32, 32, 6]
    assert max(len(d) for b in sent for d in b["documents"]) == 4000 and len(sent[0]["query"]) == 4000
    assert scores == [1.0] * 70  # in request order across the batches: "deploy" shared with each
    assert caplog.text.count("longer than rerank.max_chars (4000) are cut") == 1 and "10007 characters" in caplog.text
    cfg = load_config("qmd")
    assert (cfg.rerank.batch_size, cfg.rerank.max_chars) == (32, 4000)


def test_an_embedding_input_the_endpoint_refuses_is_named(fake_server):
    """`hrt ingest --embed-url` stopped on a provider 400 ("maximum context length") without saying which text."""
    from toolkit.config import DenseConfig
    from toolkit.embed import make_embedder

    fake_server.mode = "too_long"
    emb = make_embedder(**DenseConfig(provider="http", url=fake_server.embeddings_url, model="fake-embed", retries=0).embedder_args())
    try:
        with pytest.raises(ProviderError, match=r"HTTP 400 .*maximum context length.*the batch's longest text has 5,006 "
                                                r"characters and starts 'Runbook: zzzz"):
            emb.embed(["short", "Runbook: " + "z" * 4997])
    finally:
        emb.close()


def test_cached_reranker_scores_can_be_dropped(fake_server, tmp_path, corpus_file):
    """New weights served under the same model name and URL: the old scores were reused for ever, and nothing but
    a new store dropped them."""
    from conftest import write_beir

    ds = write_beir(tmp_path / "ds", corpus_file)
    store = str(tmp_path / "s.duckdb")
    env = {"HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": fake_server.rerank_url.removesuffix("/rerank")}
    args = ["run", "--dataset", str(ds), "--split", "test", "--config", "bm25-only", "--store", store, "--out", str(tmp_path / "r.trec")]
    assert CliRunner().invoke(main, args, env=env).exit_code == 0
    info = json.loads(CliRunner().invoke(main, ["info", "--store", store]).stdout)
    (name, n), = info["reranker_scores"].items()
    assert n > 0 and name.endswith("/v1/rerank")
    calls = len(fake_server.requests)
    assert CliRunner().invoke(main, args, env=env).exit_code == 0 and len(fake_server.requests) == calls  # cached
    r = CliRunner().invoke(main, ["clear-cache", "--store", store, "--model", name])
    assert r.exit_code == 0 and f"dropped {n:,} cached reranker score(s)" in r.stderr
    assert CliRunner().invoke(main, args, env=env).exit_code == 0 and len(fake_server.requests) > calls  # asked again
