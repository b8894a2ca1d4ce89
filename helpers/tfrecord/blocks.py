"""Block records: each TFRecord record holds a block of images (256 by default), not one.

Every record costs the reader a fixed amount of work whatever it holds: a header and a CRC to
check, a protobuf to parse, an element to pass from op to op. A 784-byte MNIST digit pays that
once per image; a block pays it once per 256 images, and its pixels are decoded in one
`decode_raw`. The price is coarser shuffling, which the reader makes up for by shuffling blocks,
then mixing a window of several blocks image by image (vectorised: one gather per window).

Write:  `write_blocks(images, labels, "data/mnist-blocks", "train", num_shards=8)`
Read:   `read_blocks("data/mnist-blocks", "train", batch_size=256, shuffle=True)`

Files are `{split}-{index:05d}-of-{N:05d}-{generation}.blocks.tfrecord` with `{split}.blocks.json`
beside them (image shape and dtype, block size, the write's generation, and each file's block count,
record count, size and SHA-256). Every file is written to a temporary name and renamed; the index is
written last. Each write has a new generation, a random tag in every file name of that write, and
only the files of the index's generation are read: a re-write killed half-way leaves the old index
pointing at the old files, never a mix of two writes. Each block also carries its image spec, so an
index edited to another spec of the same byte count is refused instead of read as wrong images.

Introduced in notebooks/05_pipeline_profiling.ipynb.
"""
from __future__ import annotations

import json
import re
import secrets
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from helpers.files import (FileLock, atomic_write_text, check_name, file_problem, sha256_of, stale_temporaries,
                           write_then_rename)
from helpers.labels import class_labels
from helpers.tfrecord.format import FeatureSpec, ShardError
from helpers.tfrecord.read import exact_length
from helpers.tfrecord.write import shard_sizes

BLOCK_SIZE = 256
_GENERATION = re.compile(r"[0-9a-f]{8}")


def block_file_name(split: str, index: int, num_shards: int, generation: str) -> str:
    """The name of one shard of block records, of the write whose generation tag is `generation`.

    Introduced in notebooks/05_pipeline_profiling.ipynb.

    >>> block_file_name("train", 0, 8, "0123abcd")
    'train-00000-of-00008-0123abcd.blocks.tfrecord'
    """
    return f"{split}-{index:05d}-of-{num_shards:05d}-{generation}.blocks.tfrecord"


def _block_file_pattern(split: str) -> str:
    return rf"{re.escape(split)}-\d{{5}}-of-\d{{5}}-[0-9a-f]{{8}}\.blocks\.tfrecord"


def spec_tag(spec: FeatureSpec) -> str:
    """The image spec as a short string every block carries, e.g. 'uint8 (28, 28)'.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    return f"{spec.image_dtype} {tuple(spec.image_shape)}"


def _positive_int(value, what: str) -> int:
    if isinstance(value, bool) or not isinstance(value, (int, np.integer)) or value < 1:
        raise ValueError(f"{what} must be a whole number of at least 1, not {value!r}")
    return int(value)


def _index_path(directory: Path, split: str) -> Path:
    return directory / f"{split}.blocks.json"


def _block_example(images: np.ndarray, labels: np.ndarray, tag: bytes) -> bytes:
    feature = {
        "images": tf.train.Feature(bytes_list=tf.train.BytesList(value=[np.ascontiguousarray(images).tobytes()])),
        "labels": tf.train.Feature(int64_list=tf.train.Int64List(value=labels.astype(np.int64))),
        "spec": tf.train.Feature(bytes_list=tf.train.BytesList(value=[tag])),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


def write_blocks(images: np.ndarray, labels: np.ndarray, directory: str | Path, split: str, num_shards: int = 8,
                 block_size: int = BLOCK_SIZE, num_classes: int | None = None) -> Path:
    """Write `images` and their integer `labels` as `num_shards` files of block records; returns the folder.

    Shards get consecutive runs of images (shuffling happens when reading). Each file is
    written whole under a temporary name and renamed; the index comes last, so a reader never
    sees a half-written split, and files of an earlier write are removed only after it. A second
    writer of the same split waits for the first. Labels are whole numbers from 0 (below
    `num_classes` when given); images must be a numeric array of one shape.
    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    directory = Path(directory)
    check_name(split, "split name")
    num_shards, block_size = _positive_int(num_shards, "num_shards"), _positive_int(block_size, "block_size")
    images = np.asarray(images)
    if images.dtype.kind not in "biuf" or images.ndim < 2:
        raise ValueError(f"write_blocks({split!r}): images must be a numeric array of shape (n, ...), got "
                         f"{images.dtype} {images.shape}")
    labels = class_labels(labels, f"write_blocks({split!r})", num_classes)
    if len(images) != len(labels):
        raise ValueError(f"write_blocks: {len(images):,} images but {len(labels):,} labels")
    if len(images) < num_shards:
        raise ValueError(f"write_blocks: {len(images):,} images cannot fill {num_shards} shards")
    spec = FeatureSpec.of(images[0])
    tag = spec_tag(spec).encode()
    generation = secrets.token_hex(4)
    directory.mkdir(parents=True, exist_ok=True)
    shards, start = [], 0
    with FileLock(directory / f".{split}.blocks.lock", f"block split {split!r} in {directory}", wait=True):
        for stale in stale_temporaries(directory, _block_file_pattern(split)):
            stale.unlink()  # left by a write of this split that was killed; we hold its lock
        for index, count in enumerate(shard_sizes(len(images), num_shards)):
            name = block_file_name(split, index, num_shards, generation)
            with write_then_rename(directory / name) as tmp, tf.io.TFRecordWriter(str(tmp)) as writer:
                for first in range(start, start + count, block_size):
                    last = min(first + block_size, start + count)
                    writer.write(_block_example(images[first:last], labels[first:last], tag))
            shards.append({"file": name, "blocks": -(-count // block_size), "records": count,
                           "bytes": (directory / name).stat().st_size, "sha256": sha256_of(directory / name)})
            start += count
        index_doc = {"spec": spec.to_json(), "block_size": block_size, "total_records": len(images),
                     "generation": generation, "shards": shards}
        atomic_write_text(_index_path(directory, split), json.dumps(index_doc, indent=1))
        listed = {shard["file"] for shard in shards}
        pattern = re.compile(_block_file_pattern(split))
        for old in directory.iterdir():   # the earlier write's files, now that no index lists them
            if pattern.fullmatch(old.name) and old.name not in listed:
                old.unlink()
    return directory


@dataclass(frozen=True)
class BlockSplit:
    """What `{split}.blocks.json` says: the image spec, the files, and how many images in all.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """

    spec: FeatureSpec
    block_size: int
    files: list[Path]
    total_records: int
    generation: str = ""
    sha256: tuple[str, ...] = ()


def _count(value, what: str, minimum: int = 0) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < minimum:
        raise ValueError(f"{what} is {value!r}, not a whole number of at least {minimum}")
    return value


def read_block_index(directory: str | Path, split: str) -> BlockSplit:
    """Read and check a split's index and files: every value of the kind it must be, every file
    named as its place and the write's generation say, present as a regular file of the size
    recorded, and the first block holding the index's image spec. Each problem is a `ShardError`
    naming the file.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    directory = Path(directory)
    check_name(split, "split name")
    path = _index_path(directory, split)
    if (problem := file_problem(path)) is not None:
        raise ShardError(f"{path} is {problem}: write the split with write_blocks() first.")
    try:
        doc = json.loads(path.read_text())
        spec, shards = FeatureSpec.from_json(doc["spec"]), doc["shards"]
        if np.dtype(spec.image_dtype).kind not in "biuf" or not isinstance(shards, list) or not shards:
            raise ValueError("the spec or the shard list is not one write_blocks() writes")
        block_size = _count(doc["block_size"], "block_size", 1)
        total = _count(doc["total_records"], "total_records")
        generation = doc.get("generation")
        if not isinstance(generation, str) or not _GENERATION.fullmatch(generation):
            raise ValueError(f"generation {generation!r} is missing or not 8 hex digits (an older index?)")
        entries = []
        for index, shard in enumerate(shards):
            records = _count(shard["records"], f"shard {index}'s records")
            blocks = _count(shard["blocks"], f"shard {index}'s blocks")
            if blocks != -(-records // block_size):
                raise ValueError(f"shard {index} lists {blocks} blocks for {records} records of {block_size}")
            digest = shard["sha256"]
            if not isinstance(digest, str) or not re.fullmatch(r"[0-9a-f]{64}", digest):
                raise ValueError(f"shard {index}'s sha256 {digest!r} is not a SHA-256")
            entries.append((shard.get("file"), records, _count(shard["bytes"], f"shard {index}'s bytes"), digest))
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as e:
        raise ShardError(f"{path} is not a block index written by write_blocks() ({e}). "
                         f"Write the split again with write_blocks().") from None
    files = []
    for index, (name, _, size, _) in enumerate(entries):
        expected = block_file_name(split, index, len(entries), generation)
        if name != expected:  # never a path taken from the file: only the name it must have
            raise ShardError(f"{path}: shard {index} is listed as {name!r}, not {expected!r}.")
        file = directory / expected
        if (problem := file_problem(file)) is not None:
            raise ShardError(f"{file} is {problem} ({path.name} lists it). Write the split again with write_blocks().")
        if file.stat().st_size != size:
            raise ShardError(f"{file} is {file.stat().st_size:,} bytes but {path.name} says {size:,}: "
                             f"it was cut short or replaced. Write the split again with write_blocks().")
        files.append(file)
    if sum(records for _, records, _, _ in entries) != total:
        raise ShardError(f"{path}: the shards' record counts do not add up to total_records={total:,}.")
    _check_first_block(files[0], spec, path)
    return BlockSplit(spec, block_size, files, total, generation, tuple(e[3] for e in entries))


def _check_first_block(file: Path, spec: FeatureSpec, index_path: Path) -> None:
    try:
        record = next(iter(tf.data.TFRecordDataset(str(file))))
        example = tf.train.Example.FromString(record.numpy())
        tag = example.features.feature["spec"].bytes_list.value[0].decode()
    except Exception as e:  # unreadable, not an Example, or no spec: not this index's blocks
        raise ShardError(f"{file}: its first block cannot be read as a block record ({type(e).__name__}). "
                         f"Write the split again with write_blocks().") from None
    if tag != spec_tag(spec):
        raise ShardError(f"{file} holds {tag} images, but {index_path.name} says {spec_tag(spec)}: the index does not "
                         f"describe these files. Write the split again with write_blocks().")


def verify_blocks(directory: str | Path, split: str) -> None:
    """Read every file of a block split once and compare its SHA-256 with the index; a changed file
    (a flipped byte keeps its size) is a `ShardError` naming it.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    split_info = read_block_index(directory, split)
    for file, digest in zip(split_info.files, split_info.sha256):
        if sha256_of(file) != digest:
            raise ShardError(f"{file}: its checksum differs from {split}.blocks.json: the file changed after it was "
                             f"written. Write the split again with write_blocks().")


def parse_block_fn(spec: FeatureSpec, source: str = "these block records"):
    """A function for `dataset.map`: one block record -> `(images, labels)`, a batch of the block's images.

    Checks that the pixel bytes are exactly (number of labels) images of `spec`, so a wrong
    spec fails with a message naming `source` instead of cutting images in the wrong places.
    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    description = {"images": tf.io.FixedLenFeature([], tf.string), "labels": tf.io.VarLenFeature(tf.int64),
                   "spec": tf.io.FixedLenFeature([], tf.string, default_value="")}
    dtype = tf.as_dtype(spec.image_dtype)
    tag = spec_tag(spec)

    def parse(serialized):
        features = tf.io.parse_single_example(serialized, description)
        labels = tf.sparse.to_dense(features["labels"])
        same_spec = tf.debugging.Assert(  # (assert_equal cannot compare strings when run eagerly)
            tf.equal(features["spec"], tag), [f"a block in {source} does not hold {tag} images (its index was edited?)"])
        fits = tf.debugging.assert_equal(
            tf.strings.length(features["images"]), tf.cast(tf.size(labels), tf.int32) * spec.nbytes,
            message=f"a block in {source} does not hold one {spec.image_dtype} {spec.image_shape} image per label")
        with tf.control_dependencies([same_spec, fits]):  # check first: a wrong spec must not reach the reshape
            images = tf.reshape(tf.io.decode_raw(features["images"], dtype), (-1, *spec.image_shape))
        return images, labels

    return parse


def _mix(images, labels, seed):
    order = tf.random.shuffle(tf.range(tf.shape(labels)[0]), seed=seed)
    return tf.gather(images, order), tf.gather(labels, order)


def read_blocks(directory: str | Path, split: str, batch_size: int = 256, *, shuffle: bool = False,
                mix_blocks: int = 8, shuffle_blocks: int = 64, parallel_reads: int = 4,
                seed: int | None = None, verify: bool = False) -> tf.data.Dataset:
    """`(images, labels)` batches of `batch_size` from block records, the last one smaller.

    Unshuffled, images come in the order they were written. With `shuffle=True`, each epoch
    shuffles the file list, reads `parallel_reads` files at once taking whichever block is
    ready first, shuffles blocks in a buffer of `shuffle_blocks`, and then, `mix_blocks` blocks
    at a time, shuffles images across those blocks with one gather, so a batch draws from
    `mix_blocks` blocks, not one. Every step works on whole blocks or batches, never on one image.

    The index and the files are checked first (`read_block_index`); `verify=True` also reads every
    file once and compares its SHA-256 (`verify_blocks`), so a changed byte is named before training
    rather than showing up mid-epoch as TensorFlow's `DataLossError`, which does not name the file.
    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    batch_size = _positive_int(batch_size, "batch_size")
    mix_blocks, shuffle_blocks = _positive_int(mix_blocks, "mix_blocks"), _positive_int(shuffle_blocks, "shuffle_blocks")
    parallel_reads = _positive_int(parallel_reads, "parallel_reads")
    if verify:
        verify_blocks(directory, split)
    split_info = read_block_index(directory, split)
    files = tf.data.Dataset.from_tensor_slices([str(f) for f in split_info.files])
    if shuffle:
        files = files.shuffle(len(split_info.files), seed=seed, reshuffle_each_iteration=True)
    # Unshuffled, one file at a time keeps the written order (for evaluation, where order helps).
    ds = files.interleave(tf.data.TFRecordDataset, cycle_length=parallel_reads if shuffle else 1,
                          num_parallel_calls=parallel_reads if shuffle else None,
                          deterministic=False if shuffle else None)
    if shuffle:
        ds = ds.shuffle(shuffle_blocks, seed=seed, reshuffle_each_iteration=True)
    ds = ds.map(parse_block_fn(split_info.spec, f"split {split!r} of {directory}"), num_parallel_calls=tf.data.AUTOTUNE)
    if shuffle:
        ds = ds.rebatch(split_info.block_size * mix_blocks).map(lambda x, y: _mix(x, y, seed),
                                                                num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.rebatch(batch_size)
    return exact_length(ds, -(-split_info.total_records // batch_size), f"block split {split!r} of {directory}")
