"""hybrid-retrieval-toolkit: tune BM25 + dense retrieval, fusion, guarded reranking and dedup in one DuckDB file.

The notebook API, importable from the package itself:

    import toolkit
    store = toolkit.Store("demo.duckdb")
    toolkit.experiment(store, queries, qrels, {"bm25": "bm25-only", "qmd": "qmd"}, ["nDCG@10"], baseline="bm25")
    best, report = toolkit.tune(store, queries, qrels, base="qmd")
    toolkit.Lab(store, queries, qrels, config=best)

Names are resolved on first use (module `__getattr__`, PEP 562), so `import toolkit` loads none of
duckdb, polars, torch or ipywidgets until one is needed. `toolkit.compare`, `toolkit.experiment` and
`toolkit.tune` are the functions, not the modules of the same name (reach those with
`importlib.import_module("toolkit.tune")`).
"""

from __future__ import annotations

import importlib
import logging
import sys
import types
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# public name -> module that defines it
_EXPORTS = {
    "Store": "store",
    "Dataset": "loaders",
    "load_corpus": "loaders",
    "load_queries": "loaders",
    "PipelineConfig": "config",
    "InertSettingWarning": "config",
    "load_config": "config",
    "save_config": "config",
    "prepare": "pipeline",
    "rescore": "pipeline",
    "run_pipeline": "pipeline",
    "Prepared": "pipeline",
    "Result": "pipeline",
    "ProviderFallbackWarning": "providers",
    "evaluate": "metrics",
    "IdMismatchWarning": "metrics",
    "compare": "compare",
    "experiment": "experiment",
    "tune": "tune",
    "tune_dataset": "tune",
    "TuneReport": "tune",
    "train_fusion": "train_fusion",
    "Session": "session",
    "Lab": "lab",
    "export_config": "export",
    "write_export": "export",
    "read_run": "runs",
    "write_run": "runs",
    "read_qrels": "runs",
    "queries_frame": "interop",
    "qrels_frame": "interop",
    "run_frame": "interop",
    "to_pandas": "interop",
    "to_ir_measures": "interop",
    "to_ranx": "interop",
    "from_ir_datasets": "interop",
    "ToolkitError": "errors",
    "InputError": "errors",
    "ConfigError": "errors",
    "StoreError": "errors",
    "StoreBusyError": "errors",
    "StoreDamagedError": "errors",
    "ProviderError": "errors",
    "ModelLoadError": "errors",
    # what a caller may filter, catch, annotate with or receive (user trial BP: not reachable from `toolkit`)
    "ConfigWarning": "config",
    "StaleTextWarning": "store",
    "SmallSampleWarning": "compare",
    "InSampleWarning": "provenance",
    "IngestReport": "store",
    "IndexSettings": "store",
    "Corpus": "loaders",
    "ExportResult": "export",
    "FusionTrainReport": "train_fusion",
    "Reranker": "rerank",
}
__all__ = [  # the same names as _EXPORTS (a test checks)
    "__version__", "Store", "Dataset", "load_corpus", "load_queries", "PipelineConfig", "InertSettingWarning", "load_config",
    "save_config", "prepare", "rescore", "run_pipeline", "Prepared", "Result", "ProviderFallbackWarning", "evaluate",
    "IdMismatchWarning", "compare", "experiment", "tune", "tune_dataset", "TuneReport", "train_fusion", "Session", "Lab", "export_config", "write_export", "read_run", "write_run", "read_qrels",
    "queries_frame", "qrels_frame", "run_frame", "to_pandas", "to_ir_measures", "to_ranx", "from_ir_datasets",
    "ToolkitError", "InputError", "ConfigError", "StoreError", "StoreBusyError", "StoreDamagedError", "ProviderError",
    "ModelLoadError", "ConfigWarning", "StaleTextWarning", "SmallSampleWarning", "InSampleWarning", "IngestReport", "IndexSettings", "Corpus",
    "ExportResult", "FusionTrainReport", "Reranker",
]

if TYPE_CHECKING:  # what a type checker sees (it cannot follow `__getattr__`); never run (a test checks it matches)
    from .compare import SmallSampleWarning, compare
    from .config import ConfigWarning, InertSettingWarning, PipelineConfig, load_config, save_config
    from .errors import (
        ConfigError,
        InputError,
        ModelLoadError,
        ProviderError,
        StoreBusyError,
        StoreDamagedError,
        StoreError,
        ToolkitError,
    )
    from .experiment import experiment
    from .export import ExportResult, export_config, write_export
    from .interop import (
        from_ir_datasets,
        qrels_frame,
        queries_frame,
        run_frame,
        to_ir_measures,
        to_pandas,
        to_ranx,
    )
    from .lab import Lab
    from .loaders import Corpus, Dataset, load_corpus, load_queries
    from .metrics import IdMismatchWarning, evaluate
    from .pipeline import Prepared, Result, prepare, rescore, run_pipeline
    from .provenance import InSampleWarning
    from .providers import ProviderFallbackWarning
    from .rerank import Reranker
    from .runs import read_qrels, read_run, write_run
    from .session import Session
    from .store import IndexSettings, IngestReport, StaleTextWarning, Store
    from .train_fusion import FusionTrainReport, train_fusion
    from .tune import TuneReport, tune, tune_dataset


# A library's logger prints nothing by itself (user trial BP: Python's last-resort handler put `warning: ...` lines
# on stderr): `logging.basicConfig()` shows them; the `hrt` CLI prints them itself (`cli._log_lines`).
logging.getLogger(__name__).addHandler(logging.NullHandler())


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'toolkit' has no attribute {name!r}")
    value = getattr(importlib.import_module(f".{module}", __name__), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    """The public names (tab completion offered `Any`, `TYPE_CHECKING`, `importlib`, `sys`, user trial AV)."""
    return sorted(__all__)


_FUNCTIONS_OVER_MODULES = frozenset(n for n, m in _EXPORTS.items() if n == m)


class _Package(types.ModuleType):
    """The import system binds a submodule to its package's attribute when first imported (`toolkit.tune`
    would become the module); for the names where the function is the API, that binding is skipped."""

    def __setattr__(self, name: str, value: Any) -> None:
        if name in _FUNCTIONS_OVER_MODULES and isinstance(value, types.ModuleType):
            return
        super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package

