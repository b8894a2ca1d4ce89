"""Reading shards from a slow store: what parallel reads and prefetch buy where every open and read waits, against
the page cache, where they buy little on 2 cores.

Keys:
- slow_store_parallel_interleave_gain: the same shards read by tf.data through the slow store
  (helpers/storage/slow_store.py), one file at a time with nothing overlapped / with `interleave(cycle_length=8,
  num_parallel_calls=8)` (8 files read at once, as notebooks 04 to 06 name their parallelism), a parallel parse
  and `prefetch` (goal > 1 on the interval's low end): where the time goes to waiting, overlapping waits is the gain.
- page_cache_parallel_interleave_gain: the same two pipelines on the same shards in the page cache (reported: on 2
  cores the parallel pipeline's threads share the cores the work needs, so its gain is small or below 1).
- slow_store_autotune_interleave_gain: the parallel pipeline with `num_parallel_calls=AUTOTUNE` (interleave and
  parse) instead of CYCLE, on the slow store, against one file at a time (reported): tf.data's autotuner shares out
  a budget of CPU cores, so on 2 cores it may open fewer files at once than a store's waits call for.
- slow_store_vs_page_cache_sequential: the one-file-at-a-time pipeline, page cache rate / slow store rate: what the
  store's waits cost (goal > 1: the store must really be slow, or the first key shows nothing).

The store's settings (`STORE`) are those of a bucket or a network drive read from a machine near it:
- 30 ms per file open: TensorFlow's own tf.data performance guide simulates a remote file's open with a 30 ms sleep
  (its `ArtificialDataset`), and AWS's S3 performance guide gives small requests' median latencies in "the range of
  tens of milliseconds" (Best Practices Design Patterns: Optimizing Amazon S3 Performance, "Timeouts and Retries
  for Latency-Sensitive Applications");
- 5 ms per read request (each up to 256 KiB here: tf.data's read buffer), a round trip on an open connection, a
  third of the guide's 15 ms per record;
- 100 MB/s shared by all reads: below a 1 Gbit/s link's 125 MB/s, the order of one stream from a bucket.
A Colab Google Drive mount is a FUSE file system too; its waits are longer than these, and vary.

Where the store cannot run (no FUSE: macOS, Windows, a container without /dev/fuse), the module prints why and
returns no rows.
"""
from __future__ import annotations

import shutil
import sys
import tempfile
from pathlib import Path

import tensorflow as tf

from benchmarks.run import Result, digits
from helpers.measure import alternate, pipeline_epoch
from helpers.storage.slow_store import mounted_slow_store, slow_store_available
from helpers.storage.tfrecord import parse_batch_fn, read_manifest, write_shards

STORE = dict(open_latency_ms=30, read_latency_ms=5, bandwidth_mb_s=100)
CYCLE = 8            # shards read at once by the parallel pipeline
BATCH = 256


def pipeline(directory: Path, parallel: int | None) -> tf.data.Dataset:
    """The shards of `directory`'s train split, batched and parsed: one file after another with nothing
    overlapped (`parallel=None`), or CYCLE files open at once, read by `parallel` calls (a number or AUTOTUNE),
    parsed in parallel, with the next batches prefetched."""
    manifest = read_manifest(directory, "train")
    parse = parse_batch_fn(manifest.encoding, manifest.spec, str(directory))
    files = tf.data.Dataset.from_tensor_slices(manifest.files(directory))
    if parallel is None:
        return files.interleave(tf.data.TFRecordDataset, cycle_length=1).batch(BATCH).map(parse)
    return (files.interleave(tf.data.TFRecordDataset, cycle_length=CYCLE, num_parallel_calls=parallel,
                             deterministic=False)
            .batch(BATCH).map(parse, num_parallel_calls=parallel).prefetch(tf.data.AUTOTUNE))


def run(quick: bool) -> list[Result]:
    available, reason = slow_store_available()
    if not available:
        print(f"bench_slow_store: skipped. {reason}", file=sys.stderr, end=" ")
        return []
    shards = 8 if quick else 16
    n = 4_000 if quick else 40_000           # about 0.4 MB a shard in quick mode, 2.1 MB in a full run
    rounds = 2 if quick else 9   # 9: the fewest whose 95 % interval leaves out the extremes
    x, y = digits(n)
    workdir = Path(tempfile.mkdtemp(prefix="bench-slow-store-"))
    try:
        write_shards(zip(x, y), workdir, "train", num_shards=shards, total=n, progress=False)
        shard_bytes = sum(p.stat().st_size for p in workdir.glob("train-*.tfrecord"))
        with mounted_slow_store(workdir, **STORE) as store:
            sides = {
                "cache sequential": lambda: pipeline_epoch(pipeline(workdir, parallel=None)),
                "cache parallel": lambda: pipeline_epoch(pipeline(workdir, parallel=CYCLE)),
                "store sequential": lambda: pipeline_epoch(pipeline(store, parallel=None)),
                "store parallel": lambda: pipeline_epoch(pipeline(store, parallel=CYCLE)),
                "store autotune": lambda: pipeline_epoch(pipeline(store, parallel=tf.data.AUTOTUNE)),
            }
            measured = alternate(sides, rounds=rounds, warmup=1)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    def rate(side: str) -> str:
        return f"{measured.samples(side).median:,.0f} records/s"

    where = (f"{n:,} MNIST-sized records in {shards} shards ({shard_bytes / 1e6:.1f} MB), batch {BATCH}; store: "
             f"{STORE['open_latency_ms']} ms an open, {STORE['read_latency_ms']} ms a read, "
             f"{STORE['bandwidth_mb_s']} MB/s")
    # (key, what it compares, goal, the side measured, the side it is divided by)
    rows = [
        ("slow_store_parallel_interleave_gain", f"slow store: {CYCLE} files read at once (interleave), parallel "
         f"parse, prefetch / one file at a time, records per second", "> 1", "store parallel", "store sequential"),
        ("page_cache_parallel_interleave_gain", "page cache: the same two pipelines on the same shards, parallel / "
         "one file at a time", "-", "cache parallel", "cache sequential"),
        ("slow_store_autotune_interleave_gain", "slow store: the parallel pipeline with "
         "num_parallel_calls=AUTOTUNE / one file at a time", "-", "store autotune", "store sequential"),
        ("slow_store_vs_page_cache_sequential", "one file at a time: page cache rate / slow store rate (what the "
         "store's waits cost)", "> 1", "cache sequential", "store sequential"),
    ]
    return [Result(key, what, goal, (f"{where}: " if i == 0 else "") + f"{side} {rate(side)}, {base} {rate(base)} "
                   "(medians)", measured.ratio(side, base))
            for i, (key, what, goal, side, base) in enumerate(rows)]

