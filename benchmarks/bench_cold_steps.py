"""The steps that led to `bench_cold_read.read_from_disk`, one at a time: block records read cold by notebook 05's
`read_blocks` and by variants of it, each against the raw read of the same files in the same alternation (issue 44).

Not part of the default run: `python -m benchmarks.run --only cold_steps [--quick]` (about 6 minutes on a quiet machine; quick: a minute).

The MLP's block records (MNIST-shaped random images, batch 1024), about 1 GB, written three times: in files of
16, 64 and 256 MiB. Every side drops every file from the page cache first (`bench_cold_read.cold_alternation`).
Steps (keys `cold_step_<name>`, each the step's MB/s / the raw read's MB/s of the same round):
- lesson: `read_blocks` as notebook 05 has it: 4 files at once, reads of 256 KiB (its `read_size`)
- lesson_page_cache, willneed_page_cache: the same read from the page cache (the files read just before): what
  the pipeline costs when no read waits for the device
- parallel_8, parallel_16: 8 or 16 files at once
- buffer_256kib (TensorFlow's default), buffer_1mib, buffer_8mib: TFRecordDataset's read buffer (reads of that
  size, one more copy of every byte)
- sequential: `POSIX_FADV_SEQUENTIAL` on each file before it is read (the hint belongs to one open descriptor, and
  TFRecordDataset opens its own: it shows what a hint from outside the reader does, which should be nothing)
- willneed: `POSIX_FADV_WILLNEED` on each file as the interleave takes it up (`read_from_disk`)
- willneed_parallel_2, willneed_parallel_8, willneed_buffer_1mib: the same with 2 or 8 files at once, or a 1 MiB
  read buffer
- files_16mib_lesson, files_16mib_willneed, files_256mib_lesson, files_256mib_willneed: other file sizes
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import tensorflow as tf

from benchmarks.bench_cold_read import (MLP_BATCH, MLP_SHAPE, cold_alternation, mix_blocks_for, random_images,
                                        read_from_disk)
from benchmarks.run import Result
from helpers.lessons.pipeline_profiling import write_blocks
from helpers.measure.cold_read import can_drop_page_cache
from helpers.storage.blocks import open_block_split, write_block_split


def sequential_hint(file):
    """For `dataset.map` over file names: `POSIX_FADV_SEQUENTIAL` on a descriptor of our own (not the reader's)."""
    def hint(name):
        fd = os.open(name.numpy().decode(), os.O_RDONLY)
        try:
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_SEQUENTIAL)
        finally:
            os.close(fd)
        return name

    return tf.ensure_shape(tf.py_function(hint, [file], tf.string), [])


def with_sequential_hint(directory, batch_size, mix):
    """`read_blocks` with `sequential_hint` on each file name (the same pipeline as `read_from_disk(read_ahead=False)`
    but for the hint)."""
    import benchmarks.bench_cold_read as cold

    original = cold.read_ahead_hint
    cold.read_ahead_hint = sequential_hint
    try:
        return read_from_disk(directory, "train", batch_size, shuffle=True, mix_blocks=mix)
    finally:
        cold.read_ahead_hint = original


def run(quick: bool) -> list[Result]:
    if not can_drop_page_cache():
        return []
    n, rounds = (64_000, 1) if quick else (1_300_000, 4)
    images, labels = random_images(n, MLP_SHAPE, seed=3)
    mix, batch = mix_blocks_for(MLP_BATCH), MLP_BATCH
    workdir = Path(tempfile.mkdtemp(prefix="bench-cold-steps-"))
    results = []
    try:
        for file_mib in (64, 16, 256):
            directory = workdir / f"files-{file_mib}"
            write_block_split(write_blocks, images, labels, directory, "train",
                              num_shards=max(2, round(images.nbytes / 2**20 / file_mib)))
            files = open_block_split(directory, "train").files
            per_sample = sum(f.stat().st_size for f in files) / n

            def variant(**options):
                return lambda: read_from_disk(directory, "train", batch, shuffle=True, mix_blocks=mix, **options)

            if file_mib == 64:
                steps = {"lesson": variant(read_ahead=False), "lesson_page_cache": variant(read_ahead=False),
                         "parallel_8": variant(read_ahead=False, parallel_reads=8),
                         "parallel_16": variant(read_ahead=False, parallel_reads=16),
                         "buffer_256kib": variant(read_ahead=False, buffer_size=2**18),
                         "buffer_1mib": variant(read_ahead=False, buffer_size=2**20),
                         "buffer_8mib": variant(read_ahead=False, buffer_size=8 * 2**20),
                         "sequential": lambda: with_sequential_hint(directory, batch, mix),
                         "willneed": variant(), "willneed_page_cache": variant(),
                         "willneed_parallel_2": variant(parallel_reads=2),
                         "willneed_parallel_8": variant(parallel_reads=8),
                         "willneed_buffer_1mib": variant(buffer_size=2**20)}
            else:
                steps = {f"files_{file_mib}mib_lesson": variant(read_ahead=False),
                         f"files_{file_mib}mib_willneed": variant()}
            measured = cold_alternation(files, steps, per_sample, rounds,
                                        cached=("lesson_page_cache", "willneed_page_cache"))
            raw = measured.mb_per_s("raw")
            for name in steps:
                results.append(Result(
                    f"cold_step_{name}", f"{name.replace('_', ' ')}: MB/s / the raw cold read's, {len(files)} files "
                    f"of about {file_mib} MiB" + (" (this side reads the page cache)" if "page_cache" in name else ""),
                    "-",
                    f"{measured.mb_per_s(name):,.0f} vs raw {raw:,.0f} MB/s (medians over {rounds} rounds); "
                    f"{measured.cpu_per_gb(name):.2f} CPU s/GB (raw {measured.cpu_per_gb('raw'):.2f}); start-up "
                    f"{sorted(e.start_up for e in measured.epochs[name])[len(measured.epochs[name]) // 2] * 1e3:.0f} ms",
                    measured.rounds.ratio(name, "raw")))
            shutil.rmtree(directory)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results
