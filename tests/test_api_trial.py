"""User trial AV: a data scientist who works only through the Python API in notebooks (help(), reprs, tab completion,
error messages). The workflow worked; each test is a place where the API made them guess or read the source."""

from __future__ import annotations

import inspect

import pytest
from conftest import write_beir

import toolkit
from toolkit.errors import InputError, StoreError
from toolkit.loaders import load_corpus
from toolkit.store import Store


@pytest.fixture
def ds_store(tmp_path, corpus_file):
    ds = write_beir(tmp_path / "ds", corpus_file)
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(load_corpus(ds), embed=False)
        yield ds, st


def test_a_result_and_a_qrels_file_go_wherever_a_run_and_qrels_go(ds_store, tmp_path):
    """`evaluate(result, qrels)`, `write_run(result, ...)` and `to_pandas(result)` failed with a polars error that did
    not name `.run()`; a qrels path was "missing column(s) ... have column_0"."""
    ds, st = ds_store
    res = toolkit.run_pipeline(st, toolkit.Dataset(ds).queries("test"), "bm25-only")  # a str root, too
    qrels_path = ds / "qrels" / "test.tsv"
    got = toolkit.evaluate(res, str(qrels_path), ["nDCG@10"])
    assert got.equals(toolkit.evaluate(res.run(), toolkit.read_qrels(qrels_path), ["nDCG@10"]))
    toolkit.write_run(res, tmp_path / "r.trec")
    assert toolkit.read_run(tmp_path / "r.trec").height == res.run().height
    assert len(toolkit.to_pandas(res)) == res.run().height
    assert toolkit.evaluate(res, qrels_path, ["nDCG@10"], level="document").equals(got)  # the config's word for it


def test_a_path_or_a_query_string_where_a_store_or_queries_go_says_what_to_pass(ds_store, tmp_path):
    ds, st = ds_store
    q = toolkit.Dataset.open(ds).queries("test")
    with pytest.raises(InputError, match=r"store: got a path .*pass an open store: `with toolkit.Store\("):
        toolkit.run_pipeline(str(tmp_path / "s.duckdb"), q, "bm25-only")
    with pytest.raises(InputError, match="store: got a path"):
        toolkit.experiment(tmp_path / "s.duckdb", q, ds / "qrels" / "test.tsv", ["bm25-only"])
    with pytest.raises(InputError, match=r"queries: got a string \('ECONNREFUSED deploy'\), not a set of queries"):
        toolkit.run_pipeline(st, "ECONNREFUSED deploy", "bm25-only")


def test_reprs_are_one_line_that_say_what_the_object_holds(ds_store):
    """A Result printed 68 lines of frames, a Prepared 196, a Corpus every document (187,040 characters), a Store
    `<toolkit.store.Store object at 0x...>`."""
    ds, st = ds_store
    q = toolkit.Dataset.open(ds).queries("test")
    prep = toolkit.prepare(st, q, "bm25-only")
    res = toolkit.rescore(prep, "bm25-only")
    corpus = load_corpus(ds)
    for obj, start in ((res, "Result(3 queries"), (prep, "Prepared(3 queries"), (corpus, "Corpus(6 documents"),
                       (st, f"Store({str(st.path)!r}, writable")):
        text = repr(obj)
        assert text.startswith(start) and "\n" not in text and len(text) < 400, text
    closed = Store(st.path.with_name("other.duckdb"))
    closed.close()
    assert repr(closed).endswith(", closed)")


def test_the_api_names_its_types_and_tab_completion_offers_only_them():
    """`Result`, `Prepared`, `TuneReport` and the warnings README names were not importable from `toolkit`; `dir(toolkit)`
    offered `Any`, `TYPE_CHECKING`, `importlib`, `sys`, `types`."""
    for name in ("Result", "Prepared", "TuneReport", "InertSettingWarning", "ProviderFallbackWarning", "IdMismatchWarning"):
        assert name in toolkit.__all__ and getattr(toolkit, name).__name__ == name
    assert not {"Any", "TYPE_CHECKING", "importlib", "sys", "types", "annotations"} & set(dir(toolkit))
    assert "`k`: how deep" in toolkit.Session.__doc__ and "Headless API" in toolkit.Lab.__doc__
    # As a library it prints nothing unless asked (README): optuna's bars came by default.
    for fn in (toolkit.tune, toolkit.train_fusion):
        assert inspect.signature(fn).parameters["progress"].default is False


def test_a_preset_name_saves_and_a_store_open_twice_in_one_process_says_so(tmp_path):
    path = toolkit.save_config("qmd", tmp_path / "q.yaml")  # a name, as everywhere a config goes
    assert toolkit.load_config(path).name == "qmd"
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest([{"_id": "a", "text": "alpha"}], embed=False)
        with pytest.raises(StoreError, match="this process has the store open already in another way \\(a writable Store .* use that one"):
            Store(tmp_path / "s.duckdb", read_only=True)


def test_every_config_field_says_what_it_does_in_help_the_schema_and_the_labs_tooltips():
    """None of the config's fields had a description: `help(cfg.guard)` printed pydantic's "A base class for creating
    Pydantic models", and what `guard.depth` or `adapt.gap_scale` mean stood only in config.py's comments."""
    from toolkit.config import FIELD_HELP, FIELD_STAGES

    cfg = toolkit.load_config("default")
    assert set(FIELD_HELP) == set(FIELD_STAGES) and all(FIELD_HELP.values()), [k for k, v in FIELD_HELP.items() if not v]
    doc = type(cfg.guard).__doc__
    assert "exact-token guard" in doc and "depth: How deep in BM25's list" in doc and "Pydantic" not in doc
    assert "fusion: How the BM25 and dense lists" in toolkit.PipelineConfig.__doc__
    schema = toolkit.PipelineConfig.model_json_schema()
    assert schema["$defs"]["AdaptConfig"]["properties"]["gap_scale"]["description"].startswith("The gap that gives")


def test_the_errors_warnings_and_types_a_caller_meets_are_exported_lazily():
    """User trial BP: `ProviderError` (an embedding endpoint down at ingest), the warning classes a caller filters,
    and the types the API returns or takes were reachable only from their modules. Each is the module's own class,
    and asking for one loads no heavy module."""
    import subprocess
    import sys
    from pathlib import Path

    names = {"ProviderError": "rerank", "ConfigWarning": "config", "StaleTextWarning": "store",
             "SmallSampleWarning": "compare", "InSampleWarning": "provenance", "IngestReport": "store",
             "IndexSettings": "store", "Corpus": "loaders", "ExportResult": "export",
             "FusionTrainReport": "train_fusion", "Reranker": "rerank", "ConfigError": "errors", "ModelLoadError": "errors"}
    import importlib

    for name, module in names.items():
        assert getattr(toolkit, name) is getattr(importlib.import_module(f"toolkit.{module}"), name), name
        assert name in toolkit.__all__
    assert issubclass(toolkit.ProviderError, toolkit.ToolkitError) and issubclass(toolkit.ConfigWarning, UserWarning)
    code = "import sys, toolkit; toolkit.ProviderError, toolkit.ConfigError; print('polars' in sys.modules)"
    p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                       env={"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PATH": "/usr/bin:/bin"})
    assert p.stdout.strip() == "False", p.stderr  # an `except toolkit.ProviderError` imports nothing heavy


def test_public_signatures_resolve_at_run_time_and_allow_what_the_docs_allow():
    """User trial BP: `typing.get_type_hints(write_export)` raised NameError (a name imported for checkers only),
    which breaks beartype- or FastAPI-style validation; `run_pipeline`/`prepare` said polars only though a
    {qid: text} dict is documented, `Dataset` Path only though it takes a str, and `Corpus` was a bare list."""
    import typing
    from collections.abc import Mapping
    from pathlib import Path

    for name in ("export_config", "write_export", "run_pipeline", "prepare", "rescore", "evaluate"):
        typing.get_type_hints(getattr(toolkit, name))
    assert typing.get_type_hints(toolkit.export_config)["engine"] == typing.Literal[
        "toolkit", "opensearch", "elasticsearch", "weaviate", "lancedb"]
    for fn in (toolkit.run_pipeline, toolkit.prepare):
        queries = typing.get_args(typing.get_type_hints(fn)["queries"])
        assert Mapping[str, str] in queries, queries
        assert typing.get_type_hints(fn)["reranker"] == toolkit.Reranker | None
    assert typing.get_type_hints(toolkit.Dataset.__init__)["root"] == str | Path
    assert toolkit.Dataset("data/demo").root == Path("data/demo")
    assert typing.get_type_hints(toolkit.evaluate)["ties"] == typing.Literal["trec", "rank"]
    assert toolkit.Corpus.__orig_bases__ == (list[dict[str, typing.Any]],)  # type: ignore[attr-defined]
    assert typing.get_type_hints(toolkit.to_ir_measures)["return"] == list[typing.Any]  # pyright: list[Unknown]
