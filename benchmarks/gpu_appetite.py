"""Measure how fast a machine trains the series' models: the figures in helpers/measure/gpu_reference.py.

    python -m benchmarks.gpu_appetite                    # the Keras backend in KERAS_BACKEND (default tensorflow)
    KERAS_BACKEND=jax python -m benchmarks.gpu_appetite  # as helpers/measure/gpu_reference.py was measured (a GPU)
    python -m benchmarks.gpu_appetite --quick            # small sizes: checks the script, not a GPU
    python -m benchmarks.gpu_appetite --json             # one JSON object instead of the table

What it does, so that anyone with a GPU can re-measure: the older article's MNIST MLP
(784-512-10, float32 input) and CIFAR-10 autoencoder, as notebooks 04 and 03 write them (`article_mlp` and
`article_autoencoder`), and notebook 07's photo classifier with its augmentation layers (`photo_classifier`,
96x96x3 float input, 8 classes), all saved into `helpers/lessons/`, trained with `model.fit` from float32 NumPy
arrays already in memory (60,000 MNIST-shaped, 50,000 CIFAR-shaped and 20,000 photo-shaped random arrays: the
speed of these models does not depend on the pixel values), for `--epochs` epochs (default 4) at each batch size.
Each epoch's rate is `helpers.measure`'s steady-state rate (samples after the first step over the
seconds after it); the figure is the median of epochs 2 to the last, with their lowest and highest
as the spread (the first epoch, which compiles, is left out). It needs Keras 3 and NumPy, not
TensorFlow: the reference machine ran JAX.
"""
from __future__ import annotations

import argparse
import ast
import json
import platform
import statistics
import sys
from pathlib import Path

import numpy as np

BATCH_SIZES = {"mnist_mlp": (32, 256, 1024), "cifar_autoencoder": (32, 256), "photo_classifier": (64, 256)}


def device_name() -> str:
    """The accelerator Keras will use, or "CPU", by the backend's own query."""
    import keras

    backend = keras.backend.backend()
    try:
        if backend == "jax":
            import jax

            device = jax.devices()[0]
            return "CPU" if device.platform == "cpu" else device.device_kind
        if backend == "tensorflow":
            import tensorflow as tf

            gpus = tf.config.list_physical_devices("GPU")
            return tf.config.experimental.get_device_details(gpus[0]).get("device_name", "GPU") if gpus else "CPU"
        if backend == "torch":
            import torch

            return torch.cuda.get_device_name(0) if torch.cuda.is_available() else "CPU"
    except Exception as error:  # a device query that fails must not stop the measurement
        return f"unknown ({error})"
    return "unknown"


def lesson_functions(module: str) -> dict:
    """The functions a notebook saved into `helpers/lessons/<module>.py`, defined without importing that module,
    which may import TensorFlow (the reference machine ran JAX, with no TensorFlow installed)."""
    import importlib.util

    import keras

    folder = importlib.util.find_spec("helpers.lessons").submodule_search_locations[0]
    tree = ast.parse(Path(folder, f"{module}.py").read_text(encoding="utf-8"))
    namespace = {"keras": keras, "np": np}
    for node in tree.body:
        if isinstance(node, ast.FunctionDef):
            try:
                exec(compile(ast.Module([node], type_ignores=[]), f"helpers/lessons/{module}.py", "exec"), namespace)
            except NameError:   # a default that names TensorFlow-side code (a pipeline's parse): not a model's
                continue
    return namespace


def model_and_data(model_name: str, n: int):
    """The series' model, compiled, and `n` random in-memory samples of its input (and targets)."""
    import keras

    article_mlp = lesson_functions("tfdata_mnist")["article_mlp"]
    article_autoencoder = lesson_functions("pydataset_autoencoder")["article_autoencoder"]
    photo_classifier = lesson_functions("capstone_photos")["photo_classifier"]
    keras.utils.set_random_seed(0)
    rng = np.random.default_rng(0)
    if model_name == "mnist_mlp":
        return article_mlp(uint8_input=False), rng.random((n, 28, 28), dtype=np.float32), rng.integers(0, 10, n)
    if model_name == "photo_classifier":   # as notebook 07 trains it: augmentation inside, pixels 0-255
        return photo_classifier(augment=True), rng.random((n, 96, 96, 3), dtype=np.float32) * 255, rng.integers(0, 8, n)
    x = rng.random((n, 32, 32, 3), dtype=np.float32)
    return article_autoencoder(), x, x


def measure(model, x, y, model_name: str, batch_size: int, epochs: int) -> dict:
    """Train `epochs` epochs at `batch_size`; the median rate of epochs 2 to the last, with their range.

    The same model serves every batch size (its speed does not depend on its weights); the first
    epoch at each batch size is left out, as it may trace or compile for that size."""
    import keras

    from helpers.measure import EpochClock

    n = len(x)
    clock, rates = EpochClock(), []

    class Record(keras.callbacks.Callback):
        def on_epoch_end(self, epoch, logs=None):
            rates.append(clock.epoch(batch_size, n).rate)

    model.fit(x, y, batch_size=batch_size, epochs=epochs, verbose=0, shuffle=True, callbacks=[clock, Record()])
    steady = rates[1:]
    return {"model": model_name, "batch_size": batch_size, "samples_per_second": round(statistics.median(steady)),
            "low": round(min(steady)), "high": round(max(steady)), "epochs": epochs, "samples": n}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.gpu_appetite", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes: a smoke test of the script")
    parser.add_argument("--epochs", type=int, default=4, help="epochs per measurement; the first is left out")
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    args = parser.parse_args(argv)
    if args.epochs < 2:
        parser.error("--epochs must be at least 2: the first epoch compiles and is left out")
    import keras

    sizes = {"mnist_mlp": 2_048 if args.quick else 60_000, "cifar_autoencoder": 256 if args.quick else 50_000,
             "photo_classifier": 256 if args.quick else 20_000}
    batches = {name: (b[:2] if args.quick else b) for name, b in BATCH_SIZES.items()}
    figures = []
    for name, batch_sizes in batches.items():
        model, x, y = model_and_data(name, sizes[name])
        for batch_size in batch_sizes:
            print(f"measuring {name} at batch {batch_size}…", file=sys.stderr)
            figures.append(measure(model, x, y, name, batch_size, args.epochs))
    report = {"device": device_name(), "backend": keras.backend.backend(), "keras": keras.__version__,
              "python": platform.python_version(), "quick": args.quick, "figures": figures}
    if args.json:
        print(json.dumps(report))
        return 0
    print(f"{report['device']} · Keras {report['keras']} ({report['backend']}) · Python {report['python']}"
          f"{' · QUICK (not a reference figure)' if args.quick else ''}")
    print(f"{'model':<18}{'batch':>6}{'samples/s':>12}{'spread':>22}")
    for f in figures:
        spread = f"{f['low']:,}–{f['high']:,}"
        print(f"{f['model']:<18}{f['batch_size']:>6}{f['samples_per_second']:>12,}{spread:>22}")
    print("\nFor helpers/measure/gpu_reference.py:")
    for name in batches:
        rows = ", ".join(f"GpuFigure({f['batch_size']}, {f['samples_per_second']:_}, {f['low']:_}, {f['high']:_})"
                         for f in figures if f["model"] == name)
        print(f'    "{name}": [{rows}],')
    return 0


if __name__ == "__main__":
    sys.exit(main())
