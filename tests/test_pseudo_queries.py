"""Pseudo-queries from the corpus: what a query is cut from, what the positive passage is, seeding, refusals."""

from __future__ import annotations

import re

import polars as pl
import pytest

from toolkit.errors import InputError
from toolkit.pseudo_queries import pseudo_queries

LONG = [
    "The connection pool of the billing service ran out of slots during the nightly export, so every retry "
    "queued behind the export job until the pool was resized to forty connections.",
    "Stripe webhooks arrive out of order when the signing secret rotates; the handler now stores the event "
    "id and replays missed events from the dashboard every fifteen minutes.",
    "Our deploy pipeline builds the image once, runs the migration job against a snapshot, and only then "
    "promotes the image to production behind a feature flag that defaults to off.",
]


def _chunks(texts: list[str]) -> pl.DataFrame:
    n = len(texts)
    return pl.DataFrame({
        "chunk_id": [f"c{i}#0" for i in range(n)], "doc_id": [f"c{i}" for i in range(n)], "ord": [0] * n,
        "text": texts, "title": [f"Note {i}" for i in range(n)], "scope": ["ops"] * n,
    })


def test_span_query_is_cut_out_of_its_positive_and_keywords_come_from_the_chunk():
    chunks = _chunks(LONG + ["too short to use"])
    q, qrels, pos = pseudo_queries(chunks, 10, seed=1)
    assert len(q) == 3 and "c3" not in qrels["doc_id"].to_list()  # the short chunk is never drawn
    assert q["kind"].to_list() == ["span", "keywords", "span"] and q["scope"].to_list() == ["ops"] * 3
    assert qrels["rel"].to_list() == [1, 1, 1] and qrels["qid"].to_list() == q["qid"].to_list()
    rows = q.join(qrels, on="qid").join(pos.select("qid", pl.col("text").alias("pos")), on="qid")
    source = dict(zip(chunks["doc_id"], chunks["text"], strict=True))
    for r in rows.iter_rows(named=True):
        title, _, body = r["pos"].partition("\n")
        assert title.startswith("Note ")
        words = source[r["doc_id"]].split()
        if r["kind"] == "span":
            qw = r["text"].split()
            assert 5 <= len(qw) <= 12 and r["text"] in source[r["doc_id"]]
            assert r["text"] not in body and len(body.split()) == len(words) - len(qw)
        else:
            terms = r["text"].split()
            assert 3 <= len(terms) <= 6 and len(set(terms)) == len(terms)
            lower = set(re.findall(r"\w+", source[r["doc_id"]].lower()))
            assert set(terms) <= lower and body == source[r["doc_id"]]


def test_seeded_and_capped_by_the_corpus():
    chunks = _chunks(LONG)
    a = pseudo_queries(chunks, 2, seed=7)
    b = pseudo_queries(chunks, 2, seed=7)
    assert all(x.equals(y) for x, y in zip(a, b, strict=True)) and len(a[0]) == 2
    assert len(pseudo_queries(chunks, 50, seed=0)[0]) == 3
    assert pseudo_queries(chunks, 3, seed=0, kinds=("keywords",))[0]["kind"].unique().to_list() == ["keywords"]


def test_refusals_name_the_problem():
    with pytest.raises(InputError, match="no chunk has 15 or more words"):
        pseudo_queries(_chunks(["short text only"]), 5)
    with pytest.raises(InputError, match="n must be at least 1"):
        pseudo_queries(_chunks(LONG), 0)
    with pytest.raises(InputError, match="kinds"):
        pseudo_queries(_chunks(LONG), 2, kinds=("title",))


@pytest.mark.slow
def test_trainer_pool_mines_negatives_for_pseudo_queries_from_our_own_lists(tmp_path, embedder):
    import json

    from conftest import DOCS

    from toolkit.loaders import load_corpus
    from toolkit.store import Store
    from toolkit.train import TRAIN_SCHEMA, pseudo_pool

    docs = DOCS + [{"_id": f"n{i}", "title": f"Note {i}", "text": t, "metadata": {"scope": "platform"}}
                   for i, t in enumerate(LONG)]
    (tmp_path / "c.jsonl").write_text("".join(json.dumps(d) + "\n" for d in docs))
    with Store(tmp_path / "s.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(tmp_path / "c.jsonl"))
        pool = pseudo_pool(st, 3, seed=0, depth=5)
        assert dict(pool.schema) == TRAIN_SCHEMA and pool["qid"].n_unique() == 3
        pos = pool.filter(pl.col("label") > 0)
        assert len(pos) == 3 and set(pos["origin"]) <= {"pseudo:span", "pseudo:keywords"}
        assert set(pos["doc_id"]) == {"n0", "n1", "n2"}
        for r in pos.filter(pl.col("origin") == "pseudo:span").iter_rows(named=True):
            assert r["query"] not in r["text"]  # the cloze span is cut out of the positive
        negs = pool.filter(pl.col("label") == 0)
        assert len(negs) > 0 and set(negs["origin"]) <= {"lex", "vec", "lex+vec"}
        # A pseudo-query's own document is never one of its negatives, and scope is respected.
        assert negs.join(pos.select("qid", "doc_id"), on=["qid", "doc_id"]).is_empty()
        assert not set(negs["doc_id"]) & {"d2", "d6"}  # payments scope, the pseudo-queries are platform
        # Asked for, a corpus too short to cut queries from is an error; topped up ("auto"), it adds none.
        st2 = Store(tmp_path / "t.duckdb", embedder=embedder)
        (tmp_path / "short.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
        st2.ingest(load_corpus(tmp_path / "short.jsonl"))
        assert pseudo_pool(st2, 3, required=False).is_empty()
        with pytest.raises(InputError, match="15 or more words"):
            pseudo_pool(st2, 3)
        st2.close()
