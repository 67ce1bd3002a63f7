"""Drive a tutorial's lab in real JupyterLab in headless Chromium (Debian's package; nothing is downloaded).

Used by `tests/test_browser.py` (tutorials 02-05 on the demo data) and `benchmarks/lab_browser.py` (LoCoMo):
start a JupyterLab server on a free port, open the notebook, run all cells, wait for the lab's panels,
photograph them, move a slider by typing into its number box, and time the path from the keypress to
redrawn panels.
"""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

CHROMIUM = "/usr/bin/chromium"
ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "browser"  # screenshots, timings and JupyterLab logs

# The lab's figures are plotly graph divs; `gd.data` holds what is drawn. A JSON snapshot of all of them
# (and of the metrics table's cells) tells whether the panels changed.
SNAPSHOT_JS = """() => {
  const plots = [...document.querySelectorAll('.js-plotly-plot')];
  return JSON.stringify(plots.map(gd => (gd.data || []).map(t => [t.type, t.x, t.y, t.cells && t.cells.values])));
}"""


def chromium_path() -> str | None:
    return CHROMIUM if Path(CHROMIUM).exists() else shutil.which("chromium")


def require_browser() -> None:
    """Skip without Chromium or Playwright, unless HRT_REQUIRE_BROWSER=1 (set by `make test`): then a missing
    browser is a failure."""
    import pytest

    if chromium_path() is None:
        if os.environ.get("HRT_REQUIRE_BROWSER") == "1":
            pytest.fail("chromium not found: run `make browser-deps` (apt-get install chromium)")
        pytest.skip("chromium not installed (make browser-deps)")
    pytest.importorskip("playwright.sync_api")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextmanager
def jupyterlab(root: Path, log: Path) -> Iterator[str]:
    """A JupyterLab server over `root` without token; yields its base URL. The app object is exposed as
    `window.jupyterapp` so the test can run commands (run all cells) instead of clicking through menus."""
    port = _free_port()
    cmd = [
        sys.executable, "-m", "jupyterlab", "--no-browser", f"--port={port}", "--ServerApp.ip=127.0.0.1",
        "--IdentityProvider.token=", "--ServerApp.password=", "--ServerApp.disable_check_xsrf=True",
        f"--ServerApp.root_dir={root}", "--LabApp.expose_app_in_browser=True", "--ServerApp.open_browser=False", "--allow-root",
    ]
    log.parent.mkdir(parents=True, exist_ok=True)
    # Own settings: autosave off (a run must never write outputs into the tutorial), no news pop-up, and
    # every cell rendered (JupyterLab 4 otherwise renders only the cells near the view: panels further down
    # would not exist in the page to be checked).
    # Per log name, so that two servers started at once (test files on two workers) share no files.
    settings = log.parent / f"{log.stem}-settings"
    for plugin, value in (("@jupyterlab/docmanager-extension/plugin", {"autosave": False}),
                          ("@jupyterlab/notebook-extension/tracker", {"windowingMode": "none"}),
                          ("@jupyterlab/apputils-extension/notification", {"fetchNews": "false"})):
        f = settings / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(json.dumps(value))
    env = dict(os.environ, JUPYTER_CONFIG_DIR=str(log.parent / f"{log.stem}-config"), HF_HUB_OFFLINE="1",
               JUPYTERLAB_SETTINGS_DIR=str(settings), JUPYTERLAB_WORKSPACES_DIR=str(log.parent / f"{log.stem}-workspaces"))
    with log.open("w") as fh:
        proc = subprocess.Popen(cmd, cwd=root, stdout=fh, stderr=subprocess.STDOUT, env=env)
        url = f"http://127.0.0.1:{port}"
        try:
            deadline = time.monotonic() + 90
            while True:
                try:
                    urllib.request.urlopen(f"{url}/api/status", timeout=2)
                    break
                except OSError:
                    if proc.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"JupyterLab did not start; see {log}") from None
                    time.sleep(0.1)
            yield url
        finally:
            proc.terminate()
            try:
                proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                proc.kill()


@dataclass
class LabRun:
    """What the browser saw: panel snapshots and timings, and the screenshots it kept."""

    before: str = ""
    after: str = ""
    timing_before: str = ""
    timing_after: str = ""
    slider_to_panels_ms: list[float] = field(default_factory=list)
    run_all_s: float = 0.0
    screenshots: list[Path] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


@contextmanager
def chromium() -> Iterator:
    """Headless Chromium (Debian's, through Playwright); yields the browser."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium_path(), args=["--no-sandbox", "--disable-gpu"])
        try:
            yield browser
        finally:
            browser.close()


def drive_lab(url: str, notebook: str, artifacts: Path, *, slider: str = "lexical weight",
              values: tuple[str, ...] = ("2.5",), run_timeout_s: float = 600.0, prefix: str = "lab",
              section: str | None = None) -> LabRun:
    """Open `notebook` (path relative to the server root), run all cells, then `move_slider`."""
    with chromium() as browser:
        page = browser.new_page(viewport={"width": 1500, "height": 1300})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        # The same null-safe waits as the panel check: the session can be briefly null while the kernel starts.
        run_all_s = run_notebook_page(page, url, notebook, run_timeout_s, min_plots=3)
        out = move_slider(page, artifacts, slider=slider, values=values, prefix=prefix, section=section)
        out.run_all_s, out.errors = run_all_s, errors + out.errors
    return out


def move_slider(page, artifacts: Path, *, slider: str = "lexical weight", values: tuple[str, ...] = ("2.5",),
                prefix: str = "lab", section: str | None = None) -> LabRun:
    """On a page whose notebook ran: for each of `values` type it into the `slider`'s number box and wait until
    the panels' data changed. `section`: the lab's settings section that holds the slider (picked first, as a
    reader picks it from the "settings" list; the first section, fusion, is open). Screenshots and timings go to
    `artifacts`."""
    artifacts.mkdir(parents=True, exist_ok=True)
    out = LabRun()
    errors = page.locator(".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr'] .jp-RenderedText:has-text('Traceback'), .jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
    if errors.count():
        out.errors.append("cell error: " + errors.first.inner_text()[:2000])
    if section is not None:
        page.get_by_label("settings", exact=True).first.select_option(label=section)
    # The value is typed into the slider's number box (`lab.number_box`), found by its label as a screen reader finds it.
    row = page.get_by_role("spinbutton", name=slider, exact=True).first
    row.scroll_into_view_if_needed()
    # The lab is wider than the notebook column: bringing the box into view scrolled the controls half out of the shot.
    row.evaluate("e => { for (let p = e.parentElement; p; p = p.parentElement) p.scrollLeft = 0; }")
    timing = page.locator(".widget-html-content", has_text="updated in").first
    out.before = page.evaluate(SNAPSHOT_JS)
    out.timing_before = timing.inner_text() if timing.count() else ""
    shot = artifacts / f"{prefix}-before.png"
    page.screenshot(path=str(shot), full_page=False)
    out.screenshots.append(shot)
    snap, stamp = out.before, out.timing_before
    for v in values:
        readout = row
        readout.click()
        page.keyboard.press("Control+A")
        page.keyboard.type(v)
        t = time.perf_counter()
        page.keyboard.press("Enter")
        # Done when the lab's "updated in" line (written after every panel) changed and the figures did.
        page.wait_for_function(
            f"([before, stamp]) => {{ const el = [...document.querySelectorAll('.widget-html-content')]"
            f".find(e => e.textContent.includes('updated in'));"
            f" return el && el.textContent !== stamp && ({SNAPSHOT_JS})() !== before; }}",
            arg=[snap, stamp], timeout=60_000, polling="raf",
        )
        out.slider_to_panels_ms.append((time.perf_counter() - t) * 1000)
        page.wait_for_timeout(300)  # let plotly finish drawing before the next snapshot
        snap = page.evaluate(SNAPSHOT_JS)
        stamp = timing.inner_text() if timing.count() else ""
    out.after = snap
    out.timing_after = timing.inner_text() if timing.count() else ""
    shot = artifacts / f"{prefix}-after.png"
    page.screenshot(path=str(shot), full_page=False)
    out.screenshots.append(shot)
    (artifacts / f"{prefix}-run.json").write_text(json.dumps(
        {"slider_to_panels_ms": out.slider_to_panels_ms, "timing_before": out.timing_before,
         "timing_after": out.timing_after, "errors": out.errors}, indent=2))
    return out


# Everything a reader must be able to read, checked in the page: a plotly text (title, axis title, tick or
# legend label) that leaves its figure's box, or a table header / cell whose text overflows its box with no
# tooltip (title attribute) to show it whole. Returns one line per clipped element.
CLIPPED_JS = """() => {
  const out = [];
  const label = el => (el.textContent || '').trim().slice(0, 60);
  document.querySelectorAll('.js-plotly-plot').forEach((gd, i) => {
    const box = gd.getBoundingClientRect();
    if (box.width === 0) return;
    gd.querySelectorAll('.gtitle, .xtitle, .ytitle, .xtick text, .ytick text, .legendtext, .annotation-text')
      .forEach(t => {
        const r = t.getBoundingClientRect();
        if (r.width === 0 || !label(t)) return;
        if (r.left < box.left - 1 || r.right > box.right + 1 || r.top < box.top - 1 || r.bottom > box.bottom + 1)
          out.push(`figure ${i}: ${t.getAttribute('class')} "${label(t)}" leaves the figure`);
      });
  });
  // plotly tables: a cell's text wider than its column is cut by the column's clip path.
  document.querySelectorAll('.js-plotly-plot .table .column-cell').forEach(cell => {
    const rect = cell.querySelector('.cell-rect'), text = cell.querySelector('.cell-text');
    if (!rect || !text || !label(text)) return;
    const w = rect.getBoundingClientRect().width, tw = text.getBoundingClientRect().width;
    if (tw > w + 1) out.push(`table cell "${label(text)}" is cut (${Math.round(tw)}px in ${Math.round(w)}px)`);
  });
  document.querySelectorAll('.jp-OutputArea-output th, .jp-OutputArea-output td, .widget-html-content th, .widget-html-content td')
    .forEach(c => {
      if (!label(c)) return;
      const cut = c.scrollWidth > c.clientWidth + 1 || c.scrollHeight > c.clientHeight + 1;
      const hidden = getComputedStyle(c).overflow !== 'visible' || getComputedStyle(c).textOverflow === 'ellipsis';
      if (cut && hidden && !c.title && !c.querySelector('[title]'))
        out.push(`${c.tagName.toLowerCase()} "${label(c)}" is cut (${c.scrollWidth}px in ${c.clientWidth}px) with no tooltip`);
    });
  return out;
}"""


# Shut down the kernel of the notebook on show and close it without the "save changes?" dialog (autosave is
# off and a run leaves the notebook modified), so the same page can open the next notebook.
CLOSE_NOTEBOOK_JS = """async () => {
  const w = window.jupyterapp.shell.currentWidget;
  if (!w) return;
  if (w.sessionContext) await w.sessionContext.shutdown();
  if (w.context) w.context.model.dirty = false;
  w.dispose();
}"""


def run_notebook_page(page, url: str, notebook: str, run_timeout_s: float = 600.0, min_plots: int = 1,
                      reuse: bool = False) -> float:
    """Open `notebook` in JupyterLab (a fresh workspace: `?reset`), run all cells and wait until every cell
    ran and the kernel is idle; returns the seconds it took. `reuse`: the page already shows JupyterLab (an
    earlier notebook's run): close that notebook and open this one in the same app, instead of loading
    JupyterLab's front end again (about 3 s of Chromium's CPU per page)."""
    kernel = ("(() => { const w = window.jupyterapp && window.jupyterapp.shell.currentWidget;"
              " const s = w && w.sessionContext && w.sessionContext.session; return s && s.kernel; })()")
    if reuse:
        page.evaluate(CLOSE_NOTEBOOK_JS)
        page.evaluate("async (nb) => { await window.jupyterapp.commands.execute('docmanager:open', {path: nb}); }", notebook)
        page.wait_for_function("(nb) => { const w = window.jupyterapp.shell.currentWidget;"
                               " return w && w.context && w.context.path === nb; }", arg=notebook, timeout=120_000)
    else:
        page.goto(f"{url}/lab/tree/{notebook}?reset", timeout=120_000)
    page.wait_for_function(f"() => {{ const k = {kernel}; return k && k.status === 'idle'; }}", timeout=120_000)
    t0 = time.perf_counter()
    page.evaluate("() => window.jupyterapp.commands.execute('notebook:run-all-cells')")
    page.wait_for_function(
        "(n) => { const p = document.querySelectorAll('.jp-InputPrompt');"
        " return p.length > 0 && [...p].every(e => !e.textContent.includes('*'))"
        " && document.querySelectorAll('.js-plotly-plot').length >= n"
        f" && ({kernel} || {{}}).status === 'idle'; }}",
        arg=min_plots, timeout=run_timeout_s * 1000, polling=100,
    )
    return time.perf_counter() - t0


@dataclass
class PanelShots:
    """Per notebook: one screenshot per output holding a figure or a table, and what the page found clipped."""

    screenshots: list[Path] = field(default_factory=list)
    clipped: list[str] = field(default_factory=list)
    errors: list[str] = field(default_factory=list)


def shoot_page(page, notebook: str, artifacts: Path) -> PanelShots:
    """On a page whose notebook ran (at a normal notebook width): screenshot every output that holds a plotly
    figure or a table (`<stem>-panel-NN.png`), and run `CLIPPED_JS` on the page."""
    artifacts.mkdir(parents=True, exist_ok=True)
    got = PanelShots()
    # Plotly lays out after the data arrive: wait until every figure has drawn its SVG layers.
    page.wait_for_function("() => [...document.querySelectorAll('.js-plotly-plot')].every(p => p._fullLayout && p.querySelector('.main-svg'))",
                           timeout=30_000, polling=100)
    err = page.locator(".jp-RenderedText[data-mime-type='application/vnd.jupyter.error']")
    if err.count():
        got.errors.append("cell error: " + err.first.inner_text()[:2000])
    # One shot per panel: each figure and each HTML table (a whole lab output is taller than the
    # window, and JupyterLab's scrolled notebook panel does not screenshot as one element).
    # The lab's HTML table panels are shot whole (title, scroll box, caption), not as the bare table.
    outputs = page.locator(".jp-OutputArea-output.js-plotly-plot, .jp-OutputArea-output .js-plotly-plot, "
                           ".jp-OutputArea-output table:not(.hrt-table), .jp-OutputArea-output .hrt-table-panel")
    stem = Path(notebook).stem
    for i in range(outputs.count()):
        o = outputs.nth(i)
        shot = artifacts / f"{stem}-panel-{i:02d}.png"
        o.screenshot(path=str(shot))
        got.screenshots.append(shot)
    got.clipped = page.evaluate(CLIPPED_JS)
    (artifacts / f"{stem}-clipped.json").write_text(json.dumps(got.clipped, indent=2))
    return got
