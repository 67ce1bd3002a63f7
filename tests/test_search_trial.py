"""A user trial of `hrt search`, each defect as the user met it: what they typed, and what they now see
(results on stdout, warnings and notes on stderr so `--format json` stays one object)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.config import list_presets, load_config

PARTY = "# Party\n\nThe surprise party venue is the old boathouse on Friday.\n"


def _ingest(src: Path, store: Path, *args: str) -> None:
    r = CliRunner().invoke(main, ["ingest", str(src), "--store", str(store), *args])
    assert r.exit_code == 0, r.output


def _search(store: Path, *args: str):
    r = CliRunner().invoke(main, ["search", *args, "--store", str(store)])
    assert r.exit_code == 0, r.output
    return r


@pytest.fixture(scope="module")
def sb(tmp_path_factory) -> Path:
    """The user's folder: two byte-identical notes in the scopes alice and bob (scope = first folder level)."""
    root = tmp_path_factory.mktemp("trial") / "sb"
    for who in ("alice", "bob"):
        (root / who).mkdir(parents=True)
        (root / who / "party.md").write_text(PARTY)
    (root / "bob" / "list.md").write_text("Groceries: milk, eggs.\n")
    (root / "carol").mkdir()
    (root / "carol" / "ramen.md").write_text("昨日はラーメンを食べました。とても美味しかった。\n")
    store = root.parent / "sb.duckdb"
    _ingest(root, store)
    return store


def test_a_scoped_search_does_not_name_another_scopes_copy(sb):
    """`--scope bob` said "also in 1 source: alice/party.md": alice's file leaked into bob's results."""
    r = _search(sb, "surprise party venue", "--scope", "bob", "-n", "3")
    assert r.output.startswith("1. score ") and "bob/party.md" in r.output and "alice" not in r.output
    doc = json.loads(_search(sb, "surprise party venue", "--scope", "bob", "-n", "3", "--format", "json").stdout)
    assert doc["results"][0]["doc_id"] == "bob/party.md" and all(x["also_in"] == [] for x in doc["results"])
    assert "alice" not in json.dumps(doc)
    # Without a scope both copies are visible: one result, naming the other.
    assert "also in 1 source: " in _search(sb, "surprise party venue", "-n", "3").output


def test_a_scope_no_document_has_is_named_with_the_scopes_that_exist(sb, tmp_path):
    r = _search(sb, "surprise party venue", "--scope", "nobody", "-n", "3")
    assert r.stdout.strip() == "no results"
    assert "no stored document has scope 'nobody'; the store has 3 scopes: alice (1 document), bob (2 documents), " \
           "carol (1 document)" in r.stderr
    assert "no stored document" not in _search(sb, "surprise party venue", "--scope", "bob").stderr
    # Many scopes: ten are named, and how many more there are.
    root = tmp_path / "many"
    for i in range(12):
        (root / f"team{i:02d}").mkdir(parents=True)
        (root / f"team{i:02d}" / "n.md").write_text(f"Standup notes of team {i}.\n")
    _ingest(root, tmp_path / "many.duckdb", "--no-embed")
    err = _search(tmp_path / "many.duckdb", "standup", "--mode", "lexical", "--scope", "team99").stderr
    assert "the store has 12 scopes: team00 (1 document), " in err and "team09 (1 document), and 2 more" in err
    assert "team10" not in err


def test_a_partly_embedded_store_warns_that_dense_search_misses_chunks(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    (root / "a.md").write_text("The boathouse party is on Friday.\n")
    store = tmp_path / "s.duckdb"
    _ingest(root, store)
    (root / "b.md").write_text("Boathouse keys are with Carol.\n")
    _ingest(root, store, "--no-embed")  # the new note has no embedding
    r = _search(store, "boathouse")
    assert "warning: dense search covers 1 of 2 chunks: the rest were ingested with --no-embed" in r.stderr
    assert r.stdout.startswith("1. score ")
    assert "dense search covers" not in _search(store, "boathouse", "--mode", "lexical").stderr  # BM25 sees all
    _ingest(root, store)  # embeds what was missing
    assert "dense search covers" not in _search(store, "boathouse").stderr


def test_a_word_inside_unspaced_cjk_text_is_found_by_bm25(sb, tmp_path):
    """`hrt search "ラーメン" --mode lexical` said only "no results" though a note holds the word in a sentence:
    FTS saw the whole sentence as one token. CJK text is now also indexed as characters and character pairs."""
    r = _search(sb, "ラーメン", "--mode", "lexical")
    assert r.stdout.startswith("1. score ") and "carol/ramen.md" in r.stdout and "BM25" not in r.stderr
    assert "carol/ramen.md" in _search(sb, "美味しい", "--mode", "lexical", "-n", "1").stdout  # pairs 美味 味し
    assert "carol/ramen.md" not in _search(sb, "boathouse party", "--mode", "lexical").stdout
    (tmp_path / "zh").mkdir()
    (tmp_path / "zh" / "db.md").write_text("上周数据库连接失败，因为连接池太小。\n")
    (tmp_path / "zh" / "cat.md").write_text("我的猫喜欢睡觉。\n")
    _ingest(tmp_path / "zh", tmp_path / "zh.duckdb", "--no-embed")
    out = _search(tmp_path / "zh.duckdb", "数据库连接", "--mode", "lexical").stdout
    assert out.startswith("1. score ") and "db.md" in out.splitlines()[0]
    assert "cat.md" in _search(tmp_path / "zh.duckdb", "猫", "--mode", "lexical").stdout.splitlines()[0]  # one character


def test_a_store_indexed_before_cjk_pairs_says_so_and_is_brought_up_to_date_by_ingest(tmp_path):
    import duckdb

    from toolkit.analysis import compound_forms
    from toolkit.store import fts_extension_path

    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "ramen.md").write_text("昨日はラーメンを食べました。\n")
    (tmp_path / "notes" / "party.md").write_text(PARTY)
    store = tmp_path / "old.duckdb"
    _ingest(tmp_path / "notes", store, "--no-embed")
    # As an earlier version wrote it: lex_text without CJK terms, no analysis version, the index built from that.
    con = duckdb.connect(str(store))
    for cid, text in con.execute("SELECT chunk_id, text FROM chunks").fetchall():
        extra = compound_forms(text)
        con.execute("UPDATE chunks SET lex_text = ? WHERE chunk_id = ?", [f"{text}\n{' '.join(extra)}" if extra else text, cid])
    con.execute("DELETE FROM meta WHERE key = 'lexical_analysis'")
    con.execute("LOAD '" + fts_extension_path().replace("'", "''") + "'")
    con.execute("PRAGMA create_fts_index('chunks', 'chunk_id', 'lex_text', overwrite=1)")
    con.close()
    r = _search(store, "ラーメン", "--mode", "lexical")
    assert r.stdout.strip() == "no results"
    assert "made by an older toolkit, before words inside unspaced Chinese, Japanese or Korean text" in r.stderr
    assert "hrt ingest" in r.stderr
    _ingest(tmp_path / "notes", store, "--no-embed")  # nothing changed in the folder: only the CJK chunk is redone
    r = _search(store, "ラーメン", "--mode", "lexical")
    assert "ramen.md" in r.stdout and "BM25" not in r.stderr
    assert "party.md" in _search(store, "boathouse", "--mode", "lexical").stdout  # the rest still found


def test_as_of_dates_the_query_as_the_api_does(tmp_path):
    """`hrt search` measured recency against now only; the API reads the query's date from its metadata
    (priors.recency_query_field). `--as-of` sets that field: the factors equal the API's."""
    from toolkit.pipeline import run_pipeline
    from toolkit.store import Store

    mems = [{"id": "new", "text": "Dave's manager is Frank since the reorg.", "metadata": {"date": "2024-05-20"}},
            {"id": "old", "text": "Dave's manager is Erin.", "metadata": {"date": "2023-01-10"}}]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mems))
    store = tmp_path / "m.duckdb"
    _ingest(tmp_path / "m.jsonl", store)

    def factors(*args: str) -> dict[str, float]:
        doc = json.loads(_search(store, "who is Dave's manager", "--config", "agent-memory", "--format", "json", *args).stdout)
        return {r["doc_id"]: r["priors"]["recency"] for r in doc["results"]}

    dated, undated = factors("--as-of", "2024-06-01"), factors()
    q = pl.DataFrame({"qid": ["q"], "text": ["who is Dave's manager"], "metadata": [json.dumps({"date": "2024-06-01"})]})
    with Store(store) as st:
        api = run_pipeline(st, q, "agent-memory").final
    assert dated == pytest.approx(dict(api.select("doc_id", "prior_recency").iter_rows()))
    assert dated["new"] > undated["new"] and dated["old"] > undated["old"]  # younger against June 2024 than now
    assert dated == pytest.approx(factors("--as-of", "2024-06-01T00:00:00Z"))

    # A memory written after the date asked about did not exist yet: it decays by how far ahead it is,
    # instead of ranking as the freshest (the reorg of 2025 must not answer a question as of June 2024).
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(m) + "\n" for m in [
        *mems, {"id": "later", "text": "Dave's manager is Grace after the 2025 reorg.", "metadata": {"date": "2025-03-01"}}]))
    _ingest(tmp_path / "m.jsonl", store)
    asked = factors("--as-of", "2024-06-01")
    assert asked["later"] < asked["new"] and asked["later"] == pytest.approx(0.8 + 0.2 * 0.5 ** (273 / 1000), rel=1e-6)
    top = json.loads(_search(store, "who is Dave's manager", "--config", "agent-memory", "--format", "json",
                             "--as-of", "2024-06-01").stdout)["results"][0]
    assert top["doc_id"] == "new"

    bad = CliRunner().invoke(main, ["search", "manager", "--store", str(store), "--as-of", "last week"])
    assert bad.exit_code == 2 and "Invalid value for '--as-of': 'last week' is not an ISO date" in bad.output
    plain = _search(store, "manager", "--as-of", "2024-06-01")  # default: no recency prior to date
    assert "note: --as-of has no effect: config 'default' has no recency prior" in plain.stderr


def test_preset_descriptions_do_not_claim_a_reranker_that_is_off():
    """`hrt presets` described ace ("cross-encoder rerank"), qmd and cems-p0 as reranking; all ship with
    rerank.provider none (JSON: reranker "skipped"). A preset that mentions reranking says it is off."""
    out = CliRunner().invoke(main, ["presets"]).output
    for name in list_presets():
        cfg = load_config(name)
        line = next(x for x in out.splitlines() if x.split()[0] == name)
        if cfg.rerank.provider == "none" and "rerank" in cfg.description.lower():
            assert re.search(r"(off until|once) (a provider is|providers are) set", line), line
            assert "HRT_RERANK_" in line, line
    assert "off until a provider is set" in next(x for x in out.splitlines() if x.startswith("ace "))


def test_multilingual_notes_are_found_by_the_words_people_type(tmp_path):
    """Trial L (a multilingual agent memory): a Latin word written against Japanese text, kana that differ only
    by their voicing mark (ガス gas, カス dregs), half-width katakana, Korean as macOS writes it (NFD), ß, and an
    identifier with an accent were each missed or matched the wrong note by BM25."""
    import unicodedata

    root = tmp_path / "ml"
    root.mkdir()
    notes = {
        "err.md": "本番でECONNREFUSEDエラーが発生しました。",
        "gas.md": "ガスの検針は明日です。",
        "kasu.md": "カスタードとカスのレシピ。",
        "server.md": "ｻｰﾊﾞｰの再起動は金曜日。",
        "meeting.md": unicodedata.normalize("NFD", "회의 일정은 월요일입니다."),
        "street.md": "Die Lieferadresse ist Hauptstraße 5.",
        "cafe.md": "The café_id column is the primary key.",
        "other.md": "Unrelated note about lunch and a cafe key.",
    }
    for name, text in notes.items():
        (root / name).write_text(text + "\n")
    store = tmp_path / "ml.duckdb"
    _ingest(root, store, "--no-embed")

    def first(q: str) -> str:
        out = _search(store, q, "--mode", "lexical", "-n", "1").stdout
        return out.splitlines()[0] if out.strip() != "no results" else out

    assert "err.md" in first("ECONNREFUSED")
    assert "gas.md" in first("ガス") and "gas.md" not in first("カスタード")
    assert "server.md" in first("サーバー")
    assert "meeting.md" in first("월요일")
    assert "street.md" in first("Hauptstrasse") and "street.md" in first("Hauptstraße")
    assert "cafe.md" in first("café id")
