"""Writing a split as sharded TFRecord files: atomic per shard, resumable, safe beside other writers."""
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
from helpers.storage.tfrecord.format import ENCODINGS, FeatureSpec, ShardError, make_encoder, record_checker
from helpers.storage.tfrecord.manifest import (COMPRESSIONS, ShardInfo, SplitManifest, check_split_name, load_manifest,
                                       manifest_path, save_split, shard_name)

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


@contextlib.contextmanager
def _split_lock(directory: Path, split: str) -> Iterator[OSError | None]:
    """Hold the split's lock file while writing it. Yields None, or the error that says the folder
    cannot be written (then nothing may be written, but a finished split can still be checked)."""
    try:
        lock = FileLock(directory / f".{split}.lock", f"split {split!r} in {directory}")
        lock.__enter__()
    except LockHeldError as e:
        raise ShardError(str(e)) from None
    except OSError as e:
        if e.errno not in NOT_WRITABLE:
            raise
        yield e
        return
    try:
        yield None
    finally:
        lock.__exit__(None, None, None)


def _update(digest, record: bytes) -> None:
    digest.update(len(record).to_bytes(8, "little") + record)  # the length too, so records can't run into each other


def write_shards(
    records: Iterable,
    directory: str | Path,
    split: str,
    num_shards: int,
    *,
    total: int | None = None,
    encoding: str = "raw",
    compression: str | None = None,
    spec: FeatureSpec | None = None,
    fingerprint: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> SplitManifest:
    """Write an iterable of `(image, label)` records to `num_shards` TFRecord files, one at a time.

    Records are consumed in order and never held all at once: shard 0 gets the first
    `total // num_shards` records, and so on. Each shard is written under a temporary name and
    renamed when complete, and the manifest is updated after every shard, so an interrupted run
    leaves only complete files under final names.

    Running the same call again resumes. It skips a shard only when the file is intact (its
    checksum matches the manifest) *and* the input gives exactly the records the shard was
    written from (the records are encoded again and their checksum compared; encoding is
    deterministic). Input that differs from what was written, or that holds more or fewer
    records than `total`, is an error. So is a re-run with other settings or another
    `fingerprint`, unless `overwrite=True`, which writes the split afresh. A split that is already
    complete and matches is left exactly as it is, so a re-run on a read-only copy succeeds.

    Writers of different splits may share a folder; a second writer of the same split gets an
    error naming the process that holds it.

    `total` is needed when `records` has no `len()`. `spec` is taken from the first record
    unless given (for `encoding="png"` it must be given: the decoded images' (height, width,
    channels) and dtype). Labels must be integers.

    >>> import tempfile
    >>> images = np.zeros((10, 28, 28), np.uint8)
    >>> manifest = write_shards(zip(images, range(10)), tempfile.mkdtemp(), "train", 4, total=10, progress=False)
    >>> [s.records for s in manifest.shards]
    [3, 3, 2, 2]
    """
    directory = Path(directory)
    check_split_name(split)
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; choose one of {ENCODINGS}")
    options = tf_options(compression)
    if total is None:
        try:
            total = len(records)  # type: ignore[arg-type]
        except TypeError:
            raise TypeError(
                "write_shards needs to know how many records there are to name and size the shards: "
                "pass total=... when records is a generator or zip()."
            ) from None
    if num_shards < 1:
        raise ValueError(f"num_shards must be at least 1, got {num_shards}")

    iterator = iter(records)
    first = next(iterator, None)
    if first is None and total > 0:
        raise ShardError(f"no records to write for split {split!r}, but total={total}.")
    if first is not None:
        iterator = itertools.chain([first], iterator)
    if spec is None:
        if encoding == "png":
            raise ValueError("encoding='png' needs spec=FeatureSpec((height, width, channels), 'uint8') of the decoded images")
        spec = FeatureSpec.of(first[0]) if first is not None else FeatureSpec((0,), "uint8")
    spec.check_encoding(encoding)
    manifest = SplitManifest(split, encoding, compression, spec.to_json(), num_shards, total, fingerprint)

    encode, check = make_encoder(encoding), record_checker(spec, encoding)

    def encoded() -> Iterator[bytes]:
        for index, (image, label) in enumerate(iterator):
            if encoding != "png":
                image = np.asarray(image)
            check(index, image, label)
            yield encode(image, label)

    stream = encoded()
    directory.mkdir(parents=True, exist_ok=True)
    bar = tqdm(total=total, unit="rec", unit_scale=True, desc=f"{split} → {directory.name}", disable=not progress)
    with _split_lock(directory, split) as not_writable, bar:

        def must_write(what: str) -> None:
            if not_writable is not None:
                raise ShardError(f"{directory} cannot be written ({not_writable.strerror}), but {what} needs writing. "
                                 f"Write to a folder you can write to.")

        previous = load_manifest(directory).get(split)
        done: dict[str, ShardInfo] = {}
        if previous is not None and previous.settings() != manifest.settings() and not overwrite:
            raise ShardError(
                f"{manifest_path(directory)} already describes split {split!r} written with other settings or data "
                f"(encoding, compression, spec, num_shards, total, fingerprint = {previous.settings()}). Write to "
                f"another directory, or pass overwrite=True to replace that split."
            )
        if previous is not None and overwrite:
            must_write(f"overwriting split {split!r}")
            for info in previous.shards:
                (directory / info.file).unlink(missing_ok=True)  # names checked by load_manifest
            previous = None
        if previous is not None:
            for info in previous.shards:
                path = directory / info.file
                if (info.records_sha256 and path.is_file() and path.stat().st_size == info.bytes
                        and sha256_of(path) == info.sha256):
                    done[info.file] = info
        if not_writable is None:
            for stale in stale_temporaries(directory, rf"{re.escape(split)}-\d{{5}}-of-\d{{5}}\.tfrecord"):
                stale.unlink()  # left by a run of this split killed mid-shard; we hold the split's lock

        def ended(shard_index: int, count: int) -> ShardError:
            got = sum(shard_sizes(total, num_shards)[:shard_index]) + count
            return ShardError(f"the records ended after {got}, but total={total} were promised for split {split!r}.")

        written_any = False
        for shard_index, size in enumerate(shard_sizes(total, num_shards)):
            name = shard_name(split, shard_index, num_shards)
            path = directory / name
            digest, count = hashlib.sha256(), 0
            if name in done:  # intact on disk: check the input still gives the same records
                for record in itertools.islice(stream, size):
                    _update(digest, record)
                    count += 1
                if count < size:
                    raise ended(shard_index, count)
                if digest.hexdigest() != done[name].records_sha256:
                    raise ShardError(
                        f"{path} was written from other records than this input gives for it: the data changed "
                        f"since the split was written. Pass overwrite=True to write split {split!r} again from "
                        f"this input, or write to another directory."
                    )
                manifest.shards.append(done[name])
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
                    raise ended(shard_index, count)  # the temporary file is removed; nothing takes the final name
            bar.update(count % 1024)
            manifest.shards.append(ShardInfo(name, count, path.stat().st_size, sha256_of(path), digest.hexdigest()))
            save_split(directory, manifest)
            written_any = True
        if next(iterator, None) is not None:
            raise ShardError(f"there are more records than total={total} for split {split!r}; pass the right total.")
        manifest.complete = True
        if written_any or previous is None or not previous.complete:
            must_write(f"the manifest of split {split!r}")
            save_split(directory, manifest)
    return manifest
