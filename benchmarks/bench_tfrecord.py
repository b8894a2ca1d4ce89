"""TFRecord writing: the series' helper against the older article's float_list writer.

Keys:
- tfrecord_raw_vs_float_list_write: write_shards writing one float per pixel / writing raw bytes (goal ≥ 15):
  what the encoding buys
- tfrecord_helper_vs_seed_writer_same_encoding: the article's float_list writer / write_shards writing
  float_list: what the helper itself buys or costs (about 1: it adds checks, checksums and resume, not speed)
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
from helpers.timing import PairedRatio, Timing, paired_ratio


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


def scaled(ratio: PairedRatio, times: int) -> PairedRatio:
    """A ratio whose fast side ran `times` times per timed call, put back per run."""
    return PairedRatio([r * times for r in ratio.ratios], ratio.slow, Timing([t / times for t in ratio.fast.runs]))


def run(quick: bool) -> list[Result]:
    n = 10_000 if quick else 60_000
    repeats = 3 if quick else 5
    x, y = make_digits(n, seed=0)
    workdir = Path(tempfile.mkdtemp(prefix="bench-tfrecord-"))
    try:
        seed_file = workdir / "seed.tfrecords"

        def helper_write(encoding: str, times: int = 1) -> Path:
            out = workdir / f"helper-{encoding}"
            for _ in range(times):
                shutil.rmtree(out, ignore_errors=True)  # afresh, or the writer would resume and skip every shard
                write_shards(zip(x, y), out, "train", num_shards=4, total=n, encoding=encoding, progress=False)
            return out

        # What the encoding buys: the same helper writing one float per pixel, and raw bytes. Raw writes are
        # short, so each timed call writes the data RAW_TIMES times, which steadies the fast side of the ratio.
        raw_times = 3
        encoding = scaled(paired_ratio(lambda: helper_write("float_list"), lambda: helper_write("raw", raw_times),
                                       repeats=repeats, warmup=1), raw_times)
        # What the helper buys, or costs: the article's writer against the helper, both writing float_list.
        helper = paired_ratio(lambda: article_writer(x, y, str(seed_file)), lambda: helper_write("float_list"),
                              repeats=repeats, warmup=1)
        helper_dir = helper_write("raw")
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

    def result(key, ratio: PairedRatio, meaning, goal, detail):
        return Result.from_pairs(key, ratio.ratios, meaning, goal, detail)

    size_ok = helper_bytes / raw_bytes <= 1.10
    return [
        result("tfrecord_raw_vs_float_list_write", encoding,
               f"writing {n:,} MNIST records with write_shards: float_list time / raw-bytes time (the encoding's share)",
               "≥ 15", f"float_list {encoding.slow}; raw {encoding.fast}"),
        result("tfrecord_helper_vs_seed_writer_same_encoding", helper,
               f"writing {n:,} records as float_list: the article's writer time / write_shards time (the helper's share)",
               "-", f"article {helper.slow}; helper {helper.fast}"),
        Result("tfrecord_bytes_per_raw_byte", helper_bytes / raw_bytes,
               "file bytes per pixel byte, default raw-bytes encoding", "≤ 1.10", size_ok,
               f"{helper_bytes:,} bytes for {raw_bytes:,} pixel bytes (a size: the same every run)"),
        Result("tfrecord_seed_bytes_per_raw_byte", seed_bytes / raw_bytes,
               "file bytes per pixel byte, article's float_list encoding", "≈ 4", None,
               f"{seed_bytes:,} bytes for {raw_bytes:,} pixel bytes"),
        result("tfrecord_vectorized_read_speedup", read,
               "reading all records: per-record parse time / batch-then-parse time (files page-cached)", "> 1",
               f"per-record {read.slow}; vectorised {read.fast}"),
    ]
