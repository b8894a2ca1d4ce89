"""Training the article's CIFAR-10 autoencoder from disk against training from memory.

Keys (training throughput, disk / memory, median over rounds of adjacent epoch pairs):
- pydataset_png_vs_memory_ae: a plain `PyDataset` reading PNG files with PIL, one worker
- best_disk_vs_memory_ae: the fastest of the disk pipelines below (goal ≥ 0.95)
- memmap_vs_memory_ae: `PyDataset` over a memory-mapped uint8 .npy file
- tfrecord_vs_memory_ae: `tf.data` over raw-uint8 TFRecord shards, 4 read in parallel
- tfdata_png_vs_memory_ae: `tf.data` reading and decoding the PNG files in parallel

"Memory" is `model.fit(x, x, batch_size=100)` on float32 arrays already in RAM. Throughput is
the steady state: images trained from the end of an epoch's first batch to the end of its last,
per second (the one-off wait for the first batch is reported apart, in the detail line). The images are generated CIFAR-like pictures, 32x32x3 uint8 as in
CIFAR-10: decode and copy costs depend on the image size, not on what the pictures show.
"""
from __future__ import annotations

import os
import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import tensorflow as tf

from benchmarks.run import Result
from helpers.autoencoder import article_autoencoder
from helpers.packed import export_packed_uint8
from helpers.png_folder import export_png_folder
from helpers.png_pipeline import tf_dataset_from_png_folder
from helpers.pydatasets import ArrayImageBatches, PngFolderBatches
from helpers.standins import make_cifar_like
from helpers.tfrecord import read_split, write_shards
from helpers.throughput import compare_pipelines

BATCH_SIZE = 100


def images_as_pairs(images, labels):
    images = tf.cast(images, tf.float32) / 255.0
    return images, images


def run(quick: bool) -> list[Result]:
    n, rounds = (2_000, 2) if quick else (10_000, 5)
    warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed")
    x, y = make_cifar_like(n, seed=0)
    workdir = Path(tempfile.mkdtemp(prefix="bench-autoencoder-"))
    try:
        png_dir = export_png_folder(x, y, workdir / "train", "tr", progress=False)
        packed = np.load(export_packed_uint8(x, workdir / "train.npy"), mmap_mode="r")
        write_shards(zip(x, y[:, 0]), workdir / "tfrecord", "train", 8, total=n, progress=False)
        x_float = x.astype(np.float32) / 255.0
        pipelines = {
            "memory": lambda: {"x": x_float, "y": x_float, "batch_size": BATCH_SIZE},
            "pydataset_png": lambda: {"x": PngFolderBatches(png_dir, "tr", BATCH_SIZE)},
            "memmap": lambda: {"x": ArrayImageBatches(packed, BATCH_SIZE)},
            "tfrecord": lambda: {"x": read_split(workdir / "tfrecord", "train", BATCH_SIZE, parallel_reads=4)
                                 .map(images_as_pairs).prefetch(tf.data.AUTOTUNE)},
            "tfdata_png": lambda: {"x": tf_dataset_from_png_folder(png_dir, "tr", BATCH_SIZE)},
        }
        model = article_autoencoder()
        results = compare_pipelines(model, pipelines, n_images=n, batch_size=BATCH_SIZE, rounds=rounds, warmup_rounds=1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def detail(name):
        r = results[name]
        low, high = min(r.ratios), max(r.ratios)
        return (f"{r.images_per_second:,.0f} img/s vs memory {results['memory'].images_per_second:,.0f} img/s; "
                f"ratio range {low:.3f}–{high:.3f} over {len(r.ratios)} rounds of {n:,} images; "
                f"first batch after {r.start_up * 1e3:.0f} ms (memory {results['memory'].start_up * 1e3:.0f} ms)")

    disk = ["memmap", "tfrecord", "tfdata_png", "pydataset_png"]
    best = max(disk, key=lambda name: results[name].ratio)
    out = [
        Result("pydataset_png_vs_memory_ae", results["pydataset_png"].ratio,
               "autoencoder throughput: plain PyDataset over PNG files (PIL, 1 worker) / in-memory arrays", "-",
               None, detail("pydataset_png")),
        Result("best_disk_vs_memory_ae", results[best].ratio,
               f"autoencoder throughput: fastest disk pipeline ({best}) / in-memory arrays", "≥ 0.95",
               results[best].ratio >= 0.95, detail(best)),
    ]
    for name, meaning in [("memmap", "PyDataset over a memory-mapped uint8 .npy file"),
                          ("tfrecord", "tf.data over raw-uint8 TFRecord shards"),
                          ("tfdata_png", "tf.data decoding the PNG files in parallel")]:
        out.append(Result(f"{name}_vs_memory_ae", results[name].ratio,
                          f"autoencoder throughput: {meaning} / in-memory arrays", "-", None, detail(name)))
    return out
