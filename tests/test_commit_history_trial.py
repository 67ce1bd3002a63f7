"""User trial BW: agent memory over a project's git history (3,000 duckdb commits, 372 judged queries). "PR #24375" and
"issue 16075" were one token each, which no commit holds (they write "(#24375)", "Fixes #16075" or the issue's web
address), so the exact-token guard never fired and the pull request's commit, BM25's clear first, ended 23rd."""

from __future__ import annotations

import json

import polars as pl
import pytest

from toolkit.config import load_config
from toolkit.guard import _holds, identifier_tokens
from toolkit.loaders import load_corpus
from toolkit.pipeline import prepare, rescore
from toolkit.store import Store


@pytest.mark.parametrize(("text", "tokens"), [
    ("PR #24375", ["#24375"]),
    ("PR 24277", ["#24277"]),
    ("what changed in pull request 17125", ["#17125"]),
    ("which commit fixed issue 16075", ["#16075"]),
    ("Issue 42 and issue #43", ["#42", "#43"]),
    ("#24375 fix", ["#24375"]),
    ("HTTP 404 on login", ["HTTP 404"]),  # a status code stays with its word: documents write it so
    ("runner ubuntu-24.04-arm", ["ubuntu-24.04-arm"]),  # cut at "-arm", the query's own token was found nowhere
    ("python-3.11-slim image", ["python-3.11-slim"]),
    ("gcc-4.9-based build", ["gcc-4.9"]),  # a word after the version is not part of the name
    ("PR#24375 broke it", ["#24375"]), ("MR 403 merged", ["#403"]),
    ("FROM python-3.11-slim-bookworm", ["python-3.11-slim-bookworm"]), ("node-18.2-alpine3.18", ["node-18.2-alpine3.18"]),
    # Not references (review BZ): plurals, "Mrs", dates, ranges, amounts and durations after the word.
    ("did Caroline buy the 3 tickets 45 minutes before the show", []), ("how many bugs 12 hours after the launch", []),
    ("the PRs 2023 roadmap meeting", []), ("what did Mrs 25 year old Jones say", []), ("bug 2023-10-12 report", []),
    ("the bugs 20% rate", []), ("ticket 45 minutes late", []), ("mr 12 said", []),
])
def test_references_and_platforms_are_the_tokens_documents_write(text, tokens):
    assert identifier_tokens(text) == tokens


def test_a_reference_is_held_by_the_forge_address_that_names_it():
    assert _holds("fixed issue 16075 in the parser", "#16075") and _holds("gh#16075 closed", "#16075")  # review BZ
    assert not _holds("tissue 16075", "#16075") and not _holds("version 16075 released", "#16075")
    assert _holds("closes https://github.com/duckdb/duckdb/issues/23623.", "#23623")
    assert _holds("see https://gitlab.com/a/b/-/merge_requests/403 for details", "#403")
    assert not _holds("see https://github.com/duckdb/duckdb/issues/236230", "#23623")
    assert _holds("merge window fixes (#24375)", "#24375")


COMMITS = [
    ("c0", "Fix segment tree crash in window functions (#24375)", "The segment tree reused a freed buffer.\nFiles changed: src/function/window/segment_tree.cpp"),
    *[(f"c{i}", f"Merge PR review feedback on {w}", f"Addresses PR review comments on the {w}; reviewers asked for smaller PRs.")
      for i, w in enumerate(["parquet reader", "CSV sniffer", "JSON extension", "catalog", "optimizer", "storage"], start=1)],
]


def test_a_pull_request_named_with_its_word_finds_its_commit_first(tmp_path, embedder):
    p = tmp_path / "commits.jsonl"
    p.write_text("".join(json.dumps({"_id": i, "title": t, "text": x}) + "\n" for i, t, x in COMMITS))
    q = pl.DataFrame({"qid": ["q"], "text": ["PR #24375"]})
    with Store(tmp_path / "c.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(p))
        cfg = load_config("default")
        prep = prepare(st, q, cfg)
    assert prep.candidates.filter((pl.col("list_id") == "orig:lex") & (pl.col("rank") == 1))["doc_id"][0] == "c0"
    res = rescore(prep, cfg)
    assert res.final.sort("rank")["doc_id"][0] == "c0"
    assert res.per_query["exact_tokens"][0].to_list() == ["#24375"]


def test_hrt_show_prints_a_document_by_its_id(tmp_path):
    """A commit's SHA was its document id, and nothing fetched a document by id (`hrt search` of the SHA found an
    unrelated commit): `hrt show` prints documents whole, in the order asked, as text or JSON."""
    from click.testing import CliRunner

    from toolkit.cli import main

    sha = "044a04a7cd39e6e8235f756597ae42dde084e5e5"
    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"_id": sha, "title": COMMITS[0][1], "text": COMMITS[0][2], "metadata": {"pr": 24375}}) + "\n"
                 + json.dumps({"_id": "other", "text": "Another commit."}) + "\n")
    store = str(tmp_path / "s.duckdb")
    run = CliRunner().invoke
    assert run(main, ["ingest", str(p), "--store", store, "--no-embed"]).exit_code == 0
    r = run(main, ["show", sha, "--store", store])
    assert r.exit_code == 0 and r.output.startswith(f"doc_id: {sha}\ntitle: Fix segment tree crash") and "freed buffer" in r.output
    r = run(main, ["show", "other", sha, "nope", "--store", store, "--format", "json", "--missing-ok"])
    got = json.loads(r.stdout)
    assert [d["doc_id"] for d in got] == ["other", sha] and got[1]["metadata"] == {"pr": 24375}
    r = run(main, ["show", "-", "--store", store], input=f"{sha}\n\nnope\n")
    assert r.exit_code != 0 and "no document with id 'nope'" in r.output


def test_the_api_warns_of_query_scopes_no_stored_document_has(tmp_path):
    """User trial BX: a collection's queries run against another store came back empty through the API, in silence
    (only `hrt run` said why). `prepare` now warns, as `hrt run` did."""
    p = tmp_path / "c.jsonl"
    p.write_text("".join(json.dumps({"_id": f"ops/{i}.md", "text": t}) + "\n" for i, t in enumerate(["deploy notes", "backup notes"])))
    with Store(tmp_path / "s.duckdb") as st:
        st.ingest(load_corpus(p), embed=False)
        q = pl.DataFrame({"qid": ["a", "b", "c"], "text": ["deploy", "backup", "deploy"], "scope": ["nobody", "nobody", None]})
        with pytest.warns(UserWarning, match=r"2 queries ask for scope\(s\) no stored document has \(e.g. 'nobody'\)"):
            prepare(st, q, "bm25-only")


def test_hrt_show_json_survives_a_narrow_output_encoding(tmp_path):
    """`hrt show` writes through `hrt search`'s stdout path (review BZ: a latin-1 stdout failed on the first "…")."""
    import subprocess
    import sys

    p = tmp_path / "c.jsonl"
    p.write_text(json.dumps({"_id": "c1", "text": "Café notes… with an ellipsis"}, ensure_ascii=False) + "\n", encoding="utf-8")
    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        st.ingest(load_corpus(p), embed=False)
    import os

    r = subprocess.run([sys.executable, "-m", "toolkit", "show", "c1", "--store", str(store), "--format", "json"],
                       capture_output=True, env={**os.environ, "PYTHONIOENCODING": "latin-1"})
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout.decode("latin-1"))[0]["text"] == "Café notes… with an ellipsis"


SHAS = ["044a04a7cd39e6e8235f756597ae42dde084e5e5", "d1434e02ce600258cbd6f1c8e44c3825fdb6830d",
        "d1434e0f9a0c1b2d3e4f5a6b7c8d9e0f1a2b3c4d", "7e14bd24e03f5b5c30b8f3af79a8fbb15dce8320"]
UUID = "3f2a9c1e-8b7d-4e5f-9a0b-1c2d3e4f5a6b"


def _memory(tmp_path, embedder):
    """Commits whose ids are their hashes (two share the short hash d1434e0), one that reverts another by its full hash,
    and a memory whose id is a UUID."""
    rows = [(SHAS[0], "Fix segment tree crash in window functions", "The segment tree reused a freed buffer.", "core"),
            (SHAS[1], "Speed up the CSV sniffer", "Sniff fewer rows when the header is clear.", "core"),
            (SHAS[2], "Update the JSON extension", "New JSON functions.", "ext"),
            (SHAS[3], "Revert the segment tree fix", f"This reverts commit {SHAS[0]}: window functions crash again.", "core"),
            (UUID, "User prefers dark mode", "The user asked for dark mode in every editor.", "prefs"),
            *[(f"{i:040x}", f"Refactor window function {w}", f"Window function {w} cleanup in the segment tree.", "core")
              for i, w in enumerate(["rank", "lead", "lag", "ntile"], start=11)]]
    p = tmp_path / "commits.jsonl"
    p.write_text("".join(json.dumps({"_id": i, "title": t, "text": x, "metadata": {"area": a}}) + "\n" for i, t, x, a in rows))
    st = Store(tmp_path / "m.duckdb", embedder=embedder)
    st.ingest(load_corpus(p))
    return st


def test_a_commit_named_by_its_short_hash_or_a_memory_by_its_id_comes_first(tmp_path, embedder):
    """User trial BW: 25 queries naming a commit by its short hash ("commit 101ff9df", "what changed in 0c75ac2b3")
    scored 0 under every config: the hash is the document's id, not its text, so BM25 never found it, and the
    reverting commit that writes the full hash does not hold the short one as a word. A short hash (seven hex digits
    and up) names the only stored id it starts; any identifier equal to an id names that document."""
    queries = {"lookup": SHAS[0][:7], "prefix": f"what changed in commit {SHAS[0][:9]}",
               "words": f"{SHAS[0][:8]} segment tree crash details", "uuid": f"what does memory {UUID} say",
               "ambiguous": "commit d1434e0", "full": SHAS[1]}
    with _memory(tmp_path, embedder) as st:
        cfg = load_config("default")
        prep = prepare(st, pl.DataFrame({"qid": list(queries), "text": list(queries.values())}), cfg)
        first = rescore(prep, cfg).final.filter(pl.col("rank") == 1)
        got = dict(zip(first["qid"], first["doc_id"], strict=True))
        assert got["lookup"] == got["prefix"] == got["words"] == SHAS[0] and got["uuid"] == UUID and got["full"] == SHAS[1]
        assert prep.exact.filter(pl.col("qid") == "ambiguous").is_empty()  # two ids start so: it names neither
        lex1 = prep.candidates.filter((pl.col("list_id") == "orig:lex") & (pl.col("rank") == 1))
        assert dict(zip(lex1["qid"], lex1["doc_id"], strict=True))["lookup"] == SHAS[0]  # BM25 alone finds it too
        assert prep.exact.filter((pl.col("qid") == "lookup") & (pl.col("doc_id") == SHAS[0]))["tokens"].to_list() == [[SHAS[0][:7]]]
        assert SHAS[3] not in prep.exact.filter(pl.col("qid") == "prefix")["doc_id"].to_list()  # the full hash is not the short one
        # Named only within the query's scope and filters, and never in a list routing took BM25 away from.
        with pytest.warns(UserWarning, match="no stored document has"):
            scoped = prepare(st, pl.DataFrame({"qid": ["s"], "text": [SHAS[0][:7]], "scope": ["nowhere"]}), "bm25-only")
        assert scoped.candidates.is_empty()
        ask = pl.DataFrame({"qid": ["f"], "token": [SHAS[0][:7]], "scope": [None], "short": [True]},
                           schema={"qid": pl.Utf8, "token": pl.Utf8, "scope": pl.Utf8, "short": pl.Boolean})
        assert st.named_documents(ask, {"area": "ext"}).is_empty()
        assert st.named_documents(ask, {"area": "core"})["doc_id"].to_list() == [SHAS[0]]


def test_hrt_search_finds_a_commit_by_its_short_hash(tmp_path, embedder):
    from click.testing import CliRunner

    from toolkit.cli import main

    _memory(tmp_path, embedder).close()
    for args in ([], ["--config", "bm25-only"]):
        r = CliRunner().invoke(main, ["search", SHAS[0][:7], "--store", str(tmp_path / "m.duckdb"), "-n", "1", "--format", "json", *args])
        assert r.exit_code == 0, r.output
        assert json.loads(r.stdout)["results"][0]["doc_id"] == SHAS[0]
        assert "stored ids" not in r.stderr
    # Review CB: a short hash two ids start named nothing, in silence.
    r = CliRunner().invoke(main, ["search", "commit d1434e0", "--store", str(tmp_path / "m.duckdb"), "-n", "1"])
    assert r.exit_code == 0 and f"note: d1434e0 starts two stored ids ({SHAS[1]}, {SHAS[2]}), so it names none" in r.stderr
    # An id that is the token itself is what it names (`Store.named_documents`): no note, and that document first.
    from toolkit.store import Store

    with Store(tmp_path / "m.duckdb", embedder=embedder) as st:
        st.ingest([{"doc_id": "d1434e0", "text": "a memory whose id happens to be seven hex digits"}])
    r = CliRunner().invoke(main, ["search", "commit d1434e0", "--store", str(tmp_path / "m.duckdb"), "-n", "1", "--format", "json"])
    assert r.exit_code == 0 and "stored ids" not in r.stderr, r.stderr
    assert json.loads(r.stdout)["results"][0]["doc_id"] == "d1434e0"


def test_the_named_document_comes_before_a_text_quoting_its_id_in_every_list_and_in_any_case(tmp_path, embedder):
    """Review CB: a revert quoting a commit's full hash came first for a search of that hash (dense search lifted it,
    and the guard took any holder first as done); `bm25-only` put "d7fa0d5 commit details" 5th behind commits holding
    "commit details"; an upper-case SHA or UUID named nothing."""
    queries = {"quoted": SHAS[0], "words": f"{SHAS[0][:7]} window functions segment tree crash",
               "upper": SHAS[1].upper(), "upper_uuid": UUID.upper(),
               "link": f"what did https://github.com/duckdb/duckdb/commit/{SHAS[1][:12]} change"}
    q = pl.DataFrame({"qid": list(queries), "text": list(queries.values())})
    want = {"quoted": SHAS[0], "words": SHAS[0], "upper": SHAS[1], "upper_uuid": UUID, "link": SHAS[1]}
    with _memory(tmp_path, embedder) as st:
        for name in ("default", "bm25-only", "learned"):
            cfg = load_config(name)
            first = rescore(prepare(st, q, cfg), cfg).final.filter(pl.col("rank") == 1)
            assert dict(zip(first["qid"], first["doc_id"], strict=True)) == want, name
        prep = prepare(st, q, "default")
        quoted = prep.exact.filter(pl.col("qid") == "quoted").sort("doc_id")
        assert quoted.select("doc_id", "named").rows() == [(SHAS[0], True), (SHAS[3], False)]  # both hold it; one is named
