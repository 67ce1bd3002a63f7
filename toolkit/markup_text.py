"""The text, title and metadata of marked-up files read from a folder: HTML pages, Markdown front matter, rst titles.

A documentation site indexed as raw files put tags, attributes, script bodies, SVG paths and entity names
("amp", "8217") in BM25 and in snippets, matched the shared navigation on every page, titled pages by their
path, "---" or ".. _label:", and indexed front matter as body text (user trial: a documentation site).

- `html_text(raw) -> (title, text)`: the words a reader sees. <script>, <style>, <template>, <svg>,
  <noscript>, <head> (but its <title>), <nav>, <aside> and <footer> are dropped, and <header> outside the
  page's <main>/<article> (a site header; an article's own header holds its heading); when the page has
  <main> or <article>, only their content is kept. Block elements end lines, entities are decoded, <pre>
  keeps its whitespace. Title: <title>, else the first <h1>.
- `front_matter(text) -> (fields, text, error)`: a Markdown file's YAML (`---`) or TOML (`+++`) block at the
  top, read and replaced by as many empty lines (so line numbers of the body stay those of the file).
- `markdown_title`, `rst_title`: the first heading, past front matter, HTML comments, MDX imports, rst
  labels and directives.

Standard library (html.parser, tomllib) and PyYAML only; a pure function per format, so plain text pays nothing.
"""

from __future__ import annotations

import math
import re
import tomllib
from datetime import date, datetime, time
from html.parser import HTMLParser
from typing import Any

# Elements whose content is no page text. <head> is dropped but for its <title> (kept apart, as the title).
DROPPED = frozenset({"script", "style", "template", "svg", "noscript", "head", "nav", "aside", "footer",
                     "math", "iframe", "object", "canvas"})
# Dropped only outside <main>/<article>: a site's header, not an article's own (its <h1> and date).
DROPPED_OUTSIDE_MAIN = frozenset({"header"})
MAIN = frozenset({"main", "article"})
# Elements that end a line (their start and end).
BLOCKS = frozenset({
    "address", "article", "blockquote", "body", "br", "caption", "dd", "details", "dialog", "div", "dl", "dt",
    "fieldset", "figcaption", "figure", "form", "h1", "h2", "h3", "h4", "h5", "h6", "header", "hr", "html", "li",
    "main", "ol", "p", "pre", "section", "summary", "table", "tbody", "tfoot", "thead", "title", "tr",
    "ul",
})
CELLS = frozenset({"td", "th"})
VOID = frozenset({"area", "base", "br", "col", "embed", "hr", "img", "input", "link", "meta", "source", "track", "wbr"})
_SPACE = re.compile(r"\s+")


class _PageText(HTMLParser):
    """Collects the visible text of a page, the text of its <main>/<article> apart, its <title> and first <h1>."""

    def __init__(self) -> None:
        super().__init__(convert_charrefs=True)
        self.drop: list[str] = []  # open dropped elements, innermost last
        self.main = 0  # depth of open <main>/<article>
        self.saw_main = False
        self.pre = 0
        self.all: list[str] = []  # the page's kept text
        self.in_main: list[str] = []  # the kept text inside <main>/<article>
        self.title: list[str] | None = None  # the <title>'s text while it is read
        self.title_text = ""
        self.h1: list[str] | None = None
        self.h1_text = ""
        self.h1_kept = False  # the first h1 found outside dropped parts

    # -- output
    def _emit(self, s: str, *, block: bool = False) -> None:
        for out in (self.all, self.in_main) if self.main else (self.all,):
            if block:
                while out and out[-1] == " ":  # no space at a line's end
                    out.pop()
                if out and out[-1] != "\n":
                    out.append("\n")
            elif s == " ":
                if out and out[-1] not in (" ", "\n"):
                    out.append(" ")
            else:
                out.append(s)

    # -- parser callbacks
    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if tag == "title" and not self.title_text and all(t == "head" for t in self.drop):  # not an <svg>'s title
            self.title = []
        if tag == "h1" and not self.h1_kept:
            self.h1 = []
        if tag == "body" and "head" in self.drop:  # a <head> never closed ends here
            self.drop.clear()
        if self.drop:
            if tag in DROPPED and tag not in VOID:
                self.drop.append(tag)
            return
        if tag in DROPPED or (tag in DROPPED_OUTSIDE_MAIN and not self.main):
            self.drop.append(tag)
            return
        if tag in MAIN:
            self.main += 1
            self.saw_main = True
        if tag == "pre":
            self.pre += 1
        if tag in BLOCKS:
            self._emit("", block=True)
        elif tag in CELLS:
            self._emit(" ")

    def handle_startendtag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        if not self.drop and (tag in BLOCKS):
            self._emit("", block=True)

    def handle_endtag(self, tag: str) -> None:
        if tag == "title" and self.title is not None:
            self.title_text = _SPACE.sub(" ", "".join(self.title)).strip()
            self.title = None
        if tag == "h1" and self.h1 is not None:
            text = _SPACE.sub(" ", "".join(self.h1)).strip()
            if text and (not self.drop or not self.h1_text):
                self.h1_text, self.h1_kept = text, not self.drop
            self.h1 = None
        if self.drop:
            if tag in self.drop:  # close it (and anything left open inside it)
                del self.drop[len(self.drop) - 1 - self.drop[::-1].index(tag):]
            return
        if tag in BLOCKS:
            self._emit("", block=True)
        elif tag in CELLS:
            self._emit(" ")
        if tag == "pre" and self.pre:
            self.pre -= 1
        if tag in MAIN and self.main:
            self.main -= 1

    def handle_data(self, data: str) -> None:
        if self.title is not None:
            self.title.append(data)
        if self.h1 is not None:
            self.h1.append(data)
        if self.drop or self.title is not None:
            return
        if self.pre:
            out = self.all[-1] if self.all else ""
            if out.endswith("\n") or not self.all:
                data = data.removeprefix("\n")  # the line end right after <pre> is no part of it (HTML)
            if data:
                self._emit(data)
            return
        for i, word in enumerate(_SPACE.split(data)):
            if i:
                self._emit(" ")
            if word:
                self._emit(word)


def _joined(parts: list[str]) -> str:
    text = "".join(parts)
    text = re.sub(r"[ \t]+\n", "\n", text)
    return re.sub(r"\n{3,}", "\n\n", text).strip("\n")


def html_text(raw: str) -> tuple[str, str]:
    """(title, text) of an HTML page: see the module docstring. Never raises on bad markup."""
    p = _PageText()
    try:
        p.feed(raw)
        p.close()
    except Exception:  # html.parser is lenient; should it give up, strip the tags and keep the words
        from html import unescape

        stripped = re.sub(r"(?is)<(script|style)\b.*?</\1\s*>|<!--.*?-->|<[^>]*>", " ", raw)
        return "", _joined([ln.strip() + "\n" for ln in unescape(stripped).splitlines() if ln.strip()])
    text = _joined(p.in_main) if p.saw_main else ""
    if not text.strip():
        text = _joined(p.all)
    return p.title_text or p.h1_text, text


# -- Markdown front matter

_FENCES = {"---": ("---", "..."), "+++": ("+++",)}


def front_matter(text: str) -> tuple[dict[str, Any] | None, str, str | None]:
    """(fields, text, error) of a Markdown file that may begin with YAML (`---` ... `---`) or TOML (`+++` ...
    `+++`) front matter. Found and read: its fields, and the text with the block replaced by empty lines (the
    body's line numbers stay the file's). Not there: (None, text, None). There but unreadable (bad YAML, not a
    mapping): (None, text unchanged, why)."""
    first, _, rest = text.partition("\n")
    fence = first.rstrip()
    if fence not in _FENCES or not rest:
        return None, text, None
    lines = rest.split("\n")
    end = next((i for i, ln in enumerate(lines) if ln.rstrip() in _FENCES[fence]), None)
    if end is None:
        return None, text, None  # a thematic break at the top, not front matter
    block = "\n".join(lines[:end])
    import yaml  # here: a search imports the loaders, never YAML (tests/test_cold_start.py)

    try:
        fields = yaml.load(block, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader)) if fence == "---" \
            else tomllib.loads(block)
    except (yaml.YAMLError, tomllib.TOMLDecodeError, ValueError, RecursionError) as e:
        mark = getattr(e, "problem_mark", None)
        if getattr(e, "problem", None) and mark is not None:  # YAML: what, and the file's line (the block starts at 2)
            why = f"{e.problem} at line {mark.line + 2}"
        else:
            why = str(e).splitlines()[0] if str(e) else type(e).__name__
        return None, text, f"{'YAML' if fence == '---' else 'TOML'} front matter not read ({why})"
    if fields is None:
        fields = {}
    if not isinstance(fields, dict):
        return None, text, f"front matter is not a mapping of fields (got {type(fields).__name__})"
    body = "\n" * (end + 2) + "\n".join(lines[end + 1 :])
    return fields, body, None


def plain_value(v: Any) -> Any:
    """A front matter value as JSON can hold it: dates and times as ISO 8601 text, a non-finite number dropped
    (None), lists and mappings element by element, anything else as text."""
    if v is None or isinstance(v, bool | int | str):
        return v
    if isinstance(v, float):
        return v if math.isfinite(v) else None
    if isinstance(v, datetime | date | time):
        return v.isoformat()
    if isinstance(v, list | tuple):
        return [x for x in map(plain_value, v) if x is not None]
    if isinstance(v, dict):
        return {str(k): x for k, x in ((k, plain_value(x)) for k, x in v.items()) if x is not None}
    return str(v)


_IMPORT = re.compile(r"^(import|export)\s")


def drop_mdx_imports(text: str) -> str:
    """An MDX file's `import`/`export` lines at the top (past blank lines) as empty lines (a multi-line import
    `import {\\n a,\\n} from 'x'` to its closing brace)."""
    lines = text.split("\n")
    i, open_brace = 0, False
    while i < len(lines):
        ln = lines[i]
        if open_brace:
            open_brace = "}" not in ln
        elif _IMPORT.match(ln):
            open_brace = ln.count("{") > ln.count("}")
        elif ln.strip():
            break
        lines[i] = ""
        i += 1
    return "\n".join(lines) if i else text


_RULE = re.compile(r"^\s*([-=*_+~#`])\1*\s*$")  # a line of one repeated mark: a rule, a fence, an underline


def markdown_title(text: str) -> str:
    """The first line of text, a heading's words without its `#` marks (a note's title, as before); HTML comments
    (`<!-- ... -->`, one or many lines) and lines of one repeated mark (`---`, `===`) are passed over."""
    in_comment = False
    for ln in text.split("\n"):
        s = ln.strip()
        if in_comment:
            if "-->" in s:
                in_comment = False
                s = s.split("-->", 1)[1].strip()
            else:
                continue
        while s.startswith("<!--"):
            if "-->" not in s:
                in_comment = True
                s = ""
                break
            s = s.split("-->", 1)[1].strip()
        if not s or _RULE.match(s):
            continue
        return s.lstrip("# ").strip()
    return ""


_ADORNMENT = re.compile(r"^([!-/:-@\[-`{-~])\1+\s*$")  # rst: a line of one repeated punctuation mark


def rst_title(text: str) -> str:
    """The first section title of reStructuredText: a line underlined (and maybe overlined) by one repeated
    punctuation mark at least as long as it; `.. _label:`, directives and comments (`..` lines and what is
    indented under them) are passed over. Without one, the first line of text."""
    lines = text.split("\n")
    first = ""
    in_directive = False
    for i, ln in enumerate(lines):
        if in_directive:
            if not ln.strip() or ln[:1].isspace():
                continue
            in_directive = False
        if ln.startswith(".."):
            in_directive = True
            continue
        s = ln.strip()
        if not s or _ADORNMENT.match(ln):
            if s and i + 2 < len(lines) and lines[i + 1].strip() and _ADORNMENT.match(lines[i + 2]) \
                    and lines[i + 2].strip()[0] == s[0] and len(s) >= len(lines[i + 1].strip()):
                return lines[i + 1].strip()  # overlined and underlined
            continue
        if not ln[:1].isspace() and i + 1 < len(lines) and _ADORNMENT.match(lines[i + 1]) \
                and len(lines[i + 1].rstrip()) >= len(ln.rstrip()):
            return s
        first = first or s
    return first
