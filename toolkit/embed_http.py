"""Embeddings you bring: an OpenAI-compatible `/v1/embeddings` endpoint (OpenAI, vLLM, TEI, Ollama, LiteLLM...).

POST {"model", "input": [texts], "dimensions"?} -> {"data": [{"index", "embedding"}]}. Texts go in batches;
timeouts, connection errors, 5xx and 429 are retried with exponential backoff (the same client code as the
http reranker); the API key comes from the environment variable whose NAME the config gives, and is never
printed. Vectors are checked (count, index, dimension, finite) and L2-normalised, since the store's dense
search is a dot product.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np

from .errors import ToolkitError
from .rerank import MAX_ANSWER_BYTES, Deadline, ProviderError, api_key_headers, http_client, post_json

TEI_MAX_BATCH = 32  # texts a stock TEI server takes in one request (its --max-client-batch-size): `hrt ingest`'s default
BATCH_ADVICE = ("lower the batch size (hrt ingest --embed-batch-size, retrieval.dense.batch_size; TEI takes "
                f"{TEI_MAX_BATCH} by default)")
# What a refusal for an input past the model's context says (OpenAI, vLLM, TEI, Ollama, LiteLLM)
_LENGTH_WORDS = re.compile(r"(?i)context|token|too long|length|truncat|max(?:imum)?[ _-]?input")
LONG_TEXT_CHARS = 32_000  # past ~8k tokens: more than most embedding models take, whatever the refusal said


class HttpEmbedder:
    """An `/v1/embeddings` endpoint. `model_id` is the model name the endpoint is asked for: what the store
    records, and what a store's vectors are checked against at query time."""

    backend = "http"

    def __init__(
        self,
        url: str,
        model: str,
        *,
        dimensions: int | None = None,
        api_key_env: str | None = None,
        batch_size: int = TEI_MAX_BATCH,
        timeout_s: float = 30.0,
        retries: int = 2,
        backoff_s: float = 0.5,
    ) -> None:
        if not url:
            raise ToolkitError("retrieval.dense.url: the http embedder needs the endpoint URL (e.g. http://host:8000/v1/embeddings)")
        if not model:
            raise ToolkitError("retrieval.dense.model: the http embedder needs the model name the endpoint serves")
        from .config import DenseConfig, endpoint_url

        self.url, self.model_id, self.dimensions = endpoint_url(url, DenseConfig.api_path), model, dimensions
        self.batch_size, self.timeout_s, self.retries, self.backoff_s = batch_size, timeout_s, retries, backoff_s
        self._headers = api_key_headers(api_key_env, "retrieval.dense.api_key_env")
        self._client = None
        self._dim: int | None = dimensions

    @property
    def dim(self) -> int:
        if self._dim is None:  # unknown until the endpoint answers once
            self.embed(["dimension probe"])
        return int(self._dim)

    def _batch(self, texts: list[str], deadline: Deadline | None = None) -> np.ndarray:
        body: dict[str, Any] = {"model": self.model_id, "input": texts}
        if self.dimensions:
            body["dimensions"] = self.dimensions
        if self._client is None:
            self._client = http_client(self.timeout_s)
        # An answer holds one vector per text: its cap grows with the batch (user trial BJ: 600 vectors of 3,072
        # numbers passed the fixed 20 MB). A component as JSON text is at most ~24 bytes.
        cap = MAX_ANSWER_BYTES + len(texts) * 24 * (self._dim or 4096)
        # post_json scrubs the key sent from its errors, and (redact_answer) from an answer `_parse` may quote
        try:
            data = post_json(self._client, self.url, body, headers=self._headers, retries=self.retries,
                             backoff_s=self.backoff_s, timeout_s=self.timeout_s, redact_answer=True,
                             deadline=deadline, max_answer_bytes=cap)
        except ProviderError as e:
            raise self._refused(e, texts) from None
        return self._parse(data, len(texts))

    def _refused(self, e: ProviderError, texts: list[str]) -> ProviderError:
        """`e` with what to do about it, when the endpoint refused the batch or its answer was too large: a smaller
        batch, or (when the endpoint speaks of length, user trial AN: "maximum context length", and nothing said
        which text) the batch's longest text, kept as `refused_text` for the caller to name its document."""
        msg = str(e)
        if "answer larger than" in msg:
            return ProviderError(f"{msg}: {len(texts)} vectors in one answer; {BATCH_ADVICE}")
        status = re.search(r"\bHTTP (400|413|422)\b", msg)
        if status is None:
            return e
        said = msg[status.end():]
        if status.group(1) == "413" and re.search(r"(?i)batch|too many|inputs", said):
            return ProviderError(f"{msg} ({len(texts)} texts were sent in one request: {BATCH_ADVICE})")
        i = max(range(len(texts)), key=lambda j: len(texts[j]))
        # Only a refusal that speaks of length, or a text long enough to be past most models' context (~8k
        # tokens): other refusals (a model name, a parameter) got this hint too (user trial BJ)
        if not (_LENGTH_WORDS.search(said) or len(texts[i]) > LONG_TEXT_CHARS):
            return e
        out = ProviderError(f"{msg} (the batch's longest text has {len(texts[i]):,} characters and starts "
                            f"{texts[i][:60]!r}: an endpoint refuses inputs past its model's context; a smaller "
                            "--chunk-size makes shorter chunks)")
        out.refused_text = texts[i]
        return out

    def _parse(self, data: Any, n: int) -> np.ndarray:
        items = data.get("data") if isinstance(data, dict) else None
        if not isinstance(items, list):
            raise ProviderError(f"{self.url}: expected {{'data': [{{'index', 'embedding'}}]}}, got {str(data)[:120]!r}")
        if len(items) != n:
            raise ProviderError(f"{self.url}: asked for {n} embeddings, got {len(items)}")
        rows: list[Any] = [None] * n
        for pos, item in enumerate(items):
            idx = item.get("index", pos) if isinstance(item, dict) else None
            vec = item.get("embedding") if isinstance(item, dict) else None
            if not isinstance(idx, int) or not 0 <= idx < n or rows[idx] is not None or not isinstance(vec, list):
                raise ProviderError(f"{self.url}: malformed embedding item {pos}: {str(item)[:120]}")
            rows[idx] = vec
        dims = {len(r) for r in rows}
        if len(dims) != 1:
            raise ProviderError(f"{self.url}: embeddings of different lengths {sorted(dims)}")
        got = dims.pop()
        want = self._dim
        if want is not None and got != want:
            raise ProviderError(
                f"{self.url}: model {self.model_id!r} returned {got}-d vectors, expected {want}"
                + (" (retrieval.dense.dimensions)" if self.dimensions else " (as its earlier answers)")
            )
        try:  # no dtype: numpy would turn "0.5" into 0.5, and a broken endpoint into vectors
            raw = np.asarray(rows)
        except ValueError:  # ragged: a component is itself a list
            raw = np.asarray([], dtype=object)
        # numpy also reads [true, 0.5] as [1.0, 0.5] (user trial BJ): a boolean is no number here either
        if raw.dtype.kind not in "iuf" or any(isinstance(x, bool) for r in rows for x in r):
            bad = next(x for r in rows for x in r if not isinstance(x, int | float) or isinstance(x, bool))
            raise ProviderError(f"{self.url}: embedding components must be JSON numbers, got {str(bad)[:40]!r}")
        arr = raw.astype(np.float32)
        if not np.isfinite(arr).all():
            raise ProviderError(f"{self.url}: embeddings contain NaN or infinity")
        norms = np.linalg.norm(arr, axis=1, keepdims=True)
        if (norms == 0).any():
            raise ProviderError(f"{self.url}: an embedding is all zeros")
        self._dim = got
        return arr / norms

    def embed(self, texts: list[str], *, progress: bool = False) -> np.ndarray:
        """Unit vectors for `texts`, `batch_size` a request. The call ends within timeout x (batches + retries):
        each batch may take its timeout and the retries are shared, so one search's query (one batch) costs at
        most timeout x attempts, the bound the docs promise, however the endpoint fails (user trial BJ)."""
        if not texts:
            return np.zeros((0, self._dim or 0), dtype=np.float32)
        starts = range(0, len(texts), self.batch_size)
        deadline = Deadline(self.timeout_s * (len(starts) + self.retries), "timeout x (batches + retries)")
        return np.vstack([self._batch(texts[i : i + self.batch_size], deadline) for i in starts])

    def close(self) -> None:
        if self._client is not None:
            self._client.close()
            self._client = None
