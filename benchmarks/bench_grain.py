"""Grain over ArrayRecord against block records with tf.data, and a shuffle by index against a buffer (notebook 08).

Keys:
- grain_vs_tfdata_pipeline_alone: the pipeline alone, MNIST-shaped digits, batch 1024, one epoch: Grain over
  ArrayRecord shards in notebook 08's fastest form (section 6, form 5: uncompressed block records of 128 samples,
  `grain_batch_reads(block_size=128)`: Grain's elements are batches, each 8 blocks read with one call per shard by
  `ShardReaders`,
  decoded in one NumPy call and shuffled together; every epoch the blocks in a new global order; read ahead by 2
  threads) / notebook 05's block records with tf.data (`read_blocks(shuffle=True)` + `prefetch`). Rates past each
  epoch's first batch, in alternating rounds, files page-cached. Reported, no goal.
- grain_pipeline_vs_gpu_bs1024: that Grain pipeline's rate / the reference H200's training rate for the MLP at batch
  1024 (`helpers.measure.gpu_reference`). Goal ≥ 1.0 on the interval's low end.
- grain_batch_reads_vs_per_record: section 6's form 4 (`grain_batch_reads` over uncompressed shards of one sample a
  record: each batch read with one call per shard and decoded in one NumPy call) / section 4's per-record form
  (`grain_batches` over zstd shards:
  shuffle, read and decode each record, then batch), the same rounds. The per-record form is timed over the first
  10 batches of an epoch over the same split (its rate is its per-record work, a second of it shows it; a whole
  epoch of 200,000 records each round cost about 18 s idle). Reported, no goal.
- global_shuffle_vs_buffer_peak_rss: in fresh processes (`benchmarks.shuffle_memory`), the memory a shuffle takes
  while it runs: peak RSS above the process's RSS once TensorFlow is loaded, for `index_shuffle` over a stream of n
  MNIST-sized records / for a shuffle buffer of n/10 of the same records. Goal ≤ 0.5. Each child reads
  n/10 + 2,048 records (the buffer is full from the n/10-th on), the records made from their index on the fly, so
  that nothing but the shuffle holds them. The two children of a round run at once, one per core: a process's peak
  RSS is its own, whatever runs beside it.

Full run: 200,000 digits, 8 rounds after a warm-up; n = 500,000 records for the memory row, 5 rounds.
"""
from __future__ import annotations

import json
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import grain
import tensorflow as tf

from benchmarks.run import Result, digits
from benchmarks.shuffle_memory import MODES
from helpers.lessons.pipeline_profiling import read_blocks, write_blocks
from helpers.storage.blocks import read_block_split, write_block_split
from helpers.lessons.resume_shuffle_grain import grain_batch_reads, grain_batches
from helpers.measure import Samples, alternate, pipeline_epoch
from helpers.measure.gpu_reference import GPU_NAME, gpu_appetite
from helpers.setup.processes import child_environment
from helpers.storage.array_record import array_record_readers, array_record_source, write_array_records

BATCH = 1024


READ_AHEAD = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)
ROUNDS = 8                 # full run: 8 rounds after a warm-up, each of the 4 sides in every position twice
BLOCK = 128                # samples a block record (notebook 08, section 6)
PER_RECORD_BATCHES = 10    # the per-record form's rate is its per-record work: 10 batches (1 s) show it
MEMORY_ROUNDS, MEMORY_ROUNDS_QUICK = 5, 1   # quick mode: a smoke test, one round


def grain_pipeline(directory: Path, batch_size: int = BATCH):
    """Notebook 08's fastest Grain reading (section 6, form 5), for one epoch over block records: the blocks in a
    new global order, each batch's blocks read with one call per shard, decoded in one NumPy call, shuffled
    together."""
    blocks, info = array_record_readers(directory, "train")
    return grain_batch_reads(blocks, tuple(info.image_shape), info.image_dtype, batch_size, 1,
                             block_size=info.block_size).to_iter_dataset(READ_AHEAD)


def grain_batch_reads_pipeline(directory: Path, batch_size: int = BATCH):
    """Notebook 08's section 6, form 4, for one epoch: a new global order of single-sample records, each batch's
    records read with one call per shard and decoded in one NumPy call."""
    readers, info = array_record_readers(directory, "train")
    return grain_batch_reads(readers, tuple(info.image_shape), info.image_dtype, batch_size, 1).to_iter_dataset(
        READ_AHEAD)


def grain_per_record(directory: Path, batch_size: int = BATCH, batches: int | None = None):
    """Notebook 08's section 4 form: a global shuffle by index, each record read and decoded, then batched; one
    epoch, or its first `batches` batches."""
    source, info = array_record_source(directory, "train")
    return grain_batches(source, tuple(info.image_shape), info.image_dtype, batch_size, 1)[:batches].to_iter_dataset(
        READ_AHEAD)


def peak_growths(records: int) -> dict[str, float]:
    """One round of the peak-memory row: both children (`benchmarks.shuffle_memory`) at once, one per core, each in
    its own fresh process (a process's peak RSS is its own, whatever runs beside it); MiB of growth by mode."""
    children = {mode: subprocess.Popen([sys.executable, "-m", "benchmarks.shuffle_memory", mode, str(records)],
                                       env=child_environment(gpu=False), stdout=subprocess.PIPE,
                                       stderr=subprocess.PIPE, text=True)
                for mode in MODES}
    growth = {}
    for mode, child in children.items():
        out, err = child.communicate(timeout=600)
        if child.returncode != 0:
            raise RuntimeError(f"the {mode} shuffle child failed:\n{err[-2000:]}")
        growth[mode] = json.loads(out.strip().splitlines()[-1])["growth_mib"]
    return growth


def run(quick: bool) -> list[Result]:
    n = 8_192 if quick else 200_000
    rounds = 2 if quick else ROUNDS
    x, y = digits(n)
    workdir = Path(tempfile.mkdtemp(prefix="bench-grain-"))
    try:
        write_array_records(x, y, workdir / "array_record", "train", num_shards=8, num_classes=10, compress=False)
        write_array_records(x, y, workdir / "array_record_blocks", "train", num_shards=8, num_classes=10,
                            compress=False, block_size=BLOCK)
        write_array_records(x, y, workdir / "array_record_zstd", "train", num_shards=8, num_classes=10)
        write_block_split(write_blocks, x, y, workdir / "blocks", "train", num_shards=8)
        measured = alternate({
            "grain": lambda: pipeline_epoch(grain_pipeline(workdir / "array_record_blocks")),
            "batch_reads": lambda: pipeline_epoch(grain_batch_reads_pipeline(workdir / "array_record")),
            "per_record": lambda: pipeline_epoch(grain_per_record(workdir / "array_record_zstd",
                                                                  batches=PER_RECORD_BATCHES)),
            "blocks": lambda: pipeline_epoch(read_block_split(read_blocks, workdir / "blocks", "train", BATCH,
                                                              shuffle=True).prefetch(tf.data.AUTOTUNE)),
        }, rounds=rounds, warmup=1).past_start_up()
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    gpu = gpu_appetite("mnist_mlp", BATCH).samples_per_second
    grain_rate, blocks_rate = measured.samples("grain").median, measured.samples("blocks").median
    where = f"{n:,} MNIST-sized digits, batch {BATCH}, {rounds} rounds"
    per_record_batches = min(PER_RECORD_BATCHES, -(-n // BATCH))
    partial = f"the first {per_record_batches} batches of an epoch"
    results = [
        Result("grain_vs_tfdata_pipeline_alone", f"pipeline alone: Grain over ArrayRecord block records of {BLOCK} "
               "(notebook 08 section 6, form 5) / block records with tf.data, samples per second", "-",
               f"{where}: Grain {grain_rate:,.0f} samples/s, blocks {blocks_rate:,.0f} (medians)",
               measured.ratio("grain", "blocks")),
        Result("grain_pipeline_vs_gpu_bs1024", f"Grain's pipeline alone / the reference {GPU_NAME} training the "
               "MLP at batch 1024", "≥ 1.0", f"{where}: Grain {grain_rate:,.0f} samples/s, GPU {gpu:,}",
               measured.samples("grain").scaled(1 / gpu)),
        Result("grain_batch_reads_vs_per_record", "pipeline alone: Grain's batch reads over uncompressed shards / "
               "its per-record form over zstd shards (notebook 08 section 6, form 4 / form 1)", "-",
               f"{where}: batch reads {measured.samples('batch_reads').median:,.0f} samples/s, per record "
               f"{measured.samples('per_record').median:,.0f} over {partial} (medians)",
               measured.ratio("batch_reads", "per_record")),
    ]
    if not sys.platform.startswith("linux"):
        print("bench_grain: the peak-memory row needs Linux's /proc/self/status: skipped", file=sys.stderr)
        return results
    records = 100_000 if quick else 500_000
    rounds = [peak_growths(records) for _ in range(MEMORY_ROUNDS_QUICK if quick else MEMORY_ROUNDS)]
    growth = {mode: Samples([r[mode] for r in rounds]) for mode in MODES}
    results.append(Result(
        "global_shuffle_vs_buffer_peak_rss", f"peak RSS growth of a shuffle over {records:,} MNIST-sized records: "
        "index_shuffle / a buffer of a tenth of them", "≤ 0.5",
        f"index shuffle {growth['index'].median:,.1f} MiB, buffer of {records // 10:,} records "
        f"{growth['buffer'].median:,.1f} MiB above the process's RSS with TensorFlow loaded (medians of "
        f"{len(rounds)} rounds, both children of a round at once)",
        Samples([r["index"] / r["buffer"] for r in rounds])))
    return results

