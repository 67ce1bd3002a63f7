"""User trial BB: an ML platform engineer wiring `hrt` into a CI job as a retrieval-quality gate (rebuild the store,
run the team's config, compare with main's baseline run, fail the build on a significant drop). Runs were
byte-identical and caches safe; each test is a place where the gate passed on broken input, or where a CI idiom
broke something."""

from __future__ import annotations

import json
import os
import threading

from click.testing import CliRunner
from conftest import write_beir
from fake_servers import fake_server_fixture  # noqa: F401 - the `fake_server` fixture

from toolkit.cli import main


def _hrt(*args):
    return CliRunner().invoke(main, [str(a) for a in args])


def test_out_writes_through_a_fifo_and_a_symlink_instead_of_replacing_them(tmp_path, corpus_file):
    """`--out` wrote a temporary file and renamed it over the path: `--out /dev/full` run as root left a regular file
    where the device was, a FIFO's reader waited for ever, and a symlink was replaced while its target stayed old."""
    ds = write_beir(tmp_path / "ds", corpus_file)
    args = ("run", "--dataset", ds, "--config", "bm25-only", "--store", tmp_path / "s.duckdb", "--out")
    assert _hrt(*args, tmp_path / "plain.trec").exit_code == 0
    want = (tmp_path / "plain.trec").read_text()

    target = tmp_path / "target.trec"
    target.write_text("old\n")
    (tmp_path / "link.trec").symlink_to(target)
    assert _hrt(*args, tmp_path / "link.trec").exit_code == 0
    assert (tmp_path / "link.trec").is_symlink() and target.read_text() == want

    fifo = tmp_path / "run.fifo"
    os.mkfifo(fifo)
    got: list[str] = []
    reader = threading.Thread(target=lambda: got.append(fifo.read_text()), daemon=True)
    reader.start()
    r = _hrt(*args, fifo)
    reader.join(timeout=30)
    assert r.exit_code == 0, r.output
    assert got == [want] and fifo.is_fifo()


def _runs(tmp_path, corpus_file):
    """The dataset, a good run (the relevant document first) and one that lost it on every query."""
    ds = write_beir(tmp_path / "ds", corpus_file)
    qrels = [line.split("\t") for line in (ds / "qrels" / "test.tsv").read_text().splitlines()[1:]]
    docs = sorted({d for _, d, _ in qrels} | {"d1", "d2", "d3", "d4", "d5", "d6"})
    good, bad = tmp_path / "main.trec", tmp_path / "pr.trec"
    lines_good, lines_bad = [], []
    for q in sorted({q for q, _, _ in qrels}):
        rel = [d for qq, d, g in qrels if qq == q and int(g) > 0]
        rest = [d for d in docs if d not in rel]
        lines_good += [f"{q} Q0 {d} {r} {10 - r} main\n" for r, d in enumerate(rel + rest, 1)]
        lines_bad += [f"{q} Q0 {d} {r} {10 - r} pr\n" for r, d in enumerate(rest + rel, 1)]
    good.write_text("".join(lines_good))
    bad.write_text("".join(lines_bad))
    return ds, good, bad


def test_a_gate_fails_with_its_own_exit_code_only_on_a_significant_drop(tmp_path, corpus_file):
    """Every team wrote its own jq gate over `hrt eval --format json`, and exit 1 was also Python's crash code."""
    ds, good, bad = _runs(tmp_path, corpus_file)
    base = ("eval", "--dataset", ds, "--split", "test", "--run", good)
    copy = tmp_path / "copy.trec"
    copy.write_text(good.read_text().replace("main", "copy"))
    same = _hrt(*base, "--run", copy, "--max-drop", "nDCG@10=0.01", "--alpha", "0.5")  # 3 queries: p >= 0.25
    assert same.exit_code == 0 and "gate: passed" in same.stderr, same.output
    worse = _hrt(*base, "--run", bad, "--max-drop", "nDCG@10=0.01", "--alpha", "0.5", "--format", "json")
    assert worse.exit_code == 3, worse.output
    assert f"gate: FAILED: {bad}: nDCG@10 -" in worse.stderr
    doc = json.loads(worse.stdout)
    assert doc["gate"]["passed"] is False and doc["gate"]["failed"][0]["measure"] == "nDCG@10"
    assert doc["baseline"] == str(good) and doc["alpha"] == 0.5
    lenient = _hrt(*base, "--run", bad, "--max-drop", "nDCG@10=1", "--alpha", "0.5")
    assert lenient.exit_code == 0 and "gate: passed" in lenient.stderr  # a drop within what the team allows
    for wrong, said in (("nDCG@10", "expected MEASURE=DELTA"), ("MAP=0.1", "MAP is not among --measures"),
                        ("nDCG@10=-1", "DELTA >= 0")):
        r = _hrt(*base, "--run", bad, "--max-drop", wrong, "--alpha", "0.5")
        assert r.exit_code == 2 and said in r.output, r.output


def test_a_gate_refuses_an_empty_baseline_or_one_of_another_split(tmp_path, corpus_file):
    """A baseline run of the dev split evaluated on test scored 0 everywhere, the candidate "won" with p 1e-5, and
    the gate passed; only a warning on stderr said why. --strict did not cover runs."""
    ds, good, bad = _runs(tmp_path, corpus_file)
    other = tmp_path / "dev.trec"
    other.write_text(good.read_text().replace("q", "dev-q"))
    empty = tmp_path / "empty.trec"
    empty.write_text("")
    for broken in (other, empty):
        r = _hrt("eval", "--dataset", ds, "--split", "test", "--run", broken, "--run", good, "--max-drop", "nDCG@10=0.01")
        assert r.exit_code == 2 and str(broken) in r.output and "(--strict)" in r.output, r.output
        r = _hrt("eval", "--dataset", ds, "--split", "test", "--run", broken, "--strict")
        assert r.exit_code == 2, r.output
    r = _hrt("eval", "--dataset", ds, "--split", "test", "--run", other, "--run", good, "--format", "json")
    assert r.exit_code == 0  # without --strict: evaluated, and the JSON carries what stderr said
    assert "0 of" in json.loads(r.stdout)["warnings"][str(other)][0]


def test_a_run_whose_reranker_fell_back_says_so_in_its_tag_or_fails_when_asked(tmp_path, corpus_file, fake_server):
    """With the reranker's endpoint down, `hrt run` exited 0 and wrote the same tag as a run that was reranked:
    the only trace was a line on stderr a CI log scrolls past."""
    ds = write_beir(tmp_path / "ds", corpus_file)
    cfg = tmp_path / "rr.yaml"
    cfg.write_text(json.dumps({"name": "rr", "retrieval": {"dense": {"enabled": False}},
                               "rerank": {"provider": "http", "url": fake_server.rerank_url, "retries": 0}}))
    args = ("run", "--dataset", ds, "--config", cfg, "--store", tmp_path / "s.duckdb", "--out")
    fake_server.mode = "500"
    r = _hrt(*args, tmp_path / "down.trec")
    assert r.exit_code == 0 and "reranker fallback" in r.stderr
    assert {line.split()[-1].split(".")[0] for line in (tmp_path / "down.trec").read_text().splitlines()} == {"rr+fallback"}
    r = _hrt(*args, tmp_path / "strict.trec", "--require-providers")
    assert r.exit_code == 2 and "no run written (--require-providers)" in r.output and not (tmp_path / "strict.trec").exists()
    fake_server.mode = "good"
    assert _hrt(*args, tmp_path / "ok.trec").exit_code == 0
    assert {line.split()[-1].split(".")[0] for line in (tmp_path / "ok.trec").read_text().splitlines()} == {"rr"}


def test_config_check_show_and_diff_before_any_run(tmp_path):
    """A config checked into the repository could only be validated by running it (or by `hrt export`, which
    wrote a file and refused `--out -`), and nothing said what changed between main's config and a branch's."""
    team = tmp_path / "team.yaml"
    team.write_text("extends: qmd\nname: team\nfusion:\n  rrf_k: 40\n  alpha: 0.7\n")
    r = _hrt("config", "diff", "qmd", team)
    assert r.exit_code == 0 and r.stdout.splitlines() == ["fusion.rrf_k: 60 -> 40", "fusion.alpha: 0.5 -> 0.7"]
    doc = json.loads(_hrt("config", "diff", "qmd", team, "--format", "json").stdout)
    assert doc["changes"][0] == {"field": "fusion.rrf_k", "base": 60, "other": 40}
    assert _hrt("config", "diff", "qmd", "qmd").stdout == "no setting differs between qmd and qmd\n"

    r = _hrt("config", "check", team, "qmd")
    assert r.exit_code == 0 and "fusion.alpha is set but fusion.method 'rrf' does not read it" in r.stderr
    strict = _hrt("config", "check", "--strict", team)
    assert strict.exit_code == 2 and strict.stderr.startswith("error: ")
    bad = tmp_path / "bad.yaml"
    bad.write_text("fusion:\n  rrf_kk: 40\n")
    r = _hrt("config", "check", bad)
    assert r.exit_code == 2 and "bad.yaml: fusion.rrf_kk: unknown field (did you mean rrf_k?)" in r.output

    shown = _hrt("config", "show", team)
    copy = tmp_path / "resolved.yaml"
    copy.write_text(shown.stdout)
    assert _hrt("config", "diff", team, copy).stdout.startswith("no setting differs")


# -- the session's review of the gate and the writes ---------------------------------------------------------
def test_a_gate_cannot_be_dodged_by_leaving_queries_out_nor_pass_when_it_cannot_decide(tmp_path, corpus_file):
    """Averaged over the queries each run answers, a candidate that drops its bad queries passed the gate; with too
    few queries for any p to reach alpha the gate said "passed" though it could never fail."""
    ds, good, bad = _runs(tmp_path, corpus_file)
    base = ("eval", "--dataset", ds, "--split", "test", "--run", good, "--run", bad)
    r = _hrt(*base, "--max-drop", "nDCG@10=0.01", "--average", "run")
    assert r.exit_code == 2 and "leave out --average run" in r.output, r.output
    r = _hrt(*base, "--max-drop", "nDCG@10=0.01")  # 3 judged queries: the smallest p is 0.25
    assert r.exit_code == 2 and "--max-drop cannot decide" in r.output and "only 3 judged queries differ" in r.output, r.output
    assert _hrt(*base[:-2], "--run", good, "--max-drop", "nDCG@10=0.01").exit_code == 2  # (the same file twice)
    copy = tmp_path / "copy.trec"
    copy.write_text(good.read_text())
    r = _hrt(*base[:-2], "--run", copy, "--max-drop", "nDCG@10=0.01")  # no drop: nothing to decide, on 3 queries too
    assert r.exit_code == 0 and "gate: passed" in r.stderr, r.output
    r = _hrt(*base, "--max-drop", "nDCG@10=0.01", "--max-drop", "nDCG@10=0.02")
    assert r.exit_code == 2 and "has a limit already" in r.output


def test_runs_of_disjoint_queries_averaged_over_their_own_are_evaluated_without_a_test(tmp_path, corpus_file):
    ds, good, _ = _runs(tmp_path, corpus_file)
    lines = good.read_text().splitlines(keepends=True)
    first, rest = tmp_path / "first.trec", tmp_path / "rest.trec"
    first.write_text("".join(x for x in lines if x.startswith("q1 ")))
    rest.write_text("".join(x for x in lines if not x.startswith("q1 ")))
    r = _hrt("eval", "--dataset", ds, "--split", "test", "--run", first, "--run", rest, "--average", "run")
    assert r.exit_code == 0 and "no judged query is in every run: no test" in r.output, r.output


def test_out_to_dev_stdout_appends_where_the_shell_appends_and_a_symlink_loop_is_an_error(tmp_path):
    """`hrt run --out /dev/stdout >> all.trec` left only the last run in all.trec (the path was reopened and renamed
    over); a symlink loop recursed until Python gave up."""
    import subprocess
    import sys

    from toolkit.errors import InputError
    from toolkit.files import write_text_atomic

    out = tmp_path / "all.trec"
    out.write_text("earlier\n")
    code = "from toolkit.files import write_text_atomic; write_text_atomic('/dev/stdout', 'run\\n')"
    with open(out, "a") as fh:
        subprocess.run([sys.executable, "-c", code], stdout=fh, check=True)
    assert out.read_text() == "earlier\nrun\n"
    (tmp_path / "a").symlink_to(tmp_path / "b")
    (tmp_path / "b").symlink_to(tmp_path / "a")
    import pytest

    with pytest.raises(InputError, match="symlink loop"):
        write_text_atomic(tmp_path / "a", "x")
    (tmp_path / "dangling").symlink_to(tmp_path / "nowhere" / "out.trec")
    with pytest.raises(InputError, match="whose folder does not exist"):
        write_text_atomic(tmp_path / "dangling", "x")
    assert not (tmp_path / "nowhere").exists()


def test_config_check_goes_on_past_an_invalid_config(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("fusion:\n  rrf_kk: 40\n")
    r = _hrt("config", "check", bad, "qmd")
    assert r.exit_code == 2 and f"{bad}: not ok" in r.stdout and "qmd: ok (qmd)" in r.stdout


def test_judged_queries_alone_run_against_a_store_ingested_from_a_folder(tmp_path):
    """`hrt run` refused a dataset folder of queries and qrels without corpus.jsonl ("not a BEIR dataset"), so a
    store built with `hrt ingest docs/` could only be evaluated from Python; and queries whose scope no stored
    document had got no results while the summary said only "20/33 queries"."""
    docs = tmp_path / "docs"
    (docs / "ops").mkdir(parents=True)
    (docs / "ops" / "deploy.md").write_text("# Deploy\nThe deploy fails with ECONNREFUSED when the proxy is down.\n")
    (docs / "ops" / "backup.md").write_text("# Backup\nBackups run nightly at two.\n")
    store = tmp_path / "pr.duckdb"
    assert _hrt("ingest", docs, "--store", store, "--no-embed").exit_code == 0
    qset = tmp_path / "qset"
    (qset / "qrels").mkdir(parents=True)
    (qset / "queries.jsonl").write_text(
        json.dumps({"_id": "q1", "text": "deploy ECONNREFUSED", "metadata": {"scope": "ops"}}) + "\n"
        + json.dumps({"_id": "q2", "text": "nightly backups", "metadata": {"scope": "infra"}}) + "\n")
    (qset / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\nq1\tops/deploy.md\t1\nq2\tops/backup.md\t1\n"
                                             "q2\tops/gone.md\t1\n")
    out = tmp_path / "pr.trec"
    r = _hrt("run", "--dataset", qset, "--store", store, "--config", "bm25-only", "--out", out)
    assert r.exit_code == 0, r.output
    assert out.read_text().startswith("q1 Q0 ops/deploy.md 1 ")
    assert "1 judged document(s) of the test qrels are not in" in r.stderr and "'ops/gone.md'" in r.stderr
    assert "1 query asks for scope(s) no stored document has (e.g. 'infra')" in r.stderr
    r = _hrt("eval", "--dataset", qset, "--run", out)
    assert r.exit_code == 0 and "corpus" not in r.stderr, r.output  # no corpus file: document ids are not checked
    r = _hrt("run", "--dataset", qset, "--config", "bm25-only", "--out", out)  # no store: nothing to search
    assert r.exit_code == 2 and "no corpus.jsonl" in r.output


def test_a_gate_counts_the_queries_that_differ_not_the_ties(tmp_path):
    """User trial BE: a candidate that lost 3 well-answered queries of 33 (30 tied) dropped nDCG@10 by 0.089, nine
    times the allowance; with 3 differing queries the smallest p is 0.25, and the gate said "passed"."""
    ds = tmp_path / "ds"
    (ds / "qrels").mkdir(parents=True)
    qids = [f"q{i:02d}" for i in range(33)]
    (ds / "corpus.jsonl").write_text("".join(json.dumps({"_id": f"d{i}", "text": f"doc {i}"}) + "\n" for i in range(40)))
    (ds / "queries.jsonl").write_text("".join(json.dumps({"_id": q, "text": q}) + "\n" for q in qids))
    (ds / "qrels" / "test.tsv").write_text("query-id\tcorpus-id\tscore\n" + "".join(f"{q}\td{i}\t1\n" for i, q in enumerate(qids)))
    main_run, pr = tmp_path / "main.trec", tmp_path / "pr.trec"
    main_run.write_text("".join(f"{q} Q0 d{i} 1 1 m\n" for i, q in enumerate(qids)))
    pr.write_text("".join(f"{q} Q0 d{i} 1 1 p\n" for i, q in enumerate(qids) if i >= 3))
    r = _hrt("eval", "--dataset", ds, "--run", main_run, "--run", pr, "--max-drop", "nDCG@10=0.01")
    assert r.exit_code == 2 and "only 3 judged queries differ" in r.output and "-0.0909" in r.output, r.output


def test_eval_and_the_lab_say_their_stars_are_not_corrected_across_measures(tmp_path, corpus_file):
    """User trial BE: with 4 null measures one starred in 14% of simulated evaluations, and the lab's t-test stars,
    re-tested at every slider move, in 94% of simulated sessions; nothing said the stars were per measure."""
    import polars as pl

    from toolkit import panels

    ds, good, bad = _runs(tmp_path, corpus_file)
    r = _hrt("eval", "--dataset", ds, "--split", "test", "--run", good, "--run", bad)
    assert "not across the 4 measures" in r.stdout, r.output
    table = pl.DataFrame({"measure": ["nDCG@10", "R@5"], "current": [0.6, 0.5], "baseline": [0.5, 0.5],
                          "delta": [0.1, 0.0], "wins": [20, 10], "losses": [5, 10], "p_value": [0.01, 1.0],
                          "queries": [40, 40]})
    fig = panels.metrics_figure(table, current_name="a", baseline_name="b", raw=True)
    assert "uncorrected, in-sample: exploratory" in fig["layout"]["title"]["text"]


def test_a_report_writes_its_tables_as_json_for_a_bot(tmp_path, corpus_file):
    """`hrt report` printed a table to stdout and kept significance and the config diff in the HTML only: a bot that
    posts to a pull request had to scrape the page."""
    ds = write_beir(tmp_path / "ds", corpus_file)
    out, js = tmp_path / "r.html", tmp_path / "r.json"
    r = _hrt("report", "--dataset", ds, "--split", "test", "--config", "bm25-only", "--config", "qmd", "--store",
             tmp_path / "s.duckdb", "--latency-sample", "0", "--out", out, "--json", js)
    assert r.exit_code == 0, r.output
    doc = json.loads(js.read_text())
    assert doc["baseline"] == "bm25-only" and [row["system"] for row in doc["ab"]] == ["bm25-only", "qmd"]
    assert {row["measure"] for row in doc["significance"]} >= {"nDCG@10"} and doc["queries"] > 0
    assert any(row["field"].startswith("fusion.") or row["field"].startswith("retrieval.") for row in doc["config_diff"])
    assert doc["provenance"]["hybrid-retrieval-toolkit"]
