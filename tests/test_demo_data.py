"""The shipped demo memory bank (data/demo) and markdown folder (data/markdown-notes) are well formed, contain
the failure modes they are documented to contain, and are exactly what data/build_demo.py generates."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections import Counter, defaultdict
from datetime import date
from pathlib import Path

import pytest

from toolkit.loaders import Dataset, load_corpus

DATA = Path(__file__).resolve().parents[1] / "data"
DEMO = DATA / "demo"
NOTES = DATA / "markdown-notes"
KINDS = {"note", "decision", "incident", "runbook", "meeting", "chat"}
STYLES = {"technical", "conversational", "paraphrase", "keyword"}


def _jsonl(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def _qrels(split: str) -> list[tuple[str, str, int]]:
    lines = (DEMO / "qrels" / f"{split}.tsv").read_text(encoding="utf-8").splitlines()
    assert lines[0] == "query-id\tcorpus-id\tscore"
    rows = []
    for line in lines[1:]:
        qid, doc_id, score = line.split("\t")
        rows.append((qid, doc_id, int(score)))
    return rows


@pytest.fixture(scope="module")
def corpus() -> list[dict]:
    return _jsonl(DEMO / "corpus.jsonl")


@pytest.fixture(scope="module")
def queries() -> list[dict]:
    return _jsonl(DEMO / "queries.jsonl")


@pytest.fixture(scope="module")
def qrels() -> dict[str, list[tuple[str, str, int]]]:
    return {s: _qrels(s) for s in ("dev", "test")}


def test_corpus_records_are_complete(corpus):
    ids = [d["_id"] for d in corpus]
    assert len(ids) == len(set(ids))
    assert 250 <= len(corpus) <= 400
    for d in corpus:
        m = d["metadata"]
        assert set(d) == {"_id", "title", "text", "metadata"}
        assert d["title"].strip() and d["text"].strip()
        assert set(m) == {"source", "scope", "kind", "date", "author", "tags"}
        assert m["kind"] in KINDS and m["source"] and m["author"] and isinstance(m["tags"], list)
        date.fromisoformat(m["date"])
    scopes = Counter(d["metadata"]["scope"] for d in corpus)
    assert set(scopes) == {"payments", "platform", "dashboard"}
    assert set(Counter(d["metadata"]["kind"] for d in corpus)) == KINDS
    assert (DEMO / "corpus.jsonl").stat().st_size < 1_000_000


def test_mostly_short_entries_and_at_least_six_long_documents_with_headings(corpus):
    long_docs = [d for d in corpus if len(d["text"]) > 3000]
    assert len(long_docs) >= 6
    assert all(len(d["text"]) <= 8000 and re.search(r"^## ", d["text"], re.M) for d in long_docs)
    sentences = [len(re.findall(r"[.!?](\s|$)", d["text"])) for d in corpus if len(d["text"]) <= 3000]
    assert sum(1 <= n <= 6 for n in sentences) / len(sentences) > 0.9


def test_queries_mix_styles_and_mostly_carry_a_scope(queries, corpus):
    assert 48 <= len(queries) <= 70
    assert len({q["_id"] for q in queries}) == len(queries)
    styles = Counter(q["metadata"]["style"] for q in queries)
    assert set(styles) == STYLES
    share = {s: n / len(queries) for s, n in styles.items()}
    assert 0.30 <= share["technical"] <= 0.40
    assert 0.25 <= share["conversational"] <= 0.35
    assert 0.20 <= share["paraphrase"] <= 0.30
    scopes = {d["metadata"]["scope"] for d in corpus}
    scoped = [q for q in queries if q["metadata"]["scope"] is not None]
    assert len(scoped) >= 0.8 * len(queries)
    assert all(q["metadata"]["scope"] in scopes and q["metadata"]["note"] for q in scoped)


def test_qrels_reference_existing_ids_and_every_query_is_judged(corpus, queries, qrels):
    doc_scope = {d["_id"]: d["metadata"]["scope"] for d in corpus}
    q_scope = {q["_id"]: q["metadata"]["scope"] for q in queries}
    judged = defaultdict(dict)
    for rows in qrels.values():
        for qid, doc_id, score in rows:
            assert qid in q_scope and doc_id in doc_scope
            assert score in (1, 2)
            assert doc_id not in judged[qid], f"{qid} judges {doc_id} twice"
            judged[qid][doc_id] = score
            # A scoped query's answers live in its scope, or scope filtering could never find them.
            assert q_scope[qid] is None or doc_scope[doc_id] == q_scope[qid]
    assert set(judged) == set(q_scope)
    assert all(2 in grades.values() for grades in judged.values())


def test_failure_mode_groups_point_at_documents_that_show_them(corpus, queries, qrels):
    docs = {d["_id"]: d for d in corpus}
    judged = defaultdict(dict)
    for rows in qrels.values():
        for qid, doc_id, score in rows:
            judged[qid][doc_id] = score
    groups = defaultdict(list)
    for q in queries:
        for mode in q["metadata"]["modes"]:
            groups[mode].append(q["_id"])
    assert set(groups) == {"chunk", "source-concentration", "distractor", "near-duplicate", "unscoped"}
    for qid in groups["chunk"]:  # the direct answer is a long document the chunker splits
        assert any(g == 2 and len(docs[d]["text"]) > 3000 for d, g in judged[qid].items()), qid
    for qid in groups["source-concentration"]:  # answers spread over sources, one of which is crowded
        sources = Counter(docs[d]["metadata"]["source"] for d in judged[qid])
        assert len(sources) >= 3, qid
    by_source = Counter(d["metadata"]["source"] for d in corpus)
    assert by_source["slack/#inc-2291-double-capture"] >= 15
    unscoped = {q["_id"] for q in queries if q["metadata"]["scope"] is None}
    assert set(groups["unscoped"]) == unscoped


def test_split_is_disjoint_complete_and_stratified_by_style(queries, qrels):
    dev = {qid for qid, _, _ in qrels["dev"]}
    test = {qid for qid, _, _ in qrels["test"]}
    assert not dev & test
    assert dev | test == {q["_id"] for q in queries}
    for style in STYLES:
        ids = {q["_id"] for q in queries if q["metadata"]["style"] == style}
        assert abs(len(ids & dev) - len(ids & test)) <= 1


def _shingles(text: str) -> set[tuple[str, ...]]:
    words = re.findall(r"\w+", text.lower())
    return {tuple(words[i : i + 3]) for i in range(len(words) - 2)}


def _near_duplicate_pairs(corpus: list[dict]) -> list[tuple[str, str]]:
    sh = {d["_id"]: _shingles(d["text"]) for d in corpus if len(d["text"]) <= 3000}
    ids = sorted(sh)
    pairs = []
    for i, a in enumerate(ids):
        for b in ids[i + 1 :]:
            inter = len(sh[a] & sh[b])
            if inter and inter / len(sh[a] | sh[b]) >= 0.6:
                pairs.append((a, b))
    return pairs


def test_near_duplicates_exist_and_copies_of_judged_notes_are_judged(corpus, qrels):
    pairs = _near_duplicate_pairs(corpus)
    assert len(pairs) >= 15
    source = {d["_id"]: d["metadata"]["source"] for d in corpus}
    assert sum(source[a] != source[b] for a, b in pairs) >= 12  # mostly pasted into another place
    judged = defaultdict(set)
    for rows in qrels.values():
        for qid, doc_id, _ in rows:
            judged[qid].add(doc_id)
    for qid, docs in judged.items():
        for a, b in pairs:
            assert (a in docs) == (b in docs), f"{qid}: near-duplicates {a} and {b} are judged differently"


def test_some_sources_concentrate_many_documents(corpus):
    by_source = Counter(d["metadata"]["source"] for d in corpus)
    big = [s for s, n in by_source.items() if n >= 10]
    assert len(big) >= 3


def test_exact_technical_tokens_and_their_look_alikes_are_present(corpus):
    text = "\n".join(d["title"] + "\n" + d["text"] for d in corpus)
    for token in [
        "ECONNREFUSED",
        "ECONNRESET",
        "HTTP 429",
        "HTTP 409",
        "PG-40001",
        "PG-40P01",
        "ERR_PAYMENT_DECLINED_51",
        "ERR_PAYMENT_DECLINED_05",
        "max_pool_size",
        "min_pool_size",
        "retryBackoffMs",
        "retryBackoffMaxMs",
        "STRIPE_WEBHOOK_SECRET",
        "STRIPE_SECRET_KEY",
        "v2.14.3",
        "v2.13.0",
        "node 20.11.1",
        "node 18.19.0",
        "deploy/helm/values-prod.yaml",
        "deploy/helm/values-staging.yaml",
        "CVE-2024-45296",
        "CVE-2024-45590",
        "NW-1432",
        "NW-1423",
        "NW-1342",
    ]:
        assert token in text, token


def test_loaders_read_the_demo_dataset():
    docs = load_corpus(DEMO)
    assert len(docs) == len(_jsonl(DEMO / "corpus.jsonl"))
    assert all(d["scope"] in {"payments", "platform", "dashboard"} and d["source"] for d in docs)
    ds = Dataset.open(DEMO)
    assert ds.splits() == ["dev", "test"]
    n_test = ds.queries("test").height
    n_dev = ds.queries("dev").height
    assert n_test + n_dev == ds.queries().height
    assert ds.qrels("test").height == len(_qrels("test"))


def test_markdown_folder_is_a_small_wiki_export():
    files = sorted(p for p in NOTES.rglob("*") if p.is_file())
    assert 15 <= len(files) <= 25
    assert {p.suffix for p in files} == {".md", ".txt"}
    assert 2 <= len({p.parent for p in files}) <= 3 and all(p.parent != NOTES for p in files)
    assert sum(p.stat().st_size > 3000 for p in files) >= 4
    assert all(p.read_text(encoding="utf-8").startswith("# ") for p in files if p.suffix == ".md")
    docs = load_corpus(NOTES)
    assert len(docs) == len(files)
    assert {d["scope"] for d in docs} == {p.parent.name for p in files}


def test_build_script_regenerates_identical_files(tmp_path):
    out, notes = tmp_path / "demo", tmp_path / "notes"
    done = subprocess.run(
        [sys.executable, str(DATA / "build_demo.py"), "--out", str(out), "--notes-out", str(notes)],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    for shipped, built in ((DEMO, out), (NOTES, notes)):
        want = {p.relative_to(shipped): p.read_bytes() for p in shipped.rglob("*") if p.is_file()}
        got = {p.relative_to(built): p.read_bytes() for p in built.rglob("*") if p.is_file()}
        assert sorted(got) == sorted(want)
        changed = [str(k) for k in want if want[k] != got[k]]
        assert not changed, f"rerun data/build_demo.py: {changed} differ from the generated output"
