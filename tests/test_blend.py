"""Guarded reranking: position-aware blending by fused-rank bucket, replace, none, and the untouched tail."""

from __future__ import annotations

import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from toolkit.blend import BLEND_SCHEMA, blend
from toolkit.config import RerankConfig


def fused(n: int, qid: str = "q") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "qid": [qid] * n,
            "doc_id": [f"d{i}" for i in range(1, n + 1)],
            "chunk_id": [f"d{i}#0" for i in range(1, n + 1)],
            "score": [1.0 / (60 + i) for i in range(1, n + 1)],
            "rank": list(range(1, n + 1)),
        }
    )


def rr(scores: dict[str, float], qid: str = "q") -> pl.DataFrame:
    return pl.DataFrame(
        {
            "qid": [qid] * len(scores),
            "doc_id": list(scores),
            "chunk_id": [f"{d}#0" for d in scores],
            "rerank_score": list(scores.values()),
        },
        schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "rerank_score": pl.Float64},
    )


def by_doc(b: pl.DataFrame) -> dict[str, dict]:
    return {r["doc_id"]: r for r in b.to_dicts()}


def test_position_blend_worked_example_for_each_bucket():
    # Raw scores 0..10 min-max normalise to 0..1: d1 -> 0.2, d5 -> 0.5, d12 -> 1.0, d2 -> 0.0.
    b = blend(fused(12), rr({"d1": 2.0, "d2": 0.0, "d5": 5.0, "d12": 10.0}), RerankConfig(top_n=20))
    assert b.schema == pl.Schema(BLEND_SCHEMA)
    r = by_doc(b)
    assert r["d1"]["rerank_norm"] == pytest.approx(0.2) and r["d1"]["retrieval_weight"] == 0.75
    assert r["d1"]["score"] == pytest.approx(0.75 * 1 / 1 + 0.25 * 0.2)  # bucket 1-3
    assert r["d2"]["score"] == pytest.approx(0.75 * 1 / 2 + 0.25 * 0.0)
    assert r["d5"]["retrieval_weight"] == 0.60
    assert r["d5"]["score"] == pytest.approx(0.60 * 1 / 5 + 0.40 * 0.5)  # bucket 4-10
    assert r["d12"]["retrieval_weight"] == 0.40
    assert r["d12"]["score"] == pytest.approx(0.40 * 1 / 12 + 0.60 * 1.0)  # bucket 11+
    assert b["doc_id"].to_list()[:4] == ["d1", "d12", "d2", "d5"]  # 0.80, 0.633, 0.375, 0.32
    assert b["rank"].to_list() == list(range(1, 13))
    assert r["d12"]["raw_score"] == 10.0 and r["d3"]["raw_score"] == pytest.approx(1 / 63)
    assert r["d1"]["flags"] == ["reranked"] and r["d3"]["flags"] == ["rerank_missing"]


def test_exact_match_survives_position_blend_but_not_replace():
    # d1 is the exact match at fused rank 1; the reranker finds it mediocre and likes six others more.
    scores = {"d1": 0.3, **{f"d{i}": 0.9 - i / 100 for i in range(2, 8)}, "d8": 0.0}
    guarded = blend(fused(8), rr(scores), RerankConfig(blend="position"))
    assert guarded["doc_id"].to_list().index("d1") < 3
    unguarded = blend(fused(8), rr(scores), RerankConfig(blend="replace"))
    assert unguarded["doc_id"].to_list().index("d1") >= 3
    assert unguarded["doc_id"].to_list()[:2] == ["d2", "d3"]
    assert (unguarded.filter(pl.col("reranked"))["retrieval_weight"] == 0.0).all()


def test_documents_beyond_top_n_keep_fused_order_below_the_block():
    b = blend(fused(10), rr({f"d{i}": float(i) for i in range(1, 11)}), RerankConfig(top_n=4))
    block, tail = b.filter(pl.col("reranked")), b.filter(~pl.col("reranked"))
    assert sorted(block["doc_id"]) == ["d1", "d2", "d3", "d4"]
    assert tail["doc_id"].to_list() == [
        "d5",
        "d6",
        "d7",
        "d8",
        "d9",
        "d10",
    ]  # fused order, although reranker liked them
    assert tail["score"].max() < block["score"].min()
    assert all(a > b for a, b in zip(tail["score"], tail["score"][1:], strict=False))
    assert (tail["score"] > 0).all()  # a positive block keeps the tail positive (min_score 0 keeps it)
    assert tail["flags"].to_list() == [[]] * 6  # beyond top_n: not "missing", just not asked
    assert tail["rerank_score"].to_list() == [5.0, 6.0, 7.0, 8.0, 9.0, 10.0]  # kept for the panels


def test_failed_query_keeps_exact_fused_order():
    f = pl.concat([fused(5, "ok"), fused(5, "failed")])
    b = blend(f, rr({"d5": 9.0, "d4": 1.0}, qid="ok"), RerankConfig())
    failed = b.filter(pl.col("qid") == "failed")
    assert failed.select("doc_id", "score", "rank").equals(
        fused(5, "failed").select("doc_id", "score", "rank")
    )
    assert not failed["reranked"].any()
    ok = b.filter(pl.col("qid") == "ok")
    # d5: .6/5 + .4*1 = .52, d4: .6/4 + .4*0 = .15; d1-d3 have no score and follow in fused order.
    assert ok["doc_id"].to_list() == ["d5", "d4", "d1", "d2", "d3"]
    assert ok["score"].to_list()[:2] == pytest.approx([0.52, 0.15])


def test_no_scores_at_all_or_blend_none_is_the_fused_list():
    f = fused(6)
    empty = rr({})
    for b in (
        blend(f, empty, RerankConfig()),
        blend(f, None, RerankConfig()),
        blend(f, rr({"d6": 5.0, "d1": 0.0}), RerankConfig(blend="none")),
    ):
        assert b.select("doc_id", "score", "rank").equals(f.select("doc_id", "score", "rank"))
        assert not b["reranked"].any() and (b["retrieval_weight"] == 1.0).all()
    assert blend(f.head(0), empty, RerankConfig()).schema == pl.Schema(BLEND_SCHEMA)


def test_normalisations_and_duplicates():
    b = blend(
        fused(3),
        rr({"d1": 0.0, "d2": 2.0}).vstack(rr({"d2": -1.0})),
        RerankConfig(score_normalization="sigmoid"),
    )
    r = by_doc(b)
    assert r["d1"]["rerank_norm"] == pytest.approx(0.5)
    assert r["d2"]["rerank_norm"] == pytest.approx(1 / (1 + 2.718281828459045**-2))  # max over duplicate rows
    single = by_doc(blend(fused(3), rr({"d3": -4.0}), RerankConfig()))
    assert single["d3"]["rerank_norm"] == 1.0  # one reranked document: minmax gives 1.0
    assert single["d3"]["score"] == pytest.approx(0.75 / 3 + 0.25)
    assert single["d1"]["score"] < single["d3"]["score"] and single["d1"]["flags"] == ["rerank_missing"]


def test_replace_with_zero_floor_puts_tail_below_zero():
    b = blend(fused(4), rr({"d1": 0.0, "d2": 1.0}), RerankConfig(blend="replace"))
    assert b["doc_id"].to_list() == ["d2", "d1", "d3", "d4"]
    assert b["score"].to_list() == pytest.approx([1.0, 0.0, -1 / 3, -2 / 3])


@settings(max_examples=60, deadline=None, database=None)
@given(
    n=st.integers(1, 25),
    top_n=st.integers(1, 30),
    raw=st.lists(st.one_of(st.none(), st.floats(-20, 20, allow_nan=False)), min_size=25, max_size=25),
    mode=st.sampled_from(["position", "replace"]),
)
def test_block_then_tail_in_fused_order(n, top_n, raw, mode):
    scores = {f"d{i}": s for i, s in zip(range(1, n + 1), raw, strict=False) if s is not None}
    b = blend(fused(n), rr(scores), RerankConfig(top_n=top_n, blend=mode))
    assert sorted(b["doc_id"]) == sorted(fused(n)["doc_id"])
    assert b["rank"].to_list() == list(range(1, n + 1))
    block, tail = b.filter(pl.col("reranked")), b.filter(~pl.col("reranked"))
    assert (block["fused_rank"] <= top_n).all()
    assert b["reranked"].to_list() == sorted(b["reranked"].to_list(), reverse=True)  # block first
    assert tail["fused_rank"].to_list() == sorted(tail["fused_rank"].to_list())
    if len(block) and len(tail):
        assert tail["score"].max() < block["score"].min()
    s = b["score"].to_list()
    assert all(a >= c for a, c in zip(s, s[1:], strict=False))


@settings(max_examples=60, deadline=None)
@given(
    sizes=st.lists(st.integers(1, 15), min_size=1, max_size=5),
    top_n=st.integers(1, 12),
    raw=st.lists(st.one_of(st.none(), st.floats(-5, 5, allow_nan=False), st.sampled_from([0.5, 1.0])), min_size=75, max_size=75),
    mode=st.sampled_from(["position", "replace", "none"]),
    norm=st.sampled_from(["minmax", "sigmoid", "none"]),
    seed=st.integers(0, 3),
)
def test_numpy_blend_equals_the_polars_reference(sizes, top_n, raw, mode, norm, seed):
    """Several queries, ties and missing scores, rows given in any order: same rows, ranks and scores."""
    from blend_reference import blend_reference

    f = pl.concat([fused(n, qid=f"q{i}") for i, n in enumerate(sizes)])
    keys = list(zip(f["qid"], f["doc_id"], strict=True))
    scores = [(q, d, s) for (q, d), s in zip(keys, raw, strict=False) if s is not None]
    r = pl.DataFrame(scores, schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "rerank_score": pl.Float64}, orient="row")
    r = r.with_columns((pl.col("doc_id") + "#0").alias("chunk_id"))
    cfg = RerankConfig(top_n=top_n, blend=mode, score_normalization=norm)
    want = blend_reference(f, r, cfg).sort("qid", "rank")
    got = blend(f.sample(fraction=1.0, shuffle=True, seed=seed), r, cfg).sort("qid", "rank")
    assert got.select("qid", "doc_id", "rank", "reranked", "flags").equals(want.select("qid", "doc_id", "rank", "reranked", "flags"))
    kept = blend(f, r, cfg, keep=3).sort("qid", "rank")
    assert kept.equals(blend(f, r, cfg).filter(pl.col("rank") <= 3).sort("qid", "rank"))
    for col in ("score", "rerank_norm", "retrieval_weight", "raw_score"):
        a, b = got[col].fill_null(float("nan")).to_list(), want[col].fill_null(float("nan")).to_list()
        assert all((x != x and y != y) or abs(x - y) <= 1e-12 for x, y in zip(a, b, strict=True)), col
