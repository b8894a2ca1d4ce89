"""`diagnose` and `Diagnosis` (notebook 05's method, `helpers.measure.diagnose`) on synthetic pipelines whose costs
are known, and the verdicts on figures whose intervals are known."""
import time

import keras
import numpy as np
import pytest
import tensorflow as tf

from helpers.measure import Samples
from helpers.measure.diagnose import (CANNOT_TELL, CHEAP, HIGHLY_INPUT_BOUND, NOT_INPUT_BOUND, VERDICT_SENTENCES, Diagnosis, diagnose, diagnosis_verdict,
                                      waiting_shares)
from helpers.measure.core import Epoch
from helpers.measure.report import TOO_FEW

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


def spread(value, n=6, width=0.02):
    """`n` rounds around `value`, the interval of the median within ±width of it."""
    return Samples([value * (1 + width * k / n) for k in range(-n // 2, n - n // 2)])


def shared_cores(waiting, headroom, cpu_share=None, gpu=None):
    """A Diagnosis of 6 rounds whose figures sit close to the given ones: the model trains 100 samples/s alone."""
    return Diagnosis(spread(100.0 * headroom), spread(100.0), spread(60.0), spread(waiting), gpu,
                     None if cpu_share is None else spread(cpu_share))


def test_diagnose_calls_a_slow_pipeline_input_bound_and_a_cached_one_not(monkeypatch):
    slow_diagnosis = diagnose(lambda: slow(12), tiny_model(), rounds=6)
    assert slow_diagnosis.verdict == "highly input-bound" and slow_diagnosis.waiting_share.interval[0] > 0.5
    assert slow_diagnosis.headroom.high < 1
    # 12 batches of 8 with a 0.02 s wait each: at most 400 samples/s alone, past the first batch too.
    assert slow_diagnosis.pipeline_alone.high <= 8 / 0.02 * 1.01
    assert slow_diagnosis.cpu_share is not None and slow_diagnosis.cpu_share.n == 6
    assert set(slow_diagnosis.start_up) == {"pipeline alone", "together"}
    fast_diagnosis = diagnose(lambda: instant(12), tiny_model(), rounds=6)
    assert fast_diagnosis.waiting_share.median < slow_diagnosis.waiting_share.median
    assert fast_diagnosis.pipeline_alone.median > 10 * slow_diagnosis.pipeline_alone.high


def test_diagnose_refuses_a_dataset_of_unknown_length():
    with pytest.raises(ValueError, match="known length"):
        diagnose(lambda: instant(4).filter(lambda x, y: True), tiny_model(), rounds=6)


@pytest.mark.parametrize("waiting, headroom, cpu_share, expected", [
    (0.01, 0.5, 0.9, "not input-bound"),                    # under 5 % nothing else matters
    (0.50, 0.5, 0.1, "highly input-bound"),                 # slower alone: the profiler's degree, however cheap
    (0.12, 0.8, None, "moderately input-bound"),
    (0.20, 0.8, None, "input-bound, how much cannot tell at this size"),   # the interval holds the 20 % line
    (0.40, 1.5, 0.5, "keeps up, costly on shared cores"),
    (0.40, 1.5, 0.2, "keeps up, cheap"),
    (0.40, 1.5, 1 / 3, "keeps up, its cost cannot tell at this size"),     # the interval holds a third
    (0.40, 1.5, None, "keeps up"),                          # the CPU share not measured
    (0.40, 1.0, 0.2, CANNOT_TELL),                          # the headroom's interval holds 1
    (0.05, 0.5, None, CANNOT_TELL),                         # the waiting share's holds 5 %
    (0.05, 1.5, 0.2, CANNOT_TELL),                          # ... even where the pipeline keeps up alone
    (0.05, 1.5, None, CANNOT_TELL),
])
def test_every_verdict_follows_the_rule(waiting, headroom, cpu_share, expected):
    d = shared_cores(waiting, headroom, cpu_share)
    assert d.verdict == expected
    text = str(d)
    assert text.startswith(f"{expected}: ") and VERDICT_SENTENCES[expected] in text


def test_a_waiting_share_that_holds_the_5_percent_line_never_says_keeps_up():
    # A learner's run: the pipeline alone clearly faster than the model, the waiting share's interval across 5 %.
    # The old rule said "keeps up, cheap" from the headroom alone; the waiting share may be under 5 % or over it.
    waiting = Samples([0.01, 0.03, 0.04, 0.06, 0.08, 0.12])
    assert waiting.interval[0] < NOT_INPUT_BOUND < waiting.interval[1]
    d = Diagnosis(spread(300.0), spread(100.0), spread(90.0), waiting, cpu_share=spread(0.2))
    assert d.verdict == CANNOT_TELL and "keeps up" not in str(d).split(":")[0]


def test_every_verdict_holds_at_its_intervals_unfavourable_end():
    # Every figure across every line: a verdict that claims a side of a line has its whole interval on that side.
    for waiting in (0.01, 0.05, 0.12, 0.20, 0.40):
        for headroom in (0.5, 1.0, 1.5):
            for cpu_share in (None, 0.2, CHEAP, 0.5):
                d = shared_cores(waiting, headroom, cpu_share)
                (w_low, w_high), (h_low, h_high) = d.waiting_share.interval, d.headroom.interval
                word = d.verdict
                if word == "not input-bound":
                    assert w_high < NOT_INPUT_BOUND, d
                if word.startswith("keeps up"):
                    assert w_low > NOT_INPUT_BOUND and h_low > 1, d
                if word.endswith("input-bound") and word != "not input-bound":
                    assert w_low > NOT_INPUT_BOUND and h_high < 1, d
                if word == "highly input-bound":
                    assert w_low > HIGHLY_INPUT_BOUND, d
                if word == "moderately input-bound":
                    assert w_high < HIGHLY_INPUT_BOUND, d
                if word == "keeps up, cheap":
                    assert d.cpu_share.interval[1] < CHEAP, d
                if word == "keeps up, costly on shared cores":
                    assert d.cpu_share.interval[0] > CHEAP, d
                if w_low <= NOT_INPUT_BOUND <= w_high or (w_low > NOT_INPUT_BOUND and h_low <= 1 <= h_high):
                    assert word == CANNOT_TELL, d


def test_fewer_than_six_rounds_give_no_verdict():
    three = Samples([0.5, 0.52, 0.51])
    assert diagnosis_verdict(three, Samples([0.2, 0.21, 0.22])) == TOO_FEW
    assert diagnosis_verdict(spread(0.5), Samples([0.2, 0.21, 0.22])) == TOO_FEW


def test_the_gpu_is_judged_by_the_rule_and_said_in_words():
    assert shared_cores(0.1, 20.0, gpu=1500.0).feeds_gpu == "could feed it"        # 2,000 samples/s alone
    assert shared_cores(0.1, 10.0, gpu=1500.0).feeds_gpu == "would starve it"
    assert shared_cores(0.1, 15.0, gpu=1500.0).feeds_gpu == "no measurable difference"
    assert "the pipeline alone: no measurable margin" in str(shared_cores(0.1, 15.0, gpu=1500.0))
    assert shared_cores(0.1, 20.0).feeds_gpu is None and "GPU" not in str(shared_cores(0.1, 20.0))


def test_the_waiting_share_leaves_each_epochs_first_step_out():
    # The model alone: 1 s of steps after a 0.1 s first step; together: 4 s after a 3 s first step.
    alone, together = Epoch(100, 1.1, 0.1, 10), Epoch(100, 7.0, 3.0, 10)
    assert waiting_shares([alone], [together]).median == pytest.approx(0.75)
    faster_together = Epoch(100, 0.9, 0.05, 10)
    assert waiting_shares([alone], [faster_together]).median == 0.0   # floored: noise, not negative waiting
