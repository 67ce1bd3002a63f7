"""TREC run files and qrels (TREC 4-column or BEIR tsv) to and from polars frames.

Ids are always read as strings: letting a CSV reader infer integers would turn "01" into 1 and silently
break every join against the corpus. Lines are split with one vectorised regex over the whole file, and
only the error path goes back to find the offending line number.
"""

from __future__ import annotations

import logging
import re
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import polars as pl

from .errors import InputError
from .files import utf16_text, write_text_atomic
from .interop import run_frame

RUN_SCHEMA = {"qid": pl.Utf8, "doc_id": pl.Utf8, "rank": pl.Int64, "score": pl.Float64}
QRELS_SCHEMA = {"qid": pl.Utf8, "doc_id": pl.Utf8, "rel": pl.Int64}

_WS = r"[ \t]+"
_FIELD = r"([^ \t]+)"
_RUN_RE = r"^[ \t]*" + _WS.join([_FIELD] * 6) + r"[ \t]*$"
_TREC_QRELS_RE = r"^[ \t]*" + _WS.join([_FIELD] * 4) + r"[ \t]*$"
_BEIR_QRELS_RE = r"^[ \t]*([^\t]+?)[ \t]*\t[ \t]*([^\t]+?)[ \t]*\t[ \t]*([^\t]+?)[ \t]*$"
_BEIR_HEADER = ["query-id", "corpus-id", "score"]
_PLAIN3_QRELS_RE = r"^[ \t]*" + _WS.join([_FIELD] * 3) + r"[ \t]*$"


def _lines(path: Path) -> pl.DataFrame:
    """Non-blank lines of a text file with their 1-based line numbers. A UTF-8 byte order mark (Windows
    editors, Excel exports) is dropped: kept, it would become part of the first query id or header. So is one
    at the start of a later line, with a warning: files each written with one and joined (`cat a b`) made the
    first query id of the second file '\ufeffq23', a query no judgement names (user trial AT)."""
    try:
        text = path.read_text(encoding="utf-8-sig")
    except FileNotFoundError:
        raise InputError(f"{path}: no such file") from None
    except UnicodeDecodeError as e:
        utf16 = "; UTF-16 text? re-encode it as UTF-8" if utf16_text(path.read_bytes()) else ""
        raise InputError(f"{path}: not UTF-8 text ({e.reason} at byte {e.start}){utf16}") from None
    lines = text.splitlines()
    joined = [i for i, line in enumerate(lines) if line.startswith("\ufeff")]
    if joined:
        logging.getLogger("toolkit").warning(
            "warning: %s:%d: a byte order mark starts the line (files joined with theirs?); dropped%s", path, joined[0] + 1,
            f" (and at {len(joined) - 1} more line(s))" if len(joined) > 1 else "")
        lines = [line.removeprefix("\ufeff") for line in lines]
    df = pl.DataFrame({"line": pl.Series(lines, dtype=pl.Utf8)}).with_row_index("lineno", offset=1)
    return df.filter(pl.col("line").str.strip_chars() != "")


def _split(df: pl.DataFrame, pattern: str, names: list[str], path: Path, expect: str) -> pl.DataFrame:
    """Fields of every line by one regex; an unmatched line is reported with its number."""
    parts = df.select(
        "lineno", pl.col("line").str.extract_groups(pattern).struct.rename_fields(names).alias("f")
    ).unnest("f")
    bad = parts.filter(pl.col(names[0]).is_null())
    if len(bad):
        ln = bad["lineno"][0]
        text = df.filter(pl.col("lineno") == ln)["line"][0]
        raise InputError(f"{path}:{ln}: malformed line, expected {expect}: {text[:120]!r}")
    return parts


def _cast(parts: pl.DataFrame, col: str, dtype: pl.DataType, path: Path, what: str) -> pl.Series:
    out = parts[col].cast(dtype, strict=False)
    bad = out.is_null() | (out.is_nan() if dtype == pl.Float64 else False)
    if bad.any():
        i = bad.arg_max()
        raise InputError(f"{path}:{parts['lineno'][i]}: {what} {parts[col][i]!r} is not a number")
    return out


def _int_grades(parts: pl.DataFrame, col: str, path: Path, what: str = "relevance grade") -> pl.Series:
    """Integers; "1.0" is accepted (some tools write floats: grades, and ranks), "0.5" is not (trec_eval's are ints)."""
    as_float = _cast(parts, col, pl.Float64, path, what)
    frac = (as_float != as_float.round(0)) | (as_float.abs() > 2.0**53)  # past 2**53 (or inf) no float is an exact integer
    if frac.any():
        i = frac.arg_max()
        raise InputError(f"{path}:{parts['lineno'][i]}: {what} {parts[col][i]!r} is not an integer")
    return as_float.cast(pl.Int64)


def _check_unique(df: pl.DataFrame, path: Path, what: str) -> None:
    dup = df.filter(pl.struct("qid", "doc_id").is_duplicated())
    if len(dup):
        first = dup.sort("lineno").head(1)
        q, d = first["qid"][0], first["doc_id"][0]
        lines = dup.filter((pl.col("qid") == q) & (pl.col("doc_id") == d))["lineno"].sort().to_list()
        raise InputError(f"{path}:{lines[1]}: {what} for query {q!r}, document {d!r} repeats line {lines[0]}")


def read_run(path: str | Path) -> pl.DataFrame:
    """A TREC run (`qid Q0 docid rank score tag`, whitespace separated) as [qid, doc_id, rank, score].

    The second and sixth columns are ignored. A document listed twice for one query is an error, as in
    trec_eval, because which of the two scores counts would be arbitrary; so is a score beyond the float32
    range (trec_eval cannot read it and `write_run` would refuse it).
    """
    path = Path(path)
    df = _lines(path)
    if df.is_empty():
        return pl.DataFrame(schema=RUN_SCHEMA)
    parts = _split(
        df,
        _RUN_RE,
        ["qid", "q0", "doc_id", "rank", "score", "tag"],
        path,
        "6 fields 'qid Q0 docid rank score tag'",
    )
    score = _cast(parts, "score", pl.Float64, path, "score")
    big = score.abs() > _F32_MAX
    if big.any():
        # trec_eval reads scores as float32 and `write_run` refuses them: fail here, where the line is known.
        i = big.arg_max()
        raise InputError(f"{path}:{parts['lineno'][i]}: score {parts['score'][i]!r} is outside the float32 range that trec_eval reads")
    out = pl.DataFrame(
        {
            "lineno": parts["lineno"],
            "qid": parts["qid"],
            "doc_id": parts["doc_id"],
            "rank": _int_grades(parts, "rank", path, "rank"),
            "score": score,
        }
    )
    _check_unique(out, path, "run line")
    return out.drop("lineno")


def _valid_ranks(run: pl.DataFrame) -> bool:
    """True when every query's ranks are exactly 1..n."""
    if run["rank"].null_count():
        return False
    chk = run.group_by("qid").agg(
        pl.col("rank").min().alias("lo"),
        pl.col("rank").max().alias("hi"),
        pl.len().alias("n"),
        pl.col("rank").n_unique().alias("u"),
    )
    return bool(
        chk.select(
            ((pl.col("lo") == 1) & (pl.col("hi") == pl.col("n")) & (pl.col("u") == pl.col("n"))).all()
        ).item()
    )


# The run tag of every file `write_run` writes ends with this, so a reader of the file alone knows that its
# scores are float32 values kept strictly decreasing down each query's ranking (see `float32_strict`).
STRICT_TAG = ".f32strict"
_F32_MAX = float(np.finfo(np.float32).max)


def _f32_key(bits: np.ndarray) -> np.ndarray:
    """float32 bit patterns (int32) -> int64 keys in the same order as the floats (-0.0 and 0.0 share 0)."""
    b = bits.astype(np.int64)
    return np.where(b >= 0, b, -(b & 0x7FFFFFFF))


def _f32_from_key(key: np.ndarray) -> np.ndarray:
    bits = np.where(key >= 0, key, (-key) | 0x80000000).astype(np.uint32)
    return bits.view(np.float32)


def float32_strict(run: pl.DataFrame) -> pl.DataFrame:
    """Scores of a run frame [qid, doc_id, rank, score] rounded to float32 and, where that would tie with or
    pass the score above in rank order, lowered to the next float32 below it.

    Why: trec_eval (and pytrec_eval, hence ir_measures and PyTerrier) keeps scores as 32-bit floats and
    re-sorts each query by score, breaking ties by doc id; ranx re-sorts in float64 with an unstable sort.
    RRF scores differ by ~1e-9, so float32 ties are common and those tools evaluated a different ranking
    than the one written. With scores strictly decreasing at float32 resolution every tool's re-sort gives
    back the rank column. Each score moves by at most its float32 rounding plus one float32 step per tie
    above it; a score higher than the one ranked above it (an inversion) is lowered below that one, which
    can move it far (`write_run` warns when the frame it was given has one). Kernel: in int64 keys ordered like the floats, the rule
    key'[i] = min(key[i], key'[i-1] - 1) unrolls to cummin(key[j] + j) - i, one vectorised pass.
    """
    big = run.filter(pl.col("score").abs() > _F32_MAX)
    if len(big):
        raise InputError(
            f"run frame: query {big['qid'][0]!r}, document {big['doc_id'][0]!r}: score {big['score'][0]} "
            "is outside the float32 range that trec_eval reads"
        )
    if not len(run):
        return run.sort("qid", "rank")
    g = run["qid"].rle_id().cast(pl.Int64).to_numpy()
    rank = run["rank"].to_numpy()
    # A run from `Result.run` is sorted already (qids ascending, ranks rising within each): the sort, whose order
    # is then unique, would leave it as it is.
    plain = not run["qid"].null_count() and not run["rank"].null_count() and run["qid"].is_sorted()
    if plain and np.all((g[1:] != g[:-1]) | (rank[1:] > rank[:-1])):
        r = run
    else:
        r = run.sort("qid", "rank")
        g = r["qid"].rle_id().cast(pl.Int64).to_numpy()  # rows of a query are together after the sort
    starts = np.flatnonzero(np.r_[True, g[1:] != g[:-1]])
    pos = np.arange(len(g)) - starts[g]
    key = _f32_key(r["score"].cast(pl.Float32).to_numpy().view(np.int32)) + pos
    # Cumulative minimum within each query in one numpy pass (a window over string qids costs several times
    # more on a slider tick): every query is shifted below all earlier ones (|key| < 2**33), so no minimum
    # carries over from the query before.
    shift = g * (1 << 34)
    low = np.minimum.accumulate(key - shift) + shift
    out = _f32_from_key(low - pos)
    bad = np.flatnonzero(~np.isfinite(out))
    if len(bad):  # lowered past float32's lowest value: -inf, then NaN (user trial P)
        i = int(bad[0])
        raise InputError(
            f"run frame: query {r['qid'][i]!r}: scores at the bottom of the float32 range ({r['score'][i]:.7g} and "
            "below) leave no room to keep tied documents in rank order as trec_eval reads them; rescale the scores "
            "(or give unscored documents no row)"
        )
    return r.with_columns(pl.Series("score", out).cast(pl.Float64))


def check_tag(tag: str) -> str:
    """A TREC run tag (the run's name in the file's last column) is one non-empty word: checked before a
    run is computed, so a bad name fails in a second, not after the whole run."""
    if not tag or re.search(r"\s", tag):
        raise InputError(f"run tag {tag!r}: must be non-empty and contain no whitespace (--tag, or the config's name)")
    return tag


def check_trec_ids(ids: pl.Series, kind: str, where: Any) -> None:
    """A TREC run file is whitespace separated, so its query and document ids cannot hold whitespace; folder
    notes take their ids from file names ("my note.md"), which search and in-memory evaluation accept.
    Checked before a run is computed, naming the first such id. Whitespace as Python reads it: U+001C-U+001F
    are spaces to `str.split` (ir_measures, ranx) and line breaks to `str.splitlines` (`read_run`), but not
    to the regex engine's whitespace class (user trial AI: a run `hrt eval` could not read)."""
    bad = ids.filter(ids.cast(pl.Utf8).str.contains(r"[\s\x1c-\x1f]"))
    if len(bad):
        raise InputError(
            f"{where}: {kind} id {bad[0]!r} (and {len(bad) - 1} more) contains whitespace, which a TREC run file "
            "cannot hold; rename it, or use the Python API (run_pipeline) and evaluate in memory"
        )


def write_run(run: Any, path: str | Path, tag: str = "hrt") -> None:
    """Write `run_text(run, tag)` to `path`, whole or not at all (`files.write_text_atomic`)."""
    write_text_atomic(path, run_text(run, tag))


def run_text(run: Any, tag: str = "hrt") -> str:
    """[qid, doc_id, (rank), score] as the lines of a TREC run, sorted by qid then rank, that every evaluator reads
    in the written rank order. `run` is any shape `interop.run_frame` reads (polars or pandas frames with
    toolkit, PyTerrier or ir_measures names, {qid: {doc_id: score}} dicts, `ranx.Run`, `ScoredDoc`s).

    The frame's ranks are kept when they are 1..n per query (with a warning when a score rises down them:
    it is lowered to follow the ranks); otherwise (missing, gaps, repeats) they are recomputed from the
    score order (score descending, then doc id descending). A document listed twice for a query is an error
    (`read_run` would refuse the file). trec_eval, pytrec_eval and
    ranx ignore the rank column and re-sort by score (trec_eval at float32), so the scores are written as
    float32 values strictly decreasing down each query (`float32_strict`) and the tag says so: it ends with
    `STRICT_TAG` (".f32strict"). Nothing else is added to the file: trec_eval, ir_measures and ranx all
    expect exactly six fields on every line, so a comment or header line would break them.
    """
    check_tag(tag)
    r = run_frame(run)
    bad_id = r.filter(pl.col("qid").is_null() | pl.col("doc_id").is_null())
    if len(bad_id):
        raise InputError(f"run frame: query {bad_id['qid'][0]!r}, document {bad_id['doc_id'][0]!r}: ids must be non-null")
    check_trec_ids(r["qid"], "query", "run frame")
    check_trec_ids(r["doc_id"], "document", "run frame")
    bad_score = r.filter(pl.col("score").is_null() | pl.col("score").is_nan())
    if len(bad_score):
        raise InputError(
            f"run frame: query {bad_score['qid'][0]!r}, document {bad_score['doc_id'][0]!r}: score is null or NaN"
        )
    dup = r.filter(pl.struct("qid", "doc_id").is_duplicated())
    if len(dup):  # `read_run` refuses such a file: refuse it before writing it
        raise InputError(
            f"run frame: query {dup['qid'][0]!r} lists document {dup['doc_id'][0]!r} more than once ({len(dup)} rows "
            "repeat a pair); a TREC run lists a document once per query: keep its best-ranked row"
        )
    if not _valid_ranks(r):
        r = r.sort(["qid", "score", "doc_id"], descending=[False, True, True]).with_columns(
            pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank")
        )
    else:
        _warn_inversions(r)
    r = float32_strict(r)
    tag = tag if tag.endswith(STRICT_TAG) else tag + STRICT_TAG
    # polars prints the shortest decimal that round-trips the float32, so any reader (float or double)
    # gets back the same strictly decreasing scores.
    body = r.select(
        pl.format(
            "{} Q0 {} {} {} {}",
            "qid",
            "doc_id",
            "rank",
            pl.col("score").cast(pl.Float32).cast(pl.Utf8),
            pl.lit(tag),
        ).alias("l")
    )["l"]
    text = "\n".join(body.to_list())
    return text + "\n" if text else ""


def _warn_inversions(r: pl.DataFrame) -> None:
    """The rank column is kept, and `float32_strict` lowers every score that is higher than the one ranked
    above it: a frame whose scores rise down its ranks gets them rewritten (0.9 below 0.1 becomes 0.0999...).
    Ties are expected (RRF) and pass quietly; a real inversion is worth a warning."""
    s32 = pl.col("score").cast(pl.Float32)
    up = r.sort("qid", "rank").with_columns((s32 > s32.shift(1).over("qid")).fill_null(False).alias("_up")).filter("_up")
    if len(up):
        warnings.warn(
            f"write_run: in {up['qid'].n_unique()} queries a score is higher than the one ranked above it (e.g. "
            f"query {up['qid'][0]!r}, document {up['doc_id'][0]!r}, rank {up['rank'][0]}, score {up['score'][0]:g}); "
            "the rank column is kept and such scores are lowered to follow it, since evaluators re-sort by score. "
            "Drop the rank column to rank by score instead.",
            UserWarning, stacklevel=3,
        )


def rank_conflicts(run: pl.DataFrame) -> int:
    """Number of queries whose rank column orders documents differently from trec_eval's re-sort (score
    as float32 descending, then doc id descending): where `hrt eval --ties trec` and `--ties rank` differ."""
    if run.is_empty() or "rank" not in run.columns:
        return 0
    by_rank = run.sort("qid", "rank", "doc_id").select("qid", "doc_id")
    by_score = run.with_columns(pl.col("score").cast(pl.Float32).alias("s32")).sort(
        ["qid", "s32", "doc_id"], descending=[False, True, True]
    )
    diff = by_rank["doc_id"] != by_score["doc_id"]
    return int(by_rank.filter(diff)["qid"].n_unique())


# Column names a qrels file's header line may use (user trial AM: `qid docid rel` stopped at "grade 'rel' is not a number").
_HEADER_WORDS = frozenset({"query-id", "query_id", "queryid", "qid", "topic", "corpus-id", "corpus_id", "doc-id", "doc_id", "docid",
                           "docno", "score", "rel", "relevance", "label", "grade", "judgement", "judgment", "iteration", "iter",
                           "q0"})


def read_qrels(path: str | Path) -> pl.DataFrame:
    """Qrels as [qid, doc_id, rel]: BEIR tsv (`query-id corpus-id score`, tab separated, header optional),
    TREC (`qid 0 docid rel`, whitespace separated), or `qid docid rel` separated by spaces, told apart by the
    first line."""
    path = Path(path)
    df = _lines(path)
    if df.is_empty():
        return pl.DataFrame(schema=QRELS_SCHEMA)
    first = df["line"][0]
    fields = first.split()
    if fields == _BEIR_HEADER or (len(fields) in (3, 4) and all(f.lower() in _HEADER_WORDS for f in fields)):
        # BEIR's header, or another tool's column names (ir_datasets: query_id iteration doc_id relevance); the same line
        # again further down is the header of a second file joined to the first (user trial AT), not a judgement.
        df = df.slice(1).filter(pl.col("line").str.strip_chars() != first.strip())
        beir = len(fields) == 3 and "\t" in first
    elif fields and not re.fullmatch(r"[+-]?\d+", fields[-1]) and not any(c.isdigit() for c in first):
        sep = next((c for c in ",;" if c in first and len(fields) < 3), None)
        if sep:  # the separator first: the column names may be the known ones (user trial AT's CSV from Excel)
            raise InputError(f"{path}:1: the fields are separated by {sep!r}: qrels take tabs (BEIR) or TREC's spaces; "
                             "save the file as tab-separated")
        raise InputError(f"{path}:1: {first.strip()!r} reads as a header this reader does not know (known: "
                         f"'{' '.join(_BEIR_HEADER)}' or column names such as 'qid docid rel', 'query_id iteration "
                         "doc_id relevance'); remove it or rename its columns")
    else:
        beir = "\t" in first and len(first.strip().split("\t")) == 3
    if not beir and len(fields) == 3:  # `qid docid rel` separated by spaces, as some scripts write (user trial AT)
        parts = _split(df, _PLAIN3_QRELS_RE, ["qid", "doc_id", "rel"], path, "3 fields 'qid docid rel'")
    elif beir:
        parts = _split(
            df,
            _BEIR_QRELS_RE,
            ["qid", "doc_id", "rel"],
            path,
            "3 tab-separated fields 'query-id corpus-id score'",
        )
    else:
        parts = _split(
            df,
            _TREC_QRELS_RE,
            ["qid", "iter", "doc_id", "rel"],
            path,
            "4 fields 'qid 0 docid rel' (or BEIR tsv)",
        )
    out = pl.DataFrame(
        {
            "lineno": parts["lineno"],
            "qid": parts["qid"],
            "doc_id": parts["doc_id"],
            "rel": _int_grades(parts, "rel", path),
        }
    )
    # A judgement repeated with the same grade is harmless (the shared LoCoMo qrels have some): keep one.
    # The same pair with two different grades is ambiguous, so it stays an error.
    out = out.unique(["qid", "doc_id", "rel"], keep="first", maintain_order=True)
    _check_unique(out, path, "judgement (with a different grade)")
    return out.drop("lineno")
