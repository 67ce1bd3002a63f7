"""User trial W: a team upgrading the toolkit over stores it wrote for weeks. The upgrade itself held (an old store
re-ingested matched a fresh one row for row); each test is an edge where it did not: an old vector index that
crashed every search, a store an older version wrote to after this one, BM25 misses on an old store that
nothing mentioned, and the cross-folder overwrite warning missing on upgraded stores."""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
from click.testing import CliRunner

from toolkit.analysis import ANALYSIS_VERSION, compound_forms
from toolkit.cli import main
from toolkit.store import SCHEMA_VERSION, Store, fts_extension_path


def _hrt(*args: str):
    return CliRunner().invoke(main, list(args))


def _memories(path: Path, n: int = 12) -> Path:
    rows = [{"id": f"mem-{i:03d}", "text": f"memory {i}: kafka consumer lag fixed by restart step {i}"} for i in range(n)]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_store_with_the_old_vss_hnsw_index_searches_exactly_then_its_next_write_rebuilds_it(tmp_path, caplog):
    """Stores of 2026-11-23 recorded DuckDB's vss index (no `engine`, no `generation`): a search with
    `dense.index: hnsw` died on KeyError 'generation', and the first write of this version dropped the index
    without a word, so the next HNSW search failed with "has no vector index"."""
    store = tmp_path / "h.duckdb"
    assert _hrt("ingest", str(_memories(tmp_path / "m.jsonl")), "--store", str(store)).exit_code == 0
    con = duckdb.connect(str(store))  # as the 11-23 toolkit left it (its vss index itself is not needed here)
    con.execute("INSERT INTO meta VALUES ('vector_index', ?)", ['{"kind": "hnsw", "metric": "cosine", "m": 12, "ef_construction": 64}'])
    con.close()
    cfg = tmp_path / "hnsw.yaml"
    cfg.write_text("retrieval: {dense: {index: hnsw}}\n")
    r = _hrt("search", "kafka consumer lag", "--store", str(store), "--config", str(cfg), "-n", "1")
    assert r.exit_code == 0, r.output
    said = caplog.text  # (the store's warnings go through logging, which `hrt` prints on stderr)
    assert "vss index of an older toolkit" in said and "searching exactly" in said and "mem-" in r.stdout
    caplog.clear()
    assert _hrt("delete", "mem-001", "--store", str(store)).exit_code == 0  # a write: the index is rebuilt
    assert "the store's next write builds it in the current format" in caplog.text
    caplog.clear()
    with Store(store, read_only=True) as st:
        vi = st.vector_index
    assert vi["engine"] == "usearch" and (vi["m"], vi["ef_construction"]) == (12, 64)
    r = _hrt("search", "kafka consumer lag", "--store", str(store), "--config", str(cfg), "-n", "1")
    assert r.exit_code == 0 and "warning" not in caplog.text and "mem-" in r.stdout


def _notes(tmp_path: Path, files: dict[str, str]) -> tuple[Path, Path]:
    """(a notes folder holding `files`, a store of it ingested without embeddings)."""
    notes = tmp_path / "notes"
    notes.mkdir()
    for name, text in files.items():
        (notes / name).write_text(text)
    store = tmp_path / "notes.duckdb"
    assert _hrt("ingest", str(notes), "--store", str(store), "--no-embed").exit_code == 0
    return notes, store


def _as_old_analysis(store: Path) -> None:
    """Chunks' BM25 text as an analysis before version 3 made it (no CJK characters or pairs), index rebuilt."""
    con = duckdb.connect(str(store))
    for cid, text in con.execute("SELECT chunk_id, text FROM chunks").fetchall():
        extra = compound_forms(text)
        con.execute("UPDATE chunks SET lex_text = ? WHERE chunk_id = ?", [f"{text}\n{' '.join(extra)}" if extra else text, cid])
    con.execute("LOAD '" + fts_extension_path().replace("'", "''") + "'")
    con.execute("PRAGMA create_fts_index('chunks', 'chunk_id', 'lex_text', overwrite=1)")
    return con


def test_a_write_by_an_older_toolkit_after_this_one_is_noticed_and_redone(tmp_path):
    """An 11-25 ingest into a store this version wrote indexed its new chunk by the old analysis while the meta
    still said version 3: this version never redid it (its re-ingest said "unchanged") and BM25 never found
    the word, with no note. Each write now stamps its generation; a store written since by another toolkit
    counts as of unknown analysis, is noted on search and redone by the next ingest."""
    notes, store = _notes(tmp_path, {"udon.md": "# 昼ごはん\n今日はうどんを食べました。\n",
                                     "deploy.md": "The deploy runbook: roll back with helm.\n"})
    with Store(store, read_only=True) as st:
        assert st.lexical_analysis == ANALYSIS_VERSION and st.stats()["bm25_text_current"]
        assert st._meta("schema_version") == SCHEMA_VERSION == "2"
    con = _as_old_analysis(store)
    con.execute("UPDATE meta SET value = 'f00dfeedbeef' WHERE key = 'generation'")  # what an old write leaves
    con.close()
    r = _hrt("search", "うどん", "--store", str(store), "--mode", "lexical")
    assert r.stdout.strip() == "no results" and "made by an older toolkit" in r.stderr and "hrt ingest" in r.stderr
    with Store(store, read_only=True) as st:
        assert st.lexical_analysis == "0" and not st.stats()["bm25_text_current"]
    # A delete by this toolkit redoes no text: the store stays "written by an older toolkit" (review: it cleared
    # the mark, and the old chunks were never redone).
    assert _hrt("delete", "deploy.md", "--store", str(store)).exit_code == 0
    with Store(store, read_only=True) as st:
        assert st.lexical_analysis == "0"
    assert _hrt("ingest", str(notes), "--store", str(store), "--no-embed").exit_code == 0  # (deploy.md back)
    r = _hrt("search", "うどん", "--store", str(store), "--mode", "lexical")
    assert "udon.md" in r.stdout and "older toolkit" not in r.stderr


def test_an_old_store_says_bm25_may_miss_its_non_ascii_text_for_an_ascii_query_too(tmp_path):
    """`hrt search ECONNRESET` on an 11-25 store missed the note holding it in full width (ＥＣＯＮＮＲＥＳＥＴ) and
    said nothing: the note came only when a CJK query matched nothing. `hrt info` did not tell either."""
    notes, store = _notes(tmp_path, {"fullwidth.md": "The proxy logged ＥＣＯＮＮＲＥＳＥＴ twice during the failover.\n",
                                     "plain.md": "Release 1.4.0 added ECONNRESET retry handling.\n"})
    con = _as_old_analysis(store)
    con.execute("DELETE FROM meta WHERE key IN ('lexical_analysis', 'analysis_generation')")  # as 11-25 wrote it
    con.close()
    r = _hrt("search", "ECONNRESET", "--store", str(store), "--mode", "lexical")
    assert "plain.md" in r.stdout and "BM25 may miss words in this store's non-ASCII text" in r.stderr
    info = json.loads(_hrt("info", "--store", str(store)).stdout)
    assert info["lexical_analysis"] == "1" and info["bm25_text_current"] is False
    assert _hrt("ingest", str(notes), "--store", str(store), "--no-embed").exit_code == 0
    r = _hrt("search", "ECONNRESET", "--store", str(store), "--mode", "lexical")
    assert "fullwidth.md" in r.stdout and "may miss" not in r.stderr


def test_an_upgraded_store_without_recorded_folders_warns_when_an_ingest_replaces_documents(tmp_path):
    """A store written before folders were recorded took another folder's notes/deploy.md over the team's own
    with only "1 changed"; a store of this version warns. Without the record it now says what it cannot tell."""
    team, mine = tmp_path / "team", tmp_path / "mine"
    (team / "notes").mkdir(parents=True)
    (mine / "notes").mkdir(parents=True)
    (team / "notes" / "deploy.md").write_text("# Deploy\nThe team's checklist: canary first.\n")
    (mine / "notes" / "deploy.md").write_text("# Deploy (personal)\nMy own checklist.\n")
    store = tmp_path / "s.duckdb"
    assert _hrt("ingest", str(team), "--store", str(store), "--no-embed").exit_code == 0
    con = duckdb.connect(str(store))
    con.execute("DELETE FROM meta WHERE key = 'ingest_roots'")  # as an older toolkit left it
    con.close()
    r = _hrt("ingest", str(mine), "--store", str(store), "--no-embed")
    assert r.exit_code == 0 and "does not record which folders were ingested" in r.stderr and "--id-prefix" in r.stderr
    r = _hrt("ingest", str(mine), "--store", str(store), "--no-embed")  # recorded now: nothing to say
    assert "warning" not in r.stderr


def test_an_upgrade_says_what_it_changes_in_an_old_store_once_and_where_it_is_read(tmp_path, caplog):
    """User trial AW, a week of stores from older versions: the first write stamped schema version 2 (which the
    versions of 11-25 refuse to open) and re-indexed old chunks without a word; `hrt info` had no schema version,
    called an old vss index fine and gave a boolean where a search gave a note; the API returned nothing for a Thai
    query on an old store with no warning; a version-3 store was told it missed CJK text it had."""
    import logging
    import warnings

    import polars as pl

    from toolkit.config import load_config
    from toolkit.pipeline import prepare
    from toolkit.store import StaleTextWarning

    store = tmp_path / "old.duckdb"
    with Store(store) as st:
        st.ingest([{"doc_id": "th", "text": "อยู่ที่นี่ ครับ"}, {"doc_id": "en", "text": "plain words"}], embed=False)
        st._set_meta("lexical_analysis", "3")
        st._set_meta("schema_version", "1")
    con = duckdb.connect(str(store))  # as version 3 left the Thai chunk: no pairs in its BM25 text
    con.execute("UPDATE chunks SET lex_text = text")
    con.close()
    info = _hrt("info", "--store", str(store))
    stats = json.loads(info.stdout)
    assert stats["schema_version"] == "1" and not stats["bm25_text_current"]
    assert "before Indic vowel signs and Thai, Lao, Khmer and Myanmar words were indexed" in info.stderr
    assert "Chinese" not in info.stderr
    with Store(store, read_only=True) as st, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        for _ in range(2):
            prepare(st, pl.DataFrame({"qid": ["q"], "text": ["ที่นี่"]}), load_config("bm25-only"))
    assert [w.category for w in caught if issubclass(w.category, StaleTextWarning)] == [StaleTextWarning]  # once
    caplog.set_level(logging.WARNING, logger="toolkit")
    with Store(store) as st:
        st.ingest([{"doc_id": "th", "text": "อยู่ที่นี่ ครับ"}, {"doc_id": "en", "text": "plain words"}], embed=False)
    assert "re-indexed the BM25 text of 1 chunk(s) made by an older text analysis (version 3; once)" in caplog.text
    assert "store format moved from schema version 1 to 2 (once)" in caplog.text
    caplog.clear()
    with Store(store) as st:
        st.ingest([{"doc_id": "th", "text": "อยู่ที่นี่ ครับ"}, {"doc_id": "x", "text": "more"}], embed=False)
    assert "once" not in caplog.text  # nothing left to say


def test_an_old_ascii_only_store_is_not_told_on_every_search_that_it_may_miss_words(tmp_path):
    store = tmp_path / "a.duckdb"
    with Store(store) as st:
        st.ingest([{"doc_id": "en", "text": "kafka consumer lag"}], embed=False)
        st._set_meta("lexical_analysis", "3")
    r = _hrt("search", "kafka", "--store", str(store), "--mode", "lexical")
    assert r.exit_code == 0 and "may miss" not in r.stderr, r.stderr


def test_info_says_an_old_vss_index_is_not_read(tmp_path):
    store = tmp_path / "h.duckdb"
    assert _hrt("ingest", str(_memories(tmp_path / "m.jsonl")), "--store", str(store), "--no-embed").exit_code == 0
    con = duckdb.connect(str(store))  # the 11-23 toolkit's record of its DuckDB vss index
    con.execute("INSERT INTO meta VALUES ('vector_index', ?)", ['{"kind": "hnsw", "metric": "cosine", "m": 12, "ef_construction": 64}'])
    con.close()
    r = _hrt("info", "--store", str(store))
    assert "vss index of an older toolkit, which this one does not read" in r.stderr, r.stderr


def test_a_config_tuned_before_tuning_recorded_its_queries_is_still_called_in_sample(tmp_path, corpus_file):
    """User trial AW: a config `hrt tune` wrote before `tuned_on` existed ("default-tuned", described "default tuned on
    demo dev for nDCG@10") ran on its own dev split with no in-sample warning (an old fusion model got one by name)."""
    from conftest import write_beir

    ds = write_beir(tmp_path / "demo", corpus_file)
    cfg = tmp_path / "old-tuned.yaml"
    cfg.write_text("extends: bm25-only\nname: default-tuned\ndescription: default tuned on demo test for nDCG@10\n")
    r = _hrt("run", "--dataset", str(ds), "--split", "test", "--config", str(cfg), "--store", str(tmp_path / "s.duckdb"),
             "--out", str(tmp_path / "r.trec"))
    assert r.exit_code == 0 and "its description says it was tuned on demo/test" in r.output, r.output
    r = _hrt("run", "--dataset", str(ds), "--split", "test", "--config", "bm25-only", "--store", str(tmp_path / "s.duckdb"),
             "--out", str(tmp_path / "r.trec"))
    assert "in-sample" not in r.output
