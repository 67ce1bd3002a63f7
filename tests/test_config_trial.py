"""User-trial fixes to the config: paths relative to the config file, section updates that merge, diffs of
dict-valued fields, duplicate keys, and messages that say what to do."""

from __future__ import annotations

import inspect
import json
import shutil
import warnings
from pathlib import Path

import polars as pl
import pytest
from conftest import DOCS

import toolkit
from toolkit import learned_fusion
from toolkit.config import load_config, save_config
from toolkit.errors import InputError
from toolkit.loaders import load_corpus
from toolkit.report import Report
from toolkit.session import Session
from toolkit.store import Store

SHIPPED = Path(toolkit.__file__).parent / "models" / "learned-fusion.json"


# ------------------------------------------------------------------ 1. relative paths
@pytest.fixture
def tree(tmp_path: Path) -> Path:
    """tmp/cfgs/other/{c.yaml, models/fusion.json, exp.jsonl, scores.jsonl, ce/} plus decoys of the same
    relative names in tmp/ (the working directory of the trial)."""
    other = tmp_path / "cfgs" / "other"
    for root in (other, tmp_path):
        (root / "models").mkdir(parents=True)
        shutil.copy(SHIPPED, root / "models" / "fusion.json")
        (root / "exp.jsonl").write_text("")
        (root / "scores.jsonl").write_text("")
        (root / "ce").mkdir()
    (other / "c.yaml").write_text(
        "fusion: {method: learned, model: models/fusion.json}\n"
        "expansion: {provider: file, path: exp.jsonl}\n"
        "rerank: {provider: file, path: scores.jsonl, model: ce}\n"
        "retrieval: {dense: {model: ce}}\n"
    )
    return tmp_path


def test_relative_paths_in_a_config_file_are_read_from_its_folder(tree, monkeypatch):
    other = tree / "cfgs" / "other"
    for cwd, name in [(tree, "cfgs/other/c.yaml"), (other, "c.yaml")]:
        monkeypatch.chdir(cwd)
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # found next to the config: no warning
            cfg = load_config(name)
        assert cfg.fusion.model == str(other / "models" / "fusion.json")
        assert (cfg.expansion.path, cfg.rerank.path) == (str(other / "exp.jsonl"), str(other / "scores.jsonl"))
        # A local model folder (a reranker from `hrt train-reranker`) is a path too.
        assert cfg.rerank.model == cfg.retrieval.dense.model == str(other / "ce")
        assert learned_fusion.resolve(cfg.fusion.model) == other / "models" / "fusion.json"
    monkeypatch.chdir("/")  # absolute now: a later chdir changes nothing
    assert learned_fusion.resolve(cfg.fusion.model).is_file()


def test_model_names_stay_names_and_python_configs_stay_relative(tree, monkeypatch):
    monkeypatch.chdir(tree)
    p = tree / "cfgs" / "m.yaml"
    p.write_text(
        "rerank: {provider: cross-encoder, model: cross-encoder/ms-marco-MiniLM-L-6-v2}\n"
        "retrieval: {dense: {provider: http, url: 'http://x.test/v1', model: ce}}\n"  # ce exists beside it
    )
    cfg = load_config(p)
    assert cfg.rerank.model == "cross-encoder/ms-marco-MiniLM-L-6-v2"  # a hub id, not a folder anywhere
    assert cfg.retrieval.dense.model == "ce"  # the name an http endpoint serves is never a path
    assert load_config("ace").rerank.model == "cross-encoder/ms-marco-MiniLM-L-6-v2"
    built = load_config({"fusion": {"model": "models/fusion.json"}})
    assert built.fusion.model == "models/fusion.json"  # built in Python: the working directory's, as before
    assert built.with_updates({"expansion.path": "exp.jsonl"}).expansion.path == "exp.jsonl"


def test_a_saved_config_means_the_same_files_wherever_it_is_loaded(tree, monkeypatch):
    monkeypatch.chdir(tree)
    cfg = load_config({"fusion": {"method": "learned", "model": "models/fusion.json"}, "rerank": {"model": "ce"}})
    p = save_config(cfg, tree / "cfgs" / "saved.yaml")  # the lab's export, `hrt tune --out`
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        back = load_config(p)
    assert (back.fusion.model, back.rerank.model) == (str(tree / "models" / "fusion.json"), str(tree / "ce"))
    hub = load_config({"rerank": {"model": "cross-encoder/ms-marco-MiniLM-L-6-v2"}})
    assert load_config(save_config(hub, tree / "cfgs" / "hub.json")) == hub


def test_a_path_found_only_in_the_working_directory_is_used_with_a_warning(tree, monkeypatch):
    monkeypatch.chdir(tree)
    p = tree / "cfgs" / "old.yaml"  # written when paths were read from the working directory
    p.write_text("fusion: {method: learned, model: models/fusion.json}\n")
    with pytest.warns(UserWarning) as w:
        cfg = load_config("cfgs/old.yaml")
    msg = str(w[0].message)
    assert "cfgs/old.yaml: fusion.model: models/fusion.json" in msg
    assert str(tree / "cfgs" / "models" / "fusion.json") in msg and str(tree / "models" / "fusion.json") in msg
    assert cfg.fusion.model == str(tree / "models" / "fusion.json")


def test_a_missing_relative_path_is_an_error_naming_the_config_file(tree, monkeypatch):
    monkeypatch.chdir(tree)
    p = tree / "cfgs" / "missing.yaml"
    p.write_text("fusion: {method: learned, model: models/nope.json}\n")
    with pytest.raises(
        InputError,
        match=rf"cfgs/missing\.yaml: fusion\.model: models/nope\.json: no such file \(relative paths are read "
        rf"from the config file's folder, {tree / 'cfgs'}\)",
    ):
        load_config("cfgs/missing.yaml")
    # A path the config does not read (provider none) is no error: it is the file's folder's if used later.
    p.write_text("expansion: {provider: none, path: nope.jsonl}\n")
    assert load_config(p).expansion.path == str(tree / "cfgs" / "nope.jsonl")
    # A file that exists but is broken is reported by its reader, with the path the config file meant.
    (tree / "cfgs" / "bad.json").write_text("{}")
    p.write_text("fusion: {method: learned, model: bad.json}\n")
    with pytest.raises(InputError, match=rf"{tree / 'cfgs' / 'bad.json'}: not a learned fusion model"):
        learned_fusion.FusionModel.load(load_config(p).fusion.model)


# ------------------------------------------------------------------ 2. adapt range
def test_adapt_min_weight_above_max_weight_is_an_error(tmp_path):
    p = tmp_path / "a.yaml"
    p.write_text("adapt: {dense_gap: true, min_weight: 5, max_weight: 1}\n")
    with pytest.raises(InputError, match=r"a\.yaml: adapt: adapt\.min_weight \(5\) is above adapt\.max_weight \(1\)"):
        load_config(p)
    with pytest.raises(InputError, match=r"<updates>: adapt: adapt\.min_weight .* adapt\.max_weight"):
        load_config("default").with_updates({"adapt.min_weight": 5.0, "adapt.max_weight": 1.0})
    assert load_config("default").with_updates({"adapt.min_weight": 2.0, "adapt.max_weight": 2.0}).adapt.max_weight == 2.0


# ------------------------------------------------------------------ 3. diff of dict-valued fields
def test_diff_compares_dict_valued_fields_whole():
    a = load_config("agent-memory")
    b = a.with_updates({"priors.priority_map": {"P0": 4.0}})
    assert a.diff(b) == {"priors.priority_map": (a.priors.priority_map, {"P0": 4.0})}
    empty = a.with_updates({"priors.priority_map": {}})
    assert empty.diff(a) == {"priors.priority_map": ({}, a.priors.priority_map)}
    flat = a.flat()
    assert flat["priors.priority_map"] == a.priors.priority_map and not any(k.startswith("priors.priority_map.") for k in flat)
    # `hrt report` of two such configs lists the field.
    none = pl.DataFrame()
    rep = Report("d", "dev", "a", none, none, none, none, none, configs={"a": a, "b": b, "empty": empty})
    table = rep.config_diff()
    assert table["field"].to_list() == ["priors.priority_map"]
    assert json.loads(table["empty"][0]) == {}


# ------------------------------------------------------------------ 4. section updates merge
def test_a_section_update_merges_into_the_section():
    m = load_config("memoria")
    m2 = m.with_updates({"fusion": {"rrf_k": 5}})
    assert m.diff(m2) == {"fusion.rrf_k": (60, 5)} and m2.fusion.method == "convex"  # not reset to rrf
    deep = m.with_updates({"retrieval": {"dense": {"top_k": 7}}})
    assert m.diff(deep) == {"retrieval.dense.top_k": (m.retrieval.dense.top_k, 7)}
    # A dict-valued field is still one value: replaced, not merged.
    a = load_config("agent-memory")
    assert a.with_updates({"priors": {"priority_map": {"P0": 2.0}}}).priors.priority_map == {"P0": 2.0}
    with pytest.raises(InputError, match=r"unknown config field fusion\.rrf_kk \(did you mean fusion\.rrf_k\?\)"):
        m.with_updates({"fusion": {"rrf_kk": 5}})
    with pytest.raises(InputError, match=r"<updates>: fusion\.rrf_k: Input should be greater than 0"):
        m.with_updates({"fusion": {"rrf_k": 0}})


def test_session_set_of_a_section_merges(tmp_path):
    corpus = tmp_path / "c.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    queries = pl.DataFrame({"qid": ["q1"], "text": ["deploy fails with ECONNREFUSED"]})
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(load_corpus(corpus), embed=False)
        s = Session(st, queries, config=load_config("bm25-only").with_updates({"fusion.rrf_k": 30}), baseline=None)
        assert s.set("fusion", {"lexical_weight": 2.0}), s.history
        assert (s.config.fusion.rrf_k, s.config.fusion.lexical_weight) == (30, 2.0)


# ------------------------------------------------------------------ 5. duplicate keys
def test_duplicate_keys_in_a_config_file_are_an_error(tmp_path):
    p = tmp_path / "dup.yaml"
    p.write_text("fusion: {rrf_k: 10}\nfusion: {rrf_k: 20}\n")
    with pytest.raises(InputError, match=r"dup\.yaml:2: invalid YAML: duplicate key 'fusion' \(first on line 1\)"):
        load_config(p)
    p.write_text("fusion:\n  rrf_k: 10\n  alpha: 0.3\n  rrf_k: 20\n")
    with pytest.raises(InputError, match=r"dup\.yaml:4: invalid YAML: duplicate key 'rrf_k' \(first on line 2\)"):
        load_config(p)
    j = tmp_path / "dup.json"
    j.write_text('{"fusion": {"rrf_k": 10}, "fusion": {"rrf_k": 20}}')
    with pytest.raises(InputError, match=r"dup\.json: invalid JSON: key 'fusion' appears twice"):
        load_config(j)
    # A key a YAML merge brings in may still be overridden; the same key in two sections is no duplicate.
    p.write_text("retrieval:\n  lexical: &t {top_k: 5}\n  dense: {<<: *t, top_k: 7}\n")
    cfg = load_config(p)
    assert (cfg.retrieval.lexical.top_k, cfg.retrieval.dense.top_k) == (5, 7)


# ------------------------------------------------------------------ 6. messages
def test_pipeline_config_documents_itself():
    doc = inspect.getdoc(toolkit.PipelineConfig)
    assert doc.startswith("Every setting of one retrieval pipeline") and "with_updates" in doc


def test_a_path_past_a_value_says_it_is_a_value():
    cfg = load_config("memoria")
    with pytest.raises(InputError, match=r"fusion\.alpha is a value, not a section") as e:
        cfg.with_updates({"fusion.alpha.x": 1})
    assert "did you mean" not in str(e.value)
    with pytest.raises(InputError, match=r"priors\.priority_map is a value, not a section"):
        cfg.get("priors.priority_map.0")


def test_schema_version_as_text_is_a_type_error(tmp_path):
    p = tmp_path / "s.yaml"
    p.write_text('schema_version: "1"\n')
    with pytest.raises(InputError, match=r"s\.yaml: schema_version: must be the integer 1 \(got '1', a str\)"):
        load_config(p)
    p.write_text("schema_version: true\n")
    with pytest.raises(InputError, match=r"schema_version: must be the integer 1 \(got True, a bool\)"):
        load_config(p)


def test_a_number_as_a_priority_map_key_says_to_quote_it(tmp_path):
    p = tmp_path / "pm.yaml"
    p.write_text("priors: {priority_field: priority, priority_map: {0: 4.0}}\n")
    with pytest.raises(InputError) as e:
        load_config(p)
    assert str(e.value) == (
        f'{p}: priors.priority_map: key 0 must be a string: quote it ("0": ...), YAML reads an unquoted 0 as a number'
    )
    p.write_text('priors: {priority_field: priority, priority_map: {"0": 4.0}}\n')
    assert load_config(p).priors.priority_map == {"0": 4.0}
