"""The measurement core every speed or size in the series goes through.

- `Samples`: repeated measurements with their median and a distribution-free 95 % confidence interval of it;
  a goal "≥ x" is met when the interval's lower end meets it, "≤ x" when its upper end does.
- `alternate`: every side of a comparison once per round, in a rotating order (A B, then B A), so ratios pair
  runs side by side.
- `Epoch`, `fit_epoch`, `pipeline_epoch`: one steady-state rate, for training and for a pipeline alone.

Needs Keras and NumPy only (not TensorFlow), so the GPU reference script runs on any Keras backend.
"""
from __future__ import annotations

import dataclasses
import math
import operator
import statistics
import time
from dataclasses import dataclass, field
from typing import Callable, Iterable, Sequence

import keras
import numpy as np

CONFIDENCE = 0.95


def median_interval_ranks(n: int, confidence: float = CONFIDENCE) -> tuple[int, float]:
    """For `n` samples, the rank `k` of the narrowest distribution-free interval [x(k), x(n+1-k)] of the median
    with coverage ≥ `confidence`, and its exact coverage 1 - 2·P(B ≤ k - 1), B ~ Binomial(n, 1/2).

    With fewer than 6 samples no k reaches 95 %: k = 1 (the whole range), at the lower coverage returned.
    Exact for independent samples of any continuous distribution, with no resampling (Conover, *Practical
    Nonparametric Statistics*, 3rd ed., §3.2; Le Boudec, *Performance Evaluation*, Theorem 2.1).

    >>> median_interval_ranks(10)          # the 2nd lowest to the 2nd highest of 10
    (2, 0.978515625)
    >>> median_interval_ranks(5)[0], round(median_interval_ranks(5)[1], 4)   # too few for 95 %
    (1, 0.9375)
    """
    if n < 1:
        raise ValueError("a confidence interval needs at least one sample")
    rank, below = 1, 1.0 / 2.0 ** n   # below: P(B <= k - 1)
    coverage = 1.0 - 2.0 * below
    for k in range(2, (n + 1) // 2 + 1):
        below += math.comb(n, k - 1) / 2.0 ** n
        if 1.0 - 2.0 * below < confidence:
            break
        rank, coverage = k, 1.0 - 2.0 * below
    return rank, coverage


def median_text(median: float, interval: tuple[float, float] | None, fmt: str = ".2f", unit: str = "") -> str:
    """The series' one way to write a measured figure: "1.23× (1.10–1.40)"; the median alone without an interval.

    >>> median_text(1234.5, (1000, 1500), ",.0f", " samples/s"), median_text(1.07, None, unit="×")
    ('1,234 samples/s (1,000–1,500)', '1.07×')
    """
    if interval is None:
        return f"{median:{fmt}}{unit}"
    low, high = interval
    return f"{median:{fmt}}{unit} ({low:{fmt}}–{high:{fmt}})"


@dataclass(frozen=True)
class Samples:
    """Repeated measurements of one thing: median, range, and the median's confidence interval.

    Judge a goal on the interval (`meets`), never on the median or an extreme sample.

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
        k, ordered = median_interval_ranks(self.n, self.confidence)[0], sorted(self.values)
        return ordered[k - 1], ordered[self.n - k]

    @property
    def enough(self) -> bool:
        """Whether there are samples enough for the interval to reach the asked confidence."""
        return self.coverage >= self.confidence

    def meets(self, goal: str) -> bool | None:
        """Whether the interval meets a goal "≥ x", "> x", "≤ x" or "< x"; "holds x": the interval holds x (no
        measurable difference from x); "median ≥ x" (any sign): the median, not the interval, is judged; parts
        joined by " and " must all be met. None for a goal of another form.

        >>> s = Samples([0.93, 0.95, 0.96, 0.97, 0.98, 0.99, 1.00, 1.02, 1.04])   # interval 0.95–1.02
        >>> s.meets("holds 1"), s.meets("median ≥ 0.95 and holds 1"), s.meets("≥ 0.97 and holds 1")
        (True, True, False)
        >>> s.scaled(1.1).meets("median ≥ 0.95 and holds 1"), s.meets("about 1")   # 1.1 times: 1 is outside
        (False, None)
        """
        parts = [part.strip() for part in goal.split(" and ")]
        if len(parts) > 1:
            verdicts = [self.meets(part) for part in parts]
            return None if None in verdicts else all(verdicts)
        goal, judged = parts[0], self.interval
        if goal.startswith("holds "):
            return self.compared_to(float(goal[len("holds "):])) == "holds"
        if goal.startswith("median "):
            goal, judged = goal[len("median "):].strip(), (self.median, self.median)
        for sign, end, test in (("≥", 0, operator.ge), (">=", 0, operator.ge), (">", 0, operator.gt),
                                ("≤", 1, operator.le), ("<=", 1, operator.le), ("<", 1, operator.lt)):
            if goal.startswith(sign):
                return test(judged[end], float(goal[len(sign):]))
        return None

    def compared_to(self, value: float = 1.0) -> str:
        """"above", "below", or "holds" (the interval holds `value`: no measurable difference)."""
        low, high = self.interval
        return "above" if low > value else "below" if high < value else "holds"

    def scaled(self, factor: float) -> "Samples":
        return Samples([v * factor for v in self.values], self.confidence)

    def describe(self, fmt: str = ".2f", unit: str = "") -> str:
        """The median with its interval, e.g. "1.02× (95% CI 0.98–1.05, 8 rounds; range 0.91–1.10)"."""
        return f"{self.median:{fmt}}{unit} ({self.interval_text(fmt)})"

    def brief(self, fmt: str = ".2f", unit: str = "") -> str:
        """The median and its interval alone, e.g. "1.02× (0.98–1.05)", for a notebook that says once what the
        parenthesis is (how many rounds, at what confidence: `interval_text`).

        >>> Samples([1.0, 1.2, 0.9, 1.1, 1.05, 0.95, 1.02, 0.98]).brief(unit="×")
        '1.01× (0.90–1.20)'
        """
        return median_text(self.median, self.interval, fmt, unit)

    def interval_text(self, fmt: str = ".2f") -> str:
        """The interval, its confidence (the one it really has with fewer than 6 rounds), the rounds, the range."""
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


@dataclass
class Rounds:
    """What `alternate` measured: each side's value per round, and ratios between sides round by round."""

    names: list[str]
    values: dict[str, list[float]] = field(default_factory=dict)
    epochs: dict[str, list["Epoch"]] = field(default_factory=dict)   # where a side returned an Epoch

    def samples(self, name: str) -> Samples:
        return Samples(self.values[name])

    def ratio(self, name: str, baseline: str) -> Samples:
        """`name`'s value over `baseline`'s, round by round: the paired ratios."""
        return Samples([a / b for a, b in zip(self.values[name], self.values[baseline])])

    def start_up(self, name: str) -> Samples:
        """Seconds to each epoch's first step, for a side that returned Epochs."""
        return Samples([e.start_up for e in self.epochs[name]])

    def past_start_up(self) -> "Rounds":
        """The same rounds with each epoch's rate taken after its first step (`Epoch.rate_past_start_up`): what a
        longer epoch approaches, where a short one's start-up would weigh too much. Sides of plain numbers stay."""
        values = {name: [e.rate_past_start_up for e in self.epochs[name]] if name in self.epochs else list(kept)
                  for name, kept in self.values.items()}
        return Rounds(list(self.names), values, self.epochs)


def round_orders(n: int) -> list[list[int]]:
    """The orders `alternate` runs `n` sides in, one per round, in turn: a Williams design, a Latin square in which
    every side takes every position equally often and follows every other side equally often (for an odd `n` the
    square and its mirror image, 2n rounds). For two sides: A B, then B A.

    >>> round_orders(2), round_orders(4)[:2]
    ([[0, 1], [1, 0]], [[0, 1, 3, 2], [1, 2, 0, 3]])
    """
    first = [0]
    for k in range(1, n):   # 0, 1, n-1, 2, n-2, ...
        first.append((k + 1) // 2 if k % 2 else n - k // 2)
    square = [[(side + r) % n for side in first] for r in range(n)]
    return square if n % 2 == 0 else square + [row[::-1] for row in square]


def alternate(sides: dict[str, Callable[[], "float | Epoch"]], rounds: int, warmup: int = 1) -> Rounds:
    """Run every side once per round, in an order that rotates from round to round (`round_orders`: A B, B A
    for two sides; for more, every side takes every position equally often over as many rounds as sides).

    What a run leaves behind (a warm cache, a clock boost) falls on each side equally often, and a slow spell
    of the machine cancels in a round's ratio. A side returns a number or an `Epoch` (its `rate` is kept).
    `warmup` rounds run first, in the first round's order, and are not kept.

    >>> order = []
    >>> r = alternate({"A": lambda: order.append("A") or 2.0, "B": lambda: order.append("B") or 1.0}, rounds=2)
    >>> order, r.ratio("A", "B").values
    (['A', 'B', 'A', 'B', 'B', 'A'], (2.0, 2.0))
    """
    if not sides:
        raise ValueError("alternate needs at least one side to run")
    if not isinstance(rounds, int) or isinstance(rounds, bool) or rounds < 1:
        raise ValueError(f"alternate needs a whole number of rounds, at least one, not {rounds!r}")
    if not isinstance(warmup, int) or isinstance(warmup, bool) or warmup < 0:
        raise ValueError(f"alternate's warm-up is a whole number of rounds, 0 or more, not {warmup!r}")
    names = list(sides)
    orders = round_orders(len(names))
    result = Rounds(names, {name: [] for name in names})
    for index in range(-warmup, rounds):
        order = orders[max(index, 0) % len(orders)]   # kept rounds start at the first order: balanced from there
        outcome = {names[i]: sides[names[i]]() for i in order}
        if index < 0:
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


@dataclass(frozen=True)
class Epoch:
    """One whole epoch: its samples, the seconds from its start to the end of its last step, and to the end
    of its first (`start_up`, paid by every epoch). Measure after a warm-up epoch, so that what is paid
    once per run (tracing, compiling) is left out: that is the steady-state rate."""

    samples: int
    seconds: float
    start_up: float
    first_samples: int = field(default=0, repr=False)   # the first step's samples; 0 where not known

    @property
    def rate(self) -> float:
        if self.seconds <= 0 or self.samples <= 0:
            raise ValueError(f"an epoch of {self.samples} samples in {self.seconds:.6f} s has no rate")
        return self.samples / self.seconds

    @property
    def rate_past_start_up(self) -> float:
        """Samples per second after the first step: the epoch's rate without its start-up (shown apart as
        `start_up`). The whole epoch's `rate` where the first step's samples are not known, or it was the only one.

        >>> Epoch(samples=300, seconds=4.0, start_up=1.0, first_samples=100).rate_past_start_up
        66.66666666666667
        """
        later, seconds = self.samples - self.first_samples, self.seconds - self.start_up
        return later / seconds if self.first_samples and later > 0 and seconds > 0 else self.rate


def steady_epoch(start: float, marks: Sequence[tuple[float, int]]) -> Epoch:
    """The one definition of a steady-state rate: `marks` are (time, samples done so far) after each step or
    chunk of steps; the epoch began at `start`.

    >>> steady_epoch(0.0, [(1.0, 100), (2.0, 200), (4.0, 300)])
    Epoch(samples=300, seconds=4.0, start_up=1.0)
    """
    if not marks:
        raise ValueError("the epoch had no steps: the dataset is empty")
    (first_time, first_samples), (last_time, done) = marks[0], marks[-1]
    return Epoch(done, last_time - start, first_time - start, first_samples)


def samples_trained(model: keras.Model) -> int:
    """The samples `model` trained on since its metrics were reset (at each epoch's start): Keras's loss tracker
    adds the first dimension of every training batch's inputs to its `count`, step by step, so a short last batch,
    and steps run several at a time (`steps_per_execution`), count as what they were. (A float32 count: exact to
    2**24 samples an epoch.)"""
    tracker = next((m for m in model.metrics if m.name == "loss" and hasattr(m, "count")), None)
    if tracker is None:
        raise ValueError(f"model {model.name!r} has no loss tracker to count the samples it trained on: compile it "
                         f"with a loss.")
    return round(float(keras.ops.convert_to_numpy(tracker.count)))


class EpochClock(keras.callbacks.Callback):
    """Marks the end of every call `fit` reports (one per `steps_per_execution` steps), and counts the samples the
    epoch trained on from the model itself (`samples_trained`), never from step indices times a batch size."""

    def __init__(self) -> None:
        super().__init__()
        self.start, self.times, self.samples = 0.0, [], None

    def on_epoch_begin(self, epoch, logs=None):
        self.start, self.times, self.samples = time.perf_counter(), [], None

    def on_train_batch_end(self, batch, logs=None):
        self.times.append(time.perf_counter())

    def _count(self) -> None:
        if self.samples is None and self.times:
            self.samples = samples_trained(self.model)

    def on_test_begin(self, logs=None):   # validation inside fit: counted before evaluate resets the metrics
        self._count()

    def on_epoch_end(self, epoch, logs=None):
        self._count()

    def epoch(self, batch_size: int | None = None, total_samples: int | None = None) -> Epoch:
        """The last epoch's steady state. `total_samples`, when given, is checked against the count (`batch_size`
        is not needed: it is accepted for callers written when the count came from it)."""
        if not self.times:
            raise ValueError("the epoch had no steps: the dataset is empty")
        self._count()
        if self.samples == 0:
            raise ValueError("the model's loss tracker counted no samples: a custom train_step must update it "
                             "(as Keras's own does) for the epoch to be measured.")
        if total_samples is not None and total_samples != self.samples:
            raise ValueError(f"the epoch trained on {self.samples:,} samples, not the {total_samples:,} expected.")
        return Epoch(self.samples, self.times[-1] - self.start, self.times[0] - self.start)


def fit_epoch(model: keras.Model, *, batch_size: int, samples: int | None = None, **fit_args) -> Epoch:
    """Train `model` for one epoch (`model.fit(**fit_args, epochs=1)`) and return its steady state, its samples
    counted as the model trained on them (`samples_trained`): exact whatever the last batch or steps_per_execution.

    `batch_size`: samples per step (passed to `fit` for arrays); `samples`, when given, is checked against the
    count (a `ValueError` if the epoch trained on another number). Run a warm-up epoch first (as `alternate` does).
    """
    clock, callbacks, x = EpochClock(), fit_args.pop("callbacks", []), fit_args.get("x")
    is_array = hasattr(x, "shape") and hasattr(x, "dtype") and not hasattr(x, "element_spec")
    if "y" in fit_args or is_array:
        fit_args.setdefault("batch_size", batch_size)
    optimizer = getattr(model, "optimizer", None)
    steps_before = int(keras.ops.convert_to_numpy(optimizer.iterations)) if optimizer is not None else None
    model.fit(**fit_args, epochs=1, verbose=0, callbacks=[clock, *callbacks])
    epoch = clock.epoch(total_samples=samples)
    steps_at_once = getattr(model, "steps_per_execution", 1) or 1   # fit's first call runs as many steps
    epoch = dataclasses.replace(epoch, first_samples=min(epoch.samples, batch_size * int(steps_at_once)))
    if steps_before is not None and batch_size > 1:
        steps = int(keras.ops.convert_to_numpy(optimizer.iterations)) - steps_before
        if steps > 1 and epoch.samples == steps:   # a tracker updated with the loss alone counts steps, not samples
            raise ValueError(f"the model's loss tracker counted {steps} samples over {steps} steps of batch "
                             f"{batch_size}: it counts steps, not samples (a custom train_step that calls "
                             f"update_state(loss) alone?); update it with sample_weight=batch size, as Keras does.")
    return epoch


def batches_of(source) -> Iterable:
    """The batches of one epoch: a `PyDataset` asked by index (as one worker would), or any iterable."""
    if isinstance(source, keras.utils.PyDataset):
        return (source[i] for i in range(len(source)))
    return source


def batch_size_of(batch) -> int:
    """How many samples a batch holds: the first dimension of its first leaf, whatever its structure (a bare
    tensor, a tuple `(inputs, targets)`, a dict of features).

    >>> batch_size_of(({"pixels": np.zeros((5, 3)), "ids": np.zeros(5)}, np.zeros(5)))
    5
    """
    leaves = keras.tree.flatten(batch)
    if not leaves or not getattr(leaves[0], "shape", None):
        raise ValueError(f"a batch should hold arrays or tensors with a batch dimension, got {type(batch).__name__}")
    return int(leaves[0].shape[0])


def pipeline_epoch(source) -> Epoch:
    """One epoch of `source` with no model, every batch produced as `fit` gets it, counted as `fit_epoch`
    counts training (the first dimension of each batch's inputs); the epoch starts when its iterator is created."""
    start, done, marks = time.perf_counter(), 0, []
    for batch in batches_of(source):
        done += batch_size_of(batch)
        marks.append((time.perf_counter(), done))
    return steady_epoch(start, marks)
