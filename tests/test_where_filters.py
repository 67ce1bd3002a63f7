"""Metadata filters in search (`hrt search --where`, `retrieval.filters`): an agent's memories of one user, one
session or one kind. Left undone by trial BG ("no metadata filters in hrt search"): the store could filter, nothing
above it could ask."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.config import load_config
from toolkit.export import export_config


def _memories(tmp_path):
    rows = [{"_id": f"m{i}", "text": f"deploy fails with ECONNREFUSED on host {i}" if i % 2 else f"lunch menu {i}",
             "metadata": {"user": "ana" if i < 6 else "bob", "pinned": i == 7, "priority": i % 3}} for i in range(12)]
    src = tmp_path / "mem.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "mem.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(src), "--store", store, "--no-embed"])
    assert r.exit_code == 0, r.output
    return store


def _ids(store, *args):
    r = CliRunner().invoke(main, ["search", "deploy ECONNREFUSED", "--store", store, "--mode", "lexical", "-n", "10",
                                  "--format", "json", *args])
    assert r.exit_code == 0, r.output
    return [x["doc_id"] for x in json.loads(r.stdout)["results"]], r


def test_where_keeps_only_documents_whose_metadata_field_equals_the_value(tmp_path):
    store = _memories(tmp_path)
    everyone, _ = _ids(store)
    assert {"m1", "m7"} <= set(everyone)
    ana, _ = _ids(store, "--where", "user=ana")
    assert ana and set(ana) == {"m1", "m3", "m5"}  # only ana's memories that hold the words
    bob, _ = _ids(store, "--where", "user=bob")  # another filter in the same process: not the cached lists of ana
    assert set(bob) == {"m7", "m9", "m11"}
    # Every filter must hold; booleans and numbers are compared as the JSON text the metadata holds.
    assert _ids(store, "--where", "user=bob", "--where", "pinned=true")[0] == ["m7"]
    assert set(_ids(store, "--where", "priority=1")[0]) == {"m1", "m7"}
    none, r = _ids(store, "--where", "user=carol")
    assert none == [] and json.loads(r.stdout)["messages"] == [
        "note: stored documents have the metadata field 'user', none with the filter's value (values are compared "
        "exactly, after Unicode NFC, or as numbers)"]
    doc = json.loads(_ids(store, "--where", "usr=ana")[1].stdout)
    assert "no stored document has a metadata field 'usr'" in "".join(doc["messages"])
    assert doc["notes"]["no_term_match"] is False  # the filter emptied the lists, not the words (user trial BR)


def test_a_filter_matches_a_number_as_a_number_and_text_in_either_unicode_form(tmp_path):
    """User trial BK: stored 1.0 was not matched by 1, nor an NFC-stored name by its NFD spelling (macOS)."""
    rows = [{"_id": "a", "text": "deploy ECONNREFUSED", "metadata": {"ratio": 1.0, "score": 3, "user": "\u00e9mile"}},
            {"_id": "b", "text": "deploy ECONNREFUSED", "metadata": {"ratio": 2.5, "score": 4, "user": "bob"}}]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "m.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(src), "--store", store, "--no-embed"]).exit_code == 0
    assert _ids(store, "--where", "ratio=1")[0] == ["a"] and _ids(store, "--where", "score=3.0")[0] == ["a"]
    assert _ids(store, "--where", "user=e\u0301mile")[0] == ["a"]  # NFD
    assert _ids(store, "--where", "ratio=2.5")[0] == ["b"]


def test_a_filter_applies_before_the_lists_are_cut_to_top_k(tmp_path):
    """A filtered-out document must not take a place of the top_k: with top_k 2, bob's memories still come."""
    store = _memories(tmp_path)
    cfg = tmp_path / "c.yaml"
    cfg.write_text("extends: bm25-only\nretrieval:\n  lexical: {top_k: 2}\n  filters: {user: bob, pinned: false}\n")
    ids, _ = _ids(store, "--config", str(cfg))
    assert len(ids) == 2 and set(ids) <= {"m9", "m11"}


def test_malformed_filters_are_refused_naming_the_option_or_field(tmp_path):
    store = _memories(tmp_path)
    r = CliRunner().invoke(main, ["search", "deploy", "--store", store, "--where", "user"])
    assert r.exit_code == 2 and "'--where'" in r.output and "FIELD=VALUE" in r.output
    for bad in ("us'er=x", ".user=ana", "user.=ana", "user..x=ana"):  # `.user` and `a..b` crashed the search (trial BK)
        r = CliRunner().invoke(main, ["search", "deploy", "--store", store, "--where", bad])
        assert r.exit_code == 2 and "letters, digits" in r.output, (bad, r.output)
    # Every --where must hold: two values of one field, or one the config pins otherwise, cannot (trial BK: the last
    # value won, and `--where user=bob` searched bob's memories through a config that pins user: ana).
    r = CliRunner().invoke(main, ["search", "deploy", "--store", store, "--where", "user=ana", "--where", "user=bob"])
    assert r.exit_code == 2 and "both cannot hold" in r.output
    pinned = tmp_path / "ana.yaml"
    pinned.write_text("extends: bm25-only\nretrieval:\n  filters: {user: ana}\n")
    r = CliRunner().invoke(main, ["search", "deploy", "--store", store, "--config", str(pinned), "--where", "user=bob"])
    assert r.exit_code == 2 and "--where user=bob and the config's retrieval.filters user: 'ana'" in r.output
    assert _ids(store, "--config", str(pinned), "--where", "user=ana")[0]  # the same value: fine
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("extends: bm25-only\nretrieval:\n  filters: {user: [ana, bob]}\n")
    r = CliRunner().invoke(main, ["search", "deploy", "--store", store, "--config", str(cfg)])
    assert r.exit_code == 2 and "retrieval.filters" in r.output and "one value to equal" in r.output
    cfg.write_text("extends: bm25-only\nretrieval:\n  filters: {'user.': ana}\n")
    r = CliRunner().invoke(main, ["config", "check", str(cfg)])
    assert r.exit_code == 2 and "filters key 'user.'" in r.output, r.output


def test_an_export_says_the_filters_do_not_carry_over():
    cfg = load_config("qmd").with_updates({"retrieval.filters": {"user": "ana"}})
    assert any("metadata filters (user = 'ana')" in x for x in export_config(cfg, "elasticsearch").not_carried)


def test_dense_search_honours_the_filter_too(tmp_path):
    rows = [{"_id": f"m{i}", "text": f"the deploy failed: connection refused on host {i}",
             "metadata": {"user": "ana" if i < 3 else "bob"}} for i in range(6)]
    src = tmp_path / "mem.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "mem.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(src), "--store", store]).exit_code == 0
    for mode in ("dense", "hybrid"):
        r = CliRunner().invoke(main, ["search", "why did the deploy fail", "--store", store, "--mode", mode, "-n", "6",
                                      "--format", "json", "--where", "user=bob"])
        assert r.exit_code == 0, r.output
        assert {x["doc_id"] for x in json.loads(r.stdout)["results"]} == {"m3", "m4", "m5"}, mode


def test_text_that_reads_as_a_number_is_not_that_number(tmp_path):
    """The review: numbers were compared through TRY_CAST of any stored text, so `--where user=7` matched the user
    "007", `zip=1234` the zip "01234", and ids past 2**53 matched their neighbours; `hrt delete --where` then deleted
    them too."""
    rows = [{"_id": "t007", "text": "deploy", "metadata": {"user": "007", "zip": "01234", "big": 12345678901234567890}},
            {"_id": "t7", "text": "deploy", "metadata": {"user": "7", "zip": "1234", "big": 12345678901234567891}},
            {"_id": "n7", "text": "deploy", "metadata": {"user": 7, "zip": 1234.0, "big": 1}}]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "m.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(src), "--store", store, "--no-embed"]).exit_code == 0
    assert sorted(_ids(store, "--where", "user=7")[0]) == ["n7", "t7"]  # the text "7" and the number 7, not "007"
    assert sorted(_ids(store, "--where", "zip=1234")[0]) == ["n7", "t7"]
    assert _ids(store, "--where", "big=12345678901234567891")[0] == ["t7"]
    r = CliRunner().invoke(main, ["delete", "--store", store, "--where", "user=7"])
    assert r.exit_code == 0 and "deleted 2 document(s) whose metadata has user = '7': n7, t7" in r.output, r.output
    assert _ids(store, "--where", "user=007")[0] == ["t007"]
    r = CliRunner().invoke(main, ["delete", "--store", store, "--where", "user=007", "--missing-ok"])
    assert r.exit_code == 2 and "--missing-ok is for ids" in r.output


def test_the_same_number_written_twice_is_one_filter_and_scope_and_filter_notes_both_come(tmp_path):
    store = _memories(tmp_path)
    pinned = tmp_path / "p.yaml"
    pinned.write_text("extends: bm25-only\nretrieval:\n  filters: {priority: 1}\n")
    assert set(_ids(store, "--config", str(pinned), "--where", "priority=1.0")[0]) == {"m1", "m7"}
    r = CliRunner().invoke(main, ["search", "deploy", "--store", store, "--mode", "lexical", "--scope", "nosuch",
                                  "--where", "user=ana", "--format", "json"])
    assert "no stored document has scope 'nosuch'" in r.stderr and json.loads(r.stdout)["messages"]


def test_a_yaml_filter_value_is_matched_as_written(tmp_path):
    """User trial BM: YAML 1.1 read `user: 010` as 8, `1:20` as 80 and `on` as true: the config selected another
    tenant's memories with no warning."""
    rows = [{"_id": f"u{u}", "text": "deploy ECONNREFUSED", "metadata": {"user": u}} for u in ("010", "8", "1:20", "80", "on", "true")]
    src = tmp_path / "m.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows))
    store = str(tmp_path / "m.duckdb")
    assert CliRunner().invoke(main, ["ingest", str(src), "--store", store, "--no-embed"]).exit_code == 0
    for written, want in (("010", "u010"), ("1:20", "u1:20"), ("on", "uon"), ("'8'", "u8"), ("true", "utrue")):
        cfg = tmp_path / "c.yaml"
        cfg.write_text(f"extends: bm25-only\nretrieval:\n  filters: {{user: {written}}}\n")
        assert _ids(store, "--config", str(cfg))[0] == [want], written


def test_a_yaml_filter_keeps_null_as_an_error_and_merges_as_yaml_does(tmp_path):
    """The second review: text for every plain scalar made `user: ~` the text '~' (a forgotten value filtering on it)
    and `<<` a key named '<<'."""
    from toolkit.errors import InputError

    cfg = tmp_path / "c.yaml"
    cfg.write_text("extends: bm25-only\nretrieval:\n  filters: {user: ~}\n")
    with pytest.raises(InputError, match="one value to equal"):
        load_config(str(cfg))
    cfg.write_text("extends: bm25-only\noutput: &o {n: 5}\nretrieval:\n  filters: {<<: *o, user: 010}\n")
    assert load_config(str(cfg)).retrieval.filters == {"n": "5", "user": "010"}
