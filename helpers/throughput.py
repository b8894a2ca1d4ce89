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
    """Records how long each epoch of `fit` took, in seconds (set-up before the epoch is excluded)."""

    def __init__(self) -> None:
        super().__init__()
        self.seconds: list[float] = []

    def on_epoch_begin(self, epoch, logs=None):
        self._start = time.perf_counter()

    def on_epoch_end(self, epoch, logs=None):
        self.seconds.append(time.perf_counter() - self._start)


@dataclass
class PipelineTiming:
    name: str
    n_images: int
    seconds: list[float] = field(default_factory=list)   # one per timed epoch
    ratios: list[float] = field(default_factory=list)    # throughput / baseline's, per round

    @property
    def images_per_second(self) -> float:
        return self.n_images / statistics.median(self.seconds)

    @property
    def spread(self) -> tuple[float, float]:
        """Lowest and highest images/s over the timed epochs."""
        return self.n_images / max(self.seconds), self.n_images / min(self.seconds)

    @property
    def ratio(self) -> float:
        """Median over rounds of (this pipeline's throughput / the baseline's in the same round)."""
        return statistics.median(self.ratios)


def compare_pipelines(
    model: keras.Model,
    pipelines: dict[str, Callable[[], dict]],
    n_images: int,
    rounds: int = 3,
    warmup_rounds: int = 1,
) -> dict[str, PipelineTiming]:
    """Train `model` one epoch at a time on each pipeline, each next to the baseline, and time it.

    The first pipeline is the baseline. In every round each other pipeline trains for one epoch
    next to an epoch of the baseline (before it in odd rounds, after it in even ones), and its
    ratio is (baseline seconds / its seconds) for that pair: a machine that slows down for a while slows both sides of the pair, so the ratio
    holds. The ratio reported is the median over rounds. Warm-up rounds (tracing, file caches)
    are not counted.

    Each value of `pipelines` returns the arguments for `model.fit` (for example
    `{"x": dataset}` or `{"x": x, "y": x, "batch_size": 100}`). It is called anew for every
    epoch, so per-epoch set-up (starting worker processes, say) counts where it falls in real use.
    """
    names = list(pipelines)
    baseline = names[0]
    results = {name: PipelineTiming(name, n_images) for name in names}

    def one_epoch(name: str) -> float:
        timer = EpochTimer()
        model.fit(**pipelines[name](), epochs=1, verbose=0, callbacks=[timer])
        return timer.seconds[0]

    for round_index in range(warmup_rounds + rounds):
        for name in names[1:] or names:
            # Alternate which side of the pair goes first (A B, then B A), so that anything the
            # first epoch after a switch pays falls on each side equally often.
            if round_index % 2 == 0:
                base_seconds = one_epoch(baseline)
                seconds = one_epoch(name) if name != baseline else base_seconds
            else:
                seconds = one_epoch(name) if name != baseline else None
                base_seconds = one_epoch(baseline)
                seconds = base_seconds if seconds is None else seconds
            if round_index < warmup_rounds:
                continue
            results[baseline].seconds.append(base_seconds)
            results[baseline].ratios.append(1.0)
            results[name].seconds.append(seconds)
            results[name].ratios.append(base_seconds / seconds)
    return results
