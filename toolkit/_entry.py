"""The `hrt` command's first lines: Ctrl-C and SIGTERM end it as documented (130 `interrupted`, 143 `terminated`) from
the process's first moment, not only once a command runs.

The command's own handlers (`interrupts.install`) come after importing the CLI (click, polars: a few hundred ms), and
a signal landing before them gave a KeyboardInterrupt traceback through importlib frames, or, for SIGTERM, a death by
signal with no line at all (user trial BR: a Node service's request timeouts land in exactly that window). Only the
standard library here: nothing is imported before the handlers are in place.
"""

from __future__ import annotations

import os
import signal
import sys


def _early(signum: int, frame: object) -> None:
    """Before the command's handlers: nothing is written yet and nothing is open, so end at once."""
    try:
        sys.stderr.write("terminated\n" if signum == signal.SIGTERM else "interrupted\n")
        sys.stderr.flush()
    finally:
        os._exit(128 + signum)


_early.hrt_early = True  # type: ignore[attr-defined]  # `interrupts.install` replaces it


def main() -> None:
    signal.signal(signal.SIGINT, _early)
    if signal.getsignal(signal.SIGTERM) == signal.SIG_DFL:  # a handler the parent arranged stays
        signal.signal(signal.SIGTERM, _early)
    from .cli import main as cli

    cli()
