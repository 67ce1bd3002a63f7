"""What a user reads from `hrt search`: provenance per result, flags in words, copies collapsed into one
result that says where else the text lives, and JSON that matches its documented schema."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import duckdb
import jsonschema
import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.store import Store

SCHEMA = json.loads((Path(__file__).resolve().parents[1] / "docs" / "search-output.schema.json").read_text())
README = "Avahi is a system which facilitates service discovery on a local network via the mDNS/DNS-SD protocol suite.\n" * 3


@pytest.fixture(scope="module")
def store(tmp_path_factory):
    root = tmp_path_factory.mktemp("docs")
    for pkg in ("avahi-daemon", "avahi-utils", "libavahi-client3", "libavahi-common3", "avahi-autoipd"):
        (root / pkg).mkdir()
        (root / pkg / "README").write_text(README)  # one README shipped by five packages
    (root / "git").mkdir()
    (root / "git" / "NEWS").write_text("Git 2.39.1 security release: fixes CVE-2022-41903 (heap overflow in git log --format).\n")
    (root / "notes.md").write_text("# Printing\nCUPS finds printers on the local network through service discovery.\n")
    path = tmp_path_factory.mktemp("s") / "s.duckdb"
    r = CliRunner().invoke(main, ["ingest", str(root), "--store", str(path)])
    assert r.exit_code == 0, r.output
    return str(path)


def _search(store, *args):
    r = CliRunner().invoke(main, ["search", *args, "--store", store])
    assert r.exit_code == 0, r.output
    return r.stdout if "json" in args else r.output  # JSON is stdout alone; notes go to stderr


def test_json_matches_the_documented_schema_with_correct_counts(store):
    doc = json.loads(_search(store, "service discovery on the local network", "--format", "json", "-n", "3"))
    jsonschema.validate(doc, SCHEMA)
    assert doc["n_results"] == len(doc["results"]) <= 3 and doc["query"] == "service discovery on the local network"
    # A program branches on these before reading the rest (user trial BR: no version in the output at all)
    assert list(doc)[:2] == ["schema_version", "toolkit_version"] and doc["schema_version"] == 1
    assert doc["toolkit_version"] == __import__("toolkit").__version__
    for r in doc["results"]:
        assert isinstance(r["metadata"], dict) and len(r["snippet"]) <= 240 and r["origins"]
        assert {o["list"] for o in r["origins"]} <= {"bm25", "dense"}
        assert r["priors"] is None  # the default preset has no priors
    assert "source_right" not in json.dumps(doc)


def test_identical_copies_collapse_into_one_result_that_says_where(store):
    doc = json.loads(_search(store, "avahi mDNS service discovery", "--format", "json"))
    readmes = [r for r in doc["results"] if r["doc_id"].endswith("/README")]
    assert len(readmes) == 1
    assert "duplicates_collapsed" in readmes[0]["flags"] and len(readmes[0]["also_in"]) == 4
    assert readmes[0]["source"] not in readmes[0]["also_in"]
    compact = _search(store, "avahi mDNS service discovery")
    assert "also in 4 sources: " in compact


def test_compact_shows_where_each_score_came_from_and_the_exact_token_flag(store):
    out = _search(store, "heap overflow CVE-2022-41903", "--mode", "hybrid")
    first = out.splitlines()[0]
    assert first.startswith("1. score ") and "bm25 #1 " in first and "dense #" in first and "git/NEWS" in first
    assert "raw" not in out


def test_a_query_whose_words_no_document_holds_says_so_instead_of_scores_barely_differ(store):
    """Trial: a nonsense query under the default said only "scores barely differ" over dense-only RRF scores
    (1/(k + rank): their spread is the same for any list), and nothing that told an agent no document
    matched a word of it."""
    out = _search(store, "xyzzy plugh frobnicate")
    assert "BM25 found no document holding any of the query's indexed words" in out and "barely differ" not in out
    doc = json.loads(_search(store, "xyzzy plugh frobnicate", "--format", "json"))
    jsonschema.validate(doc, SCHEMA)
    assert doc["notes"]["no_term_match"] is True and doc["notes"]["low_differentiation"] is False and doc["results"]
    assert doc["notes"]["route"] == "dense-only"  # the dense-gap rule's "bm25-led" said of a query BM25 found nothing for
    hit = json.loads(_search(store, "service discovery on the local network", "--format", "json"))
    assert hit["notes"]["no_term_match"] is False
    assert "indexed words" not in _search(store, "xyzzy plugh frobnicate", "--mode", "dense")  # BM25 not asked
    # BM25 alone, nothing found: the JSON still has the query's notes (a harness reads notes.no_term_match).
    lex = json.loads(_search(store, "xyzzy plugh frobnicate", "--mode", "lexical", "--format", "json"))
    jsonschema.validate(lex, SCHEMA)
    assert lex["results"] == [] and lex["notes"]["no_term_match"] is True and lex["n_results"] == 0


def test_a_store_written_before_content_hashes_opens_and_is_migrated(store, tmp_path):
    old = tmp_path / "old.duckdb"
    shutil.copy(store, old)
    con = duckdb.connect(str(old))
    con.execute("ALTER TABLE documents DROP COLUMN text_hash")
    con.close()
    # Read-only (no migration possible): hashes computed on the fly, copies still collapse.
    doc = json.loads(_search(str(old), "avahi mDNS service discovery", "--format", "json"))
    assert sum(r["doc_id"].endswith("/README") for r in doc["results"]) == 1
    with Store(old) as st:  # writable open adds and fills the column in place
        assert st.con.execute("SELECT count(*) FROM documents WHERE text_hash IS NULL").fetchone()[0] == 0
        assert st.doc_sources()["text_hash"].n_unique() == 3


def test_agent_memory_shows_its_priors_in_compact_and_in_schema_valid_json(tmp_path):
    """A user trial: the memory priors were invisible in `hrt search` (compact and JSON), and with no reranker
    fused_score held the score before the priors. JSON now carries a `priors` object the schema allows, and
    compact names the factors that moved each result."""
    mems = [
        {"id": "color", "text": "Dave's favorite color is orange.", "metadata": {"date": "2024-07-10", "priority": "P0"}},
        {"id": "pet", "text": "Dave has a pet hamster named Bao.", "metadata": {"date": "2024-02-11", "priority": "P2"}},
        {"id": "city", "text": "Dave lives in Toronto.", "metadata": {"date": "2024-06-15"}},
    ]
    (tmp_path / "m.jsonl").write_text("".join(json.dumps(m) + "\n" for m in mems))
    store = str(tmp_path / "m.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(tmp_path / "m.jsonl"), "--store", store]).exit_code == 0
    doc = json.loads(_search(store, "what does Dave like", "--config", "agent-memory", "--format", "json", "--as-of", "2024-07-11"))
    jsonschema.validate(doc, SCHEMA)
    got = {r["doc_id"]: r for r in doc["results"]}
    assert got["color"]["priors"]["priority"] == 4.0 and got["pet"]["priors"]["priority"] == 2.0
    assert got["city"]["priors"]["priority"] == 1.0 and got["city"]["priors"]["use"] == 1.0  # no metadata: neutral
    assert all(r["fused_score"] is None for r in doc["results"])  # no reranker: no blend changed a score
    assert got["color"]["score"] == pytest.approx(got["color"]["priors"]["score_before"] * 4.0 * got["color"]["priors"]["recency"])
    compact = _search(store, "what does Dave like", "--config", "agent-memory", "--as-of", "2024-07-11")
    line = next(x for x in compact.splitlines() if x.endswith(" · color"))  # no title: the label is the id
    assert "priors: priority x4.00" in line and ", before priors " in line and "fused" not in compact
