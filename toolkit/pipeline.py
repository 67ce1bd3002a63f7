"""The pipeline: expensive stages once (`prepare`), cheap stages on every change (`rescore`).

`prepare` touches the index and the models: query features, variants (expansion), candidate lists, and
reranker scores for every candidate the reranker could be asked about. `rescore` is a set of vectorised
transforms of those frames (fusion, blending, dedup, thresholds), so a slider change re-scores every query
in milliseconds. `run_pipeline` = `rescore(prepare(...))`, and a test checks that both give the same lists.

Which config fields `prepare` may read is declared in `config.py` (`Prepare[...]` fields); it reads no
other, so its cache key is just those fields' values (`config.prepare_settings`).
"""

from __future__ import annotations

import json
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field, replace
from datetime import datetime
from pathlib import Path
from typing import Any

import polars as pl

# Query expansion, the learned model's modules (learned_fusion, ltr_features, router) and runs are imported where
# a config uses them: a plain `hrt search` needs none of them (their imports cost it ~5 ms).
from . import adapt as adapt_stage
from . import blend as blend_stage
from . import dedup as dedup_stage
from . import features, fusion, providers, rerank, threshold
from . import guard as guard_stage
from . import priors as priors_stage
from .config import (
    INPUT_FLAGS,
    STANDS_ASIDE,
    FusionConfig,
    PipelineConfig,
    Stage,
    inert_settings,
    load_config,
    low_spread,
    prepare_settings,
    read_paths,
    stage_of,
)
from .errors import InputError, StoreError, count_arg
from .files import path_stamp
from .metatypes import query_values, values_frame
from .rerank import Reranker
from .retrieve import empty_candidates, name_first, retrieve
from .store import Store, sha1

TRACE_SCHEMA = {
    "qid": pl.Utf8,
    "doc_id": pl.Utf8,
    "chunk_id": pl.Utf8,
    "stage": pl.Utf8,
    "rank": pl.Int64,
    "score": pl.Float64,
    "flags": pl.List(pl.Utf8),
}


# What `queries` may be (`interop.queries_frame`): a polars frame, a {qid: text} dict, or a pandas frame (`Any`: named
# without importing pandas). The hint said polars only (user trial BP).
Queries = pl.DataFrame | Mapping[str, str] | Any


@dataclass
class Prepared:
    """Outputs of the expensive stages for one (store generation, query set, retrieval settings)."""

    queries: pl.DataFrame
    features: pl.DataFrame
    variants: pl.DataFrame
    expansion_status: pl.DataFrame
    candidates: pl.DataFrame
    rerank_scores: pl.DataFrame
    rerank_status: pl.DataFrame
    doc_source: pl.DataFrame
    vectors: pl.DataFrame | None
    # Learning-to-rank features of every (query, candidate document): what `fusion.method: learned` scores.
    ltr_features: pl.DataFrame | None = None
    exact: pl.DataFrame | None = None  # guard.exact_matches: candidates holding a query identifier verbatim
    coverage: pl.DataFrame | None = None  # ltr_features.term_coverage: query terms each candidate holds (the guard's)
    timings: dict[str, float] = field(default_factory=dict)
    # Inputs of the priors stage: typed metadata of the candidate documents and of the queries.
    doc_values: pl.DataFrame | None = None
    query_values: pl.DataFrame | None = None
    _derived: dict[str, tuple] = field(default_factory=dict, repr=False, compare=False)
    _staged: dict[str, tuple] = field(default_factory=dict, repr=False, compare=False)
    # [qid, status, error] of the query embedder when an http embedder failed and lexical lists stand alone.
    embed_status: pl.DataFrame | None = None
    # Chunk-level runs: the chunks whose content another chunk shares (Store.chunk_copies), for dedup.
    chunk_copies: pl.DataFrame | None = None
    # The prepare fields (`config.prepare_settings`) these frames were built with; `rescore` refuses a config
    # whose prepare fields differ, which would silently re-score stale candidates. None: built by hand.
    settings: dict[str, Any] | None = field(default=None, repr=False, compare=False)
    # The store's embedding model and index settings (`Store.index_record`): a learned model compares them.
    index: dict[str, Any] | None = field(default=None, repr=False, compare=False)

    def __repr__(self) -> str:
        """One line, not every frame (a notebook printed 196 lines of polars tables, user trial AV)."""
        lists = self.candidates["list_id"].n_unique() if "list_id" in self.candidates.columns else 0
        made = ("loaded from the store's stage cache" if "cache_load" in self.timings
                else f"prepared in {sum(self.timings.values()):.2f} s")
        return (f"Prepared({len(self.queries)} queries, {len(self.candidates):,} candidates from {lists} lists, "
                f"{len(self.rerank_scores) if self.rerank_scores is not None else 0:,} reranker scores; {made})")

    def derived(self, name: str, sources: tuple[Any, ...], build: Callable[[], Any]) -> Any:
        """`build()` cached until one of `sources` (frames, which are immutable) is replaced: the config-free
        encodings of the cached stages that every `rescore` would otherwise recompute."""
        key = tuple(id(x) for x in sources)
        hit = self._derived.get(name)
        if hit is None or hit[0] != key:
            hit = (key, build(), sources)  # holding `sources` keeps their ids from being reused
            self._derived[name] = hit
        return hit[1]

    def staged(self, name: str, fn: Callable[..., Any], *args: Any, **kw: Any) -> Any:
        """`fn(*args, **kw)`, or its last output when the arguments are the last call's: frames (immutable) compared
        by identity, settings by value. A live stage is a pure function of its inputs, and a lab slider moves one
        stage's settings: the stages before it return the very frames they returned last time, so each stage after
        them finds its inputs unchanged too, down to the stage the slider is in. One slot per stage (`name`)."""
        key = _arg_key((args, tuple(sorted(kw.items()))))
        hit = self._staged.get(name)
        if hit is None or hit[0] != key:
            hit = (key, fn(*args, **kw), (args, kw))  # holding the arguments keeps their ids from being reused
            self._staged[name] = hit
        return hit[1]


def _arg_key(x: Any) -> Any:
    """What `Prepared.staged` compares of an argument: a hashable value (a config section, a number) itself, a
    tuple element by element, anything else (a frame, an array, an index) by identity."""
    if isinstance(x, tuple):
        return tuple(_arg_key(v) for v in x)
    try:
        hash(x)
    except TypeError:
        return (_arg_key, id(x))  # (the function as a tag no value can equal)
    return x


@dataclass(frozen=True, eq=False)
class Result:
    """What the cheap stages return: the final lists, the trace of every stage, and per-query notes. Frozen, and
    equal only to itself: `==` compared the frames and raised "the truth value of a DataFrame is ambiguous"
    (user trial BP)."""

    final: pl.DataFrame
    trace: pl.DataFrame
    per_query: pl.DataFrame
    removed: pl.DataFrame
    timings: dict[str, float] = field(default_factory=dict)
    n: int | None = None  # the config's output.n: how many results of each query are shown
    # The trace by stage ("lists": the candidate lists' rows, then "fuse", "blend", "priors" when they ran, "final"):
    # `trace` is their concatenation. A stage `rescore` reused (`Prepared.staged`) gives the very frame it gave last
    # time, so a reader of the trace after every change (the lab's panels) re-reads only the blocks that changed.
    blocks: Mapping[str, pl.DataFrame] = field(default_factory=dict, repr=False)

    def __repr__(self) -> str:
        """One line: how many queries and results, and where each part is (a notebook printed every frame)."""
        queries = self.final["qid"].n_unique() if len(self.final) else 0
        ms = ", ".join(f"{k} {v * 1000:.1f} ms" for k, v in self.timings.items())
        return (f"Result({queries} queries, {len(self.final):,} results in .final, {self.n or 'all'} shown per query "
                f"(.shown()), .run(depth) for evaluation, .per_query notes, .trace ({len(self.trace):,} rows); {ms})")

    def shown(self) -> pl.DataFrame:
        """The results a reader is shown, in order: each query's first `output.n` rows of `final` (which
        holds up to max(output.n, 100) places, so that measures at any cutoff can be computed). A service
        that sent `final` to a model sent 100 results instead of 5 (user trial AH)."""
        shown = self.final if self.n is None else self.final.filter(pl.col("rank") <= self.n)
        return shown.sort("qid", "rank")

    def run(self, depth: int | None = None) -> pl.DataFrame:
        """The final lists as a run frame [qid, doc_id, rank, score], cut to `depth` results per query when
        given (`metrics.cutoff_depth(measures)`: evaluating 10 rows per query instead of 100 halves the
        metrics time on a slider tick, with identical values). Scores are float32-strict
        (`runs.float32_strict`), as written to TREC files, so in-memory measures equal trec_eval's on the file.
        Byte-identical copies collapsed into one result are listed right after it (`_with_copies`)."""
        from .runs import float32_strict

        depth = count_arg(depth, "depth")
        run = self.final.select("qid", "doc_id", "rank", "score")
        if depth is not None:  # listing copies only moves rows down: nothing below `depth` can come up to it
            run = run.filter(pl.col("rank") <= depth)
        if len(self.removed) and (self.removed["reason"] == "identical").any():
            run = _with_copies(run, self.removed.filter(pl.col("reason") == "identical"))
        return float32_strict(run if depth is None else run.filter(pl.col("rank") <= depth))


def _with_copies(run: pl.DataFrame, copies: pl.DataFrame) -> pl.DataFrame:
    """The run with each collapsed byte-identical copy listed right after the result that stands for it.

    Why: collapsing copies is a display choice (one result, "also in 5 sources"); judgements are per
    document id, so a judged copy must still count, as it would had the pipeline shown every copy. Ranks
    after an expanded result move down; scores tie with the result's and `float32_strict` then orders them.
    Near-duplicates removed by the cosine rule are different texts and stay removed."""
    extra = copies.select("qid", pl.col("kept_instead").alias("_rep"), "doc_id", pl.col("rank").alias("_sub")).join(
        run.select("qid", pl.col("doc_id").alias("_rep"), "rank", "score"), on=["qid", "_rep"], how="inner"
    )
    if not len(extra):
        return run
    both = pl.concat([
        run.with_columns(pl.lit(0, pl.Int64).alias("_sub")),
        extra.select("qid", "doc_id", "rank", "score", pl.col("_sub").cast(pl.Int64)),
    ]).sort("qid", "rank", "_sub")
    return both.with_columns(pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank")).drop("_sub")


def _retrieval_args(cfg: PipelineConfig) -> tuple[dict | None, dict | None]:
    r = cfg.retrieval
    lex = ({"top_k": r.lexical.top_k, "k1": r.lexical.k1, "b": r.lexical.b,
            "query_term_frequency": r.lexical.query_term_frequency} if r.lexical.enabled else None)
    den = None
    if r.dense.enabled:
        den = {"top_k": r.dense.top_k, "embedding": r.dense.embedder_args(), "index": r.dense.index,
               "ef_search": r.dense.ef_search}
    return lex, den


_PREPARED_FRAMES = ("queries", "features", "variants", "expansion_status", "candidates", "rerank_scores", "rerank_status", "doc_source", "vectors", "ltr_features", "doc_values", "query_values", "embed_status", "exact", "chunk_copies", "coverage")
# What the stage cache keeps: not the candidates' vectors, which are the store's own rows (`Store.chunk_vectors` reads
# them back as fast): a copy per cached set doubled them on disk once `default` collapsed near-copies.
_CACHED_FRAMES = tuple(name for name in _PREPARED_FRAMES if name != "vectors")


# What `prepare` computes from the same store, queries and settings, by version: bump it when a change to the
# stages' code changes their frames (e.g. technical tokens and exact-token hits, LTR features), so that frames
# cached in a store by an older toolkit are computed again instead of served. 2-3: trial Q's identifiers; 4: trial
# AC's (dates, amounts and abbreviations are no identifiers; an identifier in a hyphen compound is held); 5: the
# review of those rules (English versions kept, identifiers joined by hyphens go on); 6: `whole`, a query that
# is only an identifier (user trial BD); 7: a `v`-version searched by its bare parts too (trial BD; cost the demo);
# 8: by the bare version's compound only, and held by its bare form; 9: a query's stopwords dropped before stemming
# (`store.QUERY_TERM_FILTER`, user trial BF); 10: the learned features' BM25 coverage from the candidates, rounded
# (the nineteenth session: values within 1e-9 of 9's, but LightGBM's splits moved with them, and a stage cache written
# by 9's code made leave-one-out models depend on which runs a store had seen: user trial BS); 11: identifiers cut or
# missed before found whole (package versions "2.5.5-5", "gcc-4.9", "GH#56", e-mail addresses, one-slash paths,
# "__init__"; a version before a word that starts like a unit, "3.11 security"; user trial BT). 11 is not in
# `FEATURE_CHANGES`: it moves `tech_match` only for queries holding such a token, and no query of the shipped model's
# five training collections does (their 1,789 queries' tokens are unchanged). 12: the same session's later identifiers
# (names with versions, backports, references, addresses, file types) were folded into 11, so frames cached between
# the two commits kept the older tokens (changelogs' test split: 1,014 exact pairs served, 829 computed); not in
# `FEATURE_CHANGES` for 11's reason. `tests/test_prepare_version.py` now fails when the rules move without a bump.
# 13: idf_coverage and the mean query IDF rounded to 12 decimals (DuckDB summed them in no fixed order, and two
# computations of one store's features trained two different models); within 5e-13 of 12's, so no FEATURE_CHANGES.
# 14: an issue or pull request named with its word is the reference "#24375" ("PR #24375", "issue 16075", "pull
# request 17125"), held by a forge address that names it too, and a platform stays on a name's version
# ("ubuntu-24.04-arm"): user trial BW. The shared collections' 1,789 queries keep their tokens; no FEATURE_CHANGES.
# 15: the review of 14 (BZ): no plurals, "Mrs", dates or durations as references, "PR#2899" one too, a reference held
# by its word in a text ("fixed issue 16075"), a four-digit one strong, any platform word after a version.
# 16: a document named by its id ("commit d1434e0", a memory's UUID) is in BM25's list (`retrieve.name_first`) and
# holds the token (user trial BW). No query of the shared collections names an id; no FEATURE_CHANGES. 17: its review
# (CB): the named document first in BM25's list, `exact`'s `named` (before a text quoting the id), ids in any case.
# 18: a commit's web address names its hash (".../commit/daa81697e31a").
PREPARE_VERSION = 18  # a bump that changes the learned model's features goes into `learned_fusion.FEATURE_CHANGES` too


def prepare_key(store: Store, queries: pl.DataFrame, cfg: PipelineConfig, rerank_pool: int | None = None,
                reranker: Reranker | None = None) -> str:
    """Cache key of the expensive stages: the code's `PREPARE_VERSION`, the store's generation, the queries and
    the prepare fields (and the name of a Python reranker, `rerank.provider: python`)."""
    # The queries' metadata is part of them: their dates are the recency priors' reference (`query_values`),
    # so the same text asked on another date must not get the cached date.
    q = queries.select("qid", "text", *(c for c in ("scope", "metadata") if c in queries.columns))
    if "metadata" in q.columns and q.schema["metadata"] != pl.Utf8:  # structs/dicts: hashed as sorted JSON
        q = q.with_columns(pl.col("metadata").map_elements(lambda v: json.dumps(v, sort_keys=True, default=str), return_dtype=pl.Utf8))
    parts = {
        "version": PREPARE_VERSION,
        "generation": store.generation(),
        "queries": sha1(q.write_csv()),
        "config": prepare_settings(cfg),
        "pool": rerank_pool,
        "files": _read_stamps(store, cfg),
    }
    if reranker is not None:  # the key its scores are cached under (`rerank.rerank_scores`)
        parts["reranker"] = getattr(reranker, "cache_key", reranker.name)
    if cfg.retrieval.dense.enabled and cfg.retrieval.dense.index == "hnsw":
        # an index rebuilt with other settings answers differently (approximate): its record is part of the key
        parts["vector_index"] = store.vector_index
    return "prepare:" + sha1(json.dumps(parts, sort_keys=True, default=str))


def _read_stamps(store: Store, cfg: PipelineConfig) -> dict[str, str]:
    """{field: absolute path + fingerprint (names, sizes, mtimes)} of each file or folder a prepare field
    names and prepare reads. The fields hold paths, not contents: a score or expansion file rewritten, a model
    retrained in place, or a relative path read from another folder must not get the old stages' frames."""
    named = {f: v for f, v in read_paths(cfg).items() if stage_of(f) is Stage.PREPARE}  # fusion.model: rescore reads it
    if "retrieval.dense.model" in named:
        named["retrieval.dense.model"] = named["retrieval.dense.model"] or store.embedding_model  # unset: the store's
    out = {}
    for field_, value in named.items():
        p = Path(value).expanduser() if value else None  # a hub id is no path: not stamped
        if p is not None and p.exists():
            out[field_] = f"{p.resolve()}:{path_stamp(p.resolve())}"
    return out


def check_prepared(prep: Prepared, cfg: PipelineConfig) -> None:
    """`rescore` applies only a config's live fields: refuse one whose prepare fields differ from those the
    frames were built with (other lists, depths, index or model), naming each field, instead of re-scoring
    candidates that config would not have retrieved."""
    if prep.settings is None:
        return
    want = prepare_settings(cfg)
    if want == prep.settings:
        return
    # A flag declared `PrepareInput` only adds an input: frames prepared with it on serve a config with it off.
    diff = [f"{p} ({prep.settings.get(p)!r} prepared, {want.get(p)!r} asked)"
            for p in sorted(set(want) | set(prep.settings))
            if want.get(p) != prep.settings.get(p) and not (p in INPUT_FLAGS and prep.settings.get(p) and not want.get(p))]
    if not diff:
        return
    raise InputError(
        f"rescore: the config differs from the prepared frames in prepare field(s) {', '.join(diff)}; these are "
        "read by the expensive stages, so prepare again with this config (toolkit.prepare, or run_pipeline)"
    )


def check_store(store: Store, cfg: PipelineConfig) -> None:
    """A config that names index settings (stemmer, stopwords, compounds, embedding model) runs only on a store built
    with them: BM25 and dense scores depend on the index, which `hrt ingest` builds and the store owns."""
    from .embed import embedder_model_id
    from .store import need_store

    lex, den, have = cfg.retrieval.lexical, cfg.retrieval.dense, need_store(store).settings
    pinned = []
    if lex.enabled and have is not None:
        pinned += [("retrieval.lexical.stemmer", lex.stemmer, have.stemmer, f"--stemmer {lex.stemmer}"),
                   ("retrieval.lexical.stopwords", lex.stopwords, have.stopwords, f"--stopwords {lex.stopwords}"),
                   ("retrieval.lexical.compounds", lex.compounds, have.compounds,
                    "--compounds" if lex.compounds else "--no-compounds")]
    # A local model only: an http provider's model is the name its endpoint serves (the store checks that).
    local = den.provider == "local"
    if (den.enabled or cfg.dedup.near_duplicate_enabled) and local and den.model is not None and store.embedding_model:
        model_id = embedder_model_id(den.model, den.backend)
        pinned.append(("retrieval.dense.model", model_id, store.embedding_model, f"--model {model_id}"))
    for field_, want, got, flag in pinned:
        if want is not None and want != got:
            raise StoreError(
                f"{field_} is {want!r} but {store.path} was built with {got!r}: use a store ingested with "
                f"`hrt ingest {flag}`, or remove {field_} from the config to use the store's own"
            )


def prepare(
    store: Store,
    queries: Queries,
    cfg: PipelineConfig | str,
    *,
    progress: bool = False,
    rerank_pool: int | None = None,
    use_cache: bool = True,
    one_shot: bool = False,
    reranker: Reranker | None = None,
    learned_features: bool | None = None,
) -> Prepared:
    """Run stages 1-5 for all queries, or load them from the store's stage cache. `queries` as in
    `run_pipeline`; returns the `Prepared` frames (query features, variants, every list's candidates, reranker
    scores, ...) that `rescore` turns into results for any config with the same prepare settings.

    `rerank_pool` = list depth whose documents all get reranker scores (default: the config's
    `rerank.top_n`), so that other fusion settings find their top-N already scored. `one_shot`: the caller
    re-scores with `cfg` only (`hrt search`), so inputs no other setting of `cfg` reads are not computed (the
    learning-to-rank features, unless `cfg` fuses with the learned model or router), and neither the stage frames
    nor the query vectors are cached (reranker scores are: a repeated question costs no second paid call).
    `reranker`: your own (`toolkit.rerank.Reranker`: a `name`, the cache key of its scores, and `score(query,
    documents)`), for a config with `rerank.provider: python`; it is then blended as any provider is.
    `learned_features`: whether to compute the learning-to-rank features that the learned fusion method and the
    router read; None: unless `one_shot` and `cfg` reads none. The frames are then cached without them, and a later
    `prepare` that wants them adds them to the cached entry. `run_pipeline`, which re-scores with `cfg` alone, asks
    only when `cfg` reads them (on LoCoMo they took 1.7 s of the default config's 3.05 s prepare).
    """
    cfg = load_config(cfg)
    _check_reranker(cfg, reranker)
    from .interop import queries_frame  # pandas, PyTerrier / BEIR / ir_datasets column names

    # Every input through the same check (user trial X: a polars frame with BEIR's `_id`, integer ids, two
    # queries under one id, merged silently, and an empty text got past a test for a `text` column).
    queries = queries_frame(queries)
    check_store(store, cfg)
    if not one_shot and cfg.retrieval.scope_filter:  # `hrt search --scope` says it its own way (with the scopes there are)
        _warn_lost_scopes(store, queries)
    if cfg.retrieval.lexical.enabled and (note := store.stale_text_once()):
        import warnings

        from .store import StaleTextWarning

        warnings.warn(note, StaleTextWarning, stacklevel=2)
    key = prepare_key(store, queries, cfg, rerank_pool, reranker)
    ltr = learned_features if learned_features is not None else not one_shot or reads_learned_features(cfg)
    if use_cache:
        got = store.get_frames(key)
        if got is not None:
            frames = {name: got.get(name) for name in _PREPARED_FRAMES}
            if frames["exact"] is None:  # cached by a version without the guard's input: derive it now
                frames["exact"] = _exact(store, frames["queries"], frames["candidates"])
            if frames["coverage"] is None:  # ... or without the coverage rule's
                frames["coverage"] = _coverage(store, frames["queries"], frames["candidates"], frames["ltr_features"])
            if "text_hash" not in frames["doc_source"].columns:  # ... or without the content hashes
                frames["doc_source"] = store.doc_sources().select("doc_id", "source", "text_hash")
            prep = Prepared(**frames, timings={"cache_load": 0.0})
            stale = False
            from . import ltr_features

            if ltr and not ltr_features.is_current(prep.ltr_features):  # cached without them, or by an older version
                prep.ltr_features = ltr_features.candidate_features(store, prep.queries, prep.candidates, prep.features)
                stale = True
            elif not ltr_features.is_current(prep.ltr_features):  # an older version's: never read as this one's
                prep.ltr_features = None
            if prep.doc_values is None:  # cached before typed metadata existed: read the values now
                prep.doc_values = _doc_values(store, prep.candidates)
                stale = True
            if prep.query_values is None:
                prep.query_values = query_values(prep.queries)
                stale = True
            if prep.chunk_copies is None and cfg.retrieval.level == "chunk":  # cached before chunk collapsing
                prep.chunk_copies = store.chunk_copies()
                stale = True
            if prep.vectors is None:
                prep.vectors = _vectors(store, prep.candidates, cfg)
            if stale and not store.read_only and not one_shot:
                store.put_frames(key, {name: getattr(prep, name) for name in _CACHED_FRAMES})
            prep.settings, prep.index = prepare_settings(cfg), store.index_record()
            return prep
    prep = _prepare(store, queries, cfg, progress=progress, rerank_pool=rerank_pool, ltr=ltr, one_shot=one_shot,
                    reranker=reranker)
    prep.settings, prep.index = prepare_settings(cfg), store.index_record()
    providers.warn_fallbacks(prep)
    # A provider outage is not cached: the next run asks again instead of replaying the fallback.
    if use_cache and not one_shot and not store.read_only and not providers.degraded(prep):
        store.put_frames(key, {name: getattr(prep, name) for name in _CACHED_FRAMES})
    return prep


def _vectors(store: Store, cands: pl.DataFrame | None, cfg: PipelineConfig) -> pl.DataFrame | None:
    """[chunk_id, vec] of the candidates when near-duplicate dedup is on (None otherwise). `default` collapses
    near-copies; on a store without vectors (a lexical config over a --no-embed ingest) it says so and removes none,
    as it would for candidates that have no vector, instead of failing."""
    if not cfg.dedup.near_duplicate_enabled or cands is None or not len(cands):
        return None
    vectors = (store.chunk_vectors(cands["chunk_id"].unique().to_list()) if store.has_embeddings()
               else pl.DataFrame(schema={"chunk_id": pl.Utf8, "vec": pl.List(pl.Float32)}))
    if not len(vectors):
        warnings.warn(f"near-duplicate dedup (dedup.near_duplicate_enabled) compares the candidates' vectors, and "
                      f"{store.path} holds none for them (ingested with --no-embed?): no result is removed as a "
                      "near-duplicate", UserWarning, stacklevel=4)
    return vectors


def reads_learned_features(cfg: PipelineConfig) -> bool:
    """Whether re-scoring with `cfg` reads the learning-to-rank features: the learned fusion method and the router."""
    return cfg.fusion.method == "learned" or bool(cfg.fusion.router)


def _check_reranker(cfg: PipelineConfig, reranker: Any) -> None:
    """A Python reranker goes with `rerank.provider: python`, and only with it: scores blended under a config that
    says `none` were a run the config did not describe (user trial AZ)."""
    if cfg.rerank.provider == "python" and reranker is None:
        raise InputError("rerank.provider is python: pass the reranker object (reranker= to prepare, run_pipeline, Session "
                         "or Lab); the CLI cannot take one: use cross-encoder, http or file there")
    if reranker is not None:
        if cfg.rerank.provider != "python":
            raise InputError(f"a reranker object was given but rerank.provider is {cfg.rerank.provider!r}: set "
                             "rerank.provider: python to blend its scores")
        if not isinstance(getattr(reranker, "name", None), str) or not callable(getattr(reranker, "score", None)):
            raise InputError(f"reranker {type(reranker).__name__}: needs a `name` string (the cache key of its scores) and "
                             "a method `score(query, documents) -> list of floats` (toolkit.rerank.Reranker)")


def _prepare(
    store: Store, queries: pl.DataFrame, cfg: PipelineConfig, *, progress: bool, rerank_pool: int | None, ltr: bool = True,
    one_shot: bool = False, reranker: Reranker | None = None,
) -> Prepared:
    t: dict[str, float] = {}
    t0 = time.perf_counter()
    if "scope" not in queries.columns:
        queries = queries.with_columns(pl.lit(None, pl.Utf8).alias("scope"))
    feats = features.query_features(queries, cfg.routing)
    t["features"] = time.perf_counter() - t0

    lex_args, dense_args = _retrieval_args(cfg)
    if dense_args is not None:  # a one-shot search leaves no query vector in the store (user trial AK: ~3 KB per query)
        dense_args["cache_queries"] = not one_shot
    level, scope_filter = cfg.retrieval.level, cfg.retrieval.scope_filter
    filters = dict(cfg.retrieval.filters) or None
    skip = feats.select("qid", "skip_lexical")
    orig = queries.select("qid", pl.lit("orig").alias("variant"), pl.lit("orig").alias("kind"), "text")

    # Expansion, unless a strong lexical signal (or routing) says the original query is enough.
    t0 = time.perf_counter()
    expander = None
    if cfg.expansion.provider != "none":
        from . import expansion

        expander = expansion.make_expander(**_expansion_kwargs(cfg))
    if expander is not None:
        skip_exp = feats.select("qid", "skip_expansion")
        if cfg.expansion.strong_signal_skip and lex_args is not None:
            first = retrieve(store, queries, orig, lexical=lex_args, dense=None, level=level, scope_filter=scope_filter,
                             filters=filters)
            strong = features.strong_signal(first, cfg.expansion)
            skip_exp = skip_exp.join(strong.select("qid", "strong_signal"), on="qid", how="left").select(
                "qid", (pl.col("skip_expansion") | pl.col("strong_signal").fill_null(False)).alias("skip_expansion")
            )
        variants, exp_status = expansion.variants(
            queries.select("qid", "text"),
            expander,
            max_lex=cfg.expansion.max_lex,
            max_vec=cfg.expansion.max_vec,
            max_hyde=cfg.expansion.max_hyde,
            skip=skip_exp,
            budget_s=cfg.expansion.budget_s if cfg.expansion.provider == "http" else None,
        )
    else:
        variants = orig
        exp_status = queries.select("qid", pl.lit("none").alias("status"), pl.lit(None, pl.Utf8).alias("error"))
    t["expansion"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    kw = {"level": level, "scope_filter": scope_filter, "filters": filters, "skip_lexical": skip if cfg.routing.enabled else None,
          "progress": progress}
    embed_status = None
    try:
        cands = retrieve(store, queries, variants, lexical=lex_args, dense=dense_args, **kw)
    except rerank.ProviderError as e:  # an http embedder failed: guarded like the reranker when BM25 can stand alone
        if lex_args is None:
            raise
        cands = retrieve(store, queries, variants, lexical=lex_args, dense=None, **kw)
        embed_status = queries.select("qid", pl.lit("fallback").alias("status"), pl.lit(str(e)).alias("error"))
    named = None
    if lex_args is not None:  # routing never skips BM25 for a query with an identifier (not conversational)
        named = _named(store, queries if scope_filter else queries.with_columns(pl.lit(None, pl.Utf8).alias("scope")), filters)
        cands = name_first(cands, named, lex_args["top_k"]) if len(named) else cands
    t["retrieve"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    # A one-shot search reads its candidates' sources only (the whole table, per search, grows with the store).
    ids = cands["doc_id"].unique().to_list() if one_shot and cands is not None else None
    doc_source = store.doc_sources(ids).select("doc_id", "source", "text_hash")
    rr_scores, rr_status = _rerank(store, queries, cands, cfg, pool=rerank_pool, progress=progress, reranker=reranker)
    t["rerank"] = time.perf_counter() - t0

    vectors = _vectors(store, cands, cfg)
    t0 = time.perf_counter()
    ltr_frame = None
    if ltr:
        from . import ltr_features

        ltr_frame = ltr_features.candidate_features(store, queries, cands, feats)
    t["ltr_features"] = time.perf_counter() - t0
    # A one-shot search (`hrt search`: no other setting of `cfg` re-scores these frames) reads the priors' inputs
    # and the guard's only when `cfg` uses them: ~10 ms of a cold lexical search otherwise.
    t0 = time.perf_counter()
    doc_vals = (_doc_values(store, cands) if not one_shot or priors_stage.active(cfg.priors)
                else values_frame([], "doc_id"))
    q_vals = query_values(queries)
    t["prior_inputs"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    exact = (_exact(store, queries, cands, named) if not one_shot or cfg.guard.exact_token
             else pl.DataFrame(schema=guard_stage.EXACT_SCHEMA))
    t["exact"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    # Needed only where the rule can act: BM25's list exists (a one-shot search: and the rule acts, `coverage_acts`).
    wanted = cfg.retrieval.lexical.enabled and (not one_shot or coverage_acts(cfg))
    coverage = (_coverage(store, queries, cands, ltr_frame) if wanted
                else pl.DataFrame(schema=guard_stage.COVERAGE_SCHEMA))
    t["coverage"] = time.perf_counter() - t0
    return Prepared(queries, feats, variants, exp_status, cands, rr_scores, rr_status, doc_source, vectors, ltr_frame,
                    exact=exact, coverage=coverage, timings=t, doc_values=doc_vals, query_values=q_vals, embed_status=embed_status,
                    chunk_copies=store.chunk_copies() if cfg.retrieval.level == "chunk" else None)


def _doc_values(store: Store, cands: pl.DataFrame | None) -> pl.DataFrame:
    """Typed metadata of the candidate documents (every field: which one a prior reads is a live setting)."""
    ids = cands["doc_id"].unique().to_list() if cands is not None and len(cands) else []
    return store.doc_values(ids)


def _warn_lost_scopes(store: Store, queries: pl.DataFrame) -> None:
    """Warn when queries ask for scopes no stored document has: they get no result, which read like a bad retriever
    (user trial BX: LoCoMo's queries against another store came back empty through the API; only `hrt run` said why)."""
    if "scope" not in queries.columns or not queries["scope"].drop_nulls().len():
        return
    lost = store.lost_scopes(queries["scope"].drop_nulls().unique().to_list())
    if lost:
        import warnings

        n = queries.filter(pl.col("scope").is_in(lost)).height
        warnings.warn(f"{n} quer{'y asks' if n == 1 else 'ies ask'} for scope(s) no stored document has (e.g. "
                      f"{', '.join(map(repr, lost[:3]))}): they get no results; the store's scopes are the folders under "
                      f"the ingested folder (`hrt info --store {store.path}`)", UserWarning, stacklevel=3)


def coverage_stands_aside(cfg: PipelineConfig) -> bool:
    """Whether `guard.coverage_first` (and `guard.dense_max_rank`, measured likewise) stands aside, on or off: while a reranker's scores shape the order (it counts
    words, the reranker has read the query and the documents whole) and while priors re-weight (a recency or priority
    demotion is the user's say), as it was measured without either; the exact-token guard does not stand aside: an
    identifier is exact. Asked of the config's inert-settings rules, which declare it."""
    return STANDS_ASIDE[0] in inert_settings(cfg, STANDS_ASIDE[:1])


def coverage_acts(cfg: PipelineConfig) -> bool:
    """Whether `guard.coverage_first` is on and acts (`coverage_stands_aside`)."""
    return cfg.guard.coverage_first and not coverage_stands_aside(cfg)


def dense_acts(cfg: PipelineConfig) -> bool:
    """Whether `guard.dense_max_rank` is set and acts (`coverage_stands_aside`)."""
    return cfg.guard.dense_max_rank > 0 and not coverage_stands_aside(cfg)


def _coverage(store: Store, queries: pl.DataFrame, cands: pl.DataFrame, ltr: pl.DataFrame | None = None) -> pl.DataFrame:
    """The coverage rule's input: how many query terms each candidate holds. From the learned features when they were
    computed (their `coverage` is this count over `q_terms`, so the count comes back exactly), else from the FTS
    tables: a second pass over the postings cost `make test`'s prepares about 18 s."""
    from .ltr_features import term_coverage

    if ltr is not None and len(ltr) and {"coverage", "q_terms"} <= set(ltr.columns):
        return (ltr.select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8),
                           (pl.col("coverage") * pl.col("q_terms")).round().cast(pl.Int64).alias("terms"))
                .unique(["qid", "doc_id"]).sort("qid", "doc_id"))
    return term_coverage(store, queries, cands)


def _named(store: Store, queries: pl.DataFrame, filters: dict | None) -> pl.DataFrame:
    """Which document each query's identifiers name by its id (`Store.named_documents`)."""
    rows = [(q, t, sc, guard_stage.short_hash(t))
            for q, text, sc in zip(queries["qid"].cast(pl.Utf8), queries["text"], queries["scope"], strict=True)
            for t in guard_stage.id_tokens(text)]
    schema = {"qid": pl.Utf8, "token": pl.Utf8, "scope": pl.Utf8, "short": pl.Boolean}
    return store.named_documents(pl.DataFrame(rows, schema=schema, orient="row"), filters)


def _exact(store: Store, queries: pl.DataFrame, cands: pl.DataFrame, named: pl.DataFrame | None = None) -> pl.DataFrame:
    """The exact-token guard's input, for the candidates of queries that carry an identifier (`named`: see `_named`)."""
    qs = queries.filter(pl.Series([bool(guard_stage.identifier_tokens(t)) for t in queries["text"].to_list()], dtype=pl.Boolean))
    if not len(qs) or not len(cands):
        return pl.DataFrame(schema=guard_stage.EXACT_SCHEMA)
    mine = cands.join(qs.select("qid"), on="qid", how="semi")
    return guard_stage.exact_matches(qs, mine, store.documents(mine["doc_id"].unique().to_list()), named)


def _expansion_kwargs(cfg: PipelineConfig) -> dict:
    e = cfg.expansion
    return {"provider": e.provider, "path": e.path, "url": e.url, "model": e.model, "api_key_env": e.api_key_env, "timeout_s": e.timeout_s}


def _rerank(
    store: Store,
    queries: pl.DataFrame,
    cands: pl.DataFrame,
    cfg: PipelineConfig,
    *,
    pool: int | None,
    progress: bool,
    reranker: Reranker | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    empty = pl.DataFrame(schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "rerank_score": pl.Float64})
    rc = cfg.rerank
    if rc.provider == "none" or not len(cands):
        status = queries.select("qid", pl.lit("skipped").alias("status"), pl.lit("no reranker configured").alias("error"))
        return empty, status
    own = reranker is not None  # the caller's (`rerank.provider: python`): theirs to close
    if not own:
        reranker = rerank.make_reranker(
            rc.provider, model=rc.model, url=rc.url, api_key_env=rc.api_key_env, timeout_s=rc.timeout_s, retries=rc.retries,
            path=rc.path, http_batch=rc.batch_size, max_chars=rc.max_chars,
        )
    pool_docs = rerank_pool(cands, rc.top_n, pool)
    # Each document is represented by its chunk with the most query-term hits, read with its title (the
    # passage format `hrt train-reranker` trains on, and the body the store embeds).
    pairs = rerank.doc_passages(store.chunks(), queries, pool_docs)
    budget = rc.budget_s if rc.provider == "http" else None  # a local model's time is work, not waiting
    try:
        return rerank.rerank_scores(pairs, reranker, cache=store, progress=progress, budget_s=budget)
    finally:  # its connection: a service preparing per request left one open socket per search (user trial AN)
        if not own and (close := getattr(reranker, "close", None)) is not None:
            close()


def rerank_pool(cands: pl.DataFrame, top_n: int, depth: int | None = None) -> pl.DataFrame:
    """[qid, doc_id] a reranker is asked about: every list's top `depth` (default top_n) plus the top_n of
    the default fusion (documents that several lists rank fairly high).

    It reads no fusion setting, so the scores `prepare` caches serve every fusion the lab or the tuner tries
    (a document some setting fuses into its top_n outside this pool is flagged `rerank_missing`).
    """
    dflt = FusionConfig()
    fused = fusion.fuse(cands, fusion.list_weights(cands, None, dflt), dflt).filter(pl.col("rank") <= top_n)
    return pl.concat([fused.select("qid", "doc_id"), cands.filter(pl.col("rank") <= (depth or top_n)).select("qid", "doc_id")]).unique()


def rescore(prep: Prepared, cfg: PipelineConfig | str, *, n: int | None = None, trace: bool = True, now: datetime | None = None) -> Result:
    """Run stages 6-9 on cached frames: fusion, guarded blending, priors, dedup, thresholds. All queries at once.
    `n`: results kept per query (default max(output.n, 100)); a caller that reads only the first k places
    (metrics at a cutoff) passes n >= k and gets the same first k places with less work per change (with
    near-duplicate dedup on, how deep duplicates are compared follows n: max(3n, 50) places).
    `now` (naive UTC, default the clock; an aware time is converted) is the recency prior's reference for queries
    without a date. `prep` is a snapshot of the store when it was prepared: after a write (an ingest, a delete, a
    memory's new date) prepare again, as `Session.refresh` does; `rescore` has no store to compare with."""
    cfg = load_config(cfg)  # a preset name or file too; a config is returned as is
    check_prepared(prep, cfg)
    t: dict[str, float] = {}
    n = count_arg(n, "n") or max(cfg.output.n, 100)
    t0 = time.perf_counter()
    cands = prep.candidates if len(prep.candidates) else empty_candidates()
    lists = prep.derived("lists", (cands, prep.features), lambda: fusion.list_table(cands, prep.features))
    # Each stage through `prep.staged`: a slider in a later stage reuses the earlier stages' last frames.
    stage = prep.staged
    weights = stage("weights", fusion.list_weights, cands, prep.features, cfg.fusion, cfg.routing, lists=lists)
    if cfg.fusion.router:
        from . import router

        weights = stage("routed", router.routed_weights, weights, lists, router.p_for(prep, cfg.fusion.model))
    route = None
    learned = cfg.fusion.method == "learned"
    if cfg.adapt.dense_gap and not learned:  # (the learned model weighs no list: its route is read after the fact)
        gaps = prep.derived("dense_gap", (cands,), lambda: adapt_stage.dense_gap(cands))
        model = (prep.index or {}).get("embedding_model")
        unread = prep.derived(f"unread:{model}", (prep.queries,), lambda: adapt_stage.unread_queries(prep.queries, model))
        route = stage("routes", adapt_stage.routes, gaps, cfg.adapt, unread)
        weights = stage("adapted", adapt_stage.adapt_weights, weights, route)
    idx = prep.derived("fusion_index", (cands,), lambda: fusion.index(cands)) if len(cands) else None
    if learned:
        from . import learned_fusion
    dense_on, cover_on = dense_acts(cfg), coverage_acts(cfg)  # (each asks the inert-settings rules: once a change)
    keep = _blend_keep(cfg, n, cover_on)
    # Without a trace nothing reads the fused list past the places the blend keeps (reranked rows lie in top_n).
    depth = max(keep, cfg.rerank.top_n) if keep is not None and not trace else None
    places = None
    if not trace and not learned and idx is not None:  # nothing reads the fused frame: the places matrix stands in
        lay = prep.derived("fusion_layout", (cands,), lambda: fusion.layout(idx))
        places = stage("places", fusion.places, idx, lay, weights, cfg.fusion, depth)
    if places is not None:
        fused = None
    else:
        fused = (learned_fusion.fuse(prep, cfg.fusion.model, idx)[0] if learned
                 else stage("fuse", fusion.fuse, cands, weights, cfg.fusion, idx=idx, depth=depth))
    t["fuse"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    rs, lookup = prep.rerank_scores, None
    per_doc = rs is not None and len(rs) > 0
    if per_doc:
        rs = prep.derived("rerank_by_doc", (rs,), lambda: blend_stage.rerank_by_doc(prep.rerank_scores))
        if idx is not None:
            pairs = prep.derived("rerank_lookup", (rs, cands), lambda: fusion.pair_lookup(idx, rs, "rerank_score"))
            by_row = (prep.derived("rerank_by_row", (rs, fused), lambda: fusion.aligned_values(fused, pairs))
                      if learned and fused is not None and "_grp" in fused.columns
                      else prep.derived("rerank_grouped", (rs, cands), lambda: fusion.grouped_values(idx, pairs)))
            lookup = (*pairs, by_row)
    with_priors = priors_stage.active(cfg.priors)
    if places is not None:
        blended = stage("blend", blend_stage.blend_places, places, lookup[2] if lookup is not None else None, cfg.rerank, keep=keep)
    else:
        blended = stage("blend", blend_stage.blend, fused, rs, cfg.rerank, per_doc=per_doc, lookup=lookup, keep=keep)
    t["blend"] = time.perf_counter() - t0

    ranked, prior = blended, None
    if with_priors:
        t0 = time.perf_counter()
        # (the clock read here, not in the stage: its reference time is one of its inputs)
        at = now or priors_stage.reference_time(cfg.priors) or priors_stage.utc_now()
        ranked = prior = stage("priors", priors_stage.apply_priors, blended, prep.doc_values, prep.query_values, cfg.priors, now=at)
        _warn_priors(prep, cfg)
        t["priors"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    if dense_on:  # first: the word rules below have the last say
        firsts = prep.derived("dense_firsts", (cands,), lambda: guard_stage.dense_firsts(cands))
        ranked = stage("keep_dense", guard_stage.keep_dense, ranked, firsts, cfg.guard.dense_max_rank)
    if cover_on:
        targets = prep.derived("coverage_targets", (cands, prep.coverage), lambda: guard_stage.coverage_targets(cands, prep.coverage))
        ranked = stage("coverage_first", guard_stage.coverage_first, ranked, targets, True)
    ranked, guard_status = stage("keep_exact", guard_stage.keep_exact, ranked, cands, prep.exact, cfg.guard)
    t["guard"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    sources = (prep.derived("source_codes", (cands, prep.doc_source), lambda: dedup_stage.source_codes(idx.docs, prep.doc_source))
               if idx is not None else None)
    edges = None
    if cfg.dedup.near_duplicate_enabled and prep.vectors is not None:  # the vectors' products: once per prepared set
        floor = dedup_stage.edge_floor(cfg.dedup.near_duplicate_threshold)
        edges = prep.derived(f"near_edges:{floor}", (prep.vectors, cands), lambda: dedup_stage.near_edges(prep.vectors, cands, floor))
    copies = prep.chunk_copies if cfg.retrieval.level == "chunk" else None
    # Its first half reads no threshold: kept while only the near-duplicate threshold or the source limit moves.
    collapsed = stage("collapse", dedup_stage.collapse, ranked, prep.doc_source, identical=cfg.dedup.identical_enabled,
                      others=dedup_stage.others_on(cfg.dedup), n=n, chunk_copies=copies, sources=sources)
    kept, removed = stage("dedup", dedup_stage.dedup, ranked, prep.doc_source, cfg.dedup, vectors=prep.vectors, n=n, sources=sources,
                          edges=edges, chunk_copies=copies, collapsed=collapsed)
    t["dedup"] = time.perf_counter() - t0

    t0 = time.perf_counter()
    if learned:
        kept = learned_fusion.attach_prob(kept)
        if cfg.threshold.min_prob > 0 and len(kept) and kept["score_prob"].null_count() == len(kept):
            learned_fusion.check_min_prob(cfg.fusion.model, cfg.threshold.min_prob)  # the error names the file
    lexical = cfg.retrieval.lexical.enabled
    evidence = prep.derived(f"evidence:{lexical}", (cands, prep.features),
                            lambda: threshold.list_evidence(cands, prep.features, lexical))
    final, per_query = threshold.apply_threshold(kept, cfg.threshold, n=cfg.output.n, evidence=evidence,
                                                 rank_only=cfg.fusion.method == "rrf", low_spread=low_spread(cfg))
    final = final.drop("_q", strict=False)  # fusion's query code: for the stages, not the reader
    per_query = per_query.join(guard_status, on="qid", how="left") if cfg.guard.exact_token else per_query
    # Which queries the coverage and dense rules changed (the lab's failure panel credits them).
    for acts, flag in ((cover_on, guard_stage.COVER_FLAG), (dense_on, guard_stage.DENSE_FLAG)):
        if acts:
            lifted = final.filter(pl.col("flags").list.contains(flag))["qid"].cast(pl.Utf8).unique()
            per_query = per_query.with_columns(pl.col("qid").cast(pl.Utf8).is_in(lifted.implode()).alias(flag))
    if learned and cfg.retrieval.lexical.enabled and cfg.retrieval.dense.enabled:
        firsts = prep.derived("list_firsts", (cands,), lambda: adapt_stage.list_firsts(cands))
        route = adapt_stage.followed_routes(final, firsts, per_query["qid"])
    if route is not None:  # "bm25-led" said of a query BM25 found nothing for would mislead: it went by dense alone
        per_query = per_query.join(route, on="qid", how="left").with_columns(
            pl.when(pl.col("no_term_match")).then(pl.lit("dense-only")).otherwise(pl.col("route")).alias("route"))
    t["threshold"] = time.perf_counter() - t0
    # Provider status (reranker / expander fallbacks) travels with the result: per-query columns and flags.
    dense = cfg.retrieval.dense.enabled
    status = prep.derived(f"providers:{dense}", (prep.queries, prep.rerank_status, prep.expansion_status, prep.embed_status),
                          lambda: providers.query_status(prep.queries, prep.rerank_status, prep.expansion_status, dense=dense,
                                                         embed_status=prep.embed_status))
    final, per_query = providers.annotate(final, per_query, status)

    if trace:  # the lists' rows do not depend on the config: built once per prepared set (306k rows on LoCoMo: 6 ms)
        listed = prep.derived("trace_lists", (cands,), lambda: _trace_rows(cands, pl.lit("retrieve:") + pl.col("list_id")))
        blocks = {"lists": listed, "fuse": stage("trace:fuse", _trace_rows, fused, "fuse"),
                  "blend": stage("trace:blend", _trace_rows, blended, "blend")}
        if prior is not None:
            blocks["priors"] = stage("trace:priors", _prior_rows, prior)
        blocks["final"] = _trace_rows(final, "final")
        tr = pl.concat(list(blocks.values()))
    else:
        tr, blocks = pl.DataFrame(schema=TRACE_SCHEMA), {}
    return Result(final=final, trace=tr, per_query=per_query, removed=removed, timings=t, n=cfg.output.n, blocks=blocks)


def _warn_priors(prep: Prepared, cfg: PipelineConfig) -> None:
    """Warn when the candidates carry priority values the map lacks: they count as
    factor 1, the lowest tier under agent-memory's map ("high", "urgent" next to P0-P3; user trial N); and when a
    recency or use field gives nothing to read (`priors.unusable_fields`, user trial AF)."""
    p = cfg.priors
    key = f"unusable:{p.recency_field}:{p.use_field}"
    for line in prep.derived(key, (prep.doc_values,), lambda: priors_stage.unusable_fields(prep.doc_values, p)):
        warnings.warn(line, UserWarning, stacklevel=3)
    if p.priority_field is None:
        return
    key = f"unmapped:{p.priority_field}:{sorted(p.priority_map)}"
    odd = prep.derived(key, (prep.doc_values,), lambda: priors_stage.unmapped_priorities(prep.doc_values, p))
    if odd:  # Python's warning registry shows each distinct message once per place
        shown = ", ".join(repr(v) for v in odd[:5]) + (f" and {len(odd) - 5} more" if len(odd) > 5 else "")
        warnings.warn(f"priors: {p.priority_field} values {shown} are not in priors.priority_map "
                      f"({', '.join(p.priority_map)}): they count as factor 1", UserWarning, stacklevel=3)


def _blend_keep(cfg: PipelineConfig, n: int, cover_on: bool) -> int | None:
    """How many places of each query the blend must return (None: all). Without dedup or the exact-token guard
    nothing below place n can reach the final list. Priors can lift any row, unless they re-weight only the blended top_n (then the
    first max(n, top_n) suffice)."""
    d = cfg.dedup
    if d.source_enabled or d.near_duplicate_enabled or d.identical_enabled:
        return None
    if cfg.guard.exact_token or cover_on:  # (`coverage_acts`) the guard can lift a document from any place (BM25's
        return None  # first `depth`, or its first document, are not the fused list's first)
    if priors_stage.active(cfg.priors):
        return max(n, cfg.priors.top_n) if cfg.priors.top_n is not None else None
    return n


def _trace_rows(df: pl.DataFrame, stage: pl.Expr | str) -> pl.DataFrame:
    """One stage's rows of the trace (TRACE_SCHEMA's columns); `stage` its name, or an expression of the rows."""
    flags = pl.col("flags") if "flags" in df.columns else pl.lit([], pl.List(pl.Utf8))
    stage = pl.lit(stage) if isinstance(stage, str) else stage
    return df.select(
        pl.col("qid"), pl.col("doc_id"), pl.col("chunk_id"), stage.alias("stage"), pl.col("rank").cast(pl.Int64),
        pl.col("score").cast(pl.Float64), flags.cast(pl.List(pl.Utf8)).alias("flags"),
    )


def _prior_rows(prior: pl.DataFrame) -> pl.DataFrame:
    """The priors stage's rows of the trace, flagged with the factors that moved each row."""
    return _trace_rows(prior.with_columns(priors_stage.factor_flags(prior).alias("flags")), "priors")


def run_pipeline(
    store: Store, queries: Queries, cfg: PipelineConfig | str, *, progress: bool = False, now: datetime | None = None,
    one_shot: bool = False, reranker: Reranker | None = None,
) -> Result:
    """Full run: `prepare`, then `rescore`. `queries`: a polars or pandas frame [qid, text, scope?, metadata?]
    (PyTerrier, BEIR and ir_datasets column names too; see `interop.queries_frame`) or a {qid: text} dict; ids
    must be unique and texts non-empty. `cfg`: a config, or a preset name or config file. `now`: the recency
    prior's reference time (default: the clock, or the config's `priors.as_of`). `one_shot=True`: a service
    answering one search (`prepare(one_shot=True)`): no stage frames or query vectors are cached in the store, and only what `cfg` reads is
    computed (user trial AB: a cached search took twice as long, and wrote ~100 KB of frames per distinct query).
    `reranker`: a Python reranker of yours, for `rerank.provider: python` (see `prepare`).

    Returns a `Result`: `final` (the ranked results per query, up to max(output.n, 100) places: qid, rank, doc_id,
    chunk_id, score, flags, ...; `shown()`: the first output.n of each query, what `hrt search` prints),
    `per_query` (notes per query: n_results, spread, low_confidence, route, ...), `trace` (every candidate
    through every stage, for the panels), `removed` (what dedup dropped and why), and `run(depth)` (the
    [qid, doc_id, rank, score] run that `evaluate` and `write_run` take)."""
    cfg = load_config(cfg)
    prep = prepare(store, queries, cfg, progress=progress, one_shot=one_shot, reranker=reranker,
                   learned_features=reads_learned_features(cfg))
    res = rescore(prep, cfg, now=now)
    return replace(res, timings={**prep.timings, **res.timings})
