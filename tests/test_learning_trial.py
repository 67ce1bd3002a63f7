"""User trial M: an ML engineer training the learned fusion on their own judgements, who must not fool
themselves (test data in training, in-sample scores called results) nor lose their store. Each test is a
defect as the trial met it."""

from __future__ import annotations

import json
import warnings

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

import toolkit
from toolkit.cli import main
from toolkit.config import load_config, save_config
from toolkit.errors import InputError
from toolkit.learned_fusion import FusionModel, score
from toolkit.store import Store

QUERIES = {"q1": "deploy fails with ECONNREFUSED", "q2": "how long do we back off between retries",
           "q3": "which SDK version is pinned", "q4": "HTTP 429 rate limit"}
DEV = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td5\t1\nq4\td6\t1\n"


@pytest.fixture
def dataset(tmp_path, corpus_file):
    root = tmp_path / "mine"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(corpus_file.read_text())
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.items()))
    (root / "qrels" / "dev.tsv").write_text(DEV)
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq4\td6\t1\n")
    return root


def _cli(*args: str):
    return CliRunner().invoke(main, list(args))


def _train(dataset, store, out, *extra: str):
    return _cli("train-fusion", "--dataset", str(dataset), "--store", str(store), "--out", str(out), "--rounds", "5", *extra)


def test_an_out_naming_the_store_is_refused_and_the_store_kept(tmp_path, dataset):
    """`hrt train-fusion --out s.duckdb` (and `hrt run --out s.duckdb`) replaced the store with a model (a TREC
    file), exit 0."""
    (dataset / "qrels" / "test.tsv").unlink()
    store = tmp_path / "s.duckdb"
    assert _cli("ingest", str(dataset), "--store", str(store), "--no-embed").exit_code == 0
    size = store.stat().st_size
    r = _train(dataset, store, store)
    assert r.exit_code == 2 and "would replace the store" in r.output
    r = _cli("run", "--dataset", str(dataset), "--split", "dev", "--store", str(store), "--mode", "lexical", "--out", str(store))
    assert r.exit_code == 2 and "would replace the store" in r.output
    other = tmp_path / "other.duckdb"
    other.write_bytes(store.read_bytes())  # another store: also a DuckDB database, also refused
    r = _cli("run", "--dataset", str(dataset), "--split", "dev", "--store", str(store), "--mode", "lexical", "--out", str(other))
    assert r.exit_code == 2 and "is a DuckDB database" in r.output
    assert store.stat().st_size == size
    with Store(store, read_only=True) as st:
        assert len(st.doc_sources()) == 6


def test_the_test_split_cannot_be_reached_by_another_name_nor_through_dev(tmp_path, dataset):
    store = tmp_path / "s.duckdb"
    r = _train(dataset, store, tmp_path / "m.json", "--split", "./test")  # trained on test qrels before
    assert r.exit_code == 2 and "split './test'" in r.output
    r = _train(dataset, store, tmp_path / "m.json")  # dev holds q4, a test query
    assert r.exit_code == 2 and "also judged in test" in r.output and "training on dev is training on test" in r.output
    assert not (tmp_path / "m.json").exists()


def test_a_model_says_what_it_was_trained_on_and_in_sample_scores_are_called_so(tmp_path, dataset):
    (dataset / "qrels" / "test.tsv").unlink()
    store, out = tmp_path / "s.duckdb", tmp_path / "m.json"
    r = _train(dataset, store, out)
    assert r.exit_code == 0, r.output
    info = json.loads(out.read_text())["info"]
    rec = info["trained_on"]["mine"]
    assert rec["split"] == "dev" and rec["qids"] == ["q1", "q2", "q3", "q4"] and rec["store"]["chunk_size"] == 1000
    assert info["settings"]["retrieval.lexical.top_k"] == 100
    cfg = tmp_path / "learned.yaml"
    save_config(load_config("learned").with_updates({"fusion.model": str(out)}), cfg)
    r = _cli("run", "--dataset", str(dataset), "--split", "dev", "--store", str(store), "--config", str(cfg), "--out", str(tmp_path / "r.trec"))
    assert r.exit_code == 0 and "was trained on 4 of these 4 queries (mine/dev)" in r.output and "in-sample" in r.output
    # Tuning with it as the base would score it on its own training queries as "held-out": refused.
    r = _cli("tune", "--dataset", str(dataset), "--split", "dev", "--store", str(store), "--base", str(cfg), "--budget", "2",
             "--folds", "2", "--out", str(tmp_path / "t.yaml"))
    assert r.exit_code == 2 and "trained on 4 of the 4 dev queries" in r.stderr
    # The shipped model lists the dev queries of each collection it learned from: the demo's are in-sample for it.
    from toolkit.learned_fusion import training_overlap

    assert training_overlap(None, "demo", "dev", ["q02", "q04", "x"]) == (2, "demo/dev")
    assert training_overlap(None, "demo", "test", ["x"])[0] == 0


def test_training_on_test_with_force_warns_and_is_recorded(tmp_path, dataset):
    (dataset / "qrels" / "dev.tsv").write_text(DEV.replace("q4\td6\t1\n", ""))
    (dataset / "qrels" / "test.tsv").write_text(DEV)
    out = tmp_path / "t.json"
    r = _train(dataset, tmp_path / "s.duckdb", out, "--split", "test", "--force", "--holdout", "0")
    assert r.exit_code == 0, r.output
    assert "warning: training on the test split" in r.stderr
    assert json.loads(out.read_text())["info"]["trained_on"]["mine"]["split"] == "test"


def test_too_few_judged_queries_are_refused_with_the_reason(tmp_path, dataset):
    (dataset / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\n")
    (dataset / "qrels" / "test.tsv").unlink()
    r = _train(dataset, tmp_path / "s.duckdb", tmp_path / "m.json", "--holdout", "0.2")
    assert r.exit_code == 2 and "only 1 judged queries" in r.output and not (tmp_path / "m.json").exists()


def test_stdout_carries_the_summary_only_and_train_fusion_is_public(tmp_path, dataset):
    (dataset / "qrels" / "test.tsv").unlink()
    r = _train(dataset, tmp_path / "s.duckdb", tmp_path / "m.json")
    assert r.exit_code == 0 and r.stdout.startswith("learned fusion: ") and "Training until" not in r.stdout
    assert "\r" not in r.stderr  # no progress bars when stderr is not a terminal
    assert toolkit.train_fusion.__module__ == "toolkit.train_fusion"


def test_score_prob_never_rises_down_the_ranking():
    """The shipped model gave a lower-ranked result a higher score_prob than rank 1 in 16 of 33 demo queries, so
    threshold.min_prob dropped rank 1 and kept rank 2."""
    model = FusionModel.load(None)
    rng = np.random.default_rng(0)
    feats = pl.DataFrame({f: rng.random(60) for f in model.features}).with_columns(
        pl.Series("qid", [f"q{i // 12}" for i in range(60)]), pl.Series("doc_id", [f"d{i}" for i in range(60)]),
        pl.Series("chunk_id", [f"d{i}#0" for i in range(60)]))
    model.calibration = {**model.calibration, "coef": [1.0, 3.0, 2.0]}  # rises with the gap and the rank: not monotone
    s = score(feats, model)
    for _, g in s.group_by("qid"):
        p = g.sort("rank")["score_prob"].to_numpy()
        assert np.all(np.diff(p) <= 0)


def test_a_model_file_with_an_absurd_prior_is_refused_at_load_naming_it(tmp_path):
    doc = json.loads((FusionModel.load(None) and __import__("toolkit.learned_fusion", fromlist=["SHIPPED_MODEL"]).SHIPPED_MODEL).read_text())
    doc["prior"]["scale"] = 1e308
    p = tmp_path / "bad.json"
    p.write_text(json.dumps(doc))
    with pytest.raises(InputError, match=r"bad\.json.*scale 1e\+308 is outside"):
        FusionModel.load(p)


def test_a_model_used_with_other_retrieval_settings_warns(tmp_path, dataset, corpus_file):
    (dataset / "qrels" / "test.tsv").unlink()
    store, out = tmp_path / "s.duckdb", tmp_path / "m.json"
    assert _train(dataset, store, out).exit_code == 0
    from toolkit.pipeline import prepare, rescore

    cfg = load_config("learned").with_updates({"fusion.model": str(out), "retrieval.lexical.top_k": 20})
    q = pl.DataFrame({"qid": ["x"], "text": ["deploy fails"]})
    with Store(store, read_only=True) as st, warnings.catch_warnings(record=True) as got:
        warnings.simplefilter("always")
        rescore(prepare(st, q, cfg), cfg)
    assert any("other retrieval settings (retrieval.lexical.top_k 100 in training, 20 here" in str(w.message) for w in got)
    # A model trained before `retrieval.lexical.query_term_frequency` existed recorded no value for it: it ran the
    # default (false), so the same settings raise no warning, and the Lucene-like count does.
    doc = json.loads(out.read_text())
    del doc["info"]["settings"]["retrieval.lexical.query_term_frequency"]
    out.write_text(json.dumps(doc))
    for qtf, warned in ((False, False), (True, True)):
        cfg = load_config("learned").with_updates({"fusion.model": str(out), "retrieval.lexical.query_term_frequency": qtf})
        with Store(store, read_only=True) as st, warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            rescore(prepare(st, q, cfg), cfg)
        said = [str(w.message) for w in got if "other retrieval settings" in str(w.message)]
        assert bool(said) is warned, said
        assert not said or "retrieval.lexical.query_term_frequency False in training, True here" in said[0]


def test_a_model_trained_on_older_features_warns_and_a_new_one_records_its_version(tmp_path, dataset):
    """A model trained before PREPARE 9 learned BM25 features that matched a query's stopwords: scored now, its
    trees see other values, and nothing said so. The shipped model is trained on today's features."""
    from toolkit.learned_fusion import FEATURE_CHANGES, SHIPPED_MODEL
    from toolkit.pipeline import PREPARE_VERSION, prepare, rescore

    (dataset / "qrels" / "test.tsv").unlink()
    store, out = tmp_path / "s.duckdb", tmp_path / "m.json"
    assert _train(dataset, store, out).exit_code == 0
    assert json.loads(out.read_text())["info"]["prepare_version"] == PREPARE_VERSION
    assert json.loads(SHIPPED_MODEL.read_text())["info"]["prepare_version"] >= max(FEATURE_CHANGES)
    old = tmp_path / "old.json"
    doc = json.loads(out.read_text())
    del doc["info"]["prepare_version"]
    old.write_text(json.dumps(doc))
    q = pl.DataFrame({"qid": ["x"], "text": ["why does the deploy fail"]})
    said = {}
    for name, path in (("new", out), ("old", old), ("shipped", None)):
        cfg = load_config("learned").with_updates({"fusion.model": None if path is None else str(path)})
        with Store(store, read_only=True) as st, warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            rescore(prepare(st, q, cfg), cfg)
        said[name] = [str(w.message) for w in got if "trained by an older toolkit" in str(w.message)]
    assert said["new"] == [] and said["shipped"] == []
    assert len(said["old"]) == 1 and "old.json" in said["old"][0] and "no prepare version recorded" in said["old"][0]
    assert "stopwords" in said["old"][0] and "re-train it with `hrt train-fusion`" in said["old"][0]


def test_a_model_used_on_a_store_built_otherwise_warns(tmp_path, corpus_file):
    """Trial M, left undone then: a model records the stores it learned from (embedding model, chunking,
    stemmer) but nothing compared them with the store it scores. The shipped model learned from default stores."""
    from toolkit.loaders import load_corpus
    from toolkit.pipeline import prepare, rescore
    from toolkit.store import IndexSettings

    cfg = load_config("learned").with_updates({"retrieval.dense.enabled": False})
    q = pl.DataFrame({"qid": ["x"], "text": ["deploy fails"]})
    said = {}
    for name, settings in (("default", IndexSettings()), ("other", IndexSettings(chunk_size=300, stemmer="none"))):
        with Store(tmp_path / f"{name}.duckdb") as st, warnings.catch_warnings(record=True) as got:
            warnings.simplefilter("always")
            st.ingest(load_corpus(corpus_file), settings=settings, embed=False)
            rescore(prepare(st, q, cfg, use_cache=False), cfg)
        said[name] = [str(w.message) for w in got if "learned from stores built otherwise" in str(w.message)]
    assert said["default"] == []
    assert len(said["other"]) == 1 and "chunk_size 300 here, ['1000'] in training" in said["other"][0]
    assert "stemmer 'none' here" in said["other"][0] and "embedding_model" not in said["other"][0]  # no vectors: not compared
