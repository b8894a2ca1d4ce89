"""benchmarks/gpu_appetite.py, the script that measured the reference GPU (helpers/measure/gpu_reference.py): it
measures every model at each batch size, and it runs on another Keras backend with TensorFlow absent, as it did on
the reference machine (JAX, no TensorFlow installed)."""
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
# The script measured on this CPU and on JAX (40 s): .ci/run runs these apart, `pytest -m bench`.
pytestmark = pytest.mark.bench


def test_the_gpu_appetite_script_measures_every_model_at_each_batch_size():
    # In a process of its own, as it is run: inside this test process, after the tests before it, the same
    # training ran 4 to 7 times slower (34-65 s against 9 s alone), a state of this process it should not depend on.
    out = subprocess.run([sys.executable, "-m", "benchmarks.gpu_appetite", "--quick", "--epochs", "2", "--json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600,
                         env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["device"] and report["backend"] == "tensorflow" and report["quick"] is True
    measured = {(f["model"], f["batch_size"]) for f in report["figures"]}
    assert measured == {("mnist_mlp", 32), ("mnist_mlp", 256), ("cifar_autoencoder", 32), ("cifar_autoencoder", 256),
                        ("photo_classifier", 64), ("photo_classifier", 256)}
    for f in report["figures"]:
        assert f["low"] > 0, f   # (low <= median <= high holds for any numbers: not checked)
    rate = {(f["model"], f["batch_size"]): f["samples_per_second"] for f in report["figures"]}
    assert rate["mnist_mlp", 256] > rate["mnist_mlp", 32]            # larger batches train more samples/s
    assert rate["mnist_mlp", 32] > rate["cifar_autoencoder", 32]     # the MLP is far lighter than the autoencoder


# A child where `import tensorflow` fails, as on a machine without it: every model is built and trained two epochs on
# a few samples (the whole --quick run takes minutes on JAX's CPU), and TensorFlow must never have been imported.
WITHOUT_TENSORFLOW = textwrap.dedent("""
    import json, sys

    class NoTensorFlow:
        def find_spec(self, name, path=None, target=None):
            if name == "tensorflow" or name.startswith("tensorflow."):
                raise ImportError(f"{name}: not installed on this machine (blocked by the test)")

    sys.meta_path.insert(0, NoTensorFlow())
    from benchmarks import gpu_appetite

    figures = []
    for name, batches in gpu_appetite.BATCH_SIZES.items():
        model, x, y = gpu_appetite.model_and_data(name, 2 * batches[0])
        figures.append(gpu_appetite.measure(model, x, y, name, batches[0], epochs=2))
    import keras

    print(json.dumps({"backend": keras.backend.backend(), "device": gpu_appetite.device_name(), "figures": figures,
                      "tensorflow": sorted(m for m in sys.modules if m.split(".")[0] == "tensorflow")}))
""")


def test_the_gpu_appetite_script_runs_on_jax_without_tensorflow():
    if importlib.util.find_spec("jax") is None:
        pytest.skip("JAX is not installed (the [jax] extra)")
    out = subprocess.run([sys.executable, "-c", WITHOUT_TENSORFLOW], cwd=ROOT, capture_output=True, text=True,
                         timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT), "KERAS_BACKEND": "jax",
                                           "JAX_PLATFORMS": "cpu"})
    assert out.returncode == 0, out.stderr[-3000:]
    report = json.loads(out.stdout.splitlines()[-1])
    assert report["backend"] == "jax" and report["tensorflow"] == [] and report["device"] == "CPU"
    assert [f["model"] for f in report["figures"]] == ["mnist_mlp", "cifar_autoencoder", "photo_classifier"]
    assert all(f["samples_per_second"] > 0 for f in report["figures"]), report["figures"]
