"""The input pipeline, profiled (notebook 05): the whole ladder of techniques, and memory against data size.

Keys:
- optimized_vs_naive_pipeline: the pipeline alone, MNIST-shaped records from shards, one epoch:
  notebook 05's best streaming pipeline (block records of 256 images: shuffled files, 4 read at
  once, shuffled blocks, images mixed 8 blocks at a time, prefetch) against the older article's
  (`benchmarks.bench_mnist.seed_pipeline`: notebook 05's own `article_pipeline`, its `naive_ds`: float_list records,
  one file after another, per-record parse, shuffle, batch, TensorFlow 2's automatic parallel map
  and prefetch switched off). Steady-state rates in alternating rounds (A B, then B A); files
  page-cached. Goal ≥ 10, on the lower bound of the 95 % interval.
- stream_peak_rss_growth_5x: peak resident memory of a fresh process training the MLP for one
  epoch by streaming from shards (notebook 04's pipeline), at 5x the data over 1x. Goal ≤ 1.05.
- stream_vs_memory_peak_rss_5x: at 5x the data, that streaming peak over the peak of a process
  that loads every record into an array and fits on it. Goal ≤ 0.3.
  Both memory ratios are per round (each round runs the four processes, two at a time, the order
  reversed in alternate rounds; each process reports its own peak), with the interval of their
  median. Each round costs more than a minute (1,000,000 images trained twice at batch 1024), so a
  full run takes 2 rounds (3 until the full run had to fit in 15 minutes): their whole range is a
  50 % interval of the median, and the peaks vary by about 1 % from round to round. 1x is 200,000 images (150 MiB of pixels), 5x 1,000,000 (750 MiB); the
  second ratio depends on that size next to TensorFlow's own ~600 MiB, which every process pays.

The digits are generated MNIST-shaped images (28x28 uint8), repeated to size: parsing costs and
memory depend on the record size, not on the pixels.
"""
from __future__ import annotations

import shutil
import tempfile
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import tensorflow as tf

from benchmarks.bench_mnist import seed_pipeline
from benchmarks.run import Result, digits
from helpers.measure.peak_memory import peak_training_memory
from helpers.measure import Samples, alternate, pipeline_epoch
from helpers.storage.tfrecord import write_shards
from helpers.lessons.pipeline_profiling import read_blocks, write_blocks
from helpers.measure.memory_budget import train_one_epoch
from helpers.storage.blocks import read_block_split, write_block_split
from helpers.lessons.tfdata_mnist import article_mlp


def optimized_vs_naive(workdir: Path, x: np.ndarray, y: np.ndarray, rounds: int) -> Result:
    write_shards(zip(x, y), workdir / "float", "train", 8, total=len(x), encoding="float_list", progress=False)
    write_block_split(write_blocks, x, y, workdir / "blocks", "train", num_shards=8)
    measured = alternate({
        "best": lambda: pipeline_epoch(read_block_split(read_blocks, workdir / "blocks", "train", 256, shuffle=True)
                                       .prefetch(tf.data.AUTOTUNE)),
        "article": lambda: pipeline_epoch(seed_pipeline(workdir / "float", 256)),
    }, rounds=rounds, warmup=1)
    detail = (f"best {measured.samples('best').median:,.0f} samples/s vs the article's "
              f"{measured.samples('article').median:,.0f} (medians), {rounds} rounds of {len(x):,}-record epochs")
    return Result("optimized_vs_naive_pipeline",
                  "pipeline alone: block records + prefetch / the older article's per-record float_list pipeline",
                  "≥ 10", detail, measured.ratio("best", "article"))


def memory(workdir: Path, x: np.ndarray, y: np.ndarray, base: int, rounds: int) -> list[Result]:
    sizes = (base, 5 * base)
    for n in sizes:
        picked = np.arange(n) % len(x)
        write_shards(((x[i], y[i]) for i in picked), workdir / f"n{n}", "train", 8, total=n, progress=False)
    peaks: dict[tuple[str, int], list[float]] = {}

    def both_modes(n: int):
        """One round at size n: a streaming and a loading child at once (each measures its own peak)."""
        def run() -> float:
            with ThreadPoolExecutor(max_workers=2) as pool:
                runs = dict(zip(("stream", "load"), pool.map(
                    lambda mode: peak_training_memory(mode, workdir / f"n{n}", "train", batch_size=1024,
                                                      train=train_one_epoch, model=article_mlp),
                    ("stream", "load"))))
            for mode, child in runs.items():
                peaks.setdefault((mode, n), []).append(child.peak_mib)
            return runs["stream"].peak_mib
        return run

    # Every process is fresh, so there is nothing to warm up; the order of the sizes alternates.
    measured = alternate({"1x": both_modes(sizes[0]), "5x": both_modes(sizes[1])}, rounds=rounds, warmup=0)
    growth = measured.ratio("5x", "1x")
    versus = Samples([s / l for s, l in zip(peaks["stream", sizes[1]], peaks["load", sizes[1]])])
    mib = {key: f"{np.median(v):,.0f}" for key, v in peaks.items()}
    detail = (f"peak MiB (median of {rounds} rounds): stream {mib['stream', sizes[0]]} at {sizes[0]:,} images, "
              f"{mib['stream', sizes[1]]} at {sizes[1]:,}; load {mib['load', sizes[0]]} and {mib['load', sizes[1]]}")
    return [
        Result("stream_peak_rss_growth_5x",
               "peak memory streaming 5x the data / streaming 1x (one training epoch, fresh process)", "≤ 1.05",
               detail, growth),
        Result("stream_vs_memory_peak_rss_5x",
               f"peak memory at 5x ({sizes[1]:,} images): streaming / loading everything into arrays", "≤ 0.3",
               samples=versus),
    ]


def run(quick: bool) -> list[Result]:
    n, rounds, base, memory_rounds = (2_000, 2, 2_000, 1) if quick else (30_000, 8, 200_000, 2)
    x, y = digits(n)
    workdir = Path(tempfile.mkdtemp(prefix="bench-profiling-"))
    try:
        return [optimized_vs_naive(workdir, x, y, rounds), *memory(workdir, x, y, base, memory_rounds)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
