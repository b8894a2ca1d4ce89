"""Fixtures and small helpers shared by the unit tests."""
import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

ROOT = Path(__file__).resolve().parent.parent
# Smoke files run after a notebook's pasted lesson code (tests/test_lesson_code.py), never on their own: importing one
# (as --doctest-modules would) fails on the names the pasted code defines.
collect_ignore = ["lesson_smoke"]


@pytest.fixture
def data_dir(tmp_path, monkeypatch):
    """An empty data directory that the helpers use instead of data/."""
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(tmp_path))
    return tmp_path


@pytest.fixture
def offline(monkeypatch):
    """Make Keras's dataset downloads fail as they do with no network, on any machine."""
    import keras

    def no_network(*args, **kwargs):
        raise Exception("URL fetch failure on https://example.invalid: no network in this test")

    monkeypatch.setattr(keras.datasets.mnist, "load_data", no_network)
    monkeypatch.setattr(keras.datasets.cifar10, "load_data", no_network)


def write_small_mnist_npz(path, n_train=20, n_test=10, seed=0):
    rng = np.random.default_rng(seed)
    arrays = {
        "x_train": rng.integers(0, 256, (n_train, 28, 28), dtype=np.uint8),
        "y_train": rng.integers(0, 10, n_train, dtype=np.uint8),
        "x_test": rng.integers(0, 256, (n_test, 28, 28), dtype=np.uint8),
        "y_test": rng.integers(0, 10, n_test, dtype=np.uint8),
    }
    np.savez_compressed(path, **arrays)
    return arrays


def write_small_cifar_folder(folder, per_batch=6, seed=0):
    """A cifar-10-batches-py/ folder in the original pickle format, with few images per batch."""
    rng = np.random.default_rng(seed)
    folder.mkdir(parents=True, exist_ok=True)
    written = {}
    for name in [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]:
        data = rng.integers(0, 256, (per_batch, 3072), dtype=np.uint8)
        labels = [int(v) for v in rng.integers(0, 10, per_batch)]
        with open(folder / name, "wb") as f:
            pickle.dump({b"data": data, b"labels": labels, b"batch_label": name.encode()}, f)
        written[name] = (data, labels)
    return written


def finishes_within(seconds: float, function):
    """Run `function` in a daemon thread; fail if it has not returned in time (a hang or a spin)."""
    result: dict = {}

    def target():
        try:
            result["value"] = function()
        except BaseException as e:  # noqa: BLE001 -- handed to the caller
            result["error"] = e

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(seconds)
    assert not thread.is_alive(), f"still running after {seconds} s: it hangs"
    if "error" in result:
        raise result["error"]
    return result.get("value")


def small_split(directory, n=40, num_shards=4, value=None, **kwargs):
    from helpers.storage import tfrecord as T

    images = (np.arange(n * 16, dtype=np.uint8).reshape(n, 4, 4) if value is None
              else np.full((n, 4, 4), value, np.uint8))
    return T.write_shards(zip(images, range(n)), directory, "train", num_shards, total=n, progress=False, **kwargs)


def small_split_named(directory, split):
    from helpers.storage import tfrecord as T

    return T.write_shards(zip(np.zeros((2, 2), np.uint8), range(2)), directory, split, 1, total=2, progress=False)


def edit_manifest(directory, change):
    path = Path(directory) / "manifest.json"
    doc = json.loads(path.read_text())
    change(doc["splits"]["train"])
    path.write_text(json.dumps(doc))


def png_folder(folder, n=6):
    from helpers.storage import png_folder as P

    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, n)
    P.export_png_folder(images, labels, folder, "tr", progress=False)
    return images, labels


def run_python(code: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"},
                          **kwargs)


def jpeg_file(path: Path, size=(40, 30), colour=(200, 30, 30), **save) -> Path:
    Image.new("RGB", size, colour).save(path, "JPEG", **save)
    return path
