"""TFRecord writing: the series' helper against the older article's float_list writer.

Keys:
- tfrecord_write_speedup_vs_seed: seconds for the article's writer / seconds for write_shards (goal ≥ 15)
- tfrecord_bytes_per_raw_byte: file bytes per pixel byte with the default encoding (goal ≤ 1.10)
- tfrecord_seed_bytes_per_raw_byte: the same for the article's float_list encoding (about 4)
- tfrecord_vectorized_read_speedup: per-record parse time / batch-then-parse time

The images are generated MNIST-shaped digits (60,000 x 28 x 28 uint8, as in MNIST): how fast
records are encoded and how many bytes they take does not depend on the pixel values.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from benchmarks.run import Result
from helpers.standins import make_digits
from helpers.tfrecord import read_split, write_shards
from helpers.timing import paired_ratio


def article_writer(x: np.ndarray, y: np.ndarray, filename: str) -> None:
    """The older article's data2tfrecord.py, with tf.python_io.TFRecordWriter -> tf.io.TFRecordWriter."""

    def feature_float_list(values):
        return tf.train.Feature(float_list=tf.train.FloatList(value=values))

    def record2example(r):
        return tf.train.Example(features=tf.train.Features(feature={
            "x": feature_float_list(r[0:-1]),
            "y": feature_float_list([r[-1]]),
        }))

    x = x.reshape((-1, 28 * 28)).astype("float32") / 255.0
    y = y.reshape((-1, 1)).astype("float32")
    data = np.c_[x, y]
    with tf.io.TFRecordWriter(filename) as writer:
        for r in data:
            writer.write(record2example(r).SerializeToString())


def run(quick: bool) -> list[Result]:
    n = 10_000 if quick else 60_000
    repeats = 3
    x, y = make_digits(n, seed=0)
    workdir = Path(tempfile.mkdtemp(prefix="bench-tfrecord-"))
    try:
        seed_file = workdir / "seed.tfrecords"
        counter = iter(range(10**6))

        def helper_write():
            # A fresh directory each time, or the writer would resume and skip every shard.
            out = workdir / f"helper-{next(counter)}"
            write_shards(zip(x, y), out, "train", num_shards=4, total=n, progress=False)
            return out

        write = paired_ratio(lambda: article_writer(x, y, str(seed_file)), helper_write, repeats=repeats, warmup=1)
        helper_dir = helper_write()
        raw_bytes = n * 28 * 28
        helper_bytes = sum(p.stat().st_size for p in helper_dir.glob("train-*.tfrecord"))
        seed_bytes = seed_file.stat().st_size

        def drain(ds):
            for _ in ds:
                pass

        read = paired_ratio(
            lambda: drain(read_split(helper_dir, "train", 256, vectorized=False)),
            lambda: drain(read_split(helper_dir, "train", 256, vectorized=True)),
            repeats=repeats,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    return [
        Result("tfrecord_write_speedup_vs_seed", write.median,
               f"writing {n:,} MNIST records: article's float_list writer time / write_shards time", "≥ 15",
               write.median >= 15, f"article {write.slow}; helper {write.fast}; ratio {write}"),
        Result("tfrecord_bytes_per_raw_byte", helper_bytes / raw_bytes,
               "file bytes per pixel byte, default raw-bytes encoding", "≤ 1.10", helper_bytes / raw_bytes <= 1.10,
               f"{helper_bytes:,} bytes for {raw_bytes:,} pixel bytes"),
        Result("tfrecord_seed_bytes_per_raw_byte", seed_bytes / raw_bytes,
               "file bytes per pixel byte, article's float_list encoding", "≈ 4", None,
               f"{seed_bytes:,} bytes for {raw_bytes:,} pixel bytes"),
        Result("tfrecord_vectorized_read_speedup", read.median,
               "reading all records: per-record parse time / batch-then-parse time", "> 1", read.median > 1,
               f"per-record {read.slow}; vectorised {read.fast}; ratio {read}"),
    ]
