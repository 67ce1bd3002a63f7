"""Export a tuned pipeline to other engines, and say plainly what does not carry over.

Each engine gets the closest payload it can run (the JSON shapes of their documented hybrid-search APIs:
OpenSearch search pipelines with `normalization-processor` / `score-ranker-processor`, the Elasticsearch
`rrf` and `linear` retrievers, Weaviate's hybrid `alpha`/`fusionType`, LanceDB's hybrid rerankers), plus
the list of active stages the engine cannot express, so nobody deploys a different pipeline than the one
they tuned. Engine shapes are plain dicts written by hand: no client library describes them offline.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from .config import PipelineConfig, save_config
from .errors import InputError

ENGINES = ("toolkit", "opensearch", "elasticsearch", "weaviate", "lancedb")


@dataclass
class ExportResult:
    engine: str
    payload: dict[str, Any] | str
    not_carried: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _shares(cfg: PipelineConfig) -> tuple[float, float]:
    """(lexical, dense) weights as shares summing to 1, as engines take them."""
    f, r = cfg.fusion, cfg.retrieval
    lex = (f.lexical_weight * ((1 - f.alpha) if f.method == "convex" else 1.0)) if r.lexical.enabled else 0.0
    den = (f.dense_weight * (f.alpha if f.method == "convex" else 1.0)) if r.dense.enabled else 0.0
    tot = lex + den
    return (0.5, 0.5) if tot <= 0 else (round(lex / tot, 6), round(den / tot, 6))


def _not_carried(cfg: PipelineConfig, engine: str) -> list[str]:
    """Active stages of `cfg` that `engine` cannot express."""
    if engine == "toolkit":
        return []
    f, out = cfg.fusion, []
    hybrid = cfg.retrieval.lexical.enabled and cfg.retrieval.dense.enabled
    if hybrid and f.method == "rrf" and any(b > 0 for _, b in f.rank_bonus):
        out.append("top-rank bonus")
    if cfg.expansion.provider != "none":
        out += ["query expansion and original-vs-expansion list weights", "strong-signal expansion skip"]
    lancedb_ce = engine == "lancedb" and cfg.rerank.provider == "cross-encoder" and cfg.rerank.blend == "replace"
    if cfg.rerank.provider != "none" and cfg.rerank.blend != "none" and not lancedb_ce:
        out.append(f"guarded reranking (top {cfg.rerank.top_n}, blend '{cfg.rerank.blend}' buckets {cfg.rerank.buckets})")
    if cfg.dedup.source_enabled:
        out.append(f"source dedup (max {cfg.dedup.max_per_source} per source, fill)")
    if cfg.dedup.near_duplicate_enabled:
        out.append(f"near-duplicate dedup (cosine >= {cfg.dedup.near_duplicate_threshold})")
    if cfg.routing.enabled:
        out.append("query routing (conversational / technical)")
    if cfg.threshold.min_score > 0:
        out.append(f"min_score threshold {cfg.threshold.min_score}")
    if cfg.retrieval.level == "document":
        out.append("document-level results (best chunk per document): index one document per engine record")
    if hybrid and f.method == "convex" and f.normalization in ("rank", "fixed"):
        out.append(f"'{f.normalization}' normalisation (exported as min-max)")
    if hybrid and f.method == "convex" and f.normalization == "zscore" and engine in ("elasticsearch", "weaviate", "lancedb"):
        out.append("z-score normalisation (exported as min-max)")
    if hybrid and engine == "weaviate" and f.method == "rrf" and f.rrf_k != 60:
        out.append(f"RRF k={f.rrf_k} (Weaviate's rankedFusion uses k=60)")
    if hybrid and engine in ("weaviate", "lancedb") and f.method == "rrf" and f.lexical_weight != f.dense_weight:
        out.append("unequal RRF list weights")
    return out


def _opensearch(cfg: PipelineConfig) -> tuple[dict, list[str]]:
    f, (lw, dw), notes = cfg.fusion, _shares(cfg), []
    if f.method == "rrf":
        comb: dict[str, Any] = {"technique": "rrf", "rank_constant": f.rrf_k}
        if lw != dw:
            comb["parameters"] = {"weights": [lw, dw]}
            notes.append("weighted RRF in score-ranker-processor needs OpenSearch >= 3.0")
        proc = {"score-ranker-processor": {"combination": comb}}
    else:
        tech = "z_score" if f.normalization == "zscore" else "min_max"
        proc = {
            "normalization-processor": {
                "normalization": {"technique": tech},
                "combination": {"technique": "arithmetic_mean", "parameters": {"weights": [lw, dw]}},
            }
        }
    notes.append("use with a `hybrid` query whose sub-queries are [match on text, neural/knn on the embedding], in that order")
    return {"description": f"hybrid-retrieval-toolkit config {cfg.name!r}", "phase_results_processors": [proc]}, notes


def _elasticsearch(cfg: PipelineConfig) -> tuple[dict, list[str]]:
    f, r, (lw, dw) = cfg.fusion, cfg.retrieval, _shares(cfg)
    lexical = {"standard": {"query": {"match": {"text": "{{query}}"}}}}
    dense = {"knn": {"field": "embedding", "query_vector": "{{query_vector}}", "k": r.dense.top_k, "num_candidates": max(100, 2 * r.dense.top_k)}}
    window = max(r.lexical.top_k, r.dense.top_k)
    if f.method == "rrf":
        if lw == dw:
            body = {"rrf": {"retrievers": [lexical, dense], "rank_constant": f.rrf_k, "rank_window_size": window}}
        else:
            body = {"rrf": {"retrievers": [{"retriever": lexical, "weight": lw}, {"retriever": dense, "weight": dw}], "rank_constant": f.rrf_k, "rank_window_size": window}}
    else:
        body = {"linear": {"retrievers": [{"retriever": lexical, "weight": lw, "normalizer": "minmax"}, {"retriever": dense, "weight": dw, "normalizer": "minmax"}], "rank_window_size": window}}
    return {"retriever": body, "size": cfg.output.n}, ["replace {{query}} / {{query_vector}}; field names 'text' and 'embedding' are placeholders"]


def _weaviate(cfg: PipelineConfig) -> tuple[dict, list[str]]:
    _, dw = _shares(cfg)
    fusion = "rankedFusion" if cfg.fusion.method == "rrf" else "relativeScoreFusion"
    return {"alpha": dw, "fusionType": fusion, "limit": cfg.output.n}, ["alpha = share of the vector search (0 = BM25 only)"]


def _lancedb(cfg: PipelineConfig) -> tuple[dict, list[str]]:
    f, (_, dw) = cfg.fusion, _shares(cfg)
    if cfg.rerank.provider == "cross-encoder" and cfg.rerank.model:
        rr = {"class": "CrossEncoderReranker", "kwargs": {"model_name": cfg.rerank.model}}
    elif f.method == "rrf":
        rr = {"class": "RRFReranker", "kwargs": {"K": f.rrf_k, "return_score": "relevance"}}
    else:
        rr = {"class": "LinearCombinationReranker", "kwargs": {"weight": dw}}
    return {"query_type": "hybrid", "limit": cfg.output.n, "reranker": rr}, ["LinearCombinationReranker: weight = share of the vector score"]


def export_config(cfg: PipelineConfig, engine: str) -> ExportResult:
    """The engine payload for `cfg`, what does not carry over, and notes."""
    if engine not in ENGINES:
        raise InputError(f"unknown engine {engine!r}; choose one of {', '.join(ENGINES)}")
    if engine == "toolkit":
        import tempfile

        with tempfile.TemporaryDirectory() as d:
            text = save_config(cfg, Path(d) / "c.yaml").read_text()
        return ExportResult(engine, text)
    payload, notes = {"opensearch": _opensearch, "elasticsearch": _elasticsearch, "weaviate": _weaviate, "lancedb": _lancedb}[engine](cfg)
    if not (cfg.retrieval.lexical.enabled and cfg.retrieval.dense.enabled):
        notes.insert(0, "single-retriever config: no fusion applies; run the engine's plain BM25 or vector query")
    return ExportResult(engine, payload, _not_carried(cfg, engine), notes)


def write_export(cfg: PipelineConfig, engine: str, path: str | Path) -> ExportResult:
    """Write the pure engine payload to `path` and the caveats to `<path>.README.md`."""
    res = export_config(cfg, engine)
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(res.payload if isinstance(res.payload, str) else json.dumps(res.payload, indent=2) + "\n")
    lines = [f"# Export of {cfg.name!r} to {engine}", "", "Not carried over:"]
    lines += [f"- {x}" for x in res.not_carried] or ["- nothing"]
    lines += ["", "Notes:"] + ([f"- {x}" for x in res.notes] or ["- none"])
    Path(f"{p}.README.md").write_text("\n".join(lines) + "\n")
    return res
