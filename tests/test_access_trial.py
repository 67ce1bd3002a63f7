"""User trial BC: a researcher with red-green colour blindness who reads output through a screen reader in a narrow
SSH terminal (60-80 columns, sometimes a latin-1 locale). What they met: tables dumped with box drawing and dtype
rows, a `*` without its legend, an HTML report whose tables and figures a screen reader could not place, figures
told apart by red and green alone, and blank lines before a verdict."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from html.parser import HTMLParser
from pathlib import Path

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import write_beir

from toolkit.cli import main

ROOT = Path(__file__).resolve().parents[1]


def _hrt(args: list[str], cwd: Path, **env: str) -> subprocess.CompletedProcess:
    """`hrt` as the user runs it: its own process, its stdout a pipe in the encoding `env` names."""
    return subprocess.run([sys.executable, "-m", "toolkit.cli", *args], cwd=cwd, capture_output=True, timeout=300,
                          env={**os.environ, "PYTHONPATH": str(ROOT), **env})


@pytest.fixture
def beir(tmp_path, corpus_file):
    return write_beir(tmp_path / "ds", corpus_file)


def test_report_summary_is_a_plain_table_a_latin1_pipe_and_60_columns_take(tmp_path, beir):
    """`hrt report` printed polars' dump (`shape: (3, 9)`, box drawing, a dtype row, 6 decimals, 342-character
    lines) and, into a latin-1 pipe, exited 2 after writing the HTML ("cannot write \\u250c\\u2500...")."""
    r = _hrt(["report", "--dataset", str(beir), "--store", str(tmp_path / "s.duckdb"), "--config", "bm25-only",
              "--config", "again=bm25-only", "--out", str(tmp_path / "r.html")], tmp_path,
             PYTHONIOENCODING="latin-1", COLUMNS="60")
    out = r.stdout.decode("latin-1")
    assert r.returncode == 0, r.stderr.decode("latin-1")[-800:]
    assert out.isascii() and "shape:" not in out and "f64" not in out and "---" not in out, out
    lines = out.split("report ->")[0].splitlines()
    assert max(len(line) for line in lines) <= 60, out
    assert lines[0].split() == ["system", "R@1", "R@5", "P@3", "nDCG@10", "MRR@10"]
    assert lines[1].split()[0] == "bm25-only" and all(re.fullmatch(r"\d\.\d{4}", v) for v in lines[1].split()[1:])
    assert "latency_p95_ms" in out and "providers" in out  # the columns that did not fit, in a second block


def test_per_query_table_is_the_same_plain_layout(tmp_path, beir):
    """`hrt eval --per-query` dumped each run's queries as a polars table too."""
    run = tmp_path / "r.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\nq2 Q0 d3 1 1.0 t\nq3 Q0 d5 1 1.0 t\n")
    r = CliRunner().invoke(main, ["eval", "--dataset", str(beir), "--run", str(run), "--per-query"], env={"COLUMNS": "60"})
    assert r.exit_code == 0, r.output
    table = r.stdout.split(f"\n{run}\n")[-1].splitlines()
    assert table[0].split()[0] == "qid" and "nDCG@10" in table[0]
    assert [row.split()[0] for row in table[1:]] == ["q1", "q2", "q3"]
    assert table[2].split()[1:] == ["0.0000"] * 4 and "shape:" not in r.stdout and "┆" not in r.stdout


def test_an_unwritable_output_names_its_first_character_only(tmp_path, beir):
    """The error for output the locale's encoding cannot write named the whole run of characters (612 for a table's
    border); one is enough to say which text it was."""
    run = tmp_path / "运行结果.trec"
    run.write_text("q1 Q0 d1 1 2.0 t\n")
    r = _hrt(["eval", "--dataset", str(beir), "--run", str(run)], tmp_path, PYTHONIOENCODING="latin-1")
    err = r.stderr.decode("latin-1")
    assert r.returncode == 2 and "the output encoding (latin-1) cannot write \\u8fd0: use a UTF-8 locale" in err, err


def test_the_star_of_a_significant_p_value_is_explained_beside_it(tmp_path, beir):
    """`hrt eval` with several runs marked p values with `*`; what it meant was only in `hrt eval --help`."""
    runs = [tmp_path / "a.trec", tmp_path / "b.trec"]
    runs[0].write_text("q1 Q0 d1 1 2.0 a\nq2 Q0 d2 1 1.0 a\nq3 Q0 d5 1 1.0 a\n")
    runs[1].write_text("q1 Q0 d3 1 2.0 b\nq2 Q0 d3 1 1.0 b\nq3 Q0 d3 1 1.0 b\n")
    r = CliRunner().invoke(main, ["eval", "--dataset", str(beir), *(a for p in runs for a in ("--run", str(p)))])
    assert r.exit_code == 0, r.output
    lines = r.stdout.split("p (Holm) vs")[1].splitlines()
    assert lines[1].startswith(str(runs[1])) and lines[2] == "* = significant: p (Holm) <= 0.05", lines


class _Page(HTMLParser):
    """The parts of a report page a screen reader goes by: tables (caption, header cells and where they sit), the
    figures' boxes, and the figures' JSON."""

    def __init__(self) -> None:
        super().__init__()
        self.lang = None
        self.tables: list[dict] = []
        self.figs: list[dict[str, str | None]] = []
        self.script = ""
        self._at: list[str] = []
        self._th: dict | None = None
        self._first = False

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "html":
            self.lang = a.get("lang")
        elif tag == "table":
            self.tables.append({"caption": "", "thead": False, "col": [], "row": [], "td_first": 0})
        elif tag == "thead":
            self.tables[-1]["thead"] = True
        elif tag == "tr" and self.tables:
            self._first = True
        elif tag in ("th", "td") and self.tables:
            if tag == "td" and self._first:
                self.tables[-1]["td_first"] += 1
            self._th = {"scope": a.get("scope"), "text": "", "in": "thead" if "thead" in self._at else "tbody"} if tag == "th" else None
            self._first = False
        elif tag == "div" and "fig" in (a.get("class") or ""):
            self.figs.append({"role": a.get("role"), "label": a.get("aria-label")})
        self._at.append(tag)

    def handle_endtag(self, tag):
        if tag == "th" and self._th is not None:
            self.tables[-1]["col" if self._th["in"] == "thead" else "row"].append(self._th)
            self._th = None
        while self._at and self._at.pop() != tag:
            pass

    def handle_data(self, data):
        if self._at and self._at[-1] == "caption":
            self.tables[-1]["caption"] += data
        elif self._th is not None:
            self._th["text"] += data
        elif self._at and self._at[-1] == "script":
            self.script += data


def test_report_page_tables_and_figures_are_labelled_for_a_screen_reader(tmp_path, beir):
    """The report's page had no `lang`, 54 `<th>` without `scope`, no caption or `<thead>`, system names in plain
    cells, and three empty `<div class='fig'>` boxes (drawn by script) with nothing to say what they showed; the
    figures had no titles and the histogram no y-axis title."""
    out = tmp_path / "r.html"
    r = CliRunner().invoke(main, ["report", "--dataset", str(beir), "--store", str(tmp_path / "s.duckdb"), "--config",
                                  "bm25-only", "--config", "other=bm25-only", "--latency-sample", "2", "--out", str(out)])
    assert r.exit_code == 0, r.output
    page = _Page()
    page.feed(out.read_text())
    assert page.lang == "en"
    assert len(page.tables) >= 3
    for t in page.tables:
        assert t["caption"].strip() and t["thead"] and t["td_first"] == 0, t
        assert t["col"] and all(th["scope"] == "col" for th in t["col"]) and all(th["scope"] == "row" for th in t["row"]), t
    ab = next(t for t in page.tables if t["col"][0]["text"] == "system" and "R@1" in [th["text"] for th in t["col"]])
    assert [th["text"] for th in ab["row"]] == ["bm25-only", "other"]
    assert len(page.figs) == 3 and all(f["role"] == "img" for f in page.figs)
    assert page.figs[0]["label"].startswith("Bar chart of the mean nDCG@10 of each system: bm25-only ")
    assert "other is higher on 0 queries, lower on 0, equal on 3" in page.figs[1]["label"]
    assert "median latency" in page.figs[2]["label"] and "retrieve" in page.figs[2]["label"]
    figs = json.loads(page.script.split("const HRT_FIGS=", 1)[1].split(";const HRT_PLOTLY=", 1)[0].replace("<\\/", "</"))
    for _, fig in figs:
        lay = fig["layout"]
        assert lay["title"]["text"] and lay["xaxis"]["title"]["text"] and lay["yaxis"]["title"]["text"], lay
    assert figs[1][1]["layout"]["yaxis"]["title"]["text"] == "queries"


def _trace(rows: list[tuple[str, str, str, int, float]]) -> pl.DataFrame:
    return pl.DataFrame([(q, d, f"{d}#0", s, r, sc, []) for q, d, s, r, sc in rows],
                        schema=["qid", "doc_id", "chunk_id", "stage", "rank", "score", "flags"],
                        schema_overrides={"rank": pl.Int64, "score": pl.Float64, "flags": pl.List(pl.Utf8)}, orient="row")


def _colours(fig) -> list[str]:
    """Every colour a trace is drawn in (marker and line)."""
    out = []
    for t in fig.data:
        for part in ("marker", "line"):
            c = getattr(getattr(t, part, None), "color", None)
            if isinstance(c, str):
                out.append(c)
    return out


def test_figures_tell_stages_and_systems_apart_without_colour_and_name_their_lines():
    """The score-spread panel overlaid the blend (#ff7f0e) and final (#2ca02c) histograms at opacity 0.6, apart
    by colour alone (a colour difference of 5 under protanopia), and its low-spread threshold was a plain red dashed
    line with no words; the report's overlaid histograms and grouped bars were told apart by colour only too."""
    from toolkit import panels
    from toolkit.report import _delta_hist, _latency_fig

    safe = set(panels.PALETTE.values())
    rows = []
    for q, scores in {"q1": [0.9, 0.5, 0.1], "q2": [0.6, 0.55, 0.2]}.items():
        for stage, shift in (("fuse", 0.0), ("blend", 0.1), ("final", 0.25)):  # three stages, none the same as another
            rows += [(q, f"d{i}", stage, i + 1, s * (1 - shift) + shift * i) for i, s in enumerate(scores)]
    trace = _trace(rows)
    fig = panels.spread_figure(trace, low_spread=0.1)
    hists = [t for t in fig.data if t.type == "histogram"]
    assert [h.name for h in hists] == ["fuse", "blend", "final"]
    assert set(_colours(fig)) <= safe and len({h.marker.color for h in hists}) == 3
    assert len({h.marker.pattern.shape for h in hists}) == 3  # a second cue: each stage's fill pattern
    label = [a for a in fig.layout.annotations if "low spread" in a.text]
    assert label and label[0].text == "low spread < 0.1" and label[0].x == 0.1 and label[0].xref == "x2"

    qrels = pl.DataFrame({"qid": ["q1", "q1", "q1"], "doc_id": ["d0", "d1", "d2"], "rel": [1, 1, 1]})
    traj = panels.trajectory_figure(trace, qrels, "q1", k=1)
    assert set(_colours(traj)) <= safe and len({t.line.dash for t in traj.data}) == len(traj.data) == 3
    assert traj.layout.annotations[0].text == "top 1"

    cur = pl.DataFrame({"qid": ["a", "b"], "measure": ["nDCG@10"] * 2, "value": [0.5, 0.7]})
    metrics = panels.metrics_figure(panels.metric_deltas(cur, cur.with_columns(pl.col("value") - 0.1)))
    assert set(_colours(metrics)) <= safe and len({t.marker.pattern.shape or "" for t in metrics.data}) == 2
    routes = panels.routing_dedup_figure(pl.DataFrame({"qid": ["a"], "route": ["default"]}),
                                         pl.DataFrame({"qid": ["a"], "doc_id": ["x"], "reason": ["near_duplicate"]}))
    assert set(_colours(routes)) <= safe

    pq = pl.DataFrame({"system": [s for s in ("base", "x", "y") for _ in range(3)], "qid": ["q1", "q2", "q3"] * 3,
                       "measure": ["nDCG@10"] * 9, "value": [0.5, 0.2, 0.9, 0.6, 0.2, 0.8, 0.4, 0.3, 0.9]})
    hist, _ = _delta_hist(pq, "base", "nDCG@10")
    lat = pl.DataFrame({"system": ["x", "x", "y", "y"], "stage": ["fuse", "retrieve"] * 2, "p50_ms": [1.0, 5.0, 2.0, 4.0],
                        "p95_ms": [2.0, 9.0, 3.0, 6.0]})
    bars, _ = _latency_fig(lat)
    for f in (hist, bars):
        assert set(_colours(f)) <= safe and len({t.marker.pattern.shape or "" for t in f.data}) == len(f.data) == 2


@pytest.mark.parametrize(("notebook", "title"), [("02_fusion", "Fusion variants, demo dev split"),
                                                  ("07_bring_your_own_corpus", "Characters per document")])
def test_tutorial_figures_are_followed_by_a_sentence_saying_what_they_show(notebook, title):
    """Tutorial 02's bar chart of the fusion variants and tutorial 07's characters per document came with no sentence
    saying what they showed: a screen reader reads a plotly figure as nothing, and the next cell moved on."""
    cells = json.loads((ROOT / "notebooks" / f"{notebook}.ipynb").read_text())["cells"]
    at = next(i for i, c in enumerate(cells) if c["cell_type"] == "code" and title in "".join(c["source"]))
    after = cells[at + 1]
    assert after["cell_type"] == "markdown" and "".join(after["source"]).startswith("Each bar is one "), after


def _screen(raw: bytes) -> list[str]:
    """The lines a terminal shows for `raw`: a carriage return goes back to the line's start, text overwrites."""
    lines, line, col = [], [], 0
    for ch in raw.decode("utf-8", "replace"):
        if ch == "\r":
            col = 0
        elif ch == "\n":
            lines.append("".join(line).rstrip())
            line, col = [], 0
        else:
            line[col:col + 1] = [ch]
            col += 1
    return [*lines, "".join(line).rstrip()] if line else lines


@pytest.mark.skipif(sys.platform == "win32", reason="a pseudo-terminal")
def test_tune_leaves_no_blank_or_finished_bar_lines_before_its_verdict(tmp_path, beir):
    """`hrt tune` at a terminal printed a line per search (optuna's bar, one for the whole split and one per fold, each
    left behind) before its verdict: six empty lines in a terminal that reported no width, six finished bars in one
    60 columns wide, read out one by one by a screen reader."""
    import fcntl
    import pty
    import struct
    import termios

    space = tmp_path / "space.yaml"
    space.write_text("threshold.min_score: {float: [0.0, 1.0]}\n")
    master, slave = pty.openpty()
    fcntl.ioctl(slave, termios.TIOCSWINSZ, struct.pack("HHHH", 24, 60, 0, 0))
    env = {k: v for k, v in os.environ.items() if k not in ("TQDM_DISABLE", "COLUMNS")}
    proc = subprocess.Popen([sys.executable, "-m", "toolkit.cli", "tune", "--dataset", str(beir), "--split", "test",
                             "--force", "--base", "bm25-only", "--space", str(space), "--budget", "3", "--folds", "2",
                             "--store", str(tmp_path / "s.duckdb"), "--out", str(tmp_path / "t.yaml")],
                            cwd=tmp_path, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL, stderr=slave,
                            env={**env, "PYTHONPATH": str(ROOT)})
    os.close(slave)
    raw = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the process closed its end
            break
        if not chunk:
            break
        raw += chunk
    os.close(master)
    assert proc.wait(timeout=300) == 0, raw.decode(errors="replace")[-800:]
    shown = _screen(raw)
    verdict = next(i for i, line in enumerate(shown) if "tuned config ->" in line)
    assert all(line.strip() and "%|" not in line for line in shown[:verdict + 1]), shown
