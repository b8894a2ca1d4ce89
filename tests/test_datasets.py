import errno
import os
import pickle
import signal
import subprocess
import sys
import tarfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

from helpers.data import datasets, standins
from helpers.storage.files import sha256_of
from helpers.data.datasets import DatasetFileError, DatasetUnavailableError, load_cifar10, load_mnist
from tests.conftest import run_python, write_small_cifar_folder, write_small_mnist_npz


# ---------------------------------------------------------------- MNIST from data/


def test_small_npz_in_data_dir_loads_without_network(data_dir, monkeypatch):
    arrays = write_small_mnist_npz(data_dir / "mnist.npz")

    def must_not_download(*a, **k):
        raise AssertionError("a local file must be used before any download")

    import keras

    monkeypatch.setattr(keras.datasets.mnist, "load_data", must_not_download)
    (x_train, y_train), (x_test, y_test) = load_mnist()
    assert np.array_equal(x_train, arrays["x_train"]) and np.array_equal(y_test, arrays["y_test"])
    assert x_train.dtype == np.uint8 and y_train.dtype == np.uint8
    assert x_test.shape == (10, 28, 28) and y_train.shape == (20,)
    assert datasets.source_of("mnist") == f"file {data_dir / 'mnist.npz'}"


def test_corrupt_npz_names_the_file(data_dir):
    (data_dir / "mnist.npz").write_bytes(b"this is not a zip file at all")
    with pytest.raises(DatasetFileError) as err:
        load_mnist()
    assert str(data_dir / "mnist.npz") in str(err.value)
    assert "corrupt" in str(err.value)


def test_truncated_npz_names_the_file(data_dir):
    write_small_mnist_npz(data_dir / "mnist.npz")
    raw = (data_dir / "mnist.npz").read_bytes()
    (data_dir / "mnist.npz").write_bytes(raw[: len(raw) // 2])
    with pytest.raises(DatasetFileError, match="truncated or corrupt") as err:
        load_mnist()
    assert "mnist.npz" in str(err.value)


def test_npz_with_wrong_layout_says_what_is_missing(data_dir):
    np.savez(data_dir / "mnist.npz", images=np.zeros((3, 28, 28), np.uint8))
    with pytest.raises(DatasetFileError, match="lacks x_train, y_train, x_test, y_test"):
        load_mnist()


def test_npz_with_wrong_image_shape_is_refused(data_dir):
    np.savez(
        data_dir / "mnist.npz",
        x_train=np.zeros((3, 32, 32), np.uint8), y_train=np.zeros(3, np.uint8),
        x_test=np.zeros((2, 28, 28), np.uint8), y_test=np.zeros(2, np.uint8),
    )
    with pytest.raises(DatasetFileError, match=r"x_train should be uint8 images of shape \(N, 28, 28\)"):
        load_mnist()


# ---------------------------------------------------------------- no source at all


def test_no_source_outside_quick_mode_gives_the_three_ways_out(data_dir, offline, monkeypatch):
    monkeypatch.setenv("TUTORIAL_QUICK", "0")
    with pytest.raises(DatasetUnavailableError) as err:
        load_mnist()
    message = str(err.value)
    assert str(data_dir / "mnist.npz") in message
    assert "connect to the internet" in message
    assert "python -m helpers.data.datasets download" in message
    assert "TUTORIAL_QUICK=1" in message
    assert "no network in this test" in message  # the downloader's reason is passed on


def test_quick_mode_falls_back_to_a_stand_in_and_says_so(data_dir, offline, monkeypatch, capsys):
    monkeypatch.setenv("TUTORIAL_QUICK", "1")
    (x_train, y_train), (x_test, y_test) = load_mnist()
    out = capsys.readouterr().out
    # One clean sentence: what happened, what is used instead, what that means; no raw network error.
    assert out.count("\n") == 1 and "uses a generated stand-in" in out and "will differ" in out
    assert "no network in this test" not in out
    assert x_train.shape[1:] == (28, 28) and x_train.dtype == np.uint8
    assert set(np.unique(y_train)) == set(range(10))
    assert datasets.source_of("mnist") == "stand-in (generated)"
    assert datasets.dataset_label("mnist") == "MNIST stand-in"

    (cx_train, cy_train), (cx_test, cy_test) = load_cifar10()
    assert datasets.cifar10_class_names()[0] == "disk"  # the stand-in's own classes, not CIFAR's
    assert cx_train.shape[1:] == (32, 32, 3) and cy_train.shape == (len(cx_train), 1)
    assert cx_test.dtype == np.uint8 and cy_test.dtype == np.uint8


def test_keras_loader_is_used_when_there_is_no_local_file(data_dir, monkeypatch):
    import keras

    fake = ((np.zeros((2, 28, 28), np.uint8), np.zeros(2, np.uint8)), (np.zeros((1, 28, 28), np.uint8), np.zeros(1, np.uint8)))
    monkeypatch.setattr(keras.datasets.mnist, "load_data", lambda: fake)
    assert load_mnist() is fake
    assert datasets.source_of("mnist").startswith("keras")


# ---------------------------------------------------------------- CIFAR-10 from data/


def test_cifar_folder_loads_with_keras_shapes(data_dir, offline):
    written = write_small_cifar_folder(data_dir / "cifar-10-batches-py")
    (x_train, y_train), (x_test, y_test) = load_cifar10()
    assert x_train.shape == (30, 32, 32, 3) and y_train.shape == (30, 1)
    assert x_test.shape == (6, 32, 32, 3) and y_test.shape == (6, 1)
    # Channels-last: pixel (row 0, col 1) of image 0 takes bytes 1, 1025 and 2049 of its row.
    row = written["data_batch_1"][0][0]
    assert list(x_train[0, 0, 1]) == [row[1], row[1025], row[2049]]
    assert y_test[:, 0].tolist() == written["test_batch"][1]
    assert datasets.cifar10_class_names()[0] == "airplane"


def test_missing_cifar_batch_is_named(data_dir, offline):
    write_small_cifar_folder(data_dir / "cifar-10-batches-py")
    (data_dir / "cifar-10-batches-py" / "data_batch_3").unlink()
    with pytest.raises(DatasetFileError, match="data_batch_3 is missing"):
        load_cifar10()


def test_corrupt_cifar_batch_is_named(data_dir, offline):
    write_small_cifar_folder(data_dir / "cifar-10-batches-py")
    path = data_dir / "cifar-10-batches-py" / "test_batch"
    path.write_bytes(path.read_bytes()[:100])
    with pytest.raises(DatasetFileError) as err:
        load_cifar10()
    assert str(path) in str(err.value) and "truncated or corrupt" in str(err.value)


def test_cifar_batch_that_tries_to_run_code_is_refused(data_dir, offline):
    write_small_cifar_folder(data_dir / "cifar-10-batches-py")

    class Evil:
        def __reduce__(self):
            return (print, ("pwned",))

    with open(data_dir / "cifar-10-batches-py" / "test_batch", "wb") as f:
        pickle.dump({b"data": Evil(), b"labels": []}, f)
    with pytest.raises(DatasetFileError, match="refusing to load builtins.print"):
        load_cifar10()


# ---------------------------------------------------------------- download for offline rooms


def test_fetch_verifies_the_checksum_and_keeps_nothing_on_mismatch(tmp_path):
    source = tmp_path / "source.bin"
    source.write_bytes(b"x" * 100_000)
    good = sha256_of(source)
    dest = datasets.fetch(source.as_uri(), tmp_path / "out" / "copy.bin", good)
    assert dest.read_bytes() == source.read_bytes()

    with pytest.raises(DatasetFileError, match="expected 0000"):
        datasets.fetch(source.as_uri(), tmp_path / "out" / "bad.bin", "0" * 64)
    assert sorted(p.name for p in (tmp_path / "out").iterdir()) == ["copy.bin"]


def test_download_mnist_and_cifar_from_local_urls(tmp_path):
    origin = tmp_path / "origin"
    origin.mkdir()
    write_small_mnist_npz(origin / "mnist.npz")
    write_small_cifar_folder(origin / "cifar-10-batches-py")
    archive = origin / "cifar-10-python.tar.gz"
    with tarfile.open(archive, "w:gz") as tar:
        tar.add(origin / "cifar-10-batches-py", arcname="cifar-10-batches-py")

    target = tmp_path / "data"
    target.mkdir()
    datasets.download_mnist(target, (origin / "mnist.npz").as_uri(), sha256_of(origin / "mnist.npz"))
    datasets.download_cifar10(target, archive.as_uri(), sha256_of(archive))
    (x_train, _), _ = load_mnist(target, allow_download=False)
    (cx_train, _), _ = load_cifar10(target, allow_download=False)
    assert x_train.shape == (20, 28, 28) and cx_train.shape == (30, 32, 32, 3)
    # Only the finished dataset is left behind: no archive, no temporary folder.
    assert sorted(p.name for p in target.iterdir()) == ["cifar-10-batches-py", "mnist.npz"]


def test_download_command_reports_errors_without_a_traceback(tmp_path, monkeypatch, capsys):
    def refuse(*a, **k):
        raise OSError("Name or service not known")

    monkeypatch.setattr(datasets.urllib.request, "urlopen", refuse)
    assert datasets.main(["download", "--data-dir", str(tmp_path), "--only", "mnist"]) == 1
    assert "error: Name or service not known" in capsys.readouterr().err


def test_a_stand_in_is_drawn_once_per_data_folder_and_a_damaged_copy_is_drawn_again(data_dir, offline, monkeypatch):
    monkeypatch.setenv("TUTORIAL_QUICK", "1")
    monkeypatch.setitem(datasets.STANDINS, "mnist", (30, 10, "digits drawn from stroke glyphs"))
    drawn = []
    real = standins.make_digits
    monkeypatch.setattr(standins, "make_digits", lambda n, seed=0: drawn.append(n) or real(n, seed=seed))
    first = load_mnist()
    again = load_mnist()
    assert drawn == [30, 10]                                  # the second call read the kept copy
    for a, b in zip(first, again):
        assert np.array_equal(a[0], b[0]) and np.array_equal(a[1], b[1])
    [kept] = (data_dir / datasets.STANDIN_FOLDER).glob("*.npz")
    kept.write_bytes(kept.read_bytes()[:100])                 # cut short
    damaged = load_mnist()
    assert drawn == [30, 10, 30, 10] and np.array_equal(damaged[0][0], first[0][0])
    assert load_mnist()[0][0].shape == (30, 28, 28) and drawn == [30, 10, 30, 10]   # replaced whole


def test_a_symlink_where_the_stand_in_is_kept_is_neither_followed_nor_replaced(data_dir, offline, monkeypatch,
                                                                               tmp_path_factory):
    monkeypatch.setenv("TUTORIAL_QUICK", "1")
    monkeypatch.setitem(datasets.STANDINS, "mnist", (20, 10, "digits drawn from stroke glyphs"))
    load_mnist()
    [kept] = (data_dir / datasets.STANDIN_FOLDER).glob("*.npz")
    elsewhere = tmp_path_factory.mktemp("elsewhere") / "target.npz"
    elsewhere.write_bytes(b"not yours")
    kept.unlink()
    kept.symlink_to(elsewhere)
    (x, _), _ = load_mnist()
    assert x.shape == (20, 28, 28)                       # drawn again, not read through the link
    assert kept.is_symlink() and elsewhere.read_bytes() == b"not yours"   # the link and its target untouched


def _counting(drawn, pause=0.0):
    """`standins.make_digits` that records each draw's size (and takes `pause` seconds longer)."""
    real = standins.make_digits

    def draw(n, seed=0):
        drawn.append(n)
        time.sleep(pause)
        return real(n, seed=seed)
    return draw


def test_two_processes_finding_no_stand_in_draw_it_once(data_dir, monkeypatch):
    # Two at once (threads here: each opens the lock file for itself, as two processes would, so the
    # lock on it is taken by one at a time). Before the lock, both drew and both wrote.
    drawn = []
    draw = _counting(drawn, pause=0.3)
    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: datasets._standin("mnist", data_dir, draw, 30, 10), range(2)))
    assert sorted(drawn) == [10, 30]                                  # drawn once, read once
    assert all(np.array_equal(a[0][0], results[0][0][0]) for a in results)
    assert [p.name for p in (data_dir / datasets.STANDIN_FOLDER).glob("*.npz*")] == [
        next((data_dir / datasets.STANDIN_FOLDER).glob("*.npz")).name]   # one file, no leftovers


KILLED_WRITER = """
import os, signal, sys
from pathlib import Path
import numpy as np
from helpers.data import datasets, standins
def half_then_killed(file, **arrays):   # a writer killed half-way through the file
    file.write(b"PK" + bytes(5000)); file.flush(); os.kill(os.getpid(), signal.SIGKILL)
np.savez = half_then_killed
datasets._standin("mnist", Path(sys.argv[1]), standins.make_digits, 30, 10)
"""


def test_a_writer_killed_mid_file_leaves_no_half_file_and_the_next_load_clears_its_leftover(data_dir):
    run = subprocess.run([sys.executable, "-c", KILLED_WRITER, str(data_dir)], cwd=Path(__file__).parents[1],
                         env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[1])})
    assert run.returncode == -signal.SIGKILL
    cache = data_dir / datasets.STANDIN_FOLDER
    [leftover] = cache.glob("*.partial")                               # its temporary file, not a final name
    assert not list(cache.glob("*.npz"))
    other = cache / f"cifar10-{'0' * 12}.npz.0123abcd.partial"         # another name's: not this load's
    other.write_bytes(b"")
    drawn = []
    (x, _), _ = datasets._standin("mnist", data_dir, _counting(drawn), 30, 10)
    assert drawn == [30, 10] and x.shape == (30, 28, 28)
    assert not leftover.exists() and other.exists()
    assert datasets._standin("mnist", data_dir, _counting(drawn), 30, 10)[0][0].shape == (30, 28, 28)
    assert drawn == [30, 10]                                            # kept whole, read back


@pytest.mark.parametrize("planted", ["float images", "CIFAR's shape", "labels past 9", "fewer labels"])
def test_a_file_of_the_stand_ins_name_holding_other_arrays_is_drawn_again(data_dir, planted):
    drawn = []
    first = datasets._standin("mnist", data_dir, _counting(drawn), 30, 10)
    [kept] = (data_dir / datasets.STANDIN_FOLDER).glob("*.npz")
    arrays = {"x_train": first[0][0], "y_train": first[0][1], "x_test": first[1][0], "y_test": first[1][1]}
    arrays.update({"float images": {"x_train": first[0][0].astype(np.float32)},
                   "CIFAR's shape": {"x_train": np.zeros((30, 32, 32, 3), np.uint8)},
                   "labels past 9": {"y_test": np.full(10, 200, np.uint8)},
                   "fewer labels": {"y_train": first[0][1][:20]}}[planted])
    np.savez(kept, **arrays)
    (x, y), (_, y_test) = datasets._standin("mnist", data_dir, _counting(drawn), 30, 10)
    assert drawn == [30, 10, 30, 10]
    assert x.dtype == np.uint8 and x.shape == (30, 28, 28) and y.shape == (30,) and y_test.max() <= 9
    with np.load(kept) as f:                                           # and replaced by the stand-in
        assert np.array_equal(f["x_train"], first[0][0]) and np.array_equal(f["y_train"], first[0][1])


@pytest.mark.parametrize("planted", ["a symlink to a folder", "a file", "a folder at the file's name"])
def test_something_planted_at_the_cache_is_neither_followed_nor_replaced(data_dir, tmp_path_factory, planted):
    cache = data_dir / datasets.STANDIN_FOLDER
    elsewhere = tmp_path_factory.mktemp("elsewhere")
    if planted == "a symlink to a folder":
        datasets._standin("mnist", elsewhere, standins.make_digits, 30, 10)   # a valid stand-in over there
        cache.symlink_to(elsewhere / datasets.STANDIN_FOLDER)
    elif planted == "a file":
        cache.write_bytes(b"mine")
    else:   # a folder where the stand-in's file would be
        datasets._standin("mnist", elsewhere, standins.make_digits, 30, 10)
        [name] = (p.name for p in (elsewhere / datasets.STANDIN_FOLDER).glob("*.npz"))
        (cache / name).mkdir(parents=True)
    before = sorted((p.name, p.stat().st_mtime_ns) for p in elsewhere.rglob("*"))
    drawn = []
    for _ in range(2):
        (x, _), _ = datasets._standin("mnist", data_dir, _counting(drawn), 30, 10)
        assert x.shape == (30, 28, 28)
    assert drawn == [30, 10, 30, 10]                                   # drawn each time, nothing kept
    assert sorted((p.name, p.stat().st_mtime_ns) for p in elsewhere.rglob("*")) == before
    if planted == "a symlink to a folder":
        assert cache.is_symlink()
    elif planted == "a file":
        assert cache.read_bytes() == b"mine"
    else:
        assert [p.name for p in cache.iterdir() if p.name != ".lock"] == [name] and (cache / name).is_dir()


def test_a_read_only_data_folder_draws_the_stand_in_on_each_call(data_dir, monkeypatch):
    # As root no folder is read-only, so the refusal is the file system's, played here.
    real_mkdir = Path.mkdir

    def read_only(self, *args, **kwargs):
        if self.parent == data_dir:
            raise OSError(errno.EROFS, "Read-only file system", str(self))
        return real_mkdir(self, *args, **kwargs)

    monkeypatch.setattr(Path, "mkdir", read_only)
    drawn = []
    for _ in range(2):
        assert datasets._standin("mnist", data_dir, _counting(drawn), 30, 10)[0][0].shape == (30, 28, 28)
    assert drawn == [30, 10, 30, 10] and list(data_dir.iterdir()) == []


def test_a_data_folder_named_with_spaces_and_unicode_keeps_its_stand_in(tmp_path, offline, monkeypatch):
    folder = tmp_path / "données d'essai ü 数据"
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(folder))
    monkeypatch.setenv("TUTORIAL_QUICK", "1")
    monkeypatch.setitem(datasets.STANDINS, "mnist", (30, 10, "digits drawn from stroke glyphs"))
    drawn = []
    monkeypatch.setattr(standins, "make_digits", _counting(drawn))
    assert np.array_equal(load_mnist()[0][0], load_mnist()[0][0]) and drawn == [30, 10]
    assert len(list((folder / datasets.STANDIN_FOLDER).glob("mnist-*.npz"))) == 1


@pytest.mark.parametrize("protocol", range(pickle.HIGHEST_PROTOCOL + 1))
def test_cifar_batches_load_in_every_pickle_protocol(tmp_path, protocol):
    folder = tmp_path / "cifar-10-batches-py"
    written = write_small_cifar_folder(folder)
    data, labels = written["test_batch"]
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": data, b"labels": labels, b"batch_label": b"testing batch 1 of 1",
                     b"filenames": [b"a.png"] * len(labels)}, f, protocol=protocol)
    images, got = datasets.read_cifar_batch(folder / "test_batch")
    assert got.tolist() == labels and images.shape == (len(labels), 32, 32, 3)


def test_cifar_pickle_cannot_call_another_codec(tmp_path):
    path = tmp_path / "test_batch"
    # _codecs.encode is allowed only as protocol 0-2 use it, to turn latin-1 text into bytes
    path.write_bytes(b"c_codecs\nencode\n(Vx\nVzlib\ntR.")
    with pytest.raises(DatasetFileError, match="refusing _codecs.encode with encoding 'zlib'"):
        datasets.read_cifar_batch(path)


def test_an_interrupted_download_leaves_nothing_behind(tmp_path, monkeypatch):
    class Dies:
        headers = {"Content-Length": "1000000"}

        def __init__(self):
            self.calls = 0

        def read(self, n):
            self.calls += 1
            if self.calls > 3:
                raise ConnectionResetError("connection reset by peer")
            return b"x" * n

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

    monkeypatch.setattr(datasets.urllib.request, "urlopen", lambda *a, **k: Dies())
    with pytest.raises(ConnectionResetError):
        datasets.fetch("https://example.invalid/mnist.npz", tmp_path / "mnist.npz", "0" * 64)
    assert list(tmp_path.iterdir()) == []


def test_a_fifo_in_keras_cache_does_not_hang_the_loader(tmp_path):
    cache = tmp_path / "keras-home" / "datasets"
    cache.mkdir(parents=True)
    os.mkfifo(cache / "mnist.npz")
    done = run_python(f"""
        import os
        os.environ["KERAS_HOME"] = {str(tmp_path / "keras-home")!r}
        os.environ["TUTORIAL_DATA_DIR"] = {str(tmp_path / "data")!r}
        os.environ["TUTORIAL_QUICK"] = "1"
        from helpers.data.datasets import load_mnist, source_of
        (x, y), _ = load_mnist()
        print(source_of("mnist"), len(x))
    """, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "stand-in" in done.stdout and "mnist.npz is a FIFO (named pipe), not a file" in done.stdout


@pytest.mark.parametrize("kind, words", [("dangling", "a broken symlink"), ("loop", "a symlink loop"),
                                         ("file", "a file, not a folder"), ("unreachable", "cannot be created")])
def test_a_data_folder_that_cannot_be_one_is_called_what_it_is(tmp_path, monkeypatch, kind, words):
    from helpers.setup.config import data_dir

    target = tmp_path / "data"
    if kind == "dangling":
        target.symlink_to(tmp_path / "nowhere")
    elif kind == "loop":
        target.symlink_to(target)
    elif kind == "file":
        target.write_text("")
    else:
        (tmp_path / "locked").write_text("")
        target = tmp_path / "locked" / "data"          # a parent that is a file: nothing can be made below it
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(target))
    with pytest.raises(NotADirectoryError, match=words):
        data_dir()
