"""Small file utilities the other helpers share: checksums, fingerprints, atomic writes.

Introduced in notebooks/02_tfrecord_conversion.ipynb.
"""
from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np


def sha256_of(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks.

    >>> len(sha256_of(__file__))
    64
    """
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def fingerprint_arrays(*arrays: np.ndarray) -> str:
    """A short SHA-256 of arrays' dtypes, shapes and bytes, to tell one data source from another.

    >>> fingerprint_arrays(np.zeros(3)) == fingerprint_arrays(np.zeros(3))
    True
    """
    digest = hashlib.sha256()
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()[:16]


def partial_path(path: str | Path) -> Path:
    """Where a file is written before it is complete: `NAME.partial` beside it."""
    path = Path(path)
    return path.with_name(path.name + ".partial")


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to `NAME.partial`, then rename: a reader sees the old file or the whole new one."""
    partial = partial_path(path)
    partial.write_bytes(data)
    os.replace(partial, path)


def atomic_write_text(path: str | Path, text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"))
