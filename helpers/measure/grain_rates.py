"""Notebook 08's rates, measured and reported: training from each loader on each backend (section 5), and Grain's
forms of reading alone, against notebook 05's block records with tf.data and the reference GPU (section 6). Also
its measures of a shuffle (sections 2 and 3): what an iterator checkpoint holds (`iterator_checkpoint_bytes`),
how far samples move (`displacement`), and how long one class runs in a row (`mean_class_run`).

Every rate is taken past each epoch's first step (`Rounds.past_start_up`); the first batch's wait is shown apart.
Verdicts come from `helpers.measure.report`, the series' one rule.

    rates = loader_rates(model, {"tf.data": make_tf_data, "Grain": make_grain}, batch_size=64, steps=32, rounds=6)
    words = report_backends(rates, jax_result)   # {"TensorFlow": "slower", "JAX": ...}
    words = report_forms(proof, batch=1024, size="200,000 digits an epoch, 12,000 here")

Plumbing: it never imports the lesson's code (the sides it times are passed in).
"""
from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

import numpy as np

from helpers.measure.core import Rounds, Samples, alternate, fit_epoch
from helpers.measure.report import appetite, compare, full_run_line, table

# The names notebook 08 gives its section 6 sides: the per-record form, the batch reads of uncompressed records,
# block records read by Grain, and block records read by tf.data.
PER_RECORD, BATCH_READS, GRAIN_BLOCKS, TF_DATA_BLOCKS = (
    "1. per record", "4. uncompressed", "5. block records", "tf.data, block records")


def loader_rates(model, loaders: Mapping[str, Callable], batch_size: int, steps: int, rounds: int) -> Rounds:
    """Training samples per second from each loader (a function that makes one epoch's batches), epochs of `steps`
    steps in alternating rounds after a warm-up, taken past each epoch's first step. The JAX child of
    `helpers.training_runs.other_backend` times itself with it too."""
    sides = {name: (lambda make=make: fit_epoch(model, x=make(), batch_size=batch_size, steps_per_epoch=steps))
             for name, make in loaders.items()}
    return alternate(sides, rounds=rounds).past_start_up()


def report_backends(here: Rounds, child: dict | None, backend: str = "TensorFlow") -> dict[str, str]:
    """A table of each backend's rate from each loader (this kernel's `here`, and the child's result, whose "rates"
    are its rounds' rates by loader), then Grain against tf.data on each backend by the rule. Returns each backend's
    verdict, e.g. {"TensorFlow": "slower", "JAX": "no measurable difference"}."""
    rates = {backend: {name: here.samples(name) for name in here.names}}
    if child:
        rates[f"JAX {child['versions']['jax']}"] = {name: Samples(v) for name, v in child["rates"].items()}
    table({f"{where}, {loader}": {"samples/s": rate} for where, by in rates.items() for loader, rate in by.items()},
          fmt=",.0f", first="backend, loader")
    words = {}
    for where, by in rates.items():
        ratio = Samples([g / t for g, t in zip(by["Grain"].values, by["tf.data"].values)])
        words[where.split()[0]] = compare(ratio, label=f"{where}: Grain against tf.data, paired by round")
    return words


def report_forms(proof: Rounds, batch: int, size: str, model: str = "mnist_mlp") -> dict[str, str]:
    """Section 6's table (each form's rate, its gain over the per-record form, its first batch's wait), the gains
    the notebook teaches with the stored full run beside them (`size`: how the two runs' sizes differ), and the two
    block-record readers against the reference GPU's appetite at `batch`. Returns the verdicts by name."""
    table({name: {"samples/s": proof.samples(name), f"× {PER_RECORD[3:]}": proof.ratio(name, PER_RECORD),
                  "first batch, ms": proof.start_up(name).scaled(1e3)} for name in proof.names},
          fmt={"samples/s": ",.0f", f"× {PER_RECORD[3:]}": ".1f", "first batch, ms": ".1f"},
          first=f"batch {batch}, alone")
    words = {
        "batch reads": compare(proof, BATCH_READS, PER_RECORD, fmt=".1f",
                               full_run="grain_batch_reads_vs_per_record", size=size),
        "blocks": compare(proof, GRAIN_BLOCKS, BATCH_READS),
        "grain": compare(proof, GRAIN_BLOCKS, TF_DATA_BLOCKS, full_run="grain_vs_tfdata_pipeline_alone", size=size),
        "per record": compare(proof, PER_RECORD, TF_DATA_BLOCKS),
    }
    feeds = appetite({name: proof.samples(name) for name in (GRAIN_BLOCKS, TF_DATA_BLOCKS)}, model, batch=batch)
    print(f"  {GRAIN_BLOCKS} against the reference GPU, {full_run_line('grain_pipeline_vs_gpu_bs1024', size=size)}")
    return words | {f"GPU, {name}": word for name, word in feeds.items()}


def iterator_checkpoint_bytes(dataset, directory: str | Path, batches: int = 3) -> int:
    """Bytes of a `tf.train.Checkpoint` of an iterator over `dataset` after `batches` batches, with tf.data's
    default optimizations off: they read ahead, and what is read ahead is saved."""
    import tensorflow as tf

    options = tf.data.Options()
    options.experimental_optimization.apply_default_optimizations = False
    iterator = iter(dataset.with_options(options))
    for _ in range(batches):
        next(iterator)
    prefix = tf.train.Checkpoint(iterator=iterator).write(str(Path(directory) / "iterator"))
    return sum(p.stat().st_size for p in Path(directory).glob(Path(prefix).name + "*"))


def displacement(order) -> float:
    """Mean distance from each sample's stored position to its place in `order`, as a share of the dataset
    (a fair shuffle: about a third).

    >>> displacement([0, 1, 2, 3]), displacement([3, 2, 1, 0])
    (0.0, 0.5)
    """
    order = np.asarray(order)
    return float(np.mean(np.abs(order - np.arange(len(order))))) / len(order)


def mean_class_run(labels_in_order) -> float:
    """Mean length of runs of one label in a row.

    >>> mean_class_run([0, 0, 1, 1, 1, 2])
    2.0
    """
    labels = np.asarray(labels_in_order)
    return len(labels) / (1 + int(np.count_nonzero(labels[1:] != labels[:-1])))
