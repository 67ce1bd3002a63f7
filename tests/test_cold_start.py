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


def _imports_after(args: list[str], names: tuple[str, ...] = HEAVY) -> list[str]:
    """Which of `names` (heavy modules) a fresh interpreter loads that imports the CLI and runs `hrt ARGS` in-process."""
    code = (
        "import sys\nfrom click.testing import CliRunner\nfrom toolkit.cli import main\n"
        f"r = CliRunner().invoke(main, {args!r})\n"
        "assert r.exit_code == 0, r.output\n"
        f"print(' '.join(m for m in {names!r} if m in sys.modules))"
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
    # pyarrow too (a fifth of a cold search): a lexical search's frames come from bound lists and numpy columns.
    code = ("import sys\nfrom click.testing import CliRunner\nfrom toolkit.cli import main\n"
            f"r = CliRunner().invoke(main, ['search', 'retryBackoffMs', '--store', {str(store)!r}, '--mode', 'lexical'])\n"
            "assert r.exit_code == 0 and 'retryBackoffMs' in r.output, r.output\nprint('pyarrow' in sys.modules)")
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True).stdout.strip() == "False"


def test_lexical_search_imports_only_the_stages_it_runs(tmp_path, corpus_file):
    """Query expansion, the learned model's modules and run files are imported where a config uses them
    (`pipeline.py`): a plain lexical search loads none of them."""
    store = tmp_path / "lex.duckdb"
    with Store(store) as st:
        st.ingest(load_corpus(corpus_file), embed=False)
    unused = ("toolkit.expansion", "toolkit.learned_fusion", "toolkit.ltr_features", "toolkit.router", "toolkit.metrics",
              "toolkit.runs", "yaml")  # the preset comes from presets/parsed.json (config.PARSED_PRESETS)
    assert _imports_after(["search", "deploy", "--store", str(store), "--mode", "lexical"], unused) == []


_LEAN_READS = """
import pickle, sys
import polars as pl
from toolkit.store import Store, bind_without_pandas

def reads(path, chunk_ids, vec_path):
    import numpy as np

    vec = np.load(vec_path)
    q = pl.DataFrame({"qid": ["a", "b", "c"], "text": ["deploy ECONNREFUSED 5432", "lunch on Thursday", "zzzz nothing"],
                      "scope": ["platform", None, "payments"]})
    with Store(path, read_only=True) as st:
        return {"lexical": st.lexical_search_sql(q, top_k=5), "lexical_chunks": st.lexical_search_sql(q, top_k=5, level="chunk"),
                "lexical_none": st.lexical_search_sql(q.filter(pl.col("qid") == "c"), top_k=5),
                "values": st.doc_values(["d1", "d2", "nope"]), "no_values": st.doc_values(["nope"]),
                "sources": st.doc_sources(), "chunks": st.chunks(chunk_ids), "copies": st.chunk_copies(),
                "documents": st.documents(["d1", "d6"]), "match_bm25": st.match_bm25("deploy ECONNREFUSED", top_k=4),
                "dense": st.dense_search_sql("", vector=vec, top_k=4), "dense_scoped": st.dense_search_sql("", vector=vec, scope="payments")}

if __name__ == "__main__":
    bind_without_pandas()
    out = reads(sys.argv[1], sys.argv[2].split(","), sys.argv[3])
    assert "pyarrow" not in sys.modules
    with open(sys.argv[4], "wb") as fh:
        pickle.dump(out, fh)
"""


def test_lean_reads_equal_the_arrow_reads(tmp_path, corpus_file, embedder):
    """In `hrt search` the store's frames come from numpy columns and bound lists instead of Arrow: the same
    frames, dtypes and all (NULL scopes, empty results, chunk level, the dense SQL path), and pyarrow is never
    imported."""
    import pickle
    import runpy

    import numpy as np
    from polars.testing import assert_frame_equal

    store, vec = tmp_path / "lean.duckdb", tmp_path / "q.npy"
    with Store(store, embedder=embedder) as st:
        st.ingest(load_corpus(corpus_file))
        chunk_ids = st.chunks()["chunk_id"].to_list()[:3]
    np.save(vec, embedder.embed(["deploy connection refused"])[0])
    script, got = tmp_path / "lean_reads.py", tmp_path / "lean.pkl"
    script.write_text(_LEAN_READS)
    out = subprocess.run([sys.executable, str(script), str(store), ",".join(chunk_ids), str(vec), str(got)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr[-2000:]
    want = runpy.run_path(str(script))["reads"](str(store), chunk_ids, str(vec))  # here: through Arrow
    lean = pickle.loads(got.read_bytes())
    assert lean.keys() == want.keys() and len(want["lexical"]) and not len(want["lexical_none"])
    for name, frame in want.items():
        assert_frame_equal(lean[name], frame, check_exact=False, rel_tol=1e-12), name


def test_hybrid_search_with_onnx_imports_no_torch(tmp_path, corpus_file, embedder):
    pytest.importorskip("onnxruntime")
    from toolkit.embed import make_embedder

    make_embedder(backend="onnx").embed(["export the model first"])  # once per cache dir, needs torch
    store = tmp_path / "hyb.duckdb"
    with Store(store, embedder=embedder) as st:
        st.ingest(load_corpus(corpus_file))
    assert _imports_after(["search", "deploy refused", "--store", str(store), "--mode", "hybrid"]) == []
    # The learned preset scores through LightGBM's C library (`toolkit/booster.py`): `import lightgbm` brought
    # scikit-learn and pandas, 1.6 s of a 2.8 s cold search.
    assert _imports_after(["search", "deploy refused", "--store", str(store), "--config", "learned"]) == []


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


def test_a_large_store_reads_through_arrow_even_in_a_search(tmp_path, corpus_file):
    """Past LEAN_MAX_DOCUMENTS the numpy path would cost more than importing pyarrow: the store goes back to Arrow."""
    store = tmp_path / "big.duckdb"
    with Store(store) as st:
        st.ingest(load_corpus(corpus_file), embed=False)
    code = ("import sys\nimport toolkit.store as s\ns.bind_without_pandas()\n{patch}"
            f"st = s.Store({str(store)!r}, read_only=True)\nst.doc_sources()\nprint('pyarrow' in sys.modules)")
    runs = {limit: subprocess.run([sys.executable, "-c", code.format(patch=f"s.LEAN_MAX_DOCUMENTS = {limit}\n")],
                                  capture_output=True, text=True) for limit in (0, 100)}
    assert {k: r.stdout.strip() for k, r in runs.items()} == {0: "True", 100: "False"}, [r.stderr[-500:] for r in runs.values()]


def test_the_programs_settings_stay_out_of_a_host_that_calls_hrt_in_process(tmp_path, monkeypatch):
    """The review: calling `main([...])` in a program of one's own set PYDANTIC_DISABLE_PLUGINS for it and its children
    and registered exit hooks; and `hrt search` in-process on a store the caller holds open read-only failed, its store
    opened with another DuckDB setting (the unchecked extension) that DuckDB refuses beside the first."""
    import os

    from toolkit import cli
    from toolkit.store import Store

    monkeypatch.delenv("PYDANTIC_DISABLE_PLUGINS", raising=False)
    monkeypatch.setattr(cli, "_PROGRAM", False)
    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest([{"doc_id": "a", "text": "kafka consumer lag"}], embed=False)
    with Store(path, read_only=True) as held:
        threads = held.con.execute("SELECT current_setting('threads')").fetchone()
        with pytest.raises(SystemExit) as e:
            cli.main(["search", "kafka", "--store", str(path), "--mode", "lexical"])
        assert held.con.execute("SELECT current_setting('threads')").fetchone() == threads  # not the program's one
    assert e.value.code == 0
    assert "PYDANTIC_DISABLE_PLUGINS" not in os.environ and not cli._PROGRAM and not cli._EXIT_AT_ONCE


_AS_PROGRAM = """
import atexit, os, sys

exit_now = os._exit


def said_exit(code):  # the process ends here, without the interpreter's teardown
    os.write(2, b"os._exit(%d)\\n" % code)
    exit_now(code)


os._exit = said_exit
atexit.register(lambda: print("exit handler ran", file=sys.stderr))
sys.argv = ["hrt", *sys.argv[1:]]
from toolkit.cli import main
main()
"""


def test_hrt_search_as_a_program_ends_at_once_with_its_output_and_exit_handlers(tmp_path):
    """`hrt search` run as a program skips the interpreter's teardown (`cli._exit_at_once`) but not what an exit
    does: its output (a pipe: block-buffered), the exit handlers and the exit code are as before; another command is
    torn down as usual."""
    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest([{"doc_id": "a", "text": "kafka consumer lag"}], embed=False)

    def run(*args: str) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-c", _AS_PROGRAM, *args], capture_output=True, text=True)

    ok = run("search", "kafka", "--store", str(path), "--mode", "lexical", "--format", "json")
    assert ok.returncode == 0 and '"doc_id": "a"' in ok.stdout, ok.stderr
    assert ok.stderr == "exit handler ran\nos._exit(0)\n"
    missing = run("search", "kafka", "--store", str(tmp_path / "nope.duckdb"), "--mode", "lexical")
    assert missing.returncode == 2 and missing.stderr.startswith("error: ") and "no such store" in missing.stderr
    assert missing.stderr.endswith("exit handler ran\nos._exit(2)\n")
    other = run("info", "--store", str(path))
    assert other.returncode == 0 and other.stderr == "exit handler ran\n", other.stderr


def test_a_frame_registered_lean_then_through_arrow_replaces_the_first(tmp_path, monkeypatch):
    """`hrt search --batch` answered its first hybrid query and failed the second ("Table with name want already
    exists"): the first, lean, registered its ids as a temp table, and by the second pyarrow was imported, so the same
    name went in as a view beside the table."""
    import polars as pl

    from toolkit.store import _Connection

    with Store(tmp_path / "s.duckdb", embedder=None) as st:
        st.ingest([{"doc_id": "a", "text": "walrus"}], embed=False)
        for lean, hashes in ((True, ["h1", "h2"]), (False, ["h3"]), (True, ["h4"]), (False, ["h5", "h6"])):
            monkeypatch.setattr(_Connection, "lean", property(lambda self, lean=lean: lean))
            st._register("want", pl.DataFrame({"text_hash": hashes}))
            assert [r[0] for r in st.con.execute("SELECT text_hash FROM want ORDER BY ALL").fetchall()] == hashes
