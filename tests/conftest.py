"""Fixtures shared by the unit tests."""
import pickle

import numpy as np
import pytest


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
