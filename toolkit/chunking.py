"""Split long documents into overlapping chunks at natural break points.

Hand-written (about 40 lines) rather than taken from langchain's splitters: we need character offsets for
excerpts and a strict preference order (heading > blank line > line end > sentence end > space), and do
not want a framework dependency for it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

# Break points, best first. Each pattern matches the position *before* which a chunk may end.
_BREAKS = [
    re.compile(r"\n(?=#{1,6} )"),  # before a markdown heading
    re.compile(r"\n\s*\n"),  # blank line (paragraph end)
    re.compile(r"\n"),  # line end
    re.compile(r"(?<=[.!?])\s+"),  # sentence end
    re.compile(r"\s+"),  # any space
]


@dataclass(frozen=True)
class Chunk:
    ord: int
    start: int
    end: int
    text: str


def chunk_body(title: str, text: str) -> str:
    """What is embedded and indexed for a chunk: "title\ntext", or the text alone without a title."""
    return f"{title}\n{text}" if title else text


def chunk_text(text: str, size: int = 1000, overlap: int = 150) -> list[Chunk]:
    """Chunks of at most `size` characters, each starting about `overlap` characters before the last ended.

    A document no longer than `size` stays whole. A chunk ends at the best break point found in the last
    half of its window, so chunks rarely cut a sentence; after a heading or paragraph break the next chunk
    starts right there (a clean boundary needs no overlap).
    """
    if size <= 0 or overlap < 0 or overlap >= size:
        raise ValueError("chunking needs size > 0 and 0 <= overlap < size")
    if len(text) <= size:
        return [Chunk(0, 0, len(text), text)]
    chunks: list[Chunk] = []
    start = 0
    while start < len(text):
        end = min(start + size, len(text))
        clean = False  # ended at a heading or paragraph: the next chunk needs no overlap
        if end < len(text):
            found = _best_break(text, start + size // 2, end)
            if found:
                end, clean = found[0], found[1] <= 1
        piece = text[start:end].strip()
        if piece:
            chunks.append(Chunk(len(chunks), start, end, piece))
        if end >= len(text):
            break
        if clean:
            start = end
            continue
        nxt = max(end - overlap, start + 1)
        # Start the overlap at a word boundary.
        m = re.search(r"\s", text[nxt:end])
        start = nxt + m.end() if m and nxt > start else nxt
    return chunks


def _best_break(text: str, lo: int, hi: int) -> tuple[int, int] | None:
    """(position, level) of the last break of the best level in text[lo:hi]; level 0 = heading."""
    for level, pat in enumerate(_BREAKS):
        last = None
        for m in pat.finditer(text, lo, hi):
            last = m.start() + 1 if level == 0 else m.end()
        if last is not None and last > lo:
            return last, level
    return None
