"""The ArrayRecord writer and reader (helpers/storage/array_record.py, notebook 08): round trip, resume after a
killed writer, and bad input named before anything is written or read."""
import json

import numpy as np
import pytest

from helpers.storage.array_record import (MANIFEST, ArrayRecordError, array_record_files, array_record_readers,
                                          array_record_source, decode_batch, decode_blocks, decode_record,
                                          write_array_records)

rng = np.random.default_rng(0)
IMAGES = rng.integers(0, 256, (50, 4, 4), dtype=np.uint8)
LABELS = rng.integers(0, 10, 50)


def test_round_trip(tmp_path):
    info = write_array_records(IMAGES, LABELS, tmp_path, "train", 3, num_classes=10)
    source, info = array_record_source(tmp_path, "train", verify=True)
    assert [s.records for s in info.shards] == [17, 17, 16] and len(source) == 50
    for i in (0, 17, 49):
        image, label = decode_record(source[i], info)
        np.testing.assert_array_equal(image, IMAGES[i])
        assert label == LABELS[i]


def test_a_killed_writer_resumes_at_its_first_missing_shard(tmp_path):
    write_array_records(IMAGES, LABELS, tmp_path, "train", 3)
    doc = json.loads((tmp_path / MANIFEST).read_text())
    last = doc["splits"]["train"]["shards"].pop()   # as if killed while writing the last shard
    doc["splits"]["train"]["complete"] = False
    (tmp_path / MANIFEST).write_text(json.dumps(doc))
    (tmp_path / last["file"]).unlink()
    (tmp_path / f"{last['file']}.0123abcd.partial").write_bytes(b"half")   # its temporary file
    first = (tmp_path / doc["splits"]["train"]["shards"][0]["file"]).stat().st_mtime_ns
    with pytest.raises(ArrayRecordError, match="incomplete"):
        array_record_source(tmp_path, "train")
    info = write_array_records(IMAGES, LABELS, tmp_path, "train", 3)
    assert info.complete and not list(tmp_path.glob("*.partial"))
    assert (tmp_path / info.shards[0].file).stat().st_mtime_ns == first   # finished shards are not rewritten
    array_record_source(tmp_path, "train", verify=True)


@pytest.mark.parametrize("labels, message", [
    (LABELS.astype(float), "whole numbers"),
    (np.where(np.arange(50) == 7, -1, LABELS), "position 7"),
    (np.where(np.arange(50) == 3, 10, LABELS), "outside 0 to 9"),
    (LABELS[:49], "50 images but 49 labels"),
])
def test_bad_labels_are_named_before_any_write(tmp_path, labels, message):
    with pytest.raises(ValueError, match=message):
        write_array_records(IMAGES, labels, tmp_path / "out", "train", 2, num_classes=10)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("split, shards, message", [("../up", 2, "plain name"), ("train", 0, "at least 1"),
                                                    ("train", True, "at least 1"), ("train", 51, "empty")])
def test_bad_arguments(tmp_path, split, shards, message):
    with pytest.raises(ValueError, match=message):
        write_array_records(IMAGES, LABELS, tmp_path, split, shards)


def test_other_data_over_a_split_is_refused_not_overwritten(tmp_path):
    write_array_records(IMAGES, LABELS, tmp_path, "train", 2)
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()}
    with pytest.raises(FileExistsError, match="other data"):
        write_array_records(IMAGES[::-1], LABELS, tmp_path, "train", 2)
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir() if p.is_file()} == before


def test_a_name_in_the_manifest_is_never_a_path(tmp_path):
    write_array_records(IMAGES, LABELS, tmp_path, "train", 2)
    doc = json.loads((tmp_path / MANIFEST).read_text())
    doc["splits"]["train"]["shards"][1]["file"] = "../../etc/passwd"
    (tmp_path / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(ArrayRecordError, match="is named '../../etc/passwd'"):
        array_record_source(tmp_path, "train")


@pytest.mark.parametrize("damage, message", [
    ("missing", "missing"), ("truncated", "bytes, the manifest says"), ("changed", "checksum"),
    ("not json", "not valid JSON"), ("no split", "no split 'train'"),
])
def test_damaged_splits_are_named(tmp_path, damage, message):
    info = write_array_records(IMAGES, LABELS, tmp_path, "train", 2)
    shard = tmp_path / info.shards[1].file
    if damage == "missing":
        shard.unlink()
    elif damage == "truncated":
        shard.write_bytes(shard.read_bytes()[:-10])
    elif damage == "changed":
        data = bytearray(shard.read_bytes())
        data[len(data) // 2] ^= 0xFF
        shard.write_bytes(bytes(data))
    elif damage == "not json":
        (tmp_path / MANIFEST).write_text("{")
    else:
        (tmp_path / MANIFEST).write_text(json.dumps({**json.loads((tmp_path / MANIFEST).read_text()),
                                                     "splits": {}}))
    with pytest.raises(ArrayRecordError, match=message):
        array_record_source(tmp_path, "train", verify=True)


def test_the_checked_files_are_the_shards_in_order_and_a_missing_one_is_named(tmp_path):
    """array_record_files gives a reader that takes a list of files (Grain's ArrayRecordDataSource) the shards in
    order, after the same checks as the other readers."""
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    write_array_records(IMAGES, LABELS, tmp_path, "train", 3)
    files, info = array_record_files(tmp_path, "train", verify=True)
    assert [f.name for f in files] == [s.file for s in info.shards] == sorted(f.name for f in files)
    source = ArrayRecordDataSource(files)
    assert len(source) == 50 and decode_record(source[49], info)[1] == LABELS[49]
    files[1].unlink()
    with pytest.raises(ArrayRecordError, match=files[1].name):
        array_record_files(tmp_path, "train")


def test_a_record_of_the_wrong_size_is_named(tmp_path):
    info = write_array_records(IMAGES, LABELS, tmp_path, "train", 2)
    with pytest.raises(ArrayRecordError, match="a record of 5 bytes"):
        decode_record(b"12345", info)


def test_batch_reads_equal_record_reads_in_any_order(tmp_path):
    for compress in (True, False):
        folder = tmp_path / str(compress)
        info = write_array_records(IMAGES, LABELS, folder, "train", 3, compress=compress)
        assert info.compressed == compress
        source, _ = array_record_source(folder, "train")
        readers, info = array_record_readers(folder, "train", verify=True)
        ids = np.random.default_rng(0).permutation(len(IMAGES))[: len(IMAGES) - 1]
        images, labels = decode_batch(readers.__getitems__(ids), info)
        one_by_one = [decode_record(source[int(i)], info) for i in ids]
        assert np.array_equal(images, IMAGES[ids]) and np.array_equal(labels, LABELS[ids])
        assert all(np.array_equal(a, b) and la == lb for (a, la), b, lb in zip(one_by_one, images, labels))
        with pytest.raises(IndexError):
            readers.__getitems__([len(IMAGES)])


def test_a_compressed_split_is_not_resumed_uncompressed(tmp_path):
    write_array_records(IMAGES, LABELS, tmp_path, "train", 2)
    with pytest.raises(FileExistsError):
        write_array_records(IMAGES, LABELS, tmp_path, "train", 2, compress=False)


def test_a_batch_with_a_record_of_the_wrong_size_is_named(tmp_path):
    info = write_array_records(IMAGES, LABELS, tmp_path, "train", 2)
    readers, info = array_record_readers(tmp_path, "train")
    with pytest.raises(ArrayRecordError, match="records of"):
        decode_batch(readers.__getitems__([0, 1]) + [b"short"], info)


def test_block_records_round_trip_and_read_by_block(tmp_path):
    for compress in (True, False):
        folder = tmp_path / str(compress)
        info = write_array_records(IMAGES, LABELS, folder, "train", 3, compress=compress, block_size=8)
        # 7 blocks (the last of 2 samples) shared out 3, 2, 2: no block straddles two shards
        assert info.block_size == 8 and [s.records for s in info.shards] == [24, 16, 10]
        source, _ = array_record_source(folder, "train", verify=True)
        blocks, info = array_record_readers(folder, "train")
        assert len(source) == len(blocks) == 7
        images, labels = decode_blocks(blocks.__getitems__([6, 0, 3]), info)
        ids = np.r_[48:50, 0:8, 24:32]
        assert np.array_equal(images, IMAGES[ids]) and np.array_equal(labels, LABELS[ids])
        assert np.array_equal(decode_blocks([source[2]], info)[0], IMAGES[16:24])
        with pytest.raises(ArrayRecordError, match="a record of"):
            decode_record(source[0], info)   # a block is not one sample


def test_a_block_split_is_not_resumed_with_another_block_size(tmp_path):
    write_array_records(IMAGES, LABELS, tmp_path, "train", 2, block_size=8)
    assert write_array_records(IMAGES, LABELS, tmp_path, "train", 2, block_size=8).complete
    with pytest.raises(FileExistsError):
        write_array_records(IMAGES, LABELS, tmp_path, "train", 2, block_size=16)


@pytest.mark.parametrize("block_size, shards, message", [(0, 2, "block_size"), (True, 2, "block_size"),
                                                         (8, 8, "7 records leaves shards empty")])
def test_bad_block_arguments(tmp_path, block_size, shards, message):
    with pytest.raises(ValueError, match=message):
        write_array_records(IMAGES, LABELS, tmp_path, "train", shards, block_size=block_size)


def test_a_block_of_the_wrong_size_is_named(tmp_path):
    info = write_array_records(IMAGES, LABELS, tmp_path, "train", 2, block_size=8)
    blocks, info = array_record_readers(tmp_path, "train")
    for bad in (blocks[0][:-1], blocks[0] + blocks[1]):   # part of a sample; more samples than a block holds
        with pytest.raises(ArrayRecordError, match="blocks of"):
            decode_blocks([blocks[1], bad], info)


def test_a_split_written_while_another_is_being_written_stays_in_the_manifest(tmp_path, monkeypatch):
    """Two writers of different splits of one folder: the one that started first must not save the manifest it
    read at its start over the other's entry (issue 41 item 1). Writer B writes all of "test" while writer A is
    between two shards of "train"."""
    from helpers.storage import array_record

    real_sha256, other = array_record.sha256_of, []

    def sha256_then_the_other_writer(path):
        if not other:   # once, when the first shard of "train" is written
            other.append("started")
            other.append(write_array_records(IMAGES[:20], LABELS[:20], tmp_path, "test", 2))
        return real_sha256(path)

    monkeypatch.setattr(array_record, "sha256_of", sha256_then_the_other_writer)
    write_array_records(IMAGES, LABELS, tmp_path, "train", 3)
    monkeypatch.undo()
    assert other[1].complete
    for split, n in (("train", 50), ("test", 20)):
        source, _ = array_record_source(tmp_path, split, verify=True)
        assert len(source) == n, split


def test_two_processes_writing_different_splits_at_once_keep_both(tmp_path):
    """The same, for real: two processes write 12 shards each into one folder at the same time."""
    import subprocess
    import sys
    from pathlib import Path

    root = Path(__file__).resolve().parent.parent
    script = ("import sys, numpy as np\n"
              "from helpers.storage.array_record import write_array_records\n"
              "split = sys.argv[2]\n"
              "rng = np.random.default_rng(len(split))\n"
              "write_array_records(rng.integers(0, 256, (240, 8, 8), dtype=np.uint8), rng.integers(0, 10, 240),\n"
              "                    sys.argv[1], split, 12)\n")
    writers = [subprocess.Popen([sys.executable, "-c", script, str(tmp_path), split], cwd=root,
                                stderr=subprocess.PIPE, text=True) for split in ("train", "validation")]
    for writer in writers:
        assert writer.wait(120) == 0, writer.stderr.read()
        writer.stderr.close()
    for split in ("train", "validation"):
        source, info = array_record_source(tmp_path, split, verify=True)
        assert len(source) == 240 and info.complete, split


@pytest.mark.parametrize("images, message", [
    (np.zeros((10, 0, 4), np.uint8), r"an axis of length 0 \(shape \(10, 0, 4\)\)"),
    (np.empty((10, 2, 2), dtype=object), "dtype object"),
    (np.zeros((10, 2), dtype="datetime64[s]"), "dtype datetime64"),
])
def test_images_that_cannot_be_records_are_named_before_anything_is_made(tmp_path, images, message):
    """Issue 41 item 6: a zero-length axis ended in memoryview's TypeError, object dtype too, after the folder and its
    lock file were made."""
    with pytest.raises(ValueError, match=message):
        write_array_records(images, np.arange(10) % 3, tmp_path / "out", "train", 2)
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize("reader", [array_record_readers, array_record_source])
def test_shard_counts_in_the_manifest_are_checked_against_the_files(tmp_path, reader):
    """The manifest's per-shard counts changed from [5, 5] to [3, 7] (the total kept): readers would map ids 3 to 7
    to records 5 to 9 (issue 41 item 6). Both readers refuse, naming the shard."""
    write_array_records(IMAGES[:10], LABELS[:10], tmp_path, "train", 2)
    doc = json.loads((tmp_path / MANIFEST).read_text())
    doc["splits"]["train"]["shards"][0]["records"] = 3
    doc["splits"]["train"]["shards"][1]["records"] = 7
    (tmp_path / MANIFEST).write_text(json.dumps(doc))
    with pytest.raises(ArrayRecordError, match="train-00000-of-00002.array_record"):
        reader(tmp_path, "train")


def test_a_manifest_changed_to_agree_with_itself_is_still_checked_against_the_files(tmp_path):
    """Counts, total and layout changed together ([5, 5] of 10 to [4, 4] of 8, sizes kept): the files' own record
    counts still disagree, and both readers say so."""
    write_array_records(IMAGES[:10], LABELS[:10], tmp_path, "train", 2)
    doc = json.loads((tmp_path / MANIFEST).read_text())
    doc["splits"]["train"]["total_records"] = 8
    for shard in doc["splits"]["train"]["shards"]:
        shard["records"] = 4
    (tmp_path / MANIFEST).write_text(json.dumps(doc))
    for reader in (array_record_readers, array_record_source):
        with pytest.raises(ArrayRecordError, match="holds 5 records, the manifest says 4"):
            reader(tmp_path, "train")


def test_a_split_of_more_shards_than_open_files_allowed_is_still_read(tmp_path):
    """Found by the attack on this round's changes: checking every shard's count kept a reader open per shard, so a
    split of more shards than the process may open files failed (EMFILE). Counted, then closed; a batch that touches
    a few shards opens those."""
    import subprocess
    import sys
    from pathlib import Path

    write_array_records(np.zeros((300, 2, 2), np.uint8), np.arange(300) % 3, tmp_path, "train", 300)
    script = ("import resource, sys\n"
              "resource.setrlimit(resource.RLIMIT_NOFILE, (200, 200))\n"
              "from helpers.storage.array_record import array_record_readers, decode_batch\n"
              "readers, info = array_record_readers(sys.argv[1], 'train')\n"
              "print(decode_batch(readers.__getitems__([299, 0, 150]), info)[1].tolist())\n")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          cwd=Path(__file__).resolve().parent.parent)
    assert done.returncode == 0 and done.stdout.strip() == "[2, 0, 0]", done.stderr[-2000:]


def test_only_the_writers_own_temporary_manifests_are_removed(tmp_path):
    """A killed save leaves `array_record_manifest.json.<8 hex digits>.partial`, which the next save removes; a file
    of the user's that merely starts and ends the same way is not the writer's and stays."""
    tmp_path.mkdir(exist_ok=True)
    ours, theirs = tmp_path / f"{MANIFEST}.0123abcd.partial", tmp_path / f"{MANIFEST}.my notes.partial"
    ours.write_text("{")
    theirs.write_text("keep me")
    write_array_records(IMAGES, LABELS, tmp_path, "train", 2)
    assert not ours.exists() and theirs.read_text() == "keep me"
