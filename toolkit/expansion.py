"""Query expansion: typed variants of each query, from a file or an OpenAI-compatible chat endpoint.

Variants are typed because they go to different retrievers: `lex` (keyword rewrites) to BM25 only, `vec`
(paraphrases) and `hyde` (a hypothetical answer passage) to the dense retriever only. The original query is
always variant "orig". Like reranking, expansion is guarded: a provider failure leaves the query with its
original text only, status "fallback" and the reason, and never raises.
"""

from __future__ import annotations

import json
import re
import warnings
from collections import Counter
from pathlib import Path
from typing import Protocol

import polars as pl

from .errors import InputError, ToolkitError
from .progress import progress_bar, someone_watching
from .redact import header_secrets, scrub
from .rerank import PROGRESS_MIN_QUERIES, ProviderError, RunBudget, api_key_headers, http_client, post_json

KINDS = ("lex", "vec", "hyde")
VARIANTS_SCHEMA = {"qid": pl.Utf8, "variant": pl.Utf8, "kind": pl.Utf8, "text": pl.Utf8}
STATUS_SCHEMA = {"qid": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8}

EXPANSION_PROMPT = """\
You rewrite search queries for a hybrid retrieval system that runs keyword search (BM25) and semantic \
vector search over a collection of notes and documents.
For the user's query, answer with typed lines only, no other text:
lex: a short keyword query for BM25 (exact terms, identifiers, error codes, synonyms), up to 3 lines
vec: a natural-language paraphrase of the query for vector search, up to 3 lines
hyde: one short passage (2-3 sentences) that would answer the query, as it might appear in the collection
Keep names, numbers, versions and identifiers from the query exactly as written."""


class Expander(Protocol):
    """`expand` returns typed expansions [(kind, text)], kind in lex / vec / hyde; it raises on failure.
    `qid` lets file-backed expanders look a query up by id; others ignore it."""

    def expand(self, query: str, *, qid: str | None = None) -> list[tuple[str, str]]: ...


class FileExpander:
    """Precomputed expansions from JSONL: `{"qid": ... or "query": ..., "expansions": [{"type": "lex", "text":
    ...}, ...]}`. Looked up by qid first, then by the exact query text. A query missing from the file is a
    failure (status "fallback"), so a file that does not cover the query set is visible in the status."""

    def __init__(self, path: str | Path) -> None:
        if not path:
            raise ToolkitError("expansion.path: the file expander needs the path of a JSONL file")
        self.path = Path(path).expanduser()
        if not self.path.exists():
            raise InputError(f"{self.path}: expansion file not found (expansion.path)")
        self._by_qid: dict[str, list[tuple[str, str]]] = {}
        self._by_query: dict[str, list[tuple[str, str]]] = {}
        self._load()

    def _load(self) -> None:
        with self.path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                where = f"{self.path}:line {n}"
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"{where}: invalid JSON ({e.msg})") from e
                if not isinstance(obj, dict) or not isinstance(obj.get("expansions"), list):
                    raise InputError(f"{where}: expected an object with an 'expansions' list")
                exps = []
                for i, e in enumerate(obj["expansions"]):
                    kind = e.get("type") if isinstance(e, dict) else None
                    text = e.get("text") if isinstance(e, dict) else None
                    if kind not in KINDS or not isinstance(text, str):
                        raise InputError(
                            f"{where}: expansions[{i}] needs 'type' in {list(KINDS)} and a string 'text', got {e!r}"
                        )
                    exps.append((kind, text))
                key, table = (
                    (obj["qid"], self._by_qid)
                    if obj.get("qid") is not None
                    else (obj.get("query"), self._by_query)
                )
                if not isinstance(key, str | int) or isinstance(key, bool):
                    raise InputError(f"{where}: needs a 'qid' or a 'query' string")
                key = str(key)
                if key in table:
                    raise InputError(f"{where}: {key!r} appears twice in the file")
                table[key] = exps

    def expand(self, query: str, *, qid: str | None = None) -> list[tuple[str, str]]:
        if qid is not None and qid in self._by_qid:
            return self._by_qid[qid]
        if query in self._by_query:
            return self._by_query[query]
        raise ProviderError(f"{self.path.name}: no expansions for qid {qid!r} / this query text")


_THINK = re.compile(r"<think>.*?</think>", re.DOTALL | re.IGNORECASE)
# A typed line, tolerant to bullets, numbering, markdown emphasis and case: "- **LEX:** foo", "2) Vec - bar".
_TYPED = re.compile(
    r"^\s*(?:[-*+•]\s*|\d+\s*[.)]\s*)?[*_`]*\s*(lex|vec|hyde)\s*[*_`]*\s*[:：\-–]\s*[*_`]*\s*(.+?)\s*$",
    re.IGNORECASE,
)


def parse_typed_lines(content: str) -> list[tuple[str, str]]:
    """[(kind, text)] from lines like `lex: ...`; other lines (preambles, blank lines, reasoning) are ignored."""
    out = []
    for line in _THINK.sub("", content).splitlines():
        m = _TYPED.match(line)
        if m:
            text = m.group(2).strip().strip("*_`").strip().strip("\"'").strip()
            if text:
                out.append((m.group(1).lower(), text))
    return out


class HttpExpander:
    """An OpenAI-compatible `/v1/chat/completions` endpoint, asked with `EXPANSION_PROMPT`:

    {EXPANSION_PROMPT}

    The answer's typed lines (`lex: ...`, `vec: ...`, `hyde: ...`) become expansions; an answer with none
    is a failure. Temperature 0 keeps the variants, and so the cached retrieval, reproducible.
    """

    def __init__(
        self,
        url: str,
        model: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 20.0,
        retries: int = 1,
        backoff_s: float = 0.25,
        prompt: str = EXPANSION_PROMPT,
    ) -> None:
        if not url:
            raise ToolkitError(
                "expansion.url: the http expander needs the endpoint URL (.../v1/chat/completions)"
            )
        self.url, self.model, self.prompt = url, model, prompt
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._headers = api_key_headers(api_key_env, "expansion.api_key_env")
        self.secrets = header_secrets(self._headers)  # an answer quoted in an error never shows the key
        self._client = None

    def expand(self, query: str, *, qid: str | None = None) -> list[tuple[str, str]]:
        if self._client is None:
            self._client = http_client(self.timeout_s)
        body = {
            "messages": [{"role": "system", "content": self.prompt}, {"role": "user", "content": query}],
            "temperature": 0,
        }
        if self.model:
            body["model"] = self.model
        data = post_json(
            self._client,
            self.url,
            body,
            headers=self._headers,
            retries=self.retries,
            backoff_s=self.backoff_s,
            timeout_s=self.timeout_s,
        )
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as e:
            raise ProviderError(
                f"unexpected chat answer (no choices[0].message.content): {scrub(str(data), self.secrets, limit=120)!r}"
            ) from e
        if not isinstance(content, str):
            raise ProviderError(f"unexpected chat answer: content is {type(content).__name__}, not text")
        typed = parse_typed_lines(content)
        if not typed:
            raise ProviderError(f"no typed lines (lex:/vec:/hyde:) in the answer: {scrub(content, self.secrets, limit=120)!r}")
        return typed

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


HttpExpander.__doc__ = (HttpExpander.__doc__ or "").replace(
    "{EXPANSION_PROMPT}", EXPANSION_PROMPT.replace("\n", "\n    ")
)


def make_expander(
    provider: str,
    *,
    path: str | Path | None = None,
    url: str | None = None,
    model: str | None = None,
    api_key_env: str | None = None,
    timeout_s: float = 20.0,
    retries: int = 1,
) -> Expander | None:
    """The expander named by config `expansion.provider` ("none" -> None). Unused arguments are ignored."""
    if provider in (None, "none"):
        return None
    if provider == "file":
        return FileExpander(path or "")
    if provider == "http":
        return HttpExpander(url or "", model, api_key_env=api_key_env, timeout_s=timeout_s, retries=retries)
    raise ToolkitError(f"expansion.provider: unknown provider {provider!r}; use none, file or http")


def _norm(s: str) -> str:
    return " ".join(s.split()).casefold()


def _typed_variants(
    query: str, expansions: list[tuple[str, str]], limits: dict[str, int], over: Counter | None = None
) -> list[tuple[str, str, str]]:
    """(variant, kind, text) for one query: empty texts, repeats of the original and repeats within a kind
    dropped, then up to limits[kind] of each kind numbered lex1, lex2, ... `over` counts, per kind, the
    distinct expansions past the limit (the caller says so: user trial R found them dropped without a word)."""
    seen = {k: {_norm(query)} for k in KINDS}
    out: list[tuple[str, str, str]] = []
    count = dict.fromkeys(KINDS, 0)
    for kind, text in expansions:
        text = " ".join(str(text).split())
        if kind not in KINDS or not text or _norm(text) in seen[kind]:
            continue
        seen[kind].add(_norm(text))
        if count[kind] >= limits[kind]:
            if over is not None and limits[kind] > 0:  # 0 switches the kind off: nothing to say
                over[kind] += 1
            continue
        count[kind] += 1
        out.append((f"{kind}{count[kind]}", kind, text))
    return out


def _warn_over_limit(over: Counter, queries: int, limits: dict[str, int]) -> None:
    if over:
        said = ", ".join(f"{n} {k} (expansion.max_{k} {limits[k]})" for k, n in sorted(over.items()))
        warnings.warn(f"expansion: {queries} quer{'ies' if queries != 1 else 'y'} had more expansions than the config "
                      f"uses; not used: {said}", UserWarning, stacklevel=3)


def variants(
    queries: pl.DataFrame,
    expander: Expander | None,
    *,
    max_lex: int = 2,
    max_vec: int = 2,
    max_hyde: int = 1,
    skip: pl.DataFrame | None = None,
    progress: bool | None = None,
    budget_s: float | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Variants [qid, variant, kind, text] and status [qid, status, error] for `queries` [qid, text].

    Every query keeps its original as variant "orig" (kind "orig"), then up to `max_<kind>` expansions named
    lex1.., vec1.., hyde1 (repeats of the original dropped). Status per query: "ok", "skipped" (`skip`
    [qid, skip_expansion] is true: strong lexical signal or conversational routing), "fallback" (the
    provider failed: original only, `error` says why) or "none" (no expander). Never raises for provider
    failures; the expander is called once per query (it is a network or file lookup, not a hot path).
    Once its calls have taken `budget_s` seconds in all, the remaining queries fall back without a call.
    """
    missing = {"qid", "text"} - set(queries.columns)
    if missing:
        raise InputError(f"variants: queries frame missing column(s) {sorted(missing)}")
    dup = queries.filter(pl.col("qid").is_duplicated())
    if len(dup):
        raise InputError(f"variants: qid {dup['qid'][0]!r} appears more than once in the queries")
    limits = {"lex": max_lex, "vec": max_vec, "hyde": max_hyde}
    orig = queries.select(
        pl.col("qid").cast(pl.Utf8),
        pl.lit("orig").alias("variant"),
        pl.lit("orig").alias("kind"),
        pl.col("text"),
    )
    if expander is None:
        status = orig.select("qid", pl.lit("none").alias("status"), pl.lit(None, pl.Utf8).alias("error"))
        return orig.cast(VARIANTS_SCHEMA), status.cast(STATUS_SCHEMA)

    skipped: set[str] = set()
    if skip is not None and len(skip):
        skipped = set(skip.filter(pl.col("skip_expansion").fill_null(False))["qid"].cast(pl.Utf8).to_list())
    rows: list[tuple[str, str, str, str]] = []
    status_rows: list[tuple[str, str, str | None]] = []
    show = len(queries) > PROGRESS_MIN_QUERIES and someone_watching() if progress is None else progress
    budget = RunBudget(budget_s, "expansion.budget_s", "query expansion")
    over: Counter = Counter()
    capped = 0
    for qid, text in progress_bar(orig.select("qid", "text").iter_rows(), total=len(orig), show=show, desc="expand", unit="query"):
        if qid in skipped:
            status_rows.append((qid, "skipped", None))
            continue
        if budget.spent_out():
            status_rows.append((qid, "fallback", budget.message()))
            continue
        try:
            with budget.timed():
                exps = expander.expand(text, qid=qid)
        except ProviderError as e:
            status_rows.append((qid, "fallback", str(e)))
            continue
        except ToolkitError:
            raise
        except Exception as e:  # an unknown provider failure degrades like a known one
            status_rows.append((qid, "fallback", f"{type(e).__name__}: {scrub(str(e), getattr(expander, 'secrets', ()))}"))
            continue
        before = sum(over.values())
        rows.extend((qid, v, k, t) for v, k, t in _typed_variants(text, exps, limits, over))
        capped += sum(over.values()) > before
        status_rows.append((qid, "ok", None))
    _warn_over_limit(over, capped, limits)

    extra = pl.DataFrame(rows, schema=VARIANTS_SCHEMA, orient="row")
    kind_order = pl.col("kind").replace_strict(
        {"orig": 0, "lex": 1, "vec": 2, "hyde": 3}, return_dtype=pl.Int8
    )
    out = (
        pl.concat([orig.cast(VARIANTS_SCHEMA), extra])
        .join(orig.select("qid").with_row_index("_q"), on="qid")
        .sort("_q", kind_order, pl.col("variant").str.extract(r"(\d+)$").cast(pl.Int64), maintain_order=True)
        .drop("_q")
    )
    return out, pl.DataFrame(status_rows, schema=STATUS_SCHEMA, orient="row")
