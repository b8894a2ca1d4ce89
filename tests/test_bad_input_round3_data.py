"""Integrity, round three (issue 25), the data items: one label check for every writer and loader, the photo
folder's scan of odd files, and shards that are empty or listed out of order. Each test failed before its fix.
(The measurement items, 7-10, are in tests/test_measure.py.)"""
from __future__ import annotations

import functools
import io
import os
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from helpers.storage import photo_scan
from helpers.scale.parallel_conversion import ConversionProcesses
from helpers.storage.photo_scan import inspect_photo, jpeg_end
from helpers.lessons.pipeline_profiling import write_blocks
from helpers.storage.blocks import write_block_split
from helpers.scale.beam import save_source
from helpers.storage.labels import class_label, class_labels
from helpers.storage.png_folder import PngFolderError, export_png_folder, read_labels
from helpers.storage.tfrecord import FeatureSpec, ShardError, load_manifest, read_manifest, write_shards
from tests.test_bad_input import finishes_within

# ------------------------------------------------------------------ items 3-6: one label check, every writer

BAD_LABELS = {   # (labels of two images, num_classes, what the error says)
    "-1": (np.array([0, -1]), None, "label -1"),
    "3.5": (np.array([0, 3.5]), None, "whole numbers"),
    "uint64 2**64-1": (np.array([0, 2**64 - 1], np.uint64), None, "label 18446744073709551615|whole numbers"),
    "object dtype": (np.array([0, "3"], dtype=object), None, "whole numbers"),
    "class 10 of 10": (np.array([0, 10]), 10, "label 10"),
}


def jpeg_file(path: Path, size=(40, 30), colour=(200, 30, 30), **save) -> Path:
    Image.new("RGB", size, colour).save(path, "JPEG", **save)
    return path


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


@functools.cache
def conversion() -> ConversionProcesses:
    """Notebook 07's conversion, one process for every test here (it starts TensorFlow once, and stops with this
    process): both kinds of records, 16x16."""
    lesson = "helpers.lessons.capstone_photos"
    return ConversionProcesses({"resized": (f"{lesson}:resized_record", {"size": 16}),
                                "original": (f"{lesson}:original_record", {})}, processes=1)


def convert_shards(photos, labels, out, num_shards, shards, num_classes=None):
    conversion().convert(photos, labels, out, "train", num_shards, image_shape=(16, 16, 3), shards=shards,
                         num_classes=num_classes)


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


# ------------------------------------------------------------------ items 11-13: the photo scan


@pytest.mark.parametrize("size", [(5, 5), (800, 4), (4, 800), (1, 1)])
def test_a_tiny_or_thin_valid_jpeg_is_a_plain_photo(tmp_path, size):
    assert inspect_photo(jpeg_file(tmp_path / "small.jpg", size)) == (None, True)   # was ZeroDivisionError


def test_what_is_no_file_in_a_class_folder_is_named_and_left_out_without_hanging(tmp_path):
    (tmp_path / "sub.jpg").mkdir()
    os.mkfifo(tmp_path / "pipe.jpg")
    os.symlink("/dev/zero", tmp_path / "zero.jpg")
    report = finishes_within(20, lambda: {p.name: inspect_photo(p) for p in tmp_path.iterdir()})
    assert report == {"sub.jpg": ("a folder, not a file", False), "pipe.jpg": ("a FIFO (named pipe), not a file", False),
                      "zero.jpg": ("a character device (a symlink to /dev/zero), not a file", False)}


@pytest.mark.parametrize("progressive", [False, True])
def test_a_jpeg_cut_short_with_its_end_marker_put_back_is_named(tmp_path, progressive):
    rng = np.random.default_rng(0)
    pixels = (rng.random((200, 240, 3)) * 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90, progressive=progressive)
    whole = out.getvalue()
    (tmp_path / "whole.jpg").write_bytes(whole)
    assert inspect_photo(tmp_path / "whole.jpg") == (None, True)
    for cut in (len(whole) // 3, len(whole) // 2, len(whole) - 200):
        (tmp_path / "cut.jpg").write_bytes(whole[:cut] + b"\xff\xd9")
        problem, usable = inspect_photo(tmp_path / "cut.jpg")
        assert not usable and "cut short" in problem, (cut, problem)


# Round three of the review: the scan judged wholeness by the last FF DA of the whole file. A cut file with
# "FF D9, a scan header, FF D9" appended passed; a whole photo with trailing data holding FF DA (the video of a
# phone's motion photo) was called cut short.
SCAN_HEADER = b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00"
TRAILING = b"\x00\x00\x00\x18ftypmp42" + SCAN_HEADER + b"video frames, no end marker after them"


def noisy_jpeg(**save) -> bytes:
    pixels = (np.random.default_rng(0).random((200, 240, 3)) * 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90, **save)
    return out.getvalue()


JPEG_KINDS = {"baseline": {}, "progressive": {"progressive": True}, "restart markers": {"restart_marker_blocks": 1}}


@pytest.mark.parametrize("kind", JPEG_KINDS)
def test_the_segment_walk_finds_the_first_end_marker_of_the_jpeg_proper(kind):
    whole = noisy_jpeg(**JPEG_KINDS[kind])
    assert jpeg_end(whole) == len(whole) - 2 and whole[-2:] == b"\xff\xd9"
    assert jpeg_end(whole + TRAILING) == len(whole) - 2                    # trailing data is not the picture's
    assert jpeg_end(whole + b"\xff\xd9" + TRAILING) == len(whole) - 2     # nor a second end marker in it
    for cut in (len(whole) // 3, len(whole) // 2, len(whole) - 200):
        assert jpeg_end(whole[:cut]) is None                              # stops in its picture data
        assert jpeg_end(whole[:cut] + TRAILING) is None                   # (a scan header in the rest changes nothing)
        assert jpeg_end(whole[:cut] + b"\xff\xd9") == cut                 # its end marker put back
        assert jpeg_end(whole[:cut] + b"\xff\xd9" + SCAN_HEADER + b"\xff\xd9") == cut
    assert jpeg_end(b"not a jpeg") is None and jpeg_end(b"") is None


@pytest.mark.parametrize("kind", JPEG_KINDS)
def test_a_whole_photo_with_trailing_data_is_plain_and_a_cut_one_is_named_whatever_follows(tmp_path, kind):
    whole = noisy_jpeg(**JPEG_KINDS[kind])
    photo = tmp_path / "photo.jpg"
    for data in (whole, whole + TRAILING, whole + b"\xff\xd9" + TRAILING):
        photo.write_bytes(data)
        assert inspect_photo(photo) == (None, True)                       # the motion photo was "cut short"
    for cut in (len(whole) // 3, len(whole) - 200):
        for tail, says in [(b"", "no end marker: the file stops in its picture data"),
                           (TRAILING, "no end marker: the file stops in its picture data"),
                           (b"\xff\xd9", "its end marker put back"),
                           (b"\xff\xd9" + SCAN_HEADER + b"\xff\xd9", "its end marker put back")]:   # the bypass
            photo.write_bytes(whole[:cut] + tail)
            problem, usable = inspect_photo(photo)
            assert not usable and problem.startswith("a JPEG cut short") and says in problem, (cut, tail, problem)


def test_a_file_too_large_for_a_photo_is_named_without_being_read(tmp_path, monkeypatch):
    """Round three: read_bytes() of a 6 GB sparse file raised MemoryError and stopped the scan unnamed."""
    huge = tmp_path / "huge.jpg"
    with open(huge, "wb") as f:
        f.truncate(6 * 2**30)   # sparse: no disk space used
    assert finishes_within(5, lambda: inspect_photo(huge)) == ("too large for a photo: over 64 MiB", False)
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(noisy_jpeg())
    assert inspect_photo(photo) == (None, True)
    monkeypatch.setattr(photo_scan, "MAX_PHOTO_BYTES", photo.stat().st_size - 1, raising=False)
    problem, usable = inspect_photo(photo)
    assert problem.startswith("too large for a photo") and not usable    # the cap is what decides


# ------------------------------------------------------------------ items 14-15: empty shards, shard order


def test_an_empty_shard_never_decides_the_splits_image_spec(tmp_path):
    images = np.zeros((1, 6, 6), np.uint8)
    with pytest.raises(ShardError, match="hold no records.*spec="):   # first: its spec would have been (0,)
        write_shards(iter([]), tmp_path, "train", 2, total=1, shards=[1], progress=False)
    assert "train" not in load_manifest(tmp_path)
    write_shards(zip(images, [3]), tmp_path, "train", 2, total=1, shards=[0], progress=False)
    manifest = write_shards(iter([]), tmp_path, "train", 2, total=1, shards=[1], progress=False)  # after: adopts it
    assert manifest.complete and manifest.spec == FeatureSpec((6, 6), "uint8")


def test_convert_shards_of_one_photo_into_two_shards_completes_in_either_order(tmp_path):
    photo = [str(jpeg_file(tmp_path / "only.jpg"))]
    for order in ([[0, 1]], [[1], [0]]):   # one process; two processes, the empty shard's first
        out = tmp_path / f"out-{len(order)}"
        for shards in order:
            convert_shards(photo, [2], out, 2, shards)
        for kind in ("resized", "original"):
            manifest = read_manifest(out / kind, "train", serialized=True)
            assert manifest.complete and [s.records for s in manifest.shards] == [1, 0]


def test_a_split_of_no_records_is_an_error_naming_the_folder(tmp_path):
    with pytest.raises(ShardError, match=f"{tmp_path}.*no records"):
        write_shards(iter([]), tmp_path, "train", 2, total=0, progress=False)
    with pytest.raises(ValueError, match="no files to convert"):
        convert_shards([], [], tmp_path / "photos", 2, [0, 1])
    assert not load_manifest(tmp_path)


def test_shards_listed_out_of_order_are_refused_not_swapped(tmp_path):
    images = np.arange(4).reshape(4, 1, 1).astype(np.uint8)
    records = [(images[i], i) for i in (3, 1)]   # shard 3's record, then shard 1's, as listed
    with pytest.raises(ValueError, match="increasing order"):
        write_shards(iter(records), tmp_path, "train", 4, total=4, shards=[3, 1], progress=False)
    with pytest.raises(ValueError, match="increasing order"):
        write_shards(iter(records), tmp_path, "train", 4, total=4, shards=[1, 1], progress=False)
    assert not list(tmp_path.glob("*.tfrecord"))


# ---------------------------------------------------------------- found by a hostile review of round three's fixes

def test_fit_epoch_refuses_a_loss_tracker_that_counts_steps_not_samples():
    """keras.io's "customizing fit" pattern updates a Mean named "loss" with the loss alone: its count is the
    number of steps, and an epoch counted from it would be batch-size times too slow."""
    import keras
    from helpers.measure.core import fit_epoch

    class StepCounting(keras.Model):
        def __init__(self):
            super().__init__()
            self.dense = keras.layers.Dense(1)
            self.loss_tracker = keras.metrics.Mean(name="loss")

        def call(self, x):
            return self.dense(x)

        def train_step(self, data):
            import tensorflow as tf
            x, y = data
            with tf.GradientTape() as tape:
                loss = keras.ops.mean((self(x) - y) ** 2)
            self.optimizer.apply(tape.gradient(loss, self.trainable_weights), self.trainable_weights)
            self.loss_tracker.update_state(loss)   # no sample_weight: it counts steps
            return {"loss": self.loss_tracker.result()}

        @property
        def metrics(self):
            return [self.loss_tracker]

    model = StepCounting()
    model.compile(optimizer="sgd", loss="mse")
    x, y = np.zeros((80, 3), np.float32), np.zeros((80, 1), np.float32)
    with pytest.raises(ValueError, match="counts steps, not samples"):
        fit_epoch(model, batch_size=8, x=x, y=y)


@pytest.mark.parametrize("sides, rounds, warmup", [({}, 2, 1), ({"A": lambda: 1.0}, 2.5, 1),
                                                   ({"A": lambda: 1.0}, 1, -5), ({"A": lambda: 1.0}, True, 1)])
def test_alternate_names_arguments_it_cannot_run(sides, rounds, warmup):
    from helpers.measure.core import alternate
    with pytest.raises(ValueError, match="alternate"):
        alternate(sides, rounds=rounds, warmup=warmup)


@pytest.mark.parametrize("port", [True, -1, 65536, 1.5])
def test_port_is_taken_names_a_port_that_is_not_one(port):
    from helpers.setup.processes import port_is_taken
    with pytest.raises(ValueError, match="TCP port"):
        port_is_taken(port)


def test_a_child_imports_the_parents_helpers_not_a_copy_in_its_working_folder(tmp_path):
    """A `helpers/` folder in the working folder (a workshop kit's copy, say) must not shadow the parent's."""
    import subprocess
    import sys

    import helpers
    from helpers.setup.processes import child_environment

    shadow = tmp_path / "helpers"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise SystemExit('the shadow copy ran')\n")
    done = subprocess.run([sys.executable, "-c", "import helpers; print(helpers.__file__)"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env=child_environment(gpu=False))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == helpers.__file__, done.stdout

# ------------------------------------------------------------------ round three of the review: the label check


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


@pytest.mark.parametrize("num_shards, total", [(True, 10), (2, True), (2, 10**30), (2.0, 10)])
def test_write_shards_names_counts_that_are_not_whole_numbers_of_a_sane_size(tmp_path, num_shards, total):
    images = np.zeros((10, 28, 28), np.uint8)
    with pytest.raises(ValueError, match="whole number"):
        write_shards(zip(images, range(10)), tmp_path, "train", num_shards, total=total, progress=False)
    assert not list(tmp_path.iterdir())   # nothing written


def test_a_memory_budget_larger_than_setrlimit_takes_is_refused():
    from helpers.measure.peak_memory import check_budget
    with pytest.raises(ValueError, match="at most 2"):
        check_budget(1e30)
