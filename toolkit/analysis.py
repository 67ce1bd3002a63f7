"""Text analysis for the lexical index: keep the technical tokens users search for.

DuckDB FTS splits on its `ignore` pattern, so `v2.1.0` becomes `v2 1 0` and `config_key` stays one token that
the query `config key` never matches. We index (and query) the text plus the *compound forms* of such tokens:
`v2.1.0` also as `v2_1_0`, `CVE-2017-3156` as `cve_2017_3156`, `retryBackoffMs` also as `retry backoff ms`,
`max_pool_size` also as `max pool size`. Exact matches then score on a rare compound term, and partial
matches still score on the parts. No library does this pre-tokenisation for DuckDB FTS, hence hand-written.
A store ingested with `IndexSettings(compounds=False)` (`hrt ingest --no-compounds`) has none, in its documents and
its queries: plain BM25 for a baseline (docs/bm25.md); the CJK terms below stay.

Chinese, Japanese and Korean text has no spaces between words, so FTS saw a whole sentence as one token and
no word inside it could match. Each run of CJK characters is also indexed as its single characters and its
overlapping character pairs (`cjk_terms`, as Lucene's CJK bigram analysis does): a query word of two or more
characters matches through its pairs, and a one-character word through the character. A Latin word written
against CJK text (`ECONNREFUSEDエラー`, `用Python写`) is indexed on its own too.

Everything is NFKC-normalised and case-folded first, so full-width `ＥＣＯＮＮ` is `econn`, half-width `ｻｰﾊﾞｰ`
is `サーバー`, decomposed (NFD, as macOS writes) Korean or accents equal the composed forms, and `Straße` is
`strasse`. FTS strips accents (`José` = `jose`), which would also strip the voicing marks of kana (ガス = カス):
in CJK terms those marks are written as the half-width marks (ﾞ ﾟ), letters that survive it.
"""

from __future__ import annotations

import contextlib
import functools
import re
import unicodedata

# Characters the FTS tokenizer treats as separators: anything but letters, digits and underscore.
FTS_IGNORE = r"[^\p{L}\p{N}_]+"

# What `lexical_text` adds, by version (a store records the one its BM25 index was built with and brings
# older ones up to date, `Store._reanalyse_text`): 1 compound forms, 2 CJK characters and pairs, 3 NFKC and
# case folding, kana voicing kept, Latin words next to CJK, non-ASCII words in compound forms; 4 Thai, Lao, Khmer
# and Myanmar as pairs too; 5 Indic vowel signs kept as letters. Versions 2-5 change only text with non-ASCII
# characters, so only those chunks are redone.
ANALYSIS_VERSION = "5"
# The characters each version after 3 (the last whose text analysis shipped) changes: a store analysed by 3 re-indexes
# only chunks holding one of them (`Store._reanalyse_text`), not every chunk with a curly quote.
CHANGED_SINCE_3 = r"[\x{0900}-\x{0dff}\x{0e00}-\x{0eff}\x{1000}-\x{109f}\x{1780}-\x{17ff}]"  # RE2 (DuckDB) syntax

# Indic scripts (Devanagari to Malayalam) write most vowels as signs, which FTS's accent stripping removed with the
# accents: काम ("work") and कम ("less") were one term (user trial AQ). Each vowel sign is indexed as its script's
# independent vowel letter (ा as आ), a letter the stripping keeps.
_INDIC = re.compile("[\u0900-\u0dff]")

# Han, Hiragana, Katakana (and half-width), Hangul, and the ideographic marks 々 〆 〇 〻; and Thai, Lao, Khmer
# and Myanmar (user trial AQ: a Thai word inside a sentence was never found, the run being one token): scripts
# written without spaces between words. (Their vowel and tone marks are stripped with the accents on both sides.)
CJK_CHARS = ("\u3005-\u3007\u303b\u3040-\u30ff\u31f0-\u31ff\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
             "\uff66-\uff9f\u1100-\u11ff\u3130-\u318f\uac00-\ud7af\U00020000-\U0002fa1f"
             "\u0e00-\u0e7f\u0e80-\u0eff\u1000-\u109f\u1780-\u17ff")


@functools.cache
def cjk_pattern(run: bool = False) -> re.Pattern[str]:
    """A CJK character (`run`: a run of them), compiled on first use: the two patterns take ~7 ms to compile, a
    tenth of the toolkit's imports in a cold `hrt search`, and ASCII text (most queries) needs neither."""
    return re.compile(f"[{CJK_CHARS}]+" if run else f"[{CJK_CHARS}]")


def __getattr__(name: str) -> re.Pattern[str]:
    """`CJK`, the pattern of one CJK character, as it was before it was compiled on first use (`cjk_pattern`)."""
    if name == "CJK":
        return cjk_pattern()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


# A run of letters or digits joined by . - / : (versions, codes, paths, CVE ids). It starts only where a run of
# letters or digits starts: the same matches as without the lookbehind, found without retrying from every
# character inside each word (a third of a lexical-only ingest's time went to these scans).
_JOINED = re.compile(r"(?<![^\W_])[^\W_]+(?:[._\-/:][^\W_]+)+")
_CAMEL_SPLIT = re.compile(r"(?<=[a-z0-9])(?=[A-Z])|(?<=[A-Z])(?=[A-Z][a-z])")
_WORD = re.compile(r"\w+")
# A word that can split into parts (`compound_forms`): only one with an underscore or an ASCII capital can, since
# `_CAMEL_SPLIT` splits at ASCII capitals. Most words have neither, and are skipped without a Python step each.
_SPLITTABLE = re.compile(r"\b\w*[A-Z_]\w*")
_KANA_MARKS = str.maketrans({"\u3099": "\uff9e", "\u309a": "\uff9f"})  # voiced / semi-voiced: as letters


# Regexes like _JOINED retry from every start position inside a long run of characters, so their time
# grows with the square of the run: 20,000 characters of "aA" took seconds. Long text is analysed in
# windows of at most WINDOW characters cut at whitespace, as documents are chunked (1,000 characters).
WINDOW = 1000
_LAST_SPACE = re.compile(r".*\s", re.S)


def windows(text: str, size: int = WINDOW) -> list[tuple[int, str]]:
    """(offset, piece) covering `text` in order: pieces of at most `size` characters, each cut just after
    its last whitespace character, so no word is split; a piece without whitespace (one word longer than
    `size`) is cut at `size`. Text of at most `size` characters is one piece."""
    if len(text) <= size:
        return [(0, text)]
    out, i, n = [], 0, len(text)
    while i < n:
        j = min(i + size, n)
        if j < n and not text[j].isspace() and (m := _LAST_SPACE.match(text, i, j)):
            j = m.end()
        out.append((i, text[i:j]))
        i = j
    return out


def compound_forms(text: str) -> list[str]:
    """Extra index terms for the technical tokens in `text` (order-preserving, deduplicated).

    Text longer than `WINDOW` characters is scanned window by window (`windows`), which bounds the time
    (linear in the length). No term spans whitespace, so the result is exactly that of one scan over the
    whole text unless a single word is longer than `WINDOW` characters (then it is cut into pieces)."""
    pieces = [p for _, p in windows(text)]
    out: list[str] = []
    for m in (m for p in pieces for m in _JOINED.finditer(p)):
        tok = m.group(0)
        if re.search(r"[.\-/:]", tok) and (any(c.isdigit() for c in tok) or "/" in tok):
            out.append(re.sub(r"[._\-/:]", "_", tok.lower()))
    for m in (m for p in pieces for m in _SPLITTABLE.finditer(p)):
        tok = m.group(0)
        parts = [p for p in re.split(r"_+", tok) if p]
        camel = [q for p in parts for q in _CAMEL_SPLIT.split(p) if q]
        if len(camel) > 1:
            out.extend(q.lower() for q in camel)
    return list(dict.fromkeys(out))


_SPACELESS_MARKED = re.compile("[\u0e00-\u0eff\u1000-\u109f\u1780-\u17ff]")


def base_letters(run: str) -> str:
    """A run of Thai, Lao, Khmer or Myanmar without its vowel and tone marks: pairs are of letters, as BM25's accent
    stripping leaves them (pairs over marks shrank to single letters, so scattered letters outranked the word:
    the review of user trial AQ's fix). Other runs as they are."""
    if not _SPACELESS_MARKED.search(run):
        return run
    return "".join(c for c in run if not unicodedata.category(c).startswith("M"))


def cjk_terms(text: str) -> list[str]:
    """Each CJK character of `text` and each pair of neighbours within a run of them, in order and with
    repeats (BM25 counts them): "数据库" gives 数 据 库 数据 据库. A one-character run gives the character.
    Then the Latin (or other) parts of words that touch CJK text: "ECONNREFUSEDエラー" also gives ECONNREFUSED.
    Kana voicing marks are written as half-width marks (`_KANA_MARKS`), which FTS's accent stripping keeps."""
    out: list[str] = []
    for m in cjk_pattern(run=True).finditer(text):
        run = base_letters(m.group(0))
        out.extend(run)
        out.extend(run[i : i + 2] for i in range(len(run) - 1))
    out = [unicodedata.normalize("NFD", t).translate(_KANA_MARKS) for t in out]
    for m in _WORD.finditer(text):
        if cjk_pattern().search(w := m.group(0)) and (rest := [p for p in cjk_pattern(run=True).split(w) if p.strip("_")]):
            out.extend(rest)
    return out


@functools.cache
def _indic_vowels() -> dict[int, str]:
    """{vowel sign: its independent vowel letter} for the Indic blocks, by Unicode name ("DEVANAGARI VOWEL SIGN AA"
    -> "DEVANAGARI LETTER AA"): a table by hand would be 120 entries to get wrong."""
    out = {}
    for cp in range(0x0900, 0x0E00):
        script, sep, vowel = unicodedata.name(chr(cp), "").partition(" VOWEL SIGN ")
        if sep:
            with contextlib.suppress(KeyError):  # a sign without a letter of its own
                out[cp] = unicodedata.lookup(f"{script} LETTER {vowel}")
    return out


# A version a user types with its "v" (`v2.34.2`) where files write it without (`__version__ = "2.34.2"`).
_V_VERSION = re.compile(r"(?<![\w.])[vV](\d+(?:\.\d+)+)\b")


def query_lexical_text(text: str, *, compounds: bool = True) -> str:
    """`lexical_text` of a query, each `v`-prefixed version also as the bare version's compound (`2_34_2`): the index
    holds `2.34.2` as a document wrote it, and `v2.34.2` missed it (user trial BD: the version file was not in the
    top 5). Only the compound: the bare parts ("2", "34") matched every numbered note and cost the demo's version
    queries (default nDCG@10 0.7025 -> 0.6968 on its test split). Without `compounds` (a store indexed without
    them, `IndexSettings.compounds`) neither: the query is analysed exactly as such a store's documents were."""
    out = lexical_text(text, compounds=compounds)
    bare = [m.group(1).replace(".", "_") for m in _V_VERSION.finditer(text)] if compounds else []
    return f"{out}\n{' '.join(bare)}" if bare else out


def lexical_text(text: str, *, compounds: bool = True) -> str:
    """The string given to the FTS index (and to queries): the text followed by its compound forms and
    its CJK characters and pairs, NFKC-normalised and case-folded (see the module docstring).

    `compounds=False` (`IndexSettings.compounds`, `hrt ingest --no-compounds`) leaves the compound forms out, so
    ASCII text is given to FTS as it is: plain BM25 (DuckDB's tokenizer, stemmer and stopwords only). The CJK,
    Thai, Lao, Khmer and Myanmar characters and pairs, and the normalisation, stay: without them a sentence in
    those scripts is one FTS token and no word inside it can be found (they are not compound forms, and text
    without those scripts has none).

    Time is linear in the length (see `compound_forms`: text is analysed in windows of `WINDOW`
    characters); the output is unchanged by the windowing unless one word is longer than `WINDOW`."""
    if not text.isascii():
        text = unicodedata.normalize("NFKC", text)
        if _INDIC.search(text):
            text = text.translate(_indic_vowels())
    extra = ((compound_forms(text) if compounds else [])
             + (cjk_terms(text) if not text.isascii() and cjk_pattern().search(text) else []))
    out = f"{text}\n{' '.join(extra)}" if extra else text
    return out if out.isascii() else out.casefold()
