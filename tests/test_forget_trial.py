"""Forgetting a user (user trial BK): delete by metadata, and a store file that no longer holds the deleted text."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.errors import InputError, StoreBusyError, StoreError
from toolkit.store import Store, compact_store

SECRET = "XK42QZ9"


def _bank(tmp_path) -> str:
    rows = [{"_id": f"m{i}", "text": f"note {i}: " + (f"my passport ends in {SECRET}" if i == 3 else "I prefer dark mode"),
             "metadata": {"user": "dara" if i < 4 else "ana"}} for i in range(8)]
    src = tmp_path / "bank.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "bank.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(src), "--store", store, "--no-embed"]).exit_code == 0
    return store


def test_delete_where_removes_one_users_documents_and_compact_removes_their_text_from_the_file(tmp_path):
    store = _bank(tmp_path)
    r = CliRunner().invoke(main, ["delete", "--store", store, "--where", "user=dara"])
    assert r.exit_code == 0 and "deleted 4 document(s) whose metadata has user = 'dara'" in r.output, r.output
    with Store(store, read_only=True) as st:
        assert sorted(st.doc_sources()["doc_id"].to_list()) == ["m4", "m5", "m6", "m7"]
    # Gone from every table, but not from the file: DuckDB leaves freed blocks as they were.
    assert Path(store).read_bytes().count(SECRET.encode()) > 0
    r = CliRunner().invoke(main, ["compact", "--store", store])
    assert r.exit_code == 0 and "no longer in the file" in r.output, r.output
    assert Path(store).read_bytes().count(SECRET.encode()) == 0
    assert [p.name for p in tmp_path.iterdir() if "compact" in p.name] == []  # no copy left behind
    # The compacted store is the same store: it searches and takes writes.
    r = CliRunner().invoke(main, ["search", "dark mode", "--store", store, "--mode", "lexical", "--format", "json", "-n", "9"])
    assert sorted(x["doc_id"] for x in json.loads(r.stdout)["results"]) == ["m4", "m5", "m6", "m7"]
    with Store(store) as st:
        st.ingest([{"doc_id": "m9", "text": "after compaction"}], embed=False)
        assert st.stats()["documents"] == 5


def test_delete_where_says_when_nothing_matched_and_wants_ids_or_where(tmp_path):
    store = _bank(tmp_path)
    r = CliRunner().invoke(main, ["delete", "--store", store, "--where", "user=Dara"])
    assert r.exit_code == 0 and "deleted 0 document(s)" in r.output and "compared exactly" in r.output
    assert CliRunner().invoke(main, ["delete", "--store", store]).exit_code == 2
    r = CliRunner().invoke(main, ["delete", "m1", "--store", store, "--where", "user=dara"])
    assert r.exit_code == 2 and "not both" in r.output


def test_compact_refuses_a_store_open_elsewhere_and_changes_nothing(tmp_path):
    store = _bank(tmp_path)
    size = (tmp_path / "bank.duckdb").stat().st_size
    with Store(store), pytest.raises(StoreBusyError, match="close it before compacting"):
        compact_store(store)  # its writes would go on into the replaced file
    with Store(store, read_only=True), pytest.raises(StoreError, match="open already"):
        compact_store(store)
    assert (tmp_path / "bank.duckdb").stat().st_size == size


def test_compact_keeps_a_private_stores_permissions_and_rewrites_a_symlinks_target(tmp_path):
    """The review: the fresh file came back world-readable (the umask's 0644 over a 0600 store), and a store reached
    through a symlink was replaced by a regular file while its target kept the deleted text."""
    store = Path(_bank(tmp_path))
    store.chmod(0o600)
    link = tmp_path / "link.duckdb"
    link.symlink_to(store)
    with Store(link) as st:
        st.delete(["m3"])
    assert store.read_bytes().count(SECRET.encode()) > 0
    compact_store(link)
    assert link.is_symlink() and store.read_bytes().count(SECRET.encode()) == 0
    assert store.stat().st_mode & 0o777 == 0o600


def test_compact_removes_the_copy_a_killed_run_left(tmp_path):
    store = Path(_bank(tmp_path))
    left = tmp_path / f".{store.name}.compact-999999999"  # no such process
    left.write_bytes(b"a killed run's copy of live data")
    compact_store(store)
    assert not left.exists()


def test_a_planted_macro_neither_widens_a_filter_nor_survives_compaction(tmp_path):
    """User trial BM: a store file holding `CREATE MACRO nfc_normalize(x) AS 'same'` made every --where match (the
    filter SQL called the built-in unqualified), so `hrt delete --where user=nobody` deleted all; compact copied it."""
    import duckdb

    store = _bank(tmp_path)
    con = duckdb.connect(store, config={"allow_unsigned_extensions": "true"})
    con.execute("CREATE MACRO nfc_normalize(x) AS 'same'")
    con.execute("CREATE MACRO json_type(x, y) AS 'DOUBLE'")
    con.close()
    r = CliRunner().invoke(main, ["delete", "--store", store, "--where", "user=nobody"])
    assert r.exit_code == 0 and "deleted 0 document(s)" in r.output, r.output
    with pytest.raises(StoreError, match=r"holds macro\(s\) .*nfc_normalize.*not compacted"):
        compact_store(store)


def test_numbers_are_equal_only_when_they_are_the_same_number(tmp_path):
    """User trial BM: both sides rounded to 10 decimals, so user_id=7 deleted 7.00000000004 and user_id=0 deleted 1e-11."""
    rows = [{"_id": i, "text": "note", "metadata": {"user_id": v}}
            for i, v in (("a", 7), ("b", 7.00000000004), ("c", 1e-11), ("d", 0), ("e", 7.0), ("g", "7"), ("z", 0.0))]
    src = tmp_path / "n.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "n.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(src), "--store", store, "--no-embed"]).exit_code == 0
    with Store(store, read_only=True) as st:
        assert st.ids_where({"user_id": "7"}) == ["a", "e", "g"]
        assert st.ids_where({"user_id": "0"}) == ["d", "z"]
        assert st.ids_where({"user_id": "7.00000000004"}) == ["b"]
        assert st.ids_where({"user_id": "1e-11"}) == ["c"]
        assert st.ids_where({"user_id": "1e-400"}) == []  # no float: not the stored 0.0 (the second review)


def test_compact_refuses_a_hard_linked_store_and_keeps_its_owner(tmp_path):
    """User trial BM: with a hard link as a backup, compact said the deleted text was gone while the other name kept
    it; and the fresh file took the compacting user's owner and group (a shared store's owner was locked out)."""
    import os

    store = Path(_bank(tmp_path))
    backup = tmp_path / "backup.duckdb"
    os.link(store, backup)
    with pytest.raises(StoreError, match="1 other hard link"):
        compact_store(store)
    backup.unlink()
    if os.geteuid() == 0:  # only root may give a file away
        os.chown(store, 65534, 65534)
        compact_store(store)
        assert (store.stat().st_uid, store.stat().st_gid) == (65534, 65534)


def test_compact_on_a_full_disk_names_the_store_and_leaves_it_and_no_copy_behind(tmp_path):
    """A disk that fills while the copy is written (here a file-size limit, EFBIG, as ENOSPC would) failed at the
    copy's commit with DuckDB's TransactionException, reported as "the store could not complete the operation"
    without the store's name or whether it was harmed (the nineteenth session checked only by hand)."""
    import hashlib
    import subprocess
    import sys

    rows = [{"_id": f"m{i}", "text": " ".join(f"w{i * 7 + j}" for j in range(150))} for i in range(150)]
    (tmp_path / "bank.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = tmp_path / "bank.duckdb"
    assert CliRunner().invoke(main, ["ingest", str(tmp_path / "bank.jsonl"), "--store", str(store), "--no-embed"]).exit_code == 0
    before = hashlib.sha256(store.read_bytes()).hexdigest()
    script = ("import resource, signal\n"
              "signal.signal(signal.SIGXFSZ, signal.SIG_IGN)\n"  # a write past the limit fails (EFBIG), no kill
              "resource.setrlimit(resource.RLIMIT_FSIZE, (64 << 10, 64 << 10))\n"
              "from toolkit.cli import main\n"
              f"main(['compact', '--store', {str(store)!r}])\n")
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, timeout=120)
    assert r.returncode == 2, r.stderr
    assert f"{store}: could not write the compacted copy beside it" in r.stderr
    assert "the store is unchanged" in r.stderr and "Traceback" not in r.stderr
    assert hashlib.sha256(store.read_bytes()).hexdigest() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["bank.duckdb", "bank.jsonl"]
    assert Store(store, read_only=True).stats()["documents"] == 150


def test_ids_where_matches_values_as_the_config_filters_do_and_refuses_what_is_not_one_value(tmp_path):
    """User trial BP: `ids_where({"draft": False})` found nothing where the config filter `{draft: false}` found the
    document (it compared the text "False"), and None, a list or a number as the key found nothing without a word:
    a "forget this user" flow deleted nothing and said nothing."""
    from toolkit.config import load_config
    from toolkit.pipeline import run_pipeline

    with Store(tmp_path / "m.duckdb", embedder=None) as st:
        st.ingest([{"doc_id": "p0", "text": "priority memory", "metadata": {"priority": 0, "draft": False}},
                   {"doc_id": "p1", "text": "priority memory", "metadata": {"priority": 1, "draft": True}}], embed=False)
        for filters in ({"draft": False}, {"priority": 0}, {"priority": "0"}, {"draft": False, "priority": 0.0}):
            cfg = load_config("bm25-only").with_updates({"retrieval.filters": filters})
            assert st.ids_where(filters) == ["p0"] == run_pipeline(st, {"q": "priority memory"}, cfg).final["doc_id"].to_list()
        assert st.ids_where({"draft": True}) == ["p1"]
        for bad in ({"priority": None}, {"priority": [0, 1]}, {"priority": {"lt": 1}}):
            with pytest.raises(InputError, match=r"filters\['priority'\]: one value to equal"):
                st.ids_where(bad)
        with pytest.raises(InputError, match="metadata filter key 5"):
            st.ids_where({5: "x"})
