"""ONNX Runtime backend for sentence-transformers models (the packaged MiniLM by default).

The model is exported once from its local weights (torch, on first use) into a user cache directory, with
its tokenizer and a small manifest; after that a process embeds with `onnxruntime` and `tokenizers` alone,
never importing torch or sentence-transformers. That is what makes a cold hybrid `hrt search` fast, and
batched ingest faster on a CPU.

Why not sentence-transformers' own `backend="onnx"`: it needs `optimum`, whose releases pin
`transformers<4.58` (this toolkit runs transformers 5), and loading through it imports torch anyway. The
export here is `torch.onnx.export` of the sentence-transformers module itself (transformer, pooling and
normalisation in one graph), so the vectors are the model's own; a test checks them against torch.

`quantize=True` adds onnxruntime's dynamic int8 quantisation of the weights: faster, but its vectors are
not the torch ones within float tolerance, so it is recorded as a different model id (`...#int8`) and a
store never mixes it with fp32 vectors.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import logging
import os
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

from .errors import ToolkitError, install_hint

EXPORT_VERSION = "1"  # bump when the exported graph or manifest changes: old cache entries are then ignored


def cache_dir() -> Path:
    """Where exported models live: $HRT_CACHE_DIR, else the user cache directory (platformdirs)."""
    env = os.environ.get("HRT_CACHE_DIR")
    if env:
        return Path(env).expanduser()
    from platformdirs import user_cache_dir

    return Path(user_cache_dir("hybrid-retrieval-toolkit"))


def onnxruntime_available() -> bool:
    import importlib.util

    return importlib.util.find_spec("onnxruntime") is not None


def exporter_available() -> bool:
    """Whether the `onnx` package is there: the export (`torch.onnx.export`) and int8 quantisation need it, while
    loading an export needs only onnxruntime. Libraries such as chromadb install onnxruntime without it, and `auto`
    then picked ONNX and failed every first hybrid search and ingest with a 95-line traceback (user trial BO)."""
    import importlib.util

    return importlib.util.find_spec("onnx") is not None


def _require_exporter(what: str) -> None:
    if not exporter_available():
        raise ToolkitError(f"{what} needs the onnx package, which is not installed: {install_hint('onnx', 'onnx')} "
                           "(or set retrieval.dense.backend: torch)")


def _require_ort():
    # ONNX Runtime 1.29+ sends telemetry on Linux and macOS too (1DS: a device id under ~/.cache/Microsoft and
    # DNS lookups of its collector; user trial AG). "Everything runs offline": off unless the user set these.
    # Both names: the variable the POSIX provider shipped with, and the one a later release made a full opt-out.
    os.environ.setdefault("ORT_DISABLE_TELEMETRY", "1")
    os.environ.setdefault("ORT_TELEMETRY_DISABLED", "1")
    try:
        import onnxruntime as ort
    except ImportError as e:
        raise ToolkitError(
            "the ONNX backend needs onnxruntime: `pip install 'hybrid-retrieval-toolkit[onnx]'` "
            "(or set retrieval.dense.backend: torch)"
        ) from e
    return ort


def _source_key(model_dir: Path) -> str:
    """Identity of the source weights: file names, sizes and modification times (no hashing of 90 MB)."""
    h = hashlib.sha1(f"{EXPORT_VERSION}|{model_dir.resolve()}".encode())
    for p in sorted(model_dir.rglob("*")):
        if p.is_file():
            st = p.stat()
            h.update(f"{p.relative_to(model_dir)}|{st.st_size}|{st.st_mtime_ns}".encode())
    return h.hexdigest()[:16]


def export_dir(model_dir: str | Path) -> Path:
    model_dir = Path(model_dir)
    return cache_dir() / "onnx" / f"{model_dir.name}-{_source_key(model_dir)}"


def entry_problem(out: Path, quantize: bool = False) -> str | None:
    """Why the cached export in `out` cannot be used, in words (None: it can): a damaged entry (a truncated CI
    cache restore, a process killed mid-copy) or one this user cannot read (a cache warmed by root in an image)."""
    try:
        manifest = json.loads((out / "manifest.json").read_text())
        if not isinstance(manifest, dict) or not {"inputs", "max_seq_length", "dim"} <= set(manifest):
            return "is damaged (manifest.json lacks fields)"
        for name in ("model.onnx", "tokenizer.json", *(["model_int8.onnx"] if quantize and (out / "model_int8.onnx").exists() else [])):
            with open(out / name, "rb") as fh:
                if not fh.read(1):
                    return f"is damaged ({name} is empty)"
        size, want = (out / "model.onnx").stat().st_size, manifest.get("model_bytes")
        if want is not None and size != want:
            return f"is damaged (model.onnx has {size} bytes, the export wrote {want})"
    except PermissionError as e:
        return f"cannot be read by this user ({e.strerror}: {e.filename})"
    except (OSError, ValueError) as e:
        return f"is damaged ({type(e).__name__}: {e})"
    return None


def discard(out: Path, problem: str) -> None:
    """Move a damaged export aside and delete it, so that it is exported again; an error naming the folder when
    this user cannot (the cache then has to be fixed by hand, or HRT_CACHE_DIR pointed elsewhere)."""
    aside = out.with_name(f"{out.name}.damaged-{os.getpid()}")
    try:
        os.replace(out, aside)
    except FileNotFoundError:
        return  # another process discarded it first
    except OSError as e:
        raise ToolkitError(f"the ONNX model cache {out} {problem}, and it cannot be removed ({e.strerror}): delete it, "
                           "or set HRT_CACHE_DIR to a folder of your own") from None
    shutil.rmtree(aside, ignore_errors=True)


@contextlib.contextmanager
def _export_lock(out: Path):
    """One process exports a model at a time (the others wait, then use its export): six CI jobs starting at
    once each ran their own ~1 GB export (user trial AG). No lock where the cache cannot take a lock file."""
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        fh = open(out.parent / f".{out.name}.lock", "a")  # noqa: SIM115 - held for the block
    except OSError:
        yield False
        return
    held = False
    try:
        import fcntl

        try:
            fcntl.flock(fh, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            logging.getLogger("toolkit").warning("note: waiting for another process exporting the ONNX model to %s", out)
            fcntl.flock(fh, fcntl.LOCK_EX)
        held = True
    except (ImportError, OSError):
        pass
    try:
        yield held
    finally:
        fh.close()  # releases the lock


def _sweep(out: Path, older_than_s: float = 3600.0) -> None:
    """Remove temporary export folders a killed process left (SIGTERM mid-export left a 43 MB partial model)."""
    now = time.time()
    for d in out.parent.glob(f"{out.name}.*"):
        try:
            if d.is_dir() and now - d.stat().st_mtime > older_than_s:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            continue


def export(model_dir: str | Path, *, quantize: bool = False) -> Path:
    """The exported model directory for `model_dir` (exporting it first if the cache lacks it).

    Returns a directory with `model.onnx` (and `model_int8.onnx` when `quantize`), `tokenizer.json` and
    `manifest.json`. Concurrent exports are safe: one process exports while the others wait for it (a file
    lock), and each writes a temporary directory and renames it. A damaged entry is exported again; the
    files are readable by every user the umask allows (a cache warmed at image build, used by another user).
    """
    model_dir = Path(model_dir)
    out = export_dir(model_dir)
    ready = (out / "manifest.json").exists() and (not quantize or (out / "model_int8.onnx").exists())
    if ready and entry_problem(out, quantize) is None:
        _open_up(out)
        _mark_used(out)
        return out
    with _export_lock(out) as held:
        if (out / "manifest.json").exists() and (problem := entry_problem(out, quantize)):
            discard(out, problem)
        if not (out / "manifest.json").exists():
            _require_exporter(f"exporting {model_dir.name} to ONNX")
            _sweep(out, 0.0 if held else 3600.0)  # holding the lock, no other export is running: every leftover goes
            _tell_terminal(f"note: exporting {model_dir.name} to ONNX once (about 10 s); later runs load {out}")
            _export_fp32(model_dir, out)
            _prune_unused(out)
        if quantize and not (out / "model_int8.onnx").exists():
            _require_exporter(f"quantising {model_dir.name} to int8")
            _tell_terminal(f"note: quantising {model_dir.name} to int8 once")
            _quantize(out)
    return out


UNUSED_DAYS = 30  # an export of another copy of the model's weights unused this long is removed by the next export


def _mark_used(out: Path) -> None:
    """Stamp the entry as used (at most once a day; not where this user cannot write: a cache warmed by root)."""
    stamp = out / ".used"
    try:
        if not stamp.exists() or time.time() - stamp.stat().st_mtime > 86400:
            stamp.touch()
    except OSError:
        pass


def _prune_unused(out: Path) -> None:
    """Remove the exports of other copies of this model's weights unused for `UNUSED_DAYS` (the key holds the
    weights' path and times): each reinstall of the model package or new virtual environment left another 90 MB
    export behind, and nothing removed them (user trial BO). Another environment still using its export stamps it
    (`_mark_used`), so it is kept; one removed by mistake is exported again (10 s)."""
    _mark_used(out)
    stem = out.name.rsplit("-", 1)[0]
    for other in out.parent.glob(f"{stem}-*"):
        if other == out or not other.is_dir() or other.name.rsplit("-", 1)[0] != stem or "." in other.name:
            continue
        try:
            used = max((other / f).stat().st_mtime for f in (".used", "manifest.json") if (other / f).exists())
        except (OSError, ValueError):
            continue  # not readable, or not an entry: left alone
        if time.time() - used > UNUSED_DAYS * 86400:
            shutil.rmtree(other, ignore_errors=True)
            with contextlib.suppress(OSError):
                (out.parent / f".{other.name}.lock").unlink()


def _tell_terminal(message: str) -> None:
    """Say why a first search pauses, where a person reads a terminal: the export took ~10 s in silence. Not in a
    log or a notebook (the tutorials' stderr stays clean; a script's log gains no line per fresh cache)."""
    if getattr(sys.stderr, "isatty", lambda: False)():
        print(message, file=sys.stderr, flush=True)


def _umask() -> int:
    """The process umask, read without setting it (os.umask(0) would open a window for other threads' files)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("Umask:"):
                return int(line.split()[1], 8)
    except (OSError, ValueError):
        pass
    return 0o022


def _readable_mode(directory: bool = False) -> int:
    """0777 / 0666 less the process umask: what a plain mkdir or open would have given."""
    return (0o777 if directory else 0o666) & ~_umask()


def _open_up(out: Path) -> None:
    """An entry an earlier version exported as 0700 (mkdtemp), owned by this user: opened to what the umask
    allows, so re-running a cache-warming step repairs a cache the container's user could not read."""
    try:
        st = out.stat()
        if st.st_uid != os.getuid() or st.st_mode & 0o055:
            return
        os.chmod(out, _readable_mode(directory=True))
        for f in out.iterdir():
            os.chmod(f, _readable_mode())
    except (OSError, AttributeError):
        pass


def _quantize(out: Path) -> None:
    """Add onnxruntime's dynamic int8 quantisation of `out`'s model (`model_int8.onnx`)."""
    _require_ort()
    from onnxruntime.quantization import QuantType, quantize_dynamic

    fd, tmp = tempfile.mkstemp(suffix=".onnx", dir=out)
    os.close(fd)
    os.chmod(tmp, _readable_mode())  # mkstemp's 0600 would keep other users out
    root, level = logging.getLogger(), logging.getLogger().level
    root.setLevel(logging.ERROR)  # quantize_dynamic logs a "pre-process first" hint on the root logger
    try:
        quantize_dynamic(out / "model.onnx", tmp, weight_type=QuantType.QInt8, per_channel=True)
    finally:
        root.setLevel(level)
    os.replace(tmp, out / "model_int8.onnx")


def _export_fp32(model_dir: Path, out: Path) -> None:
    import torch
    from sentence_transformers import SentenceTransformer

    from .embed import quiet_model_load

    try:
        # The export runs inside a user's first search or notebook cell: its "Loading weights" bar is noise there.
        with quiet_model_load():
            st = SentenceTransformer(str(model_dir), device="cpu", local_files_only=True)
    except Exception as e:
        raise ToolkitError(f"could not load {model_dir} to export it to ONNX ({type(e).__name__}: {e})") from e
    tok_file = model_dir / "tokenizer.json"
    if not tok_file.exists():
        raise ToolkitError(f"{model_dir} has no tokenizer.json (a fast tokenizer): the ONNX backend needs one; use backend torch")
    # `preprocess` is what sentence-transformers 5.x calls `tokenize` (which now logs a deprecation on stderr).
    preprocess = getattr(st, "preprocess", None) or st.tokenize
    features = preprocess(["an example sentence", "another, a little longer example sentence"])
    names = [n for n in ("input_ids", "attention_mask", "token_type_ids") if n in features]

    class _Graph(torch.nn.Module):
        """The whole sentence-transformers module (transformer, pooling, normalise) as one traced graph."""

        def __init__(self) -> None:
            super().__init__()
            self.st = st

        def forward(self, *tensors: torch.Tensor) -> torch.Tensor:
            emb = self.st(dict(zip(names, tensors, strict=True)))["sentence_embedding"]
            return torch.nn.functional.normalize(emb, p=2, dim=1)

    out.parent.mkdir(parents=True, exist_ok=True)
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    os.chmod(tmp, _readable_mode(directory=True))  # mkdtemp's 0700 would keep other users out
    try:
        import warnings

        with warnings.catch_warnings(), torch.no_grad():
            warnings.simplefilter("ignore")  # tracer warnings about Python control flow on shapes
            torch.onnx.export(
                _Graph().eval(),
                tuple(features[n] for n in names),
                str(tmp / "model.onnx"),
                input_names=names,
                output_names=["embedding"],
                dynamic_axes={**{n: {0: "batch", 1: "seq"} for n in names}, "embedding": {0: "batch"}},
                opset_version=17,
                dynamo=False,
            )
        shutil.copy(tok_file, tmp / "tokenizer.json")
        tk = st.tokenizer
        manifest = {
            "export_version": EXPORT_VERSION,
            "source": str(model_dir.resolve()),
            "inputs": names,
            "max_seq_length": int(st.max_seq_length),
            "pad_id": int(tk.pad_token_id or 0),
            "pad_token": str(tk.pad_token or "[PAD]"),
            "dim": int((getattr(st, "get_embedding_dimension", None) or st.get_sentence_embedding_dimension)()),
            "torch": torch.__version__,
            # what `entry_problem` checks: a truncated copy (a CI cache restore cut short) is found before loading
            "model_bytes": (tmp / "model.onnx").stat().st_size,
        }
        (tmp / "manifest.json").write_text(json.dumps(manifest, indent=2))
        try:
            os.replace(tmp, out)
        except OSError:  # another process finished the same export first: theirs is as good
            shutil.rmtree(tmp, ignore_errors=True)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise


# What onnxruntime, tokenizers and json raise on a truncated or damaged file (an export cut short by a restore).
_DAMAGE_ERRORS = frozenset({"InvalidProtobuf", "InvalidArgument", "InvalidGraph", "NoSuchFile", "JSONDecodeError",
                            "FileNotFoundError"})


_OPEN_LOCK = threading.Lock()  # threads making their first embedders at once open one session, not one each (review)


@functools.lru_cache(maxsize=4)
def _opened(ort, tokenizer_cls, d: str, model: str, threads: int | None, stamp: tuple[int, int]):
    """The manifest, tokenizer and ONNX Runtime session of an export, opened once per process and shared by every
    `OnnxEmbedder` of it (both are safe across threads once configured). Opening them cost ~140 ms of CPU per
    embedder, so a process that opens stores briefly (a memory service, a script's loop) paid it per store.
    At most a few entries (fp32, int8): each holds its model in memory for the process's life."""
    manifest = json.loads((Path(d) / "manifest.json").read_text())
    tok = tokenizer_cls.from_file(str(Path(d) / "tokenizer.json"))
    tok.enable_truncation(manifest["max_seq_length"])
    tok.enable_padding(pad_id=manifest["pad_id"], pad_token=manifest["pad_token"])
    opts = ort.SessionOptions()
    if threads:
        opts.intra_op_num_threads = threads
    # Busy-waiting worker threads win microseconds on an idle machine and lose whole cores on a shared one.
    opts.add_session_config_entry("session.intra_op.allow_spinning", "0")
    session = ort.InferenceSession(str(Path(d) / model), opts, providers=["CPUExecutionProvider"])
    return manifest, tok, session


class OnnxEmbedder:
    """A sentence-transformers model run by ONNX Runtime (exported on first use, then torch-free).

    Texts are embedded in length-sorted batches (as sentence-transformers does) so that padding stays small.
    """

    backend = "onnx"

    def __init__(self, model: str = "all-MiniLM-L6-v2", *, quantize: bool = False, batch_size: int = 64,
                 threads: int | None = None) -> None:
        from .embed import INT8_SUFFIX, resolve_model

        base_id, load_from = resolve_model(model)
        if not Path(load_from).is_dir():
            raise ToolkitError(
                f"the ONNX backend exports local models only; {model!r} is not a local model directory "
                "(use the packaged 'all-MiniLM-L6-v2', a model directory, or backend torch)"
            )
        self.model_id = base_id + (INT8_SUFFIX if quantize else "")
        self.backend = "onnx-int8" if quantize else "onnx"
        self._model_dir = Path(load_from)
        self.quantize = quantize
        self.batch_size = batch_size
        self.threads = threads
        self._session = None
        self._load_lock = threading.Lock()
        self._tok = None
        self._manifest: dict | None = None

    def _load(self) -> None:
        if self._session is not None:
            return
        with self._load_lock:  # threads of a service embedding at once load one session, not one each
            if self._session is None:
                self._load_session()

    def _load_session(self) -> None:
        ort = _require_ort()
        from tokenizers import Tokenizer

        for attempt in (1, 2):
            d = export(self._model_dir, quantize=self.quantize)
            try:
                self._open(ort, Tokenizer, d)
                return
            except Exception as e:  # noqa: BLE001 - onnxruntime and tokenizers raise their own types
                # Only what a damaged file raises is damage; out of memory or an old onnxruntime is not, and must
                # not delete an export other processes share.
                if type(e).__name__ not in _DAMAGE_ERRORS and "No such file" not in str(e):
                    raise
                problem = f"is damaged ({type(e).__name__}: {str(e).splitlines()[0][:200] if str(e) else ''})"
                if attempt == 2:
                    raise ToolkitError(f"the ONNX model cache {d} {problem} after a fresh export; delete it, or set "
                                       "HRT_CACHE_DIR to another folder") from None
                with _export_lock(d):  # export() re-checks under the same lock
                    if entry_problem(d, self.quantize) is None:
                        discard(d, problem)

    def _open(self, ort, tokenizer_cls, d: Path) -> None:
        model = d / ("model_int8.onnx" if self.quantize else "model.onnx")
        st = model.stat()  # a re-exported or damaged file is another key: never a stale session
        with _OPEN_LOCK:
            self._manifest, self._tok, self._session = _opened(ort, tokenizer_cls, str(d), model.name, self.threads,
                                                               (st.st_mtime_ns, st.st_size))


    @property
    def dim(self) -> int:
        self._load()
        return int(self._manifest["dim"])

    def embed(self, texts: list[str], *, progress: bool = False) -> np.ndarray:
        self._load()
        if not texts:
            return np.zeros((0, self.dim), dtype=np.float32)
        order = np.argsort([-len(t) for t in texts], kind="stable")
        out = np.empty((len(texts), self.dim), dtype=np.float32)
        names = self._manifest["inputs"]
        for lo in range(0, len(texts), self.batch_size):
            idx = order[lo : lo + self.batch_size]
            enc = self._tok.encode_batch([texts[i] for i in idx])
            cols = {
                "input_ids": [e.ids for e in enc],
                "attention_mask": [e.attention_mask for e in enc],
                "token_type_ids": [e.type_ids for e in enc],
            }
            feed = {n: np.asarray(cols[n], dtype=np.int64) for n in names}
            out[idx] = self._session.run(None, feed)[0]
        return out
