"""Writing a split as sharded TFRecord files: atomic per shard, resumable, safe beside other writers.

One process may write a whole split, or several processes the shards of one split at once, each its own
(`shards=`): every shard has its own lock file, and each finished shard is added to the manifest under
the manifest's lock, so the split is complete when its last shard is in, whoever wrote it.
"""
from __future__ import annotations

import contextlib
import errno
import hashlib
import itertools
import re
from pathlib import Path
from typing import Iterable, Iterator

import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

from helpers.storage.files import FileLock, LockHeldError, sha256_of, stale_temporaries, write_then_rename
from helpers.storage.labels import label_checker
from helpers.storage.tfrecord.format import FeatureSpec, ShardError, make_encoder, record_checker
from helpers.storage.tfrecord.manifest import (COMPRESSIONS, KNOWN_ENCODINGS, SERIALIZED, ShardInfo, SplitManifest,
                                               check_split_name, load_manifest, manifest_path, shard_index, shard_name,
                                               update_split)

NOT_WRITABLE = (errno.EROFS, errno.EACCES, errno.EPERM)


def tf_options(compression: str | None) -> tf.io.TFRecordOptions | None:
    """`TFRecordOptions` for a compression name in COMPRESSIONS (None: uncompressed)."""
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
    return tf.io.TFRecordOptions(compression_type=compression) if compression else None


def shard_sizes(total: int, num_shards: int) -> list[int]:
    """How many records each shard gets: as equal as possible, the first ones one larger.

    >>> shard_sizes(10, 4)
    [3, 3, 2, 2]
    """
    return [total // num_shards + (i < total % num_shards) for i in range(num_shards)]


def shard_range(total: int, num_shards: int, index: int) -> range:
    """The positions, among a split's `total` records, of the records shard `index` holds.

    >>> shard_range(10, 4, 1), shard_range(10, 4, 3)
    (range(3, 6), range(8, 10))
    """
    sizes = shard_sizes(total, num_shards)
    start = sum(sizes[:index])
    return range(start, start + sizes[index])


@contextlib.contextmanager
def _shard_locks(directory: Path, split: str, indices: Iterable[int]) -> Iterator[OSError | None]:
    """Hold the lock file of each shard index in `indices` while writing them. Yields None, or the error that says
    the folder cannot be written (then nothing may be written, but a finished split can still be checked)."""
    with contextlib.ExitStack() as held:
        for index in indices:
            try:
                held.enter_context(FileLock(directory / f".{split}-{index:05d}.lock",
                                            f"shard {index} of split {split!r} in {directory}"))
            except LockHeldError as e:
                raise ShardError(str(e)) from None
            except OSError as e:
                if e.errno not in NOT_WRITABLE:
                    raise
                yield e
                return
        yield None


def _update(digest, record: bytes) -> None:
    digest.update(len(record).to_bytes(8, "little") + record)  # the length too, so records can't run into each other


def write_shards(
    records: Iterable,
    directory: str | Path,
    split: str,
    num_shards: int,
    *,
    total: int | None = None,
    shards: Iterable[int] | None = None,
    encoding: str = "raw",
    compression: str | None = None,
    spec: FeatureSpec | None = None,
    fingerprint: str | None = None,
    num_classes: int | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> SplitManifest:
    """Write an iterable of `(image, label)` records to `num_shards` TFRecord files, one at a time.

    Records are consumed in order and never held all at once: shard 0 gets the first
    `total // num_shards` records, and so on (`shard_range` says which). Each shard is written under
    a temporary name and renamed when complete, and added to the manifest, so an interrupted run
    leaves only complete files under final names.

    Several processes can write one split at once: each passes `shards=` (the indices it writes; every
    process the same `total`, settings and `fingerprint`) and `records` holding only those shards' records,
    in index order. Each shard's lock file keeps two writers off one shard (the second gets an error
    naming the process that holds it); a writer of the whole split takes every shard's lock.

    Running the same call again resumes. It skips a shard only when the file is intact (its
    checksum matches the manifest) *and* the input gives exactly the records the shard was
    written from (the records are encoded again and their checksum compared; encoding is
    deterministic). Input that differs from what was written, or that holds more or fewer
    records than its shards take, is an error. So is a re-run with other settings or another
    `fingerprint`, unless `overwrite=True`, which writes this call's shards afresh (a whole-split
    overwrite also removes files of an earlier shard count). A split that is already complete and
    matches is left exactly as it is, so a re-run on a read-only copy succeeds.

    `total` (the whole split's count) is needed when `records` has no `len()` or with `shards=`. `spec` is
    taken from the first record unless given (for `encoding="png"` it must be given: the decoded images'
    (height, width, channels) and dtype); a writer whose shards hold no records takes it from the manifest,
    never from an empty shard. Every label is checked as `helpers.storage.labels` says (a whole number from 0,
    below `num_classes` when given) before its record is encoded; a bad one stops the write, and the shard it was
    in never takes its final name. With `encoding="serialized"` each record
    is already serialized bytes (the caller's own layout), written as it is; `spec` says what the caller's
    parser makes of one, and only that parser reads the split (`read_split` refuses it).

    >>> import tempfile
    >>> images = np.zeros((10, 28, 28), np.uint8)
    >>> manifest = write_shards(zip(images, range(10)), tempfile.mkdtemp(), "train", 4, total=10, progress=False)
    >>> [s.records for s in manifest.shards]
    [3, 3, 2, 2]
    """
    directory = Path(directory)
    check_split_name(split)
    if encoding not in KNOWN_ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; choose one of {KNOWN_ENCODINGS}")
    options = tf_options(compression)
    if total is None:
        try:
            if shards is not None:
                raise TypeError
            total = len(records)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                "write_shards needs to know how many records the split holds to name and size the shards: "
                "pass total=... when records is a generator or zip(), or when writing some of the shards."
            ) from None
    for name, value in (("num_shards", num_shards), ("total", total)):
        if not isinstance(value, (int, np.integer)) or isinstance(value, (bool, np.bool_)) or value > 2**62:
            raise ValueError(f"{name} must be a whole number of records or shards (at most 2**62), got {value!r}")
    if num_shards < 1:
        raise ValueError(f"num_shards must be at least 1, got {num_shards}")
    if total < 1:
        raise ShardError(f"split {split!r} of {directory} would hold no records (total={total}): there is nothing "
                         f"to convert. Check the folder the records come from.")
    sizes = shard_sizes(total, num_shards)
    mine = list(range(num_shards)) if shards is None else list(shards)
    if not mine or not all(isinstance(i, (int, np.integer)) and 0 <= i < num_shards for i in mine):
        raise ValueError(f"shards must be indices from 0 to {num_shards - 1}, at least one; got {shards!r}")
    if mine != sorted(set(mine)):   # the records come in the shards' order: any other order would mix them up
        raise ValueError(f"shards must be listed in increasing order, each once, as their records come (index "
                         f"order); got {shards!r}. Pass sorted(shards) with the records in that order.")
    expected = sum(sizes[i] for i in mine)

    iterator = iter(records)
    first = next(iterator, None)
    if first is None and expected > 0:
        raise ShardError(f"no records to write for split {split!r}, but total={total}." if shards is None else
                         f"no records to write for shards {mine} of split {split!r}, but they take {expected}.")
    if first is not None:
        iterator = itertools.chain([first], iterator)
    if spec is None:
        if encoding in ("png", SERIALIZED):
            raise ValueError(f"encoding={encoding!r} needs spec=FeatureSpec((height, width, channels), 'uint8') of the "
                             f"decoded images")
        if first is not None:
            spec = FeatureSpec.of(first[0])
        else:   # only empty shards here: the split's spec is the one its other shards were written with
            listed = load_manifest(directory).get(split) if directory.is_dir() else None
            if listed is None or overwrite:
                raise ShardError(f"shards {mine} of split {split!r} in {directory} hold no records, so they cannot "
                                 f"say what the split's images are: pass spec=FeatureSpec(shape, dtype), or write "
                                 f"them after a shard that holds records.")
            spec = listed.spec
    if encoding != SERIALIZED:
        spec.check_encoding(encoding)
    manifest = SplitManifest(split, encoding, compression, spec.to_json(), num_shards, total, fingerprint)
    stream = _encoded(iterator, encoding, spec, f"split {split!r} of {directory}", num_classes)
    directory.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=expected, unit="rec", unit_scale=True, desc=f"{split} → {directory.name}", disable=not progress)

    before = load_manifest(directory).get(split)   # a look without the locks, to know which to take
    whole = range(max(num_shards, before.num_shards if before and overwrite else 0))
    with _shard_locks(directory, split, whole if shards is None else mine) as not_writable, bar:

        def must_write(what: str) -> None:
            if not_writable is not None:
                raise ShardError(f"{directory} cannot be written ({not_writable.strerror}), but {what} needs writing. "
                                 f"Write to a folder you can write to.")

        previous = load_manifest(directory).get(split)
        if previous is not None and previous.settings() != manifest.settings() and not overwrite:
            raise ShardError(
                f"{manifest_path(directory)} already describes split {split!r} written with other settings or data "
                f"(encoding, compression, spec, num_shards, total, fingerprint = {previous.settings()}). Write to "
                f"another directory, or pass overwrite=True to replace that split."
            )
        replaces = previous.settings() if previous is not None and overwrite else None
        if overwrite and previous is not None:
            must_write(f"overwriting split {split!r}")
            ours = set(whole if shards is None else mine)
            removed = [info.file for info in previous.shards   # names checked by load_manifest; only files whose
                       if shard_index(split, info.file, previous.num_shards) in ours]   # lock this writer holds
            for file in removed:
                (directory / file).unlink(missing_ok=True)
            if previous.settings() == manifest.settings():
                update_split(directory, manifest, drop=removed)
            previous = None
        done, stale = {}, []
        for info in previous.shards if previous is not None else []:
            if shard_index(split, info.file, num_shards) not in mine:
                continue
            path = directory / info.file
            if (info.records_sha256 and path.is_file() and path.stat().st_size == info.bytes
                    and sha256_of(path) == info.sha256):
                done[info.file] = info
            else:
                stale.append(info.file)
        if not_writable is None:
            for index in mine:   # left by a run killed mid-shard; we hold this shard's lock
                for leftover in stale_temporaries(directory, rf"{re.escape(split)}-{index:05d}-of-\d{{5,}}\.tfrecord"):
                    leftover.unlink()
        if stale:   # listed but damaged or missing: out of the manifest until written again
            must_write(", ".join(stale))
            update_split(directory, manifest, drop=stale)

        def ended(position: int, count: int) -> ShardError:
            got = sum(sizes[i] for i in mine[:position]) + count
            if shards is None:
                return ShardError(f"the records ended after {got}, but total={total} were promised for split {split!r}.")
            return ShardError(f"the records ended after {got}, but shards {mine} of split {split!r} take {expected}.")

        result = previous
        for position, index in enumerate(mine):
            name = shard_name(split, index, num_shards)
            path, size = directory / name, sizes[index]
            digest, count = hashlib.sha256(), 0
            if name in done:  # intact on disk: check the input still gives the same records
                for record in itertools.islice(stream, size):
                    _update(digest, record)
                    count += 1
                if count < size:
                    raise ended(position, count)
                if digest.hexdigest() != done[name].records_sha256:
                    raise ShardError(
                        f"{path} was written from other records than this input gives for it: the data changed "
                        f"since the split was written. Pass overwrite=True to write split {split!r} again from "
                        f"this input, or write to another directory."
                    )
                bar.update(count)
                continue
            must_write(name)
            with write_then_rename(path) as tmp:
                with tf.io.TFRecordWriter(str(tmp), options) as writer:
                    for record in itertools.islice(stream, size):
                        digest.update(len(record).to_bytes(8, "little") + record)  # as _update, inlined: per record
                        writer.write(record)
                        count += 1
                        if count % 1024 == 0:
                            bar.update(1024)
                if count < size:
                    raise ended(position, count)  # the temporary file is removed; nothing takes the final name
            bar.update(count % 1024)
            info = ShardInfo(name, count, path.stat().st_size, sha256_of(path), digest.hexdigest())
            result = update_split(directory, manifest, add=[info], replaces=replaces)
            replaces = None   # the entry is ours from the first shard on
        if next(iterator, None) is not None:
            what = f"total={total}" if shards is None else f"the {expected} that shards {mine} take"
            raise ShardError(f"there are more records than {what} for split {split!r}; pass the right total.")
        if (result is None or result.settings() != manifest.settings() or set(done) - {s.file for s in result.shards}
                or result.complete != (len(result.shards) == num_shards)):
            must_write(f"the manifest of split {split!r}")
            result = update_split(directory, manifest, add=list(done.values()), replaces=replaces)
    return result


def _encoded(records: Iterator, encoding: str, spec: FeatureSpec, where: str,
             num_classes: int | None) -> Iterator[bytes]:
    """Each record checked against `spec` (its label by the one label check) and encoded; serialized records pass
    as they are (their labels are inside the caller's bytes: the caller checks them)."""
    if encoding == SERIALIZED:
        for index, record in enumerate(records):
            if not isinstance(record, bytes):
                raise ShardError(f"record {index}: encoding='serialized' takes bytes, got {type(record).__name__}.")
            yield record
        return
    encode, check = make_encoder(encoding), record_checker(spec, encoding)
    check_label = label_checker(where, num_classes)
    for index, (image, label) in enumerate(records):
        if encoding != "png":
            image = np.asarray(image)
        try:
            check_label(label, index)
        except ValueError as e:
            raise ShardError(str(e)) from None
        check(index, image, label)
        yield encode(image, label)
