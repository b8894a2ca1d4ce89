"""Block records' plumbing: file names, the lock, atomic files, checksums and the index (what a block record is,
and how it is written and read, is notebook 05's lesson: `helpers.lessons.pipeline_profiling`).

Files are `{split}-{index:05d}-of-{N:05d}-{generation}.blocks.tfrecord`, with `{split}.blocks.json` written last
(image spec, block size, generation, and per file its blocks, records, size and SHA-256); only then are the
previous write's files removed. The generation, a random tag of one write, means a re-write killed half-way
leaves the old index and the old files, never a mix. Every block carries its image spec (`spec_tag`), so an index
edited to another spec of the same byte count is refused.
"""
from __future__ import annotations

import json
import re
import secrets
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Iterator

import numpy as np
import tensorflow as tf

from helpers.storage.labels import class_labels
from helpers.storage.files import (FileLock, atomic_write_text, check_name, file_problem, sha256_of, stale_temporaries,
                                   write_then_rename)
from helpers.storage.tfrecord.format import FeatureSpec, ShardError
from helpers.storage.tfrecord.write import shard_sizes

_REWRITE = "Write the split again with write_blocks()."


def block_file_name(split: str, index: int, num_shards: int, generation: str) -> str:
    """The name of one shard of block records, of the write whose generation tag is `generation`.

    >>> block_file_name("train", 0, 8, "0123abcd")
    'train-00000-of-00008-0123abcd.blocks.tfrecord'
    """
    return f"{split}-{index:05d}-of-{num_shards:05d}-{generation}.blocks.tfrecord"


def _file_pattern(split: str) -> str:
    return rf"{re.escape(split)}-\d{{5}}-of-\d{{5}}-[0-9a-f]{{8}}\.blocks\.tfrecord"


def spec_tag(spec: FeatureSpec) -> str:
    """The image spec as the short string every block carries, e.g. 'uint8 (28, 28)'."""
    return f"{spec.image_dtype} {tuple(spec.image_shape)}"


def whole_number(value, what: str, minimum: int = 1) -> int:
    """`value` as an int, or a ValueError naming `what` unless it is a whole number of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{what} must be a whole number of at least {minimum}, not {value!r}")
    return int(value)


@dataclass
class BlockWrite:
    """One write of a block split under way: its checked images and labels, and the files written so far."""

    directory: Path
    split: str
    images: np.ndarray
    labels: np.ndarray
    num_shards: int
    block_size: int
    generation: str = field(default_factory=lambda: secrets.token_hex(4))
    written: list[dict] = field(default_factory=list)

    @property
    def spec(self) -> FeatureSpec:
        return FeatureSpec.of(self.images[0])

    def shards(self) -> Iterator[tuple[Path, int, int]]:
        """Per shard, `(temporary file, first image, end)`; once the loop's body has written the file, it is renamed
        into place, sized and hashed."""
        start = 0
        for index, count in enumerate(shard_sizes(len(self.images), self.num_shards)):
            path = self.directory / block_file_name(self.split, index, self.num_shards, self.generation)
            with write_then_rename(path) as tmp:
                yield tmp, start, start + count
            self.written.append({"file": path.name, "blocks": -(-count // self.block_size), "records": count,
                                 "bytes": path.stat().st_size, "sha256": sha256_of(path)})
            start += count


@contextmanager
def block_write(images, labels, directory: str | Path, split: str, num_shards: int, block_size: int,
                num_classes: int | None = None) -> Iterator[BlockWrite]:
    """Check the arguments, hold the split's lock (a second writer waits) and yield a `BlockWrite`; once every
    shard is written, write the index, then remove the previous write's files."""
    directory, what = Path(directory), f"write_blocks({split!r})"
    check_name(split, "split name")
    num_shards, block_size = whole_number(num_shards, "num_shards"), whole_number(block_size, "block_size")
    images = np.asarray(images)
    if images.dtype.kind not in "biuf" or images.ndim < 2:
        raise ValueError(f"{what}: images must be a numeric array of shape (n, ...), got {images.dtype} {images.shape}")
    labels = class_labels(labels, what, num_classes)
    if len(images) != len(labels):
        raise ValueError(f"write_blocks: {len(images):,} images but {len(labels):,} labels")
    if len(images) < num_shards:
        raise ValueError(f"write_blocks: {len(images):,} images cannot fill {num_shards} shards")
    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(directory / f".{split}.blocks.lock", f"block split {split!r} in {directory}", wait=True):
        for stale in stale_temporaries(directory, _file_pattern(split)):
            stale.unlink()  # left by a write of this split that was killed; we hold its lock
        write = BlockWrite(directory, split, images, labels, num_shards, block_size)
        yield write
        if len(write.written) != num_shards:
            raise RuntimeError(f"{what}: {len(write.written)} of {num_shards} shards written; the index is not")
        atomic_write_text(directory / f"{split}.blocks.json", json.dumps(
            {"spec": write.spec.to_json(), "block_size": block_size, "total_records": len(images),
             "generation": write.generation, "shards": write.written}, indent=1))
        listed, pattern = {shard["file"] for shard in write.written}, re.compile(_file_pattern(split))
        for old in directory.iterdir():   # the earlier write's files, now that no index lists them
            if pattern.fullmatch(old.name) and old.name not in listed:
                old.unlink()


@dataclass(frozen=True)
class BlockSplit:
    """What `{split}.blocks.json` says, checked: the image spec, the files, how many images in all."""

    spec: FeatureSpec
    block_size: int
    files: list[Path]
    total_records: int
    generation: str = ""
    sha256: tuple[str, ...] = ()


def _read_index(path: Path) -> tuple[FeatureSpec, int, int, str, list[tuple]]:
    """The index's values, each checked to be of the kind write_blocks writes (a ValueError if not)."""
    doc = json.loads(path.read_text())
    spec, shards = FeatureSpec.from_json(doc["spec"]), doc["shards"]
    if np.dtype(spec.image_dtype).kind not in "biuf" or not isinstance(shards, list) or not shards:
        raise ValueError("the spec or the shard list is not one write_blocks() writes")
    block_size, total = whole_number(doc["block_size"], "block_size"), whole_number(doc["total_records"], "total", 0)
    generation = doc.get("generation")
    if not isinstance(generation, str) or not re.fullmatch(r"[0-9a-f]{8}", generation):
        raise ValueError(f"generation {generation!r} is missing or not 8 hex digits (an older index?)")
    entries = []
    for index, shard in enumerate(shards):
        records = whole_number(shard["records"], f"shard {index}'s records", 0)
        blocks = whole_number(shard["blocks"], f"shard {index}'s blocks", 0)
        if blocks != -(-records // block_size):
            raise ValueError(f"shard {index} lists {blocks} blocks for {records} records of {block_size}")
        digest = shard["sha256"]
        if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
            raise ValueError(f"shard {index}'s sha256 {digest!r} is not a SHA-256")
        entries.append((shard.get("file"), records, whole_number(shard["bytes"], f"shard {index}'s bytes", 0), digest))
    return spec, block_size, total, generation, entries


def read_block_index(directory: str | Path, split: str) -> BlockSplit:
    """Read and check a split's index and files: every value of the kind it must be, every file named as its place
    and the write's generation say, a regular file of the size recorded, the first block holding the index's image
    spec. Each problem is a `ShardError` naming the file."""
    directory = Path(directory)
    path = directory / f"{check_name(split, 'split name')}.blocks.json"
    if (problem := file_problem(path)) is not None:
        raise ShardError(f"{path} is {problem}: write the split with write_blocks() first.")
    try:
        spec, block_size, total, generation, entries = _read_index(path)
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise ShardError(f"{path} is not a block index written by write_blocks() ({e}). {_REWRITE}") from None
    files = []
    for index, (name, _, size, _) in enumerate(entries):
        expected = block_file_name(split, index, len(entries), generation)
        if name != expected:  # never a path taken from the file: only the name it must have
            raise ShardError(f"{path}: shard {index} is listed as {name!r}, not {expected!r}.")
        file = directory / expected
        if (problem := file_problem(file)) is not None:
            raise ShardError(f"{file} is {problem} ({path.name} lists it). {_REWRITE}")
        if file.stat().st_size != size:
            raise ShardError(f"{file} is {file.stat().st_size:,} bytes but {path.name} says {size:,}: "
                             f"it was cut short or replaced. {_REWRITE}")
        files.append(file)
    if sum(records for _, records, _, _ in entries) != total:
        raise ShardError(f"{path}: the shards' record counts do not add up to total_records={total:,}.")
    try:
        first = tf.train.Example.FromString(next(iter(tf.data.TFRecordDataset(str(files[0])))).numpy())
        tag = first.features.feature["spec"].bytes_list.value[0].decode()
    except Exception as e:  # unreadable, not an Example, or no spec: not this index's blocks
        raise ShardError(f"{files[0]}: its first block cannot be read as a block record ({type(e).__name__}). "
                         f"{_REWRITE}") from None
    if tag != spec_tag(spec):
        raise ShardError(f"{files[0]} holds {tag} images, but {path.name} says {spec_tag(spec)}: the index does not "
                         f"describe these files. {_REWRITE}")
    return BlockSplit(spec, block_size, files, total, generation, tuple(e[3] for e in entries))


def open_block_split(directory: str | Path, split: str, *, verify: bool = False, **counts) -> BlockSplit:
    """For a reader: check that each of `counts` (batch_size=..., ...) is a whole number of at least 1, and return
    the checked index (`read_block_index`); with `verify`, every file's SHA-256 is compared with the index too
    (a flipped byte keeps the size), a `ShardError` naming a changed file."""
    for what, value in counts.items():
        whole_number(value, what)
    split_info = read_block_index(directory, split)
    for file, digest in zip(split_info.files, split_info.sha256) if verify else ():
        if sha256_of(file) != digest:
            raise ShardError(f"{file}: its checksum differs from {split}.blocks.json: the file changed after it was "
                             f"written. {_REWRITE}")
    return split_info
