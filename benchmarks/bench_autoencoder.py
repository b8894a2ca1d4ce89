"""Training the article's CIFAR-10 autoencoder from disk against training from memory, and
whether each disk pipeline could feed a GPU.

The recommended disk pipeline is named before anything is measured, so no run picks the luckiest of
several noisy ratios: **block records** (notebook 05's format, 256 CIFAR-sized images per record,
read with `read_blocks`: shuffled files, 4 read at once, shuffled blocks, images mixed 8 blocks at
a time), cast to float32 [0, 1], prefetch. Until issue 30 it was raw uint8 TFRecord shards read by
`tf.data` (notebook 02's format, `read_split` with 4 parallel reads): on one core, block records
ran 1.35x as fast (160,000 against 119,000 images/s in one alternated run of 3 rounds, both with
the float cast; `bench_one_core` measures that ratio in every run as `ae_blocks_vs_tfrecord_one_core`),
and they shuffle every epoch where the raw records were read in file order.

All sides run in one alternation (`helpers.measure.alternate`: every side once per round, the
order reversed every other round); each key is the median over rounds of a ratio between runs of
the same round, with its 95 % interval, and a goal is judged on the interval's unfavourable bound.
Training rates are steady-state images/s: after a warm-up round, and past each epoch's first step
(`steady_rate`), whose time, the epoch's start-up, each training key's detail line gives for both
sides. A pipeline from files starts up more slowly than Keras's pass over arrays (its first batch
here: 50-100 ms more), and over these 15-step epochs that alone weighed 4-9 % (issue 44: whole-epoch
ratios of 0.910 and 0.933 in two full runs), where it would weigh 0.1-0.3 % of a CIFAR-10 epoch of
500 steps. (Repeated, `fit(stream.repeat(), steps_per_epoch=...)`, the stream starts once per `fit`
call instead of once per epoch.)

Keys (training throughput, disk / memory, batch 100):
- recommended_disk_vs_memory_ae: the recommended pipeline (goal "indistinguishable": median ≥ 0.95 and
  the 95 % interval holding 1)
- tfrecord_cold_vs_memory_ae: raw uint8 TFRecord shards, dropped from the page cache before every epoch
- memmap_vs_memory_ae: `PyDataset` over a memory-mapped uint8 .npy file
- pydataset_png_vs_memory_ae: a plain `PyDataset` decoding PNG files, one worker (shows what decoding costs)
- cold_read_slowdown: reading the TFRecord shards just after dropping them from the page cache / reading them
  cached, the drop itself not timed: its interval's lower bound above `REACHED_DISK`
  (`helpers.measure.cold_read`) shows the cold rows really read the disk here

Keys (GPU headroom: the pipeline alone, no model, every batch decoded and ready as `fit` gets it,
divided by the model's in-memory training throughput on this machine, batch 32):
- gpu_headroom_ae: the recommended pipeline (goal ≥ 12)
- gpu_headroom_ae_png: the plain PNG `PyDataset`
- gpu_headroom_ae_memmap, gpu_headroom_ae_tfdata_png: the others

Key (against the reference GPU, not this CPU):
- ae_pipeline_vs_gpu_bs256: the recommended pipeline alone at batch 256, over 50,000 images (CIFAR-10's
  training set size), / the images/s the reference H200 trains the autoencoder at batch 256
  (`helpers.measure.gpu_reference`; goal ≥ 1.0). Each epoch's start-up is counted in the rate.
  On one core: `bench_one_core` (ae_pipeline_vs_gpu_bs256_one_core).

"Memory" is `model.fit(x, x)` on float32 arrays already in RAM. Unless a row says cold, files
were written moments before and are read from the page cache: that is RAM speed, and a real
dataset larger than RAM reads from the disk (the cold rows show what that costs here). The
images are generated CIFAR-like pictures, 32x32x3 uint8 as in CIFAR-10; copy costs depend only
on the size, and their PNG files average about 2.5 KB, close to real CIFAR-10 PNGs, so decoding
costs about the same.
"""
from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import numpy as np
import tensorflow as tf

from benchmarks.run import Result
from helpers.lessons.pydataset_autoencoder import (ArrayImageBatches, PngBatches, article_autoencoder,
                                                   tf_dataset_from_pngs)
from helpers.measure.gpu_reference import gpu_appetite
from helpers.measure import Epoch, Samples, alternate, fit_epoch, pipeline_epoch
from helpers.measure.cold_read import REACHED_DISK, cold_read_slowdown, drop_from_page_cache
from helpers.storage.packed_images import export_packed_uint8
from helpers.storage.png_folder import check_png_folder, export_png_folder
from helpers.data.standins import make_cifar_like
from helpers.storage.tfrecord import read_split
from helpers.storage.tfrecord import write_shards
from helpers.lessons.pipeline_profiling import read_blocks, write_blocks
from helpers.storage.blocks import read_block_split, write_block_split

BATCH_SIZE = 100
HEADROOM_BATCH_SIZE = 32
GPU_BATCH_SIZE = 256
RECOMMENDED = "blocks"
INDISTINGUISHABLE = "median ≥ 0.95 and holds 1"   # training from disk as fast as from memory, as far as rounds can tell


def images_as_pairs(images, labels):
    images = tf.cast(images, tf.float32) / 255.0
    return images, images


def steady_rate(epoch: Epoch) -> float:
    """Images/s past the epoch's first step (its start-up), which is a full batch of `BATCH_SIZE` here."""
    if epoch.seconds <= epoch.start_up:
        raise ValueError("an epoch of one step has no steps past its first")
    return (epoch.samples - BATCH_SIZE) / (epoch.seconds - epoch.start_up)


def recommended(directory, batch_size: int) -> tf.data.Dataset:
    """The autoencoder's recommended pipeline: block records (notebook 05), shuffled every epoch, as pairs."""
    return (read_block_split(read_blocks, directory, "train", batch_size, shuffle=True)
            .map(images_as_pairs, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def raw_tfrecord(directory, batch_size: int) -> tf.data.Dataset:
    """Raw uint8 TFRecord shards (notebook 02's format), 4 read at once, as pairs: recommended until issue 30."""
    return (read_split(directory, "train", batch_size, parallel_reads=4)
            .map(images_as_pairs, num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE))


def run(quick: bool) -> list[Result]:
    n, rounds = (200, 1) if quick else (1_500, 9)
    n_gpu = 3_000 if quick else 50_000
    warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed")
    x, y = make_cifar_like(n, seed=0)
    workdir = Path(tempfile.mkdtemp(prefix="bench-autoencoder-"))
    try:
        png_paths, _ = check_png_folder(export_png_folder(x, y, workdir / "train", "tr", progress=False), "tr")
        packed = np.load(export_packed_uint8(x, workdir / "train.npy"), mmap_mode="r")
        manifest = write_shards(zip(x, y[:, 0]), workdir / "tfrecord", "train", 8, total=n, progress=False)
        shard_files = manifest.files(workdir / "tfrecord")
        x_float = x.astype(np.float32) / 255.0

        write_block_split(write_blocks, x, y[:, 0], workdir / "blocks", "train", num_shards=8)

        def tfrecord_cold(batch_size):
            drop_from_page_cache(shard_files)
            return raw_tfrecord(workdir / "tfrecord", batch_size)

        # One model trains every side: its speed does not depend on its weights, and one model is traced once.
        model = article_autoencoder()

        def fit(batch_size, make_x, **fit_args):
            return lambda: fit_epoch(model, batch_size=batch_size, samples=n, x=make_x(), **fit_args)

        training = alternate({
            "memory": fit(BATCH_SIZE, lambda: x_float, y=x_float),
            "blocks": fit(BATCH_SIZE, lambda: recommended(workdir / "blocks", BATCH_SIZE)),
            "tfrecord_cold": fit(BATCH_SIZE, lambda: tfrecord_cold(BATCH_SIZE)),
            "memmap": fit(BATCH_SIZE, lambda: ArrayImageBatches(packed, BATCH_SIZE)),
            "pydataset_png": fit(BATCH_SIZE, lambda: PngBatches(png_paths, BATCH_SIZE)),
        }, rounds=rounds, warmup=1)
        headroom = alternate({
            "memory": fit(HEADROOM_BATCH_SIZE, lambda: x_float, y=x_float),
            "blocks": lambda: pipeline_epoch(recommended(workdir / "blocks", HEADROOM_BATCH_SIZE)),
            "memmap": lambda: pipeline_epoch(ArrayImageBatches(packed, HEADROOM_BATCH_SIZE)),
            "tfdata_png": lambda: pipeline_epoch(tf_dataset_from_pngs(png_paths, HEADROOM_BATCH_SIZE)),
            "pydataset_png": lambda: pipeline_epoch(PngBatches(png_paths, HEADROOM_BATCH_SIZE)),
        }, rounds=rounds, warmup=1)
        cold = cold_read_slowdown(shard_files, rounds=max(rounds, 6))
        many = np.arange(n_gpu) % n
        write_block_split(write_blocks, x[many], y[many, 0], workdir / "blocks-large", "train", num_shards=16)
        large = alternate({"alone": lambda: pipeline_epoch(recommended(workdir / "blocks-large", GPU_BATCH_SIZE))},
                          rounds=max(rounds, 6), warmup=1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def training_result(key, name, meaning, goal="-"):
        mine, memory = (Samples([steady_rate(e) for e in training.epochs[side]]) for side in (name, "memory"))
        ratio = Samples([steady_rate(a) / steady_rate(b) for a, b in zip(training.epochs[name],
                                                                            training.epochs["memory"])])
        detail = (f"{mine.median:,.0f} img/s vs memory {memory.median:,.0f} img/s past the first step (medians) over "
                  f"{mine.n} rounds of {n:,}-image epochs at batch {BATCH_SIZE}; first step after "
                  f"{training.start_up(name).median * 1e3:.0f} ms (memory {training.start_up('memory').median * 1e3:.0f} "
                  f"ms); whole epochs, the first step counted: {training.ratio(name, 'memory').brief('.3f')}")
        return Result(key, meaning, goal, detail, ratio)

    gpu32 = gpu_appetite("cifar_autoencoder", HEADROOM_BATCH_SIZE).samples_per_second
    gpu256 = gpu_appetite("cifar_autoencoder", GPU_BATCH_SIZE).samples_per_second
    training_here = headroom.samples("memory").median

    def headroom_result(key, name, meaning, goal="-"):
        detail = (f"alone {headroom.samples(name).median:,.0f} img/s; training from memory here {training_here:,.0f} "
                  f"img/s at batch {HEADROOM_BATCH_SIZE}; the reference GPU trains {gpu32:,} img/s "
                  f"({gpu32 / training_here:.1f}x this machine)")
        return Result(key, meaning, goal, detail, headroom.ratio(name, "memory"))

    alone_256 = large.samples("alone")
    return [
        training_result("recommended_disk_vs_memory_ae", RECOMMENDED,
                        f"autoencoder training: the recommended pipeline (block records, tf.data) "
                        f"/ in-memory arrays, files page-cached", INDISTINGUISHABLE),
        training_result("tfrecord_cold_vs_memory_ae", "tfrecord_cold",
                        "raw uint8 TFRecord shards, dropped from the page cache before every epoch (cold reads) / memory"),
        training_result("memmap_vs_memory_ae", "memmap", "PyDataset over a memory-mapped uint8 .npy file / memory, page-cached"),
        training_result("pydataset_png_vs_memory_ae", "pydataset_png",
                        "plain PyDataset over PNG files (decode_png, 1 worker) / memory, page-cached"),
        Result("cold_read_slowdown", "reading the TFRecord shards after dropping them from the page cache / cached (the drop "
               "not timed)", f"> {REACHED_DISK}",
               f"cold {cold.cold.median * 1e3:.1f} ms, cached {cold.cached.median * 1e3:.1f} ms for "
               f"{cold.megabytes:.1f} MiB (medians)", cold.slowdown),
        headroom_result("gpu_headroom_ae", RECOMMENDED,
                        "recommended pipeline alone / training from memory here, batch 32 (can it feed a GPU?)", "≥ 12"),
        headroom_result("gpu_headroom_ae_png", "pydataset_png", "plain PNG PyDataset alone / training from memory here"),
        headroom_result("gpu_headroom_ae_memmap", "memmap", "memmap PyDataset alone / training from memory here"),
        headroom_result("gpu_headroom_ae_tfdata_png", "tfdata_png", "tf.data PNG pipeline alone / training from memory here"),
        Result("ae_pipeline_vs_gpu_bs256",
               "the recommended pipeline alone at batch 256 / the reference H200 training the autoencoder at batch 256",
               "≥ 1.0",
               f"alone {alone_256.median:,.0f} img/s over {n_gpu:,}-image epochs, each with a "
               f"{large.start_up('alone').median * 1e3:.0f} ms start-up (counted); the H200 trains {gpu256:,}", alone_256.scaled(1 / gpu256)),
    ]
