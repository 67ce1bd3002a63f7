"""The typed config: defaults, presets, lossless YAML/JSON round trips, and errors that name file and field."""

from __future__ import annotations

import json
import math
import os

import numpy as np
import pytest
from pydantic import ValidationError

from toolkit.config import (
    PRESETS_DIR,
    PipelineConfig,
    config_from_dict,
    list_presets,
    load_config,
    save_config,
)
from toolkit.errors import InputError

EXPECTED_PRESETS = {
    "default",
    "guarded-rrf",
    "bm25-only",
    "vector-only",
    "qmd",
    "cems-p0",
    "ace",
    "a0x-adaptive",
    "memoria",
    "hybrid-rrf",
    "learned",
    "agent-memory",
}


def test_defaults_are_the_qmd_guardrails():
    c = PipelineConfig()
    assert c.schema_version == 1
    assert (c.retrieval.level, c.retrieval.lexical.top_k, c.retrieval.lexical.k1, c.retrieval.lexical.b) == (
        "document",
        100,
        1.2,
        0.75,
    )
    # Index settings are the store's unless a config pins them (then prepare checks them).
    assert (c.retrieval.dense.model, c.retrieval.lexical.stemmer, c.retrieval.lexical.stopwords) == (None, None, None)
    assert (c.fusion.method, c.fusion.rrf_k, c.fusion.original_weight) == ("rrf", 60, 2.0)
    assert c.fusion.rank_bonus == [(1, 0.05), (3, 0.02)]
    assert (c.rerank.provider, c.rerank.top_n, c.rerank.blend) == ("none", 40, "position")
    assert c.rerank.buckets == [(3.0, 0.75), (10.0, 0.60), (math.inf, 0.40)]
    assert (c.expansion.strong_signal_min, c.expansion.strong_signal_gap) == (0.85, 0.15)
    assert (c.output.format, c.output.n, c.output.max_chars) == ("compact", 5, 2000)
    assert c.routing.enabled is False and c.dedup.source_enabled is False


def test_the_parsed_presets_are_the_yaml_as_it_is():
    """`hrt search` reads a preset from presets/parsed.json (no PyYAML import): that file must hold each preset's
    YAML as parsed now, value for value and type for type (1 is not 1.0, inf stays inf). After editing a preset:
    python -c "from toolkit.config import write_parsed_presets as w; w()"."""
    from toolkit.config import PARSED_PRESETS, parsed_presets

    assert repr(json.loads(PARSED_PRESETS.read_bytes())) == repr(parsed_presets()), (
        "presets/parsed.json is stale: python -c 'from toolkit.config import write_parsed_presets as w; w()'")


def test_a_preset_edited_since_its_parse_is_read_from_its_yaml(tmp_path, monkeypatch):
    """The parsed copy is keyed by the YAML file's SHA-256: a changed preset is never read from a stale copy."""
    import shutil

    import toolkit.config as config

    folder = tmp_path / "presets"
    shutil.copytree(PRESETS_DIR, folder)
    monkeypatch.setattr(config, "PRESETS_DIR", folder)
    monkeypatch.setattr(config, "PARSED_PRESETS", folder / "parsed.json")
    assert load_config("bm25-only").retrieval.lexical.k1 == 1.2
    qmd = load_config("qmd")
    yaml_file = folder / "bm25-only.yaml"
    yaml_file.write_text(yaml_file.read_text().replace("k1: 1.2", "k1: 1.5"))
    assert load_config("bm25-only").retrieval.lexical.k1 == 1.5
    (folder / "parsed.json").write_text("{not json")  # a damaged copy: the YAML, not an error
    assert load_config("bm25-only").retrieval.lexical.k1 == 1.5
    (folder / "parsed.json").unlink()
    assert load_config("qmd") == qmd  # from the YAML as from its parsed copy


def test_all_presets_load_and_document_themselves():
    assert set(list_presets()) == EXPECTED_PRESETS
    for name in list_presets():
        cfg = load_config(name)
        assert cfg.name == name and cfg.description
        text = (PRESETS_DIR / f"{name}.yaml").read_text()
        assert text.startswith(f"# {name}:"), name  # first line says what the preset reproduces
    assert not load_config("bm25-only").retrieval.dense.enabled
    assert not load_config("vector-only").retrieval.lexical.enabled
    assert (
        load_config("hybrid-rrf").fusion.rank_bonus == []
        and load_config("hybrid-rrf").fusion.original_weight == 1.0
    )
    qmd = load_config("qmd")
    assert (qmd.fusion.rrf_k, qmd.fusion.original_weight, qmd.rerank.top_n, qmd.rerank.blend) == (
        60,
        2.0,
        40,
        "position",
    )
    assert qmd.expansion.strong_signal_skip and qmd.rerank.provider == "none"
    assert load_config("cems-p0").rerank.top_n == 30
    ace = load_config("ace")
    assert (
        ace.routing.enabled
        and ace.routing.conversational_skip_lexical
        and ace.dedup.near_duplicate_threshold == 0.90
    )
    a0x = load_config("a0x-adaptive")
    assert (a0x.fusion.method, a0x.fusion.alpha, a0x.routing.technical_lexical_boost) == ("convex", 0.7, 1.5)
    mem = load_config("memoria")
    assert (mem.fusion.method, mem.fusion.alpha, mem.dedup.source_enabled, mem.output.format) == (
        "convex",
        0.95,
        True,
        "compact",
    )


@pytest.mark.parametrize("ext", ["yaml", "yml", "json"])
def test_round_trip_is_lossless_including_inf(tmp_path, ext):
    cfg = load_config("qmd").with_updates(
        {
            "rerank.buckets": [[2, 0.9], [7.5, 0.5], [math.inf, 0.1]],
            "fusion.rank_bonus": [[1, 0.1]],
            "expansion.api_key_env": "QMD_KEY",
        }
    )
    p = save_config(cfg, tmp_path / f"c.{ext}")
    back = load_config(p)
    assert back == cfg
    assert math.isinf(back.rerank.buckets[-1][0])
    text = p.read_text()
    if ext == "json":
        json.loads(text)  # strict JSON: no bare Infinity
        assert "Infinity" not in text and '"inf"' in text
    else:
        assert ".inf" in text
    for name in list_presets():
        q = save_config(load_config(name), tmp_path / f"{name}.{ext}")
        assert load_config(q) == load_config(name)


def test_errors_name_the_file_and_dotted_field(tmp_path):
    p = tmp_path / "qmd.yaml"
    p.write_text("fusion:\n  rrf_k: 0\n")
    with pytest.raises(InputError, match=r"qmd\.yaml: fusion\.rrf_k: Input should be greater than 0"):
        load_config(p)
    p.write_text("fusion:\n  rrf_kk: 30\n")
    with pytest.raises(
        InputError, match=r"qmd\.yaml: fusion\.rrf_kk: unknown field \(did you mean rrf_k\?\)"
    ):
        load_config(p)
    p.write_text("output:\n  n: many\n")
    with pytest.raises(InputError, match=r"qmd\.yaml: output\.n: Input should be a valid integer"):
        load_config(p)
    p.write_text("rerank:\n  blend: sometimes\n")
    with pytest.raises(InputError, match=r"rerank\.blend: Input should be 'replace', 'position' or 'none'"):
        load_config(p)
    p.write_text("fusoin: {}\n")
    with pytest.raises(InputError, match=r"fusoin: unknown field \(did you mean fusion\?\)"):
        load_config(p)
    p.write_text("fusion: [1, 2\n")
    with pytest.raises(InputError, match=r"qmd\.yaml:\d+: invalid YAML"):
        load_config(p)
    p.write_text("name: off\n")  # YAML 1.1 reads it as False
    with pytest.raises(InputError, match=r"qmd\.yaml: name: Input should be a valid string \(YAML reads unquoted"):
        load_config(p)


def test_several_errors_are_all_reported():
    with pytest.raises(InputError) as e:
        config_from_dict({"fusion": {"rrf_k": -1, "alpha": 2}}, origin="x.json")
    msg = str(e.value)
    assert (
        "x.json: fusion.rrf_k:" in msg
        and "x.json: fusion.alpha: Input should be less than or equal to 1" in msg
    )


def test_unknown_schema_version_is_a_clear_error():
    with pytest.raises(
        InputError,
        match=r"f\.yaml: schema_version: unsupported schema_version 2: this toolkit reads version 1",
    ):
        config_from_dict({"schema_version": 2}, origin="f.yaml")


@pytest.mark.parametrize(
    ("buckets", "message"),
    [
        ([[3, 0.75], [2, 0.6], [math.inf, 0.4]], "strictly increasing"),
        ([[3, 0.75], [10, 0.6]], "last bucket must end at .inf"),
        ([[3, 1.5], [math.inf, 0.4]], r"retrieval weight must be in \[0, 1\]"),
        ([], "at least one bucket"),
    ],
)
def test_bucket_validation(buckets, message):
    with pytest.raises(InputError, match=rf"rerank\.buckets: .*{message}"):
        config_from_dict({"rerank": {"buckets": buckets}})


def test_rank_bonus_validation():
    with pytest.raises(InputError, match="strictly increasing"):
        config_from_dict({"fusion": {"rank_bonus": [[3, 0.02], [1, 0.05]]}})
    with pytest.raises(InputError, match=r"bonus must be in \[0, 1\]"):
        config_from_dict({"fusion": {"rank_bonus": [[1, -0.1]]}})
    assert config_from_dict({"fusion": {"rank_bonus": []}}).fusion.rank_bonus == []


def test_secrets_never_go_into_a_config():
    with pytest.raises(InputError, match=r"rerank: 'api_key' is not allowed"):
        config_from_dict({"rerank": {"api_key": "sk-123"}})
    for bad in ["sk-proj-abcdef1234567890", "hf_AbCdEf123456", "aB3dE5gH7jK9mN1pQ3sT5vX7"]:
        with pytest.raises(InputError, match=r"expansion\.api_key_env: looks like a secret value"):
            config_from_dict({"expansion": {"api_key_env": bad}})
    with pytest.raises(InputError, match="not an environment variable name"):
        config_from_dict({"rerank": {"api_key_env": "my key"}})
    with pytest.raises(InputError, match="carries credentials"):
        config_from_dict({"rerank": {"provider": "http", "url": "https://u:p4ss@host/v1/rerank"}})
    with pytest.raises(InputError, match="carries credentials"):
        config_from_dict({"rerank": {"provider": "http", "url": "https://host/v1/rerank?api_key=abc"}})
    ok = config_from_dict(
        {"rerank": {"provider": "http", "url": "https://host/v1/rerank", "api_key_env": "RERANK_API_KEY"}}
    )
    assert ok.rerank.api_key_env == "RERANK_API_KEY"


def test_providers_need_their_target_and_retrievers_must_make_sense():
    with pytest.raises(InputError, match=r"rerank: provider 'http' needs rerank\.url"):
        config_from_dict({"rerank": {"provider": "http"}})
    with pytest.raises(InputError, match=r"provider 'cross-encoder' needs rerank\.model"):
        config_from_dict({"rerank": {"provider": "cross-encoder"}})
    with pytest.raises(InputError, match=r"expansion: provider 'file' needs expansion\.path"):
        config_from_dict({"expansion": {"provider": "file"}})
    with pytest.raises(InputError, match="enable at least one of lexical and dense"):
        config_from_dict({"retrieval": {"lexical": {"enabled": False}, "dense": {"enabled": False}}})
    with pytest.raises(InputError, match="no results"):
        config_from_dict({"retrieval": {"dense": {"enabled": False}}, "routing": {"enabled": True}})


def test_with_updates_returns_a_new_validated_config():
    base = load_config("qmd")
    new = base.with_updates(
        {"fusion.rrf_k": np.int64(30), "rerank.top_n": 20, "fusion.alpha": np.float64(0.25)}
    )
    assert (new.fusion.rrf_k, new.rerank.top_n, new.fusion.alpha) == (30, 20, 0.25)
    assert base.fusion.rrf_k == 60  # unchanged
    assert new.diff(base) == {"fusion.rrf_k": (30, 60), "rerank.top_n": (20, 40), "fusion.alpha": (0.25, 0.5)}
    assert new.get("fusion.rrf_k") == 30 and new.flat()["rerank.top_n"] == 20
    with pytest.raises(InputError, match=r"<updates>: fusion\.rrf_k: Input should be greater than 0"):
        base.with_updates({"fusion.rrf_k": 0})
    with pytest.raises(
        InputError, match=r"unknown config field fusion\.rrf_kk \(did you mean fusion\.rrf_k\?\)"
    ):
        base.with_updates({"fusion.rrf_kk": 3})
    with pytest.raises(InputError, match=r"unknown config field fusoin"):
        base.with_updates({"fusoin.rrf_k": 3})
    with pytest.raises(ValidationError):
        base.fusion.rrf_k = 10  # frozen: change configs through with_updates


def test_load_config_errors(tmp_path):
    with pytest.raises(InputError, match=r"qdm: neither a config file nor a preset \(did you mean qmd\?\)"):
        load_config("qdm")
    with pytest.raises(InputError, match="config file not found"):
        load_config(tmp_path / "missing.yaml")
    with pytest.raises(InputError, match=r"end in \.yaml, \.yml or \.json"):
        save_config(PipelineConfig(), tmp_path / "c.txt")
    p = tmp_path / "list.yaml"
    p.write_text("- 1\n- 2\n")
    with pytest.raises(InputError, match="must be a mapping"):
        load_config(p)


def test_a_mapping_is_read_like_a_config_file(tmp_path):
    """Notebook users pass a dict (`Lab(..., config={...})`): it means what the same YAML file would."""
    d = {"fusion": {"rrf_k": 20, "rank_bonus": [[1, 0.05]]}, "rerank": {"provider": "none"}}
    p = tmp_path / "c.yaml"
    p.write_text(json.dumps(d))
    assert load_config(d) == load_config(p)
    assert load_config(d).fusion.rrf_k == 20
    with pytest.raises(InputError, match=r"<mapping>.*fusion\.rrf_k"):
        load_config({"fusion": {"rrf_k": -3}})
    with pytest.raises(InputError, match="expected a preset name, a file path, a mapping or a PipelineConfig, got int"):
        load_config(3)


# ------------------------------------------------------------------ strict where it says strict (#16.6)
@pytest.mark.parametrize(
    ("section", "value", "message"),
    [
        ({"retrieval": {"lexical": {"top_k": True}}}, "retrieval.lexical.top_k", "valid integer"),
        ({"retrieval": {"lexical": {"top_k": "50"}}}, "retrieval.lexical.top_k", "valid integer"),
        ({"fusion": {"rrf_k": 60.0}}, "fusion.rrf_k", "valid integer"),
        ({"fusion": {"alpha": "0.5"}}, "fusion.alpha", "valid number"),
        ({"fusion": {"alpha": True}}, "fusion.alpha", "valid number"),
        ({"routing": {"enabled": "yes"}}, "routing.enabled", "valid boolean"),
        ({"routing": {"enabled": 1}}, "routing.enabled", "valid boolean"),
        ({"fusion": {"rank_bonus": [[True, 0.05]]}}, r"fusion.rank_bonus\[0\]\[0\]", "valid integer"),
        ({"threshold": {"min_score": math.inf}}, "threshold.min_score", "finite number"),
        ({"threshold": {"low_spread": math.nan}}, "threshold.low_spread", "finite number"),
        ({"fusion": {"rank_bonus": [[1, math.inf]]}}, r"fusion.rank_bonus\[0\]\[1\]", "finite number"),
        ({"rerank": {"buckets": [[3, math.nan], [math.inf, 0.4]]}}, r"rerank.buckets\[0\]\[1\]", "finite number"),
        ({"expansion": {"timeout_s": math.inf}}, "expansion.timeout_s", "finite number"),
        ({"output": {"n": "5"}}, "output.n", "valid integer"),
        ({"retrieval": {"lexical": {"stemmer": "bogus"}}}, "retrieval.lexical.stemmer", "Input should be"),
    ],
)
def test_types_are_strict_and_numbers_finite(section, value, message):
    """No coercion from bool or string to a number (or from a float to an int), no NaN or infinity where
    they make no sense; the error names the dotted field."""
    with pytest.raises(InputError, match=rf"<t>: {value}: .*{message}"):
        config_from_dict(section, origin="<t>")


def test_strictness_keeps_what_configs_legitimately_write(tmp_path):
    # An int where a float is meant, YAML's .inf (and JSON's "inf") for the last bucket, numpy scalars
    # from tuners, and every preset.
    c = config_from_dict({"fusion": {"alpha": 1, "lexical_weight": 2}, "rerank": {"buckets": [[3, 1], ["inf", 0.4]]}})
    assert c.fusion.alpha == 1.0 and isinstance(c.fusion.alpha, float) and c.rerank.buckets[-1] == (math.inf, 0.4)
    p = tmp_path / "c.yaml"
    p.write_text("rerank:\n  buckets: [[3, 0.75], [.inf, 0.4]]\n")
    assert load_config(p).rerank.buckets[-1][0] == math.inf
    assert load_config("qmd").with_updates({"fusion.rrf_k": np.int64(7), "fusion.alpha": np.float32(0.5)}).fusion.rrf_k == 7
    for name in list_presets():
        load_config(name)


@pytest.mark.parametrize("text", ["", "\n\n", "# only a comment\n", "null\n"])
def test_an_empty_config_file_is_an_error(tmp_path, text):
    p = tmp_path / "empty.yaml"
    p.write_text(text)
    with pytest.raises(InputError, match=r"empty\.yaml: the config file is empty"):
        load_config(p)
    j = tmp_path / "empty.json"
    j.write_text("null")
    with pytest.raises(InputError, match=r"empty\.json: the config file is empty"):
        load_config(j)
    explicit = tmp_path / "defaults.yaml"
    explicit.write_text("{}\n")
    assert load_config(explicit) == PipelineConfig()  # all defaults, said on purpose


def test_a_frozen_config_is_hashable_so_it_can_key_a_cache():
    """Configs are frozen, and a user keyed a `functools.cache` by one: hashing failed on its list fields
    ("unhashable type: 'list'"). Equal configs hash equal, a changed one keys another entry."""
    import functools

    calls = []

    @functools.cache
    def scored(cfg):
        calls.append(cfg)
        return cfg.fusion.rrf_k

    base = load_config("default")
    for name in ("default", "qmd", "learned", "bm25-only", "vector-only"):
        assert hash(load_config(name)) == hash(load_config(name))
    assert scored(base) == scored(load_config("default")) and len(calls) == 1
    assert scored(base.with_updates({"fusion.rrf_k": 30})) == 30 and len(calls) == 2
    assert len({base, load_config("default"), load_config("qmd")}) == 2


def test_query_term_frequency_is_a_prepare_field_that_round_trips_and_checks(tmp_path):
    """`retrieval.lexical.query_term_frequency` (Lucene-like BM25: a repeated query term counts per occurrence) is
    off by default, set by a config file as a user writes one, kept by a save and load, accepted by `hrt config
    check` without a warning, named by `hrt config diff`, and a prepare field: it changes the cache key (so the lab
    retrieves again) and `hrt tune` cannot move it. With BM25 off it does nothing, and the check says so."""
    from click.testing import CliRunner

    from toolkit.cli import main
    from toolkit.config import Stage, prepare_settings, stage_of

    assert PipelineConfig().retrieval.lexical.query_term_frequency is False
    f = tmp_path / "lucene.yaml"
    f.write_text("extends: bm25-only\nretrieval: {lexical: {query_term_frequency: true}}\n")
    cfg = load_config(f)
    assert cfg.retrieval.lexical.query_term_frequency is True
    for ext in ("yaml", "json"):
        assert load_config(save_config(cfg, tmp_path / f"back.{ext}")) == cfg
    assert stage_of("retrieval.lexical.query_term_frequency") is Stage.PREPARE
    assert prepare_settings(cfg) != prepare_settings(load_config("bm25-only"))
    r = CliRunner().invoke(main, ["config", "check", "--strict", str(f)])
    assert r.exit_code == 0 and r.stdout.strip() == f"{f}: ok (lucene)" and not r.stderr, r.output
    r = CliRunner().invoke(main, ["config", "diff", "bm25-only", str(f)])
    assert r.exit_code == 0 and r.stdout.startswith("retrieval.lexical.query_term_frequency:"), r.output
    with pytest.raises(InputError, match="query_term_frequency: Input should be a valid boolean"):  # strict: no "yes"
        config_from_dict({"retrieval": {"lexical": {"query_term_frequency": "yes"}}})
    off = tmp_path / "off.yaml"
    off.write_text("extends: vector-only\nretrieval: {lexical: {query_term_frequency: true}}\n")
    r = CliRunner().invoke(main, ["config", "check", str(off)])
    assert r.exit_code == 0 and "retrieval.lexical.query_term_frequency is set but retrieval.lexical.enabled is false" in r.stderr


def test_a_config_and_its_parts_cannot_be_changed_in_place(tmp_path):
    """User trial BP: `PipelineConfig().priors.priority_map["0"] = 111.0` changed every later config (the default
    sections were shared, their dicts and lists mutable), and a request's `retrieval.filters` edit reached another
    request's freshly loaded config. Every container field is read-only now; `with_updates` is the way to change."""
    import copy
    import pickle

    cfg = PipelineConfig()
    before = hash(cfg)
    edits = [
        lambda: cfg.priors.priority_map.__setitem__("0", 111.0),
        lambda: cfg.retrieval.filters.__setitem__("kind", "note"),
        lambda: cfg.retrieval.filters.update(kind="note"),
        lambda: cfg.fusion.rank_bonus.append((5, 0.1)),
        lambda: cfg.rerank.buckets.__delitem__(0),
        lambda: cfg.priors.priority_map.pop("0"),
    ]
    for edit in edits:
        with pytest.raises(TypeError, match="with_updates"):
            edit()
    assert hash(cfg) == before and cfg.priors.priority_map == {"0": 4.0, "1": 3.0, "2": 2.0, "3": 1.0}
    assert load_config({}).priors.priority_map["0"] == 4.0 and load_config("default").retrieval.filters == {}

    tuned = load_config("default").with_updates({"retrieval.filters": {"user": "ana"}, "tuned_on": [
        {"dataset": "d", "split": "test", "query_keys": ["k1"]}]})
    with pytest.raises(TypeError):
        tuned.tuned_on[0]["query_keys"].append("k2")  # type: ignore[index,union-attr]
    with pytest.raises(TypeError):
        tuned.retrieval.filters["user"] = "mallory"  # type: ignore[index]
    assert load_config("default").with_updates({}).retrieval.filters == {}
    # still lists and dicts to read, compare, pickle, copy and save
    assert cfg.fusion.rank_bonus == [(1, 0.05), (3, 0.02)] and isinstance(tuned.retrieval.filters, dict)
    assert pickle.loads(pickle.dumps(tuned)) == tuned and copy.deepcopy(tuned) == tuned
    for suffix in (".yaml", ".json"):
        assert load_config(save_config(tuned, tmp_path / f"c{suffix}")) == tuned
    assert hash(pickle.loads(pickle.dumps(tuned))) == hash(tuned)


def test_a_config_model_built_in_python_raises_a_config_error_naming_the_field(tmp_path):
    """User trial BP: `PipelineConfig(output={'n': 0})` raised pydantic's ValidationError and `save_config` to a
    folder it cannot write raised FileNotFoundError naming a temporary file: both outside ToolkitError."""
    from toolkit.config import OutputConfig
    from toolkit.errors import ConfigError

    with pytest.raises(ConfigError, match=r"PipelineConfig: output\.n: Input should be greater than or equal to 1"):
        PipelineConfig(output={"n": 0})  # type: ignore[arg-type]
    with pytest.raises(InputError, match=r"OutputConfig: n: "):
        OutputConfig(n=0)
    with pytest.raises(ValueError, match=r"fusion\.rrf_kk: unknown field \(did you mean rrf_k\?\)"):  # a ValueError too
        PipelineConfig.model_validate({"fusion": {"rrf_kk": 3}})
    assert PipelineConfig(output={"n": 3}).output.n == 3  # type: ignore[arg-type]
    # a config file's errors still name the file (the sections inside are validated as before)
    with pytest.raises(InputError, match=r"^<mapping>: output\.n: "):
        load_config({"output": {"n": 0}})
    (tmp_path / "ro").mkdir()
    (tmp_path / "ro").chmod(0o500)
    target = tmp_path / "ro" / "c.yaml"
    try:
        if not os.access(tmp_path / "ro", os.W_OK):  # (root writes anywhere)
            with pytest.raises(InputError, match=rf"^{target}: cannot write the config: Permission denied"):
                save_config("qmd", target)
    finally:
        (tmp_path / "ro").chmod(0o700)
    with pytest.raises(InputError, match=r"^/proc/x\.yaml: cannot write the config"):
        save_config("qmd", "/proc/x.yaml")
