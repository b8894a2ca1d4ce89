"""The setup every notebook runs first: quiet TensorFlow, seeds, the branch, then what this run is using."""
from __future__ import annotations

import contextlib
import os
import platform
import sys
import warnings

from helpers.setup.accelerator import Accelerator, configure


@contextlib.contextmanager
def stderr_to_devnull():
    """Hide what C++ libraries write to file descriptor 2 (Python's own errors still raise)."""
    devnull, saved = os.open(os.devnull, os.O_WRONLY), os.dup(2)
    os.dup2(devnull, 2)
    try:
        yield
    finally:
        os.dup2(saved, 2)
        os.close(saved)
        os.close(devnull)


_BRANCH = None   # the Accelerator that start() configured


@contextlib.contextmanager
def jax_skipped():
    """Inside the block, `import jax` fails as if JAX were not installed; after it, JAX imports as usual.
    TensorFlow's import loads JAX when it is installed (for tf.lite's converter, which the series never uses):
    0.5-1 s of every notebook's start here. The notebooks run JAX only in child processes (notebook 08). What
    imported inside the block keeps its "no JAX" (tf.lite's `experimental_from_jax` then fails, in this process)."""
    skipped = "jax" not in sys.modules
    if skipped:
        sys.modules["jax"] = None   # None in sys.modules: an import of it raises ImportError
    try:
        yield
    finally:
        if skipped and "jax" in sys.modules and sys.modules["jax"] is None:
            del sys.modules["jax"]


def start(seed: int = 42, cpu_devices: int = 1):
    """Silence TensorFlow's start-up log, seed everything, choose the branch (`helpers.setup.accelerator`),
    print versions, devices and mode, and return `(tf, keras)`. `cpu_devices` splits a GPU-less CPU into that
    many logical devices.

    >>> tf, keras = start()   # doctest: +SKIP
    TensorFlow 2.21.0 · Keras 3.15.1 · Python 3.11.7
    devices: the CPU branch (1 device: no GPU found) · cores: 2
    quick mode: on (TUTORIAL_QUICK=1: small sizes) · data directory: /…/data
    """
    global _BRANCH
    # TF_CPP_MIN_LOG_LEVEL=3 quiets the runtime once loaded; the lines printed while its libraries load
    # ignore it, so the import and the first device query run with C-level stderr sent to /dev/null.
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    with stderr_to_devnull(), jax_skipped():
        import tensorflow as tf
        import keras

        _BRANCH = configure(tf, cpu_devices)
    from helpers.setup.config import data_dir, quick_mode

    tf.get_logger().setLevel("ERROR")
    # True and expected: a tf.data.Dataset shuffles itself, so fit(shuffle=True) is ignored for one.
    warnings.filterwarnings("ignore", message=r"`shuffle=True` was passed, but will be ignored")
    keras.utils.set_random_seed(seed)
    print(
        f"TensorFlow {tf.__version__} · Keras {keras.__version__} · Python {platform.python_version()}\n"
        f"devices: {_BRANCH} · cores: {os.cpu_count()}\n"
        f"quick mode: {'on (TUTORIAL_QUICK=1: small sizes)' if quick_mode() else 'off (full run)'}"
        f" · data directory: {data_dir()}"
    )
    return tf, keras


def branch() -> Accelerator:
    """The branch `start()` chose: `.on_gpu`, `.gpus`, `.pick(cpu=..., gpu=...)`, `.precision`, `.strategy()`."""
    if _BRANCH is None:
        raise RuntimeError("call helpers.setup.notebook.start() first: it chooses the branch before TensorFlow runs")
    return _BRANCH
