"""Figures of what each stage did: pure functions from frames (trace, metrics, features, removed) to plotly.

The live lab (`toolkit.lab`) copies these figures into FigureWidgets on every change; reports and tested
notebooks call the same functions and get static `go.Figure`s. Each figure has a frame function beside it
(`metric_deltas`, `score_spread`, `failure_cases`, `stage_lists`, `route_counts`, `dedup_counts`) so the
numbers can be checked, tabulated or tested without reading plotly traces.

    from toolkit import panels
    res = rescore(prep, cfg)
    lost = panels.failure_cases(res.trace, qrels, res.removed, k=10, per_query=res.per_query)  # who buried which relevant doc
    panels.failures_figure(lost, queries).show()
    panels.spread_figure(res.trace, res.per_query, depth=cfg.output.n, low_spread=config.low_spread(cfg)).show()

Stages are read from the trace's `stage` column: `retrieve:<list_id>` for every candidate list, then
`fuse`, `blend`, `priors` (when a prior is on), `final` (see docs/frames.md).
"""

from __future__ import annotations

import html
import math
import re
import warnings
from collections.abc import Iterable

import plotly.graph_objects as go
import polars as pl

from .compare import MIN_QUERIES, small_sample_note, ttest
from .config import FIELD_STAGES, LABELS
from .fusion import in_rank_order

LATER_STAGES = ("fuse", "blend", "final")
CULPRITS = ("fuse", "blend", "priors", "guard", "dedup", "threshold")
# Okabe-Ito: the colours every panel picks from, told apart under red-green colour blindness (user trial BC: the
# blend and final histograms, #ff7f0e over #2ca02c, differed by a colour difference of 5 under protanopia). Each
# stage also has a pattern (bars, histograms) and a dash (lines) of its own, so no pair is told by colour alone.
PALETTE = {"blue": "#0072B2", "orange": "#E69F00", "green": "#009E73", "purple": "#CC79A7", "sky": "#56B4E9",
           "vermillion": "#D55E00", "yellow": "#F0E442", "black": "#000000"}
_COLORS = {"fuse": PALETTE["blue"], "blend": PALETTE["orange"], "final": PALETTE["green"]}
_PATTERNS = {"fuse": "", "blend": "/", "final": "."}
PATTERNS = ("", "/", ".", "x", "\\", "+", "-")  # bar and histogram fills of series told apart (marker.pattern.shape)
_DASHES = ("solid", "dash", "dot", "dashdot", "longdash", "longdashdot")
_SYMBOLS = ("circle", "square", "diamond", "triangle-up", "x", "star")


def series_colour(i: int) -> str:
    """The i-th colour of a series of traces (yellow last: faint on white)."""
    order = [c for name, c in PALETTE.items() if name != "yellow"] + [PALETTE["yellow"]]
    return order[i % len(order)]


def stage_order(stages: Iterable[str]) -> list[str]:
    """Retrieval lists (sorted) first, then fuse, blend, priors (when on), final; unknown stages keep their
    place after."""
    s = list(dict.fromkeys(stages))
    lists = sorted(x for x in s if x.startswith("retrieve:"))
    later = [x for x in (*LATER_STAGES[:-1], "priors", LATER_STAGES[-1]) if x in s]
    rest = [x for x in s if x not in lists and x not in later]
    return lists + later + rest


def esc(v: object) -> str:
    """A data value (query id or text, document id, config or baseline name, ...) made safe to put into a
    title, annotation, hover or cell: plotly renders a subset of HTML there, and the lab puts titles and
    cells into `ipywidgets.HTML` (innerHTML). Only this module's own markup (`<br>`, `<sub>`, ...) may be
    left unescaped."""
    return html.escape("" if v is None else str(v))


# The markup this module writes into titles and annotations; anything else in them is shown as text.
_OWN_MARKUP = re.compile(r"&lt;(/?(?:br|sub|sup|b|i|small)|span style=(?:&#x27;|&quot;)font-size:\d+px(?:&#x27;|&quot;)|/span)&gt;")


def _markup(text: object) -> str:
    """A title or annotation for the lab's HTML: escaped entirely, then this module's own tags (`_OWN_MARKUP`)
    restored. Data were escaped (`esc`) where they were formatted in; a stray tag that was not is shown
    as text instead of reaching innerHTML."""
    t = html.escape(html.unescape("" if text is None else str(text)))
    return _OWN_MARKUP.sub(lambda m: "<" + html.unescape(m.group(1)) + ">", t)


def _out(spec: dict, raw: bool) -> go.Figure | dict:
    """Every figure is built as a plain dict; `raw=True` returns it as is (the live lab diffs these specs
    into its FigureWidgets, which skips a second round of plotly validation), else a validated Figure."""
    return spec if raw else go.Figure(spec)


def _empty(title: str, note: str, height: int = 260) -> dict:
    return {
        "data": [],
        "layout": {
            "title": {"text": title},
            "height": height,
            "xaxis": {"visible": False},
            "yaxis": {"visible": False},
            "annotations": [{"text": note, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.5, "y": 0.5}],
        },
    }


# About how many characters of plotly's 12 px table font fit across a table at a normal notebook width
# (a ~650 px figure); each column gets its share by its relative width.
TABLE_CHARS = 95
# ... and of a 17 px figure title: longer titles are broken into lines (plotly titles do not wrap).
TITLE_CHARS = 76


def _table(header: list[str], columns: list[list], widths: list[int], *, wrap: bool = True) -> dict:
    """A plotly table trace whose cell text fits its column: broken into lines ("<br>"), or with
    `wrap=False` cut to one line with "…" (for tables redrawn on every slider move: multi-line cells cost
    the browser's table layout ~300 ms per update on LoCoMo's failure table).

    Why by hand: plotly.js wraps cell text at spaces by measuring it in the page, but a FigureWidget drawn
    before its output area is laid out measures nothing and leaves every cell that contains a space blank
    (seen in JupyterLab 4 with plotly 7). So spaces inside a line are non-breaking, and the lines are cut
    here, to each column's share of `TABLE_CHARS`: long text wraps instead of being cut by the column
    (the browser test checks that no cell text overflows its column).
    """
    import textwrap

    def nb(v: object) -> object:
        # Cell text is data: escaped (plotly renders tags in cells); only the "<br>" this function or a
        # header puts in stays a line break.
        if not isinstance(v, str):
            return "" if v is None else v
        return "<br>".join(html.escape(part).replace(" ", "\u00a0") for part in v.split("<br>"))

    def fit(v: object, chars: int, wrap: bool = wrap) -> object:
        if not isinstance(v, str) or len(v) <= chars or "<br>" in v:
            return nb(v)
        if not wrap:
            return nb(v[: chars - 1].rstrip() + "…")
        return "<br>".join(nb(line) for line in textwrap.wrap(v, chars, break_on_hyphens=False))

    budget = [max(4, TABLE_CHARS * w // sum(widths)) for w in widths]
    return {
        "type": "table",
        "header": {"values": [fit(h, c, True) for h, c in zip(header, budget, strict=True)], "align": "left",
                   "fill": {"color": "#e8e8e8"}},
        "cells": {"values": [[fit(v, c) for v in col] for col, c in zip(columns, budget, strict=True)], "align": "left"},
        "columnwidth": widths,
    }


def table_html(spec: dict) -> str:
    """A table panel's spec (`_table` trace, title, caption; or `_empty`'s note) as an HTML table in a
    scrolling box, for the live lab: the browser lays out an HTML table of 60 rows in a few ms, where
    plotly's SVG table took ~2.5 ms a row on every slider move (~150 ms for the failure table).

    Cells keep one line, cut by CSS with an ellipsis and the whole cell text as a tooltip. Title and
    caption keep only this module's own markup (`_markup`: plotly's <br>/<sub>/<span> subset; data in
    them were escaped by the figure functions); cell text (escaped by `_table`) is escaped here again
    after unescaping, so nothing in a cell is markup.
    """
    layout = spec.get("layout", {})
    title = _markup((layout.get("title") or {}).get("text", ""))
    notes = [_markup(a.get("text", "")) for a in layout.get("annotations", [])]
    height = int(layout.get("height", 380))
    head = f"<div style='font-size:15px;margin:4px 0 6px 0;line-height:1.3'>{title}</div>" if title else ""
    tables = [t for t in spec.get("data", []) if t.get("type") == "table"]
    if not tables:
        body = "".join(f"<div style='color:#555;padding:12px 0'>{n}</div>" for n in notes)
        return f"<div class='hrt-table-panel'>{head}{body}</div>"
    t = tables[0]

    def text(v: object, br: str = " ") -> str:
        v = "" if v is None else html.unescape(str(v)).replace("\u00a0", " ")
        return html.escape(v).replace("&lt;br&gt;", br)

    header, values = t["header"]["values"], t["cells"]["values"]
    widths = t.get("columnwidth") or [1] * len(header)
    # Short columns (ranks, scores, ids) take their content's width; the long ones are capped at their
    # share of a ~700 px panel and cut with an ellipsis, the whole text in the tooltip.
    longest = [max([len(line) for line in text(h, "\n").split("\n")] + [len(text(v)) for v in col])
               for h, col in zip(header, values, strict=True)]
    cap = [None if n <= 16 else max(60, 700 * w // sum(widths)) for n, w in zip(longest, widths, strict=True)]
    nowrap = "white-space:nowrap;overflow:hidden;text-overflow:ellipsis"
    pad = "padding:3px 6px;border-bottom:1px solid #eee;text-align:left;vertical-align:top"

    def td(v: object, c: int | None) -> str:
        cell = text(v)
        inner = cell if c is None else f"<div style='max-width:{c}px;{nowrap}'>{cell}</div>"
        return f"<td title='{cell}' style='{pad};white-space:nowrap'>{inner}</td>"

    th = "".join(
        f"<th title='{text(h)}' style='{pad};white-space:nowrap;position:sticky;top:0;background:#e8e8e8;font-weight:600'>"
        f"{text(h, '<br>')}</th>"
        for h in header
    )
    fills = ((t["cells"].get("fill") or {}).get("color") or [None])[0]
    rows = []
    for i in range(len(values[0]) if values else 0):
        bg = f" style='background:{fills[i]}'" if isinstance(fills, list) and i < len(fills) else ""
        rows.append(f"<tr{bg}>{''.join(td(col[i], c) for col, c in zip(values, cap, strict=True))}</tr>")
    box = max(120, height - 90)
    caption = "".join(f"<div style='color:#555;font-size:11px;margin-top:4px'>{n}</div>" for n in notes)
    return (
        f"<div class='hrt-table-panel'>{head}<div style='max-height:{box}px;overflow:auto'>"
        f"<table class='hrt-table' style='border-collapse:collapse;font-size:12px;line-height:1.35'>"
        f"<thead><tr>{th}</tr></thead><tbody>{''.join(rows)}</tbody></table></div>{caption}</div>"
    )


def _two_panels(left: str, right: str) -> dict:
    """Layout of two side-by-side subplots (what make_subplots(1, 2) builds, without its cost per update)."""
    title = {"showarrow": False, "xref": "paper", "yref": "paper", "y": 1.0, "yanchor": "bottom", "xanchor": "center", "font": {"size": 14}}
    return {
        "xaxis": {"domain": [0.0, 0.45], "anchor": "y"},
        "yaxis": {"anchor": "x"},
        "xaxis2": {"domain": [0.55, 1.0], "anchor": "y2"},
        "yaxis2": {"anchor": "x2"},
        "annotations": [{**title, "text": left, "x": 0.225}, {**title, "text": right, "x": 0.775}],
    }


# ------------------------------------------------------------------ 1. metrics vs baseline
def metric_deltas(current: pl.DataFrame, baseline: pl.DataFrame | None) -> pl.DataFrame:
    """[measure, current, baseline, delta, wins, losses, p_value, queries] from per-query frames [qid, measure,
    value].

    Paired over the union of queries (a query missing on one side counts 0, as in `compare.compare`);
    p_value is the paired t-test (`compare.ttest`), the cheap test that can run on every slider change, and
    `queries` the number of pairs it saw. Without a baseline the baseline columns are null.
    """
    schema = {
        "measure": pl.Utf8,
        "current": pl.Float64,
        "baseline": pl.Float64,
        "delta": pl.Float64,
        "wins": pl.Int64,
        "losses": pl.Int64,
        "p_value": pl.Float64,
        "queries": pl.Int64,
    }
    order = current["measure"].unique(maintain_order=True).to_list()
    if baseline is None or not len(baseline):
        means = current.group_by("measure", maintain_order=True).agg(pl.col("value").mean().alias("current"))
        return means.select(
            "measure",
            "current",
            *(pl.lit(None, dt).alias(c) for c, dt in schema.items() if c not in ("measure", "current")),
        ).cast(schema)
    cur = current.select("qid", "measure", pl.col("value").alias("a"))
    base = baseline.filter(pl.col("measure").is_in(order)).select("qid", "measure", pl.col("value").alias("b"))
    both = cur.join(base, on=["qid", "measure"], how="full", coalesce=True).with_columns(
        pl.col("a").fill_null(0.0), pl.col("b").fill_null(0.0), (pl.col("a").fill_null(0.0) - pl.col("b").fill_null(0.0)).alias("d")
    )
    rows = []
    for m in order:  # one t-test per measure (3-5 of them), not per query
        d = both.filter(pl.col("measure") == m)
        diff = d["d"].to_numpy()
        rows.append(
            {
                "measure": m,
                "current": float(d["a"].mean()),
                "baseline": float(d["b"].mean()),
                "delta": float(diff.mean()) if diff.size else float("nan"),
                "wins": int((diff > 1e-12).sum()),
                "losses": int((diff < -1e-12).sum()),
                "p_value": _quiet_ttest(diff),
                "queries": int(diff.size),
            }
        )
    return pl.DataFrame(rows, schema=schema)


def _quiet_ttest(diff) -> float:
    """compare.ttest without scipy's precision warning for near-identical differences (p is then ~1 or NaN,
    which the panel shows as it is; the warning would repeat on every slider move)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return ttest(diff)


def p_text(p: float | None) -> str:
    """A p-value as shown: "n/a" where no test ran (one query), never "nan" (user trial AY)."""
    return "n/a" if p is None or math.isnan(p) else f"{p:.3g}"


def _stars(p: float | None) -> str:
    if p is None or (isinstance(p, float) and math.isnan(p)):
        return ""
    return "**" if p <= 0.01 else "*" if p <= 0.05 else ""


def metrics_figure(
    table: pl.DataFrame, *, current_name: str = "current", baseline_name: str = "baseline", raw: bool = False
) -> go.Figure:
    """Grouped bars, current vs baseline per measure; labels carry the delta and the t-test p-value
    (* p <= 0.05, ** p <= 0.01; no stars below `compare.MIN_QUERIES` queries, and the title says so).
    `table` is `metric_deltas` output."""
    if not len(table):
        return _out(_empty("Metrics", "no judgements (qrels): metrics need relevance labels"), raw)
    measures = table["measure"].to_list()
    cur = table["current"].to_list()
    has_base = table["baseline"].null_count() < len(table)
    few = None
    data = []
    if has_base:
        base = table["baseline"].to_list()
        data.append({"type": "bar", "x": measures, "y": base, "name": esc(baseline_name),
                     "marker": {"color": PALETTE["sky"], "pattern": {"shape": "/"}},
                     "text": [f"{v:.3f}" for v in base], "textposition": "outside"})
        # Too few queries: no stars (a t-test p on 4 queries is no evidence), and the hover says why.
        n = int(table["queries"].min() or 0) if "queries" in table.columns else MIN_QUERIES
        few = small_sample_note(n, test="ttest") if n < MIN_QUERIES else None
        labels = [
            f"{c:.3f}<br>Δ {d:+.3f}{'' if few else _stars(p)}"
            for c, d, p in zip(cur, table["delta"].to_list(), table["p_value"].to_list(), strict=True)
        ]
        hover = [
            f"{esc(m)}: {c:.4f} vs {b:.4f}<br>Δ {d:+.4f}, wins {w} / losses {lo}<br>paired t-test p = {p_text(p)}"
            + (f"<br>{few}" if few else "")
            for m, c, b, d, w, lo, p in table.select(
                "measure", "current", "baseline", "delta", "wins", "losses", pl.col("p_value").fill_null(float("nan"))
            ).iter_rows()
        ]
    else:
        base = []
        labels = [f"{c:.3f}" for c in cur]
        hover = [f"{esc(m)}: {c:.4f}" for m, c in zip(measures, cur, strict=True)]
    measures = [esc(m) for m in measures]
    if has_base:
        data[0]["x"] = measures
    data.append({"type": "bar", "x": measures, "y": cur, "name": esc(current_name), "marker": {"color": PALETTE["blue"]},
                 "text": labels, "textposition": "outside", "hovertext": hover, "hoverinfo": "text"})
    top = max([v for v in [*cur, *base] if v is not None and not math.isnan(v)] or [1.0])
    title = _title_lines(f"Metrics: {esc(current_name)} vs {esc(baseline_name)}") if has_base else "Metrics"
    if few:
        title += f"<br><sub>{n} queries: too few for significance stars</sub>"
    elif has_base and len(table) > 1:
        # Re-tested at every slider move, per measure: exploratory, not a result (user trial BE: with 3 null measures
        # and 20 settings tried, a star appeared in 94% of simulated sessions).
        title += "<br><sub>stars: paired t-test per measure, uncorrected, in-sample: exploratory</sub>"
    layout = {
        "title": {"text": title},
        "barmode": "group",
        "height": 320 + 18 * title.count("<br>"),
        "yaxis": {"range": [0, (min(1.0, top) or 1.0) * 1.3]},
        "legend": {"orientation": "h", "y": -0.15},
        "margin": {"t": 50 + 18 * title.count("<br>"), "b": 40},
    }
    return _out({"data": data, "layout": layout}, raw)


# ------------------------------------------------------------------ 2. score spread
def score_spread(trace: pl.DataFrame, *, depth: int | None = None, stages: Iterable[str] = LATER_STAGES) -> pl.DataFrame:
    """[qid, stage, n, top, last, spread] per query and stage: spread = top score minus the last score of
    the list (cut at `depth` when given), the threshold stage's definition of score spread; null with
    fewer than two results."""
    return _spread_of(_stage_rows(trace, stages), depth)


def folded_stages(trace: pl.DataFrame, stages: Iterable[str] = LATER_STAGES) -> dict[str, str]:
    """{stage: earlier stage it equals}: a later stage whose rows (qid, doc_id, rank, score) are exactly the
    previous drawn stage's, e.g. blend without a reranker is fuse again. Panels draw it once, with a note."""
    return _folded(_stage_rows(trace, stages))


def _stage_rows(trace: pl.DataFrame, stages: Iterable[str]) -> dict[str, pl.DataFrame]:
    """{stage: its rows [qid, doc_id, rank, score], by (qid, rank)} for the `stages` the trace holds, in
    that order. One pass over the trace (`partition_by`) instead of a filter per stage and panel; the
    pipeline's stages come in rank order already, so only other traces are sorted."""
    stages = list(stages)
    t = trace.filter(pl.col("stage").is_in(stages)).select("stage", "qid", "doc_id", "rank", "score")
    runs = t["stage"].rle().struct.unnest()
    if runs["value"].n_unique() == len(runs):  # each stage one block, as the pipeline writes them: slice, no copy
        ends = runs["len"].cum_sum().to_list()
        parts = {v: t.slice(e - n, n).drop("stage") for v, n, e in zip(runs["value"].to_list(), runs["len"].to_list(), ends, strict=True)}
    else:
        parts = {k[0]: v.drop("stage") for k, v in t.partition_by("stage", as_dict=True, maintain_order=True).items()}
    out = {}
    for st in stages:
        rows = parts.get(st)
        if rows is None or not len(rows):
            continue
        if not (rows["qid"].is_sorted() and in_rank_order(rows)):
            rows = rows.sort("qid", "rank")
        out[st] = rows
    return out


def _spread_of(parts: dict[str, pl.DataFrame], depth: int | None) -> pl.DataFrame:
    """`score_spread` of `_stage_rows` output. Rows are in (qid, rank) order, so each query's top and last
    scores are its first and last rows: read at the query boundaries, no group-by on string ids."""
    schema = {"qid": pl.Utf8, "stage": pl.Utf8, "n": pl.Int64, "top": pl.Float64, "last": pl.Float64}
    frames = []
    for st, rows in parts.items():
        if depth is not None:
            rows = rows.filter(pl.col("rank") <= depth)
        if not len(rows):
            continue
        import numpy as np  # panels load without numpy until a figure is drawn

        g = rows["qid"].rle_id().to_numpy()
        first = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
        last = np.r_[first[1:], len(g)] - 1
        score = rows["score"].to_numpy()
        frames.append(pl.DataFrame({"qid": rows["qid"].gather(first), "stage": [st] * len(first), "n": last - first + 1,
                                    "top": score[first], "last": score[last]}, schema=schema))
    out = pl.concat(frames) if frames else pl.DataFrame(schema=schema)
    return out.with_columns(pl.when(pl.col("n") >= 2).then(pl.col("top") - pl.col("last")).alias("spread")).sort("qid", "stage")


def _folded(parts: dict[str, pl.DataFrame]) -> dict[str, str]:
    """`folded_stages` of `_stage_rows` output."""
    out: dict[str, str] = {}
    prev: str | None = None
    for st, rows in parts.items():
        if prev is not None:
            # Stages keep different depths (fuse ranks every candidate, blend keeps the places that can reach
            # the output): compare the places both have, cheap columns first (`equals` stops at the first
            # column that differs, usually the scores).
            before = parts[prev]
            depth = min(rows["rank"].max(), before["rank"].max())
            cols = ["rank", "score", "doc_id", "qid"]
            if rows.filter(pl.col("rank") <= depth).select(cols).equals(before.filter(pl.col("rank") <= depth).select(cols)):
                out[st] = prev
                continue
        prev = st
    return out


def _fold_note(folded: dict[str, str], why: dict[str, str] | None = None) -> str:
    why = why or {}
    return "; ".join(f"{s}: {why[s] + ', ' if s in why else ''}same as {e}" for s, e in folded.items())


def data_range(values, *, include: Iterable[float] = (), whisker: float = 3.0) -> tuple[list[float], list[float]]:
    """([lo, hi] axis range, outliers): the range spans every value (nothing is clipped) with 5% padding;
    outliers are values beyond Q3 + whisker * IQR or below Q1 - whisker * IQR, to be marked on the panel."""
    import numpy as np

    v = np.asarray([x for x in values if x is not None and math.isfinite(x)], dtype=float)
    extra = [float(x) for x in include if x is not None and math.isfinite(x)]
    if not v.size and not extra:
        return [0.0, 1.0], []
    allv = np.concatenate([v, extra]) if extra else v
    lo, hi = float(allv.min()), float(allv.max())
    pad = (hi - lo) * 0.05 or max(abs(hi) * 0.05, 1e-6)
    outliers: list[float] = []
    if v.size >= 4:
        q1, q3 = np.percentile(v, [25, 75])
        iqr = q3 - q1
        if iqr > 0:
            outliers = [float(x) for x in v if x > q3 + whisker * iqr or x < q1 - whisker * iqr]
    return [lo - pad, hi + pad], outliers


def spread_figure(
    trace: pl.DataFrame,
    per_query: pl.DataFrame | None = None,
    *,
    k: int = 10,
    depth: int | None = None,
    low_spread: float | None = None,
    title_prefix: str = "",
    raw: bool = False,
) -> go.Figure:
    """Left: distribution of the top-k scores per stage (box from precomputed quartiles, so an update
    sends 5 numbers per stage, not every score). Right: histogram across queries of each stage's spread
    (`score_spread` at `depth`), with the low-differentiation line. The title counts the queries the
    threshold stage flagged low-differentiation (`per_query` from `rescore`).

    A stage identical to the one before it (`folded_stages`: blend without a reranker is fuse) is drawn
    once and named in a note. The histogram's x range and bins come from the data (all of it: outliers
    are marked with a triangle under the axis, not clipped)."""
    parts = _stage_rows(trace, LATER_STAGES)
    if not parts:
        return _out(_empty("Score spread", "no fused results"), raw)
    folded = _folded(parts)
    stages = [s for s in parts if s not in folded]
    score = pl.col("score")
    box = {
        st: parts[st].filter(pl.col("rank") <= k).select(
            score.min().alias("lowerfence"),
            score.quantile(0.25, "linear").alias("q1"),
            score.median().alias("median"),
            score.quantile(0.75, "linear").alias("q3"),
            score.max().alias("upperfence"),
        )
        for st in stages
    }
    spread = _spread_of({st: parts[st] for st in stages}, depth)
    values = spread["spread"].drop_nulls().to_list()
    xr, outliers = data_range(values, include=[0.0] + ([low_spread] if low_spread is not None else []))
    size = (xr[1] - xr[0]) / 40
    bins = {"start": xr[0], "end": xr[1], "size": size}
    data: list[dict] = []
    for s in stages:
        stats = {c: box[s][c].to_list() for c in ("lowerfence", "q1", "median", "q3", "upperfence")}
        data.append({"type": "box", "x": [s], "name": s, "marker": {"color": _COLORS[s]}, "showlegend": False,
                     "xaxis": "x", "yaxis": "y", **stats})
    for s in stages:
        data.append({"type": "histogram", "x": spread.filter(pl.col("stage") == s)["spread"].drop_nulls().to_numpy(),
                     "name": s, "marker": {"color": _COLORS[s], "pattern": {"shape": _PATTERNS[s]}}, "opacity": 0.6,
                     "xbins": bins, "autobinx": False,
                     "xaxis": "x2", "yaxis": "y2"})
    if outliers:
        data.append({"type": "scatter", "mode": "markers", "x": outliers, "y": [0] * len(outliers), "name": "outlier",
                     "marker": {"symbol": "triangle-up", "size": 9, "color": PALETTE["vermillion"]}, "xaxis": "x2", "yaxis": "y2",
                     "hovertemplate": "outlier spread %{x:.4g}<extra></extra>"})
    layout = _two_panels(f"scores in the top {k}", "top minus last score, per query")
    layout["xaxis2"].update({"range": xr, "title": {"text": "spread"}})
    layout["yaxis2"].update({"title": {"text": "queries"}, "rangemode": "tozero"})
    layout["yaxis"].update({"title": {"text": "score"}})
    shapes = []
    if low_spread is not None:
        shapes.append({"type": "line", "x0": low_spread, "x1": low_spread, "xref": "x2", "y0": 0, "y1": 1,
                       "yref": "y2 domain", "line": {"dash": "dash", "color": PALETTE["vermillion"]}})
        # Named in text at the line, as the trajectory's "top 10" is: a red dashed line alone said nothing to a
        # reader who cannot see red (user trial BC).
        layout["annotations"].append({"text": f"low spread < {low_spread:g}", "x": low_spread, "xref": "x2", "y": 1,
                                      "yref": "y2 domain", "xanchor": "left", "yanchor": "top", "showarrow": False,
                                      "font": {"color": PALETTE["vermillion"]}})
    n_q = spread["qid"].n_unique()
    flagged = int(per_query["low_differentiation"].fill_null(False).sum()) if per_query is not None and len(per_query) else 0
    title = f"{esc(title_prefix)}Score spread: {flagged} of {n_q} queries flagged low-differentiation"
    if low_spread is not None:
        title += f" (spread < {low_spread:g})"
    note = _fold_note(folded, {"blend": "no reranker"} if folded.get("blend") == "fuse" else None)
    if note:
        layout["annotations"].append({"text": note, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.0,
                                      "y": -0.28, "xanchor": "left", "font": {"size": 12, "color": "#555"}})
    title = _title_lines(title)
    layout.update({"title": {"text": title}, "barmode": "overlay", "height": 380 + 18 * title.count("<br>"),
                   "margin": {"t": 70 + 18 * title.count("<br>"), "b": 90}, "shapes": shapes,
                   "legend": {"orientation": "h", "x": 0.55, "y": -0.2}})
    return _out({"data": data, "layout": layout}, raw)


# ------------------------------------------------------------------ 3. failure cases
FAILURE_SCHEMA = {
    "qid": pl.Utf8,
    "doc_id": pl.Utf8,
    "rel": pl.Int64,
    "best_list": pl.Utf8,
    "list_rank": pl.Int64,
    "fuse_rank": pl.Int64,
    "blend_rank": pl.Int64,
    "final_rank": pl.Int64,
    "culprit": pl.Utf8,
    "detail": pl.Utf8,
}


def failure_cases(
    trace: pl.DataFrame,
    qrels: pl.DataFrame,
    removed: pl.DataFrame | None = None,
    *,
    k: int = 10,
    rel_threshold: int = 1,
    per_query: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """Relevant documents that were in the top k at some stage but are not in the final top k.

    One row per (query, document), FAILURE_SCHEMA. `culprit` is the stage right after the last one that
    had the document in its top k: "fuse" (some retrieval list had it in the top k, fusion did not),
    "blend" (fused top k, pushed out by the reranker blend), "priors" (blended top k, pushed out by the memory
    priors: the trace's `priors` stage), "guard" (one place down because the exact-token guard or the coverage rule moved a
    document up: `per_query`'s exact_token "kept" or covers_most_terms), "dedup" (removed as a near duplicate / by the source limit
    (see `removed`) or moved down by the source fill), or "threshold" (gone from the final list without a
    dedup record: its own score below min_score, or its probability below min_prob; the threshold judges a
    source-filled result by its own score, not its place-holding one). Without `per_query` the guard is not
    told apart from the source fill.
    """
    return _failures(*_relevant_rows(trace, qrels, rel_threshold), removed, k, per_query)


def _relevant_rows(trace: pl.DataFrame, qrels: pl.DataFrame, rel_threshold: int) -> tuple[pl.DataFrame, pl.DataFrame]:
    """([qid, doc_id, rel] of the judged-relevant pairs, the trace's rows of those pairs): the one pass over the
    whole trace that `failure_cases` and `retrieval_misses` share (`lost` makes it once for both)."""
    rel = relevant_pairs(qrels, rel_threshold)
    return rel, relevant_in(trace, rel)


def relevant_pairs(qrels: pl.DataFrame, rel_threshold: int = 1) -> pl.DataFrame:
    """[qid, doc_id, rel] of the judged-relevant pairs (the best judgement of each pair)."""
    return qrels.filter(pl.col("rel") >= rel_threshold).select(
        pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("rel").cast(pl.Int64)
    ).group_by("qid", "doc_id").agg(pl.col("rel").max())


def relevant_in(trace: pl.DataFrame, rel: pl.DataFrame) -> pl.DataFrame:
    """The rows of `trace` (or of one of its blocks, `Result.blocks`) of the pairs in `rel` (`relevant_pairs`), in order."""
    # Only the relevant documents' rows matter: a cheap is_in on doc ids first, then the exact pair join.
    return trace.filter(pl.col("doc_id").is_in(rel["doc_id"].unique().implode())).join(
        rel.select("qid", "doc_id"), on=["qid", "doc_id"], how="semi", maintain_order="left"
    )


def _failures(rel: pl.DataFrame, t: pl.DataFrame, removed: pl.DataFrame | None, k: int,
              per_query: pl.DataFrame | None) -> pl.DataFrame:
    is_list = pl.col("stage").str.starts_with("retrieve:")
    lists = (
        t.filter(is_list)
        .sort("rank", "stage")
        .group_by("qid", "doc_id")
        .agg(pl.col("stage").first().str.strip_prefix("retrieve:").alias("best_list"), pl.col("rank").first().alias("list_rank"))
    )
    stages = (*LATER_STAGES, "priors")
    later = t.filter(~is_list).group_by("qid", "doc_id").agg(
        pl.col("rank").filter(pl.col("stage") == s).min().alias(f"{s}_rank") for s in stages
    )
    out = rel.join(t.select("qid").unique(), on="qid", how="semi")
    # Queries whose guard moved a document up: the exact-token guard ("kept"), or the coverage or dense rule (their flags).
    kept = (per_query.filter(pl.col("exact_token") == "kept")["qid"].cast(pl.Utf8)
            if per_query is not None and "exact_token" in per_query.columns else pl.Series([], dtype=pl.Utf8))
    for col in ("covers_most_terms", "dense_top_kept"):
        if per_query is not None and col in per_query.columns:
            kept = pl.concat([kept, per_query.filter(pl.col(col))["qid"].cast(pl.Utf8)]).unique()
    out = out.with_columns(pl.col("qid").is_in(kept.implode()).alias("_guard"))
    out = out.join(lists, on=["qid", "doc_id"], how="left").join(later, on=["qid", "doc_id"], how="left")
    if removed is not None and len(removed):
        rm = removed.group_by(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8)).agg(
            pl.col("reason").first(), pl.col("kept_instead").first()
        )
    else:
        rm = pl.DataFrame(schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "reason": pl.Utf8, "kept_instead": pl.Utf8})
    out = out.join(rm, on=["qid", "doc_id"], how="left")

    def top(c: str) -> pl.Expr:
        return (pl.col(c) <= k).fill_null(False)

    def rank_txt(c: str) -> pl.Expr:
        return pl.col(c).cast(pl.Utf8).fill_null("-")

    # The place the document had just before dedup: after the priors when they ran, else blended.
    out = out.with_columns(pl.coalesce(pl.col("priors_rank"), pl.col("blend_rank")).alias("_pre_rank"))
    dedup_detail = (
        pl.when(pl.col("reason").is_not_null())
        .then(pl.lit("removed: ") + pl.col("reason") + pl.lit(" (kept ") + pl.col("kept_instead").fill_null("?") + pl.lit(")"))
        .otherwise(pl.lit("before dedup ") + rank_txt("_pre_rank") + pl.lit(" -> final ") + rank_txt("final_rank") + pl.lit(" (source fill)"))
    )
    culprit = (
        pl.when(top("final_rank"))
        .then(pl.lit(None, pl.Utf8))
        # (the priors ran when the document has a priors row: they keep every blended row)
        .when(top("blend_rank") & pl.col("priors_rank").is_not_null() & ~top("priors_rank"))
        .then(pl.lit("priors"))
        .when(top("_pre_rank"))
        .then(
            pl.when(pl.col("reason").is_not_null())
            .then(pl.lit("dedup"))
            .when(pl.col("final_rank").is_not_null())
            .then(pl.when(pl.col("_guard") & (pl.col("final_rank") == pl.col("_pre_rank") + 1)).then(pl.lit("guard")).otherwise(pl.lit("dedup")))
            .otherwise(pl.lit("threshold"))
        )
        .when(top("fuse_rank"))
        .then(pl.lit("blend"))
        .when(top("list_rank"))
        .then(pl.lit("fuse"))
    )
    detail = (
        pl.when(pl.col("culprit") == "fuse")
        .then(pl.lit("list ") + pl.col("best_list") + pl.lit(" rank ") + rank_txt("list_rank") + pl.lit(" -> fused ") + rank_txt("fuse_rank"))
        .when(pl.col("culprit") == "blend")
        .then(pl.lit("fused ") + rank_txt("fuse_rank") + pl.lit(" -> blended ") + rank_txt("blend_rank"))
        .when(pl.col("culprit") == "priors")
        .then(pl.lit("blended ") + rank_txt("blend_rank") + pl.lit(" -> after priors ") + rank_txt("priors_rank"))
        .when(pl.col("culprit") == "guard")
        .then(rank_txt("_pre_rank") + pl.lit(" -> final ") + rank_txt("final_rank") + pl.lit(" (the exact-token guard moved a document up)"))
        .when(pl.col("culprit") == "dedup")
        .then(dedup_detail)
        .otherwise(pl.lit("blended ") + rank_txt("_pre_rank") + pl.lit(" -> dropped below min_score"))
    )
    order = pl.DataFrame({"culprit": list(CULPRITS), "_o": list(range(len(CULPRITS)))})
    return (
        out.with_columns(culprit.alias("culprit"))
        .filter(pl.col("culprit").is_not_null())
        .with_columns(detail.alias("detail"))
        .join(order, on="culprit", how="left")
        .sort("_o", "qid", "doc_id")
        .select(list(FAILURE_SCHEMA))
        .cast(FAILURE_SCHEMA)
    )


def retrieval_misses(trace: pl.DataFrame, qrels: pl.DataFrame, *, k: int = 10, rel_threshold: int = 1,
                     qids: pl.Series | None = None) -> int:
    """Relevant documents of the traced queries (`qids`, else read off the trace) that were in no stage's top k
    (no list, fusion, blend, priors or final list had them there): what `failure_cases` leaves out (user trial
    T: on MS MARCO dev 1,863 of the 2,019 relevant documents missing from the final top 10, which the failure
    panel never mentioned). The two are disjoint."""
    return _misses(*_relevant_rows(trace, qrels, rel_threshold), k, trace["qid"].unique() if qids is None else qids)


def _misses(rel: pl.DataFrame, t: pl.DataFrame, k: int, qids: pl.Series) -> int:
    rel = rel.filter(pl.col("qid").is_in(qids.cast(pl.Utf8).implode()))
    seen = t.filter(pl.col("rank") <= k).select("qid", "doc_id").unique()
    return rel.join(seen, on=["qid", "doc_id"], how="anti").height


def lost(trace: pl.DataFrame, qrels: pl.DataFrame, removed: pl.DataFrame | None = None, *, k: int = 10,
         rel_threshold: int = 1, per_query: pl.DataFrame | None = None,
         relevant: tuple[pl.DataFrame, pl.DataFrame] | None = None) -> tuple[pl.DataFrame, int]:
    """(`failure_cases`, `retrieval_misses`) from one pass over the trace: what the lab draws on every change.
    `per_query` (the result's per-query frame) also names the traced queries. `relevant`: (`relevant_pairs` of
    `qrels`, `relevant_in` the trace) when the caller has them (the lab keeps each trace block's until it changes)."""
    rel, t = relevant if relevant is not None else _relevant_rows(trace, qrels, rel_threshold)
    qids = per_query["qid"] if per_query is not None else trace["qid"].unique()
    return _failures(rel, t, removed, k, per_query), _misses(rel, t, k, qids)


def failures_figure(
    failures: pl.DataFrame, queries: pl.DataFrame | None = None, *, max_rows: int = 60, raw: bool = False,
    misses: int | None = None, k: int = 10,
) -> go.Figure:
    """Table of lost relevant documents (`failure_cases`), with counts per culprit in the title, and how many
    more no list retrieved into its top k (`misses`, from `retrieval_misses`). Only the first `max_rows` are
    drawn: wrapped rows cost the browser's table layout on every slider move (300 wrapped rows added ~400 ms
    per update on LoCoMo), and the title counts them all."""
    counts = failures.group_by("culprit").len()
    by = dict(zip(counts["culprit"].to_list(), counts["len"].to_list(), strict=True))
    summary = ", ".join(f"{c} {by[c]}" for c in CULPRITS if c in by) or "none"
    title = f"Relevant documents lost from the top k: {summary} ({failures['qid'].n_unique()} queries)"
    if misses:
        title += f"; {misses} more never in a list's top {k} (retrieval misses)"
    if len(failures) > max_rows:
        title += f"; first {max_rows} shown"
    f = failures.head(max_rows)
    if queries is not None:
        f = f.join(queries.select(pl.col("qid").cast(pl.Utf8), pl.col("text")), on="qid", how="left", maintain_order="left")
    else:
        f = f.with_columns(pl.lit("").alias("text"))
    cols = ["qid", "text", "doc_id", "culprit", "list_rank", "fuse_rank", "blend_rank", "final_rank", "detail"]
    # Headers break onto two lines ("<br>") instead of being cut by a narrow column; cells are cut to one
    # line with "…" (the full query text: pick the query below, the drill-down's title shows it whole).
    f = f.with_columns(_excerpt(pl.col("text"), 200).alias("text"))
    table = _table(
        ["query", "text", "document", "culprit", "best<br>list rank", "fuse<br>rank", "blend<br>rank", "final<br>rank", "what happened"],
        [f[c].to_list() for c in cols],
        [55, 170, 95, 60, 55, 45, 48, 45, 220],
        wrap=False,
    )
    table["header"]["height"] = 36
    caption = "ranks: best list = best rank in any retrieval list; fuse / blend / final = rank after that stage (blank: absent)"
    layout = {"title": {"text": title}, "height": 380, "margin": {"t": 50, "b": 30, "l": 10, "r": 10},
              "annotations": [{"text": caption, "showarrow": False, "xref": "paper", "yref": "paper", "x": 0.0, "y": -0.06,
                               "xanchor": "left", "font": {"size": 11, "color": "#555"}}]}
    return _out({"data": [table], "layout": layout}, raw)


def rank_trajectory(trace: pl.DataFrame, qrels: pl.DataFrame, qid: str, *, rel_threshold: int = 1) -> pl.DataFrame:
    """[doc_id, stage, rank] of each relevant document of `qid` at every stage of its trace (null = absent)."""
    t = trace.filter(pl.col("qid") == qid)
    rel = qrels.filter((pl.col("qid") == qid) & (pl.col("rel") >= rel_threshold)).select(pl.col("doc_id").cast(pl.Utf8)).unique()
    stages = pl.DataFrame({"stage": stage_order(t["stage"].unique().to_list())}, schema={"stage": pl.Utf8})
    grid = rel.sort("doc_id").join(stages, how="cross")
    ranks = t.group_by("doc_id", "stage").agg(pl.col("rank").min())
    return grid.join(ranks, on=["doc_id", "stage"], how="left", maintain_order="left")


def trajectory_figure(trace: pl.DataFrame, qrels: pl.DataFrame, qid: str, *, k: int = 10, raw: bool = False,
                      rel_threshold: int = 1) -> go.Figure:
    """Rank of each relevant document of `qid` across stages (lists, fuse, blend, final), rank 1 on top, the
    top-k cut as a dotted line; a gap means the stage did not have the document."""
    traj = rank_trajectory(trace, qrels, qid, rel_threshold=rel_threshold)
    title = f"Relevant documents across stages: {esc(qid)}"
    if not len(traj):
        return _out(_empty(title, "no relevant document for this query"), raw)
    order = traj["stage"].unique(maintain_order=True).to_list()
    deepest = traj["rank"].max() or k  # reversed axis: rank 1 on top
    data = [  # each document its own colour, dash and marker: a legend of colours alone failed a colour-blind reader
        {"type": "scatter", "x": [esc(x) for x in d["stage"].to_list()], "y": d["rank"].to_list(), "mode": "lines+markers",
         "name": esc(doc), "connectgaps": False, "line": {"color": series_colour(i), "dash": _DASHES[i % len(_DASHES)]},
         "marker": {"symbol": _SYMBOLS[i % len(_SYMBOLS)]}}
        for i, ((doc,), d) in enumerate(traj.group_by("doc_id", maintain_order=True))
    ]
    layout = {
        "title": {"text": title},
        "yaxis": {"title": {"text": "rank"}, "range": [max(deepest, k) * 1.05 + 1, 0]},
        "xaxis": {"type": "category", "categoryorder": "array", "categoryarray": [esc(x) for x in order]},
        "shapes": [{"type": "line", "x0": 0, "x1": 1, "xref": "x domain", "y0": k + 0.5, "y1": k + 0.5, "yref": "y",
                    "line": {"dash": "dot", "color": PALETTE["vermillion"]}}],
        "annotations": [{"text": f"top {k}", "x": 1, "xref": "x domain", "xanchor": "right", "y": k + 0.5,
                         "yref": "y", "yanchor": "bottom", "showarrow": False, "font": {"color": PALETTE["vermillion"]}}],
        "height": 320,
        "margin": {"t": 50},
    }
    return _out({"data": data, "layout": layout}, raw)


def _excerpt(text: pl.Expr, chars: int) -> pl.Expr:
    t = text.str.replace_all(r"\s+", " ").str.strip_chars()
    return pl.when(t.str.len_chars() > chars).then(t.str.slice(0, chars - 1) + pl.lit("…")).otherwise(t)


def stage_lists(
    trace: pl.DataFrame,
    qid: str,
    *,
    k: int = 10,
    texts: pl.DataFrame | None = None,
    qrels: pl.DataFrame | None = None,
    excerpt_chars: int = 120,
    stages: Iterable[str] | None = None,
) -> pl.DataFrame:
    """[stage, rank, doc_id, score, rel, flags, excerpt]: the top k of each stage for one query, stages in
    pipeline order. `texts` [chunk_id, text] (e.g. `store.chunks(ids)`) gives the excerpts; `rel` is the
    judged grade (null when unjudged)."""
    t = trace.filter((pl.col("qid") == qid) & (pl.col("rank") <= k))
    if stages is not None:
        t = t.filter(pl.col("stage").is_in(list(stages)))
    order = stage_order(t["stage"].unique().to_list())
    t = t.join(pl.DataFrame({"stage": order, "_o": list(range(len(order)))}, schema={"stage": pl.Utf8, "_o": pl.Int64}), on="stage")
    if texts is not None and len(texts):
        t = t.join(texts.select(pl.col("chunk_id").cast(pl.Utf8), _excerpt(pl.col("text"), excerpt_chars).alias("excerpt")).unique("chunk_id"),
                   on="chunk_id", how="left")
    else:
        t = t.with_columns(pl.lit(None, pl.Utf8).alias("excerpt"))
    if qrels is not None and len(qrels):
        q = qrels.filter(pl.col("qid") == qid).group_by(pl.col("doc_id").cast(pl.Utf8)).agg(pl.col("rel").max().cast(pl.Int64))
        t = t.join(q, on="doc_id", how="left")
    else:
        t = t.with_columns(pl.lit(None, pl.Int64).alias("rel"))
    return t.sort("_o", "rank").select("stage", "rank", "doc_id", "score", "rel", "flags", "excerpt")


def drilldown_figure(lists: pl.DataFrame, qid: str = "", *, query_text: str = "", raw: bool = False) -> go.Figure:
    """`stage_lists` as a table; relevant rows shaded green. The title carries the full query text, wrapped."""
    title = f"Top results per stage: {esc(qid)}" + (f"<br><span style='font-size:12px'>{_wrap(query_text)}</span>" if query_text else "")
    if not len(lists):
        return _out(_empty(title, "no results"), raw)
    relevant = (lists["rel"].fill_null(0) > 0).to_list()
    fill = ["#d9f2d9" if r else "white" for r in relevant]
    cols = [
        lists["stage"].to_list(),
        lists["rank"].to_list(),
        lists["doc_id"].to_list(),
        [f"{s:.4f}" for s in lists["score"].to_list()],
        ["✓" if r else "" for r in relevant],
        [", ".join(f) if f else "" for f in lists["flags"].to_list()],
        [e or "" for e in lists["excerpt"].to_list()],
    ]
    table = _table(["stage", "rank", "document", "score", "rel", "flags", "excerpt"], cols, [70, 30, 90, 50, 25, 70, 330], wrap=False)
    table["cells"]["fill"] = {"color": [fill] * len(cols)}
    layout = {"title": {"text": title}, "height": 440, "margin": {"t": 50 + 16 * title.count("<br>"), "b": 10, "l": 10, "r": 10}}
    return _out({"data": [table], "layout": layout}, raw)


def _title_lines(text: str) -> str:
    """A figure title (our own text, may hold plotly's <br>/<span>) broken into lines of `TITLE_CHARS`."""
    import textwrap

    return "<br>".join(textwrap.wrap(text, TITLE_CHARS, break_on_hyphens=False)) or text


def _wrap(text: str, width: int = 110) -> str:
    """HTML-escaped text broken into lines of at most ~`width` characters (plotly titles do not wrap)."""
    import html
    import textwrap

    return "<br>".join(html.escape(line) for line in textwrap.wrap(text, width)) or ""


def inspector_hint(title: str = "Query inspector") -> dict:
    """What the inspector shows before a query is picked: a hint, not empty axes."""
    return _empty(title, "pick a dataset query or type one above: its lists appear here stage by stage", height=200)


def side_by_side(lists: pl.DataFrame) -> pl.DataFrame:
    """`stage_lists` pivoted: one row per rank, one column per stage, cells "doc_id ✓ (score)" (✓ = relevant)."""
    if not len(lists):
        return pl.DataFrame(schema={"rank": pl.Int64})
    order = lists["stage"].unique(maintain_order=True).to_list()
    cell = lists.with_columns(
        (
            pl.col("doc_id")
            + pl.when(pl.col("rel").fill_null(0) > 0).then(pl.lit(" ✓")).otherwise(pl.lit(""))
            + pl.lit(" (")
            + pl.col("score").round(4).cast(pl.Utf8)
            + pl.lit(")")
        ).alias("cell")
    )
    return cell.pivot(on="stage", index="rank", values="cell", aggregate_function="first").sort("rank").select("rank", *order)


def side_by_side_figure(lists: pl.DataFrame, title: str = "Stage lists", *, raw: bool = False) -> go.Figure:
    """Each stage's top k next to each other (query inspector); "✓" marks judged-relevant documents."""
    wide = side_by_side(lists)
    if wide.width <= 1:
        return _out(_empty(title, "no results"), raw)
    table = _table(
        [c.removeprefix("retrieve:") for c in wide.columns],
        [wide[c].to_list() for c in wide.columns],
        [25] + [100] * (wide.width - 1),
    )
    layout = {"title": {"text": title}, "height": 380, "margin": {"t": 50, "b": 10, "l": 10, "r": 10}}
    return _out({"data": [table], "layout": layout}, raw)


# ------------------------------------------------------------------ 4. routing and dedup
def route_counts(features: pl.DataFrame) -> pl.DataFrame:
    """[route, queries]: how many queries each route took (conversational / technical / default)."""
    if not len(features):
        return pl.DataFrame(schema={"route": pl.Utf8, "queries": pl.Int64})
    return features.group_by("route").agg(pl.len().cast(pl.Int64).alias("queries")).sort("queries", "route", descending=[True, False])


def dedup_counts(removed: pl.DataFrame) -> pl.DataFrame:
    """[reason, removed, queries]: what dedup removed, by reason, and in how many queries."""
    if not len(removed):
        return pl.DataFrame(schema={"reason": pl.Utf8, "removed": pl.Int64, "queries": pl.Int64})
    return (
        removed.group_by("reason")
        .agg(pl.len().cast(pl.Int64).alias("removed"), pl.col("qid").n_unique().cast(pl.Int64).alias("queries"))
        .sort("reason")
    )


def routing_dedup_figure(
    features: pl.DataFrame, removed: pl.DataFrame, *, routing_enabled: bool = True, raw: bool = False
) -> go.Figure:
    """Left: queries per route (routing acts on them only when enabled). Right: dedup removals by reason."""
    rc, dc = route_counts(features), dedup_counts(removed)
    left = "queries per route" + ("" if routing_enabled else " (routing off: informational)")
    data = [
        {"type": "bar", "x": rc["route"].to_list(), "y": rc["queries"].to_list(), "text": rc["queries"].to_list(),
         "name": "queries", "marker": {"color": PALETTE["purple"]}, "showlegend": False, "xaxis": "x", "yaxis": "y"},
        {"type": "bar", "x": dc["reason"].to_list() or ["nothing removed"], "y": dc["removed"].to_list() or [0],
         "text": [f"{r} in {q} queries" for r, q in zip(dc["removed"].to_list(), dc["queries"].to_list(), strict=True)] or ["0"],
         "name": "removed", "marker": {"color": PALETTE["vermillion"]}, "showlegend": False, "xaxis": "x2", "yaxis": "y2"},
    ]
    layout = _two_panels(left, "removed by dedup, by reason")
    layout["yaxis2"]["rangemode"] = "nonnegative"
    layout.update({"title": {"text": "Routing and dedup"}, "height": 300, "margin": {"t": 70}})
    return _out({"data": data, "layout": layout}, raw)


def reliability(scored: pl.DataFrame, qrels: pl.DataFrame, *, bins: int = 10, rel_threshold: int = 1) -> pl.DataFrame:
    """[bin, lo, hi, n, mean_prob, observed] of `score_prob` against judged relevance (calibration.py):
    what the reliability diagram draws. `scored` has qid, doc_id, score_prob (e.g. a learned `final`)."""
    from . import calibration

    s = scored.filter(pl.col("score_prob").is_not_null()) if "score_prob" in scored.columns else scored.clear()
    if not len(s):
        return calibration.reliability([], [], bins)
    return calibration.reliability(s["score_prob"].to_numpy(), calibration.labelled(s, qrels, rel_threshold), bins)


def reliability_figure(table: pl.DataFrame, *, title: str = "Calibration: predicted vs observed relevance", raw: bool = False) -> go.Figure:
    """Reliability diagram of `reliability` output: mean score_prob per bin against the share of judged
    relevant results in it (on the diagonal = calibrated), marker size by row count, ECE in the title."""
    if not len(table):
        return _out(_empty(title, "no score_prob: set fusion.method to learned"), raw)
    total = int(table["n"].sum())
    ece = float(((table["n"] / total) * (table["mean_prob"] - table["observed"]).abs()).sum())
    size = (6 + 24 * (table["n"] / table["n"].max()).sqrt()).to_list()
    spec = {
        "data": [
            {"type": "scatter", "x": [0, 1], "y": [0, 1], "mode": "lines", "name": "calibrated",
             "line": {"dash": "dot", "color": PALETTE["black"]}, "hoverinfo": "skip"},
            {"type": "scatter", "x": table["mean_prob"].to_list(), "y": table["observed"].to_list(), "mode": "lines+markers",
             "name": "score_prob", "marker": {"size": size, "color": _COLORS["fuse"]}, "customdata": table["n"].to_list(),
             "hovertemplate": "predicted %{x:.3f}<br>observed %{y:.3f}<br>%{customdata} results<extra></extra>"},
        ],
        "layout": {
            "title": {"text": f"{title} (ECE {ece:.3f}, {total} results)"}, "height": 320,
            "xaxis": {"title": {"text": "predicted P(relevant)"}, "range": [0, 1]},
            "yaxis": {"title": {"text": "observed share relevant"}, "range": [0, 1]},
            "showlegend": False,
        },
    }  # fmt: skip
    return _out(spec, raw)


# ------------------------------------------------------------------ 5. naming and readouts
def _show_value(v: object) -> str:
    if isinstance(v, str) and "/" in v:  # a model or file path: its name says which; the folders are noise
        return v.rstrip("/").rsplit("/", 1)[-1]
    if isinstance(v, float):
        return f"{v:.1f}" if v.is_integer() and abs(v) < 1e6 else f"{v:g}"
    if isinstance(v, list | tuple):
        return "[" + ", ".join(_show_value(x) for x in v) + "]"
    if isinstance(v, dict):
        return "{" + ", ".join(f"{k}: {_show_value(x)}" for k, x in v.items()) + "}"
    return str(v)


def config_changes(base, cfg) -> list[tuple[str, object]]:
    """[(field path, new value)] where `cfg` differs from `base` (both PipelineConfig); the labels
    (`config.LABELS`: name, description, ...) are not settings and are left out."""
    return [(k, y) for k, (_, y) in base.diff(cfg).items() if k not in LABELS]


def config_differences(base, cfg) -> list[tuple[str, object, object, str]]:
    """[(field path, value in `base`, value in `cfg`, both shown as "old -> new")] where they differ, labels left
    out (`PipelineConfig.diff`): `hrt config diff`."""
    return [(k, x, y, f"{_show_value(x)} -> {_show_value(y)}") for k, (x, y) in base.diff(cfg).items() if k not in LABELS]


def short_field(path: str, paths: Iterable[str]) -> str:
    """The shortest dotted tail of `path` that no other field of `paths` ends in: "dense.enabled" (the
    last part alone, "enabled", would read the same for the lexical and the dense list)."""
    parts = path.split(".")
    others = [p for p in paths if p != path]
    for n in range(1, len(parts)):
        tail = ".".join(parts[-n:])
        if not any(p == tail or p.endswith("." + tail) for p in others):
            return tail
    return path


def config_label(base, cfg, *, max_changes: int = 3) -> str:
    """The live config named by what changed from the one the lab started with: "qmd + lexical weight 3",
    "qmd + dense.enabled False" (each field by its shortest unambiguous tail), "qmd + 5 changes" past
    `max_changes`; just "qmd" when nothing changed."""
    changes = config_changes(base, cfg)
    name = base.name or "config"
    if not changes:
        return name
    if len(changes) > max_changes:
        return f"{name} + {len(changes)} changes"
    paths = list(FIELD_STAGES)  # every field path, declared once in `config`
    shown = [short_field(k, paths) for k, _ in changes]  # a dotted tail stays a path: "rerank.top_n", not "rerank.top n"
    return name + " + " + ", ".join(f"{k if '.' in k else k.replace('_', ' ')} {_show_value(v)}" for k, (_, v) in zip(shown, changes, strict=True))


def fusion_formula(f) -> str:
    """How the fusion settings enter the score (`FusionConfig`), for the lab's readout."""
    if f.method == "rrf":
        bonus = " + bonus(best rank)" if f.rank_bonus else ""
        return (f"score = Σ_lists w / ({f.rrf_k} + rank){bonus}; w = retriever weight (lexical {f.lexical_weight:g}, "
                f"dense {f.dense_weight:g}) × variant weight (original {f.original_weight:g}, expansion {f.expansion_weight:g})")
    if f.method == "convex":
        return (f"score = Σ_lists c × {f.normalization}(score), c = w × side / Σ(w × side) per query, so the c sum to 1 and the "
                f"score stays in [0, 1]{' (zscore is unbounded)' if f.normalization == 'zscore' else ''}; side = α = {f.alpha:g} "
                f"for dense lists, 1 − α for lexical; w = retriever weight × variant weight (original {f.original_weight:g}, "
                f"expansion {f.expansion_weight:g}): the weights set each list's share, they do not scale the score")
    return "score = learned model over the lists' features (weights and α are not used)"
