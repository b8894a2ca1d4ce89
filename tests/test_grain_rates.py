"""Notebook 08's rates (helpers/measure/grain_rates.py): training rates past each epoch's first step, and the reports'
verdicts by the series' rule, which a too-close or too-short measurement cannot pass as a gain."""
import numpy as np

from helpers.measure.core import Epoch, Rounds
from helpers.measure.grain_rates import (BATCH_READS, GRAIN_BLOCKS, PER_RECORD, TF_DATA_BLOCKS, displacement,
                                         iterator_checkpoint_bytes, loader_rates, mean_class_run, report_backends,
                                         report_forms)


def rounds_of(rates: dict[str, list[float]], start_up: float = 0.01) -> Rounds:
    """Rounds of whole epochs of 10 batches of 100 samples at the given rates, each first batch `start_up` s."""
    epochs = {name: [Epoch(1000, 1000 / r, start_up, 100) for r in values] for name, values in rates.items()}
    return Rounds(list(rates), {name: [e.rate for e in es] for name, es in epochs.items()}, epochs).past_start_up()


def test_loader_rates_time_each_loader_past_its_first_step():
    import keras

    model = keras.Sequential([keras.Input((4,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((64, 4), np.float32), np.zeros((64, 1), np.float32)

    def make():   # a generator of one epoch's batches, as a loader makes them
        return ((x[i:i + 8], y[i:i + 8]) for i in range(0, 64, 8))

    rates = loader_rates(model, {"a": make, "b": make}, batch_size=8, steps=8, rounds=2)
    assert rates.names == ["a", "b"] and all(len(v) == 2 for v in rates.values.values())
    for name in rates.names:   # the first step's samples are left out of each rate
        assert [e.samples for e in rates.epochs[name]] == [64, 64]
        assert rates.values[name] == [e.rate_past_start_up for e in rates.epochs[name]]


def test_backends_are_judged_by_the_rule(capsys):
    here = rounds_of({"tf.data": [100.0] * 6, "Grain": [50.0, 52, 48, 51, 49, 50]})
    child = {"versions": {"jax": "0.1"}, "rates": {"tf.data": [100.0, 101, 99], "Grain": [50.0, 49, 51]}}
    words = report_backends(here, child)
    assert words == {"TensorFlow": "slower", "JAX": "too few rounds to tell"}   # 3 rounds give no verdict
    out = capsys.readouterr().out
    assert "JAX 0.1, Grain" in out and "TensorFlow: Grain against tf.data" in out


def test_the_forms_report_names_each_gain_and_the_gpu(capsys):
    proof = rounds_of({PER_RECORD: [1e4 + i for i in range(6)], "2. batch first": [5e4] * 6,
                       BATCH_READS: [1e5 + i for i in range(6)], GRAIN_BLOCKS: [1e6 + 1e4 * i for i in range(6)],
                       TF_DATA_BLOCKS: [1e6 + 1e4 * (5 - i) for i in range(6)]})
    words = report_forms(proof, batch=1024, size="200,000 an epoch; 1,000 here")
    assert words["batch reads"] == words["blocks"] == "faster" and words["per record"] == "slower"
    assert words["grain"] == "no measurable difference"   # the two block readers cross over round by round
    assert set(words) >= {f"GPU, {GRAIN_BLOCKS}", f"GPU, {TF_DATA_BLOCKS}"}
    out = capsys.readouterr().out
    assert "first batch, ms" in out and "10.0" in out and "the reference GPU" in out


def test_the_shuffle_measures_tell_a_buffer_from_a_global_shuffle():
    n = 2_000
    labels = np.repeat(np.arange(10), n // 10)             # stored sorted by class
    fair = np.random.default_rng(0).permutation(n)
    assert displacement(np.arange(n)) == 0 and 0.3 < displacement(fair) < 0.37   # a fair shuffle: about 1/3
    assert mean_class_run(labels) == n / 10 and mean_class_run(labels[fair]) < 1.2
    windows = np.concatenate([np.random.default_rng(1).permutation(200) + s for s in range(0, n, 200)])
    assert displacement(windows) < 0.05 and mean_class_run(labels[windows]) > 1.5   # a buffer-like order


def test_an_iterator_checkpoint_holds_a_buffer_and_not_an_index_shuffle(tmp_path):
    import tensorflow as tf

    x = np.random.default_rng(0).integers(0, 256, (400, 28, 28), dtype=np.uint8)
    buffered = tf.data.Dataset.from_tensor_slices(x).shuffle(200, seed=1).batch(32)
    by_index = tf.data.Dataset.range(400).map(
        lambda i: tf.gather(x, tf.random.experimental.index_shuffle(i, [1, 0], 399))).batch(32)
    (tmp_path / "a").mkdir(), (tmp_path / "b").mkdir()
    held = iterator_checkpoint_bytes(buffered, tmp_path / "a")
    assert held > 100 * x[0].nbytes / 2, held               # the buffer's images, compressed at most 2:1
    assert iterator_checkpoint_bytes(by_index, tmp_path / "b") < x[0].nbytes < held
