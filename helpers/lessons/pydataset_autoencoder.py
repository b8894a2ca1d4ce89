# Generated from notebooks/03_pydataset_autoencoder.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""03 · Streaming a CIFAR-10 autoencoder from PNG files with `keras.utils.PyDataset`: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import numpy as np
import tensorflow as tf
import keras


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 2. A `PyDataset`, from the ground up
import math

class ImageBatches(keras.utils.PyDataset):
    """Shuffled batches of `n_images` images as `(x, x)` float32 pairs in [0, 1]; a subclass says
    how to `fetch`."""
    def __init__(self, n_images, batch_size, *, shuffle=True, seed=None, drop_remainder=False,
                 **kwargs):
        super().__init__(**kwargs)  # workers, use_multiprocessing, max_queue_size
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        self.n_images, self.batch_size, self.shuffle = n_images, batch_size, shuffle
        self.drop_remainder, self.rng = drop_remainder, np.random.default_rng(seed)
        self.on_epoch_end()  # the first epoch is shuffled too

    def on_epoch_end(self):
        self.order = (self.rng.permutation(self.n_images) if self.shuffle
                      else np.arange(self.n_images))

    def __len__(self):
        # ceil keeps the last, smaller batch
        rounding = math.floor if self.drop_remainder else math.ceil
        return rounding(self.n_images / self.batch_size)

    def batch_indices(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} is out of range for {len(self)} batches")
        return self.order[index * self.batch_size:(index + 1) * self.batch_size]

    def __getitem__(self, index):
        images = np.multiply(self.fetch(self.batch_indices(index)), 1 / 255, dtype=np.float32)
        return images, images  # an autoencoder's target is its input

    def fetch(self, indices):  # uint8 images, shape (len(indices), height, width, channels)
        raise NotImplementedError


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 2. A `PyDataset`, from the ground up
class ArrayImageBatches(ImageBatches):
    """Batches from a uint8 array: in memory, or memory-mapped from a `.npy` file on disk.

    >>> len(ArrayImageBatches(np.zeros((250, 32, 32, 3), np.uint8), batch_size=100))  # last: 50
    3
    """

    def __init__(self, images, batch_size, **kwargs):
        self.images = images
        super().__init__(len(images), batch_size, **kwargs)

    def fetch(self, indices):
        return np.asarray(self.images[np.sort(indices)])  # the order within a batch does not matter


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 2. A `PyDataset`, from the ground up
from helpers.storage.png_folder import check_png_folder, load_png

class PngFolderBatches(ImageBatches):
    """Batches read from `folder/{prefix}_{i:05d}.png`, matched to the labels in
    `folder/{prefix}_label.txt`.

    A bad image raises an error naming the file when its batch is read; with `skip_bad_files=True`
    every image is decoded once up front, and each bad one is named in a warning and left out
    (section 9).
    """

    def __init__(self, folder, prefix, batch_size, *, limit=None, image_shape=(32, 32, 3),
                 skip_bad_files=False, **kwargs):
        paths, labels = check_png_folder(folder, prefix)  # labels and files agree, or an error now
        self.paths, self.labels = paths[:limit], labels[:limit]  # limit: use only the first images
        self.image_shape = tuple(image_shape)
        self.skipped = []  # (path, what is wrong) of each file left out
        if skip_bad_files:
            self.paths, self.labels, self.skipped = without_bad_files(
                self.paths, self.labels, self.image_shape)
        super().__init__(len(self.paths), batch_size, **kwargs)

    def fetch(self, indices):
        return np.stack([load_png(self.paths[i], self.image_shape) for i in indices])


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 3. The article's autoencoder, with two changes
def conv_block(x, filters):
    """Conv 3x3 → BatchNorm → ReLU: the article's repeating unit, with BatchNorm's averages over
    ~10 steps, not ~100."""
    x = keras.layers.Conv2D(filters, (3, 3), padding="same")(x)
    x = keras.layers.BatchNormalization(momentum=0.9)(x)  # Keras's default: 0.99 (section 5)
    return keras.layers.Activation("relu")(x)


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 3. The article's autoencoder, with two changes
def article_autoencoder(input_shape=(32, 32, 3)):
    """The article's CIFAR-10 convolutional autoencoder: a 4x4x8 code for a 32x32x3 image,
    compiled as the article did (Adam, binary cross-entropy against the input). Two changes
    (section 3): BatchNorm's momentum is 0.9, and no BatchNorm comes between the last convolution
    and the sigmoid.

    >>> article_autoencoder().output_shape
    (None, 32, 32, 3)
    """
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for filters in (32, 16, 8):                     # encoder: 32x32 → 16x16 → 8x8 → 4x4
        x = keras.layers.MaxPooling2D((2, 2))(conv_block(x, filters))
    for filters in (8, 16, 32):                     # decoder: the mirror image, 4x4 → 32x32
        x = keras.layers.UpSampling2D((2, 2))(conv_block(x, filters))
    # the article normalised this output too
    x = keras.layers.Conv2D(input_shape[-1], (3, 3), padding="same")(x)
    outputs = keras.layers.Activation("sigmoid")(x)  # pixels in [0, 1]
    model = keras.Model(inputs, outputs, name="article_autoencoder")
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: A `tf.data` pipeline over the PNG folder
from helpers.storage.png_folder import PNG_END, PNG_SIGNATURE

def read_png_pair(path, shape=(32, 32, 3)):
    """One PNG file as an (input, target) pair of float32 images in [0, 1], in TensorFlow ops.

    A bad file fails with an error that names it: a missing file (`NotFoundError`), one that is
    not a PNG, a truncated one, or one of another shape (`InvalidArgumentError`)."""
    data = tf.io.read_file(path)
    checks = [
        tf.debugging.Assert(
            tf.strings.substr(data, 0, 8) == PNG_SIGNATURE,
            [tf.strings.join([path, ": not a PNG file "
                                    "(its first bytes are not a PNG signature)"])]),
        tf.debugging.Assert(
            tf.strings.substr(data, -12, 12) == PNG_END,
            [tf.strings.join([path, ": the PNG file is truncated "
                                    "(it does not end with an IEND chunk)"])]),
    ]
    with tf.control_dependencies(checks):  # decode only after the checks passed
        image = tf.io.decode_png(data, channels=shape[-1])
    size_check = tf.debugging.Assert(
        tf.reduce_all(tf.shape(image) == shape),
        [tf.strings.join([path, f": the image is not {shape[0]}x{shape[1]}x{shape[2]}; "
                                 "its shape is"]),
         tf.shape(image)])
    with tf.control_dependencies([size_check]):
        image = tf.cast(tf.ensure_shape(image, shape), tf.float32) / 255.0
    return image, image


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: A `tf.data` pipeline over the PNG folder
def tf_dataset_from_png_folder(folder, prefix, batch_size, *, shuffle=True, seed=None, limit=None,
                               image_shape=(32, 32, 3), threads=None):
    """A `tf.data` pipeline over a PNG folder: file names → read → check → decode → batch,
    as `(x, x)` pairs.

    `threads`: how many files to decode at once; None lets tf.data choose (`AUTOTUNE`)."""
    paths, _ = check_png_folder(folder, prefix)
    paths = paths[:limit]  # limit: use only the first images
    files = tf.data.Dataset.from_tensor_slices([str(p) for p in paths])
    if shuffle:
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    return (files.map(lambda path: read_png_pair(path, tuple(image_shape)),
                      num_parallel_calls=threads or tf.data.AUTOTUNE, deterministic=False)
            .batch(batch_size)
            .prefetch(tf.data.AUTOTUNE))


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: One file of raw pixels, memory-mapped
from pathlib import Path

from helpers.storage.files import write_then_rename

def export_packed_uint8(images, path, chunk=4096):
    """Write uint8 images as one `.npy` file, chunk by chunk, renamed into place when complete.

    >>> import tempfile
    >>> path = Path(tempfile.mkdtemp()) / "x.npy"
    >>> path = export_packed_uint8(np.zeros((5, 32, 32, 3), np.uint8), path)
    >>> np.load(path, mmap_mode="r").shape
    (5, 32, 32, 3)
    """
    path, images = Path(path), np.asarray(images)
    if images.dtype != np.uint8:
        raise ValueError(f"export_packed_uint8 packs uint8 images, got {images.dtype}")
    with write_then_rename(path) as tmp:
        packed = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.uint8, shape=images.shape)
        for start in range(0, len(images), chunk):
            packed[start:start + chunk] = images[start:start + chunk]
        packed.flush()
        del packed  # closes the map before the file is renamed
    return path


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: Cold reads: past the page cache
import os

def can_drop_page_cache():
    """True where the operating system offers `posix_fadvise` (Linux; not macOS or Windows)."""
    return hasattr(os, "posix_fadvise")

def drop_from_page_cache(paths):
    """Ask the kernel to drop these files' cached pages, so that the next read comes from the disk.

    Returns False, doing nothing, without `posix_fadvise`. The kernel may keep pages it is using:
    `cold_read_slowdown` measures whether the drop worked.

    >>> drop_from_page_cache([__file__]) == can_drop_page_cache()
    True
    """
    if not can_drop_page_cache():
        return False
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped: write them out first
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: Cold reads: past the page cache
from dataclasses import dataclass

from helpers.measure import Samples

# Cold reads at least this many times slower than cached ones (the interval's lower end) reached
# the disk; below it, the drop failed or the storage is as fast as RAM.
REACHED_DISK = 1.2

@dataclass
class ColdRead:
    """Seconds per read of the same files cold and cached, and their ratio, round by round."""
    cold: Samples
    cached: Samples
    slowdown: Samples   # cold seconds / cached seconds
    megabytes: float

    @property
    def reached_disk(self):
        return self.slowdown.interval[0] > REACHED_DISK


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: Cold reads: past the page cache
from pathlib import Path

from helpers.measure import alternate, timed

def read_files(paths, chunk=1 << 22):
    """Read the files to the end; the number of bytes read."""
    total = 0
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                total += len(block)
    return total

def cold_read_slowdown(paths, rounds=6):
    """Seconds to read `paths` just after dropping them from the page cache, against reading them
    again at once (cached), in alternating rounds after a warm-up round. The drop is not timed."""
    read = timed(lambda: read_files(paths))

    def cold():
        drop_from_page_cache(paths)   # before the clock starts
        return read()

    measured = alternate({"cold": cold, "cached": read}, rounds=rounds)
    megabytes = sum(Path(p).stat().st_size for p in paths) / 2**20
    return ColdRead(measured.samples("cold"), measured.samples("cached"),
                    measured.ratio("cold", "cached"), megabytes)


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 9. Bad files
import warnings
from pathlib import Path

from tqdm.auto import tqdm

from helpers.storage.png_folder import PngFolderError

def without_bad_files(paths, labels, image_shape):
    """The paths and labels of the images `load_png` can read, and `(path, what is wrong)` of each
    other one."""
    keep, skipped = [], []
    for i, path in enumerate(tqdm(paths, desc="checking PNG files", unit="img", leave=False)):
        try:
            load_png(path, image_shape)
            keep.append(i)
        except PngFolderError as error:
            skipped.append((path, str(error)))
            # stacklevel=3 points at the code that made the dataset
            warnings.warn(f"skipping {error}", stacklevel=3)
    if skipped:
        warnings.warn(f"skipped {len(skipped):,} of {len(paths):,} files in "
                      f"{Path(paths[0]).parent}", stacklevel=3)
    return [paths[i] for i in keep], labels[keep], skipped
