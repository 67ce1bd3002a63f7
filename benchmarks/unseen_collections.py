"""Known-item collections built from this machine's own files and a git history, for judging a preset on new text.

The shared collections have been looked at by every earlier choice of `default`; these are new text of a
kind the toolkit's users search (technical reference prose, identifier-heavy notes, help questions), built from files every
Debian/Ubuntu machine with the project's virtual environment has. Each is a known-item task with one relevant
document per query (grade 1). In the first three (user trial BQ), a one-line summary that a document's author
wrote is the query, and the document it summarises, with that line removed, is the one relevant document:

- `manpages`: English man pages of sections 1 and 8 (/usr/share/man/man1, man8; symlinks and `.so`
  redirects skipped). Query: the NAME line's summary (the text after " - "). Document: the DESCRIPTION section
  plus every section whose title holds OPTION, FLAGS or ARGUMENTS, roff/mdoc markup stripped, NAME and
  SYNOPSIS left out. Id `man1/PAGE` (the file name without .gz), title the page name, metadata.group
  gcloud / git / other. The ~16.6k generated gcloud pages are capped at 600 (a seeded sample) so that
  they do not swamp the rest.
- `debpkg`: installed Debian packages (`dpkg-query`). Query: the package's one-line synopsis. Document: its
  extended description (" ." lines as blank lines). Id `deb/PACKAGE`, no title.
- `pkgsummary`: installed Python distributions: METADATA of the project venv's site-packages
  (`--venv`, default /work/main/.venv) and of /usr/lib/python3/dist-packages (also `.egg-info` PKG-INFO).
  Query: the `Summary:` header. Document: the long description (the body after the headers, or the folded
  `Description:` header of Metadata-Version 1.x). Id `pkg/NAME`, title left empty (the name would be a free
  hint), metadata.origin venv / system. A distribution seen twice (by normalised name) is kept once.

In these three: every verbatim occurrence of the query (case-insensitive, any whitespace) is cut from its
document, which is then truncated to 1500 characters; documents with too little text (description under 40
characters for man pages, under 80 for the others) are dropped, and of byte-identical documents (after
lower-casing and collapsing whitespace) only the first is kept. A document gets no query when its summary has
fewer than 3 words or is shared with another document (it would have two right answers), but stays in the
corpus as a distractor. Queries are shuffled with random.Random(13) and split in half: the first half is dev,
the rest test (ids m00000.., d0000.., p0000.. in shuffled order).

- `manhelp` (user trial CA; persona: help search where users describe a need and rarely know the tool's name): the
  same man pages, gcloud's left out, each whole (its NAME line, a blank line, its DESCRIPTION; 1500 characters),
  with 312 queries written and judged by hand before any retrieval (benchmarks/manhelp_queries.tsv: id, type
  keyword / phrase / question, text, relevant page ids, 1 to 10 each, grade 1), worded to avoid the pages' names
  and their distinctive words ("how big is this folder" for du): vocabulary mismatch, the case dense search is
  for. Split by the first hex digit of sha1(id): even dev, odd test. A query whose page this machine lacks is
  left out. qtype.tsv lists qid, qtype, split, n_rel.

The last two (user trial BT, its builders moved here unchanged in their rules) have two query types each: an
identifier one (a token found in the relevant document and in no other) and a natural-language one (a
sentence cut from the relevant document). Each type is shuffled with random.Random(13), cut to 300 and split
in half (dev first); ids p|c + i|n + 4 digits; every query's metadata has qtype and split, and a side file
OUT/NAME/qtype.tsv lists qid, qtype, (subtype,) split and token per query. A token counts as held by a document
when it occurs case-insensitively with no word character on either side (BM25 folds case). Documents with no
query stay as distractors; byte-identical documents (as above) are kept once; text truncated to 1500 characters.

- `pyapi`: the standard library's docstrings, read by the `--venv` Python run with `-I` in a child process
  (public modules of sys.stdlib_module_names minus GUI, platform and side-effect ones, plus 45 submodules).
  Document: one per public function, class and public method whose __module__ is the module (or its `_mod`
  accelerator, or posix for os), id `py/MODULE.QUALNAME`, no title, metadata module and kind (function / class
  / method). Text: the cleaned docstring without its leading signature line(s), without every verbatim
  `module.qualname` (and dotted `Class.method`), and without its first sentence; under 60 characters left:
  dropped. Identifier query "SHORT TOKEN": SHORT is module.func (functions, classes) or Class.method, TOKEN an
  identifier-shaped word (inner underscore, dotted, camelCase, CONSTANT) of the document that no other
  document holds and that is not the object's own name, one per document, chosen with the seed. NL query: the
  docstring's first sentence, at least 4 words, no other document's first sentence, in no document's text.
- `changelogs`: Debian changelog entries of /usr/share/doc/*/changelog.Debian.gz (byte-identical files once;
  an entry per (source, version) once, as binary packages of one source share a changelog; the 12 most recent
  of each file). Document: the entry from its header line "src (version) dist; urgency=..." to its " -- "
  trailer, id `cl/SOURCE/VERSION`, no title, metadata.source the source package; entries with under 80
  characters of change text dropped. NL query: the entry's first change line ("  * ..." with its
  continuation), at least 5 words, unique, cut from the entry (which needs 60 characters of change text left,
  else it keeps its text and has no NL query), in no entry's text. Identifier query, one subtype per
  candidate, 75 of each (topped up from the others): `cve` a CVE id alone, `bug` "#NUMBER" alone (the number
  in no other entry), `version` "SOURCE VERSION" (the entry's own version in no other entry), `ident` up to 3
  words of its line and a snake_case / camelCase / dotted / CONST_NAME token of at least 5 characters.
  Caveat (trial BT): the NL half is near-unanswerable. Once its first change line is cut, what is left of an
  entry is the package's other changes, which seldom share words with the line (trial BT, test nDCG@10 of
  bm25-only, the best list: NL 0.138, identifier 0.987), so report the two types apart and do not read the
  collection's mean as a measure of prose search.

- `commits` (user trial BW, its builder moved here unchanged in its rules; persona: agent memory over git
  history): duckdb/duckdb's git history, read only from a bare mirror with `git --git-dir` (`--git-dir`, default
  /work/.mirror/duckdb+duckdb/repo; fetched, not on a clean machine, hence not built unless `--only` names it).
  The CM_N=3000 most recent first-parent commits of its `main` (squash / merge commits of pull requests), so
  the collection follows the mirror's snapshot (trial BW's: 77d99b2b2c 2025-02-12 .. 044a04a7cd 2026-08-20).
  Document: id the full SHA, title the subject, text the subject, a blank line, the body (first 4000
  characters) and "Files changed:" with the changed paths (diff against the first parent, first 50, then
  "(+K more files)"); metadata date (author date, ISO), pr (the "(#N)" at the end of the subject, or "") and
  files (how many). `commits_hdr` is the same collection with each text starting "commit SHA\nDate: DATE\n\n"
  the way `git log` prints it (same queries and judgements, made on the header-less text).
  Seven query types, relevance judged mechanically on the header-less text (lower-cased; "held" as above);
  a query may have several relevant documents, with grades:
  `nl` hand-written paraphrases (benchmarks/commit_paraphrases.py, keyed by SHA prefix; none a verbatim piece
  of its commit): relevant the commit and every commit whose subject without "(#N)" refs is the same
  (backports). `sha` a 7-10 hex prefix of the SHA, bare or in a phrase: that commit only (prefixes unique in
  the corpus; commits whose 7-prefix any other text mentions are not used). `pr` "PR #N" etc. for N of a
  subject's "(#N)": every commit whose text references N (#N, /pull/N, /issues/N or the bare number), grade 2
  when its subject carries "(#N)", else 1; only N with at most 3 referencing commits. `issue` a duckdb/duckdb
  issue number (>= 15000, no PR merged in the corpus) that a commit fixes / closes / resolves or names in
  "Issue #N:": every commit referencing N (as above), grade 1, at most 3. `ident` an identifier-shaped token
  (snake_case, CamelCase, A::B, dotted, CONST_NAME; >= 6 characters) of a subject or body held by that
  document alone, bare or with a word of the subject / in a phrase. `path` a changed path listed in that
  document alone (its basename too, for basename forms): full path, basename or a phrase. `error` the first
  4-9 words of an error message quoted in a body ("Binder Error: ..." and the line after "X Error:"),
  optionally with its "X Error:" prefix: every document holding the fragment (whitespace collapsed), at most
  3. Counts 72 / 50 / 60 / 40 / 60 / 50 / 40 (one random.Random(13) drawn in that order); a query text
  (lower-cased, whitespace collapsed) seen in an earlier type is dropped; each type shuffled with
  random.Random(13) and split in half (dev first); ids bw + nl|sh|pr|is|id|pa|er + 4 digits; metadata qtype,
  form, split, token (and n_rel, status); qtype.tsv lists qid, qtype, form, split, token, n_rel.

Output, in BEIR layout: OUT/NAME/corpus.jsonl, queries.jsonl, qrels/dev.tsv, qrels/test.tsv (and qtype.tsv for
pyapi, changelogs and the commits pair). The first five collections are derived from the machine's installed
files, so their content depends on what is installed, and the commits pair on the mirror's snapshot: rebuild
them where you measure, and never copy them into this repository (nothing is written under it unless you point
OUT there). pyapi depends on the `--venv` Python's version.

    PYTHONPATH=$PWD .venv/bin/python benchmarks/unseen_collections.py /tmp/unseen [--only manpages,manhelp,debpkg]
    PYTHONPATH=$PWD .venv/bin/python benchmarks/unseen_collections.py /tmp/unseen --only pyapi,changelogs
    PYTHONPATH=$PWD .venv/bin/python benchmarks/unseen_collections.py /tmp/unseen --only commits,commits_hdr \
        [--git-dir /work/.mirror/duckdb+duckdb/repo]
    hrt ingest /tmp/unseen/manpages --store /tmp/unseen/stores/manpages.duckdb
"""

from __future__ import annotations

import argparse
import bisect
import collections
import email.parser
import glob
import gzip
import hashlib
import inspect
import json
import random
import re
import subprocess
import sys
import tempfile
from pathlib import Path

SEED = 13
HERE = Path(__file__).resolve().parent
MAXLEN = 1500
GCLOUD_CAP = 600
N_PER_TYPE = 300  # pyapi, changelogs: queries per type
WORD = re.compile(r"\w")


def norm(s: str) -> str:
    """Lower-cased, whitespace collapsed, outer spaces and full stops stripped: how summaries and documents
    are compared."""
    return re.sub(r"\s+", " ", s.lower()).strip(" .")


def without(text: str, summary: str, stop_optional: bool = True) -> tuple[str, int]:
    """`text` with every verbatim occurrence of `summary` (its final full stop optional, any whitespace,
    any case) replaced by a space, and how many there were. With `stop_optional` False the words are cut
    exactly as given, a final full stop with them (pyapi, changelogs)."""
    pat = r"\s+".join(re.escape(w) for w in (summary.rstrip(".") if stop_optional else summary).split())
    return re.subn(pat, " ", text, flags=re.I) if pat else (text, 0)


def unique_docs(docs: list[dict], stats: collections.Counter) -> list[dict]:
    """The first of each group of documents whose text is the same after `norm`."""
    seen, out = set(), []
    for d in docs:
        h = hashlib.sha1(norm(d["text"]).encode()).hexdigest()
        if h in seen:
            stats["dup-doc-dropped"] += 1
            continue
        seen.add(h)
        out.append(d)
    return out


def write_corpus(out: Path, docs: list[dict]) -> None:
    """OUT/corpus.jsonl (each doc's _id, title, text, metadata) and the OUT/qrels folder."""
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    with open(out / "corpus.jsonl", "w") as fc:
        for d in docs:
            fc.write(json.dumps({"_id": d["_id"], "title": d["title"], "text": d["text"], "metadata": d["metadata"]}) + "\n")


def graded(rel: str | dict[str, int]) -> dict[str, int]:
    """A query's relevant documents as {doc id: grade}: a lone doc id is grade 1."""
    return rel if isinstance(rel, dict) else {rel: 1}


def write_queries(out: Path, rows: list[tuple], side_columns: tuple[str, ...] = ()) -> None:
    """queries.jsonl and qrels/{dev,test}.tsv from rows (query id, relevant doc id or {doc id: grade}, text,
    metadata or None, split); a lone doc id is grade 1, several are written in doc id order. With
    `side_columns`, also qtype.tsv: the query id and those metadata fields, per query (`n_rel`: the number of
    relevant documents)."""
    with open(out / "queries.jsonl", "w") as fq, open(out / "qrels/dev.tsv", "w") as fd, open(out / "qrels/test.tsv", "w") as ft:
        for f in (fd, ft):
            f.write("query-id\tcorpus-id\tscore\n")
        for qid, rel, text, meta, split in rows:
            q = {"_id": qid, "text": text}
            if meta is not None:
                q["metadata"] = meta
            fq.write(json.dumps(q) + "\n")
            for did, grade in sorted(graded(rel).items()):
                (fd if split == "dev" else ft).write(f"{qid}\t{did}\t{grade}\n")
    if side_columns:
        with open(out / "qtype.tsv", "w") as fm:
            fm.write("\t".join(("qid", *side_columns)) + "\n")
            for qid, rel, _, meta, _ in rows:
                side = {**meta, "n_rel": len(graded(rel))}
                fm.write("\t".join((qid, *(str(side.get(c, "")) for c in side_columns))) + "\n")


def write_beir(out: Path, docs: list[dict], qid_format: str, stats: collections.Counter,
               split_in_metadata: bool = False) -> None:
    """Write corpus.jsonl, queries.jsonl and qrels/{dev,test}.tsv. Each doc: {_id, title, text, metadata,
    summary, query_metadata (or None)}; its summary becomes a query unless it has fewer than 3 words or another
    document has the same one. Queries are shuffled with SEED; the first half is dev."""
    counts = collections.Counter(norm(d["summary"]) for d in docs)
    write_corpus(out, docs)
    queries = []
    for d in docs:
        if len(re.findall(r"\w+", d["summary"])) < 3:
            stats["query-too-short"] += 1
        elif counts[norm(d["summary"])] > 1:
            stats["query-dup-summary"] += 1
        else:
            queries.append((d["_id"], d["summary"], d["query_metadata"]))
    random.Random(SEED).shuffle(queries)
    half = len(queries) // 2
    rows = []
    for i, (did, text, meta) in enumerate(queries):
        split = "dev" if i < half else "test"
        if meta is not None and split_in_metadata:
            meta = {**meta, "split": split}
        rows.append((qid_format.format(i), did, text, meta, split))
    write_queries(out, rows)
    print(f"{out.name}: {dict(stats)}; docs {len(docs)}, queries {len(queries)} (dev {half}, test {len(queries) - half})",
          file=sys.stderr)


def write_typed(out: Path, docs: list[dict], typed: list[tuple[str, list]], qid_prefix: str,
                side_columns: tuple[str, ...], stats: collections.Counter) -> None:
    """pyapi, changelogs and commits: corpus.jsonl, then each query type (tag, [(doc id or {doc id: grade}, text,
    metadata)]) shuffled with SEED, cut to N_PER_TYPE and split in half (dev first), ids QID_PREFIX + tag + 4
    digits; metadata gets the split (last, or in place of a "split" key it already has), and qtype.tsv lists
    `side_columns` per query."""
    write_corpus(out, docs)
    rows = []
    for tag, qs in typed:
        random.Random(SEED).shuffle(qs)
        qs = qs[:N_PER_TYPE]
        half = len(qs) // 2
        for i, (did, text, meta) in enumerate(qs):
            split = "dev" if i < half else "test"
            rows.append((f"{qid_prefix}{tag}{i:04d}", did, text, {**meta, "split": split}, split))
    write_queries(out, rows, side_columns)
    per_type = collections.Counter(tuple(m.get(c, "") for c in ("qtype", "subtype", "split")) for _, _, _, m, _ in rows)
    print(f"{out.name}: {dict(stats)}; docs {len(docs)}, queries {dict(sorted(per_type.items()))}", file=sys.stderr)


class Holders:
    """How many documents hold a token, case-insensitively, with only word characters as boundaries (the broad
    reading: BM25 folds case, and `4.2-1` inside `3.4.2-1` or `meson.build` inside `src/meson.build` count).
    pyapi and changelogs keep an identifier query only when its token is in its own document alone."""

    def __init__(self, texts: list[str]):
        self.starts, parts, pos = [], [], 0
        for t in texts:
            self.starts.append(pos)
            parts.append(t.lower())
            pos += len(parts[-1]) + 1
        self.blob = "\x00".join(parts)

    def count(self, tok: str) -> int:
        # str.find and a look at both neighbours: the same documents as re.finditer of
        # (?<!\w)TOK(?!\w) over the blob, many times faster
        t = tok.lower()
        held, i = set(), self.blob.find(t)
        while i >= 0:
            if not (i and WORD.match(self.blob, i - 1)) and not WORD.match(self.blob, i + len(t)):
                held.add(bisect.bisect_right(self.starts, i) - 1)
            i = self.blob.find(t, i + 1)
        return len(held)


# --- man pages: a small roff / mdoc reader -------------------------------------------------------------------

ESC_CHARS = {"em": "-", "en": "-", "hy": "-", "lq": '"', "rq": '"', "aq": "'", "oq": "'", "cq": "'", "bu": "*",
             "co": "(c)", "rg": "(R)", "tm": "(TM)", "dq": '"', "ga": "`", "ha": "^", "ti": "~", "mu": "x", "<=": "<=",
             ">=": ">=", "->": "->", "<-": "<-", "Fo": "<<", "Fc": ">>", "ba": "|", "rs": "\\", "dg": "+", "sc": "S"}
STRINGS = {"(lq": '"', "(rq": '"', "R": "(R)", "(Tm": "(TM)"}
ALT = {"BR", "RB", "IR", "RI", "BI", "IB"}  # alternating fonts: arguments joined without spaces
TEXT_MACROS = {"B", "I", "SM", "SB"}
MDOC_DROP = {"Sm", "Bk", "Ek", "Ns", "Dd", "Dt", "Os", "Bl", "El", "Bd", "Ed", "Pp", "Lp", "Sx", "It"}


def unescape(s: str) -> str:
    """Roff escapes out: fonts, sizes, registers and motions dropped, named characters as ASCII, the rest removed."""
    s = re.sub(r"\\f(\[[^\]]*\]|\(..|.)", "", s)
    s = re.sub(r"\\s[+-]?\d", "", s)
    s = re.sub(r"\\\((..)", lambda m: ESC_CHARS.get(m.group(1), ""), s)
    s = re.sub(r"\\\[([^\]]*)\]", lambda m: ESC_CHARS.get(m.group(1), ""), s)
    s = re.sub(r"\\\*(\(..|\[[^\]]*\]|.)", lambda m: STRINGS.get(m.group(1), ""), s)
    s = re.sub(r"\\[nk](\(..|\[[^\]]*\]|.)", "", s)
    s = re.sub(r"\\[hvwl]'[^']*'", " ", s)
    s = s.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "").replace("\\,", "").replace("\\/", "")
    s = s.replace("\\ ", " ").replace("\\~", " ").replace("\\0", " ").replace("\\|", "").replace("\\^", "")
    s = s.replace("\\c", "").replace("\\%", "").replace("\\:", "").replace("\\(", "").replace("\\'", "'")
    s = s.replace("\\`", "`").replace('\\"', "")
    return re.sub(r"\\.", "", s)


def split_args(s: str) -> list[str]:
    """A macro's arguments: split on blanks outside double quotes, the quotes dropped."""
    out, cur, quoted = [], "", False
    for ch in s:
        if ch == '"':
            quoted = not quoted
        elif ch in " \t" and not quoted:
            if cur:
                out.append(cur)
            cur = ""
        else:
            cur += ch
    if cur:
        out.append(cur)
    return out


def parse_roff(text: str) -> dict[str, str]:
    """{SECTION TITLE: plain text} of a man (or mdoc) page; text before the first section under "_pre"."""
    sections: dict[str, list[str]] = collections.OrderedDict()
    cur = "_pre"
    sections[cur] = []
    for raw in text.splitlines():
        line = raw.rstrip()
        if line.startswith(('.\\"', "'\\\"", '\\"', '.\\\\"')) or line in (".", "'"):
            continue  # comments, empty requests
        if not line.startswith((".", "'")):
            sections[cur].append(unescape(line))
            continue
        m = re.match(r"^[.']\s*(\S+)\s*(.*)$", line)
        if not m:
            continue
        mac, rest = m.group(1), m.group(2)
        if mac in ("SH", "Sh", "SS", "Ss"):
            name = unescape(" ".join(split_args(rest))).strip().upper()
            if mac in ("SH", "Sh"):
                cur = name
                sections.setdefault(cur, [])
            else:
                sections.setdefault(cur, []).append("\n" + name + "\n")
        elif mac in ALT:
            sections[cur].append(unescape("".join(split_args(rest))))
        elif mac in TEXT_MACROS:
            sections[cur].append(unescape(" ".join(split_args(rest))))
        elif mac in ("IP", "TP"):
            args = split_args(rest)
            sections[cur].append("\n" + (unescape(args[0]) if mac == "IP" and args else ""))
        elif mac in ("PP", "P", "LP", "sp", "br", "Pp"):
            sections[cur].append("\n")
        elif mac == "Nd":
            sections[cur].append("- " + unescape(rest))
        elif mac == "Nm":
            sections[cur].append(unescape(rest))
        elif mac == "Fl":
            sections[cur].append("-" + unescape(" ".join(split_args(rest))))
        elif len(mac) == 2 and mac[0].isupper() and mac[1].islower() and mac not in MDOC_DROP:
            # other mdoc macros: keep the arguments, not the nested macro names
            sections[cur].append(unescape(" ".join(a for a in split_args(rest) if not re.fullmatch(r"[A-Z][a-z]", a))))
    out = {}
    for k, v in sections.items():
        t = re.sub(r"[ \t]+", " ", "\n".join(v))
        out[k] = re.sub(r"\n\s*\n+", "\n\n", t).strip()
    return out


def man_pages(man_root: Path, stats: collections.Counter):
    """(file, sections, NAME line, its summary, DESCRIPTION) of each English page of sections 1 and 8 that has a NAME
    summary and a DESCRIPTION of 40 characters or more (symlinks, unreadable files and `.so` redirects counted in `stats`)."""
    files = sorted((man_root / "man1").glob("*.gz")) + sorted((man_root / "man8").glob("*.gz"))
    for f in files:
        if f.is_symlink():
            stats["symlink"] += 1
            continue
        try:
            with gzip.open(f) as fh:
                text = fh.read().decode("utf-8", "replace")
        except Exception:
            stats["unreadable"] += 1
            continue
        if text.lstrip().startswith(".so "):
            stats["so-redirect"] += 1
            continue
        secs = parse_roff(text)
        name = re.sub(r"\s+", " ", secs.get("NAME", "")).strip()
        m = re.search(r"\s[-\u2013\u2014]+\s", name) or re.search(r"\s-+", name)
        if not m:
            stats["no-name-summary"] += 1
            continue
        desc = secs.get("DESCRIPTION", "")
        if len(desc) < 40:
            stats["no-description"] += 1
            continue
        yield f, secs, name, name[m.end():].strip(), desc


def build_manpages(out: Path, man_root: Path = Path("/usr/share/man")) -> None:
    stats: collections.Counter = collections.Counter()
    pages = []
    for f, secs, _, summary, desc in man_pages(man_root, stats):
        extra = [v for k, v in secs.items() if k != "DESCRIPTION" and re.search(r"OPTION|FLAGS|ARGUMENTS", k)]
        doc, n = without("\n\n".join([desc, *extra]), summary)
        stats["summary-removed-from-doc"] += bool(n)
        page = f.name[: -len(".gz")]
        group = "gcloud" if page.startswith("gcloud") else "git" if page.startswith("git") else "other"
        did = f"{f.parent.name}/{page}"
        pages.append({"_id": did, "title": page, "text": re.sub(r"[ \t]+", " ", doc).strip()[:MAXLEN],
                      "metadata": {"source": did, "group": group}, "summary": summary, "query_metadata": {"group": group}})
    gcloud = [p for p in pages if p["metadata"]["group"] == "gcloud"]
    random.Random(SEED).shuffle(gcloud)
    pages = [p for p in pages if p["metadata"]["group"] != "gcloud"] + gcloud[:GCLOUD_CAP]
    write_beir(out, unique_docs(pages, stats), "m{:05d}", stats, split_in_metadata=True)


def build_manhelp(out: Path, man_root: Path = Path("/usr/share/man"), queries: Path = HERE / "manhelp_queries.tsv") -> None:
    """The same man pages, whole (NAME line, a blank line, DESCRIPTION) and gcloud's left out, with trial CA's
    hand-written queries (benchmarks/manhelp_queries.tsv: id, type, text, relevant page ids)."""
    stats: collections.Counter = collections.Counter()
    docs = []
    for f, _, name, _, desc in man_pages(man_root, stats):
        page = f.name[: -len(".gz")]
        if page.startswith("gcloud"):
            stats["gcloud"] += 1
            continue
        did = f"{f.parent.name}/{page}"
        docs.append({"_id": did, "title": page, "text": re.sub(r"[ \t]+", " ", name + "\n\n" + desc).strip()[:MAXLEN],
                     "metadata": {"source": did}})
    docs = unique_docs(docs, stats)
    write_corpus(out, docs)
    ids, rows = {d["_id"] for d in docs}, []
    for line in queries.read_text(encoding="utf-8").splitlines():
        qid, qtype, text, rels = line.split("\t")
        rel = sorted(set(rels.split(",")))
        if not set(rel) <= ids:  # a page this machine lacks: the query is not judged here
            stats["query-page-missing"] += 1
            continue
        split = "dev" if int(hashlib.sha1(qid.encode()).hexdigest()[0], 16) % 2 == 0 else "test"
        rows.append((qid, dict.fromkeys(rel, 1), text, {"qtype": qtype, "split": split}, split))
    write_queries(out, rows, ("qtype", "split", "n_rel"))
    print(f"{out.name}: {dict(stats)}; docs {len(docs)}, queries {len(rows)}", file=sys.stderr)


def build_debpkg(out: Path) -> None:
    listing = subprocess.run(["dpkg-query", "-W", "-f", "${Package}\t${Description}\n\x1e\n"],
                             capture_output=True, text=True, check=True).stdout
    stats: collections.Counter = collections.Counter()
    docs = []
    for rec in listing.split("\n\x1e\n"):
        if not rec.strip():
            continue
        head, _, rest = rec.partition("\n")
        pkg, _, synopsis = head.partition("\t")
        synopsis = synopsis.strip()
        # extended description: one leading space per line, " ." for a blank line
        body = "\n".join("" if line.strip() == "." else line[1:] for line in rest.splitlines()).strip()
        if len(body) < 80:
            stats["no-body"] += 1
            continue
        body, n = without(body, synopsis)
        stats["summary-removed"] += bool(n)
        did = "deb/" + pkg
        docs.append({"_id": did, "title": "", "text": body[:MAXLEN], "metadata": {"source": did}, "summary": synopsis,
                     "query_metadata": None})
    write_beir(out, unique_docs(docs, stats), "d{:04d}", stats)


def build_pkgsummary(out: Path, venv: Path = Path("/work/main/.venv")) -> None:
    files = (sorted(glob.glob(f"{venv}/lib/python3*/site-packages/*.dist-info/METADATA"))
             + sorted(glob.glob("/usr/lib/python3/dist-packages/*.dist-info/METADATA"))
             + sorted(glob.glob("/usr/lib/python3/dist-packages/*.egg-info/PKG-INFO"))
             + sorted(glob.glob("/usr/lib/python3/dist-packages/*.egg-info")))  # a file for old distutils installs
    stats: collections.Counter = collections.Counter()
    pkgs: dict[str, dict] = {}
    for f in files:
        p = Path(f)
        if p.is_dir():
            continue
        msg = email.parser.Parser().parsestr(p.read_text(errors="replace"))
        name = (msg.get("Name") or "").strip()
        summary = re.sub(r"\s+", " ", msg.get("Summary") or "").strip()
        body = msg.get_payload() if not msg.is_multipart() else ""
        if not body.strip() and msg.get("Description"):
            body = re.sub(r"\n {8}", "\n", msg.get("Description"))  # Metadata 1.x folds the description
        if not name:
            stats["no-name"] += 1
            continue
        key = name.lower().replace("_", "-")
        if key in pkgs:
            stats["same-package-twice"] += 1
            continue
        if len(body.strip()) < 80:
            stats["no-body"] += 1
            continue
        doc, n = without(body, summary)
        stats["summary-removed-from-doc"] += bool(n)
        doc = re.sub(r"\n\s*\n+", "\n\n", re.sub(r"[ \t]+", " ", doc).strip())[:MAXLEN]
        did = "pkg/" + name
        pkgs[key] = {"_id": did, "title": "", "text": doc, "summary": summary, "query_metadata": None,
                     "metadata": {"source": did, "origin": "venv" if f.startswith(str(venv)) else "system"}}
    write_beir(out, unique_docs(list(pkgs.values()), stats), "p{:04d}", stats)


# --- pyapi: the standard library's docstrings ------------------------------------------------------------------

PY_MINLEN = 60
PY_SKIP = {"antigravity", "this", "idlelib", "turtle", "turtledemo", "tkinter", "test", "lib2to3", "ensurepip",
           "pydoc_data", "msvcrt", "winreg", "winsound", "nt", "ntpath", "nturl2path", "_winapi", "xxsubtype",
           "xxlimited", "xxlimited_35", "sre_compile", "sre_parse", "sre_constants", "distutils", "__future__",
           "__hello__", "__phello__", "idle", "webbrowser", "pty", "tty", "crypt", "nis", "ossaudiodev",
           "spwd", "sqlite3", "dbm", "curses", "readline", "_tkinter"}
PY_SUBMODULES = ["os.path", "email.message", "email.utils", "email.parser", "email.policy", "email.headerregistry",
                 "importlib.metadata", "importlib.resources", "importlib.util", "importlib.abc", "importlib.machinery",
                 "json.decoder", "json.encoder", "logging.handlers", "logging.config", "multiprocessing.pool",
                 "multiprocessing.managers", "multiprocessing.shared_memory", "concurrent.futures",
                 "urllib.parse", "urllib.request", "urllib.error", "urllib.robotparser", "http.client", "http.server",
                 "http.cookies", "http.cookiejar", "xml.etree.ElementTree", "xml.dom.minidom", "xml.sax.saxutils",
                 "unittest.mock", "unittest.case", "collections.abc", "asyncio.tasks", "asyncio.streams",
                 "asyncio.subprocess", "asyncio.locks", "asyncio.queues", "asyncio.events", "asyncio.base_events",
                 "wsgiref.simple_server", "wsgiref.util", "xmlrpc.client", "xmlrpc.server", "ctypes.util"]
PY_IDENT = re.compile(r"(?<![\w.])[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?![\w])")
PYAPI_WORKER = "--pyapi-objects"  # argv[1] of the child that imports the standard library


def pyapi_objects(dest: str) -> None:
    """In a child Python (`-I`): import the standard library's public modules and PY_SUBMODULES, and write to
    `dest` as JSON, per public function, class and public method (property included) of each, in order, whose
    __module__ is the module, its C accelerator `_mod` or (for os) posix, each object once:
    [module, qualname, short name, docstring or None, kind]."""
    import importlib
    import warnings

    def modules():
        names = sorted(n for n in sys.stdlib_module_names if not n.startswith("_") and n not in PY_SKIP)
        for n in names + PY_SUBMODULES:
            if n.split(".")[0] in PY_SKIP:
                continue
            try:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    yield n, importlib.import_module(n)
            except Exception as e:  # platform modules
                print(f"skip {n}: {type(e).__name__}", file=sys.stderr)

    seen, objs = set(), []
    for mname, mod in modules():
        owners = {mname, "_" + mname.split(".")[-1], mname.rsplit(".", 1)[0] + "._" + mname.split(".")[-1]}
        if mname == "os":
            owners.add("posix")
        for name, obj in sorted(vars(mod).items()):
            if name.startswith("_") or id(obj) in seen:
                continue
            if not (inspect.isfunction(obj) or inspect.isbuiltin(obj) or inspect.isclass(obj)):
                continue
            if getattr(obj, "__module__", None) not in owners:
                continue
            seen.add(id(obj))
            objs.append((mname, name, name, obj.__doc__, "class" if inspect.isclass(obj) else "function"))
            if inspect.isclass(obj):
                for mn, m in sorted(vars(obj).items()):
                    if mn.startswith("_") or id(m) in seen:
                        continue
                    f = m.__func__ if isinstance(m, (staticmethod, classmethod)) else m
                    if isinstance(m, property):
                        f = m.fget
                    if f is None or not (inspect.isfunction(f) or inspect.ismethoddescriptor(f) or inspect.isbuiltin(f)
                                         or isinstance(m, property)):
                        continue
                    seen.add(id(m))
                    objs.append((mname, f"{name}.{mn}", mn, m.__doc__, "method"))
    Path(dest).write_text(json.dumps([[*o[:3], o[3] if isinstance(o[3], str) else None, o[4]] for o in objs]))


def is_py_identifier(t: str) -> bool:
    """pyapi's identifier-shaped word: an inner underscore, a dotted name, camelCase, or a CONSTANT of at least 5
    characters or with an underscore; at least 4 characters, no dunder."""
    t = t.strip(".")
    if len(t) < 4 or t.startswith("_") and t.endswith("_"):
        return False
    inner_us = "_" in t.strip("_")
    dotted = "." in t and all(p for p in t.split("."))
    camel = any(c.islower() for c in t) and any(c.isupper() for c in t[1:])
    const = t.isupper() and (len(t) >= 5 or "_" in t)
    return inner_us or dotted or camel or const


def first_sentence(doc: str) -> str:
    """The first sentence (up to . ! or ? and a space) of the first paragraph, whitespace collapsed."""
    para = re.split(r"\n\s*\n", doc.strip(), maxsplit=1)[0]
    flat = re.sub(r"\s+", " ", para).strip()
    m = re.match(r"(.+?[.!?])(?:\s|$)", flat)
    return (m.group(1) if m else flat).strip()


def build_pyapi(out: Path, python: Path = Path("/work/main/.venv/bin/python")) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        dest = Path(tmp) / "objects.json"
        subprocess.run([str(python), "-I", str(Path(__file__).resolve()), PYAPI_WORKER, str(dest)], check=True)
        objs = json.loads(dest.read_text())
    stats: collections.Counter = collections.Counter()
    docs = []
    for mname, qual, short, raw, kind in objs:
        if not isinstance(raw, str) or not raw.strip():
            stats["no-docstring"] += 1
            continue
        lines = inspect.cleandoc(raw).splitlines()
        # leading signature line(s): "name(...)", "name(...) -> x", "S.name(...)" etc.
        while lines and re.match(rf"^\s*(?:[\w.]+\.)?{re.escape(short)}\s*\(.*", lines[0]):
            lines.pop(0)
            stats["signature-line-removed"] += 1
        while lines and lines[0].strip() in ("", "--"):
            lines.pop(0)
        doc = "\n".join(lines).strip()
        if not doc:
            stats["only-signature"] += 1
            continue
        sent = first_sentence(doc)
        body = doc
        for name in {f"{mname}.{qual}"} | ({qual} if "." in qual else set()):
            body = re.sub(rf"(?<![\w.]){re.escape(name)}(?![\w])", " ", body)
        body = without(body, sent, stop_optional=False)[0].strip()[:MAXLEN]
        if len(body) < PY_MINLEN:
            stats["too-short-after-cut"] += 1
            continue
        docs.append({"_id": f"py/{mname}.{qual}", "title": "", "text": body, "metadata": {"module": mname, "kind": kind},
                     "sent": sent, "short": qual if "." in qual else f"{mname}.{qual}"})
    docs = unique_docs(docs, stats)
    # document frequency of identifier tokens (verbatim, word-bounded, case-sensitive)
    df: collections.Counter = collections.Counter()
    toks_of = {}
    for d in docs:
        toks_of[d["_id"]] = {t for t in {t.rstrip(".") for t in PY_IDENT.findall(d["text"])} if is_py_identifier(t)}
        df.update(toks_of[d["_id"]])
    rng = random.Random(SEED)
    ident, nl = [], []
    sent_count = collections.Counter(norm(d["sent"]) for d in docs)
    all_norm = [norm(d["text"]) for d in docs]
    holders = Holders([d["text"] for d in docs])
    for d in docs:
        kind = d["metadata"]["kind"]
        own = {p.lower() for p in d["_id"][3:].split(".")} | {d["short"].lower(), d["_id"][3:].lower()}
        cands = sorted(t for t in toks_of[d["_id"]]
                       if df[t] == 1 and t.lower() not in own and t.split(".")[-1].lower() not in own)
        cands = [t for t in cands if holders.count(t) == 1]
        if cands:
            tok = rng.choice(cands)
            ident.append((d["_id"], f"{d['short']} {tok}", {"qtype": "identifier", "token": tok, "kind": kind}))
        s = d["sent"]
        if len(re.findall(r"\w+", s)) < 4:
            stats["nl-too-short"] += 1
        elif sent_count[norm(s)] > 1:
            stats["nl-dup-sentence"] += 1
        elif any(norm(s) in t for t in all_norm):
            stats["nl-sentence-in-some-doc"] += 1
        else:
            nl.append((d["_id"], s, {"qtype": "nl", "kind": kind}))
    stats["ident-candidates"], stats["nl-candidates"] = len(ident), len(nl)
    write_typed(out, docs, [("i", ident), ("n", nl)], "p", ("qtype", "split", "token"), stats)


# --- changelogs: Debian changelog entries ----------------------------------------------------------------------

CL_PER_SOURCE = 12
CL_HEADER = re.compile(r"^([a-z0-9][a-z0-9.+-]*) \(([^)\s]+)\) ([^;]*);.*$", re.M)
CL_CVE = re.compile(r"\bCVE-\d{4}-\d{4,}\b", re.I)
CL_BUG = re.compile(r"(?<![\w#])#(\d{5,7})\b")
CL_IDENT = re.compile(r"(?<![\w./@-])[A-Za-z_][A-Za-z0-9_]*(?:\.[A-Za-z_][A-Za-z0-9_]*)*(?![\w@/-])")


def is_cl_identifier(t: str) -> bool:
    """changelogs' identifier: at least 5 characters, no dunder; an inner underscore, camelCase (not "ABcdef"),
    a CONST_NAME, or a dotted name with an underscore or a lower-case start after a dot (no host names, version
    numbers or more than 4 parts)."""
    if len(t) < 5 or t.startswith("_") and t.endswith("_"):
        return False
    parts = t.split(".")
    if "." in t and (len(parts) > 4 or any(p.isdigit() for p in parts) or re.search(r"\.(org|com|net|de|io)$", t)):
        return False
    inner_us = "_" in t.strip("_")
    dotted = "." in t and all(parts) and not t.endswith(".") and any("_" in p or p[:1].islower() for p in parts[1:])
    camel = bool(re.search(r"[a-z][A-Z]", t)) and not re.match(r"^[A-Z]{2}[a-z]+$", t)
    const = t.isupper() and "_" in t
    return inner_us or dotted or camel or const


def changelog_entries(text: str):
    """(source, version, block) per entry: its header line through the " -- " trailer line."""
    heads = list(CL_HEADER.finditer(text))
    for i, m in enumerate(heads):
        end = heads[i + 1].start() if i + 1 < len(heads) else len(text)
        block = text[m.start():end].rstrip()
        tr = re.search(r"^ -- .*$", block, re.M)
        if tr:  # drop anything after the trailer (comments, editor variables at the end of the file)
            block = block[:tr.end()]
        yield m.group(1), m.group(2), block


def first_change(block: str) -> str:
    """The entry's first change line ("  * ..." or "  - ...") with its continuation lines, joined."""
    lines = block.splitlines()[1:]
    for i, line in enumerate(lines):
        m = re.match(r"^\s{2,4}[*-] (.*)$", line)
        if m:
            out = [m.group(1)]
            for c in lines[i + 1:]:
                if re.match(r"^\s{4,6}\S", c) and not re.match(r"^\s*[*\-+] ", c) and not c.strip().startswith("["):
                    out.append(c.strip())
                else:
                    break
            return " ".join(out).strip()
    return ""


def build_changelogs(out: Path, doc_root: Path = Path("/usr/share/doc")) -> None:
    stats: collections.Counter = collections.Counter()
    seen_files, seen_keys, docs = set(), set(), []
    for f in sorted(glob.glob(f"{doc_root}/*/changelog.Debian.gz")):
        try:
            with gzip.open(f) as fh:
                raw = fh.read()
            text = raw.decode("utf-8")
        except (OSError, UnicodeDecodeError, EOFError):
            stats["unreadable"] += 1
            continue
        h = hashlib.sha1(raw).hexdigest()
        if h in seen_files:
            stats["dup-file"] += 1
            continue
        seen_files.add(h)
        kept = 0
        for src, ver, block in changelog_entries(text):
            if (src, ver) in seen_keys:  # binary packages of one source share a changelog
                stats["dup-entry-key"] += 1
                continue
            seen_keys.add((src, ver))
            if kept >= CL_PER_SOURCE:
                stats["over-cap"] += 1
                continue
            body = "\n".join(line for line in block.splitlines()[1:] if not line.startswith(" -- "))
            if len(body.strip()) < 80:
                stats["too-short"] += 1
                continue
            kept += 1
            docs.append({"_id": f"cl/{src}/{ver}", "title": "", "metadata": {"source": src}, "src": src, "ver": ver,
                         "block": block, "first": first_change(block)})
    # NL: the first change line, cut from the entry (the cut text serves every query type)
    fc = collections.Counter(norm(d["first"]) for d in docs if d["first"])
    for d in docs:
        s = d["first"]
        d["nl_ok"] = bool(s) and len(re.findall(r"\w+", s)) >= 5 and fc[norm(s)] == 1
        if d["nl_ok"]:
            d["text"] = without(d["block"], s, stop_optional=False)[0]
            d["text"] = re.sub(r"^(\s{2,4})[*-]\s*$\n?", "", d["text"], count=1, flags=re.M)
            rest = "\n".join(line for line in d["text"].splitlines()[1:] if not line.startswith(" -- "))
            if len(rest.strip()) < 60:  # too little left once the query is cut: no NL query, keep it whole
                d["nl_ok"] = False
                stats["nl-too-little-left"] += 1
        if not d["nl_ok"]:
            d["text"] = d["block"]
        d["text"] = d["text"][:MAXLEN]
    docs = unique_docs(docs, stats)
    norms = [norm(d["text"]) for d in docs]
    # document frequencies
    df_cve, df_bugnum, df_ident = collections.Counter(), collections.Counter(), collections.Counter()
    df_ver = collections.Counter(d["ver"] for d in docs)
    for d in docs:
        t = d["text"]
        d["cves"] = {c.upper() for c in CL_CVE.findall(t)}
        d["bugs"] = set(CL_BUG.findall(t))
        d["idents"] = {x for x in CL_IDENT.findall(t) if is_cl_identifier(x)}
        df_cve.update(d["cves"])
        df_bugnum.update(set(re.findall(r"(?<![\w.])\d{5,7}(?![\w.])", t)) | d["bugs"])
        df_ident.update(d["idents"])
    rng = random.Random(SEED)
    holders = Holders([d["text"] for d in docs])
    cand = collections.defaultdict(list)
    for d in docs:
        c = sorted(x for x in d["cves"] if df_cve[x] == 1 and holders.count(x) == 1)
        if c:
            tok = rng.choice(c)
            cand["cve"].append((d["_id"], tok, tok))
        b = sorted(x for x in d["bugs"] if df_bugnum[x] == 1 and holders.count(x) == 1)
        if b:
            tok = "#" + rng.choice(b)
            cand["bug"].append((d["_id"], tok, tok))
        # own version: in this entry's header, and in no other entry's text
        if df_ver[d["ver"]] == 1 and re.search(r"[.\-+~]", d["ver"]) and holders.count(d["ver"]) == 1:
            cand["version"].append((d["_id"], f"{d['src']} {d['ver']}", d["ver"]))
        i = sorted(x for x in d["idents"] if df_ident[x] == 1 and x.lower() != d["src"].lower() and holders.count(x) == 1)
        if i:
            tok = rng.choice(i)
            line = next(ln for ln in d["text"].splitlines() if re.search(r"(?<![\w.])" + re.escape(tok) + r"(?![\w])", ln))
            words = [w for w in re.findall(r"[A-Za-z]{3,}", line.replace(tok, " ")) if w.lower() not in tok.lower()][:3]
            cand["ident"].append((d["_id"], " ".join([*words, tok]), tok))
    for k, v in cand.items():
        stats[f"cand-{k}"] = len(v)
    # balanced identifier sample: N_PER_TYPE/4 of each subtype, topped up from the others' rest
    quota = N_PER_TYPE // 4
    pools = {k: random.Random(SEED).sample(v, len(v)) for k, v in sorted(cand.items())}
    ident = [(did, text, {"qtype": "identifier", "subtype": k, "token": tok})
             for k, v in pools.items() for did, text, tok in v[:quota]]
    rest = [(did, text, {"qtype": "identifier", "subtype": k, "token": tok})
            for k, v in pools.items() for did, text, tok in v[quota:]]
    random.Random(SEED).shuffle(rest)
    ident += rest[: N_PER_TYPE - len(ident)]
    nl = []
    for d in docs:
        if not d["nl_ok"]:
            continue
        s = norm(d["first"])
        if any(s in n for n in norms):
            stats["nl-in-some-doc"] += 1
            continue
        nl.append((d["_id"], d["first"], {"qtype": "nl", "subtype": "first-change"}))
    stats["cand-nl"] = len(nl)
    write_typed(out, docs, [("i", ident), ("n", nl)], "c", ("qtype", "subtype", "split", "token"), stats)


# --- commits: duckdb/duckdb's git history (user trial BW) -------------------------------------------------------

GIT_DIR = Path("/work/.mirror/duckdb+duckdb/repo")
CM_N = 3000
CM_BODY_CAP = 4000
CM_FILES_CAP = 50
CM_COUNTS = {"sha": 50, "pr": 60, "issue": 40, "ident": 60, "path": 50, "error": 40}
CM_TAG = {"nl": "nl", "sha": "sh", "pr": "pr", "issue": "is", "ident": "id", "path": "pa", "error": "er"}
CM_STOP = {"a", "an", "the", "of", "to", "in", "on", "for", "and", "or", "with", "without", "from", "by", "into", "as",
           "at", "is", "are", "be", "not", "no", "only", "when", "that", "this", "it", "its", "use", "using", "add",
           "adds", "fix", "fixes", "fixed", "make", "support", "allow", "remove", "move", "more", "some", "via",
           "per", "all"}  # words of a subject not used beside an identifier
CM_PR = re.compile(r"\(#(\d+)\)\s*$")
CM_ISSUE = re.compile(r"(?i)\b(?:fix(?:es|ed)?|close[sd]?|resolve[sd]?|issue)\s*:?\s+"
                      r"(?:#|https://github\.com/duckdb/duckdb/issues/)(\d{5})\b")
CM_IDENT = re.compile(r"(?<![\w./:-])("
                      r"[A-Za-z_]\w*::\w+(?:::\w+)*"            # A::B
                      r"|[a-z][a-z0-9]*(?:_[a-z0-9]+)+"         # snake_case
                      r"|[A-Z][A-Z0-9]*(?:_[A-Z0-9]+)+"         # CONST_NAME
                      r"|[A-Z]?[a-z]+(?:[A-Z][a-z0-9]+)+"       # camelCase / PascalCase
                      r"|[a-z_]\w*\.[a-z_]\w*(?:\.\w+)*"        # dotted
                      r")(?![\w/-])")
CM_FILE_EXT = re.compile(r"\.(cpp|hpp|h|c|py|test|md|txt|json|yml|yaml|cmake|sh|csv|parquet|db)$", re.I)
CM_ERROR = re.compile(r"\b((?:[A-Z][A-Za-z]+ )?Error):[ \t]*\n?[ \t]*(?:-- )?([^\n]{12,})")


def check_git_dir(git_dir: Path) -> None:
    """Exit with a message naming `git_dir` unless it is a git directory with a `main` branch."""
    ok = git_dir.is_dir() and subprocess.run(["git", "--git-dir", str(git_dir), "rev-parse", "--verify", "-q", "main"],
                                             capture_output=True).returncode == 0
    if not ok:
        sys.exit(f"commits: no git directory with a `main` branch at {git_dir} (duckdb/duckdb's history is a "
                 "fetched mirror, not part of a clean machine; pass --git-dir DIR, e.g. a `git clone --mirror "
                 "https://github.com/duckdb/duckdb` DIR, whose newer history gives a different collection)")


def commit_log(git_dir: Path) -> list[dict]:
    """The CM_N most recent first-parent commits of `main`, newest first: sha, date (author, ISO), subject, body,
    files [(status, path)] against the first parent."""
    raw = subprocess.run(["git", "--git-dir", str(git_dir), "log", "--first-parent", "main", f"-{CM_N}",
                          "--format=%x1e%H%x1f%aI%x1f%s%x1f%b%x1f", "--diff-merges=first-parent", "--name-status",
                          "--no-renames"], capture_output=True, text=True, check=True).stdout
    out = []
    for rec in raw.split("\x1e")[1:]:
        sha, date, subj, body, rest = rec.split("\x1f")
        files = [ln.split("\t", 1) for ln in rest.strip().splitlines() if ln.strip()]
        out.append({"sha": sha, "date": date, "subject": subj.strip(), "body": body.strip(),
                    "files": [(s, p) for s, p in files]})
    return out


def commit_text(c: dict, header: bool = False) -> str:
    """Subject, body (CM_BODY_CAP characters) and "Files changed:" (CM_FILES_CAP paths), blank-line separated;
    with `header`, "commit SHA" and "Date: DATE" first, as `git log` prints them."""
    paths = [p for _, p in c["files"][:CM_FILES_CAP]]
    more = len(c["files"]) - len(paths)
    parts = [c["subject"], *([c["body"][:CM_BODY_CAP]] if c["body"] else [])]
    if paths:
        parts.append("Files changed:\n" + "\n".join(paths) + (f"\n(+{more} more files)" if more > 0 else ""))
    text = "\n\n".join(parts)
    return f"commit {c['sha']}\nDate: {c['date']}\n\n{text}" if header else text


def collapse(s: str) -> str:
    """Lower-cased, whitespace collapsed (commits: how error fragments and paraphrases are compared)."""
    return re.sub(r"\s+", " ", s.lower()).strip()


class CommitSet:
    """The commits with their header-less texts, and which of them hold a token.

    `holding` reads tokens the way Holders does, through an index of the texts' words instead of a scan of
    them all (some 40k tokens over 5 MB): at each place a text holds a token with no word character on either
    side, every word (maximal run of word characters) of the token is a whole word of the text."""

    def __init__(self, commits: list[dict]):
        self.commits = commits
        self.shas = [c["sha"] for c in commits]
        self.by_sha = {c["sha"]: c for c in commits}
        self.lows = {c["sha"]: commit_text(c).lower() for c in commits}
        self.flat = {s: collapse(t) for s, t in self.lows.items()}
        self.word_docs: dict[str, set[str]] = collections.defaultdict(set)
        self.hex7_docs: dict[str, set[str]] = collections.defaultdict(set)  # every 7 characters of a hex run
        for s, low in self.lows.items():
            for w in set(re.findall(r"\w+", low)):
                self.word_docs[w].add(s)
            for run in re.findall(r"[0-9a-f]{7,}", low):
                for k in range(len(run) - 6):
                    self.hex7_docs[run[k:k + 7]].add(s)
        self.num_re: dict[str, re.Pattern] = {}

    def holding(self, tok: str) -> list[str]:
        """Commits holding tok case-insensitively, no word character on either side, in corpus order."""
        t = tok.lower()
        words = re.findall(r"\w+", t)
        cand = set.intersection(*(self.word_docs.get(w, set()) for w in words)) if words else set(self.shas)
        return [s for s in self.shas if s in cand and holds(self.lows[s], t)]

    def mentioning(self, sha7: str) -> list[str]:
        """Commits whose text holds the 7 hex digits sha7 anywhere (inside a longer hex run too)."""
        return [s for s in self.shas if s in self.hex7_docs.get(sha7, ())]

    def refs(self, n: str) -> list[str]:
        """Commits whose text references number n: #n, /pull/n, /issues/n, or n as a bare word."""
        pat = self.num_re.setdefault(n, re.compile(r"(?<![\w.])" + n + r"(?![\w.])"))
        return [s for s, low in self.lows.items() if n in low and pat.search(low)]


def holds(low: str, t: str) -> bool:
    """Whether `low` holds `t` with no word character on either side (as Holders.count reads it)."""
    i = low.find(t)
    while i >= 0:
        if not (i and WORD.match(low, i - 1)) and not WORD.match(low, i + len(t)):
            return True
        i = low.find(t, i + 1)
    return False


def commit_pr(subject: str) -> str:
    """The N of a subject's trailing "(#N)", or ""."""
    m = CM_PR.search(subject)
    return m.group(1) if m else ""


# Each query maker returns [(text, form, {sha: grade}, extra metadata)]; they share one random.Random(SEED),
# called in the order of CM_TAG.

def cm_nl(cs: CommitSet, rng: random.Random, stats: collections.Counter) -> list[tuple]:
    from commit_paraphrases import NL

    def core(subj: str) -> str:
        return collapse(re.sub(r"\(#\d+\)", " ", subj))
    cores = collections.defaultdict(list)
    for c in cs.commits:
        cores[core(c["subject"])].append(c["sha"])
    out = []
    for pre, q in NL.items():
        m = [s for s in cs.shas if s.startswith(pre)]
        assert len(m) == 1, f"paraphrase key {pre} names {len(m)} commits"
        assert collapse(q) not in cs.flat[m[0]], f"paraphrase {pre} copies the commit's text"
        out.append((q, "paraphrase", {s: 1 for s in cores[core(cs.by_sha[m[0]]["subject"])]}, {"token": ""}))
    return out


def cm_sha(cs: CommitSet, rng: random.Random, stats: collections.Counter) -> list[tuple]:
    cands = []
    for s in cs.shas:
        if cs.mentioning(s[:7]) not in ([], [s]):  # some other text mentions this commit: skip
            stats["sha-mentioned-elsewhere"] += 1
            continue
        cands.append(s)
    rng.shuffle(cands)
    forms = ["{p7}", "{p10}", "commit {p8}", "the commit {p7}", "what changed in {p9}", "{p7} commit details"]
    out = []
    for i, s in enumerate(cands[:CM_COUNTS["sha"]]):
        f = forms[i % len(forms)]
        p = {f"p{k}": s[:k] for k in (7, 8, 9, 10)}
        tok = next(v for k, v in p.items() if "{" + k + "}" in f)
        assert sum(o.startswith(tok) for o in cs.shas) == 1
        # the form of a "{pK} ..." query is "{pK}" (as trial BW recorded it)
        form = f.split(" ")[0] if f.startswith("{") else f.replace("{", "<").replace("}", ">")
        out.append((f.format(**p), form, {s: 1}, {"token": tok}))
    return out


def cm_refs(cs: CommitSet, numbers: list[str], forms: list[str], qtype: str, grade, stats: collections.Counter) -> list[tuple]:
    """Queries for the first CM_COUNTS[qtype] of `numbers` (shuffled) that at most 3 commits reference, in `forms` by
    turns; `grade(sha, n)` is a referencing commit's grade."""
    out = []
    for n in numbers:
        if len(out) >= CM_COUNTS[qtype]:
            break
        r = cs.refs(n)
        if not r or len(r) > 3:
            stats[f"{qtype}-too-many-refs"] += 1
            continue
        f = forms[len(out) % len(forms)]
        out.append((f.format(n=n), f.replace("{n}", "N"), {s: grade(s, n) for s in r}, {"token": n, "n_rel": len(r)}))
    return out


def cm_pr(cs: CommitSet, rng: random.Random, stats: collections.Counter) -> list[tuple]:
    prs = sorted({commit_pr(c["subject"]) for c in cs.commits} - {""})
    rng.shuffle(prs)
    forms = ["PR #{n}", "#{n}", "what changed in PR #{n}", "pull request {n}", "#{n} fix", "PR {n}"]
    return cm_refs(cs, prs, forms, "pr", lambda s, n: 2 if re.search(r"\(#" + n + r"\)", cs.by_sha[s]["subject"]) else 1, stats)


def cm_issue(cs: CommitSet, rng: random.Random, stats: collections.Counter) -> list[tuple]:
    merged = {commit_pr(c["subject"]) for c in cs.commits} - {""}
    iss = set()
    for c in cs.commits:
        for m in CM_ISSUE.finditer(c["subject"] + "\n" + c["body"]):
            if int(m.group(1)) >= 15000 and m.group(1) not in merged:
                iss.add(m.group(1))
    iss = sorted(iss)
    rng.shuffle(iss)
    forms = ["issue #{n}", "fixes #{n}", "#{n}", "which commit fixed issue {n}", "#{n} fix", "GH issue {n}"]
    return cm_refs(cs, iss, forms, "issue", lambda s, n: 1, stats)


def cm_ident(cs: CommitSet, rng: random.Random, stats: collections.Counter) -> list[tuple]:
    seen_tok, cand = set(), []
    for c in cs.commits:
        toks = []
        for m in CM_IDENT.finditer(c["subject"] + "\n" + c["body"][:CM_BODY_CAP]):
            tok = m.group(1).rstrip(".")
            if len(tok) < 6 or tok.lower() in seen_tok or CM_FILE_EXT.search(tok) or tok.startswith(("http", "www.")):
                continue
            seen_tok.add(tok.lower())
            toks.append(tok)
        cand += [(c["sha"], tok) for tok in toks if cs.holding(tok) == [c["sha"]]]
    rng.shuffle(cand)
    used_docs = set()
    forms = ["{tok}", "{tok} {word}", "when did we change {tok}", "{word} {tok}", "commit that touched {tok}"]
    out = []
    for sha, tok in cand:
        if len(out) >= CM_COUNTS["ident"]:
            break
        if sha in used_docs:
            continue
        words = [w for w in re.findall(r"[A-Za-z]{4,}", cs.by_sha[sha]["subject"])
                 if w.lower() not in CM_STOP and w.lower() not in tok.lower()]
        f = forms[len(out) % len(forms)]
        if "{word}" in f and not words:
            f = "{tok}"
        word = words[rng.randrange(len(words))].lower() if words else ""
        used_docs.add(sha)
        out.append((f.format(tok=tok, word=word), f.replace("{tok}", "T").replace("{word}", "W"), {sha: 1},
                    {"token": tok}))
    return out


def cm_path(cs: CommitSet, rng: random.Random, stats: collections.Counter) -> list[tuple]:
    cand = []
    for c in cs.commits:
        for status, p in c["files"][:CM_FILES_CAP]:
            base = p.rsplit("/", 1)[-1]
            if len(base) < 8 or "." not in base or cs.holding(p) != [c["sha"]]:
                continue
            cand.append((c["sha"], p, base, status, cs.holding(base) == [c["sha"]]))
    rng.shuffle(cand)
    used_docs = set()
    forms = ["{path}", "{base}", "commit that added {path}", "changes to {base}", "{path} change"]
    out = []
    for sha, p, base, status, base_unique in cand:
        if len(out) >= CM_COUNTS["path"]:
            break
        if sha in used_docs:
            continue
        f = forms[len(out) % len(forms)]
        if "{base}" in f and not base_unique or "added" in f and status != "A":
            f = "{path}"
        used_docs.add(sha)
        out.append((f.format(path=p, base=base), f.replace("{path}", "P").replace("{base}", "B"), {sha: 1},
                    {"token": base if "{base}" in f else p, "status": status}))
    return out


def cm_error(cs: CommitSet, rng: random.Random, stats: collections.Counter) -> list[tuple]:
    cand, seen_frag = [], set()
    for c in cs.commits:
        for m in CM_ERROR.finditer(c["body"][:CM_BODY_CAP]):
            etype, msg = m.group(1), m.group(2).strip().strip("`").strip()
            words = msg.split()
            if len(words) < 4 or not re.match(r"[A-Za-z\"']", msg):
                continue
            k = min(len(words), 4 + rng.randrange(6))
            frag = " ".join(words[:k]).rstrip(".,:;")
            if len(frag) < 20 or collapse(frag) in seen_frag:
                continue
            seen_frag.add(collapse(frag))
            h = [s for s, t in cs.flat.items() if collapse(frag) in t]
            if not h or len(h) > 3:
                stats["error-too-many"] += 1
                continue
            cand.append((etype, frag, h))
    rng.shuffle(cand)
    out = []
    for etype, frag, h in cand[:CM_COUNTS["error"]]:
        with_type = len(out) % 2 == 1
        q = f"{etype}: {frag}" if with_type else frag
        if with_type and sorted(s for s in h if collapse(q) in cs.flat[s]) != sorted(h):
            q, with_type = frag, False  # the typed form must still be held by the same documents
        out.append((q, "type+message" if with_type else "message", {s: 1 for s in h},
                    {"token": frag, "n_rel": len(h)}))
    return out


CM_MAKERS = {"nl": cm_nl, "sha": cm_sha, "pr": cm_pr, "issue": cm_issue, "ident": cm_ident, "path": cm_path,
             "error": cm_error}


def build_commits(out: Path, git_dir: Path = GIT_DIR, header: bool = False) -> None:
    check_git_dir(git_dir)
    commits = commit_log(git_dir)
    cs = CommitSet(commits)
    stats: collections.Counter = collections.Counter()
    rng = random.Random(SEED)
    typed, seen_q = [], set()
    for qt, make in CM_MAKERS.items():
        qs = []
        for text, form, rel, extra in make(cs, rng, stats):
            if collapse(text) in seen_q:  # the same query (whitespace and case aside) as an earlier one
                stats["dup-query"] += 1
                continue
            seen_q.add(collapse(text))
            # "split" here only for the key order (qtype, form, split, ...); write_typed fills it in
            qs.append((rel, text, {"qtype": qt, "form": form, "split": "", **extra}))
        typed.append((CM_TAG[qt], qs))
    docs = [{"_id": c["sha"], "title": c["subject"], "text": commit_text(c, header),
             "metadata": {"date": c["date"], "pr": commit_pr(c["subject"]), "files": len(c["files"])}}
            for c in commits]
    print(f"{out.name}: commits {len(commits)} ({commits[-1]['sha'][:10]} {commits[-1]['date']} .. "
          f"{commits[0]['sha'][:10]} {commits[0]['date']})", file=sys.stderr)
    write_typed(out, docs, typed, "bw", ("qtype", "form", "split", "token", "n_rel"), stats)


def build_commits_hdr(out: Path, git_dir: Path = GIT_DIR) -> None:
    build_commits(out, git_dir, header=True)


BUILDERS = {"manpages": build_manpages, "manhelp": build_manhelp, "debpkg": build_debpkg, "pkgsummary": build_pkgsummary, "pyapi": build_pyapi,
            "changelogs": build_changelogs, "commits": build_commits, "commits_hdr": build_commits_hdr}
FROM_GIT = ("commits", "commits_hdr")  # read --git-dir, a fetched mirror: built only when --only names them


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="Folder to write OUT/NAME/ into (outside the repository).")
    ap.add_argument("--only", default=",".join(n for n in BUILDERS if n not in FROM_GIT),
                    help="Comma-separated: " + ", ".join(BUILDERS) + " (default: all but " + ", ".join(FROM_GIT)
                    + ", which need --git-dir).")
    ap.add_argument("--venv", type=Path, default=Path("/work/main/.venv"),
                    help="The venv whose packages pkgsummary reads and whose Python's standard library pyapi reads.")
    ap.add_argument("--git-dir", type=Path, default=GIT_DIR,
                    help="duckdb/duckdb's git directory (a bare mirror) that commits and commits_hdr read.")
    args = ap.parse_args()
    names = args.only.split(",")
    unknown = [n for n in names if n not in BUILDERS]
    if unknown:
        ap.error(f"unknown collection(s) {', '.join(unknown)}; known: {', '.join(BUILDERS)}")
    if any(n in FROM_GIT for n in names):
        check_git_dir(args.git_dir)  # before anything is built
    for name in names:
        if name == "pkgsummary":
            build_pkgsummary(args.out / name, args.venv)
        elif name == "pyapi":
            build_pyapi(args.out / name, args.venv / "bin" / "python")
        elif name in FROM_GIT:
            BUILDERS[name](args.out / name, args.git_dir)
        else:
            BUILDERS[name](args.out / name)


if __name__ == "__main__":
    if sys.argv[1:2] == [PYAPI_WORKER]:
        pyapi_objects(sys.argv[2])
    else:
        main()
