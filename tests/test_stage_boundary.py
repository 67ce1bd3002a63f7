"""The stage boundary declared in config.py holds: `prepare` reads no rescore field.

The property: for any values of the rescore fields, re-scoring frames prepared under the base config gives
exactly what a fresh `prepare` under the changed config gives. The strategies are derived from the
declaration and the fields' own types and bounds, so a new rescore field is covered (or the test says it
needs a strategy) without editing a list here.
"""

from __future__ import annotations

import json
import math
import typing
from dataclasses import replace
from datetime import datetime
from pathlib import Path

import annotated_types as at
import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from polars.testing import assert_frame_equal
from pydantic import BaseModel

import toolkit
from toolkit import rerank
from toolkit.config import (
    FIELD_STAGES,
    PipelineConfig,
    Stage,
    fields,
    load_config,
    prepare_settings,
    stage_of,
)
from toolkit.errors import InputError
from toolkit.loaders import load_corpus
from toolkit.pipeline import prepare, prepare_key, reads_learned_features, rescore
from toolkit.store import Store

DOCS = [
    ("d1", "incident-12", "Deploy failure", "The deploy failed with ECONNREFUSED on port 5432 after the v2.14.3 upgrade."),
    ("d2", "decisions", "Retry policy", "We decided to set retryBackoffMs to 250 and cap retries at five."),
    ("d3", "decisions", "Pool sizing", "max_pool_size is 40 in production; staging uses 10 connections."),
    ("d4", "chat", "Lunch", "The team lunch moved to Thursday because of the offsite."),
    ("d5", "incident-12", "Version pin", "Node is pinned at v2.13.0 of the SDK, not v2.14.3, until NW-1432 is fixed."),
    ("d6", "runbook", "Rate limits", "Stripe answers HTTP 429 when we exceed the rate limit; back off and retry."),
    ("d7", "runbook", "Deploy checklist", "Before a deploy check the database port, the pool size and the retry policy."),
    ("d8", "chat", "Offsite", "The offsite is on Thursday; we will talk about the deploy failures and lunch."),
    ("d9", "incident-13", "Connection refused", "ECONNREFUSED again: the database refused connections during the deploy."),
    ("d10", "incident-13", "Connection refused (copy)", "ECONNREFUSED again: the database refused connections during the deploy!"),
    ("d11", "decisions", "Backoff", "Retries back off exponentially; the first wait is 250 ms and doubles."),
    ("d12", "notes", "Upgrade notes", "Upgrading to v2.14.3 changed the default pool size and the retry settings."),
    ("d13", "runbook-mirror", "Rate limits", "Stripe answers HTTP 429 when we exceed the rate limit; back off and retry."),  # d6's copy
]
QUERIES = pl.DataFrame(
    {
        "qid": ["q1", "q2", "q3", "q4", "q5"],
        "text": [
            "deploy fails with ECONNREFUSED",
            "hey so what did we decide about how long to wait between retries?",
            "max_pool_size in production",
            "when is the team lunch",
            "what changed in v2.14.3",
        ],
        "scope": [None] * 5,
    },
    schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8},
)


@pytest.fixture(scope="module")
def setup(tmp_path_factory, embedder):
    """A tiny store, an expansion file (so original and expansion lists both exist), a reranker score file
    covering every candidate, and a base config whose lists are shorter than the corpus and whose rerank
    top_n is small, so fusion settings decide which documents are in the reranked block."""
    root = tmp_path_factory.mktemp("boundary")
    corpus = root / "corpus.jsonl"
    # Typed metadata for the priors: a date, a priority and an access count on most documents.
    meta = [{"source": s, **({"date": f"2026-0{1 + n % 9}-1{n % 10}", "priority": str(n % 4), "uses": n * 3} if n % 5 else {})}
            for n, (_, s, _, _) in enumerate(DOCS)]
    corpus.write_text("".join(json.dumps({"_id": i, "title": t, "text": x, "metadata": m}) + "\n" for (i, _, t, x), m in zip(DOCS, meta, strict=True)))
    exp = root / "expansions.jsonl"
    exp.write_text("".join(json.dumps({"qid": q, "expansions": [{"type": "lex", "text": f"{t} issue"}, {"type": "vec", "text": f"about {t}"}]}) + "\n"
                           for q, t in zip(QUERIES["qid"], QUERIES["text"], strict=True)))
    st_ = Store(root / "s.duckdb", embedder=embedder)
    st_.ingest(load_corpus(corpus))
    # Scores for every (query, document) the reranker could be asked about, read by the file provider.
    every = pl.DataFrame({"qid": QUERIES["qid"].to_list() * len(DOCS), "doc_id": [d[0] for d in DOCS for _ in range(len(QUERIES))]})
    pairs = rerank.doc_passages(st_.chunks(), QUERIES, every)
    rng = np.random.default_rng(7)
    scores = root / "rerank.jsonl"
    scores.write_text("".join(json.dumps({"query": q, "text": t, "score": float(s)}) + "\n"
                              for q, t, s in zip(pairs["query"], pairs["text"], rng.normal(size=len(pairs)), strict=True)))
    base = load_config("qmd").with_updates({
        "retrieval.lexical.top_k": 6, "retrieval.dense.top_k": 6,
        "routing.enabled": True, "routing.conversational_skip_lexical": False,
        "expansion.provider": "file", "expansion.path": str(exp), "expansion.strong_signal_skip": False,
        "rerank.provider": "file", "rerank.path": str(scores), "rerank.top_n": 2,
        "dedup.near_duplicate_enabled": True,
    })
    prep = prepare(st_, QUERIES, base, use_cache=False)
    assert prep.rerank_scores.height > 0 and prep.vectors is not None
    assert {"orig:lex", "lex1:lex", "orig:vec", "vec1:vec"} <= set(prep.candidates["list_id"].unique())
    yield st_, base, prep
    st_.close()


# ------------------------------------------------------------------ strategies from the declaration
def _field(path: str):
    model: type[BaseModel] = PipelineConfig
    *sections, leaf = path.split(".")
    for s in sections:
        model = model.model_fields[s].annotation
    return model.model_fields[leaf]


@st.composite
def _bands(draw):
    ranks = sorted(draw(st.sets(st.integers(1, 12), max_size=3)))
    return [[r, draw(st.floats(0.0, 0.2))] for r in ranks]


@st.composite
def _buckets(draw):
    bounds = sorted(draw(st.sets(st.integers(1, 12), max_size=3)))
    return [[float(b), draw(st.floats(0.0, 1.0))] for b in bounds] + [[math.inf, draw(st.floats(0.0, 1.0))]]


SPECIAL = {
    "schema_version": st.just(1),
    "name": st.text("abcdefgh-", min_size=1, max_size=12),
    "description": st.text(max_size=20),
    "tuned_on": st.one_of(st.none(), st.builds(lambda ks: [{"dataset": "d", "split": "dev", "query_keys": ks}],
                                                st.lists(st.sampled_from(["0" * 16, "f" * 16])))),
    "fusion.rank_bonus": _bands(),
    # A learned-fusion model file: the shipped one, by default (None) or by path.
    "fusion.model": st.sampled_from([None, str(Path(toolkit.__file__).parent / "models" / "learned-fusion.json")]),
    "rerank.buckets": _buckets(),
    "priors.top_n": st.one_of(st.none(), st.integers(1, 12)),
    "priors.recency_field": st.sampled_from([None, "date", "no_such_field"]),
    "priors.recency_query_field": st.sampled_from(["date", "asked_at"]),
    "priors.priority_field": st.sampled_from([None, "priority"]),
    "priors.priority_map": st.dictionaries(st.sampled_from(["0", "1", "2", "3"]), st.floats(0.0, 5.0), max_size=4),
    "priors.use_field": st.sampled_from([None, "uses"]),
    "priors.as_of": st.sampled_from([None, "2026-03-01", "2025-06-15T12:00:00"]),
    # Scores differ by tiny amounts at this size: thresholds drawn near them actually cut.
    "threshold.min_score": st.one_of(st.just(0.0), st.floats(0.0, 1.0)),
    "threshold.low_spread": st.one_of(st.none(), st.floats(0.0, 0.2)),  # None: the fusion scale's (config.low_spread)
}


def strategy(path: str) -> st.SearchStrategy:
    """Values of one field from its type and bounds (`Field(ge=..., le=...)`)."""
    if path in SPECIAL:
        return SPECIAL[path]
    f = _field(path)
    ann = f.annotation
    lo = next((m.ge for m in f.metadata if isinstance(m, at.Ge)), next((m.gt for m in f.metadata if isinstance(m, at.Gt)), None))
    hi = next((m.le for m in f.metadata if isinstance(m, at.Le)), None)
    if typing.get_origin(ann) is typing.Literal:
        return st.sampled_from(typing.get_args(ann))
    if ann is bool:
        return st.booleans()
    if ann is int:
        lo = 1 if lo is None else int(lo) + (0 if any(isinstance(m, at.Ge) for m in f.metadata) else 1)
        return st.integers(lo, min(hi if hi is not None else lo + 200, lo + 200))
    if ann is float:
        strict_lo = not any(isinstance(m, at.Ge) for m in f.metadata) and lo is not None
        lo = 0.0 if lo is None else float(lo)
        hi = min(float(hi) if hi is not None else lo + 10.0, lo + 10.0)
        return st.floats(lo, hi, exclude_min=strict_lo, allow_nan=False, allow_infinity=False)
    raise AssertionError(f"{path}: no strategy for {ann!r}; add one to SPECIAL in this test")


RESCORE = fields(Stage.RESCORE)
# Each field keeps the base value (None) or takes a random one: examples move one field, a few, or all.
def _coherent(d: dict) -> dict:
    """The cross-field rules among rescore fields: calibrated probabilities need learned fusion, and adapt's
    min_weight is at most its max_weight."""
    d = {k: v for k, v in d.items() if v is not None}
    if d.get("threshold.min_prob", 0) > 0:
        d["fusion.method"] = "learned"
    lo, hi = d.get("adapt.min_weight", 0.25), d.get("adapt.max_weight", 4.0)  # the base's are the defaults
    if lo > hi:
        d["adapt.min_weight"], d["adapt.max_weight"] = hi, lo
    # Some list must have a weight (the config refuses all-zero fusion): the base's are 1, alpha 0.5.
    lw, dw, a = d.get("fusion.lexical_weight", 1.0), d.get("fusion.dense_weight", 1.0), d.get("fusion.alpha", 0.5)
    if lw * (1.0 - a) == 0.0 and dw * a == 0.0 or lw == 0.0 and dw == 0.0:
        d["fusion.dense_weight"], d["fusion.alpha"] = 1.0, 0.5
    if d.get("fusion.original_weight", 2.0) == 0.0 and d.get("fusion.expansion_weight", 1.0) == 0.0:
        d["fusion.original_weight"] = 2.0  # (the base expands queries: both variants' weights 0 fuse nothing)
    return d


UPDATES = st.fixed_dictionaries({p: st.one_of(st.none(), strategy(p)) for p in RESCORE}).map(_coherent)


def _same(a, b) -> None:
    # Ids, ranks and flags exactly; scores to 1e-9 relative, because two `prepare` runs can differ in the
    # last bits of a retrieval score (DuckDB's parallel BM25 sums are not ordered), which has nothing to do
    # with the boundary.
    for name in ("final", "per_query", "removed", "trace"):
        assert_frame_equal(getattr(a, name), getattr(b, name), check_exact=False, rel_tol=1e-9, abs_tol=1e-12), name


@pytest.mark.long
@settings(max_examples=80, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(updates=UPDATES)
def test_rescore_of_base_prepared_equals_fresh_prepare_for_every_rescore_field(setup, updates):
    store, base, prep = setup
    cfg = base.with_updates(updates)
    assert prepare_key(store, QUERIES, cfg) == prepare_key(store, QUERIES, base)
    # No cache: really recomputed under cfg. The learned features only when cfg reads them (as `hrt run` asks): a
    # config that does not read them yet depends on them fails here, and the 80 prepares cost half as much.
    fresh = prepare(store, QUERIES, cfg, use_cache=False, learned_features=reads_learned_features(cfg))
    now = datetime(2026, 6, 1)  # the recency prior's clock, fixed so both sides see the same time
    _same(rescore(prep, cfg, now=now), rescore(fresh, cfg, now=now))


# One slider at a time, as in the lab: each step moves one field and keeps the earlier moves.
MOVES = st.lists(st.sampled_from(RESCORE).flatmap(lambda p: st.tuples(st.just(p), strategy(p))), min_size=2, max_size=6)


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow])
@given(moves=MOVES, trace=st.booleans())
def test_stages_reused_from_the_last_change_equal_a_rescore_from_nothing(setup, moves, trace):
    """`rescore` keeps each stage's last output (`Prepared.staged`) and reuses it while the stage's inputs and
    settings are unchanged. After every move the result equals that of a `Prepared` that has kept nothing."""
    _, base, prep = setup
    now = datetime(2026, 6, 1)
    moved: dict = {}
    for path, value in moves:
        moved[path] = value
        cfg = base.with_updates(_coherent(dict(moved)))
        got = rescore(prep, cfg, now=now, trace=trace)
        want = rescore(replace(prep, _staged={}), cfg, now=now, trace=trace)
        for name in ("final", "per_query", "removed", "trace"):
            assert_frame_equal(getattr(got, name), getattr(want, name)), (name, moved)


def test_a_change_reruns_its_own_stage_and_the_later_ones_only(setup, monkeypatch):
    """What makes a slider cheap: a threshold change re-runs no guard or dedup, a near-duplicate threshold change
    re-runs dedup's second half only, a guard change re-runs the guard (and what its output changed), and a fusion
    change everything."""
    from toolkit import dedup as dedup_stage
    from toolkit import fusion as fusion_stage
    from toolkit import guard as guard_stage

    _, base, prep = setup
    calls: list[str] = []
    for mod, name in ((fusion_stage, "list_weights"), (guard_stage, "keep_exact"), (dedup_stage, "collapse"), (dedup_stage, "dedup")):
        real = getattr(mod, name)
        monkeypatch.setattr(mod, name, lambda *a, _f=real, _n=name, **k: (calls.append(_n), _f(*a, **k))[1])
    cfg = base.with_updates({"threshold.low_spread": 0.01})
    fresh = replace(prep, _staged={})
    every = ["list_weights", "keep_exact", "collapse", "dedup"]
    for upd, runs in [({}, every),  # a Prepared that has run nothing yet: every stage
                      ({"threshold.low_spread": 0.05}, []),
                      ({"dedup.near_duplicate_threshold": 0.5}, ["dedup"]),
                      # (the guard re-runs; it moved no hit at this size, so its output is its input and dedup reuses)
                      ({"guard.max_rank": 1}, ["keep_exact"]),
                      ({"dedup.identical_enabled": not base.dedup.identical_enabled}, ["collapse", "dedup"]),
                      ({"fusion.rrf_k": 7}, every)]:
        cfg = cfg.with_updates(upd)
        calls.clear()
        rescore(fresh, cfg, trace=False)
        assert calls == runs, upd


def test_every_field_declares_one_stage_and_the_derivations_agree():
    # flat() also walks into dict-valued fields (priors.priority_map.<key>); those belong to their field.
    leaves = {p for p in PipelineConfig().flat() if not any(p.startswith(f + ".") for f in FIELD_STAGES)}
    leaves |= {f for f in FIELD_STAGES if any(p.startswith(f + ".") for p in PipelineConfig().flat())}
    assert set(FIELD_STAGES) == leaves
    assert set(fields(Stage.PREPARE)) | set(RESCORE) == leaves and not set(fields(Stage.PREPARE)) & set(RESCORE)
    # The cases: the boost and the blend mode are live; the reranker's provider is not.
    assert stage_of("routing.technical_lexical_boost") is Stage.RESCORE and stage_of("rerank.blend") is Stage.RESCORE
    assert stage_of("rerank.provider") is Stage.PREPARE and stage_of("dedup.near_duplicate_enabled") is Stage.PREPARE
    with pytest.raises(InputError, match="did you mean fusion.rrf_k"):
        stage_of("fusion.rrfk")


def test_every_prepare_field_is_in_the_cache_key():
    """Changing any prepare field changes `prepare_settings` (hence prepare_key and the lab's signature),
    except the fields of a provider section switched off, which prepare does not read."""
    base = load_config("qmd").with_updates({"rerank.provider": "file", "rerank.path": "x.jsonl",
                                            "expansion.provider": "file", "expansion.path": "e.jsonl"})
    changes = {"retrieval.level": "chunk", "retrieval.lexical.enabled": False, "retrieval.lexical.top_k": 7,
               "retrieval.lexical.k1": 0.9, "retrieval.lexical.b": 0.3, "retrieval.lexical.stemmer": "english",
               "retrieval.lexical.stopwords": "none", "retrieval.lexical.compounds": False, "retrieval.dense.enabled": False, "retrieval.dense.top_k": 7,
               "retrieval.dense.model": "other", "retrieval.scope_filter": False, "retrieval.dense.backend": "torch",
               "retrieval.dense.provider": "http", "retrieval.dense.dimensions": 128,
               "retrieval.dense.index": "hnsw", "retrieval.dense.ef_search": 64, "retrieval.filters": {"user": "ana"}}
    for p in fields(Stage.PREPARE):
        if p in changes:
            continue
        v = base.get(p)
        changes[p] = (not v if isinstance(v, bool) else v + 1 if isinstance(v, int) else v / 2 if isinstance(v, float)
                      else "other.jsonl" if p.endswith("path") else "http://x.test/v1" if p.endswith("url")
                      else "OTHER_KEY" if p.endswith("api_key_env") else "file" if p.endswith("provider") else "m")
    changes["rerank.provider"] = "cross-encoder"
    changes["expansion.provider"] = "http"
    for p, v in changes.items():
        upd = {p: v, **({"expansion.url": "http://x.test/v1"} if p == "expansion.provider" else {}),
               **({"rerank.model": "m"} if p == "rerank.provider" else {}),
               **({"retrieval.dense.url": "http://x.test/v1", "retrieval.dense.model": "m"} if p == "retrieval.dense.provider" else {})}
        assert prepare_settings(base.with_updates(upd)) != prepare_settings(base), p
    off = load_config("qmd")
    assert prepare_settings(off.with_updates({"rerank.top_n": 5})) == prepare_settings(off)


def test_technical_boost_acts_in_rescore(setup):
    """The issue's symptom: two boosts from one prepared set gave the same lists. Now the boost moves the
    technical queries' lexical weight live, and only theirs."""
    store, base, prep = setup
    a = rescore(prep, base.with_updates({"routing.technical_lexical_boost": 1.0}), trace=False).final
    b = rescore(prep, base.with_updates({"routing.technical_lexical_boost": 8.0}), trace=False).final
    tech = prep.features.filter(pl.col("technical"))["qid"].to_list()
    assert tech and not a.filter(pl.col("qid").is_in(tech))["score"].equals(b.filter(pl.col("qid").is_in(tech))["score"])
    plain = prep.features.filter(~pl.col("technical"))["qid"].to_list()
    assert a.filter(pl.col("qid").is_in(plain)).equals(b.filter(pl.col("qid").is_in(plain)))


def test_blend_none_is_a_live_decision(setup):
    """Reranker scores are prepared whenever a provider is set; blend 'none' re-scores them away."""
    store, base, prep = setup
    off = base.with_updates({"rerank.blend": "none"})
    assert prepare(store, QUERIES, off, use_cache=False).rerank_scores.height == prep.rerank_scores.height
    assert not rescore(prep, off).final["flags"].list.contains("reranked").any()
    assert rescore(prep, base).final["flags"].list.contains("reranked").any()


def test_rescore_refuses_a_config_whose_prepare_fields_differ(setup):
    """A user trial's wrong result: frames prepared for one config re-scored under another retrieval depth
    or list set gave that config's name to the first config's candidates. Now each differing prepare field
    is named, and a config that differs only in live fields (or a preset name for one) still re-scores."""
    store, base, prep = setup
    for upd, field_ in [({"retrieval.lexical.top_k": 5}, "retrieval.lexical.top_k"),
                        ({"retrieval.dense.enabled": False}, "retrieval.dense.enabled"),
                        ({"routing.enabled": False}, "routing.enabled")]:
        with pytest.raises(InputError, match=rf"prepare field\(s\) {field_} .*prepare again"):
            rescore(prep, base.with_updates(upd))
    assert rescore(prep, base.with_updates({"fusion.rrf_k": 7}), trace=False).final.height
    # Near-duplicate dedup only adds an input (the vectors): frames prepared with it serve a config without
    # it, exactly as a fresh prepare would (tutorial 04 compares the two); the reverse lacks the vectors.
    off = base.with_updates({"dedup.near_duplicate_enabled": False})
    fresh = prepare(store, QUERIES, off, use_cache=False)
    _same(rescore(prep, off), rescore(fresh, off))
    with pytest.raises(InputError, match=r"dedup.near_duplicate_enabled \(False prepared, True asked\)"):
        rescore(fresh, base)
    plain = prepare(store, QUERIES, "bm25-only", use_cache=False)  # names are accepted where configs are
    with pytest.raises(InputError, match="retrieval.dense.enabled"):
        rescore(plain, "vector-only")
    _same(rescore(plain, "bm25-only"), toolkit.run_pipeline(store, QUERIES, "bm25-only"))
