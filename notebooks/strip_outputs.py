"""Strip saved outputs from the tutorials, keeping only the cells nbval checks (`# NBVAL_CHECK_OUTPUT`).

Why: saved widget and plotly outputs run to megabytes per notebook and change on every run; the checked
cells are the only outputs a reader or nbval needs.

    .venv/bin/python notebooks/strip_outputs.py notebooks/*.ipynb
"""

from __future__ import annotations

import json
import sys
from pathlib import Path


def strip(path: Path) -> bool:
    nb = json.loads(path.read_text(encoding="utf-8"))
    before = json.dumps(nb)
    n = 0
    for cell in nb["cells"]:
        if cell["cell_type"] != "code":
            continue
        cell.get("metadata", {}).pop("execution", None)
        if "NBVAL_CHECK_OUTPUT" not in "".join(cell["source"]):
            cell["outputs"], cell["execution_count"] = [], None
            continue
        n += 1  # nbval wants checked cells to look run: keep a (renumbered) execution count
        cell["execution_count"] = n
        for out in cell["outputs"]:
            if "execution_count" in out:
                out["execution_count"] = n
    nb.get("metadata", {}).pop("widgets", None)
    if json.dumps(nb) == before:
        return False
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")
    return True


if __name__ == "__main__":
    for arg in sys.argv[1:]:
        if strip(Path(arg)):
            print(f"stripped {arg}")
