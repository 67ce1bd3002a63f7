"""User trial BJ: a platform engineer running `hrt` against the company's embedding and rerank servers (TEI, an
OpenAI-compatible gateway) behind a corporate proxy. Each test is a defect the trial found: a key that went in
cleartext to the proxy without a word, a failing endpoint that stalled a search far past the documented bound, a
stock TEI server that `hrt ingest --embed-url` could not talk to, a hint about long texts given for any refusal, a
pasted key's stray character reported as an encoding error or an outage, a size cap that large batches hit, a base
URL read as a 404, a certificate error retried, and `true` read as 1.0 in a vector."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from fake_servers import FakeServer, fake_server_fixture  # noqa: F401 - the fixture is used by name

from toolkit.cli import main
from toolkit.config import DenseConfig, RerankConfig
from toolkit.embed_http import HttpEmbedder
from toolkit.errors import ToolkitError
from toolkit.rerank import HttpReranker, ProviderError

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
