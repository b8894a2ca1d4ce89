"""Measure training throughput of several input pipelines fairly: alternate them, epoch by epoch.

Introduced in notebooks/03_pydataset_autoencoder.ipynb.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass, field
from typing import Callable

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
