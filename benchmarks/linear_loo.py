"""A linear ranker (pointwise logistic regression) judged leave-one-collection-out on the DEV splits.

It has a few dozen weights and cannot memorise a collection, so it might transfer better than LightGBM's trees
(`benchmarks/learned_fusion.py --select` judges those the same way). For each collection: train on the other
four collections' dev candidates (standardised features, label = judged relevant), score this collection's dev
split, and compare nDCG@10 with plain RRF (the candidates' `rrf` feature). Features come from the stage caches
of the stores (`collect`), so a second run is quick. The test splits are not read.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/linear_loo.py --stores /tmp/default/stores
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import polars as pl
from learned_fusion import COLLECTIONS, REL_THRESHOLD, _order, dataset_dir
from sklearn.linear_model import LogisticRegression
from sklearn.preprocessing import StandardScaler

from toolkit.config import load_config
from toolkit.metrics import evaluate
from toolkit.store import Store
from toolkit.train_fusion import DEFAULT_FEATURES, TRANSFER_FEATURES, collect


def _matrix(d: pl.DataFrame, feats: list[str]) -> np.ndarray:
    return d.select([pl.col(f).cast(pl.Float64).fill_null(0.0).fill_nan(0.0) for f in feats]).to_numpy()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--shared", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets"))
    ap.add_argument("--stores", default="/tmp/default/stores", help="Folder with <collection>.duckdb for each collection.")
    args = ap.parse_args()
    shared, stores = Path(args.shared), Path(args.stores)
    data, qrels = {}, {}
    for n in COLLECTIONS:
        with Store(stores / f"{n}.duckdb") as st:
            data[n], qrels[n] = collect(st, dataset_dir(n, shared), split="dev", config=load_config("learned"), name=n)
    thr = {n: REL_THRESHOLD.get(n, 1) for n in COLLECTIONS}

    def ndcg(d: pl.DataFrame, col: str, n: str) -> float:
        judged = qrels[n].select("qid", "doc_id", "rel")
        return float(evaluate(_order(d, col), judged, ["nDCG@10"], rel_threshold=thr[n])["value"].mean())

    rrf = {t: ndcg(data[t], "rrf", t) for t in COLLECTIONS}
    print("| features | C | collections weighted equally | " + " | ".join(COLLECTIONS) + " | mean | above RRF |")
    print("|---|---:|---|" + "---:|" * (len(COLLECTIONS) + 2))
    print("| (plain RRF) | | | " + " | ".join(f"{rrf[t]:.4f}" for t in COLLECTIONS) + f" | {np.mean(list(rrf.values())):.4f} | |")
    for name, feats in (("portable (21)", TRANSFER_FEATURES), (f"default recipe's ({len(DEFAULT_FEATURES)})", DEFAULT_FEATURES)):
        for c in (0.01, 0.1, 1.0):
            for equal in (False, True):
                row = {}
                for t in COLLECTIONS:
                    others = [n for n in COLLECTIONS if n != t]
                    x = np.vstack([_matrix(data[n], feats) for n in others])
                    y = np.concatenate([(data[n]["label"].fill_null(0).to_numpy() >= thr[n]).astype(int) for n in others])
                    w = np.concatenate([np.full(len(data[n]), len(x) / len(others) / len(data[n])) for n in others]) if equal else None
                    scale = StandardScaler().fit(x)
                    model = LogisticRegression(C=c, max_iter=2000).fit(scale.transform(x), y, sample_weight=w)
                    scored = data[t].with_columns(pl.Series("_s", model.decision_function(scale.transform(_matrix(data[t], feats)))))
                    row[t] = ndcg(scored, "_s", t)
                above = sum(row[t] > rrf[t] for t in COLLECTIONS)
                print(f"| {name} | {c} | {'yes' if equal else 'no'} | " + " | ".join(f"{row[t]:.4f}" for t in COLLECTIONS)
                      + f" | {np.mean(list(row.values())):.4f} | {above} |", flush=True)


if __name__ == "__main__":
    main()
