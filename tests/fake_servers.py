"""A fake `/v1/rerank` + `/v1/chat/completions` server on 127.0.0.1 for testing the guarded providers.

`http.server` in a thread (no third-party mock: the point is to exercise the real HTTP client, its
timeouts and retries). Modes, set by `server.mode` (and `fail_first`, `delay_s`):

- "good": rerank score = number of distinct shared words between query and document, results sorted by
  score (so not in request order); chat answers typed lines derived from the query (`chat_answer`).
- "500": HTTP 500.  "slow": sleep `delay_s` before answering.  "malformed": invalid JSON.
- "wrong_shape": valid JSON of the wrong shape.  "out_of_range": a result index past the last document.
- "partial": rerank answers only the even-indexed documents.
- "nan": rerank scores the even-indexed documents NaN, every third +Infinity (JSON as Python writes it).
- embeddings (`/v1/embeddings`): "good" answers `embed_fake(text, dim)` per input (dim = `dimensions` of the
  request, else `embed_dim`), items in reverse order; "wrong_dim" answers one component more than asked;
  "nan" makes the first vector's first component NaN.
- "trickle": HTTP 200 with a long body sent a few bytes at a time (`trickle_bytes` every `trickle_every_s`,
  for at most `trickle_max_s`): never a gap long enough for a per-read timeout, so only a deadline stops it.
- "tei": rerank wants TEI's `{"query", "texts"}` (HTTP 422 otherwise) and answers a bare list.
- "too_long": embeddings answer HTTP 400 when an input is longer than 1,000 characters.
- "voyage": rerank answers Voyage's `{"data": [{"index", "relevance_score"}]}`. "redirect": HTTP 308 to an https URL.
- `fail_first = N`: the first N requests get HTTP 500, then the mode applies (tests retries).
- `limit_first = N`: the first N requests get HTTP `limit_status` (429), with a `Retry-After: {retry_after}`
  header when `retry_after` is set (seconds or an HTTP date), then the mode applies.
- `fail_queries`: queries (or user messages) containing any of these words get HTTP 500.
- `fail_after = N`: requests after the first N get HTTP 500 (an endpoint dying mid-way through an ingest).
- `slow_requests`: the numbers (from 0) of the requests that sleep `delay_s` first (an endpoint hanging on some).
- `max_batch = N`: embeddings requests of more than N inputs get TEI's HTTP 413 ("batch size ... > maximum allowed").
- "bad_request": embeddings answer HTTP 400 about a parameter (nothing about length). "bool_vec": a `true` in each vector.
- `answer_padding = N`: N spaces inside every JSON answer (a large answer, still valid JSON).
- `FakeServer(tls=True)`: https, with a self-signed certificate no client trusts (`tls_selfsigned.pem`).

Every request is recorded in `server.requests` (path, JSON body, headers) so tests can count calls.
"""

from __future__ import annotations

import json
import re
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest


def words(s: str) -> set[str]:
    return set(re.findall(r"\w+", s.lower()))


def overlap(query: str, doc: str) -> float:
    """The fake relevance: distinct words shared by query and document."""
    return float(len(words(query) & words(doc)))


def embed_fake(text: str, dim: int = 8) -> list[float]:
    """The fake embedding: hashed bag of words (deterministic, so tests can compare vectors and rankings)."""
    import zlib

    v = [0.0] * dim
    for w in words(text):
        v[zlib.crc32(w.encode()) % dim] += 1.0
    v[0] += 0.5  # no all-zero vector for an empty text
    return v


def chat_answer(query: str) -> str:
    """A chat answer mixing typed lines in several styles with lines the parser must ignore."""
    return (
        "Sure! Here are expansions for your query:\n"
        f"1. LEX: {query} keywords\n"
        f"- lex: {query}\n"  # a repeat of the original: dropped
        f"* **Vec:** what is {query}\n"
        "  vec:   \n"  # empty: dropped
        f"hyde: A note explaining {query} in detail.\n"
        f"2) lex - {query} synonyms\n"
        "Hope this helps."
    )


TLS_PEM = Path(__file__).with_name("tls_selfsigned.pem")  # certificate and key, CN 127.0.0.1, valid to 2125


class FakeServer:
    def __init__(self, *, tls: bool = False) -> None:
        self.mode = "good"
        self.slow_requests: set[int] = set()
        self.max_batch: int | None = None
        self.answer_padding = 0
        self.fail_first = 0
        self.limit_first, self.limit_status = 0, 429
        self.fail_after: int | None = None
        self.retry_after: str | None = None
        self.delay_s = 3.0
        self.trickle_bytes, self.trickle_every_s, self.trickle_max_s = 20, 0.1, 5.0
        self.fail_queries: set[str] = set()
        self.chat_content: str | None = None  # overrides chat_answer() when set
        self.embed_dim = 8
        self.requests: list[dict[str, Any]] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._httpd = ThreadingHTTPServer(("127.0.0.1", 0), _make_handler(self))
        self._httpd.daemon_threads = True
        self.scheme = "https" if tls else "http"
        if tls:
            import ssl

            ctx = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
            ctx.load_cert_chain(TLS_PEM)
            self._httpd.socket = ctx.wrap_socket(self._httpd.socket, server_side=True)
        self._thread = threading.Thread(target=self._httpd.serve_forever, args=(0.02,), daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._httpd.server_address[:2]
        return f"{self.scheme}://{host}:{port}"

    @property
    def rerank_url(self) -> str:
        return self.base_url + "/v1/rerank"

    @property
    def embeddings_url(self) -> str:
        return self.base_url + "/v1/embeddings"

    @property
    def chat_url(self) -> str:
        return self.base_url + "/v1/chat/completions"

    def count(self, path: str | None = None) -> int:
        return sum(1 for r in self.requests if path is None or r["path"] == path)

    def start(self) -> FakeServer:
        self._thread.start()
        return self

    def stop(self) -> None:
        self._stop.set()  # wakes handlers sleeping in "slow" mode
        self._httpd.shutdown()
        self._httpd.server_close()

    def __enter__(self) -> FakeServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    # ------------------------------------------------------------------ answers
    def answer(self, path: str, body: Any, headers: dict[str, str]) -> tuple[int, bytes]:
        with self._lock:
            n = len(self.requests)
            self.requests.append({"path": path, "body": body, "headers": headers})
        if n in self.slow_requests:
            self._stop.wait(self.delay_s)
        if n < self.fail_first:
            return 500, b'{"error": "warming up"}'
        if self.fail_after is not None and n >= self.fail_after:
            return 500, b'{"error": "died"}'
        if n < self.limit_first:
            return self.limit_status, b'{"error": "rate limited"}'
        text = json.dumps(body)
        if any(w in text for w in self.fail_queries):
            return 500, b'{"error": "boom"}'
        mode = self.mode
        if mode == "500":
            return 500, b'{"error": "internal"}'
        if mode == "slow":
            self._stop.wait(self.delay_s)
        if mode == "malformed":
            return 200, b'{"results": [{"index": 0, "relevance_score": 1.0}'
        if path == "/v1/rerank":
            return self._rerank(body, mode)
        if path == "/v1/chat/completions":
            return self._chat(body, mode)
        if path == "/v1/embeddings":
            return self._embeddings(body, mode)
        return 404, b'{"error": "not found"}'

    def _rerank(self, body: dict[str, Any], mode: str) -> tuple[int, bytes]:
        if mode == "tei":
            if "texts" not in body:
                return (
                    422,
                    b'{"error": "Json deserialize error: missing field `texts`", "error_type": "Validation"}',
                )
            return 200, json.dumps(
                [{"index": i, "score": overlap(body["query"], d)} for i, d in enumerate(body["texts"])]
            ).encode()
        docs = body["documents"]
        results = [{"index": i, "relevance_score": overlap(body["query"], d)} for i, d in enumerate(docs)]
        results.sort(key=lambda r: -r["relevance_score"])
        if mode == "wrong_shape":
            return 200, json.dumps({"data": [r["relevance_score"] for r in results]}).encode()
        if mode == "voyage":  # Voyage's shape: the results under "data"
            return 200, json.dumps({"object": "list", "data": results}).encode()
        if mode == "redirect":  # http -> https, as a gateway answers: httpx follows none
            return 308, b""
        if mode == "out_of_range":
            results.append({"index": len(docs), "relevance_score": 0.5})
        if mode == "partial":
            results = [r for r in results if r["index"] % 2 == 0]
        if mode == "nan":
            for r in results:
                if r["index"] % 2 == 0:
                    r["relevance_score"] = float("nan")
                elif r["index"] % 3 == 0:
                    r["relevance_score"] = float("inf")
        return 200, json.dumps({"model": body.get("model"), "results": results}).encode()

    def _embeddings(self, body: dict[str, Any], mode: str) -> tuple[int, bytes]:
        if mode == "too_long" and any(len(t) > 1000 for t in body["input"]):  # an input past the model's context
            return 400, b'{"error": "This model\'s maximum context length is 8192 tokens"}'
        if self.max_batch is not None and len(body["input"]) > self.max_batch:  # TEI's words
            return 413, json.dumps({"error": f"batch size {len(body['input'])} > maximum allowed batch size "
                                             f"{self.max_batch}", "error_type": "Validation"}).encode()
        if mode == "bad_request":
            return 400, b'{"error": {"message": "Unrecognized request argument supplied: dimensions"}}'
        if mode == "wrong_shape":
            return 200, json.dumps({"embeddings": [[1.0]]}).encode()
        dim = int(body.get("dimensions") or self.embed_dim) + (1 if mode == "wrong_dim" else 0)
        data = [{"object": "embedding", "index": i, "embedding": embed_fake(t, dim)} for i, t in enumerate(body["input"])]
        if mode == "nan":
            data[0]["embedding"][0] = float("nan")
        if mode == "bool_vec":
            for d in data:
                d["embedding"][-1] = True
        answer = {"object": "list", "model": body.get("model"), "data": data[::-1]}
        return 200, json.dumps(answer, indent=None, separators=(", ", ": ")).encode()[:-1] + b" " * self.answer_padding + b"}"

    def _chat(self, body: dict[str, Any], mode: str) -> tuple[int, bytes]:
        if mode == "wrong_shape":
            return 200, json.dumps({"answer": "lex: nothing"}).encode()
        query = body["messages"][-1]["content"]
        content = self.chat_content if self.chat_content is not None else chat_answer(query)
        return 200, json.dumps(
            {"choices": [{"index": 0, "message": {"role": "assistant", "content": content}}]}
        ).encode()


def _make_handler(server: FakeServer) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:  # noqa: N802 - http.server's naming
            raw = self.rfile.read(int(self.headers.get("Content-Length") or 0))
            try:
                body = json.loads(raw)
            except json.JSONDecodeError:
                body = None
            code, payload = server.answer(self.path, body, {k.lower(): v for k, v in self.headers.items()})
            if server.mode == "trickle" and code == 200:
                self._trickle()
                return
            try:
                self.send_response(code)
                self.send_header("Content-Type", "application/json")
                if code in (429, 503) and server.retry_after is not None:
                    self.send_header("Retry-After", server.retry_after)
                if code == 308:
                    self.send_header("Location", "https://rerank.internal/v1/rerank")
                self.send_header("Content-Length", str(len(payload)))
                self.end_headers()
                self.wfile.write(payload)
            except OSError:  # the client gave up (timeout test): nothing to answer
                pass

        def _trickle(self) -> None:
            end = time.monotonic() + server.trickle_max_s  # bounded: the test server never hangs
            try:
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", "100000000")
                self.end_headers()
                self.wfile.write(b'{"results": [')
                while time.monotonic() < end and not server._stop.is_set():
                    self.wfile.write(b" " * server.trickle_bytes)
                    self.wfile.flush()
                    server._stop.wait(server.trickle_every_s)
            except OSError:  # the client gave up: that is the point
                pass
            self.close_connection = True

        def log_message(self, *args: object) -> None:  # keep pytest output clean
            pass

    return Handler


@pytest.fixture(name="fake_server")
def fake_server_fixture() -> Iterator[FakeServer]:
    """A running `FakeServer` in "good" mode; import `fake_server_fixture` and ask for `fake_server`."""
    with FakeServer() as s:
        yield s


def wait_until(pred, timeout_s: float = 2.0) -> bool:
    """Poll `pred` (for server-side effects that land just after the client returned)."""
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        if pred():
            return True
        time.sleep(0.01)
    return pred()
