"""A LightGBM booster read and scored through LightGBM's own C library, without its Python package's imports.

`import lightgbm` imports scikit-learn and pandas when they are installed (its `compat` module): 1.6 s of a
cold `hrt search --config learned`, whose own work takes about a second. Scoring needs three calls of the
library's C API (`c_api.h`: load a model string, predict a float64 matrix, free), the calls the Python package
itself makes, so the scores are the same numbers. Training (`train_fusion`) still uses the Python package.
Where the library file cannot be found, the Python package's `Booster` is used instead.
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import importlib.util
import sys
from pathlib import Path
from typing import Any

import numpy as np

from .errors import InputError

_DTYPE_FLOAT64 = 1  # C_API_DTYPE_FLOAT64
_PREDICT_NORMAL = 0  # C_API_PREDICT_NORMAL


class BoosterError(ValueError):
    """LightGBM refused the model text (its own message)."""


@functools.cache  # once per process
def _library() -> Any:
    """LightGBM's shared library, found where the `lightgbm` package keeps it (as its `libpath` looks), without
    importing the package; None when there is none."""
    spec = importlib.util.find_spec("lightgbm")
    if spec is None or not spec.origin:
        return None
    pkg = Path(spec.origin).resolve().parent
    name = {"win32": "lib_lightgbm.dll", "darwin": "lib_lightgbm.dylib"}.get(sys.platform, "lib_lightgbm.so")
    for path in (d / name for d in (pkg.parent, pkg / "bin", pkg / "lib")):
        if path.is_file():
            try:
                lib = ctypes.cdll.LoadLibrary(str(path))
            except OSError:
                return None
            lib.LGBM_GetLastError.restype = ctypes.c_char_p
            return lib
    return None


def lightgbm_package() -> Any:
    """The `lightgbm` package (training, and scoring where its library file is not found), or an InputError."""
    try:
        import lightgbm
    except ImportError as e:  # pragma: no cover - lightgbm is a core dependency
        raise InputError("fusion.method 'learned' needs the lightgbm package: pip install lightgbm") from e
    return lightgbm


def _check(lib: Any, code: int) -> None:
    if code != 0:
        raise BoosterError(lib.LGBM_GetLastError().decode("utf-8", "replace"))


class CBooster:
    """A booster held by the C library: `predict`, `num_feature` and `num_trees`, as `lightgbm.Booster` has them."""

    def __init__(self, lib: Any, model_text: str):
        self._lib, self._handle, self._text = lib, ctypes.c_void_p(), model_text
        iterations = ctypes.c_int(0)
        _check(lib, lib.LGBM_BoosterLoadModelFromString(model_text.encode("utf-8"), ctypes.byref(iterations),
                                                         ctypes.byref(self._handle)))

    def __reduce__(self) -> tuple[Any, ...]:
        """Copies and pickles load the text again: a copied handle would be freed twice."""
        return (load, (self._text,))

    def __del__(self) -> None:
        with contextlib.suppress(Exception):  # at interpreter exit ctypes may already be torn down
            handle, self._handle = self._handle, None
            if handle is not None and handle.value:
                self._lib.LGBM_BoosterFree(handle)

    def num_feature(self) -> int:
        n = ctypes.c_int(0)
        _check(self._lib, self._lib.LGBM_BoosterGetNumFeature(self._handle, ctypes.byref(n)))
        return n.value

    def num_trees(self) -> int:
        n = ctypes.c_int(0)
        _check(self._lib, self._lib.LGBM_BoosterNumberOfTotalModel(self._handle, ctypes.byref(n)))
        return n.value

    def predict(self, x: np.ndarray, num_threads: int = 1) -> np.ndarray:
        """Raw scores of the rows of `x` (every tree), as `lightgbm.Booster.predict(x, num_threads=...)`."""
        x = np.ascontiguousarray(x, dtype=np.float64)
        if x.ndim != 2:
            raise ValueError("predict takes a 2-d matrix")
        out = np.zeros(x.shape[0], dtype=np.float64)
        if not x.shape[0]:
            return out
        written = ctypes.c_int64(0)
        _check(self._lib, self._lib.LGBM_BoosterPredictForMat(
            self._handle, x.ctypes.data_as(ctypes.c_void_p), ctypes.c_int(_DTYPE_FLOAT64), ctypes.c_int32(x.shape[0]),
            ctypes.c_int32(x.shape[1]), ctypes.c_int(1), ctypes.c_int(_PREDICT_NORMAL), ctypes.c_int(0), ctypes.c_int(-1),
            f"num_threads={int(num_threads)}".encode(), ctypes.byref(written), out.ctypes.data_as(ctypes.POINTER(ctypes.c_double))))
        if written.value != x.shape[0]:
            raise BoosterError(f"LightGBM wrote {written.value} scores for {x.shape[0]} rows")
        return out


def load(model_text: str) -> Any:
    """The booster of `model_text`: a `CBooster` when LightGBM's library is found, else `lightgbm.Booster`.
    Either raises `BoosterError` (a ValueError) for text LightGBM refuses."""
    lib = _library()
    if lib is not None:
        return CBooster(lib, model_text)
    lightgbm = lightgbm_package()
    try:
        return lightgbm.Booster(model_str=model_text)
    except lightgbm.basic.LightGBMError as e:
        raise BoosterError(str(e).strip()) from None
