import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.storage import tfrecord as T
from helpers.storage.tfrecord import read_split   # notebook 04's pipeline, with the manifest's checks
from helpers.storage.tfrecord import FeatureSpec, ShardError

ROOT = Path(__file__).resolve().parent.parent

RAW_DTYPES = ["uint8", "int8", "int16", "uint16", "int32", "int64", "float16", "float32", "float64"]


def random_images(rng, n, shape, dtype):
    dtype = np.dtype(dtype)
    if dtype.kind == "f":
        return (rng.standard_normal((n, *shape)) * 1000).astype(dtype)
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max, size=(n, *shape), dtype=dtype, endpoint=True)


def read_all(directory, split, batch_size, vectorized):
    ds = read_split(directory, split, batch_size, vectorized=vectorized)
    images, labels = [], []
    for x, y in ds.as_numpy_iterator():
        images.append(x if batch_size else x[None])
        labels.append(y if batch_size else np.array([y]))
    return np.concatenate(images), np.concatenate(labels)


@st.composite
def write_cases(draw):
    encoding = draw(st.sampled_from(["raw", "float_list", "tensor"]))
    dtypes = T.FLOAT_LIST_DTYPES if encoding == "float_list" else RAW_DTYPES
    return dict(
        encoding=encoding,
        dtype=draw(st.sampled_from(dtypes)),
        shape=tuple(draw(st.lists(st.integers(1, 5), min_size=1, max_size=3))),
        n=draw(st.integers(1, 12)),
        num_shards=draw(st.integers(1, 4)),
        compression=draw(st.sampled_from([None, "GZIP"])),
        batch_size=draw(st.sampled_from([None, 1, 5])),
        vectorized=draw(st.booleans()),
        seed=draw(st.integers(0, 2**16)),
    )


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(case=write_cases())
def test_round_trip_is_bit_for_bit(tmp_path_factory, case):
    directory = tmp_path_factory.mktemp("shards")
    rng = np.random.default_rng(case["seed"])
    images = random_images(rng, case["n"], case["shape"], case["dtype"])
    labels = rng.integers(0, 2**40, case["n"])   # labels are class numbers: from 0 (helpers.storage.labels)
    manifest = T.write_shards(
        zip(images, labels), directory, "train", case["num_shards"], total=case["n"],
        encoding=case["encoding"], compression=case["compression"], progress=False,
    )
    # The manifest's counts are right, per shard and in total, and match what is on disk.
    assert [s.records for s in manifest.shards] == T.shard_sizes(case["n"], case["num_shards"])
    assert manifest.total_records == case["n"] and manifest.complete
    on_disk = T.count_records(manifest.files(directory), case["compression"])
    assert list(on_disk.values()) == [s.records for s in manifest.shards]
    assert sorted(p.name for p in directory.glob("*.tfrecord")) == [
        T.shard_name("train", i, case["num_shards"]) for i in range(case["num_shards"])
    ]
    # Reading gives back the same values, dtype and shape, in order.
    got_images, got_labels = read_all(directory, "train", case["batch_size"], case["vectorized"])
    assert got_images.dtype == images.dtype and got_images.shape == images.shape
    assert got_images.tobytes() == images.tobytes()  # bit for bit, NaN-safe
    assert np.array_equal(got_labels, labels)


def test_png_encoding_stores_the_file_bytes_and_decodes_at_read_time(tmp_path):
    import tensorflow as tf

    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, (7, 8, 6, 3), dtype=np.uint8)
    pngs = [tf.io.encode_png(img).numpy() for img in images]
    T.write_shards(zip(pngs, range(7)), tmp_path, "train", 2, total=7, encoding="png",
                   spec=FeatureSpec((8, 6, 3), "uint8"), progress=False)
    for vectorized in (True, False):
        got, labels = read_all(tmp_path, "train", 3, vectorized)
        assert np.array_equal(got, images) and labels.tolist() == list(range(7))


def test_fast_raw_encoder_gives_the_same_bytes_as_the_plain_one():
    encoder = T.RawExampleEncoder()
    rng = np.random.default_rng(1)
    for label in (0, 9, 2**40, -3):
        image = rng.integers(0, 256, (28, 28), dtype=np.uint8)
        assert encoder(image, label) == T.example_from_raw(image, label)
    # The bytes it joins around the pixels, learnt once per (length, label): every size (an empty image, one
    # whose length needs a longer varint), every value of the pixels, views that are not contiguous, other
    # dtypes, and the same pair again, each byte for byte what a serialized message gives.
    images = [np.zeros(0, np.uint8), np.zeros((1,), np.uint8), np.full((28, 28), 255, np.uint8),
              rng.integers(0, 256, (224, 224, 3), dtype=np.uint8), rng.integers(0, 256, (64, 64), np.uint8)[::2, 1::3],
              rng.integers(0, 2**16, (8, 8), dtype=np.uint16), rng.random((4, 5), dtype=np.float32)]
    for image in images:
        for label in (0, 1, 127, 128, 300):
            for _ in range(2):
                assert encoder(image, label) == T.example_from_raw(image, label), (image.shape, label)
                image = rng.permutation(image.ravel()).reshape(image.shape)   # other pixels, same length
    # Every pair of an image of 16 bytes or more was learnt (a byte or two can also be found in the framing: then
    # the pair is serialized as a message, still the same bytes).
    assert len(encoder._around) > 30 and all(v is not None for (n, _), v in encoder._around.items() if n >= 16)


def test_fast_raw_encoder_finds_the_pixels_whatever_they_look_like():
    """A hostile user's attack: a one-byte image learnt from pixel 0x01 (a byte of the framing too) once
    corrupted every later one-byte image of its label; zero-size images of several dimensions, datetimes and
    object arrays failed to view as bytes; labels that are per-record ids grew the encoder's memory."""
    encoder = T.RawExampleEncoder()
    for first, then in ((1, 0), (10, 200), (0, 1)):
        encoder(np.array([[first]], np.uint8), 3)
        image = np.array([[then]], np.uint8)
        assert encoder(image, 3) == T.example_from_raw(image, 3), (first, then)
    for image in (np.zeros((3, 2, 0), np.uint8), np.zeros((2, 2), "datetime64[s]"), np.zeros((2,), "timedelta64[ms]"),
                  np.array([True]), np.uint8(7), np.array([None, 1], dtype=object)):
        assert encoder(image, 1) == T.example_from_raw(image, 1), image.dtype
    many = T.RawExampleEncoder()
    for label in range(many.MAX_PAIRS + 50):
        image = np.full(16, label % 256, np.uint8)
        assert many(image, label) == T.example_from_raw(image, label)
    assert len(many._around) == many.MAX_PAIRS


def test_fast_raw_encoder_serializes_a_pair_it_could_not_learn(monkeypatch):
    encoder = T.RawExampleEncoder()
    monkeypatch.setattr(encoder, "_learn", lambda pixels, label: None)   # as if the layout were not understood
    image = np.arange(784, dtype=np.uint8).reshape(28, 28)
    assert encoder(image, 5) == encoder(image, 5) == T.example_from_raw(image, 5)
    assert encoder._around == {(784, 5): None}


def test_default_encoding_costs_little_more_than_the_pixels(tmp_path):
    images = np.zeros((500, 28, 28), np.uint8)
    manifest = T.write_shards(zip(images, [3] * 500), tmp_path, "train", 2, total=500, progress=False)
    assert sum(s.bytes for s in manifest.shards) / images.nbytes <= 1.10
    saved = json.loads((tmp_path / "manifest.json").read_text())["splits"]["train"]
    assert saved["encoding"] == "raw" and saved["compression"] is None
    assert saved["feature_spec"] == {"image": {"shape": [28, 28], "dtype": "uint8"}, "label": {"dtype": "int64"}}
    assert all(len(s["sha256"]) == 64 for s in saved["shards"])


def test_two_splits_share_one_manifest(tmp_path):
    T.write_shards(zip(np.zeros((6, 2), np.uint8), range(6)), tmp_path, "train", 3, total=6, progress=False)
    T.write_shards(zip(np.ones((4, 2), np.uint8), range(4)), tmp_path, "test", 1, total=4, progress=False)
    splits = T.load_manifest(tmp_path)
    assert {k: v.total_records for k, v in splits.items()} == {"train": 6, "test": 4}


# ---------------------------------------------------------------- clear errors


def test_record_that_does_not_match_the_spec_is_named(tmp_path):
    images = [np.zeros((28, 28), np.uint8)] * 3 + [np.zeros((32, 32), np.uint8)]
    with pytest.raises(ShardError, match=r"record 3: image is uint8 \(32, 32\), but the feature spec says uint8 \(28, 28\)"):
        T.write_shards(zip(images, range(4)), tmp_path, "train", 2, total=4, progress=False)
    with pytest.raises(ShardError, match=r"record 0: image is uint8 \(28, 28\).*float32 \(28, 28\)"):
        T.write_shards(zip(images, range(4)), tmp_path / "b", "train", 1, total=4, spec=FeatureSpec((28, 28), "float32"), progress=False)


def test_generator_without_total_asks_for_it(tmp_path):
    with pytest.raises(TypeError, match="pass total="):
        T.write_shards(((np.zeros(2), 0) for _ in range(3)), tmp_path, "train", 1, progress=False)


def test_too_few_or_too_many_records_are_refused(tmp_path):
    images = np.zeros((5, 2), np.uint8)
    with pytest.raises(ShardError, match="records ended after 5, but total=6"):
        T.write_shards(zip(images, range(5)), tmp_path / "a", "train", 2, total=6, progress=False)
    assert not (tmp_path / "a" / "train-00001-of-00002.tfrecord").exists()
    assert not list((tmp_path / "a").glob("*.partial"))
    with pytest.raises(ShardError, match="more records than total=4"):
        T.write_shards(zip(images, range(5)), tmp_path / "b", "train", 2, total=4, progress=False)


def test_float_list_refuses_dtypes_it_would_round(tmp_path):
    with pytest.raises(ShardError, match="cannot hold every int32 value exactly"):
        T.write_shards(zip(np.zeros((2, 3), np.int32), range(2)), tmp_path, "t", 1, total=2, encoding="float_list", progress=False)


def test_rerun_with_other_settings_is_refused(tmp_path):
    images = np.zeros((4, 2), np.uint8)
    T.write_shards(zip(images, range(4)), tmp_path, "train", 2, total=4, progress=False)
    with pytest.raises(ShardError, match="written with other settings"):
        T.write_shards(zip(images, range(4)), tmp_path, "train", 3, total=4, progress=False)


def test_other_data_is_never_taken_for_complete_shards(tmp_path):
    first, second = np.zeros((4, 2), np.uint8), np.ones((4, 2), np.uint8)
    T.write_shards(zip(first, range(4)), tmp_path, "train", 2, total=4, fingerprint=T.fingerprint_arrays(first), progress=False)
    with pytest.raises(ShardError, match="other settings or data"):
        T.write_shards(zip(second, range(4)), tmp_path, "train", 2, total=4, fingerprint=T.fingerprint_arrays(second), progress=False)
    T.write_shards(zip(second, range(4)), tmp_path, "train", 2, total=4, fingerprint=T.fingerprint_arrays(second),
                   overwrite=True, progress=False)
    got, _ = read_all(tmp_path, "train", 4, True)
    assert np.array_equal(got, second)
    assert T.fingerprint_arrays(first) != T.fingerprint_arrays(first.astype(np.int8))


def test_reading_a_missing_split_says_which_exist(tmp_path):
    T.write_shards(zip(np.zeros((2, 2), np.uint8), range(2)), tmp_path, "train", 1, total=2, progress=False)
    with pytest.raises(ShardError, match=r"no split 'validation' \(splits there: train\)"):
        read_split(tmp_path, "validation")
    with pytest.raises(ShardError, match=r"no split 'validation'"):
        T.verify_shards(tmp_path, "validation")


def _write_small(directory, n=40, num_shards=4, compression=None):
    images = np.arange(n * 16, dtype=np.uint8).reshape(n, 4, 4)
    return T.write_shards(zip(images, range(n)), directory, "train", num_shards, total=n, compression=compression, progress=False)


@pytest.mark.parametrize("compression", [None, "GZIP"])
def test_flipped_byte_is_reported_with_the_shard_name(tmp_path, compression):
    manifest = _write_small(tmp_path, compression=compression)
    bad = tmp_path / manifest.shards[1].file
    data = bytearray(bad.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad.write_bytes(bytes(data))
    reports = T.verify_shards(tmp_path)
    assert [r.ok for r in reports] == [True, False, True, True]
    assert reports[1].file.endswith(manifest.shards[1].file)
    text = str(reports[1])
    assert manifest.shards[1].file in text and "PROBLEM" in text and "function_node" not in text
    with pytest.raises(ShardError) as err:
        T.count_records([bad], compression)
    assert str(bad) in str(err.value) and "unreadable" in str(err.value)


def test_truncated_shard_is_reported_with_the_record_where_it_stops(tmp_path):
    manifest = _write_small(tmp_path)
    bad = tmp_path / manifest.shards[2].file
    bad.write_bytes(bad.read_bytes()[:-10])
    report = T.verify_shards(tmp_path)[2]
    assert not report.ok and report.records == manifest.shards[2].records - 1
    assert "ends in the middle of a record" in report.problem


def test_missing_and_changed_shards_are_reported(tmp_path):
    manifest = _write_small(tmp_path)
    (tmp_path / manifest.shards[0].file).unlink()
    other = _write_small(tmp_path / "other", n=44)  # a valid shard with other contents
    (tmp_path / manifest.shards[3].file).write_bytes((tmp_path / "other" / other.shards[3].file).read_bytes())
    problems = [r.problem for r in T.verify_shards(tmp_path, "train")]
    assert problems[0] == "the file is missing"
    assert problems[1] is None and problems[2] is None
    assert "manifest says 10" in problems[3]


# ---------------------------------------------------------------- atomic writes and resume


def test_exception_mid_shard_leaves_no_file_under_a_final_name(tmp_path):
    def records():
        for i in range(40):
            if i == 25:
                raise KeyboardInterrupt  # as if the learner pressed stop
            yield np.full((4, 4), i, np.uint8), i

    with pytest.raises(KeyboardInterrupt):
        T.write_shards(records(), tmp_path, "train", 4, total=40, progress=False)
    assert sorted(p.name for p in tmp_path.iterdir() if not p.name.startswith(".")) == [  # not the lock files
        "manifest.json", "train-00000-of-00004.tfrecord", "train-00001-of-00004.tfrecord"
    ]
    *written, unwritten = T.verify_shards(tmp_path)
    assert [r.ok for r in written] == [True, True]
    assert unwritten.problem == "2 shard(s) never written: resume the write"
    with pytest.raises(ShardError, match="incomplete .2 of 4 shards written.*resume"):
        read_split(tmp_path, "train")


KILLED_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    from helpers.storage.tfrecord import write_shards

    out, marker = Path(sys.argv[1]), Path(sys.argv[2])

    def records():
        for i in range(40):
            if i == 25:                # in the middle of shard 2 (records 20-29)
                marker.touch()
                time.sleep(600)        # wait here to be killed
            yield np.full((4, 4), i, np.uint8), i

    write_shards(records(), out, "train", 4, total=40, progress=False)
""")


def test_killed_writer_leaves_only_complete_files_and_resumes(tmp_path):
    out, marker = tmp_path / "shards", tmp_path / "marker"
    script = tmp_path / "writer.py"
    script.write_text(KILLED_WRITER)
    process = subprocess.Popen([sys.executable, str(script), str(out), str(marker)], cwd=ROOT,
                               env={**os.environ, "PYTHONPATH": str(ROOT)})
    deadline = time.monotonic() + 120
    while not marker.exists():
        assert process.poll() is None and time.monotonic() < deadline, "the writer never reached shard 2"
        time.sleep(0.1)
    process.send_signal(signal.SIGKILL)
    process.wait()

    names = sorted(p.name for p in out.iterdir())
    assert "train-00002-of-00004.tfrecord" not in names and "train-00003-of-00004.tfrecord" not in names
    # the unfinished shard, under a temporary name
    partials = [n for n in names if n.endswith(".partial")]
    assert len(partials) == 1 and partials[0].startswith("train-00002-of-00004.tfrecord.")
    assert all(r.ok for r in T.verify_shards(out) if "*" not in r.file)  # every final-named file is whole
    first_shard = out / "train-00000-of-00004.tfrecord"
    stamp = first_shard.stat().st_mtime_ns

    images = np.stack([np.full((4, 4), i, np.uint8) for i in range(40)])
    manifest = T.write_shards(zip(images, range(40)), out, "train", 4, total=40, progress=False)
    assert manifest.complete and first_shard.stat().st_mtime_ns == stamp  # complete shards were skipped
    assert not list(out.glob("*.partial"))
    got, labels = read_all(out, "train", 7, True)
    assert np.array_equal(got, images) and labels.tolist() == list(range(40))
    clean = T.write_shards(zip(images, range(40)), tmp_path / "clean", "train", 4, total=40, progress=False)
    assert [s.sha256 for s in manifest.shards] == [s.sha256 for s in clean.shards]


def test_resume_rewrites_a_shard_whose_checksum_no_longer_matches(tmp_path):
    manifest = _write_small(tmp_path)
    damaged = tmp_path / manifest.shards[1].file
    damaged.write_bytes(damaged.read_bytes()[:-1])
    _write_small(tmp_path)
    assert all(r.ok for r in T.verify_shards(tmp_path))


def test_write_shards_writes_notebook_02s_record_format_and_its_parse_reads_it(tmp_path):
    """The series' format is the one notebook 02 teaches (`image_example`, `parse_batch`): the writer's faster
    encoder gives the same bytes, and the lesson's parse reads the shards back."""
    import tensorflow as tf
    from helpers.lessons.tfrecord_conversion import image_example, parse_batch

    images = np.random.default_rng(3).integers(0, 256, (5, 4, 3), dtype=np.uint8)
    labels = np.array([0, 9, 3, 2**40, 1])
    manifest = T.write_shards(zip(images, labels), tmp_path, "train", 1, total=5, progress=False)
    written = [r.numpy() for r in tf.data.TFRecordDataset(manifest.files(tmp_path))]
    assert written == [image_example(x, y).SerializeToString(deterministic=True) for x, y in zip(images, labels)]
    got_images, got_labels = parse_batch(tf.constant(written), shape=(4, 3))
    assert np.array_equal(got_images.numpy(), images) and got_labels.numpy().tolist() == labels.tolist()
