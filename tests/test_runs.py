"""TREC runs and qrels: ids stay strings, both qrels layouts read, errors name file and line."""

from __future__ import annotations

import warnings

import numpy as np
import polars as pl
import pytest
from conftest import shared

from toolkit.errors import InputError
from toolkit.runs import float32_strict, rank_conflicts, read_qrels, read_run, write_run


def test_read_run_keeps_string_ids_and_ignores_q0_and_tag(tmp_path):
    p = tmp_path / "r.trec"
    p.write_text("01 Q0 007 1 12.5 bm25\n\n01\tQ0   10  2 3e-1 bm25\n2 0 a-b 1 -1 x\n")
    r = read_run(p)
    assert r.schema == {"qid": pl.Utf8, "doc_id": pl.Utf8, "rank": pl.Int64, "score": pl.Float64}
    assert r.rows() == [("01", "007", 1, 12.5), ("01", "10", 2, 0.3), ("2", "a-b", 1, -1.0)]


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        ("q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4\n", r"r\.trec:2: malformed line, expected 6 fields"),
        ("q1 Q0 d1 1 0.5 t\n\nq1 Q0 d2 two 0.4 t\n", r"r\.trec:3: rank 'two' is not a number"),
        ("q1 Q0 d1 1 high t\n", r"r\.trec:1: score 'high' is not a number"),
        (
            "q1 Q0 d1 1 0.5 t\nq1 Q0 d2 2 0.4 t\nq1 Q0 d1 3 0.3 t\n",
            r"r\.trec:3: run line for query 'q1', document 'd1' repeats line 1",
        ),
        # trec_eval reads scores as float32: 1e40 cannot round-trip, so reading fails where the line is known.
        ("q1 Q0 d1 1 2.5 t\nq1 Q0 d2 2 1e40 t\n", r"r\.trec:2: score '1e40' is outside the float32 range"),
        ("q1 Q0 d1 1 -inf t\n", r"r\.trec:1: score '-inf' is outside the float32 range"),
    ],
)
def test_read_run_errors_name_file_and_line(tmp_path, text, msg):
    p = tmp_path / "r.trec"
    p.write_text(text)
    with pytest.raises(InputError, match=msg):
        read_run(p)


def test_the_largest_float32_scores_still_read_and_write(tmp_path):
    p = tmp_path / "r.trec"
    p.write_text("q1 Q0 d1 1 3e38 t\n")
    write_run(read_run(p), tmp_path / "o.trec")
    assert read_run(tmp_path / "o.trec")["score"][0] == pytest.approx(3e38, rel=1e-6)


def test_a_utf8_byte_order_mark_is_not_part_of_the_first_id(tmp_path):
    bom = b"\xef\xbb\xbf"
    (tmp_path / "r.trec").write_bytes(bom + b"q1 Q0 d1 1 2.5 t\n")
    (tmp_path / "q.qrels").write_bytes(bom + b"q1 0 d1 1\n")
    (tmp_path / "q.tsv").write_bytes(bom + b"query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    assert read_run(tmp_path / "r.trec").rows() == [("q1", "d1", 1, 2.5)]
    assert read_qrels(tmp_path / "q.qrels").rows() == [("q1", "d1", 1)]
    assert read_qrels(tmp_path / "q.tsv").rows() == [("q1", "d1", 1)]  # the header is recognised


def test_write_run_takes_every_shape_run_frame_reads(tmp_path):
    import pandas as pd

    want = ["q1 Q0 b 1 3.0 hrt.f32strict", "q1 Q0 a 2 1.0 hrt.f32strict", "q2 Q0 c 1 2.0 hrt.f32strict"]
    shapes = [
        {"q1": {"a": 1.0, "b": 3.0}, "q2": {"c": 2.0}},  # pytrec_eval / ranx dict
        pd.DataFrame({"qid": ["q1", "q1", "q2"], "docno": ["a", "b", "c"], "score": [1.0, 3.0, 2.0]}),  # PyTerrier
        pl.DataFrame({"query_id": ["q1", "q1", "q2"], "doc_id": ["a", "b", "c"], "score": [1.0, 3.0, 2.0]}),
    ]
    for shape in shapes:
        p = tmp_path / "o.trec"
        write_run(shape, p)
        assert p.read_text().splitlines() == want, type(shape)


def test_missing_file_is_an_input_error(tmp_path):
    with pytest.raises(InputError, match="no such file"):
        read_run(tmp_path / "nope.trec")


def test_write_run_keeps_valid_ranks_and_writes_float32_scores(tmp_path):
    run = pl.DataFrame(
        {
            "qid": ["2", "01", "01"],
            "doc_id": ["x", "b", "a"],
            "rank": [1, 2, 1],
            "score": [0.1, 0.30000000000000004, 1 / 3],
        }
    )
    p = tmp_path / "out.trec"
    write_run(run, p, tag="sys1")
    lines = p.read_text().splitlines()
    # Shortest float32 decimals; the tag says the scores are float32-strict.
    assert lines == [
        "01 Q0 a 1 0.33333334 sys1.f32strict",
        "01 Q0 b 2 0.3 sys1.f32strict",
        "2 Q0 x 1 0.1 sys1.f32strict",
    ]
    back = read_run(p)
    assert back.select("qid", "doc_id", "rank").equals(run.sort("qid", "rank").select("qid", "doc_id", "rank"))
    assert back["score"].cast(pl.Float32).to_list() == run.sort("qid", "rank")["score"].cast(pl.Float32).to_list()
    write_run(back, p, tag="sys1.f32strict")  # idempotent: same scores, the tag is not doubled
    assert p.read_text().splitlines() == lines


def test_write_run_recomputes_ranks_in_trec_eval_order(tmp_path):
    # No rank column: order by score desc, ties by doc id desc; the tie is then split at float32.
    run = pl.DataFrame({"qid": ["q", "q", "q"], "doc_id": ["a", "c", "b"], "score": [1.0, 1.0, 2.0]})
    p = tmp_path / "o.trec"
    write_run(run, p)
    assert [ln.split()[2:5] for ln in p.read_text().splitlines()] == [
        ["b", "1", "2.0"],
        ["c", "2", "1.0"],
        ["a", "3", "0.99999994"],
    ]
    # Ranks with a gap are not 1..n: recomputed too.
    write_run(run.with_columns(rank=pl.Series([1, 5, 2])), p)
    assert [ln.split()[2:4] for ln in p.read_text().splitlines()] == [["b", "1"], ["c", "2"], ["a", "3"]]
    assert p.read_text().splitlines()[0].endswith(" hrt.f32strict")


def test_float32_strict_keeps_rank_order_under_float32_resorting():
    # RRF-like near-ties (1e-10 apart tie at float32), an exact tie, an inversion (rank 4 scores above rank 3),
    # signed zeros and negative scores: after float32_strict every query's float32 scores strictly decrease
    # in rank order, and each score moved by no more than its float32 rounding plus one step per row above.
    run = pl.DataFrame(
        {
            "qid": ["a"] * 6 + ["b"] * 4,
            "doc_id": ["d1", "d2", "d3", "d4", "d5", "d6", "e1", "e2", "e3", "e4"],
            "rank": [1, 2, 3, 4, 5, 6, 1, 2, 3, 4],
            "score": [1 / 61 + 1 / 70, 1 / 62 + 1 / 66 + 1e-12, 0.03, 0.5, 0.03, 0.0, 0.0, -0.0, -1.5, -1.5],
        }
    )
    out = float32_strict(run)
    assert out.select("qid", "doc_id", "rank").equals(run.select("qid", "doc_id", "rank"))
    s32 = out["score"].cast(pl.Float32).to_numpy()
    assert (out["score"].to_numpy() == s32.astype(np.float64)).all()  # exactly float32 values
    for q in ("a", "b"):
        qs = s32[(out["qid"] == q).to_numpy()]
        assert (np.diff(qs) < 0).all(), qs
    want = run["score"].cast(pl.Float32).to_numpy()
    assert out["score"][0] == float(want[0])  # a score with nothing above it is only rounded
    assert out["score"][1] == float(np.nextafter(want[0], np.float32(-1)))  # the near-tie: one step below
    assert float32_strict(out).equals(out)  # idempotent


@pytest.mark.parametrize("tag", ["run", "run.f32strict"])
def test_rank_conflicts_counts_queries_that_float32_would_reorder(tmp_path, tag):
    run = pl.DataFrame(
        {"qid": ["a", "a", "b", "b"], "doc_id": ["x", "y", "x", "y"], "rank": [1, 2, 1, 2], "score": [0.1, 0.1 - 1e-10, 2.0, 1.0]}
    )
    assert rank_conflicts(run) == 1  # query a: a float32 tie, broken by doc id descending (y before x)
    p = tmp_path / "r.trec"
    write_run(run, p, tag=tag)
    assert rank_conflicts(read_run(p)) == 0
    assert p.read_text().split()[5] == "run.f32strict"


def test_write_run_rejects_bad_frames(tmp_path):
    with pytest.raises(InputError, match="missing column"):
        write_run(pl.DataFrame({"qid": ["q"], "doc_id": ["d"]}), tmp_path / "o")
    with pytest.raises(InputError, match="whitespace"):
        write_run(pl.DataFrame({"qid": ["q"], "doc_id": ["d 1"], "score": [1.0]}), tmp_path / "o")
    with pytest.raises(InputError, match="NaN"):
        write_run(pl.DataFrame({"qid": ["q"], "doc_id": ["d"], "score": [float("nan")]}), tmp_path / "o")
    with pytest.raises(InputError, match="tag"):
        write_run(pl.DataFrame({"qid": ["q"], "doc_id": ["d"], "score": [1.0]}), tmp_path / "o", tag="my run")


def test_read_qrels_beir_with_header(tmp_path):
    p = tmp_path / "test.tsv"
    p.write_text("query-id\tcorpus-id\tscore\n007\t01\t1\n007\tdoc with space\t2\n8\t02\t0\n")
    q = read_qrels(p)
    assert q.schema == {"qid": pl.Utf8, "doc_id": pl.Utf8, "rel": pl.Int64}
    assert q.rows() == [("007", "01", 1), ("007", "doc with space", 2), ("8", "02", 0)]


def test_read_qrels_trec_four_columns_and_float_grades(tmp_path):
    p = tmp_path / "qrels.txt"
    p.write_text("01 0 D1 2\n01 0 D2 0\n2  Q0  D3  1.0\n3 0 D4 -1\n")
    assert read_qrels(p).rows() == [("01", "D1", 2), ("01", "D2", 0), ("2", "D3", 1), ("3", "D4", -1)]


def test_read_qrels_beir_without_header(tmp_path):
    p = tmp_path / "q.tsv"
    p.write_text("1\tA\t1\n2\tB\t3\n")
    assert read_qrels(p).rows() == [("1", "A", 1), ("2", "B", 3)]


@pytest.mark.parametrize(
    ("text", "msg"),
    [
        (
            "query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td2\n",
            r"q\.tsv:3: malformed line, expected 3 tab-separated fields",
        ),
        ("query-id\tcorpus-id\tscore\nq1\td1\tyes\n", r"q\.tsv:2: relevance grade 'yes' is not a number"),
        ("q1 0 d1 1\nq1 0 d2 0.5\n", r"q\.tsv:2: relevance grade '0.5' is not an integer"),
        ("q1 0 d1 1\nq1 d2 1\n", r"q\.tsv:2: malformed line, expected 4 fields"),
        (
            "q1 0 d1 1\nq2 0 d1 1\nq1 0 d1 2\n",
            r"q\.tsv:3: judgement \(with a different grade\) for query 'q1', document 'd1' repeats line 1",
        ),
    ],
)
def test_read_qrels_errors_name_file_and_line(tmp_path, text, msg):
    p = tmp_path / "q.tsv"
    p.write_text(text)
    with pytest.raises(InputError, match=msg):
        read_qrels(p)


def test_shared_qrels_read_as_strings():
    q = read_qrels(shared("msmarco-dl19-5k") / "qrels" / "test.tsv")
    assert q.height == 1847 and q["qid"].n_unique() == 19
    assert q["qid"].dtype == pl.Utf8 and set(q["rel"].unique()) == {1, 2, 3}


def test_read_qrels_tolerates_an_identical_repeated_judgement(tmp_path):
    p = tmp_path / "q.tsv"
    p.write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq1\td1\t1\nq1\td2\t2\n")
    assert read_qrels(p).rows() == [("q1", "d1", 1), ("q1", "d2", 2)]


def test_write_run_refuses_what_read_run_would_and_warns_when_scores_rise_down_the_ranks(tmp_path):
    """A pair listed twice is refused before anything is written (read_run refuses such a file); ranks that
    contradict the scores are kept, with a warning that names the score lowered to follow them."""
    import pandas as pd

    out = tmp_path / "r.trec"
    with pytest.raises(InputError, match=r"query '1' lists document 'a' more than once"):
        write_run(pd.DataFrame({"qid": ["1", "1"], "docno": ["a", "a"], "score": [1.0, 0.5]}), out)
    assert not out.exists()
    with pytest.warns(UserWarning, match=r"in 1 queries a score is higher than the one ranked above it \(e\.g\. query '1', document 'b', rank 2, score 0\.9\)"):
        write_run(pd.DataFrame({"qid": ["1", "1"], "docno": ["a", "b"], "rank": [1, 2], "score": [0.1, 0.9]}), out)
    assert read_run(out)["doc_id"].to_list() == ["a", "b"]
    with warnings.catch_warnings():  # tied scores (RRF) are no inversion: quiet
        warnings.simplefilter("error")
        write_run(pl.DataFrame({"qid": ["1", "1"], "doc_id": ["a", "b"], "rank": [1, 2], "score": [0.5, 0.5]}), out)
