"""Output for one query's results: compact (for an agent's context window), detailed, or JSON.

An agent pays for every character of memory it reads, so `compact` is the default: at most three lines
per result (rank with final and raw score, source and title; an excerpt; flags if any), five results
within 2,000 characters, excerpts shortened to fit. Notes say when the list should not be trusted (low
confidence, scores that barely differ). `detailed` shows full texts and all flags and falls back to compact
when it would exceed `max_chars`.
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterable, Mapping
from typing import Any

import polars as pl

from .errors import InputError

_WS = re.compile(r"\s+")


def _rows(results: pl.DataFrame | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    rows = results.to_dicts() if isinstance(results, pl.DataFrame) else [dict(r) for r in results]
    return sorted(rows, key=lambda r: (r.get("rank") is None, r.get("rank") or 0))


def _num(x: Any) -> str:
    if x is None or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return f"{x:.4f}" if abs(x) < 1000 else f"{x:.1f}"


def _flags(r: Mapping[str, Any]) -> list[str]:
    f = r.get("flags")
    return [str(x) for x in f] if f else []


def _body(r: Mapping[str, Any]) -> str:
    return str(r.get("excerpt") or r.get("text") or "")


def shorten(text: str, limit: int) -> str:
    """One line of at most `limit` characters, cut at a word boundary with an ellipsis."""
    t = _WS.sub(" ", text).strip()
    if len(t) <= limit:
        return t
    if limit <= 1:
        return "…"[:limit]
    cut = t[: limit - 1]
    space = cut.rfind(" ")
    if space >= limit // 2:
        cut = cut[:space]
    return cut.rstrip(" ,;:.") + "…"


def note_lines(notes: Mapping[str, Any] | None) -> list[str]:
    """Warnings for the reader: low confidence, low differentiation, and any `messages` given."""
    if not notes:
        return []
    out = []
    if notes.get("low_confidence"):
        out.append(
            "note: no result reached the minimum score; these are the closest matches (low confidence)"
        )
    if notes.get("low_differentiation"):
        spread = notes.get("spread")
        s = f" (spread {spread:.3g})" if isinstance(spread, int | float) else ""
        out.append(f"note: scores barely differ{s}; the order among these results is weak")
    out.extend(f"note: {m}" for m in notes.get("messages") or [])
    return out


def provider_lines(notes: Mapping[str, Any] | None) -> list[str]:
    """Provider fallbacks (`reranker unavailable (HTTP 500): retrieval order kept`), shown first: the list
    is then not what the config asked for, and the reader must know it (#16)."""
    return [f"warning: {m}" for m in (notes or {}).get("provider_notes") or []]


def provider_field(notes: Mapping[str, Any] | None) -> dict[str, Any]:
    """The JSON output's `providers` field: each provider's status for this query, and the warnings."""
    n = notes or {}
    return {k: n.get(k) for k in ("reranker", "expander", "embedder")} | {"warnings": list(n.get("provider_notes") or [])}


def _header(r: Mapping[str, Any], title_chars: int) -> str:
    parts = [f"{r.get('rank', '?')}. score {_num(r.get('score'))}"]
    if r.get("raw_score") is not None:
        parts[0] += f" (raw {_num(r.get('raw_score'))})"
    if r.get("score_prob") is not None:  # calibrated P(relevant), fusion.method learned
        parts[0] += f" · P(relevant) {r['score_prob']:.2f}"
    if r.get("source"):
        parts.append(shorten(str(r["source"]), max(title_chars, 12)))
    label = str(r.get("doc_id", ""))
    if r.get("title"):
        label = f"{shorten(str(r['title']), title_chars)} [{label}]"
    parts.append(label)
    return " · ".join(parts)


def _compact(rows: list[dict[str, Any]], notes: list[str], max_chars: int, excerpt_chars: int) -> str:
    if not rows:
        return "\n".join([*notes, "no results"])[:max_chars]
    for title_chars in (60, 30, 12):
        heads = [_header(r, title_chars) for r in rows]
        flags = [("   flags: " + ", ".join(_flags(r))) if _flags(r) else "" for r in rows]
        fixed = (
            sum(len(x) + 1 for x in notes)
            + sum(len(h) + 1 for h in heads)
            + sum(len(f) + 1 for f in flags if f)
        )
        room = (max_chars - fixed) // len(rows) - 4  # "   " indent + newline per excerpt line
        limit = min(excerpt_chars, room)
        if limit >= 40 or title_chars == 12:
            break
    lines = list(notes)
    for r, h, f in zip(rows, heads, flags, strict=True):
        lines.append(h)
        if limit > 0 and _body(r):
            lines.append("   " + shorten(_body(r), limit))
        if f:
            lines.append(f)
    out = "\n".join(lines)
    # Only pathological inputs (dozens of results, very long flags) get here: cut rather than overflow.
    return out if len(out) <= max_chars else out[: max_chars - 1] + "…"


def _detailed(rows: list[dict[str, Any]], notes: list[str]) -> str:
    blocks = list(notes)
    for r in rows:
        head = f"#{r.get('rank', '?')}  score {_num(r.get('score'))}  raw {_num(r.get('raw_score'))}"
        if _flags(r):
            head += "  [" + ", ".join(_flags(r)) + "]"
        meta = f"source: {r.get('source') or '-'}  doc: {r.get('doc_id', '-')}"
        if r.get("chunk_id") is not None:
            meta += f"  chunk: {r['chunk_id']}"
        lines = [head, meta]
        if r.get("title"):
            lines.append(f"title: {r['title']}")
        lines.append(str(r.get("text") or r.get("excerpt") or ""))
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks) if rows else "\n".join([*notes, "no results"])


def _json_safe(v: Any) -> Any:
    if isinstance(v, float) and not math.isfinite(v):
        return None
    if isinstance(v, Mapping):
        return {str(k): _json_safe(x) for k, x in v.items()}
    if isinstance(v, list | tuple):
        return [_json_safe(x) for x in v]
    if v is None or isinstance(v, str | int | float | bool):
        return v
    return str(v)


def render(
    results: pl.DataFrame | Iterable[Mapping[str, Any]],
    *,
    notes: Mapping[str, Any] | None = None,
    fmt: str = "compact",
    max_chars: int = 2000,
    excerpt_chars: int = 240,
) -> str:
    """Render one query's results. Rows carry rank, score (final), raw_score, source, doc_id, title,
    text and/or excerpt, flags; `notes` is the query's per-query row (low_confidence,
    low_differentiation, spread) plus optional `messages` (list of strings)."""
    rows = _rows(results)
    lines = provider_lines(notes) + note_lines(notes)
    if fmt == "json":
        doc = {"notes": _json_safe(dict(notes or {})), "providers": provider_field(notes), "messages": lines, "results": _json_safe(rows)}
        return json.dumps(doc, ensure_ascii=False, indent=2)
    if fmt == "detailed":
        out = _detailed(rows, lines)
        if len(out) <= max_chars:
            return out
        lines = [
            f"note: detailed output ({len(out):,} chars) exceeds max_chars={max_chars:,}; showing compact",
            *lines,
        ]
        return _compact(rows, lines, max_chars, excerpt_chars)
    if fmt == "compact":
        return _compact(rows, lines, max_chars, excerpt_chars)
    raise InputError(f"unknown output format {fmt!r}: use compact, detailed or json")
