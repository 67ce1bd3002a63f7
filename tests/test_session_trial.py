"""Defects a user trial found in the session: a damaged router accepted, qrels of another split shown as
empty metrics, a negative rank bonus silently deleting its band, a failed change leaving half-updated
state, and `export("yaml", "x.json")` writing JSON."""

from __future__ import annotations

import json
import math
import re

import polars as pl
import pytest
from conftest import docs_store

from toolkit import panels
from toolkit.errors import InputError
from toolkit.learned_fusion import SHIPPED_MODEL
from toolkit.session import Session

QUERIES = pl.DataFrame({"qid": ["q1", "q3"], "text": ["deploy fails with ECONNREFUSED", "back off when the limit is hit"]})
QRELS = pl.DataFrame({"qid": ["q1", "q3"], "doc_id": ["d1", "d6"], "rel": [1, 1]})


@pytest.fixture(scope="module")
def store(tmp_path_factory, embedder):
    st = docs_store(tmp_path_factory.mktemp("session_trial"), embedder)
    yield st
    st.close()


def _with_router(tmp_path, name: str, router: object):
    doc = json.loads(SHIPPED_MODEL.read_text())
    path = tmp_path / f"{name}.json"
    path.write_text(json.dumps({**doc, "router": router}))
    return path


@pytest.mark.parametrize(
    "name,change,pattern",
    [
        ("nan", {"coef": [math.nan] * 9}, "coef.*finite"),
        ("short", {"coef": [0.1] * 3}, "coef must be 9"),
        ("kind", None, "kind 'x'"),
    ],
)
def test_a_damaged_router_is_refused_and_the_session_keeps_its_config(store, tmp_path, name, change, pattern):
    """Before: NaN coefficients emptied every ranking and update() returned True with all metrics 0; kind 'x'
    raised KeyError 'inputs'; a short coef a numpy matmul ValueError."""
    shipped = json.loads(SHIPPED_MODEL.read_text())["router"]
    path = _with_router(tmp_path, name, {"kind": "x"} if change is None else {**shipped, **change})
    s = Session(store, QUERIES, QRELS, config="hybrid-rrf", baseline=None)
    cfg, metrics, result = s.config, s.metrics, s.result
    assert s.update({"fusion.router": True, "fusion.model": str(path)}) is False
    assert str(path) in s.message and "field 'router'" in s.message and re.search(pattern, s.message), s.message
    assert s.config == cfg and s.metrics == metrics and s.result is result
    assert s.update({"fusion.router": True, "fusion.model": str(SHIPPED_MODEL)}) and s.message == ""


def test_an_unexpected_failure_keeps_the_state_whole_and_says_so(store, monkeypatch):
    """Before: an exception after the metrics were computed left new per-query metrics beside the old config,
    and the status line still showed the previous, unrelated error."""
    s = Session(store, QUERIES, QRELS, config="hybrid-rrf", baseline="bm25-only")
    assert s.set("fusion.rrf_k", 0) is False and "rrf_k" in s.message  # an unrelated earlier error
    state = (s.config, s.result, s.per_query, s.deltas, s.failures)

    def boom(*a, **k):
        raise RuntimeError("failure cases broke")

    monkeypatch.setattr(panels, "lost", boom)  # the failure-case step the session calls
    with pytest.raises(RuntimeError):
        s.set("fusion.lexical_weight", 0.0)
    assert "RuntimeError: failure cases broke" in s.message and "rrf_k" not in s.message
    assert all(a is b for a, b in zip(state, (s.config, s.result, s.per_query, s.deltas, s.failures), strict=True))


def test_qrels_of_another_split_are_an_error_and_no_qrels_run_without_metrics(store):
    """Before: metrics {} and message '' (toolkit.experiment raises in the same case)."""
    other = pl.DataFrame({"qid": ["t1", "t2"], "doc_id": ["d1", "d2"], "rel": [1, 1]})
    with pytest.raises(InputError, match="no judgement matches a query id.*'q1'.*'t1'"):
        Session(store, QUERIES, other, config="default", baseline="bm25-only")
    s = Session(store, QUERIES, None, config="default")
    assert s.metrics == {} and s.message == "" and s.set("fusion.rrf_k", 20)


@pytest.mark.parametrize("bonus", [-0.5, math.nan, math.inf])
def test_a_negative_or_non_finite_rank_bonus_is_refused(store, bonus):
    """Before: True, and the band silently vanished (only bands with a bonus > 0 were kept)."""
    s = Session(store, QUERIES, QRELS, config="hybrid-rrf", baseline=None)
    assert s.set("fusion.rank_bonus@1", 0.05)
    cfg = s.config
    assert s.set("fusion.rank_bonus@1", bonus) is False
    assert "fusion.rank_bonus@1" in s.message and s.config == cfg and s.config.fusion.rank_bonus == [(1, 0.05)]
    assert s.set("fusion.rank_bonus@1", 0) and s.config.fusion.rank_bonus == []  # 0 removes the band


def test_export_kind_and_extension_must_agree(store, tmp_path):
    """Before: export("yaml", "x.json") wrote JSON (the extension won) and export("json", "x.yaml") x.json."""
    s = Session(store, QUERIES, QRELS, config="hybrid-rrf", baseline=None)
    for kind, name in (("yaml", "x.json"), ("json", "x.yaml"), ("json", "x.yml"), ("yaml", "x.txt")):
        with pytest.raises(InputError, match=f"kind '{kind}'.*extension '{name[1:]}'"):
            s.export(kind, tmp_path / name)
    assert not list(tmp_path.iterdir())
    assert s.export("yaml", tmp_path / "a").endswith(str(tmp_path / "a.yaml"))
    assert s.export("json", tmp_path / "b").endswith(str(tmp_path / "b.json"))
    assert s.export("yaml", tmp_path / "c.yml") and "\nname: hybrid-rrf\n" in (tmp_path / "c.yml").read_text()
    assert json.loads((tmp_path / "b.json").read_text())["name"] == "hybrid-rrf"
