"""Export a tuned pipeline as complete requests for other engines, and say plainly what does not carry over.

Per engine, what a developer sends (placeholders `{{query}}`, `{{query_vector}}`, `{{index}}` to fill in):

- OpenSearch: the search-pipeline body (`normalization-processor` or `score-ranker-processor`) and the
  `hybrid` query body that runs through it, plus an index mapping whose text analyzer follows the config's
  stemmer and stopwords.
- Elasticsearch: the `_search` body with the retriever tree (`rrf` or `linear` over `standard` + `knn`).
- Weaviate: the hybrid query (query, alpha, fusion type, properties, vector, limit) as the v4 Python
  client's `collection.query.hybrid(...)` takes it, and the same as GraphQL.
- LanceDB: a runnable Python module: a `Reranker` subclass that fuses exactly as the toolkit does
  (weighted RRF, or min-max / z-score convex) and a `search(table, text, vector)` function. The
  deprecated `LinearCombinationReranker` is not used.

A single-retriever config (BM25 only or dense only) is exported as the engine's plain query of that one
retriever, with only the mapping it uses: no fusion, no zero-weight leg.

Each export states the minimum engine version its features need and an analyzer note: the toolkit's BM25
(stemming, stopwords, technical-token splitting) is not what a plain `match` on a default analyzer does.
The bodies are checked in tests through the engines' own Python clients and published schemas. Engine
shapes are plain dicts: the toolkit does not depend on any engine client.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, get_args

import yaml

from .config import PipelineConfig, load_config, save_config
from .errors import InputError
from .files import write_text_atomic
from .store import Store

# `Store` is imported at run time, not only for a checker: `typing.get_type_hints` resolves the public signatures then
# (user trial BP: NameError, which broke beartype- and FastAPI-style validation).

Engine = Literal["toolkit", "opensearch", "elasticsearch", "weaviate", "lancedb"]
ENGINES: tuple[str, ...] = get_args(Engine)
# What the toolkit indexes for BM25 and embeds (`chunking.chunk_body`): an engine record must hold the same.
TEXT_NOTE = ("fill `text` with the chunk's document title, a newline, then the chunk's text (what the toolkit's BM25 "
             "indexes; a document without a title: the text alone), and compute `embedding` from that same string")
KNN_NOTE = ("the engine's kNN search is approximate (HNSW); the toolkit's dense search is exact unless "
            "retrieval.dense.index is hnsw, so the dense list can differ")
TEXT_FIELD, VECTOR_FIELD = "text", "embedding"
_DIMS = {"all-MiniLM-L6-v2": 384, "sentence-transformers/all-MiniLM-L6-v2": 384}


@dataclass
class ExportResult:
    engine: str
    payload: dict[str, Any] | str
    not_carried: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)
    min_version: str = ""
    analyzer_note: str = ""


def _weights(cfg: PipelineConfig) -> tuple[float, float]:
    """(lexical, dense) weight of each list as fusion applies it (convex: times 1 - alpha / alpha); 0 for a list
    that is off."""
    f, r = cfg.fusion, cfg.retrieval
    lex = (f.lexical_weight * ((1 - f.alpha) if f.method == "convex" else 1.0)) if r.lexical.enabled else 0.0
    den = (f.dense_weight * (f.alpha if f.method == "convex" else 1.0)) if r.dense.enabled else 0.0
    return lex, den


def _shares(cfg: PipelineConfig) -> tuple[float, float]:
    """(lexical, dense) weights as shares summing to 1, as engines take them."""
    lex, den = _weights(cfg)
    tot = lex + den
    return (0.5, 0.5) if tot <= 0 else (round(lex / tot, 6), round(den / tot, 6))


def _searched(cfg: PipelineConfig) -> tuple[bool, bool]:
    """(BM25, dense) lists the export searches: fusion drops a list of weight 0, so an export keeps no such leg
    (it would only raise the engine version a weighted fusion needs). Convex alpha does not drop a list: its
    documents still enter the fused list."""
    f, r = cfg.fusion, cfg.retrieval
    lex, den = r.lexical.enabled and f.lexical_weight > 0, r.dense.enabled and f.dense_weight > 0
    return (lex, den) if lex or den else (r.lexical.enabled, r.dense.enabled)


def _hybrid(cfg: PipelineConfig) -> bool:
    return all(_searched(cfg))


def _not_carried(cfg: PipelineConfig, engine: str) -> list[str]:
    """Active stages of `cfg` that `engine` cannot express."""
    if engine == "toolkit":
        return []
    f, out = cfg.fusion, []
    hybrid = _hybrid(cfg)
    if f.method == "learned":
        out.append("learned fusion (LightGBM model over toolkit features): exported as plain RRF")
    if _searched(cfg)[0]:
        out.append("a document named by its id in the query (the id, or a short hash that starts it) put first in BM25's "
                   "list: the engine searches the text only")
    if getattr(f, "router", False):
        out.append("learned per-query router weights (BM25 vs dense): exported as the fixed weights")
    if hybrid and f.method == "rrf" and any(b > 0 for _, b in f.rank_bonus):
        out.append("top-rank bonus")
    if cfg.expansion.provider != "none":
        out += ["query expansion and original-vs-expansion list weights", "strong-signal expansion skip"]
    if cfg.rerank.provider != "none" and cfg.rerank.blend == "replace":
        out.append(f"reranking of the top {cfg.rerank.top_n} ({cfg.rerank.provider}, its order replaces the fused one)")
    elif cfg.rerank.provider != "none" and cfg.rerank.blend != "none":
        out.append(f"guarded reranking (top {cfg.rerank.top_n}, blend '{cfg.rerank.blend}' buckets {cfg.rerank.buckets})")
    if _bm25_tuned(cfg) and engine in ("weaviate", "lancedb"):
        lx = cfg.retrieval.lexical
        out.append(f"BM25 k1={lx.k1}, b={lx.b} (the engine's defaults are k1 {ENGINE_BM25['k1']}, b {ENGINE_BM25['b']}"
                   + (": set invertedIndexConfig.bm25 on the collection)" if engine == "weaviate" else ")"))
    if hybrid and cfg.adapt.dense_gap:
        out.append(f"per-query dense weight from the dense list's score gap (adapt, scale {cfg.adapt.gap_scale}): "
                   "exported as the fixed list weights")
    if hybrid and cfg.guard.exact_token:
        out.append(f"exact-token guard (BM25's verbatim hit of a query identifier kept in the top {cfg.guard.max_rank}"
                   + (", first when no other candidate holds the identifier)" if cfg.guard.sole_first else ")"))
    if hybrid and cfg.guard.coverage_first:
        out.append("coverage rule (BM25's first document first when it holds more of the query's words than any other candidate)")
    if hybrid and cfg.guard.dense_max_rank:
        out.append(f"dense rule (dense search's first document kept in the top {cfg.guard.dense_max_rank})")
    if cfg.dedup.identical_enabled:
        out.append("byte-identical documents collapsed into one result (also_in): the engine returns every copy")
    if cfg.threshold.min_prob > 0:
        out.append(f"min_prob threshold {cfg.threshold.min_prob} (calibrated probability of relevance)")
    if cfg.dedup.source_enabled:
        out.append(f"source dedup (max {cfg.dedup.max_per_source} per source, fill)")
    if cfg.dedup.near_duplicate_enabled:
        out.append(f"near-duplicate dedup (cosine >= {cfg.dedup.near_duplicate_threshold})")
    if any(x is not None for x in (cfg.priors.recency_field, cfg.priors.priority_field, cfg.priors.use_field)):
        out.append("document priors (recency / priority / use re-weighting after blending)")
    if cfg.routing.enabled:
        out.append("query routing (conversational / technical)")
    if cfg.threshold.min_score > 0:
        out.append(f"min_score threshold {cfg.threshold.min_score}")
    if cfg.retrieval.scope_filter and engine != "lancedb":
        out.append("scope filter (a query with a scope sees only that scope's documents): add a filter on a `scope` field")
    if cfg.retrieval.filters:
        shown = ", ".join(f"{k} = {v!r}" for k, v in cfg.retrieval.filters.items())
        out.append(f"metadata filters ({shown}): add a filter on those fields to both lists' queries")
    if cfg.retrieval.level == "document" and engine != "lancedb":
        out.append("document-level results (best chunk per document): index one document per engine record")
    if hybrid and f.method == "convex" and f.normalization in ("rank", "fixed"):
        out.append(f"'{f.normalization}' normalisation (exported as min-max)")
    if hybrid and f.method == "convex" and f.normalization == "zscore" and engine in ("elasticsearch", "weaviate"):
        out.append("z-score normalisation (exported as min-max)")
    if hybrid and engine == "weaviate" and f.method in ("rrf", "learned") and f.rrf_k != 60:
        out.append(f"RRF k={f.rrf_k} (Weaviate's rankedFusion uses k=60)")
    # Weaviate's rankedFusion weighs the two rank lists by alpha and 1 - alpha, and the LanceDB module fuses
    # with the toolkit's own weights: unequal list weights carry over to both.
    return out


# BM25's parameters in OpenSearch, Elasticsearch, Weaviate and Lucene generally; a config that tunes them
# needs them set in the engine's index, which only the OpenSearch/Elasticsearch mappings here can carry.
ENGINE_BM25 = {"k1": 1.2, "b": 0.75}


def _bm25_tuned(cfg: PipelineConfig) -> bool:
    lx = cfg.retrieval.lexical
    return _searched(cfg)[0] and (lx.k1, lx.b) != (ENGINE_BM25["k1"], ENGINE_BM25["b"])


def _analyzer(cfg: PipelineConfig) -> tuple[str, dict, str]:
    """(analyzer name, index `analysis` settings, what it does in plain words) for OpenSearch / Elasticsearch,
    following the config's stemmer and stopwords (unset: the store's defaults, Porter and English)."""
    lx = cfg.retrieval.lexical
    stem, stop = lx.stemmer != "none", lx.stopwords != "none"
    if stem and stop:
        name, analysis, what = "english", {}, "the built-in `english` analyzer (lowercase, English stopwords dropped, Porter stemming)"
    elif not stem and not stop:
        name, analysis, what = "standard", {}, "the built-in `standard` analyzer (lowercase only: no stemming, no stopwords dropped)"
    else:
        # No built-in analyzer does one without the other: a custom one with the same standard tokenizer.
        filters = {"hrt_stop": {"type": "stop", "stopwords": "_english_"}} if stop else {}
        chain = ["lowercase", "hrt_stop"] if stop else ["lowercase", "porter_stem"]
        name = "hrt_text"
        analysis = {"analyzer": {name: {"type": "custom", "tokenizer": "standard", "filter": chain}},
                    **({"filter": filters} if filters else {})}
        what = ("a custom `hrt_text` analyzer (lowercase, English stopwords dropped, no stemming)" if stop
                else "a custom `hrt_text` analyzer (lowercase, Porter stemming, no stopwords dropped)")
    if lx.stemmer not in (None, "none", "porter", "english"):
        what += f"; it stems English, not {lx.stemmer}: add a `stemmer` token filter for {lx.stemmer} to match the toolkit"
    return name, analysis, what


def _text_mapping(cfg: PipelineConfig) -> tuple[dict, dict]:
    """(index settings, text field mapping) for OpenSearch / Elasticsearch: the analyzer the config's stemmer
    and stopwords call for, and a BM25 similarity with the config's k1 and b when they are not the engine's
    defaults."""
    name, analysis, _ = _analyzer(cfg)
    settings: dict[str, Any] = {"analysis": analysis} if analysis else {}
    field_ = {"type": "text", "analyzer": name}
    if _bm25_tuned(cfg):
        lx = cfg.retrieval.lexical
        settings["similarity"] = {"hrt_bm25": {"type": "BM25", "k1": lx.k1, "b": lx.b}}
        field_["similarity"] = "hrt_bm25"
    return settings, field_


def _analyzer_note(cfg: PipelineConfig, engine: str) -> str:
    lx = cfg.retrieval.lexical
    if not _searched(cfg)[0]:
        return ("Analyzer: this config runs no BM25 (dense only), so the toolkit's BM25 analysis (stemming, stopwords, "
                "technical-token splitting) does not apply and the export has no text analysis.")
    stem = {None: "stems words (the store's stemmer, Porter by default)", "none": "does not stem"}.get(
        lx.stemmer, f"stems words ({lx.stemmer})")
    stop = {None: "drops stopwords (the store's list, English by default)", "none": "keeps stopwords",
            "english": "drops English stopwords"}[lx.stopwords]
    how = {
        "opensearch": f"the mapping below gives the text field {_analyzer(cfg)[2]}",
        "elasticsearch": f"the mapping below gives the text field {_analyzer(cfg)[2]}",
        "weaviate": "Weaviate's BM25 uses the property's tokenization (`word`), drops the `en` stopword preset by default "
                    "(invertedIndexConfig.stopwords) and never stems",
        "lancedb": f"the module's FTS index is built with FTS(stem={lx.stemmer != 'none'}, "
                   f"remove_stop_words={lx.stopwords != 'none'}, language={_lance_language(cfg)!r}) (native FTS"
                   + ("; its stopword list is that language's, the toolkit's is English"
                      if lx.stopwords != "none" and _lance_language(cfg) != "English" else "") + ")",
    }[engine]
    return (
        f"Analyzer: the toolkit's BM25 (DuckDB FTS, k1={lx.k1}, b={lx.b}) {stem}, {stop} "
        + ("and keeps technical tokens as DuckDB's tokenizer splits them (no compound forms: `hrt ingest --no-compounds`); "
           if lx.compounds is False else
           "and splits technical tokens (versions, snake_case, camelCase, error codes) into parts plus the whole token; ")
        + "it also folds text (NFKC and case folding: full-width ＥＣＯＮＮ is econn) and indexes Chinese, Japanese and Korean "
        "text as single characters and character pairs, so a CJK word matches inside a sentence; "
        f"a plain BM25 `match` on a default analyzer does not reproduce that, so lexical scores and ranks differ: {how}. "
        + _repeats_note(cfg, engine)
    )


# How each engine's BM25 counts a query word given more than once (`retrieval.lexical.query_term_frequency`).
_ENGINE_REPEATS = {
    "opensearch": "OpenSearch (Lucene) adds a repeated query word's score once per occurrence",
    "elasticsearch": "Elasticsearch (Lucene) adds a repeated query word's score once per occurrence",
    "weaviate": "Weaviate's BM25 weighs a repeated query word by its count",
}


def _repeats_note(cfg: PipelineConfig, engine: str) -> str:
    """Which `retrieval.lexical.query_term_frequency` scores a repeated query word as `engine` does."""
    on = cfg.retrieval.lexical.query_term_frequency
    ours = ("this config counts each occurrence too (retrieval.lexical.query_term_frequency: true)" if on else
            "this config counts it once (retrieval.lexical.query_term_frequency: false, DuckDB's match_bm25); "
            "set it to true to score such queries as the engine does")
    if engine in _ENGINE_REPEATS:
        return f"Repeated query words: {_ENGINE_REPEATS[engine]}; {ours}."
    return (f"Repeated query words: the toolkit counts a repeated word {'per occurrence' if on else 'once'} "
            f"(retrieval.lexical.query_term_frequency: {str(on).lower()}); how LanceDB's FTS counts one is not checked here.")


def _min_version(needs: list[tuple[str, str]]) -> tuple[str, str]:
    """The version where every part of the payload works (the highest of `needs`, (version, part) pairs),
    labelled with the part that needs it, and a note saying which part needs what."""
    top = max(needs, key=lambda n: tuple(int(x) for x in n[0].split(".")))
    return f"{top[0]} ({top[1]})", "minimum version per part: " + "; ".join(f"{what} {v}" for v, what in needs)


def _dims(cfg: PipelineConfig, dims: int | None = None) -> int | str:
    """The vector field's dimension: the store's (`dims`), the config's `dimensions`, else the known model's,
    else a placeholder (the export's notes list it with the others)."""
    d = cfg.retrieval.dense
    return dims or d.dimensions or _DIMS.get(d.model or "all-MiniLM-L6-v2") or "{{dims}}"  # model unset: the packaged one


def _shared_window_note(cfg: PipelineConfig, window: int, param: str) -> list[str]:
    """Where an engine reads the lexical list to a window shared with the dense list, say so when it is not
    the config's lexical.top_k (the dense query keeps its own k)."""
    r = cfg.retrieval
    if window == r.lexical.top_k:
        return []
    return [f"the BM25 list is read to {window} results, not lexical.top_k {r.lexical.top_k}: {param} sets the window "
            f"of both lists, unified to the larger (the knn query keeps its own k = dense.top_k {r.dense.top_k})"]


# OpenSearch: what each part of the payload needs. Evidence: the docs' "Introduced" labels and version pages:
# hybrid query / normalization-processor 2.10; knn_vector `space_type` at the top level of the mapping first
# shown in the 2.17 docs (2.16: only inside `method`); hybrid `pagination_depth` and score-ranker-processor
# 2.19; `combination.parameters.weights` in score-ranker-processor 3.1 (neural-search #1152, docs PR #9922,
# absent from the 3.0 page); z_score normalization 3.0.
_OS_KNN = ("2.17", "knn_vector with a top-level space_type")


def _opensearch(cfg: PipelineConfig, dims: int | None = None) -> tuple[dict, list[str], str]:
    f, r, (lw, dw), notes = cfg.fusion, cfg.retrieval, _shares(cfg), []
    match = {"match": {TEXT_FIELD: {"query": "{{query}}"}}}
    knn = {"knn": {VECTOR_FIELD: {"vector": "{{query_vector}}", "k": r.dense.top_k}}}
    text_settings, text_field = _text_mapping(cfg)
    vector_field = {"type": "knn_vector", "dimension": _dims(cfg, dims), "space_type": "cosinesimil"}
    if not _hybrid(cfg):  # one list: the plain query, no search pipeline, only the mapping it uses
        lexical = _searched(cfg)[0]
        version, per_part = _min_version([("1.0", "plain match query")] if lexical else [("1.0", "knn query"), _OS_KNN])
        settings = text_settings if lexical else {"knn": True}
        payload = {
            "min_version": version,
            "search": {"request": "POST /{{index}}/_search", "body": {"size": cfg.output.n, "query": match if lexical else knn}},
            "index": {"request": "PUT /{{index}}", "body": {
                **({"settings": {"index": settings}} if settings else {}),
                "mappings": {"properties": {TEXT_FIELD: text_field} if lexical else {VECTOR_FIELD: vector_field}},
            }},
        }
        return payload, [per_part] + ([] if lexical else [KNN_NOTE]), version
    needs = [("2.10", "hybrid query"), _OS_KNN, ("2.19", "hybrid pagination_depth")]
    if f.method in ("rrf", "learned"):
        comb: dict[str, Any] = {"technique": "rrf", "rank_constant": f.rrf_k}
        needs.append(("2.19", "score-ranker-processor"))
        if lw != dw:
            comb["parameters"] = {"weights": [lw, dw]}
            needs.append(("3.1", "weighted RRF in score-ranker-processor"))
        proc = {"score-ranker-processor": {"combination": comb}}
    else:
        tech = "z_score" if f.normalization == "zscore" else "min_max"
        needs.append(("3.0", "z_score normalization") if tech == "z_score" else ("2.10", "normalization-processor"))
        proc = {
            "normalization-processor": {
                "normalization": {"technique": tech},
                "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [lw, dw]}},
            }
        }
    version, per_part = _min_version(needs)
    # The id goes into a URL path (PUT /_search/pipeline/<id>): the config's name as a slug.
    pipeline_id = "hrt-" + (re.sub(r"[^A-Za-z0-9_.-]+", "-", cfg.name or "").strip("-") or "pipeline")
    # pagination_depth caps every sub-query per shard; the knn sub-query keeps its own k below it.
    window = max(r.lexical.top_k, r.dense.top_k)
    query = {"hybrid": {"queries": [match, knn], "pagination_depth": window}}
    payload = {
        "min_version": version,
        "search_pipeline": {
            "request": f"PUT /_search/pipeline/{pipeline_id}",
            "body": {"description": f"hybrid-retrieval-toolkit config {cfg.name!r}", "phase_results_processors": [proc]},
        },
        "search": {
            "request": f"POST /{{{{index}}}}/_search?search_pipeline={pipeline_id}",
            "body": {"size": cfg.output.n, "query": query},
        },
        "index": {
            "request": "PUT /{{index}}",
            "body": {
                "settings": {"index": {"knn": True, **text_settings}},
                "mappings": {"properties": {TEXT_FIELD: text_field, VECTOR_FIELD: vector_field}},
            },
        },
    }
    notes.append(per_part)
    notes.append(KNN_NOTE)
    notes.append("the hybrid sub-queries must stay in this order: [match on text, knn on the embedding] (the weights follow it)")
    notes += _shared_window_note(cfg, window, "the hybrid query's `pagination_depth`")
    return payload, notes, version


ES_MAX_CANDIDATES = 10_000  # Elasticsearch rejects a knn num_candidates above this


def _elasticsearch(cfg: PipelineConfig, dims: int | None = None) -> tuple[dict, list[str], str]:
    f, r, (lw, dw), notes = cfg.fusion, cfg.retrieval, _shares(cfg), []
    match = {"match": {TEXT_FIELD: {"query": "{{query}}"}}}
    candidates = max(100, 2 * r.dense.top_k)
    if candidates > ES_MAX_CANDIDATES:
        notes.append(f"knn num_candidates capped at Elasticsearch's limit of {ES_MAX_CANDIDATES} (2 x dense.top_k would be {candidates})")
        candidates = ES_MAX_CANDIDATES
    knn = {"field": VECTOR_FIELD, "query_vector": "{{query_vector}}", "k": r.dense.top_k, "num_candidates": candidates}
    text_settings, text_field = _text_mapping(cfg)
    # Elasticsearch quantises an indexed dense_vector by default (int8_hnsw from 8.14, bbq_hnsw for 384+
    # dimensions from 9.1): plain hnsw keeps the float vectors the toolkit ranks by.
    vector_field = {"type": "dense_vector", "dims": _dims(cfg, dims), "similarity": "cosine", "index": True,
                    "index_options": {"type": "hnsw"}}
    if not _hybrid(cfg):  # one list: the plain query, only the mapping it uses
        lexical = _searched(cfg)[0]
        version = "7.0 (plain match query)" if lexical else "8.4 (knn search option)"
        body = {"query": match} if lexical else {"knn": knn}
        props, settings = ({TEXT_FIELD: text_field}, text_settings) if lexical else ({VECTOR_FIELD: vector_field}, {})
    else:
        lexical_r, dense_r = {"standard": {"query": match}}, {"knn": knn}
        # The standard retriever has no size of its own: rank_window_size sets its list, and ES requires it >= size.
        window = max(r.lexical.top_k, r.dense.top_k, cfg.output.n)
        if cfg.output.n > max(r.lexical.top_k, r.dense.top_k):
            notes.append(f"rank_window_size raised to size {cfg.output.n} (output.n): Elasticsearch requires rank_window_size >= size")
        notes += _shared_window_note(cfg, window, "rank_window_size")
        if f.method in ("rrf", "learned"):
            if lw == dw:
                fused = {"rrf": {"retrievers": [lexical_r, dense_r], "rank_constant": f.rrf_k, "rank_window_size": window}}
                version = "8.16 (rrf retriever GA)"
            else:
                fused = {"rrf": {"retrievers": [{"retriever": lexical_r, "weight": lw}, {"retriever": dense_r, "weight": dw}],
                                 "rank_constant": f.rrf_k, "rank_window_size": window}}
                version = "9.2 (weighted rrf retrievers)"
        else:
            fused = {"linear": {"retrievers": [{"retriever": lexical_r, "weight": lw, "normalizer": "minmax"},
                                               {"retriever": dense_r, "weight": dw, "normalizer": "minmax"}],
                                "rank_window_size": window}}
            version = "8.18 (linear retriever with minmax normalizer)"
        body = {"retriever": fused}
        props, settings = {TEXT_FIELD: text_field, VECTOR_FIELD: vector_field}, text_settings
    payload = {
        "min_version": version,
        "search": {"request": "POST /{{index}}/_search", "body": {**body, "size": cfg.output.n}},
        "index": {
            "request": "PUT /{{index}}",
            "body": {**({"settings": {"index": settings}} if settings else {}), "mappings": {"properties": props}},
        },
    }
    if _hybrid(cfg):
        notes.append("the rrf and linear retrievers are licensed features: self-managed Elasticsearch needs an Enterprise "
                     "licence (or a trial) for them, and a Basic licence refuses the request")
    if _searched(cfg)[1]:
        notes.append(KNN_NOTE)
    return payload, notes + ["field names 'text' and 'embedding' are the mapping's"], version


# weaviate-client 4.24 (weaviate/connect/v4.py) refuses a server below 1.27; the hybrid query itself is older.
WEAVIATE_CLIENT = "1.27 (the Python client v4, weaviate-client 4.24, refuses older servers)"


def _weaviate(cfg: PipelineConfig, dims: int | None = None) -> tuple[dict, list[str], str]:
    # One property holding title and text (TEXT_NOTE): BM25 over two properties scores each on its own.
    n, props = cfg.output.n, [TEXT_FIELD]
    gql_props = "[\"" + TEXT_FIELD + "\"]"
    if not _hybrid(cfg):  # one list: the plain BM25 or nearVector query
        if _searched(cfg)[0]:
            query, python = {"query": "{{query}}", "query_properties": props, "limit": n}, "collection.query.bm25(**bm25)"
            key, gql, got = "bm25", "bm25: {query: \"{{query}}\", properties: " + gql_props + "}", "score"
        else:
            query, python = {"near_vector": "{{query_vector}}", "limit": n}, "collection.query.near_vector(**near_vector)"
            key, gql, got = "near_vector", "nearVector: {vector: {{query_vector}}}", "distance"
        version = WEAVIATE_CLIENT
        graphql = "{ Get { {{collection}}(limit: " + str(n) + ", " + gql + ") { doc_id _additional { " + got + " } } } }"
        payload = {"min_version": version, "python": python, "collection": "{{collection}}", key: query, "graphql": graphql}
        return payload, [] if key == "bm25" else [KNN_NOTE], version
    _, dw = _shares(cfg)
    ranked = cfg.fusion.method in ("rrf", "learned")
    fusion = "RANKED" if ranked else "RELATIVE_SCORE"
    hybrid = {
        "query": "{{query}}",
        "alpha": dw,
        "fusion_type": fusion,
        "query_properties": props,
        "vector": "{{query_vector}}",
        "limit": n,
    }
    gql_fusion = "rankedFusion" if ranked else "relativeScoreFusion"
    graphql = (
        "{ Get { {{collection}}(limit: " + str(n) + ", hybrid: {query: \"{{query}}\", alpha: " + str(dw)
        + ", fusionType: " + gql_fusion + ", properties: " + gql_props + ", vector: {{query_vector}}}) "
        "{ doc_id _additional { score } } } }"
    )
    payload = {
        "min_version": WEAVIATE_CLIENT + "; the GraphQL query alone: 1.20 (relativeScoreFusion)",
        "python": "collection.query.hybrid(**hybrid) with fusion_type=weaviate.classes.query.HybridFusion.<fusion_type>",
        "collection": "{{collection}}",
        "hybrid": hybrid,
        "graphql": graphql,
    }
    notes = ["alpha = share of the vector search (0 = BM25 only); with rankedFusion Weaviate weighs the two rank "
             "lists by alpha and 1 - alpha, so unequal list weights carry over", KNN_NOTE]
    if ranked and cfg.fusion.rrf_k == 60:
        notes.append("Weaviate's rankedFusion scores 1 / (60 + rank) with ranks counted from 0, which is k = 59 in the "
                     "toolkit's terms (k = 60 here): the order can differ where two documents nearly tie")
    return payload, notes, payload["min_version"]


# The module's docstring and comments carry no config data: the config's strings (name, model) appear only as
# Python literals made with repr() in assignments below the docstring (repr escapes quotes, backslashes and
# newlines, so no value can close a string or a docstring and inject code), and every other placeholder is a
# number, a boolean or a fixed literal chosen here, also written with repr().
_LANCEDB_MODULE = '''"""LanceDB search reproducing a hybrid-retrieval-toolkit config (its name: NAME below).

Exported by `hrt export --engine lancedb`. Needs lancedb >= 0.40 (verified with 0.40.0) and pyarrow.
MODE below says which lists are searched: "hybrid" (full-text and vector, fused), "fts" or "vector".
Table: one row per chunk with columns doc_id (str), text (str: the document's title, a newline, then
the chunk's text, as the toolkit indexes and embeds it; the text alone without a title), vector
(float32[DIMS], that same string embedded by the toolkit's model MODEL below, normalised; needed unless
MODE is "fts"), and scope (str; only read by search(..., scope=...)), plus a full-text index on `text`
unless MODE is "vector":

    table.create_index("text", config=fts_config())

At LEVEL "document" each result list is collapsed to the best chunk per document before fusion, and
documents are fused by doc_id; at "chunk" every chunk counts on its own. Ties are broken as the toolkit
breaks them: the best rank in any list, then the id. Run as a script for a smoke test on a throwaway table.
"""

from __future__ import annotations

import pyarrow as pa
from lancedb.index import FTS
from lancedb.rerankers import Reranker

NAME = {name!r}  # the exported config's name
MODEL = {model!r}  # the embedding model of the vector column
DIMS = {dims!r}  # its dimension (None: the model's own, unknown here)
MODE = {mode!r}  # "hybrid", "fts" (BM25 only) or "vector" (dense only)
METHOD = {method!r}  # "rrf" or "convex"
RRF_K = {rrf_k!r}
WEIGHTS = {{"fts": {lw!r}, "vector": {dw!r}}}  # shares of the lexical and the dense list
NORMALIZATION = {normalization!r}  # convex only: "minmax" or "zscore"
FTS_WINDOW = {fts_window!r}  # candidates of the full-text list (the toolkit's lexical.top_k)
VECTOR_WINDOW = {vector_window!r}  # candidates of the vector list (dense.top_k)
STEM = {stem!r}  # the FTS index's analysis, from the config's stemmer and stopwords
REMOVE_STOP_WORDS = {stop!r}
LANGUAGE = {language!r}  # the stemmer's language
LEVEL = {level!r}  # "document" (results are documents) or "chunk"
LIMIT = {limit!r}


def fts_config() -> FTS:
    """The full-text index settings the config's BM25 calls for."""
    return FTS(stem=STEM, remove_stop_words=REMOVE_STOP_WORDS, language=LANGUAGE)


def _key(rid: int, doc_id: str):
    """What fusion adds up by: the document, or at LEVEL "chunk" the row."""
    return doc_id if LEVEL == "document" else rid


def _best_per_doc(t: pa.Table | None) -> list[tuple[int, float, str]]:
    """(row id, score, doc_id) in list order, at LEVEL "document" the first (best) chunk of each document only;
    the score is BM25's, or the cosine similarity (1 - cosine distance)."""
    if t is None or t.num_rows == 0:
        return []
    score_col = "_distance" if "_distance" in t.column_names else "_score"
    seen, out = set(), []
    for rid, s, d in zip(t["_rowid"].to_pylist(), t[score_col].to_pylist(), t["doc_id"].to_pylist()):
        if _key(rid, d) not in seen:
            seen.add(_key(rid, d))
            out.append((rid, 1.0 - s if score_col == "_distance" else s, d))  # higher is better for both
    return out


def _normalize(scores: list[float]) -> list[float]:
    if not scores:
        return []
    n = len(scores)
    if NORMALIZATION == "zscore":
        mean = sum(scores) / n
        sd = (sum((s - mean) ** 2 for s in scores) / n) ** 0.5
        if sd > 0:
            return [(s - mean) / sd for s in scores]
    else:
        lo, hi = min(scores), max(scores)
        if hi > lo:
            return [(s - lo) / (hi - lo) for s in scores]
    return [1.0] * n  # no spread (one document, or equal scores): 1.0 each, tied, as the toolkit does


class ToolkitFusion(Reranker):
    """Weighted RRF or convex fusion over the vector and full-text lists, as the toolkit fuses them."""

    def __init__(self) -> None:
        super().__init__("relevance")

    def rerank_hybrid(self, query: str, vector_results: pa.Table, fts_results: pa.Table) -> pa.Table:
        score, best, row = {{}}, {{}}, {{}}  # by key: fused score, best rank in any list, the row of that rank
        # The full-text list first: a document ranked alike in both keeps its full-text chunk (the toolkit's
        # list order, "orig:lex" before "orig:vec").
        for name, table in (("fts", fts_results), ("vector", vector_results)):
            w = WEIGHTS[name]
            if w <= 0:
                continue
            rows = _best_per_doc(table)
            contrib = ([1.0 / (RRF_K + i) for i in range(1, len(rows) + 1)] if METHOD == "rrf"
                       else _normalize([s for _, s, _ in rows]))
            for rank, ((rid, _, d), c) in enumerate(zip(rows, contrib), start=1):
                k = _key(rid, d)
                score[k] = score.get(k, 0.0) + w * c
                if rank < best.get(k, rank + 1):
                    best[k], row[k] = rank, rid
        merged = self.merge_results(vector_results, fts_results)
        at = {{rid: i for i, rid in enumerate(merged["_rowid"].to_pylist())}}
        order = sorted(score, key=lambda k: (-score[k], best[k], str(k)))  # the toolkit's tie-break
        out = merged.take(pa.array([at[row[k]] for k in order], pa.int64()))
        out = out.append_column("_relevance_score", pa.array([score[k] for k in order], pa.float64()))
        return self._keep_relevance_score(out) if self.score == "relevance" else out


def _one_list(t: pa.Table) -> pa.Table:
    """A single list (MODE "fts" or "vector"): its best chunk per document, in order, its score as _relevance_score."""
    rows = _best_per_doc(t)
    at = {{rid: i for i, rid in enumerate(t["_rowid"].to_pylist())}}
    return t.take(pa.array([at[rid] for rid, _, _ in rows], pa.int64())).append_column(
        "_relevance_score", pa.array([s for _, s, _ in rows], pa.float64()))


def search(table, query_text: str | None, query_vector=None, limit: int = LIMIT, scope: str | None = None):
    """Top `limit` documents (pandas frame: doc_id, text, _relevance_score) for one query; `scope` keeps
    only rows of that scope (the toolkit's scope filter; the table then needs a `scope` column). Each list
    is searched with its own window (FTS_WINDOW, VECTOR_WINDOW), as the toolkit's top_k."""
    where = None if scope is None else "scope = '" + scope.replace("'", "''") + "'"
    fts = vec = None
    if MODE != "vector":
        q = table.search(query_text, query_type="fts").with_row_id(True).limit(FTS_WINDOW)
        fts = (q if where is None else q.where(where, prefilter=True)).to_arrow()
    if MODE != "fts":
        q = table.search(list(map(float, query_vector))).distance_type("cosine").with_row_id(True).limit(VECTOR_WINDOW)
        vec = (q if where is None else q.where(where, prefilter=True)).to_arrow()
    fused = ToolkitFusion().rerank_hybrid(query_text, vec, fts) if MODE == "hybrid" else _one_list(vec if fts is None else fts)
    return fused.to_pandas().head(limit)


if __name__ == "__main__":
    import tempfile

    import lancedb

    with tempfile.TemporaryDirectory() as d:
        db = lancedb.connect(d)
        dim = {dims_int!r}
        rows = [{{"doc_id": f"d{{i}}", "scope": "", "text": t, "vector": [float(i == j) for j in range(dim)]}}
                for i, t in enumerate(["deploy failed with ECONNREFUSED", "retry backoff policy", "team lunch"])]
        tbl = db.create_table("docs", rows)
        if MODE != "vector":
            tbl.create_index("text", config=fts_config())
        print(search(tbl, "deploy failure", [1.0] + [0.0] * (dim - 1))[["doc_id", "_relevance_score"]])
'''


# DuckDB FTS stemmers (config.Stemmer) -> the languages of LanceDB's full-text index (tantivy's stemmers).
_LANCE_LANGUAGES = {"porter": "English", "english": "English", "none": "English"} | {
    x: x.title() for x in ("arabic", "danish", "dutch", "finnish", "french", "german", "greek", "hungarian", "italian",
                           "norwegian", "portuguese", "romanian", "russian", "spanish", "swedish", "tamil", "turkish")}


def _lance_language(cfg: PipelineConfig) -> str:
    return _LANCE_LANGUAGES.get(cfg.retrieval.lexical.stemmer or "porter", "English")


def _lancedb(cfg: PipelineConfig, store_dims: int | None = None) -> tuple[str, list[str], str]:
    f, r, (lw, dw) = cfg.fusion, cfg.retrieval, _shares(cfg)
    model = r.dense.model or "all-MiniLM-L6-v2"  # unset: the store's own, the packaged model by default
    dims = store_dims or r.dense.dimensions or _DIMS.get(model)
    mode = "hybrid" if _hybrid(cfg) else ("fts" if _searched(cfg)[0] else "vector")
    text = _LANCEDB_MODULE.format(
        name=str(cfg.name), dims=dims, model=str(model), mode=mode,
        method="convex" if f.method == "convex" else "rrf", rrf_k=f.rrf_k, lw=lw, dw=dw,
        normalization="zscore" if f.normalization == "zscore" else "minmax",
        fts_window=int(r.lexical.top_k), vector_window=int(r.dense.top_k), limit=int(cfg.output.n),
        stem=r.lexical.stemmer != "none", stop=r.lexical.stopwords != "none", dims_int=int(dims or 8),
        language=_lance_language(cfg), level=r.level,
    )
    notes = ["a Python module: `from <file> import search`; `python <file>` runs a smoke test on a throwaway table"]
    if r.lexical.stemmer is None and _searched(cfg)[0]:  # left to the store, and no store was given (user trial AR)
        notes.append("the config leaves the stemmer to the store (porter unless it was ingested with another) and no "
                     "store was given: the module stems English")
    elif r.lexical.stemmer not in _LANCE_LANGUAGES and r.lexical.stemmer != "none" and _searched(cfg)[0]:
        notes.append(f"LanceDB's full-text index has no {r.lexical.stemmer} stemmer: the module stems English")
    if cfg.rerank.provider == "cross-encoder" and cfg.rerank.model and cfg.rerank.blend == "replace":
        notes.append(f"to rerank as the toolkit does, apply lancedb.rerankers.CrossEncoderReranker(model_name={cfg.rerank.model!r}) "
                     f"to the fused top {cfg.rerank.top_n}")
    return text, notes, "lancedb 0.40 (verified)"


def _from_store(cfg: PipelineConfig, store: Store | None) -> tuple[PipelineConfig, int | None, list[str]]:
    """(`cfg` with the store's embedding model, stemmer and stopwords where it leaves them to the store, the
    store's vector dimension, notes). A config that names no model runs on the store's vectors, so without a
    store the export can only assume the packaged model (and says so)."""
    d, lx = cfg.retrieval.dense, cfg.retrieval.lexical
    if store is None:
        notes = []
        if _searched(cfg)[1] and d.model is None and d.dimensions is None:
            notes.append("the vector field's dimension (384) assumes the packaged model all-MiniLM-L6-v2, as the config "
                         "names no model (the pipeline uses the store's): pass --store to read the store's model and dimension")
        return cfg, None, notes
    settings = store.settings
    notes = []
    if _searched(cfg)[1] and d.dimensions is None and store.embedding_dim is None:
        notes.append(f"{store.path} holds no vectors yet: the vector field's dimension (384) assumes the packaged model")
    updates: dict[str, Any] = {}
    if d.model is None and store.embedding_model:
        updates["retrieval.dense.model"] = store.embedding_model
    if settings is not None and lx.stemmer is None:
        updates["retrieval.lexical.stemmer"] = settings.stemmer
    if settings is not None and lx.stopwords is None:
        updates["retrieval.lexical.stopwords"] = settings.stopwords
    if settings is not None and lx.compounds is None:
        updates["retrieval.lexical.compounds"] = settings.compounds
    return cfg.with_updates(updates) if updates else cfg, store.embedding_dim, notes


def export_config(cfg: PipelineConfig | str, engine: Engine, store: Store | None = None) -> ExportResult:
    """The engine payload for `cfg` (a config, preset name or file), what does not carry over, notes, minimum
    version and analyzer note. `store`: the store the pipeline runs on, whose embedding model, vector dimension,
    stemmer and stopwords fill what the config leaves to the store."""
    cfg = load_config(cfg)
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if engine == "toolkit":
        return ExportResult(engine, yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))
    cfg, dims, store_notes = _from_store(cfg, store)
    payload, notes, version = {"opensearch": _opensearch, "elasticsearch": _elasticsearch, "weaviate": _weaviate,
                               "lancedb": _lancedb}[engine](cfg, dims)
    notes = store_notes + notes
    if engine != "lancedb" and _searched(cfg)[0]:
        notes.append(TEXT_NOTE)
    if not _hybrid(cfg):
        which = "BM25" if _searched(cfg)[0] else "vector"
        notes.insert(0, f"single-retriever config: no fusion applies; the export is the engine's plain {which} query")
        if _searched(cfg) != (cfg.retrieval.lexical.enabled, cfg.retrieval.dense.enabled):
            notes.insert(1, "the other list has fusion weight 0, so the toolkit drops it and so does the export")
    if isinstance(payload, dict):  # every placeholder the payload holds, so none goes unnoticed
        holes = sorted(set(re.findall(r"\{\{\w+\}\}", json.dumps(payload))))
        notes.append("placeholders to fill in: " + ", ".join(holes))
    return ExportResult(engine, payload, _not_carried(cfg, engine), notes, version, _analyzer_note(cfg, engine))


def _serialize(payload: dict | str, path: Path) -> str:
    """The file's format follows its extension: .json JSON, .yaml/.yml YAML, .py (LanceDB) the module."""
    suffix = path.suffix.lower()
    if isinstance(payload, str):
        if suffix not in (".py", ""):
            raise InputError(f"{path}: the LanceDB export is a Python module; use a .py file")
        return payload
    if suffix in (".yaml", ".yml"):
        return yaml.safe_dump(payload, sort_keys=False, allow_unicode=True)
    if suffix in (".json", ""):
        return json.dumps(payload, indent=2) + "\n"
    raise InputError(f"{path}: unsupported extension {suffix!r} (use .json or .yaml)")


def write_export(cfg: PipelineConfig | str, engine: Engine, path: str | Path, source: str | Path | None = None,
                 store: Store | None = None) -> ExportResult:
    """Write the engine payload to `path` (format from the extension) and the caveats to `<path>.README.md`.
    `source` is the file the config was loaded from (the CLI's --config; a config given as a path is its own
    source): neither file may be it, so an export never replaces the tuned config. Any other existing file
    is overwritten, as a re-export each run expects. `store`: as `export_config`'s."""
    if not str(path).strip() or Path(path).name in ("", ".", ".."):
        raise InputError(f"{str(path)!r}: not a file name; give --out a file such as export.json")
    if source is None and isinstance(cfg, str | Path):
        source = cfg
    p = Path(path)
    if source is not None and Path(source).is_file():  # a preset name is no file: nothing to clash with
        for target in (p, Path(f"{p}.README.md")):
            # resolve() catches a path through a directory not made yet; samefile() a hard link
            if target.resolve() == Path(source).resolve() or (target.exists() and target.samefile(source)):
                raise InputError(f"{target}: is the config being exported ({source}); choose another --out")
    cfg = load_config(cfg)
    res = export_config(cfg, engine, store)
    try:
        if engine == "toolkit":
            save_config(cfg, p)  # .yaml or .json, loads back to an equal config
        else:
            write_text_atomic(p, _serialize(res.payload, p))
    except OSError as e:  # name the file asked for, not the temporary file written beside it
        raise InputError(f"{p}: cannot write: {e.strerror or e}") from None
    lines = [f"# Export of {cfg.name!r} to {engine}", ""]
    if engine != "toolkit":
        lines += [f"Minimum engine version: {res.min_version}", "", res.analyzer_note, ""]
    lines += ["Not carried over:"]
    lines += [f"- {x}" for x in res.not_carried] or ["- nothing"]
    lines += ["", "Notes:"] + ([f"- {x}" for x in res.notes] or ["- none"])
    try:
        write_text_atomic(f"{p}.README.md", "\n".join(lines) + "\n")
    except OSError as e:
        raise InputError(f"{p}.README.md: cannot write: {e.strerror or e}") from None
    return res
