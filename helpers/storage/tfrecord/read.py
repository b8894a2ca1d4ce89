"""Reading a split with its checks: the manifest's files and counts, checked before anything is read
(`readable_shards`), a length that is exact and ends (`exact_length`), and `read_split`, the one call later
notebooks, tests and benchmarks read shards with: these checks around notebook 04's pipeline (`make_train_ds`,
`helpers.lessons.tfdata_mnist`, which takes plain file lists; tests/test_mnist_training.py holds the two to the
same records)."""
from __future__ import annotations

import warnings
from dataclasses import dataclass
from pathlib import Path

import tensorflow as tf

from helpers.storage.files import file_problem
from helpers.storage.tfrecord.check import TF_READ_ERRORS, short_tf_error, verify_shards
from helpers.storage.tfrecord.format import ShardError, parse_batch_fn, parse_example_fn, png_header
from helpers.storage.tfrecord.manifest import SplitManifest, manifest_path, read_manifest


class DamagedShardsWarning(UserWarning):
    """`readable_shards(..., skip_damaged=True)` (or `read_split`'s) left out unreadable records; the message
    counts them."""


def _image_fits_spec(example: tf.train.Example, manifest: SplitManifest) -> bool:
    feature, spec = example.features.feature["image"], manifest.spec
    if manifest.encoding == "float_list":
        return len(feature.float_list.value) == spec.size
    if len(feature.bytes_list.value) != 1:
        return False
    data = feature.bytes_list.value[0]
    if manifest.encoding == "raw":
        return len(data) == spec.nbytes
    if manifest.encoding == "tensor":
        return tf.io.parse_tensor(data, spec.image_dtype).shape == spec.image_shape
    height, width, _ = png_header(data)
    return (height, width) == spec.image_shape[:2]


def check_shard_files(directory: str | Path, manifest: SplitManifest) -> None:
    """Before reading, cheaply (a `stat` per file and one record): every shard exists with the size the manifest
    gives, and the first record matches the feature spec. Each failure is a `ShardError` naming the file."""
    directory = Path(directory)
    for info in manifest.shards:
        path = directory / info.file
        if (problem := file_problem(path)) is not None:
            raise ShardError(f"{path} is {problem} (the manifest lists it with {info.records:,} records). Copy it "
                             f"again, or run the same write_shards() call to re-create it.")
        if (size := path.stat().st_size) != info.bytes:
            raise ShardError(
                f"{path} is {size:,} bytes but {manifest_path(directory).name} says {info.bytes:,}: the file was cut "
                f"short or replaced. verify_shards() shows which records are readable; the same write_shards() call "
                f"re-creates it, or readable_shards(..., skip_damaged=True) reads what is left.")
    first = next((directory / s.file for s in manifest.shards if s.records), None)
    if first is None:
        return
    try:
        record = next(iter(tf.data.TFRecordDataset(str(first), compression_type=manifest.compression or "")))
        example = tf.train.Example.FromString(record.numpy())
        fits = {"image", "label"} <= set(example.features.feature) and _image_fits_spec(example, manifest)
    except TF_READ_ERRORS as e:
        raise ShardError(f"{first}: the first record is unreadable ({short_tf_error(e)}).") from None
    except Exception:  # not an Example, or image bytes of another kind: the spec does not describe it
        fits = False
    if not fits:
        raise ShardError(
            f"{first}: the first record does not hold a {manifest.spec.image_dtype} {manifest.spec.image_shape} image "
            f"encoded as {manifest.encoding!r}, as {manifest_path(directory)} says. The manifest does not describe "
            f"these files: write the split again with write_shards()."
        )


def exact_length(ds: tf.data.Dataset, n: int, source: str) -> tf.data.Dataset:
    """`ds` with its length `n` known to tf.data and Keras, as `assert_cardinality(n)` gives, but ending: should
    `ds` end early, each missing element is an error saying so, and an `.ignore_errors()` loop still ends after
    `n` tries (after `assert_cardinality` it would never end).

    >>> len(exact_length(tf.data.Dataset.range(3), 3, "three numbers"))
    3
    """
    message = (f"{source} ended before the {n:,} elements its manifest or index promises: a file holds fewer "
               f"records than it says, or a damaged record was skipped. verify_shards() names the file; "
               f"read_split(..., skip_damaged=True) reads what is readable and counts what was lost.")

    def placeholder(spec):
        return tf.zeros([0 if d is None else d for d in spec.shape.as_list()], spec.dtype)

    def too_few(_):
        with tf.control_dependencies([tf.debugging.Assert(False, [message])]):
            return tf.nest.map_structure(lambda spec: tf.identity(placeholder(spec)), ds.element_spec)

    errors = tf.data.Dataset.from_tensors(0).repeat().map(too_few)
    return tf.data.Dataset.zip((tf.data.Dataset.range(n), ds.concatenate(errors))).map(lambda _, element: element)


@dataclass(frozen=True)
class ReadableShards:
    """A split's shard files, checked, with how many records to read from each: what a pipeline reads."""

    manifest: SplitManifest
    files: list[str]
    counts: list[int]     # records to take from each file (fewer than the manifest's after `skip_damaged`)
    source: str           # "split 'train' of data/mnist", for error messages

    @property
    def compression(self) -> str:
        return self.manifest.compression or ""

    @property
    def total(self) -> int:
        return sum(self.counts)


def readable_shards(directory: str | Path, split: str, *, skip_damaged: bool = False,
                    verify: bool = False) -> ReadableShards:
    """The files of a split and their record counts, from its manifest, checked before anything is read: a
    missing, truncated or mis-described shard is a `ShardError` naming the file (`check_shard_files`).

    - `verify=True`: read every shard once first (`verify_shards`: framing, CRCs, counts, SHA-256) and name each
      bad file. Otherwise damage that keeps a file's size shows up mid-read as TensorFlow's `DataLossError`, as
      it does for a file replaced after the dataset was made.
    - `skip_damaged=True`: read every shard once first, then count only the records before each file's first
      damaged one; a `DamagedShardsWarning` counts what was lost and where (`.ignore_errors()` would say nothing).

    A pipeline over these files (notebook 04's `read_split` and `make_train_ds`) takes `counts[i]` records from
    `files[i]` and makes its length exact with `exact_length`.
    """
    directory = Path(directory)
    manifest = read_manifest(directory, split)
    source = f"split {split!r} of {directory}"
    if skip_damaged or verify:
        reports = verify_shards(directory, split)
        damaged = [r for r in reports if not r.ok]
    if skip_damaged:
        if damaged:
            names = "; ".join(f"{Path(r.file).name}: {r.lost:,} lost ({r.problem})" for r in damaged)
            warnings.warn(f"readable_shards(skip_damaged=True): {sum(r.lost for r in damaged):,} of "
                          f"{manifest.total_records:,} records of split {split!r} are unreadable and left out. {names}. "
                          f"Re-create the damaged shards with the same write_shards() call.",
                          DamagedShardsWarning, stacklevel=3)
        return ReadableShards(manifest, [r.file for r in reports],
                              [min(r.records, r.expected_records or 0) for r in reports], source)
    check_shard_files(directory, manifest)
    if verify and damaged:
        raise ShardError("; ".join(f"{report.file}: {report.problem}" for report in damaged)
                         + ". Re-create the damaged shards with the same write_shards() call.")
    return ReadableShards(manifest, manifest.files(directory), [s.records for s in manifest.shards], source)


def read_split(directory: str | Path, split: str, batch_size: int | None = 128, *, vectorized: bool = True,
               parallel_reads: int | None = None, shuffle_buffer: int = 0, seed: int | None = None,
               skip_damaged: bool = False, verify: bool = False) -> tf.data.Dataset:
    """A dataset of `(image, label)` batches of a split (single records with `batch_size=None`), with the
    manifest's files, compression, decoding and exact length. Before anything is read, `readable_shards` names a
    missing, truncated or mis-described shard (`ShardError`); `verify=True` reads every shard once first and
    names each damaged one; `skip_damaged=True` reads only the records before each file's first damaged one and
    warns (`DamagedShardsWarning`) how many were lost.

    - `shuffle_buffer > 0`: notebook 04's `make_train_ds` (a new file order every epoch, `parallel_reads` files
      at once, first record ready first, a shuffle buffer, then whole batches parsed), without its `prefetch`.
    - otherwise file order; `parallel_reads` files read at once interleave their records, in a fixed order.
    - `vectorized=False`: parse record by record, then batch (notebook 02 measures what that costs).

    Introduced in notebooks/04_tfdata_mnist.ipynb.

    >>> ds = read_split("data/mnist-tfrecord", "train", 256, parallel_reads=4, shuffle_buffer=10_000)  # doctest: +SKIP
    """
    shards = readable_shards(directory, split, skip_damaged=skip_damaged, verify=verify)
    spec, encoding, source = shards.manifest.spec, shards.manifest.encoding, shards.source
    shuffled = shuffle_buffer > 0
    if shuffled and (batch_size is None or not vectorized):
        raise ValueError("a shuffled read parses whole batches: give a batch_size and keep vectorized=True")
    files = tf.data.Dataset.from_tensor_slices(
        (tf.constant(shards.files, tf.string), tf.constant(shards.counts, tf.int64)))
    if shuffled:
        files = files.shuffle(len(shards.files), seed=seed)
    records = files.interleave(
        lambda file, n: tf.data.TFRecordDataset(file, shards.compression).take(n),
        cycle_length=parallel_reads or 1,
        num_parallel_calls=(parallel_reads or 1) if shuffled else parallel_reads,
        deterministic=False if shuffled else None if parallel_reads is None else True)
    if shuffled:
        records = records.shuffle(shuffle_buffer, seed=seed)
    parse_one = parse_example_fn(encoding, spec, source)
    if batch_size is None:
        return exact_length(records.map(parse_one, num_parallel_calls=tf.data.AUTOTUNE), shards.total, source)
    if vectorized:
        ds = records.batch(batch_size).map(parse_batch_fn(encoding, spec, source),
                                           num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = records.map(parse_one, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)
    return exact_length(ds, -(-shards.total // batch_size), source)   # a length counted in batches
