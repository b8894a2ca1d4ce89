"""MNIST and CIFAR-10 as uint8 arrays: from `data/`, else Keras's loaders (which download once and cache in
`~/.keras/datasets`), else, in quick mode only, a generated stand-in (`helpers.data.standins`), announced in one
line. Instructors fill `data/` ahead of an offline class with `python -m helpers.data.datasets download`.
"""
from __future__ import annotations

import argparse
import contextlib
import hashlib
import inspect
import os
import pickle
import shutil
import sys
import tarfile
import tempfile
import urllib.request
import zipfile
from pathlib import Path

import numpy as np
from tqdm.auto import tqdm

from helpers.data import standins
from helpers.storage.labels import class_labels
from helpers.setup.config import QUICK_ENV, data_dir, quick_mode
from helpers.storage.files import (FileLock, file_problem, is_regular_file, sha256_of, temporaries_of,
                                   write_then_rename)

Arrays = tuple[tuple[np.ndarray, np.ndarray], tuple[np.ndarray, np.ndarray]]

MNIST_FILE = "mnist.npz"
MNIST_URL = "https://storage.googleapis.com/tensorflow/tf-keras-datasets/mnist.npz"
MNIST_SHA256 = "731c5ac602752760c8e48fbffcf8c3b850d9dc2a2aedcf2cc48468fc17b673d1"
MNIST_KEYS = ("x_train", "y_train", "x_test", "y_test")
CIFAR_DIR = "cifar-10-batches-py"
CIFAR_URL = "https://www.cs.toronto.edu/~kriz/cifar-10-python.tar.gz"
CIFAR_SHA256 = "6d958be074577803d12ecdefd02955f39262c83c16fe9348329d7fe0b5c001ce"
CIFAR10_CLASSES = ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship", "truck"]
DISPLAY_NAMES = {"mnist": "MNIST", "cifar10": "CIFAR-10"}
# Stand-ins exist only for quick mode: (train, test) sizes small enough to make in seconds, and what they show.
# Where quick mode keeps the stand-ins it drew, inside the data folder (`_standin`).
STANDIN_FOLDER = "standins"
STANDINS = {"mnist": (12_000, 2_000, "digits drawn from stroke glyphs"),
            "cifar10": (6_000, 1_000, "ten classes of coloured shapes")}
# One image's and one label's shape, as Keras's loaders give them (uint8): what a kept stand-in must hold.
LAYOUTS = {"mnist": ((28, 28), ()), "cifar10": ((32, 32, 3), (1,))}
# What Keras's loaders read in their cache folder (keras.utils.get_file's download target for each dataset).
KERAS_CACHE_FILES = {"mnist": "mnist.npz", "cifar10": "cifar-10-batches-py-target_archive"}
_REFETCH = "Delete it and run `python -m helpers.data.datasets download`, or copy it again."

_sources: dict[str, str] = {}   # where the last load of each dataset came from


class DatasetFileError(ValueError):
    """A dataset file exists but is unreadable or has the wrong contents."""


class DatasetUnavailableError(RuntimeError):
    """No source could provide the dataset."""


def source_of(name: str) -> str:
    """Where the last `load_mnist()` / `load_cifar10()` got its data.

    >>> source_of("no such dataset")
    'not loaded yet'
    """
    return _sources.get(name, "not loaded yet")


def loaded_from(name: str) -> str:
    """`source_of(name)` as the notebooks' sentences say it: 'from <file>', 'from keras download cache (…)', or
    'generated offline' (after `dataset_label`, which already says 'stand-in').

    >>> loaded_from("no such dataset")
    'not loaded yet'
    """
    source = source_of(name)
    if source.startswith("stand-in"):
        return "generated offline"
    return source if source == "not loaded yet" else f"from {source.removeprefix('file ')}"


def dataset_label(name: str) -> str:
    """What to call the data in titles and prose: 'MNIST', or 'MNIST stand-in' after a fallback to generated data.

    >>> dataset_label("mnist") in ("MNIST", "MNIST stand-in")
    True
    """
    label = DISPLAY_NAMES[name]
    return f"{label} stand-in" if source_of(name).startswith("stand-in") else label


def cifar10_class_names() -> list[str]:
    """Names of the ten classes of whatever `load_cifar10()` last returned (real or stand-in)."""
    if source_of("cifar10").startswith("stand-in"):
        return [name for name, _ in standins.CIFAR_LIKE_CLASSES]
    return list(CIFAR10_CLASSES)


def check_labels(labels: np.ndarray, where: str) -> np.ndarray:
    """Labels as a flat uint8 array after checking they are whole numbers from 0 to 9; `DatasetFileError` naming
    `where` if not (a plain `astype(np.uint8)` would turn -1 into 255).

    >>> check_labels(np.array([0, 9]), "here").tolist()
    [0, 9]
    """
    try:
        return class_labels(labels, where, 10).astype(np.uint8)
    except ValueError as e:
        raise DatasetFileError(f"{e} The file is not the real dataset or is damaged.") from None


def _require_file(path: Path, if_missing: str = "") -> None:
    """A FIFO or a folder would hang or fail deep inside numpy: name what is there instead."""
    if (problem := file_problem(path)) is not None:
        advice = if_missing if problem == "missing" else "Replace it with the dataset file."
        raise DatasetFileError(f"{path} is {problem}. {advice}")


def read_mnist_npz(path: Path) -> Arrays:
    """Read an MNIST npz in Keras's layout, checking keys, dtypes, shapes and labels."""
    path = Path(path)
    _require_file(path)
    try:
        loaded, arrays = np.load(path, allow_pickle=False), None
        if isinstance(loaded, np.lib.npyio.NpzFile):
            with loaded:
                arrays = {k: loaded[k] for k in loaded.files}
    except (zipfile.BadZipFile, EOFError, OSError, ValueError) as e:
        raise DatasetFileError(f"{path} is truncated or corrupt and cannot be read as an npz file ({e}). "
                               f"{_REFETCH}") from None
    if arrays is None:
        raise DatasetFileError(f"{path} holds a single .npy array, not an npz archive of {', '.join(MNIST_KEYS)}. "
                               f"{_REFETCH}")
    if missing := [k for k in MNIST_KEYS if k not in arrays]:
        raise DatasetFileError(f"{path} is not an MNIST npz in Keras's layout: it lacks {', '.join(missing)} "
                               f"(it has {', '.join(arrays) or 'no arrays'}).")
    for split in ("train", "test"):
        x, y = arrays[f"x_{split}"], arrays[f"y_{split}"]
        if x.ndim != 3 or x.shape[1:] != (28, 28) or x.dtype != np.uint8:
            raise DatasetFileError(f"{path}: x_{split} should be uint8 images of shape (N, 28, 28), "
                                   f"got {x.dtype} {x.shape}.")
        if y.shape != (len(x),):
            raise DatasetFileError(f"{path}: y_{split} should hold one label per image, shape ({len(x)},), "
                                   f"got {y.shape}.")
        arrays[f"y_{split}"] = check_labels(y, f"{path}, y_{split}")
    return (arrays["x_train"], arrays["y_train"]), (arrays["x_test"], arrays["y_test"])


def _latin1_encode(text: str, encoding: str = "latin1") -> bytes:
    """What pickle protocols 0-2 call to rebuild a bytes object; any other codec is refused."""
    if encoding.lower().replace("-", "") not in ("latin1", "iso88591") or not isinstance(text, str):
        raise pickle.UnpicklingError(f"refusing _codecs.encode with encoding {encoding!r}")
    return text.encode("latin1")


class _NumpyOnlyUnpickler(pickle.Unpickler):
    """Loads numpy arrays, numbers, lists and bytes in any pickle protocol, and refuses anything else, so that a
    bad CIFAR batch cannot run code."""

    allowed = {
        (module, name)
        for package in ("numpy.core", "numpy._core")  # numpy 1.x and 2.x names of the same functions
        for module, name in [(f"{package}.multiarray", "_reconstruct"), (f"{package}.multiarray", "scalar"),
                             (f"{package}.numeric", "_frombuffer")]
    } | {("numpy", "ndarray"), ("numpy", "dtype")}

    def find_class(self, module: str, name: str):
        if (module, name) == ("_codecs", "encode"):  # protocols 0-2 store bytes as latin-1 text
            return _latin1_encode
        if (module, name) in self.allowed:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(f"refusing to load {module}.{name}")


def read_cifar_batch(path: Path) -> tuple[np.ndarray, np.ndarray]:
    """One CIFAR-10 python batch as images (N, 32, 32, 3) uint8 and labels (N,) uint8."""
    path = Path(path)
    _require_file(path, f"The folder {path.parent} should hold data_batch_1 … data_batch_5 and test_batch, "
                        f"as unpacked from cifar-10-python.tar.gz.")
    try:
        with open(path, "rb") as f:
            batch = _NumpyOnlyUnpickler(f, encoding="bytes").load()
        data, labels = np.asarray(batch[b"data"]), np.asarray(batch[b"labels"])
    except Exception as e:  # pickle raises many types on bad bytes; all mean the same here
        raise DatasetFileError(f"{path} is truncated or corrupt and cannot be read as a CIFAR-10 batch "
                               f"({type(e).__name__}: {e}). Unpack cifar-10-python.tar.gz again or run "
                               f"`python -m helpers.data.datasets download`.") from None
    if data.ndim != 2 or data.shape[1] != 3 * 32 * 32 or data.dtype != np.uint8:
        raise DatasetFileError(f"{path}: 'data' should be uint8 rows of 3072 bytes (32x32 RGB), "
                               f"got {data.dtype} {data.shape}.")
    if labels.shape != (len(data),):
        raise DatasetFileError(f"{path}: {len(labels)} labels for {len(data)} images.")
    images = data.reshape(-1, 3, 32, 32).transpose(0, 2, 3, 1)   # stored as all reds, all greens, all blues
    return np.ascontiguousarray(images), check_labels(labels, f"{path}, labels")


def read_cifar_folder(folder: Path) -> Arrays:
    """The whole of `cifar-10-batches-py/` with Keras's shapes (labels as (N, 1))."""
    train = [read_cifar_batch(Path(folder) / f"data_batch_{i}") for i in range(1, 6)]
    x_test, y_test = read_cifar_batch(Path(folder) / "test_batch")
    y_train = np.concatenate([y for _, y in train])
    return (np.concatenate([x for x, _ in train]), y_train[:, None]), (x_test, y_test[:, None])


def keras_cache_problem(name: str) -> str | None:
    """Why Keras's cached download of `name` cannot be read safely, or None. Keras hashes its cached file
    before using it, and a FIFO there would block that read for ever: anything that is not a regular file is
    named, without opening it, and the loader is not called."""
    # Where Keras keeps it: $KERAS_HOME, else ~/.keras, else /tmp/.keras where home is not writable.
    bases = [os.environ.get("KERAS_HOME"), "~/.keras", os.path.join(tempfile.gettempdir(), ".keras")]
    for base in filter(None, bases):
        path = Path(os.path.expanduser(base)) / "datasets" / KERAS_CACHE_FILES[name]
        if os.path.lexists(path) and (problem := file_problem(path)) is not None:
            return f"Keras's cached download {path} is {problem}; remove it so Keras can download again"
    return None


def _load(name: str, local: Path, read_local, make_standin, allow_download: bool) -> Arrays:
    """Try the local file, then `keras.datasets.<name>.load_data`, then (quick mode) a stand-in."""
    if local.exists():
        arrays = read_local(local)
        _sources[name] = f"file {local}"
        return arrays
    reason, tried = "downloads are switched off", False
    if allow_download and (problem := keras_cache_problem(name)) is not None:
        reason = problem
        print(f"{problem[0].upper()}{problem[1:]}.")
    elif allow_download:
        tried = True   # Keras prints "Downloading data from …" before it fails
        try:
            import keras

            arrays = getattr(keras.datasets, name).load_data()
            _sources[name] = "keras download cache (~/.keras/datasets)"
            return arrays
        except Exception as e:  # Keras wraps network errors in a bare Exception
            reason = str(e).splitlines()[0][:200]
    if not quick_mode():
        raise DatasetUnavailableError(
            f"{name} is not available: there is no {local}, and Keras's downloader failed ({reason}).\n"
            f"Three ways out:\n"
            f"  1. connect to the internet and run again (Keras downloads and caches it once);\n"
            f"  2. place the file at {local} (on a connected machine: `python -m helpers.data.datasets download`, "
            f"then copy the data/ folder);\n"
            f"  3. set {QUICK_ENV}=1 to use a small generated stand-in for a quick run.")
    n_train, n_test, what = STANDINS[name]
    print(f"Quick mode: {DISPLAY_NAMES[name]} is not in {local.parent} and "
          f"{'the download above failed' if tried else 'could not be downloaded'}, so this run "
          f"uses a generated stand-in ({n_train:,} train / {n_test:,} test images, {what}); "
          f"accuracies and losses on the real {DISPLAY_NAMES[name]} will differ.")
    _sources[name] = "stand-in (generated)"
    return _standin(name, local.parent, make_standin, n_train, n_test)


def _standin(name: str, folder: Path, make_standin, n_train: int, n_test: int) -> Arrays:
    """The stand-in, drawn once per data folder and kept in `standins/` there: drawing 14,000 digits takes seconds,
    and quick mode's notebooks and their child processes load it about twenty times. The file's name holds a hash
    of the generator's code and the sizes, so a changed generator draws anew; a file that does not read back whole,
    with the generator's shapes and dtypes, is drawn again and replaced. Processes that find it missing at once
    draw it one at a time (a lock in `standins/`): the others then read it. Nothing is read or written through a
    symlink, and where the folder cannot be written, each call draws it."""
    code = inspect.getsource(standins).encode()
    key = hashlib.sha256(code + f"{n_train},{n_test}".encode()).hexdigest()[:12]
    cache = folder / STANDIN_FOLDER
    path = cache / f"{name}-{key}.npz"
    if (arrays := _kept_standin(cache, path, LAYOUTS[name], n_train, n_test)) is not None:
        return arrays
    with contextlib.ExitStack() as held:
        locked = False
        try:
            cache.mkdir(parents=True, exist_ok=True)
            if not cache.is_symlink():
                held.enter_context(FileLock(cache / ".lock", "the stand-in cache", wait=True))
                locked = True
                if (arrays := _kept_standin(cache, path, LAYOUTS[name], n_train, n_test)) is not None:
                    return arrays   # another process drew it while this one waited
                for stale in temporaries_of(path):   # a writer killed mid-write left it: none writes now
                    stale.unlink(missing_ok=True)
        except OSError:
            pass   # a read-only data folder, or something else at standins/: drawn, not kept
        arrays = make_standin(n_train, seed=1), make_standin(n_test, seed=2)
        # Kept only by the lock's holder, and never over a symlink or a folder at the file's name.
        if locked and not path.is_symlink() and (not path.exists() or is_regular_file(path)):
            try:
                with write_then_rename(path, durable=False) as tmp, open(tmp, "wb") as f:
                    np.savez(f, x_train=arrays[0][0], y_train=arrays[0][1], x_test=arrays[1][0],
                             y_test=arrays[1][1])
            except OSError:
                pass   # a full disk: drawn on every call
    return arrays


def _kept_standin(cache: Path, path: Path, layout, n_train: int, n_test: int) -> Arrays | None:
    """The kept stand-in at `path`, or None if there is none, or it is cut short, damaged, reached through a
    symlink, or holds other arrays than a stand-in of these sizes: uint8 images and labels 0-9 of `layout`'s
    shapes."""
    if cache.is_symlink() or path.is_symlink() or not is_regular_file(path):
        return None
    try:
        with np.load(path, allow_pickle=False) as f:
            arrays = (f["x_train"], f["y_train"]), (f["x_test"], f["y_test"])
    except Exception:   # cut short or damaged
        return None
    image, label = layout
    for (x, y), n in zip(arrays, (n_train, n_test)):
        if (x.dtype != np.uint8 or y.dtype != np.uint8 or x.shape != (n, *image) or y.shape != (n, *label)
                or (n and y.max() > 9)):
            return None
    return arrays


def load_mnist(data_dir_override: Path | None = None, allow_download: bool = True) -> Arrays:
    """MNIST as `(x_train, y_train), (x_test, y_test)`: uint8, images (N, 28, 28), labels (N,)."""
    local = Path(data_dir_override or data_dir()) / MNIST_FILE
    return _load("mnist", local, read_mnist_npz, standins.make_digits, allow_download)


def load_cifar10(data_dir_override: Path | None = None, allow_download: bool = True) -> Arrays:
    """CIFAR-10 as `(x_train, y_train), (x_test, y_test)`: uint8, images (N, 32, 32, 3), labels (N, 1)."""
    local = Path(data_dir_override or data_dir()) / CIFAR_DIR
    return _load("cifar10", local, read_cifar_folder, standins.make_cifar_like, allow_download)


def fetch(url: str, dest: Path, sha256: str, chunk: int = 1 << 16) -> Path:
    """Download `url` to `dest` with a progress bar and verify its SHA-256. Nothing partial is left behind, under
    any name, when the download fails, is interrupted or does not match (`DatasetFileError`)."""
    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    with write_then_rename(dest) as partial:
        with urllib.request.urlopen(url, timeout=60) as response, open(partial, "wb") as out:
            total = int(response.headers.get("Content-Length") or 0) or None
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name) as bar:
                while block := response.read(chunk):
                    out.write(block)
                    bar.update(len(block))
        if (actual := sha256_of(partial)) != sha256:
            raise DatasetFileError(f"{url} downloaded with SHA-256 {actual}, expected {sha256}: the download is "
                                   f"corrupt or the file changed upstream. Nothing was kept; try again.")
    return dest


def _download(dest: Path, read, get) -> Path:
    """`get(dest)` unless something is there already; then check that `read` reads it."""
    there = dest.exists()
    if not there:
        get(dest)
    read(dest)
    if there:
        print(f"{dest} is already there and readable.")
    return dest


def download_mnist(target: Path, url: str = MNIST_URL, sha256: str = MNIST_SHA256) -> Path:
    """Put a verified `mnist.npz` in `target` (skipped when a readable one is there)."""
    return _download(Path(target) / MNIST_FILE, read_mnist_npz, lambda dest: fetch(url, dest, sha256))


def download_cifar10(target: Path, url: str = CIFAR_URL, sha256: str = CIFAR_SHA256) -> Path:
    """Put a verified, unpacked `cifar-10-batches-py/` in `target` (skipped when a readable one is there)."""
    def get(folder: Path) -> None:
        with tempfile.TemporaryDirectory(dir=folder.parent, prefix=".cifar-download-") as tmp:
            archive = fetch(url, Path(tmp) / "cifar-10-python.tar.gz", sha256)
            with tarfile.open(archive) as tar:
                tar.extractall(tmp, filter="data")
            read_cifar_folder(Path(tmp) / CIFAR_DIR)  # check before it takes the final name
            shutil.move(str(Path(tmp) / CIFAR_DIR), folder)

    return _download(Path(target) / CIFAR_DIR, read_cifar_folder, get)


def main(argv: list[str] | None = None) -> int:
    """`python -m helpers.data.datasets download`: fill data/ for an offline classroom."""
    parser = argparse.ArgumentParser(prog="python -m helpers.data.datasets",
                                     description="Fetch the real datasets into the data directory, for offline classrooms.")
    get = parser.add_subparsers(dest="command", required=True).add_parser(
        "download", help="download and verify MNIST and CIFAR-10 into data/")
    get.add_argument("--data-dir", type=Path, default=None, help="default: data/ or $TUTORIAL_DATA_DIR")
    get.add_argument("--only", choices=["mnist", "cifar10"], default=None)
    args = parser.parse_args(argv)
    target = args.data_dir or data_dir()
    target.mkdir(parents=True, exist_ok=True)
    try:
        if args.only in (None, "mnist"):
            print("MNIST ->", download_mnist(target))
        if args.only in (None, "cifar10"):
            print("CIFAR-10 ->", download_cifar10(target))
    except (OSError, DatasetFileError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
