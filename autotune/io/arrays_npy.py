"""Arrays in and out of ``autotune run``: the network's inputs and outputs as ``.npy`` /
``.npz``, its weights as ``.npz`` keyed ``"<operator>/<role>"`` (``conv1/weight``,
``bn1/mean``; the role after the last ``/``, so ONNX names with slashes work).

Read with ``allow_pickle=False`` (an array file cannot run code), within a size limit, and
every failure is an ``InputError`` naming the file. Written atomically.
"""

from __future__ import annotations

import io
import zipfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from autotune.files import write_atomic
from autotune.io.errors import InputError
from autotune.io.limits import MAX_ONNX_BYTES, too_large

#: Largest array file read (the ONNX model limit: weights are as large as a model).
MAX_ARRAY_BYTES = MAX_ONNX_BYTES


def _load(path: Path) -> np.ndarray | np.lib.npyio.NpzFile:
    if not path.is_file():
        raise InputError(path, "no such file")
    size = path.stat().st_size
    if size > MAX_ARRAY_BYTES:
        raise InputError(path, too_large("file size", size, MAX_ARRAY_BYTES, "MAX_ARRAY_BYTES"))
    try:
        return np.load(path, allow_pickle=False)
    except (ValueError, OSError, zipfile.BadZipFile, EOFError) as exc:
        raise InputError(path, f"not a numpy .npy/.npz file ({exc})") from None


def load_arrays(path: str | Path, names: list[str]) -> dict[str, np.ndarray]:
    """The arrays for ``names`` (the network's inputs): a ``.npy`` holds the only one, a
    ``.npz`` one per name."""
    path = Path(path)
    data = _load(path)
    if isinstance(data, np.ndarray):
        if len(names) != 1:
            raise InputError(
                path, f"the network has {len(names)} inputs ({', '.join(names)}): give an .npz"
            )
        return {names[0]: _numeric(data, path, names[0])}
    with data:
        missing = [n for n in names if n not in data.files]
        if missing:
            raise InputError(path, f"no array named {missing[0]!r} (it has {data.files[:4]})")
        return {n: _numeric(data[n], path, n) for n in names}


def load_weights(path: str | Path) -> dict[str, dict[str, np.ndarray]]:
    """Weights by operator and role from an ``.npz`` keyed ``"<operator>/<role>"``."""
    path = Path(path)
    data = _load(path)
    if isinstance(data, np.ndarray):
        raise InputError(path, "weights must be an .npz with one array per operator/role")
    out: dict[str, dict[str, np.ndarray]] = {}
    with data:
        for key in data.files:
            op, sep, role = key.rpartition("/")
            if not sep or not op or not role:
                raise InputError(path, f"key {key!r} is not '<operator>/<role>'")
            out.setdefault(op, {})[role] = _numeric(data[key], path, key)
    return out


def _numeric(array: np.ndarray, path: Path, name: str) -> np.ndarray:
    if array.dtype.kind not in "fiu":
        raise InputError(path, f"array {name!r} has dtype {array.dtype}, expected numbers")
    return array


def check_output_path(path: str | Path, names: Sequence[str]) -> None:
    """``path`` can hold arrays of these ``names``: ``.npz``, or ``.npy`` for one (checked
    before the arrays are computed, as well as when they are saved)."""
    path = Path(path)
    if path.suffix.lower() != ".npz" and len(names) != 1:
        raise InputError(
            path, f"the network has {len(names)} outputs ({', '.join(names)}): use .npz"
        )


def save_arrays(path: str | Path, arrays: dict[str, np.ndarray]) -> None:
    """One array as ``.npy``, several as ``.npz`` (by name); atomically."""
    path = Path(path)
    check_output_path(path, list(arrays))
    buffer = io.BytesIO()
    if path.suffix.lower() == ".npz":
        np.savez(buffer, **arrays)  # type: ignore[arg-type]
    else:
        np.save(buffer, next(iter(arrays.values())))
    write_atomic(path, buffer.getvalue())
