"""Measure training throughput of several input pipelines fairly: alternate them, epoch by epoch.

Introduced in notebooks/03_pydataset_autoencoder.ipynb.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Iterator

import keras


class EpochTimer(keras.callbacks.Callback):
    """Times one epoch of `fit`: when it began, and when each batch ended.

    `first_batch_seconds` is the wait for the first batch to be trained, which includes the
    pipeline's start-up (starting workers, opening files, filling buffers). `steady_seconds`
    is the rest of the epoch, the part that scales with the size of the dataset.
    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """

    def __init__(self) -> None:
        super().__init__()
        self.batch_ends: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        self.start = time.perf_counter()
        self.batch_ends = []

    def on_train_batch_end(self, batch, logs=None):
        self.batch_ends.append(time.perf_counter())

    @property
    def first_batch_seconds(self) -> float:
        return self.batch_ends[0] - self.start

    @property
    def steady_seconds(self) -> float:
        return self.batch_ends[-1] - self.batch_ends[0]


@dataclass
class PipelineTiming:
    """One pipeline's epochs: steady-state seconds, start-up seconds, and ratios to the baseline.

    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """

    name: str
    images_after_first_batch: int
    seconds: list[float] = field(default_factory=list)          # steady part of each timed epoch
    first_batch: list[float] = field(default_factory=list)      # start-up of each timed epoch
    ratios: list[float] = field(default_factory=list)           # throughput / baseline's, per pair

    @property
    def images_per_second(self) -> float:
        """Steady-state training throughput: images after the first batch / time they took (median epoch)."""
        return self.images_after_first_batch / statistics.median(self.seconds)

    @property
    def spread(self) -> tuple[float, float]:
        """Lowest and highest steady-state images/s over the timed epochs."""
        return self.images_after_first_batch / max(self.seconds), self.images_after_first_batch / min(self.seconds)

    @property
    def start_up(self) -> float:
        """Median seconds from the start of an epoch to the end of its first batch."""
        return statistics.median(self.first_batch)

    @property
    def ratio(self) -> float:
        """Median over pairs of (this pipeline's throughput / the baseline's in the adjacent epoch)."""
        return statistics.median(self.ratios)


def compare_pipelines(
    model: keras.Model,
    pipelines: dict[str, Callable[[], dict]],
    n_images: int,
    batch_size: int,
    rounds: int = 3,
    warmup_rounds: int = 1,
) -> dict[str, PipelineTiming]:
    """Train `model` one epoch at a time on each pipeline, each next to the baseline, and time it.

    The first pipeline is the baseline. In every round each other pipeline trains for one epoch
    next to an epoch of the baseline (after it in even rounds, before it in odd ones), and its
    ratio is (baseline seconds / its seconds) for that pair: a machine that slows down for a
    while slows both sides of the pair, so the ratio holds. The ratio reported is the median
    over rounds. Warm-up rounds (tracing, file caches) are not counted.

    Throughput is measured from the end of each epoch's first batch to the end of its last, so
    it is what a long epoch sustains; the first batch's wait (start-up) is recorded apart.

    Each value of `pipelines` returns the arguments for `model.fit` (for example
    `{"x": dataset}` or `{"x": x, "y": x, "batch_size": 100}`). It is called anew for every
    epoch, as a new epoch starts its pipeline anew in real use.
    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """
    if n_images <= batch_size:
        raise ValueError(f"compare_pipelines needs at least two batches per epoch to time the steady part after the "
                         f"first one; got n_images={n_images} with batch_size={batch_size}.")
    names = list(pipelines)
    baseline = names[0]
    results = {name: PipelineTiming(name, n_images - min(batch_size, n_images)) for name in names}

    def one_epoch(name: str) -> EpochTimer:
        timer = EpochTimer()
        model.fit(**pipelines[name](), epochs=1, verbose=0, callbacks=[timer])
        return timer

    def record(name: str, timer: EpochTimer, base: EpochTimer) -> None:
        results[name].seconds.append(timer.steady_seconds)
        results[name].first_batch.append(timer.first_batch_seconds)
        results[name].ratios.append(base.steady_seconds / timer.steady_seconds)

    for round_index in range(warmup_rounds + rounds):
        for name in names[1:] or names:
            # Alternate which side of the pair goes first (A B, then B A), so that anything the
            # first epoch after a switch pays falls on each side equally often.
            if name == baseline:            # only when the baseline is the sole pipeline
                base = other = one_epoch(baseline)
            elif round_index % 2 == 0:
                base = one_epoch(baseline)
                other = one_epoch(name)
            else:
                other = one_epoch(name)
                base = one_epoch(baseline)
            if round_index >= warmup_rounds:
                record(baseline, base, base)
                if name != baseline:
                    record(name, other, base)
    return results


# ---------------------------------------------------------------- the pipeline alone, against the model


def batches_of(source) -> Iterator:
    """The batches of one epoch of a `PyDataset` (asked by index, as one worker would) or of any
    iterable such as a `tf.data.Dataset`.

    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """
    if isinstance(source, keras.utils.PyDataset):
        return (source[i] for i in range(len(source)))
    return iter(source)


def pipeline_rate(source) -> float:
    """Images per second one whole epoch of `source` delivers with no model at all, every batch
    decoded and ready as `fit` would get it.

    The first batch counts: a pipeline's start-up (opening files, filling a shuffle buffer,
    starting workers) recurs at the start of every epoch, and a large shuffle buffer can hold most
    of a small epoch before the first batch comes out.
    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """
    start, images = time.perf_counter(), 0
    for inputs, *_ in batches_of(source):
        images += len(inputs)
    return images / (time.perf_counter() - start)


@dataclass
class Headroom:
    """A pipeline's throughput alone, and how many times the model's training throughput it is.

    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """

    name: str
    rates: list[float] = field(default_factory=list)    # images/s alone, per round
    ratios: list[float] = field(default_factory=list)   # rate / training rate of the same round

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)

    @property
    def low(self) -> float:
        return min(self.ratios)

    @property
    def high(self) -> float:
        return max(self.ratios)


def measure_headroom(
    model: keras.Model,
    training_fit_args: Callable[[], dict],
    pipelines: dict[str, Callable[[], object]],
    n_images: int,
    batch_size: int,
    rounds: int = 3,
    warmup_rounds: int = 1,
) -> tuple[list[float], dict[str, Headroom]]:
    """How far each pipeline, alone, out-runs the model training from memory on this machine.

    Each round trains `model` for one epoch of `n_images` from `training_fit_args()`
    (steady-state images/s, as in `compare_pipelines`, so one-off compilation is left out) and
    runs one whole epoch of every pipeline with no model (`pipeline_rate`, start-up included:
    the comparison leans against the pipeline); training goes first in even rounds and last in odd ones. A
    pipeline's headroom in a round is its rate over that round's training rate: above 1 it
    keeps up with this machine's training; to feed a GPU that trains N times faster it needs
    about N. Returns the training rates per round and one `Headroom` per pipeline.
    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """
    if n_images <= batch_size:
        raise ValueError(f"measure_headroom needs at least two batches per epoch; got n_images={n_images} "
                         f"with batch_size={batch_size}.")
    training_rates: list[float] = []
    results = {name: Headroom(name) for name in pipelines}

    def training_rate() -> float:
        timer = EpochTimer()
        model.fit(**training_fit_args(), epochs=1, verbose=0, callbacks=[timer])
        return (n_images - batch_size) / timer.steady_seconds

    for round_index in range(warmup_rounds + rounds):
        training_first = round_index % 2 == 0
        trained = training_rate() if training_first else None
        rates = {name: pipeline_rate(make()) for name, make in pipelines.items()}
        if not training_first:
            trained = training_rate()
        if round_index < warmup_rounds:
            continue
        training_rates.append(trained)
        for name, rate in rates.items():
            results[name].rates.append(rate)
            results[name].ratios.append(rate / trained)
    return training_rates, results
