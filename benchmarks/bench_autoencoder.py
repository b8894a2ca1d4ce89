"""Training the article's CIFAR-10 autoencoder from disk against training from memory, and
whether each disk pipeline could feed a GPU.

The recommended disk pipeline is named before anything is measured: raw uint8 TFRecord shards
read by `tf.data` (notebook 02's format; `read_split` with 4 parallel reads), so no run picks
the luckiest of several noisy ratios.

Keys (training throughput, disk / memory: median over rounds of adjacent epoch pairs, A B then B A):
- recommended_disk_vs_memory_ae: the recommended pipeline (goal ≥ 0.95 on the low end of its range)
- tfrecord_cold_vs_memory_ae: the same, with its shards dropped from the page cache before every epoch
- memmap_vs_memory_ae: `PyDataset` over a memory-mapped uint8 .npy file
- pydataset_png_vs_memory_ae: a plain `PyDataset` reading PNG files with PIL, one worker (shows what decoding costs)
- cold_read_slowdown: reading the shards just after dropping them from the page cache / reading them cached:
  well above 1 shows the cold rows really read the disk here

Keys (GPU headroom: the pipeline alone, no model, every batch decoded and ready as `fit` gets it,
divided by the model's in-memory training throughput on this machine at batch 32):
- gpu_headroom_ae: the recommended pipeline (goal ≥ 12, from issue 8: the reference H200 trains this
  model 11,506 images/s at batch 32, helpers/gpu_reference.py; the detail line prints how many times
  this machine's own speed that is, about 8x on the 2-core machine this was written on)
- gpu_headroom_ae_png: the plain PNG `PyDataset`
- gpu_headroom_ae_memmap, gpu_headroom_ae_tfdata_png: the others

"Memory" is `model.fit(x, x)` on float32 arrays already in RAM. Unless a row says cold, files
were written moments before and are read from the page cache: that is RAM speed, and a real
dataset larger than RAM reads from the disk (the cold row shows what that costs here). The
images are generated CIFAR-like pictures, 32x32x3 uint8 as in CIFAR-10; copy costs depend only
on the size, and their PNG files average about 2.5 KB, close to real CIFAR-10 PNGs, so decoding
costs about the same. Training throughput is this machine's; on a GPU, training runs 12-60x
faster and only the headroom keys say whether a pipeline keeps up.
"""
from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import tensorflow as tf

from benchmarks.run import Result
from helpers.autoencoder import article_autoencoder
from helpers.gpu_reference import gpu_appetite
from helpers.packed import export_packed_uint8
from helpers.page_cache import cold_read_slowdown, drop_from_page_cache
from helpers.png_folder import export_png_folder
from helpers.png_pipeline import tf_dataset_from_png_folder
from helpers.pydatasets import ArrayImageBatches, PngFolderBatches
from helpers.standins import make_cifar_like
from helpers.tfrecord import read_split, write_shards
from helpers.throughput import compare_pipelines, measure_headroom

BATCH_SIZE = 100
HEADROOM_BATCH_SIZE = 32
RECOMMENDED = "tfrecord"


def images_as_pairs(images, labels):
    images = tf.cast(images, tf.float32) / 255.0
    return images, images


def run(quick: bool) -> list[Result]:
    n, rounds = (600, 2) if quick else (5_000, 5)
    warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed")
    x, y = make_cifar_like(n, seed=0)
    workdir = Path(tempfile.mkdtemp(prefix="bench-autoencoder-"))
    try:
        png_dir = export_png_folder(x, y, workdir / "train", "tr", progress=False)
        packed = np.load(export_packed_uint8(x, workdir / "train.npy"), mmap_mode="r")
        manifest = write_shards(zip(x, y[:, 0]), workdir / "tfrecord", "train", 8, total=n, progress=False)
        shard_files = manifest.files(workdir / "tfrecord")
        x_float = x.astype(np.float32) / 255.0

        def tfrecord(batch_size):
            return (read_split(workdir / "tfrecord", "train", batch_size, parallel_reads=4)
                    .map(images_as_pairs).prefetch(tf.data.AUTOTUNE))

        def tfrecord_cold(batch_size):
            drop_from_page_cache(shard_files)
            return tfrecord(batch_size)

        training = {
            "memory": lambda: {"x": x_float, "y": x_float, "batch_size": BATCH_SIZE},
            "tfrecord": lambda: {"x": tfrecord(BATCH_SIZE)},
            "tfrecord_cold": lambda: {"x": tfrecord_cold(BATCH_SIZE)},
            "memmap": lambda: {"x": ArrayImageBatches(packed, BATCH_SIZE)},
            "pydataset_png": lambda: {"x": PngFolderBatches(png_dir, "tr", BATCH_SIZE)},
        }
        results = compare_pipelines(article_autoencoder(), training, n_images=n, batch_size=BATCH_SIZE,
                                    rounds=rounds, warmup_rounds=1)
        alone = {
            "tfrecord": lambda: tfrecord(HEADROOM_BATCH_SIZE),
            "memmap": lambda: ArrayImageBatches(packed, HEADROOM_BATCH_SIZE),
            "tfdata_png": lambda: tf_dataset_from_png_folder(png_dir, "tr", HEADROOM_BATCH_SIZE),
            "pydataset_png": lambda: PngFolderBatches(png_dir, "tr", HEADROOM_BATCH_SIZE),
        }
        training_rates, headroom = measure_headroom(
            article_autoencoder(), lambda: {"x": x_float, "y": x_float, "batch_size": HEADROOM_BATCH_SIZE}, alone,
            n_images=n, batch_size=HEADROOM_BATCH_SIZE, rounds=rounds, warmup_rounds=1)
        cold = cold_read_slowdown(shard_files, repeats=rounds)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def training_result(key, name, meaning, goal="-"):
        r = results[name]
        detail = (f"{r.images_per_second:,.0f} img/s vs memory {results['memory'].images_per_second:,.0f} img/s over "
                  f"{len(r.ratios)} pairs of {n:,}-image epochs at batch {BATCH_SIZE}; first batch after "
                  f"{r.start_up * 1e3:.0f} ms (memory {results['memory'].start_up * 1e3:.0f} ms)")
        return Result.from_pairs(key, r.ratios, meaning, goal, detail)

    h100 = gpu_appetite("cifar_autoencoder", HEADROOM_BATCH_SIZE).samples_per_second
    training_median = float(np.median(training_rates))

    def headroom_result(key, name, meaning, goal="-"):
        h = headroom[name]
        detail = (f"alone {h.rate:,.0f} img/s; training from memory here {training_median:,.0f} img/s at batch "
                  f"{HEADROOM_BATCH_SIZE}; the reference GPU trains {h100:,} img/s")
        return Result.from_pairs(key, h.ratios, meaning, goal, detail)

    return [
        training_result("recommended_disk_vs_memory_ae", RECOMMENDED,
                        f"autoencoder training: the recommended pipeline ({RECOMMENDED}: raw uint8 TFRecord, tf.data) "
                        f"/ in-memory arrays, files page-cached", "≥ 0.95"),
        training_result("tfrecord_cold_vs_memory_ae", "tfrecord_cold",
                        "the same, shards dropped from the page cache before every epoch (cold reads)"),
        training_result("memmap_vs_memory_ae", "memmap", "PyDataset over a memory-mapped uint8 .npy file / memory, page-cached"),
        training_result("pydataset_png_vs_memory_ae", "pydataset_png",
                        "plain PyDataset over PNG files (PIL, 1 worker) / memory, page-cached"),
        Result.from_pairs("cold_read_slowdown", cold.ratios,
                          "reading the shards after dropping them from the page cache / cached", "> 1",
                          f"cold {cold.slow}; cached {cold.fast}"),
        headroom_result("gpu_headroom_ae", RECOMMENDED,
                        "recommended pipeline alone / training from memory here, batch 32 (can it feed a GPU?)", "≥ 12"),
        headroom_result("gpu_headroom_ae_png", "pydataset_png", "plain PNG PyDataset alone / training from memory here"),
        headroom_result("gpu_headroom_ae_memmap", "memmap", "memmap PyDataset alone / training from memory here"),
        headroom_result("gpu_headroom_ae_tfdata_png", "tfdata_png", "tf.data PNG pipeline alone / training from memory here"),
    ]
