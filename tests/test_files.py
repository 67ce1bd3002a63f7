"""Configs, models, reports, exports and runs are written whole or not at all (`toolkit.files.write_text_atomic`)."""

from __future__ import annotations

import threading

import pytest

from toolkit.files import write_text_atomic


def test_concurrent_writers_leave_one_whole_file(tmp_path):
    path = tmp_path / "sub" / "model.json"
    texts = [f"{i}:" + str(i) * 200_000 + "\n" for i in range(8)]
    threads = [threading.Thread(target=write_text_atomic, args=(path, t)) for t in texts]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert path.read_text() in texts
    assert [p.name for p in path.parent.iterdir()] == ["model.json"]  # no temporary file left


def test_a_failed_write_keeps_the_previous_file(tmp_path, monkeypatch):
    path = tmp_path / "tuned.yaml"
    write_text_atomic(path, "old\n")

    def fail_replace(src, dst):
        raise OSError("disk full")

    monkeypatch.setattr("toolkit.files.os.replace", fail_replace)
    with pytest.raises(OSError, match="disk full"):
        write_text_atomic(path, "new\n")
    assert path.read_text() == "old\n" and [p.name for p in tmp_path.iterdir()] == ["tuned.yaml"]


def test_permissions_are_those_of_a_plain_write(tmp_path):
    plain, atomic = tmp_path / "plain.txt", tmp_path / "atomic.txt"
    plain.write_text("x")
    write_text_atomic(atomic, "x")
    assert atomic.stat().st_mode == plain.stat().st_mode
