"""`diagnose` and `Diagnosis` (notebook 05, `helpers.lessons.pipeline_profiling`) on synthetic pipelines whose costs are known."""
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.measure import Samples
from helpers.lessons.pipeline_profiling import Diagnosis, diagnose

pytestmark = pytest.mark.alone   # these tests time things (conftest.py: nothing runs beside them)


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


def test_diagnose_calls_a_slow_pipeline_highly_input_bound_and_a_cached_one_not():
    slow_diagnosis = diagnose(lambda: slow(12), tiny_model(), rounds=3)
    assert slow_diagnosis.verdict == "highly input-bound" and slow_diagnosis.waiting_share.interval[0] > 0.5
    assert slow_diagnosis.headroom.high < 1
    # 12 batches of 8 with a 0.02 s wait each: at most 400 samples/s alone.
    assert slow_diagnosis.pipeline_alone.high <= 8 / 0.02 * 1.01
    fast_diagnosis = diagnose(lambda: instant(12), tiny_model(), rounds=3)
    assert fast_diagnosis.waiting_share.median < slow_diagnosis.waiting_share.median
    # The median, not the interval's low end: with 3 rounds that is the slowest round, and one round of 12
    # cached batches stalled by another process (3,441 samples/s against 18,906 and 20,944) failed it.
    assert fast_diagnosis.pipeline_alone.median > 10 * slow_diagnosis.pipeline_alone.high


def test_verdict_thresholds_and_gpu_feed_sentence():
    def diagnosis(waiting, alone=(1000.0,), gpu=None):
        return Diagnosis(Samples(alone), Samples([100.0]), Samples([90.0]), Samples([waiting]), gpu)

    assert [diagnosis(w).verdict for w in (0.0, 0.049, 0.05, 0.2, 0.21)] == [
        "not input-bound", "not input-bound", "moderately input-bound", "moderately input-bound", "highly input-bound"]
    assert "could feed a GPU" in str(diagnosis(0.1, alone=(2000, 2100, 2200), gpu=1500))
    assert "could not feed a GPU" in str(diagnosis(0.1, alone=(1000, 1100, 1200), gpu=1500))
    assert "no measurable margin" in str(diagnosis(0.1, alone=(1000, 1600, 2000), gpu=1500))


def test_a_cheap_pipeline_faster_than_the_model_is_not_called_input_bound():
    def diagnosis(waiting, started, cpu_share, alone=80.0):
        """`started`: the pipeline alone's rate after its first batch; `alone`: over the whole epoch."""
        return Diagnosis(Samples([alone]), Samples([100.0]), Samples([60.0]), Samples([waiting]), None, None,
                         Samples([cpu_share]), Samples([started]))

    assert diagnosis(0.4, started=1000.0, cpu_share=0.1).verdict == "not input-bound (cheap, cores shared)"
    assert diagnosis(0.4, started=1000.0, cpu_share=0.5).verdict == "highly input-bound"   # costly: its CPU
    assert diagnosis(0.4, started=50.0, cpu_share=0.1).verdict == "highly input-bound"     # cannot keep up
    assert diagnosis(0.01, started=1000.0, cpu_share=0.1).verdict == "not input-bound"
    assert "takes 10% of the CPU" in str(diagnosis(0.4, started=1000.0, cpu_share=0.1))
    # Without the rate once started (a Diagnosis built by hand), the whole epoch's rate is judged.
    by_hand = Diagnosis(Samples([1000.0]), Samples([100.0]), Samples([60.0]), Samples([0.4]), None, None,
                        Samples([0.1]))
    assert by_hand.verdict == "not input-bound (cheap, cores shared)"


def test_diagnose_measures_the_cpu_share_of_a_sleeping_pipeline_as_small():
    slow_diagnosis = diagnose(lambda: slow(12), tiny_model(), rounds=3)
    assert slow_diagnosis.cpu_share is not None and slow_diagnosis.cpu_share.n == 3
    assert slow_diagnosis.started.high <= 8 / 0.02 * 1.01   # once started, still a wait per batch
    assert slow_diagnosis.verdict == "highly input-bound"   # cheap, but slower than the model: it waits
