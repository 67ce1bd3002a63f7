"""Keep freed memory for reuse in a live session (glibc's malloc only).

Why: a slider tick re-scores every query with numpy temporaries of 1-3 MB each (LoCoMo: 1,535 queries,
153k kept rows). glibc serves blocks that size by mmap, or from a heap whose top it returns to the system
as soon as it is free, so every tick touches ~35 MB of fresh pages: ~8,500 page faults, a quarter of the
re-score's time (LoCoMo, `benchmarks/rescore.py --heap default|kept`: 76 -> 58-60 ms per change, 8,500 ->
~800 faults). Keeping up to 64 MB of freed heap for the next tick, and serving blocks up to 32 MB (glibc's
ceiling) from it, removes them; the cost is that much memory held after a peak instead of returned.

This is process-wide, so only the long-lived live loops ask for it (`Session`, hence the lab, and
`tune`), never a stage function. It does nothing off glibc, when the user set any MALLOC_*_ variable
(their choice stands), or when HRT_KEEP_FREED_MEMORY=0. numpy has no per-array allocator hook from
Python (NEP 49 handlers are C-level), hence mallopt through ctypes.
"""

from __future__ import annotations

import ctypes
import os
import sys

M_TRIM_THRESHOLD = -1  # <malloc.h>
M_MMAP_THRESHOLD = -3
TRIM_BYTES = 64 << 20
MMAP_BYTES = 32 << 20  # glibc refuses more (HEAP_MAX_SIZE / 2 on 64-bit)
_USER_VARS = ("MALLOC_TRIM_THRESHOLD_", "MALLOC_MMAP_THRESHOLD_", "MALLOC_TOP_PAD_", "MALLOC_MMAP_MAX_")


def keep_freed_memory() -> bool:
    """Set glibc's trim and mmap thresholds (see the module docstring); True when they were set.
    Idempotent: a second call sets the same values."""
    if not sys.platform.startswith("linux") or os.environ.get("HRT_KEEP_FREED_MEMORY", "1") == "0":
        return False
    if any(v in os.environ for v in _USER_VARS):
        return False
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:  # not glibc (musl, ...)
        return False
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is None:
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # The mmap threshold first: setting either one fixes both (glibc stops adapting them on its own).
    return bool(mallopt(M_MMAP_THRESHOLD, MMAP_BYTES)) and bool(mallopt(M_TRIM_THRESHOLD, TRIM_BYTES))
