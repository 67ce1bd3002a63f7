"""A config file or mapping that sets a field the rest of it switches off loads with one warning naming the
field and why (`InertSettingWarning`); presets, saved presets and `with_updates` stay silent."""

from __future__ import annotations

import json
import warnings

import pytest
import yaml
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.config import (
    PRESETS_DIR,
    InertSettingWarning,
    config_from_dict,
    inert_settings,
    list_presets,
    load_config,
    save_config,
)

BUCKETS = [[5, 0.5], [".inf", 0.2]]


def _inert_warnings(fn, *args) -> list[str]:
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fn(*args)
    return [str(w.message) for w in caught if issubclass(w.category, InertSettingWarning)]


def _one(fn, *args) -> str:
    said = _inert_warnings(fn, *args)
    assert len(said) == 1, said
    return said[0]


# (what the file sets, what the warning must say)
RULES = [
    ({"fusion": {"method": "rrf", "alpha": 0.7}}, "fusion.alpha is set but fusion.method 'rrf' does not read it"),
    ({"fusion": {"method": "convex", "rrf_k": 30}}, "fusion.rrf_k is set but fusion.method 'convex' does not read it"),
    ({"fusion": {"method": "learned", "lexical_weight": 2.0}},
     "fusion.lexical_weight is set but fusion.method 'learned' does not read it"),
    ({"fusion": {"method": "rrf", "model": "fusion.json"}},
     "fusion.model is set but fusion.method is 'rrf' and fusion.router is false"),
    ({"rerank": {"provider": "none", "top_n": 20, "blend": "replace", "buckets": BUCKETS}},
     "rerank.top_n, rerank.blend and rerank.buckets are set but rerank.provider is 'none'"),
    ({"rerank": {"provider": "http", "url": "https://h/v1/rerank", "blend": "replace", "buckets": BUCKETS}},
     "rerank.buckets is set but rerank.blend is 'replace'"),
    ({"rerank": {"provider": "http", "url": "https://h/v1/rerank", "blend": "none", "top_n": 20}},
     "rerank.top_n is set but rerank.blend is 'none'"),
    ({"rerank": {"provider": "cross-encoder", "model": "m", "url": "https://h/v1/rerank"}},
     "rerank.url is set but rerank.provider is 'cross-encoder'"),
    ({"expansion": {"provider": "none", "max_lex": 3, "url": "https://h/v1/chat"}},
     "expansion.url and expansion.max_lex are set but expansion.provider is 'none'"),
    ({"retrieval": {"lexical": {"enabled": False, "k1": 0.9}}},
     "retrieval.lexical.k1 is set but retrieval.lexical.enabled is false"),
    ({"retrieval": {"dense": {"enabled": False, "top_k": 20}}},
     "retrieval.dense.top_k is set but retrieval.dense.enabled is false"),
    ({"retrieval": {"dense": {"enabled": False, "model": "m"}}},
     "retrieval.dense.model is set but retrieval.dense.enabled and dedup.near_duplicate_enabled are false"),
    ({"retrieval": {"dense": {"ef_search": 64}}}, "retrieval.dense.ef_search is set but retrieval.dense.index is 'exact'"),
    ({"retrieval": {"dense": {"url": "https://h/v1/embeddings"}}},
     "retrieval.dense.url is set but retrieval.dense.provider is 'local'"),
    ({"routing": {"enabled": False, "technical_lexical_boost": 1.5}},
     "routing.technical_lexical_boost is set but routing.enabled is false"),
    ({"adapt": {"gap_scale": 0.3}}, "adapt.gap_scale is set but adapt.dense_gap is false"),
    ({"guard": {"max_rank": 5}}, "guard.max_rank is set but guard.exact_token is false"),
    ({"dedup": {"max_per_source": 2}}, "dedup.max_per_source is set but dedup.source_enabled is false"),
    ({"dedup": {"near_duplicate_threshold": 0.8}},
     "dedup.near_duplicate_threshold is set but dedup.near_duplicate_enabled is false"),
    ({"priors": {"priority_field": "priority", "recency_half_life_days": 7.0}},
     "priors.recency_half_life_days is set but priors.recency_field is unset"),
    ({"priors": {"use_weight": 1.0}}, "priors.use_weight is set but priors.use_field is unset"),
    ({"priors": {"use_field": "n", "add_weight": 2.0}}, "priors.add_weight is set but priors.combine is 'multiply'"),
    ({"priors": {"top_n": 10}},
     "priors.top_n is set but priors.recency_field, priors.priority_field and priors.use_field are unset"),
]


@pytest.mark.parametrize(("data", "said"), RULES, ids=[s.split()[0].rstrip(",") for _, s in RULES])
def test_each_rule_names_the_field_and_why(data, said):
    msg = _one(config_from_dict, data, "my.yaml")
    assert msg.startswith("my.yaml: settings with no effect: ")
    assert said in msg


def test_a_file_gets_one_warning_naming_it_and_every_inert_field(tmp_path):
    p = tmp_path / "my.yaml"
    p.write_text("fusion:\n  method: rrf\n  alpha: 0.7\nrerank:\n  provider: none\n  buckets: [[5, 0.5], [.inf, 0.2]]\n")
    with pytest.warns(InertSettingWarning) as caught:
        cfg = load_config(p)
    assert len(caught) == 1
    assert caught[0].filename == __file__  # it points at the caller's line
    msg = str(caught[0].message)
    assert msg.startswith(f"{p}: settings with no effect: fusion.alpha is set but fusion.method 'rrf' does not read it; ")
    assert "rerank.buckets is set but rerank.provider is 'none'" in msg
    assert cfg.fusion.alpha == 0.7  # a warning, not an error: the config loads as written
    # The same content as a mapping names its origin as the loader's errors do.
    assert _one(load_config, yaml.safe_load(p.read_text())).startswith("<mapping>: settings with no effect: fusion.alpha")


def test_only_written_values_other_than_the_default_count():
    assert _inert_warnings(config_from_dict, {"fusion": {"method": "rrf"}}) == []  # alpha's default is not news
    assert _inert_warnings(config_from_dict, {"fusion": {"method": "rrf", "alpha": 0.5}}) == []  # nor written
    assert "fusion.alpha" in _one(config_from_dict, {"fusion": {"method": "rrf", "alpha": 0.6}})


def test_a_config_with_nothing_inert_is_silent():
    data = {
        "fusion": {"method": "convex", "alpha": 0.7, "normalization": "zscore"},
        "retrieval": {"lexical": {"k1": 0.9}, "dense": {"enabled": False}},
        "guard": {"exact_token": True, "max_rank": 5},
        "dedup": {"source_enabled": True, "max_per_source": 2},
        "priors": {"use_field": "access_count", "use_weight": 1.0, "combine": "add", "add_weight": 2.0},
    }
    assert _inert_warnings(config_from_dict, data) == []
    data["fusion"]["method"] = "rrf"  # the same settings, one switch flipped
    assert "fusion.alpha and fusion.normalization are set but fusion.method 'rrf' does not read them" in _one(config_from_dict, data)


@pytest.mark.parametrize("name", list_presets())
def test_presets_and_saved_presets_load_silently(tmp_path, name):
    assert _inert_warnings(load_config, name) == []
    # A copy of the preset file: the settings it switches off itself (a reranker's blend, ready for
    # HRT_RERANK_PROVIDER) are deliberate, not the copier's mistake.
    d = yaml.safe_load((PRESETS_DIR / f"{name}.yaml").read_text())
    assert _inert_warnings(load_config, d) == []
    cfg = load_config(name)
    for suffix in (".yaml", ".json"):
        saved = save_config(cfg, tmp_path / f"saved{suffix}")  # every field written, the dormant ones too
        assert _inert_warnings(load_config, saved) == []
    # What `hrt tune` writes (a saved config under another name) too.
    tuned = save_config(cfg.with_updates({"name": f"{name}-tuned"}), tmp_path / "tuned.yaml")
    assert _inert_warnings(load_config, tuned) == []
    # The copy is still checked: a switched-off setting of the copier's own is named.
    d["rerank"] = d.get("rerank", {}) | {"provider": "none", "buckets": [[2, 0.5], [".inf", 0.1]]}
    assert "rerank.buckets is set but rerank.provider is 'none'" in _one(load_config, d)


def test_a_presets_dormant_settings_are_news_where_it_does_not_switch_them_off():
    d = yaml.safe_load((PRESETS_DIR / "qmd.yaml").read_text())
    assert _inert_warnings(config_from_dict, d) == []
    msg = _one(config_from_dict, d | {"name": "mine"})  # no longer the preset's
    assert "expansion.max_lex and expansion.max_vec are set but expansion.provider is 'none'" in msg
    # A copy of a0x-adaptive (convex, alpha 0.7) switched to rrf: its alpha is now switched off.
    d = yaml.safe_load((PRESETS_DIR / "a0x-adaptive.yaml").read_text())
    d["fusion"]["method"] = "rrf"
    assert "fusion.alpha is set but fusion.method 'rrf' does not read it" in _one(config_from_dict, d)


def test_a_saved_config_is_a_snapshot_and_loads_silently(tmp_path):
    """`save_config` writes every field, the ones a slider moved while switched off too (the lab's export):
    such a file is not a list of choices. Take a section out and it is one again."""
    cfg = load_config("guarded-rrf").with_updates({"name": "mine", "fusion.alpha": 0.9})
    saved = save_config(cfg, tmp_path / "saved.yaml")
    assert _inert_warnings(load_config, saved) == []
    d = yaml.safe_load(saved.read_text())
    del d["output"]
    (tmp_path / "partial.yaml").write_text(yaml.safe_dump(d))
    assert "fusion.alpha is set but fusion.method 'rrf'" in _one(load_config, tmp_path / "partial.yaml")


def test_with_updates_and_tuner_trials_never_warn():
    from toolkit.tune import _apply

    base = load_config("qmd")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = base.with_updates({"fusion.alpha": 0.9, "rerank.top_n": 7, "guard.max_rank": 9})
        trial = _apply(base, {"fusion.normalization": "zscore", "rerank.buckets": [[2, 0.5], [float("inf"), 0.1]]})
    assert not [w for w in caught if issubclass(w.category, InertSettingWarning)]
    # ... though every one of those fields is switched off there.
    assert {"fusion.alpha", "rerank.top_n", "guard.max_rank"} <= inert_settings(cfg).keys()
    assert {"fusion.normalization", "rerank.buckets"} <= inert_settings(trial).keys()


def test_inert_settings_lists_the_reason_of_each_field():
    cfg = load_config("bm25-only")
    inert = inert_settings(cfg)
    assert inert["fusion.rrf_k"] == "fusion.method 'convex' does not read it"
    assert inert["retrieval.dense.top_k"] == "retrieval.dense.enabled is false"
    assert "fusion.alpha" not in inert and "retrieval.lexical.k1" not in inert
    assert inert_settings(cfg, ["fusion.alpha", "fusion.rank_bonus"]) == {
        "fusion.rank_bonus": "fusion.method 'convex' does not read it"
    }


# ------------------------------------------------------------------ hrt
@pytest.fixture
def beir(tmp_path, corpus_file):
    root = tmp_path / "ds"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(corpus_file.read_text())
    qs = [{"_id": "q1", "text": "deploy fails with ECONNREFUSED"}, {"_id": "q2", "text": "what is the retry backoff?"}]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\n")
    return root


def test_hrt_prints_the_warning_once_on_stderr(tmp_path, beir):
    cfg = tmp_path / "my.yaml"
    cfg.write_text("retrieval:\n  dense:\n    enabled: false\n    top_k: 20\nfusion:\n  method: rrf\n  alpha: 0.7\n")
    want = (f"warning: {cfg}: settings with no effect: retrieval.dense.top_k is set but retrieval.dense.enabled is "
            "false; fusion.alpha is set but fusion.method 'rrf' does not read it\n")
    r = CliRunner().invoke(main, ["run", "--dataset", str(beir), "--config", str(cfg), "--store",
                                  str(tmp_path / "s.duckdb"), "--out", str(tmp_path / "r.trec")])
    assert r.exit_code == 0, r.output
    assert r.stderr.count(want) == 1, r.stderr
    assert "InertSettingWarning" not in r.stderr  # our line, not Python's warning display
    r = CliRunner().invoke(main, ["export", "--config", str(cfg), "--engine", "toolkit", "--out", str(tmp_path / "x.yaml")])
    assert r.exit_code == 0, r.output
    assert r.stderr.count(want) == 1, r.stderr
    r = CliRunner().invoke(main, ["export", "--config", "bm25-only", "--engine", "toolkit", "--out", str(tmp_path / "y.yaml")])
    assert r.exit_code == 0 and "warning:" not in r.stderr, r.stderr


def test_the_dense_gap_rule_is_named_as_doing_nothing_under_the_learned_default(tmp_path):
    """`default` became the learned model, which weighs no list per query: a file extending it that tunes the dense-gap
    rule (as one written for the RRF default did) loads with a warning that says why; under `guarded-rrf` it acts."""
    (tmp_path / "gap.yaml").write_text("extends: default\nadapt: {dense_gap: true, gap_scale: 0.2}\n")
    assert "adapt.gap_scale is set but" in _one(load_config, tmp_path / "gap.yaml")
    assert "the learned model weighs no list per query" in _one(load_config, tmp_path / "gap.yaml")
    (tmp_path / "rrf.yaml").write_text("extends: guarded-rrf\nadapt: {gap_scale: 0.2}\n")
    assert _inert_warnings(load_config, tmp_path / "rrf.yaml") == []


def test_the_rules_that_stand_aside_for_a_reranker_and_priors_are_named_and_the_dense_rule_outlives_the_guard():
    """`guard.coverage_first` and `guard.dense_max_rank` stand aside while a reranker blends or priors re-weight: a file
    setting them then says so, and rescore's own test (`pipeline.coverage_stands_aside`) asks the same rules. The dense
    rule does not hang on the exact-token guard: with the guard off it still acts, and no warning says otherwise."""
    from toolkit.pipeline import coverage_stands_aside

    rr = {"rerank": {"provider": "http", "url": "https://h/v1/rerank"}, "guard": {"coverage_first": True}}
    assert ("guard.coverage_first is set but rerank.provider is 'http' and rerank.blend is 'position' (while a reranker's "
            "scores shape the order)") in _one(config_from_dict, rr, "my.yaml")
    pri = {"priors": {"recency_field": "date"}, "guard": {"dense_max_rank": 3}}
    assert "guard.dense_max_rank is set but priors.recency_field is 'date'" in _one(config_from_dict, pri, "my.yaml")
    assert "(while priors re-weight the list)" in _one(config_from_dict, pri, "my.yaml")
    assert coverage_stands_aside(config_from_dict(rr)) and coverage_stands_aside(config_from_dict(pri))
    blend_off = {"rerank": {**rr["rerank"], "blend": "none"}, "guard": {"coverage_first": True}}
    assert not coverage_stands_aside(config_from_dict(blend_off)) and not coverage_stands_aside(load_config("default"))
    assert _inert_warnings(config_from_dict, {"guard": {"exact_token": False, "dense_max_rank": 3}}, "my.yaml") == []
    assert "guard.dense_max_rank" not in inert_settings(load_config("default").with_updates({"guard.exact_token": False}))


def test_the_dense_gap_switch_itself_is_named_under_the_learned_model(tmp_path):
    (tmp_path / "gap.yaml").write_text("extends: default\nadapt: {dense_gap: true}\n")
    assert "adapt.dense_gap is set but fusion.method is 'learned'" in _one(load_config, tmp_path / "gap.yaml")
    assert "adapt.dense_gap" not in inert_settings(load_config("guarded-rrf"))
