"""Run the LanceDB export for real: build a LanceDB table from a toolkit store, run the exported module's
hybrid search for every query of a split, and compare its top 10 with the toolkit's own final lists.

    python benchmarks/lancedb_export.py --store /tmp/x/demo.duckdb --dataset data/demo --split test

Prints, per config, the mean top-10 overlap (|toolkit top 10 ∩ LanceDB top 10| / 10) and the share of
queries whose first result agrees. Needs the `lancedb` extra. Copy a prebuilt store first: the stage
cache writes into it.
"""

from __future__ import annotations

import argparse
import importlib.util
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl

from toolkit.config import load_config
from toolkit.export import export_config
from toolkit.loaders import Dataset
from toolkit.pipeline import run_pipeline
from toolkit.store import Store


def lance_table(store: Store, db_dir: str):
    """One LanceDB row per toolkit chunk: doc_id, text (title + text, as the store indexes it), vector."""
    import lancedb
    from lancedb.index import FTS

    scopes = store.con.execute("SELECT doc_id, scope FROM documents").pl()
    chunks = store.chunks().select("chunk_id", "doc_id", "title", "text").join(scopes, on="doc_id", how="left")
    vecs = store.chunk_vectors(chunks["chunk_id"].to_list())
    rows = chunks.join(vecs, on="chunk_id").with_columns(
        pl.concat_str([pl.col("title").fill_null(""), pl.col("text")], separator="\n").alias("text")
    ).select("doc_id", pl.col("scope").fill_null(""), "text", pl.col("vec").alias("vector"))
    db = lancedb.connect(db_dir)
    tbl = db.create_table("chunks", rows.to_arrow())
    tbl.create_index("text", config=FTS(stem=True, remove_stop_words=True, language="English"))
    return tbl


def load_module(text: str, path: Path):
    path.write_text(text)
    spec = importlib.util.spec_from_file_location(path.stem, path)
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--store", required=True)
    ap.add_argument("--dataset", required=True)
    ap.add_argument("--split", default="test")
    ap.add_argument("--configs", default="hybrid-rrf,convex")
    args = ap.parse_args()
    import lancedb

    store = Store(args.store)
    ds = Dataset.open(args.dataset)
    queries = ds.queries(args.split)
    qvec = store.query_vectors(queries["text"].to_list())
    with tempfile.TemporaryDirectory() as d:
        t0 = time.perf_counter()
        tbl = lance_table(store, d)
        print(f"lancedb {lancedb.__version__}: table of {tbl.count_rows()} chunks built in {time.perf_counter() - t0:.1f} s; "
              f"{queries.height} {ds.name} {args.split} queries")
        for name in args.configs.split(","):
            cfg = load_config("hybrid-rrf")
            if name == "convex":
                cfg = cfg.with_updates({"name": "hybrid-convex", "fusion.method": "convex", "fusion.alpha": 0.6})
            elif name != "hybrid-rrf":
                cfg = load_config(name)
            cfg = cfg.with_updates({"output.n": 10})
            res = export_config(cfg, "lancedb")
            mod = load_module(res.payload, Path(d) / f"export_{cfg.name.replace('-', '_')}.py")
            result = run_pipeline(store, queries, cfg)
            ours, trace = result.final, result.trace
            overlaps, firsts, lists = [], [], {"lex": [], "vec": []}
            for (qid, text, scope), v in zip(queries.select("qid", "text", "scope").iter_rows(), qvec, strict=True):
                mine = ours.filter(pl.col("qid") == qid).sort("rank")["doc_id"].head(10).to_list()
                theirs = mod.search(tbl, text, v, limit=10, scope=scope)["doc_id"].tolist()
                overlaps.append(len(set(mine) & set(theirs)) / 10)
                firsts.append(bool(mine and theirs and mine[0] == theirs[0]))
                if name == "hybrid-rrf":  # where the difference comes from: each input list on its own
                    for kind, q in (("lex", tbl.search(text, query_type="fts")), ("vec", tbl.search(list(map(float, v))).distance_type("cosine"))):
                        if scope is not None:
                            q = q.where("scope = '" + scope.replace("'", "''") + "'", prefilter=True)
                        got = list(dict.fromkeys(q.limit(50).to_pandas()["doc_id"].tolist()))[:10]
                        ref = trace.filter((pl.col("qid") == qid) & (pl.col("stage") == f"retrieve:orig:{kind}")).sort("rank")
                        lists[kind].append(len(set(got) & set(ref["doc_id"].head(10).to_list())) / 10)
            print(f"{cfg.name}: mean top-10 overlap {np.mean(overlaps):.3f} (min {np.min(overlaps):.1f}), "
                  f"same first result {np.mean(firsts):.3f}; not carried over: {res.not_carried or 'nothing'}")
            if lists["lex"]:
                print(f"  input lists, top-10 overlap: BM25 (toolkit analyzer vs LanceDB FTS) {np.mean(lists['lex']):.3f}, "
                      f"dense {np.mean(lists['vec']):.3f}")
    store.close()


if __name__ == "__main__":
    sys.exit(main())
