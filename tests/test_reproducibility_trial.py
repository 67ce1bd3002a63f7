"""User trial AL: a reproducibility auditor who reruns everything before a paper or a rollout. Re-runs, fresh
processes, rebuilt and moved stores, shuffled ingests and thread counts all gave byte-identical output; each test
is a place where they did not, or where what was needed to reproduce a number was not recorded."""

from __future__ import annotations

import json

import polars as pl
from click.testing import CliRunner

from toolkit.cli import main
from toolkit.store import Store


def test_a_query_asked_alone_scores_and_ranks_as_in_its_split(tmp_path, embedder):
    """Five byte-identical notes: a query run alone (a one-query split, `hrt search`) ordered them otherwise than
    the same query run with its split, because a one-row matrix product takes another BLAS kernel."""
    notes = [{"doc_id": f"copy-{i}", "text": "Rotate the signing key before the webhook secret expires."} for i in range(5)]
    notes += [{"doc_id": f"other-{i}", "text": f"Runbook step {i}: check the {w} dashboard and page the owner."}
              for i, w in enumerate(["billing", "queue", "search", "auth", "cache", "deploy", "dns", "mail"])]
    qs = pl.DataFrame({"qid": ["q1", "q2", "q3"], "text": ["when does the webhook secret expire", "queue dashboard", "page the owner"]})
    with Store(tmp_path / "s.duckdb", embedder=embedder) as st:
        st.ingest(notes)
        together = st.dense_search(qs, top_k=13, scope_filter=False)
        for qid in qs["qid"]:
            alone = st.dense_search(qs.filter(pl.col("qid") == qid), top_k=13, scope_filter=False)
            assert alone.equals(together.filter(pl.col("qid") == qid)), qid


def test_tune_records_its_seed_and_keeps_stdout_one_json_object(tmp_path):
    """The seed decided the verdict on the demo (seed 1 shipped convex fusion at p 0.037, seeds 0 and 2-7 kept the
    base) and was written nowhere; and stdout held a JSON object followed by three lines of prose."""
    from conftest import DOCS

    root = tmp_path / "ds"
    (root / "qrels").mkdir(parents=True)
    (root / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in DOCS))
    texts = ["deploy ECONNREFUSED", "retry backoff", "pool size", "team lunch", "sdk version pinned", "stripe 429"]
    (root / "queries.jsonl").write_text("".join(json.dumps({"_id": f"q{i}", "text": t}) + "\n" for i, t in enumerate(texts)))
    (root / "qrels" / "dev.tsv").write_text("".join(f"q{i}\t{d['_id']}\t1\n" for i, d in enumerate(DOCS)))
    out = tmp_path / "t.yaml"
    r = CliRunner().invoke(main, ["tune", "--dataset", str(root), "--split", "dev", "--base", "bm25-only", "--seed", "7",
                                  "--space", str(_space(tmp_path)), "--budget", "3", "--folds", "2",
                                  "--store", str(tmp_path / "s.duckdb"), "--out", str(out)])
    assert r.exit_code == 0, r.output
    report = json.loads(r.stdout)  # one object: the prose went to stderr
    assert report["seed"] == 7
    assert f"tuned config -> {out} (seed 7)" in r.stderr and "held-out gain over" in r.stderr
    saved = json.loads(out.with_suffix(".report.json").read_text())
    assert saved["seed"] == 7


def _space(tmp_path):
    p = tmp_path / "space.yaml"
    p.write_text("threshold.min_score: {float: [0.0, 0.5]}\n")
    return p
