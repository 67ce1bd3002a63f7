"""Reranker providers and the guarded rerank stage.

A reranker scores (query, passage) pairs: a local sentence-transformers `CrossEncoder`, an HTTP `/v1/rerank`
endpoint (Jina / Cohere / TEI / vLLM / Infinity shape), or a file of precomputed scores. `rerank_scores` asks
the provider once per query for the pairs the cache does not have, and is *guarded*: a failed call never
raises and never loses a result. The query gets no scores and status "fallback", so the blend stage keeps
its retrieval order and the trace says why. Setup mistakes (unknown provider, missing API key variable, a
model that cannot be loaded) do raise `ToolkitError`: a misconfigured run should stop, not quietly degrade.

Each candidate document is represented by one chunk (`best_chunk`): the chunk with the most query terms,
because cross-encoders truncate long inputs and a document's first chunk is often not the relevant one.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import math
import os
import socket
import threading
import time
from pathlib import Path
from typing import Any, Protocol
from urllib.parse import urlparse

import polars as pl

from .errors import InputError, ModelLoadError, ProviderError, ToolkitError
from .files import path_stamp
from .progress import progress_bar, someone_watching
from .redact import header_secrets, redact_data, redact_values, scrub

PAIR_COLUMNS = ("qid", "query", "doc_id", "chunk_id", "text")
SCORES_SCHEMA = {"qid": pl.Utf8, "doc_id": pl.Utf8, "chunk_id": pl.Utf8, "rerank_score": pl.Float64}
STATUS_SCHEMA = {"qid": pl.Utf8, "status": pl.Utf8, "error": pl.Utf8}
PROGRESS_MIN_QUERIES = 20


class Reranker(Protocol):
    """`name` identifies the model (it is the cache key); `score` returns one score per document, in the
    order given, or None for a document the provider did not score. It raises on failure."""

    name: str

    def score(self, query: str, documents: list[str]) -> list[float | None]: ...


def text_hash(s: str) -> str:
    """sha1 hex of the UTF-8 text: the key of queries and passages in the rerank cache (same as the store's)."""
    return hashlib.sha1(s.encode("utf-8")).hexdigest()


# ---------------------------------------------------------------------------------------------- HTTP


def api_key_headers(api_key_env: str | None, field: str) -> dict[str, str]:
    """Bearer auth from the environment variable *named* in the config (secrets never live in config)."""
    if not api_key_env:
        return {}
    key = os.environ.get(api_key_env)
    if not key:
        raise ToolkitError(
            f"{field}: environment variable {api_key_env!r} is not set (it should hold the API key)"
        )
    if flaw := _key_flaw(key):  # before any request: it failed as an output-encoding error, or was retried as an outage
        raise ToolkitError(f"{field}: the value of ${api_key_env} has {flaw}, which no API key has (a paste or a file "
                           "read with its line ending?); the value is not shown")
    return {"Authorization": f"Bearer {key}"}


def _key_flaw(key: str) -> str | None:
    """What in `key` cannot go in an HTTP header as a key (user trial BJ: a trailing carriage return from a CRLF
    file, a typographic quote pasted with it), said by position and kind, never by showing the character."""
    import unicodedata

    for i, c in enumerate(key, 1):
        if "!" <= c <= "~" or c == " " and 1 < i < len(key):  # visible ASCII (a space inside goes in a header too)
            continue
        where = "the last" if i == len(key) else "the first" if i == 1 else f"character {i}"
        kind = {"\r": "a carriage return (\\r)", "\n": "a line feed (\\n)", "\t": "a tab", " ": "a space"}.get(c)
        kind = kind or f"U+{ord(c):04X} ({unicodedata.name(c, 'a control character').lower()})"
        return f"{kind} as {where} of its {len(key)} characters"
    return None


MAX_ANSWER_BYTES = 20_000_000  # a rerank or chat answer is kilobytes; more is a broken or hostile server


class _Answer:
    """What the request thread hands back: (status, body text) or the exception it met."""

    def __init__(self) -> None:
        self.status: int | None = None
        self.text = ""
        self.error: BaseException | None = None
        self.retry_after: str | None = None  # the answer's Retry-After header (429, 503)
        self.location: str | None = None  # a redirect's target
        self.done = threading.Event()


def _request(client: Any, url: str, payload: dict[str, Any], headers: dict[str, str], deadline: float,
             cancel: threading.Event, out: _Answer, max_bytes: int = MAX_ANSWER_BYTES) -> None:
    """One POST, streamed, giving up at `deadline` between chunks (a trickling server cannot stretch it)."""
    try:
        with client.stream("POST", url, json=payload, headers=headers) as r:
            body = bytearray()
            for chunk in r.iter_bytes():
                body += chunk
                if cancel.is_set() or time.monotonic() > deadline:
                    return
                if len(body) > max_bytes:
                    raise ProviderError(f"{url}: answer larger than {max_bytes:,} bytes")
            out.retry_after = r.headers.get("retry-after")
            out.location = r.headers.get("location")
            out.status, out.text = r.status_code, body.decode(r.encoding or "utf-8", errors="replace")
    except BaseException as e:  # handed to the caller, which decides what it means
        out.error = e
    finally:
        out.done.set()


def post_within(client: Any, url: str, payload: dict[str, Any], *, headers: dict[str, str], timeout_s: float,
                answer_headers: dict[str, str] | None = None, max_answer_bytes: int = MAX_ANSWER_BYTES) -> tuple[int, str]:
    """(status, body) of one POST within a wall-clock deadline of `timeout_s` for connect and all reads.
    `answer_headers`, when given, receives the answer's `retry-after` header (if it has one).

    httpx timeouts apply to each phase and each read, so a server trickling a few bytes a second is never
    cut off by them; the request runs in a daemon thread instead and is abandoned at the deadline (the
    thread notices at its next chunk, or when httpx's own per-read timeout fires). Written by hand: neither
    httpx nor the standard library offers a total deadline for a request.
    """
    import httpx

    deadline = time.monotonic() + timeout_s
    out, cancel = _Answer(), threading.Event()
    threading.Thread(target=_request, args=(client, url, payload, headers, deadline, cancel, out, max_answer_bytes), daemon=True,
                     name="hrt-provider-call").start()
    if not out.done.wait(timeout_s) or out.status is None and out.error is None:
        cancel.set()
        raise httpx.TimeoutException(f"no complete answer within {timeout_s:g}s")
    if out.error is not None:
        raise out.error
    if answer_headers is not None:
        answer_headers |= {k: v for k, v in (("retry-after", out.retry_after), ("location", out.location)) if v is not None}
    return out.status, out.text


RETRY_AFTER_MAX_S = 30.0  # `retry_after_seconds`' default cap (post_json bounds its waits by the call's own budget)


def retry_after_seconds(value: str | None, *, now: float | None = None, cap: float = RETRY_AFTER_MAX_S) -> float | None:
    """Seconds a `Retry-After` header asks to wait (delay-seconds or an HTTP date), capped at `cap`; None when
    absent or unreadable (the exponential backoff applies then)."""
    if value is None or not value.strip():
        return None
    v = value.strip()
    try:
        secs = float(v)
    except ValueError:
        from email.utils import parsedate_to_datetime

        try:
            when = parsedate_to_datetime(v)
        except (TypeError, ValueError, IndexError, OverflowError):
            return None
        if when is None or when.tzinfo is None:
            return None
        secs = when.timestamp() - (time.time() if now is None else now)
    if not math.isfinite(secs):
        return None
    return min(max(secs, 0.0), cap)


def _sleep(seconds: float) -> None:
    """The wait between attempts (its own name, so tests can replace it without touching `time.sleep`)."""
    time.sleep(seconds)


BACKOFF_MAX_S = 8.0  # the longest pause between attempts without a Retry-After (doubling from backoff_s)


class Deadline:
    """One wall-clock bound for the requests of one call (all batches of a query's rerank, of an embedding call):
    `post_json` ends its attempts and pauses by it (user trial BJ: each of 3 batches took the whole bound)."""

    def __init__(self, seconds: float, why: str = "timeout x attempts") -> None:
        self.seconds, self.why, self.at = seconds, why, time.monotonic() + seconds

    def __str__(self) -> str:
        return f"this call's bound of {self.seconds:g} s ({self.why})"

    def spent(self) -> bool:
        return time.monotonic() >= self.at


def _tls_refused(e: BaseException) -> bool:
    """A certificate the client could not verify: the same on every attempt, so never retried."""
    import ssl

    seen: set[int] = set()
    while e is not None and id(e) not in seen:
        if isinstance(e, ssl.SSLCertVerificationError) or "CERTIFICATE_VERIFY_FAILED" in str(e):
            return True
        seen.add(id(e))
        e = e.__cause__ or e.__context__
    return False


def post_json(
    client: Any,
    url: str,
    payload: dict[str, Any],
    *,
    headers: dict[str, str],
    retries: int,
    backoff_s: float,
    timeout_s: float,
    redact_answer: bool = False,
    deadline: Deadline | None = None,
    max_answer_bytes: int = MAX_ANSWER_BYTES,
) -> Any:
    """POST `payload` and return the decoded JSON answer, or raise `ProviderError`.

    Each attempt has a wall-clock deadline of `timeout_s` (connect and all reads, see `post_within`), and the
    whole call, attempts and the pauses between them, ends within timeout x attempts (the bound the docs promise)
    or at `deadline` (a caller making several requests gives them one `Deadline`), whichever is first. Retries on timeouts, connection errors, 5xx and 429, after a pause doubling from `backoff_s` (at most
    `BACKOFF_MAX_S`) or the `Retry-After` of a 429 or 503 (seconds or an HTTP date); a retry is made only when
    its pause and a whole attempt fit in what is left of the bound (a pause is shortened to fit; a Retry-After
    that does not fit fails the call at once, saying so). Other 4xx, malformed JSON and an unverified TLS
    certificate fail at once, since repeating the request cannot fix them. Answer bodies and exceptions quoted
    in errors are scrubbed (`redact.scrub`) of the key sent in `headers`, which a server may echo back, and of
    anything else that looks like a credential; an error says when the environment sent the request through a
    proxy (`config.env_proxy`). `redact_answer` also removes the key from the strings of a decoded answer, for
    callers that quote the answer when it has the wrong shape (rerank and embeddings, which read only numbers;
    not chat, whose text is the product: a short key such as `test` must not rewrite an expansion).
    """
    from .config import env_proxy

    try:
        return _post_json(client, url, payload, headers=headers, retries=retries, backoff_s=backoff_s,
                          timeout_s=timeout_s, redact_answer=redact_answer, deadline=deadline,
                          max_answer_bytes=max_answer_bytes)
    except ProviderError as e:
        proxy = env_proxy(url)
        if proxy is None:
            raise
        # A proxy's own refusal (502, 407, a connection error) read as the endpoint's (user trial BJ)
        host = urlparse(url).hostname or ""
        raise ProviderError(f"{e} (sent through the proxy {proxy}, which HTTP_PROXY/HTTPS_PROXY/ALL_PROXY name; "
                            f"NO_PROXY={host} goes direct)") from None


def _post_json(client: Any, url: str, payload: dict[str, Any], *, headers: dict[str, str], retries: int,
               backoff_s: float, timeout_s: float, redact_answer: bool, deadline: Deadline | None,
               max_answer_bytes: int) -> Any:
    import httpx

    secrets = header_secrets(headers)
    last = ""
    wait: float | None = None  # what the last answer's Retry-After asked for
    # The whole call's bound: timeout x attempts, what the docs promise a hanging endpoint costs (user trial AN: a
    # Retry-After of an hour stalled a search with a 1 s timeout for 62 s; trial BJ: an uncapped backoff, 16.9 s of
    # pauses for a 7 s bound). A caller's `deadline` can only shorten it.
    start, waited_for = time.monotonic(), ""
    budget = timeout_s * (retries + 1)
    end, bound = start + budget, str(Deadline(budget))
    if deadline is not None and deadline.at < end:
        end, bound = deadline.at, str(deadline)
    for attempt in range(retries + 1):
        if attempt:
            left = end - time.monotonic()
            if wait is not None and wait + timeout_s > left:  # a wait is worth it only with a whole attempt after it
                raise ProviderError(f"{url}: {last}; {waited_for}, retry after {wait:g} s: past {bound}, so not waited")
            if left < timeout_s / 2:  # a retry cut shorter than that would rarely get an answer
                raise ProviderError(f"{url}: {last} ({attempt} attempt{'s' if attempt > 1 else ''}; no time for another "
                                    f"within {bound})")
            # the pause shortens the next attempt's time no more than it must: the last attempt may get less than
            # a whole timeout, so a hanging endpoint still gets its retries within the bound
            _sleep(wait if wait is not None else min(backoff_s * 2 ** (attempt - 1), BACKOFF_MAX_S, max(left - timeout_s, 0.0)))
        wait = None
        answer_headers: dict[str, str] = {}
        this_timeout = min(timeout_s, end - time.monotonic())  # less than a timeout only at the end of the bound
        if this_timeout <= 0:  # (only a caller's deadline: the call's own bound always leaves its first attempt)
            raise ProviderError(f"{url}: {bound} spent" + (f" (last: {last})" if last else ""))
        try:
            status, text = post_within(client, url, payload, headers=headers, timeout_s=this_timeout,
                                       answer_headers=answer_headers, max_answer_bytes=max_answer_bytes)
        except httpx.TimeoutException:
            # a cut attempt's time in tenths: the few ms the caller spent before it are not news
            last = f"timed out after {this_timeout if this_timeout == timeout_s or this_timeout < 0.1 else round(this_timeout, 1):g}s"
            continue
        except httpx.TransportError as e:
            if _tls_refused(e):  # the same certificate on every attempt (user trial BJ: retried with backoff)
                raise ProviderError(f"{url}: TLS certificate not verified ({scrub(str(e), secrets, limit=200)}); for a "
                                    "server whose certificate your own CA signed, set SSL_CERT_FILE to that CA's PEM "
                                    "file (or SSL_CERT_DIR to a folder of them)") from None
            last = f"connection error: {type(e).__name__}: {scrub(str(e), secrets)}"
            continue
        except httpx.HTTPError as e:  # too many redirects, undecodable body...: a retry cannot fix them
            raise ProviderError(f"{url}: {type(e).__name__}: {scrub(str(e), secrets)}") from None
        if status >= 500 or status == 429:
            last = f"HTTP {status}: {scrub(text, secrets, limit=200)}"
            if status in (429, 503):
                wait = retry_after_seconds(answer_headers.get("retry-after"), cap=math.inf)
                waited_for = "rate limited" if status == 429 else "unavailable"
            continue
        if status in (401, 403):  # not an outage: the credentials (user trial AN: a 401 read "reranker unavailable")
            sent = ("key refused (sent as Authorization: Bearer)" if secrets else
                    "no key sent (api_key_env names the variable holding it)")
            raise ProviderError(f"HTTP {status} auth failed, {sent}, from {url}: {scrub(text, secrets, limit=300)}")
        if status >= 400:
            raise ProviderError(f"HTTP {status} from {url}: {scrub(text, secrets, limit=300)}")
        if 300 <= status < 400:  # httpx follows none: http -> https or a trailing slash (it read as malformed JSON)
            to = answer_headers.get("location")
            raise ProviderError(f"HTTP {status} redirect from {url}" + (f" to {scrub(to, secrets, limit=200)}: set that URL" if to else ""))
        try:
            data = json.loads(text)
        except (ValueError, json.JSONDecodeError) as e:
            raise ProviderError(f"malformed JSON from {url}: {e}; body starts {scrub(text, secrets, limit=120)!r}") from e
        if redact_answer and secrets and redact_values(text, secrets) != text:
            data = redact_data(data, secrets)
        return data
    raise ProviderError(f"{url}: {last} ({retries + 1} attempt{'s' if retries else ''})")


def http_client(timeout_s: float):
    import httpx

    # One timeout for connect, read, write and pool: no phase of a request may stall longer than this.
    try:
        return httpx.Client(timeout=httpx.Timeout(timeout_s))
    except (httpx.InvalidURL, ValueError) as e:  # the environment's proxy variables are read here (user trial BM)
        raise ProviderError(f"a proxy variable of the environment (HTTP_PROXY, HTTPS_PROXY, ALL_PROXY) is not a valid "
                            f"URL: {type(e).__name__}; its value is not shown") from None


def _number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)


def parse_rerank_response(data: Any, n: int) -> list[float | None]:
    """Scores in request order from `{"results": [{"index", "relevance_score"}]}` (Cohere, Jina, vLLM), `{"data":
    [...]}` (Voyage) or a bare list `[{"index", "score"}]` (TEI). Results may come in any order and omit documents
    (-> None)."""
    items = data
    if isinstance(data, dict):
        voyage = data.get("data")
        voyage = voyage if isinstance(voyage, list) and voyage and all(isinstance(i, dict) and "index" in i for i in voyage) else None
        items = data.get("results", voyage)
    if not isinstance(items, list):
        raise ProviderError(f"unexpected rerank answer: expected a 'results' list, got {str(data)[:120]!r}")
    out: list[float | None] = [None] * n
    for item in items:
        if not isinstance(item, dict):
            raise ProviderError(f"unexpected rerank result {str(item)[:80]!r}: expected an object")
        idx = item.get("index")
        score = item.get("relevance_score", item.get("score"))
        if not isinstance(idx, int) or isinstance(idx, bool) or not _number(score):
            raise ProviderError(
                f"rerank result needs an integer 'index' and a numeric 'relevance_score': {str(item)[:120]}"
            )
        if not 0 <= idx < n:
            raise ProviderError(f"rerank result index {idx} out of range for {n} documents")
        if out[idx] is not None:
            raise ProviderError(f"rerank result index {idx} given twice")
        out[idx] = float(score)
    return out


class HttpReranker:
    """A `/v1/rerank` endpoint: POST {model, query, documents, top_n} -> {results: [{index, relevance_score}]}.

    TEI's native `/rerank` wants `texts` instead of `documents`: on a 422 that mentions `texts` the request is
    repeated in that shape, and later calls keep it. At most `batch_size` documents go in one request (a
    cross-encoder's scores do not depend on the documents beside them), and the query and each document are cut
    to `max_chars` characters, with one logged warning per reranker naming the longest cut.
    """

    def __init__(
        self,
        url: str,
        model: str | None = None,
        api_key_env: str | None = None,
        timeout_s: float = 10.0,
        retries: int = 2,
        backoff_s: float = 0.25,
        batch_size: int = 32,
        max_chars: int = 4000,
    ) -> None:
        if not url:
            raise ToolkitError(
                "rerank.url: the http reranker needs the endpoint URL (e.g. http://host:8080/v1/rerank)"
            )
        from .config import RerankConfig, endpoint_url

        url = endpoint_url(url, RerankConfig.api_path)  # an OpenAI-style base URL, as the environment's is taken (rerank_env)
        self.url, self.model = url, model
        self.name = model or url
        self.cache_key = f"{model}@{url}" if model else url
        self.timeout_s, self.retries, self.backoff_s = timeout_s, retries, backoff_s
        self._headers = api_key_headers(api_key_env, "rerank.api_key_env")
        self.secrets = header_secrets(self._headers)  # what `rerank_scores` scrubs from stored statuses
        self._client = None
        self._tei = False
        self.batch_size, self.max_chars = max(1, int(batch_size)), max(1, int(max_chars))
        self._said_cut = False

    def cut_pairs(self, pairs: pl.DataFrame) -> pl.DataFrame:
        """`pairs`' query and text cut to `max_chars` (what `score` would send), said once: `rerank_scores` caches
        scores under the hash of the text sent (the review: a score of a cut text was reused for another cut)."""
        longest = pairs.select(pl.max_horizontal(pl.col("query").str.len_chars().max(), pl.col("text").str.len_chars().max())).item()
        if longest is None or longest <= self.max_chars:
            return pairs
        self._say_cut(longest)
        return pairs.with_columns(pl.col("query").str.slice(0, self.max_chars), pl.col("text").str.slice(0, self.max_chars))

    def _say_cut(self, longest: int) -> None:
        """The first time texts are cut: one warning with the longest length."""
        if not self._said_cut:
            self._said_cut = True
            logging.getLogger("toolkit").warning(
                "warning: reranker %s: texts longer than rerank.max_chars (%d) are cut to it before they are sent "
                "(the longest so far: %d characters)", self.name, self.max_chars, longest)

    def _cut(self, texts: list[str]) -> list[str]:
        """Texts past `max_chars` cut to it (`_say_cut`)."""
        longest = max((len(t) for t in texts), default=0)
        if longest <= self.max_chars:
            return texts
        self._say_cut(longest)
        return [t[: self.max_chars] for t in texts]

    def _payload(self, query: str, documents: list[str]) -> dict[str, Any]:
        if self._tei:
            return {"query": query, "texts": documents}
        body: dict[str, Any] = {"query": query, "documents": documents, "top_n": len(documents)}
        if self.model:
            body["model"] = self.model
        return body

    def score(self, query: str, documents: list[str]) -> list[float | None]:
        if not documents:
            return []
        if self._client is None:
            self._client = http_client(self.timeout_s)
        kw: dict[str, Any] = {
            "headers": self._headers,
            "retries": self.retries,
            "backoff_s": self.backoff_s,
            "timeout_s": self.timeout_s,
            "redact_answer": True,
        }
        query, *documents = self._cut([query, *documents])
        # One bound for the query's batches together (user trial BJ: a reranker hanging on 2 of 3 requests took 3 x
        # the bound over 3 batches); past it the query falls back whole. Each batch has its timeout, and the retries
        # share one more timeout each, as the http embedder's calls do: a healthy reranker answering each of 4 batches
        # in 0.8 s under HRT_RERANK_TIMEOUT=2 HRT_RERANK_RETRIES=0 fell back under a bound of one timeout (the review).
        n_batches = -(-len(documents) // self.batch_size)
        kw["deadline"] = deadline = Deadline(self.timeout_s * (n_batches + self.retries), "timeout x (batches + retries)")
        scores: list[float | None] = []
        for lo in range(0, len(documents), self.batch_size):
            batch = documents[lo : lo + self.batch_size]
            if deadline.spent():
                raise ProviderError(f"{self.url}: {deadline} spent after {lo // self.batch_size} of {n_batches} batches")
            try:
                data = post_json(self._client, self.url, self._payload(query, batch), **kw)
            except ProviderError as e:
                if self._tei or "HTTP 422" not in str(e) or "texts" not in str(e):
                    raise
                self._tei = True
                data = post_json(self._client, self.url, self._payload(query, batch), **kw)
            scores += parse_rerank_response(data, len(batch))
        # Every document was asked for (top_n = all): a partial answer would put the scored ones above the
        # unscored ones, an exact match among them, so it is a failed call and the retrieval order stands.
        missing = sum(x is None for x in scores)
        if missing:
            raise ProviderError(
                f"the reranker scored {len(scores) - missing} of the {len(scores)} documents sent (each one was asked for)"
            )
        return scores

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None


# ---------------------------------------------------------------------------------------------- local model




def _hub_reachable(timeout_s: float = 3.0) -> bool:
    """The Hugging Face client retries an unreachable hub for about a minute before failing; a quick
    connect test lets an offline machine fail in seconds with a useful message instead."""
    if os.environ.get("HF_HUB_OFFLINE", "").lower() in {"1", "true", "yes", "on"}:
        return False
    u = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co"))
    try:
        with socket.create_connection((u.hostname or "huggingface.co", u.port or 443), timeout=timeout_s):
            return True
    except OSError:
        return False


def _in_hf_cache(repo_id: str) -> bool:
    from huggingface_hub import constants

    return (Path(constants.HF_HUB_CACHE) / ("models--" + repo_id.replace("/", "--"))).is_dir()


def _trained_max_length(path: Path) -> int | None:
    try:
        return int(json.loads((path / "training_report.json").read_text())["params"]["max_length"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


class CrossEncoderReranker:
    """A sentence-transformers `CrossEncoder` on the CPU, by local path or hub id, loaded once on first use
    (so a run whose scores are all cached never loads it). `name` includes `max_length`, which changes scores."""

    def __init__(self, model: str, batch_size: int = 32, max_length: int | None = None, device: str = "cpu") -> None:
        if not model:
            raise ToolkitError("rerank.model: the cross-encoder reranker needs a model path or hub id")
        p = Path(model).expanduser()
        self._local = p.exists()
        if self._local:
            p = p.resolve()
            self._load_from, model_id = str(p), f"local:{p.name}:{path_stamp(p)}"
        else:
            self._load_from, model_id = model, model
        if max_length is None:  # a model from `hrt train-reranker` is served at the length it was trained at
            max_length = _trained_max_length(p) if self._local else None
            max_length = max_length or 256
        self.name = f"{model_id}@{max_length}"
        self.batch_size, self.max_length, self.device = batch_size, max_length, device
        self._model = None

    def _fail(self, reason: str) -> ModelLoadError:
        return ModelLoadError(
            f"rerank.model: could not load reranker model {self._load_from!r} ({reason}); give a local CrossEncoder "
            "directory, or train one from your judgements with `hrt train-reranker`"
        )

    def _get(self):
        if self._model is not None:
            return self._model
        cached = self._local or _in_hf_cache(self._load_from)
        # Decide before importing sentence-transformers (seconds) that an uncached hub id cannot be fetched.
        if not cached and not _hub_reachable():
            raise self._fail("not in the local Hugging Face cache and the model hub is not reachable")
        from sentence_transformers import CrossEncoder

        from .embed import quiet_model_load

        kw = {"device": self.device, "max_length": self.max_length}
        if cached:
            try:
                # Local directories and cached hub ids load without any network access.
                with quiet_model_load():  # the "Loading weights" bar would land in `hrt search` output
                    self._model = CrossEncoder(self._load_from, local_files_only=True, **kw)
                return self._model
            except Exception as e:
                if self._local or not _hub_reachable():
                    raise self._fail(f"{type(e).__name__}: {str(e)[:300]}") from e
        try:
            with quiet_model_load():
                self._model = CrossEncoder(self._load_from, **kw)
        except Exception as e:
            raise self._fail(f"{type(e).__name__}: {str(e)[:300]}") from e
        return self._model

    def score(self, query: str, documents: list[str]) -> list[float | None]:
        if not documents:
            return []
        import numpy as np

        arr = np.asarray(
            self._get().predict(
                [(query, d) for d in documents],
                batch_size=self.batch_size,
                show_progress_bar=False,
                convert_to_numpy=True,
            ),
            dtype=np.float64,
        )
        if arr.ndim == 2 and arr.shape[1] == 1:
            arr = arr[:, 0]
        if arr.ndim != 1 or len(arr) != len(documents):
            raise ProviderError(
                f"{self.name}: expected one score per pair, got shape {arr.shape}; "
                "a reranker needs a CrossEncoder with a single output label"
            )
        return arr.tolist()


# ---------------------------------------------------------------------------------------------- file


class FileReranker:
    """Precomputed scores, keyed by (query text, passage text).

    Rows `{query, text, score}` (plus optional `qid`, `doc_id` for people reading the file), from JSONL or
    Parquet. Keying by the two texts (not by qid/doc_id) makes one file valid for any query set and any chunk
    ids: a pair is found exactly when the same query is asked about the same passage text (`best_chunk`'s
    chunk, as written by `rerank_scores`' inputs). Pairs missing from the file get no score.
    """

    cacheable = False  # the file already is the cache

    def __init__(self, path: str | Path) -> None:
        if not path:
            raise ToolkitError(
                "rerank.path: the file reranker needs the path of a JSONL or Parquet score file"
            )
        self.path = Path(path).expanduser()
        if not self.path.exists():
            raise InputError(f"{self.path}: rerank score file not found (rerank.path)")
        self._scores = self._load()
        self.name = f"file:{self.path.name}"

    def _load(self) -> dict[tuple[str, str], float]:
        if self.path.suffix.lower() in {".parquet", ".pq"}:
            df = pl.read_parquet(self.path)
            missing = {"query", "text", "score"} - set(df.columns)
            if missing:
                raise InputError(f"{self.path}: missing column(s) {sorted(missing)}; need query, text, score")
            rows = enumerate(df.select("query", "text", "score").iter_rows(named=True), start=1)
            where = "row"
        else:
            rows = self._jsonl_rows()
            where = "line"
        out: dict[tuple[str, str], float] = {}
        for n, row in rows:
            q, t, s = row.get("query"), row.get("text"), row.get("score")
            if not isinstance(q, str) or not isinstance(t, str):
                raise InputError(f"{self.path}:{where} {n}: 'query' and 'text' must be strings")
            if not _number(s):
                raise InputError(f"{self.path}:{where} {n}: 'score' must be a finite number, got {s!r}")
            out[(text_hash(q), text_hash(t))] = float(s)
        return out

    def _jsonl_rows(self):
        with self.path.open(encoding="utf-8") as f:
            for n, line in enumerate(f, start=1):
                if not line.strip():
                    continue
                try:
                    obj = json.loads(line)
                except json.JSONDecodeError as e:
                    raise InputError(f"{self.path}:line {n}: invalid JSON ({e.msg})") from e
                if not isinstance(obj, dict):
                    raise InputError(f"{self.path}:line {n}: expected a JSON object")
                yield n, obj

    def score(self, query: str, documents: list[str]) -> list[float | None]:
        qh = text_hash(query)
        return [self._scores.get((qh, text_hash(d))) for d in documents]


def make_reranker(
    provider: str,
    *,
    model: str | None = None,
    url: str | None = None,
    api_key_env: str | None = None,
    timeout_s: float = 10.0,
    retries: int = 2,
    path: str | Path | None = None,
    batch_size: int = 32,
    max_length: int | None = None,
    http_batch: int = 32,
    max_chars: int = 4000,
) -> Reranker | None:
    """The reranker named by config `rerank.provider` ("none" -> None). Arguments a provider does not use are ignored."""
    if provider in (None, "none"):
        return None
    if provider == "cross-encoder":
        return CrossEncoderReranker(model or "", batch_size=batch_size, max_length=max_length)
    if provider == "http":
        return HttpReranker(url or "", model, api_key_env=api_key_env, timeout_s=timeout_s, retries=retries,
                            batch_size=http_batch, max_chars=max_chars)
    if provider == "file":
        return FileReranker(path or "")
    raise ToolkitError(
        f"rerank.provider: unknown provider {provider!r}; use none, cross-encoder, http or file"
    )


# ---------------------------------------------------------------------------------------------- run budget


class RunBudget:
    """Wall-clock seconds a provider may take over one run; `spent_out()` once they are used up. The first
    time it is, one warning says so (the per-query statuses say it too)."""

    def __init__(self, seconds: float | None, field: str, who: str) -> None:
        self.seconds, self.field, self.who, self.spent, self._warned = seconds, field, who, 0.0, False

    @contextlib.contextmanager
    def timed(self):
        t0 = time.monotonic()
        try:
            yield
        finally:
            self.spent += time.monotonic() - t0

    def message(self) -> str:
        return f"{self.who} switched off for the rest of the run: run budget of {self.seconds:g}s spent (raise {self.field})"

    def spent_out(self) -> bool:
        out = self.seconds is not None and self.spent >= self.seconds
        if out and not self._warned:
            self._warned = True
            logging.getLogger("toolkit").warning("%s", self.message())
        return out


# ---------------------------------------------------------------------------------------------- stage


@functools.cache
def _stopwords() -> frozenset[str]:
    from .features import english_stop_words  # one list for routing and reranking, read without sklearn

    return english_stop_words()


def _tokens(col: str) -> pl.Expr:
    return pl.col(col).str.to_lowercase().str.extract_all(r"\w+")


def passage_text(title: pl.Expr, text: pl.Expr) -> pl.Expr:
    """What the reranker reads for a chunk: "title\\ntext" (the same body the store embeds), or the text
    alone when the title is empty. Train and serve must use the same format."""
    return pl.when(title.fill_null("").str.len_chars() > 0).then(title + pl.lit("\n") + text).otherwise(text)


def doc_passages(chunks: pl.DataFrame, queries: pl.DataFrame, docs: pl.DataFrame) -> pl.DataFrame:
    """[qid, query, doc_id, chunk_id, text]: what a reranker reads for each (qid, doc_id) of `docs`, the
    document's best chunk for the query (`best_chunk`) as `passage_text` with its title. `chunks` is
    `Store.chunks()`, `queries` [qid, text]. Shared by the rerank stage and the trainer, so train and serve
    read the same passages."""
    q = queries.select("qid", pl.col("text").alias("query"))
    cand = docs.select("qid", "doc_id").unique().join(chunks.select("chunk_id", "doc_id", "ord", "text"), on="doc_id")
    best = best_chunk(cand.join(q, on="qid").select("qid", "query", "doc_id", "chunk_id", "text", "ord"))
    return best.join(chunks.select("chunk_id", "title"), on="chunk_id").select(
        "qid", "query", "doc_id", "chunk_id", passage_text(pl.col("title"), pl.col("text")).alias("text")
    )


def best_chunk(chunks: pl.DataFrame, query: str | pl.DataFrame | None = None) -> pl.DataFrame:
    """One chunk per (qid, doc_id): the one matching the most distinct query terms, then the most query-term
    occurrences, then the earliest (`ord` if given, else the number after '#' in the chunk id, else input order).

    `chunks` has [qid, doc_id, chunk_id, text] and the query text either as a `query` column or given as
    `query` (one string for all rows, or a frame [qid, query|text]). Terms are lowercased word tokens minus
    English stopwords. Returns [qid, doc_id, chunk_id, text] (+ `query` when it was a column of `chunks`).
    """
    need = {"qid", "doc_id", "chunk_id", "text"}
    if not need <= set(chunks.columns):
        raise InputError(f"best_chunk: chunks frame needs columns {sorted(need)}, has {chunks.columns}")
    keep_query = "query" in chunks.columns and query is None
    if isinstance(query, str):
        qframe = chunks.select("qid").unique().with_columns(pl.lit(query).alias("query"))
    elif isinstance(query, pl.DataFrame):
        qcol = "query" if "query" in query.columns else "text"
        qframe = query.select("qid", pl.col(qcol).alias("query")).unique("qid")
    elif "query" in chunks.columns:
        qframe = chunks.select("qid", "query").unique("qid")
    else:
        raise InputError("best_chunk: give the query text as a `query` column or argument")
    out_cols = ["qid", "doc_id", "chunk_id", "text"] + (["query"] if keep_query else [])
    if chunks.is_empty():
        return chunks.select(out_cols)

    stop = list(_stopwords())
    qterms = (
        qframe.select("qid", _tokens("query").alias("term"))
        .explode("term")
        .filter(pl.col("term").is_not_null() & ~pl.col("term").is_in(stop))
        .unique()
    )
    # Tokenise each distinct chunk once (not once per query that retrieved it), then join on (chunk, term).
    cterms = (
        chunks.select("chunk_id", "text")
        .unique("chunk_id")
        .select("chunk_id", _tokens("text").alias("term"))
        .explode("term")
        .group_by("chunk_id", "term")
        .agg(pl.len().alias("n"))
    )
    order = (
        pl.col("ord").cast(pl.Int64)
        if "ord" in chunks.columns
        else pl.col("chunk_id").str.extract(r"#(\d+)$").cast(pl.Int64, strict=False)
    )
    rows = chunks.with_row_index("_row").with_columns(order.alias("_ord"))
    hits = (
        rows.select("_row", "qid", "chunk_id")
        .join(qterms, on="qid")
        .join(cterms, on=["chunk_id", "term"])
        .group_by("_row")
        .agg(pl.len().alias("_distinct"), pl.col("n").sum().alias("_hits"))
    )
    return (
        rows.join(hits, on="_row", how="left")
        .with_columns(pl.col("_distinct", "_hits").fill_null(0))
        .sort(
            ["qid", "doc_id", "_distinct", "_hits", "_ord", "_row"],
            descending=[False, False, True, True, False, False],
            nulls_last=True,
        )
        .unique(["qid", "doc_id"], keep="first", maintain_order=True)
        .select(out_cols)
    )


def _empty_scores() -> pl.DataFrame:
    return pl.DataFrame(schema=SCORES_SCHEMA)


def _hashes(s: pl.Series) -> pl.Series:
    # No stable cryptographic hash in polars (`Series.hash` changes across versions); hashlib per distinct value.
    uniq = s.unique()
    return s.replace_strict(uniq, [text_hash(x) for x in uniq], return_dtype=pl.Utf8)


def rerank_scores(
    pairs: pl.DataFrame,
    reranker: Reranker | None,
    *,
    cache: Any = None,
    top_n: int | None = None,
    progress: bool | None = None,
    max_consecutive_failures: int | None = 3,
    budget_s: float | None = None,
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """Reranker scores for `pairs` [qid, query, doc_id, chunk_id, text]; never raises for provider failures.

    Returns (scores [qid, doc_id, chunk_id, rerank_score], status [qid, status, error]) with one status row
    per query of `pairs`: "cached" (every pair from the cache), "ok" (provider called; `error` notes documents
    it left unscored), "fallback" (the call failed or returned nothing: no scores, `error` says why), or
    "skipped" (no reranker). One provider call per query, for the pairs the cache lacks; duplicate passage
    texts within a query are sent once. `top_n` keeps each query's first N pairs (in frame order). After
    `max_consecutive_failures` failed queries in a row, the rest fall back without calls, so a dead endpoint
    costs seconds, not (queries x timeout x retries). `cache` has `get_rerank(model, [(query_hash,
    text_hash)])` and `put_rerank(model, [(query_hash, text_hash, score)])`. `progress=None`: a bar when
    more than 20 queries and someone can see it (`progress.someone_watching`). `budget_s`: once the provider calls of this run have taken that many seconds in
    all, the provider is switched off for the remaining queries (status "fallback", and one warning).
    """
    missing = set(PAIR_COLUMNS) - set(pairs.columns)
    if missing:
        raise InputError(f"rerank pairs: missing column(s) {sorted(missing)}; need {list(PAIR_COLUMNS)}")
    pairs = pairs.select(PAIR_COLUMNS).unique(["qid", "doc_id", "chunk_id"], maintain_order=True)
    for c in ("query", "text"):
        if pairs[c].null_count():
            raise InputError(f"rerank pairs: column {c!r} has null values")
    multi = pairs.group_by("qid").agg(pl.col("query").n_unique().alias("n")).filter(pl.col("n") > 1)
    if len(multi):
        raise InputError(f"rerank pairs: qid {multi['qid'][0]!r} has more than one query text")
    qids = pairs["qid"].unique(maintain_order=True)
    if reranker is None:
        status = pl.DataFrame({"qid": qids}).with_columns(
            pl.lit("skipped").alias("status"), pl.lit("no reranker configured").alias("error")
        )
        return _empty_scores(), status
    if top_n is not None:
        if top_n < 1:
            raise InputError(f"rerank top_n must be at least 1, got {top_n}")
        pairs = pairs.filter(pl.int_range(pl.len()).over("qid") < top_n)
    if hasattr(reranker, "cut_pairs"):  # hashed as sent: a cached score is for that text
        pairs = reranker.cut_pairs(pairs)
    pairs = pairs.with_columns(
        _hashes(pairs["query"]).alias("query_hash"), _hashes(pairs["text"]).alias("text_hash")
    )

    # Scores are cached per provider identity (`cache_key`: an http model name with its URL), not per display
    # name: two endpoints serving different models under one name must not share scores (user trial R).
    model, label = getattr(reranker, "cache_key", reranker.name), reranker.name
    use_cache = cache is not None and getattr(reranker, "cacheable", True)
    cached: dict[tuple[str, str], float] = {}
    if use_cache and len(pairs):
        cached = cache.get_rerank(model, pairs.select("query_hash", "text_hash").unique().rows())

    got_q: list[str] = []
    got_t: list[str] = []
    got_s: list[float] = []
    status_rows: list[tuple[str, str, str | None]] = []
    pending: list[tuple[str, str, float]] = []
    failures, tripped = 0, None
    budget = RunBudget(budget_s, "rerank.budget_s", "reranker")
    secrets = tuple(getattr(reranker, "secrets", ()))  # the key a provider sent: never in a stored status
    show = len(qids) > PROGRESS_MIN_QUERIES and someone_watching() if progress is None else progress
    groups = pairs.group_by("qid", maintain_order=True)
    try:
        for (qid,), g in progress_bar(groups, total=len(qids), show=show, desc="rerank", unit="query"):
            query, qh = g["query"][0], g["query_hash"][0]
            texts = dict(zip(g["text_hash"].to_list(), g["text"].to_list(), strict=True))
            have = {th: cached[(qh, th)] for th in texts if (qh, th) in cached}
            todo = [th for th in texts if th not in have]
            if not todo:
                status_rows.append((qid, "cached", None))
                scores = have
            elif tripped is not None:
                status_rows.append((qid, "fallback", tripped))
                continue
            else:
                try:
                    with budget.timed():
                        result = list(reranker.score(query, [texts[th] for th in todo]))
                    if len(result) != len(todo):
                        raise ProviderError(f"returned {len(result)} scores for {len(todo)} documents")
                except ProviderError as e:
                    err = redact_values(str(e), secrets)
                except ToolkitError:
                    raise  # setup problems (model cannot be loaded, ...) stop the run
                except Exception as e:  # an unknown provider failure degrades like a known one
                    err = f"{type(e).__name__}: {scrub(str(e), secrets)}"
                else:
                    err = None
                if budget.spent_out():
                    tripped = f"{label}: {budget.message()}"
                if err is not None:
                    status_rows.append((qid, "fallback", f"{label}: {err}"))
                    failures += 1
                    if max_consecutive_failures and failures >= max_consecutive_failures:
                        tripped = f"{label}: not called after {failures} consecutive failures (last: {err})"
                    continue
                failures = 0
                new = {
                    th: float(s)
                    for th, s in zip(todo, result, strict=True)
                    if s is not None and math.isfinite(s)
                }
                if use_cache:
                    pending.extend((qh, th, s) for th, s in new.items())
                scores = have | new
                if not scores:
                    status_rows.append((qid, "fallback", f"{label}: provider returned no scores"))
                    continue
                unscored = len(texts) - len(scores)
                note = f"{unscored} of {len(texts)} passages not scored by the provider" if unscored else None
                status_rows.append((qid, "ok", note))
            got_q.extend([qid] * len(scores))
            got_t.extend(scores)
            got_s.extend(scores.values())
            if len(pending) >= 2000:  # flush now and then, so an interrupted long run keeps its scores
                cache.put_rerank(model, pending)
                pending = []
    finally:
        if pending:
            cache.put_rerank(model, pending)

    got = pl.DataFrame(
        {"qid": got_q, "text_hash": got_t, "rerank_score": got_s},
        schema={"qid": pl.Utf8, "text_hash": pl.Utf8, "rerank_score": pl.Float64},
    )
    scores_df = pairs.join(got, on=["qid", "text_hash"], how="inner", maintain_order="left").select(
        list(SCORES_SCHEMA)
    )
    status = pl.DataFrame(status_rows, schema=STATUS_SCHEMA, orient="row")
    return scores_df.cast(SCORES_SCHEMA), status


__all__ = [
    "CrossEncoderReranker",
    "FileReranker",
    "HttpReranker",
    "ProviderError",
    "Reranker",
    "best_chunk",
    "make_reranker",
    "parse_rerank_response",
    "post_json",
    "rerank_scores",
    "text_hash",
]
