"""Time from a slider move to redrawn panels, in real JupyterLab in headless Chromium, on LoCoMo dev.

Writes a one-cell notebook that opens a LoCoMo store and builds `Lab` over the dev queries (760), runs it
in JupyterLab, then types several values into a slider's number box (the lexical weight unless told) one after another and
measures, for each, the wall time from the Enter key to the moment the figures' data in the page changed.
That includes the re-score in the kernel (a change to an idle lab runs at once; only a burst waits for the
60 ms debounce), the widget messages and plotly's
redraw. The kernel-side time the lab reports for the same update ("updated in N ms") is printed beside it.

    .venv/bin/python benchmarks/lab_browser.py --store /tmp/stores/locomo.duckdb

`--config default --section dedup --slider "near-dup cosine" --values 0.95,0.9,...` times the lab a user of `default`
gets (its fusion sliders are inert under the learned model).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
from browser_lab import drive_lab, jupyterlab  # noqa: E402

CELL = """\
import polars as pl
from toolkit.lab import Lab
from toolkit.loaders import Dataset
from toolkit.store import Store
ds = Dataset.open({dataset!r})
store = Store({store!r}, read_only=True)
queries = ds.queries("dev")
lab = Lab(store, queries, ds.qrels("dev"), config={config!r}, baseline="bm25-only")
lab
"""


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--dataset", default=str(Path(__file__).resolve().parents[2] / "shared" / "datasets" / "locomo"))
    ap.add_argument("--store", required=True, help="A store of the dataset with embeddings (e.g. from quality.py).")
    ap.add_argument("--values", default="1.5,2,2.5,3,0.5,1", help="Values typed one after another into the slider.")
    ap.add_argument("--config", default="qmd", help="The lab's config (issue #13's line is measured with qmd).")
    ap.add_argument("--slider", default="lexical weight", help="The slider's label, e.g. 'near-dup cosine' under default.")
    ap.add_argument("--section", default=None, help="The settings section that holds the slider (e.g. dedup); default fusion.")
    ap.add_argument("--artifacts", default="test-artifacts/lab-browser")
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        nb = {"cells": [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                         "source": CELL.format(dataset=str(Path(args.dataset).resolve()), store=str(Path(args.store).resolve()),
                                               config=args.config)}],
              "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}},
              "nbformat": 4, "nbformat_minor": 5}
        (Path(tmp) / "lab.ipynb").write_text(json.dumps(nb))
        art = Path(args.artifacts).resolve()
        with jupyterlab(Path(tmp), art / "jupyterlab.log") as url:
            run = drive_lab(url, "lab.ipynb", art, values=tuple(args.values.split(",")), prefix="locomo",
                            slider=args.slider, section=args.section)
    if run.errors:
        print("errors:", *run.errors, sep="\n  ")
    ms = run.slider_to_panels_ms
    print(f"notebook ran in {run.run_all_s:.1f} s (prepare of 760 dev queries included)")
    print(f"slider -> panels redrawn, {len(ms)} moves: median {statistics.median(ms):.0f} ms, "
          f"min {min(ms):.0f}, max {max(ms):.0f}  ({', '.join(f'{x:.0f}' for x in ms)})")
    print(f"kernel side, last update: {run.timing_after}")
    print(f"screenshots: {', '.join(str(p) for p in run.screenshots)}")


if __name__ == "__main__":
    main()
