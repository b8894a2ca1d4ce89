"""A `tf.data` pipeline over a PNG folder: read and decode files in parallel, outside the GIL.

Introduced in notebooks/03_pydataset_autoencoder.ipynb.
"""
from __future__ import annotations

from pathlib import Path

import tensorflow as tf

from helpers.png_folder import PNG_END, PNG_SIGNATURE, check_png_folder


def read_png_pair(path: tf.Tensor, shape: tuple[int, int, int] = (32, 32, 3)):
    """One PNG file as an (input, target) pair of float32 images in [0, 1], in TensorFlow ops.

    TensorFlow's own decode errors do not say which file failed, so the file is checked
    first, with the path in each assertion's message: a PNG signature at the start, the IEND
    chunk at the end (a truncated file lacks it), and the decoded shape.
    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """
    data = tf.io.read_file(path)  # a missing file's NotFoundError names it
    checks = [
        tf.debugging.Assert(tf.strings.substr(data, 0, 8) == PNG_SIGNATURE,
                            [tf.strings.join([path, ": not a PNG file (its first bytes are not a PNG signature)"])]),
        tf.debugging.Assert(tf.strings.substr(data, -12, 12) == PNG_END,
                            [tf.strings.join([path, ": the PNG file is truncated (it does not end with an IEND chunk)"])]),
    ]
    with tf.control_dependencies(checks):  # decode only after the checks passed
        image = tf.io.decode_png(data, channels=shape[-1])
    size_check = tf.debugging.Assert(
        tf.reduce_all(tf.shape(image) == shape),
        [tf.strings.join([path, f": the image is not {shape[0]}x{shape[1]}x{shape[2]}; its shape is"]), tf.shape(image)])
    with tf.control_dependencies([size_check]):
        image = tf.cast(tf.ensure_shape(image, shape), tf.float32) / 255.0
    return image, image


def tf_dataset_from_png_folder(folder: str | Path, prefix: str, batch_size: int, *, shuffle: bool = True,
                               seed: int | None = None, limit: int | None = None,
                               image_shape: tuple[int, int, int] = (32, 32, 3)) -> tf.data.Dataset:
    """A `tf.data` pipeline over the folder: file names → read → check → decode_png → batch.

    Reading and decoding are TensorFlow ops, so `num_parallel_calls` runs them on several
    threads at once without the GIL. Images come as `(x, x)` float32 pairs in [0, 1]. The
    label file and the images are matched first (`check_png_folder`); a bad file found while
    reading raises an error that names it.
    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """
    paths, _ = check_png_folder(folder, prefix)
    paths = paths[:limit]
    files = tf.data.Dataset.from_tensor_slices([str(p) for p in paths])
    if shuffle:
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)
    return (files.map(lambda path: read_png_pair(path, tuple(image_shape)),
                      num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
            .batch(batch_size)
            .prefetch(tf.data.AUTOTUNE))
