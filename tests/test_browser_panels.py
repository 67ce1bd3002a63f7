"""End to end: every panel of tutorials 02-05, run in real JupyterLab in headless Chromium, is readable.

A file of its own (not beside tests/test_browser.py) so that the two browser tests run on two workers.

Needs Debian's `chromium` (`make browser-deps`, which `make test` runs). Without it the test is skipped,
unless HRT_REQUIRE_BROWSER=1 (set by `make test`), where a missing browser is a failure.
Screenshots and timings land in test-artifacts/browser/.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from browser_lab import jupyterlab, require_browser, shoot_panels

ROOT = Path(__file__).resolve().parents[1]
ARTIFACTS = ROOT / "test-artifacts" / "browser"


@pytest.fixture(scope="module")
def browser_ready() -> None:
    require_browser()


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
