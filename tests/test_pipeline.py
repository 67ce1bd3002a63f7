"""The whole pipeline on a small store: cached re-scoring equals a full run, guarded reranking never
loses results, routing and dedup leave their decisions in the trace."""

from __future__ import annotations

import polars as pl
import pytest
from fake_servers import fake_server_fixture  # noqa: F401 - pytest fixture

from toolkit.config import load_config
from toolkit.loaders import load_corpus
from toolkit.pipeline import prepare, rescore, run_pipeline
from toolkit.store import Store

QUERIES = pl.DataFrame(
    {
        "qid": ["q1", "q2", "q3", "q4"],
        "text": [
            "deploy fails with ECONNREFUSED",
            "hey so what did we decide about how long to wait between retries?",
            "which SDK version is pinned",
            "HTTP 429 rate limit",
        ],
        "scope": ["platform", "payments", "platform", None],
    }
)


@pytest.fixture
def store(tmp_path, corpus_file, embedder):
    st = Store(tmp_path / "p.duckdb", embedder=embedder)
    st.ingest(load_corpus(corpus_file))
    yield st
    st.close()


@pytest.mark.parametrize("preset", ["bm25-only", "vector-only", "hybrid-rrf", "qmd", "cems-p0", "ace", "a0x-adaptive", "memoria"])
def test_rescore_from_cache_equals_full_run(store, preset):
    cfg = load_config(preset)
    full = run_pipeline(store, QUERIES, cfg)
    cached = rescore(prepare(store, QUERIES, cfg), cfg)  # second prepare: loaded from the stage cache
    assert full.final.select("qid", "doc_id", "rank", "score").equals(cached.final.select("qid", "doc_id", "rank", "score"))
    # Scope filter holds through every stage.
    q2 = full.final.filter(pl.col("qid") == "q2")["doc_id"].to_list()
    assert set(q2) <= {"d2", "d6"}
    assert set(full.trace["stage"].unique()) >= {"fuse", "blend", "final"}
    # The stages' integer codes (fusion's `_key`, `_q`, ...) never reach the reader.
    assert not [c for c in (*full.final.columns, *cached.final.columns) if c.startswith("_")]


@pytest.mark.parametrize("preset", ["bm25-only", "hybrid-rrf", "qmd", "default", "memoria", "cems-p0", "a0x-adaptive"])
def test_rescore_with_a_small_n_keeps_the_same_first_places(store, preset):
    """The tuner re-scores with n = the measure's depth: the first n places must be those of a full re-score,
    with and without dedup by source and near-duplicates (which read further down the list)."""
    base = load_config(preset)
    for upd in ({}, {"dedup.source_enabled": True, "dedup.max_per_source": 1},
                {"dedup.near_duplicate_enabled": True, "dedup.near_duplicate_threshold": 0.5}):
        cfg = base.with_updates(upd)
        prep = prepare(store, QUERIES, cfg)
        full, small = rescore(prep, cfg, trace=False), rescore(prep, cfg, trace=False, n=1)
        assert small.final.group_by("qid").len()["len"].max() <= 1 < full.final.group_by("qid").len()["len"].max()
        assert small.run(1).equals(full.run(1)), (preset, upd)


def test_config_change_rescores_without_retrieval(store, monkeypatch):
    cfg = load_config("hybrid-rrf")
    prep = prepare(store, QUERIES, cfg)

    def no_search(*a, **k):
        raise AssertionError("rescore must not touch the index")

    monkeypatch.setattr(Store, "lexical_search", no_search)
    monkeypatch.setattr(Store, "dense_search", no_search)
    a = rescore(prep, cfg)
    b = rescore(prep, cfg.with_updates({"fusion.lexical_weight": 5.0, "fusion.dense_weight": 0.1}))
    assert a.final.height and b.final.height
    # With BM25 weighted up, q1's exact-token document leads.
    assert b.final.filter((pl.col("qid") == "q1") & (pl.col("rank") == 1))["doc_id"][0] == "d1"


@pytest.mark.parametrize("mode", ["good", "500", "slow", "malformed", "wrong_shape"])
def test_http_reranker_failures_keep_full_lists(store, fake_server, mode):
    fake_server.mode = mode
    fake_server.delay_s = 1.5
    base = load_config("hybrid-rrf")
    cfg = load_config("qmd").with_updates(
        {"rerank.provider": "http", "rerank.url": fake_server.rerank_url, "rerank.timeout_s": 0.5, "rerank.retries": 0}
    )
    res = run_pipeline(store, QUERIES, cfg)
    plain = run_pipeline(store, QUERIES, base)
    counts = res.final.group_by("qid").len().sort("qid")
    assert counts.equals(plain.final.group_by("qid").len().sort("qid"))
    if mode == "good":
        assert res.final["flags"].list.contains("reranked").any() or "rerank_score" in res.final.columns
    else:
        # Fallback keeps the fused order exactly.
        fused = res.trace.filter(pl.col("stage") == "fuse").select("qid", "doc_id", "rank")
        blended = res.trace.filter(pl.col("stage") == "blend").select("qid", "doc_id", "rank")
        assert fused.sort("qid", "rank").equals(blended.sort("qid", "rank"))


def test_routing_skips_lexical_for_conversational_queries(store):
    cfg = load_config("ace")
    prep = prepare(store, QUERIES, cfg, use_cache=False)
    f = prep.features.filter(pl.col("qid") == "q2").to_dicts()[0]
    assert f["route"] == "conversational" and f["skip_lexical"]
    lists = prep.candidates.filter(pl.col("qid") == "q2")["list_id"].unique().to_list()
    assert lists == ["orig:vec"]
    assert "orig:lex" in prep.candidates.filter(pl.col("qid") == "q1")["list_id"].unique().to_list()


def test_one_prepared_reused_across_configs_equals_fresh_runs(store):
    """Prepared caches config-free encodings (fusion index, list table, per-document rerank scores); a
    sequence of different configs on one Prepared must give what a fresh Prepared gives for each."""
    from toolkit.metrics import cutoff_depth, evaluate

    base = load_config("qmd")
    prep = prepare(store, QUERIES, base)
    qrels = pl.DataFrame({"qid": ["q1", "q2", "q3"], "doc_id": ["d1", "d2", "d3"], "rel": [1, 1, 1]})
    for upd in ({"fusion.rrf_k": 5}, {"fusion.method": "convex", "fusion.alpha": 0.3}, {"fusion.lexical_weight": 0.0},
                {"dedup.source_enabled": False, "dedup.near_duplicate_enabled": False}, {}):
        cfg = base.with_updates(upd)
        reused = rescore(prep, cfg)
        fresh = rescore(prepare(store, QUERIES, cfg, use_cache=False), cfg)
        assert reused.final.select("qid", "doc_id", "rank", "score").equals(fresh.final.select("qid", "doc_id", "rank", "score")), upd
        ms = ["nDCG@10", "R@5", "MRR@10"]
        assert evaluate(reused.run(cutoff_depth(ms)), qrels, ms).equals(evaluate(reused.run(), qrels, ms))
    assert set(prep._derived) >= {"lists", "fusion_index"}


def test_cached_encodings_give_the_plain_stage_chain_with_reranker_scores(store):
    """rescore's fast paths (fusion index, integer rerank lookups, grouped gathers, blend keep) against
    the plain stage functions, with reranker scores present and with one list switched off."""
    import numpy as np

    from toolkit import blend as blend_stage
    from toolkit import dedup as dedup_stage
    from toolkit import fusion, threshold

    base = load_config("qmd")
    prep = prepare(store, QUERIES, base)
    c = prep.candidates
    rng = np.random.default_rng(0)
    pool = c.select("qid", "doc_id", "chunk_id").unique(["qid", "doc_id"], keep="first").sort("qid", "doc_id")
    prep.rerank_scores = pool.with_columns(pl.Series("rerank_score", rng.normal(size=len(pool))))
    for upd in ({}, {"fusion.dense_weight": 0.0}, {"rerank.blend": "replace", "rerank.top_n": 3},
                {"dedup.source_enabled": True}):
        cfg = base.with_updates(upd)
        got = rescore(prep, cfg, trace=False).final
        w = fusion.list_weights(c, prep.features, cfg.fusion, cfg.routing)
        b = blend_stage.blend(fusion.fuse(c, w, cfg.fusion), prep.rerank_scores, cfg.rerank)
        kept, _ = dedup_stage.dedup(b, prep.doc_source, cfg.dedup, vectors=prep.vectors, n=100)
        want, _ = threshold.apply_threshold(kept, cfg.threshold, n=cfg.output.n)
        cols = ["qid", "doc_id", "rank", "score"]
        assert got.select(cols).sort("qid", "rank").equals(want.select(cols).sort("qid", "rank")), upd
        assert got.filter(pl.col("flags").list.contains("reranked")).height > 0


def test_rescore_without_a_trace_equals_the_traced_lists(store):
    """Without a trace nothing reads the fused frame, and fusion's places matrix stands in for it
    (`fusion.places`, `blend.blend_places`): every column of the final lists, the notes and the removed rows
    equal a traced re-score's, with tied reranker scores, every blend and normalisation, and any cut."""
    import numpy as np
    from polars.testing import assert_frame_equal

    base = load_config("qmd")
    prep = prepare(store, QUERIES, base)
    pool = prep.candidates.select("qid", "doc_id", "chunk_id").unique(["qid", "doc_id"], keep="first").sort("qid", "doc_id")
    scores = np.random.default_rng(1).integers(0, 3, len(pool)) / 2.0  # few values: ties in the reranked block
    prep.rerank_scores = pool.with_columns(pl.Series("rerank_score", scores)).filter(pl.int_range(pl.len()) % 5 != 0)
    for upd in ({}, {"rerank.blend": "replace", "rerank.top_n": 2}, {"rerank.score_normalization": "sigmoid", "output.n": 2},
                {"rerank.score_normalization": "none", "rerank.top_n": 500}, {"rerank.blend": "none"},
                {"fusion.rank_bonus": [], "fusion.rrf_k": 1, "rerank.buckets": [[1, 0.9], [5, 0.1], [float("inf"), 0.3]]},
                {"dedup.source_enabled": True}, {"threshold.min_score": 0.5},
                {"fusion.method": "convex", "fusion.normalization": "zscore", "rerank.top_n": 3}):
        cfg = base.with_updates(upd)
        for n in (None, 1, 3):
            fast, traced = rescore(prep, cfg, trace=False, n=n), rescore(prep, cfg, trace=True, n=n)
            for part in ("final", "per_query", "removed"):
                try:
                    assert_frame_equal(getattr(fast, part), getattr(traced, part), check_exact=True)
                except AssertionError as e:
                    raise AssertionError(f"{upd}, n={n}, {part}: {e}") from None
    assert "fusion_layout" in prep._derived


def test_index_settings_in_a_config_are_checked_against_the_store(store):
    """retrieval.lexical.stemmer/stopwords and retrieval.dense.model act: unset, the store's own index is
    used; set, they must match how the store was built, or prepare stops naming the field and the flag."""
    from toolkit.errors import StoreError

    base = load_config("qmd")
    assert store.settings.stemmer == "porter" and store.embedding_model
    same = base.with_updates({"retrieval.lexical.stemmer": "porter", "retrieval.lexical.stopwords": "english",
                              "retrieval.dense.model": "all-MiniLM-L6-v2"})
    assert prepare(store, QUERIES, same).candidates.height > 0
    for upd, msg in (({"retrieval.lexical.stemmer": "english"}, r"retrieval\.lexical\.stemmer is 'english' but .* built with 'porter'.*--stemmer english"),
                     ({"retrieval.lexical.stopwords": "none"}, r"retrieval\.lexical\.stopwords is 'none'.*--stopwords none"),
                     ({"retrieval.dense.model": "intfloat/e5-small-v2"}, r"retrieval\.dense\.model is 'intfloat/e5-small-v2'.*--model")):
        with pytest.raises(StoreError, match=msg):
            prepare(store, QUERIES, base.with_updates(upd))
    # A stemmer pinned for a lexical list that is switched off is not checked.
    assert prepare(store, QUERIES, load_config("vector-only").with_updates({"retrieval.lexical.stemmer": "english"})).candidates.height > 0


def test_the_same_query_asked_on_another_date_is_not_served_the_cached_date(store):
    """The stage cache is keyed by the queries' metadata too: their dates are the recency prior's reference."""
    cfg = load_config("bm25-only").with_updates({"priors.recency_field": "date", "priors.recency_query_field": "date"})
    asked = [QUERIES.head(1).with_columns(pl.lit(f'{{"date": "{d}"}}').alias("metadata")) for d in ("2026-01-01", "2026-06-01")]
    first, second = (prepare(store, q, cfg) for q in asked)  # the second would be a cache hit on text alone
    dates = [p.query_values.filter(pl.col("field") == "date")["ts"].to_list() for p in (first, second)]
    assert dates[0] != dates[1] and len(dates[1]) == 1
    as_dicts = QUERIES.head(1).with_columns(pl.Series("metadata", [{"date": "2026-06-01"}]))  # a struct column hashes too
    assert prepare(store, as_dicts, cfg).query_values["ts"].to_list() == dates[1]


def test_a_count_below_one_is_refused_and_a_result_compares_by_identity(store):
    """User trial BP: `rescore(prep, cfg, n=0)` returned 100 results per query (`n or default`), `n=-1` and
    `Result.run(depth=-1)` returned nothing, and `result == result` raised "the truth value of a DataFrame is
    ambiguous". n=None keeps meaning the default."""
    import dataclasses

    from toolkit.errors import InputError

    cfg = load_config("bm25-only")
    prep = prepare(store, QUERIES, cfg)
    for bad in (0, -1, True, 2.5):
        with pytest.raises(InputError, match=rf"^n {bad!r}: expected an integer >= 1"):
            rescore(prep, cfg, n=bad)  # type: ignore[arg-type]
    res = rescore(prep, cfg, n=None)
    with pytest.raises(InputError, match=r"^depth -1: expected an integer >= 1"):
        res.run(depth=-1)
    with pytest.raises(InputError, match=r"^depth 0: "):
        res.run(0)
    assert len(res.run(None)) == len(res.final) and res.run(1)["rank"].max() == 1
    other = rescore(prep, cfg)
    assert res == res and res != other and len({res, other}) == 2  # identity: no frame comparison, hashable
    with pytest.raises(dataclasses.FrozenInstanceError):
        res.n = 3  # type: ignore[misc]
