"""User trial X: a data scientist who tunes in the Python API and hands the config to a platform team that runs
the CLI. Rankings and numbers agreed everywhere; each test is a place where the two sides did not: in-sample
numbers the API never called so, a lab export that forgot the queries it was tuned on, a gate-off config that
read like one that passed, query frames the API crashed on or merged, the lab's p-value that `hrt eval` never
prints, and an exported file edited by hand in silence."""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.compare import compare
from toolkit.config import InertSettingWarning, load_config, save_config
from toolkit.errors import InputError
from toolkit.experiment import experiment
from toolkit.loaders import Dataset
from toolkit.pipeline import run_pipeline
from toolkit.provenance import InSampleWarning, query_keys
from toolkit.session import Session

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"


@pytest.fixture(scope="module")
def dev():
    ds = Dataset.open(DEMO)
    return ds.queries("dev"), ds.qrels("dev")


def _tuned_on(queries: pl.DataFrame) -> list[dict]:
    return [{"dataset": "demo", "split": "dev", "query_keys": query_keys(queries["qid"].to_list(), queries["text"].to_list())}]


def test_the_python_api_calls_numbers_on_the_tuning_queries_in_sample(demo_store, dev):
    """`hrt run` said "in-sample, not results" for a config tuned on these queries; the Session (and so the lab)
    and `experiment` showed the same numbers without a word."""
    queries, qrels = dev
    tuned = load_config("bm25-only").with_updates({"name": "bm25-tuned", "tuned_on": _tuned_on(queries)})
    s = Session(demo_store, queries, qrels, config=tuned, baseline=None)
    assert f"tuned on {len(queries)} of these {len(queries)} queries" in s.message and "in-sample" in s.message
    plain = Session(demo_store, queries, qrels, config="bm25-only", baseline=None)
    assert "in-sample" not in plain.message
    with pytest.warns(InSampleWarning, match="bm25-tuned: its settings were tuned on"):
        experiment(demo_store, queries, qrels, {"bm25-tuned": tuned}, ["nDCG@10"])


def test_a_lab_export_records_the_queries_its_settings_were_moved_on(demo_store, dev, tmp_path):
    """Settings moved by hand while watching dev scores were written with `tuned_on: null`, so `hrt run` on dev
    never said its numbers were in-sample."""
    queries, qrels = dev
    s = Session(demo_store, queries, qrels, config="bm25-only", baseline=None)
    s.export("yaml", tmp_path / "untouched.yaml")
    assert load_config(tmp_path / "untouched.yaml").tuned_on is None  # nothing moved: nothing tuned
    assert s.set("threshold.min_score", 0.2)
    s.export("yaml", tmp_path / "moved.yaml")
    rec = load_config(tmp_path / "moved.yaml").tuned_on
    assert rec and rec[-1]["query_keys"] == _tuned_on(queries)[0]["query_keys"]
    r = CliRunner().invoke(main, ["run", "--dataset", str(DEMO), "--split", "dev", "--config", str(tmp_path / "moved.yaml"),
                                  "--store", str(tmp_path / "s.duckdb"), "--out", str(tmp_path / "run.trec")])
    assert "in-sample, not results" in r.output, r.output


def test_a_config_written_with_the_gate_off_says_so(demo_store, dev):
    """`tune(..., gate=False)` wrote "qmd tuned on ... for nDCG@10" for a candidate that failed the gate (p 0.6);
    only the report said so. The description now carries the rule that decided."""
    from toolkit.tune import tune

    queries, qrels = dev
    space = {"fusion.lexical_weight": [0.25, 4.0], "fusion.rrf_k": [5, 200]}
    best, rep = tune(demo_store, queries, qrels, base="default", space=space, method="grid", budget=4, folds=3,
                     progress=False, gate=False, anchors=False)
    assert best.name == "default-tuned", rep.rule  # a candidate beats the base in-sample: written, gate or not
    assert "gate off" in best.description and "p = " in best.description


def test_query_frames_the_rest_of_the_api_accepts_run_and_ambiguous_ones_are_refused(demo_store):
    """A polars frame with BEIR's `_id` and integer ids crashed inside `prepare`; two queries under one id were
    merged into one interleaved list and an empty text got 100 arbitrary documents."""
    beir = run_pipeline(demo_store, pl.DataFrame({"_id": ["a"], "text": ["deploy fails"]}), "bm25-only")
    assert beir.final["qid"].unique().to_list() == ["a"] and beir.final.height > 0
    ints = run_pipeline(demo_store, pl.DataFrame({"qid": [1, 2], "text": ["deploy fails", "dashboard colours"]}), "bm25-only")
    assert sorted(ints.final["qid"].unique().to_list()) == ["1", "2"]
    with pytest.raises(InputError, match="duplicate query id 'a'"):
        run_pipeline(demo_store, pl.DataFrame({"qid": ["a", "a"], "text": ["deploy fails", "dashboard"]}), "bm25-only")
    with pytest.raises(InputError, match="query 'e' has an empty text"):
        run_pipeline(demo_store, pl.DataFrame({"qid": ["e"], "text": ["  "]}), "bm25-only")


def test_the_session_gives_the_p_value_hrt_eval_prints(demo_store, dev):
    """The lab's p (a paired t-test, cheap enough for every slider move) differed from `hrt eval`'s randomisation
    p for the same two runs (0.0224 vs 0.0164), and nothing in the API gave the latter."""
    queries, qrels = dev
    s = Session(demo_store, queries, qrels, config="default", baseline="bm25-only")
    got = s.significance().filter(pl.col("measure") == "nDCG@10").row(0, named=True)
    pq = experiment(demo_store, queries, qrels, {"default": "default", "bm25-only": "bm25-only"}, ["nDCG@10"], per_query=True)
    want = compare(pq, "bm25-only").row(0, named=True)
    assert got["p_value"] == pytest.approx(want["p_value"]) and got["delta"] == pytest.approx(want["delta"])
    live = s.deltas.filter(pl.col("measure") == "nDCG@10")["p_value"][0]
    t = compare(pq, "bm25-only", test="ttest").row(0, named=True)["p_value"]
    assert live == pytest.approx(t)  # the live column is the t-test, as documented


def test_an_exported_file_edited_by_hand_names_a_setting_that_does_nothing(tmp_path):
    """A platform engineer changed `rrf_k` in an exported convex config: it loaded in silence (a file with every
    section was never checked) and ran byte-identical. The file as exported still loads quietly: its first line
    holds a digest of the rest, which the edit no longer matches."""
    cfg = load_config("memoria").with_updates({"name": "memoria-lab", "fusion.alpha": 0.8})
    path = save_config(cfg, tmp_path / "memoria-lab.yaml")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        load_config(path)
    text = Path(path).read_text()
    assert "rrf_k: 60" in text
    Path(path).write_text(text.replace("rrf_k: 60", "rrf_k: 10"))
    with pytest.warns(InertSettingWarning, match=r"fusion.rrf_k is set but"):
        load_config(path)
    assert json.loads(json.dumps(load_config(path).to_dict()))["fusion"]["rrf_k"] == 10


def test_significance_runs_on_more_than_a_thousand_queries():
    """compare's smallest-p bound computed 2 / 2.0**n, which overflows from n = 1,024: a lab (or `hrt eval`) on a
    collection with that many queries could not get a p-value (review of trial X's `Session.significance`)."""
    import numpy as np

    rng = np.random.default_rng(0)
    n = 1_100
    base = rng.random(n)
    pq = pl.DataFrame({"system": ["a"] * n + ["b"] * n, "qid": [f"q{i}" for i in range(n)] * 2, "measure": "nDCG@10",
                       "value": np.r_[base, np.clip(base + rng.normal(0.02, 0.1, n), 0, 1)]})
    got = compare(pq, "a").row(0, named=True)
    assert 0.0 < got["p_value"] < 0.05 and got["delta"] > 0
