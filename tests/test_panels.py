"""Panels on hand-built frames: failure-case culprits, score spread counts, routing / dedup counts, metric
deltas with the paired t-test, per-stage lists; and the figures carry exactly those numbers."""

from __future__ import annotations

import math

import plotly.graph_objects as go
import polars as pl
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import ttest_rel

from toolkit import panels


def _trace(rows: list[tuple[str, str, str, int, float]]) -> pl.DataFrame:
    """(qid, doc_id, stage, rank, score) rows -> a trace frame (chunk = doc#0, no flags)."""
    return pl.DataFrame(
        [(q, d, f"{d}#0", s, r, sc, []) for q, d, s, r, sc in rows],
        schema=["qid", "doc_id", "chunk_id", "stage", "rank", "score", "flags"],
        schema_overrides={"rank": pl.Int64, "score": pl.Float64, "flags": pl.List(pl.Utf8)},
        orient="row",
    )


def _filler(qid: str, stage: str, ranks: range, prefix: str = "x") -> list[tuple[str, str, str, int, float]]:
    return [(qid, f"{prefix}{qid}{stage}{r}", stage, r, 1.0 / r) for r in ranks]


@pytest.fixture
def failure_trace() -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    rows = [
        # q1: relevant r1 at fuse rank 2, then blend rank 15 -> culprit blend.
        ("q1", "r1", "retrieve:orig:lex", 3, 7.0), ("q1", "r1", "fuse", 2, 0.5), ("q1", "r1", "blend", 15, 0.1),
        ("q1", "r1", "final", 15, 0.1),
        # q2: list rank 1 in the dense list, fused 12 -> culprit fuse (the best list is named).
        ("q2", "r2", "retrieve:orig:lex", 40, 1.0), ("q2", "r2", "retrieve:orig:vec", 1, 0.9),
        ("q2", "r2", "fuse", 12, 0.2), ("q2", "r2", "blend", 12, 0.2), ("q2", "r2", "final", 12, 0.2),
        # q3: blended 2, then removed as a near duplicate -> culprit dedup, with the reason.
        ("q3", "r3", "retrieve:orig:lex", 1, 3.0), ("q3", "r3", "fuse", 1, 0.9), ("q3", "r3", "blend", 2, 0.8),
        # q4: relevant and kept in the final top k -> not a failure.
        ("q4", "r4", "retrieve:orig:lex", 1, 3.0), ("q4", "r4", "fuse", 1, 0.9), ("q4", "r4", "blend", 1, 0.9),
        ("q4", "r4", "final", 1, 0.9),
        # q5: blended 4, gone from the final list without a dedup record -> culprit threshold.
        ("q5", "r5", "retrieve:orig:lex", 2, 3.0), ("q5", "r5", "fuse", 3, 0.5), ("q5", "r5", "blend", 4, 0.4),
        # q6: never in any top k -> nothing was lost.
        ("q6", "r6", "retrieve:orig:lex", 50, 0.1), ("q6", "r6", "fuse", 60, 0.01),
        # q7: list rank 1, fusion buried it (14), the reranker brought it back (3), dedup's source fill
        # pushed it to 11: the culprit is the last fall, dedup.
        ("q7", "r7", "retrieve:orig:lex", 1, 3.0), ("q7", "r7", "fuse", 14, 0.1), ("q7", "r7", "blend", 3, 0.7),
        ("q7", "r7", "final", 11, 0.05),
    ]
    qrels = pl.DataFrame(
        {"qid": ["q1", "q2", "q3", "q4", "q5", "q6", "q7", "q1"], "doc_id": ["r1", "r2", "r3", "r4", "r5", "r6", "r7", "nope"],
         "rel": [1, 2, 1, 1, 1, 1, 1, 0]}
    )
    removed = pl.DataFrame(
        {"qid": ["q3"], "doc_id": ["r3"], "chunk_id": ["r3#0"], "rank": [2], "reason": ["near_duplicate"], "kept_instead": ["d9"]}
    )
    return _trace(rows), qrels, removed


def test_failure_cases_name_the_culprit_stage(failure_trace):
    trace, qrels, removed = failure_trace
    f = panels.failure_cases(trace, qrels, removed, k=10)
    got = {r["qid"]: r for r in f.to_dicts()}
    assert set(got) == {"q1", "q2", "q3", "q5", "q7"}  # q4 kept, q6 never in a top 10
    assert got["q1"]["culprit"] == "blend"
    assert (got["q1"]["fuse_rank"], got["q1"]["blend_rank"]) == (2, 15)
    assert got["q1"]["detail"] == "fused 2 -> blended 15"
    assert got["q2"]["culprit"] == "fuse"
    assert (got["q2"]["best_list"], got["q2"]["list_rank"], got["q2"]["rel"]) == ("orig:vec", 1, 2)
    assert got["q3"]["culprit"] == "dedup"
    assert got["q3"]["detail"] == "removed: near_duplicate (kept d9)"
    assert got["q5"]["culprit"] == "threshold"
    assert got["q7"]["culprit"] == "dedup" and "source fill" in got["q7"]["detail"]
    # Ordered by culprit in pipeline order.
    assert f["culprit"].to_list() == ["fuse", "blend", "dedup", "dedup", "threshold"]
    # A larger k forgives q1 (rank 15 < 20) and q2, q7.
    assert set(panels.failure_cases(trace, qrels, removed, k=20)["qid"]) == {"q3", "q5"}


def test_failures_figure_counts_culprits(failure_trace):
    trace, qrels, removed = failure_trace
    f = panels.failure_cases(trace, qrels, removed, k=10)
    queries = pl.DataFrame({"qid": ["q1", "q2", "q3", "q5", "q7"], "text": ["one", "two words", "three", "five", "seven"]})
    fig = panels.failures_figure(f, queries)
    assert isinstance(fig, go.Figure)
    assert fig.layout.title.text.startswith("Relevant documents lost from the top k: fuse 1, blend 1, dedup 2, threshold 1")
    cells = fig.data[0].cells.values
    assert list(cells[0]) == ["q2", "q1", "q3", "q7", "q5"]
    # Spaces become non-breaking: plotly's wrapping pass blanks spaced cells in a FigureWidget drawn early.
    assert list(cells[1]) == ["two\u00a0words", "one", "three", "seven", "five"]


def test_table_panels_render_as_escaped_html_with_a_tooltip_per_cell(failure_trace):
    # The live lab draws table panels as HTML (panels.table_html) from the same spec as the plotly table.
    trace, qrels, removed = failure_trace
    f = panels.failure_cases(trace, qrels, removed, k=10)
    queries = pl.DataFrame({"qid": ["q1", "q2", "q3", "q5", "q7"], "text": ["one", "two <b>words</b>", "three", "five", "seven"]})
    spec = panels.failures_figure(f, queries, raw=True)
    html = panels.table_html(spec)
    assert html.count("<tr>") == 1 + len(f)  # header + one row per failure
    assert "fuse 1, blend 1, dedup 2, threshold 1" in html  # the title
    assert "two &lt;b&gt;words&lt;/b&gt;" in html and "<b>words" not in html  # cell text escaped, spaces normal
    assert "best<br>list rank" in html  # our header markup kept
    assert html.count("<td title=") == len(f) * 9  # every cell carries its text as a tooltip
    assert "ranks: best list" in html  # the caption
    lists = pl.DataFrame({"stage": ["fuse", "fuse"], "rank": [1, 2], "doc_id": ["a", "b"], "score": [0.5, 0.4], "rel": [1, 0],
                          "flags": [[], ["reranked"]], "excerpt": ["x", "y"]})
    drill = panels.table_html(panels.drilldown_figure(lists, "q1", query_text="why <now>?", raw=True))
    assert "background:#d9f2d9" in drill and "why &lt;now&gt;?" in drill  # relevant row shaded, title escaped
    hint = panels.table_html(panels.inspector_hint())
    assert "<table" not in hint and "pick a dataset query" in hint


def test_trajectory_and_stage_lists():
    rows = [
        ("q1", "a", "retrieve:orig:lex", 1, 9.0), ("q1", "b", "retrieve:orig:lex", 2, 8.0),
        ("q1", "b", "retrieve:orig:vec", 1, 0.9), ("q1", "a", "fuse", 2, 0.03), ("q1", "b", "fuse", 1, 0.04),
        ("q1", "a", "blend", 2, 0.03), ("q1", "b", "blend", 1, 0.04), ("q1", "b", "final", 1, 0.04),
        ("q2", "a", "fuse", 1, 0.5),
    ]
    trace = _trace(rows)
    qrels = pl.DataFrame({"qid": ["q1", "q1"], "doc_id": ["a", "zz"], "rel": [1, 1]})
    traj = panels.rank_trajectory(trace, qrels, "q1")
    a = traj.filter(pl.col("doc_id") == "a")
    assert a["stage"].to_list() == ["retrieve:orig:lex", "retrieve:orig:vec", "fuse", "blend", "final"]
    assert a["rank"].to_list() == [1, None, 2, 2, None]
    fig = panels.trajectory_figure(trace, qrels, "q1", k=1)
    assert [t.name for t in fig.data] == ["a", "zz"]  # zz was never retrieved: an empty line
    assert list(fig.data[0].y) == [1, None, 2, 2, None]
    assert fig.layout.shapes[0].y0 == 1.5

    texts = pl.DataFrame({"chunk_id": ["a#0", "b#0"], "text": ["alpha   text\nhere", "b" * 300]})
    lists = panels.stage_lists(trace, "q1", k=10, texts=texts, qrels=qrels, excerpt_chars=20)
    assert lists["stage"].to_list() == ["retrieve:orig:lex"] * 2 + ["retrieve:orig:vec"] + ["fuse"] * 2 + ["blend"] * 2 + ["final"]
    assert lists.filter(pl.col("doc_id") == "a")["excerpt"][0] == "alpha text here"
    assert lists.filter(pl.col("doc_id") == "b")["excerpt"][0] == "b" * 19 + "…"
    assert lists.filter(pl.col("doc_id") == "a")["rel"].to_list() == [1, 1, 1]
    wide = panels.side_by_side(lists)
    assert wide.columns == ["rank", "retrieve:orig:lex", "retrieve:orig:vec", "fuse", "blend", "final"]
    assert wide.row(0) == (1, "a ✓ (9.0)", "b (0.9)", "b (0.04)", "b (0.04)", "b (0.04)")
    assert wide.row(1) == (2, "b (8.0)", None, "a ✓ (0.03)", "a ✓ (0.03)", None)
    drill = panels.drilldown_figure(lists, "q1")
    marks = list(drill.data[0].cells.values[4])
    assert marks.count("✓") == 3


def test_score_spread_and_figure_counts():
    rows = []
    for stage, scores in {"fuse": [0.9, 0.5, 0.1], "blend": [0.8, 0.7, 0.6], "final": [0.8, 0.7, 0.6]}.items():
        rows += [("q1", f"d{i}", stage, i + 1, s) for i, s in enumerate(scores)]
    rows += [("q2", "d0", s, 1, 0.3) for s in ("fuse", "blend", "final")]  # one result: no spread
    rows += [("q3", "d0", "fuse", 1, 0.5), ("q3", "d1", "fuse", 2, 0.45), ("q3", "d0", "retrieve:orig:lex", 1, 5.0)]
    trace = _trace(rows)
    sp = panels.score_spread(trace)
    got = {(r["qid"], r["stage"]): r["spread"] for r in sp.to_dicts()}
    assert got[("q1", "fuse")] == pytest.approx(0.8)
    assert got[("q1", "blend")] == pytest.approx(0.2)
    assert got[("q2", "final")] is None
    assert got[("q3", "fuse")] == pytest.approx(0.05)
    assert panels.score_spread(trace, depth=2).filter((pl.col("qid") == "q1") & (pl.col("stage") == "fuse"))["spread"][0] == pytest.approx(0.4)

    per_query = pl.DataFrame({"qid": ["q1", "q2", "q3"], "low_differentiation": [False, None, True]})
    fig = panels.spread_figure(trace, per_query, k=2, low_spread=0.1)
    assert fig.layout.title.text == "Score spread: 1 of 3 queries flagged low-differentiation (spread < 0.1)"
    boxes = [t for t in fig.data if t.type == "box"]
    hists = {t.name: t for t in fig.data if t.type == "histogram"}
    # final has exactly blend's rows: drawn once, with a note saying so.
    assert [b.name for b in boxes] == ["fuse", "blend"] and "final" not in hists
    assert any(a.text == "final: same as blend" for a in fig.layout.annotations)
    fuse_box = boxes[0]  # top-2 scores of fuse: 0.9, 0.5 (q1), 0.3 (q2), 0.5, 0.45 (q3)
    assert fuse_box.median[0] == pytest.approx(0.5) and fuse_box.upperfence[0] == pytest.approx(0.9)
    assert sorted(hists["fuse"].x) == pytest.approx([0.05, 0.8])
    assert fig.layout.shapes[0].x0 == 0.1
    # The histogram's axis spans every spread (nothing clipped), with padding.
    lo, hi = fig.layout.xaxis2.range
    assert lo < 0.0 and hi > 0.8 and hi < 0.9


def test_fold_blend_without_reranker_and_mark_outliers():
    rows = []
    for q in range(12):
        scores = [0.1, 0.09 - 0.001 * q] if q else [5.0, 0.0]  # one query's spread (5.0) is far out
        for stage in ("fuse", "blend", "final"):
            rows += [(f"q{q}", f"d{i}", stage, i + 1, sc) for i, sc in enumerate(scores)]
    trace = _trace(rows)
    assert panels.folded_stages(trace) == {"blend": "fuse", "final": "fuse"}
    fig = panels.spread_figure(trace)
    assert [t.name for t in fig.data if t.type == "box"] == ["fuse"]
    assert any(a.text == "blend: no reranker, same as fuse; final: same as fuse" for a in fig.layout.annotations)
    marked = [t for t in fig.data if t.name == "outlier"]
    assert list(marked[0].x) == [5.0] and fig.layout.xaxis2.range[1] > 5.0  # marked, and inside the axis


def test_routing_and_dedup_counts():
    features = pl.DataFrame({"qid": list("abcde"), "route": ["conversational", "technical", "default", "conversational", "conversational"]})
    removed = pl.DataFrame(
        {"qid": ["a", "a", "b"], "doc_id": ["x", "y", "x"], "reason": ["near_duplicate", "source_limit", "near_duplicate"]}
    )
    assert panels.route_counts(features).rows() == [("conversational", 3), ("default", 1), ("technical", 1)]
    assert panels.dedup_counts(removed).rows() == [("near_duplicate", 2, 2), ("source_limit", 1, 1)]
    fig = panels.routing_dedup_figure(features, removed, routing_enabled=False)
    assert list(fig.data[0].x) == ["conversational", "default", "technical"] and list(fig.data[0].y) == [3, 1, 1]
    assert list(fig.data[1].y) == [2, 1] and list(fig.data[1].text) == ["2 in 2 queries", "1 in 1 queries"]
    assert "routing off" in fig.layout.annotations[0].text
    empty = panels.routing_dedup_figure(features, removed.head(0))
    assert list(empty.data[1].x) == ["nothing removed"]


def test_metric_deltas_paired_ttest():
    cur = pl.DataFrame({"qid": ["a", "b", "c", "d"] * 2, "measure": ["nDCG@10"] * 4 + ["R@5"] * 4,
                        "value": [1.0, 0.5, 0.8, 0.9, 1.0, 1.0, 0.0, 1.0]})
    base = pl.DataFrame({"qid": ["a", "b", "c"] * 2, "measure": ["nDCG@10"] * 3 + ["R@5"] * 3,
                         "value": [0.5, 0.5, 0.2, 1.0, 1.0, 0.0]})
    t = panels.metric_deltas(cur, base)
    n = t.row(0, named=True)
    assert n["measure"] == "nDCG@10"
    # Query d is missing from the baseline: it counts 0 there.
    assert n["current"] == pytest.approx(0.8) and n["baseline"] == pytest.approx(0.3)
    assert n["delta"] == pytest.approx(0.5) and (n["wins"], n["losses"]) == (3, 0)
    assert n["p_value"] == pytest.approx(ttest_rel([1.0, 0.5, 0.8, 0.9], [0.5, 0.5, 0.2, 0.0]).pvalue)
    r = t.row(1, named=True)
    assert r["delta"] == pytest.approx(0.25) and (r["wins"], r["losses"]) == (1, 0)

    fig = panels.metrics_figure(t, current_name="tuned", baseline_name="bm25")
    assert [tr.name for tr in fig.data] == ["bm25", "tuned"]
    assert list(fig.data[1].y) == pytest.approx([0.8, 0.75])
    assert fig.data[1].text[0].startswith("0.800<br>Δ +0.500")
    alone = panels.metric_deltas(cur, None)
    assert alone["baseline"].null_count() == 2
    assert len(panels.metrics_figure(alone).data) == 1


def test_raw_specs_match_figures():
    """raw=True is the plain dict the live lab diffs; the Figure is the same thing validated."""
    features = pl.DataFrame({"qid": ["a"], "route": ["default"]})
    removed = pl.DataFrame(schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "reason": pl.Utf8})
    spec = panels.routing_dedup_figure(features, removed, raw=True)
    assert isinstance(spec, dict) and set(spec) == {"data", "layout"}
    fig = go.Figure(spec)
    assert list(fig.data[0].y) == [1]
    empty = panels.metrics_figure(pl.DataFrame(schema={"measure": pl.Utf8}), raw=True)
    assert "no judgements" in empty["layout"]["annotations"][0]["text"]
    assert math.isclose(go.Figure(empty).layout.height, 260)


def test_a_stage_cut_to_fewer_places_still_folds_into_the_one_it_equals():
    """Fuse ranks every candidate, blend keeps only the places that can reach the output: without a reranker
    blend is still fuse on the places both have, and the spread panel draws it once."""
    fuse = pl.DataFrame({"qid": ["q"] * 6, "doc_id": list("abcdef"), "rank": list(range(1, 7)),
                         "score": [0.9, 0.8, 0.7, 0.6, 0.5, 0.4], "stage": ["fuse"] * 6})
    blend = fuse.head(3).with_columns(pl.lit("blend").alias("stage"))
    final = fuse.head(3).with_columns(pl.lit("final").alias("stage"), pl.Series("score", [0.9, 0.85, 0.7]))
    assert panels.folded_stages(pl.concat([fuse, blend, final]), ["fuse", "blend", "final"]) == {"blend": "fuse"}


def test_table_text_wraps_to_its_column_and_titles_to_the_figure():
    long = "what was the deal with people getting charged twice for one order last week"
    t = panels._table(["query", "what happened"], [[long], ["x"]], [170, 600])
    cell = t["cells"]["values"][0][0]
    lines = cell.split("<br>")
    assert len(lines) > 1 and all(len(x) <= panels.TABLE_CHARS * 170 // 770 for x in lines)
    assert " ".join(x.replace("\u00a0", " ") for x in lines) == long  # wrapped, nothing cut
    fig = panels.metrics_figure(
        pl.DataFrame({"measure": ["nDCG@10"], "current": [0.5], "baseline": [0.4], "delta": [0.1], "wins": [3],
                      "losses": [1], "p_value": [0.5]}),
        current_name="qmd + technical lexical boost 1.0, model learned-fusion.json, rrf k 30", baseline_name="bm25-only")
    assert all(len(x) <= panels.TITLE_CHARS for x in fig.layout.title.text.split("<br>"))


def test_config_label_names_a_model_by_its_file():
    from toolkit.config import load_config

    base = load_config("qmd")
    cfg = base.with_updates({"fusion.method": "learned", "fusion.model": "/home/me/runs/2026/fusion.json"})
    label = panels.config_label(base, cfg)
    assert "fusion.json" in label and "/home/me" not in label


def test_config_label_is_unambiguous_and_shows_a_dict_field_whole():
    """Before: both list switches read "default + enabled False", and replacing priority_map showed only
    the keys present in the new value."""
    from toolkit.config import load_config

    base = load_config("default")
    label = lambda u: panels.config_label(base, base.with_updates(u))  # noqa: E731
    assert label({"retrieval.dense.enabled": False}) == "default + dense.enabled False"
    assert label({"retrieval.lexical.enabled": False}) == "default + lexical.enabled False"
    assert label({"priors.priority_map": {"P0": 8.0}}) == "default + priority map {P0: 8.0}"
    assert label({"rerank.top_n": 5, "fusion.rrf_k": 20}) == "default + rrf k 20, rerank.top_n 5"


def _spread_by_group(trace: pl.DataFrame, depth: int | None, stages) -> pl.DataFrame:
    """The group-by definition `score_spread` computes by reading query boundaries: per (qid, stage), the
    score at the smallest and at the largest rank (cut at `depth`)."""
    t = trace.filter(pl.col("stage").is_in(list(stages)) & ((pl.col("rank") <= depth) if depth else pl.lit(True)))
    return (
        t.group_by("qid", "stage")
        .agg(pl.len().cast(pl.Int64).alias("n"), pl.col("score").get(pl.col("rank").arg_min()).alias("top"),
             pl.col("score").get(pl.col("rank").arg_max()).alias("last"))
        .with_columns(pl.when(pl.col("n") >= 2).then(pl.col("top") - pl.col("last")).alias("spread"))
        .sort("qid", "stage")
    )


@settings(max_examples=60, deadline=None, database=None)
@given(
    sizes=st.lists(st.tuples(st.integers(0, 6), st.integers(0, 6), st.integers(0, 6)), min_size=1, max_size=6),
    same=st.booleans(),
    shuffle=st.randoms(use_true_random=False),
    depth=st.sampled_from([None, 1, 2, 4]),
)
def test_spread_and_folding_read_from_stage_rows_match_their_definitions(sizes, same, shuffle, depth):
    """Whatever the order of the trace's rows, the spread read at query boundaries equals the group-by
    definition, and a stage is folded exactly when its rows equal the previous drawn stage's."""
    rows = []
    for qi, counts in enumerate(sizes):
        for stage, n in zip(("fuse", "blend", "final"), counts, strict=True):
            src = "fuse" if same else stage
            rows += [(f"q{qi}", f"d{r}", stage, r, round(1.0 / (r + len(src)), 6)) for r in range(1, n + 1)]
    shuffle.shuffle(rows)
    trace = _trace(rows) if rows else _trace([("q0", "d1", "retrieve:orig:lex", 1, 1.0)])
    got = panels.score_spread(trace, depth=depth)
    assert got.equals(_spread_by_group(trace, depth, panels.LATER_STAGES).select(got.columns))
    expect: dict[str, str] = {}
    prev = None
    for stage in panels.LATER_STAGES:
        cur = trace.filter(pl.col("stage") == stage).select("qid", "doc_id", "rank", "score").sort("qid", "rank")
        if not len(cur):
            continue
        if prev is not None:
            before = trace.filter(pl.col("stage") == prev).select("qid", "doc_id", "rank", "score").sort("qid", "rank")
            d = min(cur["rank"].max(), before["rank"].max())
            if cur.filter(pl.col("rank") <= d).equals(before.filter(pl.col("rank") <= d)):
                expect[stage] = prev
                continue
        prev = stage
    assert panels.folded_stages(trace) == expect


def test_metrics_panel_shows_no_stars_on_too_few_queries():
    cur = pl.DataFrame({"qid": ["a", "b", "c", "d"], "measure": "nDCG@10", "value": [1.0, 0.9, 0.95, 1.0]})
    base = cur.with_columns(pl.col("value") - pl.Series([0.5, 0.45, 0.55, 0.5]))
    t = panels.metric_deltas(cur, base)
    assert t["queries"].to_list() == [4] and t["p_value"][0] < 0.01  # a tiny p, from 4 queries
    fig = panels.metrics_figure(t)
    assert "*" not in fig.data[1].text[0] and "too few for significance stars" in fig.layout.title.text
    assert "only 4 queries" in fig.data[1].hovertext[0]
    ten = pl.DataFrame({"qid": [str(i) for i in range(12)], "measure": "nDCG@10", "value": [1.0, 0.9] * 6})
    fig = panels.metrics_figure(panels.metric_deltas(ten, ten.with_columns(pl.col("value") - 0.5)))
    assert fig.data[1].text[0].endswith("**") and "too few" not in fig.layout.title.text
