"""The input pipeline, profiled (notebook 05): the whole ladder of techniques, and memory against data size.

Keys:
- optimized_vs_naive_pipeline: the pipeline alone, MNIST-shaped records from shards, one epoch:
  notebook 05's best streaming pipeline (block records of 256 images: shuffled files, 4 read at
  once, shuffled blocks, images mixed 8 blocks at a time, prefetch) against the older article's
  (float_list records, one file after another, per-record parse, shuffle, batch). Pairs of
  adjacent epochs, A B then B A; files page-cached. Goal ≥ 10 (issue 10).
- stream_peak_rss_growth_5x: peak resident memory of a fresh process training the MLP for one
  epoch by streaming from shards (notebook 04's pipeline), at 5x the data over 1x. Goal ≤ 1.05.
- stream_vs_memory_peak_rss_5x: at 5x the data, that streaming peak over the peak of a process
  that loads every record into an array and fits on it. Goal ≤ 0.3.
  Both memory ratios are per round (each round runs the four processes, two at a time, the order
  reversed in alternate rounds; each process reports its own peak). 1x is 200,000 images (150 MiB of pixels), 5x 1,000,000 (750 MiB); the
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
from benchmarks.run import Result
from helpers.peak_memory import peak_training_memory
from helpers.profiling import benchmark
from helpers.standins import make_digits
from helpers.tfrecord import write_shards
from helpers.tfrecord.blocks import read_blocks, write_blocks


def optimized_vs_naive(workdir: Path, x: np.ndarray, y: np.ndarray, pairs: int) -> Result:
    write_shards(zip(x, y), workdir / "float", "train", 8, total=len(x), encoding="float_list", progress=False)
    write_blocks(x, y, workdir / "blocks", "train", num_shards=8)
    measured = benchmark(lambda: read_blocks(workdir / "blocks", "train", 256, shuffle=True).prefetch(tf.data.AUTOTUNE),
                         baseline=lambda: seed_pipeline(workdir / "float", 256, repeat=False), repeats=pairs)
    ratios = measured.ratios
    detail = (f"best {measured.rate:,.0f} samples/s vs the article's {np.median(measured.baseline_rates):,.0f}, "
              f"{len(ratios)} pairs of {len(x):,}-record epochs")
    return Result.from_pairs("optimized_vs_naive_pipeline", ratios,
                             "pipeline alone: block records + prefetch / the older article's per-record float_list pipeline",
                             "≥ 10", detail)


def memory(workdir: Path, x: np.ndarray, y: np.ndarray, base: int, rounds: int) -> list[Result]:
    sizes = (base, 5 * base)
    for n in sizes:
        picked = np.arange(n) % len(x)
        write_shards(((x[i], y[i]) for i in picked), workdir / f"n{n}", "train", 8, total=n, progress=False)
    jobs = [(mode, n) for n in sizes for mode in ("stream", "load")]
    growth, versus, peaks = [], [], {}
    for round_index in range(rounds):
        order = jobs if round_index % 2 == 0 else jobs[::-1]
        with ThreadPoolExecutor(max_workers=2) as pool:  # two children at a time: each measures its own peak
            peaks_in_order = pool.map(lambda job: peak_training_memory(job[0], workdir / f"n{job[1]}", "train"), order)
            peak = {(mode, n): run.peak_mib for (mode, n), run in zip(order, peaks_in_order)}
        growth.append(peak["stream", sizes[1]] / peak["stream", sizes[0]])
        versus.append(peak["stream", sizes[1]] / peak["load", sizes[1]])
        for key, value in peak.items():
            peaks.setdefault(key, []).append(value)
    mib = {key: f"{np.median(v):,.0f}" for key, v in peaks.items()}
    detail = (f"peak MiB (median of {rounds} rounds): stream {mib['stream', sizes[0]]} at {sizes[0]:,} images, "
              f"{mib['stream', sizes[1]]} at {sizes[1]:,}; load {mib['load', sizes[0]]} and {mib['load', sizes[1]]}")
    return [
        Result.from_pairs("stream_peak_rss_growth_5x", growth,
                          "peak memory streaming 5x the data / streaming 1x (one training epoch, fresh process)",
                          "≤ 1.05", detail),
        Result.from_pairs("stream_vs_memory_peak_rss_5x", versus,
                          f"peak memory at 5x ({sizes[1]:,} images): streaming / loading everything into arrays",
                          "≤ 0.3"),
    ]


def run(quick: bool) -> list[Result]:
    n, pairs, base, rounds = (6_000, 2, 4_000, 1) if quick else (60_000, 5, 200_000, 2)
    x, y = make_digits(min(n, 20_000), seed=0)
    picked = np.arange(n) % len(x)
    x, y = x[picked], y[picked]
    workdir = Path(tempfile.mkdtemp(prefix="bench-profiling-"))
    try:
        return [optimized_vs_naive(workdir, x, y, pairs), *memory(workdir, x, y, base, rounds)]
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
