"""Provider status as part of the result: which queries lost their reranker or expander, and why.

The guarded stages (rerank, expansion) never raise on a provider failure: the query keeps its retrieval
order or its original text. That is only safe if the reader can see it, so the status of each provider is
carried per query into `Result.per_query` (columns `reranker`, `expander`, `embedder`, `provider_notes`),
as a flag on every final row of an affected query (`reranker_fallback`, `expansion_fallback`, so the trace's
final stage shows it), as a line in search output, and as a count in `hrt run` and `hrt report`.
"""

from __future__ import annotations

import re
import warnings

import polars as pl

FLAGS = {"reranker": "reranker_fallback", "expander": "expansion_fallback", "embedder": "embedder_fallback"}
_WHAT = {
    "reranker": ("reranker unavailable", "retrieval order kept"),
    "expander": ("query expansion unavailable", "original query only"),
    "embedder": ("embedder unavailable", "lexical results only"),
}
STATUS_SCHEMA = {
    "qid": pl.Utf8,
    "reranker": pl.Utf8,
    "expander": pl.Utf8,
    "embedder": pl.Utf8,
    "provider_notes": pl.List(pl.Utf8),
}

_REASONS = [
    re.compile(r"HTTP 40[13] auth failed, (?:key refused|no key sent)"),
    re.compile(r"(?:rate limited|unavailable), retry after [\d.e+]+ s"),
    re.compile(r"HTTP 3\d\d redirect"),
    re.compile(r"HTTP \d{3}"),
    re.compile(r"timed out after [\d.]+ ?s|deadline of [\d.]+ ?s|bound of [\d.]+ ?s \([^)]*\) spent"),
    re.compile(r"malformed JSON"),
    re.compile(r"run budget of [\d.]+ ?s spent"),
    re.compile(r"not called after \d+ consecutive failures"),
    re.compile(r"connection error"),
    re.compile(r"index \d+ out of range"),
    re.compile(r"returned no scores"),
    re.compile(r"scored \d+ of the \d+ documents sent"),
    re.compile(r"no expansions for qid .*?(?= / |$)"),
    re.compile(r"unexpected [a-z ]+answer"),
]


# A leading "<model or URL>: " of an error ("rr: ...", "http://host/v1/embeddings: ..."); not an exception's
# class name ("ReadError: ..."), which is part of the cause.
_LABEL = re.compile(r"(?!\w*(?:Error|Exception|Timeout|Warning): )(\S+): (?=\S)")
# A result rejected for a NaN or infinite number (Python's JSON reads both): "... numeric 'relevance_score': {... nan}".
_NON_FINITE = re.compile(r"numeric '(\w+)': .*?'\1': (-?inf|nan)\b")
REASON_CHARS = 60
_PROXY = re.compile(r"sent through the proxy (\S+?),")  # what `rerank.post_json` adds when the environment named one


def _cause_first(text: str) -> str:
    """`rr: http://h/v1: embeddings contain NaN` -> `embeddings contain NaN; rr, http://h/v1`: a shortened
    note then still says what went wrong; the model and URL follow."""
    labels = []
    while len(labels) < 3 and (m := _LABEL.match(text)):
        labels.append(m.group(1))
        text = text[m.end():]
    return f"{text}; {', '.join(labels)}" if labels else text


def reason(error: str | None) -> str:
    """A short reason for a provider error ("HTTP 500", "timed out after 2s", ...), for one-line notes.
    When the error is a trip ("not called after N failures (last: HTTP 500 ...)"), the last cause counts.
    Any other error is shortened with its cause first and the model or URL it names after it."""
    if not error:
        return "no reason given"
    last = error.rsplit("(last: ", 1)[-1]
    # a proxy's refusal is not the endpoint's (user trial BJ: a proxy's 502 read "embedder unavailable (HTTP 502)")
    via = f" via the proxy {p.group(1)}" if (p := _PROXY.search(error)) else ""
    for pat in _REASONS:
        m = pat.search(last) or pat.search(error)
        if m:
            return m.group(0) + via
    text = _cause_first(" ".join(error.split()))
    if m := _NON_FINITE.search(last):
        text = f"non-finite {m.group(1)} ({m.group(2)}): {text}"
    return text if len(text) <= REASON_CHARS else text[: REASON_CHARS - 1] + "…"


def note(provider: str, error: str | None) -> str:
    """`reranker unavailable (HTTP 500): retrieval order kept`."""
    what, consequence = _WHAT[provider]
    return f"{what} ({reason(error)}): {consequence}"


class ProviderFallbackWarning(UserWarning):
    """A reranker, expander or embedding endpoint failed and `prepare` fell back (the retrieval order, no expansion,
    lexical only): said once per prepare, so a service calling the API sees it without reading `per_query` (user
    trial AN: a wrong key served un-reranked results in silence). `hrt` prints its own lines instead."""


def warn_fallbacks(prep: object, *, stacklevel: int = 3) -> None:
    """One `ProviderFallbackWarning` for a degraded `Prepared`: which provider fell back, for how many queries, why."""
    if degraded(prep):
        per_query = query_status(prep.queries, prep.rerank_status, prep.expansion_status, dense=True,  # type: ignore[attr-defined]
                                 embed_status=getattr(prep, "embed_status", None))
        warnings.warn(f"providers: {summary(per_query)}; the results are the fallback's", ProviderFallbackWarning,
                      stacklevel=stacklevel)


def degraded(prep: object) -> bool:
    """True when any query of a `Prepared` lost a provider (such results are not worth caching)."""
    frames = (getattr(prep, n, None) for n in ("rerank_status", "expansion_status", "embed_status"))
    return any(f is not None and len(f) and (f["status"] == "fallback").any() for f in frames)


def query_status(
    queries: pl.DataFrame,
    rerank_status: pl.DataFrame | None,
    expansion_status: pl.DataFrame | None,
    *,
    dense: bool,
    embed_status: pl.DataFrame | None = None,
) -> pl.DataFrame:
    """[qid, reranker, expander, embedder, provider_notes] for every query.

    Statuses are those of the stages (rerank: ok / cached / fallback / skipped; expansion: ok / skipped /
    fallback / none). The embedder is "fallback" when an http embedder failed and the lexical lists stood
    alone (`embed_status`), else "ok" when dense retrieval ran and "off" otherwise (a local model that cannot
    load stops the run instead). `provider_notes` holds one line per failed provider."""
    q = queries.select(pl.col("qid").cast(pl.Utf8)).unique(maintain_order=True)

    def part(frame: pl.DataFrame | None, name: str, default: str) -> pl.DataFrame:
        if frame is None or not len(frame):
            return q.with_columns(pl.lit(default).alias(name), pl.lit(None, pl.Utf8).alias(f"{name}_error"))
        f = frame.select(pl.col("qid").cast(pl.Utf8), pl.col("status").alias(name), pl.col("error").alias(f"{name}_error"))
        return q.join(f.unique("qid"), on="qid", how="left").with_columns(pl.col(name).fill_null(default))

    out = (
        q.join(part(rerank_status, "reranker", "skipped"), on="qid")
        .join(part(expansion_status, "expander", "none"), on="qid")
        .join(part(embed_status, "embedder", "ok" if dense else "off"), on="qid")
    )
    rows = []
    cols = ("qid", "reranker", "reranker_error", "expander", "expander_error", "embedder", "embedder_error")
    for qid, rr, rr_err, ex, ex_err, em, em_err in out.select(cols).iter_rows():
        notes = [note(p, err) for p, st, err in (("embedder", em, em_err), ("reranker", rr, rr_err), ("expander", ex, ex_err))
                 if st == "fallback"]
        rows.append((qid, rr, ex, em, notes))
    return pl.DataFrame(rows, schema=STATUS_SCHEMA, orient="row")


def annotate(final: pl.DataFrame, per_query: pl.DataFrame, status: pl.DataFrame) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Add the provider columns to `per_query` and a fallback flag to every final row of an affected query."""
    per_query = per_query.join(status, on="qid", how="left")
    bad = status.filter(pl.col("provider_notes").list.len() > 0)
    if not len(bad) or not len(final):
        return final, per_query
    flags = bad.select(
        "qid",
        pl.concat_list(
            *(pl.when(pl.col(p) == "fallback").then(pl.lit([f], pl.List(pl.Utf8))).otherwise(pl.lit([], pl.List(pl.Utf8)))
              for p, f in FLAGS.items())
        ).alias("_pflags"),
    )
    final = (
        final.join(flags, on="qid", how="left", maintain_order="left")
        .with_columns(pl.col("flags").list.concat(pl.col("_pflags").fill_null(pl.lit([], pl.List(pl.Utf8)))))
        .drop("_pflags")
    )
    return final, per_query


def summary(per_query: pl.DataFrame) -> str:
    """One cell for a run summary or a report table: "ok", or e.g. "reranker fallback 3/33 (HTTP 500)"."""
    if not len(per_query) or "reranker" not in per_query.columns:
        return "ok"
    parts = []
    n = len(per_query)
    for p in FLAGS:
        bad = per_query.filter(pl.col(p) == "fallback")
        if len(bad):
            reasons = sorted({r for notes in bad["provider_notes"].to_list() for r in _reasons_of(notes, p)})
            parts.append(f"{p} fallback {len(bad)}/{n} ({', '.join(reasons)})")
    return "; ".join(parts) or "ok"


def _reasons_of(notes: list[str] | None, provider: str) -> list[str]:
    what = _WHAT[provider][0]
    return [m.group(1) for x in notes or [] if (m := re.match(rf"{what} \((.*)\): ", x))]
