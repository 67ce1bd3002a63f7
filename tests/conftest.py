"""Shared fixtures: one embedding model per session (loading it takes seconds), small corpora, shared data."""

from __future__ import annotations

import atexit
import json
import os
import sys
import tempfile
from pathlib import Path

import pytest

from toolkit.embed import Embedder, SentenceTransformerEmbedder, make_embedder
from toolkit.loaders import load_corpus
from toolkit.store import Store

# The repository is cloned beside shared/ (here and in CI): <root>/<repo>/tests -> <root>/shared/datasets.
SHARED = Path(__file__).resolve().parents[2] / "shared" / "datasets"


def shared(name: str) -> Path:
    p = SHARED / name
    if not p.exists():
        pytest.skip(f"shared collection {name} not available at {p}")
    return p


def pytest_collection_modifyitems(config, items):
    """Files holding a `long` test run first, the rest in collection order (`make test` passes
    `--no-loadscope-reorder`). xdist's own order, files with the most tests first, started the browser and Ray
    tests (one test each, a minute of external processes) last, and a 3-worker run spent its last minute on them."""
    long_files = {item.path for item in items if item.get_closest_marker("long")}
    items.sort(key=lambda item: item.path not in long_files)  # stable: each file's tests keep their order


def pytest_configure(config):
    if os.environ.get("PYTEST_XDIST_WORKER"):
        atexit.register(_worker_exit)  # runs before the atexit handlers of the plugins loaded ahead of this file


def _worker_exit() -> None:
    """An xdist worker whose reports are all sent ends without the interpreter's teardown: freeing the modules
    of torch, DuckDB, ONNX Runtime and the rest took 2-3.5 s per worker, and the run waits for its last worker to
    exit. Weakref finalizers (temporary folders) and logging still run; the earlier handlers of the plugins
    (ipykernel, zmq, tornado, IPython: a kernel inside this process) have nothing of a worker to close."""
    import logging
    import weakref

    weakref.finalize._exitfunc()
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


@pytest.fixture(scope="session", autouse=True)
def _hrt_cache_dir():
    """Exported ONNX models go to the checkout's `notebooks/.cache/hrt` (ignored by git, beside the tutorials'
    demo store), not the user's cache. Subprocesses inherit it, the tutorials' kernels included (they run in the
    same pytest run), so it is one directory for all xdist workers and for later runs: the model is exported once
    per checkout (concurrent exports are safe; a damaged entry is exported again), not in every run (~6 s of
    CPU). Tests of the export itself use folders of their own."""
    old = os.environ.get("HRT_CACHE_DIR")
    cache = Path(__file__).resolve().parents[1] / "notebooks" / ".cache" / "hrt"
    try:
        cache.mkdir(parents=True, exist_ok=True)
    except OSError:  # a read-only checkout: a folder of this run
        cache = Path(tempfile.mkdtemp(prefix="hrt-cache-"))
    os.environ["HRT_CACHE_DIR"] = str(cache)
    yield
    if old is None:
        os.environ.pop("HRT_CACHE_DIR", None)
    else:
        os.environ["HRT_CACHE_DIR"] = old


@pytest.fixture(scope="session")
def embedder() -> Embedder:
    """The packaged model as users get it (`backend: auto`: ONNX Runtime where it is installed). A worker then
    never imports torch (~4 s of CPU each) unless a test asks for `torch_embedder`; the vectors are the same."""
    return make_embedder(backend="auto")


@pytest.fixture(scope="session")
def torch_embedder() -> SentenceTransformerEmbedder:
    return SentenceTransformerEmbedder()


DOCS = [
    {"_id": "d1", "title": "Deploy failure", "text": "The deploy failed with ECONNREFUSED on port 5432 after the v2.14.3 upgrade.", "metadata": {"source": "incident-12", "scope": "platform", "team": "infra"}},
    {"_id": "d2", "title": "Retry policy", "text": "We decided to set retryBackoffMs to 250 and cap retries at five.", "metadata": {"source": "decisions", "scope": "payments", "team": "pay"}},
    {"_id": "d3", "title": "Pool sizing", "text": "max_pool_size is 40 in production; staging uses 10.", "metadata": {"source": "decisions", "scope": "platform", "team": "infra"}},
    {"_id": "d4", "title": "Lunch", "text": "The team lunch moved to Thursday because of the offsite.", "metadata": {"source": "chat", "scope": "platform", "team": "infra"}},
    {"_id": "d5", "title": "Version pin", "text": "Node is pinned at v2.13.0 of the SDK, not v2.14.3, until NW-1432 is fixed.", "metadata": {"source": "incident-12", "scope": "platform", "team": "infra"}},
    {"_id": "d6", "title": "Rate limits", "text": "Stripe answers HTTP 429 when we exceed the rate limit; back off and retry.", "metadata": {"source": "runbook", "scope": "payments", "team": "pay"}},
]


def docs_store(folder: Path, embedder) -> Store:
    """A store of the six DOCS in `folder`, for module-scoped fixtures (the fixture closes it)."""
    corpus = folder / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    st = Store(folder / "s.duckdb", embedder=embedder)
    st.ingest(load_corpus(corpus))
    return st


@pytest.fixture
def corpus_file(tmp_path: Path) -> Path:
    p = tmp_path / "corpus.jsonl"
    p.write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    return p


@pytest.fixture
def store(tmp_path, corpus_file, embedder):
    """A store of the six DOCS, with embeddings (tests that need another define their own `store`)."""
    st = Store(tmp_path / "s.duckdb", embedder=embedder)
    st.ingest(load_corpus(corpus_file))
    yield st
    st.close()


@pytest.fixture(scope="module")
def browser_ready() -> None:
    """The browser tests' gate (tests/browser_lab.py: skip without Chromium, fail under HRT_REQUIRE_BROWSER=1)."""
    from browser_lab import require_browser

    require_browser()


def write_beir(root: Path, corpus_file: Path, *, scoped: bool = True) -> Path:
    """A three-query BEIR folder over the six DOCS (q1 -> d1, q2 -> d2, q3 -> d5 in qrels/test.tsv); `scoped`
    puts each query in its documents' scope."""
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text(corpus_file.read_text())
    qs = [
        {"_id": "q1", "text": "deploy fails with ECONNREFUSED", "metadata": {"scope": "platform"}},
        {"_id": "q2", "text": "what is the retry backoff?", "metadata": {"scope": "payments"}},
        {"_id": "q3", "text": "which SDK version is pinned", "metadata": {"scope": "platform"}},
    ]
    if not scoped:
        qs = [{k: v for k, v in q.items() if k != "metadata"} for q in qs]
    (root / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td5\t1\n")
    return root


@pytest.fixture(scope="module")
def demo_store():
    """The tutorials' demo store (`notebooks/.cache/demo.duckdb`), built once per test run by whoever asks first
    (`Store.open_built`), read-only here."""
    root = Path(__file__).resolve().parents[1]
    with Store.open_built(root / "notebooks" / ".cache" / "demo.duckdb",
                          lambda st: st.ingest(load_corpus(root / "data" / "demo"))) as st:
        yield st
