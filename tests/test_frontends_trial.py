"""User trial AX: the lab outside JupyterLab. A script, terminal IPython and exports that draw no widgets
(nbconvert to HTML or Markdown, `jupyter run`) see a readable summary, never the widget tree, a traceback per
panel or a browser tab per slider move; and setting a control's `.value` applies on every control."""

from __future__ import annotations

import math

from test_lab import MEASURES, QRELS, QUERIES, store  # noqa: F401  (the module fixture)

from toolkit.config import load_config
from toolkit.lab import Lab, in_kernel


def _lab(store, **kw) -> Lab:  # noqa: F811
    kw.setdefault("debounce_s", 30.0)
    return Lab(store, QUERIES, QRELS, config=load_config("qmd"), baseline="bm25-only", measures=MEASURES, **kw)


class _Shell:  # what `get_ipython()` returns: terminal IPython has no kernel, a Jupyter kernel's shell has one
    def __init__(self, kernel: object | None) -> None:
        if kernel is not None:
            self.kernel = kernel


def test_static_panels_draw_only_inside_a_kernel(store, monkeypatch):  # noqa: F811
    """Terminal IPython has `get_ipython()` too: there plotly's browser renderer printed a traceback per panel
    (or opened a tab, or hung when BROWSER named no browser) on every change."""
    import IPython
    import IPython.display

    shown: list[object] = []
    monkeypatch.setattr(IPython.display, "display", lambda *a, **k: shown.extend(a))
    monkeypatch.setattr(IPython, "get_ipython", lambda: _Shell(kernel=None))
    assert not in_kernel()
    lab = _lab(store, live_figures=False)
    assert lab.set("fusion.lexical_weight", 2.0)
    assert shown == []
    assert lab.figures["spread"].data  # the figures are still there to save or show by hand

    monkeypatch.setattr(IPython, "get_ipython", lambda: _Shell(kernel=object()))
    assert in_kernel()
    assert lab.set("fusion.lexical_weight", 3.0)
    assert shown  # in a kernel the static panels are redrawn in their Output widgets


def test_show_outside_a_kernel_prints_a_summary_not_the_widget_tree(store, capsys):  # noqa: F811
    lab = _lab(store)
    lab.show()  # pytest's process: no kernel
    out = capsys.readouterr().out
    assert len(out) < 1000 and "VBox" not in out and "bdata" not in out, out[:300]
    assert out.startswith("Session: qmd over 4 queries, k = 10, baseline bm25-only")
    for m in MEASURES:
        assert f"  {m}: {lab.metrics[m]:.4f} (baseline " in out
    assert "need a Jupyter front-end" in out and "lab.set(path, value)" in out
    assert repr(lab).startswith(repr(lab.session))


def test_the_display_bundle_keeps_the_widget_and_adds_text_and_html(store):  # noqa: F811
    lab = _lab(store)
    bundle = lab._repr_mimebundle_()
    assert bundle["application/vnd.jupyter.widget-view+json"]["model_id"] == lab.widget.model_id
    assert bundle["text/plain"] == repr(lab)
    html = bundle["text/html"]
    assert "<table>" in html and html.count("<tr>") == 1 + len(MEASURES)
    d = lab.deltas.row(0, named=True)
    assert f"<td>{d['measure']}</td><td>{d['current']:.4f}</td><td>{d['baseline']:.4f}</td><td>{d['delta']:+.4f}</td>" in html
    lab.set("fusion.rrf_k", 5)
    assert lab._repr_mimebundle_()["text/plain"].startswith("Session: qmd + rrf k 5 over 4 queries")


def test_a_session_without_judgements_says_so(store):  # noqa: F811
    from toolkit.session import Session

    s = Session(store, QUERIES, None, config="bm25-only")
    assert repr(s) == "Session: bm25-only over 4 queries, k = 10 (no judgements: no metrics)"


def test_setting_the_bucket_editors_value_applies_as_every_control_does(store):  # noqa: F811
    """The guide says setting `.value` on a control applies; the bucket editor's only redrew its rows, so the
    config kept the old buckets until some other row moved (user trial AX)."""
    lab = _lab(store)
    new = [(3.0, 0.9), (10.0, 0.5), (math.inf, 0.3)]
    assert lab.config.rerank.buckets != new
    lab.controls["rerank.buckets"].value = new
    lab.flush()
    assert [tuple(b) for b in lab.config.rerank.buckets] == new
    assert lab.controls["rerank.buckets"].value == new
    # The lab moving the editor to its config (a `set`) is not an edit: nothing is queued.
    assert lab.set("rerank.buckets", [(3.0, 0.75), (10.0, 0.6), (math.inf, 0.4)])
    assert lab._pending == {}
    assert lab.controls["rerank.buckets"].value == [(3.0, 0.75), (10.0, 0.6), (math.inf, 0.4)]
    lab.add_bucket()
    assert len(lab.config.rerank.buckets) == 4


def test_a_script_builds_a_lab_quietly(store, capsys):  # noqa: F811
    lab = _lab(store, live_figures=False)
    lab.set("fusion.lexical_weight", 2.0)
    assert capsys.readouterr().out == ""
