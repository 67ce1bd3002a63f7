"""What a config or a model was fitted on, recorded so that numbers on the same queries are called in-sample.

A query is recorded as a short hash of its id and text (`query_keys`): a run of the same queries is recognised
wherever the dataset folder lies and whatever it is called (user trial P: a renamed copy of the demo was never
flagged), while another collection's query "1" with other words is not mistaken for one (matching ids alone
flagged any collection with numeric ids).
"""

from __future__ import annotations

import hashlib


def query_keys(qids: list[str], texts: list[str]) -> list[str]:
    """One 16-hex-digit hash per (query id, query text), sorted and unique."""
    return sorted({hashlib.sha1(f"{q}\x1f{t}".encode()).hexdigest()[:16] for q, t in zip(qids, texts, strict=True)})


def overlap(keys: list[str], qids: list[str], texts: list[str]) -> int:
    """How many of the queries (`qids` with their `texts`) are among the recorded `keys`."""
    return len(set(query_keys([str(q) for q in qids], [str(t) for t in texts])) & set(keys))
