"""Thresholds: drop weak results (a query nothing passes keeps its list, flagged, unless none_pass: empty); flag low confidence and low differentiation."""

from __future__ import annotations

import polars as pl
import pytest

from toolkit.config import ThresholdConfig
from toolkit.errors import InputError
from toolkit.threshold import PER_QUERY_SCHEMA, apply_threshold, list_evidence


def run(rows: dict[str, list[float]]) -> pl.DataFrame:
    out = []
    for qid, scores in rows.items():
        out += [(qid, f"{qid}-d{i}", i, s) for i, s in enumerate(scores, start=1)]
    return pl.DataFrame(out, schema=["qid", "doc_id", "rank", "score"], orient="row")


def test_min_score_drops_and_falls_back_to_low_confidence():
    r = run({"good": [0.9, 0.5, 0.2], "weak": [0.25, 0.1]})
    kept, pq = apply_threshold(r, ThresholdConfig(min_score=0.3, low_spread=0.1))
    assert kept.filter(pl.col("qid") == "good")["doc_id"].to_list() == ["good-d1", "good-d2"]
    weak = kept.filter(pl.col("qid") == "weak")
    assert weak["doc_id"].to_list() == ["weak-d1", "weak-d2"]  # nothing passed: the list stays, flagged
    assert weak["flags"].to_list() == [["low_confidence"]] * 2
    assert kept.filter(pl.col("qid") == "good")["flags"].to_list() == [[], []]
    assert pq.schema == pl.Schema(PER_QUERY_SCHEMA)
    rows = {r["qid"]: r for r in pq.to_dicts()}
    assert rows["good"]["spread"] == pytest.approx(0.4) and rows["good"]["n_results"] == 2
    assert (
        rows["good"]["top_score"] == 0.9
        and not rows["good"]["low_confidence"]
        and not rows["good"]["low_differentiation"]
    )
    assert rows["weak"]["low_confidence"] and rows["weak"]["spread"] == pytest.approx(0.15)


def test_none_pass_empty_returns_nothing_for_a_query_nothing_passes(tmp_path):
    """An agent that must say "I don't know" (user trial BX: min_prob 0.5 never emptied a query; the whole list came
    back flagged): `threshold.none_pass: empty` returns no result, n_results 0 and low_confidence, and says so."""
    r = run({"good": [0.9, 0.5, 0.2], "weak": [0.25, 0.1]})
    kept, pq = apply_threshold(r, ThresholdConfig(min_score=0.3, none_pass="empty"))
    assert kept["doc_id"].to_list() == ["good-d1", "good-d2"]
    rows = {r["qid"]: r for r in pq.to_dicts()}
    assert rows["weak"]["n_results"] == 0 and rows["weak"]["low_confidence"] and rows["weak"]["top_score"] is None
    assert rows["good"]["n_results"] == 2 and not rows["good"]["low_confidence"]
    # With the candidates' evidence (as the pipeline passes it) the emptied query keeps its row too.
    ev = pl.DataFrame({"qid": ["good", "weak", "none"], "n_lists": [1, 1, 0], "no_term_match": [False, False, True]})
    _, pq = apply_threshold(r, ThresholdConfig(min_score=0.3, none_pass="empty"), evidence=ev)
    assert dict(zip(pq["qid"], pq["low_confidence"], strict=True)) == {"good": False, "weak": True, "none": False}
    # The reader is told: none returned, and the setting that decides it.
    from toolkit.render import note_lines

    note = note_lines(rows["weak"])[0]
    assert "none is returned (threshold.none_pass: empty)" in note
    assert "closest matches" in note_lines({**rows["weak"], "n_results": 2})[0]


def test_spread_and_low_differentiation():
    r = run({"flat": [0.52, 0.51, 0.50, 0.2], "one": [0.7], "neg": [0.1, -0.3]})
    kept, pq = apply_threshold(r, ThresholdConfig(low_spread=0.1))
    assert len(kept) == 7  # min_score 0 keeps everything, negative scores included
    rows = {r["qid"]: r for r in pq.to_dicts()}
    assert rows["flat"]["spread"] == pytest.approx(0.32) and not rows["flat"]["low_differentiation"]
    assert rows["one"]["spread"] is None and not rows["one"]["low_differentiation"]
    assert rows["neg"]["spread"] == pytest.approx(0.4)
    # Over the 3 results the user is shown, the flat query barely differs.
    _, shown = apply_threshold(r, ThresholdConfig(low_spread=0.1), n=3)
    flat = shown.filter(pl.col("qid") == "flat").row(0, named=True)
    assert flat["spread"] == pytest.approx(0.02) and flat["low_differentiation"] and flat["n_results"] == 3


def test_flags_are_appended_and_empty_input():
    r = run({"q": [0.1]}).with_columns(pl.lit(["reranked"]).alias("flags"))
    kept, _ = apply_threshold(r, ThresholdConfig(min_score=0.5))
    assert kept["flags"].to_list() == [["reranked", "low_confidence"]]
    empty, pq = apply_threshold(r.head(0), ThresholdConfig(min_score=0.5))
    assert empty.is_empty() and pq.is_empty() and pq.schema == pl.Schema(PER_QUERY_SCHEMA)


def test_ties_are_broken_in_rank_order_so_evaluation_by_score_agrees():
    r = run({"tied": [0.5, 0.5, 0.5, 0.2, 0.2], "clean": [0.9, 0.5, 0.1]}).with_columns(
        pl.when(pl.col("qid") == "tied")
        .then(pl.format("z{}", pl.col("rank")))
        .otherwise(pl.col("doc_id"))
        .alias("doc_id")
    )
    kept, _ = apply_threshold(r, ThresholdConfig())
    tied = kept.filter(pl.col("qid") == "tied")
    s = tied["score"].to_list()
    assert all(a > b for a, b in zip(s, s[1:], strict=False))
    assert s == pytest.approx([0.5, 0.5, 0.5, 0.2, 0.2], abs=1e-10)
    # ordering by score then doc id descending (trec_eval) now gives the rank order
    by_eval = tied.sort(["score", "doc_id"], descending=[True, True])["doc_id"].to_list()
    assert by_eval == ["z1", "z2", "z3", "z4", "z5"]
    assert kept.filter(pl.col("qid") == "clean")["score"].to_list() == [0.9, 0.5, 0.1]  # untouched


def test_min_prob_without_probabilities_is_an_error_not_a_silent_low_confidence():
    r = run({"q": [0.9, 0.5, 0.1]})
    probs = r.with_columns(pl.Series("score_prob", [0.8, 0.4, 0.1]))
    kept, pq = apply_threshold(probs, ThresholdConfig(min_prob=0.3))
    assert kept["doc_id"].to_list() == ["q-d1", "q-d2"] and not pq["low_confidence"].any()
    # No calibrated probabilities (a model without calibration: score_prob all null, or no column at all).
    for frame in (r, probs.with_columns(pl.lit(None, pl.Float64).alias("score_prob"))):
        with pytest.raises(InputError, match="threshold.min_prob 0.3 needs calibrated scores.*fusion.model"):
            apply_threshold(frame, ThresholdConfig(min_prob=0.3))
    kept, _ = apply_threshold(r, ThresholdConfig(min_prob=0.0))  # min_prob 0: no probabilities needed
    assert len(kept) == 3


def test_rank_only_scores_of_one_list_are_not_low_differentiation_and_no_term_match_is_reported():
    cands = pl.DataFrame({"qid": ["both", "both", "dense", "routed"], "list_id": ["orig:lex", "orig:vec", "orig:vec", "orig:vec"],
                          "retriever": ["lex", "vec", "vec", "vec"]})
    feats = pl.DataFrame({"qid": ["both", "dense", "routed", "none"], "skip_lexical": [False, False, True, False]})
    ev = {r["qid"]: r for r in list_evidence(cands, feats, lexical=True).to_dicts()}
    assert [ev[q]["n_lists"] for q in ("both", "dense", "routed", "none")] == [2, 1, 1, 0]
    # BM25 found nothing for "dense"; "routed" skipped BM25 by routing (not a miss); "none" has no candidates.
    assert [ev[q]["no_term_match"] for q in ("both", "dense", "routed", "none")] == [False, True, False, True]
    assert not list_evidence(cands, feats, lexical=False)["no_term_match"].any()
    rrf = run({"both": [1 / 61 + 1 / 62, 1 / 61 + 1 / 63], "dense": [1 / 61, 1 / 62, 1 / 63]})
    evidence = list_evidence(cands, feats, lexical=True)
    _, pq = apply_threshold(rrf, ThresholdConfig(low_spread=0.01), evidence=evidence, rank_only=True)
    rows = {r["qid"]: r for r in pq.to_dicts()}
    assert rows["both"]["low_differentiation"] and not rows["dense"]["low_differentiation"]
    assert rows["dense"]["no_term_match"] and not rows["both"]["no_term_match"]
    _, pq = apply_threshold(rrf, ThresholdConfig(low_spread=0.01), evidence=evidence)  # scores with meaning: kept
    assert pq.filter(pl.col("qid") == "dense")["low_differentiation"].item()
    assert pq.schema == pl.Schema(PER_QUERY_SCHEMA)
