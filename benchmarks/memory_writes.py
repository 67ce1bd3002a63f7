"""Single-memory writes into a store used as an agent's memory: the BM25 index updated in place
(`toolkit/fts_update.py`, what `Store.ingest` does now) against DuckDB FTS's own way, `create_fts_index` over the
whole table on every write (what it did before), in the same run.

For each store size: a store of N synthetic memories (12 words from a 60-word vocabulary plus a unique token,
dated, with a priority) is copied once per arm; then W single writes alternate between the two copies, each
write a new memory ingested without embeddings (`Store.ingest([one], embed=False)`: the whole write, transaction
and commit included), followed by a BM25 search for its unique token, which must rank it first. Prints the
median write time per arm and their ratio, then the file size after `--grow` writes into a 300-memory store.

    PYTHONPATH=. .venv/bin/python benchmarks/memory_writes.py --sizes 300,3000,30000 --writes 21 --grow 500
"""

from __future__ import annotations

import argparse
import random
import shutil
import statistics
import tempfile
import time
from pathlib import Path

import polars as pl

from toolkit.store import Store

WORDS = tuple(
    ["deploy", "freeze", "friday", "server", "database", "cache", "redis", "postgres", "kafka", "queue", "latency", "budget", "review", "meeting", "alice", "bob", "carol", "dashboard", "alert", "pager", "oncall", "incident", "rollback", "canary", "release", "branch", "merge", "token", "secret", "rotate", "certificate", "expiry", "invoice", "customer", "ticket", "migration", "schema", "index", "backup", "restore", "quota", "limit", "region", "cluster", "node", "pod", "helm", "chart", "grafana", "prometheus", "metric", "log", "trace", "span"]
)


def memory(i: int, rng: random.Random) -> dict:
    return {"doc_id": f"m{i}", "text": " ".join(rng.choice(WORDS) for _ in range(12)) + f" note{i}",
            "metadata": {"date": f"2025-{1 + i % 12:02d}-{1 + i % 28:02d}", "priority": f"P{i % 4}"}}


def rebuild_every_write(store: Store) -> None:
    """The previous behaviour on this one object: every write re-creates the whole index."""
    store._update_fts = lambda ids, settings: store._build_fts(settings) or False  # type: ignore[method-assign]


def found_first(store: Store, token: str, doc_id: str) -> bool:
    hits = store.lexical_search(pl.DataFrame({"qid": ["q"], "text": [token]}), top_k=1)["doc_id"].to_list()
    return hits == [doc_id]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--sizes", default="300,3000,30000")
    ap.add_argument("--writes", type=int, default=21)
    ap.add_argument("--grow", type=int, default=500, help="writes into a 300-memory store for the file-size row (0: skip)")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="hrt-writes-"))
    work.mkdir(parents=True, exist_ok=True)
    print("| memories | in place: median ms | rebuild: median ms | rebuild / in place | found first |")
    print("|---:|---:|---:|---:|---|")
    for n in (int(x) for x in a.sizes.split(",") if x):
        base = work / f"base{n}.duckdb"
        base.unlink(missing_ok=True)
        rng = random.Random(0)
        with Store(base) as st:
            st.ingest([memory(i, rng) for i in range(n)], embed=False)
        arms = {}
        for arm in ("in place", "rebuild"):
            p = work / f"{arm.replace(' ', '_')}{n}.duckdb"
            shutil.copy(base, p)
            arms[arm] = Store(p)
        rebuild_every_write(arms["rebuild"])
        times: dict[str, list[float]] = {arm: [] for arm in arms}
        ok = 0
        for j in range(a.writes):
            for arm, st in arms.items() if j % 2 == 0 else reversed(list(arms.items())):
                m = memory(10_000_000 + j, random.Random(j))
                t = time.perf_counter()
                rep = st.ingest([m], embed=False)
                times[arm].append(time.perf_counter() - t)
                assert rep.fts_in_place == (arm == "in place"), (arm, rep)
                ok += found_first(st, f"note{10_000_000 + j}", m["doc_id"])
        for st in arms.values():
            st.close()
        med = {arm: statistics.median(ts[1:]) * 1000 for arm, ts in times.items()}  # the first write warms up
        print(f"| {n:,} | {med['in place']:.0f} | {med['rebuild']:.0f} | {med['rebuild'] / med['in place']:.1f}x "
              f"| {ok}/{2 * a.writes} |", flush=True)
    if a.grow:
        rng = random.Random(0)
        fresh = work / "fresh.duckdb"
        fresh.unlink(missing_ok=True)
        with Store(fresh) as st:
            st.ingest([memory(i, rng) for i in range(300 + a.grow)], embed=False)
        print(f"\nfile size after {a.grow} single writes into 300 memories (a fresh store of the same "
              f"{300 + a.grow}: {fresh.stat().st_size / 1e6:.1f} MB)")
        for arm in ("in place", "rebuild"):
            p = work / f"grow_{arm.replace(' ', '_')}.duckdb"
            p.unlink(missing_ok=True)
            rng = random.Random(0)
            with Store(p) as st:
                st.ingest([memory(i, rng) for i in range(300)], embed=False)
            st = Store(p)
            if arm == "rebuild":
                rebuild_every_write(st)
            for j in range(a.grow):
                st.ingest([memory(20_000_000 + j, random.Random(j))], embed=False)
            st.close()
            print(f"- {arm}: {p.stat().st_size / 1e6:.1f} MB")


if __name__ == "__main__":
    main()
