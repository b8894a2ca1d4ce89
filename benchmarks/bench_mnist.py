"""Training the article's 784-512-10 MLP from TFRecord shards against training from memory, and
whether the streaming pipeline could feed a GPU (notebook 04).

Keys (training throughput, shards / memory, same model and batch size: median over rounds of
adjacent epoch pairs, A B then B A; files page-cached):
- stream_vs_memory_fit_bs256: notebook 04's pipeline (shuffled file order, 4 shards interleaved,
  a 10,000-record shuffle buffer, batch, vectorised parse, prefetch) against uint8 arrays (goal ≥ 0.97)
- stream_vs_memory_fit_bs32: the same at batch 32 (goal ≥ 0.95)
- blocks_vs_memory_fit_bs256: notebook 05's block records (256 images per record, shuffled files,
  blocks and images mixed 8 blocks at a time, prefetch) against uint8 arrays: the streaming
  pipeline with the least per-image work
- seed_vs_memory_fit_bs256: the older article's pipeline ported as-is (float_list records, per-record
  parse, shuffle, batch; no parallelism, no prefetch) against float32 arrays
- memory_vs_memory_fit_bs256: an A/A control, in-memory training on both sides: its range is this
  machine's noise floor, the least spread any training ratio here can have

Keys (GPU headroom: the pipeline alone, every batch parsed and ready, / the model's in-memory
training throughput here, batch 256):
- gpu_headroom_mnist_bs256: the cached pipeline, named in advance: notebook 04's pipeline with its
  parsed batches cached to a file on disk after the first epoch (goal ≥ 10, from issue 9: the
  reference H200 trains this model 186,431 samples/s at batch 256, helpers/gpu_reference.py; the
  detail line prints how many times this machine's own speed that is, about 3x here)
- gpu_headroom_mnist_bs256_uncached: notebook 04's pipeline without the cache
- gpu_headroom_mnist_bs256_blocks: notebook 05's block records, streaming (no cache)

The digits are generated MNIST-shaped images (28x28 uint8): parsing and copying costs depend on
the record size, not on the pixels; the model's speed does not depend on them either.
"""
from __future__ import annotations

import shutil
import tempfile
import warnings
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from benchmarks.run import Result
from helpers.gpu_reference import gpu_appetite
from helpers.mlp import article_mlp
from helpers.standins import make_digits
from helpers.tfrecord import read_split, write_shards
from helpers.tfrecord.blocks import read_blocks, write_blocks
from helpers.throughput import compare_pipelines, measure_headroom

SHUFFLE_BUFFER = 10_000


def stream(directory: Path, batch_size: int) -> tf.data.Dataset:
    """Notebook 04's training pipeline, packaged."""
    return read_split(directory, "train", batch_size, parallel_reads=4, shuffle_buffer=SHUFFLE_BUFFER).prefetch(
        tf.data.AUTOTUNE)


def cached(directory: Path, batch_size: int, cache_file: Path) -> tf.data.Dataset:
    """The same, with the parsed batches cached to a file after the first epoch; batch order still shuffled."""
    return (read_split(directory, "train", batch_size, parallel_reads=4, shuffle_buffer=SHUFFLE_BUFFER)
            .cache(str(cache_file)).shuffle(64).prefetch(tf.data.AUTOTUNE))


def seed_pipeline(path: Path, batch_size: int, repeat: bool = True) -> tf.data.Dataset:
    """The older article's train.py input, in TF 2: float_list records parsed one at a time, repeated
    for ever (the article then told `fit` the number of steps per epoch); `repeat=False` gives one epoch."""
    def parse(example):
        features = tf.io.parse_single_example(example, {
            "image": tf.io.FixedLenFeature([28 * 28], tf.float32),
            "label": tf.io.FixedLenFeature([], tf.int64)})
        return tf.reshape(features["image"], (28, 28)) / 255.0, features["label"]

    files = sorted(str(p) for p in path.glob("train-*.tfrecord"))
    ds = tf.data.TFRecordDataset(files).map(parse).shuffle(batch_size * 100).batch(batch_size)
    return ds.repeat(-1) if repeat else ds


def run(quick: bool) -> list[Result]:
    n, rounds = (6_000, 2) if quick else (60_000, 5)
    n_small_batch = n // 3  # batch 32 trains slowly on a CPU: a third of the data is plenty
    warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed")
    keras.utils.set_random_seed(0)
    x, y = make_digits(n, seed=0)
    x_float = x.astype(np.float32) / 255.0
    workdir = Path(tempfile.mkdtemp(prefix="bench-mnist-"))
    try:
        write_shards(zip(x, y), workdir / "raw", "train", 16, total=n, progress=False)
        write_shards(zip(x[:n_small_batch], y[:n_small_batch]), workdir / "raw-small", "train", 16,
                     total=n_small_batch, progress=False)
        write_shards(zip(x, y), workdir / "float", "train", 16, total=n, encoding="float_list", progress=False)
        write_blocks(x, y, workdir / "blocks", "train", num_shards=8)

        def blocks():
            return read_blocks(workdir / "blocks", "train", 256, shuffle=True).prefetch(tf.data.AUTOTUNE)

        def versus_memory(model, memory_x, stream_fit_args, n_images, batch_size):
            return compare_pipelines(model, {
                "memory": lambda: {"x": memory_x[:n_images], "y": y[:n_images], "batch_size": batch_size},
                "stream": stream_fit_args,
            }, n_images=n_images, batch_size=batch_size, rounds=rounds, warmup_rounds=1)

        bs256 = versus_memory(article_mlp(), x, lambda: {"x": stream(workdir / "raw", 256)}, n, 256)
        from_blocks = versus_memory(article_mlp(), x, lambda: {"x": blocks()}, n, 256)
        bs32 = versus_memory(article_mlp(), x, lambda: {"x": stream(workdir / "raw-small", 32)}, n_small_batch, 32)
        control = versus_memory(article_mlp(), x, lambda: {"x": x, "y": y, "batch_size": 256}, n, 256)
        seed = versus_memory(article_mlp(uint8_input=False), x_float,
                             lambda: {"x": seed_pipeline(workdir / "float", 256), "steps_per_epoch": -(-n // 256)}, n, 256)
        cache_file = workdir / "cache" / "train"
        cache_file.parent.mkdir()
        training_rates, headroom = measure_headroom(
            article_mlp(), lambda: {"x": x, "y": y, "batch_size": 256},
            {"cached": lambda: cached(workdir / "raw", 256, cache_file),
             "uncached": lambda: stream(workdir / "raw", 256),
             "blocks": blocks},
            n_images=n, batch_size=256, rounds=rounds, warmup_rounds=1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def training_result(key, results, meaning, goal, n_images, batch_size):
        r = results["stream"]
        detail = (f"{r.images_per_second:,.0f} samples/s vs memory {results['memory'].images_per_second:,.0f} "
                  f"over {len(r.ratios)} pairs of {n_images:,}-sample epochs at batch {batch_size}")
        return Result.from_pairs(key, r.ratios, meaning, goal, detail)

    gpu = gpu_appetite("mnist_mlp", 256).samples_per_second
    training_here = float(np.median(training_rates))

    def headroom_result(key, name, meaning, goal="-"):
        h = headroom[name]
        detail = (f"alone {h.rate:,.0f} samples/s; training from memory here {training_here:,.0f} samples/s; "
                  f"the reference GPU trains {gpu:,} samples/s at batch 256 ({gpu / training_here:.1f}x this machine)")
        return Result.from_pairs(key, h.ratios, meaning, goal, detail)

    return [
        training_result("stream_vs_memory_fit_bs256", bs256,
                        "MLP training from shards (notebook 04's pipeline) / from uint8 arrays, batch 256", "≥ 0.97",
                        n, 256),
        training_result("blocks_vs_memory_fit_bs256", from_blocks,
                        "MLP training from block records (notebook 05) / from uint8 arrays, batch 256", "-", n, 256),
        training_result("stream_vs_memory_fit_bs32", bs32, "the same at batch 32", "≥ 0.95", n_small_batch, 32),
        training_result("memory_vs_memory_fit_bs256", control,
                        "A/A control: training from uint8 arrays on both sides; the range is the noise floor", "-", n, 256),
        training_result("seed_vs_memory_fit_bs256", seed,
                        "the older article's pipeline as-is (float_list, per-record parse, no prefetch) / float32 arrays",
                        "-", n, 256),
        headroom_result("gpu_headroom_mnist_bs256", "cached",
                        "notebook 04's pipeline with a disk cache of parsed batches, alone / training here, batch 256",
                        "≥ 10"),
        headroom_result("gpu_headroom_mnist_bs256_uncached", "uncached",
                        "notebook 04's pipeline alone (parsing every epoch) / training here, batch 256"),
        headroom_result("gpu_headroom_mnist_bs256_blocks", "blocks",
                        "notebook 05's block records alone (streaming, parsing every epoch) / training here, batch 256"),
    ]
