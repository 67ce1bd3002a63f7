"""Defects from a user trial of caches that served stale results, each as the user met it: a second Store
object on the same file sees the other's ingest; a rewritten score file is read again; corrected supplied
vectors replace the old ones; an HNSW file left by a store moved over from a copy is not searched; `hrt run`
does not retrieve documents deleted from the dataset."""

from __future__ import annotations

import json
import logging
import os
import shutil

import numpy as np
import polars as pl
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.config import load_config
from toolkit.pipeline import run_pipeline
from toolkit.store import Store

LEXICAL = load_config("default").with_updates({"retrieval.dense.enabled": False})
QUERIES = pl.DataFrame({"qid": ["q1"], "text": ["console releases note"], "scope": [None]},
                       schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8})
DOCS = [
    {"doc_id": "a", "text": "Team note: console releases go out on Tuesdays."},
    {"doc_id": "b", "text": "Team note: the coffee machine is descaled on Fridays."},
    {"doc_id": "c", "text": "Team note: alerts go to the on-call channel."},
]


def _top(res) -> list[str]:
    return res.final.sort("rank")["doc_id"].to_list()


# 1. A second Store object on the same file ---------------------------------------------------------------

def test_a_second_store_object_on_the_same_file_sees_the_others_ingest(tmp_path):
    """`generation` was memoised per object, so the stage cache and search matrices of the first object kept
    serving the corpus from before the second object's ingest."""
    a = Store(tmp_path / "s.duckdb")
    a.ingest(DOCS, embed=False)
    assert _top(run_pipeline(a, QUERIES, LEXICAL))[0] == "a"
    b = Store(tmp_path / "s.duckdb")
    b.ingest([{"doc_id": "a", "text": "Gardening notes about tomatoes."}, *DOCS[1:],
              {"doc_id": "d", "text": "Console releases now ship on Wednesdays."}], embed=False)
    assert a.generation() == b.generation()
    assert _top(run_pipeline(a, QUERIES, LEXICAL))[0] == "d"


# 2. Files named by prepare fields are stamped by content ------------------------------------------------

def _scores(path, store, fav):
    path.write_text("".join(json.dumps({"query": "console releases note", "text": r["text"], "score": 10.0 * (r["doc_id"] == fav)}) + "\n"
                            for r in store.chunks().iter_rows(named=True)))


def test_a_rewritten_rerank_score_file_is_read_again_and_relative_paths_by_folder(tmp_path, monkeypatch):
    """The stage cache was keyed by `rerank.path` as written: a rewritten file, or the same relative path
    from another folder, gave the first file's scores."""
    st = Store(tmp_path / "s.duckdb")
    st.ingest(DOCS, embed=False)
    cfg = LEXICAL.with_updates({"rerank.provider": "file", "rerank.path": "rr.jsonl", "rerank.blend": "replace"})
    for d in ("w1", "w2"):
        (tmp_path / d).mkdir()
    _scores(tmp_path / "w1" / "rr.jsonl", st, "b")
    _scores(tmp_path / "w2" / "rr.jsonl", st, "c")
    monkeypatch.chdir(tmp_path / "w1")
    assert _top(run_pipeline(st, QUERIES, cfg))[0] == "b"
    monkeypatch.chdir(tmp_path / "w2")
    assert _top(run_pipeline(st, QUERIES, cfg))[0] == "c"
    _scores(tmp_path / "w2" / "rr.jsonl", st, "a")
    os.utime(tmp_path / "w2" / "rr.jsonl", ns=(1, 1))  # a new mtime even on a coarse clock
    assert _top(run_pipeline(st, QUERIES, cfg))[0] == "a"


# 3. Supplied vectors ----------------------------------------------------------------------------------------

def test_corrected_supplied_vectors_replace_the_old_ones_and_a_text_changed_back_gets_its_new_vector(tmp_path):
    e = np.eye(4).tolist()
    texts = ["alpha note", "beta note", "gamma note"]

    def docs(vs, ts):
        return [{"doc_id": f"v{i}", "text": t, "vector": v} for i, (t, v) in enumerate(zip(ts, vs, strict=True))]

    def top(st, v):
        return st.dense_search(QUERIES, vectors=np.array([v], dtype=np.float32), top_k=1)["doc_id"][0]

    st = Store(tmp_path / "s.duckdb")
    st.ingest(docs([e[0], e[1], e[2]], texts), model="ext")
    rep = st.ingest(docs([e[1], e[0], e[2]], texts), model="ext")  # v0 and v1 were swapped
    assert (rep.changed, rep.unchanged) == (2, 1)
    assert top(st, e[0]) == "v1"
    st.ingest(docs([e[3], e[0], e[2]], ["alpha note v2", *texts[1:]]), model="ext")
    st.ingest(docs([e[3], e[0], e[2]], texts), model="ext")  # back to the old text, with the new vector
    assert top(st, e[3]) == "v0"


# 4. HNSW sidecar of a store moved over from a copy --------------------------------------------------------

def test_an_hnsw_file_left_by_a_store_moved_over_from_a_copy_is_not_searched(tmp_path, caplog):
    rng = np.random.default_rng(0)
    vecs = rng.normal(size=(30, 8)).tolist()
    docs = [{"doc_id": f"d{i:02d}", "text": f"note {i}", "vector": v} for i, v in enumerate(vecs)]
    new = {"doc_id": "a00", "text": "new note", "vector": rng.normal(size=8).tolist()}
    path, copy = tmp_path / "m.duckdb", tmp_path / "copy.duckdb"
    with Store(path) as st:
        st.ingest(docs, model="ext")
        st.build_vector_index()
    shutil.copy(path, copy)
    with Store(copy) as st:
        st.ingest([new, *docs], model="ext")
    os.replace(copy, path)
    with Store(path, read_only=True) as st:
        q = np.array([st.chunk_vectors(["a00#0"])["vec"][0]], dtype=np.float32)
        with caplog.at_level(logging.WARNING, logger="toolkit"):
            got = st.dense_search(QUERIES, vectors=q, top_k=3, index="hnsw")
        exact = st.dense_search(QUERIES, vectors=q, top_k=3, index="exact")
    assert got["doc_id"].to_list() == exact["doc_id"].to_list()
    assert got["doc_id"][0] == "a00"
    assert f"{path}.hnsw does not belong to this store" in caplog.text and "--vector-index hnsw" in caplog.text
    with Store(path) as st:  # an ingest (nothing changed) rebuilds it
        st.ingest([new, *docs], model="ext")
    caplog.clear()
    with Store(path, read_only=True) as st, caplog.at_level(logging.WARNING, logger="toolkit"):
        assert st._ann() is not None
    assert "does not belong" not in caplog.text


def test_an_index_built_through_one_store_object_is_searched_through_another(tmp_path):
    """Building the HNSW index leaves the generation as it was, so a second object's memo said 'no vector
    index' until the next ingest."""
    rng = np.random.default_rng(1)
    docs = [{"doc_id": f"d{i:02d}", "text": f"note {i}", "vector": rng.normal(size=8).tolist()} for i in range(30)]
    a, b = Store(tmp_path / "v.duckdb"), Store(tmp_path / "v.duckdb")
    a.ingest(docs, model="ext")
    q = np.array([docs[7]["vector"]], dtype=np.float32)
    assert b.vector_index is None  # memoised by b
    a.build_vector_index()
    got = b.dense_search(QUERIES, vectors=q, top_k=3, index="hnsw")
    assert b.vector_index is not None and b.vector_index["kind"] == "hnsw"
    assert got["doc_id"][0] == "d07"
    a.close()
    b.close()


# 5. `hrt run` and documents deleted from the dataset --------------------------------------------------------

def _dataset(root, docs):
    root.mkdir(exist_ok=True)
    (root / "qrels").mkdir(exist_ok=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps({"_id": d["doc_id"], "text": d["text"]}) + "\n" for d in docs))
    (root / "queries.jsonl").write_text(json.dumps({"_id": "q1", "text": "console releases"}) + "\n")
    (root / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\ta\t1\n")


def _run(tmp_path, *extra):
    return CliRunner().invoke(main, ["run", "--dataset", str(tmp_path / "ds"), "--mode", "lexical",
                                     "--out", str(tmp_path / "r.trec"), *extra])


def test_hrt_run_drops_deleted_documents_from_its_own_store_and_refuses_a_named_store_holding_them(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    _dataset(tmp_path / "ds", DOCS)
    named = str(tmp_path / "mine.duckdb")
    assert _run(tmp_path).exit_code == 0
    assert _run(tmp_path, "--store", named).exit_code == 0
    _dataset(tmp_path / "ds", [d for d in DOCS if d["doc_id"] != "a"])
    r = _run(tmp_path)
    assert r.exit_code == 0, r.output
    assert "\ta\t" not in (tmp_path / "r.trec").read_text().replace(" ", "\t")
    r = _run(tmp_path, "--store", named)
    assert r.exit_code != 0
    assert "holds 1 document(s) not in" in r.output and "'a'" in r.output and "--prune" in r.output
    with Store(named, read_only=True) as st:  # nothing of the user's was removed
        assert "a" in st.doc_sources()["doc_id"].to_list()
    r = _run(tmp_path, "--store", named, "--prune")
    assert r.exit_code == 0, r.output
    assert "\ta\t" not in (tmp_path / "r.trec").read_text().replace(" ", "\t")
