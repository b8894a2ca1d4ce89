"""TFRecord writing: the series' helper against the older article's float_list writer.

Keys:
- tfrecord_raw_vs_float_list_write: write_shards writing one float per pixel / writing raw bytes (goal ≥ 15):
  what the encoding buys
- tfrecord_helper_vs_seed_writer_same_encoding: the article's float_list writer / write_shards writing
  float_list: what the helper itself buys or costs (about 1: it adds checks, checksums and resume, not speed)
- tfrecord_bytes_per_raw_byte: file bytes per pixel byte with the default encoding (goal ≤ 1.10)
- tfrecord_seed_bytes_per_raw_byte: the same for the article's float_list encoding (about 4)
- tfrecord_vectorized_read_speedup: per-record parse time / batch-then-parse time

The images are generated MNIST-shaped digits (10,000 x 28 x 28 uint8 in a full run; 20,000 until issue 30
trimmed the full run: a ratio of two write times does not need more): how fast
records are encoded and how many bytes they take does not depend on the pixel values.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

from benchmarks.run import Result, digits
from helpers.storage.tfrecord import read_split
from helpers.storage.tfrecord import write_shards
from helpers.measure import Samples, alternate, timed
from helpers.measure.tfrecord_encodings import article_writer   # the older article's writer, as notebook 02 times it


def run(quick: bool) -> list[Result]:
    n = 2_000 if quick else 10_000
    rounds = 1 if quick else 9   # the 3 writers in each order 3 times; the interval leaves out the extremes
    x, y = digits(n)
    workdir = Path(tempfile.mkdtemp(prefix="bench-tfrecord-"))
    try:
        seed_file = workdir / "seed.tfrecords"

        def helper_write(encoding: str, times: int = 1) -> None:
            out = workdir / f"helper-{encoding}"
            for _ in range(times):
                shutil.rmtree(out, ignore_errors=True)  # afresh, or the writer would resume and skip every shard
                write_shards(zip(x, y), out, "train", num_shards=4, total=n, encoding=encoding, progress=False)

        def drain(ds):
            for _ in ds:
                pass

        # Raw writes are short, so each timed call writes the data RAW_TIMES times (put back per write below),
        # which steadies that side of the ratio.
        raw_times = 3
        writes = alternate({
            "float_list": timed(lambda: helper_write("float_list")),
            "raw x3": timed(lambda: helper_write("raw", raw_times)),
            "article": timed(lambda: article_writer(x, y, str(seed_file))),
        }, rounds=rounds, warmup=1)
        helper_write("raw")
        helper_dir = workdir / "helper-raw"
        reads = alternate({
            "per record": timed(lambda: drain(read_split(helper_dir, "train", 256, vectorized=False))),
            "vectorised": timed(lambda: drain(read_split(helper_dir, "train", 256, vectorized=True))),
        }, rounds=rounds, warmup=1)
        raw_bytes = n * 28 * 28
        helper_bytes = sum(p.stat().st_size for p in helper_dir.glob("train-*.tfrecord"))
        seed_bytes = seed_file.stat().st_size
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def ms(samples: Samples, per: int = 1) -> str:
        return f"{samples.median / per * 1e3:,.0f} ms"

    float_s, raw_s, article_s = (writes.samples(k) for k in ("float_list", "raw x3", "article"))
    return [
        Result("tfrecord_raw_vs_float_list_write",
               f"writing {n:,} MNIST records with write_shards: float_list time / raw-bytes time (the encoding's share)",
               "≥ 15", f"float_list {ms(float_s)}, raw {ms(raw_s, raw_times)} (medians)",
               writes.ratio("float_list", "raw x3").scaled(raw_times)),
        Result("tfrecord_helper_vs_seed_writer_same_encoding",
               f"writing {n:,} records as float_list: the article's writer time / write_shards time (the helper's share)",
               "-", f"article {ms(article_s)}, helper {ms(float_s)} (medians)", writes.ratio("article", "float_list")),
        Result("tfrecord_bytes_per_raw_byte", "file bytes per pixel byte, default raw-bytes encoding", "≤ 1.10",
               f"{helper_bytes:,} bytes for {raw_bytes:,} pixel bytes (a size: the same every run)",
               value=helper_bytes / raw_bytes),
        Result("tfrecord_seed_bytes_per_raw_byte", "file bytes per pixel byte, article's float_list encoding", "≈ 4",
               f"{seed_bytes:,} bytes for {raw_bytes:,} pixel bytes", value=seed_bytes / raw_bytes),
        Result("tfrecord_vectorized_read_speedup",
               "reading all records: per-record parse time / batch-then-parse time (files page-cached)", "> 1",
               f"per-record {ms(reads.samples('per record'))}, vectorised {ms(reads.samples('vectorised'))} (medians)",
               reads.ratio("per record", "vectorised")),
    ]
