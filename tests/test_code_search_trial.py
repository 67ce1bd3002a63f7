"""User trial BD: a developer-tools engineer searching a monorepo (Python, C headers, shell, configs) as a coding
agent's memory. Hybrid search found the right file in the top 5 for 41 of 44 queries; each test is a place where it
lost a lookup BM25 alone gets right, or where what it returned was not usable as code."""

from __future__ import annotations

import polars as pl
import pytest

from toolkit.config import GuardConfig
from toolkit.guard import exact_matches, keep_exact, whole_identifier


def _ranked(docs: list[str]) -> pl.DataFrame:
    return pl.DataFrame({"qid": ["q"] * len(docs), "doc_id": docs, "rank": list(range(1, len(docs) + 1)),
                         "score": [1.0 - i / 10 for i in range(len(docs))], "flags": [[] for _ in docs]},
                        schema_overrides={"flags": pl.List(pl.Utf8)})


BM25 = pl.DataFrame({"qid": ["q"] * 4, "list_id": ["orig:lex"] * 4, "doc_id": ["sessions", "a", "b", "c"],
                     "rank": [1, 2, 3, 4]})


@pytest.mark.parametrize(("query", "whole"), [
    ("REQUESTS_CA_BUNDLE", True), ("2.34.2", True), ("`get_terminal_size`", True), ('"retryBackoffMs"', True),
    ("where is REQUESTS_CA_BUNDLE read", False), ("REQUESTS_CA_BUNDLE and CURL_CA_BUNDLE", False),
])
def test_a_query_that_is_only_an_identifier_is_a_lookup(query, whole):
    texts = pl.DataFrame({"doc_id": ["sessions"], "title": ["sessions.py"],
                          "text": ["verify = os.environ.get('REQUESTS_CA_BUNDLE') or os.environ.get('CURL_CA_BUNDLE') "
                                   "2.34.2 get_terminal_size retryBackoffMs"]})
    got = exact_matches(pl.DataFrame({"qid": ["q"], "text": [query]}), BM25.select("qid", "doc_id"), texts)
    assert got["whole"].to_list() == [whole]


def test_an_identifiers_holder_comes_first_when_the_query_is_only_that_identifier():
    """`REQUESTS_CA_BUNDLE` put adapters.py, which does not contain it, at rank 1 and BM25's first document (which
    does) at rank 3: the guard held it there, its top-3 rule met. A query that is only the identifier is a lookup."""
    cfg = GuardConfig(exact_token=True, depth=10)
    lookup = pl.DataFrame({"qid": ["q"], "doc_id": ["sessions"], "tokens": [["REQUESTS_CA_BUNDLE"]], "whole": [True]})
    out, status = keep_exact(_ranked(["adapters", "models", "sessions", "utils"]), BM25, lookup, cfg)
    assert out["doc_id"].to_list() == ["sessions", "adapters", "models", "utils"]
    assert status["exact_token"].to_list() == ["kept"] and "exact_token_kept" in out["flags"][0]
    assert out["score"].is_sorted(descending=True)
    sentence = lookup.with_columns(pl.lit(False).alias("whole"))  # a question naming it: the top 3 is enough
    out, status = keep_exact(_ranked(["adapters", "models", "sessions", "utils"]), BM25, sentence, cfg)
    assert out["doc_id"].to_list()[2] == "sessions" and status["exact_token"].to_list() == ["held"]


def test_whole_identifier_needs_the_whole_query():
    assert whole_identifier("  ECONNREFUSED ", ["ECONNREFUSED"])
    assert not whole_identifier("ECONNREFUSED in logs", ["ECONNREFUSED"])


def test_code_and_config_files_are_titled_and_found_by_their_path(tmp_path, embedder):
    """64 Python files were titled `from __future__ import annotations`, scripts `!/bin/sh`; the title is indexed
    with every chunk, and `Makefile` or `src/urllib3/util/retry.py` found files that merely call `makefile()`."""
    from toolkit.config import load_config
    from toolkit.loaders import load_corpus
    from toolkit.pipeline import run_pipeline
    from toolkit.store import Store

    repo = tmp_path / "repo"
    (repo / "src" / "net").mkdir(parents=True)
    (repo / "src" / "net" / "retry.py").write_text("from __future__ import annotations\n\ndef backoff(n):\n    return 2 ** n\n")
    (repo / "src" / "net" / "sock.py").write_text("from __future__ import annotations\n\ndef wrap(s):\n    return s.makefile('rb')\n")
    (repo / "build.sh").write_text("#!/bin/sh\nset -e\nmake all\n")
    (repo / "Makefile").write_text("# build everything\nall:\n\tpython -m build\n")
    (repo / "NOTES.md").write_text("# Release plan\nShip on Friday.\n")
    (repo / "README").write_text("Net tools\nA small library.\n")
    docs = load_corpus(repo, include=("*.py", "*.sh"))
    titles = {d["doc_id"]: d["title"] for d in docs}
    assert titles == {"src/net/retry.py": "src/net/retry.py", "src/net/sock.py": "src/net/sock.py", "build.sh": "build.sh",
                      "Makefile": "Makefile", "NOTES.md": "Release plan", "README": "Net tools"}
    with Store(tmp_path / "s.duckdb", embedder=embedder) as st:
        st.ingest(docs)
        for query, want in (("Makefile", "Makefile"), ("src/net/retry.py", "src/net/retry.py")):
            res = run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": [query]}), load_config("bm25-only"))
            assert res.final["doc_id"][0] == want, (query, res.final["doc_id"].to_list())


def test_a_result_says_which_lines_of_its_file_it_is_with_indentation_kept(tmp_path, embedder):
    """`--format json` had no line numbers and a snippet with every newline and indent collapsed, starting
    mid-word; `--format detailed` printed the whole file on one line."""
    import json

    from click.testing import CliRunner

    from toolkit.cli import main

    repo = tmp_path / "repo"
    repo.mkdir()
    body = [f"def helper_{i}(x):\n    return x + {i}\n\n" for i in range(60)]
    body.insert(40, "class Retry:\n    def get_backoff_time(self):\n        if self.attempts <= 1:\n"
                    "            return 0\n        return self.backoff_factor * 2 ** self.attempts\n\n")
    source = "".join(body)
    (repo / "retry.py").write_text(source)
    store = tmp_path / "s.duckdb"
    assert CliRunner().invoke(main, ["ingest", str(repo), "--store", str(store), "--include", "*.py"]).exit_code == 0
    r = CliRunner().invoke(main, ["search", "get_backoff_time", "--store", str(store), "--format", "json", "-n", "1"])
    assert r.exit_code == 0, r.output
    hit = json.loads(r.stdout)["results"][0]
    lines = source.split("\n")
    want = next(i for i, line in enumerate(lines, 1) if "def get_backoff_time" in line)
    assert hit["start_line"] <= want <= hit["end_line"] < len(lines)  # the chunk holding it, not the file
    assert hit["chunk_text"] == "\n".join(lines[hit["start_line"] - 1 : hit["end_line"]])
    assert "\n        return self.backoff_factor" in hit["chunk_text"]
    r = CliRunner().invoke(main, ["search", "get_backoff_time", "--store", str(store), "--format", "detailed", "-n", "1"])
    assert f"lines {hit['start_line']}-{hit['end_line']}:" in r.stdout
    assert f"{want} |     def get_backoff_time(self):" in r.stdout


def test_an_include_that_names_a_hidden_folder_reads_it(tmp_path):
    """`--include '.github/*'` still skipped .github as hidden, without saying that the pattern was overridden;
    a CI workflow could not be found. A version-control folder stays unread whatever the pattern."""
    from toolkit.loaders import load_corpus

    repo = tmp_path / "repo"
    (repo / ".github" / "workflows").mkdir(parents=True)
    (repo / ".github" / "workflows" / "ci.yml").write_text("name: ci\non: push\n")
    (repo / ".git").mkdir()
    (repo / ".git" / "config").write_text("[core]\n")
    (repo / ".env").write_text("TOKEN=secret\n")
    (repo / "notes.md").write_text("# Notes\n")
    ids = {d["doc_id"] for d in load_corpus(repo, include=("*.yml",))}
    assert ids == {"notes.md"}  # hidden stays hidden unless a pattern names it
    corpus = load_corpus(repo, include=(".github/*", ".git/*"))
    assert {d["doc_id"] for d in corpus} == {"notes.md", ".github/workflows/ci.yml"}
    reasons = {s.where: s.reason for s in corpus.skipped}
    assert reasons[".env"] == "hidden file or folder" and reasons[".git/config"] == "hidden file or folder"


def test_a_lookup_keeps_a_holder_already_first_rather_than_moving_bm25s_first_above_it():
    """The review: another document holding the identifier was first already; BM25's first holder was moved above it."""
    exact = pl.DataFrame({"qid": ["q", "q"], "doc_id": ["sessions", "b"], "tokens": [["X_Y"], ["X_Y"]],
                          "whole": [True, True]})
    out, status = keep_exact(_ranked(["b", "models", "utils", "sessions"]), BM25, exact, GuardConfig(exact_token=True, depth=10))
    assert out["doc_id"].to_list() == ["b", "models", "utils", "sessions"] and status["exact_token"].to_list() == ["held"]


def test_a_reingest_that_only_retitles_files_says_so(tmp_path, embedder):
    """Code files are titled by their path now: a repository ingested before "changed" every file on the next ingest
    (and embedded them again) without an edit, and the summary did not say why."""
    from toolkit.loaders import load_corpus
    from toolkit.store import Store

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "a.py").write_text("from __future__ import annotations\n\nX = 1\n")
    (repo / "notes.md").write_text("# Notes\ntext\n")
    docs = load_corpus(repo, include=("*.py",))
    old = [{**d, "title": "from __future__ import annotations"} if d["doc_id"] == "a.py" else d for d in docs]
    with Store(tmp_path / "s.duckdb", embedder=embedder) as st:
        st.ingest(old)
        rep = st.ingest(load_corpus(repo, include=("*.py",)))
    assert rep.changed == 1 and rep.retitled == 1 and "1 changed (1 in their title only)" in rep.summary()


def test_a_version_typed_with_its_v_finds_the_file_that_writes_it_without(tmp_path, embedder):
    """`v2.34.2` missed `__version__ = "2.34.2"` (not in the top 5; `2.34.2` found it first), and the guard did not
    count the file as holding the identifier."""
    from toolkit.config import load_config
    from toolkit.loaders import load_corpus
    from toolkit.pipeline import run_pipeline
    from toolkit.store import Store

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "version.py").write_text('__title__ = "requests"\n__version__ = "2.34.2"\n')
    for i in range(6):
        (repo / f"notes{i}.md").write_text(f"# Release v{i}.0\nThe release v{i}.0 fixed bug {i} in the client.\n")
    with Store(tmp_path / "s.duckdb", embedder=embedder) as st:
        st.ingest(load_corpus(repo, include=("*.py",)))
        for cfg in ("bm25-only", "default"):
            res = run_pipeline(st, pl.DataFrame({"qid": ["q"], "text": ["v2.34.2"]}), load_config(cfg))
            assert res.final["doc_id"][0] == "version.py", (cfg, res.final["doc_id"].to_list())
        assert res.per_query["exact_tokens"][0].to_list() == ["v2.34.2"]
