"""`helpers.profiling` on synthetic pipelines whose costs are known."""
import time

import keras
import numpy as np
import tensorflow as tf

from helpers.profiling import Diagnosis, benchmark, diagnose


def tiny_model():
    keras.utils.set_random_seed(0)
    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(4)])
    model.compile("sgd", "mse")
    return model


def instant(n_batches=20):
    data = np.zeros((n_batches * 8, 4), np.float32)
    return tf.data.Dataset.from_tensor_slices((data, data)).batch(8).cache()


def slow(n_batches=20, seconds=0.02):
    """Every batch waits `seconds` in Python first: a reader far slower than this tiny model."""
    def wait(x, y):
        time.sleep(seconds)
        return x, y

    return instant(n_batches).map(lambda x, y: tf.numpy_function(wait, [x, y], [tf.float32, tf.float32],
                                                                   stateful=True)).map(
        lambda x, y: (tf.ensure_shape(x, (None, 4)), tf.ensure_shape(y, (None, 4))))


def test_benchmark_alternates_with_a_baseline_and_finds_the_slow_side():
    result = benchmark(lambda: slow(10), baseline=lambda: instant(10), repeats=4, warmup=1)
    assert len(result.rates) == len(result.baseline_rates) == 4
    # 10 batches of 8 with a 0.02 s wait each: at most 8 / 0.02 = 400 samples/s alone.
    assert max(result.rates) <= 400 * 1.01
    assert max(result.ratios) < 0.5


def test_diagnose_calls_a_slow_pipeline_highly_input_bound_and_a_cached_one_not():
    slow_diagnosis = diagnose(lambda: slow(12), tiny_model(), rounds=2)
    assert slow_diagnosis.verdict == "highly input-bound" and slow_diagnosis.waiting_share > 0.5
    assert slow_diagnosis.headroom < 1
    fast_diagnosis = diagnose(lambda: instant(12), tiny_model(), rounds=2)
    assert fast_diagnosis.waiting_share < slow_diagnosis.waiting_share
    assert fast_diagnosis.pipeline_alone > 10 * slow_diagnosis.pipeline_alone


def test_verdict_thresholds_and_gpu_feed_sentence():
    def diagnosis(waiting, alone=1000.0, gpu=None):
        return Diagnosis(alone, 100.0, 90.0, waiting, gpu)

    assert [diagnosis(w).verdict for w in (0.0, 0.049, 0.05, 0.2, 0.21)] == [
        "not input-bound", "not input-bound", "moderately input-bound", "moderately input-bound", "highly input-bound"]
    assert "could feed a GPU" in str(diagnosis(0.1, alone=2000, gpu=1500))
    assert "could not feed a GPU" in str(diagnosis(0.1, alone=1000, gpu=1500))


def test_benchmark_ladder_pairs_each_step_with_the_one_before_and_finds_the_slow_one():
    from helpers.profiling import benchmark_ladder

    ladder = benchmark_ladder({"fast": lambda: instant(10), "slow": lambda: slow(10), "fast again": lambda: instant(10)},
                              repeats=2, warmup=1)
    assert all(len(rates) == 2 for rates in ladder.rates.values())
    assert max(ladder.gain("slow").ratios) < 0.5        # slow is slower than the step before it
    assert min(ladder.gain("fast again").ratios) > 2    # and the next step makes up for it
    assert ladder.versus("fast again", "fast").ratios == [a / b for a, b in zip(ladder.rates["fast again"],
                                                                                 ladder.rates["fast"])]
    try:
        ladder.gain("fast")
    except ValueError as e:
        assert "first step" in str(e)
    else:
        raise AssertionError("the first step has no step before it")
