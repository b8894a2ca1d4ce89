"""The one check of class labels (helpers/storage/labels.py): every writer refuses a bad label before it writes
anything under a final name, and every reader of a label file reads whole numbers only, naming the line.
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from helpers.lessons.pipeline_profiling import write_blocks
from helpers.storage.blocks import write_block_split
from helpers.scale.beam import save_source
from helpers.storage.labels import class_label, class_labels
from helpers.storage.png_folder import PngFolderError, export_png_folder, read_labels
from helpers.storage.tfrecord import load_manifest, write_shards
from tests.conftest import jpeg_file
from tests.test_photo_conversion import convert_shards


BAD_LABELS = {   # (labels of two images, num_classes, what the error says)
    "-1": (np.array([0, -1]), None, "label -1"),
    "3.5": (np.array([0, 3.5]), None, "whole numbers"),
    "uint64 2**64-1": (np.array([0, 2**64 - 1], np.uint64), None, "label 18446744073709551615|whole numbers"),
    "object dtype": (np.array([0, "3"], dtype=object), None, "whole numbers"),
    "class 10 of 10": (np.array([0, 10]), 10, "label 10"),
}


def tfrecord_writer(encoding):
    def write(images, labels, out, num_classes):
        write_shards(zip(images, labels), out, "train", 1, total=len(images), encoding=encoding,
                     num_classes=num_classes, progress=False)
    return write


def png_writer(images, labels, out, num_classes):
    export_png_folder(images, labels, out, "tr", num_classes=num_classes, progress=False)


def blocks_writer(images, labels, out, num_classes):
    write_block_split(write_blocks, images, labels, out, "train", num_shards=1, block_size=2, num_classes=num_classes)


def source_writer(images, labels, out, num_classes):
    save_source(images, labels, out, num_classes=num_classes)


def photo_writer(images, labels, out, num_classes):
    """Notebook 07's conversion: two photos, one shard each, both kinds."""
    photos = [jpeg_file(Path(out).parent / f"photo{i}.jpg") for i in range(len(images))]
    convert_shards(photos, labels.tolist(), out, 2, [0, 1], num_classes=num_classes)


WRITERS = {"write_shards raw": tfrecord_writer("raw"), "write_shards float_list": tfrecord_writer("float_list"),
           "write_shards tensor": tfrecord_writer("tensor"), "export_png_folder": png_writer,
           "write_blocks": blocks_writer, "save_source": source_writer, "convert_shards": photo_writer}


@pytest.mark.parametrize("bad", BAD_LABELS)
@pytest.mark.parametrize("writer", WRITERS)
def test_every_writer_refuses_a_bad_label_before_it_writes_anything_under_a_final_name(tmp_path, writer, bad):
    labels, num_classes, says = BAD_LABELS[bad]
    out = tmp_path / "out"
    images = np.zeros((2, 8, 8, 3), np.uint8)
    with pytest.raises(ValueError, match=says):
        WRITERS[writer](images, labels, out, num_classes)
    written = [p for p in out.rglob("*") if p.is_file() and not p.name.startswith(".") and not p.name.endswith(".json")
               and not p.name.endswith(".partial")]
    assert written == [], written          # no shard, image, label file or array took its final name ...
    for manifest_folder in [out, out / "resized", out / "original"]:   # ... and no manifest lists a shard
        assert not any(m.shards for m in load_manifest(manifest_folder).values()) if manifest_folder.is_dir() else True


def test_the_label_check_names_an_object_array_and_never_casts_a_uint64_to_minus_one():
    with pytest.raises(ValueError, match="got object values such as '3'"):   # was AttributeError
        class_labels(np.array(["3", 4], dtype=object), "here")
    with pytest.raises(ValueError, match="label 18446744073709551615 at position 1 is outside 0 to 2"):
        class_labels(np.array([1, 2**64 - 1], np.uint64), "here")
    assert class_labels(np.array([1, 2**63 - 1], np.uint64), "here").tolist() == [1, 2**63 - 1]
    for label in (True, 2.0, "3", np.uint64(2**64 - 1), -1):
        with pytest.raises(ValueError, match="record 4"):
            class_label(label, "record 4")


def test_a_png_label_file_with_a_negative_label_is_refused_by_line(tmp_path):
    (tmp_path / "tr_label.txt").write_text("3\n-1\n")
    with pytest.raises(PngFolderError, match=r"tr_label.txt, line 2: label -1 is outside"):
        read_labels(tmp_path, "tr")


def test_convert_shards_checks_the_labels_of_later_shards_before_writing_the_first(tmp_path):
    photos = [str(jpeg_file(tmp_path / f"p{i}.jpg")) for i in range(4)]
    with pytest.raises(ValueError, match="whole numbers"):
        convert_shards(photos, [0, 1, 2, 3.5], tmp_path / "out", 2, [0, 1])
    assert not list((tmp_path / "out").rglob("*.tfrecord"))   # not even shard 0, whose labels were fine


def test_a_class_count_beyond_int64_is_refused_not_wrapped():
    """num_classes=2**64 let a uint64 2**64-1 through as -1."""
    with pytest.raises(ValueError, match="num_classes must be a whole number from 1 to 2\\*\\*63"):
        class_labels(np.array([2**64 - 1], np.uint64), "x", num_classes=2**64)
    with pytest.raises(ValueError, match="num_classes"):
        class_label(5, "x", num_classes=2**63 + 1)
    assert class_labels(np.array([2**63 - 1], np.uint64), "x", num_classes=2**63).tolist() == [2**63 - 1]


@pytest.mark.parametrize("labels", [[1, True, 2], (0, np.bool_(False)), [[1], [True]], [1, 2.0], [1, np.timedelta64(1, "s")]])
def test_a_list_with_a_bool_or_a_float_is_refused_as_one_label_is(labels):
    """np.asarray turned [1, True, 2] into [1, 1, 2], while label_checker refuses True."""
    with pytest.raises(ValueError, match="x: labels must be whole numbers"):
        class_labels(labels, "x")


def test_a_timedelta_label_is_refused_by_name(tmp_path):
    """np.timedelta64 is a numpy integer type, and int() of it raised a TypeError write_shards did not catch."""
    for label in (np.timedelta64(1, "s"), np.timedelta64(3)):
        with pytest.raises(ValueError, match="record 2: label .* is a timedelta64"):
            class_label(label, "record 2")
    with pytest.raises(ValueError, match="whole numbers"):
        write_shards([(np.zeros(4, np.uint8), np.timedelta64(1, "s"))], tmp_path / "out", "train", 1,
                     total=1, progress=False)


@pytest.mark.parametrize("text", ["1_0", "\u0661", "\uff11", "1_0.0", "nan", "inf", "0x1", "١.0e+00"])
def test_a_png_label_file_takes_ascii_digits_only(tmp_path, text):
    """int() read "1_0" as 10 and Arabic-Indic or full-width digits as numbers."""
    (tmp_path / "tr_label.txt").write_text(f"3\n{text}\n", encoding="utf-8")
    with pytest.raises(PngFolderError, match="line 2: .* is not a label"):
        read_labels(tmp_path, "tr")


def test_a_png_label_file_still_reads_what_the_writers_write(tmp_path):
    (tmp_path / "tr_label.txt").write_text("3\n0\n6.000000000000000000e+00\n+2\n", encoding="utf-8")
    assert read_labels(tmp_path, "tr").tolist() == [3, 0, 6, 2]
