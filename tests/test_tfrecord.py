import errno
import json
import os
import signal
import subprocess
import sys
import textwrap
import time
import warnings
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from helpers.storage import tfrecord as T
from helpers.storage.tfrecord import read_split   # notebook 04's pipeline, with the manifest's checks
from helpers.storage.tfrecord import FeatureSpec, ShardError, load_manifest, write_shards
from tests.conftest import edit_manifest, finishes_within, small_split, small_split_named
from tests.test_clear_errors import case_manifest_file_outside_the_folder

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


# ---------------------------------------------------------------- nothing outside the folder is touched


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


def test_nothing_is_written_outside_the_folder_for_a_bad_split_name(tmp_path):
    for split in ("../escape", "/tmp/abs", "a/b", "", "..", "."):
        with pytest.raises(ShardError, match="must be one plain name"):
            small_split_named(tmp_path / "shards", split)
    assert sorted(p.name for p in tmp_path.rglob("*")) in ([], ["shards"])


# ---------------------------------------------------------------- writers side by side


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


# ---------------------------------------------------------------- a resume proves it continues the same data; a finished write is left alone


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


def test_a_writer_removes_only_its_own_temporary_files(tmp_path):
    others = ["train-extra-00000-of-00002.tfrecord.0123abcd.partial",      # another split's shard in progress
              "train-00000-of-00002-89abcdef.blocks.tfrecord.0123abcd.partial"]  # write_blocks of the same split
    own = "train-00001-of-00004.tfrecord.fedcba98.partial"                 # a killed run of this very split
    tmp_path.mkdir(exist_ok=True)
    for name in [*others, own]:
        (tmp_path / name).write_bytes(b"in progress")
    small_split(tmp_path, n=40, num_shards=4)
    assert all((tmp_path / name).exists() for name in others) and not (tmp_path / own).exists()


# ---------------------------------------------------------------- damage found and named; reads that end


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


def test_verify_catches_a_shard_whose_record_count_was_edited(tmp_path):
    small_split(tmp_path, n=40, num_shards=4)

    def shrink(split):   # shard 0 holds 10 records; say 1, and keep the total consistent with it
        split["shards"][0]["records"] = 1
        split["total_records"] = 31

    edit_manifest(tmp_path, shrink)
    with pytest.raises(ShardError, match=r"train-00000-of-00004\.tfrecord: holds 10 records but the manifest says 1"):
        read_split(tmp_path, "train", 8, verify=True)


def test_a_total_that_does_not_add_up_is_refused_without_verify(tmp_path):
    small_split(tmp_path, n=40, num_shards=4)
    edit_manifest(tmp_path, lambda split: split.update(total_records=30))
    with pytest.raises(ShardError, match="total_records=30 in 4 shards, but its 4 shards list 40 records"):
        read_split(tmp_path, "train", 8)


def test_ignore_errors_after_read_split_ends_with_the_readable_records(tmp_path):
    manifest = small_split(tmp_path, n=40, num_shards=2)
    victim = tmp_path / manifest.shards[0].file
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    for batch_size in (None, 4):
        ds = read_split(tmp_path, "train", batch_size).ignore_errors()
        assert int(ds.cardinality()) != 0
        batches = finishes_within(30, lambda: list(ds))
        labels = [int(v) for _, y in batches for v in np.atleast_1d(y.numpy())]
        assert 20 <= len(labels) < 40 and set(range(20, 40)) <= set(labels)   # shard 1 whole, shard 0 in part


def test_a_dataset_that_ends_before_its_length_says_so_and_ignore_errors_ends():
    from helpers.storage.tfrecord.read import exact_length

    three_of_five = exact_length(tf.data.Dataset.range(3), 5, "a test split")
    assert int(three_of_five.cardinality()) == 5            # known to Keras, as assert_cardinality gives
    with pytest.raises(tf.errors.InvalidArgumentError, match="a test split ended before the 5 elements"):
        list(three_of_five)
    assert [int(v) for v in finishes_within(20, lambda: list(three_of_five.ignore_errors()))] == [0, 1, 2]
    # What it replaces never ends: assert_cardinality's error, ignored, is raised again for ever. Shown in a child
    # process that is killed after 3 s (a thread here would spin on a core for the rest of the test run).
    looping = ("import sys, tensorflow as tf\n"
               "ds = tf.data.Dataset.range(3).apply(tf.data.experimental.assert_cardinality(5)).ignore_errors()\n"
               "print('reading', flush=True)\n"
               "list(ds)\n")
    child = subprocess.Popen([sys.executable, "-c", looping], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    try:
        assert child.stdout.readline().strip() == "reading"
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=3)
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------- shards that are empty, out of order, or counted wrongly


def test_an_empty_shard_never_decides_the_splits_image_spec(tmp_path):
    images = np.zeros((1, 6, 6), np.uint8)
    with pytest.raises(ShardError, match="hold no records.*spec="):   # first: its spec would have been (0,)
        write_shards(iter([]), tmp_path, "train", 2, total=1, shards=[1], progress=False)
    assert "train" not in load_manifest(tmp_path)
    write_shards(zip(images, [3]), tmp_path, "train", 2, total=1, shards=[0], progress=False)
    manifest = write_shards(iter([]), tmp_path, "train", 2, total=1, shards=[1], progress=False)  # after: adopts it
    assert manifest.complete and manifest.spec == FeatureSpec((6, 6), "uint8")


def test_shards_listed_out_of_order_are_refused_not_swapped(tmp_path):
    images = np.arange(4).reshape(4, 1, 1).astype(np.uint8)
    records = [(images[i], i) for i in (3, 1)]   # shard 3's record, then shard 1's, as listed
    with pytest.raises(ValueError, match="increasing order"):
        write_shards(iter(records), tmp_path, "train", 4, total=4, shards=[3, 1], progress=False)
    with pytest.raises(ValueError, match="increasing order"):
        write_shards(iter(records), tmp_path, "train", 4, total=4, shards=[1, 1], progress=False)
    assert not list(tmp_path.glob("*.tfrecord"))


@pytest.mark.parametrize("num_shards, total", [(True, 10), (2, True), (2, 10**30), (2.0, 10)])
def test_write_shards_names_counts_that_are_not_whole_numbers_of_a_sane_size(tmp_path, num_shards, total):
    images = np.zeros((10, 28, 28), np.uint8)
    with pytest.raises(ValueError, match="whole number"):
        write_shards(zip(images, range(10)), tmp_path, "train", num_shards, total=total, progress=False)
    assert not list(tmp_path.iterdir())   # nothing written


# ---------------------------------------------------------------- notebook 02's lesson writer


def test_two_lesson_writers_of_one_split_at_once_each_leave_whole_files(tmp_path, monkeypatch):
    """Notebook 02's write_tfrecords, run twice at once into one folder (two kernels, say): both finish and every
    shard is one writer's whole file (with one shared temporary name, one writer's file was cut into by the other
    and the second rename found nothing)."""
    import threading
    from helpers.lessons import tfrecord_conversion as lesson

    both_writing, example = threading.Barrier(2, timeout=30), lesson.image_example
    def meet_after_first(image, label):   # both writers hold an open shard before either goes on
        if not getattr(started, "done", False):
            started.done = True
            both_writing.wait()
        return example(image, label)
    started = threading.local()
    monkeypatch.setattr(lesson, "image_example", meet_after_first)
    images = {which: np.full((300, 28, 28), which, np.uint8) for which in (1, 2)}
    errors = []
    def write(which):
        try:
            lesson.write_tfrecords(images[which], np.full(300, which), tmp_path, "train", 2)
        except Exception as e:   # noqa: BLE001 - reported below
            errors.append(e)
    threads = [threading.Thread(target=write, args=(which,)) for which in (1, 2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors, errors
    for path in sorted(tmp_path.glob("train-*.tfrecord")):
        x, y = (np.concatenate(parts) for parts in zip(*lesson.read_tfrecords([str(path)], 64).as_numpy_iterator()))
        assert len(y) == 150 and len(set(y.tolist())) == 1 and (x == y[0]).all(), path.name
    assert not list(tmp_path.glob("*.partial"))


def test_the_lesson_writer_refuses_images_and_labels_of_different_lengths(tmp_path):
    from helpers.lessons.tfrecord_conversion import write_tfrecords
    with pytest.raises(ValueError, match="10 images but 12 labels"):   # the two extra labels were dropped
        write_tfrecords(np.zeros((10, 28, 28), np.uint8), np.zeros(12), tmp_path, "train", 2)
    assert not list(tmp_path.iterdir())
