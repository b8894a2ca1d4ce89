"""Images packed into one uint8 `.npy` file, read back as a memory map: an array bigger than memory.

Introduced in notebooks/03_pydataset_autoencoder.ipynb.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers.files import write_then_rename


def export_packed_uint8(images: np.ndarray, path: str | Path, chunk: int = 4096) -> Path:
    """Write images as one uint8 `.npy` file, chunk by chunk, renamed into place when complete.

    Read it back with `np.load(path, mmap_mode="r")`: the operating system pages in only the
    bytes a batch touches, so the file can be far larger than memory.
    Introduced in notebooks/03_pydataset_autoencoder.ipynb.

    >>> import tempfile
    >>> path = export_packed_uint8(np.zeros((5, 32, 32, 3), np.uint8), Path(tempfile.mkdtemp()) / "x.npy")
    >>> np.load(path, mmap_mode="r").shape
    (5, 32, 32, 3)
    """
    path = Path(path)
    images = np.asarray(images)
    if images.dtype != np.uint8:
        raise ValueError(f"export_packed_uint8 packs uint8 images, got {images.dtype}")
    with write_then_rename(path) as tmp:
        packed = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=tuple(images.shape))
        for start in range(0, len(images), chunk):
            packed[start:start + chunk] = images[start:start + chunk]
        packed.flush()
        del packed
    return path
