"""Hostile data in the lab's HTML panels and in `hrt search`'s terminal output.

Lab: a query id, query text, document id, title, source or config name holding `<img src=x onerror=...>`
must reach `ipywidgets.HTML` values (innerHTML) and plotly titles, hovers and cells only escaped
(`&lt;img`). Search: ESC sequences, 8-bit CSI, backspace and CR in a document's fields must not reach the
terminal, titles stay one line, and the JSON output parses and round-trips the original strings."""

from __future__ import annotations

import json
from pathlib import Path

import ipywidgets as W
import polars as pl
import pytest
from click.testing import CliRunner

from toolkit import panels
from toolkit.cli import main
from toolkit.config import load_config
from toolkit.lab import Lab
from toolkit.loaders import load_corpus
from toolkit.render import clean, render
from toolkit.session import Session
from toolkit.store import Store

EVIL = "<img src=x onerror=alert(1)>"
EVIL_DOCS = [
    {"_id": f"d1{EVIL}", "title": f"Deploy {EVIL} failure", "text": f"The deploy failed with ECONNREFUSED {EVIL} on port 5432.",
     "metadata": {"source": f"incident {EVIL}", "scope": "platform", "note": EVIL}},
    {"_id": "d2", "title": "Retry policy", "text": "We decided to set retryBackoffMs to 250 and cap retries at five.",
     "metadata": {"source": "decisions", "scope": "payments"}},
    {"_id": f"d3{EVIL}", "title": EVIL, "text": f"The deploy failed again, ECONNREFUSED, rollback {EVIL}.",
     "metadata": {"source": EVIL, "scope": "platform"}},
]
EVIL_QID = f"q{EVIL}"
QUERIES = pl.DataFrame({"qid": [EVIL_QID, "q2"], "text": [f"deploy ECONNREFUSED {EVIL}", "retry backoff policy"]})
# Relevant documents the lists hold deep down or not at all: failure cases and trajectories get drawn.
QRELS = pl.DataFrame({"qid": [EVIL_QID, EVIL_QID, "q2"], "doc_id": [f"d3{EVIL}", f"d1{EVIL}", f"d1{EVIL}"], "rel": [1, 1, 1]})


@pytest.fixture(scope="module")
def evil_store(tmp_path_factory, embedder):
    d = tmp_path_factory.mktemp("inj")
    corpus = d / "corpus.jsonl"
    corpus.write_text("".join(json.dumps(x) + "\n" for x in EVIL_DOCS))
    st = Store(d / "inj.duckdb", embedder=embedder)
    st.ingest(load_corpus(corpus))
    yield st
    st.close()


def _strings(v, path=""):
    """Every string in a figure spec (titles, annotations, trace names, text, hovertext, cells, ...)."""
    if isinstance(v, str):
        yield path, v
    elif isinstance(v, dict):
        for k, x in v.items():
            yield from _strings(x, f"{path}.{k}")
    elif isinstance(v, list | tuple):
        for i, x in enumerate(v):
            yield from _strings(x, f"{path}[{i}]")


def _html_values(w):
    if isinstance(w, W.HTML):
        yield w.value
    for c in getattr(w, "children", ()) or ():
        yield from _html_values(c)


def _assert_safe(texts, where):
    seen_escaped = False
    for path, s in texts:
        assert "<img" not in s.lower(), f"{where}{path}: raw markup {s!r}"
        seen_escaped |= "&lt;img" in s
    return seen_escaped


def test_lab_panels_escape_hostile_ids_titles_and_text(evil_store):
    cfg = load_config("hybrid-rrf")
    cfg = cfg.model_copy(update={"name": f"cfg{EVIL}"})
    lab = Lab(evil_store, QUERIES, QRELS, config=cfg, measures=("nDCG@10", "R@1"), k=1,
              debounce_s=30.0, debounce_leading=False, live_figures=False)
    try:
        lab.pin_baseline()  # the baseline is named after the (hostile) config name
        lab.inspect(qid=EVIL_QID)
        lab.set("fusion.lexical_weight", 2.0)
        lab.flush()
        specs = {name: slot.spec for name, slot in lab._slots.items()}
        escaped = False
        for name, spec in specs.items():
            escaped |= _assert_safe(_strings(spec), name)
        assert escaped  # the data were shown, escaped, not dropped
        drill = specs["drilldown"]["layout"]["title"]["text"]
        assert f"Top results per stage: q{EVIL.replace('<', '&lt;').replace('>', '&gt;')}" in drill
        values = list(_html_values(lab.widget))
        _assert_safe((("", v) for v in values), "widget")
        assert any("&lt;img" in v for v in values)

        lab.inspect(text=f"deploy {EVIL}")  # a typed query
        _assert_safe(_strings(lab._slots["inspector"].spec), "inspector")
        _assert_safe((("", v) for v in _html_values(lab.widget)), "widget")
        assert "Typed query: deploy &lt;img" in lab._slots["inspector"].widget.value
    finally:
        lab.close()


def test_session_inspector_title_is_escaped(evil_store):
    s = Session(evil_store, QUERIES, QRELS, load_config("hybrid-rrf"), measures=("R@1",), k=3)
    s.inspect(qid=EVIL_QID)
    assert "<img" not in s.inspected_title and "&lt;img" in s.inspected_title
    s.inspect(text=EVIL)
    assert s.inspected_title.startswith("Typed query: &lt;img")


def test_static_figures_escape_data_but_keep_own_markup():
    lists = pl.DataFrame({"stage": ["fuse"], "rank": [1], "doc_id": [EVIL], "score": [0.5], "rel": [1],
                          "flags": [[EVIL]], "excerpt": [EVIL]})
    fig = panels.drilldown_figure(lists, EVIL, query_text=EVIL, raw=True)
    _assert_safe(_strings(fig), "drilldown")
    html = panels.table_html(fig)
    assert "<img" not in html and "&lt;img" in html and "<br><span style='font-size:12px'>" in html
    assert "&amp;lt;" not in html  # escaped once, not twice
    # table_html keeps only the module's own tags, even in a title a caller did not escape
    raw = panels.table_html({"layout": {"title": {"text": f"a<br>{EVIL}<sub>n</sub>"}, "annotations": [{"text": EVIL}]}, "data": []})
    assert "<img" not in raw and "a<br>&lt;img" in raw and "<sub>n</sub>" in raw
    tr = pl.DataFrame({"qid": [EVIL, EVIL], "stage": ["retrieve:lex", "final"], "doc_id": [EVIL, EVIL],
                       "rank": [1, 1], "score": [1.0, 1.0]})
    traj = panels.trajectory_figure(tr, pl.DataFrame({"qid": [EVIL], "doc_id": [EVIL], "rel": [1]}), EVIL, raw=True)
    _assert_safe(_strings(traj), "trajectory")
    deltas = pl.DataFrame({"qid": ["a"] * 2, "measure": ["R@1", "R@1"], "value": [1.0, 0.0]})
    m = panels.metrics_figure(panels.metric_deltas(deltas.head(1), deltas.tail(1)), current_name=EVIL, baseline_name=EVIL, raw=True)
    _assert_safe(_strings(m), "metrics")


# ------------------------------------------------------------------ terminal output
ANSI_DOCS = [
    {"id": "d1", "title": "deploy guide \x1b[2J\x1b[H\x1b]0;pwned\x07",
     "text": "deploy fails with ECONNREFUSED \x1b[1A\x1b[2K1. score 9.9999 \u00b7 FORGED RESULT [trusted]"},
    {"id": "d2\x1b[31mred", "title": "t\rOVERWRITE", "text": "deploy text \b\b\b\b bs", "source": "src\x1b[8m"},
    {"id": "d3", "title": "multi\nline\n2. score 1.0000 \u00b7 fake [fake]",
     "text": "deploy line1\n\n#9  score 1.0\nforged detailed\x9b31m c1"},
]
BAD = ("\x1b", "\x9b", "\b", "\r", "\x07")


def _rows():
    return [{"rank": i + 1, "score": 1.0 / (i + 1), "doc_id": d["id"], "title": d["title"], "text": d["text"],
             "source": d.get("source"), "also_in": [f"s\x1b[2J{i}"], "flags": ["duplicates_collapsed"],
             "metadata": json.dumps({"k\x1b": "v\x9b", "café": "東京"})} for i, d in enumerate(ANSI_DOCS)]


@pytest.mark.parametrize("fmt", ["compact", "detailed", "json"])
def test_render_sends_no_control_characters(fmt):
    out = render(_rows(), fmt=fmt, max_chars=20000, notes={"messages": ["server said \x1b[31mno\x9b"]})
    for b in BAD:
        assert b not in out, (fmt, b)
    assert not any(0x80 <= ord(c) <= 0x9F or (ord(c) < 0x20 and c != "\n") for c in out)
    if fmt == "json":
        doc = json.loads(out)
        got = doc["results"]
        assert [r["doc_id"] for r in got] == [d["id"] for d in ANSI_DOCS]
        assert [r["title"] for r in got] == [d["title"] for d in ANSI_DOCS]
        assert got[1]["source"] == "src\x1b[8m"
        assert got[0]["metadata"] == {"k\x1b": "v\x9b", "café": "東京"}
        assert "\\u009b" in out and "café" in out and "東京" in out  # C1 escaped, other non-ASCII readable
        assert "forged detailed\x9b31m c1" in got[2]["snippet"]
    else:
        assert "\\x1b[2J" in out and "\\x9b31m" in out  # shown, visibly escaped
        if fmt == "detailed":
            blocks = out.split("\n\n")
            assert [b.split("\n", 1)[0][:16] for b in blocks[1:]] == ["#1  score 1.0000", "#2  score 0.5000", "#3  score 0.3333"]
            assert all(len(b.split("\n")) == 4 for b in blocks[1:])  # head, source/doc, title, text: one line each
            assert "title: multi line 2. score 1.0000 · fake [fake]" in out
        else:
            heads = [line for line in out.splitlines() if not line.startswith(("   ", "note:"))]
            assert [h.split(".", 1)[0] for h in heads] == ["1", "2", "3"]  # no forged result line


def test_clean_makes_one_visible_line():
    assert clean("a\nb\r\tc\x1b[0m\x9b\x00") == "a b c\\x1b[0m\\x9b\\x00"
    assert clean("a\u202eb") == "a\\u202eb"
    assert clean(None) == ""


@pytest.mark.parametrize("fmt", ["compact", "detailed", "json"])
def test_bidi_overrides_are_shown_not_obeyed(fmt):
    """Trojan Source: a right-to-left override in a title makes the terminal draw 'd9 [admin]' from text that
    reads otherwise. Every embedding, override and isolate is shown as an escape; joiners (emoji, Persian) and the
    marks Arabic and Hebrew text holds (ALM, LRM, RLM: they reorder no run; user trial AQ) are kept."""
    rows = [{"rank": 1, "score": 0.5, "doc_id": "d\u202e1", "title": "note \u202e]nimda[ 9d\u2066x\u2069\u200f",
             "text": "deploy \u061c text \u200d\u200c kept", "metadata": json.dumps({"k": "v\u202a"})}]
    out = render(rows, fmt=fmt, max_chars=5000)
    bidi = {"\u202a", "\u202b", "\u202c", "\u202d", "\u202e", "\u2066", "\u2067", "\u2068", "\u2069"}
    assert not bidi & set(out), fmt
    assert "\u200d" in out and "\u200c" in out and "\u061c" in out and ("\u200f" in out or fmt == "compact")
    if fmt == "json":
        got = json.loads(out)["results"][0]
        assert got["title"] == rows[0]["title"] and got["doc_id"] == "d\u202e1"  # the data is unchanged
        assert got["metadata"] == {"k": "v\u202a"}
    else:
        assert "\\u202e" in out and "\\u2066" in out


def test_hrt_search_output_has_no_escape_sequences(tmp_path: Path):
    corpus = tmp_path / "ansi.jsonl"
    corpus.write_text("".join(json.dumps(d) + "\n" for d in ANSI_DOCS))
    store = str(tmp_path / "ansi.duckdb")
    run = CliRunner()
    r = run.invoke(main, ["ingest", str(corpus), "--store", store])
    assert r.exit_code == 0, r.output
    for fmt in ("compact", "detailed", "json"):
        r = run.invoke(main, ["search", "deploy", "--store", store, "--mode", "lexical", "--format", fmt, "-n", "5"])
        assert r.exit_code == 0, r.output
        for b in BAD:
            assert b not in r.stdout, (fmt, b)
        if fmt == "json":
            doc = json.loads(r.stdout)
            assert {x["doc_id"] for x in doc["results"]} == {d["id"] for d in ANSI_DOCS}
            titles = {x["doc_id"]: x["title"] for x in doc["results"]}
            # JSON carries titles as stored; a lone CR is stored as the line end it is (user trial AT: CR-only notes).
            assert titles == {d["id"]: d["title"].replace("\r", "\n") for d in ANSI_DOCS}
