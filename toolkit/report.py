"""Evaluation reports: the practitioners' A/B table, significance against a baseline, break-downs by query
metadata, per-stage latency, and a self-contained HTML page with the tables and plotly figures.

Latency is measured per query (each sampled query run alone through every stage, as a deployed search
would), so p50/p95 mean what they say; batch timings of a whole run would hide the per-query cost.
"""

from __future__ import annotations

import html
import json
import math
import time
import warnings
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import polars as pl
import yaml

from . import providers
from .compare import TEST_WORDS, SmallSampleWarning, compare, interval_notes
from .config import PipelineConfig, load_config
from .errors import InputError
from .files import write_text_atomic
from .metrics import evaluate, id_warnings, no_relevant, relevant_words
from .panels import PALETTE, PATTERNS, config_differences, series_colour
from .pipeline import prepare, reads_learned_features, rescore
from .store import Store
from .threshold import unmet_note

AB_MEASURES = ["R@1", "R@5", "P@3", "nDCG@10", "MRR@10"]
STAGES = ["features", "expansion", "retrieve", "rerank", "fuse", "blend", "dedup", "threshold"]


@dataclass
class Report:
    """Everything a report shows, as frames (for notebooks) and as HTML (for people)."""

    dataset: str
    split: str
    baseline: str
    per_query: pl.DataFrame  # [system, qid, measure, value]
    ab: pl.DataFrame  # one row per system: measures + latency p50/p95 ms
    significance: pl.DataFrame  # compare() output per measure
    breakdown: pl.DataFrame  # [system, field, value, measure, mean, n]
    latency: pl.DataFrame  # [system, stage, p50_ms, p95_ms]
    figures: dict[str, go.Figure] = field(default_factory=dict)
    configs: dict[str, PipelineConfig] = field(default_factory=dict)  # name -> the config compared
    notes: list[str] = field(default_factory=list)  # caveats: too few queries, judgements dropped or with nothing relevant, ...
    rel_threshold: int = 1  # the grade the binary measures count as relevant
    provenance: dict[str, str] = field(default_factory=dict)  # toolkit version, store, generation, embedding model
    figure_text: dict[str, str] = field(default_factory=dict)  # figure name -> what it shows, in words (its aria-label)

    @property
    def n_queries(self) -> int:
        """The judged queries every mean is over (a query missing from a run counts 0 there)."""
        return self.per_query["qid"].n_unique() if len(self.per_query) else 0

    def config_diff(self) -> pl.DataFrame:
        """[field, <baseline>, <other systems>...]: every config field where a system differs from the baseline."""
        if self.baseline not in self.configs:
            return pl.DataFrame()
        base = self.configs[self.baseline]
        others = [n for n in self.configs if n != self.baseline]
        fields = sorted({k for n in others for k, *_ in config_differences(base, self.configs[n])})
        flat = {n: c.flat() for n, c in self.configs.items()}
        return pl.DataFrame(
            {"field": fields, **{n: [_show(flat[n].get(f)) for f in fields] for n in [self.baseline, *others]}},
            schema={"field": pl.Utf8, **{n: pl.Utf8 for n in [self.baseline, *others]}},
        )

    def breakdown_tables(self) -> dict[tuple[str, str], pl.DataFrame]:
        """(field, measure) -> groups as rows, systems as columns (mean), plus the group's query count n."""
        out: dict[tuple[str, str], pl.DataFrame] = {}
        if not len(self.breakdown):
            return out
        systems = list(dict.fromkeys(self.ab["system"].to_list()))
        for (fld, measure), g in self.breakdown.group_by("field", "measure", maintain_order=True):
            wide = g.pivot(on="system", index="group", values="mean")
            n = g.group_by("group").agg(pl.col("n").max())
            out[(str(fld), str(measure))] = wide.join(n, on="group").select("group", "n", *[s for s in systems if s in wide.columns]).sort("group")
        return out

    def to_html(self) -> str:
        parts = [
            f"<h1>Retrieval report: {html.escape(self.dataset)} ({html.escape(self.split)})</h1>",
            f"<p>Baseline: <b>{html.escape(self.baseline)}</b>. Significance: {html.escape(TEST_WORDS)}; "
            "significant = p (Holm) &lt;= 0.05, in either direction (read delta for which).</p>",
            *([f"<p>Provenance: {html.escape('; '.join(f'{k} {v}' for k, v in self.provenance.items()))}.</p>"] if self.provenance else []),
            f"<p>Queries: <b>{self.n_queries}</b> judged in {html.escape(self.split)}, each counted in every mean. "
            f"Relevant: {html.escape(relevant_words(self.rel_threshold))}. Unjudged documents count as not relevant "
            "(trec_eval).</p>",
            *(f"<p><b>Note:</b> {html.escape(n)}</p>" for n in self.notes),
        ]
        if self.configs:
            diff = self.config_diff()
            parts += ["<h2>Compared configs</h2>",
                      "<p>Fields where a system differs from the baseline:</p>"
                      + (_table(diff, "Config fields that differ from the baseline") if len(diff) else "<p>none</p>")]
            for name, cfg in self.configs.items():
                text = yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True)
                parts.append(f"<details><summary>{html.escape(name)} (YAML)</summary><pre>{html.escape(text)}</pre></details>")
        parts += [
            "<h2>A/B table</h2>",
            _table(self.ab, "Mean of each measure per system, with latency per query (ms) and providers"),
            "<h2>Against the baseline</h2>",
            "<p>delta: mean difference with its 95% interval (symmetric studentised bootstrap; [-1, 1] when the queries cannot bound it); p (Holm): paired randomisation test, "
            "corrected across the compared systems, per measure (not across the measures: a star on one of several "
            "measures by chance is more likely than 0.05; name the measure that decides before looking); "
            "* = p (Holm) &lt;= 0.05.</p>",
            _table(self.significance.select(
                "measure", "system", "mean", "baseline_mean", "delta", pl.col("ci_low").alias("delta 95% low"),
                pl.col("ci_high").alias("delta 95% high"), "wins", "ties", "losses", pl.col("p_holm").alias("p (Holm)"), "significant",
            ), f"Each measure of each system against the baseline {self.baseline}; significant: * where p (Holm) <= 0.05"),
        ]
        tables = self.breakdown_tables()
        if tables:
            parts.append("<h2>By query group</h2>")
            for (fld, measure), t in tables.items():
                parts += [f"<h3>{html.escape(measure)} by {html.escape(fld)}</h3>",
                          _table(t, f"Mean {measure} per {fld} group (n: queries in the group) and system")]
        parts += ["<h2>Latency per stage (ms per query)</h2>", _table(self.latency, "p50 and p95 ms per query of each stage, per system")]
        figs = []
        for i, (name, fig) in enumerate(self.figures.items()):
            text = html.escape(self.figure_text.get(name, name), quote=True)
            parts.append(f"<h2>{html.escape(name)}</h2><div id='fig{i}' class='fig' role='img' aria-label=\"{text}\"></div>")
            figs.append(f'["fig{i}",{pio.to_json(fig, validate=False)}]')
        if figs:
            parts.append(_plotly_loader("[" + ",".join(figs) + "]"))
        style = ("body{font-family:sans-serif;max-width:1100px;margin:2em auto}table{border-collapse:collapse}"
                 "td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}caption,th[scope=row]{text-align:left}")
        return f"<!doctype html><html lang='en'><head><meta charset='utf-8'><title>hrt report</title><style>{style}</style></head><body>{''.join(parts)}</body></html>"

    def write_html(self, path: str | Path) -> Path:
        return write_text_atomic(path, self.to_html())

    def to_dict(self) -> dict:
        """What the page shows, as data (`hrt report --json`): a CI bot posts the A/B table and the significance
        rows, which were only in the HTML (user trial BB). Non-finite numbers are null."""
        def rows(df: pl.DataFrame) -> list[dict]:
            return [{k: _finite(v) for k, v in r.items()} for r in df.to_dicts()] if len(df) else []

        return {"dataset": self.dataset, "split": self.split, "baseline": self.baseline, "queries": self.n_queries,
                "rel_threshold": self.rel_threshold, "provenance": self.provenance, "notes": list(self.notes),
                "ab": rows(self.ab), "significance": rows(self.significance), "config_diff": rows(self.config_diff()),
                "breakdown": rows(self.breakdown), "latency": rows(self.latency)}

    def write_json(self, path: str | Path) -> Path:
        return write_text_atomic(path, json.dumps(self.to_dict(), indent=1, allow_nan=False) + "\n")


def _show(v: object) -> str:
    return "" if v is None else json.dumps(v, default=str) if isinstance(v, list | dict) else str(v)


def _finite(v: object) -> object:
    return None if isinstance(v, float) and not math.isfinite(v) else v


def _plotly_loader(figures_json: str) -> str:
    """One copy of plotly.js, gzip-compressed (base64), unpacked in the page by the browser's
    DecompressionStream, then each figure drawn from its one JSON copy. Why by hand: plotly's to_html
    inlines the 4.6 MB bundle uncompressed and offers only a CDN (not reachable offline) or a side file
    instead; compressed it is ~1.9 MB and the report stays one self-contained file."""
    import base64
    import gzip

    from plotly.offline import get_plotlyjs

    packed = base64.b64encode(gzip.compress(get_plotlyjs().encode("utf-8"), 9, mtime=0)).decode("ascii")
    figs = figures_json.replace("</", "<\\/")  # figure text cannot close the script element
    return (
        f"<script>const HRT_FIGS={figs};const HRT_PLOTLY='{packed}';"
        "(async()=>{try{const b=Uint8Array.from(atob(HRT_PLOTLY),c=>c.charCodeAt(0));"
        "const js=await new Response(new Blob([b]).stream().pipeThrough(new DecompressionStream('gzip'))).text();"
        "const s=document.createElement('script');s.textContent=js;document.head.appendChild(s);"
        "for(const [id,f] of HRT_FIGS){Plotly.newPlot(id,f.data,f.layout,{responsive:true});}}"
        "catch(e){for(const d of document.querySelectorAll('.fig'))d.textContent='figures need a browser with DecompressionStream: '+e;}})();</script>"
    )


def _table(df: pl.DataFrame, caption: str) -> str:
    """A table a screen reader can navigate (user trial BC): a caption saying what it holds, column headers in a
    `<thead>`, and each row's first cell (a system, field, group or measure) its row header, so a cell is read with
    the row and column it belongs to."""
    def cell(v: object) -> str:
        if isinstance(v, float):
            return f"{v:.4f}"
        if isinstance(v, bool):
            return "*" if v else ""
        return html.escape("" if v is None else str(v))

    head = "".join(f'<th scope="col">{html.escape(c)}</th>' for c in df.columns)
    body = "".join(f'<tr><th scope="row">{cell(row[0])}</th>' + "".join(f"<td>{cell(v)}</td>" for v in row[1:]) + "</tr>"
                   for row in df.iter_rows())
    return f"<table><caption>{html.escape(caption)}</caption><thead><tr>{head}</tr></thead><tbody>{body}</tbody></table>"


def stages_run(cfg: PipelineConfig) -> set[str]:
    """The timed stages that do work under `cfg`: a report lists latency only for these (a rerank stage
    with no reranker, or expansion with no expander, takes ~0 ms and would read as if it ran)."""
    c = cfg
    off = set()
    if c.expansion.provider == "none":
        off.add("expansion")
    if c.rerank.provider == "none" or c.rerank.blend == "none":
        off |= {"rerank", "blend"}
    if c.fusion.method != "learned":
        off.add("ltr_features")
    if not (c.dedup.source_enabled or c.dedup.near_duplicate_enabled):
        off.add("dedup")
    return {*STAGES, "ltr_features", "total", "cache_load"} - off


def stage_latency(store: Store, queries: pl.DataFrame, cfg: PipelineConfig, sample: int = 30, seed: int = 0) -> pl.DataFrame:
    """p50/p95 milliseconds per stage that ran (`stages_run`), each sampled query run alone and uncached."""
    rng = np.random.default_rng(seed)
    idx = rng.choice(len(queries), size=min(sample, len(queries)), replace=False)
    rows: list[dict] = []
    for i in sorted(idx.tolist()):
        q = queries.slice(i, 1)
        t0 = time.perf_counter()
        prep = prepare(store, q, cfg, use_cache=False, learned_features=reads_learned_features(cfg))
        res = rescore(prep, cfg, trace=False)
        total = time.perf_counter() - t0
        ran = stages_run(cfg)
        for stage, secs in {**prep.timings, **res.timings, "total": total}.items():
            if stage in ran:
                rows.append({"stage": stage, "ms": secs * 1000})
    df = pl.DataFrame(rows)
    return df.group_by("stage").agg(
        pl.col("ms").quantile(0.5, "linear").alias("p50_ms"), pl.col("ms").quantile(0.95, "linear").alias("p95_ms")
    )


def build_report(
    store: Store,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    configs: dict[str, str | PipelineConfig],
    *,
    baseline: str,
    dataset: str = "",
    split: str = "",
    group_by: list[str] | None = None,
    rel_threshold: int = 1,
    latency_sample: int = 30,
    progress: bool = False,
) -> Report:
    """Run each config over `queries`, evaluate, compare with `baseline`, and break results down."""
    if baseline not in configs:
        raise ValueError(f"baseline {baseline!r} is not one of the configs {list(configs)}")
    check_group_fields(queries, group_by or [])  # before any config runs
    measures = sorted(set(AB_MEASURES))
    per, lat, prov, run_notes = [], [], {}, []
    for name, src in configs.items():
        cfg = load_config(src)
        res = rescore(prepare(store, queries, cfg, progress=progress, learned_features=reads_learned_features(cfg)), cfg,
                      trace=False)
        prov[name] = providers.summary(res.per_query)  # fallbacks make a row mean something else: say so
        run = res.run()
        # What `hrt eval` says of a run file, said here too: a system that retrieved nothing, or nothing judged,
        # or a threshold nothing reached, is a row of zeros or of unchanged numbers for another reason than its
        # ranking (user trial AY).
        run_notes += [f"{name}: {n}" for n in [*id_warnings(run, qrels), unmet_note(res.per_query, cfg.threshold)] if n]
        pq = evaluate(run, qrels, measures, rel_threshold=rel_threshold)
        per.append(pq.with_columns(pl.lit(name).alias("system")))
        if latency_sample:
            lat.append(stage_latency(store, queries, cfg, latency_sample).with_columns(pl.lit(name).alias("system")))
    per_query = pl.concat(per).select("system", "qid", "measure", "value")
    latency = pl.concat(lat).select("system", "stage", "p50_ms", "p95_ms").sort("system", "stage") if lat else pl.DataFrame()

    means = per_query.group_by("system", "measure").agg(pl.col("value").mean()).pivot(on="measure", index="system", values="value")
    ab = means.select("system", *AB_MEASURES)
    if len(latency):
        tot = latency.filter(pl.col("stage") == "total").select("system", pl.col("p50_ms").alias("latency_p50_ms"), pl.col("p95_ms").alias("latency_p95_ms"))
        ab = ab.join(tot, on="system", how="left")
    ab = ab.with_columns(pl.col("system").replace_strict(prov, return_dtype=pl.Utf8).alias("providers"))
    order = {n: i for i, n in enumerate(configs)}
    ab = ab.sort(pl.col("system").replace_strict(order, return_dtype=pl.Int64))
    with warnings.catch_warnings(record=True) as caught:  # kept for the HTML too, not only the terminal
        warnings.simplefilter("always", SmallSampleWarning)
        sig = pl.concat(
            [compare(per_query.filter(pl.col("measure") == m), baseline).with_columns(pl.lit(m).alias("measure")) for m in AB_MEASURES]
        )
    notes = list(dict.fromkeys(str(w.message).removeprefix("compare: ") for w in caught if issubclass(w.category, SmallSampleWarning)))
    notes += interval_notes(sig) + run_notes
    if empty := no_relevant(qrels, rel_threshold):  # they pull every mean down: the reader must know (user trial AM)
        notes.insert(0, f"{len(empty)} of {qrels['qid'].n_unique()} judged queries have no document graded >= {rel_threshold} "
                        f"({', '.join(empty[:5])}{', ...' if len(empty) > 5 else ''}); each counts 0 on the binary measures, as in trec_eval")
    for w in caught:  # every warning still reaches the caller, the caveats once each
        if not issubclass(w.category, SmallSampleWarning):
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    for n in notes:
        warnings.warn(f"compare: {n}", SmallSampleWarning, stacklevel=2)
    breakdown = _breakdown(per_query, queries, group_by or [])
    figs = {
        "nDCG@10 per system": _bar(ab, "nDCG@10"),
        "Per-query nDCG@10 difference from the baseline": _delta_hist(per_query, baseline, "nDCG@10"),
    }
    if len(latency):
        figs["Latency per stage (p50, ms)"] = _latency_fig(latency)
    return Report(dataset, split, baseline, per_query, ab, sig, breakdown, latency, {k: f for k, (f, _) in figs.items()},
                  configs={name: load_config(src) for name, src in configs.items()}, notes=notes, rel_threshold=rel_threshold,
                  provenance=_provenance(store), figure_text={k: t for k, (_, t) in figs.items()})


def _provenance(store: Store) -> dict[str, str]:
    """What a reader needs to tie the numbers to a code version and a store state (user trial AL: none of it was
    recorded). No time: the same inputs give the same file."""
    from .provenance import code_version

    return {"hybrid-retrieval-toolkit": code_version(), "store": store.path.name, "generation": store.generation(),
            "embeddings": store.embedding_model or "none"}


def check_group_fields(queries: pl.DataFrame, fields: list[str]) -> None:
    """A group-by field no query holds gave one "None" group of every query, in silence (user trial AM); `hrt
    tune --stratify` refuses the same mistake."""
    if not fields:
        return
    metas = [json.loads(m) if m else {} for m in queries["metadata"].to_list()] if "metadata" in queries.columns else []
    have = sorted({k for m in metas for k in m})
    for f in fields:
        if not any(f in m for m in metas):
            raise InputError(f"group by {f!r}: no query has that metadata field (fields the queries have: "
                             f"{', '.join(have) or 'none'})")


def _breakdown(per_query: pl.DataFrame, queries: pl.DataFrame, fields: list[str]) -> pl.DataFrame:
    """Mean of each measure per (system, field value): e.g. LoCoMo `category`, or the demo's `style`."""
    if not fields or "metadata" not in queries.columns:
        return pl.DataFrame()
    metas = [json.loads(m) if m else {} for m in queries["metadata"].to_list()]
    out = []
    for f in fields:
        groups = pl.DataFrame({"qid": queries["qid"], "group": [str(m.get(f)) for m in metas]})
        g = per_query.join(groups, on="qid").group_by("system", "group", "measure").agg(
            pl.col("value").mean().alias("mean"), pl.len().alias("n")
        )
        out.append(g.with_columns(pl.lit(f).alias("field")).select("field", "group", "system", "measure", "mean", "n"))
    return pl.concat(out).sort("field", "group", "system", "measure")


# Each figure comes with a sentence saying what it shows, the page's aria-label for it (user trial BC: a screen
# reader announced three empty boxes), and with a title and axis titles of its own.


def _style(i: int) -> dict:
    """The i-th system's bars: a colour of `panels.PALETTE` and a pattern of its own, so overlaid or grouped systems
    are not told apart by colour alone (user trial BC)."""
    return {"marker": {"color": series_colour(i), "pattern": {"shape": PATTERNS[i % len(PATTERNS)]}}}


def _bar(ab: pl.DataFrame, measure: str) -> tuple[go.Figure, str]:
    fig = go.Figure(go.Bar(x=ab["system"].to_list(), y=ab[measure].to_list(), marker_color=PALETTE["blue"]))
    fig.update_layout(title=f"Mean {measure} per system", xaxis_title="system", yaxis_title=measure, height=350,
                      margin={"t": 40})
    values = ", ".join(f"{s} {v:.4f}" for s, v in ab.select("system", measure).iter_rows())
    return fig, f"Bar chart of the mean {measure} of each system: {values}."


def _delta_hist(per_query: pl.DataFrame, baseline: str, measure: str) -> tuple[go.Figure, str]:
    wide = per_query.filter(pl.col("measure") == measure).pivot(on="system", index="qid", values="value").fill_null(0)
    fig = go.Figure()
    said = []
    for i, s in enumerate(c for c in wide.columns if c not in ("qid", baseline)):
        d = wide[s] - wide[baseline]
        fig.add_trace(go.Histogram(x=d.to_list(), name=s, opacity=0.6, nbinsx=40, **_style(i)))
        said.append(f"{s} is higher on {(d > 0).sum()} queries, lower on {(d < 0).sum()}, equal on {(d == 0).sum()} "
                    f"(mean difference {d.mean():+.4f})")
    fig.update_layout(barmode="overlay", title=f"Per-query {measure} difference from the baseline {baseline}",
                      xaxis_title=f"{measure} minus {baseline}", yaxis_title="queries", height=350, margin={"t": 40})
    return fig, (f"Histogram of each query's {measure} minus the baseline {baseline}'s: " + "; ".join(said) + "."
                 if said else f"Histogram of per-query {measure} differences: no system besides the baseline.")


def _latency_fig(latency: pl.DataFrame) -> tuple[go.Figure, str]:
    fig = go.Figure()
    said = []
    for i, s in enumerate(latency["system"].unique(maintain_order=True)):
        part = latency.filter((pl.col("system") == s) & (pl.col("stage") != "total"))
        fig.add_trace(go.Bar(x=part["stage"].to_list(), y=part["p50_ms"].to_list(), name=s, **_style(i)))
        said.append(f"{s}: " + ", ".join(f"{st} {ms:.1f}" for st, ms in part.select("stage", "p50_ms").iter_rows()))
    fig.update_layout(barmode="group", title="Median (p50) latency of each stage per query", xaxis_title="stage",
                      yaxis_title="ms (p50)", height=350, margin={"t": 40})
    return fig, "Grouped bar chart of each stage's median latency per query in ms, one bar per system; " + "; ".join(said) + "."
