"""The notebook lab: widgets and plotly panels that draw a headless `toolkit.session.Session`.

The session owns the state and the logic (config, cached candidates, re-scoring, evaluation, failure cases,
inspector lists, export); the lab only turns widget changes into `session.update(...)` (debounced) and
redraws the panels in place from what the session holds. Every headless call goes the same path.

    from toolkit.lab import Lab
    lab = Lab.from_dataset(".hrt/demo.duckdb", "data/demo", split="dev", config="qmd")  # or ../shared/datasets/locomo
    lab                                   # renders controls + panels (JupyterLab 4 / classic notebook)
    lab.set("fusion.lexical_weight", 2.0); lab.metrics   # headless: same path as a slider, no debounce
    lab.pin_baseline(); lab.export("yaml", "tuned.yaml")
    lab.session                           # the state without widgets (`toolkit.session.Session`)

Headless API: `lab.set(path, value) -> bool` (False and `lab.message` when the value is invalid),
`lab.update({...})`, `lab.config`, `lab.result` (pipeline.Result), `lab.metrics` (dict measure -> mean),
`lab.deltas` (vs baseline, t-test p), `lab.failures`, `lab.figures` (name -> figure), `lab.last_update_ms`,
`lab.timings`, `lab.controls` (path -> widget; setting `.value` applies at once when the lab is idle and
otherwise queues a debounced update, `debounce_s` after the last change; `lab.flush()` applies it now), `lab.inspect(qid=... | text=...)`, `lab.pin_baseline()`, `lab.export(kind, path)`.

Live figures are plotly FigureWidgets, which need `anywidget` with plotly >= 6; without it (or with
`live_figures=False`) the lab falls back to static figures redrawn in Output widgets. Each FigureWidget's
state carries plotly's ~5 MB JS bundle (anywidget `_esm`): leave "save widget state" off in notebooks.
"""

from __future__ import annotations

import math
import threading
import time
import traceback
import warnings
from collections.abc import Callable, Mapping
from html import escape
from pathlib import Path
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import polars as pl

from . import panels
from .config import FIELD_HELP, PipelineConfig, inert_settings, low_spread
from .errors import ToolkitError
from .panel_text import figure_text
from .progress import in_kernel
from .session import DEFAULT_MEASURES, LATER, Session, bucket_added, bucket_removal_problem, bucket_removed
from .store import Store

__all__ = ["DEFAULT_MEASURES", "BucketEditor", "Debouncer", "Lab", "Session", "in_kernel"]


# ------------------------------------------------------------------ debounce
class Debouncer:
    """Run `fn` once, `delay_s` after the last `trigger()`; `flush()` runs a pending call at once.

    `leading=True`: a trigger that finds the debouncer idle (no call pending, none ended within `delay_s`)
    runs `fn` at once, in the caller's thread; triggers that follow within `delay_s` of its end coalesce
    into one trailing call. A single change (a click, a typed value) then waits for no timer, while a
    drag's burst of events, queued behind the running update, still costs one more update, not one each.

    Hand-written on `threading.Timer` because ipywidgets has no debounce helper and a timer thread
    works the same in JupyterLab and the classic notebook without event-loop tricks. `timer` and `clock`
    are injectable so tests can drive it without sleeping.
    """

    def __init__(self, fn: Callable[[], None], delay_s: float = 0.06, timer: Callable[..., Any] = threading.Timer,
                 *, leading: bool = False, clock: Callable[[], float] = time.monotonic) -> None:
        self.fn = fn
        self.delay_s = delay_s
        self.leading = leading
        self._timer_factory = timer
        self._clock = clock
        self._timer: Any = None
        self._busy_until = -math.inf  # when the last leading call ended
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        return self._timer is not None

    def trigger(self) -> None:
        with self._lock:
            now = self._clock()
            if self.leading and self._timer is None and now - self._busy_until >= self.delay_s:
                self._busy_until = math.inf  # running: triggers meanwhile wait for the trailing call
                leading = True
            else:
                leading = False
                if self._timer is not None:
                    self._timer.cancel()
                self._timer = self._timer_factory(self.delay_s, self._fire)
                self._timer.daemon = True
                self._timer.start()
        if leading:
            try:
                self.fn()
            finally:
                with self._lock:
                    self._busy_until = self._clock()

    def _fire(self) -> None:
        with self._lock:
            self._timer = None
        self.fn()

    def flush(self) -> bool:
        """Run the pending call now (True), or do nothing when none is pending (False)."""
        with self._lock:
            t, self._timer = self._timer, None
        if t is None:
            return False
        t.cancel()
        self.fn()
        return True

    def cancel(self) -> None:
        with self._lock:
            t, self._timer = self._timer, None
        if t is not None:
            t.cancel()


# ------------------------------------------------------------------ rerank bucket editor
class BucketEditor:
    """Rows of (last fused rank, retrieval weight) with add / remove buttons; `.value` is the bucket list
    as `rerank.buckets` takes it (the last bucket ends at infinity). Edits call `on_change(value)`."""

    def __init__(self, buckets: list, on_change: Callable[[list], None] | None = None) -> None:
        self.on_change = on_change
        self._rows: list[tuple[W.FloatText | None, W.FloatSlider]] = []
        self._quiet = False
        self.add_button = W.Button(description="add bucket", icon="plus", layout=W.Layout(width="130px"))
        self.add_button.on_click(lambda _b: self.add())
        self.rows_box = W.VBox()
        self.widget = W.VBox([W.HTML("<b>position buckets</b> (last fused rank, retrieval weight)"), self.rows_box, self.add_button])
        self._build([tuple(b) for b in buckets])

    @property
    def value(self) -> list[tuple[float, float]]:
        return [(math.inf if b is None else float(b.value), float(w.value)) for b, w in self._rows]

    @value.setter
    def value(self, buckets: list) -> None:
        """Rows for `buckets`, applied as an edit is (`on_change`): setting `.value` applies, as on every other
        control (user trial AX; the lab ignores it while it moves the controls to its config itself)."""
        self._quiet = True
        try:
            self._build([tuple(b) for b in buckets])
        finally:
            self._quiet = False
        self._changed({})

    @property
    def rows(self) -> list[tuple[W.FloatText | None, W.FloatSlider]]:
        """(bound input, weight slider) per bucket; the open-ended last bucket has no bound input."""
        return list(self._rows)

    @property
    def disabled(self) -> bool:
        return self.add_button.disabled

    @disabled.setter
    def disabled(self, v: bool) -> None:
        self.add_button.disabled = v
        for b, w in self._rows:
            w.disabled = v  # its number box follows (`number_box` links them)
            if b is not None:
                b.disabled = v

    def _build(self, buckets: list[tuple[float, float]]) -> None:
        rows, boxes = [], []
        for i, (bound, weight) in enumerate(buckets):
            last = i == len(buckets) - 1 and math.isinf(bound)
            b = None if last else W.FloatText(value=float(bound), step=1.0, description=f"bucket {i + 1} last rank",
                                              style={"description_width": "0px"}, layout=W.Layout(width="70px"))
            w = W.FloatSlider(value=float(weight), min=0.0, max=1.0, step=0.05, readout=False,
                              description=f"bucket {i + 1} retrieval weight", style={"description_width": "0px"},
                              layout=W.Layout(width="150px"))
            if b is not None:
                b.observe(self._changed, names="value")
            w.observe(self._changed, names="value")
            rm = W.Button(icon="trash", tooltip=f"remove bucket {i + 1}", layout=W.Layout(width="36px"), disabled=last)
            rm.on_click(lambda _b, i=i: self.remove(i))
            rows.append((b, w))
            bound_cell = b if b is not None else W.Label("∞", layout=W.Layout(width="70px"))
            boxes.append(W.HBox([bound_cell, w, number_box(w), rm]))
        self._rows = rows
        self.rows_box.children = boxes

    def _changed(self, _change: dict) -> None:
        if not self._quiet and self.on_change is not None:
            self.on_change(self.value)

    def add(self) -> None:
        """Insert a bucket before the open-ended last one (`session.bucket_added`)."""
        self.value = bucket_added(self.value)

    def remove(self, i: int) -> None:
        """Remove bucket `i` (the open-ended last one stays)."""
        v = self.value
        if not 0 <= i < len(v) or (i == len(v) - 1 and math.isinf(v[i][0])):
            return
        self.value = bucket_removed(v, i)


# ------------------------------------------------------------------ figures that update in place
def _figure_widgets_available() -> bool:
    try:
        go.FigureWidget()
    except ImportError:
        return False
    return True


def _same(a: Any, b: Any) -> bool:
    """Deep equality of figure specs (dicts, lists, numpy arrays), to send only what changed."""
    if a is b:
        return True
    if isinstance(a, np.ndarray) or isinstance(b, np.ndarray):
        return (
            isinstance(a, np.ndarray)
            and isinstance(b, np.ndarray)
            and a.shape == b.shape
            and a.dtype == b.dtype
            and bool(np.array_equal(a, b, equal_nan=a.dtype.kind == "f"))
        )
    if isinstance(a, dict) and isinstance(b, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same(x, y) for x, y in zip(a, b, strict=True))
    return type(a) is type(b) and a == b


def _changes(old: dict, new: dict) -> dict:
    """Top-level keys of `new` that differ from `old`; keys gone from `new` are reset (None)."""
    out = {k: v for k, v in new.items() if not _same(old.get(k), v)}
    out.update({k: None for k in old if k not in new})
    return out


class _Slot:
    """One panel. Live: a FigureWidget patched in place with only the traces / layout keys that changed
    (plotly validates every property it is handed, which dominated the update time when whole figures
    were re-sent). Static (no anywidget): a Figure redrawn in an Output widget. Table: an HTML widget
    (`panels.table_html`), rewritten only when its HTML changed."""

    def __init__(self, live: bool, table: bool = False) -> None:
        self.live = live and not table
        self.table = table
        self.spec: dict = {"data": [], "layout": {}}
        self._static: go.Figure | None = None
        if table:  # a table panel is drawn as HTML (`panels.table_html`); `figure` stays the plotly Figure
            self.widget = W.HTML()
        elif live:
            self._widget_figure = go.FigureWidget()
            # Two toolbar buttons, not eleven: each was a Tab stop, 44 of them among the lab's 15 controls (user trial BC).
            self._widget_figure._config = {"displaylogo": False, "modeBarButtons": [["toImage", "resetScale2d"]]}
            self.widget: W.Widget = self._widget_figure
        else:
            self.widget = W.Output()
        # What the figure shows, in words under it (`panel_text`): a screen reader cannot read a plotly SVG.
        self.text = W.HTML()
        self.view: W.Widget = self.widget if table else W.VBox([self.widget, self.text])

    @property
    def figure(self) -> go.Figure:
        if self.live:
            return self._widget_figure
        if self._static is None:
            self._static = go.Figure(self.spec)
        return self._static

    def set(self, spec: dict) -> None:
        old, self.spec = self.spec, spec
        if self.table:
            self._static = None
            html = panels.table_html(spec)
            if html != self.widget.value:
                self.widget.value = html
            return
        text = f"<p class='hrt-figure-text' style='font-size:small;color:#444'>{escape(figure_text(spec))}</p>"
        if text != self.text.value:
            self.text.value = text
        if not self.live:
            self._static = None
            if in_kernel():  # elsewhere display() prints the figure's repr, or opens a browser tab (user trial AX)
                from IPython.display import display

                self.widget.clear_output(wait=True)
                with self.widget:
                    display(self.figure)
            return
        fw = self._widget_figure
        same = len(old["data"]) == len(spec["data"]) and all(
            a.get("type") == b.get("type") for a, b in zip(old["data"], spec["data"], strict=True)
        )
        if not same:
            fw.data = ()
            if spec["data"]:
                fw.add_traces(spec["data"])
        trace_updates = (
            [(i, _changes(a, b)) for i, (a, b) in enumerate(zip(old["data"], spec["data"], strict=True))] if same else []
        )
        layout_updates = _changes(old["layout"], spec["layout"])
        with fw.batch_update():
            for i, upd in trace_updates:
                if upd:
                    fw.data[i].update(upd, overwrite=True)
            if layout_updates:
                fw.update_layout(layout_updates, overwrite=True)


# ------------------------------------------------------------------ the lab
def _control(kind: str, value: Any, **kw: Any) -> W.Widget:
    style = {"description_width": "150px"}
    layout = W.Layout(width="360px")
    if kind in ("float", "int"):  # no readout: `number_box` beside it is the typed, labelled value
        cls, cast = (W.FloatSlider, float) if kind == "float" else (W.IntSlider, int)
        hi = max(kw.pop("max"), cast(value))
        return cls(value=cast(value), max=hi, style=style, layout=W.Layout(width="295px", min_width="295px"), readout=False, **kw)
    if kind == "text":
        return W.FloatText(value=float(value), style=style, layout=layout, **kw)
    if kind == "check":
        return W.Checkbox(value=bool(value), indent=False, **kw)
    if kind == "choice":
        return W.Dropdown(value=value, style=style, layout=layout, **kw)
    if kind == "toggle":  # radio inputs: a screen reader says which is selected (toggle buttons showed it by colour)
        return W.RadioButtons(value=value, orientation="horizontal", style=style, layout=W.Layout(width="390px"), **kw)
    raise ValueError(kind)


def _settled(value: Any) -> Any:
    """`value` with its floats rounded to 9 decimals (a slider's float noise), lists and tuples kept as they are."""
    if isinstance(value, float):
        return round(value, 9)
    if isinstance(value, list | tuple):
        return type(value)(_settled(v) for v in value)
    return value


def _same_value(a: Any, b: Any) -> bool:
    """Equal as settings: a bucket list of tuples from the editor equals the config's list of lists."""
    if isinstance(a, list | tuple) and isinstance(b, list | tuple):
        return len(a) == len(b) and all(_same_value(x, y) for x, y in zip(a, b, strict=True))
    return a == b


def number_box(slider: W.FloatSlider | W.IntSlider, label: str | None = None) -> W.Widget:
    """A number field tied to `slider`: its typed value, with a `<label>` a screen reader speaks (a slider's
    handle has no accessible name in ipywidgets 8, and its readout is an unlabelled editable span; user trial
    BC). The label is the slider's own description, kept out of sight beside it."""
    cls = W.BoundedFloatText if isinstance(slider, W.FloatSlider) else W.BoundedIntText
    box = cls(min=slider.min, max=slider.max, value=slider.value, step=slider.step,
              description=label or slider.description, style={"description_width": "0px"},
              layout=W.Layout(width="85px", min_width="85px"))
    for trait in ("min", "max", "value", "disabled"):  # bounds first: a value outside the old bounds is not clipped
        W.link((slider, trait), (box, trait))
    return box


def _from_session(name: str, doc: str) -> property:
    return property(lambda self: getattr(self.session, name), doc=doc)


def priors_controls(cfg: PipelineConfig, fields: dict[str, str]) -> dict[str, W.Widget]:
    """Controls of the priors section: which typed metadata field each prior reads (from the store's
    `value_fields`, plus the config's own choice), the half-life, floor, use weight and how they combine."""
    p = cfg.priors

    def pick(kinds: tuple[str, ...], value: str | None, label: str) -> W.Dropdown:
        names = [f for f, k in fields.items() if k in kinds]
        if value is not None and value not in names:
            names.append(value)
        return _control("choice", value, options=[("(off)", None), *[(f, f) for f in names]], description=label)

    return {
        "priors.recency_field": pick(("date",), p.recency_field, "recency: date field"),
        "priors.recency_half_life_days": _control("text", p.recency_half_life_days, step=1.0, description="half-life (days)"),
        "priors.recency_floor": _control("float", p.recency_floor, min=0.0, max=1.0, step=0.05, description="recency floor"),
        "priors.priority_field": pick(("number", "text"), p.priority_field, "priority field"),
        "priors.use_field": pick(("number",), p.use_field, "use field (count)"),
        "priors.use_weight": _control("float", p.use_weight, min=0.0, max=2.0, step=0.05, description="use weight (log)"),
        "priors.combine": _control("toggle", p.combine, options=["multiply", "add"], description="combine"),
        "priors.add_weight": _control("float", p.add_weight, min=0.0, max=1.0, step=0.01, description="add weight"),
    }


class Lab:
    """Widgets and panels over a `Session` (the module's text follows, in `help`). The lab holds no state of its own
    beyond what is on screen (pending widget changes, the picked failure case, figure slots)."""

    config = _from_session("config", "The current config (`PipelineConfig`).")
    result = _from_session("result", "The current `pipeline.Result`.")
    metrics = _from_session("metrics", "Current mean of each measure (empty without qrels).")
    per_query = _from_session("per_query", "Per-query metric values of the current config.")
    deltas = _from_session("deltas", "Measure, current, baseline, delta, p-value.")
    failures = _from_session("failures", "Failure cases of the current config (`panels.failure_cases`).")
    inspected = _from_session("inspected", "Stage lists of the inspected query.")
    message = _from_session("message", "The status line: '' when all is well, else the last error or notice.")
    history = _from_session("history", "Recent status messages.")
    last_export = _from_session("last_export", "What the last export wrote.")
    baseline_name = _from_session("baseline_name", "Name of the baseline the deltas compare to.")
    store = _from_session("store", "The store.")
    queries = _from_session("queries", "The query set (with a scope column).")
    qrels = _from_session("qrels", "The judgements, restricted to the query set (or None).")
    measures = _from_session("measures", "Measure labels.")
    k = _from_session("k", "Depth of the per-query panels.")

    def __init__(
        self,
        store: Store,
        queries: Any,
        qrels: Any = None,
        config: str | Path | PipelineConfig | Mapping[str, Any] = "default",
        baseline: str | Path | PipelineConfig | None = "bm25-only",
        measures: tuple[str, ...] | list[str] = DEFAULT_MEASURES,
        k: int = 10,
        *,
        debounce_s: float = 0.06,
        debounce_leading: bool = True,
        live_figures: bool | None = None,
        rel_threshold: int = 1,
        source: tuple[str, str] | None = None,
        reranker: Any = None,
    ) -> None:
        self.last_update_ms: float | None = None
        self.updates = 0  # how many re-scorings the panels show (the status line numbers them)
        self.timings: dict[str, float] = {}
        self._owns_store = False
        self._pending: dict[str, Any] = {}
        self._syncing = False
        self._debouncer = Debouncer(self._apply_pending, debounce_s, leading=debounce_leading)
        live = _figure_widgets_available() if live_figures is None else live_figures
        # Tables are HTML in the page (plotly's SVG table cost ~2.5 ms a row on every slider move).
        self._slots = {name: _Slot(live, table=name in ("failures", "drilldown", "inspector"))
                       for name in ("metrics", "spread", "failures", "trajectory", "drilldown", "routing", "inspector")}
        self.live_figures = live
        self.session = Session(store, queries, qrels, config, baseline, measures, k, on_notice=self._show,
                               rel_threshold=rel_threshold, source=source, reranker=reranker)
        self._lock = self.session.lock
        self._qtext = dict(zip(self.queries["qid"].to_list(), self.queries["text"].to_list(), strict=True))
        self._build_widgets()
        self._redraw()

    # -------------------------------------------------------------- constructors
    @classmethod
    def from_dataset(
        cls,
        store_path: str | Path,
        dataset_dir: str | Path,
        split: str = "dev",
        *,
        ingest: bool = True,
        embedder: Any = None,
        **kw: Any,
    ) -> Lab:
        """Open (and, unless `ingest=False`, ingest: a no-op when unchanged) a store for a BEIR-layout
        dataset and start a lab on the judged queries of `split`; `kw` goes to `Lab`. The lab closes the
        store in `close()`."""
        from .loaders import Dataset, load_corpus

        ds = Dataset.open(dataset_dir)
        _warn_if_test(ds, split)
        store = Store(store_path, embedder=embedder)
        try:
            if ingest:
                store.ingest(load_corpus(ds.root))
            lab = cls(store, ds.queries(split), ds.qrels(split), source=(ds.name, split), **kw)
        except BaseException:
            store.close()
            raise
        lab._owns_store = True
        return lab

    def close(self) -> None:
        """Stop pending updates and close the store if the lab opened it (`Lab.from_dataset`)."""
        self._debouncer.cancel()
        if self._owns_store:
            self.store.close()

    # -------------------------------------------------------------- headless API (the session's, redrawn)
    @property
    def figures(self) -> dict[str, go.Figure | go.FigureWidget]:
        """Panel name -> figure: FigureWidgets patched in place (live), else static Figures (the table panels,
        drawn as HTML in the lab, are static Figures of the same spec)."""
        return {name: slot.figure for name, slot in self._slots.items()}

    def set(self, path: str, value: Any) -> bool:
        """Change one knob now (no debounce): a config path (`"fusion.rrf_k"`) or a control key
        (`"fusion.rank_bonus@1"`). Returns False, with the reason in `lab.message`, when invalid."""
        return self.update({path: value})

    def update(self, updates: dict[str, Any]) -> bool:
        """Apply several changes at once (one re-score); see `set`."""
        with self._lock:
            for key in updates:
                self._pending.pop(key, None)
            ok = self._apply(dict(updates))
            if ok:
                self._sync_controls()
            return ok

    def flush(self) -> None:
        """Apply a pending (debounced) widget change now, and wait for one in flight."""
        self._debouncer.flush()
        with self._lock:
            if self._pending:
                self._apply_pending()

    def pin_baseline(self) -> None:
        """Make the current config (and its per-query metrics) the baseline the metrics panel compares to."""
        with self._lock:
            self.session.pin_baseline()
            self._draw_metrics()

    def refresh(self) -> bool:
        """`Session.refresh` (after an ingest, or to ask a fallen-back provider again now), redrawn."""
        with self._lock:
            ok = self.session.refresh()
            if ok:
                self._redraw()
            return ok

    def add_bucket(self) -> bool:
        """Add a blend bucket (as the widget's button does) and re-score; False if the result is invalid."""
        return self.set("rerank.buckets", bucket_added(self.config.rerank.buckets))

    def remove_bucket(self, i: int = -2) -> bool:
        """Remove blend bucket `i` (default: the last bounded one) and re-score; False with the reason in the
        status line when it cannot be removed (`session.bucket_removal_problem`)."""
        b = self.config.rerank.buckets
        if (problem := bucket_removal_problem(b, i)) is not None:
            self.session.notice(problem, error=True)
            return False
        return self.set("rerank.buckets", bucket_removed(b, i % len(b)))

    def inspect(self, qid: str | None = None, text: str | None = None, scope: str | None = None) -> pl.DataFrame:
        """`Session.inspect`, drawn in the inspector panel."""
        with self._lock:
            result = self.session.result
            lists = self.session.inspect(qid=qid, text=text, scope=scope)
            if self.session.result is not result:  # the store had changed: the session ran again, so do all panels
                self._redraw()
            if self.session.inspected_qid is not None and self._inspect_pick.value != qid:
                self._syncing = True
                try:
                    self._inspect_pick.value = qid
                finally:
                    self._syncing = False
            self._draw_inspector()
            return lists

    def export(self, kind: str, path: str | Path) -> str:
        """`Session.export`; the message is shown under the export button."""
        msg = self.session.export(kind, path)
        self._export_msg.value = escape(msg)
        return msg

    # -------------------------------------------------------------- display
    def show(self) -> None:
        """Display the controls and panels (what a notebook does with `lab` as a cell's last line). Outside a
        Jupyter kernel (a script, terminal IPython) widgets cannot be drawn: it prints the text summary instead."""
        if not in_kernel():
            print(repr(self))
            return
        from IPython.display import display

        display(self.widget)

    def __repr__(self) -> str:
        return (f"{self.session!r}\n(the lab's controls and panels need a Jupyter front-end with ipywidgets; without "
                "one: lab.set(path, value), lab.metrics, lab.deltas, lab.failures, lab.figures[name].write_html(path))")

    def _repr_mimebundle_(self, **kw: Any) -> Any:
        """The widget view, with a text and an HTML summary beside it for front-ends and exports that draw no
        widgets (nbconvert to HTML or Markdown, `jupyter run`, a widget-less notebook): they showed nothing, or
        the widget tree's repr (user trial AX)."""
        bundle = self.widget._repr_mimebundle_(**kw) or {}
        data = bundle[0] if isinstance(bundle, tuple) else bundle
        data["text/plain"] = repr(self)
        data["text/html"] = self.session._repr_html_() + (
            "<p><i>The lab's controls and panels need a Jupyter front-end with ipywidgets.</i></p>")
        return bundle

    # -------------------------------------------------------------- the update path
    def _on_change(self, key: str, value: Any) -> None:
        if self._syncing:
            return
        # A slider snapped to its step sends 1.0000000000000002 for 1.0: that re-scored every query and named the
        # config "+ technical lexical boost 1" with nothing moved (user trial BC); a bucket's weight too (the review).
        value = _settled(value)
        with self._lock:
            if key not in self._pending and _same_value(value, self.session.value_for(key)):
                return  # nothing moved: no re-scoring, no "updated" line
            self._pending[key] = value
        self._debouncer.trigger()

    def _apply_pending(self) -> None:
        with self._lock:
            updates, self._pending = self._pending, {}
            if not updates:
                return
            try:
                self._apply(updates)
            except Exception as e:  # runs in a timer thread: show the failure instead of losing it
                self.session.notice(f"update failed: {type(e).__name__}: {e}", error=True)
                traceback.print_exc()
            else:
                self._sync_disabled()

    def _apply(self, updates: dict[str, Any]) -> bool:
        ok = self.session.update(updates)
        if ok:
            self._redraw()
        else:  # refused (the status line says why): the widgets show the config again, not the value it refused
            self._sync_controls()
        return ok

    # -------------------------------------------------------------- panels
    def _redraw(self) -> None:
        s = self.session
        t = time.perf_counter()
        self._draw_metrics()
        cfg, res = s.config, s.result
        # (the later stages' blocks: the lists' rows, half the trace, are not scanned for the stages it has not)
        later = pl.concat([res.blocks[b] for b in panels.LATER_STAGES if b in res.blocks]) if res.blocks else res.trace
        self._slots["spread"].set(panels.spread_figure(later, res.per_query, k=s.k, depth=cfg.output.n, low_spread=low_spread(cfg), title_prefix=f"{s.label}: ", raw=True))
        self._slots["failures"].set(panels.failures_figure(s.failures, s.queries, raw=True, misses=s.retrieval_misses, k=s.k))
        self._slots["routing"].set(panels.routing_dedup_figure(s.prepared.features, res.removed, routing_enabled=cfg.routing.enabled, raw=True))
        self._refresh_failure_pick()
        self._refresh_query_panels()
        self._draw_inspector()
        figures_ms = (time.perf_counter() - t) * 1000
        self.timings = {**s.timings, "figures": figures_ms}
        self.last_update_ms = (s.last_update_ms or 0.0) + figures_ms
        self.updates += 1
        self._show(s.message)

    def _draw_metrics(self) -> None:
        s = self.session
        if s.deltas is not None:
            self._slots["metrics"].set(panels.metrics_figure(s.deltas, current_name=s.label, baseline_name=s.baseline_name or "baseline", raw=True))
        else:
            self._slots["metrics"].set(panels.metrics_figure(pl.DataFrame(schema={"measure": pl.Utf8}), raw=True))

    def _refresh_failure_pick(self) -> None:
        text = self._qtext
        options = [(f"{q} [{c}] {text.get(q, '')[:70]}", q) for q, c in self.session.failure_qids()]
        if not options:
            options = [(f"{q}  {text.get(q, '')[:70]}", q) for q in self.queries["qid"].head(200).to_list()]
        current = self._failure_pick.value
        self._syncing = True
        try:
            self._failure_pick.options = options
            values = [v for _, v in options]
            self._failure_pick.value = current if current in values else (values[0] if values else None)
        finally:
            self._syncing = False

    def _pick_failure(self) -> None:
        with self._lock:  # a debounced update may be running in the timer thread
            self._refresh_query_panels()

    def _refresh_query_panels(self) -> None:
        qid = self._failure_pick.value
        if qid is None:
            return
        s = self.session
        tq = s.query_trace(qid)  # once, then the panels work on one query's rows
        if s.qrels is not None:
            self._slots["trajectory"].set(panels.trajectory_figure(tq, s.qrels, qid, k=s.k, raw=True, rel_threshold=s.rel_threshold))
        self._slots["drilldown"].set(panels.drilldown_figure(s.stage_lists(qid, tq, stages=LATER), qid, query_text=self._qtext.get(qid, ""), raw=True))

    def _draw_inspector(self) -> None:
        s = self.session
        if s.inspected is not None:
            self._slots["inspector"].set(panels.side_by_side_figure(s.inspected, s.inspected_title, raw=True))
        else:
            self._slots["inspector"].set(panels.inspector_hint())

    # -------------------------------------------------------------- widgets
    def _show(self, msg: str, error: bool = False) -> None:
        """Draw the status line (the session's `on_notice`), and the timing line unless the update failed: a standing
        note (the learned model's in-sample warning on its own training queries) left it at the first update's."""
        if not hasattr(self, "_status"):
            return
        if error:
            self._status.value = f"<span style='color:#c00'>{escape(msg)}</span>"
        elif msg:
            self._status.value = f"<span style='color:#666'>{escape(msg)}</span>"
        else:
            self._status.value = ""
        if self.last_update_ms is not None and not error:
            t = self.timings
            prep = f"candidates recomputed {t['prepare']:.0f}, " if t.get("prepare", 0) > 0 else ""
            self._timing.value = (
                f"#{self.updates}: updated in {self.last_update_ms:.0f} ms ({prep}rescore {t.get('rescore', 0):.0f}, metrics {t.get('metrics', 0):.0f}, "
                f"failure cases {t.get('failures', 0):.0f}, panels {t.get('figures', 0):.0f}) over {self.queries.height} queries"
            )

    def _build_widgets(self) -> None:
        c = self.config
        f = c.fusion
        bands = dict(f.rank_bonus)
        ctl: dict[str, Any] = {
            "fusion.method": _control("toggle", f.method, options=["rrf", "convex", "learned"], description="fusion"),
            "fusion.rrf_k": _control("int", f.rrf_k, min=1, max=200, description="RRF k"),
            "fusion.lexical_weight": _control("float", f.lexical_weight, min=0.0, max=5.0, step=0.05, description="lexical weight"),
            "fusion.dense_weight": _control("float", f.dense_weight, min=0.0, max=5.0, step=0.05, description="dense weight"),
            "fusion.original_weight": _control("float", f.original_weight, min=0.0, max=5.0, step=0.05, description="original-query weight"),
            "fusion.expansion_weight": _control("float", f.expansion_weight, min=0.0, max=5.0, step=0.05, description="expansion weight"),
            "fusion.rank_bonus@1": _control("float", bands.get(1, 0.0), min=0.0, max=0.2, step=0.005, description="rank-1 bonus"),
            "fusion.rank_bonus@3": _control("float", bands.get(3, 0.0), min=0.0, max=0.2, step=0.005, description="ranks 2-3 bonus"),
            "fusion.alpha": _control("float", f.alpha, min=0.0, max=1.0, step=0.05, description="convex alpha (dense)"),
            "fusion.normalization": _control("choice", f.normalization, options=["minmax", "zscore", "rank", "fixed"], description="normalisation"),
            "rerank.blend": _control("toggle", c.rerank.blend, options=["position", "replace", "none"], description="blend"),
            "rerank.top_n": _control("int", c.rerank.top_n, min=1, max=200, description="rerank top_n"),
            "dedup.source_enabled": _control("check", c.dedup.source_enabled, description="one result per source (source dedup)"),
            "dedup.max_per_source": _control("int", c.dedup.max_per_source, min=1, max=10, description="max per source"),
            "dedup.near_duplicate_enabled": _control("check", c.dedup.near_duplicate_enabled, description="near-duplicate removal"),
            "dedup.near_duplicate_threshold": _control("float", c.dedup.near_duplicate_threshold, min=0.5, max=1.0, step=0.01, description="near-dup cosine"),
            "threshold.min_score": _control("text", c.threshold.min_score, step=0.001, description="min score"),
            "threshold.low_spread": _control("text", low_spread(c), step=0.005, description="low-spread flag below"),
            "routing.enabled": _control("check", c.routing.enabled, description="routing on"),
            "routing.technical_lexical_boost": _control("float", c.routing.technical_lexical_boost, min=0.1, max=5.0, step=0.1, description="technical lexical boost"),
            "routing.conversational_skip_lexical": _control("check", c.routing.conversational_skip_lexical, description="conversational: skip BM25 (recomputes candidates)"),
            "routing.conversational_skip_expansion": _control("check", c.routing.conversational_skip_expansion, description="conversational: skip expansion (recomputes candidates)"),
            # The default preset's guardrails: all live (the inputs are in the cached stages).
            "guard.exact_token": _control("check", c.guard.exact_token, description="exact-token guard (BM25's verbatim hit stays up)"),
            "guard.max_rank": _control("int", c.guard.max_rank, min=1, max=20, description="exact hit at or above rank"),
            "guard.sole_first": _control("check", c.guard.sole_first, description="exact hit first when no other candidate holds it"),
            "guard.coverage_first": _control("check", c.guard.coverage_first, description="BM25's top first when it covers the most query words"),
            "guard.dense_max_rank": _control("int", c.guard.dense_max_rank, min=0, max=20, description="dense's top at or above rank (0: off)"),
            "adapt.dense_gap": _control("check", c.adapt.dense_gap, description="dense weight per query from its score gap"),
            "adapt.gap_scale": _control("float", c.adapt.gap_scale, min=0.02, max=0.5, step=0.01, description="gap scale (gap = weight 1)"),
            "adapt.min_weight": _control("float", c.adapt.min_weight, min=0.0, max=1.0, step=0.05, description="min dense weight"),
            "adapt.max_weight": _control("float", c.adapt.max_weight, min=1.0, max=8.0, step=0.25, description="max dense weight"),
            "dedup.identical_enabled": _control("check", c.dedup.identical_enabled, description="collapse identical copies"),
        }
        ctl.update(priors_controls(c, self.store.value_fields()))
        self.bucket_editor = BucketEditor(c.rerank.buckets, lambda v: self._on_change("rerank.buckets", v))
        ctl["rerank.buckets"] = self.bucket_editor
        for key, w in ctl.items():
            if key != "rerank.buckets":
                w.tooltip = FIELD_HELP.get(key.split("@")[0], "")  # what the knob does, on hover (the field's description)
                w.observe(lambda ch, key=key: self._on_change(key, ch["new"]), names="value")
        self.controls = ctl

        self._status = W.HTML()
        self._timing = W.HTML()
        self._rerank_note = W.HTML()
        self._fusion_note = W.HTML(layout=W.Layout(width="95%"))
        pin = W.Button(description="pin current as baseline", icon="thumb-tack", layout=W.Layout(width="220px"))
        pin.on_click(lambda _b: self._guarded(self.pin_baseline))

        # Failure-case drill-down: which query the trajectory and the per-stage table show.
        self._failure_pick = W.Dropdown(options=[], description="query", layout=W.Layout(width="95%"))
        self._failure_pick.observe(lambda ch: None if self._syncing else self._guarded(self._pick_failure), names="value")

        # Query inspector: a dataset query, or a typed one.
        text = self._qtext
        self._inspect_pick = W.Dropdown(options=[("(pick a query)", None)] + [(f"{q}  {t[:70]}", q) for q, t in text.items()],
                                        description="dataset query", layout=W.Layout(width="95%"), style={"description_width": "110px"})
        self._inspect_pick.observe(
            lambda ch: None if self._syncing or ch["new"] is None else self._guarded(lambda: self.inspect(qid=ch["new"])), names="value"
        )
        self._inspect_text = W.Text(placeholder="or type a query…", description="typed query", layout=W.Layout(width="65%"), style={"description_width": "110px"})
        self._inspect_scope = W.Text(placeholder="scope (optional)", description="scope", style={"description_width": "0px"},
                                     layout=W.Layout(width="20%"))
        run_typed = W.Button(description="run", icon="search", layout=W.Layout(width="80px"))
        run_typed.on_click(lambda _b: self._guarded(lambda: self.inspect(text=self._inspect_text.value, scope=self._inspect_scope.value or None)))

        # Export.
        try:
            from . import export as ex

            engines = list(ex.ENGINES)
            export_note = ""
        except ImportError:
            engines, export_note = [], "engine exports unavailable (toolkit.export is not installed); YAML/JSON only"
        self._export_kind = W.Dropdown(options=["yaml", "json", *engines], value="yaml", description="format", layout=W.Layout(width="260px"))
        self._export_path = W.Text(value="pipeline.yaml", description="path", layout=W.Layout(width="360px"))

        def _kind_suffix(change: dict) -> None:  # the path follows the format: "json" + "pipeline.yaml" is an error
            suffix = {"yaml": ".yaml", "json": ".json"}.get(change["new"])
            if suffix:
                self._export_path.value = str(Path(self._export_path.value).with_suffix(suffix))

        self._export_kind.observe(_kind_suffix, names="value")
        export_btn = W.Button(description="export", icon="download", layout=W.Layout(width="100px"))
        export_btn.on_click(lambda _b: self._guarded(lambda: self.export(self._export_kind.value, self._export_path.value), target="export"))
        self._export_msg = W.HTML(escape(export_note))

        def row(key: str) -> W.Widget:
            w = self.controls[key]
            if key == "rerank.buckets":
                return w.widget
            if isinstance(w, W.FloatSlider | W.IntSlider):
                return W.HBox([w, number_box(w)], layout=W.Layout(width="390px", min_width="390px"))
            return w

        def section(*keys: str, extra: list[W.Widget] | None = None) -> W.VBox:
            return W.VBox([row(k) for k in keys] + (extra or []))

        # One section at a time, picked from a list: an Accordion's headers cannot be reached with the keyboard
        # (tabIndex -1, no role; user trial BC), a <select> can, and a screen reader says which section is open.
        self.section_boxes = [
            section("fusion.method", "fusion.rrf_k", "fusion.lexical_weight", "fusion.dense_weight", "fusion.original_weight",
                    "fusion.expansion_weight", "fusion.rank_bonus@1", "fusion.rank_bonus@3", "fusion.alpha", "fusion.normalization",
                    extra=[self._fusion_note]),
            section("rerank.blend", "rerank.top_n", "rerank.buckets", extra=[self._rerank_note]),
            section("dedup.source_enabled", "dedup.max_per_source", "dedup.near_duplicate_enabled", "dedup.near_duplicate_threshold"),
            section("threshold.min_score", "threshold.low_spread"),
            section("routing.enabled", "routing.technical_lexical_boost", "routing.conversational_skip_lexical", "routing.conversational_skip_expansion"),
            section(*(k for k in self.controls if k.startswith("priors."))),
            section("guard.exact_token", "guard.max_rank", "guard.sole_first", "guard.coverage_first", "guard.dense_max_rank", "adapt.dense_gap", "adapt.gap_scale", "adapt.min_weight",
                    "adapt.max_weight", "dedup.identical_enabled"),
            W.VBox([self._export_kind, self._export_path, export_btn, self._export_msg]),
        ]
        titles = ("fusion", "rerank blend", "dedup", "threshold", "routing", "priors", "guardrails", "export")
        self.section_pick = W.Dropdown(options=[(t, i) for i, t in enumerate(titles)], value=0, description="settings",
                                       style={"description_width": "70px"}, layout=W.Layout(width="300px"))
        # The open section is the box's one child: the front end draws only the controls in view.
        self.sections = W.VBox([self.section_boxes[0]])
        self.section_pick.observe(lambda ch: setattr(self.sections, "children", (self.section_boxes[ch["new"]],)), names="value")
        controls = W.VBox([self.section_pick, self.sections], layout=W.Layout(width="400px", min_width="400px"))
        s = self._slots
        right = W.VBox(
            [
                W.HTML("<h4>1. Metrics vs baseline</h4>"), s["metrics"].view, pin,
                W.HTML("<h4>2. Score spread</h4>"), s["spread"].view,
                W.HTML("<h4>3. Failure cases</h4>"), s["failures"].view, self._failure_pick, s["trajectory"].view, s["drilldown"].view,
                W.HTML("<h4>4. Routing and dedup</h4>"), s["routing"].view,
                W.HTML("<h4>5. Query inspector</h4>"), self._inspect_pick, W.HBox([self._inspect_text, self._inspect_scope, run_typed]), s["inspector"].view,
            ],
            layout=W.Layout(flex="1 1 0%", min_width="720px"),  # plotly draws 700 px wide before layout settles
        )
        header = W.VBox([W.HTML(f"<b>hybrid retrieval lab</b>: {self.queries.height} queries, k = {self.k}"), self._status, self._timing])
        self.widget = W.VBox([header, W.HBox([controls, right])])
        self._sync_disabled()

    def _guarded(self, fn: Callable[[], Any], target: str = "status") -> None:
        """Run a button/dropdown action; show an expected error instead of a traceback in the widget log."""
        try:
            fn()
        except ToolkitError as e:
            if target == "export":
                self._export_msg.value = f"<span style='color:#c00'>{escape(str(e))}</span>"
            else:
                self.session.notice(str(e), error=True)

    def _sync_controls(self) -> None:
        """Widgets show the config (after `set`, `update`): observers are muted while they move."""
        self._syncing = True
        try:
            for key, w in self.controls.items():
                v = self.session.value_for(key)
                if key == "rerank.buckets":
                    if [tuple(b) for b in v] != w.value:
                        w.value = v
                    continue
                if hasattr(w, "max") and isinstance(v, int | float) and not isinstance(v, bool) and v > w.max:
                    w.max = v
                if isinstance(w, W.Dropdown) and v not in [o[1] if isinstance(o, tuple) else o for o in w.options]:
                    w.options = [*w.options, (str(v), v)]  # e.g. a priors field the store does not hold
                if w.value != v:
                    w.value = v
        finally:
            self._syncing = False
        self._sync_disabled()

    def _sync_disabled(self) -> None:
        """Grey out knobs that have no effect under the current settings."""
        c, ctl = self.config, self.controls
        # The config's inert-settings rules decide, as for a file's warning (a second list here drifted); the blend's
        # controls stay live without a reranker: the note under them says they act once one is set.
        off = inert_settings(c, {k.partition("@")[0] for k in ctl}, ignore=("rerank.provider",))
        for key, w in ctl.items():
            w.disabled = key.partition("@")[0] in off
        self._fusion_note.value = f"<small>{escape(panels.fusion_formula(c.fusion))}</small>"
        self._rerank_note.value = (
            "<i>rerank.provider is none: blend settings take effect once a reranker is configured</i>"
            if c.rerank.provider == "none"
            else ""
        )


def _warn_if_test(ds: Any, split: str) -> None:
    """A lab on the test split (or on a split holding test queries) is tuning on test: every slider move shows
    a fresh, uncorrected p-value on the queries that are meant to measure the result. Said once, as `hrt tune`
    refuses it (a lab is for looking, so it is a warning here)."""
    if split == "test":
        why = "the test split"
    elif split in ds.splits():  # (a split without judgements: the lab's own error says so)
        shared, _ = ds.shared_with_test(split)
        if not shared:
            return
        why = f"{split}, whose judged queries include {len(shared)} of the test split's (e.g. {shared[0]})"
    else:
        return
    warnings.warn(f"lab on {why}: settings chosen by watching these queries are tuned on test, and their metrics "
                  "there are not results (tune on dev, report on test)", UserWarning, stacklevel=3)


Lab.__doc__ = f"{Lab.__doc__}\n{__doc__}"  # `help(Lab)` shows the module's guide too (user trial AV)
