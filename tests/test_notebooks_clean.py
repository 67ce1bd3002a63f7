"""The tutorials are committed without outputs (except the cells nbval checks): saved widget state and
plotly bundles run to megabytes and churn on every run (`notebooks/strip_outputs.py` strips them)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

NOTEBOOKS = sorted((Path(__file__).resolve().parents[1] / "notebooks").glob("*.ipynb"))


def test_all_seven_tutorials_exist():
    names = [p.stem[:2] for p in NOTEBOOKS]
    assert names == ["01", "02", "03", "04", "05", "06", "07"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_tutorial_is_stripped(path: Path):
    assert path.stat().st_size < 100_000, f"{path.name}: run notebooks/strip_outputs.py"
    nb = json.loads(path.read_text())
    assert "widgets" not in nb.get("metadata", {})
    for i, cell in enumerate(nb["cells"]):
        if cell["cell_type"] == "code" and "NBVAL_CHECK_OUTPUT" not in "".join(cell["source"]):
            assert not cell["outputs"], f"{path.name} cell {i} has saved output"
    assert nb["cells"][0]["cell_type"] == "markdown"  # a tutorial starts by saying what it is for
