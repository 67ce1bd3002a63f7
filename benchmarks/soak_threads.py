"""Two threads sharing one writable Store, as a long-lived memory service does (user trial BH, phase B): each
loops over writing a memory (`Store.ingest`), searching for it (`run_pipeline(..., one_shot=True)` with the
`default` hybrid preset and `bm25-only`) and, every `--delete-every`th write, deleting an earlier one
(`Store.delete`). Prints the write-ahead log's size and the process's RSS every `--every` seconds, then errors,
warnings, misses (the new memory not in the top 3) and the per-thread cursors left. A WAL that grows without bound
here (DuckDB's automatic checkpoint never runs) is the defect trial BH measured: 19.8 / 59.7 / 121.9 MB at 20 / 40 /
60 s.

    PYTHONPATH=. .venv/bin/python benchmarks/soak_threads.py --store out/demo/store.duckdb --seconds 60 --idle-reader
"""

from __future__ import annotations

import argparse
import collections
import os
import random
import shutil
import tempfile
import threading
import time
import warnings
from pathlib import Path

from toolkit.config import load_config
from toolkit.pipeline import run_pipeline
from toolkit.store import Store

WORDS = ["deploy", "rollback", "postgres", "redis", "kafka", "queue", "timeout", "retry", "nginx", "cert", "vault", "token", "billing", "invoice", "webhook", "schema", "migration", "index", "replica", "shard", "cron", "backup", "alert", "pager"]


def rss_mb() -> float:
    """Resident set size from /proc (Linux), in MB."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    return float("nan")


def worker(st: Store, name: str, stop: threading.Event, counts: collections.Counter, lock: threading.Lock,
           a: argparse.Namespace, configs: list) -> None:
    """Write a memory, search for it with every config, delete an earlier one every `a.delete_every`th; until `stop`."""
    rng, mine, i = random.Random(name), [], 0
    while not stop.is_set():
        i += 1
        did, tok = f"{name}-{i:05d}", f"zq{name}{i:05d}y"
        text = f"Thread {name} memory {tok} about {' '.join(rng.choice(WORDS) for _ in range(10))}."
        try:
            with warnings.catch_warnings(record=True) as caught:
                warnings.simplefilter("always")
                st.ingest([{"doc_id": did, "text": text}])
                mine.append(did)
                for cfg in configs:
                    top = run_pipeline(st, {"q": f"{tok} memory"}, cfg, one_shot=a.one_shot).final["doc_id"].to_list()
                    if did not in top[:3]:
                        with lock:
                            counts["miss: new memory not in the top 3"] += 1
                if i % a.delete_every == 0 and len(mine) > 2:
                    st.delete([mine.pop(rng.randrange(len(mine) - 1))])
            with lock:
                counts["cycles"] += 1
                for w in caught:
                    counts[f"warning {w.category.__name__}: {str(w.message)[:100]}"] += 1
        except Exception as e:  # noqa: BLE001 - counted and shown: the soak must go on
            with lock:
                counts[f"error {type(e).__name__}: {str(e)[:120]}"] += 1


def idle_reader(st: Store, stop: threading.Event) -> None:
    """Read one row and then idle, as a service thread does after a health check (`Store.stats`): on DuckDB 1.5.5 a
    result read with fetchone stays open on its cursor until the next statement, and held every checkpoint out."""
    st.con.execute("SELECT count(*) FROM documents").fetchone()
    stop.wait()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--store", default="out/demo/store.duckdb", help="a built store; a copy is soaked (`make demo`)")
    ap.add_argument("--seconds", type=float, default=60.0)
    ap.add_argument("--every", type=float, default=20.0, help="seconds between samples")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--delete-every", type=int, default=4, help="delete an earlier memory every Nth write")
    ap.add_argument("--configs", default="default,bm25-only")
    ap.add_argument("--cached", dest="one_shot", action="store_false",
                    help="searches write the stage cache (not one_shot, as a service not following the README)")
    ap.add_argument("--idle-reader", action="store_true",
                    help="one more thread reads a row and then idles (what kept the log from folding in trial BH)")
    ap.add_argument("--workdir", default=None)
    a = ap.parse_args()
    work = Path(a.workdir or tempfile.mkdtemp(prefix="hrt-soak-"))
    work.mkdir(parents=True, exist_ok=True)
    path = work / "soak.duckdb"
    for f in (path, Path(f"{path}.wal")):
        f.unlink(missing_ok=True)
    shutil.copy(a.store, path)
    wal = Path(f"{path}.wal")
    configs = [load_config(c) for c in a.configs.split(",")]
    st = Store(path)
    run_pipeline(st, {"q": "warm up"}, configs[0], one_shot=True)  # the model loaded before the clock starts
    stop, lock, counts = threading.Event(), threading.Lock(), collections.Counter()
    threads = [threading.Thread(target=worker, args=(st, f"t{k}", stop, counts, lock, a, configs))
               for k in range(a.threads)]
    if a.idle_reader:
        threads.append(threading.Thread(target=idle_reader, args=(st, stop)))
    print(f"pid {os.getpid()}; store {path}; {a.threads} threads; configs {a.configs}")
    print("| s | WAL MB | RSS MB | DuckDB MB | cycles |")
    print("|---:|---:|---:|---:|---:|")
    start = time.monotonic()
    for t in threads:
        t.start()
    step = 1
    while (now := time.monotonic() - start) < a.seconds:
        time.sleep(min(a.every * step - now, a.seconds - now))
        size = wal.stat().st_size / 1e6 if wal.exists() else 0.0
        # DuckDB's own allocations (its buffer pool keeps pages until `memory_limit`): RSS growth beyond them is
        # Python's or the libraries' (trial BN saw 411 -> 457 MB over 150 s, unexplained)
        duck = st.con.execute("SELECT sum(memory_usage_bytes) / 1e6 FROM duckdb_memory()").fetchone()[0]
        with lock:
            print(f"| {a.every * step:.0f} | {size:.1f} | {rss_mb():.0f} | {duck:.0f} | {counts['cycles']} |", flush=True)
        step += 1
    stop.set()
    for t in threads:
        t.join()
    print(f"cursors kept for threads that have ended: {len(st.con._cursors)}")
    st.close()
    for k, n in sorted(counts.items()):
        if k != "cycles":
            print(f"{n:6d}  {k}")


if __name__ == "__main__":
    main()
