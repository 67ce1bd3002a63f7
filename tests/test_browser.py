"""End to end: tutorials 02-05 in real JupyterLab in headless Chromium. Every panel is readable, and in
tutorial 02 a slider move redraws the panels.

Needs Debian's `chromium` (`make browser-deps`, which `make test` runs). Without it the tests are skipped,
unless HRT_REQUIRE_BROWSER=1 (set by `make test`), where a missing browser is a failure.
Screenshots and timings land in test-artifacts/browser/.
"""

from __future__ import annotations

import json

import pytest
from browser_lab import (
    ARTIFACTS,
    ROOT,
    LabRun,
    PanelShots,
    chromium,
    jupyterlab,
    move_slider,
    run_notebook_page,
    shoot_page,
)

TUTORIALS = ["02_fusion", "03_guarded_reranking", "04_dedup_and_spread", "05_query_routing"]
SLIDER_TUTORIAL = "02_fusion"


@pytest.fixture(scope="module")
def tutorials_in_jupyterlab(browser_ready: None) -> dict[str, tuple[PanelShots, LabRun | None]]:
    """Each tutorial run once in one JupyterLab at a normal notebook width (1200 px of window): its panels
    photographed as they first draw, then, in tutorial 02, the lexical-weight slider moved on the same page
    (one server, one browser and one kernel per tutorial serve both tests)."""
    out: dict[str, tuple[PanelShots, LabRun | None]] = {}
    with jupyterlab(ROOT, ARTIFACTS / "jupyterlab.log") as url, chromium() as browser:
        # One page: each tutorial after the first opens in the same JupyterLab app (its front end loads once).
        page = browser.new_page(viewport={"width": 1200, "height": 1400})
        errors: list[str] = []
        page.on("pageerror", lambda e: errors.append(str(e)))
        for i, name in enumerate(TUTORIALS):
            errors.clear()
            nb = f"notebooks/{name}.ipynb"
            run_notebook_page(page, url, nb, min_plots=3 if name == SLIDER_TUTORIAL else 1, reuse=i > 0)
            shots = shoot_page(page, nb, ARTIFACTS)
            run = move_slider(page, ARTIFACTS, slider="lexical weight", values=("3",), prefix="02-fusion") if name == SLIDER_TUTORIAL else None
            shots.errors += errors
            out[name] = (shots, run)
        page.close()
    return out


@pytest.mark.long
def test_every_panel_of_tutorials_02_to_05_is_readable(tutorials_in_jupyterlab) -> None:
    """Every figure and table gets a screenshot (test-artifacts/browser/<tutorial>-panel-NN.png), and the page
    itself is asked whether any title, axis or legend label leaves its figure, or any table header or cell
    overflows its column without a tooltip."""
    for nb, (got, _) in tutorials_in_jupyterlab.items():
        assert not got.errors, (nb, got.errors)
        assert len(got.screenshots) >= 3, f"{nb}: only {len(got.screenshots)} panels drawn"
        assert not got.clipped, f"{nb}: clipped in the page: {got.clipped}"
        for shot in got.screenshots:
            assert shot.stat().st_size > 3_000, f"{shot} looks empty"


def test_lab_in_jupyterlab_moves_panels(tutorials_in_jupyterlab) -> None:
    run = tutorials_in_jupyterlab[SLIDER_TUTORIAL][1]
    assert run is not None and not run.errors, run and run.errors
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
