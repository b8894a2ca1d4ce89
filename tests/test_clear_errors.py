"""Bad input gives a clear error naming the file: one case per defect, across the series' readers and writers
(TFRecord shards and their manifest, MNIST and CIFAR-10 files, PNG folders and their label files, the data folder,
the tf.data PNG pipeline). Each case prepares tmp_path and returns the call and what its message must name; the
call runs under a time limit, so a hang fails instead of stalling the run.
"""
from __future__ import annotations

import os
import pickle

import numpy as np
import pytest
from PIL import Image

from helpers.data import datasets
from helpers.lessons.pydataset_autoencoder import tf_dataset_from_pngs
from helpers.storage import png_folder as P
from helpers.storage import tfrecord as T
from helpers.storage.tfrecord import read_split   # notebook 04's pipeline, with the manifest's checks
from helpers.setup.config import data_dir
from helpers.data.datasets import DatasetFileError
from helpers.storage.png_folder import PngFolderError
from helpers.storage.tfrecord import FeatureSpec, ShardError
from tests.conftest import (edit_manifest, finishes_within, png_folder, small_split, small_split_named,
                            write_small_cifar_folder, write_small_mnist_npz)


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
