"""Checking shards: count the records in each file and find the first damaged one, naming the file."""
from __future__ import annotations

import gzip
import os
import re
import zlib
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

import tensorflow as tf

from helpers.storage.files import file_problem, sha256_of
from helpers.storage.tfrecord.format import ShardError
from helpers.storage.tfrecord.manifest import load_manifest, manifest_path, read_manifest

HEADER = 12  # uint64 length + uint32 masked CRC of the length
FOOTER = 4   # uint32 masked CRC of the data
TF_READ_ERRORS = (tf.errors.DataLossError, tf.errors.OutOfRangeError, tf.errors.InvalidArgumentError)


@dataclass
class ShardReport:
    """What reading one shard found: how many records, and the first problem if any."""

    file: str
    records: int
    expected_records: int | None = None
    problem: str | None = None

    @property
    def ok(self) -> bool:
        return self.problem is None

    @property
    def lost(self) -> int:
        """Records the manifest lists that cannot be read."""
        return max(0, (self.expected_records or 0) - self.records)

    def __str__(self) -> str:
        status = "ok" if self.ok else f"PROBLEM: {self.problem}"
        return f"{Path(self.file).name}: {self.records:,} records, {status}"


def short_tf_error(error: Exception) -> str:
    """TensorFlow's error text without the graph-node prefix, in words a learner can act on."""
    message = getattr(error, "message", None) or str(error)
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message.strip().splitlines()[0]).split(" [Op:")[0]
    if match := re.search(r"truncated record at (\d+)", message):
        return f"the file ends in the middle of a record at byte {match[1]}: a truncated copy or an interrupted write"
    if match := re.search(r"corrupted record at (\d+)", message):
        return f"checksum (CRC) mismatch in the record at byte {match[1]}: the bytes were changed or damaged"
    return message


def _framing_problem(path: str, compression: str | None) -> str | None:
    """Walk the record headers in Python: TensorFlow's reader takes a file that ends inside a record's 12-byte
    header for a clean end."""
    try:
        with (gzip.open(path, "rb") if compression == "GZIP" else open(path, "rb")) as f:
            size = None if compression else os.fstat(f.fileno()).st_size
            offset = index = 0
            while header := f.read(HEADER):
                if len(header) < HEADER:
                    return (f"the file ends inside the header of record {index} at byte {offset:,}: a truncated copy "
                            f"or an interrupted write")
                offset += HEADER + int.from_bytes(header[:8], "little") + FOOTER
                f.seek(offset)   # (in a gzip stream, seeking past the end stops at the end)
                if (offset > size) if size is not None else f.tell() < offset:
                    return f"the file ends in the middle of record {index}: a truncated copy or an interrupted write"
                index += 1
    except (EOFError, OSError, zlib.error) as e:
        return f"the compressed stream is damaged or cut short ({e})"
    return None


def scan_file(path: str | Path, compression: str | None) -> tuple[int, str | None]:
    """Count the records in one file; on damage, the number of good records before it and why."""
    path = str(path)
    if (problem := file_problem(path)) is not None:
        return 0, f"the file is {problem}"
    ds = tf.data.TFRecordDataset(path, compression_type=compression or "")
    count = 0
    try:
        for batch in ds.batch(4096):  # batches keep the Python loop short
            count += int(batch.shape[0])
    except TF_READ_ERRORS:
        try:   # every batch before the failing one was whole: find the exact record
            for _ in ds.skip(count):
                count += 1
        except TF_READ_ERRORS as e:
            return count, f"record {count} is unreadable after {count:,} good records: {short_tf_error(e)}"
    return count, _framing_problem(path, compression)


def count_records(files: Iterable[str | Path], compression: str | None = None) -> dict[str, int]:
    """Records per file, read to the end. A damaged file raises `ShardError` naming it and the bad record."""
    counts = {}
    for path in files:
        count, problem = scan_file(path, compression)
        if problem:
            raise ShardError(f"{path}: {problem}")
        counts[str(path)] = count
    return counts


def verify_shards(directory: str | Path, split: str | None = None) -> list[ShardReport]:
    """Read every shard of `split` (default: every split) and report on each: it exists, reads to the end without
    a framing or CRC error, holds the records the manifest says and matches its checksum. Nothing raises for a bad
    shard, so a caller can list every problem at once."""
    directory = Path(directory)
    splits = load_manifest(directory)
    if not splits:
        raise ShardError(f"{manifest_path(directory)} is missing: there are no shards to verify.")
    if split is not None and split not in splits:
        read_manifest(directory, split)  # raises, naming the splits that do exist
    reports = []
    for name in [split] if split else list(splits):
        manifest = splits[name]
        for info in manifest.shards:
            path = directory / info.file
            count, problem = scan_file(path, manifest.compression)
            if problem is None and count != info.records:
                problem = f"holds {count:,} records but the manifest says {info.records:,}"
            if problem is None and sha256_of(path) != info.sha256:
                problem = "checksum differs from the manifest: the file changed after it was written"
            reports.append(ShardReport(str(path), count, info.records, problem))
        if not manifest.complete:
            missing = manifest.num_shards - len(manifest.shards)
            reports.append(ShardReport(str(directory / f"{name}-*"), 0, None,
                                       f"{missing} shard(s) never written: resume the write"))
    return reports
