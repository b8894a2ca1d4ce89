"""Ways of storing pixels in TFRecord files, measured: the same images written as raw bytes, one float per pixel
(`float_list`) and a serialized tensor, each with and without GZIP; bytes per record, and write and read times
against raw bytes' in alternating rounds. Also the older article's own writer, against `write_shards`.

Introduced in notebooks/02_tfrecord_conversion.ipynb (section 5).

    >>> import tempfile
    >>> images, labels = np.zeros((20, 28, 28), np.uint8), np.arange(20) % 10
    >>> result = compare_encodings(images, labels, tempfile.mkdtemp(), rounds=1)
    >>> result.bytes_per_record["raw"] < result.bytes_per_record["float_list"], result.writes.ratio("raw", "raw").n
    (True, 1)
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from helpers.measure import report
from helpers.measure.core import Rounds, Samples, alternate, timed
from helpers.storage.tfrecord import parse_batch_fn, readable_shards, write_shards

VARIANTS = {f"{encoding}{' + GZIP' if compression else ''}": (encoding, compression)
            for encoding in ("raw", "float_list", "tensor") for compression in (None, "GZIP")}
READ_BATCH = 256


def article_writer(images: np.ndarray, labels: np.ndarray, filename: str) -> None:
    """The older article's data2tfrecord.py (with `tf.python_io` → `tf.io`): one float per pixel, divided by 255
    first, and a float label."""
    data = np.c_[images.reshape(len(images), -1).astype("float32") / 255.0, labels.astype("float32")]
    with tf.io.TFRecordWriter(filename) as writer:
        for row in data:
            writer.write(tf.train.Example(features=tf.train.Features(feature={
                "x": tf.train.Feature(float_list=tf.train.FloatList(value=row[:-1])),
                "y": tf.train.Feature(float_list=tf.train.FloatList(value=row[-1:])),
            })).SerializeToString())


def _drain(dataset: tf.data.Dataset) -> None:
    for _ in dataset:
        pass


def read_pass(folder: str | Path, passes: int = 1) -> tf.data.Dataset:
    """The split 'train' of `folder` in batches, whatever its encoding and compression, `passes` times over."""
    shards = readable_shards(folder, "train")
    parse = parse_batch_fn(shards.manifest.encoding, shards.manifest.spec, shards.source)
    return (tf.data.TFRecordDataset(shards.files, shards.compression).batch(READ_BATCH)
            .map(parse, num_parallel_calls=tf.data.AUTOTUNE).repeat(passes))


@dataclass(frozen=True)
class EncodingComparison:
    """What `compare_encodings` measured: seconds per write and per read of every variant, round by round, and
    the bytes each takes per record."""

    records: int              # images written by each write
    read_passes: int          # each read went this many times over them
    writes: Rounds
    reads: Rounds
    bytes_per_record: dict[str, float]
    pixel_bytes: int          # bytes of one image's pixels

    def against_raw(self, timings: Rounds, name: str) -> Samples:
        """`name`'s time ÷ raw's, paired by round: above 1, slower than raw."""
        return timings.ratio(name, "raw")

    def table(self) -> None:
        """Bytes per record, and each time ÷ raw's with its verdict (`report.verdict`), one row per variant."""
        rows = {}
        for name in VARIANTS:
            row = {"bytes/record": self.bytes_per_record[name],
                   "× pixels": self.bytes_per_record[name] / self.pixel_bytes}
            for column, timings in (("write", self.writes), ("read", self.reads)):
                if name == "raw":
                    row[f"{column} time ÷ raw"], row[f"{column}: verdict"] = "1", "(the baseline)"
                else:
                    ratio = self.against_raw(timings, name)
                    row[f"{column} time ÷ raw"] = ratio
                    row[f"{column}: verdict"] = report.verdict(ratio, above="slower", below="faster")
            rows[name] = row
        report.table(rows, fmt={"bytes/record": ",.0f", "× pixels": ".2f"}, first="encoding")

    def chart(self, title: str) -> None:
        """Bytes per record (bars, a linear axis), and each write and read time ÷ raw's (dots with intervals)."""
        import matplotlib.pyplot as plt

        fig, (sizes, times) = plt.subplots(1, 2, figsize=(13, 3.8), layout="constrained",
                                           gridspec_kw={"width_ratios": [1, 2]})
        names = list(VARIANTS)
        sizes.barh(names, [self.bytes_per_record[n] for n in names], color="tab:blue")
        sizes.axvline(self.pixel_bytes, color="k", linestyle="--", linewidth=1,
                      label=f"{self.pixel_bytes:,} pixel bytes")
        sizes.invert_yaxis()
        sizes.set(title="Size on disk", xlabel="bytes per record")
        sizes.legend(loc="lower right", fontsize="small")
        others = [n for n in names if n != "raw"]
        report.dots({"write": {n: self.against_raw(self.writes, n) for n in others},
                     "read": {n: self.against_raw(self.reads, n) for n in others}},
                    title="Time ÷ raw bytes' time, paired by round", xlabel="× raw's time", log=True,
                    lines={"raw bytes' time": 1.0}, ax=times)
        fig.suptitle(title)
        plt.show()


def compare_encodings(images: np.ndarray, labels: np.ndarray, folder: str | Path, rounds: int,
                      read_passes: int = 1) -> EncodingComparison:
    """Write `images` in every variant (afresh each time: the writer would resume otherwise) and read each back
    `read_passes` times over, every variant once per round in a rotating order, writes first, then reads."""
    folder = Path(folder)

    def out(name: str) -> Path:
        return folder / name.replace(" + ", "-")

    def write(name: str) -> None:
        encoding, compression = VARIANTS[name]
        shutil.rmtree(out(name), ignore_errors=True)
        write_shards(zip(images, labels), out(name), "train", 1, total=len(images), encoding=encoding,
                     compression=compression, progress=False)

    writes = alternate({name: timed(lambda name=name: write(name)) for name in VARIANTS}, rounds=rounds)
    reads = alternate({name: timed(lambda name=name: _drain(read_pass(out(name), read_passes)))
                       for name in VARIANTS}, rounds=rounds)
    sizes = {name: sum(p.stat().st_size for p in out(name).glob("*.tfrecord")) / len(images) for name in VARIANTS}
    return EncodingComparison(len(images), read_passes, writes, reads, sizes, images[0].nbytes)


def compare_writers(images: np.ndarray, labels: np.ndarray, folder: str | Path, rounds: int) -> Samples:
    """The article's writer time ÷ `write_shards`' time, both writing one float per pixel, paired by round. What
    they wrote is removed afterwards (it is 4 bytes a pixel, and section 5 keeps a copy)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    helper_dir, article_file = folder / "write_shards", folder / "article.tfrecord"

    def helper() -> None:
        shutil.rmtree(helper_dir, ignore_errors=True)
        write_shards(zip(images, labels), helper_dir, "train", 1, total=len(images), encoding="float_list",
                     progress=False)

    try:
        writers = alternate({"article": timed(lambda: article_writer(images, labels, str(article_file))),
                             "write_shards": timed(helper)}, rounds=rounds)
    finally:
        shutil.rmtree(helper_dir, ignore_errors=True)
        article_file.unlink(missing_ok=True)
    return writers.ratio("article", "write_shards")
