"""User trial AU: an IR researcher with years of trec_eval, Anserini and ir_measures habits, checking `hrt eval` and
`hrt run` against them. The values agreed (to 1e-9, every measure); each test is a place where the tool measured
something else than the user asked for, or said less than trec_eval's own conventions need said."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import write_beir

from toolkit.cli import main


def _hrt(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def _run_lines(rows) -> str:
    return "".join(f"{q} Q0 {d} {r} {s} t\n" for q, d, r, s in rows)


def test_run_depth_above_100_gives_that_many_results_or_says_what_bounds_it(tmp_path, corpus_file):
    """`hrt run --depth 1000` wrote 100 results per query (output.n) without a word: R@1000 and MAP were measured on
    a run 10x shallower than asked for."""
    ds = write_beir(tmp_path / "ds", corpus_file)
    cfg = tmp_path / "deep.yaml"
    cfg.write_text("extends: bm25-only\noutput:\n  n: 1\n")  # a config's own small n: --depth still decides
    r = _hrt("run", "--dataset", ds, "--config", cfg, "--depth", 5, "--store", tmp_path / "s.duckdb", "--out", tmp_path / "r.trec")
    assert r.exit_code == 0, r.output
    per_query = [line.split()[0] for line in (tmp_path / "r.trec").read_text().splitlines()]
    assert max(per_query.count(q) for q in set(per_query)) > 1  # more than output.n: the depth asked for
    cfg.write_text("extends: bm25-only\nretrieval:\n  lexical:\n    top_k: 3\n")
    r = _hrt("run", "--dataset", ds, "--config", cfg, "--depth", 5, "--store", tmp_path / "s.duckdb", "--out", tmp_path / "r.trec")
    assert r.exit_code == 0 and "lists of at most retrieval.lexical.top_k = 3 documents" in r.output, r.output


def test_eval_names_measures_past_a_runs_depth_and_runs_of_unequal_depth(tmp_path, corpus_file):
    """A run cut at 1 result against the same run at 3: R@3 and AP 'significantly' differ by depth alone, and nothing
    said so; the footer did not say that a missing query counts 0 (trec_eval -c)."""
    ds = write_beir(tmp_path / "ds", corpus_file)
    rows = [(q, d, r, 10 - r) for q, docs in (("q1", "d1 d2 d3"), ("q2", "d4 d2 d1"), ("q3", "d6 d4 d5")) for r, d in
            enumerate(docs.split(), 1)]
    (tmp_path / "deep.trec").write_text(_run_lines(rows))
    (tmp_path / "top1.trec").write_text(_run_lines([x for x in rows if x[2] == 1]))
    r = _hrt("eval", "--dataset", ds, "--run", tmp_path / "top1.trec", "--run", tmp_path / "deep.trec", "--measures", "R@3,AP,nDCG@1")
    assert r.exit_code == 0, r.output
    assert "top1.trec holds at most 1 result per query: its R@3 counts ranks past 1 that it never returned" in r.output
    assert "the runs differ in depth" in r.output and "their R@3, AP differ by depth" in r.output
    assert "scores 0 there, and counts in its mean (as trec_eval -c)" in r.output
    doc = json.loads(_hrt("eval", "--dataset", ds, "--run", tmp_path / "top1.trec", "--measures", "R@3", "--format", "json").stdout)
    assert doc["notes"] and doc["missing_queries"].startswith("score 0")


def test_eval_names_run_ids_the_dataset_lacks_and_how_they_differ(tmp_path, corpus_file, caplog):
    """Two run files joined with their byte order marks, and document ids uppercased or written in NFD by a Mac:
    the lines were dropped or scored 0 in silence while the other ids met (trec_eval drops them silently too)."""
    ds = write_beir(tmp_path / "ds", corpus_file)
    part_a = _run_lines([("q1", "d1", 1, 3.0), ("q1", "d2", 2, 2.0)])
    part_b = _run_lines([("q2", "D2", 1, 3.0), ("q3", "d5", 1, 3.0)])
    (tmp_path / "joined.trec").write_bytes(("\ufeff" + part_a + "\ufeff" + part_b).encode())
    r = _hrt("eval", "--dataset", ds, "--run", tmp_path / "joined.trec")
    assert r.exit_code == 0, r.output
    assert "joined.trec:3: a byte order mark starts the line" in caplog.text  # dropped: q2 is q2
    assert "1 line(s) name 1 document id(s) not in" in r.output and "'D2' differs from 'd2' only by case" in r.output
    (tmp_path / "nfd.trec").write_text(_run_lines([("q1", "d1", 1, 3.0), ("q\u0301x", "d2", 1, 2.0)]))
    r = _hrt("eval", "--dataset", ds, "--run", tmp_path / "nfd.trec")
    assert "1 query id(s) are not in" in r.output and "their lines are not scored" in r.output, r.output


def test_a_rank_written_as_a_float_is_read_and_a_fraction_is_named(tmp_path):
    """trec_eval ignores the rank column; '1.0' (as some tools write it) was refused as "not a number"."""
    from toolkit.errors import InputError
    from toolkit.runs import read_run

    (tmp_path / "r.trec").write_text("q1 Q0 d1 1.0 2.5 t\nq1 Q0 d2 2 1.5 t\n")
    assert read_run(tmp_path / "r.trec")["rank"].to_list() == [1, 2]
    (tmp_path / "r.trec").write_text("q1 Q0 d1 1.5 2.5 t\n")
    with pytest.raises(InputError, match=r"r.trec:1: rank '1.5' is not an integer"):
        read_run(tmp_path / "r.trec")


def test_an_interval_that_says_otherwise_than_the_test_is_noted_where_both_are_shown(tmp_path, corpus_file):
    """The report printed the demo's MRR@10 delta [0.003, 0.190] (excluding 0) beside p (Holm) 0.055 with no star and
    no word: the percentile bootstrap is narrower than the sign-flip test on a few dozen queries. A LaTeX table for a
    paper lost the query count and the threshold (they went to stderr only)."""
    import polars as pl

    from toolkit.compare import interval_notes

    sig = pl.DataFrame({"system": ["qmd", "rrf"], "measure": ["MRR@10", "MRR@10"], "p_value": [0.03, 0.30],
                        "p_holm": [0.055, 0.30], "ci_low": [0.0032, -0.1], "ci_high": [0.1896, 0.1]})
    (note,) = interval_notes(sig)
    assert note.startswith("qmd, MRR@10: the 95% bootstrap interval excludes 0") and "the verdict follows the test" in note
    ds = write_beir(tmp_path / "ds", corpus_file)
    (tmp_path / "r.trec").write_text(_run_lines([("q1", "d1", 1, 2.0)]))
    tex = _hrt("eval", "--dataset", ds, "--run", tmp_path / "r.trec", "--format", "latex").stdout
    assert "% 3 judged test queries, each in every mean" in tex and "% relevant: grade >= 1" in tex


def test_eval_averages_over_the_queries_a_run_answers_on_request_as_trec_eval_without_c(tmp_path):
    """trec_eval without -c (pytrec_eval's per-query values) averages a run over the judged queries it answers;
    `hrt eval` had only -c's average, so a partial run could not be checked against that (user trial AU)."""
    import random

    import pytrec_eval

    demo = Path(__file__).resolve().parents[1] / "data" / "demo"
    qrels = [line.split("\t") for line in (demo / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    qids = sorted({q for q, _, _ in qrels})
    docs = [json.loads(line)["_id"] for line in (demo / "corpus.jsonl").read_text().splitlines()]
    rng = random.Random(7)
    runs = []
    for name, share in (("half.trec", 0.5), ("most.trec", 0.8)):
        picked = [q for q in qids if rng.random() < share]
        path = tmp_path / name
        lines = []
        for q in picked:  # the judged documents among random others, in random order: values far from 0 and 1
            pool = list(dict.fromkeys([d for qq, d, _ in qrels if qq == q] + rng.sample(docs, 15)))
            rng.shuffle(pool)
            lines += [f"{q} Q0 {d} {r} {30 - r} t\n" for r, d in enumerate(pool, 1)]
        path.write_text("".join(lines))
        runs.append((path, picked))
    out = _hrt("eval", "--dataset", demo, "--split", "test", "--run", runs[0][0], "--run", runs[1][0],
               "--average", "run", "--measures", "nDCG@10,R@5", "--format", "json")
    assert out.exit_code == 0, out.output
    doc = json.loads(out.stdout)
    judged: dict[str, dict[str, int]] = {}
    for q, d, g in qrels:
        judged.setdefault(q, {})[d] = int(g)
    evaluator = pytrec_eval.RelevanceEvaluator(judged, {"ndcg_cut.10", "recall.5"})
    for path, picked in runs:
        scored: dict[str, dict[str, float]] = {}
        for line in path.read_text().splitlines():
            q, _, d, _, s, _ = line.split()
            scored.setdefault(q, {})[d] = float(s)
        per_query = evaluator.evaluate(scored)
        got = doc["runs"][str(path)]
        assert 0.2 < got["nDCG@10"] < 0.9, got
        assert got["nDCG@10"] == pytest.approx(sum(v["ndcg_cut_10"] for v in per_query.values()) / len(per_query), abs=1e-9)
        assert got["R@5"] == pytest.approx(sum(v["recall_5"] for v in per_query.values()) / len(per_query), abs=1e-9)
        assert doc["queries_in_mean"][str(path)] == len(picked) < len(qids)
    assert "without -c" in doc["missing_queries"] and "each is left out of the run's mean" in out.stderr
    common = len(set(runs[0][1]) & set(runs[1][1]))
    assert f"the tests pair the {common} judged queries every run answers" in doc["significance_notes"]
    default = json.loads(_hrt("eval", "--dataset", demo, "--split", "test", "--run", runs[0][0], "--format", "json").stdout)
    assert default["runs"][str(runs[0][0])]["nDCG@10"] < doc["runs"][str(runs[0][0])]["nDCG@10"]  # -c counts zeros


def test_the_library_prints_no_log_line_but_hrt_does(tmp_path, corpus_file):
    """User trial BP: the `toolkit` logger had no handler, so Python's last resort printed `warning: ...` lines on
    a library user's stderr, though the README says the library prints nothing unless asked. The package's logger
    has a NullHandler; `hrt` prints the lines itself, as before."""
    import os
    import subprocess
    import sys

    joined = tmp_path / "joined.trec"
    joined.write_bytes(("\ufeff" + _run_lines([("q1", "d1", 1, 3.0)]) + "\ufeff" + _run_lines([("q2", "d2", 1, 3.0)])).encode())
    code = f"import toolkit; print(len(toolkit.read_run({str(joined)!r})))"
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=120)
    assert p.returncode == 0 and p.stdout.strip() == "2" and p.stderr == "", p.stderr
    shown = "import logging, toolkit; logging.basicConfig(); " + code.removeprefix("import toolkit; ")
    p = subprocess.run([sys.executable, "-c", shown], capture_output=True, text=True, env=env, timeout=120)
    assert "joined.trec:2: a byte order mark starts the line" in p.stderr  # asked for, it is there
    r = _hrt("eval", "--dataset", write_beir(tmp_path / "ds", corpus_file), "--run", joined)
    assert r.exit_code == 0 and "warning: " in r.stderr and "joined.trec:2: a byte order mark starts the line" in r.stderr, r.output
