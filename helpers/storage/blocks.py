"""Block records' plumbing: the checks, the lock, the temporary files, the checksums and the index around notebook
05's writer and reader (`write_blocks(x, y, files)` and `read_blocks(files, ...)`, which take plain lists of files).

    write_block_split(write_blocks, images, labels, "data/blocks", "train", num_shards=8)   # checked, atomic, indexed
    ds = read_block_split(read_blocks, "data/blocks", "train", 256, shuffle=True)          # checked, then read

or, as the notebook writes it, the plumbing beside the lesson's call:

    with block_write(images, labels, "data/blocks", "train", num_shards=8) as split:
        write_blocks(split.x, split.y, split.files, split.block_size)
    split = open_block_split("data/blocks", "train")
    ds = read_blocks(split.files, 256, count=split.total_records, shuffle=True)

Files are `{split}-{index:05d}-of-{N:05d}-{generation}.blocks.tfrecord`, with `{split}.blocks.json` written last
(the layout tag, the image spec, block size, generation, and per file its blocks, records, size and SHA-256); only
then are the previous write's files removed. The generation, a random tag of one write, means a re-write killed
half-way leaves the old index and the old files, never a mix. Every block carries its layout tag (`block_spec`:
the dtype and shape of one x and of one y), so an index edited to another spec of the same byte count is refused.
Introduced in notebooks/05_pipeline_profiling.ipynb.
"""
from __future__ import annotations

import json
import re
import secrets
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Iterator

import numpy as np
import tensorflow as tf

from helpers.storage.labels import class_labels
from helpers.storage.files import (FileLock, atomic_write_text, check_name, file_problem, sha256_of, stale_temporaries,
                                   write_then_rename)
from helpers.storage.tfrecord.format import FeatureSpec, ShardError
from helpers.storage.tfrecord.write import shard_sizes

_REWRITE = "Write the split again with write_blocks()."
READER_COUNTS = ("mix_blocks", "shuffle_blocks", "parallel_reads")   # read_blocks' options that are counts


def block_file_name(split: str, index: int, num_shards: int, generation: str) -> str:
    """The name of one shard of block records, of the write whose generation tag is `generation`.

    >>> block_file_name("train", 0, 8, "0123abcd")
    'train-00000-of-00008-0123abcd.blocks.tfrecord'
    """
    return f"{split}-{index:05d}-of-{num_shards:05d}-{generation}.blocks.tfrecord"


def _file_pattern(split: str) -> str:
    return rf"{re.escape(split)}-\d{{5}}-of-\d{{5}}-[0-9a-f]{{8}}\.blocks\.tfrecord"


def spec_tag(spec: FeatureSpec) -> str:
    """The image spec as the start of every block's layout tag, e.g. 'uint8 (28, 28)'."""
    return f"{spec.image_dtype} {tuple(spec.image_shape)}"


def block_spec(x, y) -> str:
    """The layout tag every block carries, as notebook 05's `block_spec` writes it (a test keeps the two alike): the
    dtype and shape of one x, then of one y.

    >>> block_spec(np.zeros((5, 28, 28), np.uint8), np.zeros(5, np.int64))
    'uint8 (28, 28) -> int64 ()'
    """
    x, y = np.asarray(x), np.asarray(y)
    return f"{x.dtype.name} {tuple(x.shape[1:])} -> {y.dtype.name} {tuple(y.shape[1:])}"


def whole_number(value, what: str, minimum: int = 1) -> int:
    """`value` as an int, or a ValueError naming `what` unless it is a whole number of at least `minimum`."""
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < minimum:
        raise ValueError(f"{what} must be a whole number of at least {minimum}, not {value!r}")
    return int(value)


def _targets(labels, what: str) -> np.ndarray:
    """Targets that are not classes (prices, readings, vectors): a numeric array of one row per x, NaN refused."""
    labels = np.asarray(labels)
    if labels.dtype.kind not in "iuf" or labels.ndim < 1:
        raise ValueError(f"{what}: targets must be a numeric array of shape (n, ...), got {labels.dtype} "
                         f"{labels.shape}")
    if labels.dtype.kind == "f" and not np.isfinite(labels).all():
        first = int(np.flatnonzero(~np.isfinite(labels.reshape(len(labels), -1)).all(axis=1))[0])
        raise ValueError(f"{what}: the target at position {first} is not a finite number")
    return labels


@dataclass
class BlockWrite:
    """One write of a block split under way: its checked rows `x` (images, or rows of floats) and targets `y`
    (labels), and the temporary files the writer fills, one per shard, `shard_sizes` of the rows each, in order."""

    directory: Path
    split: str
    x: np.ndarray
    y: np.ndarray
    block_size: int
    files: list[Path]
    final: list[Path]
    generation: str

    @property
    def spec(self) -> FeatureSpec:
        return FeatureSpec.of(self.x[0])


@contextmanager
def block_write(images, labels, directory: str | Path, split: str, num_shards: int = 8, block_size: int = 256,
                num_classes: int | None = None, *, classes: bool = True) -> Iterator[BlockWrite]:
    """Check the arguments, hold the split's lock (a second writer waits) and yield a `BlockWrite` whose `files` the
    caller's writer fills (notebook 05's `write_blocks(split.x, split.y, split.files, split.block_size)`);
    once it has, rename each into place, size and hash it, write the index, then remove the previous write's files.

    `labels`: class labels (whole numbers from 0, below `num_classes` when given), or with `classes=False` any
    numeric targets of one row per image (floats, vectors). `images`: any numeric array (n, ...): images or rows."""
    directory, what = Path(directory), f"write_blocks({split!r})"
    check_name(split, "split name")
    num_shards, block_size = whole_number(num_shards, "num_shards"), whole_number(block_size, "block_size")
    images = np.asarray(images)
    if images.dtype.kind not in "biuf" or images.ndim < 2:
        raise ValueError(f"{what}: images must be a numeric array of shape (n, ...), got {images.dtype} {images.shape}")
    labels = class_labels(labels, what, num_classes) if classes else _targets(labels, what)
    if len(images) != len(labels):
        raise ValueError(f"write_blocks: {len(images):,} images but {len(labels):,} labels")
    if len(images) < num_shards:
        raise ValueError(f"write_blocks: {len(images):,} images cannot fill {num_shards} shards")
    directory.mkdir(parents=True, exist_ok=True)
    with FileLock(directory / f".{split}.blocks.lock", f"block split {split!r} in {directory}", wait=True):
        for stale in stale_temporaries(directory, _file_pattern(split)):
            stale.unlink()  # left by a write of this split that was killed; we hold its lock
        generation = secrets.token_hex(4)
        final = [directory / block_file_name(split, i, num_shards, generation) for i in range(num_shards)]
        with ExitStack() as renames:   # each temporary file renamed into place once the writer has filled them all
            files = [renames.enter_context(write_then_rename(path)) for path in final]
            write = BlockWrite(directory, split, images, labels, block_size, files, final, generation)
            yield write
            if any(file_problem(f) or f.stat().st_size == 0 for f in files):
                raise RuntimeError(f"{what}: the writer left a shard's temporary file empty or missing; the index "
                                   f"is not written")
        counts = shard_sizes(len(images), num_shards)
        shards = [{"file": path.name, "blocks": -(-count // block_size), "records": count,
                   "bytes": path.stat().st_size, "sha256": sha256_of(path)} for path, count in zip(final, counts)]
        atomic_write_text(directory / f"{split}.blocks.json", json.dumps(
            {"spec": write.spec.to_json(), "tag": block_spec(images, labels), "block_size": block_size,
             "total_records": len(images), "generation": generation, "shards": shards}, indent=1))
        listed, pattern = {path.name for path in final}, re.compile(_file_pattern(split))
        for old in directory.iterdir():   # the earlier write's files, now that no index lists them
            if pattern.fullmatch(old.name) and old.name not in listed:
                old.unlink()


def write_block_split(write: Callable, images, labels, directory: str | Path, split: str, num_shards: int = 8,
                      block_size: int = 256, num_classes: int | None = None, *, classes: bool = True) -> Path:
    """`write` (notebook 05's `write_blocks`, passed in: plumbing never imports lesson code) inside `block_write`: the
    split checked, written atomically and indexed in one call. Returns the folder."""
    with block_write(images, labels, directory, split, num_shards, block_size, num_classes, classes=classes) as split_:
        write(split_.x, split_.y, split_.files, split_.block_size)
    return split_.directory


@dataclass(frozen=True)
class BlockSplit:
    """What `{split}.blocks.json` says, checked: the layout tag, the image spec, the files, how many images."""

    spec: FeatureSpec
    block_size: int
    files: list[Path]
    total_records: int
    generation: str = ""
    sha256: tuple[str, ...] = ()
    tag: str = ""


def _read_index(path: Path) -> tuple[FeatureSpec, str, int, int, str, list[tuple]]:
    """The index's values, each checked to be of the kind write_blocks writes (a ValueError if not)."""
    doc = json.loads(path.read_text())
    spec, shards, tag = FeatureSpec.from_json(doc["spec"]), doc["shards"], doc["tag"]
    if np.dtype(spec.image_dtype).kind not in "biuf" or not isinstance(shards, list) or not shards:
        raise ValueError("the spec or the shard list is not one write_blocks() writes")
    if not isinstance(tag, str) or not tag.startswith(spec_tag(spec) + " -> "):
        raise ValueError(f"its layout tag {tag!r} does not start with its image spec {spec_tag(spec)!r}")
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
    return spec, tag, block_size, total, generation, entries


def read_block_index(directory: str | Path, split: str) -> BlockSplit:
    """Read and check a split's index and files: every value of the kind it must be, every file named as its place
    and the write's generation say, a regular file of the size recorded, the first block holding the index's layout.
    Each problem is a `ShardError` naming the file."""
    directory = Path(directory)
    path = directory / f"{check_name(split, 'split name')}.blocks.json"
    if (problem := file_problem(path)) is not None:
        raise ShardError(f"{path} is {problem}: write the split with write_blocks() first.")
    try:
        spec, tag, block_size, total, generation, entries = _read_index(path)
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
        found = first.features.feature["spec"].bytes_list.value[0].decode()
    except Exception as e:  # unreadable, not an Example, or no spec: not this index's blocks
        raise ShardError(f"{files[0]}: its first block cannot be read as a block record ({type(e).__name__}). "
                         f"{_REWRITE}") from None
    if not found.startswith(spec_tag(spec) + " -> "):
        raise ShardError(f"{files[0]} holds {found.split(' -> ')[0]} images, but {path.name} says {spec_tag(spec)}: "
                         f"the index does not describe these files. {_REWRITE}")
    if found != tag:
        raise ShardError(f"{files[0]} holds blocks of {found}, but {path.name} says {tag}: the index does not "
                         f"describe these files. {_REWRITE}")
    return BlockSplit(spec, block_size, files, total, generation, tuple(e[3] for e in entries), tag)


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


def read_block_split(read: Callable, directory: str | Path, split: str, batch_size: int = 256, *,
                     verify: bool = False, **options):
    """`read(files, batch_size, count=..., **options)` (notebook 05's `read_blocks`, passed in) over a split whose
    index and files `open_block_split` checked first, with the reader's counts (`batch_size`, `mix_blocks`, ...)."""
    counts = {name: options[name] for name in READER_COUNTS if name in options}
    info = open_block_split(directory, split, verify=verify, batch_size=batch_size, **counts)
    return read(info.files, batch_size, count=info.total_records, **options)
