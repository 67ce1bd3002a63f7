"""Learned fusion on a tiny corpus: the features say what the text says, they live in the stage cache,
training learns a signal and writes a model + report, `fusion.method: learned` runs in rescore with the
later stages and `threshold.min_prob` after it, calibration is measured honestly, and the CLI trains."""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner

from toolkit import calibration, ltr_features
from toolkit.cli import main
from toolkit.config import load_config
from toolkit.errors import InputError
from toolkit.learned_fusion import FusionModel
from toolkit.loaders import load_corpus
from toolkit.pipeline import prepare, rescore, run_pipeline
from toolkit.store import Store
from toolkit.train_fusion import fit, train_fusion

ROOT_DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"

QUERIES = pl.DataFrame(
    {
        "qid": ["q1", "q2", "q3", "q4"],
        "text": ["deploy fails with ECONNREFUSED", "how long do we back off between retries", "which SDK version is pinned", "HTTP 429 rate limit"],
        "scope": [None, None, None, None],
    }
)
QRELS = "query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td5\t1\nq4\td6\t1\n"


@pytest.fixture
def store(tmp_path, corpus_file, embedder):
    st = Store(tmp_path / "l.duckdb", embedder=embedder)
    st.ingest(load_corpus(corpus_file))
    yield st
    st.close()


@pytest.fixture
def dataset(tmp_path, corpus_file):
    root = tmp_path / "tiny"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(corpus_file.read_text())
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": t}) + "\n" for q, t in QUERIES.select("qid", "text").iter_rows()))
    (root / "qrels" / "dev.tsv").write_text(QRELS)
    return root


def test_features_read_the_text_and_the_lists(store):
    prep = prepare(store, QUERIES, load_config("hybrid-rrf"))
    f = prep.ltr_features
    assert f.schema == pl.Schema(ltr_features.SCHEMA)
    assert f.group_by("qid", "doc_id").len()["len"].max() == 1  # one row per (query, document)
    d1 = f.filter((pl.col("qid") == "q1") & (pl.col("doc_id") == "d1")).row(0, named=True)
    assert d1["tech_match"] == 1.0 and d1["coverage"] > 0.5 and d1["idf_coverage"] > 0.5 and d1["proximity"] > 0
    assert d1["lex_rr"] == 1.0 and d1["q_technical"] == 1.0
    # A document the BM25 list did not retrieve: rank feature 0, raw score missing (NaN), no coverage.
    d4 = f.filter((pl.col("qid") == "q1") & (pl.col("doc_id") == "d4")).row(0, named=True)
    assert d4["lex_rr"] == 0.0 and math.isnan(d4["lex_score"]) and d4["coverage"] == 0.0 and d4["vec_rr"] > 0
    assert f.filter(pl.col("qid") == "q2")["tech_match"].max() == 0.0  # no technical token in the query
    # Sums DuckDB adds in no fixed order are rounded, so one store's features are the same on every computation (two
    # computations of CACM's differed in the last bit, and the models trained on them differed).
    for name in ("idf_coverage", "q_idf_mean", "q_idf_mean_norm"):
        assert (f[name] == f[name].round(12)).all(), name


def test_features_live_in_the_stage_cache_and_old_caches_gain_them(store):
    cfg = load_config("hybrid-rrf")
    first = prepare(store, QUERIES, cfg)
    again = prepare(store, QUERIES, cfg)
    assert again.timings == {"cache_load": 0.0} and again.ltr_features.equals(first.ltr_features)
    # A cache entry written before the features existed: loading it computes and stores them.
    from toolkit.pipeline import _PREPARED_FRAMES, prepare_key

    key = prepare_key(store, QUERIES, cfg)
    store.put_frames(key, {n: getattr(first, n) for n in _PREPARED_FRAMES if n != "ltr_features"})
    old = prepare(store, QUERIES, cfg)
    assert old.ltr_features.equals(first.ltr_features)
    assert "ltr_features" in store.get_frames(key)


def test_a_run_with_a_config_that_reads_no_learned_features_skips_them_and_the_lab_gets_them_from_the_cache(
        store, monkeypatch):
    """`run_pipeline` (`hrt run`, `hrt report`) with a config that fuses by RRF computed the learning-to-rank features
    all the same: 1.7 of LoCoMo's 3.05 s prepare under `default`. They are now computed where they are read, the
    stage cache entry a run wrote gains them when the lab or the tuner loads it, and re-scoring frames made without
    them with the learned method says so instead of ranking on no features."""
    from toolkit.pipeline import prepare_key

    calls = []
    real = ltr_features.candidate_features
    monkeypatch.setattr(ltr_features, "candidate_features", lambda *a, **k: calls.append(1) or real(*a, **k))
    cfg = load_config("hybrid-rrf")
    ran = run_pipeline(store, QUERIES, cfg)
    assert calls == [] and store.get_frames(prepare_key(store, QUERIES, cfg)).get("ltr_features") is None
    lab = prepare(store, QUERIES, cfg)  # the lab's and the tuner's call: from the cache, with the features added
    assert lab.timings == {"cache_load": 0.0} and calls == [1] and ltr_features.is_current(lab.ltr_features)
    assert lab.ltr_features.equals(prepare(store, QUERIES, cfg, use_cache=False).ltr_features)
    assert "ltr_features" in store.get_frames(prepare_key(store, QUERIES, cfg))
    assert rescore(lab, cfg).final.equals(ran.final)
    learned = load_config("learned")
    assert rescore(lab, learned).final.height  # the lab's frames switch to learned live
    bare = prepare(store, QUERIES, cfg, use_cache=False, learned_features=False)
    with pytest.raises(InputError, match="made without the learning-to-rank features"):
        rescore(bare, learned)
    before = len(calls)
    run_pipeline(store, QUERIES.head(2), learned)  # a learned run computes them
    assert len(calls) == before + 1


def test_features_are_the_same_floats_every_time(demo_store):
    """Computed twice from one store, the features are equal to the last bit: a different last bit moves LightGBM's
    bins, so a model trained again on the same judgements came out another. On the demo every repeat differed in
    `doc_len_rel` (a mean over rows in the joins' order) before it was taken after the sort; IDF sums are added in
    term order."""
    q = pl.read_ndjson(ROOT_DEMO / "queries.jsonl").select(pl.col("_id").cast(pl.Utf8).alias("qid"), "text")
    prep = prepare(demo_store, q, load_config("guarded-rrf"), use_cache=False)
    first = ltr_features.candidate_features(demo_store, prep.queries, prep.candidates, prep.features)
    for _ in range(3):
        assert ltr_features.candidate_features(demo_store, prep.queries, prep.candidates, prep.features).equals(first)


def test_relative_features_are_per_query_and_scale_free(store):
    f = prepare(store, QUERIES, load_config("hybrid-rrf")).ltr_features
    per_q = f.group_by("qid").agg(pl.col("cov_rel").max(), pl.col("coverage").max(), pl.col("idfcov_pct").max(), pl.col("vec_gap").min())
    assert (per_q.filter(pl.col("coverage") > 0)["cov_rel"] == 1.0).all()  # the query's best coverage is 1
    assert (per_q["idfcov_pct"] == 1.0).all() and (per_q["vec_gap"].abs() < 1e-12).all()  # the top cosine has gap 0
    assert (f.filter(pl.col("lex_rr") == 0)["lex_z"] == -3.0).all() and (f.filter(pl.col("vec_rr") == 0)["vec_gap"] == 1.0).all()
    # Doubling every BM25 score of a query (another collection's scale) leaves its z-scores unchanged.
    orig = f.filter(pl.col("lex_rr") > 0).select("qid", "doc_id", "lex_z")
    scaled = ltr_features._relative(f.with_columns(pl.col("lex_score") * 2.0))
    assert scaled.filter(pl.col("lex_rr") > 0).select("qid", "doc_id", "lex_z").equals(orig)


def test_score_spreads_read_each_lists_first_ten_documents():
    """A list that scores its first ten alike is guessing: q_lex_spread = (best - lowest) / best over BM25's first ten
    documents (a document's score is its best chunk's; rank 11 is not read), q_vec_spread the cosine difference;
    one document, or no list at all, gives 0."""
    rows = [("a", "orig:lex", f"d{r}", f"d{r}#0", r, 20.0 - r) for r in range(1, 10)]  # ranks 1-9: 19 .. 11
    rows += [("a", "orig:lex", "d1", "d1#1", 10, 10.0),  # rank 10 is another chunk of d1, which keeps its best (19)
             ("a", "orig:lex", "d11", "d11#0", 11, 9.5),  # past the first ten
             ("a", "orig:vec", "d3", "d3#0", 1, 0.9), ("a", "orig:vec", "d7", "d7#0", 2, 0.6),
             ("b", "orig:lex", "d2", "d2#0", 1, 4.0), ("c", "orig:vec", "d5", "d5#0", 1, 0.7)]
    cands = pl.DataFrame(rows, schema=["qid", "list_id", "doc_id", "chunk_id", "rank", "score"], orient="row")
    got = {r["qid"]: r for r in ltr_features._query_list_features(cands).iter_rows(named=True)}
    assert got["a"]["q_lex_spread"] == pytest.approx((19.0 - 11.0) / 19.0) and got["a"]["q_vec_spread"] == pytest.approx(0.3)
    assert got["b"]["q_lex_spread"] == 0.0 and got["b"]["q_vec_spread"] == 0.0  # one document; no dense list
    assert got["c"]["q_lex_spread"] == 0.0 and got["c"]["q_vec_spread"] == 0.0


def test_default_features_leave_out_collection_identity():
    from toolkit.train_fusion import TRANSFER_FEATURES

    mono = dict(ltr_features.FEATURES)
    assert set(TRANSFER_FEATURES) <= set(ltr_features.FEATURE_NAMES)
    assert not [f for f in TRANSFER_FEATURES if f.startswith("q_") or f in ("lex_score", "vec_score", "doc_len", "doc_chunks", "chunk_ord")]
    assert mono["vec_gap"] == -1 and mono["lex_z"] == 1 and mono["cov_rel"] == 1


def test_pseudo_queries_label_their_source_document(store, dataset, tmp_path):
    from toolkit.train_fusion import collect_pseudo

    data, qrels = collect_pseudo(store, 4, min_words=8, name="tiny~pseudo")
    assert data["qid"].n_unique() == qrels["qid"].n_unique() == 4 and (data["collection"] == "tiny~pseudo").all()
    assert data.group_by("qid").agg(pl.col("label").sum())["label"].max() == 1  # one source document per query
    found = data.filter(pl.col("label") == 1).join(qrels, on=["qid", "doc_id"])
    assert len(found) >= 3 and set(ltr_features.FEATURE_NAMES) <= set(data.columns)
    # Training with an unjudged collection's pseudo-queries beside the judged ones.
    rep = train_fusion([(store, dataset, 1)], tmp_path / "p.json", rounds=5, holdout=0.25, progress=False, pseudo_stores=[store], pseudo=4)
    assert set(rep.collections) == {"tiny", "l~pseudo0"} and rep.collections["l~pseudo0"]["queries"] == 4


def _synthetic(seed: int = 0, n_q: int = 60, n_d: int = 30, collection: str = "syn") -> tuple[pl.DataFrame, pl.DataFrame]:
    """Candidates whose relevance follows idf_coverage while the lists' ranks are noise."""
    rng = np.random.default_rng(seed)
    rows = {f: rng.random(n_q * n_d) for f in ltr_features.FEATURE_NAMES}
    data = pl.DataFrame(rows).with_columns(
        pl.Series("qid", [f"q{i}" for i in range(n_q) for _ in range(n_d)]),
        pl.Series("doc_id", [f"d{j}" for _ in range(n_q) for j in range(n_d)]),
        pl.lit("c").alias("chunk_id"),
        pl.lit(collection).alias("collection"),
    )
    data = data.with_columns((pl.col("idf_coverage") > pl.col("idf_coverage").quantile(0.9).over("qid")).cast(pl.Int64).alias("label"))
    qrels = data.filter(pl.col("label") > 0).select("qid", "doc_id", pl.col("label").alias("rel"), "collection")
    return data, qrels


def test_fit_learns_the_signal_and_beats_rrf_on_held_out_queries():
    data, qrels = _synthetic()
    model, rep = fit(data, qrels, seed=1, rounds=60, holdout=0.3, prior=0.0)  # synthetic rrf is noise on [0, 1]
    h = rep.held_out["syn"]
    assert h["learned"] > h["rrf"] + 0.3 and h["learned"] > 0.8
    assert max(rep.importance, key=rep.importance.get) == "idf_coverage"
    assert rep.calibration_ece_held_out is not None and rep.calibration_ece_held_out < 0.1
    # The top 10's ECE beside it (what a reader and min_prob see; the easy tail flatters the overall one: trial BX).
    assert rep.calibration_ece_top10_held_out is not None and "over each query's first 10" in rep.summary()
    # Seeded: the same data and seed give the same model.
    again, _ = fit(data, qrels, seed=1, rounds=60, holdout=0.3, prior=0.0)
    assert again.booster_text == model.booster_text


def test_learned_method_in_rescore(store, dataset, tmp_path):
    out = tmp_path / "m.json"
    rep = train_fusion([(store, dataset, 1)], out, rounds=20, holdout=0.25, progress=False)
    assert out.exists() and out.with_suffix(".report.json").exists() and rep.best_iteration >= 1
    cfg = load_config("learned").with_updates({"fusion.model": str(out)})
    prep = prepare(store, QUERIES, cfg)
    res = rescore(prep, cfg)
    full = run_pipeline(store, QUERIES, cfg)
    assert res.final.select("qid", "doc_id", "rank", "score").equals(full.final.select("qid", "doc_id", "rank", "score"))
    assert res.final["score_prob"].is_between(0.0, 1.0).all()
    # Later stages still apply after it: source dedup and a probability threshold.
    dd = rescore(prep, cfg.with_updates({"dedup.source_enabled": True, "dedup.fill": "sources_only"}))
    assert dd.final.group_by("qid", "source").len()["len"].max() == 1
    cut = rescore(prep, cfg.with_updates({"threshold.min_prob": float(res.final["score_prob"].median())}))
    assert 0 < len(cut.final) < len(res.final)
    kept = cut.final.filter(~pl.col("flags").list.contains("low_confidence"))
    assert (kept["score_prob"] >= float(res.final["score_prob"].median())).all()
    # Switching back to RRF on the same Prepared works and has no score_prob.
    rrf = rescore(prep, cfg.with_updates({"fusion.method": "rrf"}))
    assert "score_prob" not in rrf.final.columns


def test_learned_errors_are_clear(tmp_path):
    with pytest.raises(InputError, match="min_prob needs calibrated scores"):
        load_config("hybrid-rrf").with_updates({"threshold.min_prob": 0.5})
    bad = tmp_path / "bad.json"
    bad.write_text("{}")
    with pytest.raises(InputError, match="not a learned fusion model"):
        FusionModel.load(bad)
    with pytest.raises(InputError, match="file not found"):
        FusionModel.load(tmp_path / "missing.json")


def test_the_c_library_scores_exactly_as_lightgbms_python_package(monkeypatch):
    """`toolkit/booster.py` scores through LightGBM's C API without `import lightgbm` (which imports scikit-learn
    and pandas): every score equals the package's, missing values and zeros included; without the library file
    the package's own Booster is used, and text LightGBM refuses is an error either way."""
    import lightgbm

    from toolkit import booster

    model = FusionModel.load(None)
    assert isinstance(model.booster, booster.CBooster)
    rng = np.random.default_rng(0)
    x = rng.normal(size=(3000, len(model.features))) * rng.choice([0.01, 1.0, 100.0], size=(3000, len(model.features)))
    x[rng.random(x.shape) < 0.2], x[rng.random(x.shape) < 0.05] = np.nan, 0.0
    ref = lightgbm.Booster(model_str=model.booster_text)
    assert np.array_equal(model.booster.predict(x), ref.predict(x, num_threads=1))
    assert (model.booster.num_trees(), model.booster.num_feature()) == (ref.num_trees(), ref.num_feature())
    assert model.booster.predict(np.zeros((0, len(model.features)))).shape == (0,)
    import copy
    import pickle

    for twin in (copy.deepcopy(model.booster), pickle.loads(pickle.dumps(model.booster))):  # own handles, freed once each
        assert twin._handle.value != model.booster._handle.value and np.array_equal(twin.predict(x), ref.predict(x, num_threads=1))
        del twin
    with pytest.raises(booster.BoosterError, match="nonsense_obj"):
        booster.load(model.booster_text.replace("objective=lambdarank", "objective=nonsense_obj", 1))
    monkeypatch.setattr(booster, "_library", lambda: None)  # no library file beside the package
    fallback = booster.load(model.booster_text)
    assert isinstance(fallback, lightgbm.Booster) and np.array_equal(fallback.predict(x, num_threads=1), ref.predict(x, num_threads=1))
    with pytest.raises(booster.BoosterError, match="nonsense_obj"):
        booster.load(model.booster_text.replace("objective=lambdarank", "objective=nonsense_obj", 1))
    monkeypatch.setitem(__import__("sys").modules, "lightgbm", None)  # neither the library nor the package
    with pytest.raises(InputError, match="needs the lightgbm package: pip install lightgbm"):
        booster.load(model.booster_text)


def test_calibration_ece_and_reliability():
    rng = np.random.default_rng(0)
    p = rng.random(20_000)
    y = (rng.random(20_000) < p).astype(float)
    assert calibration.ece(p, y) < 0.02  # calibrated by construction
    assert calibration.ece(np.clip(p + 0.3, 0, 1), y) > 0.2  # over-confident
    r = calibration.reliability(p, y, bins=5)
    assert r["n"].sum() == 20_000 and (r["observed"] - r["mean_prob"]).abs().max() < 0.03


def test_train_fusion_cli(tmp_path, dataset):
    out = tmp_path / "cli.json"
    r = CliRunner().invoke(main, ["train-fusion", "--dataset", str(dataset), "--store", str(tmp_path / "c.duckdb"), "--out", str(out), "--rounds", "5"])
    assert r.exit_code == 0, r.output
    assert "held-out" in r.output and out.exists()
    assert json.loads(out.read_text())["format"] == "hrt-learned-fusion"
    r = CliRunner().invoke(main, ["train-fusion", "--dataset", str(dataset), "--split", "test", "--out", str(out)])
    assert r.exit_code == 2 and "refusing to train on the test split" in r.output
    assert "--force" in r.output  # the CLI flag, not only the Python keyword force=True


def test_router_weights_lists_per_query(store, dataset, tmp_path):
    from toolkit import router

    out = tmp_path / "r.json"
    train_fusion([(store, dataset, 1)], out, rounds=5, holdout=0.25, progress=False)
    rt = {"inputs": router.INPUTS, "mean": [0.0] * len(router.INPUTS), "scale": [1.0] * len(router.INPUTS),
          "coef": [0.0] * len(router.INPUTS), "intercept": 0.0}  # fmt: skip
    cfg = load_config("hybrid-rrf")
    prep = prepare(store, QUERIES, cfg)
    q = router.query_inputs(prep.ltr_features)
    assert np.allclose(router.p_lexical(rt, q), 0.5)  # a neutral router keeps plain RRF
    w = pl.DataFrame({"qid": ["q1", "q1"], "list_id": ["orig:lex", "orig:vec"], "weight": [1.0, 1.0]})
    lists = pl.DataFrame({"qid": ["q1", "q1"], "list_id": ["orig:lex", "orig:vec"], "retriever": ["lex", "vec"]})
    got = router.routed_weights(w, lists, pl.DataFrame({"qid": ["q1"], "p_lex": [0.9]}))
    assert got["weight"].to_list() == pytest.approx([1.8, 0.2])
    # Through the pipeline: fusion.router reads the model file's router (if training found both classes).
    model = FusionModel.load(out)
    routed = cfg.with_updates({"fusion.router": True, "fusion.model": str(out)})
    if model.router is None:
        with pytest.raises(InputError, match="holds no router"):
            rescore(prep, routed)
    else:
        assert len(rescore(prep, routed).final) == len(rescore(prep, cfg).final)


def test_shipped_model_runs_the_learned_preset(store):
    import warnings

    with warnings.catch_warnings():  # the shipped model matches the preset's settings: nothing to warn about (a
        warnings.simplefilter("error")  # metadata filter, a field newer than the model, warned on every search)
        res = run_pipeline(store, QUERIES, load_config("learned"))
        filtered = run_pipeline(store, QUERIES, load_config("learned").with_updates({"retrieval.filters": {"user": "x"}}))
    assert res.final["qid"].n_unique() == 4 and res.final["score_prob"].is_not_null().all()
    assert filtered.final.is_empty()  # no document has that user
    assert FusionModel.load(None).router is not None


def test_lab_switches_to_learned_live(store):
    from toolkit.lab import Lab

    qrels = pl.DataFrame({"qid": ["q1", "q2", "q3", "q4"], "doc_id": ["d1", "d2", "d5", "d6"], "rel": [1, 1, 1, 1]})
    lab = Lab(store, QUERIES, qrels, config="hybrid-rrf", measures=("nDCG@10",), debounce_s=30.0)
    assert lab.set("fusion.method", "learned") is True
    assert lab.config.fusion.method == "learned" and "score_prob" in lab.result.final.columns
    assert lab.controls["fusion.lexical_weight"].disabled and not lab.controls["rerank.buckets"].disabled
    assert lab.controls["adapt.dense_gap"].disabled and lab.controls["adapt.gap_scale"].disabled  # no list weighed per query
    assert lab.set("fusion.method", "rrf") and "score_prob" not in lab.result.final.columns
    assert not lab.controls["adapt.dense_gap"].disabled


def test_reliability_panel_and_compact_output(store):
    from toolkit import panels
    from toolkit.render import render

    res = run_pipeline(store, QUERIES, load_config("learned"))
    qrels = pl.DataFrame({"qid": ["q1", "q2", "q3", "q4"], "doc_id": ["d1", "d2", "d5", "d6"], "rel": [1, 1, 1, 1]})
    table = panels.reliability(res.final, qrels, bins=5)
    assert table["n"].sum() == len(res.final) and table["observed"].is_between(0, 1).all()
    fig = panels.reliability_figure(table)
    assert "ECE" in fig.layout.title.text and len(fig.data) == 2
    assert "set fusion.method to learned" in str(panels.reliability_figure(panels.reliability(res.final.drop("score_prob"), qrels)).layout)
    q1 = res.final.filter(pl.col("qid") == "q1").head(2)
    assert "P(relevant)" in render(q1, fmt="compact")


def _small_model(tmp_path):
    """(path of a small calibrated model file trained on synthetic data, its JSON document)."""
    from toolkit.train_fusion import DEFAULT_FEATURES

    data, qrels = _synthetic(n_q=30, n_d=20)
    model, _ = fit(data, qrels, features=DEFAULT_FEATURES, seed=0, rounds=8, holdout=0.3)
    assert model.calibration is not None and model.booster_text.count("Tree=") >= 3
    path = model.save(tmp_path / "good.json")
    return path, json.loads(path.read_text())


def _damaged(tmp_path, doc, name, **changes):
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({**doc, **changes}))
    return path


def test_damaged_model_files_are_input_errors_naming_file_and_field(tmp_path):
    good, doc = _small_model(tmp_path)
    loaded = FusionModel.load(good)
    assert loaded.features == doc["features"] and loaded.booster.num_feature() == len(doc["features"])
    b, feats = doc["booster"], doc["features"]
    tree1, tree2 = b.index("\nTree=1\n"), b.index("\nTree=2\n")
    cases = {
        "truncated": ({"booster": b[: len(b) // 2]}, "booster.*end of trees"),
        "tree_removed": ({"booster": b[:tree1] + b[tree2:]}, "booster.*(tree_sizes|Tree=)"),
        "garbage": ({"booster": "garbage"}, "booster.*not a LightGBM model"),
        "not_text": ({"booster": 42}, "booster"),
        "fewer": ({"features": feats[:-3]}, "features.*feature_names"),
        "reversed": ({"features": feats[::-1]}, "features.*feature_names"),
        "twice": ({"features": [feats[0], *feats[:-1]]}, f"features.*{feats[0]} more than once"),
        "isotonic": ({"calibration": {"kind": "isotonic"}}, "calibration.*isotonic"),
        "no_coef": ({"calibration": {"kind": "platt", "intercept": 0.1}}, "calibration.*coef"),
        "short_coef": ({"calibration": {**doc["calibration"], "coef": [1.0]}}, "calibration.*coef"),
        "prior": ({"prior": {"feature": "nope", "scale": 2.0}}, "prior"),
        "lgb_error": ({"booster": b.replace("objective=lambdarank", "objective=nonsense_obj", 1)}, "booster.*not a valid LightGBM model"),
    }
    for name, (changes, pattern) in cases.items():
        path = _damaged(tmp_path, doc, name, **changes)
        with pytest.raises(InputError, match=pattern) as e:
            FusionModel.load(path)
        assert str(path) in str(e.value), name
    # Truncated anywhere (the JSON still valid): a clear error each time, never a crash or an abort.
    for i, cut in enumerate(range(40, len(b), max(len(b) // 25, 1))):
        with pytest.raises(InputError, match="booster"):
            FusionModel.load(_damaged(tmp_path, doc, f"cut{i}", booster=b[:cut]))


def test_damaged_router_sections_are_input_errors_naming_file_and_field(tmp_path):
    """Before: the router section was never checked: NaN coefficients emptied every ranking, kind 'x' was a
    KeyError 'inputs' and a short coef a numpy matmul ValueError, all at run time."""
    from toolkit.learned_fusion import SHIPPED_MODEL

    doc = json.loads(SHIPPED_MODEL.read_text())
    rt = doc["router"]
    cases = {
        "kind": ({"kind": "x"}, "kind 'x' is not supported"),
        "not_object": ([1, 2], "expected an object"),
        "no_inputs": ({k: v for k, v in rt.items() if k != "inputs"}, "needs field.*inputs"),
        "nan_coef": ({**rt, "coef": [math.nan] * len(rt["coef"])}, "coef must be 9 finite numbers.*nan"),
        "short_coef": ({**rt, "coef": rt["coef"][:3]}, "coef must be 9 finite numbers.*got 3 values"),
        "short_mean": ({**rt, "mean": rt["mean"][:-1]}, "mean must be 9"),
        "zero_scale": ({**rt, "scale": [0.0] * len(rt["scale"])}, "scale must be positive"),
        "unknown_input": ({**rt, "inputs": ["q_nope", *rt["inputs"][1:]]}, "q_nope"),
        "inf_intercept": ({**rt, "intercept": math.inf}, "intercept"),
    }
    for name, (router, pattern) in cases.items():
        path = _damaged(tmp_path, doc, name, router=router)
        with pytest.raises(InputError, match=f"field 'router' is invalid.*{pattern}") as e:
            FusionModel.load(path)
        assert str(path) in str(e.value), name
    assert FusionModel.load(_damaged(tmp_path, doc, "none", router=None)).router is None  # no router is fine


def test_learned_fusion_warns_once_when_a_list_it_reads_is_switched_off(store, monkeypatch):
    """Before: with retrieval.dense.enabled false the model scored every candidate as 'not retrieved by the
    dense list' without a word (demo nDCG@10 0.78 -> 0.68, score_prob 0.38 -> 0.027)."""
    import warnings

    from toolkit import learned_fusion

    monkeypatch.setattr(learned_fusion, "_WARNED", set(), raising=False)
    off = load_config("learned").with_updates({"retrieval.dense.enabled": False})
    pattern = r"learned-fusion\.json reads features of the dense list \(retrieval\.dense\.enabled is false\).*score_prob is not calibrated"
    with pytest.warns(UserWarning, match=pattern):
        run_pipeline(store, QUERIES, off)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        prep = prepare(store, QUERIES, off)
        for k in (30, 40):  # later slider ticks and runs: no repeat
            rescore(prep, off.with_updates({"fusion.rrf_k": k}))
        run_pipeline(store, QUERIES, load_config("learned"))  # both lists on: nothing to say
    assert not [w for w in seen if "reads features of" in str(w.message)]
    with pytest.warns(UserWarning, match=r"the lexical list \(retrieval\.lexical\.enabled is false\) through lex_rr"):
        run_pipeline(store, QUERIES, load_config("learned").with_updates({"retrieval.lexical.enabled": False}))


def test_train_report_says_what_its_numbers_are(store, dataset, tmp_path):
    """Before: "held-out" numbers whose queries also chose the number of trees, an ECE over the rows the
    calibrator was fitted on, no word that the saved model is a refit on all queries or that 1 held-out
    query proves nothing."""
    out = tmp_path / "m.json"
    rep = train_fusion([(store, dataset, 1)], out, rounds=20, holdout=0.25, progress=False)
    text = rep.summary()
    assert "held-out (also used for early stopping: optimistic) tiny (1 queries)" in text
    assert "refit on all queries" in text and "only 1 held-out queries" in text and "fewer than 10" in text
    # Calibrated on the one held-out query, which cannot be split to measure it on unseen rows.
    assert rep.calibrated and rep.calibration_ece_held_out is None and "ECE: not measured" in text and "no calibration" not in text
    saved = json.loads(out.with_suffix(".report.json").read_text())
    assert saved["notes"] == rep.notes and saved["early_stopped"] is True


def test_calibration_ece_is_measured_on_rows_the_calibrator_was_not_fitted_on(monkeypatch):
    """The reported ECE is cross-fitted: each half of the held-out queries is scored by a calibrator fitted on
    the other half (before: the calibrator was scored on its own fitting rows)."""
    fitted = []
    real = calibration.fit_platt
    monkeypatch.setattr(calibration, "fit_platt", lambda x, y, **kw: fitted.append(len(x)) or real(x, y, **kw))
    data, qrels = _synthetic()
    _, rep = fit(data, qrels, seed=1, rounds=30, holdout=0.3, prior=0.0)
    n_all, a, b = fitted
    assert a + b == n_all and 0 < a < n_all and rep.calibration_ece_held_out is not None
    assert "cross-fitted" in rep.summary()


def test_training_without_calibration_warns_and_min_prob_then_refuses(store, dataset, tmp_path):
    from toolkit.learned_fusion import check_min_prob

    out = tmp_path / "h0.json"
    with pytest.warns(UserWarning, match="no calibration.*min_prob cannot be used"):
        rep = train_fusion([(store, dataset, 1)], out, rounds=5, holdout=0.0, progress=False)
    assert rep.calibration_ece_held_out is None and "min_prob cannot be used" in rep.summary()
    assert FusionModel.load(out).calibration is None
    check_min_prob(str(out), 0.0)  # min_prob 0: nothing to check
    with pytest.raises(InputError, match=f"threshold.min_prob.*fusion.model {out}"):
        check_min_prob(str(out), 0.3)
    cfg = load_config("learned").with_updates({"fusion.model": str(out)})
    prep = prepare(store, QUERIES, cfg)
    assert rescore(prep, cfg).final["score_prob"].is_null().all()  # min_prob 0: runs, no probabilities
    # Before: every result was kept and flagged low_confidence ("no result reached the minimum score").
    with pytest.raises(InputError, match="threshold.min_prob.*fusion.model"):
        rescore(prep, cfg.with_updates({"threshold.min_prob": 0.3}))


def test_infinite_split_threshold_loads_but_nan_does_not(tmp_path):
    """LightGBM writes threshold=inf for a split that sends NaN (a document one list did not return) one way and
    every value the other; a model trained on the shared collections had one. Not damage; NaN still is."""
    good, doc = _small_model(tmp_path)
    b = doc["booster"]
    start = b.index("\nTree=0\n")
    line_at = b.index("\nthreshold=", start) + len("\nthreshold=")
    end = b.index("\n", line_at)
    values = b[line_at:end].split()
    for name, bad in (("inf", "inf"), ("nan", "nan")):
        new = " ".join([bad, *values[1:]])
        text = b[:line_at] + new + b[end:]
        sizes_at = text.index("tree_sizes=") + len("tree_sizes=")
        sizes_end = text.index("\n", sizes_at)
        sizes = text[sizes_at:sizes_end].split()
        sizes[0] = str(int(sizes[0]) + len(new) - (end - line_at))  # the block of tree 0 changed length
        text = text[:sizes_at] + " ".join(sizes) + text[sizes_end:]
        path = _damaged(tmp_path, doc, name, booster=text)
        if name == "inf":
            assert FusionModel.load(path).booster.num_trees() >= 3
        else:
            with pytest.raises(InputError, match="threshold= holds a value that is not a finite number"):
                FusionModel.load(path)


def test_a_service_reads_the_model_file_once_until_it_changes(store, tmp_path, monkeypatch):
    """Every search prepares anew in a service (`run_pipeline(..., one_shot=True)`), and each one read, checked and
    parsed the model file again (17 ms for the shipped model). The model is read once per process
    until the file changes, and searches from threads share it with the scores they had alone."""
    import threading

    from toolkit import learned_fusion

    path, doc = _small_model(tmp_path)
    cfg = load_config("learned").with_updates({"fusion.model": str(path)})
    loads = []
    real = FusionModel.load.__func__
    monkeypatch.setattr(FusionModel, "load", classmethod(lambda cls, p=None: loads.append(p) or real(cls, p)))
    alone = [run_pipeline(store, QUERIES, cfg, one_shot=True).final for _ in range(3)]
    assert len(loads) == 1 and all(f.equals(alone[0]) for f in alone)

    got, errors = [], []

    def search() -> None:
        try:
            got.append(run_pipeline(store, QUERIES, cfg, one_shot=True).final)
        except Exception as e:  # noqa: BLE001 - asserted on below
            errors.append(e)

    threads = [threading.Thread(target=search) for _ in range(6)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not errors and len(got) == 6 and all(f.equals(alone[0]) for f in got) and len(loads) == 1

    # A new model written over the file (other trees, same path) is read again, not served from memory.
    data, qrels = _synthetic(seed=3, n_q=30, n_d=20)
    other, _ = fit(data, qrels, features=doc["features"], seed=3, rounds=3, holdout=0.3)
    other.save(path)
    run_pipeline(store, QUERIES, cfg, one_shot=True)
    assert len(loads) == 2 and learned_fusion.FusionModel.read(path).booster_text == other.booster_text


def test_score_prob_never_rises_down_the_shown_ranking(store):
    """A stage after the model (the exact-token guard, a blend, priors) can place a document above ones the model
    preferred. Its `score_prob` is then raised to the highest below it, so the list reads top-down and min_prob
    cannot drop it while keeping a result under it (a guarded CVE hit at rank 1 showed P 0.101 above rank 2's 0.157)."""
    from toolkit import learned_fusion as lf

    # The model's probabilities, carried from the fused list to the shown one (the guard put "guarded" first).
    shown = pl.DataFrame({"qid": ["q"] * 3, "doc_id": ["guarded", "m1", "m2"], "rank": [1, 2, 3], "score_prob": [0.101, 0.157, 0.09]})
    assert lf.attach_prob(shown)["score_prob"].to_list() == [0.157, 0.157, 0.09]
    # The learned preset runs the guard: every query's probabilities fall or stay level down its list.
    cfg = load_config("learned")
    assert cfg.guard.exact_token and cfg.guard.sole_first and cfg.guard.coverage_first
    res = run_pipeline(store, QUERIES, cfg.with_updates({"guard.max_rank": 1, "output.n": 10}))
    for _, rows in res.final.sort("qid", "rank").group_by("qid"):
        assert rows["score_prob"].is_sorted(descending=True)
