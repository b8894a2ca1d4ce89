"""Sharded TFRecord files of (image, label) records, with a manifest, atomic writes and resume.

Write:  `write_shards(zip(images, labels), "data/mnist-tfrecord", "train", num_shards=4, total=len(images))`
Read:   `read_split("data/mnist-tfrecord", "train", batch_size=128)`
Check:  `verify_shards("data/mnist-tfrecord")`

Files are named `{split}-{index:05d}-of-{N:05d}.tfrecord`; `manifest.json` beside them records,
per split, the record count of every shard and in total, the feature spec, the encoding, the
compression and a SHA-256 per shard, so a reader never hard-codes how many records there are.

Introduced in notebooks/02_tfrecord_conversion.ipynb.
"""
from __future__ import annotations

import itertools
import json
import math
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Callable, Iterable

import numpy as np
import tensorflow as tf
from tqdm.auto import tqdm

from helpers.files import atomic_write_text, fingerprint_arrays, partial_path, sha256_of

MANIFEST = "manifest.json"
ENCODINGS = ("raw", "float_list", "tensor", "png")
COMPRESSIONS = (None, "GZIP")
# float32 holds every value of these types exactly, so float_list round-trips them bit for bit.
FLOAT_LIST_DTYPES = ("uint8", "int8", "uint16", "int16", "float16", "float32")


class ShardError(ValueError):
    """A shard, the manifest or a record does not match what was expected. Names the file."""


# ---------------------------------------------------------------- the feature spec


@dataclass(frozen=True)
class FeatureSpec:
    """What each record holds: an image of fixed shape and dtype, and an int64 label."""

    image_shape: tuple[int, ...]
    image_dtype: str

    @classmethod
    def of(cls, image: np.ndarray) -> "FeatureSpec":
        image = np.asarray(image)
        return cls(tuple(int(d) for d in image.shape), image.dtype.name)

    @property
    def size(self) -> int:
        return math.prod(self.image_shape)

    def to_json(self) -> dict:
        return {"image": {"shape": list(self.image_shape), "dtype": self.image_dtype}, "label": {"dtype": "int64"}}

    @classmethod
    def from_json(cls, spec: dict) -> "FeatureSpec":
        return cls(tuple(spec["image"]["shape"]), spec["image"]["dtype"])


# ---------------------------------------------------------------- encoders: (image, label) -> bytes


def _bytes_feature(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _int64_feature(value: int) -> tf.train.Feature:
    return tf.train.Feature(int64_list=tf.train.Int64List(value=[value]))


def example_from_raw(image: np.ndarray, label: int) -> bytes:
    """One record as a serialized `tf.train.Example`: pixels as raw bytes, label as int64.

    >>> record = example_from_raw(np.zeros((28, 28), np.uint8), 7)
    """
    return tf.train.Example(
        features=tf.train.Features(
            feature={"image": _bytes_feature(np.ascontiguousarray(image).tobytes()), "label": _int64_feature(int(label))}
        )
    ).SerializeToString(deterministic=True)


class RawExampleEncoder:
    """`example_from_raw`, faster: one Example message is filled in and serialized per record.

    Building three nested protobuf messages for every record costs more than the
    serialization itself; reusing one gives the same bytes (a test checks) about 40% sooner.
    Serialization is deterministic (map keys sorted), so the same records always make the
    same file and the same checksum, in any process.
    """

    def __init__(self) -> None:
        self._example = tf.train.Example()
        self._image = self._example.features.feature["image"].bytes_list.value
        self._image.append(b"")
        self._label = self._example.features.feature["label"].int64_list.value
        self._label.append(0)

    def __call__(self, image: np.ndarray, label: int) -> bytes:
        self._image[0] = np.ascontiguousarray(image).tobytes()
        self._label[0] = int(label)
        return self._example.SerializeToString(deterministic=True)


def example_from_float_list(image: np.ndarray, label: int) -> bytes:
    """The older article's encoding: one float per pixel in a `float_list` (about 4x the bytes)."""
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "image": tf.train.Feature(float_list=tf.train.FloatList(value=np.asarray(image, np.float32).ravel())),
                "label": _int64_feature(int(label)),
            }
        )
    ).SerializeToString(deterministic=True)


def example_from_tensor(image: np.ndarray, label: int) -> bytes:
    """The image as a serialized `TensorProto` (`tf.io.serialize_tensor`): carries its own dtype and shape."""
    return tf.train.Example(
        features=tf.train.Features(
            feature={
                "image": _bytes_feature(tf.io.serialize_tensor(image).numpy()),
                "label": _int64_feature(int(label)),
            }
        )
    ).SerializeToString(deterministic=True)


def example_from_png(png_bytes: bytes, label: int) -> bytes:
    """A PNG file's bytes stored as they are; they are decoded at read time with `tf.io.decode_png`."""
    return tf.train.Example(
        features=tf.train.Features(feature={"image": _bytes_feature(bytes(png_bytes)), "label": _int64_feature(int(label))})
    ).SerializeToString(deterministic=True)


def make_encoder(encoding: str) -> Callable[[np.ndarray, int], bytes]:
    """The encoder function for an encoding name in ENCODINGS."""
    if encoding == "raw":
        return RawExampleEncoder()
    if encoding == "float_list":
        return example_from_float_list
    if encoding == "tensor":
        return example_from_tensor
    if encoding == "png":
        return example_from_png
    raise ValueError(f"unknown encoding {encoding!r}; choose one of {ENCODINGS}")


# ---------------------------------------------------------------- the manifest


@dataclass
class ShardInfo:
    file: str
    records: int
    bytes: int
    sha256: str


@dataclass
class SplitManifest:
    """Everything a reader needs to know about one split's shards."""

    split: str
    encoding: str
    compression: str | None
    feature_spec: dict
    num_shards: int
    total_records: int
    fingerprint: str | None = None
    shards: list[ShardInfo] = field(default_factory=list)
    complete: bool = False

    @property
    def spec(self) -> FeatureSpec:
        return FeatureSpec.from_json(self.feature_spec)

    def files(self, directory: Path) -> list[str]:
        return [str(Path(directory) / s.file) for s in self.shards]

    def settings(self) -> tuple:
        return (self.encoding, self.compression, self.feature_spec, self.num_shards, self.total_records, self.fingerprint)



def shard_name(split: str, index: int, num_shards: int) -> str:
    return f"{split}-{index:05d}-of-{num_shards:05d}.tfrecord"


def _manifest_path(directory: Path) -> Path:
    return Path(directory) / MANIFEST


def load_manifest(directory: Path) -> dict[str, SplitManifest]:
    """All splits described by `directory/manifest.json` (empty if there is none yet)."""
    path = _manifest_path(directory)
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        splits = {}
        for name, entry in raw["splits"].items():
            shards = [ShardInfo(**s) for s in entry.pop("shards")]
            splits[name] = SplitManifest(**entry, shards=shards)
        return splits
    except (json.JSONDecodeError, KeyError, TypeError) as e:
        raise ShardError(f"{path} is not a valid shard manifest ({type(e).__name__}: {e}).") from None


def read_manifest(directory: Path, split: str) -> SplitManifest:
    """One split's manifest; a clear error if it is missing or the split was never finished."""
    splits = load_manifest(directory)
    if split not in splits:
        where = _manifest_path(directory)
        known = ", ".join(splits) or "none"
        raise ShardError(f"{where} has no split {split!r} (splits there: {known}). Write it with write_shards().")
    manifest = splits[split]
    if not manifest.complete:
        raise ShardError(
            f"split {split!r} in {directory} is incomplete ({len(manifest.shards)} of {manifest.num_shards} "
            f"shards written): run the same write_shards() call again to resume it."
        )
    return manifest



def _save_split(directory: Path, manifest: SplitManifest) -> None:
    splits = load_manifest(directory)
    splits[manifest.split] = manifest
    doc = {"format": "bigger-than-memory tfrecord shards", "version": 1, "splits": {k: asdict(v) for k, v in splits.items()}}
    atomic_write_text(_manifest_path(directory), json.dumps(doc, indent=1))



def _tf_options(compression: str | None) -> tf.io.TFRecordOptions | None:
    if compression not in COMPRESSIONS:
        raise ValueError(f"compression must be one of {COMPRESSIONS}, not {compression!r}")
    return tf.io.TFRecordOptions(compression_type=compression) if compression else None


# ---------------------------------------------------------------- writing


def shard_sizes(total: int, num_shards: int) -> list[int]:
    """How many records each shard gets: as equal as possible, the first ones one larger."""
    return [total // num_shards + (i < total % num_shards) for i in range(num_shards)]


def _check_record(index: int, image, spec: FeatureSpec, encoding: str) -> None:
    if encoding == "png":
        if not isinstance(image, (bytes, bytearray)) or not bytes(image[:8]) == b"\x89PNG\r\n\x1a\n":
            raise ShardError(f"record {index}: the png encoding takes the bytes of a PNG file, got {type(image).__name__}.")
        return
    if image.shape != spec.image_shape or image.dtype.name != spec.image_dtype:
        raise ShardError(
            f"record {index}: image is {image.dtype.name} {tuple(image.shape)}, but the feature spec says "
            f"{spec.image_dtype} {spec.image_shape}. Every record in a split must have the same shape and dtype."
        )


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
    `total // num_shards` records, and so on. Each shard is written as `NAME.partial` and renamed
    when complete, and the manifest is updated after every shard, so an interrupted run leaves
    only complete files under final names. Running the same call again skips the shards the
    manifest lists whose checksums still match, and writes the rest.

    `total` is needed when `records` has no `len()`. `spec` is taken from the first record
    unless given (for `encoding="png"` it must be given: the decoded image's shape and dtype).
    `fingerprint` is any string that identifies the input (`fingerprint_arrays` makes one):
    shards written from other data are then never mistaken for complete. A re-run with other
    settings or another fingerprint is refused, unless `overwrite=True` starts the split afresh.

    >>> manifest = write_shards(zip(x_train, y_train), "data/mnist", "train", num_shards=4, total=len(x_train))
    >>> manifest.total_records
    60000
    """
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    if encoding not in ENCODINGS:
        raise ValueError(f"unknown encoding {encoding!r}; choose one of {ENCODINGS}")
    _tf_options(compression)
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
            raise ValueError("encoding='png' needs spec=FeatureSpec(image_shape, 'uint8') of the decoded images")
        spec = FeatureSpec.of(first[0]) if first is not None else FeatureSpec((0,), "uint8")
    if encoding == "float_list" and spec.image_dtype not in FLOAT_LIST_DTYPES:
        raise ShardError(
            f"float_list stores float32, which cannot hold every {spec.image_dtype} value exactly; "
            f"use encoding='raw' (or one of {FLOAT_LIST_DTYPES})."
        )

    manifest = SplitManifest(split, encoding, compression, spec.to_json(), num_shards, total, fingerprint)
    previous = load_manifest(directory).get(split)
    done: dict[str, ShardInfo] = {}
    if previous is not None and previous.settings() != manifest.settings():
        if not overwrite:
            raise ShardError(
                f"{_manifest_path(directory)} already describes split {split!r} written with other settings or data "
                f"(encoding, compression, spec, num_shards, total, fingerprint = {previous.settings()}). Write to "
                f"another directory, or pass overwrite=True to replace that split."
            )
        for info in previous.shards:
            (directory / info.file).unlink(missing_ok=True)
        previous = None
    if previous is not None:
        for info in previous.shards:
            path = directory / info.file
            if path.exists() and path.stat().st_size == info.bytes and sha256_of(path) == info.sha256:
                done[info.file] = info
    for stale in directory.glob(f"{split}-*.tfrecord.partial"):
        stale.unlink()  # left by a run that was killed mid-shard

    encode = make_encoder(encoding)
    options = _tf_options(compression)
    bar = tqdm(total=total, unit="rec", unit_scale=True, desc=f"{split} → {directory.name}", disable=not progress)
    index = 0
    try:
        for shard_index, size in enumerate(shard_sizes(total, num_shards)):
            name = shard_name(split, shard_index, num_shards)
            if name in done:
                skipped = sum(1 for _ in itertools.islice(iterator, size))
                index += skipped
                bar.update(skipped)
                manifest.shards.append(done[name])
                continue
            final = directory / name
            partial = partial_path(final)
            try:
                with tf.io.TFRecordWriter(str(partial), options) as writer:
                    written = 0
                    for image, label in itertools.islice(iterator, size):
                        if encoding != "png":
                            image = np.asarray(image)
                        _check_record(index, image, spec, encoding)
                        writer.write(encode(image, label))
                        written += 1
                        index += 1
                        if written % 1024 == 0:
                            bar.update(1024)
                    bar.update(written % 1024)
                if written < size:
                    raise ShardError(f"the records ended after {index}, but total={total} were promised for split {split!r}.")
            except BaseException:
                partial.unlink(missing_ok=True)
                raise
            os.replace(partial, final)
            manifest.shards.append(ShardInfo(name, written, final.stat().st_size, sha256_of(final)))
            _save_split(directory, manifest)
        if next(iterator, None) is not None:
            raise ShardError(f"there are more records than total={total} for split {split!r}; pass the right total.")
    finally:
        bar.close()
    manifest.complete = True
    _save_split(directory, manifest)
    return manifest


# ---------------------------------------------------------------- reading


def _feature_description(manifest: SplitManifest) -> dict:
    image = (
        tf.io.FixedLenFeature([manifest.spec.size], tf.float32)
        if manifest.encoding == "float_list"
        else tf.io.FixedLenFeature([], tf.string)
    )
    return {"image": image, "label": tf.io.FixedLenFeature([], tf.int64)}


def _decode_one(image, manifest: SplitManifest):
    spec, dtype = manifest.spec, tf.as_dtype(manifest.spec.image_dtype)
    if manifest.encoding == "raw":
        image = tf.reshape(tf.io.decode_raw(image, dtype), spec.image_shape)
    elif manifest.encoding == "float_list":
        image = tf.reshape(tf.cast(image, dtype), spec.image_shape)
    elif manifest.encoding == "tensor":
        image = tf.ensure_shape(tf.io.parse_tensor(image, dtype), spec.image_shape)
    else:
        channels = spec.image_shape[-1] if len(spec.image_shape) == 3 else 0
        image = tf.ensure_shape(tf.io.decode_png(image, channels=channels, dtype=dtype), spec.image_shape)
    return image


def parse_example_fn(manifest: SplitManifest):
    """A function for `dataset.map`: one serialized record -> `(image, label)` in the original dtype and shape."""
    description = _feature_description(manifest)

    def parse(serialized):
        features = tf.io.parse_single_example(serialized, description)
        return _decode_one(features["image"], manifest), features["label"]

    return parse


def parse_batch_fn(manifest: SplitManifest):
    """A function for `dataset.batch(n).map(...)`: a vector of records -> `(images, labels)` in one call.

    Parsing a batch at once runs one op per batch instead of one per record, which is what
    makes the vectorised reader faster. Raw bytes decode as a batch too; tensors and PNGs are
    decoded per image inside the graph.
    """
    description = _feature_description(manifest)
    spec, dtype = manifest.spec, tf.as_dtype(manifest.spec.image_dtype)

    def parse(serialized):
        features = tf.io.parse_example(serialized, description)
        if manifest.encoding == "raw":
            images = tf.reshape(tf.io.decode_raw(features["image"], dtype), (-1, *spec.image_shape))
        elif manifest.encoding == "float_list":
            images = tf.reshape(tf.cast(features["image"], dtype), (-1, *spec.image_shape))
        else:
            images = tf.map_fn(
                lambda one: _decode_one(one, manifest),
                features["image"],
                fn_output_signature=tf.TensorSpec(spec.image_shape, dtype),
            )
        return images, features["label"]

    return parse


def read_split(
    directory: str | Path,
    split: str,
    batch_size: int | None = 128,
    *,
    vectorized: bool = True,
    parallel_reads: int | None = None,
) -> tf.data.Dataset:
    """A dataset of `(image, label)` batches (or single records with `batch_size=None`), in file order.

    The manifest supplies the files, the compression, the decoding and the exact cardinality.
    `parallel_reads` reads several shards at once (records then interleave across shards).

    >>> for images, labels in read_split("data/mnist", "test", batch_size=256).take(1): ...
    """
    manifest = read_manifest(Path(directory), split)
    files = manifest.files(Path(directory))
    ds = tf.data.TFRecordDataset(files, compression_type=manifest.compression or "", num_parallel_reads=parallel_reads)
    ds = ds.apply(tf.data.experimental.assert_cardinality(manifest.total_records))
    if batch_size is None:
        return ds.map(parse_example_fn(manifest), num_parallel_calls=tf.data.AUTOTUNE)
    if vectorized:
        return ds.batch(batch_size).map(parse_batch_fn(manifest), num_parallel_calls=tf.data.AUTOTUNE)
    return ds.map(parse_example_fn(manifest), num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)


# ---------------------------------------------------------------- checking


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

    def __str__(self) -> str:
        status = "ok" if self.ok else f"PROBLEM: {self.problem}"
        return f"{Path(self.file).name}: {self.records:,} records, {status}"


def _short_tf_error(error: Exception) -> str:
    """TensorFlow's error text without the graph-node prefix, in words a learner can act on."""
    message = getattr(error, "message", None) or str(error)
    message = re.sub(r"\{\{function_node [^}]*\}\}\s*", "", message.strip().splitlines()[0]).split(" [Op:")[0]
    if match := re.search(r"truncated record at (\d+)", message):
        return f"the file ends in the middle of a record at byte {match[1]}: a truncated copy or an interrupted write"
    if match := re.search(r"corrupted record at (\d+)", message):
        return f"checksum (CRC) mismatch in the record at byte {match[1]}: the bytes were changed or damaged"
    return message


def _scan(path: str, compression: str | None) -> tuple[int, str | None]:
    """Count the records in one file; on corruption, the index of the first bad record and why."""
    ds = tf.data.TFRecordDataset(path, compression_type=compression or "")
    count = 0
    try:
        for batch in ds.batch(4096):  # batches keep the Python loop short
            count += int(batch.shape[0])
        return count, None
    except (tf.errors.DataLossError, tf.errors.OutOfRangeError, tf.errors.InvalidArgumentError):
        pass
    count_before = count  # all batches before the failing one were good; find the exact record
    try:
        for _ in ds.skip(count_before):
            count += 1
    except (tf.errors.DataLossError, tf.errors.OutOfRangeError, tf.errors.InvalidArgumentError) as e:
        return count, f"record {count} is unreadable after {count:,} good records: {_short_tf_error(e)}"
    return count, None


def count_records(files: Iterable[str | Path], compression: str | None = None) -> dict[str, int]:
    """Records per file, read to the end. A corrupt file raises `ShardError` naming it and the bad record."""
    counts = {}
    for path in files:
        count, problem = _scan(str(path), compression)
        if problem:
            raise ShardError(f"{path}: {problem}")
        counts[str(path)] = count
    return counts


def verify_shards(directory: str | Path, split: str | None = None) -> list[ShardReport]:
    """Read every shard of `split` (default: every split in the manifest) and report on each.

    Checks that each file exists, reads to the end without a framing or CRC error, holds the
    number of records the manifest says and matches its checksum. Returns one report per shard;
    nothing raises for a bad shard, so a caller can list every problem at once.

    >>> for report in verify_shards("data/mnist"): print(report)
    """
    directory = Path(directory)
    splits = load_manifest(directory)
    if not splits:
        raise ShardError(f"{_manifest_path(directory)} is missing: there are no shards to verify.")
    if split is not None and split not in splits:
        read_manifest(directory, split)  # raises, naming the splits that do exist
    reports = []
    for name in [split] if split else list(splits):
        manifest = splits[name]
        for info in manifest.shards:
            path = directory / info.file
            if not path.exists():
                reports.append(ShardReport(str(path), 0, info.records, "the file is missing"))
                continue
            count, problem = _scan(str(path), manifest.compression)
            if problem is None and count != info.records:
                problem = f"holds {count:,} records but the manifest says {info.records:,}"
            if problem is None and sha256_of(path) != info.sha256:
                problem = "checksum differs from the manifest: the file changed after it was written"
            reports.append(ShardReport(str(path), count, info.records, problem))
        if not manifest.complete:
            missing = manifest.num_shards - len(manifest.shards)
            reports.append(ShardReport(str(directory / f"{name}-*"), 0, None, f"{missing} shard(s) never written: resume the write"))
    return reports
