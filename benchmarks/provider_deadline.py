"""A provider call against a server that trickles its answer: how long until the call gives up?

httpx timeouts are per read, so a server sending a few bytes every 100 ms is never cut off by them; the
toolkit's deadline (`rerank.post_within`) must stop the call at `timeout_s`. The trickling server is the
tests' fake (127.0.0.1, bounded to `--server-s` seconds). Run against older code by putting it first on
PYTHONPATH. Prints the median wall time of `--repeats` calls and its ratio to `timeout_s`.

    PYTHONPATH=$PWD python benchmarks/provider_deadline.py --timeout 2 --server-s 8
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from fake_servers import FakeServer  # noqa: E402

from toolkit.rerank import HttpReranker, ProviderError  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=float, default=2.0)
    ap.add_argument("--server-s", type=float, default=8.0, help="how long the fake server keeps trickling")
    ap.add_argument("--repeats", type=int, default=3)
    a = ap.parse_args()
    times = []
    with FakeServer() as s:
        rr = HttpReranker(s.rerank_url, timeout_s=a.timeout, retries=0)
        rr.score("q", ["a"])  # the client exists before timing (making one loads TLS certificates)
        s.mode, s.trickle_max_s = "trickle", a.server_s
        for _ in range(a.repeats):
            t0 = time.monotonic()
            try:
                rr.score("q", ["a"])
                err = "answered"
            except ProviderError as e:
                err = str(e).split(": ", 1)[-1]
            times.append(time.monotonic() - t0)
    med = statistics.median(times)
    print(f"trickle 200 B/s for {a.server_s:g}s, timeout_s={a.timeout:g}: median {med:.2f}s per call "
          f"({med / a.timeout:.2f} x timeout_s) over {a.repeats}; last error: {err}")


if __name__ == "__main__":
    main()
