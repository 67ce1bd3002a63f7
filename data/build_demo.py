"""Write the demo memory bank (BEIR layout) and the markdown folder from the authored content.

    python data/build_demo.py                      # rewrites data/demo and data/markdown-notes
    python data/build_demo.py --out /tmp/demo --notes-out /tmp/notes

The content lives in data/demo_content/ (one module per scope, long documents, queries); this script only
resolves pasted copies, assigns document ids, propagates judgements to copies, splits queries into dev and
test, checks the whole thing for authoring mistakes and writes the files. No randomness: running it twice
gives byte-identical output, which tests/test_demo_data.py checks.
"""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from collections import Counter, defaultdict
from dataclasses import replace
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.dont_write_bytecode = True  # keep data/ free of __pycache__ when the tests rebuild into a temp dir
if str(HERE) not in sys.path:
    sys.path.insert(0, str(HERE))

from demo_content import dashboard, longdocs, markdown, payments, platform  # noqa: E402
from demo_content.model import KINDS, PEOPLE, Copy, Doc  # noqa: E402
from demo_content.queries import MODES, QUERIES, Query  # noqa: E402

SCOPE_PREFIX = {"payments": "pay", "platform": "plat", "dashboard": "dash"}
STYLES = ("technical", "conversational", "paraphrase", "keyword")
LONG_DOC_CHARS = 3000
COPY_GRADE = 1  # a pasted copy of a judged note is relevant; the canonical note keeps the higher grade


class ContentError(Exception):
    """An authoring mistake in demo_content (unknown key, edit that does not apply, scope mismatch...)."""


def all_docs() -> tuple[list[Doc], list[Copy]]:
    docs = payments.DOCS + platform.DOCS + dashboard.DOCS + longdocs.DOCS
    copies = payments.COPIES + platform.COPIES + dashboard.COPIES
    return docs, copies


def resolve_copies(docs: list[Doc], copies: list[Copy]) -> list[Doc]:
    """Turn each Copy into a Doc: the original's text with the copy's trivial edits applied."""
    by_key = {d.key: d for d in docs}
    out = []
    for c in copies:
        if c.of not in by_key:
            raise ContentError(f"copy {c.key!r}: unknown original {c.of!r}")
        o = by_key[c.of]
        text = o.text
        for old, new in c.edits:
            if old not in text:
                raise ContentError(f"copy {c.key!r}: edit {old!r} does not occur in {c.of!r}")
            text = text.replace(old, new)
        text = c.prefix + text + c.suffix
        if text == o.text and c.source == o.source:
            raise ContentError(f"copy {c.key!r} is identical to {c.of!r} in the same source")
        out.append(
            replace(
                o,
                key=c.key,
                source=c.source,
                date=c.date,
                author=c.author or o.author,
                kind=c.kind or o.kind,
                title=c.title or o.title,
                text=text,
            )
        )
    return out


def assign_ids(docs: list[Doc]) -> dict[str, str]:
    """key -> `<scope prefix>-NNN`, numbered per scope in date order like an append-only store; documents of
    the same day keep their authored order, so the messages of a thread stay in sequence."""
    order = {d.key: i for i, d in enumerate(docs)}
    ids: dict[str, str] = {}
    for scope, prefix in SCOPE_PREFIX.items():
        in_scope = sorted((d for d in docs if d.scope == scope), key=lambda d: (d.date, order[d.key]))
        for n, d in enumerate(in_scope, start=1):
            ids[d.key] = f"{prefix}-{n:03d}"
    return ids


def judgements(queries: list[Query], copies: list[Copy]) -> dict[str, dict[str, int]]:
    """qid -> {key: grade}, with every pasted copy of a judged note added at COPY_GRADE."""
    copies_of: dict[str, list[str]] = defaultdict(list)
    for c in copies:
        copies_of[c.of].append(c.key)
    out = {}
    for q in queries:
        rels = dict(q.rels)
        for key, grade in q.rels.items():
            for ck in copies_of.get(key, []):
                rels.setdefault(ck, min(grade, COPY_GRADE))
        out[q.qid] = rels
    return out


def modes_of(queries: list[Query], copies: list[Copy]) -> dict[str, list[str]]:
    """qid -> sorted failure modes: the hand-assigned MODES plus `near-duplicate` and `unscoped`."""
    copied = {c.of for c in copies}
    out: dict[str, set[str]] = {q.qid: set() for q in queries}
    for mode, qids in MODES.items():
        for qid in qids:
            if qid not in out:
                raise ContentError(f"MODES[{mode!r}] names unknown query {qid!r}")
            out[qid].add(mode)
    for q in queries:
        if copied & set(q.rels):
            out[q.qid].add("near-duplicate")
        if q.scope is None:
            out[q.qid].add("unscoped")
    return {qid: sorted(m) for qid, m in out.items()}


def split_of(queries: list[Query]) -> dict[str, str]:
    """Alternate test/dev within each style (in qid order), so both splits have the same mix of styles."""
    out = {}
    for style in STYLES:
        for i, q in enumerate(sorted((q for q in queries if q.style == style), key=lambda q: q.qid)):
            out[q.qid] = "test" if i % 2 == 0 else "dev"
    return out


def validate(docs: list[Doc], queries: list[Query], rels: dict[str, dict[str, int]]) -> None:
    keys = Counter(d.key for d in docs)
    if dup := [k for k, n in keys.items() if n > 1]:
        raise ContentError(f"duplicate document keys: {dup}")
    by_key = {d.key: d for d in docs}
    for d in docs:
        if d.scope not in SCOPE_PREFIX:
            raise ContentError(f"{d.key}: unknown scope {d.scope!r}")
        if d.kind not in KINDS:
            raise ContentError(f"{d.key}: unknown kind {d.kind!r}")
        if d.author not in PEOPLE:
            raise ContentError(f"{d.key}: unknown author {d.author!r}")
        dt.date.fromisoformat(d.date)
        if not d.text.strip() or not d.title.strip():
            raise ContentError(f"{d.key}: empty title or text")
    qids = Counter(q.qid for q in queries)
    if dup := [k for k, n in qids.items() if n > 1]:
        raise ContentError(f"duplicate query ids: {dup}")
    for q in queries:
        if q.style not in STYLES:
            raise ContentError(f"{q.qid}: unknown style {q.style!r}")
        if not rels[q.qid] or 2 not in q.rels.values():
            raise ContentError(f"{q.qid}: needs at least one judgement of grade 2")
        for key, grade in rels[q.qid].items():
            if key not in by_key:
                raise ContentError(f"{q.qid}: judged document {key!r} does not exist")
            if grade not in (1, 2):
                raise ContentError(f"{q.qid}: grade {grade} for {key!r} (use 1 or 2)")
            if q.scope is not None and by_key[key].scope != q.scope:
                raise ContentError(
                    f"{q.qid}: judged {key!r} is in scope {by_key[key].scope!r}, query in {q.scope!r}"
                )

    for qid in MODES["chunk"]:
        q = next(q for q in queries if q.qid == qid)
        if not any(g == 2 and len(by_key[k].text) > LONG_DOC_CHARS for k, g in q.rels.items()):
            raise ContentError(f"{qid}: a 'chunk' query needs a long document as a direct answer")
    for qid in MODES["source-concentration"]:
        if len({by_key[k].source for k in rels[qid]}) < 3:
            raise ContentError(f"{qid}: a 'source-concentration' query needs answers from 3 or more sources")


def _line(obj: dict) -> str:
    return json.dumps(obj, ensure_ascii=False) + "\n"


def build(out: Path, notes_out: Path) -> dict[str, int]:
    """Write everything; returns the counts quoted in the README."""
    authored, copies = all_docs()
    docs = authored + resolve_copies(authored, copies)
    rels = judgements(QUERIES, copies)
    validate(docs, QUERIES, rels)
    ids = assign_ids(docs)
    split = split_of(QUERIES)
    modes = modes_of(QUERIES, copies)

    records = []
    for d in docs:
        tags = list(dict.fromkeys(d.tags))
        records.append(
            {
                "_id": ids[d.key],
                "title": d.title,
                "text": d.text,
                "metadata": {
                    "source": d.source,
                    "scope": d.scope,
                    "kind": d.kind,
                    "date": d.date,
                    "author": PEOPLE[d.author],
                    "tags": tags,
                },
            }
        )
    records.sort(key=lambda r: r["_id"])

    (out / "qrels").mkdir(parents=True, exist_ok=True)
    _write(out / "corpus.jsonl", "".join(_line(r) for r in records))
    _write(
        out / "queries.jsonl",
        "".join(
            _line(
                {
                    "_id": q.qid,
                    "text": q.text,
                    "metadata": {"scope": q.scope, "style": q.style, "note": q.note, "modes": modes[q.qid]},
                }
            )
            for q in sorted(QUERIES, key=lambda q: q.qid)
        ),
    )
    for name in ("dev", "test"):
        rows = ["query-id\tcorpus-id\tscore\n"]
        for q in sorted(QUERIES, key=lambda q: q.qid):
            if split[q.qid] != name:
                continue
            for key, grade in sorted(rels[q.qid].items(), key=lambda kv: (-kv[1], ids[kv[0]])):
                rows.append(f"{q.qid}\t{ids[key]}\t{grade}\n")
        _write(out / "qrels" / f"{name}.tsv", "".join(rows))

    by_key = {d.key: d for d in docs}
    for rel_path, text in markdown.render(by_key).items():
        p = notes_out / rel_path
        p.parent.mkdir(parents=True, exist_ok=True)
        _write(p, text)

    counts = _counts(docs, copies, rels, split, records)
    _write(out / "README.md", _readme(counts, ids, copies, modes))
    return counts


def _write(path: Path, text: str) -> None:
    path.write_text(text, encoding="utf-8", newline="\n")


def _counts(docs, copies, rels, split, records) -> dict:
    sources = Counter(d.source for d in docs)
    return {
        "docs": len(docs),
        "authored": len(docs) - len(copies),
        "copies": len(copies),
        "copied_notes": len({c.of for c in copies}),
        "long": sum(len(d.text) > LONG_DOC_CHARS for d in docs),
        "sources": len(sources),
        "big_sources": sorted(((s, n) for s, n in sources.items() if n >= 10), key=lambda x: (-x[1], x[0])),
        "scopes": Counter(d.scope for d in docs),
        "kinds": Counter(d.kind for d in docs),
        "queries": len(QUERIES),
        "styles": Counter(q.style for q in QUERIES),
        "unscoped": sum(q.scope is None for q in QUERIES),
        "judgements": sum(len(r) for r in rels.values()),
        "split": Counter(split.values()),
        "bytes": sum(len(_line(r).encode()) for r in records),
    }


def _readme(c: dict, ids: dict[str, str], copies: list[Copy], modes: dict[str, list[str]]) -> str:
    scopes = ", ".join(f"{s} {c['scopes'][s]}" for s in SCOPE_PREFIX)
    kinds = ", ".join(f"{k} {c['kinds'][k]}" for k in KINDS)
    styles = ", ".join(f"{s} {c['styles'][s]}" for s in STYLES)
    big = "\n".join(f"| `{s}` | {n} |" for s, n in c["big_sources"])
    groups = defaultdict(list)
    for q in sorted(QUERIES, key=lambda q: q.qid):
        groups[q.style].append(q.qid)
        for m in modes[q.qid]:
            groups[m].append(q.qid)
    examples = "\n".join(f"| `{ids[cp.of]}` | `{ids[cp.key]}` | `{cp.source}` |" for cp in copies[:6])
    return f"""# Demo memory bank: the Northwind Platform team

A small, realistic memory bank for trying the toolkit: `make demo`, the quick start and the tutorial notebooks
run on it. It is the accumulated memory of a fictional engineering team (payments API on Stripe, a ledger, the
`conveyor` job queue on Redis, a Postgres cluster behind pgbouncer, a React merchant console, the deploy pipeline
and on-call): Slack threads, wiki pages, runbooks, postmortems, decision records, meeting notes, tickets, and
entries an assistant saved from conversations.

Everything here was written for this project; no text is copied from elsewhere. The people, the company and
the incidents are fictional (real public facts such as CVE ids, Stripe test card numbers and Postgres error
codes are used as a real team would use them). Licence: the repository's licence (Apache-2.0); you may also
use the data under CC0.

## Files

| file | content |
|---|---|
| `corpus.jsonl` | {c["docs"]} documents: `_id`, `title`, `text`, `metadata` (`source`, `scope`, `kind`, `date`, `author`, `tags`) |
| `queries.jsonl` | {c["queries"]} queries: `_id`, `text`, `metadata` (`scope`, `style`, `note` on what it exercises, `modes`) |
| `qrels/dev.tsv`, `qrels/test.tsv` | graded judgements (`2` the direct answer, `1` relevant), header `query-id corpus-id score` |

Generated by `python data/build_demo.py` from the content in `data/demo_content/` (deterministic; the test
suite checks that a rebuild is byte-identical). Edit the content there, not the generated files.

## Counts

- Documents: {c["docs"]} ({c["authored"]} authored + {c["copies"]} pasted copies of {c["copied_notes"]} notes), {c["bytes"] // 1024} KiB of JSONL.
- Scopes: {scopes}. Kinds: {kinds}.
- {c["long"]} long documents over {LONG_DOC_CHARS:,} characters (postmortems, runbooks, design docs with markdown
  headings) that the chunker splits into several chunks; the rest are 1-6 sentence memory entries.
- {c["sources"]} distinct sources (a file, page, ticket or Slack channel).
- Queries: {c["queries"]} ({styles}); {c["unscoped"]} carry no scope, the rest carry the scope of their answers.
- Judgements: {c["judgements"]}; split {c["split"]["test"]} test / {c["split"]["dev"]} dev queries, alternating within each style.

Document ids are `pay-NNN`, `plat-NNN` and `dash-NNN`, numbered per scope in date order.

## The failure modes it contains, and the queries that exercise them

**Exact technical tokens** ({len(groups["technical"])} technical queries: {", ".join(groups["technical"])}).
Error codes, config keys, versions, file paths, CVE and ticket ids, each with a near-identical twin elsewhere in
the corpus: `PG-40001` / `PG-40P01`, `v2.14.3` / `v2.14.2` / `v2.13.0`, `ERR_PAYMENT_DECLINED_51` / `_05` / `_54`,
`retryBackoffMs` / `retryBackoffMaxMs`, `max_pool_size` / `min_pool_size`, `ECONNREFUSED` / `ECONNRESET`,
`HTTP 429` / `HTTP 409`, `STRIPE_WEBHOOK_SECRET` / `STRIPE_SECRET_KEY`, `deploy/helm/values-prod.yaml` /
`values-staging.yaml`, `node 20.11.1` / `20.11.0` / `18.19.0`, `CVE-2024-45296` / `CVE-2024-45590`,
`NW-1432` / `NW-1423` / `NW-1342`. BM25 with a tokenizer that keeps digits finds them; dense search returns the
twin about as often as the answer, and a reranker that overrides retrieval loses them.

**Conversational, stopword-heavy questions** ({len(groups["conversational"])} queries: {", ".join(groups["conversational"])}).
"hey, what did we end up deciding about the thing with retries again?" Most words match everything; BM25 drifts
to whatever repeats "retries" or "queue", dense search and routing do better.

**Paraphrases** ({len(groups["paraphrase"])} queries: {", ".join(groups["paraphrase"])}). The answer shares
almost no words with the question ("how do we check that inbound event notifications are authentic and not forged?" is
answered by a note on Stripe-Signature HMACs). BM25 fails, dense search wins.

**Short keyword queries** ({len(groups["keyword"])} queries: {", ".join(groups["keyword"])}).

**Answers inside one chunk of a long document** ({len(groups["chunk"])} queries: {", ".join(groups["chunk"])}): deploy
runbook troubleshooting, a design doc's defaults table, the webhook secret rotation steps, a postmortem's changes
and action items, failover runbook sections, the on-call handover. A document-level score built from the wrong
chunk misses them.

**Near-duplicates** ({len(groups["near-duplicate"])} queries judge a note that has copies:
{", ".join(groups["near-duplicate"])}). {c["copied_notes"]} notes were pasted into {c["copies"]} other places with trivial
edits (a prefix like "FYI", a sign-off, a changed date format), usually in a different source. Copies of a
judged note are judged too, at grade {COPY_GRADE}; the original keeps its grade. Examples:

| original | copy | copy's source |
|---|---|---|
{examples}

**Source concentration** ({len(groups["source-concentration"])} queries: {", ".join(groups["source-concentration"])}).
The incident channel, the INC-2377 thread in `#dashboard-dev`, the handoffs in `#oncall` and the PG16 meeting
page each hold many documents on one topic; without source-level dedup the top 5 for a question about that
topic comes from one of them ("I asked for 5 and got 1") while the postmortem, ticket or recap that answers it
best falls below. Sources with 10 or more documents:

| source | documents |
|---|---|
{big}

**Distractors** ({len(groups["distractor"])} queries: {", ".join(groups["distractor"])}). Documents that share surface words with a query but answer something else: a pending card
authorisation that looks "charged twice", React StrictMode effects that "run twice", a payouts table that
"freezes", search box "input lag", the on-call "rotation", CI "re-runs" and Playwright "retries", telemetry
retention, the STRIPE_SECRET_KEY and Grafana secret rotations, the local-Redis `ECONNREFUSED`, the public
API's `HTTP 429`.

Each query's `metadata.modes` lists these groups (`chunk`, `source-concentration`, `distractor`,
`near-duplicate`, `unscoped`), so results can be broken down by failure mode as well as by `style`.
Unscoped queries: {", ".join(groups["unscoped"])}.

## The markdown folder

`data/markdown-notes/` holds part of the same wiki as {len(markdown.ADRS) + len(markdown.WHOLE) + len(markdown.MEETINGS) + 2}
`.md` and `.txt` files in three folders (`wiki/`, `decisions/`, `meetings/`) for the "bring your own corpus:
a folder of markdown" tutorial: `hrt ingest data/markdown-notes --store notes.duckdb`. It has no queries.
"""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument(
        "--out", type=Path, default=HERE / "demo", help="BEIR directory to write (default data/demo)"
    )
    ap.add_argument(
        "--notes-out",
        type=Path,
        default=HERE / "markdown-notes",
        help="folder of markdown files to write (default data/markdown-notes)",
    )
    args = ap.parse_args(argv)
    try:
        counts = build(args.out, args.notes_out)
    except ContentError as e:
        print(f"build_demo: {e}", file=sys.stderr)
        return 1
    print(
        f"wrote {counts['docs']} documents, {counts['queries']} queries, {counts['judgements']} judgements "
        f"to {args.out}; markdown folder to {args.notes_out}"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
