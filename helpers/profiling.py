"""Is training input-bound? Time the pipeline alone, the model alone, and the two together.

`benchmark` measures a dataset's throughput (alone, or as `fit` consumes it), alternating with a
baseline when it is a comparison. `diagnose` answers the question a learner has: how much of each
training step is spent waiting for input, with the TensorFlow profiler's verdicts (under 5 % of
step time waiting: not input-bound; 5-20 %: moderately; over 20 %: highly), and whether the
pipeline could feed a given GPU (`helpers.gpu_reference`).

Introduced in notebooks/04_tfdata_mnist.ipynb (section 7); notebook 05 takes it apart and adds
`benchmark_ladder`, which times a sequence of pipelines, each against the one before.
"""
from __future__ import annotations

import statistics
from dataclasses import dataclass, field
from typing import Callable

import keras
import tensorflow as tf

from helpers.throughput import EpochTimer, pipeline_rate

NOT_INPUT_BOUND, HIGHLY_INPUT_BOUND = 0.05, 0.20  # the TensorFlow profiler's thresholds on the waiting share


@dataclass
class Benchmark:
    """Samples per second over timed repeats, and, for a comparison, the ratios to the baseline.

    Introduced in notebooks/04_tfdata_mnist.ipynb.
    """

    rates: list[float] = field(default_factory=list)
    baseline_rates: list[float] = field(default_factory=list)

    @property
    def rate(self) -> float:
        return statistics.median(self.rates)

    @property
    def ratios(self) -> list[float]:
        """This side's rate over the baseline's, pair by pair."""
        return [a / b for a, b in zip(self.rates, self.baseline_rates)]

    @property
    def ratio(self) -> float:
        return statistics.median(self.ratios)


def fit_rate(model: keras.Model, dataset: tf.data.Dataset) -> float:
    """Samples per second `model.fit` trains for one epoch of `dataset`, counted after the first batch
    (every batch counted at the first batch's size; a smaller last batch makes this a little high).

    Introduced in notebooks/04_tfdata_mnist.ipynb.
    """
    timer = EpochTimer()
    model.fit(dataset, epochs=1, verbose=0, callbacks=[timer])
    batches = len(timer.batch_ends) - 1
    if batches < 1:
        raise ValueError("fit_rate needs at least two batches to time the steady part after the first")
    batch_size = int(next(iter(dataset))[0].shape[0])
    return batches * batch_size / timer.steady_seconds


def benchmark(make: Callable[[], tf.data.Dataset], *, model: keras.Model | None = None,
              baseline: Callable[[], tf.data.Dataset] | None = None, repeats: int = 5, warmup: int = 1) -> Benchmark:
    """Throughput of `make()`: one epoch alone (`pipeline_rate`), or trained by `model` (`fit_rate`).

    After `warmup` untimed runs, `repeats` timed runs; with a `baseline`, each run is paired with
    one of the baseline and the order alternates (A B, then B A).
    Introduced in notebooks/04_tfdata_mnist.ipynb.

    >>> fast = lambda: tf.data.Dataset.from_tensor_slices((tf.zeros((2_000, 4)), tf.zeros(2_000))).batch(100)
    >>> benchmark(fast, repeats=2).rate > 0
    True
    """
    def one(factory) -> float:
        return fit_rate(model, factory()) if model is not None else pipeline_rate(factory())

    for _ in range(warmup):
        one(make)
        if baseline is not None:
            one(baseline)
    result = Benchmark()
    for index in range(repeats):
        if baseline is None:
            result.rates.append(one(make))
        elif index % 2 == 0:
            result.rates.append(one(make))
            result.baseline_rates.append(one(baseline))
        else:
            result.baseline_rates.append(one(baseline))
            result.rates.append(one(make))
    return result


@dataclass
class Ladder:
    """Pipelines timed in a sequence, each step against the one before it.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """

    names: list[str]
    rates: dict[str, list[float]] = field(default_factory=dict)   # samples/s per round

    def gain(self, name: str) -> Benchmark:
        """Step `name` against the step before it, round by round."""
        index = self.names.index(name)
        if index == 0:
            raise ValueError(f"{name!r} is the first step: it has no step before it")
        return Benchmark(self.rates[name], self.rates[self.names[index - 1]])

    def versus(self, name: str, baseline: str) -> Benchmark:
        """Step `name` against any other step, round by round."""
        return Benchmark(self.rates[name], self.rates[baseline])


def benchmark_ladder(steps: dict[str, Callable[[], tf.data.Dataset]], repeats: int = 5, warmup: int = 1) -> Ladder:
    """Time each pipeline alone for one epoch, in rounds that run every step in turn.

    Rounds alternate direction (first to last, then last to first), so each step runs next to
    the step before it, after it in one round and before it in the next (A B, then B A): a
    pair's ratio is not skewed by whatever the earlier run leaves behind, and a slow moment of
    the machine falls on both sides. Half the runs of timing every step in its own pairs.
    Introduced in notebooks/05_pipeline_profiling.ipynb.

    >>> small = lambda n: lambda: tf.data.Dataset.from_tensor_slices((tf.zeros(n), tf.zeros(n))).batch(10)
    >>> ladder = benchmark_ladder({"short": small(100), "long": small(1_000)}, repeats=2)
    >>> len(ladder.gain("long").ratios)
    2
    """
    names = list(steps)
    ladder = Ladder(names, {name: [] for name in names})
    for round_index in range(warmup + repeats):
        order = names if round_index % 2 == 0 else names[::-1]
        rates = {name: pipeline_rate(steps[name]()) for name in order}
        if round_index >= warmup:
            for name in names:
                ladder.rates[name].append(rates[name])
    return ladder


@dataclass
class Diagnosis:
    """What `diagnose` measured, and what it means.

    Introduced in notebooks/04_tfdata_mnist.ipynb.
    """

    pipeline_alone: float        # samples/s, no model
    model_alone: float           # samples/s, training on one batch held in memory
    together: float              # samples/s, training from the pipeline
    waiting_share: float         # of each training step, the part spent waiting for input
    gpu_appetite: float | None = None

    @property
    def headroom(self) -> float:
        """How many times faster the pipeline alone runs than the model alone."""
        return self.pipeline_alone / self.model_alone

    @property
    def verdict(self) -> str:
        if self.waiting_share < NOT_INPUT_BOUND:
            return "not input-bound"
        if self.waiting_share <= HIGHLY_INPUT_BOUND:
            return "moderately input-bound"
        return "highly input-bound"

    def __str__(self) -> str:
        text = (f"{self.verdict}: {self.waiting_share:.0%} of each step waits for input. Pipeline alone "
                f"{self.pipeline_alone:,.0f} samples/s, model alone {self.model_alone:,.0f}, together "
                f"{self.together:,.0f} (headroom {self.headroom:.1f}×).")
        if self.gpu_appetite:
            feeds = "could" if self.pipeline_alone >= self.gpu_appetite else "could not"
            text += f" It {feeds} feed a GPU that trains {self.gpu_appetite:,.0f} samples/s."
        return text


def diagnose(make: Callable[[], tf.data.Dataset], model: keras.Model, *, rounds: int = 3,
             gpu_appetite: float | None = None) -> Diagnosis:
    """Is training `model` from `make()` input-bound on this machine?

    Three medians over `rounds` (after one untimed warm-up): the pipeline alone; the model alone,
    trained on the pipeline's first batch cached in memory and repeated for as many steps (so it
    does the same compute with no input cost); and training from the pipeline. The waiting share
    is 1 - (model-alone step time / step time together), floored at 0. `gpu_appetite`, a GPU's
    samples/s for this model (see `helpers.gpu_reference.gpu_appetite`), adds whether the
    pipeline alone could feed it.
    Introduced in notebooks/04_tfdata_mnist.ipynb.
    """
    steps = int(make().cardinality())
    if steps < 2:
        raise ValueError("diagnose needs a dataset of known length with at least two batches: a TFRecordDataset's "
                         "length is unknown until read, so add .apply(tf.data.experimental.assert_cardinality(n)) "
                         "with the number of records (read_split does this from the manifest)")

    def model_alone() -> tf.data.Dataset:
        return make().take(1).cache().repeat(steps)

    def measure() -> tuple[float, float, float]:
        return pipeline_rate(make()), fit_rate(model, model_alone()), fit_rate(model, make())

    measure()  # warm-up: tracing, file caches
    runs = [measure() for _ in range(rounds)]
    alone, compute, together = (statistics.median(values) for values in zip(*runs))
    waiting = max(0.0, 1.0 - together / compute)
    return Diagnosis(alone, compute, together, waiting, gpu_appetite)
