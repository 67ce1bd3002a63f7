"""`fts_update.update_fts`: the FTS index updated in place scores every query as a full rebuild does.

Each test keeps two copies of the same chunks: one whose index is updated in place after every write, one
rebuilt by `create_fts_index` (the store's own `_build_fts`, or the PRAGMA on an in-memory database), and
compares what BM25 reads: `stats`, docs lengths, (term, df), postings by name and term, and the scores of
`match_bm25` and of the store's two lexical search paths. Term ids and doc ids are free to differ.
"""

from __future__ import annotations

import random
import re
import uuid

import duckdb
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from toolkit.analysis import FTS_IGNORE, lexical_text
from toolkit.fts_update import index_layout_supported, update_fts
from toolkit.store import IndexSettings, Store, fts_extension_path

S = "fts_main_chunks"
TOL = 1e-9


def indexed_stemmer(con) -> str | None:
    """The stemmer baked into the index's `match_bm25` macro: the one postings must be stemmed with."""
    row = con.execute("SELECT macro_definition FROM duckdb_functions() WHERE schema_name = ? AND function_name = 'match_bm25'",
                      [S]).fetchone()
    m = re.search(r"stem\(unnest\(" + S + r"\.tokenize\(query_string\)\), '([^']*)'\)", row[0]) if row else None
    return m.group(1) if m else None

# Words that exercise the tokenizer: stopwords, accents, case, punctuation, numbers, stems, CJK, underscores.
WORDS = [
    "deploy", "deploys", "deployed", "deploying", "café", "Cafe", "CAFÉ", "José", "jose", "naïve", "über",
    "Straße", "the", "and", "of", "a", "it's", "isn't", "v2.14.3", "ECONNREFUSED", "port:5432", "retry-backoff",
    "max_pool_size", "zebra", "zebras", "日本語", "!!!", "--", "42", "x",
]  # fmt: skip
QUERIES = [
    "deploy", "deployed failure", "café", "Cafe", "josé", "naïve über", "strasse", "the", "and of a",
    "it's", "v2.14.3", "ECONNREFUSED:5432!", "retry-backoff", "max_pool_size", "zebra", "日本語", "42 x",
    "deploy, the café; zebras?",
]  # fmt: skip


def _text(rng: random.Random, n_max: int = 9) -> str:
    sep = rng.choice([" ", ", ", "\n", " - ", "."])
    return sep.join(rng.choice(WORDS) for _ in range(rng.randint(0, n_max)))


# ---------------------------------------------------------------- what BM25 reads, by name and term


def index_view(con: duckdb.DuckDBPyConnection) -> dict:
    """The index's content with its ids resolved to names and terms (ids may differ from a rebuild's)."""
    return {
        "stats": con.execute(f"SELECT num_docs, avgdl FROM {S}.stats").fetchall(),
        "docs": con.execute(f"SELECT name, len FROM {S}.docs ORDER BY ALL").fetchall(),
        "dict": con.execute(f"SELECT term, df FROM {S}.dict ORDER BY ALL").fetchall(),
        "postings": con.execute(
            f"SELECT d.name, t.term, p.fieldid, count(*) FROM {S}.terms p JOIN {S}.docs d USING (docid) "
            f"JOIN {S}.dict t USING (termid) GROUP BY ALL ORDER BY ALL"
        ).fetchall(),
    }


def bm25(con: duckdb.DuckDBPyConnection, queries: list[str], **kw: float) -> dict[tuple[str, str], float]:
    """DuckDB's own `match_bm25`: {(query, chunk_id): score} of every chunk that scores, in one statement."""
    args = "".join(f", {k} := {float(v)}" for k, v in kw.items())
    rows = con.execute(
        f"SELECT q, chunk_id, {S}.match_bm25(chunk_id, q{args}) AS s "
        "FROM chunks, (SELECT DISTINCT unnest(?::VARCHAR[]) AS q) WHERE s IS NOT NULL",
        [queries],
    ).fetchall()
    return {(q, c): v for q, c, v in rows}


def assert_scores_equal(got: dict, want: dict, what: str) -> None:
    assert got.keys() == want.keys(), f"{what}: different chunks score {set(got) ^ set(want)}"
    bad = {k: (got[k], want[k]) for k in got if abs(got[k] - want[k]) > TOL}
    assert not bad, f"{what}: scores differ {bad}"


def assert_same_index(
    con: duckdb.DuckDBPyConnection, ref: duckdb.DuckDBPyConnection, queries: list[str], *, scores: bool = True
) -> None:
    """Content equal (ids resolved), then DuckDB's `match_bm25` scores equal. Equal content implies equal scores,
    so the property test asks for the scores after its last batch only (each `match_bm25` call costs ~40 ms)."""
    got, want = index_view(con), index_view(ref)
    for key in ("stats", "docs", "dict", "postings"):
        assert got[key] == want[key], key
    if not scores:
        return
    assert_scores_equal(bm25(con, queries), bm25(ref, queries), "match_bm25")
    kb = {"k": 0.9, "b": 0.4}
    assert_scores_equal(bm25(con, queries[:3], **kb), bm25(ref, queries[:3], **kb), "match_bm25 k=0.9 b=0.4")


# ---------------------------------------------------------------- stores through the public API


def _store(path, stemmer: str = "porter", stopwords: str = "english") -> Store:
    rng = random.Random(7)
    docs = [
        {"doc_id": f"d{i}", "text": " ".join(_text(rng, 40) for _ in range(3)) or "deploy"} for i in range(12)
    ]
    s = Store(path, embedder=None)
    settings_ = IndexSettings(chunk_size=120, chunk_overlap=0, stemmer=stemmer, stopwords=stopwords)
    s.ingest(docs, settings=settings_, embed=False)
    return s


def _insert_chunk(s: Store, chunk_id: str, doc_id: str, text: str) -> None:
    s.con.execute(
        "INSERT INTO chunks VALUES (?, ?, 99, 0, 0, ?, '', ?)", [chunk_id, doc_id, text, lexical_text(text)]
    )


def _toolkit_scores(s: Store, queries: list[str]) -> list[dict]:
    """Both BM25 paths of the store at chunk level: the SQL join and the sparse matrix product (>8 queries)."""
    qs = pl.DataFrame(
        {"qid": [f"q{i}" for i in range(len(queries))], "text": queries, "scope": [None] * len(queries)}
    )
    kw = {"top_k": 10_000, "level": "chunk", "scope_filter": False}
    return [
        {(r["qid"], r["chunk_id"]): r["score"] for r in frame.iter_rows(named=True)}
        for frame in (s.lexical_search_sql(qs, **kw), s.lexical_search(qs, **kw))
    ]


def _own_words(s: Store, chunk_id: str) -> list[str]:
    return [
        w
        for w in s.con.execute("SELECT lex_text FROM chunks WHERE chunk_id = ?", [chunk_id])
        .fetchone()[0]
        .split()
        if w.startswith("solo")
    ]


# The store's default settings here; the property test below draws the others (none/none, french) as well.
@pytest.mark.parametrize("stemmer, stopwords", [("porter", "english")])
def test_random_writes_score_as_a_rebuild(tmp_path, stemmer, stopwords):
    """Adds, text changes and removals (a few per write, as an ingest makes them) on a store built by `ingest`:
    after each write the in-place index equals the rebuilt one in content and in scores, through
    `match_bm25` and both of the store's lexical search paths, for words present, stopwords, accents,
    punctuation and the words only a removed or changed chunk had."""
    inc = _store(tmp_path / "inc.duckdb", stemmer, stopwords)
    ref = _store(tmp_path / "ref.duckdb", stemmer, stopwords)
    assert indexed_stemmer(inc.con) == stemmer and index_layout_supported(inc.con)
    rng = random.Random(f"{stemmer}/{stopwords}")
    gone_words: list[str] = []
    for step in range(8):
        ids = [r[0] for r in inc.con.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchall()]
        removed, added, writes = [], [], []
        for n in range(rng.randint(1, 3)):
            kind = rng.choice(["add", "add", "change", "remove"]) if ids else "add"
            text = (
                f"{_text(rng)} solo{step}x{n}" if rng.random() < 0.85 else "the, of!"
            )  # solo..: only this chunk
            if kind == "add":
                cid = f"new{step}_{n}#0"
                writes.append(("INSERT", cid, f"d{rng.randrange(12)}", text))
                added.append(cid)
                continue
            cid = ids.pop(rng.randrange(len(ids)))
            gone_words += _own_words(inc, cid)
            removed.append(cid)
            if kind == "change":
                writes.append(("UPDATE", cid, text))
                if (
                    rng.random() < 0.5
                ):  # named in `removed` alone or in both lists: either means "re-index it"
                    added.append(cid)
            else:
                writes.append(("DELETE", cid))
        for s in (inc, ref):
            s.con.execute("BEGIN TRANSACTION")
            for w in writes:
                if w[0] == "INSERT":
                    _insert_chunk(s, *w[1:])
                elif w[0] == "UPDATE":
                    s.con.execute(
                        "UPDATE chunks SET text = ?, lex_text = ? WHERE chunk_id = ?",
                        [w[2], lexical_text(w[2]), w[1]],
                    )
                else:
                    s.con.execute("DELETE FROM chunks WHERE chunk_id = ?", [w[1]])
            if s is inc:
                assert update_fts(s.con, removed=removed, added=added, stemmer=stemmer)
            else:
                s._build_fts(s.settings)
            s._set_meta("generation", uuid.uuid4().hex[:12])  # as `ingest` does: the store's caches follow
            s.con.execute("COMMIT")
        queries = QUERIES + gone_words[-4:] + [f"solo{step}x0"]
        assert_same_index(inc.con, ref.con, [lexical_text(q) for q in queries])
        assert inc._lexical_index_whole()
        for got, want, path in zip(
            _toolkit_scores(inc, queries), _toolkit_scores(ref, queries), ("sql", "matrix"), strict=True
        ):
            assert_scores_equal(got, want, f"Store.lexical_search ({path}) step {step}")
        for q in ["café deploy", *gone_words[-1:]]:
            got, want = (dict(x.match_bm25(q, top_k=10_000).iter_rows()) for x in (inc, ref))
            assert_scores_equal(got, want, f"Store.match_bm25 {q!r}")
    inc.close()
    ref.close()


def test_removal_lowers_df_and_avgdl_and_drops_the_term(tmp_path):
    """The cases the random test relies on, spelled out: a removed chunk's words leave `dict` (or their df
    drops), num_docs and avgdl follow, and a word shared with the removed chunk scores as a rebuild scores it."""
    s = Store(tmp_path / "a.duckdb", embedder=None)
    s.ingest([{"doc_id": "a", "text": "deploy zebra"}, {"doc_id": "b", "text": "deploy failed deploy again twice"},
              {"doc_id": "c", "text": "unrelated words here"}], embed=False)  # fmt: skip
    before = dict(s.con.execute(f"SELECT term, df FROM {S}.dict").fetchall())
    score_before = bm25(s.con, ["deploy"])
    s.con.execute("BEGIN TRANSACTION")
    s.con.execute("DELETE FROM chunks WHERE doc_id = 'a'")
    assert update_fts(s.con, removed=["a#0"], added=[], stemmer="porter")
    after = dict(s.con.execute(f"SELECT term, df FROM {S}.dict").fetchall())
    assert before["deploi"] == 2 and after["deploi"] == 1 and "zebra" in before and "zebra" not in after
    lens = [n for (n,) in s.con.execute(f"SELECT len FROM {S}.docs").fetchall()]
    assert len(lens) == 2 and s.con.execute(f"SELECT num_docs, avgdl FROM {S}.stats").fetchone() == (
        2,
        sum(lens) / 2,
    )
    got = bm25(s.con, ["deploy", "zebra"])
    assert got.keys() == {("deploy", "b#0")} and got[("deploy", "b#0")] != score_before[("deploy", "b#0")]
    s._build_fts(s.settings)
    assert_scores_equal(got, bm25(s.con, ["deploy", "zebra"]), "against a rebuild")
    s.con.execute("COMMIT")
    s.close()


def test_the_comparison_notices_a_stale_df_or_avgdl(tmp_path):
    """The checks above have teeth: an index whose df was not decremented, or whose avgdl was not updated,
    differs from the rebuild in content and in the scores of a word present in both."""
    inc, ref = _store(tmp_path / "i.duckdb"), _store(tmp_path / "r.duckdb")
    word = inc.con.execute(
        f"SELECT term FROM {S}.dict WHERE df BETWEEN 2 AND (SELECT num_docs - 1 FROM {S}.stats) ORDER BY term LIMIT 1"
    ).fetchone()[0]
    assert_same_index(inc.con, ref.con, [word])
    inc.con.execute(f"UPDATE {S}.dict SET df = df + 1 WHERE term = ?", [word])
    with pytest.raises(AssertionError, match="dict"):
        assert_same_index(inc.con, ref.con, [word])
    with pytest.raises(AssertionError, match="scores differ"):
        assert_scores_equal(bm25(inc.con, [word]), bm25(ref.con, [word]), "df")
    inc.con.execute(f"UPDATE {S}.dict SET df = df - 1 WHERE term = ?", [word])
    inc.con.execute(f"UPDATE {S}.stats SET avgdl = avgdl + 1")
    with pytest.raises(AssertionError, match="stats"):
        assert_same_index(inc.con, ref.con, [word])
    with pytest.raises(AssertionError, match="scores differ"):
        assert_scores_equal(bm25(inc.con, [word]), bm25(ref.con, [word]), "avgdl")
    inc.close()
    ref.close()


def test_runs_in_the_callers_transaction(tmp_path):
    """No BEGIN/COMMIT of its own: a ROLLBACK after it leaves the index as it was, and no temp table stays."""
    s = _store(tmp_path / "t.duckdb")
    before = index_view(s.con)
    first = s.con.execute("SELECT min(chunk_id) FROM chunks").fetchone()[0]
    s.con.execute("BEGIN TRANSACTION")
    _insert_chunk(s, "n#0", "d0", "zebra café deploy")
    s.con.execute("DELETE FROM chunks WHERE chunk_id = ?", [first])
    assert update_fts(s.con, removed=[first], added=["n#0"], stemmer="porter")
    assert index_view(s.con) != before
    assert not s.con.execute(
        "SELECT count(*) FROM duckdb_tables() WHERE table_name LIKE '__fts_update%'"
    ).fetchone()[0]
    s.con.execute("ROLLBACK")
    assert index_view(s.con) == before
    s.close()


def test_refuses_what_it_cannot_keep_equivalent():
    """An index over two columns is not one this kernel knows: False, nothing written (the caller rebuilds).
    Schema names go into SQL text, so only plain identifiers pass; ids and text are bound."""
    con = _memory_db([("a", "deploy zebra"), ("b", "café")], "refuses")
    con.execute("ALTER TABLE chunks ADD COLUMN title VARCHAR DEFAULT 'x'")
    con.execute(
        f"PRAGMA create_fts_index('chunks', 'chunk_id', 'lex_text', 'title', ignore='{FTS_IGNORE}', overwrite=1)"
    )
    before = index_view(con)
    con.execute("INSERT INTO chunks VALUES ('c', 'x', 'zebra', 'x')")
    assert not index_layout_supported(con)
    assert update_fts(con, removed=[], added=["c"], stemmer="porter") is False
    assert index_view(con) == before
    with pytest.raises(ValueError, match="schema"):
        update_fts(con, removed=["a"], added=[], stemmer="porter", schema="x; DROP TABLE chunks")
    with pytest.raises(TypeError):  # one id as a string would be taken for its characters
        update_fts(con, removed="a", added=[], stemmer="porter")
    assert update_fts(con, removed=[], added=[], stemmer="porter") is True  # nothing to do


# ---------------------------------------------------------------- property test on an in-memory database


_POOL: dict[str, duckdb.DuckDBPyConnection] = {}


def _memory_db(rows: list[tuple[str, str | None]], slot: str) -> duckdb.DuckDBPyConnection:
    """An in-memory database holding `rows` and nothing else: one per slot for the whole test, emptied for each
    example (loading the FTS extension into a new one cost ~40 ms, two per example)."""
    con = _POOL.get(slot)
    if con is None:
        con = _POOL[slot] = duckdb.connect()
        con.execute("LOAD '" + fts_extension_path().replace("'", "''") + "'")
    con.execute("DROP SCHEMA IF EXISTS fts_main_chunks CASCADE")
    con.execute("DROP TABLE IF EXISTS chunks")
    assert not con.execute("SELECT count(*) FROM duckdb_tables() WHERE NOT temporary").fetchone()[0]
    con.execute("CREATE TABLE chunks(chunk_id VARCHAR, doc_id VARCHAR, lex_text VARCHAR)")
    if rows:
        con.executemany("INSERT INTO chunks VALUES (?, 'x', ?)", [list(r) for r in rows])
    return con


def _rebuild(con: duckdb.DuckDBPyConnection, stemmer: str, stopwords: str) -> None:
    """`Store._build_fts`'s PRAGMA (the values are the test's own constants)."""
    con.execute(
        f"PRAGMA create_fts_index('chunks', 'chunk_id', 'lex_text', stemmer='{stemmer}', stopwords='{stopwords}', "
        f"ignore='{FTS_IGNORE}', strip_accents=1, lower=1, overwrite=1)"
    )


_texts = st.one_of(
    st.none(),
    st.lists(st.sampled_from(WORDS), max_size=8).map(" ".join),
    st.text(st.sampled_from("aéÉb .,'-_1ß日"), max_size=12),
)
_batch = st.lists(
    st.tuples(st.sampled_from(["add", "change", "remove"]), st.integers(0, 50), _texts),
    min_size=1,
    max_size=3,
)


@settings(max_examples=25, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    initial=st.lists(_texts, max_size=6),
    writes=st.lists(_batch, min_size=1, max_size=4),
    analysis=st.sampled_from([("porter", "english"), ("none", "none"), ("french", "english")]),
)
def test_property_any_write_sequence_matches_a_rebuild(initial, writes, analysis):
    """Any texts (NULL, empty, only stopwords or punctuation, accents) and any batches of adds, changes and
    removals, an emptied table included: the in-place index equals a rebuild in content and scores."""
    stemmer, stopwords = analysis
    rows = [(f"c{i}", t) for i, t in enumerate(initial)]
    inc, ref = _memory_db(rows, "inc"), _memory_db(rows, "ref")
    _rebuild(inc, stemmer, stopwords)
    serial = len(rows)
    for n, batch in enumerate(writes, start=1):
        ids = [r[0] for r in inc.execute("SELECT chunk_id FROM chunks ORDER BY chunk_id").fetchall()]
        removed, added, sql = [], [], []
        for kind, pick, text in batch:
            if kind == "add" or not ids:
                cid, serial = f"c{serial}", serial + 1
                sql.append(("INSERT INTO chunks VALUES (?, 'x', ?)", [cid, text]))
                added.append(cid)
            elif kind == "change":
                cid = ids[pick % len(ids)]
                sql.append(("UPDATE chunks SET lex_text = ? WHERE chunk_id = ?", [text, cid]))
                (removed if pick % 2 else added).append(cid)
            else:
                cid = ids.pop(pick % len(ids))
                sql.append(("DELETE FROM chunks WHERE chunk_id = ?", [cid]))
                removed.append(cid)
        for con in (inc, ref):
            con.execute("BEGIN TRANSACTION")
            for q, p in sql:
                con.execute(q, p)
            if con is inc:
                assert update_fts(con, removed=removed, added=added, stemmer=stemmer)
            else:
                _rebuild(con, stemmer, stopwords)
            con.execute("COMMIT")
        words = sorted(
            {w for (t,) in inc.execute("SELECT lex_text FROM chunks").fetchall() if t for w in t.split()}
        )
        assert_same_index(inc, ref, [*words[:6], "deploy café", "the", "Straße", "日本語", "zebra zebras"],
                          scores=n == len(writes))
