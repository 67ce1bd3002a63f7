"""Train a CrossEncoder reranker offline from the user's own judgements, and say honestly whether it helps.

A reranker trained naively (packaged MiniLM with a fresh head, 3 BM25 negatives per positive, BCE, 1 epoch)
made LoCoMo worse, so the recipe here is built around what a small CPU budget can actually learn:

- Negatives are mined from the toolkit's own candidate lists (BM25 and dense, scope-filtered like the
  pipeline): documents ranked high for the query but not judged relevant, plus any judged non-relevant.
  They are sampled without replacement with probability falling with their best rank, anew each epoch
  from the same pool, so every epoch sees different hard negatives at the same cost.
- The loss is listwise (`LambdaLoss` by default, from sentence-transformers): each query's positives and
  negatives are ranked together, which is what the reranker is used for.
- The passage the model reads is the one the rerank stage sends: the document's best chunk for the query
  (`rerank.best_chunk`), prefixed with the document title (`passage_text`), which for chat memory is the
  session date.
- Model selection uses a held-out slice of dev *queries* (never pairs of a training query): after each
  epoch the held-out queries' BM25 top-N is reranked and nDCG@10 under position-aware blending decides
  which epoch is kept. The report then compares first stage / replace / blend on those queries.

Why a hand-written loop instead of `CrossEncoderTrainer`: the trainer (and the legacy `fit`, which wraps
it) needs the `datasets` and `accelerate` packages, which are not dependencies of the toolkit. The loop is
plain AdamW with linear warmup/decay around the library's own loss modules.
"""

from __future__ import annotations

import json
import math
import sys
import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from .embed import quiet_model_load
from .errors import InputError, ToolkitError
from .files import write_text_atomic
from .progress import progress_bar
from .rerank import passage_text

TRAIN_SCHEMA = {
    "qid": pl.Utf8,
    "query": pl.Utf8,
    "doc_id": pl.Utf8,
    "chunk_id": pl.Utf8,
    "text": pl.Utf8,
    "label": pl.Int64,
    "origin": pl.Utf8,
    "best_rank": pl.Int64,
}
LOSSES = ("lambda", "listnet", "bce")
BLEND_BUCKETS = [(3.0, 0.75), (10.0, 0.60), (math.inf, 0.40)]
NOT_AN_IMPROVEMENT = "It must not be presented as an improvement."
# With `pseudo="auto"`, judged training queries are topped up with pseudo-queries to this many; a split
# with fewer judged queries than SMALL_SPLIT holds out half of them (holdout="auto").
PSEUDO_TARGET = 600
SMALL_SPLIT = 100


# ---------------------------------------------------------------------------------------------- data


def _passages(store: Any, pairs: pl.DataFrame, queries: pl.DataFrame, level: str) -> pl.DataFrame:
    """[qid, doc_id, chunk_id, text] for (qid, doc_id[, chunk_id]) pairs: the passage the rerank stage would
    send (`rerank.doc_passages` at document level; the given chunk, titled, at chunk level)."""
    from .rerank import doc_passages

    chunks = store.chunks()
    if level == "chunk":
        got = pairs.join(chunks, on=["doc_id", "chunk_id"])
        return got.select("qid", "doc_id", "chunk_id", passage_text(pl.col("title"), pl.col("text")).alias("text"))
    return doc_passages(chunks, queries, pairs).select("qid", "doc_id", "chunk_id", "text")


def _check_inputs(queries: pl.DataFrame, qrels: pl.DataFrame) -> None:
    for name, frame, cols in (("queries", queries, ("qid", "text")), ("qrels", qrels, ("qid", "doc_id", "rel"))):
        missing = [c for c in cols if c not in frame.columns]
        if missing:
            raise InputError(f"{name}: missing column(s) {missing} (have {frame.columns})")


def mine_pool(
    store: Any, queries: pl.DataFrame, qrels: pl.DataFrame, *, depth: int = 30, level: str = "document"
) -> pl.DataFrame:
    """Every positive (judged rel > 0) and every negative candidate of each query, as TRAIN_SCHEMA rows.

    Negative candidates: the top `depth` of BM25 and of dense search (scope-filtered when queries carry a
    `scope`), never judged relevant, plus the documents judged non-relevant (rel <= 0). `best_rank` is a
    negative's best rank over the two lists (None for judged ones that were not retrieved, and for
    positives). Queries with no relevant document in the store are dropped: they teach nothing.
    """
    _check_inputs(queries, qrels)
    if level not in ("document", "chunk"):
        raise InputError(f"level {level!r}: expected 'document' or 'chunk'")
    if depth < 1:
        raise InputError(f"depth must be at least 1, got {depth}")
    if "scope" not in queries.columns:
        queries = queries.with_columns(pl.lit(None, pl.Utf8).alias("scope"))
    docs = store.documents().select("doc_id", pl.col("scope").alias("doc_scope"))
    judged = qrels.select("qid", "doc_id", pl.col("rel").cast(pl.Int64)).join(queries.select("qid", "scope"), on="qid")
    # A judgement outside the query's scope would never be retrieved by the pipeline: leave it out.
    judged = judged.join(docs, on="doc_id").filter(pl.col("scope").is_null() | (pl.col("scope") == pl.col("doc_scope")))
    pos = judged.filter(pl.col("rel") > 0).select("qid", "doc_id", "rel")
    queries = queries.join(pos.select("qid").unique(), on="qid", how="semi")
    if queries.is_empty():
        raise InputError("no query has a relevant (rel > 0) document in the store: nothing to train on")

    q = queries.select("qid", "text", "scope")
    lists = [
        store.lexical_search(q, top_k=depth, level=level).with_columns(pl.lit("lex").alias("origin")),
        store.dense_search(q, top_k=depth, level=level).with_columns(pl.lit("vec").alias("origin")),
    ]
    key = ["qid", "doc_id"] + (["chunk_id"] if level == "chunk" else [])
    retrieved = (
        pl.concat(lists)
        .group_by(key)
        .agg(pl.col("rank").min().alias("best_rank"), pl.col("origin").unique().sort().str.join("+"))
    )
    neg_judged = judged.filter(pl.col("rel") <= 0).select("qid", "doc_id", pl.lit("judged").alias("origin"))
    if level == "chunk":
        neg_judged = neg_judged.join(store.chunks().select("doc_id", "chunk_id"), on="doc_id")
    negs = (
        pl.concat([retrieved, neg_judged.with_columns(pl.lit(None, pl.Int64).alias("best_rank"))], how="diagonal")
        .join(pos, on=["qid", "doc_id"], how="anti")  # never a document judged relevant
        .group_by(key)
        .agg(pl.col("best_rank").min(), pl.col("origin").sort().str.join("+"))
        .with_columns(pl.lit(0, pl.Int64).alias("label"))
    )
    if level == "chunk":  # a relevant document is represented by its best chunk for the query
        pos_items = _passages(store, pos, queries, "document").join(pos, on=["qid", "doc_id"])
    else:
        pos_items = pos
    pos_items = pos_items.select(
        *key, pl.col("rel").alias("label"), pl.lit("judged").alias("origin"), pl.lit(None, pl.Int64).alias("best_rank")
    )
    items = pl.concat([pos_items, negs.select(pos_items.columns)])
    text = _passages(store, items.select(*key), queries, level)
    out = items.join(text, on=["qid", "doc_id"] + (["chunk_id"] if level == "chunk" else []))
    out = out.join(queries.select("qid", pl.col("text").alias("query")), on="qid")
    return out.select(list(TRAIN_SCHEMA)).cast(TRAIN_SCHEMA).sort("qid", "label", "best_rank", "doc_id",
                                                                  descending=[False, True, False, False], nulls_last=True)


def sample_negatives(
    pool: pl.DataFrame, negatives_per_query: int, seed: int, max_positives: int | None = None
) -> pl.DataFrame:
    """Up to `max_positives` positives (all when None; highest grades first, then at random) plus up to
    `negatives_per_query` negatives per query, drawn without replacement with weight 1/sqrt(best rank)
    (judged non-relevant documents weigh as rank 1), seeded. The positive cap keeps a listwise step small
    on collections with hundreds of judged-relevant documents per query (TREC DL).

    Gumbel top-k: the k largest log(w) + Gumbel noise are a weighted sample without replacement, for all
    queries at once (no per-query loop)."""
    if negatives_per_query < 1:
        raise InputError(f"negatives_per_query must be at least 1, got {negatives_per_query}")
    rng = np.random.default_rng(seed)
    negs = pool.filter(pl.col("label") <= 0)
    gumbel = -np.log(-np.log(rng.uniform(1e-12, 1.0, len(negs))))
    negs = (
        negs.with_columns((-0.5 * pl.col("best_rank").fill_null(1).cast(pl.Float64).log() + pl.Series(gumbel)).alias("_k"))
        .filter(pl.col("_k").rank("ordinal", descending=True).over("qid") <= negatives_per_query)
        .drop("_k")
    )
    pos = pool.filter(pl.col("label") > 0)
    if max_positives is not None:
        if max_positives < 1:
            raise InputError(f"max_positives must be at least 1, got {max_positives}")
        pos = (
            pos.with_columns(pl.Series("_r", rng.uniform(size=len(pos))))
            .filter(pl.struct(-pl.col("label"), "_r").rank("ordinal").over("qid") <= max_positives)
            .drop("_r")
        )
    return pl.concat([pos, negs]).sort(
        "qid", "label", "best_rank", "doc_id", descending=[False, True, False, False], nulls_last=True
    )


def build_training_data(
    store: Any,
    queries: pl.DataFrame,
    qrels: pl.DataFrame,
    *,
    negatives_per_query: int = 15,
    depth: int = 30,
    seed: int = 0,
    level: str = "document",
) -> pl.DataFrame:
    """Training pairs [qid, query, doc_id, chunk_id, text, label, origin, best_rank] for a reranker.

    label is the judged grade (> 0) for positives and 0 for negatives; origin says where a negative came
    from ("lex", "vec", "lex+vec", "judged"); `text` is what the reranker reads (`passage_text`). The frame
    writes as Parquet or CSV for inspection. See `mine_pool` and `sample_negatives` for the rules.
    """
    pool = mine_pool(store, queries, qrels, depth=depth, level=level)
    return sample_negatives(pool, negatives_per_query, seed)


def pseudo_pool(store: Any, n: int, *, seed: int = 0, depth: int = 30, level: str = "document",
                required: bool = True) -> pl.DataFrame:
    """`mine_pool` rows (TRAIN_SCHEMA) for `n` pseudo-queries drawn from the store's chunks: negatives mined
    from our own BM25 and dense lists like a judged query's; the positive is the pseudo-query's own passage
    (span cut out for cloze queries), origin "pseudo:span" or "pseudo:keywords". A corpus with no chunk
    long enough to cut a query from is an error only when pseudo-queries were asked for (`required`)."""
    from .pseudo_queries import pseudo_queries

    chunks = store.chunks().join(store.doc_sources().select("doc_id", "scope"), on="doc_id", how="left")
    try:
        pq, pqrels, positives = pseudo_queries(chunks, n, seed=seed)
    except InputError:
        if required:
            raise
        return pl.DataFrame(schema=TRAIN_SCHEMA)
    pool = mine_pool(store, pq.select("qid", "text", "scope"), pqrels, depth=depth, level=level)
    pos = positives.join(pq.select("qid", "kind"), on="qid").select(
        "qid", "doc_id", pl.col("text").alias("_text"), ("pseudo:" + pl.col("kind")).alias("_origin"))
    return pool.join(pos, on=["qid", "doc_id"], how="left").with_columns(
        pl.when(pl.col("label") > 0).then(pl.col("_text")).otherwise(pl.col("text")).alias("text"),
        pl.when(pl.col("label") > 0).then(pl.col("_origin")).otherwise(pl.col("origin")).alias("origin"),
    ).select(list(TRAIN_SCHEMA))


# ---------------------------------------------------------------------------------------------- model


def load_cross_encoder(base_model: str | None, max_length: int):
    """A CrossEncoder with one output label on the CPU, from a local directory (default: the packaged
    all-MiniLM-L6-v2, which gets a fresh scoring head) without network access."""
    from .embed import resolve_model

    path = resolve_model(base_model or "all-MiniLM-L6-v2")[1]
    if not Path(path).exists():
        raise ToolkitError(f"base model {base_model!r}: give a local model directory (the model hub is not used)")
    try:
        from sentence_transformers import CrossEncoder

        with quiet_model_load(weights_report=False):
            return CrossEncoder(path, num_labels=1, max_length=max_length, device="cpu", local_files_only=True)
    except Exception as e:
        raise ToolkitError(f"could not load base model {path!r} ({type(e).__name__}: {str(e)[:300]})") from e


def _make_loss(model: Any, loss: str):
    from sentence_transformers.cross_encoder import losses

    if loss == "lambda":
        return losses.LambdaLoss(model)
    if loss == "listnet":
        return losses.ListNetLoss(model)
    if loss == "bce":
        return losses.BinaryCrossEntropyLoss(model)
    raise InputError(f"loss {loss!r}: expected one of {', '.join(LOSSES)}")


def _groups(data: pl.DataFrame) -> tuple[list[str], list[list[str]], list[list[float]]]:
    g = data.group_by("qid", maintain_order=True).agg("query", "text", "label")
    return [x[0] for x in g["query"].to_list()], g["text"].to_list(), g["label"].to_list()


def _train_epoch(model, loss_fn, loss: str, opt, sched, data: pl.DataFrame, *, batch_queries: int, seed: int,
                 progress: bool, desc: str) -> float:
    """One pass over the queries of `data` in a seeded order, `batch_queries` queries per step."""
    import torch

    queries, docs, labels = _groups(data)
    order = np.random.default_rng(seed).permutation(len(queries))
    model.model.train()
    total, steps = 0.0, 0
    bar = progress_bar(range(0, len(order), batch_queries), show=progress, desc=desc, unit="step", leave=False)
    for lo in bar:
        idx = order[lo : lo + batch_queries]
        if loss == "bce":
            q = [queries[i] for i in idx for _ in docs[i]]
            d = [t for i in idx for t in docs[i]]
            y = torch.tensor([float(v > 0) for i in idx for v in labels[i]])
            value = loss_fn([q, d], y)
        else:
            value = loss_fn([[queries[i] for i in idx], [docs[i] for i in idx]],
                            [torch.tensor([float(v) for v in labels[i]]) for i in idx])
        value.backward()
        torch.nn.utils.clip_grad_norm_(model.model.parameters(), 1.0)
        opt.step()
        sched.step()
        opt.zero_grad()
        total += float(value.detach())
        steps += 1
        bar.set_postfix(loss=f"{total / steps:.4f}")
    model.model.eval()
    return total / max(steps, 1)


# ---------------------------------------------------------------------------------------------- evaluation


def first_stage_pairs(
    store: Any, queries: pl.DataFrame, depth: int, config: Any = "bm25-only"
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(the first stage's fused top-`depth` [qid, doc_id, chunk_id, score, rank], rerank pairs [qid, query,
    doc_id, chunk_id, text]) for `queries` under `config` (preset name, path or PipelineConfig): the list
    a reranker placed behind that pipeline would be given. The default, bm25-only, is BM25 alone."""
    from .config import load_config
    from .fusion import fuse, list_weights
    from .pipeline import prepare

    cfg = load_config(config) if isinstance(config, str | Path) else config
    cfg = cfg.with_updates({"rerank.provider": "none", "expansion.provider": "none"})
    if "scope" not in queries.columns:
        queries = queries.with_columns(pl.lit(None, pl.Utf8).alias("scope"))
    prep = prepare(store, queries, cfg, use_cache=False, learned_features=False)  # fused by RRF/convex below
    weights = list_weights(prep.candidates, prep.features, cfg.fusion, cfg.routing)
    fused = fuse(prep.candidates, weights, cfg.fusion).filter(pl.col("rank") <= depth)
    fused = fused.select("qid", "doc_id", "chunk_id", "score", "rank")
    pairs = _passages(store, fused.select("qid", "doc_id"), queries, "document").join(
        queries.select("qid", pl.col("text").alias("query")), on="qid"
    )
    return fused, pairs.select("qid", "query", "doc_id", "chunk_id", "text")


def score_pairs(model: Any, pairs: pl.DataFrame, *, batch_size: int = 64, progress: bool = False) -> pl.DataFrame:
    """[qid, doc_id, chunk_id, rerank_score] from one batched `predict` over all pairs (faster than one call
    per query, which the guarded `rerank_scores` stage makes for fault isolation)."""
    if pairs.is_empty():
        return pairs.select("qid", "doc_id", "chunk_id", pl.lit(None, pl.Float64).alias("rerank_score"))
    scores = model.predict(list(zip(pairs["query"].to_list(), pairs["text"].to_list(), strict=True)),
                           batch_size=batch_size, show_progress_bar=progress, convert_to_numpy=True)
    return pairs.select("qid", "doc_id", "chunk_id").with_columns(
        pl.Series("rerank_score", np.asarray(scores, dtype=np.float64).reshape(len(pairs)))
    )


def compare_blends(fused: pl.DataFrame, scores: pl.DataFrame, qrels: pl.DataFrame, *, top_n: int,
                   measure: str = "nDCG@10", buckets: list[tuple[float, float]] | None = None) -> dict[str, Any]:
    """`measure` of the first stage alone, reranked with `replace`, and with position-aware blending, plus
    the per-query values of each (for a paired test)."""
    from .blend import blend
    from .config import RerankConfig
    from .metrics import evaluate

    out: dict[str, Any] = {}
    runs = {"first_stage": fused}
    for mode in ("replace", "position"):
        cfg = RerankConfig(blend=mode, top_n=top_n, buckets=buckets or BLEND_BUCKETS)
        runs["replace" if mode == "replace" else "blend"] = blend(fused, scores, cfg)
    for name, run in runs.items():
        per_q = evaluate(run.select("qid", "doc_id", "score"), qrels, [measure])
        # Judged queries absent from the run (BM25 found nothing) count as 0, as trec_eval -c does.
        out[name] = per_q.select("qid", "value").sort("qid")
    return out


# Blend settings the trainer compares on held-out queries, from QMD's to retrieval-only (reranker off): a
# reranker trained on a few hundred queries may only be trusted below the top ranks, or not at all.
BLEND_GRID: list[list[tuple[float, float]]] = [
    [(3.0, 0.75), (10.0, 0.60), (math.inf, 0.40)],
    [(3.0, 0.85), (10.0, 0.75), (math.inf, 0.60)],
    [(3.0, 0.95), (10.0, 0.90), (math.inf, 0.80)],
    [(math.inf, 1.0)],
]


def recommend_blend(fused: pl.DataFrame, scores: pl.DataFrame, qrels: pl.DataFrame, *, top_n: int,
                    grid: list[list[tuple[float, float]]] | None = None, measure: str = "nDCG@10",
                    alpha: float = 0.05) -> tuple[list[tuple[float, float]], list[dict[str, Any]]]:
    """(buckets with the best mean `measure` on these queries, every setting's value). Ties go to the
    setting that trusts retrieval more (the later one in the grid). The last setting switches the reranker
    off, and it is kept unless the best setting beats it by more than noise (paired t-test p < `alpha`):
    on a handful of held-out queries a lucky gain is easy, and a reranker that is not shown to help
    should not be used."""
    from .blend import blend
    from .config import RerankConfig
    from .metrics import evaluate

    grid = grid or BLEND_GRID
    rows, per_q = [], []
    for buckets in grid:
        run = blend(fused, scores, RerankConfig(blend="position", top_n=top_n, buckets=buckets))
        pq = evaluate(run.select("qid", "doc_id", "score"), qrels, [measure]).sort("qid")
        per_q.append(pq["value"].to_numpy())
        rows.append({"buckets": [[b, w] for b, w in buckets], measure: round(float(pq["value"].mean()), 6)})
    off = len(rows) - 1
    for i, r in enumerate(rows):
        r["p_vs_off"] = _paired_p(per_q[i], per_q[off]) if i != off else None
    best = max(range(len(rows)), key=lambda i: (rows[i][measure], i))
    p = rows[best]["p_vs_off"]
    if best != off and (p is None or p >= alpha or rows[best][measure] <= rows[off][measure]):
        best = off
    return [tuple(x) for x in rows[best]["buckets"]], rows


def recommend_for_model(store: Any, dataset_dir: str | Path, model_dir: str | Path, first_stage: Any = None) -> dict[str, Any]:
    """Compute (or read) the held-out blend recommendation of a model trained here, and record it in its
    `training_report.json`: for models trained before the trainer made it, or behind another first stage
    (`first_stage`: config path or name; default the one it was trained against), without retraining."""
    from .loaders import Dataset
    from .rerank import CrossEncoderReranker

    path = Path(model_dir) / "training_report.json"
    rep = json.loads(path.read_text())
    stage = str(first_stage) if first_stage is not None else rep["params"].get("first_stage", "bm25-only")
    if "recommended_buckets" in rep and rep.get("recommended_for") == stage:
        return rep
    ds = Dataset.open(dataset_dir)
    held_q = ds.queries(rep["split"]).filter(pl.col("qid").is_in(rep["holdout_qids"]))
    held_qrels = ds.qrels(rep["split"]).join(held_q.select("qid"), on="qid", how="semi")
    depth = int(rep["params"].get("eval_depth", 40))
    fused, pairs = first_stage_pairs(store, held_q, depth, stage)
    scores = score_pairs(CrossEncoderReranker(str(model_dir))._get(), pairs)
    rep["recommended_buckets"], rep["blend_grid"] = recommend_blend(fused, scores, held_qrels, top_n=depth)
    rep["recommended_for"] = stage
    write_text_atomic(path, json.dumps(rep, indent=2, default=str) + "\n")
    return rep


def _paired_p(a: np.ndarray, b: np.ndarray) -> float | None:
    """Two-sided p-value of a paired t-test (the usual IR significance test); None when undefined."""
    from scipy.stats import ttest_rel

    if len(a) < 2 or np.allclose(a, b):
        return None
    p = float(ttest_rel(a, b).pvalue)
    return p if math.isfinite(p) else None


# ---------------------------------------------------------------------------------------------- training


def judge(first_stage: float, blended: float, p_value: float | None, n_queries: int, split: str) -> tuple[bool, str]:
    """(helps, verdict sentence). It helps only if blending beats the first stage on held-out queries by more
    than noise: a gain a paired t-test cannot tell from chance (p >= 0.05) does not count."""
    delta = blended - first_stage
    where = f"on {n_queries} held-out {split} queries"
    if delta <= 0:
        return False, (f"The trained reranker does NOT help: position-aware blend nDCG@10 {blended:.4f} vs first "
                       f"stage {first_stage:.4f} {where}. {NOT_AN_IMPROVEMENT}")
    sig = f"paired t-test p = {p_value:.3g}" if p_value is not None else "no paired test possible"
    if p_value is None or p_value >= 0.05:
        return False, (f"The trained reranker moves blended nDCG@10 by {delta:+.4f} {where}, within noise ({sig}): "
                      f"treat it as unconfirmed. {NOT_AN_IMPROVEMENT}")
    return True, (f"The trained reranker helps under position-aware blending: nDCG@10 {first_stage:.4f} -> "
                  f"{blended:.4f} ({delta:+.4f}, {sig}) {where}; the epoch was chosen on these queries, "
                  "so the gain is slightly optimistic.")




@dataclass
class TrainReport:
    """What a training run did and whether the result helps on held-out queries."""

    out: str
    split: str
    base_model: str
    params: dict[str, Any]
    n_train_queries: int
    n_holdout_queries: int
    n_train_pairs_per_epoch: int
    epochs_run: int
    best_epoch: int
    epochs: list[dict[str, Any]]
    measure: str
    first_stage: float
    replace: float
    blend: float
    p_value: float | None
    helps: bool
    verdict: str
    seconds: dict[str, float]
    holdout_qids: list[str] = field(repr=False, default_factory=list)
    recommended_buckets: list[tuple[float, float]] = field(default_factory=list)
    blend_grid: list[dict[str, Any]] = field(default_factory=list)
    recommended_for: str = ""  # the first stage the recommendation was made behind
    n_pseudo_queries: int = 0  # of n_train_queries, how many were pseudo-queries from the corpus

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def summary(self) -> str:
        s = self.seconds
        return (
            f"trained on {self.n_train_queries} {self.split} queries"
            + (f" ({self.n_pseudo_queries} of them pseudo-queries from the corpus)" if self.n_pseudo_queries else "")
            + f" ({self.n_train_pairs_per_epoch} pairs/epoch, "
            f"{self.epochs_run} epoch(s), kept epoch {self.best_epoch}); held-out {self.n_holdout_queries} queries, "
            f"{self.measure}: first stage {self.first_stage:.4f}, replace {self.replace:.4f}, "
            f"blend {self.blend:.4f}\n{self.verdict}\n"
            f"seconds: mining {s['mining']:.0f}, training {s['training']:.0f}, scoring {s['scoring']:.0f}; "
            f"model in {self.out}"
        )


def split_holdout(queries: pl.DataFrame, holdout: float, seed: int, by: str = "query") -> tuple[pl.DataFrame, pl.DataFrame]:
    """(train, held-out) queries. `by="query"`: a seeded random share of queries; `by="scope"`: whole scopes
    (e.g. whole conversations) are held out, which is closer to meeting new memory at test time."""
    if not 0.0 < holdout < 1.0:
        raise InputError(f"holdout must be a fraction between 0 and 1 (exclusive), got {holdout}")
    if by not in ("query", "scope"):
        raise InputError(f"holdout_by {by!r}: expected 'query' or 'scope'")
    rng = np.random.default_rng(seed)
    if by == "scope":
        if "scope" not in queries.columns or queries["scope"].null_count() == len(queries):
            raise InputError("holdout_by='scope' needs queries with a scope")
        sizes = queries.group_by("scope").len().sort("scope")
        sizes = sizes[rng.permutation(len(sizes))]
        take = (sizes["len"].cum_sum() - sizes["len"]) < holdout * len(queries)  # until the share is reached
        held = sizes.filter(take)["scope"]
        if len(held) == len(sizes):
            raise InputError(f"holdout_by='scope' would hold out every scope ({len(sizes)}); lower holdout")
        mask = queries["scope"].is_in(held.implode())
    else:
        n = max(1, round(holdout * len(queries)))
        if n >= len(queries):
            raise InputError(f"holdout {holdout} of {len(queries)} queries leaves none to train on")
        pick = np.zeros(len(queries), dtype=bool)
        pick[rng.permutation(len(queries))[:n]] = True
        mask = pl.Series(pick)
    return queries.filter(~mask), queries.filter(mask)


def _prepare_out(out: Path, force: bool) -> None:
    if out.exists() and any(out.iterdir()) and not (out / "training_report.json").exists() and not force:
        raise InputError(f"{out}: exists and is not a reranker trained here; choose an empty directory (or force=True)")
    out.mkdir(parents=True, exist_ok=True)


def train_reranker(
    store: Any,
    dataset_dir: str | Path,
    *,
    split: str = "dev",
    out: str | Path,
    base_model: str | None = None,
    epochs: int = 3,
    negatives_per_query: int = 15,
    depth: int = 30,
    loss: str = "lambda",
    lr: float = 5e-5,
    head_lr: float = 1e-3,
    batch_queries: int = 4,
    max_length: int = 160,
    freeze_layers: int = 2,
    eval_depth: int = 40,
    first_stage: Any = "bm25-only",
    max_positives: int = 16,
    holdout: float | str = "auto",
    holdout_by: str = "query",
    pseudo: int | str = 0,
    level: str = "document",
    seed: int = 0,
    force: bool = False,
    progress: bool = False,
) -> TrainReport:
    """Train a reranker on the judgements of `split` of the BEIR dataset at `dataset_dir`, save it to `out`
    (loadable by `CrossEncoderReranker(out)`), and evaluate it on held-out queries of the same split.

    `store` is a `Store` (or the path of one) holding the dataset's corpus. Training on "test" is refused
    unless `force=True`: a reranker trained on the test judgements makes every test number meaningless.
    Each epoch is evaluated on the held-out queries (the top `eval_depth` of `first_stage`, a config whose
    fused list the reranker goes behind, bm25-only by default; its blend buckets; nDCG@10)
    and the best epoch is kept in `out`, with `training_report.json` and `training_data.parquet` (the pairs
    of every epoch, column `epoch`). Seeds fix the split, the negatives, the order and the head init.

    `pseudo`: pseudo-queries built from the corpus (`toolkit.pseudo_queries`) added to the training
    queries; "auto" tops the judged training queries up to `PSEUDO_TARGET`. Off by default: measured on
    CACM at this CPU budget they did not make the reranker useful (benchmarks/RESULTS.md).
    `holdout`: the share of judged queries kept for model selection; "auto" holds out 20% of a large
    split and half of a small one (< `SMALL_SPLIT` queries): a verdict on 5 held-out queries means
    nothing, and a few more training queries do not rescue a reranker that has a dozen.
    """
    from .loaders import Dataset
    from .store import Store

    if split == "test" and not force:
        raise ToolkitError(
            "refusing to train on the 'test' split: its judgements are for measuring, and a reranker trained on "
            "them makes every test number meaningless. Train on 'dev' (or pass force=True / --force if you "
            "really mean it)."
        )
    if split == "test":
        msg = ("WARNING: training a reranker on the TEST judgements (forced). No test-split number measured "
               "with this model is an honest estimate; do not report one.")
        warnings.warn(msg, stacklevel=2)
        print(msg, file=sys.stderr)
    for name, v in (("epochs", epochs), ("batch_queries", batch_queries), ("eval_depth", eval_depth)):
        if v < 1:
            raise InputError(f"{name} must be at least 1, got {v}")
    if max_length < 16:
        raise InputError(f"max_length must be at least 16, got {max_length}")
    if loss not in LOSSES:
        raise InputError(f"loss {loss!r}: expected one of {', '.join(LOSSES)}")
    ds = Dataset.open(dataset_dir)
    if not force:  # a dev file holding test queries trains on test too, as `tune` and `train-fusion` refuse
        ds.check_apart_from_test(split, "training")
    own_store = not hasattr(store, "lexical_search")
    store = Store(store) if own_store else store
    try:
        return _train(store, ds, split=split, out=Path(out), base_model=base_model,
                      epochs=epochs, negatives_per_query=negatives_per_query, depth=depth, loss=loss, lr=lr,
                      head_lr=head_lr, batch_queries=batch_queries, max_length=max_length,
                      freeze_layers=freeze_layers, eval_depth=eval_depth, first_stage=first_stage,
                      max_positives=max_positives, holdout=holdout, holdout_by=holdout_by, pseudo=pseudo,
                      level=level, seed=seed, force=force, progress=progress)
    finally:
        if own_store:
            store.close()


def _train(store: Any, ds: Any, *, split: str, out: Path, base_model: str | None, epochs: int,
           negatives_per_query: int, depth: int, loss: str, lr: float, head_lr: float, batch_queries: int,
           max_length: int, freeze_layers: int, eval_depth: int, first_stage: Any, max_positives: int,
           holdout: float | str, holdout_by: str, pseudo: int | str, level: str, seed: int, force: bool,
           progress: bool) -> TrainReport:
    import torch
    from transformers import get_linear_schedule_with_warmup, set_seed

    from .config import load_config

    params = {k: v for k, v in locals().items()
              if k not in ("store", "ds", "out", "torch", "get_linear_schedule_with_warmup", "set_seed", "load_config")}
    if not isinstance(first_stage, str | Path):
        params["first_stage"] = first_stage.name or "config"
    seconds = {"mining": 0.0, "training": 0.0, "scoring": 0.0}
    qrels = ds.qrels(split)
    queries = ds.queries(split)
    _prepare_out(out, force)

    t0 = time.perf_counter()
    judged_pos = qrels.filter(pl.col("rel") > 0).select("qid").unique()
    queries = queries.join(judged_pos, on="qid", how="semi")
    if holdout == "auto":
        holdout = 0.2 if len(queries) >= SMALL_SPLIT else 0.5
    params["holdout"] = holdout  # the share used, also when it was "auto"
    train_q, held_q = split_holdout(queries, float(holdout), seed, holdout_by)
    pool = mine_pool(store, train_q, qrels, depth=depth, level=level)
    n_pseudo = max(0, PSEUDO_TARGET - pool["qid"].n_unique()) if pseudo == "auto" else int(pseudo)
    if n_pseudo:
        extra = pseudo_pool(store, n_pseudo, seed=seed, depth=depth, level=level, required=pseudo != "auto")
        n_pseudo = extra["qid"].n_unique()
        pool = pl.concat([pool, extra])
    fs_cfg = load_config(first_stage) if isinstance(first_stage, str | Path) else first_stage
    held_fused, held_pairs = first_stage_pairs(store, held_q, eval_depth, fs_cfg)
    buckets = fs_cfg.rerank.buckets
    held_qrels = qrels.join(held_q.select("qid"), on="qid", how="semi")
    seconds["mining"] = time.perf_counter() - t0

    set_seed(seed)
    model = load_cross_encoder(base_model, max_length)
    loss_fn = _make_loss(model, loss)
    samples = [sample_negatives(pool, negatives_per_query, seed + e, max_positives) for e in range(epochs)]
    steps = sum(math.ceil(s["qid"].n_unique() / batch_queries) for s in samples)
    # The word embeddings (half of MiniLM's weights) stay frozen: a few hundred queries cannot retrain a
    # 30k-word vocabulary, and updating them dominates the CPU time of an optimizer step.
    # Freezing the lowest `freeze_layers` encoder layers too halves the backward pass on 2 cores; the top
    # layers are where a new task is learned.
    frozen = ("word_embeddings",) + tuple(f"encoder.layer.{i}." for i in range(freeze_layers))
    for n, p in model.model.named_parameters():
        if any(f in n for f in frozen):
            p.requires_grad_(False)
    # The scoring head starts from random weights, so it gets a larger learning rate than the encoder.
    named = [(n, p) for n, p in model.model.named_parameters() if p.requires_grad]
    head = [p for n, p in named if n.startswith("classifier")]
    body = [p for n, p in named if not n.startswith("classifier")]
    opt = torch.optim.AdamW([{"params": body, "lr": lr}, {"params": head, "lr": head_lr}], weight_decay=0.01)
    sched = get_linear_schedule_with_warmup(opt, int(0.1 * steps), steps)

    history: list[dict[str, Any]] = []
    best: dict[str, Any] | None = None
    for e in range(epochs):
        t0 = time.perf_counter()
        mean_loss = _train_epoch(model, loss_fn, loss, opt, sched, samples[e], batch_queries=batch_queries,
                                 seed=seed + 1000 + e, progress=progress, desc=f"epoch {e + 1}/{epochs}")
        seconds["training"] += time.perf_counter() - t0
        t0 = time.perf_counter()
        with torch.inference_mode():
            scores = score_pairs(model, held_pairs, progress=progress)
        res = compare_blends(held_fused, scores, held_qrels, top_n=eval_depth, buckets=buckets)
        seconds["scoring"] += time.perf_counter() - t0
        row = {"epoch": e + 1, "loss": mean_loss, **{k: float(v["value"].mean()) for k, v in res.items()}}
        history.append(row)
        if progress:
            print(f"epoch {e + 1}: loss {mean_loss:.4f}, held-out nDCG@10 first stage {row['first_stage']:.4f}, "
                  f"replace {row['replace']:.4f}, blend {row['blend']:.4f}", file=sys.stderr)
        if best is None or row["blend"] > best["row"]["blend"]:
            best = {"row": row, "res": res, "scores": scores}
            with quiet_model_load():  # transformers draws a "Writing model shards" bar on save
                model.save(str(out))

    res, row = best["res"], best["row"]
    p = _paired_p(res["blend"]["value"].to_numpy(), res["first_stage"]["value"].to_numpy())
    helps, verdict = judge(row["first_stage"], row["blend"], p, len(held_q), split)
    rec, grid = recommend_blend(held_fused, best["scores"], held_qrels, top_n=eval_depth)
    verdict += (" Blend buckets chosen on the same held-out queries: "
                + ("reranker off (retrieval only)." if rec == [(math.inf, 1.0)] else f"{rec}."))
    report = TrainReport(
        out=str(out), split=split, base_model=base_model or "all-MiniLM-L6-v2 (packaged, fresh head)", params=params,
        n_train_queries=pool["qid"].n_unique(), n_holdout_queries=len(held_q), n_pseudo_queries=n_pseudo,
        n_train_pairs_per_epoch=len(samples[0]), epochs_run=epochs, best_epoch=row["epoch"], epochs=history,
        measure="nDCG@10", first_stage=row["first_stage"], replace=row["replace"], blend=row["blend"], p_value=p,
        helps=helps, verdict=verdict, seconds={k: round(v, 2) for k, v in seconds.items()},
        holdout_qids=held_q["qid"].to_list(), recommended_buckets=rec, blend_grid=grid,
        recommended_for=str(params["first_stage"]),
    )
    pl.concat([s.with_columns(pl.lit(i + 1).alias("epoch")) for i, s in enumerate(samples)]).write_parquet(
        out / "training_data.parquet"
    )
    write_text_atomic(out / "training_report.json", json.dumps(report.to_dict(), indent=2, default=str) + "\n")
    return report


__all__ = [
    "TrainReport",
    "build_training_data",
    "compare_blends",
    "first_stage_pairs",
    "judge",
    "load_cross_encoder",
    "mine_pool",
    "passage_text",
    "recommend_blend",
    "recommend_for_model",
    "sample_negatives",
    "score_pairs",
    "split_holdout",
    "train_reranker",
]
