"""The agent-memory preset and the reranker switched through the environment (HRT_RERANK_* and the seed's names)."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from fake_servers import FakeServer, fake_server_fixture  # noqa: F401 - the `fake_server` fixture

from toolkit.cli import main
from toolkit.config import load_config, save_config
from toolkit.errors import InputError
from toolkit.pipeline import run_pipeline
from toolkit.rerank_env import resolve_rerank
from toolkit.store import Store

KEY = "sk-test-DoNotPrint-1234567890abcdef"


def test_hrt_variables_switch_the_reranker():
    cfg = load_config("agent-memory")
    env = {"HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": "http://127.0.0.1:9/v1/", "HRT_RERANK_MODEL": "m",
           "HRT_RERANK_API_KEY_ENV": "MY_KEY"}
    out, src = resolve_rerank(cfg, env)
    assert (out.rerank.provider, out.rerank.url, out.rerank.model, out.rerank.api_key_env) == ("http", "http://127.0.0.1:9/v1/rerank", "m", "MY_KEY")
    assert src.source == "environment" and src.variables == ("HRT_RERANK_PROVIDER", "HRT_RERANK_MODEL", "HRT_RERANK_BASE_URL", "HRT_RERANK_API_KEY_ENV")
    assert "from the environment" in src.describe(out) and "key from $MY_KEY" in src.describe(out)
    assert out.rerank.blend == "replace" and out.rerank.top_n == 10  # the preset's own rerank settings stay
    ce, _ = resolve_rerank(cfg, {"HRT_RERANK_PROVIDER": "cross-encoder", "HRT_RERANK_MODEL": "models/rr"})
    assert (ce.rerank.provider, ce.rerank.model) == ("cross-encoder", "models/rr")
    off, src = resolve_rerank(cfg, {"HRT_RERANK_PROVIDER": "off"})
    assert off.rerank.provider == "none" and src.source == "environment"
    same, src = resolve_rerank(cfg, {})
    assert same == cfg and src.source == "none" and "reranker: none" in src.describe(same)


def test_seed_aliases_and_openai_fallbacks_never_carry_the_key():
    cfg = load_config("agent-memory")
    env = {"AGENT_MEMORY_RERANK_PROVIDER": "openai", "AGENT_MEMORY_RERANK_MODEL": "Qwen/Qwen3-Reranker-8B",
           "AGENT_MEMORY_RERANK_BASE_URL": "https://example.test/v1", "AGENT_MEMORY_RERANK_API_KEY": KEY}
    out, src = resolve_rerank(cfg, env)
    assert (out.rerank.provider, out.rerank.url, out.rerank.api_key_env) == ("http", "https://example.test/v1/rerank", "AGENT_MEMORY_RERANK_API_KEY")
    assert KEY not in str(out.to_dict()) and KEY not in src.describe(out)
    fb, src = resolve_rerank(cfg, {"AGENT_MEMORY_RERANK_PROVIDER": "jina", "OPENAI_BASE_URL": "https://o.test/v1", "OPENAI_API_KEY": KEY})
    assert (fb.rerank.url, fb.rerank.api_key_env) == ("https://o.test/v1/rerank", "OPENAI_API_KEY")
    assert src.variables == ("AGENT_MEMORY_RERANK_PROVIDER", "OPENAI_BASE_URL", "OPENAI_API_KEY")
    # HRT_ names win over the seed's.
    both, _ = resolve_rerank(cfg, {**env, "HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": "http://h.test/rerank"})
    assert both.rerank.url == "http://h.test/rerank"


def test_config_file_wins_and_bad_environment_is_an_error(tmp_path: Path):
    cfg = load_config("agent-memory").with_updates({"rerank.provider": "http", "rerank.url": "http://cfg.test/v1/rerank"})
    out, src = resolve_rerank(cfg, {"HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": "http://env.test/v1"})
    assert out.rerank.url == "http://cfg.test/v1/rerank" and src.source == "config"
    assert "environment ignored (HRT_RERANK_PROVIDER, HRT_RERANK_BASE_URL): the config file wins" in src.describe(out)
    with pytest.raises(InputError, match="HRT_RERANK_PROVIDER='magic': unknown reranker provider"):
        resolve_rerank(load_config("qmd"), {"HRT_RERANK_PROVIDER": "magic"})
    with pytest.raises(InputError, match="needs a base URL"):
        resolve_rerank(load_config("qmd"), {"HRT_RERANK_PROVIDER": "http"})
    with pytest.raises(InputError) as e:
        resolve_rerank(load_config("qmd"), {"HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": "http://h/v1", "HRT_RERANK_API_KEY_ENV": "sk-abc/123"})
    assert "sk-abc/123" not in str(e.value)
    with pytest.raises(InputError, match="credentials") as e:
        resolve_rerank(load_config("qmd"), {"HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": "http://u:pw@h/v1"})
    assert "pw@" not in str(e.value)


def _store(tmp_path: Path) -> str:
    path = str(tmp_path / "s.duckdb")
    docs = [
        {"doc_id": "a", "source": "a", "scope": None, "title": "", "text": "the deploy key lives in vault", "metadata": {"priority": 3}},
        {"doc_id": "b", "source": "b", "scope": None, "title": "", "text": "deploy notes: the key was rotated", "metadata": {"priority": 0}},
        {"doc_id": "c", "source": "c", "scope": None, "title": "", "text": "lunch is on thursday", "metadata": {}},
    ]
    with Store(path) as st:
        st.ingest(docs, embed=False)
    return path


def test_agent_memory_preset_replaces_scores_then_applies_priors(tmp_path: Path, fake_server: FakeServer):
    cfg = load_config("agent-memory").with_updates({"retrieval.dense.enabled": False, "priors.recency_field": None})
    cfg, _ = resolve_rerank(cfg, {"HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": fake_server.base_url + "/v1"})
    q = pl.DataFrame({"qid": ["q"], "text": ["where is the deploy key"], "scope": [None], "metadata": ["{}"]})
    with Store(_store(tmp_path)) as st:
        res = run_pipeline(st, q, cfg)
    assert fake_server.count("/v1/rerank") == 1
    top = res.final.sort("rank")
    # Raw relevance = shared words: a and b both 3 (the, deploy, key); b is P0 (x4), a is P3 (x1).
    got = {d: (s, r) for d, s, r in top.select("doc_id", "score", "raw_score").iter_rows()}
    assert top["doc_id"][0] == "b"
    assert got["b"][0] == pytest.approx(got["b"][1] * 4.0)  # the provider's raw score (not normalised) x P0
    assert got["a"][0] == pytest.approx(got["a"][1] * 1.0)  # P3: x1


def test_search_verbose_says_which_source(tmp_path: Path, fake_server: FakeServer, monkeypatch: pytest.MonkeyPatch):
    store = _store(tmp_path)
    for var in ("HRT_RERANK_PROVIDER", "AGENT_MEMORY_RERANK_PROVIDER", "HRT_RERANK_API_KEY_ENV", "OPENAI_API_KEY", "AGENT_MEMORY_RERANK_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    run = CliRunner()
    args = ["search", "deploy key", "--store", store, "--mode", "lexical", "-v"]
    r = run.invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "reranker: none" in r.stderr
    monkeypatch.setenv("AGENT_MEMORY_RERANK_PROVIDER", "openai")
    monkeypatch.setenv("AGENT_MEMORY_RERANK_BASE_URL", fake_server.base_url + "/v1")
    monkeypatch.setenv("AGENT_MEMORY_RERANK_API_KEY", KEY)
    fake_server.mode = "500"  # the guarded reranker falls back: its error notes must not carry the key either
    r = run.invoke(main, args)
    assert r.exit_code == 0, r.output
    assert "reranker: http (url " + fake_server.base_url + "/v1/rerank, key from $AGENT_MEMORY_RERANK_API_KEY) from the environment" in r.stderr
    assert KEY not in r.output and KEY not in r.stderr
    assert fake_server.count("/v1/rerank") >= 1
    assert fake_server.requests[0]["headers"].get("authorization") == f"Bearer {KEY}"  # the key reached the endpoint only
    cfg_file = tmp_path / "mine.yaml"
    save_config(load_config("bm25-only").with_updates({"rerank.provider": "http", "rerank.url": fake_server.rerank_url}), cfg_file)
    r = run.invoke(main, ["search", "deploy key", "--store", store, "--config", str(cfg_file), "-v", "--format", "detailed"])
    assert r.exit_code == 0, r.output
    assert "from the config file; environment ignored (AGENT_MEMORY_RERANK_PROVIDER" in r.stderr


HTTP_ENV = {"HRT_RERANK_PROVIDER": "http", "HRT_RERANK_BASE_URL": "http://127.0.0.1:9/v1"}


def test_timeout_and_retries_variables_reach_the_config():
    cfg = load_config("agent-memory")
    out, src = resolve_rerank(cfg, {**HTTP_ENV, "HRT_RERANK_TIMEOUT": "2.5", "HRT_RERANK_RETRIES": "0"})
    assert (out.rerank.timeout_s, out.rerank.retries) == (2.5, 0)
    assert src.variables[-2:] == ("HRT_RERANK_TIMEOUT", "HRT_RERANK_RETRIES")
    assert "timeout 2.5s, 0 retries) from the environment" in src.describe(out)
    unset, _ = resolve_rerank(cfg, HTTP_ENV)  # unset: the config's own values
    assert (unset.rerank.timeout_s, unset.rerank.retries) == (cfg.rerank.timeout_s, cfg.rerank.retries)
    # A config that names a provider wins over these too, and -v says they were ignored.
    own = cfg.with_updates({"rerank.provider": "http", "rerank.url": "http://cfg.test/v1/rerank", "rerank.timeout_s": 7.0})
    out, src = resolve_rerank(own, {**HTTP_ENV, "HRT_RERANK_TIMEOUT": "2"})
    assert out.rerank.timeout_s == 7.0 and "HRT_RERANK_TIMEOUT): the config file wins" in src.describe(out)


@pytest.mark.parametrize(("var", "value", "message"), [
    ("HRT_RERANK_TIMEOUT", "abc", "HRT_RERANK_TIMEOUT='abc': must be a number of seconds greater than 0 and at most 600"),
    ("HRT_RERANK_TIMEOUT", "0", "HRT_RERANK_TIMEOUT='0': must be a number of seconds greater than 0"),
    ("HRT_RERANK_TIMEOUT", "-1", "HRT_RERANK_TIMEOUT='-1': must be"),
    ("HRT_RERANK_TIMEOUT", "nan", "HRT_RERANK_TIMEOUT='nan': must be"),
    ("HRT_RERANK_TIMEOUT", "601", "HRT_RERANK_TIMEOUT='601': must be .* at most 600"),
    ("HRT_RERANK_RETRIES", "1.5", "HRT_RERANK_RETRIES='1.5': must be a whole number from 0 to 10"),
    ("HRT_RERANK_RETRIES", "-1", "HRT_RERANK_RETRIES='-1': must be a whole number"),
    ("HRT_RERANK_RETRIES", "11", "HRT_RERANK_RETRIES='11': must be a whole number from 0 to 10"),
    ("HRT_RERANK_TIMEOUT", KEY, r"HRT_RERANK_TIMEOUT \(value not shown: it looks like a key\): must be"),
    ("HRT_RERANK_RETRIES", KEY, r"HRT_RERANK_RETRIES \(value not shown: it looks like a key\): must be"),
])
def test_bad_timeout_or_retries_is_a_clear_error_naming_the_variable(var, value, message):
    with pytest.raises(InputError, match=message) as e:
        resolve_rerank(load_config("agent-memory"), {**HTTP_ENV, var: value})
    assert KEY not in str(e.value)


def test_search_with_a_hanging_reranker_waits_only_the_env_timeout(tmp_path: Path, fake_server: FakeServer,
                                                                  monkeypatch: pytest.MonkeyPatch):
    import time

    for var in ("AGENT_MEMORY_RERANK_PROVIDER", "HRT_RERANK_API_KEY_ENV", "OPENAI_API_KEY", "AGENT_MEMORY_RERANK_API_KEY"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HRT_RERANK_PROVIDER", "http")
    monkeypatch.setenv("HRT_RERANK_BASE_URL", fake_server.base_url + "/v1")
    monkeypatch.setenv("HRT_RERANK_TIMEOUT", "0.5")
    monkeypatch.setenv("HRT_RERANK_RETRIES", "0")
    fake_server.mode, fake_server.delay_s = "slow", 20.0  # hangs (the default 10 s x 3 attempts would take 30 s)
    t0 = time.monotonic()
    r = CliRunner().invoke(main, ["search", "deploy key", "--store", _store(tmp_path), "--mode", "lexical", "-v"])
    assert r.exit_code == 0, r.output
    assert time.monotonic() - t0 < 5
    assert fake_server.count("/v1/rerank") == 1  # no retry
    assert "timeout 0.5s, 0 retries" in r.stderr and "timed out after 0.5s" in r.output + r.stderr
