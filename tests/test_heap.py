"""toolkit.heap: a live loop stops paying page faults for the numpy temporaries it frees and allocates again."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

# One "tick": eight 2 MB temporaries alive together, then freed (as a re-score's numpy stages do). Faults
# are counted per tick over 20 ticks, before and after keep_freed_memory(), in a fresh process.
SCRIPT = """
import json, resource, sys
import numpy as np
from toolkit.heap import keep_freed_memory

def faults_per_tick():
    def tick():
        arrays = [np.ones(262144) for _ in range(8)]
        return sum(float(a[0]) for a in arrays)
    tick()
    f0 = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(20):
        tick()
    return (resource.getrusage(resource.RUSAGE_SELF).ru_minflt - f0) / 20

before = faults_per_tick()
kept = keep_freed_memory()
print(json.dumps({"kept": kept, "before": before, "after": faults_per_tick()}))
"""


def _run(env: dict[str, str]) -> dict:
    out = subprocess.run([sys.executable, "-c", SCRIPT], env=env, capture_output=True, text=True, check=True)
    return json.loads(out.stdout)


def _env(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("MALLOC_") and k != "HRT_KEEP_FREED_MEMORY"}
    return env | {"PYTHONPATH": os.pathsep.join(sys.path)} | extra


def test_freed_memory_is_reused_instead_of_faulted_in_again():
    got = _run(_env())
    if not got["kept"]:
        pytest.skip("not glibc: mallopt unavailable")
    # 8 x 2 MB per tick is 4,096 pages: glibc returns them at every free by default and faults them in again.
    assert got["before"] > 2000, got
    assert got["after"] < got["before"] / 10, got


@pytest.mark.parametrize("extra", [{"HRT_KEEP_FREED_MEMORY": "0"}, {"MALLOC_TRIM_THRESHOLD_": "131072"}])
def test_the_users_choice_stands(extra):
    got = _run(_env(**extra))
    assert got["kept"] is False
    assert got["after"] > got["before"] / 2, got  # nothing changed
