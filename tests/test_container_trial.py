"""User trial BA: a locked-down container. A cache folder this user cannot enter, or no home folder at all, falls
back to torch instead of failing every hybrid command; a store in a folder it cannot write says so (DuckDB writes
its log beside the file) and its caches are skipped; a closed or full stdout is one line, not exit 0 or 120."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl
import pytest
from conftest import DOCS

import toolkit.embed_onnx as embed_onnx
from toolkit.config import load_config
from toolkit.embed import SentenceTransformerEmbedder, make_embedder
from toolkit.errors import InputError, StoreError
from toolkit.loaders import load_corpus
from toolkit.pipeline import run_pipeline
from toolkit.store import Store

REPO = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize("failure", ["no home", "cache not enterable"])
def test_an_unusable_cache_folder_falls_back_to_torch(monkeypatch, caplog, failure):
    """`docker run --user 1000` with HOME=/root: `exists()` of the cached export raised PermissionError, and a user
    with no home made platformdirs raise RuntimeError; both were tracebacks of every hybrid search and ingest."""
    if not embed_onnx.onnxruntime_available():
        pytest.skip("ONNX Runtime is not installed: torch is the only backend")
    if failure == "no home":
        def cache_dir():
            raise RuntimeError("could not determine the home directory for '~/.cache', set an absolute HOME")
        monkeypatch.setattr(embed_onnx, "cache_dir", cache_dir)
    else:
        class Closed(type(Path())):  # a folder whose entries cannot be looked at
            def exists(self, *a, **k):
                raise PermissionError(13, "Permission denied", str(self))

            def __truediv__(self, other):
                return Closed(super().__truediv__(other))

        monkeypatch.setattr(embed_onnx, "export_dir", lambda model_dir: Closed("/nope/onnx/model-x"))
    with caplog.at_level(logging.WARNING, logger="toolkit"):
        emb = make_embedder()
    assert isinstance(emb, SentenceTransformerEmbedder)  # loaded lazily: nothing is embedded here
    assert "embedding with torch (the same vectors, slower to start); set HRT_CACHE_DIR to a writable folder" in caplog.text


@pytest.fixture
def store(tmp_path, embedder):
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    with Store(tmp_path / "s.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(tmp_path / "c.jsonl"))
    return tmp_path / "s.duckdb"


def test_an_ingest_into_a_folder_it_cannot_write_says_why_before_any_work(store, monkeypatch, embedder):
    real = os.access
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if Path(p) == store.parent else real(p, mode, **k))
    with Store(store, embedder=embedder) as st, pytest.raises(
            StoreError, match=r"its folder .* is not writable, and DuckDB writes its log \(s.duckdb.wal\) beside the store file"):
        st.ingest([{"doc_id": "new", "text": "a new memory about pools"}])


def test_caches_a_store_cannot_write_are_skipped_with_one_note(store, monkeypatch, caplog, embedder):
    """A store whose folder refuses DuckDB's log: a run failed with a raw TransactionException over its caches."""
    def refuse(self, *a, **k):
        raise duckdb.TransactionException('Failed to commit: Cannot open file "s.duckdb.wal": Permission denied')

    monkeypatch.setattr(Store, "_put_frames", refuse)
    monkeypatch.setattr(Store, "_fill_embedding_cache", refuse)
    q = pl.DataFrame({"qid": ["q1", "q2"], "text": ["a query never asked before", "another one never asked"]})
    with caplog.at_level(logging.WARNING, logger="toolkit"), Store(store, embedder=embedder) as st:
        res = run_pipeline(st, q, load_config("default"))
        again = run_pipeline(st, q, load_config("default"))
    assert len(res.final) and res.final.equals(again.final)
    assert caplog.text.count("its caches cannot be written") == 1 and "the results are unaffected" in caplog.text


def test_a_default_store_folder_it_cannot_create_names_the_way_out(tmp_path, monkeypatch):
    def no(self, *a, **k):
        raise PermissionError(13, "Permission denied", str(self))

    monkeypatch.setattr(Path, "mkdir", no)
    with pytest.raises(StoreError, match=r"\.hrt/x\.duckdb: cannot create its folder \.hrt \(Permission denied\); give a "
                                         r"store path in a writable folder \(--store\)"):
        Store(Path(".hrt") / "x.duckdb")


def test_an_unreadable_folder_is_named_among_the_files_not_indexed(tmp_path, monkeypatch):
    (tmp_path / "notes" / "private").mkdir(parents=True)
    (tmp_path / "notes" / "a.md").write_text("# A\n\nreadable")
    (tmp_path / "notes" / "private" / "b.md").write_text("# B\n\nhidden from this user")
    real = os.access
    private = tmp_path / "notes" / "private"
    monkeypatch.setattr(os, "access", lambda p, mode, **k: False if Path(p) == private else real(p, mode, **k))
    monkeypatch.setattr(Path, "rglob", lambda self, pat: iter([self / "a.md", private]))  # the walk can't list it
    docs = load_corpus(tmp_path / "notes")
    assert [d["doc_id"] for d in docs] == ["a.md"]
    assert [(s.where, s.reason) for s in docs.skipped] == [
        ("private", "cannot be read (permission denied): a folder, none of its files is indexed")]


def test_a_closed_or_full_stdout_is_one_line_and_exit_2(store):
    env = {**os.environ, "PYTHONPATH": str(REPO), "HRT_DUCKDB_THREADS": "1"}
    hrt = f"{sys.executable} -m toolkit.cli"
    for redirect in (">&-", ">/dev/full"):
        r = subprocess.run(["bash", "-c", f"{hrt} search deploy --store {store} --mode lexical {redirect}"],
                           env=env, capture_output=True, text=True, cwd=REPO)
        assert r.returncode == 2, (redirect, r.returncode, r.stderr)
        assert r.stderr.count("\n") == 1 and r.stderr.startswith("error: "), r.stderr
        assert "Exception ignored" not in r.stderr


def test_query_vectors_made_before_a_refused_cache_write_are_not_made_again(store, embedder):
    """A paid endpoint was asked twice for the same queries: once for the cache insert that failed, once more."""
    calls: list[list[str]] = []

    class Counting:
        model_id, backend, dim = embedder.model_id, "torch", embedder.dim

        def embed(self, texts, *, progress=False):
            calls.append(list(texts))
            return embedder.embed(texts)

    with Store(store, embedder=Counting()) as st:
        real = st.con.execute

        def execute(query, parameters=None):
            if query.startswith("INSERT INTO embedding_cache"):
                raise duckdb.TransactionException('Failed to commit: Cannot open file "s.duckdb.wal": Permission denied')
            return real(query, parameters)

        st.con.execute = execute
        vecs = st.embed_cached(["a question never asked", "and another"], Counting())
    assert calls == [["a question never asked", "and another"]] and vecs.shape == (2, embedder.dim)


def test_dense_search_fits_an_address_space_limit_of_a_few_gigabytes(store):
    """`ulimit -v 6000000` failed a hybrid search of a 6-document store: DuckDB sized the Arrow buffers of the
    vectors' read for a million rows (a 2 GiB reservation)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (6_000_000 * 1024, 6_000_000 * 1024))

    env = {**os.environ, "PYTHONPATH": str(REPO), "HRT_DUCKDB_THREADS": "1", "OMP_NUM_THREADS": "1"}
    r = subprocess.run([sys.executable, "-m", "toolkit.cli", "search", "deploy ECONNREFUSED", "--store", str(store), "-n", "1"],
                       env=env, capture_output=True, text=True, cwd=REPO, preexec_fn=limit)
    assert r.returncode == 0, r.stderr
    assert r.stdout.startswith("1. ") and "dense #" in r.stdout


def test_an_unreadable_file_is_counted_and_prune_refuses_to_remove_what_it_cannot_read(tmp_path, monkeypatch, embedder):
    """An unreadable file stopped the whole ingest with "[Errno 13]"; now it is named as every file left out is. With
    --prune its stored document would be removed for a permission, so that ingest is refused, nothing changed."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "a.md").write_text("# A\n\nreadable")
    (notes / "b.md").write_text("# B\n\nsoon unreadable")
    with Store(tmp_path / "s.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(notes))
        real = Path.read_bytes

        def read_bytes(self):
            if self.name == "b.md":
                raise PermissionError(13, "Permission denied", str(self))
            return real(self)

        monkeypatch.setattr(Path, "read_bytes", read_bytes)
        docs = load_corpus(notes)
        assert [d["doc_id"] for d in docs] == ["a.md"]
        assert [(s.where, s.reason) for s in docs.skipped] == [("b.md", "cannot be read (permission denied)")]
        with pytest.raises(InputError, match=r"1 file\(s\) or folder\(s\) cannot be read \(permission denied\) \(e\.g\. b\.md\): "
                                              r"--prune would remove the documents stored from them"):
            st.ingest(docs, prune=True)
        assert sorted(st.doc_sources()["doc_id"].to_list()) == ["a.md", "b.md"]
        assert st.ingest(docs).removed == 0  # without --prune: the stored one stays
