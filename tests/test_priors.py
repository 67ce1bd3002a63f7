"""The priors stage (recency, priority, use), typed metadata at ingest, and the old-store migration."""

from __future__ import annotations

import json
import math
from datetime import datetime
from pathlib import Path

import polars as pl
import pytest

from toolkit.config import PriorsConfig, load_config
from toolkit.errors import InputError
from toolkit.loaders import load_corpus, load_queries
from toolkit.metatypes import parse_date, query_values, typed_values, values_frame
from toolkit.pipeline import prepare, rescore, run_pipeline
from toolkit.priors import apply_priors, prior_factors
from toolkit.store import Store

NOW = datetime(2024, 6, 1)


def _ranked(rows: list[tuple[str, str, float]]) -> pl.DataFrame:
    df = pl.DataFrame(rows, schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64}, orient="row")
    return df.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank"), pl.lit([], pl.List(pl.Utf8)).alias("flags"))


def _values(meta: dict[str, dict]) -> pl.DataFrame:
    return values_frame([(d, *v) for d, m in meta.items() for v in typed_values(m, d)], "doc_id")


def test_date_formats_and_fields():
    assert parse_date("2024-01-25") == datetime(2024, 1, 25)
    assert parse_date("2024-01-25T09:30:00+02:00") == datetime(2024, 1, 25, 7, 30)
    assert parse_date("1:56 pm on 8 May, 2023") == datetime(2023, 5, 8, 13, 56)  # LoCoMo
    assert parse_date("2023/05/20 (Sat) 02:21") == datetime(2023, 5, 20, 2, 21)  # LongMemEval
    assert parse_date(1_700_000_000) == datetime(2023, 11, 14, 22, 13, 20)  # seconds since 1970: 9 to 11 digits
    assert parse_date(0) is None and parse_date(45622) is None and parse_date(2024) is None  # a placeholder, a day number, a year
    assert parse_date("May") is None and parse_date("last tuesday") is None and parse_date(True) is None
    vals = {f: (num, ts, text) for f, num, ts, text in typed_values({"updated_at": "2024-02-01", "hits": 3, "time": "evening", "tags": ["x"]}, "w")}
    assert vals["updated_at"] == (None, datetime(2024, 2, 1), "2024-02-01")
    assert vals["hits"] == (3.0, None, "3")
    assert vals["time"] == (None, None, "evening")  # "time" alone is not a date field
    assert "tags" not in vals


def test_recency_factor_half_life_floor_and_reference():
    ranked = _ranked([("q1", "old", 1.0), ("q1", "new", 0.9), ("q1", "undated", 0.8), ("q1", "future", 0.7), ("q2", "old", 1.0), ("q2", "new", 0.9)])
    dv = _values({"old": {"date": "2024-05-02"}, "new": {"date": "2024-06-01"}, "undated": {"kind": "note"}, "future": {"date": "2024-07-01"}})
    qv = query_values(pl.DataFrame({"qid": ["q1", "q2"], "metadata": [json.dumps({}), json.dumps({"date": "2024-05-02"})]}))
    cfg = PriorsConfig(recency_field="date", recency_half_life_days=30)
    f = prior_factors(ranked, dv, qv, cfg, now=NOW)
    got = {(q, d): x for q, d, x in f.select("qid", "doc_id", "prior_recency").iter_rows()}
    assert got[("q1", "old")] == pytest.approx(0.5)  # 30 days before now
    assert got[("q1", "new")] == pytest.approx(1.0)
    assert got[("q1", "undated")] == 1.0  # missing metadata is neutral
    assert got[("q1", "future")] == pytest.approx(0.5)  # 30 days after the reference: it did not exist yet
    assert got[("q2", "old")] == pytest.approx(1.0)  # q2's own date is the reference, not now
    assert f["prior_priority"].is_null().all() and f["prior_use"].is_null().all()  # priors that are off
    floor = prior_factors(ranked, dv, qv, cfg.model_copy(update={"recency_floor": 0.2}), now=NOW)
    assert floor.filter((pl.col("qid") == "q1") & (pl.col("doc_id") == "old"))["prior_recency"][0] == pytest.approx(0.6)

    out = apply_priors(ranked, dv, qv, cfg, now=NOW)
    q1 = out.filter(pl.col("qid") == "q1").sort("rank")
    assert q1["doc_id"].to_list() == ["new", "undated", "old", "future"]  # old: 1.0 * 0.5; future: 0.7 * 0.5
    assert q1.filter(pl.col("doc_id") == "undated")["score"][0] == 0.8  # neutral: score unchanged
    assert q1["score_before_priors"].to_list() == [0.9, 0.8, 1.0, 0.7]

    # `fresh`: a document dated ahead (a deadline, a scheduled event) counts as the most recent
    ahead = prior_factors(ranked, dv, qv, cfg.model_copy(update={"recency_future": "fresh"}), now=NOW)
    assert ahead.filter(pl.col("doc_id") == "future")["prior_recency"][0] == 1.0


def test_priority_and_use_factors_and_combine_modes():
    ranked = _ranked([("q", "a", 1.0), ("q", "b", 0.5), ("q", "c", 0.4), ("q", "d", -0.2)])
    dv = _values({"a": {"priority": 3, "uses": 0}, "b": {"priority": 0, "uses": math.e - 1}, "c": {"priority": "P9"}, "d": {"priority": 0}})
    cfg = PriorsConfig(priority_field="priority", use_field="uses", use_weight=0.5)
    f = prior_factors(ranked, dv, values_frame([], "qid"), cfg, now=NOW)
    fac = {d: (p, u) for d, p, u in f.select("doc_id", "prior_priority", "prior_use").iter_rows()}
    assert fac["a"] == (1.0, 1.0)  # P3 -> 1, ln(1 + 0) = 0
    assert fac["b"] == (4.0, pytest.approx(1.5))  # P0 -> 4, 1 + 0.5 ln(e)
    assert fac["c"] == (1.0, 1.0)  # value not in the mapping, no use count: neutral
    out = apply_priors(ranked, dv, None, cfg, now=NOW).sort("rank")
    assert out["doc_id"].to_list() == ["b", "a", "c", "d"]
    assert out.filter(pl.col("doc_id") == "b")["score"][0] == pytest.approx(0.5 * 4 * 1.5)
    assert out.filter(pl.col("doc_id") == "d")["score"][0] == pytest.approx(-0.05)  # negative: divided, so it rises
    add = apply_priors(ranked, dv, None, cfg.model_copy(update={"combine": "add", "add_weight": 0.1}), now=NOW)
    assert add.filter(pl.col("doc_id") == "b")["score"][0] == pytest.approx(0.5 + 0.1 * (3.0 + 0.5))


def test_priors_config_validation():
    with pytest.raises(InputError, match="priors.priority_map"):
        load_config("qmd").with_updates({"priors.priority_map": {"P0": -1.0}})
    with pytest.raises(InputError, match="priors.recency_field"):
        load_config("qmd").with_updates({"priors.recency_field": "date'; DROP"})
    with pytest.raises(InputError, match="recency_half_life_days"):
        load_config("qmd").with_updates({"priors.recency_half_life_days": 0})


def test_bad_dates_name_file_line_and_field(tmp_path: Path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text(
        json.dumps({"_id": "a", "text": "x", "metadata": {"date": "2024-01-01"}}) + "\n"
        + json.dumps({"_id": "b", "text": "y", "metadata": {"created_at": "soon"}}) + "\n"
    )
    with pytest.raises(InputError, match=r"c\.jsonl:2: metadata\.created_at: cannot read 'soon' as a date"):
        load_corpus(corpus)
    queries = tmp_path / "q.jsonl"
    queries.write_text(json.dumps({"_id": "q", "text": "t", "metadata": {"date": "13/45/2024"}}) + "\n")
    with pytest.raises(InputError, match=r"q\.jsonl:1: metadata\.date"):
        load_queries(queries)
    # Out-of-range values are the same clear error, not a traceback from datetime (a user's bank held
    # JavaScript millisecond timestamps); milliseconds get a hint.
    for value, say in [(1717200000000, "looks like milliseconds"), (1e300, "as a date"), (-1e12, "as a date"),
                       ("0001-01-01T00:00:00+01:00", "as a date")]:
        corpus.write_text(json.dumps({"_id": "a", "text": "x", "metadata": {"created_at": value}}) + "\n")
        with pytest.raises(InputError, match=rf"c\.jsonl:1: metadata\.created_at: cannot read .*{say}"):
            load_corpus(corpus)
        queries.write_text(json.dumps({"_id": "q", "text": "t", "metadata": {"date": value}}) + "\n")
        with pytest.raises(InputError, match=r"q\.jsonl:1: metadata\.date: cannot read"):
            load_queries(queries)
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest([{"doc_id": "a", "source": "a", "scope": None, "title": "", "text": "kept", "metadata": {"date": "2024-01-01"}}], embed=False)
        bad = {"doc_id": "b", "source": "b", "scope": None, "title": "", "text": "new", "metadata": {"updated_at": "yesterday"}}
        with pytest.raises(InputError, match=r"document 'b': metadata\.updated_at"):
            st.ingest([bad], embed=False)
        assert st.documents()["doc_id"].to_list() == ["a"]  # nothing already stored is lost
        assert st.doc_values()["doc_id"].to_list() == ["a"]


def _docs() -> list[dict]:
    return [
        {"doc_id": "m1", "source": "m1", "scope": None, "title": "", "text": "the deploy key lives in vault", "metadata": {"date": "2023-01-01", "priority": 2}},
        {"doc_id": "m2", "source": "m2", "scope": None, "title": "", "text": "the deploy key moved to the secrets manager", "metadata": {"date": "2024-05-31", "priority": 2}},
        {"doc_id": "m3", "source": "m3", "scope": None, "title": "", "text": "lunch is on thursday", "metadata": {}},
    ]


def test_typed_columns_and_migration_of_an_old_store(tmp_path: Path):
    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest(_docs(), embed=False)
        types = dict(st.con.execute("SELECT column_name, data_type FROM information_schema.columns WHERE table_name = 'doc_values'").fetchall())
        assert types["ts"] == "TIMESTAMP" and types["num"] == "DOUBLE"
        assert st.doc_values(["m2"]).filter(pl.col("field") == "date")["ts"][0] == datetime(2024, 5, 31)
        st.con.execute("DROP TABLE doc_values")  # what a store written by the previous version looks like
    with Store(path, read_only=True) as st:  # read-only: typed on the fly
        assert st.doc_values(["m1"]).filter(pl.col("field") == "date")["ts"][0] == datetime(2023, 1, 1)
    with Store(path) as st:  # writable: migrated in place
        assert st._has_table("doc_values")
        assert st.con.execute("SELECT count(*) FROM doc_values WHERE field = 'date' AND ts IS NOT NULL").fetchone()[0] == 2
        st.ingest([{**_docs()[0], "metadata": {"date": "2024-06-01"}}, *_docs()[1:]], embed=False)  # a changed document is retyped
        assert st.doc_values(["m1"]).filter(pl.col("field") == "date")["ts"].to_list() == [datetime(2024, 6, 1)]


def test_pipeline_priors_stage_trace_and_cache(tmp_path: Path):
    q = pl.DataFrame({"qid": ["q"], "text": ["where is the deploy key"], "scope": [None], "metadata": ["{}"]},
                     schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8, "metadata": pl.Utf8})
    base = load_config("bm25-only")
    cfg = base.with_updates({"priors.recency_field": "date", "priors.recency_half_life_days": 30})
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(_docs(), embed=False)
        plain = run_pipeline(st, q, base)
        res = run_pipeline(st, q, cfg, now=NOW)
        cached = prepare(st, q, cfg)  # from the stage cache: the prior inputs come back too
        assert "cache_load" in cached.timings and cached.doc_values is not None and len(cached.doc_values)
        again = rescore(cached, cfg, now=NOW)
        # A stage cache written before typed metadata existed: the prior inputs are read again, and kept.
        st.con.execute("DELETE FROM stage_cache WHERE name IN ('doc_values', 'query_values')")
        old = prepare(st, q, cfg)
        assert old.doc_values is not None and old.doc_values.equals(cached.doc_values)
        assert st.con.execute("SELECT count(*) FROM stage_cache WHERE name = 'doc_values'").fetchone()[0] == 1
        assert rescore(old, cfg, now=NOW).final.select("doc_id", "score").equals(res.final.select("doc_id", "score"))
    assert plain.final.sort("rank")["doc_id"][0] == "m1"  # BM25 alone: the older note (shorter, same terms)
    top = res.final.sort("rank")
    assert top["doc_id"][0] == "m2"  # recency puts the newer fact first
    assert top.filter(pl.col("doc_id") == "m1")["prior_recency"][0] < 1e-4
    pri = res.trace.filter(pl.col("stage") == "priors")
    assert len(pri) and pri.filter(pl.col("doc_id") == "m2")["flags"][0].to_list() == ["recency=0.9772"]
    assert set(res.trace["stage"].unique()) >= {"fuse", "blend", "priors", "final"}
    assert again.final.select("doc_id", "score").equals(res.final.select("doc_id", "score"))
    assert "priors" not in plain.trace["stage"].unique().to_list()  # off: the stage is skipped


def test_top_n_reweights_the_head_only():
    ranked = _ranked([("q", "a", 0.9), ("q", "b", 0.8), ("q", "c", 0.7), ("q", "d", 0.6)])
    dv = _values({"b": {"priority": 0}, "d": {"priority": 0}})
    out = apply_priors(ranked, dv, None, PriorsConfig(priority_field="priority", top_n=2), now=NOW).sort("rank")
    assert out["doc_id"].to_list() == ["b", "a", "c", "d"]  # d (x4) is outside the top 2: it stays below
    s = out["score"].to_list()
    assert s[0] == pytest.approx(3.2) and s[1] == 0.9 and s[1] > s[2] > s[3] > 0


def test_rows_below_top_n_carry_neutral_factors():
    """`hrt search` prints the factors that moved a result: a row below top_n was not re-weighted, so its
    factors read 1 (d is P0 but stays below the block: its output must not claim "priority x4")."""
    ranked = _ranked([("q", "a", 0.9), ("q", "b", 0.8), ("q", "c", 0.7), ("q", "d", 0.6)])
    dv = _values({"b": {"priority": 0}, "d": {"priority": 0}})
    out = apply_priors(ranked, dv, None, PriorsConfig(priority_field="priority", top_n=2), now=NOW)
    got = dict(out.select("doc_id", "prior_priority").iter_rows())
    assert got == {"a": 1.0, "b": 4.0, "c": 1.0, "d": 1.0}
    assert out["prior_recency"].is_null().all()  # a prior that is off stays null


def test_a_short_half_life_still_ranks_newer_memories_first():
    """5-day half-life, memories years old: their factors (0.5 ** 146 and smaller) underflow a clipped product;
    ranked in log space, newer still beats older, as a stronger decay must (the trial saw the order revert)."""
    ranked = _ranked([("q", "2022", 1.0), ("q", "2023", 0.9), ("q", "2024", 0.8), ("q", "undated", 0.1)])
    dv = _values({"2022": {"date": "2022-06-01"}, "2023": {"date": "2023-06-01"}, "2024": {"date": "2024-06-01"}})
    for hl in (60.0, 5.0, 0.5):
        cfg = PriorsConfig(recency_field="date", recency_half_life_days=hl)
        out = apply_priors(ranked, dv, None, cfg, now=NOW).sort("rank")
        assert out["doc_id"].to_list() == ["2024", "undated", "2023", "2022"], hl  # undated: factor 1 (neutral)
    with_top = PriorsConfig(recency_field="date", recency_half_life_days=0.5, top_n=3)
    out = apply_priors(ranked, dv, None, with_top, now=NOW).sort("rank")
    assert out["doc_id"].to_list() == ["2024", "2023", "2022", "undated"]  # the top 3 re-ranked, the rest after
