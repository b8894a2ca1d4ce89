"""The child process of `bench_grain`'s peak-memory row: `python -m benchmarks.shuffle_memory index|buffer N`.

In a fresh process it reads n/10 + 2,048 records of a shuffled stream of `N` MNIST-sized records (the buffer is full
from the n/10-th on), the records made from their index on the fly so that nothing but the shuffle holds them, and
prints the peak RSS above the RSS once TensorFlow ran its first dataset (MiB), as JSON. The records are pulled by
`Dataset.skip` inside TensorFlow, so that the child's seconds go to the shuffle, not to a Python loop or a function
called per record (a Python loop, or `Dataset.reduce`, cost about 50 µs a record, as much as making it). It imports
TensorFlow alone (not the benchmark module, which loads Keras and Grain too), so each child starts in a few seconds.
"""
from __future__ import annotations

import json
import os
import sys

MODES = ("index", "buffer")


def _rss_mib(field: str) -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith(field):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def shuffle_peak_growth(mode: str, n: int) -> float:
    """Peak RSS growth (MiB) while reading n/10 + 2048 records of `n` shuffled by `mode`."""
    from helpers.setup.processes import skip_unused_imports

    skip_unused_imports()   # TensorFlow's import would load JAX and matplotlib: a fifth of its start, unused here
    import tensorflow as tf

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
    last = ds.take(n // 10 + 2048).skip(n // 10 + 2047).get_single_element()   # fails unless there
    if last[0].shape != (28, 28):                                                # are that many
        raise RuntimeError(f"the {mode} shuffle gave a record of shape {last[0].shape}")
    return _rss_mib("VmHWM:") - floor


if __name__ == "__main__":
    if len(sys.argv) == 3 and sys.argv[1] in MODES and sys.argv[2].isdigit() and int(sys.argv[2]) >= 10_000:
        os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
        print(json.dumps({"growth_mib": shuffle_peak_growth(sys.argv[1], int(sys.argv[2]))}))
    else:
        sys.exit("usage: python -m benchmarks.shuffle_memory index|buffer N   (N at least 10,000)")
