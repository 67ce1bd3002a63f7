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
from typing import Any

import yaml

from .config import PipelineConfig, load_config, save_config
from .errors import InputError
from .files import write_text_atomic

ENGINES = ("toolkit", "opensearch", "elasticsearch", "weaviate", "lancedb")
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


def _shares(cfg: PipelineConfig) -> tuple[float, float]:
    """(lexical, dense) weights as shares summing to 1, as engines take them."""
    f, r = cfg.fusion, cfg.retrieval
    lex = (f.lexical_weight * ((1 - f.alpha) if f.method == "convex" else 1.0)) if r.lexical.enabled else 0.0
    den = (f.dense_weight * (f.alpha if f.method == "convex" else 1.0)) if r.dense.enabled else 0.0
    tot = lex + den
    return (0.5, 0.5) if tot <= 0 else (round(lex / tot, 6), round(den / tot, 6))


def _hybrid(cfg: PipelineConfig) -> bool:
    return cfg.retrieval.lexical.enabled and cfg.retrieval.dense.enabled


def _not_carried(cfg: PipelineConfig, engine: str) -> list[str]:
    """Active stages of `cfg` that `engine` cannot express."""
    if engine == "toolkit":
        return []
    f, out = cfg.fusion, []
    hybrid = _hybrid(cfg)
    if f.method == "learned":
        out.append("learned fusion (LightGBM model over toolkit features): exported as plain RRF")
    if getattr(f, "router", False):
        out.append("learned per-query router weights (BM25 vs dense): exported as the fixed weights")
    if hybrid and f.method == "rrf" and any(b > 0 for _, b in f.rank_bonus):
        out.append("top-rank bonus")
    if cfg.expansion.provider != "none":
        out += ["query expansion and original-vs-expansion list weights", "strong-signal expansion skip"]
    lancedb_ce = engine == "lancedb" and cfg.rerank.provider == "cross-encoder" and cfg.rerank.blend == "replace"
    if cfg.rerank.provider != "none" and cfg.rerank.blend != "none" and not lancedb_ce:
        out.append(f"guarded reranking (top {cfg.rerank.top_n}, blend '{cfg.rerank.blend}' buckets {cfg.rerank.buckets})")
    if _bm25_tuned(cfg) and engine in ("weaviate", "lancedb"):
        lx = cfg.retrieval.lexical
        out.append(f"BM25 k1={lx.k1}, b={lx.b} (the engine's defaults are k1 {ENGINE_BM25['k1']}, b {ENGINE_BM25['b']}"
                   + (": set invertedIndexConfig.bm25 on the collection)" if engine == "weaviate" else ")"))
    if hybrid and cfg.adapt.dense_gap:
        out.append(f"per-query dense weight from the dense list's score gap (adapt, scale {cfg.adapt.gap_scale}): "
                   "exported as the fixed list weights")
    if hybrid and cfg.guard.exact_token:
        out.append(f"exact-token guard (BM25's verbatim hit of a query identifier kept in the top {cfg.guard.max_rank})")
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
    return lx.enabled and (lx.k1, lx.b) != (ENGINE_BM25["k1"], ENGINE_BM25["b"])


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
    if not lx.enabled:
        return ("Analyzer: this config runs no BM25 (dense only), so the toolkit's BM25 analysis (stemming, stopwords, "
                "technical-token splitting) does not apply and the export has no text analysis.")
    stem = {None: "stems words (the store's stemmer, Porter by default)", "none": "does not stem"}.get(
        lx.stemmer, f"stems words ({lx.stemmer})")
    stop = {None: "drops stopwords (the store's list, English by default)", "none": "keeps stopwords",
            "english": "drops English stopwords"}[lx.stopwords]
    how = {
        "opensearch": f"the mapping below gives the text field {_analyzer(cfg)[2]}",
        "elasticsearch": f"the mapping below gives the text field {_analyzer(cfg)[2]}",
        "weaviate": "Weaviate's BM25 uses the property's tokenization (`word`) without stemming or stopword removal by default",
        "lancedb": f"the module's FTS index is built with FTS(stem={lx.stemmer != 'none'}, "
                   f"remove_stop_words={lx.stopwords != 'none'}, language='English') (native FTS)",
    }[engine]
    return (
        f"Analyzer: the toolkit's BM25 (DuckDB FTS, k1={lx.k1}, b={lx.b}) {stem}, {stop} "
        "and splits technical tokens (versions, snake_case, camelCase, error codes) into parts plus the whole token; "
        f"a plain BM25 `match` on a default analyzer does not reproduce that, so lexical scores and ranks differ: {how}."
    )


def _min_version(needs: list[tuple[str, str]]) -> tuple[str, str]:
    """The version where every part of the payload works (the highest of `needs`, (version, part) pairs),
    labelled with the part that needs it, and a note saying which part needs what."""
    top = max(needs, key=lambda n: tuple(int(x) for x in n[0].split(".")))
    return f"{top[0]} ({top[1]})", "minimum version per part: " + "; ".join(f"{what} {v}" for v, what in needs)


def _dims(cfg: PipelineConfig) -> int | str:
    """The vector field's dimension: the config's `dimensions`, else the known model's, else a placeholder (the
    export's notes list it with the others)."""
    d = cfg.retrieval.dense
    return d.dimensions or _DIMS.get(d.model or "all-MiniLM-L6-v2") or "{{dims}}"  # model unset: the packaged one


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


def _opensearch(cfg: PipelineConfig) -> tuple[dict, list[str], str]:
    f, r, (lw, dw), notes = cfg.fusion, cfg.retrieval, _shares(cfg), []
    match = {"match": {TEXT_FIELD: {"query": "{{query}}"}}}
    knn = {"knn": {VECTOR_FIELD: {"vector": "{{query_vector}}", "k": r.dense.top_k}}}
    text_settings, text_field = _text_mapping(cfg)
    vector_field = {"type": "knn_vector", "dimension": _dims(cfg), "space_type": "cosinesimil"}
    if not _hybrid(cfg):  # one list: the plain query, no search pipeline, only the mapping it uses
        lexical = r.lexical.enabled
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
        return payload, [per_part], version
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
    notes.append("the hybrid sub-queries must stay in this order: [match on text, knn on the embedding] (the weights follow it)")
    notes += _shared_window_note(cfg, window, "the hybrid query's `pagination_depth`")
    return payload, notes, version


ES_MAX_CANDIDATES = 10_000  # Elasticsearch rejects a knn num_candidates above this


def _elasticsearch(cfg: PipelineConfig) -> tuple[dict, list[str], str]:
    f, r, (lw, dw), notes = cfg.fusion, cfg.retrieval, _shares(cfg), []
    match = {"match": {TEXT_FIELD: {"query": "{{query}}"}}}
    candidates = max(100, 2 * r.dense.top_k)
    if candidates > ES_MAX_CANDIDATES:
        notes.append(f"knn num_candidates capped at Elasticsearch's limit of {ES_MAX_CANDIDATES} (2 x dense.top_k would be {candidates})")
        candidates = ES_MAX_CANDIDATES
    knn = {"field": VECTOR_FIELD, "query_vector": "{{query_vector}}", "k": r.dense.top_k, "num_candidates": candidates}
    text_settings, text_field = _text_mapping(cfg)
    vector_field = {"type": "dense_vector", "dims": _dims(cfg), "similarity": "cosine", "index": True}
    if not _hybrid(cfg):  # one list: the plain query, only the mapping it uses
        lexical = r.lexical.enabled
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
    return payload, notes + ["field names 'text' and 'embedding' are the mapping's"], version


def _weaviate(cfg: PipelineConfig) -> tuple[dict, list[str], str]:
    n, props = cfg.output.n, ["title", TEXT_FIELD]
    gql_props = "[\"title\", \"" + TEXT_FIELD + "\"]"
    if not _hybrid(cfg):  # one list: the plain BM25 or nearVector query
        if cfg.retrieval.lexical.enabled:
            query, python = {"query": "{{query}}", "query_properties": props, "limit": n}, "collection.query.bm25(**bm25)"
            key, gql, got = "bm25", "bm25: {query: \"{{query}}\", properties: " + gql_props + "}", "score"
        else:
            query, python = {"near_vector": "{{query_vector}}", "limit": n}, "collection.query.near_vector(**near_vector)"
            key, gql, got = "near_vector", "nearVector: {vector: {{query_vector}}}", "distance"
        version = "1.23.7 (Python client v4)"
        graphql = "{ Get { {{collection}}(limit: " + str(n) + ", " + gql + ") { doc_id _additional { " + got + " } } } }"
        payload = {"min_version": version, "python": python, "collection": "{{collection}}", key: query, "graphql": graphql}
        return payload, [], version
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
        "min_version": "1.24 (Python client v4 needs >= 1.23.7; relativeScoreFusion since 1.20)",
        "python": "collection.query.hybrid(**hybrid) with fusion_type=weaviate.classes.query.HybridFusion.<fusion_type>",
        "collection": "{{collection}}",
        "hybrid": hybrid,
        "graphql": graphql,
    }
    notes = ["alpha = share of the vector search (0 = BM25 only); with rankedFusion Weaviate weighs the two rank "
             "lists by alpha and 1 - alpha, so unequal list weights carry over"]
    return payload, notes, payload["min_version"]


# The module's docstring and comments carry no config data: the config's strings (name, model) appear only as
# Python literals made with repr() in assignments below the docstring (repr escapes quotes, backslashes and
# newlines, so no value can close a string or a docstring and inject code), and every other placeholder is a
# number, a boolean or a fixed literal chosen here, also written with repr().
_LANCEDB_MODULE = '''"""LanceDB search reproducing a hybrid-retrieval-toolkit config (its name: NAME below).

Exported by `hrt export --engine lancedb`. Needs lancedb >= 0.40 (verified with 0.40.0) and pyarrow.
MODE below says which lists are searched: "hybrid" (full-text and vector, fused), "fts" or "vector".
Table: one row per chunk with columns doc_id (str), text (str), vector (float32[DIMS], the toolkit's
embedding model MODEL below, normalised; needed unless MODE is "fts"), and scope (str; only read by
search(..., scope=...)), plus a full-text index on `text` unless MODE is "vector":

    table.create_index("text", config=fts_config())

Each result list is collapsed to the best chunk per document before fusion (the toolkit's
document level), then fused as the toolkit does. Run as a script for a smoke test on a throwaway table.
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
LIMIT = {limit!r}


def fts_config() -> FTS:
    """The full-text index settings the config's BM25 calls for."""
    return FTS(stem=STEM, remove_stop_words=REMOVE_STOP_WORDS, language="English")


def _best_per_doc(t: pa.Table | None) -> list[tuple[int, float, str]]:
    """(row id, score, doc_id) in list order, the first (best) chunk of each document only; the score is
    BM25's, or the cosine similarity (1 - cosine distance)."""
    if t is None or t.num_rows == 0:
        return []
    score_col = "_distance" if "_distance" in t.column_names else "_score"
    seen, out = set(), []
    for rid, s, d in zip(t["_rowid"].to_pylist(), t[score_col].to_pylist(), t["doc_id"].to_pylist()):
        if d not in seen:
            seen.add(d)
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
    return [1.0 - i / n for i in range(n)]  # no spread: keep the order (as the toolkit does)


class ToolkitFusion(Reranker):
    """Weighted RRF or convex fusion over the vector and full-text lists, as the toolkit fuses them."""

    def __init__(self) -> None:
        super().__init__("relevance")

    def rerank_hybrid(self, query: str, vector_results: pa.Table, fts_results: pa.Table) -> pa.Table:
        score: dict[int, float] = {{}}
        for name, table in (("vector", vector_results), ("fts", fts_results)):
            w = WEIGHTS[name]
            if w <= 0:
                continue
            rows = _best_per_doc(table)
            contrib = ([1.0 / (RRF_K + i) for i in range(1, len(rows) + 1)] if METHOD == "rrf"
                       else _normalize([s for _, s, _ in rows]))
            for (rid, _, _), c in zip(rows, contrib):
                score[rid] = score.get(rid, 0.0) + w * c
        merged = self.merge_results(vector_results, fts_results)
        keep = [i for i, rid in enumerate(merged["_rowid"].to_pylist()) if rid in score]
        merged = merged.take(keep)
        merged = merged.append_column("_relevance_score", pa.array([score[r] for r in merged["_rowid"].to_pylist()], pa.float32()))
        merged = merged.sort_by([("_relevance_score", "descending"), ("doc_id", "descending")])
        return self._keep_relevance_score(merged) if self.score == "relevance" else merged


def _one_list(t: pa.Table) -> pa.Table:
    """A single list (MODE "fts" or "vector"): its best chunk per document, in order, its score as _relevance_score."""
    rows = _best_per_doc(t)
    at = {{rid: i for i, rid in enumerate(t["_rowid"].to_pylist())}}
    return t.take(pa.array([at[rid] for rid, _, _ in rows], pa.int64())).append_column(
        "_relevance_score", pa.array([s for _, s, _ in rows], pa.float32()))


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


def _lancedb(cfg: PipelineConfig) -> tuple[str, list[str], str]:
    f, r, (lw, dw) = cfg.fusion, cfg.retrieval, _shares(cfg)
    model = r.dense.model or "all-MiniLM-L6-v2"  # unset: the store's own, the packaged model by default
    dims = r.dense.dimensions or _DIMS.get(model)
    mode = "hybrid" if _hybrid(cfg) else ("fts" if r.lexical.enabled else "vector")
    text = _LANCEDB_MODULE.format(
        name=str(cfg.name), dims=dims, model=str(model), mode=mode,
        method="convex" if f.method == "convex" else "rrf", rrf_k=f.rrf_k, lw=lw, dw=dw,
        normalization="zscore" if f.normalization == "zscore" else "minmax",
        fts_window=int(r.lexical.top_k), vector_window=int(r.dense.top_k), limit=int(cfg.output.n),
        stem=r.lexical.stemmer != "none", stop=r.lexical.stopwords != "none", dims_int=int(dims or 8),
    )
    notes = ["a Python module: `from <file> import search`; `python <file>` runs a smoke test on a throwaway table"]
    if cfg.rerank.provider == "cross-encoder" and cfg.rerank.model and cfg.rerank.blend == "replace":
        notes.append(f"to rerank as the toolkit does, apply lancedb.rerankers.CrossEncoderReranker(model_name={cfg.rerank.model!r}) "
                     "to the fused top n")
    return text, notes, "lancedb 0.40 (verified)"


def export_config(cfg: PipelineConfig | str, engine: str) -> ExportResult:
    """The engine payload for `cfg` (a config, preset name or file), what does not carry over, notes, minimum
    version and analyzer note."""
    cfg = load_config(cfg)
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if engine == "toolkit":
        return ExportResult(engine, yaml.safe_dump(cfg.to_dict(), sort_keys=False, allow_unicode=True))
    payload, notes, version = {"opensearch": _opensearch, "elasticsearch": _elasticsearch, "weaviate": _weaviate,
                               "lancedb": _lancedb}[engine](cfg)
    if not _hybrid(cfg):
        which = "BM25" if cfg.retrieval.lexical.enabled else "vector"
        notes.insert(0, f"single-retriever config: no fusion applies; the export is the engine's plain {which} query")
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


def write_export(cfg: PipelineConfig | str, engine: str, path: str | Path, source: str | Path | None = None) -> ExportResult:
    """Write the engine payload to `path` (format from the extension) and the caveats to `<path>.README.md`.
    `source` is the file the config was loaded from (the CLI's --config; a config given as a path is its own
    source): neither file may be it, so an export never replaces the tuned config. Any other existing file
    is overwritten, as a re-export each run expects."""
    if source is None and isinstance(cfg, str | Path):
        source = cfg
    p = Path(path)
    if source is not None and Path(source).is_file():  # a preset name is no file: nothing to clash with
        for target in (p, Path(f"{p}.README.md")):
            # resolve() catches a path through a directory not made yet; samefile() a hard link
            if target.resolve() == Path(source).resolve() or (target.exists() and target.samefile(source)):
                raise InputError(f"{target}: is the config being exported ({source}); choose another --out")
    cfg = load_config(cfg)
    res = export_config(cfg, engine)
    if engine == "toolkit":
        save_config(cfg, p)  # .yaml or .json, loads back to an equal config
    else:
        write_text_atomic(p, _serialize(res.payload, p))
    lines = [f"# Export of {cfg.name!r} to {engine}", ""]
    if engine != "toolkit":
        lines += [f"Minimum engine version: {res.min_version}", "", res.analyzer_note, ""]
    lines += ["Not carried over:"]
    lines += [f"- {x}" for x in res.not_carried] or ["- nothing"]
    lines += ["", "Notes:"] + ([f"- {x}" for x in res.notes] or ["- none"])
    write_text_atomic(f"{p}.README.md", "\n".join(lines) + "\n")
    return res
