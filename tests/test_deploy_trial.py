"""User trial AG: `hrt` packaged for CI jobs and containers (caches warmed at image build and read by another
user, truncated cache restores, parallel jobs in one folder, killed processes). Each test is a defect the trial
found."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import threading
import time
from pathlib import Path

import pytest

from toolkit.embed import resolve_model
from toolkit.embed_onnx import OnnxEmbedder, _export_lock, _sweep, discard, entry_problem, export, export_dir

DEMO = Path(__file__).resolve().parents[1] / "data" / "demo"
MODEL_DIR = Path(resolve_model("all-MiniLM-L6-v2")[1])


@pytest.fixture(scope="module")
def exported():
    pytest.importorskip("onnxruntime")
    return export(MODEL_DIR)


@pytest.mark.parametrize("damage", ["empty model", "broken manifest", "no tokenizer"])
def test_a_damaged_cache_entry_is_named(exported, tmp_path, damage):
    """A truncated CI cache restore left an entry that crashed every later command with a traceback."""
    entry = tmp_path / exported.name
    shutil.copytree(exported, entry)
    if damage == "empty model":
        (entry / "model.onnx").write_bytes(b"")
    elif damage == "broken manifest":
        (entry / "manifest.json").write_text("{")
    else:
        (entry / "tokenizer.json").unlink()
    problem = entry_problem(entry)
    assert problem and problem.startswith("is damaged")
    discard(entry, problem)
    assert not entry.exists() and not list(tmp_path.iterdir())  # moved aside, then deleted


def test_a_truncated_model_is_exported_again_and_embeds(exported, tmp_path, monkeypatch):
    """A truncated model.onnx passes every file check; loading it failed with InvalidProtobuf, every time."""
    monkeypatch.setenv("HRT_CACHE_DIR", str(tmp_path))
    entry = export_dir(MODEL_DIR)
    entry.parent.mkdir(parents=True)
    shutil.copytree(exported, entry)
    with open(entry / "model.onnx", "r+b") as fh:
        fh.truncate(1_000_000)
    vec = OnnxEmbedder().embed(["deploy failed with ECONNREFUSED"])
    assert vec.shape == (1, 384) and (entry / "model.onnx").stat().st_size == (exported / "model.onnx").stat().st_size


def test_one_process_exports_at_a_time_and_leftovers_of_killed_exports_go(tmp_path):
    """Six jobs starting at once each ran their own ~1 GB export; a SIGTERM mid-export left a 43 MB partial
    model folder that nothing removed."""
    out = tmp_path / "onnx" / "model-abc"
    order = []

    def hold():
        with _export_lock(out):
            order.append("a in")
            time.sleep(0.3)
            order.append("a out")

    t = threading.Thread(target=hold)
    t.start()
    time.sleep(0.1)
    with _export_lock(out):
        order.append("b in")
    t.join()
    assert order == ["a in", "a out", "b in"]
    old, new = out.parent / "model-abc.k1ll3d", out.parent / "model-abc.w0rk1ng"
    old.mkdir()
    new.mkdir()
    os.utime(old, (time.time() - 7200, time.time() - 7200))
    _sweep(out)
    assert not old.exists() and new.exists()


def test_parallel_runs_in_one_folder_take_turns_on_the_dataset_cache(tmp_path):
    """Three `hrt run` jobs started at once in one folder: one succeeded, two exited 75 ("the store is in use")
    with advice to pass --wait, which `hrt run` did not have. The dataset cache is now waited for."""
    hrt = [sys.executable, "-m", "toolkit.cli"]
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    procs = [subprocess.Popen([*hrt, "run", "--dataset", str(DEMO), "--split", "test", "--mode", "lexical", "--out", f"r{i}.trec"],
                              cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for i in range(3)]
    outs = [p.communicate(timeout=300) for p in procs]
    assert [p.returncode for p in procs] == [0, 0, 0], [e[-500:] for _, e in outs]
    runs = {(tmp_path / f"r{i}.trec").read_text() for i in range(3)}
    assert len(runs) == 1


def _hrt(args, cwd, env=None, stdin=subprocess.DEVNULL):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]), **(env or {})}
    return subprocess.run([sys.executable, "-m", "toolkit.cli", *args], cwd=cwd, env=env, stdin=stdin,
                          capture_output=True, text=True, errors="replace", timeout=300)


def test_odd_names_terminals_and_streams_give_one_line_not_a_traceback(tmp_path):
    """A latin-1 file name aborted the whole ingest with a traceback; output in latin-1 crashed with a traceback
    on the first "…" of a snippet; a closed stdin for `hrt search -` was an AttributeError; a quoted `~/x.duckdb` made
    ./~ while DuckDB wrote $HOME/x.duckdb."""
    notes = tmp_path / "notes"
    notes.mkdir()
    (notes / "deploy.md").write_text("The deploy failed with ECONNREFUSED — see the runbook… 部署失败")
    os.close(os.open(os.fsencode(notes) + b"/caf\xe9.md", os.O_CREAT | os.O_WRONLY))
    home = tmp_path / "home"
    home.mkdir()
    r = _hrt(["ingest", str(notes), "--store", "~/s.duckdb", "--no-embed", "-v"], tmp_path, {"HOME": str(home)})
    assert r.returncode == 0 and "Traceback" not in r.stderr, r.stderr
    assert "not valid UTF-8" in r.stderr and (home / "s.duckdb").exists() and not (tmp_path / "~").exists()
    # Into a pipe or file in an encoding without "—" (a terminal shows it escaped): one line, nothing altered.
    r = _hrt(["search", "deploy ECONNREFUSED", "--store", "~/s.duckdb", "--mode", "lexical"], tmp_path,
             {"HOME": str(home), "PYTHONIOENCODING": "latin-1"})
    assert r.returncode == 2 and "Traceback" not in r.stderr and "PYTHONIOENCODING=utf-8" in r.stderr, r.stderr
    closed = subprocess.run([sys.executable, "-m", "toolkit.cli", "search", "-", "--store", str(home / "s.duckdb")],
                            cwd=tmp_path, env={**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])},
                            capture_output=True, text=True, timeout=120, preexec_fn=lambda: os.close(0))
    assert closed.returncode == 2 and "stdin is closed" in closed.stderr, closed.stderr
    r = _hrt(["search", "deploy", "--store", str(tmp_path / "missing.duckdb")], tmp_path, {"HRT_DEBUG": "1"})
    assert "Traceback" in r.stderr and "no such store" in r.stderr  # HRT_DEBUG=1: the traceback behind the line


def test_onnx_runtime_sends_no_telemetry_unless_asked(exported, tmp_path):
    """onnxruntime 1.32 wrote a device id under ~/.cache/Microsoft and looked up its collector's address during
    an ingest; the README says everything runs offline. Off unless the user sets ORT_DISABLE_TELEMETRY=0."""
    code = "from toolkit.embed_onnx import OnnxEmbedder\nprint(OnnxEmbedder().embed(['deploy']).shape)"
    env = {**os.environ, "HOME": str(tmp_path), "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    env.pop("ORT_DISABLE_TELEMETRY", None)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0 and "(1, 384)" in out.stdout, out.stderr[-1000:]
    assert not (tmp_path / ".cache" / "Microsoft").exists()


def test_a_load_error_that_is_not_damage_keeps_the_shared_export(exported, tmp_path, monkeypatch):
    """Reviewed: any error while loading (out of memory, an old onnxruntime) deleted the export every process
    shares and exported it again."""
    monkeypatch.setenv("HRT_CACHE_DIR", str(tmp_path))
    entry = export_dir(MODEL_DIR)
    entry.parent.mkdir(parents=True)
    shutil.copytree(exported, entry)
    inode = entry.stat().st_ino

    def fail(self, *a):
        raise MemoryError("std::bad_alloc")

    monkeypatch.setattr(OnnxEmbedder, "_open", fail)
    with pytest.raises(MemoryError):
        OnnxEmbedder().embed(["x"])
    assert entry.stat().st_ino == inode and entry_problem(entry) is None


def test_a_truncated_model_is_found_before_loading(exported, tmp_path):
    """Reviewed: a truncated model.onnx passed every file check, so `auto` could not fall back to torch."""
    entry = tmp_path / exported.name
    shutil.copytree(exported, entry)
    with open(entry / "model.onnx", "r+b") as fh:
        fh.truncate(1_000_000)
    assert "model.onnx has 1000000 bytes" in entry_problem(entry)


def test_waiting_for_the_store_says_so(tmp_path):
    """Reviewed: with --wait's default of 600 s for the dataset cache, a command behind a long-running reader
    printed nothing for ten minutes."""
    import logging

    from toolkit.store import Store

    path = tmp_path / "s.duckdb"
    with Store(path) as st:
        st.ingest([{"doc_id": "a", "text": "x"}], embed=False)
    holder = subprocess.Popen([sys.executable, "-c", f"import duckdb, time; c = duckdb.connect({str(path)!r}); print('held', flush=True); "
                               "time.sleep(3)"], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline().strip() == "held"
    records = []
    handler = logging.Handler()
    handler.emit = records.append
    logging.getLogger("toolkit").addHandler(handler)
    try:
        with Store(path, wait_s=30) as st:
            assert st.generation()
    finally:
        logging.getLogger("toolkit").removeHandler(handler)
        holder.wait(timeout=30)
    assert any("waiting up to" in r.getMessage() for r in records)


def test_every_command_on_the_dataset_cache_can_wait():
    """Reviewed: train-reranker and train-fusion share the dataset cache, and the busy error suggested --wait."""
    from click.testing import CliRunner

    from toolkit.cli import main

    for cmd in ("run", "report", "tune", "train-reranker", "train-fusion"):
        assert "--wait" in CliRunner().invoke(main, [cmd, "--help"]).output, cmd


def test_the_latest_stage_cache_entry_survives_older_entries_with_later_clocks(tmp_path):
    """Reviewed: `created` is local wall-clock time, so a writer in a time zone west of earlier ones evicted the
    entry it had just written."""
    import polars as pl

    from toolkit.store import STAGE_CACHE_KEYS, Store

    with Store(tmp_path / "s.duckdb") as st:
        st.ingest([{"doc_id": "a", "text": "x"}], embed=False)
        frame = pl.DataFrame({"a": [1]})
        for i in range(STAGE_CACHE_KEYS):
            st.put_frames(f"k{i}", {"f": frame})
        st.con.execute("UPDATE stage_cache SET created = created + INTERVAL 9 HOUR")
        st.put_frames("newest", {"f": frame})
        assert st.get_frames("newest") is not None
        assert st.con.execute("SELECT count(DISTINCT key) FROM stage_cache").fetchone()[0] == STAGE_CACHE_KEYS


def test_sigterm_ends_a_command_as_ctrl_c_does_with_143(tmp_path):
    """An orchestrator's SIGTERM killed `hrt` at once (exit 143, no word): a first export left a partial 43 MB
    model behind. It now takes Ctrl-C's path (a write rolled back, an export's temporary folder removed), with
    one line and 143."""
    from toolkit.store import Store

    store = tmp_path / "s.duckdb"
    with Store(store) as st:
        st.ingest([{"doc_id": "a", "text": "deploy notes"}], embed=False)
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1])}
    p = subprocess.Popen([sys.executable, "-m", "toolkit.cli", "search", "-", "--store", str(store), "--mode", "lexical"],
                         stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, env=env)
    deadline, asleep_since = time.monotonic() + 60, None
    while time.monotonic() < deadline:  # signal once the CLI sits in its stdin read, not while it imports
        state = Path(f"/proc/{p.pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        asleep_since = (asleep_since or time.monotonic()) if state == "S" else None
        if asleep_since and time.monotonic() - asleep_since > 1.0:
            break
        time.sleep(0.05)
    p.terminate()
    out, err = p.communicate(timeout=60)
    assert p.returncode == 143 and err.strip() == "terminated" and out == "", (p.returncode, err)
