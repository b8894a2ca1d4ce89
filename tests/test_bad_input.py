"""Bad input and faults, one case per defect found by a hostile try of `helpers/` (issue 7).

The first table holds the cases whose right answer is a clear error: the input, the exception
type, and the file the message must name. The tests after it cover what is not one error:
paths from files, concurrent writers, resumes that must prove they continue the same data,
skipping damaged records, and calls that used to hang (run under a time limit, so a regression
fails instead of stalling CI).
"""
from __future__ import annotations

import errno
import json
import os
import pickle
import subprocess
import sys
import textwrap
import threading
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.data import datasets
from helpers.lessons.pydataset_autoencoder import read_png, tf_dataset_from_pngs
from helpers.storage import png_folder as P
from helpers.storage import tfrecord as T
from helpers.storage.tfrecord import read_split   # notebook 04's pipeline, with the manifest's checks
from helpers.setup.config import data_dir
from helpers.data.datasets import DatasetFileError
from helpers.storage.png_folder import PngFolderError
from helpers.storage.tfrecord import FeatureSpec, ShardError
from tests.conftest import write_small_cifar_folder, write_small_mnist_npz

ROOT = Path(__file__).resolve().parent.parent


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
    images = (np.arange(n * 16, dtype=np.uint8).reshape(n, 4, 4) if value is None
              else np.full((n, 4, 4), value, np.uint8))
    return T.write_shards(zip(images, range(n)), directory, "train", num_shards, total=n, progress=False, **kwargs)


def edit_manifest(directory, change):
    path = Path(directory) / "manifest.json"
    doc = json.loads(path.read_text())
    change(doc["splits"]["train"])
    path.write_text(json.dumps(doc))


def png_folder(folder, n=6):
    rng = np.random.default_rng(0)
    images, labels = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, n)
    P.export_png_folder(images, labels, folder, "tr", progress=False)
    return images, labels


# ---------------------------------------------------------------- the table: clear errors naming the file
# Each case prepares tmp_path and returns (call, file the message must name).


def case_manifest_file_outside_the_folder(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    small_split(tmp_path / "shards")
    edit_manifest(tmp_path / "shards", lambda s: s["shards"][0].update(file="../victim.txt"))
    return lambda: small_split(tmp_path / "shards", overwrite=True), tmp_path / "shards" / "manifest.json"


def case_manifest_absolute_path(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    small_split(tmp_path / "shards")
    edit_manifest(tmp_path / "shards", lambda s: s["shards"][1].update(file=str(victim)))
    return lambda: T.verify_shards(tmp_path / "shards"), tmp_path / "shards" / "manifest.json"


def case_split_name_with_a_path(tmp_path):
    return lambda: small_split_named(tmp_path / "shards", "../escape"), "../escape"


def small_split_named(directory, split):
    return T.write_shards(zip(np.zeros((2, 2), np.uint8), range(2)), directory, split, 1, total=2, progress=False)


def case_manifest_invalid_json(tmp_path):
    small_split(tmp_path)
    (tmp_path / "manifest.json").write_text('{"splits": {"train": ')
    return lambda: read_split(tmp_path, "train"), tmp_path / "manifest.json"


def case_spec_disagrees_with_records(tmp_path):
    small_split(tmp_path)  # 4x4 images, 16 bytes each
    edit_manifest(tmp_path, lambda s: s.update(feature_spec={"image": {"shape": [2, 2], "dtype": "uint8"},
                                                             "label": {"dtype": "int64"}}))
    return lambda: read_split(tmp_path, "train", 8), tmp_path / "train-00000-of-00004.tfrecord"


def case_png_encoding_with_a_2d_spec(tmp_path):
    import tensorflow as tf

    pngs = [tf.io.encode_png(np.zeros((28, 28, 1), np.uint8)).numpy()] * 2
    call = lambda: T.write_shards(zip(pngs, [1, 2]), tmp_path, "train", 1, total=2, encoding="png",  # noqa: E731
                                  spec=FeatureSpec((28, 28), "uint8"), progress=False)
    return call, "(28, 28, 1)"


def case_truncated_shard_when_reading(tmp_path):
    manifest = small_split(tmp_path)
    bad = tmp_path / manifest.shards[2].file
    bad.write_bytes(bad.read_bytes()[:-5])
    return lambda: read_split(tmp_path, "train"), bad


def case_missing_shard_when_reading(tmp_path):
    manifest = small_split(tmp_path)
    (tmp_path / manifest.shards[3].file).unlink()
    return lambda: read_split(tmp_path, "train"), tmp_path / manifest.shards[3].file


def case_header_truncation_is_found(tmp_path):
    manifest = small_split(tmp_path, n=10, num_shards=1)
    path = tmp_path / manifest.shards[0].file
    record = path.stat().st_size // 10
    path.write_bytes(path.read_bytes()[:3 * record + 5])  # 5 bytes into record 3's 12-byte header
    return lambda: T.count_records([path]), path


def case_mnist_label_out_of_range(tmp_path):
    arrays = write_small_mnist_npz(tmp_path / "mnist.npz")
    np.savez(tmp_path / "mnist.npz", **{**arrays, "y_train": np.full(20, 300, np.int64)})
    return lambda: datasets.read_mnist_npz(tmp_path / "mnist.npz"), tmp_path / "mnist.npz"


def case_mnist_negative_label(tmp_path):
    arrays = write_small_mnist_npz(tmp_path / "mnist.npz")
    np.savez(tmp_path / "mnist.npz", **{**arrays, "y_test": np.full(10, -1, np.int16)})
    return lambda: datasets.read_mnist_npz(tmp_path / "mnist.npz"), tmp_path / "mnist.npz"


def case_mnist_float_labels(tmp_path):
    arrays = write_small_mnist_npz(tmp_path / "mnist.npz")
    np.savez(tmp_path / "mnist.npz", **{**arrays, "y_train": np.full(20, 3.7)})
    return lambda: datasets.read_mnist_npz(tmp_path / "mnist.npz"), tmp_path / "mnist.npz"


def case_cifar_label_out_of_range(tmp_path):
    folder = tmp_path / "cifar-10-batches-py"
    write_small_cifar_folder(folder)
    with open(folder / "test_batch", "wb") as f:
        pickle.dump({b"data": np.zeros((2, 3072), np.uint8), b"labels": [3, 300]}, f)
    return lambda: datasets.read_cifar_folder(folder), folder / "test_batch"


def case_npy_renamed_npz(tmp_path):
    np.save(tmp_path / "x.npy", np.zeros((3, 28, 28), np.uint8))
    os.replace(tmp_path / "x.npy", tmp_path / "mnist.npz")
    return lambda: datasets.read_mnist_npz(tmp_path / "mnist.npz"), tmp_path / "mnist.npz"


def case_infinite_label_in_label_file(tmp_path):
    png_folder(tmp_path)
    (tmp_path / "tr_label.txt").write_text("1\n2\ninf\n4\n5\n6\n")
    return lambda: P.check_png_folder(tmp_path, "tr"), tmp_path / "tr_label.txt"


def case_huge_label_in_label_file(tmp_path):
    png_folder(tmp_path)
    (tmp_path / "tr_label.txt").write_text("1\n2\n3\n1e300\n5\n6\n")
    return lambda: P.check_png_folder(tmp_path, "tr"), tmp_path / "tr_label.txt"


def case_fractional_label_in_label_file(tmp_path):
    png_folder(tmp_path)
    (tmp_path / "tr_label.txt").write_text("1\n2\n3.5\n4\n5\n6\n")
    return lambda: P.check_png_folder(tmp_path, "tr"), tmp_path / "tr_label.txt"


def case_float_labels_for_export(tmp_path):
    images = np.zeros((2, 32, 32, 3), np.uint8)
    return lambda: P.export_png_folder(images, [1.5, 2.0], tmp_path, "tr", progress=False), tmp_path


def case_export_prefix_with_a_path(tmp_path):
    images = np.zeros((2, 32, 32, 3), np.uint8)
    return lambda: P.export_png_folder(images, [1, 2], tmp_path, "../tr", progress=False), "../tr"


def case_data_dir_variable_names_a_file(tmp_path):
    (tmp_path / "a-file").write_text("")
    os.environ["TUTORIAL_DATA_DIR"] = str(tmp_path / "a-file")  # the test restores it
    return data_dir, "TUTORIAL_DATA_DIR"


def case_tf_png_pipeline_truncated_file(tmp_path):
    png_folder(tmp_path)
    bad = tmp_path / "tr_00002.png"
    bad.write_bytes(bad.read_bytes()[:100])
    return lambda: list(tf_dataset_from_pngs(P.check_png_folder(tmp_path, "tr")[0], 2, shuffle=False)), bad


def case_tf_png_pipeline_not_a_png(tmp_path):
    png_folder(tmp_path)
    bad = tmp_path / "tr_00004.png"
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(bad, format="JPEG")
    return lambda: list(tf_dataset_from_pngs(P.check_png_folder(tmp_path, "tr")[0], 2, shuffle=False)), bad


def case_tf_png_pipeline_wrong_size(tmp_path):
    png_folder(tmp_path)
    bad = tmp_path / "tr_00001.png"
    Image.fromarray(np.zeros((28, 28, 3), np.uint8)).save(bad)
    return lambda: list(tf_dataset_from_pngs(P.check_png_folder(tmp_path, "tr")[0], 2, shuffle=False)), bad


def case_fifo_as_png(tmp_path):
    png_folder(tmp_path)
    (tmp_path / "tr_00001.png").unlink()
    os.mkfifo(tmp_path / "tr_00001.png")
    return lambda: P.load_png(tmp_path / "tr_00001.png"), tmp_path / "tr_00001.png"


def tf_error():
    import tensorflow as tf

    return tf.errors.InvalidArgumentError


CLEAR_ERRORS = [
    # (defect, case, exception type)
    ("1 manifest names a file outside the folder", case_manifest_file_outside_the_folder, ShardError),
    ("1 manifest names an absolute path", case_manifest_absolute_path, ShardError),
    ("1 split name with a path", case_split_name_with_a_path, ShardError),
    ("2 manifest left invalid", case_manifest_invalid_json, ShardError),
    ("6 spec disagrees with the records", case_spec_disagrees_with_records, ShardError),
    ("6 png encoding with a 2-D spec", case_png_encoding_with_a_2d_spec, ShardError),
    ("6 truncation inside a record header", case_header_truncation_is_found, ShardError),
    ("6 MNIST label 300", case_mnist_label_out_of_range, DatasetFileError),
    ("6 MNIST label -1", case_mnist_negative_label, DatasetFileError),
    ("6 MNIST float labels", case_mnist_float_labels, DatasetFileError),
    ("6 CIFAR label 300", case_cifar_label_out_of_range, DatasetFileError),
    ("6 float labels for a PNG export", case_float_labels_for_export, PngFolderError),
    ("7 truncated shard when reading", case_truncated_shard_when_reading, ShardError),
    ("7 missing shard when reading", case_missing_shard_when_reading, ShardError),
    ("7 .npy renamed mnist.npz", case_npy_renamed_npz, DatasetFileError),
    ("7 infinite label in a label file", case_infinite_label_in_label_file, PngFolderError),
    ("7 huge label in a label file", case_huge_label_in_label_file, PngFolderError),
    ("7 fractional label in a label file", case_fractional_label_in_label_file, PngFolderError),
    ("7 export prefix with a path", case_export_prefix_with_a_path, PngFolderError),
    ("7 TUTORIAL_DATA_DIR names a file", case_data_dir_variable_names_a_file, NotADirectoryError),
    ("7 tf.data PNG pipeline, truncated file", case_tf_png_pipeline_truncated_file, "tf"),
    ("7 tf.data PNG pipeline, a JPEG", case_tf_png_pipeline_not_a_png, "tf"),
    ("7 tf.data PNG pipeline, wrong size", case_tf_png_pipeline_wrong_size, "tf"),
    ("7 a FIFO named like a PNG", case_fifo_as_png, PngFolderError),
]


@pytest.mark.parametrize("defect, case, error", CLEAR_ERRORS, ids=[row[0] for row in CLEAR_ERRORS])
def test_bad_input_gives_a_clear_error_naming_the_file(tmp_path, monkeypatch, defect, case, error):
    monkeypatch.setenv("TUTORIAL_DATA_DIR", os.environ.get("TUTORIAL_DATA_DIR", str(tmp_path / "data")))
    call, named = case(tmp_path)
    with pytest.raises(tf_error() if error == "tf" else error) as raised:
        finishes_within(60, call)
    assert str(named) in str(raised.value), f"the message does not name {named}: {raised.value}"


# ---------------------------------------------------------------- 1: nothing outside the folder is touched


def test_a_manifest_never_deletes_or_reads_outside_its_folder(tmp_path):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    case_manifest_file_outside_the_folder(tmp_path)
    with pytest.raises(ShardError, match="must be 'train-00000-of-00004.tfrecord'"):
        small_split(tmp_path / "shards", overwrite=True)
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize("planted", ["manifest.json", "manifest.json.partial", "train-00000-of-00001.tfrecord",
                                     "train-00000-of-00001.tfrecord.partial"])
def test_writers_never_write_through_a_planted_symlink(tmp_path, planted):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    shards = tmp_path / "shards"
    shards.mkdir()
    (shards / planted).symlink_to(victim)
    try:
        small_split(shards, n=4, num_shards=1)
    except ShardError as e:  # a symlink at manifest.json is read as a (bad) manifest and refused
        assert planted == "manifest.json" and str(shards / "manifest.json") in str(e)
    assert victim.read_text() == "keep me"


@pytest.mark.parametrize("planted", ["tr_export.json", "tr_export.json.partial", "tr_00000.png", "tr_label.txt"])
def test_png_export_never_writes_through_a_planted_symlink(tmp_path, planted):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder = tmp_path / "train"
    folder.mkdir()
    (folder / planted).symlink_to(victim)
    images = np.zeros((2, 32, 32, 3), np.uint8)
    try:
        P.export_png_folder(images, [1, 2], folder, "tr", progress=False)
    except PngFolderError:
        pass  # refused: the folder holds something this export did not write
    P.export_png_folder(images, [1, 2], folder, "tr", progress=False, overwrite=True)
    assert victim.read_text() == "keep me"
    assert not (folder / planted).is_symlink() or planted.endswith(".partial")


def test_nothing_is_written_outside_the_folder_for_a_bad_split_name(tmp_path):
    for split in ("../escape", "/tmp/abs", "a/b", "", "..", "."):
        with pytest.raises(ShardError, match="must be one plain name"):
            small_split_named(tmp_path / "shards", split)
    assert sorted(p.name for p in tmp_path.rglob("*")) in ([], ["shards"])


# ---------------------------------------------------------------- 2: concurrent writers

WRITER = textwrap.dedent("""
    import sys
    import numpy as np
    from helpers.setup.processes import skip_unused_imports
    skip_unused_imports()   # a fifth of TensorFlow's start, and this test starts four writers at once
    from helpers.storage.tfrecord import write_shards

    out, split, value = sys.argv[1], sys.argv[2], int(sys.argv[3])
    images = np.full((120, 4, 4), value, np.uint8)
    write_shards(zip(images, range(120)), out, split, 60, total=120, progress=False)
""")


def test_writers_of_two_splits_in_one_folder_both_succeed(tmp_path):
    script = tmp_path / "writer.py"
    script.write_text(WRITER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}

    def writer(out, split, value):
        return subprocess.Popen([sys.executable, str(script), str(out), split, str(value)], env=env,
                                stderr=subprocess.PIPE, text=True)

    # Two trials of two writers sharing a folder; the trials run at the same time, each in its own folder (one
    # after the other, the test took twice as long: each writer spends seconds starting TensorFlow).
    trials = {out: [writer(out, "train", 1), writer(out, "test", 2)]
              for out in (tmp_path / "shards-0", tmp_path / "shards-1")}
    try:
        for out, writers in trials.items():
            errors = [w.communicate(timeout=240)[1] for w in writers]
            assert [w.returncode for w in writers] == [0, 0], errors
            splits = T.load_manifest(out)
            assert ({k: (v.complete, len(v.shards)) for k, v in splits.items()}
                    == {"train": (True, 60), "test": (True, 60)})
            assert all(r.ok for r in T.verify_shards(out))
            images, _ = next(iter(read_split(out, "test", 120)))
            assert (images.numpy() == 2).all()
    finally:
        for w in (w for writers in trials.values() for w in writers if w.poll() is None):
            w.kill()   # a failed trial leaves no process behind
            w.communicate()


HOLDER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    from helpers.storage.tfrecord import write_shards

    out, marker = sys.argv[1], Path(sys.argv[2])

    def records():
        for i in range(8):
            if i == 5:
                marker.touch()
                time.sleep(600)  # hold the split's lock until killed
            yield np.zeros((4, 4), np.uint8), i

    write_shards(records(), out, "train", 4, total=8, progress=False)
""")


def test_a_second_writer_of_the_same_split_is_told_who_holds_it(tmp_path):
    script, marker, out = tmp_path / "holder.py", tmp_path / "marker", tmp_path / "shards"
    script.write_text(HOLDER)
    holder = subprocess.Popen([sys.executable, str(script), str(out), str(marker)],
                              env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"})
    try:
        deadline = time.monotonic() + 120
        while not marker.exists():
            assert holder.poll() is None and time.monotonic() < deadline, "the holder never started writing"
            time.sleep(0.1)
        with pytest.raises(ShardError, match=rf"split 'train' in .* is in use by another process \(process {holder.pid};"):
            small_split(out, n=8)
        small_split_named(out, "test")  # another split in the same folder is fine meanwhile
    finally:
        holder.kill()
        holder.wait()
    small_split(out, n=8, value=0)  # the lock died with its holder; the same data resumes
    assert all(r.ok for r in T.verify_shards(out))


# ---------------------------------------------------------------- 3: a resume proves it continues the same data


def test_resume_with_other_data_and_no_fingerprint_is_refused(tmp_path):
    manifest = small_split(tmp_path, n=8, num_shards=4, value=0)
    (tmp_path / manifest.shards[1].file).unlink()
    with pytest.raises(ShardError, match="train-00000-of-00004.tfrecord was written from other records"):
        small_split(tmp_path, n=8, num_shards=4, value=1)
    small_split(tmp_path, n=8, num_shards=4, value=1, overwrite=True)
    _, labels = next(iter(read_split(tmp_path, "train", 8)))
    images, _ = next(iter(read_split(tmp_path, "train", 8)))
    assert (images.numpy() == 1).all() and labels.numpy().tolist() == list(range(8))


def test_resume_with_the_same_data_rewrites_only_what_is_missing(tmp_path):
    manifest = small_split(tmp_path, value=3)
    (tmp_path / manifest.shards[2].file).unlink()
    stamp = (tmp_path / manifest.shards[0].file).stat().st_mtime_ns
    small_split(tmp_path, value=3)
    assert (tmp_path / manifest.shards[0].file).stat().st_mtime_ns == stamp
    assert all(r.ok for r in T.verify_shards(tmp_path))


def test_rerun_with_fewer_records_than_a_finished_split_is_refused(tmp_path):
    small_split(tmp_path, n=8, num_shards=2)
    images = np.arange(8 * 16, dtype=np.uint8).reshape(8, 4, 4)
    with pytest.raises(ShardError, match="the records ended after 4, but total=8"):
        T.write_shards(zip(images[:4], range(4)), tmp_path, "train", 2, total=8, progress=False)


def test_png_reexport_of_other_data_without_fingerprint_is_refused(tmp_path):
    first, labels = png_folder(tmp_path)
    other = 255 - first
    with pytest.raises(PngFolderError, match="exported from other data"):
        P.export_png_folder(other, (labels + 1) % 10, tmp_path, "tr", progress=False)
    P.export_png_folder(other, (labels + 1) % 10, tmp_path, "tr", progress=False, overwrite=True)
    paths, got_labels = P.check_png_folder(tmp_path, "tr")
    assert np.array_equal(np.stack([P.load_png(p) for p in paths]), other)
    assert np.array_equal(got_labels, (labels + 1) % 10)


def test_png_export_into_a_folder_of_foreign_pngs_is_refused(tmp_path):
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(tmp_path / "tr_00000.png")
    with pytest.raises(PngFolderError, match="other data"):
        P.export_png_folder(np.ones((2, 32, 32, 3), np.uint8), [1, 2], tmp_path, "tr", progress=False)


# ---------------------------------------------------------------- 4: skipping damaged records ends, and counts


def test_skipping_damaged_records_finishes_and_reports_what_was_lost(tmp_path):
    manifest = small_split(tmp_path)
    flipped = tmp_path / manifest.shards[1].file
    data = bytearray(flipped.read_bytes())
    data[len(data) // 2] ^= 0xFF
    flipped.write_bytes(bytes(data))
    reports = T.verify_shards(tmp_path)
    readable = sum(r.records for r in reports)
    assert 30 <= readable < 40

    def read_all():
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            ds = read_split(tmp_path, "train", 4, skip_damaged=True, parallel_reads=2)
            labels = np.concatenate([y for _, y in ds.as_numpy_iterator()])
        return ds, labels, caught

    ds, labels, caught = finishes_within(60, read_all)
    assert len(labels) == readable and int(ds.cardinality()) == -(-readable // 4)  # batches of 4, the last partial
    lost = [w for w in caught if issubclass(w.category, T.DamagedShardsWarning)]
    assert len(lost) == 1 and f"{40 - readable} of 40 records" in str(lost[0].message)
    assert manifest.shards[1].file in str(lost[0].message)


# ---------------------------------------------------------------- 5: every pickle protocol of a CIFAR batch


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


# ---------------------------------------------------------------- 6: every cut inside a shard is found


def test_every_truncation_point_is_reported(tmp_path):
    manifest = small_split(tmp_path, n=3, num_shards=1)
    whole = (tmp_path / manifest.shards[0].file).read_bytes()
    cut_file = tmp_path / "cut.tfrecord"
    record = len(whole) // 3  # equal records: 12-byte header, 16-pixel Example, 4-byte CRC
    silent = []
    for cut in range(1, len(whole)):
        cut_file.write_bytes(whole[:cut])
        count, problem = T.scan_file(cut_file, None)
        if cut % record == 0:  # a cut between records leaves a shorter valid file: the manifest's count catches it
            assert (count, problem) == (cut // record, None)
        elif problem is None:
            silent.append(cut)
    assert silent == [], f"truncations at these bytes went unnoticed: {silent}"


def test_a_reader_fails_instead_of_misaligning_batches_when_the_spec_is_wrong(tmp_path):
    import tensorflow as tf

    small_split(tmp_path)
    edit_manifest(tmp_path, lambda s: s.update(feature_spec={"image": {"shape": [2, 2], "dtype": "uint8"},
                                                             "label": {"dtype": "int64"}}))
    manifest = T.load_manifest(tmp_path)["train"]
    # Past the check at build time, the parser itself refuses records of the wrong size.
    parse = T.parse_batch_fn(manifest.encoding, manifest.spec, source=str(tmp_path))
    ds = tf.data.TFRecordDataset(manifest.files(tmp_path)).batch(8).map(parse)
    with pytest.raises(tf.errors.InvalidArgumentError, match="do not hold uint8 \\(2, 2\\) images"):
        list(ds)


# ---------------------------------------------------------------- 7: no hangs, nothing left behind, read-only


def test_a_fifo_among_the_pngs_does_not_hang_the_check_the_skipping_or_the_export(tmp_path):
    images, labels = png_folder(tmp_path)
    (tmp_path / "tr_00001.png").unlink()
    os.mkfifo(tmp_path / "tr_00001.png")
    # Any reader would wait forever on the FIFO: the check before reading refuses it, naming it.
    with pytest.raises(PngFolderError, match="tr_00001.png is a FIFO"):
        finishes_within(30, lambda: P.check_png_folder(tmp_path, "tr"))
    paths = [tmp_path / P.image_name("tr", i) for i in range(len(labels))]
    with pytest.warns(UserWarning, match="tr_00001.png is a FIFO"):
        kept, _, _ = finishes_within(30, lambda: P.without_bad_files(paths, labels, read_png))
    assert len(kept) == 5
    finishes_within(30, lambda: P.export_png_folder(images, labels, tmp_path, "tr", progress=False))
    assert np.array_equal(P.load_png(tmp_path / "tr_00001.png"), images[1])


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


def _listing(folder: Path) -> dict:
    """Every file's time stamp and size, but the lock files' (taking a lock writes the holder's id)."""
    return {p.name: (p.stat().st_mtime_ns, p.stat().st_size) for p in folder.iterdir() if p.suffix != ".lock"}


def test_rerunning_a_complete_write_changes_nothing(tmp_path):
    small_split(tmp_path)
    before, folder_stamp = _listing(tmp_path), tmp_path.stat().st_mtime_ns
    small_split(tmp_path)
    assert _listing(tmp_path) == before and tmp_path.stat().st_mtime_ns == folder_stamp


def test_rerunning_a_complete_write_on_a_read_only_folder_succeeds(tmp_path, monkeypatch):
    small_split(tmp_path)
    real_open = os.open

    def read_only(path, flags, *args, **kwargs):  # what a read-only mount answers to any write
        if str(path).startswith(str(tmp_path)) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT):
            raise OSError(errno.EROFS, "Read-only file system", str(path))
        return real_open(path, flags, *args, **kwargs)

    monkeypatch.setattr(os, "open", read_only)
    manifest = small_split(tmp_path)
    assert manifest.complete
    with pytest.raises(ShardError, match="cannot be written .*Read-only file system"):
        small_split(tmp_path, value=1, overwrite=True)  # this does need writing: a clear error, not a traceback
