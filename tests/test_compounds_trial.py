"""User trial BF: an IR researcher wants a BM25 baseline a paper can cite, without the toolkit's compound forms.

`IndexSettings(compounds=False)` (`hrt ingest --no-compounds`) indexes and queries the text as DuckDB's FTS
tokenizer, stemmer and stopwords see it, and nothing else: the store's BM25 then equals DuckDB's own `match_bm25`
over the raw text (times ln 10, its log10 IDF). The setting belongs to the store: it survives reopening, re-ingests
and single writes (the in-place index update), and every query on such a store is analysed without compounds.
"""

from __future__ import annotations

import math
from pathlib import Path

import duckdb
import polars as pl
import pytest
from click.testing import CliRunner

from toolkit import ltr_features
from toolkit.analysis import FTS_IGNORE
from toolkit.cli import _cache_settings, main
from toolkit.config import load_config
from toolkit.errors import StoreError
from toolkit.pipeline import check_store
from toolkit.store import IndexSettings, Store, fts_extension_path

ROOT = Path(__file__).resolve().parents[1]

DOCS = [
    {"doc_id": "pool", "text": "The pool grows to max_pool_size connections when load spikes."},
    {"doc_id": "words", "text": "Set the max pool size in the config file to limit connections."},
    {"doc_id": "release", "text": "Release v2.34.2 fixed retryBackoffMs handling for the HTTP client."},
    {"doc_id": "notes", "text": "Version 2.34.2 notes: the retry backoff is now measured in ms."},
    {"doc_id": "cve", "text": "CVE-2017-3156 affects the OAuth2 provider; upgrade to 3.1.12."},
    {"doc_id": "lunch", "text": "The team lunch moved to Thursday because of the offsite."},
]
# Identifier queries (no stopwords: DuckDB's `match_bm25` stems a query's stopwords, the toolkit drops them, docs/bm25.md).
QUERIES = ["max_pool_size", "retryBackoffMs client", "v2.34.2", "CVE-2017-3156 provider", "max pool size connections",
           "OAuth2 upgrade 3.1.12"]
PLAIN = IndexSettings(compounds=False)


def _plain_bm25(docs: list[dict], queries: list[str], stemmer: str = "porter", stopwords: str = "english") -> list[dict]:
    """DuckDB's own `match_bm25` over the raw texts (no compound forms), times ln 10: {chunk_id: score} per query."""
    con = duckdb.connect()
    try:
        con.execute("LOAD '" + fts_extension_path().replace("'", "''") + "'")
        con.execute("CREATE TABLE raw(chunk_id VARCHAR, body VARCHAR)")
        con.executemany("INSERT INTO raw VALUES (?, ?)", [[f"{d['doc_id']}#0", d["text"]] for d in docs])
        con.execute(f"PRAGMA create_fts_index('raw', 'chunk_id', 'body', stemmer='{stemmer}', stopwords='{stopwords}', "
                    f"ignore='{FTS_IGNORE}', strip_accents=1, lower=1)")
        return [dict(con.execute("SELECT chunk_id, fts_main_raw.match_bm25(chunk_id, ?) * ln(10) AS s FROM raw "
                                 "WHERE s IS NOT NULL", [text]).fetchall()) for text in queries]
    finally:
        con.close()


def _store_bm25(st: Store, queries: list[str]) -> list[list[dict]]:
    """Both BM25 paths of the store (the SQL join and the sparse matrix product), chunk level, every hit."""
    qs = pl.DataFrame({"qid": [f"q{i}" for i in range(len(queries))], "text": queries, "scope": [None] * len(queries)})
    out = []
    for frame in (st.lexical_search_sql(qs, top_k=1000, level="chunk", scope_filter=False),
                  st.lexical_search(qs, top_k=1000, level="chunk", scope_filter=False)):
        out.append([{r["chunk_id"]: r["score"] for r in frame.filter(pl.col("qid") == f"q{i}").iter_rows(named=True)}
                    for i in range(len(queries))])
    return out


def _assert_same(got: list[dict], want: list[dict]) -> None:
    for text, g, w in zip(QUERIES, got, want, strict=True):
        assert set(g) == set(w), text
        for cid in w:
            assert math.isclose(g[cid], w[cid], rel_tol=1e-9), (text, cid, g[cid], w[cid])


def _ids(st: Store, text: str) -> set[str]:
    qs = pl.DataFrame({"qid": ["q"], "text": [text], "scope": [None]})
    return set(st.lexical_search(qs, top_k=100, scope_filter=False)["doc_id"].to_list())


def test_without_compounds_bm25_is_duckdbs_own_match_bm25_over_the_raw_text(tmp_path):
    want = _plain_bm25(DOCS, QUERIES)
    with Store(tmp_path / "plain.duckdb", embedder=None) as st:
        st.ingest(DOCS, settings=PLAIN, embed=False)
        assert st.con.execute("SELECT count(*) FROM chunks WHERE lex_text <> text").fetchone()[0] == 0  # the raw text
        for got in _store_bm25(st, QUERIES):
            _assert_same(got, want)
        for text, w in zip(QUERIES, want, strict=True):  # and the reference path of the store itself
            ref = dict(st.match_bm25(text, top_k=100).iter_rows())
            assert {c: s * math.log(10) for c, s in ref.items()} == pytest.approx(w, rel=1e-9)
    # Other stemmer and stopwords: the same, with theirs.
    want = _plain_bm25(DOCS, QUERIES, "none", "none")
    with Store(tmp_path / "none.duckdb", embedder=None) as st:
        st.ingest(DOCS, settings=IndexSettings(stemmer="none", stopwords="none", compounds=False), embed=False)
        for got in _store_bm25(st, QUERIES):
            _assert_same(got, want)
    # With the compounds (the default) the scores are the toolkit's own, as before.
    with Store(tmp_path / "default.duckdb", embedder=None) as st:
        st.ingest(DOCS, embed=False)
        assert st.settings.compounds is True
        assert _store_bm25(st, QUERIES)[0] != _plain_bm25(DOCS, QUERIES)
        assert _ids(st, "max_pool_size") == {"pool", "words"}  # the compound's parts match the spaced words


def test_the_setting_survives_reopen_and_reingest_and_queries_follow_it(tmp_path):
    path = tmp_path / "s.duckdb"
    with Store(path, embedder=None) as st:
        st.ingest(DOCS, settings=PLAIN, embed=False)
    with Store(path, embedder=None) as st:
        assert st.settings == PLAIN and st.stats()["index_settings"]["compounds"] is False
        rep = st.ingest(DOCS, embed=False)  # no settings: the store's own
        assert not rep.fts_rebuilt and st.settings.compounds is False
        st.ingest([*DOCS, {"doc_id": "new", "text": "A new note about pool sizing."}], embed=False)
        assert st.settings.compounds is False
        # `max_pool_size` is one token: the note that spells `max pool size` is not found, nor `v2.34.2`'s bare form.
        assert _ids(st, "max_pool_size") == {"pool"}
        assert _ids(st, "retryBackoffMs") == {"release"}
        assert _ids(st, "v2_34_2") == set()
        # The learned features read the same query terms: one term, not the compound's four.
        q = pl.DataFrame({"qid": ["q"], "text": ["max_pool_size"]})
        per_query, _ = ltr_features._text_features(st, q, pl.DataFrame({"qid": ["q"], "doc_id": ["pool"], "chunk_id": ["pool#0"]}))
        assert per_query["q_terms"].to_list() == [1.0]
        # Switched on, every chunk is analysed again, the ones not in this input too; and off again.
        rep = st.ingest(DOCS[:2], settings=IndexSettings(), embed=False)
        assert rep.fts_rebuilt and st.settings.compounds is True
        assert _ids(st, "max_pool_size") == {"pool", "words", "new"} and _ids(st, "v2.34.2") >= {"release", "notes"}
        st.ingest(DOCS[:1], settings=PLAIN, embed=False)
        assert st.settings.compounds is False
        assert st.con.execute("SELECT count(*) FROM chunks WHERE lex_text <> text").fetchone()[0] == 0
        _assert_same(_store_bm25(st, QUERIES)[1], _plain_bm25([*DOCS, {"doc_id": "new", "text": "A new note about pool sizing."}], QUERIES))


def test_a_single_write_updates_the_index_in_place_without_compounds(tmp_path):
    many = DOCS + [{"doc_id": f"filler{i}", "text": f"Filler note {i} about lunch and the offsite agenda."} for i in range(20)]
    memory = {"doc_id": "memory", "text": "User said the max_pool_size limit is 40 since v3.0.1."}
    with Store(tmp_path / "s.duckdb", embedder=None) as st:
        st.ingest(many, settings=PLAIN, embed=False)
        rep = st.ingest([memory], embed=False)  # one memory, as an agent writes it: no settings given
        assert rep.fts_in_place and st.settings.compounds is False
        assert st.con.execute("SELECT lex_text FROM chunks WHERE doc_id = 'memory'").fetchone()[0] == memory["text"]
        queries = [*QUERIES, "max_pool_size limit", "v3.0.1"]
        want = _plain_bm25([*many, memory], queries)
        for got in _store_bm25(st, queries):
            for text, g, w in zip(queries, got, want, strict=True):
                assert g == pytest.approx(w, rel=1e-9), text
        assert st.delete("memory") == 1 and st.settings.compounds is False


def test_hrt_ingest_no_compounds_flag_help_and_docs(tmp_path):
    notes = tmp_path / "notes"
    notes.mkdir()
    for d in DOCS:
        (notes / f"{d['doc_id']}.md").write_text(d["text"] + "\n")
    store = tmp_path / "s.duckdb"
    runner = CliRunner()
    r = runner.invoke(main, ["ingest", "--help"])
    assert "--compounds / --no-compounds" in r.output and "plain BM25" in r.output
    r = runner.invoke(main, ["ingest", str(notes), "--store", str(store), "--no-embed", "--no-compounds"])
    assert r.exit_code == 0, r.output
    r = runner.invoke(main, ["ingest", str(notes), "--store", str(store), "--no-embed"])  # no flag: the store's
    assert r.exit_code == 0, r.output
    with Store(store, embedder=None, read_only=True) as st:
        assert st.settings.compounds is False
        # A config may pin it, as it pins the stemmer; a pin the store does not have names the flag.
        cfg = load_config("bm25-only")
        check_store(st, cfg.with_updates({"retrieval.lexical.compounds": False}))
        with pytest.raises(StoreError, match="built with False.*hrt ingest --compounds"):
            check_store(st, cfg.with_updates({"retrieval.lexical.compounds": True}))
    # `hrt run` on a dataset builds its cache with the config's pin (and back to the default without one).
    assert _cache_settings([cfg.with_updates({"retrieval.lexical.compounds": False})], True) == PLAIN
    assert _cache_settings([cfg], True) == IndexSettings()
    r = runner.invoke(main, ["search", "max_pool_size", "--store", str(store), "--mode", "lexical", "--format", "json"])
    assert r.exit_code == 0, r.output
    assert "pool.md" in r.output and "words.md" not in r.output
    assert "--no-compounds" in (ROOT / "docs" / "bm25.md").read_text()
    assert "--no-compounds" in (ROOT / "README.md").read_text()
