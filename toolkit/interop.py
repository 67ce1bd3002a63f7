"""Data from the tools researchers already use: pandas or polars frames with PyTerrier, BEIR, ir_measures,
ranx or ir_datasets names, ranx and ir_measures objects, and ir_datasets ids in the local cache.

Every entry point of the toolkit that takes queries, qrels or a run passes it through `queries_frame`,
`qrels_frame` or `run_frame` first, so a frame with `(qid, query)` columns (PyTerrier), `(query_id, text)`
(ir_datasets / ir_measures) or `(_id, text)` (BEIR) works wherever a toolkit frame does. The canonical
frames are those of `docs/frames.md`: queries [qid, text, scope?, metadata?], qrels [qid, doc_id, rel],
runs [qid, doc_id, rank, score].

Conversions the other way (`to_ir_measures`, `to_ranx`, `to_pandas`) build the other library's own
objects, so a run from `toolkit.run_pipeline` can be scored by `ir_measures.calc_aggregate` or
`ranx.compare` unchanged. pandas, ranx, ir_measures and ir_datasets are optional and imported lazily.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any, Literal

import polars as pl

from .errors import InputError

IRDS_PREFIX = "irds:"  # "irds:vaswani" as queries or qrels reads the local ir_datasets cache

# canonical column -> accepted spellings, in order of preference. The first alias found is used.
QUERY_COLUMNS = {
    "qid": ("qid", "query_id", "query-id", "q_id", "_id", "id"),  # toolkit/PyTerrier, ir_datasets, BEIR tsv, ranx, BEIR jsonl
    "text": ("text", "query", "query_text", "title"),  # toolkit/BEIR/ir_datasets, PyTerrier, ..., TREC topic title
}
QREL_COLUMNS = {
    "qid": ("qid", "query_id", "query-id", "q_id"),
    "doc_id": ("doc_id", "docno", "corpus-id", "docid", "doc-id"),  # toolkit/ir_measures/ranx, PyTerrier, BEIR
    "rel": ("rel", "label", "relevance", "score", "grade"),  # toolkit, PyTerrier, ir_measures, BEIR/ranx
}
RUN_COLUMNS = {
    "qid": ("qid", "query_id", "query-id", "q_id"),
    "doc_id": ("doc_id", "docno", "corpus-id", "docid"),
    "score": ("score",),
    "rank": ("rank",),
}


def named_index_as_columns(frame: Any) -> Any:
    """A pandas frame with its named index as columns: PyTerrier frames put qid (or a corpus's docno) in the index
    after some transformations, and `to_dict("records")` / `pl.from_pandas` would drop it. An unnamed index is no
    field of the data and stays out."""
    names = getattr(frame.index, "names", [getattr(frame.index, "name", None)])
    if not any(n is not None for n in names):
        return frame
    # An index kept as a column too (`set_index("docno", drop=False)`) is there already: not inserted twice.
    new = [n for n in names if n is not None and n not in frame.columns]
    return frame.reset_index(level=new, drop=False).reset_index(drop=True) if new else frame.reset_index(drop=True)


def _to_polars(obj: Any, what: str) -> pl.DataFrame:
    """A polars frame from a polars or pandas frame (or anything `pl.DataFrame` takes: dicts, rows)."""
    if isinstance(obj, pl.DataFrame):
        return obj
    if isinstance(obj, pl.LazyFrame):
        return obj.collect()
    mod = type(obj).__module__
    if mod.startswith("pandas"):
        return pl.from_pandas(named_index_as_columns(obj))
    if isinstance(obj, Mapping) and obj and all(isinstance(v, str) for v in obj.values()):
        return pl.DataFrame({"qid": list(obj), "text": list(obj.values())})  # {qid: text}
    try:
        return pl.DataFrame(obj)
    except Exception as e:  # polars raises several types for shapes it cannot read
        raise InputError(f"{what}: expected a polars or pandas DataFrame, got {type(obj).__name__} ({e})") from None


def _rename(df: pl.DataFrame, spec: dict[str, tuple[str, ...]], what: str, required: Iterable[str]) -> pl.DataFrame:
    """Rename the first present alias of each canonical column; name the accepted spellings when missing."""
    cols = set(df.columns)
    mapping: dict[str, str] = {}
    for canon, aliases in spec.items():
        if canon in cols:
            continue
        hit = next((a for a in aliases if a in cols and a not in mapping and a not in spec), None)
        if hit is not None:
            mapping[hit] = canon
    out = df.rename(mapping) if mapping else df
    missing = [c for c in required if c not in out.columns]
    if missing:
        need = "; ".join(f"{c}: one of {', '.join(spec[c])}" for c in missing)
        raise InputError(f"{what}: missing column(s) ({need}); have {', '.join(df.columns) or 'none'}")
    return out


def queries_frame(queries: Any) -> pl.DataFrame:
    """Queries as the toolkit's frame [qid, text, scope, (metadata)], from a polars or pandas frame with
    toolkit, PyTerrier (`qid, query`), BEIR (`_id, text`) or ir_datasets (`query_id, text`) columns, or a
    {qid: text} dict, or "irds:<ir_datasets id>" (local cache only). An empty query text is an error naming
    the query."""
    if isinstance(queries, str) and queries.startswith(IRDS_PREFIX):
        return from_ir_datasets(queries[len(IRDS_PREFIX):])[0]
    if hasattr(queries, "__fspath__") or isinstance(queries, str) and Path(queries).exists():
        raise InputError(f"queries: got a path ({queries}); load it with Dataset.open(...).queries(split) or load_queries(path)")
    if isinstance(queries, str):  # a query's text, or a mistyped path, where a set of queries goes (user trial AV)
        raise InputError(f"queries: got a string ({queries[:60]!r}), not a set of queries (and no file of that name): "
                         "give one query as {'q1': 'its text'} or a frame with qid and text columns, or load a file "
                         "with load_queries(path)")
    try:
        df = _rename(_to_polars(queries, "queries"), QUERY_COLUMNS, "queries", ("qid", "text"))
    except (TypeError, ValueError, pl.exceptions.PolarsError) as e:  # pyarrow's "Expected bytes, got a 'int'"
        raise InputError(f"queries: cannot read the frame ({type(e).__name__}: {e}); give each column one type "
                         "(ids as text)") from None
    # Ids as text or integers, as documents' (user trial AP: a CSV column with a gap read as floats gave "1.0",
    # which no judgement names; a null id crashed the run).
    if df["qid"].dtype.is_float() or df["qid"].dtype == pl.Boolean or isinstance(df["qid"].dtype, pl.List | pl.Struct):
        raise InputError(f"queries: column qid holds {df['qid'].dtype} values (e.g. {df['qid'][0]!r}): ids must be text or "
                         "integers (a CSV id column with a missing value reads as floats: read it as text)")
    if df["qid"].null_count():
        raise InputError(f"queries: {df['qid'].null_count()} query id(s) are missing (null)")
    df = df.with_columns(pl.col("qid").cast(pl.Utf8), pl.col("text").cast(pl.Utf8))
    empty = df.filter(pl.col("text").is_null() | (pl.col("text").str.strip_chars() == ""))
    if len(empty):
        raise InputError(f"queries: query {empty['qid'][0]!r} has an empty text")
    dup = df["qid"].is_duplicated()
    if dup.any():
        raise InputError(f"queries: duplicate query id {df.filter(dup)['qid'][0]!r}")
    if "scope" not in df.columns:
        df = df.with_columns(pl.lit(None, pl.Utf8).alias("scope"))
    extra = [c for c in df.columns if c not in ("qid", "text", "scope", "metadata")]
    if extra:  # other columns are the query's metadata, as a query file's other fields are (its `date` is its as-of)
        df = df.with_columns(pl.Series("metadata", _extra_metadata(df, extra), dtype=pl.Utf8))
    keep = ["qid", "text", "scope"] + (["metadata"] if "metadata" in df.columns else [])
    return df.select(keep).with_columns(pl.col("scope").cast(pl.Utf8))


def _extra_metadata(df: pl.DataFrame, extra: list[str]) -> list[str]:
    """Each row's `metadata` (JSON text) with the frame's other columns added under their names, checked as a query
    file's fields are (user trial AP: a topics frame's `date` column was dropped, so the recency prior used "now"
    where the same topics as JSONL used their dates). A key of `metadata` itself wins."""
    import json
    import logging

    from .loaders import _flat_query_fields, _plain
    from .metatypes import is_date_field, parse_date

    log = logging.getLogger("toolkit")
    usable = []
    for c in extra:  # judged once per column (the review: a warning per row, a whole frame refused for one column)
        dt = df[c].dtype
        if isinstance(dt, pl.Duration | pl.Binary | pl.Object | pl.Time):
            log.warning("warning: queries: column `%s` (%s) is not kept as metadata: no JSON form", c, dt)
        elif is_date_field(c) and any(parse_date(v) is None for v in df[c].drop_nulls().to_list()):
            log.warning("warning: queries: column `%s` holds values that are not dates; not kept as metadata", c)
        else:
            usable.append(c)
    extra = usable
    out = []
    for row in df.select("qid", *extra, *(["metadata"] if "metadata" in df.columns else [])).iter_rows(named=True):
        where = f"queries: query {row['qid']!r}"
        meta = row.get("metadata")
        meta = json.loads(meta) if isinstance(meta, str) and meta else (meta or {})
        if not isinstance(meta, dict):
            raise InputError(f"{where}: column `metadata` must hold objects (or their JSON)")
        fields = {k: _plain(row[k], where, k) for k in extra if row[k] is not None}
        out.append(json.dumps({**_flat_query_fields(fields, meta, where), **meta}))
    return out


def qrels_frame(qrels: Any) -> pl.DataFrame:
    """Judgements as [qid, doc_id, rel] from a polars/pandas frame (toolkit, PyTerrier `qid, docno, label`,
    BEIR `query-id, corpus-id, score`, ir_measures `query_id, doc_id, relevance`, ranx `q_id, doc_id,
    score`), a {qid: {doc_id: rel}} dict (pytrec_eval, ranx, BEIR), a `ranx.Qrels`, or ir_measures `Qrel`s."""
    if qrels is None:
        raise InputError("qrels: none given")
    if isinstance(qrels, str) and qrels.startswith(IRDS_PREFIX):
        got = from_ir_datasets(qrels[len(IRDS_PREFIX):])[1]
        if got is None:
            raise InputError(f"ir_datasets {qrels[len(IRDS_PREFIX):]!r}: has no qrels")
        return got
    if _looks_like_path(qrels):  # a qrels file (BEIR tsv or TREC), as `hrt eval` reads it
        from .runs import read_qrels

        return read_qrels(_file(qrels, "qrels"))
    if type(qrels).__module__.startswith("ranx"):
        qrels = qrels.to_dict()
    if isinstance(qrels, Mapping) and all(isinstance(v, Mapping) for v in qrels.values()):
        pairs = [(str(q), str(d), r) for q, docs in qrels.items() for d, r in docs.items()]
        df = pl.DataFrame(
            {"qid": [p[0] for p in pairs], "doc_id": [p[1] for p in pairs], "rel": pl.Series([p[2] for p in pairs], strict=False)},
            schema_overrides={"qid": pl.Utf8, "doc_id": pl.Utf8},
        )
        return df.with_columns(_int_grades(df, "rel"))
    qrels = _namedtuples(qrels)
    raw = _to_polars(qrels, "qrels")
    df = _rename(raw, QREL_COLUMNS, "qrels", ("qid", "doc_id", "rel"))
    source = next(c for c in ("rel", *QREL_COLUMNS["rel"]) if c in raw.columns)  # the column _rename took
    return _one_grade(df.select(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8), _int_grades(df, source)))


def _one_grade(df: pl.DataFrame) -> pl.DataFrame:
    """One row per (query, document), its highest grade, as `metrics.evaluate` scores it, and said when two grades
    disagree: ranx kept the last and ir_measures both, so the three disagreed on one frame (user trial AP)."""
    if not df.select(pl.struct("qid", "doc_id").is_duplicated().any()).item():
        return df
    conflict = df.group_by("qid", "doc_id").agg(pl.col("rel").n_unique().alias("n")).filter(pl.col("n") > 1)
    if len(conflict):
        import warnings

        warnings.warn(f"qrels: {len(conflict)} (query, document) pair(s) judged with different grades, e.g. query "
                      f"{conflict['qid'][0]!r} document {conflict['doc_id'][0]!r}: the highest grade is used", UserWarning,
                      stacklevel=3)
    return df.group_by("qid", "doc_id", maintain_order=True).agg(pl.col("rel").max())


def _int_grades(df: pl.DataFrame, source: str) -> pl.Series:
    """The `rel` column as Int64. 1.0 is accepted; 0.5, "high" or a missing grade is an error naming the column
    and the value, because a cast would truncate 2.7 to 2 silently (`read_qrels` rejects them in files too)."""
    rel = df["rel"]
    if (rel.dtype.is_integer() or rel.dtype == pl.Boolean) and not rel.null_count():
        return rel.cast(pl.Int64).alias("rel")
    as_float = rel.cast(pl.Float64, strict=False)
    bad = (as_float.is_null() | ~as_float.is_finite() | (as_float != as_float.round(0))).fill_null(True)
    if bad.any():
        i = bad.arg_max()
        raise InputError(
            f"qrels: column {source!r}: relevance grade {rel[i]!r} (query {df['qid'][i]!r}, document "
            f"{df['doc_id'][i]!r}) is not an integer (grades must be integers, as in trec_eval)"
        )
    return as_float.cast(pl.Int64).alias("rel")


def run_frame(run: Any) -> pl.DataFrame:
    """A run as [qid, doc_id, rank, score] from a polars/pandas frame (toolkit, PyTerrier `qid, docno,
    score`, ir_measures `query_id, doc_id, score`), a {qid: {doc_id: score}} dict, a `ranx.Run`, or
    ir_measures `ScoredDoc`s. A missing rank is derived from the score in trec_eval's order (highest
    first, ties by doc id descending); a missing score is -rank."""
    run = _run_of(run)
    if type(run).__module__.startswith("ranx"):
        run = run.to_dict()
    if isinstance(run, Mapping) and all(isinstance(v, Mapping) for v in run.values()):
        rows = [(str(q), str(d), float(s)) for q, docs in run.items() for d, s in docs.items()]
        run = pl.DataFrame(rows, schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "score": pl.Float64}, orient="row")
    run = _namedtuples(run)
    df = _rename(_to_polars(run, "run"), RUN_COLUMNS, "run", ("qid", "doc_id"))
    if "score" not in df.columns and "rank" not in df.columns:
        raise InputError(f"run: missing column(s): a score or a rank column is needed; have {', '.join(df.columns)}")
    df = df.with_columns(pl.col("qid").cast(pl.Utf8), pl.col("doc_id").cast(pl.Utf8))
    if "score" not in df.columns:
        df = df.with_columns((-pl.col("rank").cast(pl.Float64)).alias("score"))
    if "rank" not in df.columns:
        # trec_eval's order (score descending, ties by doc id descending), so `write_run` keeps these ranks.
        df = df.sort(["qid", "score", "doc_id"], descending=[False, True, True]).with_columns(
            pl.int_range(1, pl.len() + 1, dtype=pl.Int64).over("qid").alias("rank")
        )
    rank = pl.col("rank").cast(pl.Int64)
    if len(df) and df["rank"].min() == 0:  # PyTerrier counts from 0; runs (and docs/frames.md) from 1 (user trial AP)
        rank = rank + 1
    return df.select("qid", "doc_id", rank.alias("rank"), pl.col("score").cast(pl.Float64)).sort("qid", "rank")


def _looks_like_path(obj: Any) -> bool:
    """A path object, or a string naming a file (an existing one, or one with a folder or an extension: a mistyped
    path must not be read as a query's text or as column names)."""
    if hasattr(obj, "__fspath__"):
        return True
    return isinstance(obj, str) and ("\n" not in obj) and (Path(obj).exists() or "/" in obj or Path(obj).suffix.lower()
                                                            in (".jsonl", ".json", ".tsv", ".txt", ".trec", ".run", ".qrels"))


def _file(obj: Any, what: str) -> Path:
    """`obj` as the path of an existing file, or an error naming it."""
    p = Path(obj)
    if p.is_dir():
        raise InputError(f"{what}: {p} is a folder, not a file (a collection's judgements: Dataset.open(folder).qrels(split))")
    if not p.is_file():
        raise InputError(f"{what}: {p}: no such file")
    return p


def _is_result(obj: Any) -> bool:
    """A pipeline `Result` (told by its shape: importing the pipeline here would load it for every conversion)."""
    return type(obj).__name__ == "Result" and callable(getattr(obj, "run", None)) and hasattr(obj, "final")


def _run_of(obj: Any) -> Any:
    """A pipeline `Result` as its run (`Result.run()`: every result, the collapsed copies after theirs); a TREC run
    file as `runs.read_run` reads it; anything else as it is. `evaluate(result, qrels)`, `write_run`, `to_ranx` and
    `to_pandas` refused a Result with a polars error that did not name `.run()` (user trial AV)."""
    if _is_result(obj):
        return obj.run()
    if _looks_like_path(obj):
        from .runs import read_run

        return read_run(_file(obj, "run"))
    return obj


def _namedtuples(obj: Any) -> Any:
    """ir_measures `Qrel`/`ScoredDoc` (named tuples) and other iterables of named tuples -> list of dicts."""
    if isinstance(obj, list | tuple) and obj and hasattr(obj[0], "_asdict"):
        return [x._asdict() for x in obj]
    if not isinstance(obj, list | tuple | Mapping | pl.DataFrame) and not type(obj).__module__.startswith("pandas") and hasattr(obj, "__iter__"):
        items = list(obj)
        return [x._asdict() for x in items] if items and hasattr(items[0], "_asdict") else items
    return obj


# ------------------------------------------------------------------ the other way
def to_pandas(frame: pl.DataFrame, style: Literal["pyterrier", "ir_measures", "beir", "toolkit"] = "pyterrier") -> Any:
    """A toolkit queries/qrels/run frame as pandas with `style` column names: "pyterrier" (qid, query,
    docno, label), "ir_measures" (query_id, doc_id, relevance), "beir" (query-id, corpus-id, score)."""
    names = {
        "pyterrier": {"text": "query", "doc_id": "docno", "rel": "label"},
        "ir_measures": {"qid": "query_id", "rel": "relevance"},
        "beir": {"qid": "query-id", "doc_id": "corpus-id", "rel": "score"},
        "toolkit": {},
    }
    if style not in names:
        raise InputError(f"style {style!r}: expected one of {', '.join(names)}")
    frame = frame.run() if _is_result(frame) else frame
    if not isinstance(frame, pl.DataFrame):
        raise InputError(f"to_pandas: a toolkit frame or a Result, got {type(frame).__name__} (a file: read it with "
                         "read_run, read_qrels or load_queries first)")
    _optional("pandas")  # polars' own ImportError named neither the toolkit nor its extra (user trial BO)
    return frame.rename({k: v for k, v in names[style].items() if k in frame.columns}).to_pandas()


# Columns that only judgements have. BEIR qrels call their grade `score`, so their `query-id`/`corpus-id`
# names decide it; a frame with a `rank` column is a run whatever its names.
_QREL_ONLY = ("rel", "label", "relevance", "grade")
_BEIR_IDS = ("query-id", "corpus-id")


def _qrels_or_run(obj: Any, kind: str | None) -> tuple[str, Any]:
    """("qrels" | "run", obj ready for `qrels_frame` / `run_frame`). Frames are told apart by their columns:
    a grade column (rel, label, relevance, grade) or BEIR ids without a rank mean qrels, anything else a
    run; ranx objects by their type, ir_measures `Qrel`s by their `relevance` field; a {qid: {doc_id: value}}
    dict is a run. `kind` ("qrels" or "run") overrides the guess, e.g. for ranx-style qrels `q_id, doc_id,
    score`."""
    if kind is not None and kind not in ("qrels", "run"):
        raise InputError(f"kind {kind!r}: expected 'qrels' or 'run'")
    if type(obj).__module__.startswith("ranx"):
        return kind or ("qrels" if type(obj).__name__ == "Qrels" else "run"), obj
    if _is_result(obj):
        return "run", obj.run()
    if _looks_like_path(obj):  # a TREC run has 6 fields a line, judgements 3 or 4
        p = _file(obj, kind or "qrels or run")
        with p.open(encoding="utf-8-sig", errors="replace") as fh:  # the first line decides: not the whole file read twice
            first = next((line for line in fh if line.strip()), "")
        kind = kind or ("run" if len(first.split()) == 6 else "qrels")
        return kind, (run_frame(p) if kind == "run" else qrels_frame(p))
    if isinstance(obj, Mapping) and all(isinstance(v, Mapping) for v in obj.values()):
        return kind or "run", obj
    df = _to_polars(_namedtuples(obj), kind or "qrels or run")
    if kind is None:
        cols = set(df.columns)
        beir = bool(cols & set(_BEIR_IDS)) and "rank" not in cols
        kind = "qrels" if cols & set(_QREL_ONLY) or beir else "run"
    return kind, df


def to_ir_measures(frame: Any, kind: str | None = None) -> list[Any]:
    """Qrels -> a list of `ir_measures.Qrel`, a run -> a list of `ir_measures.ScoredDoc` (what
    `ir_measures.calc_aggregate(measures, qrels, run)` iterates). Either may be any shape `qrels_frame` /
    `run_frame` reads; which one it is follows from the columns (see `_qrels_or_run`), or `kind`."""
    ir_measures = _optional("ir_measures")
    kind, frame = _qrels_or_run(frame, kind)
    if kind == "qrels":
        q = qrels_frame(frame)
        return [ir_measures.Qrel(a, b, c) for a, b, c in q.iter_rows()]
    r = run_frame(frame)
    return [ir_measures.ScoredDoc(a, b, c) for a, b, c in r.select("qid", "doc_id", "score").iter_rows()]


def to_ranx(frame: Any, name: str | None = None, kind: str | None = None) -> Any:
    """Qrels -> `ranx.Qrels`, a run -> `ranx.Run` (named `name`, as `ranx.compare` labels it). Qrels or run
    as for `to_ir_measures`: told apart by the columns, or by `kind` ("qrels" or "run")."""
    ranx = _optional("ranx")
    kind, frame = _qrels_or_run(frame, kind)
    if kind == "qrels":
        return ranx.Qrels(_nested(qrels_frame(frame), "rel", int), name=name)
    return ranx.Run(_nested(run_frame(frame), "score", float), name=name)


def _nested(df: pl.DataFrame, value: str, cast: type) -> dict[str, dict[str, Any]]:
    out: dict[str, dict[str, Any]] = {}
    for q, d, v in df.select("qid", "doc_id", value).iter_rows():
        out.setdefault(q, {})[d] = cast(v)
    return out


def _optional(name: str) -> Any:
    """A library of the `interop` extra (pandas, ranx, ir_measures, ir_datasets), or an InputError saying how to
    install it."""
    import importlib

    from .errors import install_hint

    try:
        return importlib.import_module(name)
    except ImportError:
        raise InputError(f"{name} is not installed: {install_hint(name.replace('_', '-'), 'interop')}") from None


# ------------------------------------------------------------------ ir_datasets, from the local cache only
@contextmanager
def _no_downloads(dataset_id: str):
    """Make every remote ir_datasets download raise instead of fetching. Hand-written because ir_datasets
    has no offline switch: a file missing from its cache is downloaded on first use, which must never
    happen here (no dataset downloads at run time)."""
    from ir_datasets.util import download as dl

    def refuse(self, *_a: Any, **_k: Any) -> Any:
        raise InputError(
            f"ir_datasets {dataset_id!r}: not in the local ir_datasets cache ({dl.util.home_path()}); "
            f"the toolkit does not download datasets. Download it once with ir_datasets where the network "
            f"allows, or export it to a BEIR folder"
        )

    remote = [c for c in (dl.RequestsDownload, dl.GoogleDriveDownload, dl.GoogleCloudBucketStream) if hasattr(c, "stream")]
    from ir_datasets.log import easy

    log = easy().logger()  # (built now: built on first use, it would set its own level) its "[WARNING] Download failed"
    level = log.level
    log.setLevel(40)  # ERROR: the warning per download source repeats the error this raises
    try:
        with _patched(remote, refuse):
            yield
    finally:
        log.setLevel(level)


def _wrapped_input_error(e: BaseException) -> InputError | None:
    """Our refusal inside ir_datasets' RuntimeError('All download sources failed', [(source, error), ...])
    (user trial Y: a 750-character nested repr instead of the sentence)."""
    todo: list[Any] = [e]
    while todo:
        x = todo.pop()
        if isinstance(x, InputError):
            return x
        if isinstance(x, BaseException):
            todo.extend(x.args)
        elif isinstance(x, list | tuple):
            todo.extend(x)
    return None


@contextmanager
def _patched(classes: list[type], fn: Any):
    saved = [(c, c.__dict__.get("stream"), c.__dict__.get("__iter__")) for c in classes]
    try:
        for c, _, it in saved:
            c.stream = fn
            if it is not None:
                c.__iter__ = fn
        yield
    finally:
        for c, st, it in saved:
            if st is not None:
                c.stream = st
            if it is not None:
                c.__iter__ = it


def from_ir_datasets(dataset_id: str) -> tuple[pl.DataFrame, pl.DataFrame | None]:
    """(queries, qrels) of an ir_datasets id, read from the local ir_datasets cache; qrels is None when the
    dataset has none. A dataset that is not cached is a clear error, never a download."""
    irds = _optional("ir_datasets")
    try:
        ds = irds.load(dataset_id)
    except KeyError:
        raise InputError(f"ir_datasets {dataset_id!r}: unknown dataset id") from None
    if not ds.has_queries():
        raise InputError(f"ir_datasets {dataset_id!r}: has no queries")
    with _no_downloads(dataset_id):
        try:
            qrows = [(str(q.query_id), str(getattr(q, "text", None) or getattr(q, "title", ""))) for q in ds.queries_iter()]
            qrels = (
                pl.DataFrame(
                    [(str(r.query_id), str(r.doc_id), int(r.relevance)) for r in ds.qrels_iter()],
                    schema={"qid": pl.Utf8, "doc_id": pl.Utf8, "rel": pl.Int64}, orient="row",
                )
                if ds.has_qrels()
                else None
            )
        except InputError:
            raise
        except Exception as e:  # a truncated or corrupt cache file, or our refusal wrapped in "All download sources failed"
            ours = _wrapped_input_error(e)
            if ours is not None:
                raise ours from None
            raise InputError(f"ir_datasets {dataset_id!r}: cannot read the local cache ({type(e).__name__}: {e})") from None
    queries = queries_frame(pl.DataFrame(qrows, schema={"qid": pl.Utf8, "text": pl.Utf8}, orient="row"))
    return queries, qrels
