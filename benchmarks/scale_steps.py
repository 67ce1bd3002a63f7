"""Three steps trial BL measured at scale, each in a process of its own (peak RSS is per process): the learned
features of a query set (`ltr_features.candidate_features`), reading a vectors file (`vectors.read_vectors`), and a
one-shot search's read of its candidates' sources (`Store.doc_sources` of 100 ids). Run it with PYTHONPATH pointing
at the code to measure (an archive of an older commit gives the before column).

    PYTHONPATH=. .venv/bin/python benchmarks/scale_steps.py --store lex.duckdb --queries qset/queries.jsonl \
        --vectors vectors.parquet
"""

from __future__ import annotations

import argparse
import json
import random
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path


def peak_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def ltr(store: str, queries: str) -> str:
    import polars as pl

    from toolkit import ltr_features
    from toolkit.config import load_config
    from toolkit.pipeline import prepare
    from toolkit.store import Store

    rows = [json.loads(x) for x in Path(queries).read_text(encoding="utf-8").splitlines() if x.strip()]
    q = pl.DataFrame({"qid": [r["_id"] for r in rows], "text": [r["text"] for r in rows]})
    with Store(store, read_only=True) as st:
        prep = prepare(st, q, load_config("bm25-only"), one_shot=True)
        before, t = peak_mb(), time.perf_counter()
        f = ltr_features.candidate_features(st, prep.queries, prep.candidates, prep.features)
        return f"learned features of {len(q)} queries ({len(f):,} rows): {time.perf_counter() - t:.1f} s, peak RSS +{peak_mb() - before:.0f} MB"


def vectors(path: str) -> str:
    from toolkit.vectors import read_vectors

    before, t = peak_mb(), time.perf_counter()
    e = read_vectors(path)
    return f"read_vectors ({len(e._by_hash):,} vectors): {time.perf_counter() - t:.1f} s, peak RSS {peak_mb():.0f} MB (from {before:.0f})"


def sources(store: str) -> str:
    from toolkit.store import Store

    with Store(store, read_only=True) as st:
        ids = [r[0] for r in st.con.execute("SELECT doc_id FROM documents").fetchall()]
        rng, times = random.Random(0), []
        for _ in range(15):
            pick = rng.sample(ids, 100)
            t = time.perf_counter()
            st.doc_sources(pick)
            times.append(time.perf_counter() - t)
    return f"doc_sources of 100 ids ({len(ids):,} documents): median {statistics.median(times) * 1000:.0f} ms"


STEPS = {"ltr": ltr, "vectors": vectors, "sources": sources}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", required=True, help="a store ingested with --no-embed")
    ap.add_argument("--queries", help="BEIR queries.jsonl for the learned-features step")
    ap.add_argument("--vectors", help="a vectors Parquet file (hrt embed's) for the read step")
    ap.add_argument("--step", choices=list(STEPS), help=argparse.SUPPRESS)  # one step, in the child process
    a = ap.parse_args()
    if a.step:
        print(STEPS[a.step](*{"ltr": (a.store, a.queries), "vectors": (a.vectors,), "sources": (a.store,)}[a.step]))
        return
    for step, needs in (("ltr", a.queries), ("vectors", a.vectors), ("sources", True)):
        if needs:
            args = [sys.executable, __file__, "--store", a.store, "--step", step]
            args += ["--queries", a.queries] if a.queries else []
            args += ["--vectors", a.vectors] if a.vectors else []
            print(subprocess.run(args, capture_output=True, text=True, check=True).stdout.strip(), flush=True)


if __name__ == "__main__":
    main()
