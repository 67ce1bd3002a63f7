"""Per-query dense weight from the dense list's own score gap: a flat dense list counts less, a dense list
with a clear winner counts more, and each query's route is reported."""

from __future__ import annotations

import polars as pl

from toolkit import adapt
from toolkit.config import AdaptConfig


def _cands(qid: str, dense_scores: list[float], lex_docs: list[str], dense_docs: list[str]) -> pl.DataFrame:
    rows = [(qid, "orig:lex", "orig", "lex", d, f"{d}#0", i + 1, 10.0 - i) for i, d in enumerate(lex_docs)]
    rows += [(qid, "orig:vec", "orig", "vec", d, f"{d}#0", i + 1, s) for i, (d, s) in enumerate(zip(dense_docs, dense_scores, strict=True))]
    return pl.DataFrame(rows, schema=["qid", "list_id", "variant", "retriever", "doc_id", "chunk_id", "rank", "score"], orient="row")


def test_routes_follow_the_dense_gap():
    docs = [f"d{i}" for i in range(10)]
    c = pl.concat([
        _cands("flat", [0.50 - 0.001 * i for i in range(10)], docs, docs[::-1]),
        _cands("clear", [0.90] + [0.40 - 0.001 * i for i in range(9)], docs, docs[::-1]),
    ])
    r = adapt.routes(adapt.dense_gap(c), AdaptConfig(dense_gap=True)).sort("qid")
    assert r["route"].to_list() == ["dense-led", "bm25-led"]
    assert abs(r["dense_weight"][0] - (0.90 - 0.392) / 0.16) < 1e-9
    assert r["dense_weight"][1] == 0.25
    w = pl.DataFrame({"qid": ["flat", "flat", "clear"], "list_id": ["orig:lex", "orig:vec", "orig:vec"], "weight": [1.0, 1.0, 1.0]})
    out = adapt.adapt_weights(w, r).sort("qid", "list_id")
    assert out["weight"].to_list() == [r["dense_weight"][0], 1.0, 0.25]
