"""The lab, headless: a widget change (debounced) re-scores every query and redraws the panels, invalid
values leave the config alone, buckets can be added and removed, routing skips recompute candidates,
the inspector runs typed queries, and exports write files."""

from __future__ import annotations

import json
import math
import time

import ipywidgets as W
import plotly.graph_objects as go
import polars as pl
import pytest
from conftest import DOCS

from toolkit.config import load_config
from toolkit.errors import ToolkitError
from toolkit.lab import Debouncer, Lab
from toolkit.loaders import load_corpus
from toolkit.store import Store

QUERIES = pl.DataFrame(
    {
        "qid": ["q1", "q2", "q3", "q4"],
        "text": [
            "deploy fails with ECONNREFUSED",
            "hey so what did we decide about how long to wait between retries?",
            "back off when the limit is hit",
            "which SDK version is pinned",
        ],
    }
)
# q3: BM25 has only d6 (the rate-limit runbook); the dense list puts d2 first and d6 second, so with the
# lexical list weighted 0 the relevant d6 drops to rank 2 and MRR falls to 0.5 on that query.
QRELS = pl.DataFrame({"qid": ["q1", "q2", "q3", "q4"], "doc_id": ["d1", "d2", "d6", "d5"], "rel": [1, 1, 1, 1]})
MEASURES = ("nDCG@10", "MRR@10", "R@1")


@pytest.fixture(scope="module")
def store(tmp_path_factory, embedder):
    d = tmp_path_factory.mktemp("lab")
    corpus = d / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(x) + "\n" for x in DOCS))
    st = Store(d / "lab.duckdb", embedder=embedder)
    st.ingest(load_corpus(corpus))
    yield st
    st.close()


def fuse_hist(lab: Lab):
    """The spread panel's histogram of fuse spreads (blend and final fold into it: no reranker here)."""
    fig = lab.figures["spread"]
    assert [t.name for t in fig.data if t.type == "box"] == ["fuse"]
    return next(t for t in fig.data if t.type == "histogram" and t.name == "fuse")


def make_lab(store, **kw) -> Lab:
    cfg = load_config("hybrid-rrf").with_updates({"fusion.lexical_weight": 0.0})
    kw.setdefault("debounce_s", 30.0)  # nothing fires by itself unless a test wants it to
    kw.setdefault("debounce_leading", False)
    return Lab(store, QUERIES, QRELS, config=cfg, measures=MEASURES, **kw)


def test_slider_change_rescores_and_redraws(store):
    lab = make_lab(store)
    assert lab.metrics["R@1"] == pytest.approx(0.75)  # q3 misses at rank 1
    assert set(lab.figures) == {"metrics", "spread", "failures", "trajectory", "drilldown", "routing", "inspector"}
    before_y = list(lab.figures["metrics"].data[-1].y)
    before_spread = sorted(fuse_hist(lab).x)

    lab.controls["fusion.lexical_weight"].value = 3.0
    assert lab.config.fusion.lexical_weight == 0.0  # debounced: nothing applied yet
    lab.flush()
    assert lab.config.fusion.lexical_weight == 3.0
    assert lab.metrics["R@1"] == pytest.approx(1.0) and lab.metrics["MRR@10"] == pytest.approx(1.0)
    after_y = list(lab.figures["metrics"].data[-1].y)
    assert after_y != before_y and after_y[2] == pytest.approx(1.0)
    assert sorted(fuse_hist(lab).x) != before_spread  # fuse spreads moved with the weights
    assert lab.last_update_ms is not None and lab.last_update_ms > 0
    assert {"rescore", "metrics", "figures"} <= set(lab.timings)
    assert "updated in" in lab._timing.value
    assert lab.result.final.filter((pl.col("qid") == "q3") & (pl.col("rank") == 1))["doc_id"][0] == "d6"


def test_the_timing_line_follows_every_update_under_a_standing_note(store):
    """A note that every update repeats (the learned default's in-sample warning on its own training queries) sits on
    the status line; the timing line still says each update's time (it stayed at the first one's: the browser
    benchmark under `default` waited for it in vain). A refused change leaves it as it was."""
    lab = make_lab(store)
    lab.session._in_sample = lambda cfg: ["its scores on these queries are in-sample"]
    assert lab.set("fusion.lexical_weight", 2.0)
    assert "in-sample" in lab._status.value and lab._timing.value.startswith(f"#{lab.updates}: updated in")
    first = lab._timing.value
    assert lab.set("fusion.lexical_weight", 3.0)
    assert lab._timing.value.startswith(f"#{lab.updates}: updated in") and lab._timing.value != first
    shown = lab._timing.value
    assert not lab.set("fusion.rrf_k", -1)  # refused: the error shows, the timing line is the last good update's
    assert "invalid value" in lab._status.value and lab._timing.value == shown


def test_table_panels_are_html_widgets_and_plotly_figures_headless(store):
    lab = make_lab(store)
    assert lab.set("fusion.lexical_weight", 3.0)
    slot = lab._slots["failures"]
    assert isinstance(slot.widget, W.HTML) and "Relevant documents lost" in slot.widget.value
    assert isinstance(lab.figures["failures"], go.Figure) and lab.figures["failures"].data[0].type == "table"
    assert isinstance(lab._slots["drilldown"].widget, W.HTML) and "<table" in lab._slots["drilldown"].widget.value
    assert not isinstance(lab._slots["metrics"].widget, W.HTML)  # charts stay plotly


def test_the_export_path_follows_the_chosen_format(store):
    """Session.export refuses a kind that contradicts the extension, so the widget's path follows the format."""
    lab = make_lab(store)
    assert lab._export_path.value == "pipeline.yaml"
    lab._export_kind.value = "json"
    assert lab._export_path.value == "pipeline.json"
    lab._export_kind.value = "yaml"
    assert lab._export_path.value == "pipeline.yaml"


def test_headless_set_is_the_same_path(store):
    lab = make_lab(store)
    assert lab.set("fusion.lexical_weight", 3.0) is True
    assert lab.controls["fusion.lexical_weight"].value == 3.0  # the widget follows the config
    assert lab.metrics["R@1"] == pytest.approx(1.0)
    # Rank bonus sliders edit the bands of fusion.rank_bonus.
    assert lab.set("fusion.rank_bonus@1", 0.05)
    lab.controls["fusion.rank_bonus@3"].value = 0.02
    lab.flush()
    assert lab.config.fusion.rank_bonus == [(1, 0.05), (3, 0.02)]
    # Deltas against the bm25-only baseline, with a t-test p-value per measure.
    assert lab.deltas["measure"].to_list() == list(MEASURES) and lab.deltas["p_value"].null_count() == 0
    lab.pin_baseline()
    assert lab.deltas["delta"].to_list() == [0.0, 0.0, 0.0]
    assert lab.baseline_name.startswith("pinned")


def spy_on_updates(lab: Lab) -> list[dict]:
    """The updates the lab applies, in order (its `_apply` wrapped)."""
    calls: list[dict] = []
    orig = lab._apply

    def spy(updates):
        calls.append(dict(updates))
        return orig(updates)

    lab._apply = spy
    return calls


def test_debounce_fires_once_after_the_last_change(store):
    lab = make_lab(store, debounce_s=0.05)
    calls = spy_on_updates(lab)
    for v in (0.5, 1.0, 2.0, 3.0):
        lab.controls["fusion.lexical_weight"].value = v
    deadline = time.monotonic() + 10
    while lab.config.fusion.lexical_weight != 3.0 and time.monotonic() < deadline:
        time.sleep(0.02)
    lab.flush()  # waits for an update in flight
    assert lab.config.fusion.lexical_weight == 3.0
    assert calls == [{"fusion.lexical_weight": 3.0}]


def test_debouncer_with_a_manual_timer():
    made = []

    class FakeTimer:
        def __init__(self, delay, fn):
            self.delay, self.fn, self.cancelled, self.started = delay, fn, False, False
            made.append(self)

        def start(self):
            self.started = True

        def cancel(self):
            self.cancelled = True

    runs = []
    d = Debouncer(lambda: runs.append(1), delay_s=0.15, timer=FakeTimer)
    d.trigger()
    d.trigger()
    d.trigger()
    assert [t.cancelled for t in made] == [True, True, False] and made[-1].delay == 0.15 and d.pending
    made[-1].fn()  # the timer fires
    assert runs == [1] and not d.pending
    assert d.flush() is False and runs == [1]
    d.trigger()
    assert d.flush() is True and runs == [1, 1] and made[-1].cancelled


def test_leading_debouncer_runs_an_idle_trigger_at_once_and_coalesces_the_burst_behind_it():
    made, now = [], [100.0]

    class FakeTimer:
        def __init__(self, delay, fn):
            self.delay, self.fn, self.cancelled = delay, fn, False
            made.append(self)

        def start(self):
            pass

        def cancel(self):
            self.cancelled = True

    runs = []
    d = Debouncer(lambda: runs.append(now[0]), delay_s=0.06, timer=FakeTimer, leading=True, clock=lambda: now[0])
    d.trigger()  # idle: runs now, no timer
    assert runs == [100.0] and not made and not d.pending
    now[0] += 0.01
    d.trigger()  # within delay_s of the last call's end: a trailing call
    d.trigger()
    assert runs == [100.0] and len(made) == 2 and made[0].cancelled and d.pending
    made[-1].fn()
    assert len(runs) == 2 and not d.pending
    now[0] += 1.0
    d.trigger()  # idle again
    assert len(runs) == 3 and len(made) == 2


def test_an_idle_lab_applies_a_change_at_once_and_a_burst_once_more(store):
    lab = make_lab(store, debounce_s=0.05, debounce_leading=True)
    calls = spy_on_updates(lab)
    lab.controls["fusion.lexical_weight"].value = 0.5
    assert lab.config.fusion.lexical_weight == 0.5 and calls == [{"fusion.lexical_weight": 0.5}]  # no timer waited for
    for v in (1.0, 2.0, 3.0):  # right behind it: one trailing update with the last value
        lab.controls["fusion.lexical_weight"].value = v
    deadline = time.monotonic() + 10
    while lab.config.fusion.lexical_weight != 3.0 and time.monotonic() < deadline:
        time.sleep(0.02)
    lab.flush()
    assert calls == [{"fusion.lexical_weight": 0.5}, {"fusion.lexical_weight": 3.0}]


def test_invalid_value_shows_message_and_keeps_config(store):
    lab = make_lab(store)
    cfg = lab.config
    lab.controls["threshold.min_score"].value = -1.0
    lab.flush()
    assert lab.config == cfg
    assert "threshold.min_score" in lab.message and "greater than or equal to 0" in lab.message
    assert "config unchanged" in lab._status.value
    assert lab.set("fusion.rrf_k", 0) is False and "fusion.rrf_k" in lab.message
    assert lab.set("fusion.rrf_kk", 10) is False and "did you mean fusion.rrf_k" in lab.message
    assert lab.config == cfg
    assert lab.set("fusion.rrf_k", 30) and lab.message == ""  # a valid change clears the message


def test_add_and_remove_buckets(store):
    lab = make_lab(store)
    editor = lab.controls["rerank.buckets"]
    assert lab.config.rerank.buckets == [(3.0, 0.75), (10.0, 0.6), (math.inf, 0.4)]
    assert lab.add_bucket()
    assert lab.config.rerank.buckets == [(3.0, 0.75), (10.0, 0.6), (15.0, 0.4), (math.inf, 0.4)]
    assert len(editor.rows) == 4 and editor.rows[-1][0] is None  # the open-ended bucket has no bound input
    assert lab.remove_bucket(0)
    assert lab.config.rerank.buckets == [(10.0, 0.6), (15.0, 0.4), (math.inf, 0.4)]
    # The widget path: the add button, then a bound typed out of order.
    editor.add_button.click()
    lab.flush()
    assert len(lab.config.rerank.buckets) == 4
    good = lab.config
    editor.rows[1][0].value = 5.0  # 10, 5, ...: not increasing
    lab.flush()
    assert lab.config == good and "strictly increasing" in lab.message
    editor.rows[1][0].value = 12.0
    lab.flush()
    assert lab.config.rerank.buckets[1] == (12.0, 0.4)
    # The last bucket cannot be removed, and the lab says so (trial T: it "succeeded" silently).
    assert not lab.remove_bucket(len(lab.config.rerank.buckets) - 1)
    assert math.isinf(lab.config.rerank.buckets[-1][0]) and len(lab.config.rerank.buckets) == 4
    assert "open-ended" in lab.message


def test_routing_skip_recomputes_candidates_boost_does_not(store):
    lab = make_lab(store)
    has_lex = lab.result.trace.filter((pl.col("qid") == "q2") & (pl.col("stage") == "retrieve:orig:lex")).height
    assert has_lex > 0
    assert lab.set("routing.enabled", True)
    assert any("recomputing candidates" in m for m in lab.history)
    # The conversational query no longer has a BM25 list.
    assert lab.result.trace.filter((pl.col("qid") == "q2") & (pl.col("stage") == "retrieve:orig:lex")).height == 0
    n_msgs = len(lab.history)
    fused = lab.result.trace.filter((pl.col("qid") == "q1") & (pl.col("stage") == "fuse"))["score"].to_list()
    lab.set("fusion.lexical_weight", 1.0)
    assert lab.set("routing.technical_lexical_boost", 3.0)
    assert len(lab.history) == n_msgs  # no new retrieval for the boost
    boosted = lab.result.trace.filter((pl.col("qid") == "q1") & (pl.col("stage") == "fuse"))["score"].to_list()
    assert boosted != fused
    # Switching back uses the candidates kept in memory.
    assert lab.set("routing.enabled", False)
    assert len(lab.history) == n_msgs
    routes = dict(zip(lab.figures["routing"].data[0].x, lab.figures["routing"].data[0].y, strict=True))
    assert routes == {"conversational": 2, "technical": 2}  # q2, q3 are stopword-heavy; q1, q4 carry tokens


def test_inspector_dataset_and_typed_queries(store):
    lab = make_lab(store)
    lists = lab.inspect(qid="q1")
    assert {"fuse", "blend", "final"} <= set(lists["stage"])
    assert lists.filter((pl.col("stage") == "final") & (pl.col("doc_id") == "d1"))["rel"][0] == 1
    assert lists["excerpt"].drop_nulls().str.contains("ECONNREFUSED").any()
    header = list(lab.figures["inspector"].data[0].header.values)
    assert header[0] == "rank" and "final" in header
    cached = store.con.execute("SELECT count(*) FROM stage_cache").fetchone()[0]
    typed = lab.inspect(text="HTTP 429 rate limit")
    assert typed.filter(pl.col("stage") == "final").sort("rank")["doc_id"][0] == "d6"
    assert store.con.execute("SELECT count(*) FROM stage_cache").fetchone()[0] == cached  # not cached
    assert lab.figures["inspector"].layout.title.text.startswith("Typed query")
    with pytest.raises(ToolkitError):
        lab.inspect(qid="nope")


def test_export_yaml_json_and_engine(store, tmp_path):
    lab = make_lab(store)
    lab.set("fusion.rrf_k", 25)
    msg = lab.export("yaml", tmp_path / "tuned.yaml")
    assert msg == f"wrote hybrid-rrf + rrf k 25 to {tmp_path / 'tuned.yaml'}"  # named by what changed
    saved = load_config(tmp_path / "tuned.yaml")
    assert saved.description.startswith("hybrid-rrf + rrf k 25 (from the lab")
    # Under a name of its own: a run of it must not be tagged as the preset it started from (user trial P).
    assert saved.name == "hybrid-rrf-lab"
    assert saved.model_copy(update={"description": lab.config.description, "name": lab.config.name, "tuned_on": None}) == lab.config
    assert lab.figures["metrics"].data[-1].name == "hybrid-rrf + rrf k 25"  # the legend too
    assert lab.export("json", tmp_path / "tuned").endswith("tuned.json")
    msg = lab.export("opensearch", tmp_path / "os.json")
    assert (tmp_path / "os.json").exists() and "os.json" in msg
    # This lab weighs BM25 0, which fusion drops: the export is the plain knn query, no weight-0 leg (trial AA).
    body = json.loads((tmp_path / "os.json").read_text())
    assert "search_pipeline" not in body and "knn" in body["search"]["body"]["query"]
    lab.set("fusion.lexical_weight", 1.0)
    lab.export("opensearch", tmp_path / "os2.json")
    proc = json.loads((tmp_path / "os2.json").read_text())["search_pipeline"]["body"]["phase_results_processors"][0]
    assert proc["score-ranker-processor"]["combination"]["rank_constant"] == 25


def test_static_fallback_and_display(store):
    lab = Lab(store, QUERIES, config="hybrid-rrf", baseline=None, live_figures=False, debounce_s=30.0)
    assert lab.metrics == {} and lab.failures.height == 0
    assert isinstance(lab.figures["spread"], go.Figure)
    assert "no judgements" in lab.figures["metrics"].layout.annotations[0].text
    before = sorted(fuse_hist(lab).x)
    lab.set("fusion.lexical_weight", 4.0)
    assert sorted(fuse_hist(lab).x) != before
    bundle = lab._repr_mimebundle_()
    assert "application/vnd.jupyter.widget-view+json" in bundle


def test_from_dataset_and_pin_without_qrels(tmp_path, embedder):
    ds = tmp_path / "ds"
    (ds / "qrels").mkdir(parents=True)
    (ds / "corpus.jsonl").write_text("".join(json.dumps(x) + "\n" for x in DOCS))
    (ds / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.iter_rows()))
    (ds / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t{r}\n" for q, d, r in QRELS.iter_rows()))
    lab = Lab.from_dataset(tmp_path / "s.duckdb", ds, split="dev", embedder=embedder, config="bm25-only", baseline=None, debounce_s=30.0)
    try:
        assert lab.queries.height == 4 and lab.baseline_name is None
        assert lab.metrics["nDCG@10"] > 0 and lab.deltas["baseline"].null_count() == 3
        lab.pin_baseline()
        assert lab.deltas["delta"].to_list() == [0.0, 0.0, 0.0]
    finally:
        lab.close()
    unjudged = Lab(Store(tmp_path / "s.duckdb", embedder=embedder), QUERIES, baseline=None, live_figures=False, debounce_s=30.0)
    with pytest.raises(ToolkitError, match="no judgements"):
        unjudged.pin_baseline()
    unjudged.store.close()


def test_guardrail_controls_act_live_without_new_retrieval(store):
    """The default preset's guardrails have controls of their own: switching the per-query dense weight or
    the exact-token guard off re-scores from the cached stages (no new retrieval) and changes the lists."""
    lab = make_lab(store)
    lab.set("fusion.method", "rrf")
    assert all(k in lab.controls for k in ("guard.exact_token", "guard.max_rank", "guard.sole_first", "adapt.dense_gap", "adapt.gap_scale",
                                           "adapt.min_weight", "adapt.max_weight", "dedup.identical_enabled"))
    n_msgs = len(lab.history)
    assert lab.set("adapt.dense_gap", True)
    fused = lab.result.trace.filter(pl.col("stage") == "fuse").sort("qid", "doc_id")["score"].to_list()
    assert not lab.controls["adapt.gap_scale"].disabled
    assert lab.set("adapt.gap_scale", 0.02)
    moved = lab.result.trace.filter(pl.col("stage") == "fuse").sort("qid", "doc_id")["score"].to_list()
    assert moved != fused and "route" in lab.result.per_query.columns
    assert lab.set("adapt.dense_gap", False) and lab.controls["adapt.gap_scale"].disabled
    assert lab.set("guard.exact_token", False) and lab.controls["guard.max_rank"].disabled and lab.controls["guard.sole_first"].disabled
    assert not lab.controls["guard.coverage_first"].disabled  # the coverage rule acts without the identifier guard
    # ... and stands aside while priors re-weight (review BZ: its box stayed enabled while it did nothing).
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the store has no date field for the prior to read
        dated = Lab(store, QUERIES, QRELS, config=load_config("default").with_updates({"priors.recency_field": "date"}),
                    measures=MEASURES, debounce_s=30.0, debounce_leading=False)
    assert dated.controls["guard.coverage_first"].disabled
    assert len(lab.history) == n_msgs  # all live: nothing re-retrieved
