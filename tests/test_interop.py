"""Interop: queries, qrels and runs from pandas/polars with PyTerrier, BEIR, ir_measures and ranx names;
conversions to ir_measures and ranx objects that those libraries score identically; trec_eval measure
names; ir_datasets ids read from the local cache only."""

from __future__ import annotations

import io
import os
import subprocess
import sys
import tarfile
import textwrap
from pathlib import Path

import pandas as pd
import polars as pl
import pytest

from toolkit.errors import InputError
from toolkit.interop import qrels_frame, queries_frame, run_frame, to_ir_measures, to_pandas, to_ranx
from toolkit.metrics import aggregate, evaluate, parse_measure

QRELS = pl.DataFrame({"qid": ["1", "1", "2", "2"], "doc_id": ["a", "b", "c", "d"], "rel": [2, 0, 1, 1]})
RUN = pl.DataFrame({"qid": ["1", "1", "1", "2", "2"], "doc_id": ["b", "a", "x", "d", "y"],
                    "rank": [1, 2, 3, 1, 2], "score": [3.0, 2.0, 1.0, 5.0, 4.0]})


@pytest.mark.parametrize(
    ("columns", "style"),
    [({"qid": [1, 2], "query": ["alpha", "beta"]}, "pyterrier"),
     ({"query_id": ["1", "2"], "text": ["alpha", "beta"]}, "ir_datasets"),
     ({"_id": ["1", "2"], "text": ["alpha", "beta"]}, "beir")],
)
def test_queries_from_pandas_and_polars_with_each_tool_names(columns, style):
    for frame in (pd.DataFrame(columns), pl.DataFrame(columns)):
        q = queries_frame(frame)
        assert q.columns == ["qid", "text", "scope"], style
        assert q["qid"].to_list() == ["1", "2"] and q["text"].to_list() == ["alpha", "beta"]
    assert queries_frame({"1": "alpha"})["text"].to_list() == ["alpha"]


def test_queries_errors_name_the_columns_and_the_query():
    with pytest.raises(InputError, match=r"text: one of text, query"):
        queries_frame(pd.DataFrame({"qid": ["1"], "question": ["x"]}))
    with pytest.raises(InputError, match="query '2' has an empty text"):
        queries_frame(pd.DataFrame({"qid": ["1", "2"], "query": ["x", " "]}))
    with pytest.raises(InputError, match="duplicate query id '1'"):
        queries_frame(pl.DataFrame({"qid": ["1", "1"], "text": ["x", "y"]}))


def test_qrels_from_every_shape_are_the_same_frame():
    pyterrier = pd.DataFrame({"qid": ["1", "1", "2", "2"], "docno": ["a", "b", "c", "d"], "label": [2, 0, 1, 1]})
    beir = pd.DataFrame({"query-id": ["1", "1", "2", "2"], "corpus-id": ["a", "b", "c", "d"], "score": [2, 0, 1, 1]})
    irm = pd.DataFrame({"query_id": ["1", "1", "2", "2"], "doc_id": ["a", "b", "c", "d"], "relevance": [2, 0, 1, 1]})
    nested = {"1": {"a": 2, "b": 0}, "2": {"c": 1, "d": 1}}
    for shape in (pyterrier, beir, irm, nested, pl.from_pandas(pyterrier), to_ranx(QRELS), to_ir_measures(QRELS)):
        assert qrels_frame(shape).sort("qid", "doc_id").equals(QRELS), type(shape)
    with pytest.raises(InputError, match="grades must be integers"):
        qrels_frame(pd.DataFrame({"qid": ["1"], "docno": ["a"], "label": ["high"]}))


def test_fractional_grades_are_an_error_not_truncated():
    # A cast would make 0.5 -> 0 and 2.7 -> 2 silently; read_qrels rejects such grades in files too.
    with pytest.raises(InputError, match=r"column 'label': relevance grade 0\.5 \(query 'q', document 'a'\) is not an integer"):
        qrels_frame(pd.DataFrame({"qid": ["q"] * 2, "docno": ["a", "b"], "label": [0.5, 2.7]}))
    with pytest.raises(InputError, match=r"column 'score': relevance grade 2\.7"):
        qrels_frame(pl.DataFrame({"query-id": ["q"] * 2, "corpus-id": ["a", "b"], "score": [1.0, 2.7]}))
    with pytest.raises(InputError, match=r"relevance grade 1\.5"):
        qrels_frame({"q": {"a": 1.5}})
    with pytest.raises(InputError, match=r"column 'label': relevance grade None"):  # pandas NaN: a missing grade
        qrels_frame(pd.DataFrame({"qid": ["q"], "docno": ["a"], "label": [float("nan")]}))
    ok = qrels_frame(pd.DataFrame({"qid": ["q"] * 2, "docno": ["a", "b"], "label": [1.0, 2.0]}))
    assert ok["rel"].dtype == pl.Int64 and ok["rel"].to_list() == [1, 2]
    assert qrels_frame({"q": {"a": 2.0, "b": 0}})["rel"].to_list() == [2, 0]


@pytest.mark.parametrize(
    "qrels",
    [pd.DataFrame({"qid": ["1", "1", "2", "2"], "docno": ["a", "b", "c", "d"], "label": [2, 0, 1, 1]}),  # PyTerrier
     pl.DataFrame({"query-id": ["1", "1", "2", "2"], "corpus-id": ["a", "b", "c", "d"], "score": [2, 0, 1, 1]}),  # BEIR
     pd.DataFrame({"query-id": ["1", "1", "2", "2"], "corpus-id": ["a", "b", "c", "d"], "score": [2, 0, 1, 1]}),
     pd.DataFrame({"query_id": ["1", "1", "2", "2"], "doc_id": ["a", "b", "c", "d"], "relevance": [2, 0, 1, 1]}),
     QRELS],
)
def test_qrels_in_any_tool_shape_convert_to_qrels_objects(qrels):
    import ir_measures
    import ranx

    rq = to_ranx(qrels)
    assert isinstance(rq, ranx.Qrels) and rq.to_dict() == {"1": {"a": 2, "b": 0}, "2": {"c": 1, "d": 1}}
    got = to_ir_measures(qrels)
    assert all(isinstance(x, ir_measures.Qrel) for x in got)
    assert sorted((x.query_id, x.doc_id, x.relevance) for x in got) == sorted(QRELS.iter_rows())


def test_run_or_qrels_by_columns_and_kind_override():
    import ir_measures
    import ranx

    # A frame with a rank column is a run, whatever its id names; PyTerrier runs (qid, docno, score) too.
    beir_named_run = RUN.rename({"qid": "query-id", "doc_id": "corpus-id"})
    assert isinstance(to_ranx(beir_named_run), ranx.Run)
    pt_run = RUN.drop("rank").rename({"doc_id": "docno"}).to_pandas()
    assert isinstance(to_ranx(pt_run), ranx.Run) and isinstance(to_ir_measures(pt_run)[0], ir_measures.ScoredDoc)
    # ranx-style qrels (q_id, doc_id, score) read as a run unless told.
    ranx_qrels = pl.DataFrame({"q_id": ["1"], "doc_id": ["a"], "score": [2]})
    assert isinstance(to_ranx(ranx_qrels), ranx.Run)
    assert to_ranx(ranx_qrels, kind="qrels").to_dict() == {"1": {"a": 2}}
    assert to_ir_measures({"1": {"a": 2}}, kind="qrels") == [ir_measures.Qrel("1", "a", 2)]
    assert isinstance(to_ranx(to_ranx(QRELS)), ranx.Qrels) and isinstance(to_ranx(to_ranx(RUN)), ranx.Run)
    with pytest.raises(InputError, match="kind 'judgements'"):
        to_ranx(QRELS, kind="judgements")


def test_runs_round_trip_through_ranx_and_ir_measures_and_score_the_same():
    import ir_measures
    import ranx

    for shape in (to_ranx(RUN), to_ir_measures(RUN), RUN.drop("rank").to_pandas().rename(columns={"doc_id": "docno"})):
        got = run_frame(shape).sort("qid", "rank")
        assert got.select("qid", "doc_id", "rank").equals(RUN.select("qid", "doc_id", "rank")), type(shape)
    ours = aggregate(evaluate(RUN, QRELS, ["nDCG@10", "recip_rank", "map", "P_2"]))
    irm = ir_measures.calc_aggregate([ir_measures.nDCG @ 10, ir_measures.RR, ir_measures.AP, ir_measures.P @ 2],
                                     to_ir_measures(QRELS), to_ir_measures(RUN))
    assert ours["nDCG@10"] == pytest.approx(irm[ir_measures.nDCG @ 10])
    assert ours["recip_rank"] == pytest.approx(irm[ir_measures.RR])
    assert ours["map"] == pytest.approx(irm[ir_measures.AP])
    assert ours["P_2"] == pytest.approx(irm[ir_measures.P @ 2])
    rx = ranx.evaluate(to_ranx(QRELS), to_ranx(RUN), ["ndcg@10", "mrr"])
    assert ours["nDCG@10"] == pytest.approx(rx["ndcg@10"]) and ours["recip_rank"] == pytest.approx(rx["mrr"])


def test_pandas_exports_use_each_tool_names():
    assert list(to_pandas(QRELS, "pyterrier").columns) == ["qid", "docno", "label"]
    assert list(to_pandas(QRELS, "ir_measures").columns) == ["query_id", "doc_id", "relevance"]
    assert list(to_pandas(QRELS, "beir").columns) == ["query-id", "corpus-id", "score"]


def test_trec_eval_names_parse_to_the_same_measures():
    pairs = {"ndcg_cut_10": ("ndcg", 10), "recip_rank": ("rr", None), "map": ("ap", None), "P_5": ("precision", 5),
             "recall_100": ("recall", 100), "map_cut_10": ("ap", 10), "success_1": ("success", 1), "Rprec": ("rprec", None),
             "ndcg": ("ndcg", None)}
    for name, (kind, k) in pairs.items():
        m = parse_measure(name)
        assert (m.label, m.kind, m.k) == (name, kind, k)
    ours = aggregate(evaluate(RUN, QRELS, ["ndcg_cut_10", "nDCG@10", "P_2", "P@2"]))
    assert ours["ndcg_cut_10"] == ours["nDCG@10"] and ours["P_2"] == ours["P@2"]
    with pytest.raises(InputError, match="trec_eval names"):
        parse_measure("bpref")


def test_ir_measures_measure_objects_parse_by_their_name():
    import ir_measures as irm

    pairs = {irm.nDCG @ 10: ("nDCG@10", "ndcg", 10), irm.P @ 5: ("P@5", "precision", 5), irm.AP: ("AP", "ap", None),
             irm.RR: ("RR", "rr", None), irm.R @ 100: ("R@100", "recall", 100), irm.RR @ 10: ("RR@10", "rr", 10),
             irm.Success @ 1: ("Success@1", "success", 1), irm.Rprec: ("Rprec", "rprec", None)}
    for obj, want in pairs.items():
        m = parse_measure(obj)
        assert (m.label, m.kind, m.k) == want
    # Scored by the object, the numbers are ir_measures' own.
    ours = aggregate(evaluate(RUN, QRELS, [irm.nDCG @ 10, irm.AP]))
    ref = irm.calc_aggregate([irm.nDCG @ 10, irm.AP], to_ir_measures(QRELS), to_ir_measures(RUN))
    assert ours["nDCG@10"] == pytest.approx(ref[irm.nDCG @ 10]) and ours["AP"] == pytest.approx(ref[irm.AP])
    assert list(aggregate(evaluate(RUN, QRELS, irm.nDCG @ 10))) == ["nDCG@10"]  # one object, not in a list
    with pytest.raises(InputError, match=r"P\(rel=2\)@5.*parameters are not supported; write P@5 and pass rel_threshold="):
        parse_measure(irm.P(rel=2) @ 5)


def _npl_tar() -> bytes:
    """A tiny collection in the layout of ir_datasets' `vaswani` source archive (npl.tar.gz)."""
    files = {
        "doc-text": "1\ncompact memories\n   /\n2\nfast switching\n   /\n",
        "query-text": "1\nmemory devices\n/\n2\nswitching speed\n/\n",
        "rlv-ass": "1\n1\n   /\n2\n2\n   /\n",
    }
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode()
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _in_subprocess(home: Path, code: str) -> subprocess.CompletedProcess:
    # ir_datasets reads IR_DATASETS_HOME when it is imported: a fresh interpreter per cache.
    env = dict(os.environ, IR_DATASETS_HOME=str(home), PYTHONPATH=str(Path(__file__).resolve().parents[1]))
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, env=env, timeout=120)


def test_ir_datasets_ids_from_the_local_cache_and_a_clear_error_otherwise(tmp_path):
    pytest.importorskip("ir_datasets")
    cached = tmp_path / "home"
    (cached / "vaswani").mkdir(parents=True)
    (cached / "vaswani" / "npl.tar.gz").write_bytes(_npl_tar())
    got = _in_subprocess(cached, """
        from toolkit.interop import from_ir_datasets
        from toolkit.interop import qrels_frame, queries_frame
        q, qrels = from_ir_datasets("vaswani")
        assert queries_frame("irds:vaswani").equals(q) and qrels_frame("irds:vaswani").equals(qrels)
        print(q["qid"].to_list(), [t.strip() for t in q["text"].to_list()], qrels.sort("qid").rows())
    """)
    assert got.returncode == 0, got.stderr
    assert got.stdout.strip() == "['1', '2'] ['memory devices', 'switching speed'] [('1', '1', 1), ('2', '2', 1)]"
    empty = _in_subprocess(tmp_path / "empty", """
        from toolkit.interop import from_ir_datasets
        from toolkit.errors import InputError
        try:
            from_ir_datasets("vaswani")
        except InputError as e:
            print("ERR", e)
    """)
    assert empty.returncode == 0, empty.stderr
    assert "not in the local ir_datasets cache" in empty.stdout and "does not download" in empty.stdout
    assert not any((tmp_path / "empty").rglob("npl.tar.gz"))  # nothing was fetched
    # The sentence alone (user trial Y: ir_datasets wrapped it in a 750-character repr of its download sources,
    # after one "[WARNING] Download failed" line per source).
    assert "All download sources failed" not in empty.stdout and "Download failed" not in empty.stderr
