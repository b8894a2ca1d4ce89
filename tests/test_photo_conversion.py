"""Notebook 07's conversion in several processes (helpers.scale.parallel_conversion) and its scan of a photo folder
(helpers.storage.photo_scan): the shards of one split written by two processes at once, the same records as the
lesson's record makers give in this process, a resume that rewrites only what is missing, a scratch folder that is
removed, and errors that name what went wrong."""
import functools
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from helpers.data.photos import make_photo_folder, plant_bad_files
from helpers.lessons.capstone_photos import original_record, read_photos, resized_record
from helpers.scale.parallel_conversion import ConversionProcesses, files_fingerprint
from helpers.storage.photo_scan import scan_photos
from helpers.storage.tfrecord import ShardError, load_manifest, read_manifest, verify_shards, write_shards
from tests.conftest import jpeg_file

LESSON = "helpers.lessons.capstone_photos"
MAKERS = {"resized": (f"{LESSON}:resized_record", {"size": 16}), "original": (f"{LESSON}:original_record", {})}


@pytest.fixture(scope="module")
def photos(tmp_path_factory):
    folder = make_photo_folder(tmp_path_factory.mktemp("photos") / "photos", 24, progress=False) / "train"
    paths = sorted(folder.glob("*/*.jpg"))
    classes = sorted({p.parent.name for p in paths})
    return paths, [classes.index(p.parent.name) for p in paths]


@pytest.fixture(scope="module")
def processes():
    with ConversionProcesses(MAKERS, processes=2) as started:
        yield started


def test_two_processes_write_one_split_whose_records_are_the_lessons(tmp_path, photos, processes):
    paths, labels = photos
    seconds = processes.convert(paths, labels, tmp_path, "train", 5, image_shape=(16, 16, 3), num_classes=8)
    assert set(seconds) == {"resized", "original"} and all(s > 0 for s in seconds.values())
    for kind, make in (("resized", lambda p, y: resized_record(p, y, 16)), ("original", original_record)):
        manifest = read_manifest(tmp_path / kind, "train", serialized=True)
        assert manifest.complete and manifest.total_records == len(paths) and len(manifest.shards) == 5
        assert manifest.fingerprint == files_fingerprint(paths)
        written = [r.numpy() for file in manifest.files(tmp_path / kind) for r in tf.data.TFRecordDataset(file)]
        assert sorted(written) == sorted(make(p, y) for p, y in zip(paths, labels))   # every record, once
        assert all(report.ok for report in verify_shards(tmp_path / kind))
    files = read_manifest(tmp_path / "resized", "train", serialized=True).files(tmp_path / "resized")
    streamed = np.concatenate([y.numpy() for _, y in read_photos(files, 8, 16, records=len(paths))])
    assert sorted(streamed) == sorted(labels)


def test_a_resume_writes_only_the_missing_shard_and_a_timing_leaves_no_folder(tmp_path, photos, processes):
    paths, labels = photos
    processes.convert(paths, labels, tmp_path, "train", 4, image_shape=(16, 16, 3), kinds=["resized"])
    shards = read_manifest(tmp_path / "resized", "train", serialized=True).shards
    stamps = {s.file: (tmp_path / "resized" / s.file).stat().st_mtime_ns for s in shards}
    (tmp_path / "resized" / shards[2].file).unlink()
    processes.convert(paths, labels, tmp_path, "train", 4, image_shape=(16, 16, 3), kinds=["resized"])
    changed = [f for f, stamp in stamps.items() if (tmp_path / "resized" / f).stat().st_mtime_ns != stamp]
    assert changed == [shards[2].file]
    before = set(Path("/tmp").glob("conversion-timing-*"))   # tempfile's folder here (TMPDIR is not set)
    rate = processes.records_per_second(paths, labels, "original", using=1, num_shards=2, image_shape=(16, 16, 3))
    assert rate > 0 and set(Path("/tmp").glob("conversion-timing-*")) == before
    assert len(processes.cores_used["original", 1]) == 1 and 0 < processes.cores_used["original", 1][0] < 1.5


def test_bad_arguments_are_refused_by_name_before_a_process_is_asked(tmp_path, photos, processes):
    paths, labels = photos
    with pytest.raises(ValueError, match="whole numbers"):
        processes.convert(paths, [0.5] * len(paths), tmp_path, "train", 2, image_shape=(16, 16, 3))
    with pytest.raises(ValueError, match="no record maker for \\['jpeg'\\]"):
        processes.convert(paths, labels, tmp_path, "train", 2, image_shape=(16, 16, 3), kinds=["jpeg"])
    with pytest.raises(ValueError, match="using=3: there are 2 processes"):
        processes.convert(paths, labels, tmp_path, "train", 2, image_shape=(16, 16, 3), using=3)
    assert not list(tmp_path.iterdir())
    with pytest.raises(ValueError, match="is not a 'helpers.<module>:<function>' name"):
        ConversionProcesses({"x": ("os:system", {})}, processes=1)


def test_a_file_a_maker_cannot_read_stops_the_conversion_with_its_message(tmp_path, photos, processes):
    paths, labels = photos
    broken = tmp_path / "broken.jpg"
    broken.write_bytes(b"not a photo at all")
    with pytest.raises(RuntimeError, match="conversion process 0: .*"):
        processes.convert([broken, *paths[1:]], labels, tmp_path / "out", "train", 2, image_shape=(16, 16, 3))
    # the processes still answer: the failed job's reply was read, none is left for the next call
    processes.convert(paths, labels, tmp_path / "again", "train", 2, image_shape=(16, 16, 3), kinds=["original"])
    assert read_manifest(tmp_path / "again" / "original", "train", serialized=True).complete


def test_the_scan_prints_the_files_that_stand_out_and_returns_every_file(tmp_path, capsys):
    folder = make_photo_folder(tmp_path / "photos", 16, progress=False)
    plant_bad_files(folder, tmp_path / "bad")
    report = scan_photos(tmp_path / "bad" / "train")
    assert sorted(report) == sorted((tmp_path / "bad" / "train").glob("*/*"))
    printed = capsys.readouterr().out
    assert printed.count("LEFT OUT") == 3 and printed.count("used, as RGB") == 3
    assert "train: 19 files looked at; 3 left out, 3 used after conversion to RGB" in printed
    assert scan_photos(tmp_path / "bad" / "val", show=False) and not capsys.readouterr().out


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
