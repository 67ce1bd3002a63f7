"""Text alternatives of the lab's plotly panels: what each figure shows, in sentences a screen reader speaks.

The panels' SVGs had no name and no text; a screen reader read their tick labels run together (user trial BC).
The text is read from the figure's own spec (title, bars, boxes, histograms, lines), not recomputed from the
session: it costs microseconds per update and cannot disagree with the picture.
"""

from __future__ import annotations

import re
from html import unescape
from typing import Any

import numpy as np

_TAG = re.compile(r"</?[A-Za-z][^>]*>")
MAX_POINTS = 12  # a panel with more bars or lines is summarised by its first ones, and says how many there are


def plain(text: Any) -> str:
    """Markup-free text: plotly's `<br>`, `<sub>` and entities become plain words."""
    return " ".join(unescape(_TAG.sub(" ", str(text))).split())


def _number(v: Any) -> str:
    if v is None or (isinstance(v, float) and not np.isfinite(v)):
        return "absent"
    return f"{v:.4g}" if isinstance(v, float) else str(v)


def _bar(trace: dict) -> str:
    xs, ys = list(trace.get("x") or []), list(trace.get("y") or [])
    hover = trace.get("hovertext")
    labels = trace.get("text")
    points = []
    for i, (x, y) in enumerate(zip(xs[:MAX_POINTS], ys, strict=False)):
        if isinstance(hover, list | tuple) and i < len(hover):
            points.append(plain(hover[i]))
        elif isinstance(labels, list | tuple) and i < len(labels):
            points.append(f"{plain(x)} {plain(labels[i])}")
        else:
            points.append(f"{plain(x)} {_number(y)}")
    shown = min(len(xs), len(ys))
    more = f" (and {shown - MAX_POINTS} more)" if shown > MAX_POINTS else ""
    name = plain(trace.get("name") or "")
    return (f"{name}: " if name else "") + "; ".join(points) + more


def _line(trace: dict) -> str:
    xs, ys = list(trace.get("x") or []), list(trace.get("y") or [])
    steps = " then ".join(f"{plain(x)} {_number(y)}" for x, y in zip(xs[:MAX_POINTS], ys, strict=False))
    return f"{plain(trace.get('name') or 'line')}: {steps}"


def figure_text(spec: dict) -> str:
    """One paragraph: the title, then each trace in words (bars by their hover text, boxes by their median, a
    histogram by its count and median, lines point by point)."""
    layout, data = spec.get("layout") or {}, spec.get("data") or []
    title = layout.get("title")
    parts = [plain(title.get("text", "") if isinstance(title, dict) else title or "")]
    boxes = [t for t in data if t.get("type") == "box" and t.get("median")]
    if boxes:
        parts.append("median score in the top results: " + ", ".join(f"{plain(t.get('name'))} {_number(t['median'][0])}" for t in boxes))
    hists = [t for t in data if t.get("type") == "histogram"]
    for t in hists:
        x = np.asarray(t.get("x") if t.get("x") is not None else [], dtype=float)
        x = x[np.isfinite(x)]
        if len(x):
            parts.append(f"{plain(t.get('name'))}: {len(x)} values, median {np.median(x):.4g}, range {x.min():.4g} to {x.max():.4g}")
    parts += [_bar(t) for t in data if t.get("type") == "bar"]
    lines = [t for t in data if t.get("type") == "scatter" and "lines" in str(t.get("mode", ""))]
    parts += [_line(t) for t in lines[:MAX_POINTS]]
    if len(lines) > MAX_POINTS:
        parts.append(f"and {len(lines) - MAX_POINTS} more lines")
    notes = [plain(a.get("text", "")) for a in layout.get("annotations") or [] if a.get("xref") == "paper"]
    parts += [n for n in notes if n]
    if not data:
        parts += [plain(a.get("text", "")) for a in layout.get("annotations") or []]
    return ". ".join(p for p in parts if p) + "."
