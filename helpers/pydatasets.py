"""`keras.utils.PyDataset`s for an autoencoder: batches of images as (input, target) pairs.

- `ImageBatches` is the base: it shuffles the order of images every epoch and cuts it into
  batches; subclasses say how to fetch a list of images by index.
- `ArrayImageBatches` fetches from an array in memory, or from a `np.load(..., mmap_mode="r")`
  file on disk, which looks like an array but reads only the bytes a batch needs.
- `PngFolderBatches` reads PNG files from a folder in the article's layout, one batch at a time.

`workers`, `use_multiprocessing` and `max_queue_size` go to `super().__init__(**kwargs)`.

Introduced in notebooks/03_pydataset_autoencoder.ipynb.
"""
from __future__ import annotations

import math
import warnings
from pathlib import Path

import keras
import numpy as np
from tqdm.auto import tqdm

from helpers.png_folder import PngFolderError, check_png_folder, load_png


class ImageBatches(keras.utils.PyDataset):
    """Shuffled batches of `n_images` images, as `(x, x)` float32 pairs in [0, 1].

    The last batch keeps the remainder (`ceil`, not `floor`): every image is seen once per
    epoch. With `drop_remainder=True` the partial batch is dropped instead, and because the
    order is reshuffled every epoch, different images are left out each time.
    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """

    def __init__(self, n_images: int, batch_size: int, *, shuffle: bool = True, seed: int | None = None,
                 drop_remainder: bool = False, **kwargs):
        super().__init__(**kwargs)  # workers, use_multiprocessing, max_queue_size
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.n_images = n_images
        self.batch_size = batch_size
        self.shuffle = shuffle
        self.drop_remainder = drop_remainder
        self.rng = np.random.default_rng(seed)
        self.order = np.arange(n_images)
        self.on_epoch_end()  # the first epoch is shuffled too

    def __len__(self) -> int:
        rounding = math.floor if self.drop_remainder else math.ceil
        return rounding(self.n_images / self.batch_size)

    def batch_indices(self, index: int) -> np.ndarray:
        """Which images batch `index` holds in the current epoch."""
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} is out of range for {len(self)} batches")
        return self.order[index * self.batch_size:(index + 1) * self.batch_size]

    def __getitem__(self, index: int):
        images = np.multiply(self.fetch(self.batch_indices(index)), 1 / 255, dtype=np.float32)
        return images, images  # an autoencoder's target is its input

    def fetch(self, indices: np.ndarray) -> np.ndarray:
        """uint8 images for these indices, shape (len(indices), height, width, channels)."""
        raise NotImplementedError

    def on_epoch_end(self) -> None:
        if self.shuffle:
            self.order = self.rng.permutation(self.n_images)


class ArrayImageBatches(ImageBatches):
    """Batches from a uint8 array: in memory, or memory-mapped from a `.npy` file on disk.

    Introduced in notebooks/03_pydataset_autoencoder.ipynb.

    >>> len(ArrayImageBatches(np.zeros((250, 32, 32, 3), np.uint8), batch_size=100))  # the last batch holds 50
    3
    """

    def __init__(self, images: np.ndarray, batch_size: int, **kwargs):
        self.images = images
        super().__init__(len(images), batch_size, **kwargs)

    def fetch(self, indices: np.ndarray) -> np.ndarray:
        # Sorted indices read a memory-mapped file front to back; the batch's order doesn't matter.
        return np.asarray(self.images[np.sort(indices)])


class PngFolderBatches(ImageBatches):
    """Batches read from `folder/{prefix}_{i:05d}.png`, labels from `folder/{prefix}_label.txt`.

    The label file and the images are matched when the dataset is made, before training
    starts. A bad image (missing, truncated, not a PNG, wrong size) raises an error naming the
    file when its batch is read. With `skip_bad_files=True` every image is decoded once up
    front instead: each bad one is named in a warning and left out, and a count is given.

    Introduced in notebooks/03_pydataset_autoencoder.ipynb.

    Usage: `PngFolderBatches("data/dataset/train", "tr", batch_size=100, workers=2, use_multiprocessing=True)`.
    """

    def __init__(self, folder: str | Path, prefix: str, batch_size: int, *, limit: int | None = None,
                 image_shape: tuple[int, ...] = (32, 32, 3), skip_bad_files: bool = False, **kwargs):
        paths, labels = check_png_folder(folder, prefix)
        self.paths, self.labels = paths[:limit], labels[:limit]  # limit: use only the first images
        self.image_shape = tuple(image_shape)
        self.skipped: list[tuple[Path, str]] = []
        if skip_bad_files:
            self.paths, self.labels = self._without_bad_files()
        super().__init__(len(self.paths), batch_size, **kwargs)

    def _without_bad_files(self) -> tuple[list[Path], np.ndarray]:
        keep = []
        for i, path in enumerate(tqdm(self.paths, desc="checking PNG files", unit="img", leave=False)):
            try:
                load_png(path, self.image_shape)
                keep.append(i)
            except PngFolderError as e:
                self.skipped.append((path, str(e)))
                warnings.warn(f"skipping {e}", stacklevel=3)
        if self.skipped:
            warnings.warn(f"skipped {len(self.skipped):,} of {len(self.paths):,} files in {Path(self.paths[0]).parent}",
                          stacklevel=3)
        return [self.paths[i] for i in keep], self.labels[keep]

    def fetch(self, indices: np.ndarray) -> np.ndarray:
        return np.stack([load_png(self.paths[i], self.image_shape) for i in indices])
