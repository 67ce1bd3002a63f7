"""User trial BC: a researcher with red-green colour blindness who reads output through a screen reader in a narrow
SSH terminal (60-80 columns, sometimes a latin-1 locale). What they met: tables dumped with box drawing and dtype
rows, a `*` without its legend, an HTML report whose tables and figures a screen reader could not place, figures
told apart by red and green alone, and blank lines before a verdict."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner
from conftest import write_beir

from toolkit.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _hrt(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`hrt` as the user runs it: its own process, its stdout a pipe in the encoding `env` names."""
    return subprocess.run([sys.executable, "-m", "toolkit.cli", *args], cwd=cwd, capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


@pytest.fixture
def beir(tmp_path, corpus_file):
    return write_beir(tmp_path / "ds", corpus_file)


def test_report_summary_is_a_plain_table_a_latin1_pipe_and_60_columns_take(tmp_path, beir):
    """`hrt report` printed polars' dump (`shape: (3, 9)`, box drawing, a dtype row, 6 decimals, 342-character
    lines) and, into a latin-1 pipe, exited 2 after writing the HTML ("cannot write \\u250c\\u2500...")."""
    r = _hrt(["report", "--dataset", str(beir), "--store", str(tmp_path / "s.duckdb"), "--config", "bm25-only",
              "--config", "again=bm25-only", "--out", str(tmp_path / "r.html")], tmp_path,
             PYTHONIOENCODING="latin-1", COLUMNS="60")
    out = r.stdout.decode("latin-1")
    assert r.returncode == 0, r.stderr.decode("latin-1")[-800:]
    assert out.isascii() and "shape:" not in out and "f64" not in out and "---" not in out, out
    lines = out.split("report ->")[0].splitlines()
    assert max(len(line) for line in lines) <= 60, out
    assert lines[0].split() == ["system", "R@1", "R@5", "P@3", "nDCG@10", "MRR@10"]
    assert lines[1].split()[0] == "bm25-only" and all(re.fullmatch(r"\d\.\d{4}", v) for v in lines[1].split()[1:])
    assert "latency_p95_ms" in out and "providers" in out  # the columns that did not fit, in a second block


def test_per_query_table_is_the_same_plain_layout(tmp_path, beir):
    """`hrt eval --per-query` dumped each run's queries as a polars table too."""
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\nq2 Q0 d3 1 1.0 t\nq3 Q0 d5 1 1.0 t\n")
    r = CliRunner().invoke(main, ["eval", "--dataset", str(beir), "--run", str(run), "--per-query"], env={"COLUMNS": "60"})
    assert r.exit_code == 0, r.output
    table = r.stdout.split(f"\n{run}\n")[-1].splitlines()
    assert table[0].split()[0] == "qid" and "nDCG@10" in table[0]
    assert [row.split()[0] for row in table[1:]] == ["q1", "q2", "q3"]
    assert table[2].split()[1:] == ["0.0000"] * 4 and "shape:" not in r.stdout and "┆" not in r.stdout


def test_an_unwritable_output_names_its_first_character_only(tmp_path, beir):
    """The error for output the locale's encoding cannot write named the whole run of characters (612 for a table's
    border); one is enough to say which text it was."""
    run = tmp_path / "运行结果.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\n")
    r = _hrt(["eval", "--dataset", str(beir), "--run", str(run)], tmp_path, PYTHONIOENCODING="latin-1")
    err = r.stderr.decode("latin-1")
    assert r.returncode == 2 and "the output encoding (latin-1) cannot write \\u8fd0: use a UTF-8 locale" in err, err


def test_the_star_of_a_significant_p_value_is_explained_beside_it(tmp_path, beir):
    """`hrt eval` with several runs marked p values with `*`; what it meant was only in `hrt eval --help`."""
    runs = [tmp_path / "a.trec", tmp_path / "b.trec"]
    runs[0].write_text("q1 Q0 d1 1 2.0 a\nq2 Q0 d2 1 1.0 a\nq3 Q0 d5 1 1.0 a\n")
    runs[1].write_text("q1 Q0 d3 1 2.0 b\nq2 Q0 d3 1 1.0 b\nq3 Q0 d3 1 1.0 b\n")
    r = CliRunner().invoke(main, ["eval", "--dataset", str(beir), *(a for p in runs for a in ("--run", str(p)))])
    assert r.exit_code == 0, r.output
    lines = r.stdout.split("p (Holm) vs")[1].splitlines()
    assert lines[1].startswith(str(runs[1])) and lines[2] == "* = significant: p (Holm) <= 0.05", lines
