"""Query expansion: typed-line parsing, file and HTTP expanders, and the guarded `variants` stage."""

from __future__ import annotations

import json
import time

import polars as pl
import pytest
from fake_servers import FakeServer, chat_answer, fake_server_fixture  # noqa: F401 - the `fake_server` fixture

from toolkit.errors import InputError, ToolkitError
from toolkit.expansion import (
    EXPANSION_PROMPT,
    FileExpander,
    HttpExpander,
    make_expander,
    parse_typed_lines,
    variants,
)

QUERIES = pl.DataFrame({"qid": ["q1", "q2"], "text": ["pool size", "retry backoff"]})


def http(server: FakeServer, **kw) -> HttpExpander:
    kw = {"timeout_s": 2.0, "retries": 1, "backoff_s": 0.01} | kw
    return HttpExpander(server.chat_url, "fake-llm", **kw)


def status_of(status: pl.DataFrame) -> dict[str, str]:
    return dict(status.select("qid", "status").iter_rows())


def only_originals(v: pl.DataFrame, qids: list[str]) -> bool:
    return v.filter(pl.col("qid").is_in(qids))["variant"].to_list() == ["orig"] * len(qids)


def test_parse_typed_lines_tolerates_bullets_numbering_and_case():
    content = (
        "<think>lex: not this, it is reasoning</think>\n"
        "Here you go:\n"
        "1. LEX: max_pool_size\n"
        "  - **vec**: how big is the connection pool\n"
        "* Hyde: The pool holds 40 connections in production.\n"
        "2) lex - pool sizing\n"
        '3. vec: "quoted paraphrase"\n'
        "lexical: not a typed line\n"
        "hyde:\n"
        "Done."
    )
    assert parse_typed_lines(content) == [
        ("lex", "max_pool_size"),
        ("vec", "how big is the connection pool"),
        ("hyde", "The pool holds 40 connections in production."),
        ("lex", "pool sizing"),
        ("vec", "quoted paraphrase"),
    ]


def test_http_variants_good(fake_server):
    v, status = variants(QUERIES, http(fake_server), max_lex=2, max_vec=2, max_hyde=1)
    assert v.schema == pl.Schema({"qid": pl.Utf8, "variant": pl.Utf8, "kind": pl.Utf8, "text": pl.Utf8})
    assert v.filter(pl.col("qid") == "q1").rows() == [
        ("q1", "orig", "orig", "pool size"),
        ("q1", "lex1", "lex", "pool size keywords"),  # "lex: pool size" repeats the original: dropped
        ("q1", "lex2", "lex", "pool size synonyms"),
        ("q1", "vec1", "vec", "what is pool size"),  # the empty "vec:" line is dropped
        ("q1", "hyde1", "hyde", "A note explaining pool size in detail."),
    ]
    assert v["qid"].to_list() == ["q1"] * 5 + ["q2"] * 5
    assert status.rows() == [("q1", "ok", None), ("q2", "ok", None)]
    assert fake_server.count() == 2
    body = fake_server.requests[0]["body"]
    assert body["model"] == "fake-llm" and body["temperature"] == 0
    assert body["messages"] == [
        {"role": "system", "content": EXPANSION_PROMPT},
        {"role": "user", "content": "pool size"},
    ]
    # Limits per kind, and zero turns a kind off.
    with pytest.warns(UserWarning, match=r"not used: 2 lex \(expansion.max_lex 1\)$"):  # max_vec 0: not said
        v, _ = variants(QUERIES, http(fake_server), max_lex=1, max_vec=0, max_hyde=1)
    assert v.filter(pl.col("qid") == "q2")["variant"].to_list() == ["orig", "lex1", "hyde1"]


def test_skipped_queries_keep_only_the_original_without_a_call(fake_server):
    skip = pl.DataFrame({"qid": ["q1", "q2"], "skip_expansion": [True, False]})
    v, status = variants(QUERIES, http(fake_server), max_lex=2, max_vec=2, max_hyde=1, skip=skip)
    assert status.rows() == [("q1", "skipped", None), ("q2", "ok", None)]
    assert only_originals(v, ["q1"]) and len(v.filter(pl.col("qid") == "q2")) == 5
    assert (
        fake_server.count() == 1
        and fake_server.requests[0]["body"]["messages"][1]["content"] == "retry backoff"
    )


def test_http_500_falls_back_after_counted_retries(fake_server):
    fake_server.mode = "500"
    v, status = variants(QUERIES, http(fake_server, retries=2), max_lex=2, max_vec=2, max_hyde=1)
    assert v.rows() == [("q1", "orig", "orig", "pool size"), ("q2", "orig", "orig", "retry backoff")]
    assert status_of(status) == {"q1": "fallback", "q2": "fallback"}
    assert all("HTTP 500" in e and "3 attempts" in e for e in status["error"])
    assert fake_server.count() == 6


def test_http_fail_first_then_succeed(fake_server):
    fake_server.fail_first = 1
    v, status = variants(QUERIES.head(1), http(fake_server, retries=1), max_lex=2, max_vec=2, max_hyde=1)
    assert status.rows() == [("q1", "ok", None)] and len(v) == 5
    assert fake_server.count() == 2


def test_http_timeout_is_bounded(fake_server):
    fake_server.mode, fake_server.delay_s = "slow", 5.0
    t0 = time.perf_counter()
    v, status = variants(
        QUERIES.head(1), http(fake_server, timeout_s=0.3, retries=1), max_lex=2, max_vec=2, max_hyde=1
    )
    assert time.perf_counter() - t0 < 1.5
    assert only_originals(v, ["q1"]) and status["status"].to_list() == ["fallback"]
    assert "timed out after 0.3s" in status["error"][0] and fake_server.count() == 2


@pytest.mark.parametrize(
    ("mode", "content", "message"),
    [
        ("malformed", None, "malformed JSON"),
        ("wrong_shape", None, "no choices[0].message.content"),
        ("good", "I cannot help with that.", "no typed lines"),
    ],
)
def test_http_bad_answers_fall_back(fake_server, mode, content, message):
    fake_server.mode, fake_server.chat_content = mode, content
    v, status = variants(QUERIES, http(fake_server), max_lex=2, max_vec=2, max_hyde=1)
    assert only_originals(v, ["q1", "q2"]) and len(v) == 2
    assert status_of(status) == {"q1": "fallback", "q2": "fallback"}
    assert all(message in e for e in status["error"])
    assert fake_server.count() == 2  # answers that are wrong are not retried


def test_one_failing_query_does_not_affect_the_others(fake_server):
    fake_server.fail_queries = {"backoff"}
    v, status = variants(QUERIES, http(fake_server, retries=0), max_lex=2, max_vec=2, max_hyde=1)
    assert status_of(status) == {"q1": "ok", "q2": "fallback"}
    assert len(v.filter(pl.col("qid") == "q1")) == 5 and only_originals(v, ["q2"])


def test_file_expander_by_qid_and_by_query(tmp_path):
    p = tmp_path / "exp.jsonl"
    rows = [
        {
            "qid": "q1",
            "expansions": [{"type": "lex", "text": "max_pool_size"}, {"type": "hyde", "text": "Pool is 40."}],
        },
        {
            "query": "retry backoff",
            "expansions": [
                {"type": "vec", "text": "how long to wait between retries"},
                {"type": "vec", "text": "Retry  Backoff"},
            ],
        },
    ]
    p.write_text("\n".join(json.dumps(r) for r in rows) + "\n")
    queries = pl.DataFrame({"qid": ["q1", "q2", "q3"], "text": ["pool size", "retry backoff", "lunch"]})
    v, status = variants(queries, make_expander("file", path=str(p)), max_lex=2, max_vec=2, max_hyde=1)
    assert v.rows() == [
        ("q1", "orig", "orig", "pool size"),
        ("q1", "lex1", "lex", "max_pool_size"),
        ("q1", "hyde1", "hyde", "Pool is 40."),
        ("q2", "orig", "orig", "retry backoff"),
        ("q2", "vec1", "vec", "how long to wait between retries"),  # "Retry  Backoff" = the original: dropped
        ("q3", "orig", "orig", "lunch"),
    ]
    assert status_of(status) == {"q1": "ok", "q2": "ok", "q3": "fallback"}
    assert "no expansions for qid 'q3'" in status["error"][2]


@pytest.mark.parametrize(
    ("line", "message"),
    [
        ("{oops", "line 2: invalid JSON"),
        ('{"qid": "q9"}', "line 2: expected an object with an 'expansions' list"),
        (
            '{"qid": "q9", "expansions": [{"type": "sparse", "text": "x"}]}',
            r"line 2: expansions\[0\] needs 'type'",
        ),
        ('{"expansions": []}', "line 2: needs a 'qid' or a 'query'"),
        ('{"qid": "q1", "expansions": []}', "line 2: 'q1' appears twice"),
    ],
)
def test_file_expander_errors_name_file_and_line(tmp_path, line, message):
    p = tmp_path / "bad.jsonl"
    p.write_text('{"qid": "q1", "expansions": []}\n' + line + "\n")
    with pytest.raises(InputError, match=r"bad\.jsonl:" + message):
        FileExpander(p)


def test_no_expander_factory_and_bad_input(monkeypatch):
    v, status = variants(QUERIES, None, max_lex=2, max_vec=2, max_hyde=1)
    assert v["variant"].to_list() == ["orig", "orig"] and status_of(status) == {"q1": "none", "q2": "none"}
    assert make_expander("none") is None
    with pytest.raises(ToolkitError, match="unknown provider 'magic'"):
        make_expander("magic")
    with pytest.raises(InputError, match="not found"):
        make_expander("file", path="/nonexistent/exp.jsonl")
    monkeypatch.delenv("NO_SUCH_KEY_VAR", raising=False)
    with pytest.raises(ToolkitError, match="expansion.api_key_env.*'NO_SUCH_KEY_VAR' is not set"):
        make_expander("http", url="http://127.0.0.1:9/v1/chat/completions", api_key_env="NO_SUCH_KEY_VAR")
    with pytest.raises(InputError, match="qid 'q1' appears more than once"):
        variants(pl.concat([QUERIES, QUERIES]), None, max_lex=1, max_vec=1, max_hyde=1)


def test_prompt_is_shown_in_the_docstring_and_fake_answer_parses():
    assert EXPANSION_PROMPT.splitlines()[0] in (HttpExpander.__doc__ or "")
    assert [k for k, _ in parse_typed_lines(chat_answer("x"))] == ["lex", "lex", "vec", "hyde", "lex"]


def test_expansions_past_the_limits_are_named_not_dropped_silently(tmp_path):
    """User trial R: an expansion file with three `lex` lines per query under `expansion.max_lex: 2` lost the third
    without a word, and the user read the run as using all three. A warning now says how many were not used
    and which limit dropped them; repeats and empty lines are not counted (they are not expansions)."""
    f = tmp_path / "exp.jsonl"
    lines = [{"qid": q, "expansions": [{"type": "lex", "text": f"{q} a"}, {"type": "lex", "text": f"{q} b"},
                                       {"type": "lex", "text": f"{q} c"}, {"type": "lex", "text": f"{q} a"},
                                       {"type": "vec", "text": f"what is {q}"}]} for q in ("q1", "q2")]
    f.write_text("".join(json.dumps(x) + "\n" for x in lines))
    with pytest.warns(UserWarning, match=r"2 queries had more expansions .*not used: 2 lex \(expansion.max_lex 2\)"):
        v, status = variants(QUERIES, FileExpander(f), max_lex=2, max_vec=2, max_hyde=1)
    assert v.filter(pl.col("qid") == "q1")["variant"].to_list() == ["orig", "lex1", "lex2", "vec1"]
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error")
        variants(QUERIES, FileExpander(f), max_lex=3, max_vec=2, max_hyde=1)  # all used: no warning
