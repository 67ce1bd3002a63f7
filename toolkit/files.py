"""Files the toolkit writes besides the store (configs, models, reports, exports, runs), written whole or not at all.

A reader never sees half a file: the text goes to a temporary file beside the target and is renamed over it
(`os.replace` is atomic on one file system). Two tutorials or workers writing the same model or config at
once each leave a whole file, and a crash mid-write leaves the previous one.
"""

from __future__ import annotations

import os
import threading
from pathlib import Path


def write_text_atomic(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    # A name of this process and thread, opened like any new file (so it gets the usual permissions, which
    # `tempfile.mkstemp`'s 0600 would not).
    tmp = p.with_name(f".{p.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        with open(tmp, "w", encoding=encoding) as fh:
            fh.write(text)
        os.replace(tmp, p)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return p
