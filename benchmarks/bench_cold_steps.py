"""The steps that led to the reader `bench_cold_read` measures (notebook 05's `read_blocks` with 1 MiB reads), one at a time: block records read cold by notebook
05's `read_blocks`, by the prototype before it and by variants, each against the raw read of the same files and
against the prototype, in the same alternation (issue 44).

Not part of the default run: `python -m benchmarks.run --only cold_steps [--quick]` (about 5 minutes here; quick:
under a minute).

Both datasets of `bench_cold_read` (about 1 GB each: the MLP's MNIST-shaped images at batch 1024, 4 blocks a batch;
the autoencoder's CIFAR-shaped ones at batch 256, rows mixed over 8 blocks), in 16 files of whole blocks, and the
same images again as fixed-length blocks (below). Every side drops every file from the page cache first
(`bench_cold_read.cold_alternation`). Steps (keys `cold_step_<mlp|ae>_<name>`, each the step's steady MB/s / the raw
read's of the same round; the detail line gives it against the prototype's, paired by round, and each side's CPU
seconds per GB, the steadier measure on a busy machine):
- prototype: the reader the first cold-read measurements proposed: `read_blocks` with no read buffer (a read per
  record) and a `posix_fadvise(WILLNEED)` hint on each file as the interleave takes it up, made in a
  `tf.py_function` (which can hang the process at exit: `bench_cold_read`'s docstring)
- lesson: `read_blocks` as notebook 05 has it (reads of 1 MiB, its `read_size`)
- lesson_1mib: `read_blocks` with reads of 1 MiB (`read_size=2**20`)
- batched: blocks kept as the pipeline's elements, `mix_blocks` of them parsed in one `parse_example` call and
  decoded into one tensor, reads of 1 MiB (`read_blocks_batched`): against lesson_1mib, what the per-block work and
  the copy it saves are worth
- batched_willneed: `read_blocks_batched` with no read buffer and the prototype's hint: what the hint adds
- lesson_1mib_page_cache, batched_page_cache: the same reads from the page cache (the files read just before): what
  each pipeline costs when no read waits for the device, the most a read-ahead could give it
- fixed_length, fixed_length_page_cache: the same images as raw blocks (a block's x bytes, then its y bytes, every
  block of a file the same length) read by `FixedLengthRecordDataset` in 1 MiB reads, then shuffled, batched and
  mixed as `read_blocks_batched` does: no CRC to check, no protocol buffer to parse (and no check of what a block
  holds): what TFRecord's framing and the `tf.train.Example` cost
"""
from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path

import numpy as np
import tensorflow as tf

from benchmarks.bench_cold_read import (AE_BATCH, AE_SHAPE, MLP_BATCH, MLP_SHAPE, cold_alternation, mix_blocks_for,
                                        random_images)
from benchmarks.run import Result
from helpers.lessons.pipeline_profiling import (BLOCK_SIZE, block_layout, mix_images, parse_block_fn, read_blocks,
                                                read_spec, write_blocks)
from helpers.measure.cold_read import advise_willneed, can_drop_page_cache
from helpers.storage.blocks import open_block_split, write_block_split

FILES = 16   # files per dataset and format: 64 MiB each in a full run


def parse_blocks_fn(spec, block_size, source="these block records"):
    """A function for `dataset.map` over a batch of serialized block records: `(x, y, real)`, every block's rows
    decoded as a full block's (a short block padded with zeros) into one tensor each, and `real` marking the rows
    that are not padding; once it has checked that each block holds `spec` and as many x as y."""
    (x_dtype, x_shape), (y_dtype, y_shape) = read_spec(spec)
    x_bytes = x_dtype.size * int(np.prod(x_shape))   # the bytes of one x, and of one y
    y_bytes = y_dtype.size * int(np.prod(y_shape))
    description = {name: tf.io.FixedLenFeature([], tf.string) for name in ("x", "y", "spec")}

    def parse(serialized):
        blocks = tf.io.parse_example(serialized, description)   # all the blocks in one call
        rows = tf.strings.length(blocks["y"]) // y_bytes
        checks = [tf.debugging.Assert(tf.reduce_all(tf.equal(blocks["spec"], spec)),
                                      [f"a block in {source} does not hold {spec}"]),
                  tf.debugging.Assert(tf.reduce_all(tf.equal(tf.strings.length(blocks["x"]), rows * x_bytes)),
                                      [f"a block in {source} does not hold one x per y"])]
        with tf.control_dependencies(checks):   # checked before their bytes are cut into rows
            x = tf.io.decode_raw(blocks["x"], x_dtype, fixed_length=block_size * x_bytes)
            y = tf.io.decode_raw(blocks["y"], y_dtype, fixed_length=block_size * y_bytes)
        real = tf.reshape(tf.range(block_size) < rows[:, None], [-1])
        return tf.reshape(x, [-1, *x_shape]), tf.reshape(y, [-1, *y_shape]), real

    return parse


def read_blocks_batched(files, batch_size=256, *, count=None, shuffle=False, mix_blocks=8, shuffle_blocks=64,
                        parallel_reads=4, read_size=2**20, seed=None):
    """Notebook 05's `read_blocks` with blocks kept as the pipeline's elements until `mix_blocks` of them are parsed
    together (`parse_blocks_fn`), their rows shuffled with one gather where a window is more than a batch; files
    read `read_size` bytes at a time. Same arguments, same batches, the same mixing (the hypothesis that the
    per-block work and a copy cost the cold read its speed: measured here, no steady gain)."""
    spec, block_size = block_layout(files[0])
    parse = parse_blocks_fn(spec, block_size)
    names = tf.data.Dataset.from_tensor_slices([str(f) for f in files])
    records = lambda name: tf.data.TFRecordDataset(name, buffer_size=read_size)
    mix = shuffle and block_size * mix_blocks != batch_size   # one batch a window: its order changes no gradient

    def rows(serialized):
        x, y, real = parse(serialized)
        if mix:   # the real rows, shuffled
            order = tf.random.shuffle(tf.where(real)[:, 0], seed=seed)
            return tf.gather(x, order), tf.gather(y, order)
        return tf.cond(tf.reduce_all(real), lambda: (x, y),   # all full: no copy
                       lambda: (tf.boolean_mask(x, real), tf.boolean_mask(y, real)))

    if not shuffle:   # the written order
        ds = names.flat_map(records)
    else:
        ds = (names.shuffle(len(files), seed=seed)                # a new file order each epoch
              .interleave(records, cycle_length=parallel_reads,   # several files at once,
                          num_parallel_calls=parallel_reads,      # whichever block is
                          deterministic=False)                    # ready first
              .shuffle(shuffle_blocks, seed=seed))                # the blocks
    ds = ds.batch(mix_blocks).map(rows, num_parallel_calls=tf.data.AUTOTUNE).rebatch(batch_size)
    return ds if count is None else ds.apply(
        tf.data.experimental.assert_cardinality(-(-count // batch_size)))


def read_ahead_hint(file):
    """For `dataset.map` over file names: ask the kernel to read the whole file into the page cache in the background
    (`POSIX_FADV_WILLNEED`) as soon as the name comes up, and pass the name on."""
    def hint(name):
        advise_willneed(name.numpy().decode())
        return name

    return tf.ensure_shape(tf.py_function(hint, [file], tf.string), [])


def prototype(files, batch_size, *, count, mix_blocks, shuffle_blocks=64, parallel_reads=4, read_ahead=True):
    """The first proposal: notebook 05's `read_blocks` as it was then (no read buffer: one read per record) with
    `read_ahead_hint` on each file name."""
    spec, block_size = block_layout(files[0])
    parse = parse_block_fn(spec)
    names = tf.data.Dataset.from_tensor_slices([str(f) for f in files]).shuffle(len(files))
    if read_ahead:
        names = names.map(read_ahead_hint)
    window = block_size * mix_blocks
    ds = (names.interleave(lambda name: tf.data.TFRecordDataset(name, buffer_size=0), cycle_length=parallel_reads,
                           num_parallel_calls=parallel_reads, deterministic=False)
          .shuffle(shuffle_blocks).map(parse, num_parallel_calls=tf.data.AUTOTUNE).rebatch(window))
    if window != batch_size:
        ds = ds.map(mix_images, num_parallel_calls=tf.data.AUTOTUNE)
    return ds.rebatch(batch_size).apply(tf.data.experimental.assert_cardinality(-(-count // batch_size)))


def batched_with_hint(files, batch_size, *, count, mix_blocks, shuffle_blocks=64, parallel_reads=4):
    """`read_blocks_batched(shuffle=True)` with no read buffer and `read_ahead_hint` on each file name."""
    spec, block_size = block_layout(files[0])
    parse = parse_blocks_fn(spec, block_size)
    mix = block_size * mix_blocks != batch_size

    def rows(serialized):
        x, y, real = parse(serialized)
        if mix:
            order = tf.random.shuffle(tf.where(real)[:, 0])
            return tf.gather(x, order), tf.gather(y, order)
        return tf.boolean_mask(x, real), tf.boolean_mask(y, real)

    names = tf.data.Dataset.from_tensor_slices([str(f) for f in files]).shuffle(len(files)).map(read_ahead_hint)
    ds = (names.interleave(lambda name: tf.data.TFRecordDataset(name, buffer_size=0), cycle_length=parallel_reads,
                           num_parallel_calls=parallel_reads, deterministic=False)
          .shuffle(shuffle_blocks).batch(mix_blocks).map(rows, num_parallel_calls=tf.data.AUTOTUNE))
    return ds.rebatch(batch_size).apply(tf.data.experimental.assert_cardinality(-(-count // batch_size)))


def write_fixed_blocks(images: np.ndarray, labels: np.ndarray, files: list[Path], block_size: int = BLOCK_SIZE):
    """`images` and their uint8 `labels` as raw blocks: per block its images' bytes, then its labels'; every file
    a run of whole blocks (the rows must fill whole blocks)."""
    if len(images) % block_size:
        raise ValueError(f"{len(images)} rows do not fill whole blocks of {block_size}")
    x = images.reshape(len(images) // block_size, -1)
    y = labels.astype(np.uint8).reshape(len(labels) // block_size, -1)
    for path, blocks in zip(files, np.array_split(np.arange(len(x)), len(files))):
        with open(path, "wb") as f:
            f.write(np.concatenate([x[blocks], y[blocks]], axis=1).tobytes())


def read_fixed_blocks(files, x_shape, batch_size, *, mix_blocks, block_size=BLOCK_SIZE, shuffle_blocks=64,
                      parallel_reads=4, read_size=2**20):
    """`write_fixed_blocks`' files, shuffled, batched and mixed as `read_blocks_batched` reads block records."""
    x_bytes = block_size * int(np.prod(x_shape))
    record = x_bytes + block_size
    mix = block_size * mix_blocks != batch_size

    def rows(records):
        blocks = tf.reshape(tf.io.decode_raw(records, tf.uint8), [-1, record])
        x, y = tf.reshape(blocks[:, :x_bytes], [-1, *x_shape]), tf.reshape(blocks[:, x_bytes:], [-1])
        return mix_images(x, y) if mix else (x, y)

    names = tf.data.Dataset.from_tensor_slices([str(f) for f in files]).shuffle(len(files))
    return (names.interleave(lambda name: tf.data.FixedLengthRecordDataset(name, record, buffer_size=read_size),
                             cycle_length=parallel_reads, num_parallel_calls=parallel_reads, deterministic=False)
            .shuffle(shuffle_blocks).batch(mix_blocks).map(rows, num_parallel_calls=tf.data.AUTOTUNE)
            .rebatch(batch_size))


STEPS = ("prototype", "lesson", "lesson_1mib", "batched", "batched_willneed", "lesson_1mib_page_cache",
         "batched_page_cache", "fixed_length", "fixed_length_page_cache")


def run(quick: bool) -> list[Result]:
    if not can_drop_page_cache():
        return []
    # Whole blocks in every file (16 files of 318 or 81 blocks): the fixed-length files need them.
    sizes, rounds = ({"mlp": 16 * 16 * BLOCK_SIZE, "ae": 16 * 4 * BLOCK_SIZE}, 1) if quick else \
        ({"mlp": 16 * 318 * BLOCK_SIZE, "ae": 16 * 81 * BLOCK_SIZE}, 6)
    workdir = Path(tempfile.mkdtemp(prefix="bench-cold-steps-"))
    results = []
    try:
        for model, shape, batch, seed in (("mlp", MLP_SHAPE, MLP_BATCH, 1), ("ae", AE_SHAPE, AE_BATCH, 2)):
            n, mix = sizes[model], mix_blocks_for(batch)
            images, labels = random_images(n, shape, seed)
            directory = workdir / model
            write_block_split(write_blocks, images, labels, directory, "train", num_shards=FILES)
            files = open_block_split(directory, "train").files
            fixed = [directory / f"fixed-{i:02d}.blocks" for i in range(FILES)]
            write_fixed_blocks(images, labels, fixed)
            del images, labels
            per_sample = sum(f.stat().st_size for f in files) / n
            fixed_per_sample = sum(f.stat().st_size for f in fixed) / n

            def lesson_1mib():
                return read_blocks(files, batch, count=n, shuffle=True, mix_blocks=mix, read_size=2**20)

            def batched(**options):
                return lambda: read_blocks_batched(files, batch, count=n, shuffle=True, mix_blocks=mix, **options)

            sides = {"prototype": lambda: prototype(files, batch, count=n, mix_blocks=mix),
                     "lesson": lambda: read_blocks(files, batch, count=n, shuffle=True, mix_blocks=mix),
                     "lesson_1mib": lesson_1mib,
                     "batched": batched(),
                     "batched_willneed": lambda: batched_with_hint(files, batch, count=n, mix_blocks=mix),
                     "lesson_1mib_page_cache": lesson_1mib,
                     "batched_page_cache": batched(),
                     "fixed_length": lambda: read_fixed_blocks(fixed, shape, batch, mix_blocks=mix),
                     "fixed_length_page_cache": lambda: read_fixed_blocks(fixed, shape, batch, mix_blocks=mix)}
            assert tuple(sides) == STEPS
            in_fixed = ("fixed_length", "fixed_length_page_cache")
            measured = cold_alternation(
                files, sides, {name: fixed_per_sample if name in in_fixed else per_sample for name in sides},
                rounds, cached=tuple(name for name in sides if name.endswith("page_cache")),
                files_of={name: fixed for name in in_fixed})
            load = os.getloadavg()[0]
            raw = measured.mb_per_s("raw")
            for name in sides:
                against = measured.rounds.ratio(name, "prototype")
                low, high = against.interval
                results.append(Result(
                    f"cold_step_{model}_{name}",
                    f"{name.replace('_', ' ')}: steady MB/s / the raw cold read's ({model}, {len(files)} files of "
                    f"{sum(f.stat().st_size for f in files) / len(files) / 2**20:.0f} MiB"
                    + ("; this side reads the page cache)" if "page_cache" in name else ")"), "-",
                    f"{measured.mb_per_s(name):,.0f} MB/s steady ({measured.whole_mb_per_s(name):,.0f} whole epoch, "
                    f"start-up {measured.start_up_ms(name):.0f} ms) vs raw {raw:,.0f}; {measured.cpu_per_gb(name):.2f} "
                    f"CPU s/GB (prototype {measured.cpu_per_gb('prototype'):.2f}, raw {measured.cpu_per_gb('raw'):.2f});"
                    f" / prototype {against.median:.2f} ({low:.2f}-{high:.2f}); {rounds} rounds, load {load:.1f}",
                    measured.rounds.ratio(name, "raw")))
            shutil.rmtree(directory)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return results
