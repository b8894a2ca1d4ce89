"""The measurement core (`helpers.measure`) on functions and pipelines whose costs are known."""
import math
import random
import time
from collections import Counter

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.measure import (EpochClock, Rounds, Samples, alternate, fit_epoch, median_interval_ranks,
                             pipeline_epoch, steady_epoch, time_repeats, timed)

pytestmark = pytest.mark.alone   # these tests time things (conftest.py: nothing runs beside them)


# ------------------------------------------------------------------ the interval of the median


@pytest.mark.parametrize("n, rank", [(6, 1), (8, 1), (9, 2), (10, 2), (12, 3), (20, 6), (30, 10), (50, 18)])
def test_interval_ranks_match_the_published_table(n, rank):
    # Le Boudec (2010), Table A.1: the 95 % interval of the median is [x(k), x(n+1-k)].
    k, coverage = median_interval_ranks(n)
    assert k == rank and coverage >= 0.95
    # k is the largest rank that keeps 95 %: one more would fall below it.
    assert 1 - 2 * sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n < 0.95


def test_too_few_samples_give_the_whole_range_at_the_confidence_they_really_have():
    k, coverage = median_interval_ranks(5)
    assert k == 1 and coverage == pytest.approx(1 - 2 / 32)
    samples = Samples([1.0, 2.0, 3.0])
    assert samples.interval == (1.0, 3.0) and not samples.enough
    assert "over 3 rounds, ≈75% confidence" in samples.describe()


def test_goals_are_judged_on_the_unfavourable_bound_of_the_interval():
    samples = Samples([0.90, 0.96, 0.97, 0.98, 0.99, 1.00, 1.01, 1.02, 1.03, 1.10])   # interval 0.96–1.03
    assert samples.interval == (0.96, 1.03)
    assert samples.meets("≥ 0.95") and not samples.meets("≥ 0.97")   # the median (0.995) would pass both
    assert samples.meets("≤ 1.05") and not samples.meets("≤ 1.02")
    assert samples.meets("> 0.95") and not samples.meets("> 0.96")
    assert samples.meets("-") is None
    assert samples.compared_to(1.0) == "holds" and samples.compared_to(0.9) == "above"


def test_the_interval_covers_the_median_as_often_as_it_claims_and_narrows_as_rounds_are_added():
    # 2,000 simulated A/A comparisons: the ratio of two runs of the same thing, with log-normal noise.
    rng = random.Random(0)
    def aa_ratios(n):
        return [math.exp(rng.gauss(0, 0.1)) / math.exp(rng.gauss(0, 0.1)) for _ in range(n)]

    covered = sum(Samples(aa_ratios(10)).compared_to(1.0) == "holds" for _ in range(2_000))
    assert 0.96 <= covered / 2_000 <= 0.995        # exact coverage for n = 10 is 97.9 %
    widths = {n: np.median([np.subtract(*Samples(aa_ratios(n)).interval[::-1]) for _ in range(300)])
              for n in (6, 12, 24, 48)}
    assert widths[6] > widths[12] > widths[24] > widths[48]
    # ... while the extreme pair only gets more extreme: the lowest of 48 is below the lowest of 6.
    lowest = {n: np.median([min(aa_ratios(n)) for _ in range(300)]) for n in (6, 48)}
    assert lowest[48] < lowest[6]


# ------------------------------------------------------------------ alternation


def test_alternate_runs_a_b_then_b_a_and_drops_the_warm_up():
    calls = []
    rounds = alternate({"A": lambda: calls.append("A") or 1.0, "B": lambda: calls.append("B") or 1.0},
                       rounds=3, warmup=1)
    assert calls == ["A", "B", "A", "B", "B", "A", "A", "B"]   # warm-up A B, then A B, B A, A B
    assert rounds.samples("A").n == 3


@pytest.mark.parametrize("sides", [3, 4, 6])
def test_alternate_puts_every_side_in_every_position_equally_often(sides):
    names = [f"side {i}" for i in range(sides)]
    calls = []
    rounds = 2 * sides   # a whole number of Latin squares, for odd and even counts of sides
    alternate({name: (lambda name=name: calls.append(name) or 1.0) for name in names}, rounds=rounds, warmup=0)
    orders = [calls[i:i + sides] for i in range(0, len(calls), sides)]
    assert all(sorted(order) == names for order in orders)   # each side once per round
    for position in range(sides):   # the middle sides too: each first, last and in between as often as the others
        assert Counter(order[position] for order in orders) == Counter({name: rounds // sides for name in names})
    follows = Counter((a, b) for order in orders for a, b in zip(order, order[1:]))
    assert len(set(follows.values())) == 1 and len(follows) == sides * (sides - 1)   # each after each equally often


def test_alternation_cancels_a_drift_that_a_fixed_order_would_report_as_a_difference():
    # The same work on both sides, on a machine that slows down by 1 % per run: a fixed order
    # (always A then B) would call B slower; alternating the order cancels the drift.
    runs = 0

    def same_work() -> float:
        nonlocal runs
        runs += 1
        return 1.0 + 0.01 * runs          # seconds: each run a little slower than the one before

    rounds = alternate({"A": same_work, "B": same_work}, rounds=12)
    assert rounds.ratio("B", "A").compared_to(1.0) == "holds"
    fixed = Samples([same_work() / same_work() for _ in range(12)])   # A first, then B, every time
    assert fixed.compared_to(1.0) == "below"


def test_real_timings_of_known_cost_give_the_ratio_and_a_real_a_a_holds_one():
    def cost(seconds):
        return timed(lambda: time.sleep(seconds))

    # 12 rounds: the 95 % interval leaves out the 2 lowest and 2 highest (one late wake-up from a sleep, on a busy
    # machine, once set the lowest of 8 rounds at 1.56)
    rounds = alternate({"slow": cost(0.02), "fast": cost(0.01), "fast again": cost(0.01)}, rounds=12)
    low, high = rounds.ratio("slow", "fast").interval
    assert 1.6 < low and high < 2.4                      # known to be 2
    assert rounds.ratio("fast again", "fast").meets("≥ 0.8") and rounds.ratio("fast again", "fast").meets("≤ 1.25")
    seconds = time_repeats(lambda: time.sleep(0.01), repeats=4)
    assert seconds.n == 4 and 0.009 < seconds.median < 0.05


# ------------------------------------------------------------------ the steady-state rate


def test_the_rate_counts_the_whole_epoch_and_shows_its_start_up():
    epoch = steady_epoch(10.0, [(12.0, 100), (13.0, 200), (14.0, 250)])
    assert (epoch.samples, epoch.seconds, epoch.start_up) == (250, 4.0, 2.0) and epoch.rate == 62.5
    with pytest.raises(ValueError, match="no steps"):
        steady_epoch(0.0, [])


def test_the_rate_past_start_up_leaves_out_the_first_step_and_its_samples():
    epoch = steady_epoch(10.0, [(12.0, 100), (13.0, 200), (14.0, 250)])
    assert epoch.first_samples == 100 and epoch.rate_past_start_up == 75.0   # 150 samples in the last 2 s
    assert steady_epoch(0.0, [(2.0, 50)]).rate_past_start_up == 25.0         # one step: the whole epoch's rate
    rounds = Rounds(["pipeline", "seconds"], {"pipeline": [62.5], "seconds": [3.0]}, {"pipeline": [epoch]})
    later = rounds.past_start_up()
    assert later.values == {"pipeline": [75.0], "seconds": [3.0]} and rounds.values["pipeline"] == [62.5]


def sleepy(n_batches, batch_size, seconds):
    """Batches of `batch_size` rows, each made to wait `seconds`: at most batch_size / seconds samples/s."""
    data = np.zeros((n_batches * batch_size, 4), np.float32)

    def wait(x):
        time.sleep(seconds)
        return x

    ds = tf.data.Dataset.from_tensor_slices(data).batch(batch_size)
    ds = ds.map(lambda x: tf.ensure_shape(tf.numpy_function(wait, [x], tf.float32, stateful=True), (None, 4)))
    return ds.map(lambda x: (x, x))


def test_pipeline_epoch_counts_samples_and_the_rate_of_a_known_cost():
    epoch = pipeline_epoch(sleepy(12, 8, 0.01))
    assert epoch.samples == 12 * 8 and 0.01 <= epoch.start_up < epoch.seconds
    assert 8 / 0.01 * 0.6 < epoch.rate <= 8 / 0.01 * 1.01  # 800 samples/s at most


def test_rates_survive_steps_per_execution_that_does_not_divide_the_steps():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse", steps_per_execution=4)
    model.fit(sleepy(10, 8, 0.005), epochs=1, verbose=0)   # warm-up: tracing
    clock = EpochClock()
    model.fit(sleepy(10, 8, 0.005), epochs=1, verbose=0, callbacks=[clock])
    assert len(clock.times) == 3                          # calls of 4, 4 and 2 steps (Keras says steps 4, 8, 12)
    epoch = clock.epoch()
    assert epoch.samples == 10 * 8                        # (last step index + 1) × batch would give 96
    # At most 1,600 samples/s; at least 30 % of it (the rate is not off by a factor, even on a loaded machine).
    assert 8 / 0.005 * 0.3 < epoch.rate <= 8 / 0.005 * 1.01
    again = fit_epoch(model, x=sleepy(10, 8, 0.005), batch_size=8)
    assert again.samples == 80 and 8 / 0.005 * 0.3 < again.rate <= 8 / 0.005 * 1.01
    assert again.first_samples == 4 * 8                   # fit's first call ran 4 steps of 8
    with pytest.raises(ValueError, match="trained on 80 samples, not the 96 expected"):
        fit_epoch(model, x=sleepy(10, 8, 0.005), batch_size=8, samples=96)


def test_fit_epoch_counts_a_short_last_batch_of_a_dataset_without_being_told():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse", steps_per_execution=3)
    data = np.zeros((70, 4), np.float32)
    dataset = tf.data.Dataset.from_tensor_slices((data, data)).batch(8)   # 8 batches of 8, then one of 6
    fit_epoch(model, x=dataset, batch_size=8)
    assert fit_epoch(model, x=dataset, batch_size=8).samples == 70
    assert fit_epoch(model, x=dataset, validation_data=dataset, batch_size=8).samples == 70   # not the validation's


@pytest.mark.parametrize("structure", ["bare tensor", "tuple", "dict", "dict in a tuple"])
def test_pipeline_epoch_counts_the_samples_whatever_a_batch_looks_like(structure):
    images = np.zeros((100, 28, 28), np.float32)
    make = {"bare tensor": lambda: images, "tuple": lambda: (images, np.zeros(100)),
            "dict": lambda: {"pixels": images, "label": np.zeros(100)},
            "dict in a tuple": lambda: ({"b": images, "a": np.zeros(100)}, np.zeros(100))}[structure]
    dataset = tf.data.Dataset.from_tensor_slices(make()).batch(32)   # 32, 32, 32, 4
    assert pipeline_epoch(dataset).samples == 100


def test_fit_epoch_counts_a_smaller_last_batch_exactly():
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    x = np.zeros((1_000, 4), np.float32)
    epoch = fit_epoch(model, x=x, y=x, batch_size=300)   # 300, 300, 300, 100
    assert epoch.samples == 1_000


class SleepyBatches(keras.utils.PyDataset):
    """Six batches of zeros; every batch after the first waits `seconds`, as a slow reader would."""

    def __init__(self, seconds):
        super().__init__()
        self.seconds = seconds

    def __len__(self):
        return 6

    def __getitem__(self, index):
        if index:
            time.sleep(self.seconds)
        return np.zeros((8, 4), np.float32), np.zeros((8, 4), np.float32)


def test_a_slow_pydataset_is_slow_alone_and_in_fit_and_its_headroom_is_below_one():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    x = np.zeros((48, 4), np.float32)
    measured = alternate({
        "memory": lambda: fit_epoch(model, x=x, y=x, batch_size=8),
        "slow, training": lambda: fit_epoch(model, x=SleepyBatches(0.05), batch_size=8),
        "slow alone": lambda: pipeline_epoch(SleepyBatches(0.05)),
        "instant alone": lambda: pipeline_epoch(SleepyBatches(0.0)),
    }, rounds=3)
    # Alone, the slow reader delivers 6 batches of 8 with five 0.05 s waits: at most 48 / 0.25 = 192 images/s.
    assert measured.samples("slow alone").high <= 48 / 0.25 * 1.01
    assert measured.ratio("slow, training", "memory").high < 0.5
    assert measured.ratio("slow alone", "memory").values == tuple(
        a / b for a, b in zip(measured.values["slow alone"], measured.values["memory"]))
    # The median, not the lowest round: an instant epoch lasts a fraction of a millisecond, so one hiccup of a loaded
    # machine (26 ms once in a full pytest run beside other jobs) makes its lowest round meaningless.
    assert measured.samples("instant alone").median > 10 * measured.samples("slow alone").high


def test_fit_epoch_refuses_a_loss_tracker_that_counts_steps_not_samples():
    """keras.io's "customizing fit" pattern updates a Mean named "loss" with the loss alone: its count is the
    number of steps, and an epoch counted from it would be batch-size times too slow."""
    import keras
    from helpers.measure.core import fit_epoch

    class StepCounting(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)
            self.loss_tracker = keras.metrics.Mean(name="loss")

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            import tensorflow as tf
            x, y = data
            with tf.GradientTape() as tape:
                loss = keras.ops.mean((self(x) - y) ** 2)
            self.optimizer.apply(tape.gradient(loss, self.trainable_weights), self.trainable_weights)
            self.loss_tracker.update_state(loss)   # no sample_weight: it counts steps
            return {"loss": self.loss_tracker.result()}

        @property
        def metrics(self):
            return [self.loss_tracker]

    model = StepCounting()
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((80, 3), np.float32), np.zeros((80, 1), np.float32)
    with pytest.raises(ValueError, match="counts steps, not samples"):
        fit_epoch(model, batch_size=8, x=x, y=y)


@pytest.mark.parametrize("sides, rounds, warmup", [({}, 2, 1), ({"A": lambda: 1.0}, 2.5, 1),
                                                   ({"A": lambda: 1.0}, 1, -5), ({"A": lambda: 1.0}, True, 1)])
def test_alternate_names_arguments_it_cannot_run(sides, rounds, warmup):
    from helpers.measure.core import alternate
    with pytest.raises(ValueError, match="alternate"):
        alternate(sides, rounds=rounds, warmup=warmup)
