"""Pseudo-queries from the corpus itself, for training a reranker where judgements are few.

A collection with 20-40 judged dev queries cannot teach a fresh cross-encoder head anything (measured:
CACM, Vaswani and MS MARCO rerankers trained on their dev judgements alone made the blend worse). The
corpus is the obvious extra source: every passage yields a query whose answer is known, in the
collection's own vocabulary. Measured on CACM, 600 of them and 17 minutes of CPU training did not make
the reranker useful either (benchmarks/RESULTS.md), so the trainer uses them only when asked. Two kinds,
both built without a model (no query generator can be downloaded here):

- span (inverse cloze task, Lee et al. 2019): a run of 5-12 words cut out of a chunk is the query, and the
  chunk *without* that run is the positive, so the reranker has to learn what a passage is about rather
  than to find a copied string (BM25 already does that);
- keywords: 3-6 distinct content words of a chunk drawn by tf-idf weight, in document order, like the
  terse queries of library catalogues and agent tool calls; the chunk itself is the positive.

Negatives are not made here: the trainer mines them from the toolkit's own BM25 and dense lists for each
pseudo-query, exactly as for judged queries. Written by hand because no library we use builds cloze or
keyword queries (GPL/InPars-style generation needs a seq2seq model).
"""

from __future__ import annotations

import math
import re
from collections import Counter

import numpy as np
import polars as pl

from .errors import InputError
from .rerank import _stopwords, passage_text

WORD = re.compile(r"\S+")
TERM = re.compile(r"\w+")
KINDS = ("span", "keywords")


def _content_terms(text: str, stop: frozenset[str]) -> list[str]:
    """Lowercased word tokens that can stand for a passage: no stopwords, no numbers, longer than 2."""
    return [t for t in TERM.findall(text.lower()) if t not in stop and len(t) > 2 and not t.isdigit()]


def pseudo_queries(
    chunks: pl.DataFrame,
    n: int,
    *,
    seed: int = 0,
    min_words: int = 15,
    kinds: tuple[str, ...] = KINDS,
) -> tuple[pl.DataFrame, pl.DataFrame, pl.DataFrame]:
    """(queries [qid, text, scope, kind], qrels [qid, doc_id, rel], positives [qid, doc_id, chunk_id, text]).

    `chunks` is `Store.chunks()` (with `scope` joined in when documents carry one). Up to `n` chunks with at
    least `min_words` words are drawn at random (seeded), one query each, kinds alternating. `positives`
    holds the passage the reranker should read as relevant (`passage_text` of title and chunk, the span
    cut out for span queries).
    """
    if n < 1:
        raise InputError(f"pseudo-queries: n must be at least 1, got {n}")
    bad = [k for k in kinds if k not in KINDS]
    if bad or not kinds:
        raise InputError(f"pseudo-queries: kinds {list(kinds)}: expected some of {list(KINDS)}")
    if "scope" not in chunks.columns:
        chunks = chunks.with_columns(pl.lit(None, pl.Utf8).alias("scope"))
    pool = chunks.filter(pl.col("text").str.count_matches(r"\S+") >= min_words)
    if pool.is_empty():
        raise InputError(f"pseudo-queries: no chunk has {min_words} or more words to build a query from")
    rng = np.random.default_rng(seed)
    pick = pool[np.sort(rng.choice(len(pool), size=min(n, len(pool)), replace=False))]

    stop = _stopwords()
    # Document frequency over the whole pool, for the keyword draw's idf.
    df = Counter(t for text in pool["text"].to_list() for t in set(_content_terms(text, stop)))
    n_docs = len(pool)

    rows = []
    for i, r in enumerate(pick.iter_rows(named=True)):
        kind = kinds[i % len(kinds)]
        words = WORD.findall(r["text"])
        positive = r["text"]
        if kind == "span":
            length = int(rng.integers(5, 13))
            start = int(rng.integers(0, len(words) - length + 1))
            query = " ".join(words[start : start + length])
            positive = " ".join(words[:start] + words[start + length :])
        else:
            # Content words in document order (Counter keeps first-seen order) with their counts.
            tf = Counter(_content_terms(r["text"], stop))
            terms = list(tf)
            if len(terms) < 3:
                continue
            w = np.array([tf[t] * math.log(n_docs / df.get(t, 1)) for t in terms]) + 1e-9
            k = min(int(rng.integers(3, 7)), len(terms))
            chosen = set(rng.choice(len(terms), size=k, replace=False, p=w / w.sum()).tolist())
            query = " ".join(t for j, t in enumerate(terms) if j in chosen)
        rows.append({"qid": f"pseudo-{seed}-{i}", "text": query, "scope": r["scope"], "kind": kind,
                     "doc_id": r["doc_id"], "chunk_id": r["chunk_id"], "title": r["title"], "positive": positive})
    got = pl.DataFrame(rows, schema={"qid": pl.Utf8, "text": pl.Utf8, "scope": pl.Utf8, "kind": pl.Utf8,
                                     "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "title": pl.Utf8, "positive": pl.Utf8})
    queries = got.select("qid", "text", "scope", "kind")
    qrels = got.select("qid", "doc_id", pl.lit(1, pl.Int64).alias("rel"))
    positives = got.select("qid", "doc_id", "chunk_id", passage_text(pl.col("title"), pl.col("positive")).alias("text"))
    return queries, qrels, positives


__all__ = ["KINDS", "pseudo_queries"]
