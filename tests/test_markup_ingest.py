"""User trial (a documentation site): HTML pages were indexed as raw markup with their shared navigation, titles were
file paths, "---" or ".. _label:", and front matter was body text instead of metadata."""

from __future__ import annotations

import json
import logging

from click.testing import CliRunner

from toolkit.cli import main
from toolkit.loaders import load_corpus
from toolkit.markup_text import html_text
from toolkit.store import Store

PAGE = """<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>Installing the Widget &amp; Friends</title>
<style>.sidebar { colour: tangerine }</style><script>window.trackingpixel = analyticsbeacon();</script></head>
<body>
<header><a href="/" class="brandlogo">Acme Docs</a></header>
<nav><ul><li><a href="/a">Sidebarlinks</a></li><li><a href="/b">Changelog</a></li></ul></nav>
<main><article>
<h1>Installing</h1>
<p>The R&amp;D team&#8217;s guide to <em>installing</em> the
   zanzibar widget.</p>
<svg viewBox="0 0 10 10"><path d="M0 0L10 10Z"/><title>arrowicon</title></svg>
<pre>  pip install zanzibar
    --upgrade</pre>
<aside>Related: quokkalinks</aside>
</article></main>
<footer>Copyright footerword</footer>
</body></html>
"""


def _search(store, query):
    r = CliRunner().invoke(main, ["search", query, "--store", str(store), "--mode", "lexical", "--format", "json"])
    assert r.exit_code == 0, r.output
    return r.output


def _folder(path, files: dict[str, str]):
    """A folder holding `files` (name -> text)."""
    path.mkdir()
    for name, text in files.items():
        (path / name).write_text(text)
    return path


def _ingest(*args):
    r = CliRunner().invoke(main, ["ingest", *map(str, args), "--no-embed"])
    assert r.exit_code == 0, r.output
    return r


def test_html_page_is_indexed_as_its_main_text_titled_by_its_title(tmp_path):
    site = tmp_path / "site"
    site.mkdir()
    (site / "install.html").write_text(PAGE)
    store = tmp_path / "s.duckdb"
    _ingest(site, "--store", store, "--include", "*.html")
    with Store(store, read_only=True) as st:
        (title, text), = st.documents().select("title", "text").rows()
    assert title == "Installing the Widget & Friends"
    for word in ("zanzibar", "R&D", "team’s"):
        assert word in text
    for markup in ("<", "amp", "8217", "trackingpixel", "tangerine", "Sidebarlinks", "brandlogo", "Acme",
                   "footerword", "quokkalinks", "arrowicon", "M0"):
        assert markup not in text, markup
    assert "\n  pip install zanzibar\n    --upgrade" in text  # <pre> keeps its whitespace
    assert "install.html" in _search(store, "zanzibar")
    assert "install.html" in _search(store, "R&D widget")
    for boilerplate in ("Sidebarlinks", "trackingpixel", "footerword", "brandlogo", "8217"):
        assert "install.html" not in _search(store, boilerplate), boilerplate


def test_html_text_without_main_keeps_the_body_and_takes_the_first_h1():
    title, text = html_text("<html><body><nav>menu</nav><div><h1>Only&nbsp;Heading</h1>Para one<br>Line two"
                            "<p>Para <b>three</b></p></div><script>x()</script></body></html>")
    assert title == "Only Heading"  # a no-break space is a space
    assert text.split("\n") == ["Only Heading", "Para one", "Line two", "Para three"]
    assert html_text("<p>Unclosed <b>tags & stray < signs") == ("", "Unclosed tags & stray < signs")
    assert html_text("<html><head><title>T</title><style>p{}</style><body><p>Body words") == ("T", "Body words")  # no </head>


def test_markdown_front_matter_becomes_title_and_metadata(tmp_path):
    notes = _folder(tmp_path / "notes", {
        "release.md": "---\ntitle: Release Notes 2.0\ndate: 2024-03-05\ntags: [deploy, kiwi]\n"
                      "author: marmaduke\ndraft: false\n---\n\n# Heading In Body\n\nWe shipped the ocelot feature.\n",
        "toml.md": "+++\ntitle = \"From Toml\"\nweight = 3\n+++\nBody of the toml page.\n",
        "comment.md": "<!-- generated: do not edit -->\n\n# Real Heading\ntext\n",
        "page.mdx": "---\nsidebar_position: 2\n---\nimport Tabs from '@theme/Tabs';\n"
                    "import {\n  TabItem,\n} from '@theme/TabItem';\n\n# Mdx Title\nMdx body.\n",
    })
    store = tmp_path / "s.duckdb"
    _ingest(notes, "--store", store)  # .mdx is read by default (Docusaurus pages)
    with Store(store, read_only=True) as st:
        docs = {d: (t, x, json.loads(m)) for d, t, x, m in st.documents().select("doc_id", "title", "text", "metadata").rows()}
        assert st.value_fields()["date"] == "date"  # the recency prior reads it
    title, text, meta = docs["release.md"]
    assert title == "Release Notes 2.0"
    assert meta == {"path": "release.md", "date": "2024-03-05", "tags": ["deploy", "kiwi"], "author": "marmaduke",
                    "draft": False}
    assert "marmaduke" not in text and "---" not in text and "ocelot" in text
    assert text.split("\n").index("# Heading In Body") == 8  # the body keeps its line numbers in the file
    assert "release.md" not in _search(store, "marmaduke") and "release.md" in _search(store, "ocelot")
    assert docs["toml.md"][0] == "From Toml" and docs["toml.md"][2]["weight"] == 3 and "+++" not in docs["toml.md"][1]
    assert docs["comment.md"][0] == "Real Heading"
    assert docs["page.mdx"][0] == "Mdx Title" and "import" not in docs["page.mdx"][1]
    assert docs["page.mdx"][2] == {"path": "page.mdx", "sidebar_position": 2}


def test_malformed_front_matter_or_a_bad_date_does_not_stop_the_ingest(tmp_path, caplog):
    notes = _folder(tmp_path / "notes", {"broken.md": "---\ntitle: [unclosed\n---\n# Broken Page\nbody text\n",
                                         "baddate.md": "---\ntitle: Bad Date\ndate: someday soon\n---\nbody\n"})
    with caplog.at_level(logging.WARNING, logger="toolkit"):
        docs = {d["doc_id"]: d for d in load_corpus(notes)}
    assert docs["broken.md"]["text"].startswith("---\ntitle: [unclosed") and docs["broken.md"]["title"] == "title: [unclosed"
    assert docs["baddate.md"]["title"] == "Bad Date" and docs["baddate.md"]["metadata"] == {"path": "baddate.md"}
    assert "broken.md: YAML front matter not read" in caplog.text
    assert "baddate.md: front matter field `date`: 'someday soon' is not a date" in caplog.text


def test_rst_title_is_its_first_section_title(tmp_path):
    notes = _folder(tmp_path / "notes", {
        "guide.rst": ".. _install-guide:\n\n.. meta::\n   :description: x\n\nInstallation Guide\n==================\n\nText.\n",
        "over.rst": "=========\n Overview\n=========\n\nText.\n",
    })
    docs = {d["doc_id"]: d["title"] for d in load_corpus(notes)}
    assert docs == {"guide.rst": "Installation Guide", "over.rst": "Overview"}


def test_a_page_in_its_declared_charset_is_read_and_other_undecodable_files_still_stop(tmp_path):
    """Trial BG: one Latin-1 page (`<meta charset="iso-8859-1">`) stopped the whole ingest. A page is read in the
    charset it declares, as a browser reads it; a file that declares nothing still stops, naming file and line."""
    import pytest

    from toolkit.errors import InputError

    site = tmp_path / "site"
    site.mkdir()
    (site / "latin.html").write_bytes(b'<html><head><meta charset="iso-8859-1"><title>R\xe9sum\xe9</title></head>'
                                      b"<body><p>Le caf\xe9 ouvre \xe0 huit heures.</p></body></html>")
    (site / "http-equiv.htm").write_bytes(b'<meta http-equiv="Content-Type" content="text/html; charset=windows-1252">'
                                          b"<p>\x93quoted\x94 na\xefve</p>")
    docs = {d["doc_id"]: d for d in load_corpus(site, include=["*.html", "*.htm"])}
    assert docs["latin.html"]["title"] == "Résumé" and "Le café ouvre à huit heures." in docs["latin.html"]["text"]
    assert "\u201cquoted\u201d naïve" in docs["http-equiv.htm"]["text"]
    (site / "notes.md").write_bytes(b"caf\xe9\n")
    with pytest.raises(InputError, match=r"notes\.md:1: not valid UTF-8"):
        load_corpus(site, include=["*.html", "*.htm"])
