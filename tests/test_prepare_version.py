"""A change to the query-side rules that `prepare` caches must bump `pipeline.PREPARE_VERSION`.

The stage cache serves a store's prepared frames by `PREPARE_VERSION`; a rule that moves under the same version leaves
frames computed by the older rule in every store that has them. That happened once (the twenty-second session found it:
identifiers made whole in one commit, folded into the version an earlier commit had bumped, so a collection's test
split kept 1,014 exact-token pairs where the rules now find 829). This test fingerprints what the rules make of a
fixed set of queries; when it fails, bump `PREPARE_VERSION` (and say why beside it) and record the new fingerprint.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from toolkit.analysis import query_lexical_text
from toolkit.features import technical_tokens
from toolkit.guard import _holds, identifier_tokens, whole_identifier
from toolkit.pipeline import PREPARE_VERSION

# One query per family of rules (identifiers, versions, units, dates, paths, references, compounds, scripts).
QUERIES = [
    "heap overflow CVE-2022-41903 in git", "set retryBackoffMs and max_pool_size in config.yaml",
    "deploy fails with ECONNREFUSED after v2.14.3", "how do I parse JSON over HTTP with the API",
    "when did Caroline go to the support group?", "libassuan 2.5.5-5", "openssh 1:9.2p1-2+deb12u2",
    "Python 3.11 security fixes", "upgrade 2.14.3-2.15.0", "release 2.4.1-beta", "kmod 27+20200310-1",
    "CC=gcc-4.9", "OpenSSL-1.1.1b", "Closes GH#56", "merged dbus!403", "mail mitya57@debian.org",
    "update debian/libipt1.symbols", "apply 0004-sync-iptables-header.patch", "__init__ called twice", "pre-1.2 era",
    "takes 2.5 hours", "costs $1.5-2", "on 2023-05-01", "pages 10-12", "C# records", "and/or input/output",
    "ERR_IMPORT_LOCK-Meldung beim Start", "--no-cache-dir ignored", "/etc/nginx/nginx.conf reload", "`get_terminal_size`",
    "REQUESTS_CA_BUNDLE", "gpt-4-turbo context", "@acme/retry-utils", "node-jquery 3.5.1+dfsg+~3.5.5-7",
    "Kubernetes-Cluster Speicherdruck", "東京の会議メモ", "Zugriffsberechtigungen für Datenbankbenutzer", "0x7fff5fbff8c8 segfault",
    "PR #24375 regression", "which commit fixed issue 16075", "pull request 17125", "HTTP 404 on login", "runner ubuntu-24.04-arm",
    "did Caroline buy the 3 tickets 45 minutes early", "FROM python-3.11-slim-bookworm", "PR#2899 and MR 403",
]
TEXTS = ["git 2.39.1 fixes CVE-2022-41903.", "Set retryBackoffMs=200; max_pool_size: 10 in config.yaml",
         "libassuan (2.5.5-5) unstable", "CC=gcc-4.9 make", "see /etc/nginx/nginx.conf and /etc/nginx-proxy",
         "Closes GH#56 and dbus!403", "the __init__ method", "v2.14.30 released", "Merge (#24375)",
         "Closes https://github.com/duckdb/duckdb/issues/16075", "runs-on: ubuntu-24.04-arm", "Fixed issue 16075 here",
         "gh#2899 merged", "image python-3.11-slim-bookworm"]
# (PREPARE_VERSION, the fingerprint of the rules it computes with, over the samples above as they are now).
RECORDED = (18, "4774a56fb8cf8d4f")


def fingerprint() -> str:
    demo = [json.loads(line)["text"] for line in (Path(__file__).parent.parent / "data/demo/queries.jsonl").read_text().splitlines()]
    rows = []
    for q in QUERIES + demo:
        ids = identifier_tokens(q)
        rows.append([q, technical_tokens(q), ids, whole_identifier(q, ids), query_lexical_text(q),
                     [[_holds(t.lower(), i.lower()) for t in TEXTS] for i in ids]])
    return hashlib.sha256(json.dumps(rows, ensure_ascii=False).encode()).hexdigest()[:16]


def test_the_query_rules_moved_only_with_a_prepare_version_bump():
    got = fingerprint()
    assert (PREPARE_VERSION, got) == RECORDED, (
        f"the query-side rules that prepare caches give fingerprint {got} under PREPARE_VERSION {PREPARE_VERSION}, "
        f"recorded {RECORDED}: if the rules changed on purpose, bump PREPARE_VERSION and record both (after adding a "
        "sample here, record the new fingerprint under the same version)")
