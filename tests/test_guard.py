"""The exact-token guard: a query naming an identifier keeps BM25's verbatim hit in the top 3, flagged."""

from __future__ import annotations

import json

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.config import load_config
from toolkit.guard import identifier_tokens
from toolkit.loaders import load_corpus
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store

NOTES = [
    ("n0", "Security release", "git 2.39.1 fixes CVE-2022-41903, a heap overflow in git log --format."),
    *[(f"n{i}", "Security advisory", f"A heap overflow vulnerability in the formatting code of version control tool number {i} was fixed in a security release.")
      for i in range(1, 9)],
]


@pytest.fixture
def store(tmp_path, embedder):
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in NOTES))
    st = Store(tmp_path / "g.duckdb", embedder=embedder)
    st.ingest(load_corpus(p))
    yield st
    st.close()


def test_identifier_tokens_are_identifiers_not_acronyms():
    assert identifier_tokens("heap overflow CVE-2022-41903 in git") == ["CVE-2022-41903"]
    assert identifier_tokens("set retryBackoffMs and max_pool_size in config.yaml") == ["retryBackoffMs", "max_pool_size", "config.yaml"]
    assert identifier_tokens("deploy fails with ECONNREFUSED after v2.14.3") == ["ECONNREFUSED", "v2.14.3"]
    assert identifier_tokens("how do I parse JSON over HTTP with the API") == []
    assert identifier_tokens("when did Caroline go to the support group?") == []


def test_bm25_exact_hit_stays_in_top_3_and_is_flagged(store):
    q = pl.DataFrame({"qid": ["q"], "text": ["heap overflow security vulnerability CVE-2022-41903"]})
    # Dense search dominates the fusion: the verbatim hit (BM25 #1) falls below the top 3 without the guard.
    base = load_config("hybrid-rrf").with_updates({"fusion.lexical_weight": 0.01})
    prep = prepare(store, q, base)
    lex_top = prep.candidates.filter((pl.col("list_id") == "orig:lex") & (pl.col("rank") == 1))["doc_id"][0]
    assert lex_top == "n0"
    off = rescore(prep, base).final
    assert off.filter(pl.col("doc_id") == "n0")["rank"][0] > 3
    on = rescore(prep, base.with_updates({"guard.exact_token": True}))
    row = on.final.filter(pl.col("doc_id") == "n0").row(0, named=True)
    assert row["rank"] == 3 and "exact_token_kept" in row["flags"]
    assert on.per_query["exact_token"].to_list() == ["kept"]
    # Scores still give the shown order; nothing else was lost or duplicated.
    f = on.final.sort("rank")
    assert f["score"].is_sorted(descending=True) and f["doc_id"].n_unique() == len(f) == len(off)
    assert "exact_token_kept" in on.trace.filter(pl.col("stage") == "final").explode("flags")["flags"].to_list()
    # max_rank is live: 1 puts it first.
    first = rescore(prep, base.with_updates({"guard.exact_token": True, "guard.max_rank": 1})).final
    assert first.sort("rank")["doc_id"][0] == "n0"


def test_guard_leaves_queries_without_identifiers_alone(store):
    q = pl.DataFrame({"qid": ["q"], "text": ["heap overflow security vulnerability"]})
    base = load_config("hybrid-rrf").with_updates({"fusion.lexical_weight": 0.01})
    prep = prepare(store, q, base)
    assert prep.exact.is_empty()
    a = rescore(prep, base).final
    b = rescore(prep, base.with_updates({"guard.exact_token": True})).final
    assert a.select("doc_id", "rank", "score").equals(b.select("doc_id", "rank", "score"))


@pytest.mark.parametrize("preset", ["default", "guarded-rrf"])
def test_default_preset_reports_the_route_of_every_query(store, preset):
    """`guarded-rrf` adapts the dense weight per query and says which route each query took; the learned `default`
    weighs no list, and says which list its first 10 results follow (counted from the lists it was given)."""
    q = pl.DataFrame({"qid": ["a", "b"], "text": ["heap overflow CVE-2022-41903", "security release of a tool"]})
    cfg = load_config(preset)
    prep = prepare(store, q, cfg)
    res = rescore(prep, cfg)
    pq = res.per_query.sort("qid")
    assert set(pq["route"].to_list()) <= {"dense-led", "balanced", "bm25-led"} and pq["route"].null_count() == 0
    assert pq["exact_token"].to_list()[0] in ("kept", "held") and pq["exact_token"].to_list()[1] is None
    if preset == "default":
        def first10(frame: pl.DataFrame, qid: str) -> set[str]:
            return set(frame.filter((pl.col("qid") == qid) & (pl.col("rank") <= 10))["doc_id"])

        for row in pq.iter_rows(named=True):
            top, lists = first10(res.final, row["qid"]), prep.candidates
            counts = tuple(len(top & first10(lists.filter(pl.col("list_id") == lst), row["qid"])) for lst in ("orig:lex", "orig:vec"))
            assert (row["bm25_top10"], row["dense_top10"]) == counts
            lead = counts[0] - counts[1]
            assert row["route"] == ("bm25-led" if lead >= 3 else "dense-led" if lead <= -3 else "balanced")


@settings(max_examples=300, deadline=None)
@given(text=st.text(alphabet="aAbB_-./: 1\n", max_size=40), tok=st.text(alphabet="aAbB_-./:1", min_size=1, max_size=5))
def test_the_word_bounded_find_equals_the_regex_it_replaced(text, tok):
    """`exact_matches` finds tokens with `str.find` and a neighbour check (a regex per token took 31 s for 100
    identifier-like words against a 20 MB log): the same answers as `(?<!\\w)tok(?!\\w)(?![-.][A-Za-z0-9])`
    case-insensitive (a "-" or "." followed by a letter or digit continues the identifier: trial Q)."""
    import re

    from toolkit.guard import _contains_word

    want = re.search(rf"(?<![\w]){re.escape(tok)}(?![\w])(?![-.][A-Za-z0-9])", text, re.IGNORECASE) is not None
    assert _contains_word(text.lower(), tok.lower()) == want


def test_a_sole_holder_goes_first_and_a_shared_identifier_stays_in_the_top_3(store, tmp_path):
    """`guard.sole_first`: when no other candidate holds the identifier, BM25's verbatim hit is the answer a user
    looks for (a changelog naming `libassuan 2.5.5-5`), so it goes first; when others hold it too (a package name
    many descriptions mention) it only keeps its place in the top `max_rank`. Live: the holders are counted from
    the prepared `exact` frame."""
    q = pl.DataFrame({"qid": ["q"], "text": ["heap overflow security vulnerability CVE-2022-41903"]})
    base = load_config("hybrid-rrf").with_updates({"fusion.lexical_weight": 0.01, "guard.exact_token": True})
    sole = base.with_updates({"guard.sole_first": True})
    prep = prepare(store, q, base)
    assert rescore(prep, base).final.filter(pl.col("doc_id") == "n0")["rank"][0] == 3
    row = rescore(prep, sole).final.sort("rank").row(0, named=True)
    assert row["doc_id"] == "n0" and "exact_token_kept" in row["flags"]
    # A second candidate naming the same CVE: n0 is no longer the only holder and stays at 3.
    extra = tmp_path / "more.jsonl"
    extra.write_text(json.dumps({"_id": "n9", "title": "Team notes", "text": "Notes from the weekly meeting: the team talked about lunch plans, the holiday rota, the new office chairs, the coffee machine and, at the very end, whether CVE-2022-41903 matters for the build servers."}) + "\n")
    store.ingest(load_corpus(extra))
    prep = prepare(store, q, base)
    assert set(prep.exact["doc_id"]) == {"n0", "n9"}
    assert prep.candidates.filter((pl.col("list_id") == "orig:lex") & (pl.col("rank") == 1))["doc_id"][0] == "n0"
    assert rescore(prep, sole).final.filter(pl.col("doc_id") == "n0")["rank"][0] == 3


def test_the_rarest_identifier_decides_whether_the_hit_is_the_only_holder():
    """"libx11 2:1.7.1-1": five candidates name the package, one the version. The version's sole holder goes first
    (by the rarest identifier it holds, not by any: measured on changelogs, dev 6 queries helped, none hurt)."""
    from toolkit.config import GuardConfig
    from toolkit.guard import keep_exact

    docs = ["a", "b", "c", "d", "e"]
    ranked = pl.DataFrame({"qid": ["q"] * 5, "doc_id": ["b", "c", "d", "a", "e"], "rank": [1, 2, 3, 4, 5],
                           "score": [0.5, 0.4, 0.3, 0.2, 0.1], "flags": [[] for _ in docs]},
                          schema_overrides={"flags": pl.List(pl.Utf8)})
    lex = pl.DataFrame({"qid": ["q"] * 5, "list_id": ["orig:lex"] * 5, "doc_id": docs, "rank": [1, 2, 3, 4, 5]})
    exact = pl.DataFrame({"qid": ["q"] * 5, "doc_id": docs,
                          "tokens": [["libx11", "2:1.7.1-1"], ["libx11"], ["libx11"], ["libx11"], ["libx11"]],
                          "whole": [False] * 5})
    cfg = GuardConfig(exact_token=True, max_rank=3)
    top3, _ = keep_exact(ranked, lex, exact, cfg)
    assert top3.filter(pl.col("doc_id") == "a")["rank"][0] == 3
    first, status = keep_exact(ranked, lex, exact, cfg.model_copy(update={"sole_first": True}))
    assert first.sort("rank")["doc_id"].to_list() == ["a", "b", "c", "d", "e"] and status["exact_token"][0] == "kept"
    # Every identifier it holds shared with another candidate: top 3 only.
    shared = exact.with_columns(pl.when(pl.col("doc_id") == "b").then(pl.lit(["libx11", "2:1.7.1-1"])).otherwise(pl.col("tokens")).alias("tokens"))
    again, _ = keep_exact(ranked, lex, shared, cfg.model_copy(update={"sole_first": True}))
    assert again.filter(pl.col("doc_id") == "a")["rank"][0] == 3


def test_bm25s_top_document_goes_first_when_it_covers_more_query_words_than_any_other(tmp_path, embedder):
    """`guard.coverage_first` (on in `default` and `guarded-rrf`): a conversational memory query whose words only one note holds all of
    ("when did Caroline go to the LGBTQ support group") lost that note under fused ranks to notes close in meaning.
    BM25's first document now goes first when no other candidate holds as many of the query's words; live."""
    notes = [("m0", "Busy Sunday: Caroline painted the fence, baked bread, phoned her grandmother, made time to go to the "
                    "LGBTQ support group for an hour, then watched a film and fixed the bike's chain before dinner.")]
    notes += [(f"m{i}", f"When did Caroline go to the {w} support group? She goes to the {w} support group every week.")
              for i, w in enumerate(["parents'", "grief", "cancer", "veterans'", "newcomers'", "caregivers'"], start=1)]
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"_id": i, "text": t}) + "\n" for i, t in notes))
    q = pl.DataFrame({"qid": ["q"], "text": ["when did Caroline go to the LGBTQ support group"]})
    with Store(tmp_path / "m.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(p))
        base = load_config("guarded-rrf").with_updates({"fusion.lexical_weight": 0.01, "adapt.dense_gap": False})  # dense leads
        prep = prepare(st, q, base)
        # Read back from the learned features (computed here), the counts equal a pass over the FTS tables.
        from toolkit.ltr_features import term_coverage

        assert prep.ltr_features is not None and prep.coverage.equals(term_coverage(st, q, prep.candidates))
    assert prep.candidates.filter((pl.col("list_id") == "orig:lex") & (pl.col("rank") == 1))["doc_id"][0] == "m0"
    terms = dict(zip(prep.coverage["doc_id"], prep.coverage["terms"], strict=True))
    assert terms["m0"] > max(v for d, v in terms.items() if d != "m0")
    off = rescore(prep, base.with_updates({"guard.coverage_first": False})).final.sort("rank")
    assert off["doc_id"][0] != "m0"
    res = rescore(prep, base)
    on = res.final.sort("rank")
    row = on.row(0, named=True)
    assert row["doc_id"] == "m0" and "covers_most_terms" in row["flags"] and on["score"].is_sorted(descending=True)
    assert on["doc_id"].sort().to_list() == off["doc_id"].sort().to_list()  # nothing lost or doubled
    # The lab's failure panel names the guard as what pushed the next document down, not dedup (review BZ).
    from toolkit.panels import failure_cases

    qrels = pl.DataFrame({"qid": ["q"], "doc_id": [on["doc_id"][1]], "rel": [1]})
    assert failure_cases(res.trace, qrels, res.removed, k=1, per_query=res.per_query)["culprit"].to_list() == ["guard"]


def test_the_coverage_rule_leaves_a_tie_alone():
    """Two candidates holding as many of the query's words: BM25's choice is not lifted over the fused order."""
    from toolkit.guard import coverage_first, coverage_targets

    ranked = pl.DataFrame({"qid": ["q"] * 3, "doc_id": ["b", "c", "a"], "rank": [1, 2, 3], "score": [0.3, 0.2, 0.1],
                           "flags": [[], [], []]}, schema_overrides={"flags": pl.List(pl.Utf8)})
    lex = pl.DataFrame({"qid": ["q"] * 3, "list_id": ["orig:lex"] * 3, "doc_id": ["a", "b", "c"], "rank": [1, 2, 3]})
    cov = pl.DataFrame({"qid": ["q"] * 3, "doc_id": ["a", "b", "c"], "terms": [3, 3, 1]})
    assert coverage_targets(lex, cov).is_empty() and coverage_first(ranked, coverage_targets(lex, cov), True).equals(ranked)
    more = coverage_targets(lex, cov.with_columns(pl.Series("terms", [3, 2, 1])))
    assert coverage_first(ranked, more, True).sort("rank")["doc_id"].to_list() == ["a", "b", "c"]
    assert coverage_first(ranked, more, False).equals(ranked)


def test_the_coverage_rule_stands_aside_for_priors_and_a_one_shot_search_agrees(tmp_path):
    """Review BZ: with dense off and a recency prior, a one-shot search (`hrt search`) left BM25's first where the
    prior put it while a prepared run lifted it. The rule now stands aside while priors re-weight (measured without
    them), and where it acts a one-shot search computes its input as a prepared run does."""
    from toolkit.pipeline import coverage_acts

    notes = [("m0", "deploy rollback checklist for the payments service", "2020-01-01"),
             *[(f"m{i}", f"deploy notes {i} for the payments team", "2026-05-01") for i in range(1, 4)]]
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"_id": i, "text": t, "metadata": {"date": d}}) + "\n" for i, t, d in notes))
    q = pl.DataFrame({"qid": ["q"], "text": ["deploy rollback checklist payments service"]})
    base = load_config("default").with_updates({"retrieval.dense.enabled": False})
    prior = base.with_updates({"priors.recency_field": "date", "priors.as_of": "2026-06-01"})
    assert coverage_acts(base) and not coverage_acts(prior)
    with Store(tmp_path / "m.duckdb") as st:
        st.ingest(load_corpus(p), embed=False)
        for cfg in (base, prior):
            ranks = [rescore(prepare(st, q, cfg, one_shot=one), cfg).final.sort("rank")["doc_id"].to_list() for one in (True, False)]
            assert ranks[0] == ranks[1], (cfg.priors.recency_field, ranks)
        shown = rescore(prepare(st, q, prior), prior).final.sort("rank")
    assert "covers_most_terms" not in shown.explode("flags")["flags"].to_list()


def test_dense_searchs_first_document_stays_in_the_top_3_and_the_word_rules_keep_the_last_say(demo_store):
    """User trial CA (help questions worded without the documents' words): dense search's first document was relevant on
    112 of 312 queries, and `default` (RRF then, `guarded-rrf` now) put it below rank 3 on 32, under documents both lists
    found. `guard.dense_max_rank` (3 in `guarded-rrf`) lifts it, before the exact-token guard and the coverage rule, so their promises still hold."""
    from pathlib import Path

    from toolkit.guard import DENSE_FLAG, guarded

    root = Path(__file__).resolve().parents[1] / "data" / "demo"
    q = pl.read_ndjson(root / "queries.jsonl").select(pl.col("_id").cast(pl.Utf8).alias("qid"), "text")
    cfg = load_config("guarded-rrf")
    assert cfg.guard.dense_max_rank == 3
    prep = prepare(demo_store, q, cfg)
    on, off = rescore(prep, cfg), rescore(prep, cfg.with_updates({"guard.dense_max_rank": 0}))
    first = dict(prep.candidates.filter((pl.col("list_id") == "orig:vec") & (pl.col("rank") == 1)).select("qid", "doc_id").iter_rows())
    top3 = on.final.filter(pl.col("rank") <= 3).group_by("qid").agg("doc_id")
    # Every query's dense first is in its top 3, unless a word rule acted after it (they have the last say).
    worded = set(on.per_query.filter((pl.col("exact_token") == "kept") | pl.col("covers_most_terms"))["qid"].to_list())
    out = {k for k, v in top3.iter_rows() if first[k] not in v}
    assert out <= worded, out - worded
    below = off.final.join(pl.DataFrame({"qid": list(first), "doc_id": list(first.values())}), on=["qid", "doc_id"]).filter(pl.col("rank") > 3)
    assert len(below) >= 3  # the demo has such queries: the rule is tested, not vacuous
    moved = on.final.filter(pl.col("flags").list.contains(DENSE_FLAG))
    assert set(moved["qid"].to_list()) == set(below["qid"].to_list())
    assert set(on.per_query.filter(pl.col(DENSE_FLAG))["qid"].to_list()) == set(below["qid"].to_list())
    # The exact-token guard's hit and the coverage rule's first place are where they were without the rule.
    g = guarded(prep.candidates, prep.exact, cfg.guard.depth).unique("qid", keep="first").select("qid", "doc_id")
    for res in (on, off):
        assert res.final.join(g, on=["qid", "doc_id"]).filter(pl.col("rank") > 3).is_empty()
    cover = lambda r: r.final.filter(pl.col("flags").list.contains("covers_most_terms")).select("qid", "doc_id", "rank").sort("qid")  # noqa: E731
    assert cover(on).equals(cover(off)) and cover(on)["rank"].to_list() == [1] * len(cover(on))


def _lift_by_sorting(ranked: pl.DataFrame, targets: pl.DataFrame, flag: str) -> pl.DataFrame:
    """The rule `_lift` implements, written the plain way (as it was before the permutation, less one fault: that code
    also moved and flagged a row of the target already in place when a chunk-level list held the document twice):
    every row of a target below its place `_m` goes to place `_m - 0.5` with the score between its new neighbours',
    then each query is re-ranked."""
    m = pl.col("_m")
    hit = ranked.join(targets, on=["qid", "doc_id"], how="left").with_columns(
        (pl.col("_m").is_not_null() & (pl.col("rank") > m)).alias("_g"), m.max().over("qid").alias("_m"))
    s_m = pl.col("score").filter(pl.col("rank") == m).first().over("qid")
    s_up = pl.col("score").filter(pl.col("rank") == m - 1).first().over("qid")
    new = pl.when(m > 1).then((s_up + s_m) / 2).otherwise(s_m + (s_m.abs() * 1e-6).clip(lower_bound=1e-12))
    g = pl.col("_g")
    return (hit.with_columns(pl.when(g).then(m - 0.5).otherwise(pl.col("rank").cast(pl.Float64)).alias("_place"),
                             pl.when(g).then(new).otherwise(pl.col("score")).alias("score"),
                             pl.when(g).then(pl.col("flags").list.concat(pl.lit([flag], pl.List(pl.Utf8)))).otherwise(pl.col("flags")).alias("flags"))
            .sort("qid", "_place", "rank")
            .with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank"))
            .select(ranked.columns))


@settings(max_examples=150, deadline=None)
@given(st.lists(st.tuples(st.lists(st.sampled_from("abcdefgh"), min_size=1, max_size=9), st.integers(0, 8),
                          st.integers(1, 4), st.booleans()), min_size=1, max_size=6))
def test_moving_a_guarded_hit_permutes_only_its_query_as_the_plain_sort_would(queries):
    """The guards' move (`_lift`) is a permutation of row positions; it equals re-sorting each query with the moved
    rows at place m - 0.5 and re-ranking, for any list: repeated documents (a chunk-level list), first place, a
    target already in place or absent, and queries nothing moves in."""
    from toolkit.guard import _lift

    rows, targets = [], []
    for q, (docs, pick, m, has_target) in enumerate(queries):
        rows += [(f"q{q}", d, r, 10.0 - r + 0.25 * (q % 2), [f"f{r % 2}"] if r % 3 else []) for r, d in enumerate(docs, 1)]
        if has_target:
            targets.append((f"q{q}", "abcdefghz"[pick], m))  # z: a target the list lacks
    ranked = pl.DataFrame(rows, schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "rank": pl.Int64, "score": pl.Float64,
                                        "flags": pl.List(pl.Utf8)}, orient="row")
    tg = pl.DataFrame(targets, schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "_m": pl.Int64}, orient="row")
    got = _lift(ranked, tg, "kept")
    assert got.equals(_lift_by_sorting(ranked, tg, "kept"))
    assert got.group_by("qid").agg((pl.col("score").diff().drop_nulls() <= 0).all())["score"].all()  # still by score
