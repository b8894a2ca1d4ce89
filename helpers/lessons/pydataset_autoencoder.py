# Generated from notebooks/03_pydataset_autoencoder.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""03 · Streaming a CIFAR-10 autoencoder from PNG files with `keras.utils.PyDataset`: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import numpy as np
import tensorflow as tf
import keras


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 2. A `PyDataset`, from the ground up
import math

class ImageBatches(keras.utils.PyDataset):
    """Shuffled batches of `n_images` images, float32 in [0, 1]: `(images, labels)` when labels
    are given, else `(images, images)` for an autoencoder. A subclass says how to `fetch` them."""

    def __init__(self, n_images, batch_size, *, labels=None, shuffle=True, seed=None,
                 drop_remainder=False, **kwargs):
        super().__init__(**kwargs)  # workers, use_multiprocessing, max_queue_size
        if batch_size < 1:
            raise ValueError(f"batch_size must be at least 1, got {batch_size}")
        if labels is not None and len(labels) != n_images:
            raise ValueError(f"{len(labels)} labels for {n_images} images")
        self.n_images, self.batch_size, self.shuffle = n_images, batch_size, shuffle
        self.labels = None if labels is None else np.asarray(labels)
        self.drop_remainder, self.rng = drop_remainder, np.random.default_rng(seed)
        self.on_epoch_end()  # the first epoch is shuffled too

    def on_epoch_end(self):
        self.order = (self.rng.permutation(self.n_images) if self.shuffle
                      else np.arange(self.n_images))

    def __len__(self):
        rounding = math.floor if self.drop_remainder else math.ceil  # ceil keeps the last batch
        return rounding(self.n_images / self.batch_size)

    def batch_indices(self, index):
        if not 0 <= index < len(self):
            raise IndexError(f"batch {index} is out of range for {len(self)} batches")
        return self.order[index * self.batch_size:(index + 1) * self.batch_size]

    def __getitem__(self, index):
        indices = np.sort(self.batch_indices(index))  # the order within a batch does not matter
        images = np.multiply(self.fetch(indices), 1 / 255, dtype=np.float32)
        return images, (images if self.labels is None else self.labels[indices])

    def fetch(self, indices):  # uint8 images, shape (len(indices), height, width, channels)
        raise NotImplementedError


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 2. A `PyDataset`, from the ground up
class ArrayImageBatches(ImageBatches):
    """Batches from a uint8 array: in memory, or memory-mapped from a `.npy` file on disk."""

    def __init__(self, images, batch_size, **kwargs):
        self.images = images
        super().__init__(len(images), batch_size, **kwargs)

    def fetch(self, indices):
        return np.asarray(self.images[indices])


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 2. A `PyDataset`, from the ground up
from pathlib import Path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"  # the first 8 bytes of every PNG file

def read_png(path, shape=(32, 32, 3)):
    """One PNG file as a uint8 array of `shape`, or a ValueError that names the file."""
    data = Path(path).read_bytes()
    if data[:8] != PNG_SIGNATURE:  # decode_png would decode a JPEG, GIF or BMP as well
        raise ValueError(f"{path} is not a PNG file")
    try:
        image = tf.io.decode_png(data, channels=shape[-1]).numpy()
    except tf.errors.InvalidArgumentError:
        raise ValueError(f"{path} is not a readable PNG file: it may be truncated") from None
    if image.shape != tuple(shape):
        raise ValueError(f"{path} holds a {image.shape} image, not {tuple(shape)}")
    return image


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 2. A `PyDataset`, from the ground up
class PngBatches(ImageBatches):
    """Batches read from a list of PNG files, each decoded by `read(path, shape)` when its batch is
    asked for."""

    def __init__(self, paths, batch_size, *, read=read_png, image_shape=(32, 32, 3), **kwargs):
        if kwargs.get("use_multiprocessing") and read is read_png:
            raise ValueError("worker processes are forked copies of this one, in which TensorFlow "
                             "can hang: pass a read= that does not use TensorFlow (PIL, say)")
        self.paths, self.read, self.image_shape = [str(p) for p in paths], read, tuple(image_shape)
        super().__init__(len(self.paths), batch_size, **kwargs)

    def fetch(self, indices):
        return np.stack([self.read(self.paths[i], self.image_shape) for i in indices])


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
    compiled as the article did (Adam, binary cross-entropy against the input). Two changes:
    BatchNorm's momentum is 0.9, and no BatchNorm comes before the sigmoid."""
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for filters in (32, 16, 8):                     # encoder: 32x32 → 16x16 → 8x8 → 4x4
        x = keras.layers.MaxPooling2D((2, 2))(conv_block(x, filters))
    for filters in (8, 16, 32):                     # decoder: the mirror image, 4x4 → 32x32
        x = keras.layers.UpSampling2D((2, 2))(conv_block(x, filters))
    x = keras.layers.Conv2D(input_shape[-1], (3, 3), padding="same")(x)
    outputs = keras.layers.Activation("sigmoid")(x)  # pixels in [0, 1]
    model = keras.Model(inputs, outputs, name="article_autoencoder")
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 8. Workers: threads, processes and the GIL
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the last 12 bytes of every complete PNG file

def read_png_pair(path, shape=(32, 32, 3)):
    """One PNG file as an (input, target) pair of float32 images in [0, 1], in TensorFlow ops; a bad
    file fails with an InvalidArgumentError that names it."""
    data = tf.io.read_file(path)

    def check(ok, problem, *values):
        return tf.debugging.Assert(ok, [tf.strings.join([path, problem]), *values])

    with tf.control_dependencies([
            check(tf.strings.substr(data, 0, 8) == PNG_SIGNATURE, " is not a PNG file"),
            check(tf.strings.substr(data, -12, 12) == PNG_END, " is truncated (no IEND chunk)")]):
        image = tf.io.decode_png(data, channels=shape[-1])
    with tf.control_dependencies([check(tf.reduce_all(tf.shape(image) == shape),
                                        f" is not {shape}; its shape is", tf.shape(image))]):
        image = tf.cast(tf.ensure_shape(image, shape), tf.float32) / 255.0
    return image, image


# ---------------- defined in notebooks/03_pydataset_autoencoder.ipynb, section: 8. Workers: threads, processes and the GIL
def tf_dataset_from_pngs(paths, batch_size, *, shuffle=True, seed=None, image_shape=(32, 32, 3)):
    """A `tf.data` pipeline over PNG files: names → read → check → decode → batch, as (x, x)."""
    files = tf.data.Dataset.from_tensor_slices([str(p) for p in paths])
    if shuffle:
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    return (files.map(lambda path: read_png_pair(path, tuple(image_shape)),
                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
            .batch(batch_size)
            .prefetch(tf.data.AUTOTUNE))
