"""Several processes writing the shards of one split at once (notebook 07): each shard locked, each finished shard
added to the manifest under its lock; a writer killed with SIGKILL leaves only whole files and resumes."""
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

from helpers.storage import tfrecord as T
from helpers.storage.tfrecord import read_split   # notebook 04's pipeline, with the manifest's checks
from helpers.storage.tfrecord import FeatureSpec, ShardError
from helpers.storage.tfrecord.manifest import SplitManifest, update_split
from helpers.storage.tfrecord.write import shard_range

ROOT = Path(__file__).resolve().parent.parent
TOTAL, NUM_SHARDS = 60, 6


def image(position):
    return np.full((4, 4), position % 256, np.uint8)


def records_of(shards, total=TOTAL, num_shards=NUM_SHARDS):
    """The records of `shards`, in index order: what one of several writers passes."""
    return ((image(p), p) for i in sorted(shards) for p in shard_range(total, num_shards, i))


def write_part(directory, shards, **kwargs):
    return T.write_shards(records_of(shards), directory, "train", NUM_SHARDS, total=TOTAL, shards=shards,
                          progress=False, **kwargs)


def whole(directory):
    return T.write_shards(records_of(range(NUM_SHARDS)), directory, "train", NUM_SHARDS, total=TOTAL, progress=False)


def labels_read(directory):
    return np.concatenate([y.numpy() for _, y in read_split(directory, "train", 7)]).tolist()


# A writer of some shards, in its own process: sleeps `pause` s per record (so that writers overlap), and before
# record `stop_at` (a position in the split) touches `marker` and waits to be killed.
PART_WRITER = textwrap.dedent("""
    import sys, time
    from pathlib import Path
    import numpy as np
    from helpers.storage.tfrecord import write_shards
    from helpers.storage.tfrecord.write import shard_range

    out, shards, pause, stop_at, marker = sys.argv[1], [int(i) for i in sys.argv[2].split(",")], \\
        float(sys.argv[3]), int(sys.argv[4]), Path(sys.argv[5])

    def records():
        for i in shards:
            for p in shard_range({total}, {num_shards}, i):
                if p == stop_at:
                    marker.touch()
                    time.sleep(600)
                time.sleep(pause)
                yield np.full((4, 4), p % 256, np.uint8), p

    write_shards(records(), out, "train", {num_shards}, total={total}, shards=shards, progress=False)
""").format(total=TOTAL, num_shards=NUM_SHARDS)


def start_writer(tmp_path, out, shards, pause=0.0, stop_at=-1, name="w"):
    script = tmp_path / "part_writer.py"
    script.write_text(PART_WRITER)
    marker = tmp_path / f"marker-{name}"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    process = subprocess.Popen([sys.executable, str(script), str(out), ",".join(map(str, shards)), str(pause),
                                str(stop_at), str(marker)], env=env, stderr=subprocess.PIPE, text=True)
    return process, marker


def wait_for(marker, process, seconds=120):
    deadline = time.monotonic() + seconds
    while not marker.exists():
        assert process.poll() is None and time.monotonic() < deadline, process.stderr.read() if process.poll() else ""
        time.sleep(0.05)


def test_shards_written_in_any_order_complete_the_split_with_the_last_one(tmp_path):
    for part in ([1, 4], [5], [0, 2]):   # (each list in index order, as its records come)
        manifest = write_part(tmp_path, part)
        assert not manifest.complete
        with pytest.raises(ShardError, match=r"incomplete \(\d of 6 shards written\)"):
            read_split(tmp_path, "train")
    assert [s.file[6:11] for s in manifest.shards] == ["00000", "00001", "00002", "00004", "00005"]   # by index
    manifest = write_part(tmp_path, [3])
    assert manifest.complete and labels_read(tmp_path) == list(range(TOTAL))
    clean = whole(tmp_path / "clean")
    assert [s.sha256 for s in manifest.shards] == [s.sha256 for s in clean.shards]
    assert all(r.ok for r in T.verify_shards(tmp_path))


def test_two_processes_write_one_split_at_once(tmp_path):
    out = tmp_path / "shards"
    writers = [start_writer(tmp_path, out, shards, pause=0.01, name=str(n))[0]
               for n, shards in enumerate(([0, 2, 4], [1, 3, 5]))]
    errors = [w.communicate(timeout=240)[1] for w in writers]
    assert [w.returncode for w in writers] == [0, 0], errors
    manifest = T.read_manifest(out, "train")
    assert manifest.complete and [s.records for s in manifest.shards] == T.shard_sizes(TOTAL, NUM_SHARDS)
    assert labels_read(out) == list(range(TOTAL)) and all(r.ok for r in T.verify_shards(out))
    assert not list(out.glob("*.partial"))


def test_a_writer_killed_beside_another_leaves_whole_files_and_resumes(tmp_path):
    out = tmp_path / "shards"
    # The killed writer has finished shard 1 and is in shard 3 (positions 30-39); the other writes 0, 2, 4, 5.
    killed, marker = start_writer(tmp_path, out, [1, 3], stop_at=35, name="killed")
    other, _ = start_writer(tmp_path, out, [0, 2, 4, 5], pause=0.005, name="other")
    wait_for(marker, killed)
    killed.send_signal(signal.SIGKILL)
    killed.wait()
    assert other.wait(timeout=240) == 0, other.stderr.read()

    manifest = T.load_manifest(out)["train"]
    assert not manifest.complete and [s.file[6:11] for s in manifest.shards] == ["00000", "00001", "00002", "00004",
                                                                                  "00005"]
    assert not (out / T.shard_name("train", 3, NUM_SHARDS)).exists()
    assert [p.name.split(".")[0] for p in out.glob("*.partial")] == ["train-00003-of-00006"]   # its half shard
    assert all(r.ok for r in T.verify_shards(out) if "*" not in r.file)
    stamp = (out / T.shard_name("train", 1, NUM_SHARDS)).stat().st_mtime_ns

    manifest = write_part(out, [1, 3])   # the killed writer's call again: its lock died with it
    assert manifest.complete and not list(out.glob("*.partial"))
    assert (out / T.shard_name("train", 1, NUM_SHARDS)).stat().st_mtime_ns == stamp   # whole: skipped
    assert labels_read(out) == list(range(TOTAL))
    assert [s.sha256 for s in manifest.shards] == [s.sha256 for s in whole(tmp_path / "clean").shards]


def test_a_shard_being_written_is_refused_to_a_second_writer_naming_the_holder(tmp_path):
    out = tmp_path / "shards"
    holder, marker = start_writer(tmp_path, out, [2, 3], stop_at=25, name="holder")
    try:
        wait_for(marker, holder)
        for call in (lambda: write_part(out, [3, 4]), lambda: whole(out)):
            with pytest.raises(ShardError, match=rf"shard [23] of split 'train' in .* is in use by another process "
                                                 rf"\(process {holder.pid};"):
                call()
        write_part(out, [0, 1, 4, 5])   # the other shards meanwhile
    finally:
        holder.kill()
        holder.wait()
    assert write_part(out, [2, 3]).complete and labels_read(out) == list(range(TOTAL))


def test_writers_of_one_split_must_agree_on_its_settings(tmp_path):
    write_part(tmp_path, [0])
    with pytest.raises(ShardError, match="other settings"):
        T.write_shards(records_of([1]), tmp_path, "train", NUM_SHARDS, total=TOTAL, shards=[1], fingerprint="other",
                       progress=False)
    # A writer that started before another changed the split's settings is stopped when it records its shard.
    other = SplitManifest("train", "raw", None, FeatureSpec((2, 2), "uint8").to_json(), 1, 3)
    with pytest.raises(ShardError, match="written with other settings by another writer while this one ran"):
        update_split(tmp_path, other)
    # overwrite=True with shards= replaces the entry and only this writer's files
    manifest = T.write_shards(records_of([1]), tmp_path, "train", NUM_SHARDS, total=TOTAL, shards=[1],
                              fingerprint="other", overwrite=True, progress=False)
    assert manifest.fingerprint == "other" and [s.file[6:11] for s in manifest.shards] == ["00001"]


def test_a_writer_of_some_shards_checks_its_arguments_and_record_count(tmp_path):
    with pytest.raises(TypeError, match="pass total="):
        T.write_shards(records_of([0]), tmp_path, "train", NUM_SHARDS, shards=[0], progress=False)
    for bad in ([], [6], [-1]):
        with pytest.raises(ValueError, match="shards must be indices from 0 to 5"):
            write_part(tmp_path, bad)
    with pytest.raises(ShardError, match=r"the records ended after 10, but shards \[0, 1\] of split 'train' take 20"):
        T.write_shards(records_of([0]), tmp_path, "train", NUM_SHARDS, total=TOTAL, shards=[0, 1], progress=False)
    with pytest.raises(ShardError, match=r"more records than the 10 that shards \[2\] take"):
        T.write_shards(records_of([2, 3]), tmp_path, "train", NUM_SHARDS, total=TOTAL, shards=[2], progress=False)


def test_a_manifest_lists_shards_by_increasing_index(tmp_path):
    whole(tmp_path)
    path = tmp_path / "manifest.json"
    doc = json.loads(path.read_text())
    entry = doc["splits"]["train"]
    entry["shards"] = [entry["shards"][i] for i in (0, 2, 4)]   # some shards missing: a write under way
    entry["complete"] = False
    path.write_text(json.dumps(doc))
    assert len(T.load_manifest(tmp_path)["train"].shards) == 3
    entry["shards"] = entry["shards"][::-1]
    path.write_text(json.dumps(doc))
    with pytest.raises(ShardError, match="shard entry 1 .* must be 'train-00005-of-00006.tfrecord' or a later"):
        T.load_manifest(tmp_path)


def test_serialized_records_are_written_and_checked_but_read_only_by_their_own_parser(tmp_path):
    import tensorflow as tf

    def example(data, label):
        feature = {"jpeg": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
                   "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
        return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)

    records = [example(bytes([i]) * (i + 1), i) for i in range(10)]   # of different lengths
    spec = FeatureSpec((8, 8, 3), "uint8")
    manifest = T.write_shards(records, tmp_path, "photos", 3, encoding="serialized", spec=spec, progress=False)
    assert manifest.complete and manifest.encoding == "serialized" and all(r.ok for r in T.verify_shards(tmp_path))
    with pytest.raises(ShardError, match="serialized itself .* read_split cannot parse them"):
        read_split(tmp_path, "photos")
    files = T.read_manifest(tmp_path, "photos", serialized=True).files(tmp_path)
    assert [r.numpy() for r in tf.data.TFRecordDataset(files)] == records
    assert T.write_shards(records, tmp_path, "photos", 3, encoding="serialized", spec=spec, progress=False) == manifest
    with pytest.raises(ValueError, match="needs spec="):
        T.write_shards(records, tmp_path / "x", "photos", 3, encoding="serialized", progress=False)
    with pytest.raises(ShardError, match="record 0: encoding='serialized' takes bytes"):
        T.write_shards([(np.zeros(2), 1)], tmp_path / "y", "photos", 1, encoding="serialized", spec=spec,
                       progress=False)
