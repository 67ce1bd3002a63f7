"""Files the toolkit writes besides the store (configs, models, reports, exports, runs), written whole or not at all.

A reader never sees half a file: the text goes to a temporary file beside the target and is renamed over it
(`os.replace` is atomic on one file system). Two tutorials or workers writing the same model or config at
once each leave a whole file, and a crash mid-write leaves the previous one.
"""

from __future__ import annotations

import hashlib
import os
import stat
import threading
from pathlib import Path

from .errors import InputError


def write_text_atomic(path: str | Path, text: str, encoding: str = "utf-8") -> Path:
    """Write `text` to `path` whole or not at all. A symlink is followed: its target is replaced, the link kept.
    A path that is no regular file (`/dev/stdout`, a FIFO, `>(cmd)`, a device) is written to as it is: a rename
    would have put a file in its place (user trial BB: `--out /dev/full` run as root left a regular file there,
    and a FIFO's reader waited for ever)."""
    p = Path(path)
    if (fd := _descriptor(p)) is not None:
        # `--out /dev/stdout` of `hrt run ... >> all.trec`: written to the open descriptor, so an appended file is
        # appended to (reopening the path truncated it, and renaming replaced it: the review).
        with os.fdopen(os.dup(fd), "w", encoding=encoding) as fh:
            fh.write(text)
        return p
    try:
        mode = os.stat(p).st_mode  # follows symlinks
    except OSError:
        mode = None
    if mode is not None and not stat.S_ISREG(mode) and not stat.S_ISDIR(mode):
        with open(p, "w", encoding=encoding) as fh:
            fh.write(text)
        return p
    if p.is_symlink():
        target = Path(os.path.realpath(p))
        if target.is_symlink():
            raise InputError(f"{p}: a symlink loop (it resolves to {target}, a link again)")
        if not target.parent.is_dir():
            raise InputError(f"{p}: a symlink to {target}, whose folder does not exist")
        write_text_atomic(target, text, encoding)
        return p
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


def replace_durably(tmp: Path, dest: Path) -> None:
    """Rename the written file `tmp` over `dest` so that a crash leaves one of the two whole: its data synced
    first, the folder's entry after (a store's compaction and backup)."""
    with open(tmp, "rb") as f:
        os.fsync(f.fileno())
    os.replace(tmp, dest)
    dirfd = os.open(dest.parent, os.O_RDONLY)
    try:
        os.fsync(dirfd)
    finally:
        os.close(dirfd)


_STD_STREAMS = {"/dev/stdout": 1, "/dev/stderr": 2}


def _descriptor(p: Path) -> int | None:
    """The file descriptor a path names (`/dev/stdout`, `/dev/fd/3`, `/proc/self/fd/1`), else None."""
    name = str(p)
    if name in _STD_STREAMS:
        return _STD_STREAMS[name]
    for prefix in ("/dev/fd/", "/proc/self/fd/"):
        if name.startswith(prefix) and name[len(prefix):].isdigit():
            return int(name[len(prefix):])
    return None


def path_stamp(p: Path) -> str:
    """A short fingerprint of a file or folder (names, sizes, mtimes): a model retrained in place or a score file
    rewritten must not be served from a cache keyed by its path (the reranker's score cache, the stage cache)."""
    files = [p] if p.is_file() else sorted(f for f in p.rglob("*") if f.is_file())
    h = hashlib.sha1()
    for f in files:
        st = f.stat()
        h.update(f"{f.relative_to(p) if f != p else f.name}:{st.st_size}:{st.st_mtime_ns};".encode())
    return h.hexdigest()[:10]


UTF16_BOMS = (b"\xff\xfe", b"\xfe\xff")  # little- and big-endian: how Windows' "Unicode" (UTF-16) files begin


def utf16_text(data: bytes) -> bool:
    """Whether `data` starts as UTF-16 text does, with a byte order mark (Notepad's "Unicode")."""
    return data[:2] in UTF16_BOMS


JSON_LINES_SUFFIXES = (".jsonl", ".ndjson")  # a file written as JSON lines (else Parquet) where the suffix decides
