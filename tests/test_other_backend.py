"""The same training on another Keras backend in a child process (helpers/training_runs/other_backend.py,
notebook 08 §5)."""
import importlib.util

import numpy as np
import pytest

from helpers.training_runs.other_backend import BackendRun
from helpers.storage.array_record import array_record_source, write_array_records

N, STEPS, BATCH = 256, 3, 64


def test_a_jax_child_trains_the_same_losses_as_tensorflow(tmp_path):
    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed (the [jax] extra)")
    import keras

    from helpers.lessons.resume_shuffle_grain import backend_loaders, losses_from
    from helpers.lessons.tfdata_mnist import article_mlp
    from helpers.training_runs.killed_run import training_data

    x, y = training_data(N)
    write_array_records(x, y, tmp_path / "ar", "train", 2, num_classes=10)
    keras.utils.set_random_seed(0)
    article_mlp().save_weights(tmp_path / "initial.weights.h5")
    run = BackendRun("jax", gpu=False)
    run.train(tmp_path / "jax", tmp_path / "ar", tmp_path / "initial.weights.h5", n=N, steps=STEPS, batch_size=BATCH,
              rounds=1)
    source, info = array_record_source(tmp_path / "ar", "train")
    loaders = backend_loaders(x, y, source, tuple(info.image_shape), info.image_dtype, BATCH)
    here = {name: losses_from(article_mlp(), tmp_path / "initial.weights.h5", make(), STEPS)
            for name, make in loaders.items()}
    run.wait_ready()
    result = run.measure()
    assert result["backend"] == "jax" and run.process.returncode == 0
    assert result["losses"]["tf.data"] == result["losses"]["Grain"] and len(result["losses"]["Grain"]) == STEPS
    for name in loaders:
        assert np.allclose(result["losses"][name], here[name], rtol=1e-5, atol=0), (name, result["losses"], here)
    assert all(s == N for samples in result["samples"].values() for s in samples)
    assert len(result["rates"]["Grain"]) == 1 and (tmp_path / "jax" / result["weights"]).is_file()


def test_a_child_that_fails_is_reported_with_its_last_words(tmp_path):
    run = BackendRun("no-such-backend", gpu=False, timeout=120)
    with pytest.raises(RuntimeError, match="stopped before it was ready"):
        run.wait_ready()
    assert run.process.returncode != 0
