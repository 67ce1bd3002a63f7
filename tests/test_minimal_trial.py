"""User trial AY: the minimalist. Tiny and degenerate inputs (one query, two queries that moved alike, a
threshold nothing reaches, byte-identical documents, judgements with no relevant document) get an honest
number or one clear line, never p = 0 from two queries, a printed NaN, or a silently unchanged run."""

from __future__ import annotations

import json
import math

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import DOCS, write_beir

from toolkit import panels
from toolkit.cli import main
from toolkit.compare import compare, ttest
from toolkit.config import load_config
from toolkit.errors import InputError
from toolkit.loaders import load_corpus
from toolkit.pipeline import run_pipeline
from toolkit.session import Session
from toolkit.store import Store
from toolkit.tune import tune


@pytest.fixture(scope="module")
def tiny(tmp_path_factory):
    """`conftest.write_beir`'s folder of the six DOCS and three queries, judged in the dev split (what tune and
    train_fusion read)."""
    d = tmp_path_factory.mktemp("tiny")
    (d / "corpus.jsonl").write_text("".join(json.dumps(x) + "\n" for x in DOCS))
    root = write_beir(d / "beir", d / "corpus.jsonl", scoped=False)
    (root / "qrels" / "test.tsv").rename(root / "qrels" / "dev.tsv")
    return root


@pytest.fixture(scope="module")
def store(tiny, tmp_path_factory, embedder):
    with Store(tmp_path_factory.mktemp("st") / "tiny.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(tiny))
        yield st


def test_two_queries_that_moved_alike_are_not_significant():
    """Equal differences made t infinite and the t-test's p 0: "significant" from two queries."""
    assert ttest(np.array([0.5, 0.5])) == 0.5  # the exact sign-flip p: 2 of 4 assignments as extreme
    assert ttest(np.full(10, -0.1)) == pytest.approx(2 / 1024)
    assert math.isnan(ttest(np.array([0.3])))  # one query: no test
    per_query = pl.DataFrame({"system": ["a"] * 2 + ["b"] * 2, "qid": ["1", "2"] * 2, "measure": "R@5",
                              "value": [1.0, 1.0, 0.5, 0.5]})
    with pytest.warns(UserWarning):  # the small-sample caveat
        row = compare(per_query, "a", test="ttest").row(0, named=True)
    assert row["p_value"] == 0.5 and not row["significant"]


def test_one_query_shows_no_p_value_rather_than_nan(store):
    # BM25 holds only d6 for this query; the dense list puts d2 above it (tests/test_lab.py): without the lexical
    # list the relevant document drops, so the one query's difference is not 0 and no test can run.
    s = Session(store, pl.DataFrame({"qid": ["q1"], "text": ["back off when the limit is hit"]}),
                pl.DataFrame({"qid": ["q1"], "doc_id": ["d6"], "rel": [1]}), config="hybrid-rrf", measures=["MRR@10"])
    assert s.set("fusion.lexical_weight", 0.0)
    assert s.deltas["delta"][0] < 0
    assert math.isnan(s.deltas["p_value"][0])
    assert "nan" not in repr(s) and ", p n/a)" in repr(s)
    assert "nan" not in s._repr_html_() and "<td>n/a</td>" in s._repr_html_()
    fig = panels.metrics_figure(s.deltas)
    assert "paired t-test p = n/a" in fig.data[1].hovertext[0]


def test_identical_documents_keep_equal_scores_under_convex_minmax(tmp_path, embedder):
    """Rank normalisation of a list with no spread turned four copies into 1.0 / 0.75 / 0.5 / 0.25 and hid the
    "scores barely differ" note."""
    docs = [{"_id": f"c{i}", "text": "identical text about servers"} for i in range(4)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    with Store(tmp_path / "c.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(tmp_path / "c.jsonl"))
        for norm in ("minmax", "zscore"):
            cfg = load_config("hybrid-rrf").with_updates({"fusion.method": "convex", "fusion.normalization": norm})
            res = run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["servers"]}), cfg)
            assert res.final["score"].n_unique() == 1 or res.final["score"].max() - res.final["score"].min() < 1e-9
            assert res.per_query["low_differentiation"].to_list() == [True]


def test_a_threshold_nothing_reaches_is_said_by_run_and_report(tiny, tmp_path):
    """A query keeps its whole list when nothing passes: a run with min_score 1000 equalled the run without it,
    and only `hrt search` said so."""
    (tmp_path / "hi.yaml").write_text("extends: bm25-only\nthreshold: {min_score: 1000}\n")
    r = CliRunner().invoke(main, ["run", "--dataset", str(tiny), "--split", "dev", "--store", str(tmp_path / "s.duckdb"),
                                  "--config", str(tmp_path / "hi.yaml"), "--out", str(tmp_path / "hi.trec")])
    assert r.exit_code == 0, r.output
    assert ("note: no result of any query reached threshold.min_score 1000; a query keeps its whole list when nothing "
            "passes (flagged low_confidence), so there the threshold removed nothing") in r.output
    r = CliRunner().invoke(main, ["run", "--dataset", str(tiny), "--split", "dev", "--store", str(tmp_path / "s.duckdb"),
                                  "--config", "bm25-only", "--out", str(tmp_path / "plain.trec")])
    assert r.exit_code == 0 and "threshold.min_score" not in r.output

    from toolkit.loaders import Dataset
    from toolkit.report import build_report

    ds = Dataset.open(tiny)
    with Store(tmp_path / "s.duckdb") as st, pytest.warns(UserWarning) as caught:
        rep = build_report(st, ds.queries("dev"), ds.qrels("dev"), {"bm25": "bm25-only", "hi": str(tmp_path / "hi.yaml")},
                           baseline="bm25", latency_sample=0)
    assert any(n.startswith("hi: no result of any query reached threshold.min_score 1000") for n in rep.notes)
    assert not any(n.startswith("bm25:") for n in rep.notes)
    assert any("hi: no result of any query" in str(w.message) for w in caught)


def test_tuning_refuses_one_query_and_judgements_without_a_relevant_document(store):
    q = pl.DataFrame({"qid": ["q1", "q2"], "text": ["deploy fails with ECONNREFUSED", "which SDK version is pinned"]})
    # (a base that reads fusion.rrf_k: the learned `default` does not, and says so first)
    with pytest.raises(InputError, match=r"^1 judged dev query: tuning cross-validates over folds of queries and needs at least 2"):
        tune(store, q, pl.DataFrame({"qid": ["q1"], "doc_id": ["d1"], "rel": [1]}), space={"fusion.rrf_k": [30, 60]}, base="guarded-rrf",
             method="grid")
    with pytest.raises(InputError, match=r"folds=5: need 2 <= folds <= 2 .*e\.g\. folds=2"):
        tune(store, q, pl.DataFrame({"qid": ["q1", "q2"], "doc_id": ["d1", "d5"], "rel": [1, 1]}),
             space={"fusion.rrf_k": [30, 60]}, base="guarded-rrf", method="grid")
    zero = pl.DataFrame({"qid": ["q1", "q2"], "doc_id": ["d1", "d5"], "rel": [0, 0]})
    with pytest.raises(InputError, match=r"no judged dev query has a document graded >= 1 .*nothing to tune on"):
        tune(store, q, zero, space={"fusion.rrf_k": [30, 60]}, base="guarded-rrf", method="grid", folds=2)
    # Graded 1 while binary measures count from 2: R@5 is 0 everywhere; nDCG still sees the grade.
    ones = zero.with_columns(pl.lit(1).alias("rel"))
    with pytest.raises(InputError, match=r"graded >= 2"):
        tune(store, q, ones, space={"fusion.rrf_k": [30, 60]}, base="guarded-rrf", method="grid", folds=2, measure="R@5", rel_threshold=2)


def _search(store_path, *args):
    return CliRunner().invoke(main, ["search", *args, "--store", str(store_path)])


def test_a_search_that_finds_nothing_says_why(tmp_path, tiny):
    st = tmp_path / "s.duckdb"
    assert CliRunner().invoke(main, ["ingest", str(tiny / "corpus.jsonl"), "--store", str(st), "--no-embed"]).exit_code == 0
    r = _search(st, "the of and", "--mode", "lexical")  # stopwords only: nothing is indexed of it
    assert r.stdout.strip() == "no results"
    assert "note: BM25 found no document holding any of the query's indexed words (stopwords and symbols are not indexed)" in r.stderr
    (tmp_path / "k1.yaml").write_text("extends: bm25-only\nretrieval: {lexical: {top_k: 1}}\n")
    r = _search(st, "deploy version pinned", "--config", str(tmp_path / "k1.yaml"), "-n", "3")
    assert r.stdout.startswith("1. ") and "\n2. " not in r.stdout
    assert "note: 1 result(s) of the 3 asked: the retrieval lists stop at top_k 1" in r.stderr
    assert CliRunner().invoke(main, ["delete", *[d["_id"] for d in DOCS], "--store", str(st)]).exit_code == 0
    r = _search(st, "deploy", "--mode", "lexical")
    assert r.stdout.strip() == "no results" and f"note: {st} holds no documents (`hrt ingest` adds them)" in r.stderr


def test_train_fusion_names_a_source_of_the_wrong_shape(store, tiny, tmp_path):
    from toolkit.train_fusion import train_fusion

    with pytest.raises(InputError, match=r"sources\[0\] is \(Store, PosixPath\); expected \(store, dataset folder, rel threshold\)"):
        train_fusion([(store, tiny)], tmp_path / "m.json")
    with pytest.raises(InputError, match=r"sources\[0\] is \(PosixPath, Store, int\)"):
        train_fusion([(tiny, store, 1)], tmp_path / "m.json")
    with pytest.raises(InputError, match=r"sources must be a list"):
        train_fusion((store, tiny, 1), tmp_path / "m.json")


def test_a_fusion_model_that_learned_nothing_says_so(store, tiny, tmp_path):
    from toolkit.train_fusion import train_fusion

    rep = train_fusion([(store, tiny, 1)], tmp_path / "m.json", holdout=0.0, force=True)
    assert all(v == 0 for v in rep.importance.values())  # three queries, one relevant document each: no split pays
    assert any(n.startswith("no tree found a split") for n in rep.notes)
    assert "no tree found a split" in rep.summary()
