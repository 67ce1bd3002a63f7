"""What reaches a terminal: control characters shown as visible escapes, never sent.

Text from documents, file names, scopes and providers' messages may hold an ANSI/OSC sequence (one that
rewrites the screen or sets the window title) or a bidirectional override that reorders what the terminal
shows ("Trojan Source"). `hrt` writes every message through `VisibleStream`, and `render` builds its views
from the same classes of characters, so the two cannot drift apart.
"""

from __future__ import annotations

import re
from typing import Any, TextIO

# The bidirectional embeddings, overrides and isolates (U+202A-U+202E, U+2066-U+2069), which reorder what follows.
# The marks (ALM U+061C, LRM U+200E, RLM U+200F) stay, as joiners (ZWJ/ZWNJ) do: ordinary in Arabic and Hebrew text,
# they reorder no run, and shown as `\u200f` they were noise a screen reader read aloud (user trial AQ).
BIDI = "\u202a-\u202e\u2066-\u2069"
# DEL and the C1 controls (U+0080-U+009F: 0x9b is an 8-bit CSI), as a regex class's text.
C1 = "\x7f-\x9f"
# Every character that is never sent to a terminal as it is: the C0 controls (ESC, BEL, backspace, ...), C1, BIDI.
CONTROLS = f"\x00-\x1f{C1}{BIDI}"
# A stream keeps tab, newline and carriage return (a progress bar redraws its line with it). Cursor movement
# (a nested bar's ESC[A) is escaped too: it could overwrite lines already written.
_STREAM_CTRL = re.compile(f"(?![\t\n\r])[{CONTROLS}]")


def escape(m: re.Match[str]) -> str:
    """One control character as its visible escape: `\\x1b`, `\\u202e`."""
    c = ord(m.group())
    return f"\\x{c:02x}" if c < 0x100 else f"\\u{c:04x}"


def visible(text: str) -> str:
    """`text` with every control character but tab, newline and carriage return escaped."""
    return _STREAM_CTRL.sub(escape, text)


class VisibleStream:
    """A text stream that writes `visible(text)` to the stream it wraps (everything else is passed through):
    `hrt` wraps stderr, and stdout when it is a terminal, for the length of a command. Data written to a
    pipe or file (a TREC run, JSON) is never altered."""

    def __init__(self, stream: TextIO) -> None:
        self._stream = stream

    def write(self, text: str) -> int:
        self._stream.write(visible(text) if isinstance(text, str) else text)
        return len(text)

    def writelines(self, lines: Any) -> None:
        for line in lines:
            self.write(line)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._stream, name)


def display_width(text: str) -> int:
    """Columns `text` takes in a terminal: wide and full-width characters two, combining marks and joiners none, an
    emoji sequence (ZWJ family, flag, skin tone) one emoji's two (a table of run names in Japanese drifted right by
    one column per character, user trial AQ). wcwidth keeps the Unicode tables terminals follow; control characters,
    which it gives no width (-1), count one column each, as they did here before."""
    import unicodedata

    from wcwidth import wcswidth

    controls = sum(unicodedata.category(c) == "Cc" for c in text)
    return controls + max(0, wcswidth("".join(c for c in text if unicodedata.category(c) != "Cc") if controls else text))


def ljust(text: str, width: int) -> str:
    """`text` padded with spaces to `width` terminal columns (`display_width`)."""
    return text + " " * max(0, width - display_width(text))
