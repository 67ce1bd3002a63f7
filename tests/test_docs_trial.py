"""User trial Y: a new user who takes the documentation literally. Each test is a place where the tool did not
do what the docs said: progress bars in a captured stderr, and a config file of one field that silently
started from the schema's defaults instead of the `default` preset the CLI uses (now `extends: default`)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.config import InertSettingWarning, load_config
from toolkit.errors import InputError

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"


def test_hrt_tune_draws_no_progress_bar_into_a_captured_stderr(tmp_path):
    """The README: bars only when stderr is a terminal. `hrt tune ... 2>file` wrote optuna's trial bars."""
    (tmp_path / "space.yaml").write_text("threshold.min_score: {float: [0.0, 1.0]}\n")  # fusion moves nothing in BM25 alone
    r = CliRunner().invoke(main, ["tune", "--dataset", str(DEMO), "--split", "dev", "--store", str(tmp_path / "s.duckdb"),
                                  "--base", "bm25-only", "--budget", "2", "--folds", "2", "--no-anchors",
                                  "--space", str(tmp_path / "space.yaml"), "--out", str(tmp_path / "t.yaml")])
    assert r.exit_code == 0, r.output
    assert "\r" not in r.stderr and "%|" not in r.stderr and "it/s" not in r.stderr, r.stderr


def test_a_config_file_extends_a_preset_and_lists_only_its_changes(tmp_path):
    """A file with only `output: {max_chars: 1500}` scored a query 0.1156 where `hrt search` without a config
    scored it 0.0357: fields left out took the schema's (QMD-like) defaults, not the `default` preset's.
    `extends` names the config to start from; the file's own fields are all that changes, and only they are
    checked for settings that do nothing. (`guarded-rrf`, the RRF default until the learned fusion replaced it:
    its fusion fields are the ones a chain can change.)"""
    (tmp_path / "short.yaml").write_text("extends: guarded-rrf\noutput: {max_chars: 1500}\n")
    cfg = load_config(tmp_path / "short.yaml")
    assert cfg.diff(load_config("guarded-rrf")).keys() == {"name", "description", "output.max_chars"}
    assert cfg.name == "short" and cfg.adapt.dense_gap and cfg.guard.exact_token and cfg.fusion.rank_bonus == []
    # A chain, relative to the file; a section merges field by field.
    (tmp_path / "more.yaml").write_text("extends: short.yaml\nname: mine\nfusion: {rrf_k: 30}\n")
    more = load_config(tmp_path / "more.yaml")
    assert (more.name, more.fusion.rrf_k, more.output.max_chars, more.fusion.original_weight) == ("mine", 30, 1500, 1.0)
    # Without it, the schema's defaults, as documented.
    (tmp_path / "bare.yaml").write_text("output: {max_chars: 1500}\n")
    assert load_config(tmp_path / "bare.yaml").fusion.original_weight == 2.0
    # Only the file's own fields are checked: the preset's dormant settings are not named.
    with warnings.catch_warnings():
        warnings.simplefilter("error", InertSettingWarning)
        load_config(tmp_path / "short.yaml")
    (tmp_path / "odd.yaml").write_text("extends: guarded-rrf\nfusion: {alpha: 0.3}\n")
    with pytest.warns(InertSettingWarning, match="fusion.alpha is set but"):
        load_config(tmp_path / "odd.yaml")
    (tmp_path / "loop.yaml").write_text("extends: loop.yaml\n")
    with pytest.raises(InputError, match="extends goes round in a circle"):
        load_config(tmp_path / "loop.yaml")
    (tmp_path / "typo.yaml").write_text("extends: defualt\n")
    with pytest.raises(InputError, match=r"typo.yaml: extends: defualt: .*did you mean default"):
        load_config(tmp_path / "typo.yaml")


def test_extends_looks_beside_the_file_only(tmp_path, monkeypatch):
    """`extends: y.yaml` with no y.yaml beside the file loaded one from the working directory: the file meant
    another config depending on where it was run from (review of the `extends` change)."""
    (tmp_path / "sub").mkdir()
    (tmp_path / "y.yaml").write_text("name: from-cwd\n")
    (tmp_path / "sub" / "x.yaml").write_text("extends: y.yaml\n")
    monkeypatch.chdir(tmp_path)
    with pytest.raises(InputError, match=r"extends: .*sub/y.yaml: config file not found \(a path in `extends` is relative"):
        load_config(tmp_path / "sub" / "x.yaml")
