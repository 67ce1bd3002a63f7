"""Query features and routing: technical-token detection, stopword ratio, routes, strong lexical signal."""

from __future__ import annotations

import json

import polars as pl
import pytest
from conftest import shared

from toolkit.config import ExpansionConfig, RoutingConfig
from toolkit.features import FEATURE_SCHEMA, query_features, strong_signal, technical_tokens

TECHNICAL = [
    ("why does deploy fail with ECONNREFUSED on port 5432", ["ECONNREFUSED", "port 5432"]),
    ("HTTP 404 from /api/v1/users after the release", ["HTTP 404", "/api/v1/users"]),
    ("is CVE-2017-3156 patched in our build", ["CVE-2017-3156"]),
    ("PG-40001 serialization failure on checkout", ["PG-40001"]),
    ("what broke in NW-1432", ["NW-1432"]),
    ("what did we set retryBackoffMs to", ["retryBackoffMs"]),
    ("max_pool_size in production", ["max_pool_size"]),
    ("where is MAX_POOL_SIZE defined", ["MAX_POOL_SIZE"]),
    ("bump the SDK to v2.1.0", ["SDK", "v2.1.0"]),
    ("does node 2.14 support it", ["2.14"]),
    ("see config.yaml and src/toolkit/config.py", ["config.yaml", "src/toolkit/config.py"]),
    ("docs at https://example.com/x?y=1", ["https://example.com/x?y=1"]),
    ("PostgreSQL TypeError when inserting", ["PostgreSQL", "TypeError"]),
    ("utf-8 decoding error", ["utf-8"]),
    ("pod got SIGTERM then ENOENT", ["SIGTERM", "ENOENT"]),
    ("NXDOMAIN for the payments host", ["NXDOMAIN"]),
    ("what does os.path.join() return", ["os.path.join()"]),
    ("run it with --dry-run first", ["--dry-run"]),
    ("S3 bucket policy for K8S jobs", ["S3", "K8S"]),
    ("the ~/.bashrc alias", ["~/.bashrc"]),
]

NOT_TECHNICAL = [
    "When did Caroline go to the support group?",
    "When did Caroline go to the LGBTQ support group?",
    "What did Melanie paint in 2022?",
    "How many children does Melanie have?",
    "I said OK to the NASA trip ASAP",
    "McDonald and MacArthur went to the 2nd show at 5pm in the 1990s",
    "my 3-year-old son started school in mid-2020",
    "it cost $2.50 and took 1.5 hours",
    "meeting on 05/08/2023 about the COVID-19 lockdown",
    "and/or he/she would like it in 3D",
    "What fields would Caroline be likely to pursue in her education?",
    "Why did John feel he/she was not ready for the 10k?",
]


@pytest.mark.parametrize(("text", "tokens"), TECHNICAL)
def test_technical_tokens_found(text, tokens):
    assert technical_tokens(text) == tokens


@pytest.mark.parametrize("text", NOT_TECHNICAL)
def test_conversational_text_has_no_technical_tokens(text):
    assert technical_tokens(text) == []


def test_locomo_questions_are_almost_never_technical():
    path = shared("locomo") / "queries.jsonl"
    texts = [json.loads(line)["text"] for line in path.open()]
    technical = [t for t in texts if technical_tokens(t)]
    assert len(texts) == 1536
    assert len(technical) <= 0.01 * len(texts), technical[:10]


def _queries(*texts: str) -> pl.DataFrame:
    return pl.DataFrame({"qid": [f"q{i}" for i in range(len(texts))], "text": list(texts)})


def test_features_worked_example_and_schema():
    q = _queries(
        "When did Caroline go to the support group?",  # when, go, to, the of 8 tokens -> 0.5
        "why does deploy fail with ECONNREFUSED on port 5432",
        "Caroline's paintings",  # 2 tokens: too short to be conversational
        "what's the plan",  # what's counts by its base: 2 of 3
    )
    f = query_features(q, RoutingConfig())
    assert f.schema == pl.Schema(FEATURE_SCHEMA)
    rows = {r["qid"]: r for r in f.to_dicts()}
    assert rows["q0"]["n_tokens"] == 8 and rows["q0"]["stopword_ratio"] == pytest.approx(0.5)
    assert (
        rows["q0"]["conversational"]
        and rows["q0"]["route"] == "conversational"
        and not rows["q0"]["technical"]
    )
    assert (
        rows["q1"]["technical"]
        and rows["q1"]["route"] == "technical"
        and rows["q1"]["technical_tokens"] == ["ECONNREFUSED", "port 5432"]
    )
    assert not rows["q1"]["conversational"]
    assert rows["q2"]["route"] == "default" and rows["q2"]["n_tokens"] == 2
    assert rows["q3"]["stopword_ratio"] == pytest.approx(2 / 3) and rows["q3"]["n_tokens"] == 3
    # Routing off: features are computed, the policy is neutral.
    assert not f["skip_lexical"].any() and not f["skip_expansion"].any()


def test_routing_policy_applies_only_when_enabled():
    q = _queries(
        "When did Caroline go to the support group?",
        "why does deploy fail with ECONNREFUSED",
        "Caroline paintings sunrise lake",
    )
    on = query_features(
        q, RoutingConfig(enabled=True, technical_lexical_boost=1.5, conversational_skip_lexical=False)
    )
    assert on["skip_lexical"].to_list() == [False, False, False]
    assert on["skip_expansion"].to_list() == [True, False, False]
    assert on["technical"].to_list() == [False, True, False]  # the boost is fusion's (test_fusion)
    strict = query_features(q, RoutingConfig(enabled=True, conversational_stopword_ratio=0.6))
    assert strict["route"].to_list() == ["default", "technical", "default"]
    assert not strict["skip_lexical"].any()


def test_empty_queries_give_an_empty_frame():
    f = query_features(pl.DataFrame(schema={"qid": pl.Utf8, "text": pl.Utf8}), RoutingConfig())
    assert f.is_empty() and f.schema == pl.Schema(FEATURE_SCHEMA)


def _lex(rows: list[tuple[str, str, int, float]]) -> pl.DataFrame:
    return pl.DataFrame(
        [(q, f"{v}:lex", v, "lex", f"d{r}", f"d{r}#0", r, s) for q, v, r, s in rows],
        schema=["qid", "list_id", "variant", "retriever", "doc_id", "chunk_id", "rank", "score"],
        orient="row",
    )


def test_strong_signal_worked_examples():
    cands = _lex(
        [
            ("a", "orig", 1, 9.0),
            ("a", "orig", 2, 1.0),  # 0.9 vs 0.5: gap 0.4 -> strong
            ("b", "orig", 1, 9.0),
            ("b", "orig", 2, 8.0),  # 0.9 vs 0.889: no gap -> weak
            ("c", "orig", 1, 4.0),  # single hit 0.8 < 0.85 -> weak
            ("d", "orig", 1, -19.0),  # |x|: 0.95, single hit: gap 0.95 -> strong
            ("e", "orig", 2, 1.0),
            ("e", "orig", 1, 6.0),
            ("e", "lex1", 1, 99.0),  # expansion lists ignored; 6/7 vs .5
        ]
    )
    s = {r["qid"]: r for r in strong_signal(cands, ExpansionConfig()).to_dicts()}
    assert (
        s["a"]["strong_signal"]
        and s["a"]["top_norm"] == pytest.approx(0.9)
        and s["a"]["gap"] == pytest.approx(0.4)
    )
    assert not s["b"]["strong_signal"] and s["b"]["gap"] == pytest.approx(0.9 - 8 / 9)
    assert not s["c"]["strong_signal"] and s["c"]["top_norm"] == pytest.approx(0.8)
    assert s["d"]["strong_signal"] and s["d"]["gap"] == pytest.approx(0.95)
    assert s["e"]["top_norm"] == pytest.approx(6 / 7) and s["e"]["strong_signal"]
    loose = {
        r["qid"]: r["strong_signal"]
        for r in strong_signal(
            cands, ExpansionConfig(strong_signal_min=0.5, strong_signal_gap=0.0)
        ).to_dicts()
    }
    assert loose == {"a": True, "b": True, "c": True, "d": True, "e": True}
