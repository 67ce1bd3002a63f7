"""User trial AF: an assistant's long-term memory across time zones, with memories dated in every form real
systems write and questions asked "as of" a time. Each test is a defect the trial found."""

from __future__ import annotations

import json
import warnings
from datetime import UTC, datetime, timedelta, timezone

import polars as pl
import pytest

from toolkit.config import load_config
from toolkit.errors import InputError
from toolkit.loaders import load_corpus, load_queries
from toolkit.metatypes import parse_date
from toolkit.pipeline import run_pipeline
from toolkit.store import Store

MEMORIES = [  # the Berlin on-call, three versions; the query is asked between v2 and v3
    {"_id": "oncall-v1", "text": "The Berlin on-call engineer is Anna.", "date": "2026-09-01T09:00:00+02:00"},
    {"_id": "oncall-v2", "text": "The Berlin on-call engineer is now Ben.", "date": "2026-09-10T09:00:00+02:00"},
    {"_id": "oncall-v3", "text": "The Berlin on-call engineer is now Chris.", "date": "2026-09-24T09:00:00+02:00"},
]
ASKED = {"qid": ["q"], "text": ["who is the Berlin on-call engineer"], "metadata": [json.dumps({"date": "2026-09-20T03:00:00+02:00"})]}


def _config(**priors):
    return load_config("bm25-only").with_updates({"priors.recency_field": "date", "priors.recency_half_life_days": 60.0,
                                                  **{f"priors.{k}": v for k, v in priors.items()}})


@pytest.fixture
def memory(tmp_path):
    path = tmp_path / "mem.duckdb"
    with Store(path) as st:
        st.ingest(MEMORIES, embed=False)
    return path


def test_a_memory_written_after_the_as_of_time_is_flagged_or_left_out(memory):
    """Asked as of Sep 20, the memory written Sep 24 ranked first with nothing saying it did not exist yet
    (the trial: 21 of 25 such questions); `recency_future: exclude` now leaves it out, and by default it is
    flagged."""
    q = pl.DataFrame(ASKED)
    with Store(memory, read_only=True) as st:
        flagged = run_pipeline(st, q, _config()).final.sort("rank")
        excluded = run_pipeline(st, q, _config(recency_future="exclude")).final.sort("rank")
    future = flagged.filter(pl.col("doc_id") == "oncall-v3")
    assert future["flags"][0].to_list() == ["dated_after_reference"]
    assert all("dated_after_reference" not in f for f in flagged.filter(pl.col("doc_id") != "oncall-v3")["flags"].to_list())
    assert excluded["doc_id"].to_list() == ["oncall-v2", "oncall-v1"]


def test_the_compact_output_says_a_result_is_dated_after_the_as_of_time(memory):
    from click.testing import CliRunner

    from toolkit.cli import main

    cfg = memory.parent / "c.yaml"
    cfg.write_text("extends: bm25-only\npriors: {recency_field: date, recency_half_life_days: 60}\n")
    r = CliRunner().invoke(main, ["search", "who is the Berlin on-call engineer", "--store", str(memory), "--config", str(cfg),
                                  "--as-of", "2026-09-20T03:00:00+02:00"])
    assert r.exit_code == 0, r.output
    assert "dated after the query's as-of time" in r.output


def test_a_recency_field_that_never_reads_as_a_date_and_use_counts_as_text_warn(tmp_path):
    """`recency_field: last_seen` (a name not typed as a date) and `access_count: "10"` made the priors neutral
    without a word."""
    rows = [{"_id": f"m{i}", "text": f"deploy note {i}", "last_seen": "2026-11-0{i}", "access_count": str(i)} for i in range(1, 4)]
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(rows, embed=False)
        cfg = load_config("bm25-only").with_updates({"priors.recency_field": "last_seen", "priors.use_field": "access_count"})
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["deploy note"]}), cfg)
    said = " ".join(str(w.message) for w in seen)
    assert "priors.recency_field 'last_seen' is never read as a date" in said
    assert "priors.use_field 'access_count'" in said and "'1', '2', '3'" in said
    # undated memories under a date field are a documented state (they count as new): no warning on every search
    with Store(tmp_path / "s.duckdb", read_only=True) as st, warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["deploy note"]}),
                     load_config("bm25-only").with_updates({"priors.recency_field": "created_at"}))
    assert not [w for w in seen if "priors." in str(w.message)]


def test_a_recency_field_no_candidate_has_warns_when_they_are_dated_under_another(tmp_path):
    """User trial BK: memories dated in `created_at`, searched with agent-memory (recency_field `date`): the old fact
    outranked the new one and nothing said the prior was neutral."""
    rows = [{"_id": f"m{i}", "text": f"I live in city {i}", "created_at": f"2024-0{i}-01T00:00:00Z"} for i in range(1, 4)]
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(rows, embed=False)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["which city do I live in"]}),
                         load_config("bm25-only").with_updates({"priors.recency_field": "date"}))
    said = [str(w.message) for w in seen if "priors.recency_field" in str(w.message)]
    assert len(said) == 1 and "no candidate has that field" in said[0] and "dated in 'created_at'" in said[0]


def test_a_querys_top_level_date_is_its_as_of_time(tmp_path, memory):
    """`{"_id": ..., "text": ..., "date": ...}` in queries.jsonl was ranked as of the clock: only `metadata.date`
    was read, while a document's top-level fields are its metadata."""
    qf = tmp_path / "queries.jsonl"
    qf.write_text(json.dumps({"_id": "q", "text": ASKED["text"][0], "date": "2026-09-20T03:00:00+02:00"}) + "\n")
    flat = load_queries(qf)
    assert json.loads(flat["metadata"][0]) == {"date": "2026-09-20T03:00:00+02:00"}
    with Store(memory, read_only=True) as st:
        got = run_pipeline(st, flat, _config(recency_future="exclude")).final.sort("rank")["doc_id"].to_list()
    assert got == ["oncall-v2", "oncall-v1"]
    qf.write_text(json.dumps({"_id": "q", "text": "x", "date": "not a date"}) + "\n")
    with pytest.raises(InputError, match=r"queries.jsonl:1: field `date`"):
        load_queries(qf)


def test_an_aware_now_is_converted_not_a_crash(memory):
    """`run_pipeline(..., now=datetime(..., tzinfo=timezone.utc))` raised polars' SchemaError."""
    q = pl.DataFrame({"qid": ["q"], "text": ["who is the Berlin on-call engineer"]})
    naive = datetime(2026, 9, 20, 1, 0)
    with Store(memory, read_only=True) as st:
        want = run_pipeline(st, q, _config(), now=naive).final.sort("rank").select("doc_id", "score")
        for tz in (UTC, timezone(timedelta(hours=9))):
            got = run_pipeline(st, q, _config(), now=naive.replace(tzinfo=UTC).astimezone(tz)).final.sort("rank")
            assert got.select("doc_id", "score").equals(want)


@pytest.mark.parametrize(("value", "want"), [
    ("1764000000", datetime(2025, 11, 24, 16, 0)),  # epoch seconds written as text
    ("Tue, 24 Nov 2026 10:00:00 +0100", datetime(2026, 11, 24, 9, 0)),  # RFC 2822, e-mail and HTTP headers
    ("2026-11-24t10:00:00z", datetime(2026, 11, 24, 10, 0)),  # RFC 3339 allows lower case
])
def test_common_date_forms_are_read(value, want):
    assert parse_date(value) == want
    docs = load_corpus([{"_id": "m", "text": "x", "created_at": value}])
    assert list(docs)[0]["metadata"]["created_at"] == value


def test_a_date_in_milliseconds_as_text_gets_the_milliseconds_hint():
    with pytest.raises(InputError, match="milliseconds since 1970"):
        load_corpus([{"_id": "m", "text": "x", "created_at": "1764000000000"}])
    with pytest.raises(InputError, match="a string of 9 to 11 digits"):
        load_corpus([{"_id": "m", "text": "x", "created_at": "yesterday"}])


def test_the_flag_needs_an_as_of_time_and_exclude_keeps_the_rank_order():
    """Reviewed: the flag also marked deadlines when nobody asked as of a time, and under `fresh`; `exclude`
    numbered the remaining rows in row order, not rank order, so `top_n` re-weighted the wrong ones."""
    from toolkit.metatypes import values_frame
    from toolkit.priors import apply_priors

    now = datetime(2026, 9, 20)
    docs = values_frame([("a", "date", None, datetime(2026, 9, 25), "x"), ("b", "date", None, datetime(2026, 9, 1), "x"),
                         ("c", "date", None, datetime(2026, 9, 2), "x"), ("d", "date", None, datetime(2026, 9, 3), "x")], "doc_id")
    ranked = pl.DataFrame({"qid": "q", "doc_id": ["d", "a", "c", "b"], "score": [2.0, 4.0, 3.0, 1.0], "rank": [3, 1, 2, 4],
                           "flags": [[], [], [], []]}, schema_overrides={"flags": pl.List(pl.Utf8)})
    cfg = _config().priors
    clock = apply_priors(ranked, docs, values_frame([], "qid"), cfg, now=now)
    assert all(not f for f in clock["flags"].to_list())  # no as-of time: a future date is a deadline
    asked = apply_priors(ranked, docs, values_frame([], "qid"), cfg.model_copy(update={"as_of": "2026-09-20"}), now=now)
    assert asked.filter(pl.col("doc_id") == "a")["flags"][0].to_list() == ["dated_after_reference"]
    fresh = apply_priors(ranked, docs, values_frame([], "qid"), cfg.model_copy(update={"as_of": "2026-09-20", "recency_future": "fresh"}), now=now)
    assert all(not f for f in fresh["flags"].to_list())
    ex = apply_priors(ranked, docs, values_frame([], "qid"),
                      cfg.model_copy(update={"as_of": "2026-09-20", "recency_future": "exclude", "top_n": 2}), now=now)
    # a gone; c (rank 2) and d (rank 3) are the re-weighted top 2, b follows them
    assert ex.sort("rank")["doc_id"].to_list()[-1] == "b" and set(ex.sort("rank")["doc_id"].to_list()[:2]) == {"c", "d"}


def test_a_named_zone_the_standard_does_not_define_is_an_error():
    assert parse_date("Tue, 24 Nov 2026 10:00:00 CET") is None
    assert parse_date("Tue, 24 Nov 2026 10:00:00 EST") == datetime(2026, 11, 24, 15, 0)


def test_query_files_with_other_unreadable_date_fields_still_load(tmp_path):
    """Reviewed: typing every top-level query field refused files that loaded before (`"created_at": ""`)."""
    qf = tmp_path / "queries.jsonl"
    qf.write_text(json.dumps({"_id": "q", "text": "x", "created_at": "", "response_time": "fast", "source": "chat"}) + "\n")
    assert json.loads(load_queries(qf)["metadata"][0]) == {"source": "chat"}
