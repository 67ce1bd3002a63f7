"""Dump, per collection and split, the frames the QPP study needs (prepare with `learned`, read-only stores):
candidates of the original BM25 and dense lists, ltr_features, qrels, and each query's cosine to its corpus
(or scope) centroid of chunk vectors.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/qpp_dump.py --stores /tmp/default/stores --out /tmp/qpp
"""
from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import polars as pl

sys.path.insert(0, str(Path(__file__).resolve().parent))
from route_signals import COLLECTIONS, DEMO, SHARED

from toolkit.config import load_config
from toolkit.loaders import Dataset
from toolkit.pipeline import prepare
from toolkit.store import Store


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--stores", type=Path, required=True)
    ap.add_argument("--shared", type=Path, default=SHARED)
    ap.add_argument("--out", type=Path, required=True)
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    for name in COLLECTIONS:
        ds = Dataset.open(DEMO if name == "demo" else a.shared / name)
        with Store(a.stores / f"{name}.duckdb", read_only=True) as st:
            m = st._dense_matrix()
            vecs = m["vecs"] / np.linalg.norm(m["vecs"], axis=1, keepdims=True)
            scopes = np.asarray(m["doc_scope"], dtype=object)[m["doc_of_chunk"]]
            cent_all = vecs.mean(0)
            for split in ("dev", "test"):
                qrels, queries = ds.qrels(split), ds.queries(split)
                queries = queries.join(qrels.select("qid").unique(), on="qid", how="semi")
                prep = prepare(st, queries, load_config("learned"))
                qv = st.query_vectors(prep.queries["text"].to_list(), cache=False)
                qv = qv / np.linalg.norm(qv, axis=1, keepdims=True)
                cos_c = []
                qs = prep.queries["scope"].to_list() if "scope" in prep.queries.columns else [None] * len(qv)
                for v, s in zip(qv, qs, strict=True):
                    if s is not None and scopes is not None and (scopes == s).any():
                        c = vecs[scopes == s].mean(0)
                    else:
                        c = cent_all
                    cos_c.append(float(v @ c / np.linalg.norm(c)))
                cand = prep.candidates.filter(pl.col("list_id").is_in(["orig:lex", "orig:vec"]))
                cand.write_parquet(a.out / f"{name}_{split}_cand.parquet")
                prep.ltr_features.write_parquet(a.out / f"{name}_{split}_ltr.parquet")
                qrels.write_parquet(a.out / f"{name}_{split}_qrels.parquet")
                pl.DataFrame({"qid": prep.queries["qid"], "text": prep.queries["text"], "cos_centroid": cos_c,
                              "scoped": [s is not None for s in qs]}).write_parquet(a.out / f"{name}_{split}_q.parquet")
                print(name, split, len(qv), cand.group_by("qid", "list_id").len()["len"].describe().to_dicts()[2:5], flush=True)


if __name__ == "__main__":
    main()
