"""Offline reranker training on a tiny synthetic BEIR dataset: data mining rules, holdout, refusal, a real run."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import polars as pl
import pytest
from conftest import DOCS

from toolkit import train as train_mod
from toolkit.errors import InputError, ToolkitError
from toolkit.loaders import Dataset
from toolkit.rerank import CrossEncoderReranker
from toolkit.store import Store
from toolkit.train import (
    NOT_AN_IMPROVEMENT,
    build_training_data,
    judge,
    sample_negatives,
    split_holdout,
    train_reranker,
)

# Scopes of DOCS: platform = d1 d3 d4 d5, payments = d2 d6.
QUERIES = [
    ("q1", "deploy failed ECONNREFUSED port 5432", "platform"),
    ("q2", "retry backoff retries", "payments"),
    ("q3", "pool size in production", "platform"),
    ("q4", "which SDK version is pinned", "platform"),
    ("q5", "rate limit HTTP 429 back off", "payments"),
    ("q6", "when is the team lunch", "platform"),
    ("q7", "which node version is pinned for the sdk", "platform"),
]
DEV = [("q1", "d1", 1), ("q2", "d2", 1), ("q3", "d3", 1), ("q4", "d5", 1), ("q4", "d1", 0), ("q5", "d6", 1),
       ("q6", "d4", 1), ("q6", "d2", 1)]  # q6 -> d2 crosses scopes: the pipeline could never retrieve it
TEST = [("q7", "d5", 1)]  # apart from dev: training on dev must not train on test


def write_dataset(root: Path) -> Path:
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t, "metadata": {"scope": s}}) + "\n" for q, t, s in QUERIES)
    )
    for name, rows in (("dev", DEV), ("test", TEST)):
        (root / "qrels" / f"{name}.tsv").write_text(
            "query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{r}\n" for q, d, r in rows)
        )
    return root


@pytest.fixture(scope="module")
def tiny(tmp_path_factory, embedder):
    from toolkit.loaders import load_corpus

    root = write_dataset(tmp_path_factory.mktemp("tiny") / "ds")
    store = Store(root.parent / "store.duckdb", embedder=embedder)
    store.ingest(load_corpus(root))
    yield store, Dataset.open(root)
    store.close()


@pytest.mark.slow
def test_training_data_positives_from_qrels_negatives_never_relevant_and_in_scope(tiny):
    store, ds = tiny
    data = build_training_data(store, ds.queries("dev"), ds.qrels("dev"), negatives_per_query=10, depth=10)
    assert data.columns == ["qid", "query", "doc_id", "chunk_id", "text", "label", "origin", "best_rank"]
    pos = set(data.filter(pl.col("label") > 0).select("qid", "doc_id").iter_rows())
    # Every in-scope rel > 0 judgement; q6 -> d2 (payments doc for a platform query) is left out.
    assert pos == {("q1", "d1"), ("q2", "d2"), ("q3", "d3"), ("q4", "d5"), ("q5", "d6"), ("q6", "d4")}
    relevant = {(q, d) for q, d, r in DEV if r > 0}
    negs = data.filter(pl.col("label") == 0)
    assert not set(negs.select("qid", "doc_id").iter_rows()) & relevant
    # Scope: payments queries only see payments documents, platform queries platform documents.
    scope = {d["_id"]: d["metadata"]["scope"] for d in DOCS}
    qscope = {q: s for q, _, s in QUERIES}
    assert all(scope[d] == qscope[q] for q, d in data.select("qid", "doc_id").iter_rows())
    assert set(negs.filter(pl.col("qid") == "q2")["doc_id"]) == {"d6"}
    # The judged non-relevant d1 is a negative of q4; all platform docs but the positive are candidates.
    assert set(negs.filter(pl.col("qid") == "q4")["doc_id"]) == {"d1", "d3", "d4"}
    assert "judged" in negs.filter((pl.col("qid") == "q4") & (pl.col("doc_id") == "d1"))["origin"][0]
    # The reranker reads "title\ntext" of the chunk, like the store's embedded body.
    row = data.filter((pl.col("qid") == "q1") & (pl.col("doc_id") == "d1")).row(0, named=True)
    assert row["text"].startswith("Deploy failure\nThe deploy failed") and row["chunk_id"] == "d1#0"
    assert row["query"] == "deploy failed ECONNREFUSED port 5432"


@pytest.mark.slow
def test_negative_sampling_caps_per_query_and_is_seeded(tiny):
    store, ds = tiny
    a = build_training_data(store, ds.queries("dev"), ds.qrels("dev"), negatives_per_query=1, depth=10, seed=3)
    b = build_training_data(store, ds.queries("dev"), ds.qrels("dev"), negatives_per_query=1, depth=10, seed=3)
    assert a.equals(b)
    per_q = a.filter(pl.col("label") == 0).group_by("qid").len()
    assert per_q["len"].max() == 1 and len(per_q) == 6
    assert len(a.filter(pl.col("label") > 0)) == 6  # positives are never sampled away


def test_sample_negatives_prefers_high_ranks():
    # One query, negatives at ranks 1 and 400: weight 1/sqrt(rank) -> rank 1 is picked ~95% of the time.
    pool = pl.DataFrame({"qid": ["q"] * 3, "label": [1, 0, 0], "best_rank": [None, 1, 400], "doc_id": ["p", "hi", "lo"]})
    picks = [sample_negatives(pool, 1, seed).filter(pl.col("label") == 0)["doc_id"][0] for seed in range(200)]
    assert 170 <= picks.count("hi") < 200
    with pytest.raises(InputError, match="negatives_per_query"):
        sample_negatives(pool, 0, 0)


def test_holdout_splits_queries_or_whole_scopes():
    q = pl.DataFrame({"qid": [f"q{i}" for i in range(10)], "scope": ["a"] * 6 + ["b"] * 2 + ["c"] * 2})
    tr, ho = split_holdout(q, 0.3, 0)
    assert len(ho) == 3 and len(tr) == 7 and not set(tr["qid"]) & set(ho["qid"])
    assert split_holdout(q, 0.3, 0)[1].equals(ho)  # seeded
    tr, ho = split_holdout(q, 0.2, 1, by="scope")
    assert not set(tr["scope"]) & set(ho["scope"]) and len(ho) >= 2
    with pytest.raises(InputError, match="holdout"):
        split_holdout(q, 1.0, 0)


def test_judge_says_plainly_when_it_does_not_help():
    helps, text = judge(0.455, 0.410, 0.001, 152, "dev")
    assert not helps and "does NOT help" in text and NOT_AN_IMPROVEMENT in text
    helps, text = judge(0.455, 0.460, 0.40, 152, "dev")
    assert not helps and "within noise" in text and NOT_AN_IMPROVEMENT in text
    helps, text = judge(0.455, 0.500, 0.01, 152, "dev")
    assert helps and "0.4550 -> 0.5000" in text and NOT_AN_IMPROVEMENT not in text


def test_test_split_is_refused_without_force(tmp_path, monkeypatch):
    root = write_dataset(tmp_path / "ds")
    with pytest.raises(ToolkitError, match="refusing to train on the 'test' split"):
        train_reranker(tmp_path / "never.duckdb", root, split="test", out=tmp_path / "m")
    assert not (tmp_path / "m").exists() and not (tmp_path / "never.duckdb").exists()
    # Forced: it goes ahead, warning loudly (training itself replaced by a stub here).
    monkeypatch.setattr(train_mod, "_train", lambda store, ds, **kw: kw["split"])
    store = Store(tmp_path / "s.duckdb", embedder=None)
    with pytest.warns(UserWarning, match="TEST judgements"):
        assert train_reranker(store, root, split="test", out=tmp_path / "m", force=True) == "test"
    store.close()


@pytest.mark.slow
def test_tiny_training_run_saves_a_loadable_reranker(tiny, tmp_path):
    store, ds = tiny
    out = tmp_path / "reranker"
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = train_reranker(store, ds.root, out=out, epochs=1, negatives_per_query=2, depth=5, max_length=64,
                                eval_depth=5, holdout=0.34, batch_queries=2, progress=False)
    assert report.n_train_queries == 4 and report.n_holdout_queries == 2 and report.epochs_run == 1
    assert report.best_epoch == 1 and isinstance(report.helps, bool)
    assert set(report.seconds) == {"mining", "training", "scoring"} and all(v >= 0 for v in report.seconds.values())
    assert 0.0 <= report.first_stage <= 1.0 and 0.0 <= report.blend <= 1.0
    if not report.helps:
        assert NOT_AN_IMPROVEMENT in report.verdict
    saved = json.loads((out / "training_report.json").read_text())
    assert saved["helps"] == report.helps and sorted(saved["holdout_qids"]) == sorted(report.holdout_qids)
    data = pl.read_parquet(out / "training_data.parquet")
    assert set(data["qid"]) .isdisjoint(report.holdout_qids) and data["epoch"].unique().to_list() == [1]
    rr = CrossEncoderReranker(str(out), max_length=64)
    scores = rr.score("deploy failed", ["The deploy failed.", "Team lunch on Thursday.", "Pool size 40."])
    assert len(scores) == 3 and all(isinstance(s, float) for s in scores)
    # Retraining into the same directory is allowed; into a foreign non-empty one it is not.
    (tmp_path / "other").mkdir()
    (tmp_path / "other" / "notes.txt").write_text("mine")
    with pytest.raises(InputError, match="not a reranker trained here"):
        train_reranker(store, ds.root, out=tmp_path / "other", epochs=1, progress=False)


def test_positive_cap_keeps_highest_grades_and_is_seeded():
    pool = pl.DataFrame({"qid": ["q"] * 6, "label": [2, 1, 1, 1, 0, 0], "best_rank": [None] * 4 + [1, 2],
                         "doc_id": ["p2", "a", "b", "c", "n1", "n2"]})
    got = sample_negatives(pool, 5, seed=0, max_positives=2)
    pos = got.filter(pl.col("label") > 0)["doc_id"].to_list()
    assert len(pos) == 2 and "p2" in pos  # the grade-2 document always stays
    assert got.equals(sample_negatives(pool, 5, seed=0, max_positives=2))
    assert len(sample_negatives(pool, 5, seed=0).filter(pl.col("label") > 0)) == 4  # no cap: all positives
    with pytest.raises(InputError, match="max_positives"):
        sample_negatives(pool, 5, seed=0, max_positives=0)


@pytest.mark.slow
def test_first_stage_is_the_fused_list_of_the_given_config(tiny):
    from toolkit.train import first_stage_pairs

    store, ds = tiny
    q = ds.queries("dev")
    bm25, pairs = first_stage_pairs(store, q, 3)
    want = store.lexical_search(q.select("qid", "text", "scope"), top_k=3)
    assert bm25.sort("qid", "rank").select("qid", "doc_id").equals(want.sort("qid", "rank").select("qid", "doc_id"))
    hybrid, _ = first_stage_pairs(store, q, 3, "hybrid-rrf")
    assert hybrid["rank"].max() <= 3 and set(hybrid["qid"]) == set(q["qid"])
    assert set(pairs.columns) == {"qid", "query", "doc_id", "chunk_id", "text"}
    assert len(pairs) == len(bm25)


def test_blend_recommendation_switches_a_harmful_reranker_off_and_keeps_a_good_one():
    import math

    from toolkit.train import BLEND_GRID, recommend_blend

    n, frames, rels = 12, [], []
    for i, pos in enumerate([5, 6, 7, 8, 9, 11, 12, 10]):  # the relevant document sits at fused rank `pos`
        q = f"q{i}"
        frames.append(pl.DataFrame({"qid": [q] * n, "doc_id": [f"{q}d{r}" for r in range(1, n + 1)],
                                    "chunk_id": [f"{q}d{r}#0" for r in range(1, n + 1)],
                                    "score": [1.0 / (60 + r) for r in range(1, n + 1)], "rank": list(range(1, n + 1))}))
        rels.append((q, f"{q}d{pos}", 1))
    fused = pl.concat(frames)
    qrels = pl.DataFrame(rels, schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "rel": pl.Int64}, orient="row")
    rel = set(qrels["doc_id"])
    good = fused.select("qid", "doc_id", "chunk_id", pl.col("doc_id").map_elements(lambda d: 1.0 if d in rel else 0.0, return_dtype=pl.Float64).alias("rerank_score"))
    bad = good.with_columns(-pl.col("rerank_score"))
    rec, grid = recommend_blend(fused, bad, qrels, top_n=n)
    assert rec == [(math.inf, 1.0)] and len(grid) == len(BLEND_GRID)
    rec, grid = recommend_blend(fused, good, qrels, top_n=n)
    assert rec != [(math.inf, 1.0)], grid  # a clear, consistent gain keeps some reranker weight
    one = fused.filter(pl.col("qid") == "q0")
    rec, _ = recommend_blend(one, good.filter(pl.col("qid") == "q0"), qrels.filter(pl.col("qid") == "q0"), top_n=n)
    assert rec == [(math.inf, 1.0)]  # one query: no test possible, so the reranker stays off
