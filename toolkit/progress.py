"""Progress bars, only when one is shown.

tqdm starts its monitor thread for every bar, a disabled one too: a library caller that asked for no progress
found a thread it never started (user trial AH). A bar that is not shown is `_NoBar`, and tqdm is not even
imported (about 40 ms of a cold `hrt search`).
"""

from __future__ import annotations

import os
import sys
from collections.abc import Iterable, Iterator
from typing import Any


class _NoBar:
    """What a hidden bar does: nothing, and iterates its iterable."""

    def __init__(self, iterable: Iterable[Any] | None) -> None:
        self._iterable = iterable

    def __iter__(self) -> Iterator[Any]:
        return iter(self._iterable if self._iterable is not None else ())

    def update(self, n: float = 1) -> None:
        pass

    def set_postfix(self, *args: Any, **kwargs: Any) -> None:
        pass

    def close(self) -> None:
        pass


def progress_bar(iterable: Iterable[Any] | None = None, *, show: bool, **kwargs: Any) -> Any:
    """A tqdm bar over `iterable` (or to `update` by hand) when `show`, else one that does nothing."""
    if not show:
        return _NoBar(iterable)
    from tqdm.auto import tqdm

    return tqdm(iterable, **kwargs)


def someone_watching() -> bool:
    """A person could see a bar: stderr is a terminal, or the code runs in a Jupyter kernel (tqdm.auto draws a
    widget there), and TQDM_DISABLE is not set. What `progress=None` ("a bar for long runs") asks first: called
    from a script whose stderr is a log, the rerank bar's lines landed in the log (user trial AZ)."""
    if os.environ.get("TQDM_DISABLE", "").lower() in ("1", "true", "yes"):
        return False
    return bool(getattr(sys.stderr, "isatty", lambda: False)()) or in_kernel()


def in_kernel() -> bool:
    """True inside a Jupyter kernel (JupyterLab, VS Code, Colab), where widgets can be drawn. Terminal IPython
    also has `get_ipython()`, but there `display(figure)` goes to plotly's browser renderer (a tab per panel per
    change, or a hang when `BROWSER` names no browser) and `display(widget)` prints the widget tree (user trial AX).
    IPython is not imported for the question: a process that has not imported it runs in no kernel."""
    ipython = sys.modules.get("IPython")
    return ipython is not None and getattr(ipython.get_ipython(), "kernel", None) is not None
