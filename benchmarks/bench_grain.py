"""Grain over ArrayRecord against block records with tf.data, and a shuffle by index against a buffer (notebook 08).

Keys:
- grain_vs_tfdata_pipeline_alone: the pipeline alone, MNIST-shaped digits, batch 1024, one epoch: Grain over
  ArrayRecord shards in notebook 08's fastest form (section 6, form 4: uncompressed shards, `grain_batch_reads`:
  Grain's elements are batches, each read with one call per shard by `ShardReaders` and decoded in one NumPy
  call, every epoch in a new global order; read ahead by 2 threads) / notebook 05's block records with tf.data
  (`read_blocks(shuffle=True)` + `prefetch`). Steady-state rates in alternating rounds, files page-cached.
  Reported, no goal: Grain reads every record with its own read from the file, where a block record holds 256.
- grain_pipeline_vs_gpu_bs1024: that Grain pipeline's rate / the reference H200's training rate for the MLP at batch
  1024 (`helpers.measure.gpu_reference`). Goal ≥ 1.0 on the interval's low end.
- grain_batch_reads_vs_per_record: that form / section 4's per-record form (`grain_batches` over zstd shards:
  shuffle, read and decode each record, then batch), the same rounds. Reported, no goal.
- global_shuffle_vs_buffer_peak_rss: in fresh processes (`--shuffle-child`), the memory a shuffle takes while it
  runs: peak RSS above the process's RSS once TensorFlow is loaded, for `index_shuffle` over a stream of n
  MNIST-sized records / for a shuffle buffer of n/10 of the same records. Goal ≤ 0.5. Each child reads
  n/10 + 2,048 records (the buffer is full from the n/10-th on), the records made from their index on the fly, so
  that nothing but the shuffle holds them. Both children of a round run one after the other, the order reversed in
  alternate rounds.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import grain
import tensorflow as tf

from benchmarks.run import Result, digits
from helpers.lessons.pipeline_profiling import read_blocks, write_blocks
from helpers.lessons.resume_shuffle_grain import grain_batch_reads, grain_batches
from helpers.measure import alternate, pipeline_epoch
from helpers.measure.gpu_reference import GPU_NAME, gpu_appetite
from helpers.setup.processes import child_environment
from helpers.storage.array_record import array_record_readers, array_record_source, write_array_records

BATCH = 1024


READ_AHEAD = grain.ReadOptions(num_threads=2, prefetch_buffer_size=4)


def grain_pipeline(directory: Path, batch_size: int = BATCH):
    """Notebook 08's fastest Grain reading (section 6, form 4), for one epoch: a new global order, each batch's
    records read with one call per shard and decoded in one NumPy call."""
    readers, info = array_record_readers(directory, "train")
    return grain_batch_reads(readers, info, batch_size, epochs=1).to_iter_dataset(READ_AHEAD)


def grain_per_record(directory: Path, batch_size: int = BATCH):
    """Notebook 08's section 4 form, for one epoch: a global shuffle by index, each record read and decoded, then
    batched."""
    source, info = array_record_source(directory, "train")
    return grain_batches(source, info, batch_size, epochs=1).to_iter_dataset(READ_AHEAD)


def _rss_mib(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def shuffle_child(mode: str, n: int) -> None:
    """In a fresh process: read n/10 + 2048 records of a shuffled stream of n MNIST-sized records; print the
    peak RSS above the RSS once TensorFlow ran its first dataset (MiB), as JSON."""
    tf.data.Dataset.range(1).map(lambda i: i).get_single_element()   # TensorFlow's own start-up, paid before
    floor = _rss_mib("VmRSS:")

    def record(i):
        return tf.fill([28, 28], tf.cast(i % 251, tf.uint8)), i % 10

    ids = tf.data.Dataset.range(n)
    if mode == "index":
        seed = tf.constant([1, 2], tf.int64)
        ds = ids.map(lambda i: tf.random.experimental.index_shuffle(i, seed, n - 1)).map(record)
    else:
        ds = ids.map(record).shuffle(n // 10, seed=1)
    for _ in ds.take(n // 10 + 2048):
        pass
    print(json.dumps({"growth_mib": _rss_mib("VmHWM:") - floor}))


def peak_growth(mode: str, n: int) -> float:
    out = subprocess.run([sys.executable, "-m", "benchmarks.bench_grain", "--shuffle-child", mode, str(n)],
                         env=child_environment(gpu=False), capture_output=True, text=True, timeout=900)
    if out.returncode != 0:
        raise RuntimeError(f"the {mode} shuffle child failed:\n{out.stderr[-2000:]}")
    return json.loads(out.stdout.strip().splitlines()[-1])["growth_mib"]


def run(quick: bool) -> list[Result]:
    n = 8_192 if quick else 200_000
    rounds = 2 if quick else 8
    x, y = digits(n)
    workdir = Path(tempfile.mkdtemp(prefix="bench-grain-"))
    try:
        write_array_records(x, y, workdir / "array_record", "train", num_shards=8, num_classes=10, compress=False)
        write_array_records(x, y, workdir / "array_record_zstd", "train", num_shards=8, num_classes=10)
        write_blocks(x, y, workdir / "blocks", "train", num_shards=8)
        measured = alternate({
            "grain": lambda: pipeline_epoch(grain_pipeline(workdir / "array_record")),
            "per_record": lambda: pipeline_epoch(grain_per_record(workdir / "array_record_zstd")),
            "blocks": lambda: pipeline_epoch(read_blocks(workdir / "blocks", "train", BATCH, shuffle=True)
                                             .prefetch(tf.data.AUTOTUNE)),
        }, rounds=rounds, warmup=1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    gpu = gpu_appetite("mnist_mlp", BATCH).samples_per_second
    grain_rate, blocks_rate = measured.samples("grain").median, measured.samples("blocks").median
    where = f"{n:,} MNIST-sized digits, batch {BATCH}, {rounds} rounds"
    results = [
        Result("grain_vs_tfdata_pipeline_alone", "pipeline alone: Grain over ArrayRecord (batch reads, notebook 08 "
               "section 6) / block records with tf.data, samples per second", "-",
               f"{where}: Grain {grain_rate:,.0f} samples/s, blocks {blocks_rate:,.0f} (medians)",
               measured.ratio("grain", "blocks")),
        Result("grain_pipeline_vs_gpu_bs1024", f"Grain's pipeline alone / the reference {GPU_NAME} training the "
               "MLP at batch 1024", "≥ 1.0", f"{where}: Grain {grain_rate:,.0f} samples/s, GPU {gpu:,}",
               measured.samples("grain").scaled(1 / gpu)),
        Result("grain_batch_reads_vs_per_record", "pipeline alone: Grain's batch reads over uncompressed shards / "
               "its per-record form over zstd shards (notebook 08 section 6, form 4 / form 1)", "-",
               f"{where}: batch reads {grain_rate:,.0f} samples/s, per record "
               f"{measured.samples('per_record').median:,.0f} (medians)", measured.ratio("grain", "per_record")),
    ]
    if not sys.platform.startswith("linux"):
        print("bench_grain: the peak-memory row needs Linux's /proc/self/status: skipped", file=sys.stderr)
        return results
    records = 100_000 if quick else 2_000_000
    memory = alternate({"index": lambda: peak_growth("index", records),
                        "buffer": lambda: peak_growth("buffer", records)}, rounds=2 if quick else 4, warmup=0)
    results.append(Result(
        "global_shuffle_vs_buffer_peak_rss", f"peak RSS growth of a shuffle over {records:,} MNIST-sized records: "
        "index_shuffle / a buffer of a tenth of them", "≤ 0.5",
        f"index shuffle {memory.samples('index').median:,.1f} MiB, buffer of {records // 10:,} records "
        f"{memory.samples('buffer').median:,.1f} MiB above the process's RSS with TensorFlow loaded (medians)",
        memory.ratio("index", "buffer")))
    return results


if __name__ == "__main__":
    if len(sys.argv) == 4 and sys.argv[1] == "--shuffle-child" and sys.argv[2] in ("index", "buffer"):
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        shuffle_child(sys.argv[2], int(sys.argv[3]))
    else:
        sys.exit("usage: python -m benchmarks.bench_grain --shuffle-child index|buffer N")
