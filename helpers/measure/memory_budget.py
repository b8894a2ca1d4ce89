"""Notebook 05 §8's experiment: training on more data than a memory budget holds. One training epoch of a split of
the series' TFRecord shards, read two ways, in child processes under a budget, at several sizes, and its chart.

`train_one_epoch` reads the split the two ways: "load" reads every record into one NumPy array first, as `keras.datasets` hands MNIST over, and fits
on the arrays; "stream" fits on notebook 04's pipeline (`read_split`), which holds a shuffle buffer and a few batches
whatever the size of the split. Both size their buffers in bytes, not records (10,000 MNIST digits are 7.5 MiB,
10,000 photos of 224 × 224 pixels 1.4 GiB), and so does tf.data's autotuner, told by `options.autotune.ram_budget`
(unset, the buffers it grows may take up to half the machine's RAM).

`helpers.measure.peak_memory` runs it in a child process by name ("helpers.measure.memory_budget:train_one_epoch"),
with `pooled_classifier` or another model builder; `peaks_by_size` runs the children of the experiment and
`memory_chart` draws what they measured.
Introduced in notebooks/05_pipeline_profiling.ipynb.
"""
from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import keras
import numpy as np
import tensorflow as tf

from helpers.measure.peak_memory import MemoryRun, peak_memory_each
from helpers.storage.tfrecord import read_manifest, read_split

SHUFFLE_MIB = 16   # the most the stream's shuffle buffer holds
BUFFERS_MIB = 64   # the most the buffers tf.data's autotuner grows may hold
READ_MIB = 16      # the most one read of the loader holds


def records_in(mib: float, record_bytes: int, most: int) -> int:
    """How many records of `record_bytes` bytes fit in `mib` MiB: at least 1, at most `most`.

    >>> records_in(16, 784, 10_000), records_in(16, 224 * 224 * 3, 10_000)
    (10000, 111)
    """
    return int(max(1, min(most, mib * 2**20 // record_bytes)))


def train_one_epoch(model, mode: str, directory: str | Path, split: str, batch_size: int = 256) -> None:
    """Train `model` for one epoch of the shards of `split`: "load" reads them all into arrays first, "stream"
    reads batches from the shards while it trains."""
    manifest = read_manifest(directory, split)
    if mode == "load":
        shape = (manifest.total_records, *manifest.spec.image_shape)
        images, labels = np.empty(shape, np.uint8), np.empty(manifest.total_records, np.int64)
        at = 0
        for x, y in read_split(directory, split, records_in(READ_MIB, manifest.spec.nbytes, 4096)):
            images[at:at + len(y)], labels[at:at + len(y)] = x.numpy(), y.numpy()
            at += len(y)
        model.fit(images, labels, batch_size=batch_size, epochs=1, shuffle=True, verbose=0)
    elif mode == "stream":
        buffer = records_in(SHUFFLE_MIB, manifest.spec.nbytes, 10_000)
        stream = read_split(directory, split, batch_size, parallel_reads=4, shuffle_buffer=buffer)
        options = tf.data.Options()
        options.autotune.ram_budget = BUFFERS_MIB * 2**20
        model.fit(stream.prefetch(tf.data.AUTOTUNE).with_options(options), epochs=1, verbose=0)
    else:
        raise ValueError(f'mode must be "load" or "stream", not {mode!r}')


def pooled_classifier(image_shape=(224, 224, 3)) -> keras.Model:
    """A classifier cheap enough that reading the data is the work: every 8th pixel of every 8th row, one channel
    (for a photo-sized digit, the digit's own pixels again), then one dense layer."""
    inputs = keras.Input(shape=image_shape, dtype="uint8")
    x = keras.layers.Rescaling(1 / 255)(inputs[:, ::8, ::8, :1])
    outputs = keras.layers.Dense(10, activation="softmax")(keras.layers.Flatten()(x))
    model = keras.Model(inputs, outputs, name="pooled_classifier")
    model.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model


def peaks_by_size(roots: dict[int, Path], headroom_mib: float, batch_size: int = 32) -> dict[tuple[str, int], MemoryRun]:
    """Peak memory of an epoch of `pooled_classifier` on each split (`roots`: MiB of images -> folder): one child
    streams, one loads, at the same time, each under a budget of its own floor + `headroom_mib`, each training on
    every split in turn, smallest first. A peak only grows, so each split's figure is the most the process held up
    to then: a line flat to the last split was flat at each. Past the budget a child is killed, and the splits after
    it say they were not reached. {(mode, MiB): run}."""
    def peak(mode: str) -> list[MemoryRun]:
        return peak_memory_each(mode, [roots[mib] for mib in sizes], "train", batch_size=batch_size,
                                headroom_mib=headroom_mib, train=train_one_epoch, model=pooled_classifier)

    sizes = sorted(roots)
    with ThreadPoolExecutor(max_workers=2) as pool:
        reports = dict(zip(("stream", "load"), pool.map(peak, ("stream", "load"))))
    return {(mode, mib): run for mode, runs in reports.items() for mib, run in zip(sizes, runs)}


def memory_chart(runs: dict[tuple[str, int], MemoryRun]) -> None:
    """Peak memory against the size of the data, one line per way of reading (a line only where two sizes or more
    finished), an X where a child was killed at its budget, the budget, the floor and the least loading needs."""
    import statistics

    import matplotlib.pyplot as plt

    sizes = sorted({mib for _, mib in runs})
    floor = statistics.median(r.floor_mib for r in runs.values())
    budget = statistics.median(r.budget_mib for r in runs.values())
    fig, ax = plt.subplots(figsize=(9, 4.5), layout="constrained")
    ax.axvspan(budget, sizes[-1] * 1.05, color="whitesmoke", label="data larger than the whole budget")
    for mode, colour in [("load", "tab:red"), ("stream", "tab:blue")]:
        done = [(mib, r.peak_mib) for (m, mib), r in sorted(runs.items()) if m == mode and r.finished]
        killed = [(mib, r.peak_mib) for (m, mib), r in sorted(runs.items())
                  if m == mode and r.error.startswith("killed")]
        if done:
            ax.plot(*zip(*done), "o-" if len(done) > 1 else "o", color=colour, label=f"{mode}: peak of a finished epoch")
        if killed:
            ax.plot(*zip(*killed), "X", markersize=12, color=colour, label=f"{mode}: killed at its budget")
    ax.plot([0, sizes[-1]], [floor, floor + sizes[-1]], ":", color="tab:red",
            label="floor + the data: the least\nloading everything needs")
    ax.axhline(budget, color="black", linestyle="--", label=f"budget: floor + {budget - floor:,.0f} MiB")
    ax.axhline(floor, color="grey", linestyle=":", label="floor: TensorFlow + model")
    ax.set_xlabel("MiB of images in the split (photo-sized digits)")
    ax.set_ylabel("peak resident memory (MiB)")
    ax.set_title("Peak memory of one training epoch, each process under a budget")
    ax.set_xlim(0, sizes[-1] * 1.05)
    ax.set_ylim(0)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))   # outside the axes, off the lines
    plt.show()
