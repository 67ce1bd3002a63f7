"""User trial T: a search engineer who defends a lab-tuned config in a design review, so every panel must say
what really happened. Each test is a defect as the trial met it: the failure panel blamed dedup for what the
recency prior did and min_score for what the source fill did, the spread histogram disagreed with its own
"N flagged" title, and settings that fuse nothing were accepted with every metric at 0."""

from __future__ import annotations

from pathlib import Path

import polars as pl
import pytest

from toolkit import panels
from toolkit.config import load_config
from toolkit.errors import InputError


def _trace(rows: list[tuple[str, str, int, float]]) -> pl.DataFrame:
    """A one-query trace: (doc, stage, rank, score); retrieve lists as `retrieve:orig:lex`."""
    return pl.DataFrame(
        [{"qid": "q", "doc_id": d, "chunk_id": f"{d}#0", "stage": s, "rank": r, "score": sc, "flags": []} for d, s, r, sc in rows],
        schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "stage": pl.Utf8, "rank": pl.Int64,
                "score": pl.Float64, "flags": pl.List(pl.Utf8)},
    )


QRELS = pl.DataFrame({"qid": ["q"], "doc_id": ["rel"], "rel": [1]})


def _stages(blend: tuple[int, float], final: tuple[int, float] | None, priors: tuple[int, float] | None = None):
    rows = [("rel", "retrieve:orig:lex", 1, 9.0), ("rel", "fuse", blend[0], blend[1]), ("rel", "blend", *blend)]
    if priors:
        rows.append(("rel", "priors", *priors))
    if final:
        rows.append(("rel", "final", *final))
    return _trace(rows)


def test_a_document_the_recency_prior_pushed_out_is_blamed_on_the_prior():
    """Trial T: q02/pay-077 was blended at 2, the recency prior put it at 11, and the panel said
    "dedup | blend 2 -> final 11 (source fill)" with dedup switched off."""
    got = panels.failure_cases(_stages((2, 0.5), (11, 0.01), priors=(11, 0.01)), QRELS, k=10)
    assert got.row(0, named=True)["culprit"] == "priors"
    assert "after priors 11" in got.row(0, named=True)["detail"]


def test_a_document_gone_without_a_dedup_record_is_blamed_on_the_threshold():
    """Trial T: plat-128 had blend score 0.0835 (above min_score 0.02); the source fill lowered it to 0.0123
    and min_score dropped it, under "dropped below min_score". Now the threshold judges a filled result by its
    own score (trial S; tests/test_delivery_trial.py), so what is gone without a dedup record is the threshold's
    doing, on its own score."""
    low = panels.failure_cases(_stages((3, 0.01), None), QRELS, k=10).row(0, named=True)
    assert low["culprit"] == "threshold" and "dropped below min_score" in low["detail"]


def test_a_document_the_exact_token_guard_pushed_down_one_place_is_blamed_on_the_guard():
    kept = pl.DataFrame({"qid": ["q"], "exact_token": ["kept"]})
    got = panels.failure_cases(_stages((10, 0.3), (11, 0.29)), QRELS, k=10, per_query=kept).row(0, named=True)
    assert got["culprit"] == "guard" and "exact-token guard" in got["detail"]
    # The same move in a query where the guard did nothing: the source fill.
    held = pl.DataFrame({"qid": ["q"], "exact_token": ["held"]})
    assert panels.failure_cases(_stages((10, 0.3), (11, 0.29)), QRELS, k=10, per_query=held)["culprit"].to_list() == ["dedup"]


ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"


def _lab(store, cfg):
    from toolkit.lab import Lab
    from toolkit.loaders import Dataset

    ds = Dataset.open(DEMO)
    return Lab(store, ds.queries("dev"), ds.qrels("dev"), config=cfg, baseline=None, debounce_s=30.0)


def test_the_lab_blames_the_prior_not_dedup_on_the_demo(demo_store):
    """End to end, as the trial ran it: qmd with a recency prior and every dedup switch off."""
    cfg = load_config("qmd").with_updates({"priors.recency_field": "date", "priors.recency_half_life_days": 60.0})
    lab = _lab(demo_store, cfg)
    try:
        s = lab.session
        f = s.failures
        assert s.result.removed.height == 0 and "priors" in f["culprit"].to_list()
        assert "dedup" not in f["culprit"].to_list(), f.filter(pl.col("culprit") == "dedup")
    finally:
        lab.close()


def test_the_spread_histogram_counts_what_the_title_flags(demo_store):
    """The threshold stage flags low spread over the first output.n results; the lab's histogram measured the
    whole list, so "9 of 32 flagged" stood beside a histogram with no query left of the line."""
    cfg = load_config("qmd").with_updates({"fusion.method": "convex", "threshold.low_spread": 0.3})
    lab = _lab(demo_store, cfg)
    try:
        s = lab.session
        flagged = int(s.result.per_query["low_differentiation"].sum())
        spread = panels.score_spread(s.result.trace, depth=cfg.output.n).filter(pl.col("stage") == "final")
        assert int((spread["spread"] < 0.3).sum()) == flagged
        fig = lab.figures["spread"]
        assert f"{flagged} of" in fig.layout.title.text
    finally:
        lab.close()


@pytest.mark.parametrize("updates", [
    {"fusion.lexical_weight": 0.0, "fusion.dense_weight": 0.0},  # RRF returned nothing, every metric 0
    {"fusion.method": "convex", "fusion.lexical_weight": 0.0, "fusion.alpha": 0.0},  # every score 0, dense order
    {"fusion.original_weight": 0.0},  # no expansion: the original lists are all there is
])
def test_settings_that_fuse_nothing_are_refused_with_the_reason(updates):
    with pytest.raises(InputError, match="every enabled list has weight 0"):
        load_config("qmd").with_updates(updates)


def test_numbers_with_a_recency_prior_do_not_drift_with_the_clock_and_the_export_says_for_when(demo_store, tmp_path, monkeypatch):
    """The demo's queries carry no date, so the recency prior's reference was the clock: the same config gave
    nDCG@10 0.7110 now and 0.7092 in 180 days, and nothing in the exported YAML said for when. The export names
    the time (not as priors.as_of: live search with the file must date memories against the clock) and
    `--as-of` / priors.as_of give the lab's numbers again."""
    import re
    from datetime import datetime

    import toolkit.priors as priors
    from toolkit.loaders import Dataset
    from toolkit.metrics import aggregate, evaluate
    from toolkit.pipeline import prepare, rescore

    cfg = load_config("qmd").with_updates({"priors.recency_field": "date", "priors.recency_floor": 0.3})
    lab = _lab(demo_store, cfg)
    try:
        shown = lab.session.metrics["nDCG@10"]
        monkeypatch.setattr(priors, "utc_now", lambda: datetime(2030, 1, 1))  # the clock moves on
        assert lab.session.refresh()  # computed again: still for the session's time
        assert lab.session.metrics["nDCG@10"] == shown
        lab.session.export("yaml", tmp_path / "c.yaml")
    finally:
        lab.close()
    saved = load_config(tmp_path / "c.yaml")
    assert saved.priors.as_of is None  # live search keeps the clock
    when = re.search(r"hrt run --as-of (\S+)\)", saved.description).group(1)
    ds = Dataset.open(DEMO)
    q = ds.queries("dev")
    pinned = saved.with_updates({"priors.as_of": when})  # what `hrt run --as-of` does
    again = aggregate(evaluate(rescore(prepare(demo_store, q, pinned), pinned).run(10), ds.qrels("dev"), ["nDCG@10"]))
    assert again["nDCG@10"] == pytest.approx(shown, abs=1e-12)  # in 2030 too
    drifted = aggregate(evaluate(rescore(prepare(demo_store, q, saved), saved).run(10), ds.qrels("dev"), ["nDCG@10"]))
    assert drifted["nDCG@10"] != shown  # (without it the clock, here 2030, decides)


def test_as_of_may_be_an_unquoted_yaml_date_and_is_said_to_do_nothing_without_recency(tmp_path):
    import warnings as w

    from toolkit.config import InertSettingWarning

    (tmp_path / "a.yaml").write_text("priors:\n  recency_field: date\n  as_of: 2026-11-26\n")
    assert load_config(tmp_path / "a.yaml").priors.as_of == "2026-11-26"
    (tmp_path / "b.yaml").write_text("priors:\n  as_of: 2026-11-26T09:30:00+02:00\n")
    with w.catch_warnings(record=True) as got:
        w.simplefilter("always")
        assert load_config(tmp_path / "b.yaml").priors.as_of == "2026-11-26T09:30:00+02:00"
    assert any(issubclass(x.category, InertSettingWarning) and "as_of" in str(x.message) for x in got)


def test_as_of_must_be_a_date():
    with pytest.raises(InputError, match="as_of 'last tuesday'"):
        load_config("qmd").with_updates({"priors.as_of": "last tuesday"})


def test_a_refused_value_does_not_stay_in_its_widget(demo_store):
    """Trial T: min_score typed as -0.5 kept showing -0.5 while the config stayed at 0.0."""
    lab = _lab(demo_store, load_config("qmd"))
    try:
        w = lab.controls["threshold.min_score"]
        w.value = -0.5
        lab.flush()
        assert lab.config.threshold.min_score == 0.0 and "config unchanged" in lab.message
        assert w.value == 0.0
    finally:
        lab.close()


def test_the_failure_panel_counts_what_no_list_retrieved(demo_store):
    """Trial T: relevant documents missing from every list's top k never appeared in the failure panel, and
    nothing said how many there were."""
    lab = _lab(demo_store, load_config("qmd"))
    try:
        s = lab.session
        n = panels.retrieval_misses(s.result.trace, s.qrels, k=s.k)
        assert n == s.retrieval_misses and n > 0
        assert f"{n} more never in a list's top {s.k} (retrieval misses)" in lab.figures["failures"].layout.title.text
    finally:
        lab.close()


def test_min_score_zero_is_the_threshold_off_not_the_source_fill():
    """Review: with min_score 0 (the default) a document gone without a dedup record was called the source
    fill's doing."""
    got = panels.failure_cases(_stages((2, 0.5), None), QRELS, k=10).row(0, named=True)
    assert got["culprit"] == "threshold"


def test_retrieval_misses_and_failures_are_disjoint():
    """Review: a document no list had in its top 10 but that fusion lifted into it, and the blend pushed out,
    was counted both as a failure (blend) and as a retrieval miss."""
    t = _trace([("rel", "retrieve:orig:lex", 15, 1.0), ("rel", "retrieve:orig:vec", 15, 0.5), ("rel", "fuse", 8, 0.03),
                ("rel", "blend", 12, 0.2), ("rel", "final", 12, 0.2)])
    assert panels.failure_cases(t, QRELS, k=10)["culprit"].to_list() == ["blend"]
    assert panels.retrieval_misses(t, QRELS, k=10) == 0


def test_the_router_does_not_rescue_zero_weights():
    with pytest.raises(InputError, match="every enabled list has weight 0"):
        load_config("qmd").with_updates({"fusion.router": True, "fusion.lexical_weight": 0.0, "fusion.dense_weight": 0.0})
