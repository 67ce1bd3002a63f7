"""User trial: an endpoint that echoes the API key back (in a 401 body, a 5xx body, a 200 of the wrong shape)
must not get the key printed, raised or stored, whatever its shape (`hunter2pass` matches no key pattern)
and however the server spells it (raw, JSON-escaped, percent-encoded). Both the http embedder and the
http reranker, through the CLI and through `prepare`."""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from pathlib import Path
from typing import Any
from urllib.parse import quote, quote_plus

import polars as pl
import pytest
from click.testing import CliRunner
from fake_servers import FakeServer

from toolkit.cli import main
from toolkit.config import config_from_dict, load_config
from toolkit.embed_http import HttpEmbedder
from toolkit.pipeline import prepare, run_pipeline
from toolkit.rerank import HttpReranker, ProviderError, rerank_scores
from toolkit.store import Store

# A key of no known shape, one with dots and dashes, and one a server must escape in JSON and in a URL.
KEYS = ["hunter2pass", "abc.def-ghi", 'p/q+r=s t"u\\v']


def spellings(key: str) -> set[str]:
    """The ways the echo server writes the key (what must appear nowhere)."""
    return {key, json.dumps(key)[1:-1], quote(key, safe=""), quote_plus(key), quote(key, safe="").lower()}


def assert_clean(text: str, key: str) -> None:
    leaked = [s for s in spellings(key) if s in text]
    assert not leaked, f"key leaked as {leaked} in: {text}"


class EchoServer(FakeServer):
    """`FakeServer` whose `echo` mode answers with the Authorization header and the key in every spelling:
    "401" (fails at once), "500" (retried), "shape" (HTTP 200, JSON of the wrong shape), "malformed"
    (HTTP 200, not JSON). Any other `echo` leaves the request to the base modes ("good", "slow", ...)."""

    def __init__(self) -> None:
        super().__init__()
        self.echo: str | None = None

    def answer(self, path: str, body: Any, headers: dict[str, str]) -> tuple[int, bytes]:
        if self.echo is None:
            return super().answer(path, body, headers)
        self.requests.append({"path": path, "body": body, "headers": headers})
        auth = headers.get("authorization", "")
        key = auth.removeprefix("Bearer ")
        raw = f'{{"error": "invalid key {key} (header {auth})", '  # as a careless server formats it
        rest = json.dumps({"key": key, "url": f"/v1?api_key={quote(key, safe='')}&k={quote_plus(key)}"})[1:]
        if self.echo == "401":
            return 401, (raw + rest).encode()
        if self.echo == "500":
            return 500, (raw + rest).encode()
        if self.echo == "shape":  # a gateway answering 200 with an error object
            return 200, json.dumps({"error": {"message": f"invalid key {key}", "authorization": auth}}).encode()
        if self.echo == "malformed":
            return 200, f"<html>invalid key {key}".encode()
        return super().answer(path, body, headers)


@pytest.fixture
def echo() -> Iterator[EchoServer]:
    with EchoServer() as s:
        yield s


@pytest.fixture(params=KEYS, ids=["plain", "dotted", "escaped"])
def key(request: pytest.FixtureRequest, monkeypatch: pytest.MonkeyPatch) -> str:
    monkeypatch.setenv("MYKEY", request.param)
    return request.param


@pytest.mark.parametrize("mode", ["401", "500", "shape", "malformed"])
def test_http_reranker_errors_never_quote_the_key(echo, key, mode):
    echo.echo = mode
    rr = HttpReranker(echo.rerank_url, api_key_env="MYKEY", retries=1, timeout_s=5)
    with pytest.raises(ProviderError) as e:
        rr.score("q", ["a", "b"])
    assert_clean(str(e.value), key)
    assert echo.requests[0]["headers"]["authorization"] == f"Bearer {key}"  # the key did reach the endpoint
    if mode == "401":
        assert "HTTP 401" in str(e.value) and "[redacted]" in str(e.value)
    if mode == "500":  # the retries' last error
        assert "HTTP 500" in str(e.value) and "(2 attempts)" in str(e.value)


@pytest.mark.parametrize("mode", ["401", "500", "shape", "malformed"])
def test_http_embedder_errors_never_quote_the_key(echo, key, mode):
    echo.echo = mode
    emb = HttpEmbedder(echo.embeddings_url, "fake-embed", api_key_env="MYKEY", retries=1, backoff_s=0.01)
    with pytest.raises(ProviderError) as e:
        emb.embed(["some text"])
    assert_clean(str(e.value), key)
    if mode == "401":
        assert "HTTP 401" in str(e.value) and "[redacted]" in str(e.value)


def test_timeouts_say_so_and_quote_nothing(echo, key):
    echo.mode, echo.delay_s = "slow", 2.0
    with pytest.raises(ProviderError, match=r"timed out after 0.3s \(1 attempt\)") as e:
        HttpReranker(echo.rerank_url, api_key_env="MYKEY", retries=0, timeout_s=0.3).score("q", ["a"])
    assert_clean(str(e.value), key)


def test_a_long_echo_cut_to_length_leaves_no_part_of_the_key(echo, monkeypatch):
    key = "Zq" + "x" * 40 + "hunter2pass"
    monkeypatch.setenv("MYKEY", key)
    echo.echo = "401"
    for pad in range(0, 60, 7):  # wherever the 300-character cut falls, no piece of the key is left
        original = echo.answer

        def padded(path, body, headers, pad=pad):
            return 401, b" " * (300 - pad - len("invalid key ")) + b"invalid key " + key.encode() + b" " * 400

        echo.answer = padded
        with pytest.raises(ProviderError) as e:
            HttpReranker(echo.rerank_url, api_key_env="MYKEY", retries=0).score("q", ["a"])
        assert "Zqx" not in str(e.value) and "hunter2" not in str(e.value)
        echo.answer = original


def _store(tmp_path: Path) -> Path:
    tmp_path.mkdir(parents=True, exist_ok=True)
    path = tmp_path / "s.duckdb"
    docs = [{"doc_id": "a", "source": "a", "scope": None, "title": "", "text": "the deploy key lives in vault", "metadata": {}},
            {"doc_id": "b", "source": "b", "scope": None, "title": "", "text": "deploy notes: the key was rotated", "metadata": {}}]
    with Store(path) as st:
        st.ingest(docs, embed=False)
    return path


def _queries() -> pl.DataFrame:
    return pl.DataFrame({"qid": ["q1", "q2"], "text": ["deploy key", "key rotated"], "scope": [None, None]},
                        schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8})


def test_prepare_stores_no_key_in_the_rerank_status(tmp_path, echo, key, caplog, capsys):
    echo.echo = "401"
    cfg = config_from_dict({"retrieval": {"dense": {"enabled": False}},
                            "rerank": {"provider": "http", "url": echo.rerank_url, "api_key_env": "MYKEY", "retries": 0}})
    with caplog.at_level(logging.DEBUG), Store(_store(tmp_path), read_only=True) as st:
        prep = prepare(st, _queries(), cfg)
        res = run_pipeline(st, _queries(), cfg)
    assert set(prep.rerank_status["status"]) == {"fallback"}
    assert "HTTP 401" in prep.rerank_status["error"][0]
    assert_clean(json.dumps(prep.rerank_status.to_dicts()), key)
    assert_clean(json.dumps(res.per_query.to_dicts(), default=str), key)
    assert_clean(caplog.text + "".join(capsys.readouterr()), key)


def test_a_tripped_reranker_status_quotes_its_last_error_without_the_key(echo, key):
    echo.echo = "500"
    pairs = pl.DataFrame({"qid": ["1", "2", "3"], "query": ["a", "b", "c"], "doc_id": ["d"] * 3, "chunk_id": ["d#0"] * 3,
                          "text": ["x"] * 3})
    _, status = rerank_scores(pairs, HttpReranker(echo.rerank_url, api_key_env="MYKEY", retries=0),
                              max_consecutive_failures=1)
    assert status["status"].to_list() == ["fallback"] * 3
    assert "not called after 1 consecutive failures (last: " in status["error"][2] and "HTTP 500" in status["error"][2]
    assert_clean(json.dumps(status.to_dicts()), key)


def test_an_unknown_provider_failure_is_scrubbed_of_the_key_the_provider_names(key):
    class Leaky:
        name, secrets = "leaky", (key,)

        def score(self, query: str, documents: list[str]) -> list[float | None]:
            raise RuntimeError(f"client refused header Authorization={key!r} for {quote(key, safe='')}")

    pairs = pl.DataFrame({"qid": ["1"], "query": ["a"], "doc_id": ["d"], "chunk_id": ["d#0"], "text": ["x"]})
    _, status = rerank_scores(pairs, Leaky())
    assert status["status"][0] == "fallback" and status["error"][0].startswith("leaky: RuntimeError: client refused")
    assert_clean(status["error"][0], key)


def test_prepare_stores_no_key_in_the_embedder_fallback_status(tmp_path, corpus_file, echo, key):
    cfg = load_config("default").with_updates({"retrieval.dense.provider": "http", "retrieval.dense.url": echo.embeddings_url,
                                               "retrieval.dense.model": "fake-embed", "retrieval.dense.api_key_env": "MYKEY",
                                               "retrieval.dense.retries": 0})
    path = tmp_path / "e.duckdb"
    r = CliRunner().invoke(main, ["ingest", str(corpus_file), "--store", str(path), "--embed-url", echo.embeddings_url,
                                  "--model", "fake-embed", "--api-key-env", "MYKEY"])
    assert r.exit_code == 0, r.output
    echo.echo = "401"
    q = pl.DataFrame({"qid": ["q"], "text": ["deploy server"], "scope": [None]}, schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8})
    with Store(path, read_only=True) as st:
        prep = prepare(st, q, cfg)
        res = run_pipeline(st, q, cfg)
    assert prep.embed_status is not None and "HTTP 401" in prep.embed_status["error"][0]
    assert_clean(json.dumps(prep.embed_status.to_dicts()), key)
    assert res.per_query["provider_notes"].to_list() == [["embedder unavailable (HTTP 401 auth failed, key refused): lexical results only"]]


def test_hrt_ingest_with_an_echoing_endpoint_prints_no_key(tmp_path, corpus_file, echo, key):
    echo.echo = "401"
    r = CliRunner().invoke(main, ["ingest", str(corpus_file), "--store", str(tmp_path / "http.duckdb"), "--embed-url",
                                  echo.embeddings_url, "--model", "fake-embed", "--api-key-env", "MYKEY"])
    assert r.exit_code == 2 and "error: HTTP 401 auth failed, key refused (sent as Authorization: Bearer), from " in r.stderr
    assert_clean(r.output + r.stderr, key)


def test_hrt_search_with_an_echoing_reranker_prints_no_key(tmp_path, echo, key, monkeypatch):
    for var in ("AGENT_MEMORY_RERANK_PROVIDER", "HRT_RERANK_TIMEOUT", "HRT_RERANK_RETRIES"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HRT_RERANK_PROVIDER", "http")
    monkeypatch.setenv("HRT_RERANK_BASE_URL", echo.base_url + "/v1")
    monkeypatch.setenv("HRT_RERANK_API_KEY_ENV", "MYKEY")
    echo.echo = "401"
    for fmt in ("compact", "json"):
        r = CliRunner().invoke(main, ["search", "deploy key", "--store", str(_store(tmp_path / fmt)), "--mode", "lexical",
                                      "-v", "--format", fmt])
        assert r.exit_code == 0, r.output
        assert "HTTP 401" in r.output + r.stderr
        assert_clean(r.output + r.stderr, key)


@pytest.mark.parametrize("mode", ["401", "shape", "malformed"])
def test_http_expander_errors_never_quote_the_key(echo, key, mode):
    """The chat expander quotes a wrong-shaped answer in its error: the key it sent is not in it."""
    from toolkit.expansion import HttpExpander

    echo.echo = mode
    exp = HttpExpander(echo.chat_url, "fake-chat", api_key_env="MYKEY", retries=0)
    with pytest.raises(ProviderError) as e:
        exp.expand("deploy fails")
    assert_clean(str(e.value), key)
    if mode == "shape":
        assert "unexpected chat answer" in str(e.value) and "[redacted]" in str(e.value)
