"""End to end: every panel of tutorials 02-05, run in real JupyterLab in headless Chromium, is readable.

Needs and skips as tests/test_browser.py does; a file of its own so that the two run on two workers.
"""

from __future__ import annotations

from browser_lab import ARTIFACTS, ROOT, jupyterlab, shoot_panels

TUTORIALS = ["02_fusion", "03_guarded_reranking", "04_dedup_and_spread", "05_query_routing"]


def test_every_panel_of_tutorials_02_to_05_is_readable(browser_ready: None) -> None:
    """Each tutorial run in JupyterLab at a normal notebook width: every figure and table gets a screenshot
    (test-artifacts/browser/<tutorial>-panel-NN.png), and the page itself is asked whether any title, axis
    or legend label leaves its figure, or any table header or cell overflows its column without a tooltip."""
    with jupyterlab(ROOT, ARTIFACTS / "jupyterlab-panels.log") as url:
        shots = shoot_panels(url, [f"notebooks/{t}.ipynb" for t in TUTORIALS], ARTIFACTS)
    for nb, got in shots.items():
        assert not got.errors, (nb, got.errors)
        assert len(got.screenshots) >= 3, f"{nb}: only {len(got.screenshots)} panels drawn"
        assert not got.clipped, f"{nb}: clipped in the page: {got.clipped}"
        for shot in got.screenshots:
            assert shot.stat().st_size > 3_000, f"{shot} looks empty"
