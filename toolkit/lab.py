"""The notebook lab: widgets bound to a config that re-score every query live, with plotly panels.

The expensive stages run once (`pipeline.prepare`, cached in the store); every widget change builds
`cfg.with_updates({path: value})`, re-scores all queries from the cached frames (`pipeline.rescore`),
re-evaluates, and redraws the panels in place. Widgets and panels only read the trace and write the config.

    from toolkit.lab import Lab
    lab = Lab.from_dataset(".hrt/locomo.duckdb", "data/locomo", split="dev", config="qmd")
    lab                                   # renders controls + panels (JupyterLab 4 / classic notebook)
    lab.set("fusion.lexical_weight", 2.0); lab.metrics   # headless: same path as a slider, no debounce
    lab.pin_baseline(); lab.export("yaml", "tuned.yaml")

Headless API: `lab.set(path, value) -> bool` (False and `lab.message` when the value is invalid),
`lab.update({...})`, `lab.config`, `lab.result` (pipeline.Result), `lab.metrics` (dict measure -> mean),
`lab.deltas` (vs baseline, t-test p), `lab.failures`, `lab.figures` (name -> figure), `lab.last_update_ms`,
`lab.timings`, `lab.controls` (path -> widget; setting `.value` queues a debounced update, `lab.flush()`
applies it now), `lab.inspect(qid=... | text=...)`, `lab.pin_baseline()`, `lab.export(kind, path)`.

Retrieval-side switches (routing skips, near-duplicate vectors, retrieval/expansion settings, the reranker
and its top_n when one is configured) change what `prepare` computes: the lab re-runs it (cached per
setting) and says "recomputing candidates". With a reranker, fusion changes do NOT re-prepare: the pool
scored in `prepare` covers every list's top-N, and documents outside it keep their fused order.

Live figures are plotly FigureWidgets, which need `anywidget` with plotly >= 6; without it (or with
`live_figures=False`) the lab falls back to static figures redrawn in Output widgets. Each FigureWidget's
state carries plotly's ~5 MB JS bundle (anywidget `_esm`): leave "save widget state" off in notebooks.
"""

from __future__ import annotations

import dataclasses
import json
import math
import re
import threading
import time
import traceback
from collections.abc import Callable
from html import escape
from pathlib import Path
from typing import Any

import ipywidgets as W
import numpy as np
import plotly.graph_objects as go
import polars as pl

from . import panels
from .config import PipelineConfig, load_config, save_config
from .errors import InputError, ToolkitError
from .features import query_features
from .metrics import aggregate, cutoff_depth, evaluate, parse_measures
from .pipeline import Prepared, Result, prepare, rescore
from .store import Store

DEFAULT_MEASURES = ("nDCG@10", "R@5", "MRR@10")
_BONUS_KEY = re.compile(r"^fusion\.rank_bonus@(\d+)$")
LATER = ("fuse", "blend", "final")
_MAX_PREPS = 4  # prepared frame sets kept in memory (switching a routing skip back is then instant)


# ------------------------------------------------------------------ debounce
class Debouncer:
    """Run `fn` once, `delay_s` after the last `trigger()`; `flush()` runs a pending call at once.

    Hand-written on `threading.Timer` because ipywidgets has no debounce helper and a timer thread
    works the same in JupyterLab and the classic notebook without event-loop tricks. `timer` is
    injectable so tests can drive it without sleeping.
    """

    def __init__(self, fn: Callable[[], None], delay_s: float = 0.15, timer: Callable[..., Any] = threading.Timer) -> None:
        self.fn = fn
        self.delay_s = delay_s
        self._timer_factory = timer
        self._timer: Any = None
        self._lock = threading.Lock()

    @property
    def pending(self) -> bool:
        return self._timer is not None

    def trigger(self) -> None:
        with self._lock:
            if self._timer is not None:
                self._timer.cancel()
            self._timer = self._timer_factory(self.delay_s, self._fire)
            self._timer.daemon = True
            self._timer.start()

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
        self._quiet = True
        try:
            self._build([tuple(b) for b in buckets])
        finally:
            self._quiet = False

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
            w.disabled = v
            if b is not None:
                b.disabled = v

    def _build(self, buckets: list[tuple[float, float]]) -> None:
        rows, boxes = [], []
        for i, (bound, weight) in enumerate(buckets):
            last = i == len(buckets) - 1 and math.isinf(bound)
            b = None if last else W.FloatText(value=float(bound), step=1.0, layout=W.Layout(width="70px"))
            w = W.FloatSlider(value=float(weight), min=0.0, max=1.0, step=0.05, readout_format=".2f",
                              layout=W.Layout(width="210px"))
            if b is not None:
                b.observe(self._changed, names="value")
            w.observe(self._changed, names="value")
            rm = W.Button(icon="trash", tooltip="remove this bucket", layout=W.Layout(width="36px"), disabled=last)
            rm.on_click(lambda _b, i=i: self.remove(i))
            rows.append((b, w))
            boxes.append(W.HBox([b if b is not None else W.Label("∞", layout=W.Layout(width="70px")), w, rm]))
        self._rows = rows
        self.rows_box.children = boxes

    def _changed(self, _change: dict) -> None:
        if not self._quiet and self.on_change is not None:
            self.on_change(self.value)

    def add(self) -> None:
        """Insert a bucket before the open-ended last one: bound = previous bound + 5, same weight."""
        v = self.value
        finite = [b for b, _ in v if not math.isinf(b)]
        bound = (finite[-1] if finite else 0.0) + 5.0
        v.insert(len(v) - 1 if math.isinf(v[-1][0]) else len(v), (bound, v[-1][1]))
        self.value = v
        self._changed({})

    def remove(self, i: int) -> None:
        """Remove bucket `i` (the open-ended last one stays)."""
        v = self.value
        if not 0 <= i < len(v) or (i == len(v) - 1 and math.isinf(v[i][0])):
            return
        del v[i]
        self.value = v
        self._changed({})


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
    were re-sent). Static (no anywidget): a Figure redrawn in an Output widget."""

    def __init__(self, live: bool) -> None:
        self.live = live
        self.spec: dict = {"data": [], "layout": {}}
        self._static: go.Figure | None = None
        if live:
            self._widget_figure = go.FigureWidget()
            self.widget: W.Widget = self._widget_figure
        else:
            self.widget = W.Output()

    @property
    def figure(self) -> go.Figure:
        if self.live:
            return self._widget_figure
        if self._static is None:
            self._static = go.Figure(self.spec)
        return self._static

    def set(self, spec: dict) -> None:
        old, self.spec = self.spec, spec
        if not self.live:
            self._static = None
            from IPython import get_ipython

            if get_ipython() is not None:  # outside a kernel display() would print the figure's repr
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
def _prep_signature(cfg: PipelineConfig) -> str:
    """What the prepared frames depend on, as far as the lab is concerned (see the module docstring)."""
    d = cfg.to_dict()
    rr = cfg.rerank
    parts = {
        "retrieval": d["retrieval"],
        "expansion": d["expansion"],
        "routing": {k: v for k, v in d["routing"].items() if k != "technical_lexical_boost"},
        "rerank": {
            "provider": rr.provider,
            "model": rr.model,
            "url": rr.url,
            "path": rr.path,
            "on": rr.blend != "none",
            "top_n": rr.top_n if rr.provider != "none" else None,
        },
        "near_dup": cfg.dedup.near_duplicate_enabled,
    }
    return json.dumps(parts, sort_keys=True, default=str)


def _control(kind: str, value: Any, **kw: Any) -> W.Widget:
    style = {"description_width": "150px"}
    layout = W.Layout(width="360px")
    if kind == "float":
        hi = max(kw.pop("max"), float(value))
        return W.FloatSlider(value=float(value), max=hi, style=style, layout=layout, **kw)
    if kind == "int":
        hi = max(kw.pop("max"), int(value))
        return W.IntSlider(value=int(value), max=hi, style=style, layout=layout, **kw)
    if kind == "text":
        return W.FloatText(value=float(value), style=style, layout=layout, **kw)
    if kind == "check":
        return W.Checkbox(value=bool(value), indent=False, **kw)
    if kind == "choice":
        return W.Dropdown(value=value, style=style, layout=layout, **kw)
    if kind == "toggle":
        return W.ToggleButtons(value=value, style={"button_width": "80px"}, **kw)
    raise ValueError(kind)


class Lab:
    """Interactive tuning of one pipeline config over a query set; see the module docstring."""

    def __init__(
        self,
        store: Store,
        queries: pl.DataFrame,
        qrels: pl.DataFrame | None = None,
        config: str | Path | PipelineConfig = "qmd",
        baseline: str | Path | PipelineConfig | None = "bm25-only",
        measures: tuple[str, ...] | list[str] = DEFAULT_MEASURES,
        k: int = 10,
        *,
        debounce_s: float = 0.15,
        live_figures: bool | None = None,
    ) -> None:
        self.store = store
        self.queries = queries if "scope" in queries.columns else queries.with_columns(pl.lit(None, pl.Utf8).alias("scope"))
        self.measures = [m.label for m in parse_measures(measures)]
        self.k = k
        self.qrels = (
            qrels.select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), pl.col("rel").cast(pl.Int64)).join(
                self.queries.select("qid"), on="qid", how="semi"
            )
            if qrels is not None
            else None
        )
        self.config: PipelineConfig = load_config(config)
        self.message = ""  # the status line: "" when all is well, else the last error or notice
        self.history: list[str] = []  # recent status messages (notices like "recomputing candidates")
        self.last_update_ms: float | None = None
        self.updates = 0  # how many re-scorings the panels show (the status line numbers them)
        self.timings: dict[str, float] = {}
        self.per_query: pl.DataFrame | None = None
        self.deltas: pl.DataFrame | None = None
        self.failures: pl.DataFrame = pl.DataFrame(schema=panels.FAILURE_SCHEMA)
        self.inspected: pl.DataFrame | None = None
        self.last_export: str | None = None
        self._owns_store = False
        self._recomputed_ms = 0.0
        self._pending: dict[str, Any] = {}
        self._syncing = False
        self._lock = threading.RLock()
        self._preps: dict[str, Prepared] = {}
        self._boosted: dict[tuple[str, float], Prepared] = {}
        self._texts = pl.DataFrame(schema={"chunk_id": pl.Utf8, "text": pl.Utf8})
        self._inspect_state: dict[str, Any] = {"qid": None}
        self._debouncer = Debouncer(self._apply_pending, debounce_s)
        live = _figure_widgets_available() if live_figures is None else live_figures
        self._slots = {name: _Slot(live) for name in ("metrics", "spread", "failures", "trajectory", "drilldown", "routing", "inspector")}
        self.live_figures = live

        # Baseline: its own prepare (cached in the store), scored once.
        self.baseline_name: str | None = None
        self._baseline_pq: pl.DataFrame | None = None
        if baseline is not None and self.qrels is not None:
            bcfg = load_config(baseline)
            bres = rescore(self._prepared(bcfg, remember=False), bcfg, trace=False)
            self._baseline_pq = evaluate(bres.run(cutoff_depth(self.measures)), self.qrels, self.measures)
            self.baseline_name = bcfg.name
        self._build_widgets()
        self.result: Result = self._run(self.config, time.perf_counter())

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
        store = Store(store_path, embedder=embedder)
        try:
            if ingest:
                store.ingest(load_corpus(ds.root))
            lab = cls(store, ds.queries(split), ds.qrels(split), **kw)
        except BaseException:
            store.close()
            raise
        lab._owns_store = True
        return lab

    def close(self) -> None:
        self._debouncer.cancel()
        if self._owns_store:
            self.store.close()

    # -------------------------------------------------------------- headless API
    @property
    def metrics(self) -> dict[str, float]:
        """Current mean of each measure (empty without qrels)."""
        return aggregate(self.per_query) if self.per_query is not None and len(self.per_query) else {}

    @property
    def figures(self) -> dict[str, go.Figure | go.FigureWidget]:
        """Panel name -> figure: FigureWidgets patched in place (live), else static Figures."""
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
            if self.per_query is None:
                raise InputError("pin_baseline: no judgements (qrels), so there are no metrics to compare")
            self._baseline_pq = self.per_query
            self.baseline_name = f"pinned {self.config.name} @ {time.strftime('%H:%M:%S')}"
            self.deltas = panels.metric_deltas(self.per_query, self._baseline_pq)
            self._slots["metrics"].set(
                panels.metrics_figure(self.deltas, current_name=self.config.name, baseline_name=self.baseline_name, raw=True)
            )

    def add_bucket(self) -> bool:
        """Add a blend bucket (as the widget's button does) and re-score; False if the result is invalid."""
        self.bucket_editor.add()
        return self.set("rerank.buckets", self.bucket_editor.value)

    def remove_bucket(self, i: int = -2) -> bool:
        """Remove blend bucket `i` (default: the last bounded one) and re-score."""
        n = len(self.bucket_editor.value)
        self.bucket_editor.remove(i % n)
        return self.set("rerank.buckets", self.bucket_editor.value)

    def inspect(self, qid: str | None = None, text: str | None = None, scope: str | None = None) -> pl.DataFrame:
        """Each stage's top k for one dataset query (`qid`) or a typed `text` (prepared for that query
        alone, without the dataset cache). Returns `panels.stage_lists` and updates the inspector panel."""
        with self._lock:
            if text is not None and text.strip():
                self._inspect_state = {"qid": None, "text": text.strip(), "scope": scope or None, "prep": {}}
            elif qid is not None:
                if qid not in set(self.queries["qid"].to_list()):
                    raise InputError(f"query {qid!r}: not in this lab's queries")
                self._inspect_state = {"qid": qid}
                if hasattr(self, "_inspect_pick") and self._inspect_pick.value != qid:
                    self._syncing = True
                    try:
                        self._inspect_pick.value = qid
                    finally:
                        self._syncing = False
            else:
                raise InputError("inspect: give a dataset query id (qid=...) or a query text (text=...)")
            self._refresh_inspector()
            return self.inspected

    def export(self, kind: str, path: str | Path) -> str:
        """Write the current config: kind "yaml" (or "json") -> `save_config`; an engine name -> the
        engine export (`toolkit.export.write_export`). Returns (and shows) what was written and what the
        engine could not carry over."""
        path = Path(path)
        if kind in ("yaml", "json"):
            if kind == "json" and path.suffix.lower() != ".json":
                path = path.with_suffix(".json")
            written = save_config(self.config, path)
            msg = f"wrote {written}"
        else:
            try:
                from . import export as ex
            except ImportError as e:
                raise ToolkitError(f"engine exports are not available in this install ({e})") from None
            res = ex.write_export(self.config, kind, path)
            missing = _not_carried(res)
            if missing is None:
                try:
                    missing = _not_carried(ex.export_config(self.config, kind))
                except Exception:  # the report is informative only; the file is written
                    missing = None
            written = res if isinstance(res, str | Path) else path
            msg = f"wrote {written}" + (f"; not carried over: {', '.join(map(str, missing))}" if missing else "; everything carried over" if missing is not None else "")
        self.last_export = msg
        if hasattr(self, "_export_msg"):
            self._export_msg.value = escape(msg)
        return msg

    # -------------------------------------------------------------- display
    def show(self) -> None:
        from IPython.display import display

        display(self.widget)

    def _repr_mimebundle_(self, **kw: Any) -> Any:
        return self.widget._repr_mimebundle_(**kw)

    # -------------------------------------------------------------- the update path
    def _on_change(self, key: str, value: Any) -> None:
        if self._syncing:
            return
        with self._lock:
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
                self._show(f"update failed: {type(e).__name__}: {e}", error=True)
                traceback.print_exc()
            else:
                self._sync_disabled()

    def _translate(self, updates: dict[str, Any]) -> dict[str, Any]:
        """Control keys -> config paths (the two rank-bonus sliders edit bands of `fusion.rank_bonus`)."""
        out: dict[str, Any] = {}
        bands: dict[int, float] | None = None
        for key, v in updates.items():
            m = _BONUS_KEY.match(key)
            if m:
                bands = bands if bands is not None else {int(r): float(b) for r, b in self.config.fusion.rank_bonus}
                bands[int(m.group(1))] = float(v)
            else:
                out[key] = v
        if bands is not None:
            out["fusion.rank_bonus"] = [[r, b] for r, b in sorted(bands.items()) if b > 0]
        return out

    def _apply(self, updates: dict[str, Any]) -> bool:
        t0 = time.perf_counter()
        try:
            cfg = self.config.with_updates(self._translate(updates))
        except (InputError, ValueError, TypeError) as e:
            self._show(f"invalid value, config unchanged: {e}", error=True)
            return False
        try:
            self._run(cfg, t0)
        except ToolkitError as e:  # e.g. near-duplicate dedup on a store without embeddings
            self._show(f"cannot apply, config unchanged: {e}", error=True)
            return False
        return True

    def _prepared(self, cfg: PipelineConfig, *, remember: bool = True) -> Prepared:
        sig = _prep_signature(cfg)
        prep = self._preps.get(sig)
        if prep is None:
            if hasattr(self, "_status"):
                self._show("recomputing candidates (a retrieval-side setting changed)…")
            t = time.perf_counter()
            prep = prepare(self.store, self.queries, cfg)
            self._recomputed_ms = (time.perf_counter() - t) * 1000
            if remember:
                self._preps[sig] = prep
                while len(self._preps) > _MAX_PREPS:
                    self._preps.pop(next(iter(self._preps)))
        # The technical-query lexical boost lives in the features frame; recomputing features is a few ms
        # of regex work, not a new retrieval.
        boost = cfg.routing.technical_lexical_boost
        if cfg.routing.enabled and len(prep.features) and not (prep.features["lexical_boost"].filter(prep.features["technical"]) == boost).all():
            key = (sig, boost)
            if key not in self._boosted:
                self._boosted = {key: dataclasses.replace(prep, features=query_features(prep.queries, cfg.routing))}
            prep = self._boosted[key]
        return prep

    def _run(self, cfg: PipelineConfig, t0: float) -> Result:
        timings: dict[str, float] = {}
        self._recomputed_ms = 0.0
        prep = self._prepared(cfg)
        self._prep = prep
        timings["prepare"] = self._recomputed_ms  # 0 unless candidates had to be recomputed
        t = time.perf_counter()
        res = rescore(prep, cfg)
        timings["rescore"] = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        if self.qrels is not None:
            self.per_query = evaluate(res.run(cutoff_depth(self.measures)), self.qrels, self.measures)
            self.deltas = panels.metric_deltas(self.per_query, self._baseline_pq)
            timings["metrics"] = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            self.failures = panels.failure_cases(res.trace, self.qrels, res.removed, k=self.k)
        timings["failures"] = (time.perf_counter() - t) * 1000
        t = time.perf_counter()
        self.result, self.config = res, cfg
        self._refresh_figures(res, cfg, prep)
        timings["figures"] = (time.perf_counter() - t) * 1000
        self.last_update_ms = (time.perf_counter() - t0) * 1000
        self.updates += 1
        self.timings = timings
        self._show("")
        return res

    # -------------------------------------------------------------- panels
    def _chunk_texts(self, chunk_ids: list[str]) -> pl.DataFrame:
        """Texts of chunks for excerpts, fetched from the store on first use and kept."""
        have = set(self._texts["chunk_id"].to_list())
        need = sorted({c for c in chunk_ids if c is not None and c not in have})
        if need:
            got = self.store.chunks(need).select(pl.col("chunk_id").cast(pl.Utf8), pl.col("text").cast(pl.Utf8))
            self._texts = pl.concat([self._texts, got])
        return self._texts.filter(pl.col("chunk_id").is_in(chunk_ids))

    def _refresh_figures(self, res: Result, cfg: PipelineConfig, prep: Prepared) -> None:
        if self.deltas is not None:
            self._slots["metrics"].set(panels.metrics_figure(self.deltas, current_name=cfg.name, baseline_name=self.baseline_name or "baseline", raw=True))
        else:
            self._slots["metrics"].set(panels.metrics_figure(pl.DataFrame(schema={"measure": pl.Utf8}), raw=True))
        self._slots["spread"].set(panels.spread_figure(res.trace, res.per_query, k=self.k, low_spread=cfg.threshold.low_spread, raw=True))
        self._slots["failures"].set(panels.failures_figure(self.failures, self.queries, raw=True))
        self._slots["routing"].set(panels.routing_dedup_figure(prep.features, res.removed, routing_enabled=cfg.routing.enabled, raw=True))
        self._refresh_failure_pick()
        self._refresh_query_panels()
        self._refresh_inspector()

    def _refresh_failure_pick(self) -> None:
        f = self.failures.group_by("qid", maintain_order=True).agg(pl.col("culprit").unique(maintain_order=True).str.join("+"))
        text = dict(zip(self.queries["qid"].to_list(), self.queries["text"].to_list(), strict=True))
        options = [(f"{q} [{c}] {text.get(q, '')[:70]}", q) for q, c in f.iter_rows()]
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
        tq = self.result.trace.filter(pl.col("qid") == qid)  # once, then the panels work on one query's rows
        if self.qrels is not None:
            self._slots["trajectory"].set(panels.trajectory_figure(tq, self.qrels, qid, k=self.k, raw=True))
        ids = tq.filter(pl.col("rank") <= self.k)["chunk_id"].unique().to_list()
        lists = panels.stage_lists(tq, qid, k=self.k, texts=self._chunk_texts(ids), qrels=self.qrels, stages=LATER)
        self._slots["drilldown"].set(panels.drilldown_figure(lists, qid, raw=True))

    def _refresh_inspector(self) -> None:
        st = self._inspect_state
        if st.get("qid") is None and not st.get("text"):
            return
        if st.get("qid") is not None:
            qid, title = st["qid"], f"Query {st['qid']}"
            tr = self.result.trace.filter(pl.col("qid") == qid)
        else:
            sig = _prep_signature(self.config)
            prep = st["prep"].get(sig)
            if prep is None:
                one = pl.DataFrame({"qid": ["typed"], "text": [st["text"]], "scope": [st["scope"]]}, schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8})
                prep = prepare(self.store, one, self.config, use_cache=False)
                st["prep"] = {sig: prep}
            qid, tr, title = "typed", rescore(prep, self.config).trace, f"Typed query: {st['text'][:80]}"
        ids = tr.filter((pl.col("qid") == qid) & (pl.col("rank") <= self.k))["chunk_id"].unique().to_list()
        self.inspected = panels.stage_lists(tr, qid, k=self.k, texts=self._chunk_texts(ids), qrels=self.qrels)
        self._slots["inspector"].set(panels.side_by_side_figure(self.inspected, title, raw=True))

    # -------------------------------------------------------------- widgets
    def _show(self, msg: str, *, error: bool = False) -> None:
        self.message = msg
        if msg:
            self.history = [*self.history[-49:], msg]
        if not hasattr(self, "_status"):
            return
        if error:
            self._status.value = f"<span style='color:#c00'>{escape(msg)}</span>"
        elif msg:
            self._status.value = f"<span style='color:#666'>{escape(msg)}</span>"
        else:
            self._status.value = ""
        if self.last_update_ms is not None and not msg:
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
            "fusion.method": _control("toggle", f.method, options=["rrf", "convex"], description="fusion"),
            "fusion.rrf_k": _control("int", f.rrf_k, min=1, max=200, description="RRF k"),
            "fusion.lexical_weight": _control("float", f.lexical_weight, min=0.0, max=5.0, step=0.05, description="lexical weight"),
            "fusion.dense_weight": _control("float", f.dense_weight, min=0.0, max=5.0, step=0.05, description="dense weight"),
            "fusion.original_weight": _control("float", f.original_weight, min=0.0, max=5.0, step=0.05, description="original-query weight"),
            "fusion.expansion_weight": _control("float", f.expansion_weight, min=0.0, max=5.0, step=0.05, description="expansion weight"),
            "fusion.rank_bonus@1": _control("float", bands.get(1, 0.0), min=0.0, max=0.2, step=0.005, readout_format=".3f", description="rank-1 bonus"),
            "fusion.rank_bonus@3": _control("float", bands.get(3, 0.0), min=0.0, max=0.2, step=0.005, readout_format=".3f", description="ranks 2-3 bonus"),
            "fusion.alpha": _control("float", f.alpha, min=0.0, max=1.0, step=0.05, description="convex alpha (dense)"),
            "fusion.normalization": _control("choice", f.normalization, options=["minmax", "zscore", "rank", "fixed"], description="normalisation"),
            "rerank.blend": _control("toggle", c.rerank.blend, options=["position", "replace", "none"], description="blend"),
            "rerank.top_n": _control("int", c.rerank.top_n, min=1, max=200, description="rerank top_n"),
            "dedup.source_enabled": _control("check", c.dedup.source_enabled, description="one result per source (source dedup)"),
            "dedup.max_per_source": _control("int", c.dedup.max_per_source, min=1, max=10, description="max per source"),
            "dedup.near_duplicate_enabled": _control("check", c.dedup.near_duplicate_enabled, description="near-duplicate removal"),
            "dedup.near_duplicate_threshold": _control("float", c.dedup.near_duplicate_threshold, min=0.5, max=1.0, step=0.01, description="near-dup cosine"),
            "threshold.min_score": _control("text", c.threshold.min_score, step=0.001, description="min score"),
            "threshold.low_spread": _control("text", c.threshold.low_spread, step=0.005, description="low-spread flag below"),
            "routing.enabled": _control("check", c.routing.enabled, description="routing on"),
            "routing.technical_lexical_boost": _control("float", c.routing.technical_lexical_boost, min=0.1, max=5.0, step=0.1, description="technical lexical boost"),
            "routing.conversational_skip_lexical": _control("check", c.routing.conversational_skip_lexical, description="conversational: skip BM25 (recomputes candidates)"),
            "routing.conversational_skip_expansion": _control("check", c.routing.conversational_skip_expansion, description="conversational: skip expansion (recomputes candidates)"),
        }
        self.bucket_editor = BucketEditor(c.rerank.buckets, lambda v: self._on_change("rerank.buckets", v))
        ctl["rerank.buckets"] = self.bucket_editor
        for key, w in ctl.items():
            if key != "rerank.buckets":
                w.observe(lambda ch, key=key: self._on_change(key, ch["new"]), names="value")
        self.controls = ctl

        self._status = W.HTML()
        self._timing = W.HTML()
        self._rerank_note = W.HTML()
        pin = W.Button(description="pin current as baseline", icon="thumb-tack", layout=W.Layout(width="220px"))
        pin.on_click(lambda _b: self._guarded(self.pin_baseline))

        # Failure-case drill-down: which query the trajectory and the per-stage table show.
        self._failure_pick = W.Dropdown(options=[], description="query", layout=W.Layout(width="95%"))
        self._failure_pick.observe(lambda ch: None if self._syncing else self._guarded(self._pick_failure), names="value")

        # Query inspector: a dataset query, or a typed one.
        text = dict(zip(self.queries["qid"].to_list(), self.queries["text"].to_list(), strict=True))
        self._inspect_pick = W.Dropdown(options=[("(pick a query)", None)] + [(f"{q}  {t[:70]}", q) for q, t in text.items()],
                                        description="dataset query", layout=W.Layout(width="95%"), style={"description_width": "110px"})
        self._inspect_pick.observe(
            lambda ch: None if self._syncing or ch["new"] is None else self._guarded(lambda: self.inspect(qid=ch["new"])), names="value"
        )
        self._inspect_text = W.Text(placeholder="or type a query…", description="typed query", layout=W.Layout(width="65%"), style={"description_width": "110px"})
        self._inspect_scope = W.Text(placeholder="scope (optional)", layout=W.Layout(width="20%"))
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
        export_btn = W.Button(description="export", icon="download", layout=W.Layout(width="100px"))
        export_btn.on_click(lambda _b: self._guarded(lambda: self.export(self._export_kind.value, self._export_path.value), target="export"))
        self._export_msg = W.HTML(escape(export_note))

        def section(*keys: str, extra: list[W.Widget] | None = None) -> W.VBox:
            items = [self.controls[k].widget if k == "rerank.buckets" else self.controls[k] for k in keys]
            return W.VBox(items + (extra or []))

        controls = W.Accordion(
            children=[
                section("fusion.method", "fusion.rrf_k", "fusion.lexical_weight", "fusion.dense_weight", "fusion.original_weight",
                        "fusion.expansion_weight", "fusion.rank_bonus@1", "fusion.rank_bonus@3", "fusion.alpha", "fusion.normalization"),
                section("rerank.blend", "rerank.top_n", "rerank.buckets", extra=[self._rerank_note]),
                section("dedup.source_enabled", "dedup.max_per_source", "dedup.near_duplicate_enabled", "dedup.near_duplicate_threshold"),
                section("threshold.min_score", "threshold.low_spread"),
                section("routing.enabled", "routing.technical_lexical_boost", "routing.conversational_skip_lexical", "routing.conversational_skip_expansion"),
                W.VBox([self._export_kind, self._export_path, export_btn, self._export_msg]),
            ],
            titles=("fusion", "rerank blend", "dedup", "threshold", "routing", "export"),
            selected_index=0,
            layout=W.Layout(width="400px", min_width="400px"),
        )
        s = self._slots
        right = W.VBox(
            [
                W.HTML("<h4>1. Metrics vs baseline</h4>"), s["metrics"].widget, pin,
                W.HTML("<h4>2. Score spread</h4>"), s["spread"].widget,
                W.HTML("<h4>3. Failure cases</h4>"), s["failures"].widget, self._failure_pick, s["trajectory"].widget, s["drilldown"].widget,
                W.HTML("<h4>4. Routing and dedup</h4>"), s["routing"].widget,
                W.HTML("<h4>5. Query inspector</h4>"), self._inspect_pick, W.HBox([self._inspect_text, self._inspect_scope, run_typed]), s["inspector"].widget,
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
                self._show(str(e), error=True)

    def _value_for(self, key: str) -> Any:
        m = _BONUS_KEY.match(key)
        if m:
            return dict(self.config.fusion.rank_bonus).get(int(m.group(1)), 0.0)
        return self.config.get(key)

    def _sync_controls(self) -> None:
        """Widgets show the config (after `set`, `update`): observers are muted while they move."""
        self._syncing = True
        try:
            for key, w in self.controls.items():
                v = self._value_for(key)
                if key == "rerank.buckets":
                    if [tuple(b) for b in v] != w.value:
                        w.value = v
                    continue
                if hasattr(w, "max") and isinstance(v, int | float) and not isinstance(v, bool) and v > w.max:
                    w.max = v
                if w.value != v:
                    w.value = v
        finally:
            self._syncing = False
        self._sync_disabled()

    def _sync_disabled(self) -> None:
        """Grey out knobs that have no effect under the current settings."""
        c, ctl = self.config, self.controls
        rrf = c.fusion.method == "rrf"
        for key in ("fusion.rrf_k", "fusion.rank_bonus@1", "fusion.rank_bonus@3"):
            ctl[key].disabled = not rrf
        for key in ("fusion.alpha", "fusion.normalization"):
            ctl[key].disabled = rrf
        ctl["rerank.buckets"].disabled = c.rerank.blend != "position"
        ctl["rerank.top_n"].disabled = c.rerank.blend == "none"
        ctl["dedup.max_per_source"].disabled = not c.dedup.source_enabled
        ctl["dedup.near_duplicate_threshold"].disabled = not c.dedup.near_duplicate_enabled
        for key in ("routing.technical_lexical_boost", "routing.conversational_skip_lexical", "routing.conversational_skip_expansion"):
            ctl[key].disabled = not c.routing.enabled
        self._rerank_note.value = (
            "<i>rerank.provider is none: blend settings take effect once a reranker is configured</i>"
            if c.rerank.provider == "none"
            else ""
        )


def _not_carried(res: Any) -> list | None:
    """The 'not carried over' list of an engine export result, whatever container it comes in."""
    for name in ("not_carried_over", "not_carried", "dropped", "unsupported"):
        if isinstance(res, dict) and name in res:
            return list(res[name])
        if hasattr(res, name):
            return list(getattr(res, name))
    if isinstance(res, tuple) and len(res) == 2 and isinstance(res[1], list | tuple):
        return list(res[1])
    return None
