"""Sharded ArrayRecord files of (image, label) records, with a manifest, atomic shards and resume: the random-access
format Grain reads (notebook 08).

    write_array_records(images, labels, "data/mnist-ar", "train", num_shards=4)   # a SplitInfo
    source, info = array_record_source("data/mnist-ar", "train")   # checked; source[i] is record i's bytes
    image, label = decode_record(source[0], info)
    files, info = array_record_files("data/mnist-ar", "train")    # checked; for ArrayRecordDataSource(files)
    readers, info = array_record_readers("data/mnist-ar", "train")   # many records in one call per shard
    images, labels = decode_batch(readers.__getitems__([5, 0, 9]), info)
    write_array_records(images, labels, "data/mnist-ar-blocks", "train", 4, block_size=128)   # block records
    blocks, info = array_record_readers("data/mnist-ar-blocks", "train")   # blocks[b] is block b's bytes
    images, labels = decode_blocks(blocks.__getitems__([3, 0]), info)       # blocks 3 and 0's samples

A sample is the label as 8 little-endian bytes (int64) followed by the image's bytes (shape and dtype in the
manifest). A record holds one sample, or with `block_size=B` a block of B samples back to back (samples
b*B to b*B + B - 1 of the split in record b; blocks never straddle shards, and only the split's last block may
be shorter). Records are compressed with zstd (ArrayRecord's default) unless written with `compress=False`.
Files are `{split}-{index:05d}-of-{N:05d}.array_record`. `array_record_manifest.json` says, per split,
each shard's record count, size and SHA-256, and whether the split is complete. Each shard is written under a
temporary name and renamed when whole (`write_then_rename`); the manifest is rewritten atomically after every shard,
read again under its own lock each time (writers of different splits can share a folder; one split has one writer
at a time), so a writer killed part-way resumes at the first shard the manifest lacks (`resume=True`, checked to be
the same data by its fingerprint). Nothing read from the manifest is used as a path unless it is exactly the name
its split and index give, and the readers check each shard's record count against the writer's layout and the file.
Labels are checked by `helpers.storage.labels` before the first byte is written.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from helpers.storage.files import (FileLock, atomic_write_text, check_name, file_problem, fingerprint_arrays,
                                   sha256_of, stale_temporaries, write_then_rename)
from helpers.storage.labels import class_labels

MANIFEST = "array_record_manifest.json"
MANIFEST_LOCK = ".array_record_manifest.lock"   # held while the manifest is read and rewritten
FORMAT = "bigger-than-memory array_record shards"
LABEL_BYTES = 8


class ArrayRecordError(ValueError):
    """A split that cannot be read as its manifest says: the message names the folder, file and problem."""


@dataclass
class ShardEntry:
    file: str
    records: int
    bytes: int
    sha256: str


@dataclass
class SplitInfo:
    """One split's manifest entry: the image's shape and dtype, the shards written so far, complete or not."""

    split: str
    image_shape: list[int]
    image_dtype: str
    num_shards: int
    total_records: int
    fingerprint: str
    shards: list[ShardEntry] = field(default_factory=list)
    complete: bool = False
    compressed: bool = True   # zstd, ArrayRecord's default; False: stored as they are
    block_size: int = 1       # samples per record (the split's last record may hold fewer)

    @property
    def record_bytes(self) -> int:
        """Bytes of one sample: its label and its image."""
        return LABEL_BYTES + int(np.prod(self.image_shape)) * np.dtype(self.image_dtype).itemsize

    def shard_record_counts(self) -> list[int]:
        """Records in each shard (a shard's `records` counts its samples: its blocks, for a block split)."""
        return [-(-s.records // self.block_size) for s in self.shards]


def shard_file(split: str, index: int, num_shards: int) -> str:
    """The one name shard `index` of `split` may have.

    >>> shard_file("train", 2, 4)
    'train-00002-of-00004.array_record'
    """
    return f"{split}-{index:05d}-of-{num_shards:05d}.array_record"


def _load(directory: Path) -> dict:
    path = directory / MANIFEST
    problem = file_problem(path)
    if problem == "missing":
        return {"format": FORMAT, "splits": {}}
    if problem:
        raise ArrayRecordError(f"{path}: the manifest is {problem}.")
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise ArrayRecordError(f"{path}: the manifest is not valid JSON ({e}).") from None
    if not isinstance(doc, dict) or doc.get("format") != FORMAT or not isinstance(doc.get("splits"), dict):
        raise ArrayRecordError(f"{path}: not an ArrayRecord manifest of this series (format {FORMAT!r}).")
    return doc


def _split_info(directory: Path, split: str, entry) -> SplitInfo:
    where = f"{directory / MANIFEST}, split {split!r}"
    try:
        info = SplitInfo(**{**entry, "shards": [ShardEntry(**s) for s in entry["shards"]]})
        shape = [int(d) for d in info.image_shape]
        np.dtype(info.image_dtype)
    except (TypeError, KeyError, ValueError) as e:
        raise ArrayRecordError(f"{where}: malformed entry ({e}).") from None
    if not all(d > 0 for d in shape) or not isinstance(info.num_shards, int) or info.num_shards < 1:
        raise ArrayRecordError(f"{where}: malformed shape {shape} or shard count {info.num_shards!r}.")
    if isinstance(info.block_size, bool) or not isinstance(info.block_size, int) or info.block_size < 1:
        raise ArrayRecordError(f"{where}: malformed block size {info.block_size!r}.")
    for index, shard in enumerate(info.shards):   # a name is used as a path only if it is exactly the expected one
        if shard.file != shard_file(split, index, info.num_shards):
            raise ArrayRecordError(f"{where}: shard {index} is named {shard.file!r}, not "
                                   f"{shard_file(split, index, info.num_shards)!r}.")
    return info


def _save(directory: Path, info: SplitInfo) -> None:
    """Put `info` into the manifest as it is on disk now, every other split left as it is: writers of other splits
    save theirs meanwhile, so the manifest is read again under its own lock, never written from an older copy."""
    with FileLock(directory / MANIFEST_LOCK, f"the manifest {directory / MANIFEST}", wait=True):
        for stale in stale_temporaries(directory, re.escape(MANIFEST)):
            stale.unlink(missing_ok=True)   # a writer killed while saving; no one else is saving now
        doc = _load(directory)
        doc["splits"][info.split] = asdict(info)
        atomic_write_text(directory / MANIFEST, json.dumps(doc, indent=1) + "\n")


def shard_samples(n: int, num_shards: int, block_size: int = 1) -> list[int]:
    """Samples per shard: whole blocks shared out as evenly as they go, the split's short last block (if any) in
    the last shard.

    >>> shard_samples(10, 3), shard_samples(1000, 3, 128)
    ([4, 3, 3], [384, 384, 232])
    """
    blocks = -(-n // block_size)
    per_shard = [blocks // num_shards + (i < blocks % num_shards) for i in range(num_shards)]
    sizes = [b * block_size for b in per_shard]
    sizes[-1] -= sum(sizes) - n
    return sizes


def write_array_records(images, labels, directory: str | Path, split: str, num_shards: int, *,
                        num_classes: int | None = None, resume: bool = True, compress: bool = True,
                        block_size: int = 1) -> SplitInfo:
    """Write `images` (an array or memmap, shape (n, ...)) and `labels` as `num_shards` ArrayRecord files in
    `directory`, record i of the split being (images[i], labels[i]). Returns the split's manifest entry.

    A shard is written under a temporary name and renamed when whole; the manifest is updated after each one.
    With `resume=True` a split left incomplete by a killed writer continues at its first missing shard, if the data
    is the same (its fingerprint); a complete split of the same data is left as it is. Different data, or
    `resume=False`, over an existing split: `FileExistsError` (nothing is overwritten or removed that this writer
    did not create). Bad labels: `ValueError` naming the split and the first bad position, before any write.
    `compress=False` stores records without zstd: larger files, no decompression on every read.
    `block_size=B` writes block records: record b holds samples b*B to b*B + B - 1, back to back (`decode_blocks`).

    >>> import tempfile
    >>> info = write_array_records(np.zeros((10, 2, 2), np.uint8), np.arange(10) % 3, tempfile.mkdtemp(), "t", 3)
    >>> [s.records for s in info.shards], info.complete
    ([4, 3, 3], True)
    """
    from array_record.python import array_record_module

    directory = Path(directory)
    check_name(split, "split name")
    if isinstance(num_shards, bool) or not isinstance(num_shards, (int, np.integer)) or num_shards < 1:
        raise ValueError(f"num_shards must be a whole number of at least 1, not {num_shards!r}")
    images = np.asarray(images) if not isinstance(images, np.ndarray) else images
    if images.ndim < 2 or images.shape[0] < 1:
        raise ValueError(f"split {split!r}: images must be an array of shape (n, ...) with n >= 1, "
                         f"not {images.shape}")
    if images.dtype.kind not in "biufc":   # the bytes of numbers; an object array holds pointers
        raise ValueError(f"split {split!r}: images of dtype {images.dtype} cannot be stored as records: numbers "
                         f"(integers, floats) or booleans only")
    if 0 in images.shape[1:]:
        raise ValueError(f"split {split!r}: images with an axis of length 0 (shape {images.shape}) hold no pixels")
    labels = class_labels(labels, f"split {split!r}", num_classes)
    if len(labels) != len(images):
        raise ValueError(f"split {split!r}: {len(images)} images but {len(labels)} labels")
    if isinstance(block_size, bool) or not isinstance(block_size, (int, np.integer)) or block_size < 1:
        raise ValueError(f"block_size must be a whole number of at least 1, not {block_size!r}")
    n, num_shards, block_size = len(images), int(num_shards), int(block_size)
    if num_shards > -(-n // block_size):
        raise ValueError(f"split {split!r}: {num_shards} shards for {-(-n // block_size)} records leaves shards "
                         f"empty")
    fresh = SplitInfo(split, list(images.shape[1:]), images.dtype.str, num_shards, n,
                      fingerprint_arrays(images, labels), compressed=bool(compress), block_size=block_size)
    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(directory / f".{split}.array_record.lock", f"split {split!r} in {directory}"):
        doc = _load(directory)
        if split in doc["splits"]:
            old = _split_info(directory, split, doc["splits"][split])
            same = ((old.fingerprint, old.num_shards, old.image_shape, old.compressed, old.block_size)
                    == (fresh.fingerprint, num_shards, fresh.image_shape, fresh.compressed, block_size))
            if not (resume and same):
                raise FileExistsError(f"{directory}: split {split!r} already holds other data or another layout "
                                      f"(or resume=False); write it to a new folder")
            fresh = old
            if fresh.complete:
                return fresh
        for stale in stale_temporaries(directory, rf"{split}-\d{{5}}-of-\d{{5}}\.array_record"):
            stale.unlink()   # a killed writer's half-written shard: ours by its name, never listed
        sizes = shard_samples(n, num_shards, block_size)
        starts = np.cumsum([0] + sizes)
        for index in range(len(fresh.shards), num_shards):
            name = shard_file(split, index, num_shards)
            with write_then_rename(directory / name) as tmp:
                options = "group_size:1" if fresh.compressed else "group_size:1,uncompressed"
                writer = array_record_module.ArrayRecordWriter(str(tmp), options)
                for i in range(starts[index], starts[index + 1], block_size):   # one record per block
                    end = min(i + block_size, starts[index + 1])
                    rows = np.empty((end - i, fresh.record_bytes), np.uint8)   # label, image; sample by sample
                    rows[:, :LABEL_BYTES] = labels[i:end].astype("<i8")[:, None].view(np.uint8)
                    rows[:, LABEL_BYTES:] = np.ascontiguousarray(images[i:end]).reshape(end - i, -1).view(np.uint8)
                    writer.write(rows.tobytes())
                writer.close()
            path = directory / name
            fresh.shards.append(ShardEntry(name, sizes[index], path.stat().st_size, sha256_of(path)))
            fresh.complete = len(fresh.shards) == num_shards
            _save(directory, fresh)
    return fresh


def _checked_split(directory: Path, split: str, verify: bool) -> SplitInfo:
    """The split's manifest entry, after checking that the manifest lists every shard under its expected name, that
    each is a regular file of the listed size (and, `verify=True`, its checksum)."""
    check_name(split, "split name")
    doc = _load(directory)
    if split not in doc["splits"]:
        raise ArrayRecordError(f"{directory}: no split {split!r} in {MANIFEST} (splits: {sorted(doc['splits'])})")
    info = _split_info(directory, split, doc["splits"][split])
    if not info.complete or len(info.shards) != info.num_shards:
        raise ArrayRecordError(f"{directory}: split {split!r} is incomplete ({len(info.shards)} of "
                               f"{info.num_shards} shards): run the writer again to finish it")
    if not _is_count(info.total_records) or info.num_shards > -(-info.total_records // info.block_size):
        raise ArrayRecordError(f"{directory / MANIFEST}, split {split!r}: malformed record count "
                               f"{info.total_records!r} for {info.num_shards} shards.")
    layout = shard_samples(info.total_records, info.num_shards, info.block_size)   # as the writer shares them out
    for shard, samples in zip(info.shards, layout):
        path = directory / shard.file
        if shard.records != samples or isinstance(shard.records, bool):
            raise ArrayRecordError(f"{path}: the manifest says {shard.records!r} samples, but a split of "
                                   f"{info.total_records!r} in {info.num_shards} shards has {samples} in this one: "
                                   f"the manifest was changed.")
        if problem := file_problem(path):
            raise ArrayRecordError(f"{path}: the shard is {problem}.")
        if path.stat().st_size != shard.bytes:
            raise ArrayRecordError(f"{path}: {path.stat().st_size} bytes, the manifest says {shard.bytes}.")
        if verify and sha256_of(path) != shard.sha256:
            raise ArrayRecordError(f"{path}: the checksum differs from the manifest's: the file changed.")
    return info


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 1


def _check_record_counts(directory: Path, info: SplitInfo) -> None:
    """Check that each shard holds the records the manifest lists for it (each opened, counted and closed: a split
    may have more shards than a process may open files)."""
    from array_record.python import array_record_module

    for shard, expected in zip(info.shards, info.shard_record_counts()):
        reader = array_record_module.ArrayRecordReader(str(directory / shard.file),
                                                       "readahead_buffer_size:0,max_parallelism:0")
        held = reader.num_records()
        reader.close()
        if held != expected:
            raise ArrayRecordError(f"{directory / shard.file}: holds {held} records, the manifest says {expected}.")


def array_record_source(directory: str | Path, split: str, *, verify: bool = False):
    """`(source, info)`: an `ArrayRecordDataSource` over a complete split's shards (random access: `source[i]`,
    `len(source)`), after checking that the manifest lists every shard under its expected name, that each is a
    regular file of the listed size holding the listed record count (and, `verify=True`, its checksum).
    `ArrayRecordError` naming the folder and file otherwise."""
    from array_record.python.array_record_data_source import ArrayRecordDataSource

    directory = Path(directory)
    info = _checked_split(directory, split, verify)
    _check_record_counts(directory, info)   # each shard's count, not only the total
    source = ArrayRecordDataSource([str(directory / s.file) for s in info.shards])
    if len(source) != sum(info.shard_record_counts()):
        raise ArrayRecordError(f"{directory}: split {split!r} holds {len(source)} records, the manifest says "
                               f"{sum(info.shard_record_counts())}.")
    return source, info


def array_record_files(directory: str | Path, split: str, *, verify: bool = False) -> tuple[list[Path], SplitInfo]:
    """`(files, info)`: a complete split's shard files in order, checked as `array_record_source` checks them, for a
    reader that takes a list of files (Grain's `ArrayRecordDataSource(files)`, notebook 08's lesson)."""
    directory = Path(directory)
    info = _checked_split(directory, split, verify)
    _check_record_counts(directory, info)
    return [directory / s.file for s in info.shards], info


class ShardReaders:
    """Random access to a split's records with one ArrayRecord reader per shard, set for random reads
    (`readahead_buffer_size:0,max_parallelism:0`, as ArrayRecord's documentation advises). `__getitems__(ids)`
    reads a whole batch with one `read` call per shard (NumPy sorts the ids by shard), where
    `ArrayRecordDataSource.__getitems__` starts a pool of Python threads on every call. Readers open when first
    used; each is safe to share between threads."""

    def __init__(self, paths: list[Path], counts: list[int]) -> None:
        self._paths = [str(p) for p in paths]
        self._starts = np.cumsum([0, *counts])
        self._readers: list = [None] * len(self._paths)

    def __len__(self) -> int:
        return int(self._starts[-1])

    def _reader(self, shard: int):
        if self._readers[shard] is None:
            from array_record.python import array_record_module

            self._readers[shard] = array_record_module.ArrayRecordReader(
                self._paths[shard], "readahead_buffer_size:0,max_parallelism:0")
        return self._readers[shard]

    def __getitem__(self, index: int) -> bytes:
        return self.__getitems__([index])[0]

    def __getitems__(self, ids) -> list[bytes]:
        ids = np.asarray(ids, dtype=np.int64)
        if ids.size and (ids.min() < 0 or ids.max() >= len(self)):
            raise IndexError(f"record ids must be in [0, {len(self)}), got {ids.min()}..{ids.max()}")
        shard = np.searchsorted(self._starts, ids, side="right") - 1
        records = np.empty(len(ids), dtype=object)
        for k in np.unique(shard):
            mine = shard == k
            records[mine] = self._reader(int(k)).read((ids[mine] - self._starts[k]).tolist())
        return records.tolist()


def array_record_readers(directory: str | Path, split: str, *, verify: bool = False):
    """`(readers, info)`: a `ShardReaders` over a complete split's shards, checked as `array_record_source` checks.

    >>> import tempfile
    >>> folder = tempfile.mkdtemp()
    >>> _ = write_array_records(np.arange(40, dtype=np.uint8).reshape(10, 2, 2), np.arange(10) % 3, folder, "t", 3)
    >>> readers, info = array_record_readers(folder, "t")
    >>> images, labels = decode_batch(readers.__getitems__([9, 0, 4]), info)
    >>> labels.tolist(), images[0].ravel().tolist()
    ([0, 0, 1], [36, 37, 38, 39])
    """
    directory = Path(directory)
    info = _checked_split(directory, split, verify)
    _check_record_counts(directory, info)
    return ShardReaders([directory / s.file for s in info.shards], info.shard_record_counts()), info


def decode_record(record: bytes, info: SplitInfo) -> tuple[np.ndarray, np.int64]:
    """One record's `(image, label)`, checked to be the manifest's size.

    >>> info = SplitInfo("t", [2], "|u1", 1, 1, "")
    >>> decode_record((3).to_bytes(8, "little") + bytes([7, 9]), info)
    (array([7, 9], dtype=uint8), np.int64(3))
    """
    if len(record) != info.record_bytes:
        raise ArrayRecordError(f"split {info.split!r}: a record of {len(record)} bytes, the manifest's records hold "
                               f"{info.record_bytes}.")
    label = np.frombuffer(record, "<i8", count=1)[0]
    return np.frombuffer(record, info.image_dtype, offset=LABEL_BYTES).reshape(info.image_shape), label


def decode_batch(records: list[bytes], info: SplitInfo) -> tuple[np.ndarray, np.ndarray]:
    """A batch of records' `(images, labels)` in one NumPy call: the records joined, then viewed as rows of label
    and image bytes, checked to be the manifest's size.

    >>> info = SplitInfo("t", [2], "|u1", 1, 1, "")
    >>> images, labels = decode_batch([(3).to_bytes(8, "little") + bytes([7, 9])] * 2, info)
    >>> images.tolist(), labels.tolist()
    ([[7, 9], [7, 9]], [3, 3])
    """
    sizes = set(map(len, records))
    if sizes - {info.record_bytes}:
        raise ArrayRecordError(f"split {info.split!r}: records of {sorted(sizes)} bytes, the manifest's records "
                               f"hold {info.record_bytes}.")
    rows = np.frombuffer(b"".join(records), np.uint8).reshape(len(records), info.record_bytes)
    labels = rows[:, :LABEL_BYTES].copy().view("<i8")[:, 0]
    images = rows[:, LABEL_BYTES:].copy().view(info.image_dtype).reshape(len(records), *info.image_shape)
    return images, labels


def decode_blocks(records: list[bytes], info: SplitInfo) -> tuple[np.ndarray, np.ndarray]:
    """Block records' `(images, labels)`, every sample of every block in order, in one NumPy call: a block is its
    samples' bytes back to back, so the blocks joined are rows of label and image bytes. Each block is checked to
    hold whole samples, at most the manifest's block size.

    >>> info = SplitInfo("t", [2], "|u1", 1, 3, "", block_size=2)
    >>> sample = lambda label, a, b: label.to_bytes(8, "little") + bytes([a, b])
    >>> images, labels = decode_blocks([sample(1, 5, 6) + sample(2, 7, 8), sample(0, 9, 9)], info)
    >>> images.tolist(), labels.tolist()
    ([[5, 6], [7, 8], [9, 9]], [1, 2, 0])
    """
    sizes = set(map(len, records))
    if any(size % info.record_bytes or not 0 < size <= info.block_size * info.record_bytes for size in sizes):
        raise ArrayRecordError(f"split {info.split!r}: blocks of {sorted(sizes)} bytes, the manifest's blocks hold "
                               f"1 to {info.block_size} samples of {info.record_bytes} bytes.")
    rows = np.frombuffer(b"".join(records), np.uint8).reshape(-1, info.record_bytes)
    labels = rows[:, :LABEL_BYTES].copy().view("<i8")[:, 0]
    images = rows[:, LABEL_BYTES:].copy().view(info.image_dtype).reshape(len(rows), *info.image_shape)
    return images, labels
