"""What a config or a model was fitted on, recorded so that numbers on the same queries are called in-sample.

A query is recorded as a short hash of its id and text (`query_keys`): a run of the same queries is recognised
wherever the dataset folder lies and whatever it is called (user trial P: a renamed copy of the demo was never
flagged), while another collection's query "1" with other words is not mistaken for one (matching ids alone
flagged any collection with numeric ids).
"""

from __future__ import annotations

import hashlib
import os
import re
import subprocess
from pathlib import Path
from typing import Any


def code_version() -> str:
    """The package version, plus the git commit when the package runs from a git checkout: an editable install
    said "0.1.0" at every commit, so a report could not be tied to the code that made it. `.dirty` when the
    package's tracked files differ from the commit. Two git calls: for `--version` and reports, never an import."""
    from . import __version__

    root = Path(__file__).resolve().parents[1]
    if not (root / ".git").exists():
        return __version__
    git = ["git", "--no-optional-locks", "-C", str(root)]
    # The package's own repository: a GIT_DIR or GIT_WORK_TREE a hook or CI step exported named another one's commit,
    # and `git status` may take the index lock a user's commit needs (the review).
    env = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")} | {"GIT_OPTIONAL_LOCKS": "0"}
    try:
        head = subprocess.run([*git, "rev-parse", "--short=12", "HEAD"], capture_output=True, text=True, timeout=10, env=env)
        changed = subprocess.run([*git, "status", "--porcelain", "--untracked-files=no", "--", "toolkit"],
                                 capture_output=True, text=True, timeout=10, env=env)
    except (OSError, subprocess.SubprocessError):  # no git on this machine: the release version is all there is
        return __version__
    if head.returncode or changed.returncode:
        return __version__
    return f"{__version__}+g{head.stdout.strip()}" + (".dirty" if changed.stdout.strip() else "")


def query_keys(qids: list[str], texts: list[str]) -> list[str]:
    """One 16-hex-digit hash per (query id, query text), sorted and unique."""
    return sorted({hashlib.sha1(f"{q}\x1f{t}".encode()).hexdigest()[:16] for q, t in zip(qids, texts, strict=True)})


def overlap(keys: list[str], qids: list[str], texts: list[str]) -> int:
    """How many of the queries (`qids` with their `texts`) are among the recorded `keys`."""
    return len(set(query_keys([str(q) for q in qids], [str(t) for t in texts])) & set(keys))


class InSampleWarning(UserWarning):
    """Numbers on queries a config was tuned on, or its fusion model trained on: they are not results."""


# What `hrt tune` wrote into a tuned config's description before `tuned_on` existed: "<base> tuned on <dataset> <split>
# for <measure>".
_OLD_TUNED = re.compile(r" tuned on (\S+) (\S+) for ")


def in_sample_notes(cfgs: dict[str, Any], qids: list[str], texts: list[str], dataset: str | None = None,
                    split: str | None = None) -> list[str]:
    """One sentence per config (`{label: config}`) whose `tuned_on` or learned fusion model covers some of these
    queries: its scores on them are in-sample. What `hrt run` and `hrt report` print, and what the Session's
    status line and `experiment`'s warning say (user trial X: the Python API said nothing)."""
    said = []
    for label, cfg in cfgs.items():
        if cfg.tuned_on is None and dataset and split and (m := _OLD_TUNED.search(cfg.description or "")) \
                and m.group(1, 2) == (dataset, split):
            # Written by `hrt tune` before it recorded the queries (user trial AW): the description still says where.
            said.append(f"{label}: its description says it was tuned on {dataset}/{split} (a config from before tuning "
                        "recorded its queries, so which ones is not known): its scores on this split are likely in-sample")
        for rec in cfg.tuned_on or []:
            if n := overlap(rec["query_keys"], qids, texts):
                said.append(f"{label}: its settings were tuned on {n} of these {len(qids)} queries ({rec['dataset']}/"
                            f"{rec['split']}): its scores on them are in-sample, not results")
        if cfg.fusion.method == "learned":
            from .learned_fusion import training_overlap

            n, where = training_overlap(cfg.fusion.model, dataset or "", split, qids, texts)
            if n:
                said.append(f"{label}: its fusion.model was trained on {n} of these {len(qids)} queries ({where}): "
                            "its scores on them are in-sample, not results")
    return said
