"""Photo-sized digits: MNIST digits enlarged to a decoded photo's size (224 × 224 RGB, 147 KiB each), so that a few
thousand make a gigabyte. Notebook 05 §8 writes splits of them (`data/photo-sized/<MiB>-mib`) to train on more data
than a memory budget holds; memory depends on the bytes, not on what they show.
Introduced in notebooks/05_pipeline_profiling.ipynb.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np

from helpers.storage.files import fingerprint_arrays
from helpers.storage.tfrecord import ShardError, read_manifest, write_shards
from helpers.storage.tfrecord.read import check_shard_files

PHOTO_SHAPE = (224, 224, 3)   # a photo as an ImageNet model takes it: 224 × 224 pixels, RGB


def photo_sized(images: np.ndarray) -> np.ndarray:
    """Grey `images` (n, 28, 28) enlarged to PHOTO_SHAPE by repeating each pixel: the bytes of a decoded photo.

    >>> photo_sized(np.zeros((2, 28, 28), np.uint8)).shape
    (2, 224, 224, 3)
    """
    factor = PHOTO_SHAPE[0] // images.shape[1]
    enlarged = images.repeat(factor, axis=1).repeat(factor, axis=2)
    return np.repeat(enlarged[..., None], 3, axis=-1)


def write_large_split(images: np.ndarray, labels: np.ndarray, directory: str | Path, mib: int, num_shards: int = 8):
    """At least `mib` MiB of `photo_sized(images)`, cycled, as split "train" of `directory` (the series' raw uint8
    TFRecord shards), written once, then found there (same images, as many) and used as it is. Its manifest."""
    big = photo_sized(images)
    total = -(-mib * 2**20 // big[0].nbytes)   # whole images
    fingerprint = fingerprint_arrays(big, labels)
    try:
        manifest = read_manifest(directory, "train")
        if (manifest.fingerprint, manifest.total_records) == (fingerprint, total):
            check_shard_files(directory, manifest)   # every file there, of its size
            return manifest
    except (OSError, ShardError):   # not written yet, or not completely: write it
        pass
    records = ((big[i % len(big)], labels[i % len(big)]) for i in range(total))
    return write_shards(records, directory, "train", num_shards, total=total, fingerprint=fingerprint,
                        overwrite=True, progress=False)
