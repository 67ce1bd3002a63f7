"""The tuner: folds, search, refusals, and a saved config that reproduces its score."""

from __future__ import annotations

import json

import numpy as np
import pytest

from toolkit.config import load_config
from toolkit.errors import InputError
from toolkit.loaders import Dataset, load_corpus
from toolkit.metrics import aggregate, evaluate
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store
from toolkit.tune import make_folds, tune


@pytest.fixture
def dataset(tmp_path, corpus_file):
    root = tmp_path / "ds"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(corpus_file.read_text())
    qs = [
        ("q1", "deploy fails with ECONNREFUSED", "d1"), ("q2", "how long to wait between retries", "d2"),
        ("q3", "which SDK version is pinned", "d5"), ("q4", "rate limit from stripe", "d6"),
        ("q5", "database pool size in production", "d3"), ("q6", "when is the team lunch", "d4"),
    ]
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t, "metadata": {"k": q[-1] in "135"}}) + "\n" for q, t, _ in qs))
    (root / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\t{d}\t1\n" for q, _, d in qs))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    return root


def test_folds_partition_and_stratify():
    qids = [f"q{i}" for i in range(23)]
    fold = make_folds(qids, 5, seed=1, groups=["a" if i % 3 else "b" for i in range(23)])
    assert sorted(set(fold)) == [0, 1, 2, 3, 4]
    assert np.bincount(fold).max() - np.bincount(fold).min() <= 1
    b = [fold[i] for i in range(23) if i % 3 == 0]
    assert len(set(b)) == min(5, len(b))  # the small group is spread over folds


def test_grid_finds_best_and_saved_config_reproduces(tmp_path, dataset, embedder):
    with Store(tmp_path / "t.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(dataset))
        space = {"fusion.lexical_weight": [0.1, 1.0, 5.0]}
        best, rep = tune(st, dataset, base="hybrid-rrf", space=space, method="grid", budget=10, folds=3, out=tmp_path / "best.yaml", progress=False)
        assert rep.trials == 3 and rep.best_dev == max(h["score"] for h in rep.history)
        assert rep.best_dev >= rep.base_dev
        loaded = load_config(tmp_path / "best.yaml")
        assert loaded == best
        ds = Dataset.open(dataset)
        q = ds.queries("dev")
        score = aggregate(evaluate(rescore(prepare(st, q, loaded), loaded).run(), ds.qrels("dev"), ["nDCG@10"]))["nDCG@10"]
        assert score == pytest.approx(rep.best_dev)
        assert json.loads((tmp_path / "best.report.json").read_text())["trials"] == 3


def test_refusals(tmp_path, dataset, embedder):
    with Store(tmp_path / "t.duckdb", embedder=embedder) as st:
        with pytest.raises(InputError, match="test split"):
            tune(st, dataset, split="test", progress=False)
        with pytest.raises(InputError, match=r"retrieval.dense.top_k: changes the cached"):
            tune(st, dataset, space={"retrieval.dense.top_k": [10, 20]}, progress=False)
        with pytest.raises(InputError, match="fusion.no_such"):
            tune(st, dataset, space={"fusion.no_such": [1, 2]}, progress=False)
