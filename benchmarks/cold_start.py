"""Cold start of the CLI: whole processes, timed against `python -c "import duckdb, polars"` in the same run.

Each command runs `--runs` times (median reported) after one untimed warm-up run, interleaved round-robin so
that a burst of load on the (shared) machine hits every command alike. Commands:

- floor:   python -c "import duckdb, polars" (the least any search of a DuckDB store with polars can cost)
- floor+pandas: the floor plus `import pandas` (DuckDB 1.5 imports pandas the first time it binds a
  Python value to a parameter, i.e. in every search: the part of the lexical path no toolkit code can drop)
- help:    hrt --help
- lexical: hrt search QUERY --store STORE --mode lexical
- hybrid:  hrt search QUERY --store STORE --mode hybrid (the `default` preset, the learned fusion since the twenty-fifth
           session; query embedded by the default backend)
- hybrid-torch: the same with --backend torch (the old path)
- learned: hrt search QUERY --store STORE --config learned (LambdaMART fusion; held to the hybrid target)

`--before DIR` adds the help/lexical/hybrid/learned rows run from another source tree (e.g. a `git archive` of the
previous main), so before and after come from one run. Targets: lexical <= 2x floor, hybrid <= 5x floor,
help <= 1.5x floor; learned as hybrid.

    python benchmarks/cold_start.py --store /tmp/demo.duckdb --runs 7 [--before /tmp/old-tree]
"""

from __future__ import annotations

import argparse
import atexit
import os
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
QUERY = "why does the deploy fail with ECONNREFUSED?"
TARGETS = {"help": 1.5, "lexical": 2.0, "hybrid": 5.0, "learned": 5.0}


def commands(store: str) -> dict[str, list[str]]:
    py = sys.executable
    hrt = [py, "-m", "toolkit.cli"]
    return {
        "floor": [py, "-c", "import duckdb, polars"],
        "floor+pandas": [py, "-c", "import duckdb, polars, pandas"],
        "help": [*hrt, "--help"],
        "lexical": [*hrt, "search", QUERY, "--store", store, "--mode", "lexical"],
        "hybrid": [*hrt, "search", QUERY, "--store", store, "--mode", "hybrid"],
        "hybrid-torch": [*hrt, "search", QUERY, "--store", store, "--mode", "hybrid", "--backend", "torch"],
        "learned": [*hrt, "search", QUERY, "--store", store, "--config", "learned"],
    }


def timed(cmd: list[str], env: dict[str, str]) -> tuple[float, float]:
    """Wall seconds and CPU seconds (user + system) of one whole process."""
    r0 = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    # cwd = the tree being timed: `python -m` puts the working directory first on sys.path.
    r = subprocess.run(cmd, env=env, cwd=env["PYTHONPATH"], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    took = time.perf_counter() - t0
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)} failed ({r.returncode}): {r.stderr[-500:]}")
    r1 = resource.getrusage(resource.RUSAGE_CHILDREN)
    return took, (r1.ru_utime - r0.ru_utime) + (r1.ru_stime - r0.ru_stime)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--store", required=True, help="A store with embeddings (e.g. a copy of the demo store).")
    ap.add_argument("--runs", type=int, default=7, help="Timed runs per command (median), after one warm-up.")
    ap.add_argument("--before", default=None, help="Source tree of the previous version: adds its rows.")
    args = ap.parse_args()

    # Bytecode as an installed package has it: PYTHONDONTWRITEBYTECODE would make every run compile the toolkit's
    # sources again (about 0.1 s); the warm-up writes the .pyc files under a prefix outside the trees.
    base_env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONDONTWRITEBYTECODE")}
    pyc = tempfile.mkdtemp(prefix="hrt-pyc-")
    atexit.register(shutil.rmtree, pyc, ignore_errors=True)  # each run left its bytecode folder in /tmp
    base_env["PYTHONPYCACHEPREFIX"] = pyc
    env_now = base_env | {"PYTHONPATH": str(REPO)}
    jobs: dict[str, tuple[list[str], dict[str, str]]] = {k: (c, env_now) for k, c in commands(args.store).items()}
    if args.before:
        env_before = base_env | {"PYTHONPATH": str(Path(args.before).resolve())}
        old = commands(args.store)
        for k in ("help", "lexical", "hybrid", "learned"):
            jobs[f"{k} (before)"] = (old[k], env_before)
    times: dict[str, list[float]] = {k: [] for k in jobs}
    cpu: dict[str, list[float]] = {k: [] for k in jobs}
    for cmd, env in jobs.values():  # warm-up: page cache, the ONNX export on first use, .pyc files
        timed(cmd, env)
    for i in range(args.runs):
        for k, (cmd, env) in jobs.items():
            wall, used = timed(cmd, env)
            times[k].append(wall)
            cpu[k].append(used)
        print(f"round {i + 1}/{args.runs} done", file=sys.stderr, flush=True)
    floor = statistics.median(times["floor"])
    floor_cpu = statistics.median(cpu["floor"])
    load = os.getloadavg()
    print(f"Load average at the end: {load[0]:.2f} {load[1]:.2f} {load[2]:.2f} (1/5/15 min); {os.cpu_count()} CPUs\n")
    # CPU time (user + system) is shown too: on a shared machine it varies less than wall time.
    print("| command | median s | min s | x floor | CPU s (median) | CPU x floor | target (wall) |")
    print("|---|---|---|---|---|---|---|")
    for k, ts in times.items():
        med = statistics.median(ts)
        target = TARGETS.get(k)
        verdict = "" if target is None or "before" in k else f"<= {target}x: {'met' if med / floor <= target else 'NOT met'}"
        c = statistics.median(cpu[k])
        print(f"| {k} | {med:.3f} | {min(ts):.3f} | {med / floor:.2f} | {c:.3f} | {c / floor_cpu:.2f} | {verdict} |")


if __name__ == "__main__":
    main()
