"""The measurement core: repeated samples judged on a confidence interval of their median, one
routine that alternates the sides of a comparison, and one definition of a steady-state rate.

Every speed or size the series reports goes through here:

- `Samples`: repeated measurements (seconds, samples/s, or ratios of paired rounds) with their
  median, their range, and a 95 % confidence interval of the median. A goal such as "≥ 0.95" is
  met when the interval's lower bound meets it; "≤ 1.05" when its upper bound does.
- `alternate`: runs every side of a comparison once per round, in one order in even rounds and
  the reverse order in odd ones (A B, then B A), and keeps what each run returned, so ratios are
  taken between runs that stood side by side.
- `Epoch`, `fit_epoch`, `pipeline_epoch`: the steady-state rate of one epoch, counted the same
  way for a model training and for a pipeline running alone: the epoch's samples divided by the
  seconds from its start to the end of its last step, after a warm-up epoch (compilation).

This module needs Keras and NumPy only (not TensorFlow), so the GPU reference script can use it
on any Keras backend.
"""
from __future__ import annotations

import math
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import keras

CONFIDENCE = 0.95


# ------------------------------------------------------------------------------------- the interval


def median_interval_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """For `n` samples, the rank `k` of a distribution-free confidence interval of the median,
    and the interval's exact coverage: the median lies between the k-th lowest and the k-th
    highest sample with probability `coverage` ≥ `confidence`, whatever the distribution.

    How: the number B of samples below the true median is Binomial(n, 1/2), so the interval
    [x(k), x(n+1-k)] misses the median only when B < k or B > n - k, and its coverage is
    1 - 2·P(B ≤ k - 1). The largest k with coverage ≥ `confidence` gives the narrowest such
    interval. With fewer than 6 samples no k reaches 95 %: then k = 1 (the whole range) and the
    coverage returned is lower than asked, which `Samples` reports.

    Why not a bootstrap: this interval is exact for any continuous distribution of independent
    samples, has no random resampling (the same samples always give the same interval), and
    stays honest for the small n a notebook can afford, where a bootstrap interval is too narrow.
    Reference: W. J. Conover, *Practical Nonparametric Statistics*, 3rd ed. (Wiley, 1999), §3.2;
    J.-Y. Le Boudec, *Performance Evaluation of Computer and Communication Systems* (EPFL Press,
    2010), Theorem 2.1 and Table A.1.

    >>> median_interval_ranks(10)          # the 2nd lowest to the 2nd highest of 10
    (2, 0.978515625)
    >>> median_interval_ranks(5)[0], round(median_interval_ranks(5)[1], 4)   # too few for 95 %
    (1, 0.9375)
    """
    if n < 1:
        raise ValueError("a confidence interval needs at least one sample")
    rank, coverage = 1, 1.0 - 2.0 / 2.0 ** n   # k = 1: the whole range
    below = 1.0 / 2.0 ** n                      # P(B <= k - 1), for k = 1 so far
    for k in range(2, (n + 1) // 2 + 1):
        below += math.comb(n, k - 1) / 2.0 ** n
        wider_coverage = 1.0 - 2.0 * below
        if wider_coverage < confidence:
            break
        rank, coverage = k, wider_coverage
    return rank, coverage


@dataclass(frozen=True)
class Samples:
    """Repeated measurements of one thing: their median, range and the median's confidence interval.

    `interval` is the distribution-free interval of `median_interval_ranks`. Judge a goal on it
    (`meets`), never on the median alone nor on the lowest sample: an extreme sample only gets
    more extreme as samples are added, while the interval narrows.

    >>> s = Samples([1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.02, 0.98])
    >>> s.median, s.interval, s.meets("≥ 0.9"), s.meets("≥ 1.0")
    (1.01, (0.9, 1.2), True, False)
    """

    values: Sequence[float]
    confidence: float = CONFIDENCE

    def __post_init__(self):
        values = tuple(float(v) for v in self.values)
        if not values:
            raise ValueError("Samples needs at least one value")
        if any(math.isnan(v) for v in values):
            raise ValueError(f"a measurement came out as NaN: {values}")
        object.__setattr__(self, "values", values)

    @property
    def n(self) -> int:
        return len(self.values)

    @property
    def median(self) -> float:
        return statistics.median(self.values)

    @property
    def low(self) -> float:
        """The lowest sample (shown beside the interval; never a goal's test)."""
        return min(self.values)

    @property
    def high(self) -> float:
        return max(self.values)

    @property
    def coverage(self) -> float:
        """The interval's exact coverage: at least `confidence` with 6 or more samples, less with fewer."""
        return median_interval_ranks(self.n, self.confidence)[1]

    @property
    def interval(self) -> tuple[float, float]:
        """(lower, upper) bound of the confidence interval of the median."""
        k = median_interval_ranks(self.n, self.confidence)[0]
        ordered = sorted(self.values)
        return ordered[k - 1], ordered[self.n - k]

    @property
    def enough(self) -> bool:
        """Whether there are samples enough for the interval to reach the asked confidence."""
        return self.coverage >= self.confidence

    def meets(self, goal: str) -> bool | None:
        """Whether the interval meets a goal written "≥ x", "> x", "≤ x" or "< x" (None for anything else):
        a lower bound is judged on the interval's lower end, an upper bound on its upper end."""
        goal = goal.strip()
        for sign, test in (("≥", lambda lo, hi, x: lo >= x), (">=", lambda lo, hi, x: lo >= x),
                           (">", lambda lo, hi, x: lo > x), ("≤", lambda lo, hi, x: hi <= x),
                           ("<=", lambda lo, hi, x: hi <= x), ("<", lambda lo, hi, x: hi < x)):
            if goal.startswith(sign):
                return test(*self.interval, float(goal[len(sign):]))
        return None

    def compared_to(self, value: float = 1.0) -> str:
        """"above", "below", or "holds" (the interval holds `value`: no measurable difference)."""
        low, high = self.interval
        return "above" if low > value else "below" if high < value else "holds"

    def scaled(self, factor: float) -> "Samples":
        return Samples([v * factor for v in self.values], self.confidence)

    def inverse(self) -> "Samples":
        return Samples([1.0 / v for v in self.values], self.confidence)

    def describe(self, fmt: str = ".2f", unit: str = "") -> str:
        """The median with its interval and the confidence it really has, e.g. "1.02× (95% CI 0.98–1.05,
        8 rounds; range 0.91–1.10)", or, with fewer than 6 rounds, "1.02× (range 0.98–1.05 over 3
        rounds, ≈75% confidence; 6 or more rounds give 95%)"."""
        return f"{self.median:{fmt}}{unit} ({self.interval_text(fmt)})"

    def interval_text(self, fmt: str = ".2f") -> str:
        """What `describe` puts in brackets: the interval, its confidence, the rounds and the range."""
        low, high = self.interval
        if not self.enough:
            return (f"range {low:{fmt}}–{high:{fmt}} over {self.n} rounds, ≈{self.coverage:.0%} confidence; "
                    f"6 or more rounds give {self.confidence:.0%}")
        text = f"{self.confidence:.0%} CI {low:{fmt}}–{high:{fmt}}, {self.n} rounds"
        if (low, high) != (self.low, self.high):
            text += f"; range {self.low:{fmt}}–{self.high:{fmt}}"
        return text

    def __str__(self) -> str:
        return self.describe()


# ------------------------------------------------------------------------------------- alternation


@dataclass
class Rounds:
    """What `alternate` measured: each side's value per round, and ratios between sides round by round."""

    names: list[str]
    values: dict[str, list[float]] = field(default_factory=dict)
    epochs: dict[str, list["Epoch"]] = field(default_factory=dict)   # where a side returned an Epoch

    def samples(self, name: str) -> Samples:
        """One side's values over the rounds (seconds, samples/s, bytes: whatever it returned)."""
        return Samples(self.values[name])

    def ratio(self, name: str, baseline: str) -> Samples:
        """`name`'s value over `baseline`'s, round by round: the paired ratios."""
        return Samples([a / b for a, b in zip(self.values[name], self.values[baseline])])

    def start_up(self, name: str) -> Samples:
        """Seconds to each epoch's first step, for a side that returned Epochs."""
        return Samples([e.start_up for e in self.epochs[name]])


def alternate(sides: dict[str, Callable[[], "float | Epoch"]], rounds: int, warmup: int = 1) -> Rounds:
    """Run every side once per round, in the given order in even rounds and reversed in odd ones.

    With two sides that is A B, then B A: whatever the first run of a round leaves behind (a warm
    cache, a busy allocator, a clock boost) falls on each side equally often, and a slow spell of
    the machine slows both runs of a round and cancels in their ratio. With more sides, each pair
    still sees both orders, and a steady drift over a round cancels between a round and the next.
    A side returns one number (seconds, samples/s, bytes) or an `Epoch` (whose `rate` is kept).
    `warmup` rounds run first and are not kept (tracing, compilation, file caches).

    >>> order = []
    >>> r = alternate({"A": lambda: order.append("A") or 2.0, "B": lambda: order.append("B") or 1.0}, rounds=2)
    >>> order, r.ratio("A", "B").values
    (['A', 'B', 'B', 'A', 'A', 'B'], (2.0, 2.0))
    """
    if rounds < 1:
        raise ValueError(f"alternate needs at least one round, not {rounds}")
    names = list(sides)
    result = Rounds(names, {name: [] for name in names})
    for index in range(warmup + rounds):
        order = names if index % 2 == 0 else names[::-1]
        outcome = {name: sides[name]() for name in order}
        if index < warmup:
            continue
        for name in names:
            value = outcome[name]
            if isinstance(value, Epoch):
                result.epochs.setdefault(name, []).append(value)
                value = value.rate
            result.values[name].append(float(value))
    return result


def timed(function: Callable[[], object]) -> Callable[[], float]:
    """`function`, made to return the seconds it took (for `alternate`)."""
    def run() -> float:
        start = time.perf_counter()
        function()
        return time.perf_counter() - start

    return run


def time_repeats(function: Callable[[], object], repeats: int = 5, warmup: int = 1) -> Samples:
    """Seconds per call of `function`, over `repeats` calls after `warmup` untimed ones."""
    return alternate({"run": timed(function)}, rounds=repeats, warmup=warmup).samples("run")


# ------------------------------------------------------------------------------------- the steady-state rate


@dataclass(frozen=True)
class Epoch:
    """One whole epoch: how many samples, and the seconds from its start to the end of its last step.

    Every epoch pays its own start-up (an iterator created, workers started, files opened, a
    shuffle buffer filled before the first batch comes out), so the rate counts it; `start_up`,
    the wait for the first step, is kept beside it to show how much of the epoch it was. What is
    paid once per run, not per epoch (tracing, compiling, a cache file filled), is left out by
    measuring after a warm-up epoch: the rate of a warmed-up epoch is the steady-state rate.
    """

    samples: int        # samples delivered or trained in the epoch
    seconds: float      # from the start of the epoch to the end of its last step
    start_up: float     # from the start of the epoch to the end of its first step

    @property
    def rate(self) -> float:
        if self.seconds <= 0 or self.samples <= 0:
            raise ValueError(f"an epoch of {self.samples} samples in {self.seconds:.6f} s has no rate")
        return self.samples / self.seconds


def steady_epoch(start: float, marks: Sequence[tuple[float, int]]) -> Epoch:
    """The one definition of a steady-state rate: `marks` are (time, samples done so far) after
    each step, or after each chunk of steps; the epoch began at `start`.

    >>> steady_epoch(0.0, [(1.0, 100), (2.0, 200), (4.0, 300)])
    Epoch(samples=300, seconds=4.0, start_up=1.0)
    """
    if not marks:
        raise ValueError("the epoch had no steps: the dataset is empty")
    (first_time, _), (last_time, done) = marks[0], marks[-1]
    return Epoch(done, last_time - start, first_time - start)


class EpochClock(keras.callbacks.Callback):
    """Marks the end of every step `fit` reports, counting steps from the batch index Keras passes.

    Under `steps_per_execution=N` Keras runs N steps per call and calls `on_train_batch_end`
    once per chunk, with the index of the chunk's last step: counting calls would under-count
    the steps N times; counting from the index does not.
    """

    def __init__(self) -> None:
        super().__init__()
        self.start = 0.0
        self.marks: list[tuple[float, int]] = []   # (time, steps done)

    def on_epoch_begin(self, epoch, logs=None):
        self.start, self.marks = time.perf_counter(), []

    def on_train_batch_end(self, batch, logs=None):
        self.marks.append((time.perf_counter(), batch + 1))

    def epoch(self, batch_size: int, total_samples: int | None = None) -> Epoch:
        """The last epoch's steady state, with `batch_size` samples per step (a last, smaller batch
        is counted exactly when `total_samples` is given)."""
        def done(steps: int) -> int:
            samples = steps * batch_size
            return samples if total_samples is None else min(samples, total_samples)

        return steady_epoch(self.start, [(t, done(steps)) for t, steps in self.marks])


def fit_epoch(model: keras.Model, *, batch_size: int, samples: int | None = None, **fit_args) -> Epoch:
    """Train `model` for one epoch (`model.fit(**fit_args, epochs=1)`) and return its steady state.

    `batch_size` is the samples per step (for arrays it is also passed to `fit`); `samples`, the
    epoch's size, counts a smaller last batch exactly. Run a warm-up epoch first (as `alternate`
    does) so that tracing and compilation are not counted.
    """
    clock, callbacks = EpochClock(), fit_args.pop("callbacks", [])
    if "y" in fit_args or _is_array(fit_args.get("x")):
        fit_args.setdefault("batch_size", batch_size)
    model.fit(**fit_args, epochs=1, verbose=0, callbacks=[clock, *callbacks])
    if samples is None and _is_array(fit_args.get("x")):
        samples = len(fit_args["x"])
    return clock.epoch(batch_size, samples)


def _is_array(x) -> bool:
    return hasattr(x, "shape") and hasattr(x, "dtype") and not hasattr(x, "element_spec")


def batches_of(source) -> Iterable:
    """The batches of one epoch: a `PyDataset` asked by index (as one worker would), or any
    iterable such as a `tf.data.Dataset`.
    """
    if isinstance(source, keras.utils.PyDataset):
        return (source[i] for i in range(len(source)))
    return source


def pipeline_epoch(source) -> Epoch:
    """One epoch of `source` with no model at all, every batch produced and ready as `fit` gets
    it, counted as `fit_epoch` counts training (samples are counted exactly). The epoch starts
    when its iterator is created, as in `fit`.
    """
    start, done, marks = time.perf_counter(), 0, []
    for inputs, *_ in batches_of(source):
        done += len(inputs)
        marks.append((time.perf_counter(), done))
    return steady_epoch(start, marks)
