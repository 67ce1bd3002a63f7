"""Ctrl-C that always ends a command, even when a library swallowed it.

DuckDB imports pandas / pyarrow lazily on a connection's first statement and treats any exception raised
during that import, KeyboardInterrupt included, as "not installed": a Ctrl-C landing there vanished, and
`hrt ingest` went on to store everything and exit 0 (user trial K). The CLI installs `on_sigint`, which
records the signal before raising as Python's own handler does; `check()` at the points of no return (an
ingest's COMMIT, printing results) raises it again if it was lost. Signals are per process, so this state
is too; without `install()` (library use) `check()` never raises.
"""

from __future__ import annotations

import contextlib
import signal

_pending = False


def _on_sigint(signum: int, frame: object) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


def install() -> None:
    """Record every SIGINT from now on (the CLI, once per command; a notebook keeps its own handler)."""
    global _pending
    _pending = False
    with contextlib.suppress(ValueError):  # not the main thread (the CLI called from a worker): Python's handler stays
        signal.signal(signal.SIGINT, _on_sigint)


def check() -> None:
    """Raise KeyboardInterrupt when a SIGINT arrived since `install()`, even one a library swallowed."""
    if _pending:
        raise KeyboardInterrupt


def is_interrupt(e: BaseException) -> bool:
    """KeyboardInterrupt, or a library's form of it: DuckDB's "Query interrupted", or any RuntimeError raised
    while a SIGINT is pending (usearch's "Operation has been terminated" in an HNSW rebuild, user trial O)."""
    return isinstance(e, KeyboardInterrupt) or (
        isinstance(e, RuntimeError) and (str(e).startswith("Query interrupted") or _pending))
