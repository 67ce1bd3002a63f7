"""toolkit.experiment: a PyTerrier-style comparison in one call, each expensive stage run once per prepare
key, the notebook API re-exported from `toolkit`, and the tuner on in-memory queries."""

from __future__ import annotations

import importlib
import json
import subprocess
import sys
from pathlib import Path

import pandas as pd
import polars as pl
import pytest
from conftest import DOCS

import toolkit
from toolkit.compare import compare
from toolkit.config import load_config
from toolkit.errors import InputError
from toolkit.experiment import group_by_prepare
from toolkit.loaders import load_corpus
from toolkit.metrics import IdMismatchWarning, evaluate
from toolkit.pipeline import prepare, run_pipeline

# PyTerrier column names, in pandas.
TOPICS = pd.DataFrame({"qid": ["q1", "q2", "q3", "q4"], "query": [
    "deploy fails with ECONNREFUSED", "what did we decide about retries", "back off when the limit is hit",
    "which SDK version is pinned"]})
QRELS = pd.DataFrame({"qid": ["q1", "q2", "q3", "q4"], "docno": ["d1", "d2", "d6", "d5"], "label": [1, 1, 1, 1]})
MEASURES = ["nDCG@10", "recip_rank", "P_1"]


@pytest.fixture(scope="module")
def store(tmp_path_factory, embedder):
    d = tmp_path_factory.mktemp("exp")
    corpus = d / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(x) + "\n" for x in DOCS))
    st = toolkit.Store(d / "e.duckdb", embedder=embedder)
    st.ingest(load_corpus(corpus))
    yield st
    st.close()


def test_experiment_matches_the_hand_loop_and_prepares_once_per_key(store, monkeypatch):
    configs = {"bm25": "bm25-only", "rrf": "hybrid-rrf",
               "rrf-lex0": load_config("hybrid-rrf").with_updates({"fusion.lexical_weight": 0.0})}
    groups = group_by_prepare(store, TOPICS, configs)
    assert sorted(map(sorted, groups.values())) == [["bm25"], ["rrf", "rrf-lex0"]]  # fusion is not a prepare field
    calls = []
    ex_mod = sys.modules["toolkit.experiment"]  # `toolkit.experiment` is the function
    real = ex_mod.prepare
    monkeypatch.setattr(ex_mod, "prepare", lambda *a, **k: calls.append(a[2].name) or real(*a, **k))
    out = toolkit.experiment(store, TOPICS, QRELS, configs, MEASURES, baseline="bm25")
    assert len(calls) == 2  # one prepare per key, not per config
    assert out["name"].to_list() == ["bm25", "rrf", "rrf-lex0"]
    assert {"nDCG@10", "recip_rank delta", "P_1 +", "P_1 =", "P_1 -", "nDCG@10 p-value",
            "nDCG@10 p-value corrected", "nDCG@10 reject"} <= set(out.columns)

    # The same numbers by hand: run each config, evaluate, compare.
    qrels = pl.from_pandas(QRELS).rename({"docno": "doc_id", "label": "rel"})
    queries = pl.from_pandas(TOPICS).rename({"query": "text"})
    pq = pl.concat([
        evaluate(run_pipeline(store, queries, load_config(c)).run(), qrels, MEASURES).select(pl.lit(n).alias("system"), "qid", "measure", "value")
        for n, c in configs.items()
    ])
    ref = compare(pq, "bm25")
    for name in ("rrf", "rrf-lex0"):
        row = out.filter(pl.col("name") == name).row(0, named=True)
        r = ref.filter((pl.col("system") == name) & (pl.col("measure") == "recip_rank")).row(0, named=True)
        assert row["recip_rank"] == pytest.approx(r["mean"]) and row["recip_rank delta"] == pytest.approx(r["delta"])
        assert (row["recip_rank +"], row["recip_rank ="], row["recip_rank -"]) == (r["wins"], r["ties"], r["losses"])
        assert row["recip_rank p-value corrected"] == pytest.approx(r["p_holm"])
        assert (row["recip_rank ci low"], row["recip_rank ci high"]) == pytest.approx((r["ci_low"], r["ci_high"]))
    base = out.filter(pl.col("name") == "bm25").row(0, named=True)
    assert base["nDCG@10 delta"] == 0.0 and base["nDCG@10 p-value"] is None


def test_experiment_options_and_errors(store):
    configs = ["bm25-only", "hybrid-rrf"]
    plain = toolkit.experiment(store, TOPICS, QRELS, configs, "nDCG@10")
    assert plain.columns == ["name", "nDCG@10"] and plain["name"].to_list() == ["bm25-only", "hybrid-rrf"]
    none = toolkit.experiment(store, TOPICS, QRELS, configs, "nDCG@10", baseline=0, correction="none")
    assert none["nDCG@10 p-value corrected"].to_list() == none["nDCG@10 p-value"].to_list()
    pq = toolkit.experiment(store, TOPICS, QRELS, configs, "nDCG@10", per_query=True)
    assert pq.columns == ["name", "qid", "measure", "value"] and pq.height == 8
    with pytest.raises(InputError, match="baseline 'nope'"):
        toolkit.experiment(store, TOPICS, QRELS, configs, "nDCG@10", baseline="nope")
    with pytest.raises(InputError, match="correction"):
        toolkit.experiment(store, TOPICS, QRELS, configs, "nDCG@10", baseline=0, correction="fdr")
    with pytest.raises(InputError, match="two systems named"):
        toolkit.experiment(store, TOPICS, QRELS, ["bm25-only", "bm25-only"], "nDCG@10")
    # Grade-1 judgements are not relevant at threshold 2 (TREC DL): binary measures drop to 0, nDCG stays.
    one, two = (toolkit.experiment(store, TOPICS, QRELS, configs, ["P@5", "nDCG@10"], rel_threshold=t) for t in (1, 2))
    assert one["P@5"].sum() > 0 and two["P@5"].sum() == 0 and two["nDCG@10"].to_list() == one["nDCG@10"].to_list()


def test_experiment_warns_when_judged_documents_are_not_in_the_store(store):
    import warnings

    renamed = QRELS.assign(docno=QRELS["docno"] + ".md")  # ids that are not the store's: silent zeros before
    with pytest.warns(IdMismatchWarning, match=r"4 of 4 judged documents are not in the store \(e\.g\. 'd1\.md'\).*every value is 0"):
        out = toolkit.experiment(store, TOPICS, renamed, ["bm25-only"], ["nDCG@10"])
    assert out["nDCG@10"].to_list() == [0.0]
    one_off = QRELS.assign(docno=["d1", "d2", "d6", "nope"])
    with pytest.warns(IdMismatchWarning, match=r"1 of 4 judged documents are not in the store \(e\.g\. 'nope'\); no system can retrieve them, so they count as misses$"):
        toolkit.experiment(store, TOPICS, one_off, ["bm25-only"], ["nDCG@10"])
    with warnings.catch_warnings():
        warnings.simplefilter("error", IdMismatchWarning)  # every judged document is stored: no warning
        toolkit.experiment(store, TOPICS, QRELS, ["bm25-only"], ["nDCG@10"])


def test_experiment_per_query_feeds_compare_and_takes_ir_measures_objects(store):
    import ir_measures

    configs = {"bm25": "bm25-only", "rrf": "hybrid-rrf"}
    pq = toolkit.experiment(store, TOPICS, QRELS, configs, [ir_measures.nDCG @ 10, ir_measures.RR], per_query=True)
    assert pq["measure"].unique(maintain_order=True).to_list() == ["nDCG@10", "RR"]
    got = toolkit.compare(pq, "bm25")  # as the docstring says: experiment's per-query frame is compare's input
    assert got["system"].to_list() == ["rrf", "rrf"] and got["measure"].to_list() == ["nDCG@10", "RR"]
    assert got.equals(toolkit.compare(pq.rename({"name": "system"}).to_pandas(), "bm25"))
    table = toolkit.experiment(store, TOPICS, QRELS, configs, [ir_measures.nDCG @ 10, ir_measures.RR], baseline="bm25")
    row = table.filter(pl.col("name") == "rrf").row(0, named=True)
    ref = got.filter(pl.col("measure") == "RR").row(0, named=True)
    assert row["RR"] == pytest.approx(ref["mean"]) and row["RR delta"] == pytest.approx(ref["delta"])


def test_tune_on_in_memory_frames_and_prepared(store):
    space = {"fusion.lexical_weight": [0.0, 1.0, 2.0]}
    best, rep = toolkit.tune(store, TOPICS, QRELS, base="hybrid-rrf", space=space, method="grid", folds=2,
                             progress=False, anchors=False)
    assert rep.trials == 3 and "in-memory queries (labelled 'dev')" in best.description
    queries = toolkit.queries_frame(TOPICS)
    prep = prepare(store, queries, load_config("hybrid-rrf"))
    best2, rep2 = toolkit.tune(store, queries, QRELS, base="hybrid-rrf", space=space, method="grid", folds=2,
                               prepared=prep, progress=False, anchors=False)
    assert best2 == best and rep2.history == rep.history
    with pytest.raises(InputError, match="were not prepared"):
        toolkit.tune(store, queries, QRELS, base="hybrid-rrf", space=space, folds=2, progress=False,
                     prepared=prepare(store, queries.head(2), load_config("hybrid-rrf")))


def test_package_exports_the_notebook_api_lazily():
    assert set(toolkit.__all__) == {"__version__", *toolkit._EXPORTS}
    for name in toolkit.__all__:
        assert getattr(toolkit, name) is not None
    importlib.import_module("toolkit.tune")  # importing the module keeps the function as the package attribute
    assert callable(toolkit.tune) and toolkit.tune.__name__ == "tune"
    code = "import sys, toolkit; print(sorted(m for m in ('polars', 'duckdb', 'torch', 'ipywidgets') if m in sys.modules))"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                         cwd=Path(__file__).resolve().parents[1]).stdout
    assert out.strip() == "[]"
