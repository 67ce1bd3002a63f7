"""Ctrl-C that always ends a command, even when a library swallowed it.

DuckDB imports pandas / pyarrow lazily on a connection's first statement and treats any exception raised
during that import, KeyboardInterrupt included, as "not installed": a Ctrl-C landing there vanished, and
`hrt ingest` went on to store everything and exit 0 (user trial K). The CLI installs `on_sigint`, which
records the signal before raising as Python's own handler does; `check()` at the points of no return (an
ingest's COMMIT, printing results) raises it again if it was lost. Signals are per process, so this state
is too; without `install()` (library use) `check()` never raises.

SIGTERM (an orchestrator stopping a job) takes the same path: a write in progress is rolled back, a model
export in progress removes its temporary folder, and the command ends with one line and 143 (128 + SIGTERM);
Python's default died at once and left a partial 43 MB export behind (user trial AG).
"""

from __future__ import annotations

import contextlib
import signal

_pending = False
_terminated = False


def _on_sigint(signum: int, frame: object) -> None:
    global _pending
    _pending = True
    raise KeyboardInterrupt


def _on_sigterm(signum: int, frame: object) -> None:
    global _terminated
    _terminated = True
    _on_sigint(signum, frame)


def install() -> None:
    """Record every SIGINT and SIGTERM from now on (the CLI, once per command; a notebook keeps its own handler;
    a SIGTERM handler someone else installed stays)."""
    global _pending, _terminated
    _pending = _terminated = False
    with contextlib.suppress(ValueError):  # not the main thread (the CLI called from a worker): Python's handler stays
        signal.signal(signal.SIGINT, _on_sigint)
        term = signal.getsignal(signal.SIGTERM)
        if term in (signal.SIG_DFL, _on_sigterm) or getattr(term, "hrt_early", False):  # `_entry`'s until now
            signal.signal(signal.SIGTERM, _on_sigterm)


def exit_code() -> int:
    """128 + the signal that ended the command: 143 for SIGTERM, 130 for Ctrl-C."""
    return 143 if _terminated else 130


def word() -> str:
    """What the command's last line calls the end: "terminated" (SIGTERM) or "interrupted" (Ctrl-C)."""
    return "terminated" if _terminated else "interrupted"


def check() -> None:
    """Raise KeyboardInterrupt when a SIGINT arrived since `install()`, even one a library swallowed."""
    if _pending:
        raise KeyboardInterrupt


def is_interrupt(e: BaseException) -> bool:
    """KeyboardInterrupt, or a library's form of it: DuckDB's "Query interrupted", or any RuntimeError raised
    while a SIGINT is pending (usearch's "Operation has been terminated" in an HNSW rebuild, user trial O)."""
    return isinstance(e, KeyboardInterrupt) or (
        isinstance(e, RuntimeError) and (str(e).startswith("Query interrupted") or _pending))
