"""Runs the toolkit writes evaluate the same in `hrt eval`, ir_measures (pytrec_eval, i.e. trec_eval) and ranx.

Real runs of several presets: on the demo memory bank (hybrid, with RRF near-ties that tie at float32) and on
the CACM test split (lexical only: BM25 ties and a lexical RRF). Each run goes through `write_run` to a TREC
file, then the file is read by each tool its own way: trec_eval re-sorts by score as float32 with ties by doc
id, ranx re-sorts in float64 with an unstable sort. The values agree per query to 1e-6, and the written ranks
survive every re-sort. The demo runs come from the tutorials' store of data/demo (notebooks/.cache), CACM's
from a store built inside the test from ../shared/datasets.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from click.testing import CliRunner
from conftest import shared

from toolkit.cli import main
from toolkit.config import load_config
from toolkit.loaders import Dataset, load_corpus
from toolkit.pipeline import run_pipeline
from toolkit.runs import rank_conflicts, read_run, write_run
from toolkit.store import Store

ir_measures = pytest.importorskip("ir_measures")
ranx = pytest.importorskip("ranx")

ROOT = Path(__file__).resolve().parents[1]
DEMO = ROOT / "data" / "demo"
DEMO_STORE = ROOT / "notebooks" / ".cache" / "demo.duckdb"  # the tutorials' shared store
# hrt label, ir_measures measure, ranx metric
MEASURES = [
    ("nDCG@10", ir_measures.nDCG @ 10, "ndcg@10"),
    ("AP", ir_measures.AP, "map"),
    ("R@5", ir_measures.R @ 5, "recall@5"),
    ("R@100", ir_measures.R @ 100, "recall@100"),
    ("RR@10", ir_measures.RR @ 10, "mrr@10"),
]


def _write_runs(
    store: Store, ds: Dataset, split: str, configs: dict, out: Path
) -> dict[str, tuple[Path, int]]:
    """name -> (run file written by write_run, queries whose pipeline scores tie or invert at float32)."""
    queries = ds.queries(split)
    written = {}
    for name, cfg in configs.items():
        res = run_pipeline(store, queries, cfg)
        raw = res.final.select("qid", "doc_id", "rank", "score").filter(pl.col("rank") <= 100)
        path = out / f"{name}.trec"
        write_run(res.run(100), path, tag=name)
        written[name] = (path, rank_conflicts(raw))
    return written


def _hrt(root: Path, split: str, path: Path, ties: str = "trec") -> dict[tuple[str, str], float]:
    args = [
        "eval",
        "--dataset",
        str(root),
        "--split",
        split,
        "--run",
        str(path),
        "--format",
        "json",
        "--per-query",
    ]
    res = CliRunner().invoke(main, [*args, "--measures", ",".join(m for m, _, _ in MEASURES), "--ties", ties])
    assert res.exit_code == 0, res.output
    doc = json.loads(res.output)
    assert (
        doc["ties"].startswith("score as float32")
        if ties == "trec"
        else doc["ties"].startswith("the rank column")
    )
    return {(r["qid"], r["measure"]): r["value"] for r in doc["per_query"][str(path)]}


def _ir_measures(qrels: pl.DataFrame, path: Path) -> dict[tuple[str, str], float]:
    """pytrec_eval through ir_measures. trec_eval has no RR cutoff (ir_measures' pytrec_eval RR@10 is plain
    RR), so RR@10 is pytrec_eval's RR over each query's top 10 in trec_eval's own order (score as float32
    descending, doc id descending), cut by a plain sort written here."""
    qd = [ir_measures.Qrel(q, d, r) for q, d, r in qrels.iter_rows()]
    run = list(ir_measures.read_trec_run(str(path)))
    by_q: dict[str, list] = {}
    for sd in run:
        by_q.setdefault(sd.query_id, []).append(sd)
    key = lambda sd: (np.float32(sd.score), sd.doc_id)  # noqa: E731
    top10 = [sd for docs in by_q.values() for sd in sorted(docs, key=key, reverse=True)[:10]]
    pte = ir_measures.pytrec_eval
    names = {str(m): label for label, m, _ in MEASURES}
    out = {
        (v.query_id, names[str(v.measure)]): v.value
        for v in pte.iter_calc([m for _, m, _ in MEASURES], qd, run)
    }
    out |= {(v.query_id, "RR@10"): v.value for v in pte.iter_calc([ir_measures.RR], qd, top10)}
    return out


def _ranx(qrels: pl.DataFrame, path: Path) -> dict[tuple[str, str], float]:
    qd: dict[str, dict[str, int]] = {}
    for q, d, r in qrels.iter_rows():
        qd.setdefault(q, {})[d] = r
    run = ranx.Run.from_file(str(path), kind="trec")
    ranx.evaluate(ranx.Qrels(qd), run, [m for _, _, m in MEASURES], make_comparable=True)
    return {(q, label): float(run.scores[m][q]) for label, _, m in MEASURES for q in run.scores[m]}


def _check(root: Path, split: str, qrels: pl.DataFrame, written: dict[str, tuple[Path, int]]) -> int:
    checked = 0
    for name, (path, _) in written.items():
        run = read_run(path)
        assert rank_conflicts(run) == 0, name  # float32 re-sorting keeps the written ranks
        ours = _hrt(root, split, path)
        assert _hrt(root, split, path, ties="rank") == ours  # the file's score order is its rank order
        refs = {"ir_measures": _ir_measures(qrels, path), "ranx": _ranx(qrels, path)}
        for tool, ref in refs.items():
            for key, v in ours.items():
                # ir_measures leaves out judged queries absent from the run; they score 0 (trec_eval -c).
                assert ref.get(key, 0.0) == pytest.approx(v, abs=1e-6), (name, tool, key)
                checked += 1
    return checked


def test_demo_preset_runs_agree_with_trec_eval_and_ranx(tmp_path):
    ds = Dataset.open(DEMO)
    configs = {n: load_config(n) for n in ("bm25-only", "hybrid-rrf", "qmd", "memoria")}
    # The tutorials' demo store: built once per test run by whichever process asks first.
    with Store.open_built(DEMO_STORE, lambda st: st.ingest(load_corpus(DEMO))) as st:
        written = _write_runs(st, ds, "test", configs, tmp_path)
    # The RRF presets do have scores that tie at float32 (the case this guards), before write_run splits them.
    assert written["hybrid-rrf"][1] > 0 and written["qmd"][1] > 0
    qrels = ds.qrels("test")
    n_queries = qrels.filter(pl.col("rel") > 0)["qid"].n_unique()
    assert _check(DEMO, "test", qrels, written) == 2 * len(configs) * n_queries * len(MEASURES)


def test_cacm_lexical_runs_agree_with_trec_eval_and_ranx(tmp_path):
    root = shared("cacm")
    ds = Dataset.open(root)
    lexical_rrf = load_config("qmd").with_updates({"retrieval.dense.enabled": False, "name": "qmd-lexical"})
    configs = {"bm25-only": load_config("bm25-only"), "qmd-lexical": lexical_rrf}
    with Store(tmp_path / "cacm.duckdb") as st:
        st.ingest(load_corpus(root), embed=False)
        written = _write_runs(st, ds, "test", configs, tmp_path)
    qrels = ds.qrels("test")
    n_queries = qrels.filter(pl.col("rel") > 0)["qid"].n_unique()
    assert _check(root, "test", qrels, written) == 2 * len(configs) * n_queries * len(MEASURES)
