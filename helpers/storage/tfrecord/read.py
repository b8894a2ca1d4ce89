"""Reading a split back as a `tf.data` pipeline, with the manifest's files, counts and decoding."""
from __future__ import annotations

import warnings
from pathlib import Path

import tensorflow as tf

from helpers.storage.files import is_regular_file
from helpers.storage.tfrecord.check import TF_READ_ERRORS, short_tf_error, verify_shards
from helpers.storage.tfrecord.format import ShardError, parse_batch_fn, parse_example_fn, png_header
from helpers.storage.tfrecord.manifest import SplitManifest, manifest_path, read_manifest


class DamagedShardsWarning(UserWarning):
    """`read_split(..., skip_damaged=True)` left out unreadable records; the message counts them."""


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
    """Before reading: every shard exists with the size the manifest gives, and the first record
    matches the feature spec. Each failure is a `ShardError` naming the file and what to do.

    Cheap (a `stat` per file and one record), so `read_split` always runs it: damage that
    would otherwise show up mid-epoch as a TensorFlow error without a file name is caught here.
    """
    directory = Path(directory)
    for info in manifest.shards:
        path = directory / info.file
        if not is_regular_file(path):
            raise ShardError(f"{path} is missing (the manifest lists it with {info.records:,} records). Copy it again, "
                             f"or run the same write_shards() call to re-create it.")
        size = path.stat().st_size
        if size != info.bytes:
            raise ShardError(
                f"{path} is {size:,} bytes but {manifest_path(directory).name} says {info.bytes:,}: the file was cut "
                f"short or replaced. verify_shards() shows which records are readable; the same write_shards() call "
                f"re-creates it, or read_split(..., skip_damaged=True) reads what is left."
            )
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
    """`ds` with its length `n` known to tf.data and Keras, as `assert_cardinality(n)` gives, but ending.

    `assert_cardinality` raises again on every call once its input ends early, so a learner's
    `.ignore_errors()` after it (TensorFlow's documented way to skip bad records) would never end.
    Here each element is paired with a counter that stops at `n`; should `ds` end early, what follows
    it are errors that say so, one per missing element, so a plain loop gets a clear error and an
    `.ignore_errors()` loop ends after `n` tries with the elements that could be read.

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


def _readable_records(directory: Path, split: str, manifest: SplitManifest) -> tuple[list[str], list[int]]:
    """Files and how many records of each can be read, after a full check; warns about what is lost."""
    reports = verify_shards(directory, split)
    damaged = [r for r in reports if not r.ok]
    if damaged:
        lost = sum(r.lost for r in damaged)
        names = "; ".join(f"{Path(r.file).name}: {r.lost:,} lost ({r.problem})" for r in damaged)
        warnings.warn(
            f"read_split(skip_damaged=True): {lost:,} of {manifest.total_records:,} records of split {split!r} are "
            f"unreadable and left out. {names}. Re-create the damaged shards with the same write_shards() call.",
            DamagedShardsWarning, stacklevel=3,
        )
    return [r.file for r in reports], [min(r.records, r.expected_records or 0) for r in reports]


def read_split(
    directory: str | Path,
    split: str,
    batch_size: int | None = 128,
    *,
    vectorized: bool = True,
    parallel_reads: int | None = None,
    skip_damaged: bool = False,
    shuffle_buffer: int = 0,
    seed: int | None = None,
    verify: bool = False,
) -> tf.data.Dataset:
    """A dataset of `(image, label)` batches (or single records with `batch_size=None`), in file order.

    The manifest supplies the files, the compression, the decoding and the exact cardinality
    (so Keras knows how many steps an epoch has). Before anything is read, every shard is
    checked to exist with the size the manifest gives, and the first record to fit the spec:
    a missing, truncated or mis-described shard is a `ShardError` naming the file.
    `parallel_reads` reads several shards at once (records then interleave across shards).

    With `shuffle_buffer > 0` the order changes every epoch, in the three steps notebook 04 builds
    by hand: the list of shards is shuffled, `parallel_reads` shards are read at once taking
    whichever record is ready first (`deterministic=False`), and a buffer of `shuffle_buffer`
    records mixes them further. (Without it, records come in file order.)

    Damage that keeps a file's size (a flipped byte) shows up while reading, as TensorFlow's
    `DataLossError`, unless `verify=True`, which reads every shard once first (`verify_shards`:
    framing and CRCs, the record count against the manifest, the SHA-256 against the manifest)
    and names each bad file before training starts. What `verify` does not cover: it checks once,
    when the dataset is made; a file replaced afterwards (between epochs, say) is read as it then
    is, and only damage inside a record is still caught, by its CRC, as `DataLossError`.
    With `skip_damaged=True` every shard is read once first (`verify_shards`);
    the pipeline then reads only the records before each file's first damaged one, ends
    normally, and a `DamagedShardsWarning` says how many records were lost and where. TensorFlow's
    own `.ignore_errors()` also ends, with the records it could read, but says nothing of what it
    dropped: prefer `skip_damaged=True`.
    """
    directory = Path(directory)
    manifest = read_manifest(directory, split)
    compression = manifest.compression or ""
    source = f"split {split!r} of {directory}"
    if skip_damaged:
        files, counts = _readable_records(directory, split, manifest)
    else:
        check_shard_files(directory, manifest)
        if verify:
            bad = [report for report in verify_shards(directory, split) if not report.ok]
            if bad:
                raise ShardError("; ".join(f"{report.file}: {report.problem}" for report in bad)
                                 + ". Re-create the damaged shards with the same write_shards() call.")
        files, counts = manifest.files(directory), [s.records for s in manifest.shards]
    shuffle = shuffle_buffer > 0
    pairs = tf.data.Dataset.from_tensor_slices((files, tf.constant(counts, tf.int64)))
    if shuffle:
        pairs = pairs.shuffle(len(files), seed=seed, reshuffle_each_iteration=True)
    ds = pairs.interleave(lambda f, n: tf.data.TFRecordDataset(f, compression_type=compression).take(n),
                          cycle_length=parallel_reads or 1, num_parallel_calls=parallel_reads,
                          deterministic=None if parallel_reads is None else not shuffle)
    if shuffle:
        ds = ds.shuffle(shuffle_buffer, seed=seed, reshuffle_each_iteration=True)
    total = sum(counts)
    if batch_size is None:
        ds = ds.map(parse_example_fn(manifest.encoding, manifest.spec, source), num_parallel_calls=tf.data.AUTOTUNE)
        return exact_length(ds, total, source)
    if vectorized:
        ds = ds.batch(batch_size).map(parse_batch_fn(manifest.encoding, manifest.spec, source),
                                      num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = ds.map(parse_example_fn(manifest.encoding, manifest.spec, source),
                    num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)
    return exact_length(ds, -(-total // batch_size), source)   # the length is counted in batches
