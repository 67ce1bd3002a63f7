"""Three known-item collections built from this machine's own files, for judging a preset on text nobody tuned on.

The shared collections have been looked at by every earlier choice of `default`; these three are new text of a
kind the toolkit's users search (technical reference prose), built from files every Debian/Ubuntu machine with
the project's virtual environment has. Each is a known-item task: a one-line summary that a document's author
wrote is the query, and the document it summarises, with that line removed, is the one relevant document.

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

In all three: every verbatim occurrence of the query (case-insensitive, any whitespace) is cut from its
document, which is then truncated to 1500 characters; documents with too little text (description under 40
characters for man pages, under 80 for the others) are dropped, and of byte-identical documents (after
lower-casing and collapsing whitespace) only the first is kept. A document gets no query when its summary has
fewer than 3 words or is shared with another document (it would have two right answers), but stays in the
corpus as a distractor. Queries are shuffled with random.Random(13) and split in half: the first half is dev,
the rest test (ids m00000.., d0000.., p0000.. in shuffled order). Every relevant document has grade 1.

Output, in BEIR layout: OUT/NAME/corpus.jsonl, queries.jsonl, qrels/dev.tsv, qrels/test.tsv. The collections are
derived from the machine's installed files, so their content depends on what is installed: rebuild them
where you measure, and never copy them into this repository (nothing is written under it unless you
point OUT there).

    PYTHONPATH=$PWD .venv/bin/python benchmarks/unseen_collections.py /tmp/unseen [--only manpages,debpkg]
    hrt ingest /tmp/unseen/manpages --store /tmp/unseen/stores/manpages.duckdb
"""

from __future__ import annotations

import argparse
import collections
import email.parser
import glob
import gzip
import hashlib
import json
import random
import re
import subprocess
import sys
from pathlib import Path

SEED = 13
MAXLEN = 1500
GCLOUD_CAP = 600


def norm(s: str) -> str:
    """Lower-cased, whitespace collapsed, outer spaces and full stops stripped: how summaries and documents
    are compared."""
    return re.sub(r"\s+", " ", s.lower()).strip(" .")


def without(text: str, summary: str) -> tuple[str, int]:
    """`text` with every verbatim occurrence of `summary` (its final full stop optional, any whitespace,
    any case) replaced by a space, and how many there were."""
    pat = r"\s+".join(re.escape(w) for w in summary.rstrip(".").split())
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


def write_beir(out: Path, docs: list[dict], qid_format: str, stats: collections.Counter,
               split_in_metadata: bool = False) -> None:
    """Write corpus.jsonl, queries.jsonl and qrels/{dev,test}.tsv. Each doc: {_id, title, text, metadata,
    summary, query_metadata (or None)}; its summary becomes a query unless it has fewer than 3 words or another
    document has the same one. Queries are shuffled with SEED; the first half is dev."""
    counts = collections.Counter(norm(d["summary"]) for d in docs)
    (out / "qrels").mkdir(parents=True, exist_ok=True)
    queries = []
    with open(out / "corpus.jsonl", "w") as fc:
        for d in docs:
            fc.write(json.dumps({"_id": d["_id"], "title": d["title"], "text": d["text"], "metadata": d["metadata"]}) + "\n")
            if len(re.findall(r"\w+", d["summary"])) < 3:
                stats["query-too-short"] += 1
            elif counts[norm(d["summary"])] > 1:
                stats["query-dup-summary"] += 1
            else:
                queries.append((d["_id"], d["summary"], d["query_metadata"]))
    random.Random(SEED).shuffle(queries)
    half = len(queries) // 2
    with open(out / "queries.jsonl", "w") as fq, open(out / "qrels/dev.tsv", "w") as fd, open(out / "qrels/test.tsv", "w") as ft:
        for f in (fd, ft):
            f.write("query-id\tcorpus-id\tscore\n")
        for i, (did, text, meta) in enumerate(queries):
            qid = qid_format.format(i)
            split = "dev" if i < half else "test"
            q = {"_id": qid, "text": text}
            if meta is not None:
                q["metadata"] = {**meta, "split": split} if split_in_metadata else meta
            fq.write(json.dumps(q) + "\n")
            (fd if split == "dev" else ft).write(f"{qid}\t{did}\t1\n")
    print(f"{out.name}: {dict(stats)}; docs {len(docs)}, queries {len(queries)} (dev {half}, test {len(queries) - half})",
          file=sys.stderr)


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


def build_manpages(out: Path, man_root: Path = Path("/usr/share/man")) -> None:
    files = sorted((man_root / "man1").glob("*.gz")) + sorted((man_root / "man8").glob("*.gz"))
    stats: collections.Counter = collections.Counter()
    pages = []
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
        summary = name[m.end():].strip()
        desc = secs.get("DESCRIPTION", "")
        if len(desc) < 40:
            stats["no-description"] += 1
            continue
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


BUILDERS = {"manpages": build_manpages, "debpkg": build_debpkg, "pkgsummary": build_pkgsummary}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("out", type=Path, help="Folder to write OUT/NAME/ into (outside the repository).")
    ap.add_argument("--only", default=",".join(BUILDERS), help="Comma-separated: " + ", ".join(BUILDERS))
    ap.add_argument("--venv", type=Path, default=Path("/work/main/.venv"), help="The venv whose packages pkgsummary reads.")
    args = ap.parse_args()
    for name in args.only.split(","):
        if name == "pkgsummary":
            build_pkgsummary(args.out / name, args.venv)
        else:
            BUILDERS[name](args.out / name)


if __name__ == "__main__":
    main()
