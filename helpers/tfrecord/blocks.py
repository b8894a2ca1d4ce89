"""Block records: each TFRecord record holds a block of images (256 by default), not one.

Every record costs the reader a fixed amount of work whatever it holds: a header and a CRC to
check, a protobuf to parse, an element to pass from op to op. A 784-byte MNIST digit pays that
once per image; a block pays it once per 256 images, and its pixels are decoded in one
`decode_raw`. The price is coarser shuffling, which the reader makes up for by shuffling blocks,
then mixing a window of several blocks image by image (vectorised: one gather per window).

Write:  `write_blocks(images, labels, "data/mnist-blocks", "train", num_shards=8)`
Read:   `read_blocks("data/mnist-blocks", "train", batch_size=256, shuffle=True)`

Files are `{split}-{index:05d}-of-{N:05d}.blocks.tfrecord` with `{split}.blocks.json` beside
them (image shape and dtype, block size, and each file's block count, record count and size).
Every file is written to a temporary name and renamed; the index is written last.

Introduced in notebooks/05_pipeline_profiling.ipynb.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import tensorflow as tf

from helpers.datasets import check_labels
from helpers.files import FileLock, atomic_write_text, check_name, is_regular_file, write_then_rename
from helpers.tfrecord.format import FeatureSpec, ShardError
from helpers.tfrecord.write import shard_sizes

BLOCK_SIZE = 256


def block_file_name(split: str, index: int, num_shards: int) -> str:
    """The name of one shard of block records.

    Introduced in notebooks/05_pipeline_profiling.ipynb.

    >>> block_file_name("train", 0, 8)
    'train-00000-of-00008.blocks.tfrecord'
    """
    return f"{split}-{index:05d}-of-{num_shards:05d}.blocks.tfrecord"


def _index_path(directory: Path, split: str) -> Path:
    return directory / f"{split}.blocks.json"


def _block_example(images: np.ndarray, labels: np.ndarray) -> bytes:
    feature = {
        "images": tf.train.Feature(bytes_list=tf.train.BytesList(value=[np.ascontiguousarray(images).tobytes()])),
        "labels": tf.train.Feature(int64_list=tf.train.Int64List(value=labels.astype(np.int64))),
    }
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString(deterministic=True)


def write_blocks(images: np.ndarray, labels: np.ndarray, directory: str | Path, split: str, num_shards: int = 8,
                 block_size: int = BLOCK_SIZE) -> Path:
    """Write `images` and their integer `labels` as `num_shards` files of block records; returns the folder.

    Shards get consecutive runs of images (shuffling happens when reading). Each file is
    written whole under a temporary name and renamed; the index comes last, so a reader never
    sees a half-written split. A second writer of the same split waits for the first.
    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    directory = Path(directory)
    check_name(split, "split name")
    images, labels = np.asarray(images), np.asarray(labels)
    if len(images) != len(labels):
        raise ValueError(f"write_blocks: {len(images):,} images but {len(labels):,} labels")
    if len(images) < num_shards:
        raise ValueError(f"write_blocks: {len(images):,} images cannot fill {num_shards} shards")
    if block_size < 1:
        raise ValueError(f"block_size must be at least 1, not {block_size}")
    check_labels(labels, f"write_blocks({split!r})")
    spec = FeatureSpec.of(images[0])
    directory.mkdir(parents=True, exist_ok=True)
    shards, start = [], 0
    with FileLock(directory / f".{split}.blocks.lock", f"block split {split!r} in {directory}", wait=True):
        for index, count in enumerate(shard_sizes(len(images), num_shards)):
            name = block_file_name(split, index, num_shards)
            with write_then_rename(directory / name) as tmp, tf.io.TFRecordWriter(str(tmp)) as writer:
                for first in range(start, start + count, block_size):
                    last = min(first + block_size, start + count)
                    writer.write(_block_example(images[first:last], labels[first:last]))
            shards.append({"file": name, "blocks": -(-count // block_size), "records": count,
                           "bytes": (directory / name).stat().st_size})
            start += count
        index_doc = {"spec": spec.to_json(), "block_size": block_size, "total_records": len(images), "shards": shards}
        atomic_write_text(_index_path(directory, split), json.dumps(index_doc, indent=1))
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


def read_block_index(directory: str | Path, split: str) -> BlockSplit:
    """Read and check a split's index and files: every file named as its place says, present, of the
    size recorded. Each problem is a `ShardError` naming the file.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    directory = Path(directory)
    check_name(split, "split name")
    path = _index_path(directory, split)
    if not is_regular_file(path):
        raise ShardError(f"{path} is missing: write the split with write_blocks() first.")
    try:
        doc = json.loads(path.read_text())
        spec, shards = FeatureSpec.from_json(doc["spec"]), list(doc["shards"])
        block_size, total = int(doc["block_size"]), int(doc["total_records"])
        sizes = [(int(shard["records"]), int(shard["bytes"])) for shard in shards]
    except (ValueError, KeyError, TypeError) as e:
        raise ShardError(f"{path} is not a block index written by write_blocks() ({e!r}).") from None
    files = []
    for index, (shard, (_, size)) in enumerate(zip(shards, sizes)):
        expected = block_file_name(split, index, len(shards))
        if shard.get("file") != expected:  # never a path taken from the file: only the name it must have
            raise ShardError(f"{path}: shard {index} is listed as {shard.get('file')!r}, not {expected!r}.")
        file = directory / expected
        if not is_regular_file(file):
            raise ShardError(f"{file} is missing ({path.name} lists it). Write the split again with write_blocks().")
        if file.stat().st_size != size:
            raise ShardError(f"{file} is {file.stat().st_size:,} bytes but {path.name} says {size:,}: "
                             f"it was cut short or replaced. Write the split again with write_blocks().")
        files.append(file)
    if sum(records for records, _ in sizes) != total:
        raise ShardError(f"{path}: the shards' record counts do not add up to total_records={total:,}.")
    return BlockSplit(spec, block_size, files, total)


def parse_block_fn(spec: FeatureSpec, source: str = "these block records"):
    """A function for `dataset.map`: one block record -> `(images, labels)`, a batch of the block's images.

    Checks that the pixel bytes are exactly (number of labels) images of `spec`, so a wrong
    spec fails with a message naming `source` instead of cutting images in the wrong places.
    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    description = {"images": tf.io.FixedLenFeature([], tf.string), "labels": tf.io.VarLenFeature(tf.int64)}
    dtype = tf.as_dtype(spec.image_dtype)

    def parse(serialized):
        features = tf.io.parse_single_example(serialized, description)
        labels = tf.sparse.to_dense(features["labels"])
        fits = tf.debugging.assert_equal(
            tf.strings.length(features["images"]), tf.cast(tf.size(labels), tf.int32) * spec.nbytes,
            message=f"a block in {source} does not hold one {spec.image_dtype} {spec.image_shape} image per label")
        with tf.control_dependencies([fits]):  # check first: a wrong spec must not reach the reshape
            images = tf.reshape(tf.io.decode_raw(features["images"], dtype), (-1, *spec.image_shape))
        return images, labels

    return parse


def _mix(images, labels, seed):
    order = tf.random.shuffle(tf.range(tf.shape(labels)[0]), seed=seed)
    return tf.gather(images, order), tf.gather(labels, order)


def read_blocks(directory: str | Path, split: str, batch_size: int = 256, *, shuffle: bool = False,
                mix_blocks: int = 8, shuffle_blocks: int = 64, parallel_reads: int = 4,
                seed: int | None = None) -> tf.data.Dataset:
    """`(images, labels)` batches of `batch_size` from block records, the last one smaller.

    Unshuffled, images come in the order they were written. With `shuffle=True`, each epoch
    shuffles the file list, reads `parallel_reads` files at once taking whichever block is
    ready first, shuffles blocks in a buffer of `shuffle_blocks`, and then, `mix_blocks` blocks
    at a time, shuffles images across those blocks with one gather, so a batch draws from
    `mix_blocks` blocks, not one. Every step works on whole blocks or batches, never on one image.
    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
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
    return ds.apply(tf.data.experimental.assert_cardinality(-(-split_info.total_records // batch_size)))
