"""Update DuckDB's full-text index of `chunks` in place, as a rebuild would have left it.

DuckDB's FTS extension (1.5.5) has no incremental update: `PRAGMA create_fts_index` rebuilds every table of
`fts_main_chunks`, which cost ~45 ms at 300 chunks and ~580 ms at 30,000 for each write, one agent memory
included. This kernel replays the extension's own indexing SQL (`src/fts_indexing.cpp`, checked against the
script inside the 1.5.5 binary) for the touched chunks only:

- `docs(docid, name, len)`: one row per `chunks` row, zero-token chunks included (len 0, counted in
  `num_docs` and in the avgdl denominator). Docids are arbitrary BIGINTs (a rebuild uses row ids); new rows
  take max(docid) + 1, ... once the old rows are gone.
- `terms(docid, fieldid, termid)`: one row per token occurrence that is non-empty, not in the schema's
  `stopwords` table (compared before stemming) and then stemmed, tokens from the schema's own `tokenize`
  macro (strip_accents, lower, the `ignore` pattern, all baked into it at build time).
- `dict(termid, term, df)`: df = the number of docs holding the term. A rebuild never keeps a term with df 0,
  so such terms are deleted (kept, they would not change any score, but the table would differ). New terms
  take max(termid) + 1, ...: ids of deleted terms leave gaps, which no score reads (`Store._lexical_matrix`
  has an empty row per gap: max(termid) grows with the vocabulary ever seen, until the next rebuild).
- `stats(num_docs, avgdl)`: recomputed from `docs` with the rebuild's own expression
  (`count(docid)`, `sum(len) / count(len)`), so avgdl is bit-identical, not a running float.

Scores (`match_bm25`, `Store.lexical_search[_sql]`) read only df, len, tf, num_docs and avgdl, so they equal
a rebuild's up to float summation order. All of it is DML on the index tables plus temporary tables, inside
the caller's transaction: nothing a WAL replay can trip on (the rebuild's DROP SCHEMA was, `Store._drop_fts`).

Not detected here, so the caller must rebuild instead: a change of the stopword list (the kernel reuses the
stored `stopwords` table) or of the stemmer (the store's `index_settings` record which one built the index), a switch of
`IndexSettings.compounds` (every chunk's `lex_text` changes: `Store.ingest` re-analyses them all), and chunks changed
but not named in `removed`/`added`. A write that keeps the settings writes its chunks' `lex_text` under the store's
own (`IndexSettings.lexical_text`), so the postings added here follow them. An index of another layout (another extension version, several
columns) is refused: `update_fts` returns False and writes nothing.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from contextlib import suppress

import duckdb

# The store's layout: the one table, id column and text column the index is built over (`Store._build_fts`).
_TABLE, _ID, _TEXT = "chunks", "chunk_id", "lex_text"
# Columns of the index tables as `create_fts_index` 1.5.5 makes them, in order: any other layout (another
# extension version, several indexed columns) is not one this kernel knows how to keep equivalent.
_LAYOUT = (
    "dict.termid,dict.term,dict.df,docs.docid,docs.name,docs.len,fields.fieldid,fields.field,"
    "stats.num_docs,stats.avgdl,stopwords.sw,terms.docid,terms.fieldid,terms.termid"
)
_SCHEMA_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
_OLD, _NEW = "__fts_update_old", "__fts_update_new"


def _schema(schema: str) -> str:
    """The schema name goes into SQL text (identifiers cannot be bound): a plain identifier only."""
    if not _SCHEMA_NAME.fullmatch(schema):
        raise ValueError(f"not a plain schema name: {schema!r}")
    return schema


def index_layout_supported(con: duckdb.DuckDBPyConnection, schema: str = "fts_main_chunks") -> bool:
    """Whether `schema` holds an index this kernel can update: the 1.5.5 tables, built over `lex_text` alone,
    with one stats row. Two small reads (~2.5 ms); no `duckdb_functions()` (~20 ms)."""
    s = _schema(schema)
    cols = con.execute(
        "SELECT string_agg(table_name || '.' || column_name, ',' ORDER BY table_name, column_index) "
        "FROM duckdb_columns() WHERE database_name = current_database() AND schema_name = ?",
        [s],
    ).fetchone()[0]
    if cols != _LAYOUT:
        return False
    fields, stats = con.execute(
        f"SELECT (SELECT list(field) FROM {s}.fields), (SELECT count(*) FROM {s}.stats)"
    ).fetchone()
    return fields == [_TEXT] and stats == 1


def update_fts(
    con: duckdb.DuckDBPyConnection,
    *,
    removed: Sequence[str],
    added: Sequence[str],
    stemmer: str,
    schema: str = "fts_main_chunks",
) -> bool:
    """Bring the FTS index of `chunks` up to date after `removed` and `added` chunk ids changed, in place.

    Every id named in either list is re-indexed from what `chunks` holds now: its old postings (if any) go,
    its current rows (if any) come in. So a changed text can be named in either list or both, and an id added
    and removed again in one transaction ends up absent. Runs in the caller's transaction (no BEGIN/COMMIT).
    Returns False, having written nothing, when the index layout is not the one this kernel keeps equivalent
    to a rebuild (`index_layout_supported`); the caller rebuilds then. `stemmer` must be the index's own
    (the store's `IndexSettings.stemmer`); it is bound, never formatted into SQL, and so are the ids.
    """
    s = _schema(schema)
    if isinstance(removed, str) or isinstance(added, str):
        raise TypeError("removed/added are sequences of chunk ids, not one string")
    touched = sorted({*removed, *added})
    if not touched:
        return True
    if not index_layout_supported(con, s):
        return False
    try:
        _remove_postings(con, s, touched)
        _add_postings(con, s, touched, stemmer)
        # The rebuild's own expressions over the whole docs table (one scan of BIGINTs): the same integers in
        # give the same double out, where a running average would drift.
        con.execute(
            f"UPDATE {s}.stats SET num_docs = a.n, avgdl = a.avgdl "
            f"FROM (SELECT count(docs.docid) AS n, sum(docs.len) / count(docs.len) AS avgdl FROM {s}.docs AS docs) AS a"
        )
    finally:
        # After a failure the transaction is aborted and refuses these: the caller's ROLLBACK drops them then.
        with suppress(duckdb.Error):
            con.execute(f"DROP TABLE IF EXISTS temp.{_OLD}")
            con.execute(f"DROP TABLE IF EXISTS temp.{_NEW}")
    return True


def _remove_postings(con: duckdb.DuckDBPyConnection, s: str, names: list[str]) -> None:
    """Drop the docs rows of `names` and their postings; df goes down by one per doc that held the term, and a
    term no doc holds any more leaves `dict`, as it is absent from a rebuild's."""
    (gone,) = con.execute(
        f"CREATE OR REPLACE TEMP TABLE {_OLD} AS SELECT docid FROM {s}.docs WHERE name IN (SELECT unnest(?::VARCHAR[]))",
        [names],
    ).fetchone()
    if not gone:
        return  # only new ids: the scans of terms below would find nothing
    con.execute(
        f"MERGE INTO {s}.dict USING (SELECT termid, count(DISTINCT docid) AS n FROM {s}.terms "
        f"WHERE docid IN (SELECT docid FROM temp.{_OLD}) GROUP BY termid) AS g ON dict.termid = g.termid "
        "WHEN MATCHED AND dict.df = g.n THEN DELETE "
        "WHEN MATCHED THEN UPDATE SET df = dict.df - g.n"
    )
    con.execute(f"DELETE FROM {s}.terms WHERE docid IN (SELECT docid FROM temp.{_OLD})")
    con.execute(f"DELETE FROM {s}.docs WHERE docid IN (SELECT docid FROM temp.{_OLD})")


def _add_postings(con: duckdb.DuckDBPyConnection, s: str, names: list[str], stemmer: str) -> None:
    """Index the current `chunks` rows of `names` as `create_fts_index` does: the schema's `tokenize` macro,
    non-empty tokens not in its `stopwords` table (before stemming), `stem(w, stemmer)`; one docs row per
    chunk row even with no token left (len 0)."""
    # One row per (new doc, token occurrence); a doc without tokens keeps one row with term NULL.
    (rows,) = con.execute(
        f"""CREATE OR REPLACE TEMP TABLE {_NEW} AS
        WITH src AS MATERIALIZED (
            SELECT (SELECT coalesce(max(docid), -1) FROM {s}.docs) + row_number() OVER () AS docid,
                   c.{_ID} AS name, c.{_TEXT} AS txt
            FROM {_TABLE} AS c WHERE c.{_ID} IN (SELECT unnest(?::VARCHAR[]))),
        tok AS (SELECT t.docid, stem(t.w, ?) AS term
                FROM (SELECT docid, unnest({s}.tokenize(txt)) AS w FROM src) AS t
                WHERE t.w NOT NULL AND len(t.w) > 0 AND t.w NOT IN (SELECT sw FROM {s}.stopwords))
        SELECT src.docid, src.name, tok.term FROM src LEFT JOIN tok ON tok.docid = src.docid""",
        [names, stemmer],
    ).fetchone()
    if not rows:
        return  # the ids are gone from `chunks`: nothing to index
    con.execute(
        f"INSERT INTO {s}.docs (docid, name, len) "
        f"SELECT docid, any_value(name), count(term) FROM temp.{_NEW} GROUP BY docid"
    )
    # Known terms gain df; new ones come in numbered on from the largest id (numbered apart from the known
    # ones, so no id is spent on them: `Store._lexical_matrix` has a row per id up to the largest).
    con.execute(
        f"MERGE INTO {s}.dict USING (SELECT n.term, n.n, (SELECT coalesce(max(termid), -1) FROM {s}.dict) "
        "+ row_number() OVER (PARTITION BY d.termid IS NULL ORDER BY n.term) AS termid "
        f"FROM (SELECT term, count(DISTINCT docid) AS n FROM temp.{_NEW} WHERE term IS NOT NULL GROUP BY term) AS n "
        f"LEFT JOIN {s}.dict AS d ON d.term = n.term) AS n ON dict.term = n.term "
        "WHEN MATCHED THEN UPDATE SET df = dict.df + n.n "
        "WHEN NOT MATCHED THEN INSERT (termid, term, df) VALUES (n.termid, n.term, n.n)"
    )
    con.execute(
        f"INSERT INTO {s}.terms (docid, fieldid, termid) "
        f"SELECT n.docid, (SELECT fieldid FROM {s}.fields WHERE field = '{_TEXT}'), d.termid "
        f"FROM temp.{_NEW} AS n JOIN {s}.dict AS d ON d.term = n.term"
    )
