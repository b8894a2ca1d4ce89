"""Images stored once as raw uint8 pixels in one `.npy` file, for `np.load(path, mmap_mode="r")` to map without
reading it (notebook 03, section 8; `benchmarks/bench_autoencoder.py`).
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers.storage.files import write_then_rename


def export_packed_uint8(images: np.ndarray, path: str | Path, chunk: int = 4096) -> Path:
    """Write uint8 images as one `.npy` file, chunk by chunk (the images may be a memory map themselves), under a
    temporary name renamed into place when complete: an interrupted export leaves no file at `path`.

    >>> import tempfile
    >>> path = export_packed_uint8(np.zeros((5, 32, 32, 3), np.uint8), Path(tempfile.mkdtemp()) / "x.npy")
    >>> np.load(path, mmap_mode="r").shape
    (5, 32, 32, 3)
    """
    path, images = Path(path), np.asarray(images)
    if images.dtype != np.uint8:
        raise ValueError(f"export_packed_uint8 packs uint8 images, got {images.dtype} for {path}")
    with write_then_rename(path) as tmp:
        packed = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=images.shape)
        for start in range(0, len(images), chunk):
            packed[start:start + chunk] = images[start:start + chunk]
        packed.flush()
        del packed  # closes the map before the file is renamed
    return path
