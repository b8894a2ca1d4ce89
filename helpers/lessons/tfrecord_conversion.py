# Generated from notebooks/02_tfrecord_conversion.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""02 · Converting data to sharded TFRecord files: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import numpy as np
import tensorflow as tf


# ---------------- defined in notebooks/02_tfrecord_conversion.ipynb, section: 2. `tf.train.Example`: a record that describes itself
def image_example(image, label):
    """One (image, label) pair as a tf.train.Example: pixels as raw bytes, label as int64."""
    return tf.train.Example(features=tf.train.Features(feature={
        "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[image.tobytes()])),
        "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)])),
    }))


# ---------------- defined in notebooks/02_tfrecord_conversion.ipynb, section: 3. Writing shards
import os
import secrets


def write_tfrecords(images, labels, folder, split, num_shards):
    """Write (image, label) pairs as `num_shards` TFRecord files of `image_example` records;
    return the files' paths. Each file takes its name only when it is whole."""
    if len(images) != len(labels):
        raise ValueError(f"{len(images)} images but {len(labels)} labels")
    os.makedirs(folder, exist_ok=True)
    paths = []
    for index, part in enumerate(np.array_split(np.arange(len(images)), num_shards)):
        path = os.path.join(folder, f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord")
        partial = f"{path}.{secrets.token_hex(4)}.partial"   # a writer's own: two never share one
        with tf.io.TFRecordWriter(partial) as writer:
            for i in part:
                example = image_example(images[i], labels[i])
                writer.write(example.SerializeToString(deterministic=True))
        os.replace(partial, path)
        paths.append(path)
    return paths


# ---------------- defined in notebooks/02_tfrecord_conversion.ipynb, section: 4. Reading back, bit for bit
def parse_batch(serialized_batch, shape=(28, 28), dtype=tf.uint8):
    """A batch of serialized records → images (batch, *shape) of `dtype` and int64 labels: one
    parse op and one decode op for the whole batch, instead of one per record."""
    features = tf.io.parse_example(serialized_batch, {
        "image": tf.io.FixedLenFeature([], tf.string),
        "label": tf.io.FixedLenFeature([], tf.int64),
    })
    images = tf.reshape(tf.io.decode_raw(features["image"], dtype), (-1, *shape))
    return images, features["label"]


# ---------------- defined in notebooks/02_tfrecord_conversion.ipynb, section: 4. Reading back, bit for bit
def read_tfrecords(files, batch_size, shape=(28, 28), dtype=tf.uint8):
    """(images, labels) batches from TFRecord files of `image_example` records, in file order."""
    return (tf.data.TFRecordDataset(files)
            .batch(batch_size)
            .map(lambda records: parse_batch(records, shape, dtype),
                 num_parallel_calls=tf.data.AUTOTUNE))
