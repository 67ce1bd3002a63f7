"""User trial K: `hrt` driven by scripts, CI jobs and an agent's tool harness, which parse its output and branch
on its exit code. Each test is a defect as the trial met it."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import duckdb
import pytest
from click.testing import CliRunner
from conftest import write_beir

from toolkit import interrupts
from toolkit.cli import EXIT_BROKEN_PIPE, EXIT_BUSY, EXIT_INTERRUPTED, main
from toolkit.store import Store

HRT = str(Path(sys.executable).with_name("hrt"))


@pytest.fixture
def notes(tmp_path):
    root = tmp_path / "notes"
    root.mkdir()
    for i in range(3):
        (root / f"n{i}.md").write_text(f"# Note {i}\n\nThe deploy of service {i} failed with ECONNREFUSED.\n")
    return root


def _cli(*args: str, input: str | None = None):
    return CliRunner().invoke(main, list(args), input=input)


def _count(store: Path) -> int:
    with Store(store, read_only=True) as st:
        return len(st.doc_sources())


def test_a_ctrl_c_a_library_swallowed_still_cancels_the_ingest_and_nothing_is_stored(tmp_path, notes, monkeypatch):
    """A SIGINT landing while DuckDB imported pandas was swallowed: `hrt ingest` stored all 600 documents and
    exited 0. The interrupt is now recorded and checked before the commit."""
    store = tmp_path / "s.duckdb"
    assert _cli("ingest", str(notes), "--store", str(store), "--no-embed").exit_code == 0
    (notes / "new.md").write_text("A new note about quokkas.\n")
    real_install = interrupts.install

    def install_then_lose_a_ctrl_c():
        real_install()
        with pytest.raises(KeyboardInterrupt):
            interrupts._on_sigint(2, None)  # recorded, then swallowed here as DuckDB's import did

    monkeypatch.setattr(interrupts, "install", install_then_lose_a_ctrl_c)
    r = _cli("ingest", str(notes), "--store", str(store), "--no-embed")
    assert r.exit_code == EXIT_INTERRUPTED == 130
    assert "interrupted: nothing of this ingest was stored; the store is as it was" in r.output
    assert "Traceback" not in r.output and _count(store) == 3


def test_duckdbs_query_interrupted_is_one_line_and_exit_130(tmp_path, notes, monkeypatch):
    """Ctrl-C during a DuckDB statement surfaced as `RuntimeError: Query interrupted` with a 40-line traceback."""
    store = tmp_path / "s.duckdb"
    assert _cli("ingest", str(notes), "--store", str(store), "--no-embed").exit_code == 0

    def cut_short(*a, **k):
        raise RuntimeError("Query interrupted")

    monkeypatch.setattr(Store, "search", cut_short, raising=False)
    monkeypatch.setattr("toolkit.pipeline.prepare", cut_short)
    r = _cli("search", "deploy", "--store", str(store), "--mode", "lexical")
    assert r.exit_code == EXIT_INTERRUPTED and r.output.strip() == "interrupted" and r.exception.__class__ is SystemExit


def test_a_real_sigint_while_waiting_for_input_exits_130_without_a_traceback(tmp_path, notes):
    store = tmp_path / "s.duckdb"
    assert _cli("ingest", str(notes), "--store", str(store), "--no-embed").exit_code == 0
    p = subprocess.Popen([HRT, "search", "-", "--store", str(store), "--mode", "lexical"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    # Signal only once the CLI sits in its stdin read (asleep for a while), not while it imports.
    deadline, asleep_since = time.monotonic() + 60, None
    while time.monotonic() < deadline:
        state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        asleep_since = (asleep_since or time.monotonic()) if state == "S" else None
        if asleep_since and time.monotonic() - asleep_since > 1.0:
            break
        time.sleep(0.05)
    p.send_signal(2)
    out, err = p.communicate(timeout=60)
    assert p.returncode == EXIT_INTERRUPTED, (p.returncode, err)
    assert err.strip() == "interrupted" and out == ""


@pytest.mark.parametrize("args", [["presets"], ["--help"], ["--version"]])
def test_a_closed_stdout_ends_quietly_with_141(tmp_path, args):
    """`hrt presets | head -1` printed `error: [Errno 32] Broken pipe` and exited 2, like a real failure; `hrt --help
    | true` exited 1 (click's own handling: the top-level help is printed before a command runs)."""
    r_fd, w_fd = os.pipe()
    os.close(r_fd)  # the reader is gone before anything is written
    p = subprocess.run([HRT, *args], stdout=w_fd, stderr=subprocess.PIPE, text=True, timeout=120)
    os.close(w_fd)
    assert p.returncode == EXIT_BROKEN_PIPE == 141 and p.stderr == ""


def test_a_locked_store_exits_75_so_a_script_can_retry(tmp_path, notes):
    store = tmp_path / "s.duckdb"
    assert _cli("ingest", str(notes), "--store", str(store), "--no-embed").exit_code == 0
    holder = duckdb.connect(str(store))  # another process writing (an ingest running)
    try:
        p = subprocess.run([HRT, "search", "deploy", "--store", str(store), "--mode", "lexical"],
                           capture_output=True, text=True, timeout=120)
    finally:
        holder.close()
    assert p.returncode == EXIT_BUSY == 75, p.stderr
    assert "in use by another process" in p.stderr and "try again" in p.stderr and "Traceback" not in p.stderr


def test_queries_from_a_program_stdin_dash_dashes_and_an_empty_scope(tmp_path, notes):
    store = tmp_path / "s.duckdb"
    assert _cli("ingest", str(notes), "--store", str(store), "--no-embed").exit_code == 0
    doc = json.loads(_cli("search", "-", "--store", str(store), "--mode", "lexical", "--format", "json",
                          input="--force deploy ECONNREFUSED\n").stdout)
    assert doc["query"] == "--force deploy ECONNREFUSED" and doc["results"]
    r = _cli("search", "--store", str(store), "--mode", "lexical", "--format", "json", "--", "-v deploy")
    assert r.exit_code == 0 and json.loads(r.stdout)["query"] == "-v deploy"
    # --scope "$SCOPE" with SCOPE unset: no scope, not the scope '' (which returned nothing).
    assert len(json.loads(_cli("search", "deploy", "--store", str(store), "--mode", "lexical", "--format", "json",
                               "--scope", "").stdout)["results"]) == 3
    assert "--" in _cli("search", "--help").output and "stdin" in _cli("search", "--help").output


def test_run_depth_is_checked_an_empty_run_is_warned_and_out_dash_streams_the_run(tmp_path, corpus_file):
    beir = write_beir(tmp_path / "ds", corpus_file)
    store = str(tmp_path / "s.duckdb")
    base = ["run", "--dataset", str(beir), "--split", "test", "--mode", "lexical", "--store", store]
    r = _cli(*base, "--out", str(tmp_path / "d0.trec"), "--depth", "0")
    assert r.exit_code == 2 and "--depth" in r.output and not (tmp_path / "d0.trec").exists()
    r = CliRunner().invoke(main, [*base, "--out", "-"])
    assert r.exit_code == 0, r.output
    lines = r.stdout.splitlines()
    assert lines and all(len(ln.split()) == 6 for ln in lines)  # only the run on stdout
    assert "-> stdout" in r.stderr and "\r" not in r.stderr  # the summary on stderr; no progress bars in a pipe
    assert not (Path.cwd() / "-").exists()
    (tmp_path / "empty.trec").write_text("")
    r = _cli("eval", "--dataset", str(beir), "--split", "test", "--run", str(tmp_path / "empty.trec"))
    assert r.exit_code == 0 and "warning:" in r.stderr and "holds no results" in r.stderr


def test_a_directory_given_as_config_is_named_as_one(tmp_path, notes):
    store = tmp_path / "s.duckdb"
    assert _cli("ingest", str(notes), "--store", str(store), "--no-embed").exit_code == 0
    (tmp_path / "cfgdir").mkdir()
    r = _cli("search", "deploy", "--store", str(store), "--config", str(tmp_path / "cfgdir"))
    assert r.exit_code == 2 and "a directory, not a config file" in r.output


_SLOW_CLI_IMPORT = """
import importlib.abc, sys, time
class Slow(importlib.abc.MetaPathFinder):  # the CLI's import (click, polars) made long enough to land a signal in
    def find_spec(self, name, path, target=None):
        if name == "toolkit.cli":
            print("importing", flush=True)
            time.sleep(5)
        return None
sys.meta_path.insert(0, Slow())
sys.argv = ["hrt", "--version"]
from toolkit._entry import main
main()
"""


@pytest.mark.parametrize("sig, code, word", [(15, 143, "terminated"), (2, 130, "interrupted")])
def test_a_signal_while_the_cli_is_still_importing_ends_hrt_as_documented(sig, code, word):
    """User trial BR: SIGINT in the first few hundred ms of `hrt search` gave a KeyboardInterrupt traceback through
    importlib frames, SIGTERM a death by signal without a line: the handlers came with the command, after importing
    the CLI. `hrt` now starts in `toolkit._entry`, which installs them before importing anything."""
    from importlib.metadata import entry_points

    (hrt,) = [e for e in entry_points(group="console_scripts") if e.name == "hrt"]
    assert hrt.value == "toolkit._entry:main"
    p = subprocess.Popen([sys.executable, "-c", _SLOW_CLI_IMPORT], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    assert p.stdout.readline() == b"importing\n"
    p.send_signal(sig)
    out, err = p.communicate(timeout=60)
    assert (p.returncode, err.decode()) == (code, f"{word}\n")


def test_a_reader_leaving_mid_output_ends_hrt_search_with_141_not_0(tmp_path):
    """User trial BR: a Node parent that stopped reading after the first 64 KB of `hrt search --format json` got exit 0:
    the kernel took 65,536 of 145,177 bytes, CPython's buffered stdout counted the write as done, and the rest was lost
    without a word. The documented code for a reader that went away is 141."""
    import fcntl
    import termios

    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        st.ingest([{"doc_id": f"d{i}", "text": f"walrus note {i} " + "about the harbour seals " * 30} for i in range(150)],
                  embed=False)
    read_end, write_end = os.pipe()
    p = subprocess.Popen([sys.executable, "-m", "toolkit", "search", "walrus", "--store", str(store), "--config",
                          "bm25-only", "-n", "150", "--format", "json"], stdout=write_end, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})
    os.close(write_end)
    pending = bytearray(4)
    deadline = time.monotonic() + 120
    while p.poll() is None and time.monotonic() < deadline:  # until the pipe is full: hrt waits in its write
        fcntl.ioctl(read_end, termios.FIONREAD, pending)
        if int.from_bytes(pending, sys.byteorder) >= 65536:
            break
        time.sleep(0.05)
    assert p.poll() is None, "the output fit in the pipe: the test needs more results"
    os.read(read_end, 10)
    os.close(read_end)  # the reader goes away mid-output
    p.wait(60)
    assert p.returncode == EXIT_BROKEN_PIPE, p.stderr.read().decode()[-2000:]


def test_ingest_takes_jsonl_records_on_stdin_without_a_file_or_a_folder_to_track(tmp_path):
    """User trial BR: a service adding one memory had to write a temporary .jsonl per memory (`hrt ingest -` was "no
    such file or folder"); each ingest then said "316 stored document(s) are not in /tmp/.../m.jsonl" and recorded the
    dead temporary path in the store as a folder it tracks."""
    store = str(tmp_path / "m.duckdb")
    runner = CliRunner()
    for i, text in enumerate(["the walrus prefers dark mode", "the walrus is allergic to kiwis"]):
        r = runner.invoke(main, ["ingest", "-", "--store", store, "--no-embed"],
                          input=json.dumps({"id": f"m{i}", "text": text, "user": "ana"}) + "\n")
        assert r.exit_code == 0, r.output
        assert "not in" not in r.output and "1 added" in r.output
    with Store(store, read_only=True) as st:
        assert st.ingest_roots() == [] and st.ids_where({"user": "ana"}) == ["m0", "m1"]
    bad = runner.invoke(main, ["ingest", "-", "--store", store, "--no-embed"], input='{"id": "m2", "text": "ok"}\n{oops\n')
    assert bad.exit_code == 2 and bad.output.startswith("error: stdin:2: malformed JSON") and "hrt-stdin" not in bad.output
    for args, said in (([], "no records"), (["--prune"], "--prune: not with records from stdin")):
        r = runner.invoke(main, ["ingest", "-", "--store", store, "--no-embed", *args], input="")
        assert r.exit_code == 2 and said in r.output, r.output
    with Store(store, read_only=True) as st:
        assert st.stats()["documents"] == 2  # the bad batch stored nothing


def test_search_batch_serves_a_programs_queries_from_one_process_a_line_each(tmp_path):
    """User trial BR: a process per query cost a Node service 1.5-3 s and 160-345 MB each, and nothing let queries share
    one. `hrt search - --batch` reads one JSON request a line and answers each with one line as it is read (a
    co-process: the next request is written after the answer came back); a bad request is answered with its error and
    the process goes on."""
    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        st.ingest([{"doc_id": f"m{i}", "text": f"the walrus memory {i} about kiwis", "metadata": {"user": "ana" if i % 2 else "bob",
                                                                                                 "pinned": i == 1}}
                   for i in range(6)], embed=False)
    p = subprocess.Popen([sys.executable, "-m", "toolkit", "search", "-", "--batch", "--store", str(store), "--config",
                          "bm25-only", "-n", "2"], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])})

    def ask(line: str) -> dict:
        p.stdin.write((line + "\n").encode())
        p.stdin.flush()
        return json.loads(p.stdout.readline())

    first = ask(json.dumps({"qid": "a", "query": "walrus kiwis"}))
    assert list(first)[:3] == ["qid", "schema_version", "toolkit_version"] and first["n_results"] == 2
    assert ask("{oops")["error"].startswith("stdin:2: malformed JSON")
    ana = ask(json.dumps({"qid": "b", "query": "walrus kiwis", "where": {"user": "ana"}, "n": 5}))
    assert ana["qid"] == "b" and {r["doc_id"] for r in ana["results"]} == {"m1", "m3", "m5"}
    pinned = ask(json.dumps({"query": "walrus", "where": {"pinned": True}}))
    assert pinned["qid"] == 4 and [r["doc_id"] for r in pinned["results"]] == ["m1"]  # no qid: the line number
    assert ask(json.dumps({"qid": "c", "query": " "}))["error"] == 'stdin:5: "query": the query text (a non-empty string)'
    p.stdin.close()
    assert p.wait(60) == 0 and p.stdout.read() == b""
    r = CliRunner().invoke(main, ["search", "walrus", "--batch", "--store", str(store)])
    assert r.exit_code == 2 and "--batch reads its queries from stdin" in r.output
    r = CliRunner().invoke(main, ["search", "-", "--batch", "--format", "compact", "--store", str(store)], input="")
    assert r.exit_code == 2 and "--batch answers in JSON lines" in r.output


def test_json_output_in_a_non_utf8_encoding_is_escaped_not_an_error(tmp_path):
    """User trial BR: with PYTHONIOENCODING=latin-1 a JSON search failed on the first "…" of a snippet ("cannot write
    \\u2026", exit 2). JSON can say every character in ASCII escapes, which read back as the same text; text formats
    still refuse rather than show altered text."""
    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        st.ingest([{"doc_id": "n1", "text": "walrus → kiwis ✓ 日本語 note"}], embed=False)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PYTHONIOENCODING": "latin-1"}
    for extra in ([], ["--batch"]):
        query = ["-"] if extra else ["walrus"]
        r = subprocess.run([sys.executable, "-m", "toolkit", "search", *query, *extra, "--store", str(store), "--config",
                            "bm25-only", "--format", "json"], input=b'{"query": "walrus"}\n' if extra else None,
                           capture_output=True, env=env, timeout=120)
        assert r.returncode == 0, r.stderr.decode()[-1000:]
        doc = json.loads(r.stdout.decode("ascii"))  # every character escaped
        assert doc["results"][0]["snippet"] == "walrus → kiwis ✓ 日本語 note"
    text = subprocess.run([sys.executable, "-m", "toolkit", "search", "walrus", "--store", str(store), "--config",
                           "bm25-only"], capture_output=True, env=env, timeout=120)
    assert text.returncode == 2 and b"cannot write" in text.stderr
