"""Cold start without a stopwatch: what a CLI search imports (timings are in benchmarks/cold_start.py).

A heavy import on the lexical path (scipy.stats via scikit-learn cost 2.5 s of a 2.8 s search) is caught
here as a module name, which is stable on a loaded CI machine where a timing is not.
"""

from __future__ import annotations

import subprocess
import sys

import pytest

from toolkit.loaders import load_corpus
from toolkit.store import Store

# pandas: DuckDB imports it at the first bound parameter, or to scan a registered Arrow table (store._Connection).
HEAVY = ("torch", "sentence_transformers", "transformers", "scipy", "sklearn", "optuna", "plotly", "ipywidgets",
         "lightgbm", "ray", "pandas", "pyarrow.dataset")


def _imports_after(args: list[str]) -> list[str]:
    """Heavy modules loaded by a fresh interpreter that imports the CLI and runs `hrt ARGS` in-process."""
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom toolkit.cli import main\n"
        f"r = CliRunner().invoke(main, {args!r})\n"
        "assert r.exit_code == 0, r.output\n"
        f"print(' '.join(m for m in {HEAVY!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout.split()


def test_help_and_lexical_search_import_nothing_heavy(tmp_path, corpus_file):
    store = tmp_path / "lex.duckdb"
    with Store(store) as st:
        st.ingest(load_corpus(corpus_file), embed=False)
    assert _imports_after(["--help"]) == []
    assert _imports_after(["search", "ECONNREFUSED port 5432", "--store", str(store), "--mode", "lexical"]) == []


def test_hybrid_search_with_onnx_imports_no_torch(tmp_path, corpus_file, embedder):
    pytest.importorskip("onnxruntime")
    from toolkit.embed import make_embedder

    make_embedder(backend="onnx").embed(["export the model first"])  # once per cache dir, needs torch
    store = tmp_path / "hyb.duckdb"
    with Store(store, embedder=embedder) as st:
        st.ingest(load_corpus(corpus_file))
    assert _imports_after(["search", "deploy refused", "--store", str(store), "--mode", "hybrid"]) == []


def test_bound_parameters_keep_their_values_without_importing_pandas(tmp_path, corpus_file):
    """`bind_without_pandas` (what `hrt search` asks for): values bind exactly as before and pandas stays out;
    once pandas is imported, its NaT still binds as NULL (DuckDB's own check runs again)."""
    store = tmp_path / "p.duckdb"
    with Store(store) as st:
        st.ingest(load_corpus(corpus_file), embed=False)
    code = (
        "import sys, datetime\nfrom toolkit.store import Store, bind_without_pandas\nbind_without_pandas()\n"
        f"st = Store({str(store)!r}, read_only=True)\n"
        "row = st.con.execute('SELECT ?, ?, ?, ?, ?, ?', ['x', 7, 2.5, None, [1, 2], datetime.date(2024, 1, 2)]).fetchone()\n"
        "assert row == ('x', 7, 2.5, None, [1, 2], datetime.date(2024, 1, 2)), row\n"
        "assert 'pandas' not in sys.modules and 'pyarrow.dataset' not in sys.modules\n"
        "assert len(st.lexical_search_sql(__import__('polars').DataFrame({'qid': ['q'], 'text': ['deploy']}), top_k=3)) > 0\n"
        "assert 'pandas' not in sys.modules\n"
        "import pandas\n"
        "assert st.con.execute('SELECT ? IS NULL', [pandas.NaT]).fetchone() == (True,)\n"
        "print('ok')"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    assert out.stdout.split() == ["ok"]
