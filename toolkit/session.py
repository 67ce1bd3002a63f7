"""The lab's headless session: one config over a query set, re-scored from cached candidates on every change.

Everything the lab knows lives here, with no widget in sight, so a script or a test drives exactly what a
slider drives: `set`/`update` build `cfg.with_updates(...)`, re-score all queries from the prepared frames
(`pipeline.rescore`, prepared once per retrieval-side setting and kept in memory), re-evaluate against the
qrels, and recompute the failure cases and the inspected query. `toolkit.lab.Lab` only draws a session.

    from toolkit.session import Session
    s = Session(store, queries, qrels, config="qmd", baseline="bm25-only")
    s.set("fusion.lexical_weight", 2.0); s.metrics, s.deltas      # False + s.message when invalid
    s.inspect(qid="q1"); s.pin_baseline(); s.export("yaml", "tuned.yaml")

What a session holds: `result` (the `pipeline.Result` of the current config), `per_query` ([qid, measure,
value] of the current config), `metrics` (their means), `deltas` (per measure: current, baseline, delta,
wins, losses and `p_value`, a paired t-test cheap enough for every change; `significance()` runs the
randomisation test `hrt eval` prints), `failures` (relevant documents lost, and which stage lost them),
`message` (the status line: errors, notices, and an in-sample note for a config tuned on these queries).

Fields declared `Prepare` in config.py (routing switches, near-duplicate vectors, retrieval/expansion
settings, the reranker and its top_n) change what `prepare` computes: the session re-runs it (cached per
setting) and notices "recomputing candidates". Every other field re-scores only; with a reranker the pool
scored in `prepare` does not depend on fusion (`pipeline.rerank_pool`).

Cached frames, the baseline's metrics and chunk texts belong to one store generation: the first update after
an ingest (by this or any other Store object) prepares again and says so. A prepare that lost a provider
(`providers.degraded`) is reused only for `RETRY_DEGRADED_S`, with a notice, then asked again.
"""

from __future__ import annotations

import html
import json
import math
import re
import threading
import time
from collections.abc import Callable, Mapping
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

from . import panels, priors, providers
from .compare import compare
from .config import PipelineConfig, load_config, low_spread, prepare_settings, save_config
from .errors import InputError, ToolkitError
from .heap import keep_freed_memory
from .interop import qrels_frame, queries_frame
from .metrics import aggregate, cutoff_depth, evaluate, parse_measures
from .pipeline import Prepared, Result, prepare, rescore
from .provenance import in_sample_notes, query_keys
from .store import Store, need_store

DEFAULT_MEASURES = ("nDCG@10", "R@5", "MRR@10")
BONUS_KEY = re.compile(r"^fusion\.rank_bonus@(\d+)$")  # control keys that edit one band of fusion.rank_bonus
LATER = ("fuse", "blend", "priors", "final")  # "priors" is in the trace only when a prior is on
_MAX_PREPS = 4  # prepared frame sets kept in memory (switching a routing skip back is then instant)
RETRY_DEGRADED_S = 30.0  # a prepare that lost a provider is asked again after this long, not on every slider tick


def prep_signature(cfg: PipelineConfig) -> str:
    """What the prepared frames depend on: the config's prepare fields (declared in config.py)."""
    return json.dumps(prepare_settings(cfg), sort_keys=True, default=str)


_Entry = tuple[Prepared, float | None]  # a kept prepare and, when degraded, the monotonic time it was asked


def _entry(prep: Prepared) -> _Entry:
    return prep, (time.monotonic() if providers.degraded(prep) else None)


def _reusable(entry: _Entry | None) -> Prepared | None:
    """The kept prepare, unless it lost a provider longer than `RETRY_DEGRADED_S` ago (then: ask again)."""
    if entry is None or (entry[1] is not None and time.monotonic() - entry[1] >= RETRY_DEGRADED_S):
        return None
    return entry[0]


def _retry_in(at: float | None) -> str:
    return f"asking again in {max(0.0, RETRY_DEGRADED_S - (time.monotonic() - (at or 0.0))):.0f} s"


# ------------------------------------------------------------------ blend buckets as the editor edits them
def bucket_added(buckets: list) -> list[tuple[float, float]]:
    """Insert a bucket before the open-ended last one: bound = previous bound + 5, same weight."""
    v = [(float(b), float(w)) for b, w in buckets]
    finite = [b for b, _ in v if not math.isinf(b)]
    bound = (finite[-1] if finite else 0.0) + 5.0
    v.insert(len(v) - 1 if math.isinf(v[-1][0]) else len(v), (bound, v[-1][1]))
    return v


def bucket_removal_problem(buckets: list, i: int) -> str | None:
    """Why blend bucket `i` cannot be removed (None: it can). The open-ended last one stays: every rank past
    the others needs a weight (user trial T: removing it "succeeded" and changed nothing)."""
    if len(buckets) == 1:
        return "remove_bucket: only the open-ended bucket is left (every rank needs a weight); change its weight instead"
    if not -len(buckets) <= i < len(buckets):
        return f"remove_bucket: no bucket {i} (there are {len(buckets)})"
    if i % len(buckets) == len(buckets) - 1 and math.isinf(float(buckets[-1][0])):
        return "remove_bucket: the last bucket is open-ended (every rank past the others needs a weight); change its weight instead"
    return None


def bucket_removed(buckets: list, i: int) -> list[tuple[float, float]]:
    """Remove bucket `i`; the open-ended last one stays (returned unchanged then)."""
    v = [(float(b), float(w)) for b, w in buckets]
    if 0 <= i < len(v) and not (i == len(v) - 1 and math.isinf(v[i][0])):
        del v[i]
    return v


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


def _matched_qrels(qrels: pl.DataFrame, queries: pl.DataFrame) -> pl.DataFrame:
    """The judgements of `queries`; InputError when none match, which otherwise shows empty metrics with no
    word of why (e.g. the test split's qrels with the dev queries)."""
    matched = qrels.join(queries.select("qid"), on="qid", how="semi")
    if not len(matched):
        raise InputError(f"Session: no judgement matches a query id of the query set (queries have ids such as "
                         f"{_examples(queries['qid'])}; qrels have {_examples(qrels['qid'])}): pass the qrels of the "
                         "same split, or qrels=None to run without metrics")  # fmt: skip
    return matched


def _cell(v: float | None, fmt: str) -> str:
    return "" if v is None else format(v, fmt)


def _examples(ids: pl.Series, n: int = 3) -> str:
    v = ids.unique(maintain_order=True).head(n).to_list()
    return ", ".join(map(repr, v)) if v else "none"


class Session:
    """Interactive tuning state of one pipeline config over a query set (the module's text follows, in `help`).

    `measures`: what `metrics`, `deltas` and the panels show (default nDCG@10, R@5, MRR@10); `k`: how deep the
    failure cases and the inspector look (a relevant document missing from the first `k` results is a failure).
    `rel_threshold`: the grade binary measures (R, P, RR, AP) and the failure cases count as relevant
    (2 for TREC DL; nDCG uses every grade). `on_notice(message, error)` is called whenever the status message changes (a view shows it live,
    e.g. "recomputing candidates" before a slow prepare). `source`: (dataset name, split) the queries come from,
    recorded in an export's `tuned_on` when settings were moved (`Lab.from_dataset` passes it). `reranker`: a Python
    reranker of yours for configs with `rerank.provider: python` (`pipeline.prepare`). All public methods hold `lock`, so a view's
    timer thread and the notebook's own calls do not interleave.
    """

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
        on_notice: Callable[[str, bool], None] | None = None,
        rel_threshold: int = 1,
        source: tuple[str, str] | None = None,
        reranker: Any = None,
    ) -> None:
        keep_freed_memory()  # a live session re-scores every query per change: see toolkit.heap
        self.reranker = reranker  # a Python reranker of yours, used by configs with rerank.provider: python
        self.store = need_store(store)
        self.queries = queries_frame(queries)  # pandas / PyTerrier / BEIR names too (toolkit.interop)
        self.measures = [m.label for m in parse_measures(measures)]
        self.k = k
        self.rel_threshold = rel_threshold  # grade binary measures count as relevant (2 for TREC DL)
        self.qrels = _matched_qrels(qrels_frame(qrels), self.queries) if qrels is not None else None
        self.config: PipelineConfig = load_config(config)
        self.base_config = self.config  # what `label` names changes against
        # The recency prior's reference for queries without a date (unless the config sets priors.as_of): fixed
        # for the session, so its numbers do not drift with the clock, and named in an export (trial T).
        self.now = priors.utc_now().replace(microsecond=0)
        self.on_notice = on_notice
        self.lock = threading.RLock()
        self.message = ""  # the status line: "" when all is well, else the last error or notice
        self.history: list[str] = []  # recent status messages (notices like "recomputing candidates")
        self.timings: dict[str, float] = {}  # ms per step of the last update
        self.last_update_ms: float | None = None
        self.per_query: pl.DataFrame | None = None
        self.deltas: pl.DataFrame | None = None
        self.retrieval_misses = 0  # relevant documents no list had in its top k (`panels.retrieval_misses`)
        self.failures: pl.DataFrame = pl.DataFrame(schema=panels.FAILURE_SCHEMA)
        self.inspected: pl.DataFrame | None = None
        self.inspected_title = ""  # markup for a figure title: the query id or text in it is HTML-escaped
        self.last_export: str | None = None
        self.prepared: Prepared | None = None
        self._preps: dict[tuple[str, str], _Entry] = {}  # (store generation, prep_signature) -> kept prepare
        self._generation: str | None = None  # the store generation the current state was computed from
        self._texts = pl.DataFrame(schema={"chunk_id": pl.Utf8, "text": pl.Utf8})
        self._texts_generation: str | None = None
        self._inspect_state: dict[str, Any] = {"qid": None}
        self._qids = set(self.queries["qid"].to_list())
        self._in_sample_said: dict[tuple, list[str]] = {}
        # What was read off each trace block last time (`_per_block`): (purpose, block name) -> (block, key, rows).
        self._block_rows: dict[tuple[str, str], tuple[pl.DataFrame, Any, pl.DataFrame]] = {}
        self._relevant: tuple[Any, pl.DataFrame] | None = None  # (qrels, rel_threshold) and its `panels.relevant_pairs`
        # `source`: (dataset name, split) of the queries (`Lab.from_dataset`): the `tuned_on` record of an export,
        # and what a model file from before recorded query hashes is matched on (`_in_sample`).
        self.dataset_label, self.split_label = source if source is not None else (None, None)

        # Baseline: its own prepare (cached in the store), scored in `_run` once per store generation.
        self._baseline_config = load_config(baseline) if baseline is not None and self.qrels is not None else None
        if reranker is not None and "python" not in {c.rerank.provider for c in (self.config, self._baseline_config) if c}:
            # `prepare` refuses the same mistake; here the object was dropped without a word (review)
            raise InputError(f"a reranker object was given but neither the config ({self.config.rerank.provider!r}) nor "
                             "the baseline uses it: set rerank.provider: python in the config")
        self.baseline_name: str | None = self._baseline_config.name if self._baseline_config else None
        self.baseline_per_query: pl.DataFrame | None = None
        self._baseline_note: tuple[str, float] | None = None  # (provider summary, time) of a degraded baseline
        self.result: Result = self._run(self.config)

    # -------------------------------------------------------------- state
    @property
    def label(self) -> str:
        """The live config named by what changed since the session started: "qmd + lexical weight 3.0"."""
        return panels.config_label(self.base_config, self.config)

    @property
    def metrics(self) -> dict[str, float]:
        """Current mean of each measure (empty without qrels)."""
        return aggregate(self.per_query) if self.per_query is not None and len(self.per_query) else {}

    def _reranker_for(self, cfg: PipelineConfig) -> Any:
        """The session's Python reranker for a config that asks for one (the baseline, or a config switched to
        another provider, prepares without it)."""
        return self.reranker if cfg.rerank.provider == "python" else None

    def __repr__(self) -> str:
        """What a script or terminal sees: the config against the baseline, measure by measure."""
        n = self.queries.height
        head = (f"Session: {self.label} over {n} quer{'y' if n == 1 else 'ies'}, k = {self.k}"
                + (f", baseline {self.baseline_name}" if self.baseline_name else ""))
        if self.deltas is None or not len(self.deltas):
            return head + ("" if self.qrels is not None else " (no judgements: no metrics)")
        lines = [head]
        for r in self.deltas.iter_rows(named=True):
            if r["baseline"] is None:
                lines.append(f"  {r['measure']}: {r['current']:.4f}")
            else:
                p = f", p {panels.p_text(r['p_value'])}"
                lines.append(f"  {r['measure']}: {r['current']:.4f} (baseline {r['baseline']:.4f}, {r['delta']:+.4f}{p})")
        return "\n".join(lines)

    def _repr_html_(self) -> str:
        """The same as a small table (a notebook, or an export of one, that draws no widgets)."""
        head = html.escape(repr(self).splitlines()[0])
        if self.deltas is None or not len(self.deltas):
            return f"<p>{head}</p>"
        cells = "".join(
            f"<tr><td>{html.escape(r['measure'])}</td>" + "".join(f"<td>{_cell(r[c], f)}</td>" for c, f in (
                ("current", ".4f"), ("baseline", ".4f"), ("delta", "+.4f"))) + f"<td>{panels.p_text(r['p_value'])}</td></tr>"
            for r in self.deltas.iter_rows(named=True)
        )
        return (f"<p>{head}</p><table><tr><th>measure</th><th>current</th><th>baseline</th><th>delta</th><th>p (t-test)</th></tr>"
                f"{cells}</table>")

    def value_for(self, key: str) -> Any:
        """The config value a control key shows (`fusion.rank_bonus@1` -> that band's bonus; an unset
        `threshold.low_spread` -> the one in force, `config.low_spread`)."""
        m = BONUS_KEY.match(key)
        if m:
            return dict(self.config.fusion.rank_bonus).get(int(m.group(1)), 0.0)
        if key == "threshold.low_spread":
            return low_spread(self.config)
        return self.config.get(key)

    # -------------------------------------------------------------- changes
    def set(self, path: str, value: Any) -> bool:
        """Change one knob: a config path (`"fusion.rrf_k"`) or a control key (`"fusion.rank_bonus@1"`).
        Returns False, with the reason in `message`, when the value is invalid (the config is kept)."""
        return self.update({path: value})

    def update(self, updates: dict[str, Any]) -> bool:
        """Apply several changes at once (one re-score); see `set`."""
        with self.lock:
            try:
                cfg = self.config.with_updates(self._translate(updates))
            except (InputError, ValueError, TypeError) as e:
                self.notice(f"invalid value, config unchanged: {e}", error=True)
                return False
            try:
                self._run(cfg)
            except ToolkitError as e:  # e.g. near-duplicate dedup on a store without embeddings, a damaged model file
                self.notice(f"cannot apply, config unchanged: {e}", error=True)
                return False
            except Exception as e:  # a bug: the state is the previous one (`_run` commits last); say so, then raise
                self.notice(f"update failed, config unchanged: {type(e).__name__}: {e}", error=True)
                raise
            return True

    def refresh(self) -> bool:
        """Re-run the current config now: after an ingest, or to ask a fallen-back provider again before its
        cool-down ends. False, with the reason in `message`, when it cannot run."""
        with self.lock:
            self._preps = {k: v for k, v in self._preps.items() if v[1] is None}
            if self._baseline_note is not None:
                self._baseline_note = (self._baseline_note[0], -math.inf)
            if self._inspect_state.get("prep"):
                self._inspect_state["prep"] = {}
            return self.update({})

    def add_bucket(self) -> bool:
        """Add a blend bucket before the open-ended last one and re-score; False if the result is invalid."""
        return self.set("rerank.buckets", bucket_added(self.config.rerank.buckets))

    def remove_bucket(self, i: int = -2) -> bool:
        """Remove blend bucket `i` (default: the last bounded one) and re-score. The open-ended last bucket
        stays (every rank needs a weight): asking to remove it is False, with the reason in `message`."""
        b = self.config.rerank.buckets
        if (problem := bucket_removal_problem(b, i)) is not None:
            self.notice(problem, error=True)
            return False
        return self.set("rerank.buckets", bucket_removed(b, i % len(b)))

    def pin_baseline(self) -> None:
        """Make the current config (and its per-query metrics) the baseline the deltas compare to."""
        with self.lock:
            if self.per_query is None:
                raise InputError("pin_baseline: no judgements (qrels), so there are no metrics to compare")
            self.baseline_per_query, self._baseline_config, self._baseline_note = self.per_query, self.config, None
            self.baseline_name = f"pinned {self.label} @ {time.strftime('%H:%M:%S')}"
            self.deltas = panels.metric_deltas(self.per_query, self.baseline_per_query)

    def significance(self, test: str = "randomization", alpha: float = 0.05) -> pl.DataFrame:
        """The current config against the baseline with the paired test `hrt eval`, `experiment` and `compare`
        run (`compare.compare`'s frame: delta, wins/ties/losses, p_value, bootstrap interval). `deltas.p_value`
        is a paired t-test, cheap enough for every slider move; this is the randomisation test whose p `hrt
        eval` prints for the same two runs (user trial X found the lab's and the CLI's p-values differing)."""
        with self.lock:  # the frames of one state; the test itself runs outside, so slider moves do not wait on it
            if self.per_query is None or self.baseline_per_query is None:
                raise InputError("significance: needs judgements (qrels) and a baseline to compare with")
            cur, base = "current", self.baseline_name or "baseline"
            pq = pl.concat([self.per_query.select(pl.lit(cur).alias("system"), "qid", "measure", "value"),
                            self.baseline_per_query.select(pl.lit(base).alias("system"), "qid", "measure", "value")])
        return compare(pq, base, test=test, alpha=alpha)

    def notice(self, msg: str, *, error: bool = False) -> None:
        """Set the status message ("" = all well), keep it in `history`, and tell the view."""
        self.message = msg
        if msg:
            self.history = [*self.history[-49:], msg]
        if self.on_notice is not None:
            self.on_notice(msg, error)

    def _translate(self, updates: dict[str, Any]) -> dict[str, Any]:
        """Control keys -> config paths (the two rank-bonus sliders edit bands of `fusion.rank_bonus`).
        A band's bonus 0 removes the band; a negative or non-finite one is an InputError (it would vanish
        from the list the same way, silently)."""
        out: dict[str, Any] = {}
        bands: dict[int, float] | None = None
        for key, v in updates.items():
            m = BONUS_KEY.match(key)
            if m:
                bands = bands if bands is not None else {int(r): float(b) for r, b in self.config.fusion.rank_bonus}
                try:
                    b = float(v)
                except (TypeError, ValueError):
                    raise InputError(f"{key}: bonus {v!r} is not a number") from None
                if not math.isfinite(b) or b < 0:
                    raise InputError(f"{key}: bonus {v!r} must be a finite number >= 0 (0 removes the band)")
                bands[int(m.group(1))] = b
            else:
                out[key] = v
        if bands is not None:
            out["fusion.rank_bonus"] = [[r, b] for r, b in sorted(bands.items()) if b > 0]
        return out

    # -------------------------------------------------------------- the update path
    def _prepared(self, cfg: PipelineConfig, gen: str, *, remember: bool = True,
                  why: str = "a retrieval-side setting changed") -> Prepared:
        """The frames of `cfg` on store generation `gen`: kept per (generation, signature), so frames of an
        older corpus never serve; a degraded prepare only until `RETRY_DEGRADED_S` has passed."""
        key = (gen, prep_signature(cfg))
        prep = _reusable(self._preps.get(key))
        if prep is None:
            if remember:
                self.notice(f"recomputing candidates ({why})…")
            t = time.perf_counter()
            prep = prepare(self.store, self.queries, cfg, reranker=self._reranker_for(cfg))
            self._recomputed_ms = (time.perf_counter() - t) * 1000
            if remember:
                self._preps.pop(key, None)  # re-inserted last: the newest is evicted last
                self._preps[key] = _entry(prep)
                while len(self._preps) > _MAX_PREPS:
                    self._preps.pop(next(iter(self._preps)))
        return prep

    def _run(self, cfg: PipelineConfig) -> Result:
        t0 = time.perf_counter()
        timings: dict[str, float] = {}
        self._recomputed_ms = 0.0
        gen = self.store.generation()  # once per update (it reads the file)
        notes, why = [], "a retrieval-side setting changed"
        if self._generation is not None and gen != self._generation:
            why = "the store changed"
            notes.append("the store changed (an ingest or an index build): candidates prepared again"
                         + (", baseline re-scored" if self._baseline_config is not None else ""))
        self._preps = {k: v for k, v in self._preps.items() if k[0] == gen}  # an older corpus's frames never serve again
        prep = self._prepared(cfg, gen, why=why)
        timings["prepare"] = self._recomputed_ms  # 0 unless candidates had to be recomputed
        t = time.perf_counter()
        res = rescore(prep, cfg, now=self._reference(cfg))
        timings["rescore"] = (time.perf_counter() - t) * 1000
        notes += self._in_sample(cfg)
        if providers.degraded(prep):
            notes.append(f"{providers.summary(res.per_query)}: results without it; "
                         f"{_retry_in(self._preps[(gen, prep_signature(cfg))][1])}")
        t = time.perf_counter()
        per_query, deltas, failures, misses = self.per_query, self.deltas, self.failures, self.retrieval_misses
        base_pq, base_note = self._baseline(gen)
        if base_note is not None:
            notes.append(f"baseline {self.baseline_name}: {base_note[0]}; {_retry_in(base_note[1])}")
        if self.qrels is not None:
            per_query = evaluate(res.run(cutoff_depth(self.measures)), self.qrels, self.measures, rel_threshold=self.rel_threshold)
            deltas = panels.metric_deltas(per_query, base_pq)
            timings["metrics"] = (time.perf_counter() - t) * 1000
            t = time.perf_counter()
            rel = self._relevant_pairs()
            relevant = (rel, self._per_block("relevant", res, lambda b: panels.relevant_in(b, rel), id(rel)))
            failures, misses = panels.lost(res.trace, self.qrels, res.removed, k=self.k, rel_threshold=self.rel_threshold,
                                           per_query=res.per_query, relevant=relevant)
        timings["failures"] = (time.perf_counter() - t) * 1000
        # Commit only once everything is computed: a failure above (or in the inspector) leaves the last state whole.
        keys = ("result", "config", "prepared", "per_query", "deltas", "failures", "retrieval_misses", "inspected", "inspected_title",
                "baseline_per_query", "_baseline_note", "_generation")
        before = {k: getattr(self, k, None) for k in keys}
        self.result, self.config, self.prepared = res, cfg, prep
        self.per_query, self.deltas, self.failures, self.retrieval_misses = per_query, deltas, failures, misses
        self.baseline_per_query, self._baseline_note, self._generation = base_pq, base_note, gen
        t = time.perf_counter()
        try:
            self._refresh_inspected()
        except BaseException:
            for k, v in before.items():
                setattr(self, k, v)
            raise
        timings["inspect"] = (time.perf_counter() - t) * 1000
        self.timings = timings
        self.last_update_ms = (time.perf_counter() - t0) * 1000
        self.notice("; ".join(notes))
        return res

    def _in_sample(self, cfg: PipelineConfig) -> list[str]:
        """The in-sample notes `hrt run` prints (`provenance.in_sample_notes`), for the status line: a config
        tuned on these queries, or whose fusion model was trained on them (user trial X: the lab showed its
        numbers without a word). Kept per (tuned_on, model), which a slider never moves."""
        key = (json.dumps(cfg.tuned_on), cfg.fusion.model if cfg.fusion.method == "learned" else None)
        if key not in self._in_sample_said:
            q = self.queries
            self._in_sample_said[key] = in_sample_notes({cfg.name or "config": cfg}, q["qid"].to_list(), q["text"].to_list(),
                                                        self.dataset_label, self.split_label)
        return self._in_sample_said[key]

    def _reference(self, cfg: PipelineConfig) -> datetime:
        """The recency prior's reference time: the config's `priors.as_of`, else the session's fixed now."""
        return priors.reference_time(cfg.priors) or self.now

    def _baseline(self, gen: str) -> tuple[pl.DataFrame | None, tuple[str, float] | None]:
        """The baseline's per-query metrics on generation `gen` and, when its prepare lost a provider, (summary,
        time asked): scored again only when the store changed or a degraded baseline is due to be asked again."""
        note = self._baseline_note
        due = gen != self._generation or (note is not None and time.monotonic() - note[1] >= RETRY_DEGRADED_S)
        bcfg = self._baseline_config
        if not due or bcfg is None or self.qrels is None:
            return self.baseline_per_query, note
        bprep = self._prepared(bcfg, gen, remember=False)
        bres = rescore(bprep, bcfg, trace=False, now=self._reference(bcfg))
        pq = evaluate(bres.run(cutoff_depth(self.measures)), self.qrels, self.measures, rel_threshold=self.rel_threshold)
        return pq, ((providers.summary(bres.per_query), time.monotonic()) if providers.degraded(bprep) else None)

    # -------------------------------------------------------------- per-query views
    def chunk_texts(self, chunk_ids: list[str]) -> pl.DataFrame:
        """Texts of chunks for excerpts, fetched from the store on first use and kept for the generation shown
        (a chunk id such as `d02#0` names new text after an ingest)."""
        if self._texts_generation != self._generation:
            self._texts = self._texts.clear()
            self._texts_generation = self._generation
        have = set(self._texts["chunk_id"].to_list())
        need = sorted({c for c in chunk_ids if c is not None and c not in have})
        if need:
            got = self.store.chunks(need).select(pl.col("chunk_id").cast(pl.Utf8), pl.col("text").cast(pl.Utf8))
            self._texts = pl.concat([self._texts, got])
        return self._texts.filter(pl.col("chunk_id").is_in(chunk_ids))

    def query_trace(self, qid: str) -> pl.DataFrame:
        """The current trace rows of one query."""
        return self._per_block("query", self.result, lambda b: b.filter(pl.col("qid") == qid), qid)

    def _per_block(self, purpose: str, res: Result, read: Callable[[pl.DataFrame], pl.DataFrame], key: Any) -> pl.DataFrame:
        """`read(res.trace)`, read block by block (`Result.blocks`): a block that is the very frame read last time for
        this purpose and key gives its last rows. A slider moves one stage, so most blocks are unchanged: the lists'
        rows are half of LoCoMo's trace, and fusion's and the blend's are the same after a dedup change."""
        if not res.blocks:
            return read(res.trace)
        out = []
        for name, block in res.blocks.items():
            hit = self._block_rows.get((purpose, name))
            if hit is None or hit[0] is not block or hit[1] != key:
                hit = (block, key, read(block))
                self._block_rows[(purpose, name)] = hit
            out.append(hit[2])
        return pl.concat(out)

    def _relevant_pairs(self) -> pl.DataFrame:
        """`panels.relevant_pairs` of the session's judgements, kept while they and the grade threshold are the same."""
        if self._relevant is None or self._relevant[0][0] is not self.qrels or self._relevant[0][1] != self.rel_threshold:
            self._relevant = ((self.qrels, self.rel_threshold), panels.relevant_pairs(self.qrels, self.rel_threshold))
        return self._relevant[1]

    def stage_lists(self, qid: str, trace: pl.DataFrame | None = None, stages: tuple[str, ...] | None = None) -> pl.DataFrame:
        """Each stage's top k for one query, with excerpts and judgements (`panels.stage_lists`)."""
        tq = self.query_trace(qid) if trace is None else trace
        ids = tq.filter((pl.col("qid") == qid) & (pl.col("rank") <= self.k))["chunk_id"].unique().to_list()
        kw = {"stages": stages} if stages is not None else {}
        return panels.stage_lists(tq, qid, k=self.k, texts=self.chunk_texts(ids), qrels=self.qrels, **kw)

    def failure_qids(self) -> list[tuple[str, str]]:
        """(qid, culprits) of the failure cases, in order; culprits joined by '+'."""
        f = self.failures.group_by("qid", maintain_order=True).agg(pl.col("culprit").unique(maintain_order=True).str.join("+"))
        return list(f.iter_rows())

    def inspect(self, qid: str | None = None, text: str | None = None, scope: str | None = None) -> pl.DataFrame:
        """Each stage's top k for one dataset query (`qid`) or a typed `text` (prepared for that query
        alone, without the dataset cache). Kept up to date on every change (`inspected`)."""
        with self.lock:
            if text is not None and text.strip():
                self._inspect_state = {"qid": None, "text": text.strip(), "scope": scope or None, "prep": {}}
            elif qid is not None:
                if qid not in self._qids:
                    raise InputError(f"query {qid!r}: not in this lab's queries")
                self._inspect_state = {"qid": qid}
            else:
                raise InputError("inspect: give a dataset query id (qid=...) or a query text (text=...)")
            if self.store.generation() != self._generation:  # the store changed: no lists of the old corpus
                self._run(self.config)
            else:
                self._refresh_inspected()
            return self.inspected

    @property
    def inspected_qid(self) -> str | None:
        return self._inspect_state.get("qid")

    def _refresh_inspected(self) -> None:
        st = self._inspect_state
        if st.get("qid") is None and not st.get("text"):
            return
        if st.get("qid") is not None:
            qid, title = st["qid"], f"Query {html.escape(str(st['qid']))}"
            tr = self.query_trace(qid)
        else:
            key = (self._generation, prep_signature(self.config))
            prep = _reusable(st["prep"].get(key))
            if prep is None:
                one = pl.DataFrame({"qid": ["typed"], "text": [st["text"]], "scope": [st["scope"]]}, schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8})
                prep = prepare(self.store, one, self.config, use_cache=False, reranker=self._reranker_for(self.config))
                st["prep"] = {key: _entry(prep)}
            qid, tr, title = "typed", rescore(prep, self.config, now=self._reference(self.config)).trace, f"Typed query: {html.escape(st['text'][:80])}"
        self.inspected = self.stage_lists(qid, tr)
        self.inspected_title = title

    # -------------------------------------------------------------- export
    def export(self, kind: str, path: str | Path) -> str:
        """Write the current config: kind "yaml" (or "json") -> `save_config`; an engine name -> the
        engine export (`toolkit.export.write_export`). Returns what was written and what the engine could
        not carry over. For "yaml"/"json" a path without a suffix gets the kind's and any other suffix is an
        InputError (the extension used to win: "yaml" to x.json wrote JSON)."""
        path = Path(path)
        suffixes = {"yaml": (".yaml", ".yml"), "json": (".json",)}
        if kind in suffixes and path.suffix.lower() not in suffixes[kind]:
            if path.suffix:
                raise InputError(f"export: kind {kind!r} contradicts the file extension {path.suffix!r} of {path} "
                                 f"(a {kind} config file ends in {' or '.join(suffixes[kind])})")
            path = path.with_suffix(suffixes[kind][0])
        label = self.label
        cfg = self.config
        # With a recency prior the numbers are for the session's time: the description says which, for `hrt run
        # --as-of`. Not written as priors.as_of: live search with the file must date memories against the clock.
        when = (f"; numbers as of {self.now.isoformat()} (hrt run --as-of {self.now.isoformat()})"
                if cfg.priors.recency_field is not None and cfg.priors.as_of is None else "")
        if label != cfg.name or when:  # the file says what it is: the base config plus the lab's changes, under a name
            # of its own (a run of it is tagged by name: `default` would pass for the shipped preset)
            cfg = cfg.model_copy(update={"name": f"{cfg.name}-lab" if label != cfg.name else cfg.name,
                                         "description": f"{label} (from the lab; base: {cfg.description or cfg.name}){when}"})
        if label != self.base_config.name and self.qrels is not None:
            # Settings moved while watching these queries' scores were tuned on them: recorded as `hrt tune` records
            # its own, so `hrt run` / `hrt report` call numbers on these queries in-sample (user trial X).
            rec = {"dataset": self.dataset_label or "lab session", "split": self.split_label or "its queries",
                   "query_keys": query_keys(self.queries["qid"].to_list(), self.queries["text"].to_list())}
            if not any(r["query_keys"] == rec["query_keys"] for r in cfg.tuned_on or []):
                cfg = cfg.with_updates({"tuned_on": [*(cfg.tuned_on or []), rec]})
        if kind in suffixes:
            written = save_config(cfg, path)
            msg = f"wrote {label} to {written}"
        else:
            try:
                from . import export as ex
            except ImportError as e:
                raise ToolkitError(f"engine exports are not available in this install ({e})") from None
            if kind == "lancedb" and path.suffix.lower() != ".py":
                path = path.with_suffix(".py")  # the LanceDB export is a Python module
            elif kind not in ("lancedb", "toolkit") and path.suffix.lower() not in (".json", ".yaml", ".yml"):
                path = path.with_suffix(".json")
            res = ex.write_export(cfg, kind, path)
            missing = _not_carried(res)
            if missing is None:
                try:
                    missing = _not_carried(ex.export_config(self.config, kind))
                except Exception:  # the report is informative only; the file is written
                    missing = None
            written = res if isinstance(res, str | Path) else path
            msg = f"wrote {label} to {written}" + (f"; not carried over: {', '.join(map(str, missing))}" if missing else "; everything carried over" if missing is not None else "")
        self.last_export = msg
        return msg


Session.__doc__ = f"{Session.__doc__}\n{__doc__}"  # `help(Session)` shows the module's guide too (user trial AV)
