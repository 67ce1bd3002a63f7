"""User trial BJ: a platform engineer running `hrt` against the company's embedding and rerank servers (TEI, an
OpenAI-compatible gateway) behind a corporate proxy. Each test is a defect the trial found: a key that went in
cleartext to the proxy without a word, a failing endpoint that stalled a search far past the documented bound, a
stock TEI server that `hrt ingest --embed-url` could not talk to, a hint about long texts given for any refusal, a
pasted key's stray character reported as an encoding error or an outage, a size cap that large batches hit, a base
URL read as a 404, a certificate error retried, and `true` read as 1.0 in a vector."""

from __future__ import annotations

import json
import time
import warnings

import pytest
from click.testing import CliRunner
from fake_servers import FakeServer, fake_server_fixture  # noqa: F401 - the fixture is used by name

from toolkit import embed_http, providers, rerank
from toolkit.cli import main
from toolkit.config import ConfigWarning, DenseConfig, RerankConfig, load_config
from toolkit.embed_http import HttpEmbedder
from toolkit.errors import ToolkitError
from toolkit.rerank import HttpReranker, ProviderError
from toolkit.rerank_env import resolve_rerank

PROXY_VARS = ("HTTP_PROXY", "http_proxy", "HTTPS_PROXY", "https_proxy", "ALL_PROXY", "all_proxy", "NO_PROXY", "no_proxy")


@pytest.fixture
def no_proxy_env(monkeypatch):
    """No proxy from the machine running the tests; a test sets the ones it means."""
    for v in PROXY_VARS:
        monkeypatch.delenv(v, raising=False)
    return monkeypatch


def _corpus(path, texts):
    path.write_text("".join(json.dumps({"_id": f"d{i}", "title": "", "text": t}) + "\n" for i, t in enumerate(texts)))
    return path


def _ingest(tmp_path, server, *args, texts=None, url=None):
    src = _corpus(tmp_path / "corpus.jsonl", texts or [f"note {i} about deploying service {i}" for i in range(3)])
    return CliRunner().invoke(main, ["ingest", str(src), "--store", str(tmp_path / "s.duckdb"), "--embed-url",
                                     url or server.embeddings_url, "--model", "fake-embed", *args])


# ------------------------------------------------------------------ 1. a key through a proxy


def test_a_key_sent_through_a_proxy_on_another_machine_is_warned_about(tmp_path, no_proxy_env):
    """HTTP_PROXY named another machine: a config whose endpoint is on this machine sent both keys to it in
    cleartext, and no warning said so (the loopback URL was exempt)."""
    no_proxy_env.setenv("RR_KEY", "k")
    cfg = tmp_path / "c.json"
    cfg.write_text(json.dumps({"rerank": {"provider": "http", "url": "http://127.0.0.1:9/v1/rerank", "api_key_env": "RR_KEY"}}))
    with warnings.catch_warnings():  # direct to this machine: nothing leaves it
        warnings.simplefilter("error")
        load_config(cfg)
    no_proxy_env.setenv("HTTP_PROXY", "http://user:pw@192.0.2.7:3128")
    with pytest.warns(ConfigWarning, match=r"sends the value of \$RR_KEY over unencrypted http to 127\.0\.0\.1 through "
                                           r"the proxy 192\.0\.2\.7:3128 .*NO_PROXY=127\.0\.0\.1 goes direct") as got:
        load_config(cfg)
    assert "pw" not in str(got[0].message)  # the proxy's own credentials are not shown
    env = {"HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": "http://localhost:8080/v1", "HRT_RERANK_API_KEY_ENV": "RR_KEY"}
    with pytest.warns(ConfigWarning, match=r"reranker from the environment sends .* to localhost through the proxy 192\.0\.2\.7"):
        resolve_rerank(load_config("agent-memory"), env)
    no_proxy_env.setenv("NO_PROXY", "127.0.0.1,localhost")
    with warnings.catch_warnings():  # NO_PROXY: direct again
        warnings.simplefilter("error")
        load_config(cfg)
        resolve_rerank(load_config("agent-memory"), env)


def test_ingest_embed_url_warns_of_a_key_sent_in_cleartext(tmp_path, no_proxy_env, fake_server):
    """`hrt ingest --embed-url http://<another host>/...` sent the key with no warning (a config file with the URL
    warned); through a proxy it said nothing either."""
    no_proxy_env.setenv("EMB_KEY", "k")
    r = _ingest(tmp_path, fake_server, "--api-key-env", "EMB_KEY")
    assert r.exit_code == 0 and "warning" not in r.output, r.output  # loopback, no proxy: nothing to say
    no_proxy_env.setenv("HTTP_PROXY", "http://192.0.2.7:9")  # never reached: the request fails in 0.2 s
    r = _ingest(tmp_path, fake_server, "--api-key-env", "EMB_KEY", "--embed-timeout", "0.2", "--embed-retries", "0",
                texts=["a new note"])
    assert "warning: --embed-url: sends the value of $EMB_KEY over unencrypted http to 127.0.0.1 through the proxy " \
           "192.0.2.7:9" in r.output, r.output
    assert "sent through the proxy 192.0.2.7:9" in r.output  # and the failure says where it went


def test_a_proxys_refusal_says_a_proxy_was_used(no_proxy_env):
    """A proxy answering 502 read as the endpoint's own 502."""
    with FakeServer() as proxy, FakeServer() as endpoint:  # the "proxy" routes nothing: 404 for the absolute URL
        proxy.mode = "500"
        no_proxy_env.setenv("HTTP_PROXY", proxy.base_url)
        with pytest.raises(ProviderError, match=r"HTTP 500: .*sent through the proxy 127\.0\.0\.1:\d+, which HTTP_PROXY") as e:
            HttpReranker(endpoint.rerank_url, retries=0).score("q", ["a"])
        assert proxy.count() == 1 and endpoint.count() == 0
        assert providers.note("reranker", str(e.value)) == (f"reranker unavailable (HTTP 500 via the proxy "
                                                            f"{proxy.base_url[7:]}): retrieval order kept")


# ------------------------------------------------------------------ 2. the documented bound


def test_backoff_pauses_are_capped_and_fit_the_bound(fake_server, monkeypatch):
    """HRT_RERANK_TIMEOUT=1, RETRIES=6 against an endpoint answering 503 at once: 16.9 s of doubling pauses
    for a documented 7 s."""
    waits = []
    monkeypatch.setattr(rerank, "_sleep", waits.append)
    fake_server.limit_first, fake_server.limit_status = 100, 503
    with pytest.raises(ProviderError, match=r"HTTP 503"):
        HttpReranker(fake_server.rerank_url, timeout_s=30, retries=10, backoff_s=0.5).score("q", ["a"])
    assert waits[:5] == [0.5, 1.0, 2.0, 4.0, 8.0] and max(waits) == rerank.BACKOFF_MAX_S  # not 256 s
    monkeypatch.undo()
    fake_server.requests.clear()
    t0 = time.monotonic()
    with pytest.raises(ProviderError, match=r"HTTP 503"):  # real pauses: 0.05 .. 1.6 s before, 3.15 s in all
        HttpReranker(fake_server.rerank_url, timeout_s=0.2, retries=6, backoff_s=0.05).score("q", ["a"])
    assert time.monotonic() - t0 < 1.4 + 0.3  # timeout x attempts, and some slack for a busy machine


def test_one_rerank_call_has_one_deadline_over_its_batches(fake_server):
    """A reranker hanging on 2 of every 3 requests, 3 batches: each batch got the whole bound (14.9 s for 6 s)."""
    fake_server.slow_requests, fake_server.delay_s = {0, 1, 3, 4, 6, 7}, 5.0
    rr = HttpReranker(fake_server.rerank_url, timeout_s=0.3, retries=2, backoff_s=0.01, batch_size=2)
    t0 = time.monotonic()
    with pytest.raises(ProviderError, match=r"timed out after") as e:
        rr.score("deploy", [f"doc {i}" for i in range(6)])
    assert time.monotonic() - t0 < 1.5 + 0.4, str(e.value)
    assert "bound of 1.5 s (timeout x (batches + retries))" in str(e.value)


def test_a_healthy_reranker_of_several_batches_is_not_cut_off(fake_server):
    """The review: under one timeout for all batches, a reranker answering each of 4 batches well within its timeout
    fell back every time (HRT_RERANK_TIMEOUT=2 HRT_RERANK_RETRIES=0 with 0.8 s a batch)."""
    fake_server.slow_requests, fake_server.delay_s = {0, 1, 2, 3}, 0.2
    rr = HttpReranker(fake_server.rerank_url, timeout_s=0.5, retries=0, backoff_s=0.01, batch_size=2)
    assert len(rr.score("deploy", [f"doc {i}" for i in range(8)])) == 8  # 0.8 s over 4 batches of 0.5 s each


def test_one_embedding_call_has_one_deadline_over_its_batches(fake_server):
    """The query-time embedder: each batch had its own timeout x attempts. Now a call of n batches ends within
    timeout x (n + retries): one search's query (one batch) within timeout x attempts."""
    fake_server.slow_requests, fake_server.delay_s = {0, 1, 3, 4, 6, 7}, 5.0
    emb = HttpEmbedder(fake_server.embeddings_url, "fake-embed", timeout_s=0.3, retries=2, backoff_s=0.01, batch_size=1)
    t0 = time.monotonic()
    with pytest.raises(ProviderError, match=r"timed out after .*bound of 1\.5 s \(timeout x \(batches \+ retries\)\)"):
        emb.embed(["a", "b", "c"])
    assert time.monotonic() - t0 < 1.5 + 0.4
    emb.close()


# ------------------------------------------------------------------ 3. a stock TEI server


def test_ingest_talks_to_a_stock_tei_server_and_takes_the_endpoint_options(tmp_path, fake_server):
    """TEI refuses more than 32 inputs a request (HTTP 413) and `hrt ingest` sent 64, with no option to send fewer."""
    fake_server.max_batch = 32
    texts = [f"note {i}: service {i} deploys on day {i % 7}" for i in range(40)]
    r = _ingest(tmp_path, fake_server, texts=texts)
    assert r.exit_code == 0, r.output
    assert max(len(q["body"]["input"]) for q in fake_server.requests) == 32
    r = _ingest(tmp_path, fake_server, "--embed-batch-size", "40", texts=[t + " (changed)" for t in texts])
    assert r.exit_code != 0
    assert "HTTP 413" in r.output and "40 texts were sent in one request: lower the batch size (hrt ingest " \
           "--embed-batch-size" in r.output
    assert "longest text" not in r.output  # not about a text's length
    fake_server.max_batch, fake_server.fail_first = None, len(fake_server.requests) + 1
    r = _ingest(tmp_path, fake_server, "--embed-retries", "0", "--embed-timeout", "5", texts=[t + "!" for t in texts])
    assert r.exit_code != 0 and "HTTP 500" in r.output and "(1 attempt)" in r.output
    r = CliRunner().invoke(main, ["ingest", str(tmp_path / "corpus.jsonl"), "--store", str(tmp_path / "t.duckdb"),
                                  "--embed-batch-size", "8", "--no-embed"])
    assert r.exit_code != 0 and "only with --embed-url" in r.output


# ------------------------------------------------------------------ 4. the long-text hint


def test_the_long_text_hint_only_for_a_refusal_about_length(tmp_path, fake_server):
    """Every 400/413/422 said "the batch's longest text ...: an endpoint refuses inputs past its model's context",
    whatever the server said, and never which document."""
    fake_server.mode = "bad_request"
    emb = HttpEmbedder(fake_server.embeddings_url, "fake-embed", retries=0)
    with pytest.raises(ProviderError) as e:
        emb.embed(["short", "a bit longer"])
    assert "Unrecognized request argument supplied: dimensions" in str(e.value) and "longest" not in str(e.value)
    fake_server.mode = "too_long"
    r = _ingest(tmp_path, fake_server, "--chunk-size", "3000", texts=["fine", "Runbook: " + "zz " * 700, "also fine"])
    assert r.exit_code != 0
    assert "maximum context length" in r.output and "the batch's longest text has 2,109 characters" in r.output
    assert "a smaller --chunk-size makes shorter chunks" in r.output and "that text is chunk 'd1#0'" in r.output


# ------------------------------------------------------------------ 5. a malformed key


@pytest.mark.parametrize(("key", "said"), [
    ("sk-SECRET-abc123\r", r"a carriage return \(\\r\) as the last of its 17 characters"),
    ("sk-SECRET-abc123\u2019", r"U\+2019 \(right single quotation mark\) as the last of its 17 characters"),
    ("sk-SECRET\n-abc123", r"a line feed \(\\n\) as character 10 of its 17 characters"),
])
def test_a_malformed_key_is_named_by_variable_and_position(fake_server, monkeypatch, key, said):
    """A key with a stray CR (a CRLF file), a typographic quote or a line break failed as an output-encoding error,
    a raw UnicodeEncodeError, or an "Illegal header value" retried and fallen back like an outage."""
    monkeypatch.setenv("MY_KEY", key)
    for make in (lambda: HttpEmbedder(fake_server.embeddings_url, "m", api_key_env="MY_KEY").embed(["x"]),
                 lambda: HttpReranker(fake_server.rerank_url, api_key_env="MY_KEY").score("q", ["a"])):
        with pytest.raises(ToolkitError, match=r"the value of \$MY_KEY has " + said) as e:
            make()
        assert not isinstance(e.value, ProviderError)  # a setup error: not retried, never a fallback
        assert "SECRET" not in str(e.value) and "\u2019" not in str(e.value)
    assert fake_server.count() == 0


def test_a_malformed_key_stops_an_ingest_before_any_request(tmp_path, fake_server, monkeypatch):
    monkeypatch.setenv("MY_KEY", "sk-SECRET-abc123\r")
    r = _ingest(tmp_path, fake_server, "--api-key-env", "MY_KEY")
    assert r.exit_code != 0 and "$MY_KEY has a carriage return" in r.output and "SECRET" not in r.output
    assert fake_server.count() == 0


# ------------------------------------------------------------------ 6. the answer cap


def test_the_answer_cap_grows_with_the_batch_and_says_to_lower_it(fake_server, monkeypatch):
    """600 vectors of 3,072 numbers passed the fixed 20 MB cap (here: a cap of 2,000 bytes and 8-d vectors)."""
    monkeypatch.setattr(rerank, "MAX_ANSWER_BYTES", 2_000)
    monkeypatch.setattr(embed_http, "MAX_ANSWER_BYTES", 2_000, raising=False)
    emb = HttpEmbedder(fake_server.embeddings_url, "fake-embed", dimensions=8, batch_size=200, retries=0)
    assert emb.embed([f"text {i}" for i in range(200)]).shape == (200, 8)  # ~20 kB: within 2,000 + 200 x 8 x 24
    fake_server.answer_padding = 10_000
    with pytest.raises(ProviderError, match=r"answer larger than 2,960 bytes: 5 vectors in one answer; lower the batch "
                                            r"size \(hrt ingest --embed-batch-size, retrieval\.dense\.batch_size"):
        emb.embed([f"text {i}" for i in range(5)])


# ------------------------------------------------------------------ 7. OpenAI-style base URLs


def test_a_base_url_ending_in_v1_gets_the_endpoints_path(tmp_path, fake_server):
    """`--embed-url http://host/v1` was a bare 404 while HRT_RERANK_BASE_URL took that form."""
    r = _ingest(tmp_path, fake_server, url=fake_server.base_url + "/v1/")
    assert r.exit_code == 0, r.output
    assert {q["path"] for q in fake_server.requests} == {"/v1/embeddings"}
    assert DenseConfig(provider="http", url="http://h:8/v1", model="m").url == "http://h:8/v1/embeddings"
    assert RerankConfig(provider="http", url="http://h:8/v1").url == "http://h:8/v1/rerank"
    assert HttpReranker(fake_server.base_url + "/v1").score("deploy", ["deploy", "lunch"]) == [1.0, 0.0]
    assert DenseConfig(provider="http", url="http://h:8/embed", model="m").url == "http://h:8/embed"  # others as given


# ------------------------------------------------------------------ 8. TLS


def test_an_unverified_certificate_is_not_retried_and_names_ssl_cert_file(monkeypatch):
    """A self-signed certificate: the same failure retried with backoff, and nothing said how to trust it."""
    monkeypatch.delenv("SSL_CERT_FILE", raising=False)
    monkeypatch.delenv("SSL_CERT_DIR", raising=False)
    with FakeServer(tls=True) as server:
        t0 = time.monotonic()
        with pytest.raises(ProviderError, match=r"TLS certificate not verified .*set SSL_CERT_FILE to that CA's PEM file"):
            HttpEmbedder(server.embeddings_url, "m", retries=3, backoff_s=1.0).embed(["x"])
        assert time.monotonic() - t0 < 1.0  # no 1 + 2 + 4 s of backoff
        from fake_servers import TLS_PEM

        monkeypatch.setenv("SSL_CERT_FILE", str(TLS_PEM))  # what the message says to do works
        assert HttpEmbedder(server.embeddings_url, "m", retries=0).embed(["x"]).shape == (1, 8)


# ------------------------------------------------------------------ 9. booleans


def test_a_boolean_in_an_embedding_is_refused(fake_server):
    """[0.1, true, ...] was read as [0.1, 1.0, ...]."""
    fake_server.mode = "bool_vec"
    with pytest.raises(ProviderError, match=r"embedding components must be JSON numbers, got 'True'"):
        HttpEmbedder(fake_server.embeddings_url, "fake-embed", retries=0).embed(["a", "b"])


@pytest.mark.parametrize("bad", ["http://user:pw@[bad", "http://proxy.corp:port"])
def test_a_malformed_proxy_variable_is_named_not_a_traceback(monkeypatch, bad):
    """User trial BM: `HTTP_PROXY='http://user:pw@[bad'` crashed `hrt search` and ingest with a raw ValueError (and
    hid the real error of an https request); a non-numeric port ended in httpx's InvalidURL."""
    from toolkit.config import cleartext_hop

    monkeypatch.setenv("HTTP_PROXY", bad)
    assert "pw" not in (cleartext_hop("http://127.0.0.1:9/v1/embeddings") or "")
    emb = HttpEmbedder("http://127.0.0.1:9/v1/embeddings", "m", timeout_s=0.3, retries=0)
    with pytest.raises(ProviderError) as e:
        emb.embed(["x"])
    assert "Traceback" not in str(e.value) and "pw" not in str(e.value)
