"""The `hrt` commands end to end on a tiny corpus: what a user types, what they see, and exit codes."""

from __future__ import annotations

import json

import polars as pl
import pytest
from click.testing import CliRunner
from conftest import write_beir

from toolkit.cli import main


@pytest.fixture
def beir(tmp_path, corpus_file):
    return write_beir(tmp_path / "ds", corpus_file)


def test_help_explains_every_command():
    r = CliRunner().invoke(main, ["--help"])
    assert r.exit_code == 0
    for cmd in ("ingest", "search", "run", "eval", "report", "tune", "export", "info", "presets", "train-reranker"):
        assert cmd in r.output
        sub = CliRunner().invoke(main, [cmd, "--help"])
        assert sub.exit_code == 0 and "Options:" in sub.output and len(sub.output) > 140


def test_ingest_search_run_eval(tmp_path, beir):
    run = CliRunner()
    store = str(tmp_path / "s.duckdb")
    r = run.invoke(main, ["ingest", str(beir), "--store", store])
    assert r.exit_code == 0, r.output
    assert "6 added" in r.output
    r = run.invoke(main, ["ingest", str(beir), "--store", store])
    assert "6 unchanged" in r.output and "0 computed" in r.output

    r = run.invoke(main, ["search", "ECONNREFUSED port 5432", "--store", store, "--mode", "lexical", "--format", "json", "-n", "2"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.output)
    assert doc["results"][0]["doc_id"] == "d1"

    r = run.invoke(main, ["search", "retry backoff", "--store", store, "-n", "3"])
    assert r.exit_code == 0, r.output
    assert len(r.output) <= 2000 and "d2" in r.output or "decisions" in r.output

    for mode in ("lexical", "dense", "hybrid"):
        out = tmp_path / f"{mode}.trec"
        r = run.invoke(main, ["run", "--dataset", str(beir), "--split", "test", "--mode", mode, "--store", store, "--out", str(out)])
        assert r.exit_code == 0, r.output
        lines = out.read_text().splitlines()
        assert lines and all(len(ln.split()) == 6 for ln in lines)
        # Scope filter: q2 (payments) only sees payments documents.
        assert {ln.split()[2] for ln in lines if ln.startswith("q2 ")} <= {"d2", "d6"}
    r = run.invoke(main, ["eval", "--dataset", str(beir), "--split", "test", "--run", str(tmp_path / "lexical.trec"), "--format", "json"])
    assert r.exit_code == 0, r.output
    res = json.loads(r.output)["runs"][str(tmp_path / "lexical.trec")]
    assert set(res) >= {"nDCG@10", "R@5", "R@10", "MRR@10"}
    assert res["MRR@10"] > 0.5
    # Several runs: each tested against the baseline (the first by default), in the table and in JSON.
    runs = [str(tmp_path / f"{m}.trec") for m in ("lexical", "dense", "hybrid")]
    args = ["eval", "--dataset", str(beir), "--split", "test"] + [x for r_ in runs for x in ("--run", r_)]
    r = run.invoke(main, args)
    assert r.exit_code == 0 and f"p (Holm) vs {runs[0]}" in r.output, r.output
    assert "note: 3 queries: the smallest p-value the randomization test can give is 0.5 after Holm over 2 systems" in r.output
    r = run.invoke(main, args + ["--format", "json", "--baseline", runs[2]])
    sig = json.loads(r.output)["significance"]
    assert "no difference can be significant" in json.loads(r.output)["significance_notes"][0]
    assert {x["system"] for x in sig} == set(runs[:2]) and all(0 <= x["p_holm"] <= 1 for x in sig)
    assert all(x["ci_low"] <= x["delta"] <= x["ci_high"] for x in sig)  # the interval the README promises
    r = run.invoke(main, args + ["--baseline", str(tmp_path / "nope.trec")])
    assert r.exit_code == 2 and "not one of the --run files" in r.output


def test_eval_says_on_stderr_when_run_and_qrels_ids_do_not_meet(tmp_path, beir):
    (beir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq2\td2\t1\n")
    run_file = tmp_path / "test_split.trec"  # a run of the test queries, evaluated on the dev split
    run_file.write_text("q1 Q0 d1 1 2.0 t\nq3 Q0 d5 1 1.0 t\n")
    args = ["eval", "--dataset", str(beir), "--run", str(run_file)]
    r = CliRunner().invoke(main, [*args, "--split", "dev"])
    assert r.exit_code == 0, r.output
    assert f"warning: {run_file}: 0 of 2 run queries have judgements in the dev qrels" in r.stderr
    assert "0.0000" in r.stdout and "warning" not in r.stdout
    assert "IdMismatchWarning" not in r.output  # said once, as a line, not as a Python warning too
    run_file.write_text("q1 Q0 d1 1 2.0 t\nq2 Q0 d6 1 3.0 t\nq2 Q0 d2 2 1.0 t\nq3 Q0 d5 1 1.0 t\n")
    r = CliRunner().invoke(main, [*args, "--split", "test", "--format", "json"])
    assert r.exit_code == 0 and r.stderr == ""  # the normal case: nothing on stderr
    assert json.loads(r.stdout)["runs"][str(run_file)]["MRR@10"] == pytest.approx(2.5 / 3)
    run_file.write_text("q1 Q0 D1 1 2.0 t\nq2 Q0 D2 1 1.0 t\nq3 Q0 D5 1 1.0 t\n")  # doc ids of another casing
    r = CliRunner().invoke(main, [*args, "--split", "test"])
    assert "none of the 3 documents the run retrieved for judged queries is judged in the test qrels" in r.stderr


def test_expected_mistakes_exit_2_without_traceback(tmp_path):
    run = CliRunner()
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"_id": "a", "text": "ok"}\n{oops}\n')
    r = run.invoke(main, ["ingest", str(bad), "--store", str(tmp_path / "s.duckdb")])
    assert r.exit_code == 2
    assert "bad.jsonl:2: malformed JSON" in r.output and "Traceback" not in r.output
    r = run.invoke(main, ["search", "x", "--store", str(tmp_path / "missing.duckdb")])
    assert r.exit_code == 2 and "no such store" in r.output
    r = run.invoke(main, ["search", "x", "--store", str(tmp_path / "s.duckdb"), "--config", "no-such-preset"])
    assert r.exit_code == 2


@pytest.mark.slow
def test_train_reranker_command(tmp_path, beir):
    """The command trains, writes a loadable model, exports its pairs, and refuses the test split."""
    (beir / "qrels" / "dev.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t1\nq3\td5\t1\n")
    run = CliRunner()
    store, out = str(tmp_path / "s.duckdb"), tmp_path / "rr"
    r = run.invoke(main, ["train-reranker", "--dataset", str(beir), "--split", "test", "--out", str(out), "--store", store])
    assert r.exit_code == 2 and "refusing to train on the 'test' split" in r.output
    # A dev file holding test queries is training on test too (user trial P: tune and train-fusion refused it,
    # train-reranker trained); this fixture's dev queries are its test queries.
    r = run.invoke(main, ["train-reranker", "--dataset", str(beir), "--out", str(out), "--store", store])
    assert r.exit_code == 2 and "3 of the 3 judged dev queries are also judged in test" in r.output, r.output
    (beir / "qrels" / "test.tsv").unlink()
    r = run.invoke(main, ["train-reranker", "--dataset", str(beir), "--out", str(out), "--store", store, "--epochs", "1",
                          "--negatives", "2", "--max-length", "32", "--holdout", "0.34", "--eval-depth", "5",
                          "--freeze-layers", "3", "--export-data", str(tmp_path / "pairs.csv")])
    assert r.exit_code == 0, r.output
    params = json.loads((out / "training_report.json").read_text())["params"]
    assert params["freeze_layers"] == 3 and params["holdout"] == 0.34 and params["pseudo"] == 0
    assert (out / "training_report.json").exists() and (tmp_path / "pairs.csv").read_text().startswith("qid,query")
    assert "held-out" in r.output and ("does NOT help" in r.output or "within noise" in r.output or "helps" in r.output)
    bad = run.invoke(main, ["train-reranker", "--dataset", str(beir), "--out", str(out), "--store", store, "--pseudo", "many"])
    assert bad.exit_code == 2 and "--holdout/--pseudo" in bad.output


def test_a_bad_run_name_fails_before_any_work(tmp_path, beir, monkeypatch):
    """`hrt run` checks the run tag (given, or the config's name) before it ingests or runs anything."""
    import toolkit.pipeline

    def boom(*a, **k):
        raise AssertionError("the pipeline ran before the run name was checked")

    monkeypatch.setattr(toolkit.pipeline, "run_pipeline", boom)
    store = tmp_path / "s.duckdb"
    r = CliRunner().invoke(main, ["run", "--dataset", str(beir), "--mode", "lexical", "--store", str(store),
                                  "--out", str(tmp_path / "r.trec"), "--tag", "my run"])
    assert r.exit_code == 2 and "run tag 'my run'" in r.output and "Traceback" not in r.output
    # A document id a TREC file cannot hold (folder notes are named by path: "my note.md") is named up front.
    with (beir / "corpus.jsonl").open("a") as f:
        f.write(json.dumps({"_id": "my note.md", "text": "a note with ECONNREFUSED"}) + "\n")
    r = CliRunner().invoke(main, ["run", "--dataset", str(beir), "--mode", "lexical", "--store", str(store),
                                  "--out", str(tmp_path / "r.trec")])
    assert r.exit_code == 2 and "document id 'my note.md'" in r.output and "TREC run file" in r.output
    assert not store.exists()  # nothing was ingested either


def test_a_config_name_with_spaces_tags_the_run_with_dashes(tmp_path, beir):
    cfg = tmp_path / "named.yaml"
    cfg.write_text("name: my config\nretrieval:\n  dense:\n    enabled: false\n")
    out = tmp_path / "r.trec"
    r = CliRunner().invoke(main, ["run", "--dataset", str(beir), "--config", str(cfg), "--store", str(tmp_path / "s.duckdb"),
                                  "--out", str(out)])
    assert r.exit_code == 0, r.output
    assert {line.split()[-1].split(".")[0] for line in out.read_text().splitlines()} == {"my-config"}


def test_run_file_holds_what_result_run_scores_collapsed_copies_included(tmp_path, beir):
    """`hrt run` writes `Result.run(depth)`: a byte-identical copy collapsed into one result is still in
    the file, so `hrt eval` on the file equals what `experiment`, the lab and the tuner report."""
    from toolkit.config import load_config, save_config
    from toolkit.loaders import Dataset
    from toolkit.pipeline import run_pipeline
    from toolkit.runs import read_run
    from toolkit.store import Store

    docs = [json.loads(ln) for ln in (beir / "corpus.jsonl").read_text().splitlines()]
    copy = dict(next(d for d in docs if d["_id"] == "d1"), _id="d1-copy", title="Deploy failure (mirror)")
    (beir / "corpus.jsonl").write_text("".join(json.dumps(d) + "\n" for d in [*docs, copy]))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1-copy\t1\nq2\td2\t1\nq3\td5\t1\n")
    cfg = load_config("bm25-only").with_updates({"name": "bm25-collapsed", "dedup.identical_enabled": True})
    save_config(cfg, tmp_path / "c.yaml")
    store, out = tmp_path / "s.duckdb", tmp_path / "r.trec"
    r = CliRunner().invoke(main, ["run", "--dataset", str(beir), "--config", str(tmp_path / "c.yaml"), "--store", str(store), "--out", str(out)])
    assert r.exit_code == 0, r.output
    ds = Dataset.open(beir)
    with Store(store, read_only=True) as st:
        res = run_pipeline(st, ds.queries("test"), cfg)
    assert "d1-copy" in res.removed["doc_id"].to_list()  # collapsed in the final list
    file_run = read_run(out).sort("qid", "rank")
    assert file_run.select("qid", "doc_id", "rank").equals(res.run(100).sort("qid", "rank").select("qid", "doc_id", "rank"))
    assert "d1-copy" in file_run.filter(pl.col("qid") == "q1")["doc_id"].to_list()


def test_eval_counts_grade_0_queries_like_trec_eval_and_prints_every_per_query_row(tmp_path, beir):
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\td1\t1\nq2\td2\t0\nq3\td5\t1\n")
    run_file = tmp_path / "r.trec"
    run_file.write_text("q1 Q0 d1 1 2.0 t\nq2 Q0 d2 1 1.0 t\nq3 Q0 d5 1 1.0 t\n")
    args = ["eval", "--dataset", str(beir), "--run", str(run_file), "--measures", ",".join(f"P@{k}" for k in range(1, 13))]
    r = CliRunner().invoke(main, [*args, "--format", "json"])
    assert r.exit_code == 0, r.output
    doc = json.loads(r.stdout)
    assert doc["queries"] == 3 and doc["runs"][str(run_file)]["P@1"] == pytest.approx(2 / 3)  # q2 counts 0
    assert "note: 1 of 3 judged queries have no document graded >= 1 (q2)" in r.stderr
    # 14 queries and 12 measures: more than polars prints by default (10 rows, ~8 columns)
    qs = [{"_id": f"x{i:02d}", "text": f"query {i}"} for i in range(14)]
    (beir / "queries.jsonl").write_text("".join(json.dumps(q) + "\n" for q in qs))
    (beir / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"x{i:02d}\td1\t1\n" for i in range(14)))
    run_file.write_text("".join(f"x{i:02d} Q0 d1 1 1.0 t\n" for i in range(14)))
    r = CliRunner().invoke(main, [*args, "--per-query"])
    assert r.exit_code == 0, r.output
    table = r.stdout.split(str(run_file))[-1]
    assert "…" not in table and all(f"P@{k}" in table for k in range(1, 13))
    assert all(f"x{i:02d}" in table for i in range(14))


def test_mode_given_with_a_config_is_said_to_be_ignored(tmp_path, beir):
    """`hrt search --mode lexical --config hybrid.yaml` searched both lists without a word."""
    cfg = tmp_path / "lex.yaml"
    cfg.write_text("name: lex\nretrieval:\n  dense:\n    enabled: false\n")
    store = str(tmp_path / "s.duckdb")
    r = CliRunner().invoke(main, ["ingest", str(beir / "corpus.jsonl"), "--store", store, "--no-embed"])
    assert r.exit_code == 0, r.output
    r = CliRunner().invoke(main, ["search", "deploy", "--store", store, "--config", str(cfg), "--mode", "dense"])
    assert r.exit_code == 0, r.output
    assert f"note: --mode dense is ignored: --config {cfg} decides which lists are searched" in r.stderr
    assert "--mode" not in CliRunner().invoke(main, ["search", "deploy", "--store", store, "--config", str(cfg)]).stderr
