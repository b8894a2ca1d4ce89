"""Timing that survives a noisy machine: warm-up, several runs, medians, and paired ratios.

Introduced in notebooks/02_tfrecord_conversion.ipynb.
"""
from __future__ import annotations

import statistics
import time
from dataclasses import dataclass
from typing import Callable


@dataclass
class Timing:
    """Seconds per run: the median and the spread of several runs after a warm-up.

    Introduced in notebooks/02_tfrecord_conversion.ipynb.
    """

    runs: list[float]

    @property
    def median(self) -> float:
        return statistics.median(self.runs)

    @property
    def spread(self) -> tuple[float, float]:
        return min(self.runs), max(self.runs)

    def __str__(self) -> str:
        low, high = self.spread
        return f"{self.median * 1e3:.1f} ms (range {low * 1e3:.1f}–{high * 1e3:.1f}, {len(self.runs)} runs)"


def time_runs(function: Callable[[], object], repeats: int = 5, warmup: int = 1) -> Timing:
    """Call `function` `warmup` times untimed, then `repeats` times timed.

    Introduced in notebooks/02_tfrecord_conversion.ipynb.

    >>> time_runs(lambda: sum(range(10_000))).median > 0
    True
    """
    for _ in range(warmup):
        function()
    runs = []
    for _ in range(repeats):
        start = time.perf_counter()
        function()
        runs.append(time.perf_counter() - start)
    return Timing(runs)


@dataclass
class PairedRatio:
    """How many times longer `slow` took than `fast`, from alternating runs.

    Introduced in notebooks/02_tfrecord_conversion.ipynb.
    """

    ratios: list[float]
    slow: Timing
    fast: Timing

    @property
    def median(self) -> float:
        return statistics.median(self.ratios)

    @property
    def low(self) -> float:
        """The lowest pair: judge a goal on this, not on the median."""
        return min(self.ratios)

    @property
    def high(self) -> float:
        return max(self.ratios)

    def __str__(self) -> str:
        return f"{self.median:.2f}× (range {self.low:.2f}–{self.high:.2f}, {len(self.ratios)} pairs)"


def paired_ratio(slow: Callable[[], object], fast: Callable[[], object], repeats: int = 5, warmup: int = 1) -> PairedRatio:
    """Time `slow` and `fast` in pairs and return the median of the pairwise ratios slow/fast.

    The order alternates, A B then B A, so whatever the first run of a pair leaves behind (a
    warm cache, a busy allocator, a clock boost) falls on each side equally often, and a
    slow-down of the whole machine hits both sides of a pair and cancels in its ratio.
    Introduced in notebooks/02_tfrecord_conversion.ipynb.

    >>> paired_ratio(lambda: sum(range(100_000)), lambda: sum(range(1_000))).median > 1
    True
    """

    def timed(function) -> float:
        start = time.perf_counter()
        function()
        return time.perf_counter() - start

    for _ in range(warmup):
        slow()
        fast()
    ratios, slow_runs, fast_runs = [], [], []
    for index in range(repeats):
        if index % 2 == 0:
            slow_runs.append(timed(slow))
            fast_runs.append(timed(fast))
        else:
            fast_runs.append(timed(fast))
            slow_runs.append(timed(slow))
        ratios.append(slow_runs[-1] / fast_runs[-1])
    return PairedRatio(ratios, Timing(slow_runs), Timing(fast_runs))
