"""The tuner: folds, honest held-out selection, search, refusals, and a saved config that reproduces its score."""

from __future__ import annotations

import json

import numpy as np
import pytest
from conftest import DOCS

from toolkit.config import load_config
from toolkit.errors import InputError
from toolkit.loaders import Dataset, load_corpus
from toolkit.metrics import aggregate, evaluate
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store
from toolkit.tune import ANCHORS, _apply, cv_heldout, make_folds, tune

QUERIES = [
    ("q1", "deploy fails with ECONNREFUSED after the upgrade", "d1 d5", "infra"),
    ("q2", "decisions on retries and pool size", "d2 d3", "pay"),
    ("q3", "which SDK version is pinned", "d5", "infra"),
    ("q4", "rate limit from stripe", "d6", "pay"),
    ("q5", "database pool size in production", "d3", "infra"),
    ("q6", "when is the team lunch", "d4", "infra"),
    ("q7", "HTTP 429 back off", "d6", "pay"),
    ("q8", "upgrade to v2.14.3 broke the deploy", "d1", "infra"),
]


@pytest.fixture(scope="module")
def dataset(tmp_path_factory):
    root = tmp_path_factory.mktemp("ds")
    (root / "qrels").mkdir()
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    (root / "queries.jsonl").write_text(
        "".join(json.dumps({"_id": q, "text": t, "metadata": {"team": g}}) + "\n" for q, t, _, g in QUERIES)
        + json.dumps({"_id": "t1", "text": "why did the deploy fail", "metadata": {"team": "infra"}}) + "\n"
    )
    (root / "qrels" / "dev.tsv").write_text(
        "query-id\tcorpus-id\tscore\n"
        + "".join(f"{q}\t{d}\t1\n" for q, _, ds, _ in QUERIES for d in ds.split())
    )
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nt1\td1\t1\n")  # apart from dev
    return root


@pytest.fixture(scope="module")
def store(tmp_path_factory, dataset, embedder):
    with Store(tmp_path_factory.mktemp("st") / "t.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(dataset))
        yield st


def _dev_score(st, dataset, cfg) -> float:
    ds = Dataset.open(dataset)
    q = ds.queries("dev")
    return aggregate(
        evaluate(rescore(prepare(st, q, cfg), cfg, trace=False).run(), ds.qrels("dev"), ["nDCG@10"])
    )["nDCG@10"]


def test_folds_partition_each_query_held_out_once_and_stratify():
    qids = [f"q{i}" for i in range(23)]
    groups = ["a" if i % 3 else "b" for i in range(23)]
    fold = make_folds(qids, 5, seed=1, groups=groups)
    assert len(fold) == 23 and sorted(set(fold)) == [0, 1, 2, 3, 4]  # every query in exactly one fold
    assert np.bincount(fold).max() - np.bincount(fold).min() <= 1
    b = [fold[i] for i in range(23) if groups[i] == "b"]  # 8 queries of the small group
    assert np.bincount(b, minlength=5).max() - np.bincount(b, minlength=5).min() <= 1
    assert (make_folds(qids, 5, seed=1, groups=groups) == fold).all()  # fixed seed, fixed folds


def test_cv_heldout_selects_on_other_folds():
    # Trial 0 is perfect on queries 0-1, trial 1 on 2-3, trial 2 a flat 0.6 (the best on all queries).
    scores = np.array([[1, 1, 0, 0], [0, 0, 1, 1], [0.6, 0.6, 0.6, 0.6]], dtype=float)
    held, chosen = cv_heldout(scores, np.array([0, 0, 1, 1]))
    # Holding out fold 0, trial 1 wins on queries 2-3 and scores 0 on 0-1; and symmetrically: the
    # held-out score exposes that picking per-subset winners does not generalise.
    assert chosen == [1, 0]
    assert held.tolist() == [0, 0, 0, 0]
    held, chosen = cv_heldout(scores[[0, 2]], np.array([0, 1, 0, 1]))
    # Each fold's training queries are one of each kind: trial 2 (mean .6) beats trial 0 (mean .5).
    assert chosen == [1, 1] and held.tolist() == [0.6] * 4


def test_grid_int_range_finds_known_best(store, dataset):
    # q1 (d1, d5) and q2 (d2, d3) each need two documents of one source: keeping one per source
    # (sources_only) loses the second, so max_per_source = 1 is strictly worst and 2..5 tie at the top.
    base = load_config("hybrid-rrf").with_updates(
        {"dedup.source_enabled": True, "dedup.fill": "sources_only"}
    )
    space = {"dedup.max_per_source": {"int": [1, 5]}}
    best, rep = tune(
        store, dataset, base=base, space=space, method="grid", budget=50, folds=4, progress=False, gate=False
    )
    assert rep.trials == 5  # 5 evenly spaced points of [1, 5]
    by_value = {h["params"]["dedup.max_per_source"]: h["score"] for h in rep.history}
    assert sorted(by_value) == [1, 2, 3, 4, 5]
    assert by_value[1] < by_value[2] == by_value[5] == rep.best_dev
    assert best.dedup.max_per_source >= 2 and rep.base_dev == pytest.approx(by_value[1])
    assert rep.best_dev == pytest.approx(
        _dev_score(store, dataset, base.with_updates({"dedup.max_per_source": 3}))
    )
    assert rep.diff["dedup.max_per_source"] == {"base": 1, "best": best.dedup.max_per_source}


def test_grid_choice_matches_independent_scores_and_saved_config_reproduces(tmp_path, store, dataset):
    values = [0.05, 1.0, 20.0]
    space = {"fusion.lexical_weight": values}
    best, rep = tune(
        store,
        dataset,
        base="hybrid-rrf",
        space=space,
        method="grid",
        budget=10,
        folds=3,
        stratify="team",
        out=tmp_path / "best.yaml",
        progress=False,
        anchors=False,
        gate=False,
    )
    base = load_config("hybrid-rrf")
    independent = {
        v: _dev_score(store, dataset, base.with_updates({"fusion.lexical_weight": v})) for v in values
    }
    assert rep.trials == 3 and rep.folds == 3 and rep.stratify == "team"
    assert rep.best_dev == pytest.approx(max(independent.values()))
    # The base's own weight (1.0) is among the values: on a tie the base is what is written.
    chosen_w = rep.best_params.get("fusion.lexical_weight", base.fusion.lexical_weight)
    assert independent[chosen_w] == pytest.approx(rep.best_dev)
    assert rep.base_dev == pytest.approx(_dev_score(store, dataset, base))
    assert 0.0 <= rep.cv_heldout <= 1.0  # a mix of trials chosen per fold: not bounded by best_dev
    assert 0.0 <= rep.p_value <= 1.0 and set(rep.sensitivity) == {"fusion.lexical_weight"}
    loaded = load_config(tmp_path / "best.yaml")
    assert loaded == best and loaded.fusion.lexical_weight == chosen_w
    assert _dev_score(store, dataset, loaded) == pytest.approx(rep.best_dev)
    saved = json.loads((tmp_path / "best.report.json").read_text())
    assert saved["trials"] == 3 and saved["best_dev"] == pytest.approx(rep.best_dev)
    assert set(saved["seconds"]) >= {"prepare", "trials", "total"}


def test_rank_bonus_virtual_keys_and_tpe(store, dataset):
    space = {"fusion.rank_bonus@1": {"float": [0.0, 0.1]}, "fusion.rank_bonus@3": {"float": [0.0, 0.05]}}
    best, rep = tune(
        store, dataset, base="qmd", space=space, method="tpe", budget=6, folds=2, seed=3, progress=False,
        anchors=False, gate=False,
    )
    assert rep.trials == 6
    # qmd already scores 1.0 on these queries, so the base (first on ties) is what is written; each trial's
    # virtual keys set the bonus of rank 1 and of ranks 2-3.
    assert rep.chosen == "base" and rep.base_dev == 1.0 and best.fusion.rank_bonus == load_config("qmd").fusion.rank_bonus
    for h in rep.history:
        p = h["params"]
        assert _apply(load_config("qmd"), p).fusion.rank_bonus == [
            (1, pytest.approx(p["fusion.rank_bonus@1"])),
            (3, pytest.approx(p["fusion.rank_bonus@3"])),
        ]
        assert 0.0 <= p["fusion.rank_bonus@1"] <= 0.1 and 0.0 <= p["fusion.rank_bonus@3"] <= 0.05


def test_a_trial_draws_only_the_fields_its_fusion_method_reads(store, dataset):
    """alpha and normalization act only under convex, rrf_k and the rank bonus only under rrf: a trial of
    one method leaves the other's fields at the base, so no report lists a change that did nothing."""
    best, rep = tune(store, dataset, base="qmd", method="random", budget=12, folds=2, seed=1, progress=False, gate=False)
    methods = {h["params"]["fusion.method"] for h in rep.history}
    assert methods == {"rrf", "convex"}
    for h in rep.history:
        p = h["params"]
        if p["fusion.method"] == "rrf":
            assert "fusion.alpha" not in p and "fusion.normalization" not in p and "fusion.rrf_k" in p
        else:
            assert "fusion.rrf_k" not in p and not any(k.startswith("fusion.rank_bonus") for k in p) and "fusion.alpha" in p
    inert = {"rrf": ("fusion.alpha", "fusion.normalization"), "convex": ("fusion.rrf_k", "fusion.rank_bonus")}
    assert not set(rep.diff) & set(inert[best.fusion.method])
    # A field no method of the space reads is refused before any trial.
    with pytest.raises(InputError, match=r"fusion.alpha: fusion.method rrf does not read it"):
        tune(store, dataset, base="qmd", space={"fusion.alpha": {"float": [0.0, 1.0]}}, progress=False)


def test_fixed_setting_kept_when_search_loses_on_heldout_folds(store, dataset):
    # Both lists weighted 0 fuse nothing: the config refuses it, so a search with nothing else is refused whole.
    with pytest.raises(InputError, match="no trial produced a valid config .e.g. .*every enabled list has weight 0"):
        tune(store, dataset, base="qmd", space={"fusion.lexical_weight": [0.0], "fusion.dense_weight": [0.0]},
             method="grid", folds=4, progress=False)
    # BM25 alone (dense weight 0) loses to dense alone and to the base on these queries, so a fixed setting
    # (one list alone, plain RRF or the base) must be the best candidate; without the gate it is written.
    space = {"fusion.dense_weight": [0.0]}
    best, rep = tune(store, dataset, base="qmd", space=space, method="grid", folds=4, progress=False, gate=False)
    assert rep.chosen in ANCHORS and rep.cv_heldout_anchors > rep.cv_heldout_search and set(rep.anchors) == set(ANCHORS)
    assert rep.best_dev == pytest.approx(max(rep.anchors.values())) == pytest.approx(_dev_score(store, dataset, best))
    assert best == _apply(load_config("qmd"), ANCHORS[rep.chosen]).with_updates(
        {"name": best.name, "description": best.description}
    )
    # The same search with anchors off: the base is still a candidate, and better than the search.
    _, raw = tune(store, dataset, base="qmd", space=space, method="grid", folds=4, progress=False, anchors=False)
    assert raw.chosen == "base" and raw.anchors == {} and raw.diff == {}


def test_the_base_is_kept_unless_the_heldout_gain_is_significant(tmp_path, store, dataset):
    """On 8 queries no gain can reach p < 0.05 (the exact sign-flip test bottoms out at 2/2^k): the tuner
    writes the base unchanged, says why, and still reports the alternative and its held-out gain."""
    base = load_config("hybrid-rrf").with_updates({"dedup.source_enabled": True, "dedup.fill": "sources_only"})
    space = {"dedup.max_per_source": {"int": [1, 5]}}
    best, rep = tune(store, dataset, base=base, space=space, method="grid", folds=4, progress=False,
                     out=tmp_path / "t.yaml")
    assert rep.chosen == "base" and rep.diff == {} and rep.best_params == {}
    assert best.model_copy(update={"description": base.description}) == base
    assert rep.candidate == "search" and rep.candidate_dev > rep.base_dev == rep.best_dev
    assert set(rep.candidate_diff) == {"dedup.max_per_source"}
    assert rep.p_value >= 0.05 and rep.heldout_ci[0] <= rep.heldout_gain <= rep.heldout_ci[1]
    assert rep.rule.startswith("kept the base: the best alternative (search)") and "not more than noise" in rep.rule
    saved = json.loads((tmp_path / "t.report.json").read_text())
    assert saved["rule"] == rep.rule and saved["alpha"] == 0.05 and load_config(tmp_path / "t.yaml").dedup.max_per_source == 1


def test_decide_rules_on_known_per_query_scores():
    """The gate on synthetic per-query scores (rows: base first, then candidates; 40 queries, 5 folds)."""
    from toolkit.tune import decide

    rng = np.random.default_rng(0)
    fold = np.arange(40) % 5
    base = rng.uniform(0.3, 0.7, 40)
    # A clear gain on every query: significant, written, interval above 0.
    d = decide(["base", "better"], np.stack([base, base + 0.1]), fold, measure="m")
    assert d.chosen == "better" and d.p_value < 0.05 and d.ci[0] > 0 and d.gain == pytest.approx(0.1)
    assert d.rule.startswith("changed to better")
    # Noise: better in-sample by chance, not on held-out folds by more than noise.
    noisy = base + np.where(np.arange(40) % 2, 0.10, -0.09)  # +0.005 on average, +-0.1 per query
    d = decide(["base", "noisy"], np.stack([base, noisy]), fold, measure="m")
    assert d.chosen == "base" and d.index == 1 and d.p_value >= 0.05 and "kept the base" in d.rule
    # The base best everywhere: kept without a test deciding anything.
    d = decide(["base", "worse"], np.stack([base, base - 0.1]), fold, measure="m")
    assert d.chosen == "base" and d.index == 0 and "nothing tried beats it" in d.rule
    # gate off: the best candidate is written whatever p says.
    assert decide(["base", "noisy"], np.stack([base, noisy]), fold, measure="m", gate=False).chosen == "noisy"


@pytest.mark.parametrize(
    "key",
    [
        "retrieval.dense.top_k",
        "expansion.max_lex",
        "rerank.top_n",
        "rerank.provider",
        "routing.conversational_skip_lexical",
        "retrieval.lexical.query_term_frequency",
    ],
)
def test_expensive_keys_rejected_naming_key(store, dataset, key):
    with pytest.raises(InputError, match=rf"{key}: changes the cached"):
        tune(store, dataset, space={key: [1, 2]}, progress=False)


def test_other_refusals(tmp_path, store, dataset):
    with pytest.raises(InputError, match=r"test split.*force=True \(hrt tune: --force\)"):
        tune(store, dataset, split="test", progress=False)
    with pytest.raises(InputError, match="fusion.no_such"):
        tune(store, dataset, space={"fusion.no_such": [1, 2]}, progress=False)
    with pytest.raises(InputError, match="fusion.rrf_k: range"):
        tune(store, dataset, space={"fusion.rrf_k": {"int": [50, 5]}}, progress=False)
    with pytest.raises(InputError, match="fusion.method"):
        tune(store, dataset, space={"fusion.method": ["rrf", "nope"]}, progress=False)
    with pytest.raises(InputError, match="folds=20"):
        tune(store, dataset, folds=20, progress=False)
    bad = tmp_path / "space.yaml"
    bad.write_text("rerank.model: [a, b]\n")
    with pytest.raises(InputError, match=r"space.yaml: rerank.model: changes the cached"):
        tune(store, dataset, space=bad, progress=False)
    bad.write_text("fusion.rrf_kk: {int: [10, 80]}\n")  # a typo: the file and the likely field are named
    with pytest.raises(InputError, match=r"space.yaml: unknown config field fusion.rrf_kk \(did you mean fusion.rrf_k\?\)"):
        tune(store, dataset, space=bad, progress=False)



def test_without_a_base_tuning_starts_from_the_default_preset(tmp_path, store, dataset):
    """`tune` and `hrt tune` without a base start from `default`, the preset search, run and the lab use,
    so a tuned file is judged against what a user gets out of the box (not against qmd). (A space the learned
    `default` reads: its fusion fields are the model's.)"""
    space = {"guard.max_rank": [2, 3]}
    best, rep = tune(store, dataset, space=space, method="grid", folds=2, progress=False, out=tmp_path / "t.yaml")
    assert rep.base == "default" and rep.chosen == "base"
    assert best.adapt == load_config("default").adapt and best.guard == load_config("default").guard

    from click.testing import CliRunner

    from toolkit.cli import main

    (tmp_path / "space.yaml").write_text("guard.max_rank: [2, 3]\n")
    r = CliRunner().invoke(main, ["tune", "--dataset", str(dataset), "--store", str(tmp_path / "cli.duckdb"),
                                  "--out", str(tmp_path / "cli.yaml"), "--space", str(tmp_path / "space.yaml"),
                                  "--method", "grid", "--folds", "2"])
    assert r.exit_code == 0, r.output
    assert "the search's held-out gain over default (not shipped):" in r.output  # the base was kept
    assert json.loads((tmp_path / "cli.report.json").read_text())["base"] == "default"


def test_on_queries_the_default_model_learned_from_tuning_starts_from_the_model_free_default(demo_store):
    """The shipped model behind `default` was trained on the demo's dev split: tuned from it there, every held-out
    score would be in-sample. Without a base named, `tune` says so and starts from `guarded-rrf` instead; a learned
    base named otherwise is still refused."""
    from pathlib import Path

    from toolkit.provenance import InSampleWarning

    demo = Path(__file__).resolve().parents[1] / "data" / "demo"
    with pytest.warns(InSampleWarning, match=r"default's learned model was trained on 32 of the 32 dev queries .*'guarded-rrf'"):
        _, rep = tune(demo_store, demo, split="dev", space={"fusion.rrf_k": [30, 60]}, method="grid", folds=2)
    assert rep.base == "guarded-rrf" and "tuned from 'guarded-rrf'" in rep.notes[0]
    with pytest.raises(InputError, match="the base's fusion.model was trained on 32 of the 32 dev queries"):
        tune(demo_store, demo, split="dev", base="learned", space={"guard.max_rank": [2, 3]}, method="grid", folds=2)


def test_a_dev_split_sharing_queries_with_test_is_refused(tmp_path, store, dataset):
    """A dev file that is (partly) the test file tunes on test whatever its name: refused, naming the queries."""
    import shutil

    from toolkit.tune import tune_dataset

    leak = tmp_path / "leak"
    shutil.copytree(dataset, leak)
    dev = (leak / "qrels" / "dev.tsv").read_text()
    (leak / "qrels" / "test.tsv").write_text(dev)
    with pytest.raises(InputError, match=r"judged dev queries are also judged in test \(e\.g\. "):
        tune_dataset(store, leak, "dev", progress=False)
    with pytest.raises(InputError, match=r"also judged in test"):
        tune(store, leak, split="dev", progress=False)
    _, rep = tune_dataset(store, leak, "dev", progress=False, force=True, budget=2, folds=2)  # forced: it runs
    assert rep.trials == 2


def test_a_range_beyond_the_fields_own_bounds_is_refused_while_one_only_the_base_cannot_use_is_not(store, dataset):
    """Review: accepting a range whose middle is valid let typos through (alpha [0, 1.5], rrf_k [-100, 200])."""
    with pytest.raises(InputError, match="fusion.alpha"):
        tune(store, dataset, base="qmd", space={"fusion.method": ["convex"], "fusion.alpha": {"float": [0.0, 1.5]}},
             budget=2, folds=2, progress=False)
    # The range is sound for a hybrid base: accepted.
    tune(store, dataset, base="hybrid-rrf", space={"fusion.method": ["convex"], "fusion.alpha": {"float": [0.0, 1.0]}},
         budget=2, folds=2, progress=False)
    # For BM25 alone no fusion setting moves anything: refused before any trial (user trial AM), not 40 equal trials.
    with pytest.raises(InputError, match="nothing to tune"):
        tune(store, dataset, base="bm25-only", space={"fusion.method": ["convex"], "fusion.alpha": {"float": [0.0, 1.0]}},
             budget=2, folds=2, progress=False)


def _ndcg_like(size: int, rng: np.random.Generator) -> np.ndarray:
    """Per-query values shaped like nDCG@10: 30% at 0, 30% at 1, the rest in between."""
    u = rng.random(size)
    return np.where(u < 0.3, 0.0, np.where(u < 0.6, 1.0, np.round(rng.beta(2, 2, size), 2)))


def test_under_the_null_its_test_assumes_the_gate_ships_at_most_alpha_over_two():
    """Every sign pattern of fixed per-query differences (candidates vs the base, one candidate set for every fold) is
    a dataset where nothing beats the base. The paired test on the cross-validated scores shipped a change on 5.5% of
    them (its choices share data and pick a maximum; the audit, user trial BE: 6.3% of simulated null splits); the
    gate re-runs the selection under each flip, so it ships on at most alpha / 2 of them, exactly."""
    from toolkit.tune import decide

    rng = np.random.default_rng(1)
    n, fold = 8, np.arange(8) % 4
    base = rng.uniform(0.2, 0.8, n)
    diffs = np.vstack([np.zeros(n), np.round(rng.normal(0, 0.2, (5, n)), 2)])
    shipped = 0
    for pattern in range(2**n):
        signs = 1 - 2 * ((pattern >> np.arange(n)) & 1)
        shipped += decide(["base", *"abcde"], base + signs * diffs, fold, measure="m").chosen != "base"
    assert 0 < shipped <= 0.025 * 2**n


def test_a_null_split_the_paired_test_called_a_win_keeps_the_base():
    """32 queries, the base and 23 configs that are no better (each keeps the query's shared value with probability
    0.6, else draws its own): cross-validated selection gains +0.17 on held-out folds, the paired test on those scores
    gave p = 0.003 (a change shipped); with the selection re-run under the null, p is 0.1 and the base is kept, and
    the 95% interval holds the true gain, 0."""
    from toolkit.compare import _seed, randomization_test
    from toolkit.tune import cv_heldout, decide

    rng = np.random.default_rng(87)
    shared = _ndcg_like(32, rng)
    scores = np.where(rng.random((24, 32)) < 0.6, shared, _ndcg_like(24 * 32, rng).reshape(24, 32))
    fold = rng.permutation(np.arange(32) % 5)
    d = cv_heldout(scores, fold)[0] - scores[0]
    assert d.mean() > 0.05 and randomization_test(d, seed=_seed(0, d), refine_below=0.1) < 0.01  # the old verdict
    dec = decide(["base", *(f"c{i}" for i in range(1, 24))], scores, fold, measure="nDCG@10")
    assert dec.chosen == "base" and dec.index != 0 and dec.p_value >= 0.05 and "not more than noise" in dec.rule
    assert dec.gain == pytest.approx(d.mean()) and dec.ci[0] <= 0 <= dec.ci[1] and dec.ci[0] <= dec.gain <= dec.ci[1]
    assert "sign-flip test of the whole selection" in dec.rule


def test_exact_ties_go_to_the_base_and_the_interval_never_excludes_zero_by_rounding():
    """Review: on a 0.1 grid a fold read a candidate whose training sum beat the base's by 5.55e-17 (a float sum's
    order), unlike cv_heldout; and an interval [+1.1e-9, +0.5] 'excluded 0' beside p 0.125."""
    from toolkit.tune import cv_heldout, selection_test

    base = np.array([0.0, 0.0, 0.5, 0.4, 0.4, 0.4])
    cand = np.array([0.1, 0.2, 0.2, 0.3, 0.3, 0.3])  # fold 1's training mean equals the base's
    fold = np.array([0, 0, 0, 1, 1, 1])
    scores = np.vstack([base, cand])
    held, gain, _, _ = selection_test({0: scores, 1: scores}, base, fold)
    assert np.array_equal(held, cv_heldout(scores, fold)[0]) and np.array_equal(held, base) and gain == 0.0
    rng = np.random.default_rng(0)
    for _ in range(300):
        n, k, nf = int(rng.integers(4, 13)), int(rng.integers(2, 6)), int(rng.integers(2, 5))
        fold = np.arange(n) % nf
        base = np.round(rng.uniform(0, 1, n), 1)
        moved = np.round(rng.normal(0.15 * rng.random(), 0.2, (k, n)), 1) * (rng.random((k, n)) < 0.6)
        scores = np.vstack([base, np.clip(base + moved, 0, 1)])
        _, _, p, ci = selection_test({int(f): scores for f in np.unique(fold)}, base, fold)
        assert (ci[0] > 0 or ci[1] < 0) == (p < 0.05), (p, ci)


def test_an_unknown_search_method_is_refused_not_run_as_tpe(store, dataset):
    """User trial BP: `method` was a plain `str`, and any word other than grid and random ran TPE without a word
    (`method="rnadom"`). The CLI's choices are the same list."""
    from typing import get_args

    from toolkit.cli import tune as tune_command
    from toolkit.tune import TuneMethod

    with pytest.raises(InputError, match=r"method='rnadom': expected one of tpe, random, grid"):
        tune(store, dataset, method="rnadom", budget=2, folds=2)
    choice = next(p for p in tune_command.params if p.name == "method").type
    assert tuple(choice.choices) == get_args(TuneMethod)
