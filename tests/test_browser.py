"""End to end: tutorial 02 in real JupyterLab in headless Chromium; a slider move redraws the panels.

Needs Debian's `chromium` (`make browser-deps`, which `make test` runs). Without it the test is skipped,
unless HRT_REQUIRE_BROWSER=1 (set by `make test`), where a missing browser is a failure.
Screenshots and timings land in test-artifacts/browser/.
"""

from __future__ import annotations

import json

from browser_lab import ARTIFACTS, ROOT, drive_lab, jupyterlab


def test_lab_in_jupyterlab_moves_panels(browser_ready: None) -> None:
    with jupyterlab(ROOT, ARTIFACTS / "jupyterlab.log") as url:
        run = drive_lab(url, "notebooks/02_fusion.ipynb", ARTIFACTS, slider="lexical weight", values=("3",), prefix="02-fusion")
    assert not run.errors, run.errors
    before, after = json.loads(run.before), json.loads(run.after)
    assert len(before) >= 3 and len(after) == len(before)  # the notebook's figures and the lab's panels drew
    assert before != after, "moving the lexical-weight slider changed no figure"
    # The metrics panel (first lab figure) must change, not only some other panel.
    changed = [i for i, (b, a) in enumerate(zip(before, after, strict=True)) if b != a]
    assert len(changed) >= 2, f"only figure(s) {changed} changed"
    assert "updated in" in run.timing_after and run.timing_after != run.timing_before
    assert run.slider_to_panels_ms and run.slider_to_panels_ms[0] < 30_000
    for shot in run.screenshots:
        assert shot.stat().st_size > 10_000, f"{shot} looks empty"
