"""What one record holds and how it becomes bytes and back: the feature spec, encoders, parsers."""
from __future__ import annotations

import math
import struct
from dataclasses import dataclass
from typing import Callable

import numpy as np
import tensorflow as tf

from helpers.storage.files import PNG_SIGNATURE

ENCODINGS = ("raw", "float_list", "tensor", "png")
# float32 holds every value of these types exactly, so float_list round-trips them bit for bit.
FLOAT_LIST_DTYPES = ("uint8", "int8", "uint16", "int16", "float16", "float32")
PNG_DTYPES = ("uint8", "uint16")


class ShardError(ValueError):
    """A shard, the manifest or a record does not match what was expected. Names the file."""


@dataclass(frozen=True)
class FeatureSpec:
    """What each record holds: an image of fixed shape and dtype, and an int64 label.

    >>> FeatureSpec.of(np.zeros((28, 28), np.uint8))
    FeatureSpec(image_shape=(28, 28), image_dtype='uint8')
    """

    image_shape: tuple[int, ...]
    image_dtype: str

    @classmethod
    def of(cls, image: np.ndarray) -> "FeatureSpec":
        image = np.asarray(image)
        return cls(tuple(int(d) for d in image.shape), image.dtype.name)

    @property
    def size(self) -> int:
        return math.prod(self.image_shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.image_dtype).itemsize

    def to_json(self) -> dict:
        return {"image": {"shape": list(self.image_shape), "dtype": self.image_dtype}, "label": {"dtype": "int64"}}

    @classmethod
    def from_json(cls, spec: dict) -> "FeatureSpec":
        shape, dtype = spec["image"]["shape"], spec["image"]["dtype"]
        if not all(isinstance(d, int) and d >= 0 for d in shape):
            raise ValueError(f"image shape {shape!r} is not a list of sizes")
        np.dtype(dtype)  # raises TypeError for a name numpy does not know
        return cls(tuple(shape), dtype)

    def check_encoding(self, encoding: str) -> None:
        """Raise `ShardError` if records of this spec cannot be stored with `encoding` and read back."""
        if encoding not in ENCODINGS:
            raise ValueError(f"unknown encoding {encoding!r}; choose one of {ENCODINGS}")
        if encoding == "float_list" and self.image_dtype not in FLOAT_LIST_DTYPES:
            raise ShardError(f"float_list stores float32, which cannot hold every {self.image_dtype} value exactly; "
                             f"use encoding='raw' (or one of {FLOAT_LIST_DTYPES}).")
        if encoding == "png" and (len(self.image_shape) != 3 or self.image_shape[-1] not in (1, 2, 3, 4)
                                  or self.image_dtype not in PNG_DTYPES):
            raise ShardError(f"encoding='png' decodes to (height, width, channels) with 1-4 channels of uint8 or "
                             f"uint16, but the spec says {self.image_dtype} {self.image_shape}: pass, for example, "
                             f"spec=FeatureSpec((28, 28, 1), 'uint8') for grey images.")


def _bytes_feature(value: bytes) -> tf.train.Feature:
    return tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))


def _example(image: tf.train.Feature, label: int) -> bytes:
    label = tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))
    return tf.train.Example(features=tf.train.Features(feature={"image": image, "label": label})).SerializeToString(
        deterministic=True)


def example_from_raw(image: np.ndarray, label: int) -> bytes:
    """One record as a serialized `tf.train.Example`: pixels as raw bytes, label as int64.

    >>> len(example_from_raw(np.zeros((28, 28), np.uint8), 7))  # 784 pixel bytes and 38 of framing
    822
    """
    return _example(_bytes_feature(np.ascontiguousarray(image).tobytes()), label)


class RawExampleEncoder:
    """`example_from_raw`, several times sooner (for MNIST-sized and photo-sized images alike), with the same
    (deterministic) bytes.

    An Example of one bytes feature and one label is, on the wire, a few bytes that depend only on the image's
    length and the label, then the pixels, then a few more: so each (length, label) pair's bytes around the
    pixels are found once, where two serializations (all pixels 0x00, all 0xff) differ, and checked against the
    real record's; every record after that is those bytes joined around its pixels (one copy, where serializing
    a message copied them several times). A pair that fails the check, an empty image, pixels NumPy cannot view
    as bytes, and pairs past the first MAX_PAIRS are serialized as a message, as before.

    >>> RawExampleEncoder()(np.zeros((28, 28), np.uint8), 7) == example_from_raw(np.zeros((28, 28), np.uint8), 7)
    True
    """

    MAX_PAIRS = 4096   # (length, label) pairs remembered: labels that are per-record ids must not grow memory

    def __init__(self) -> None:
        self._example = tf.train.Example()
        self._image = self._example.features.feature["image"].bytes_list.value
        self._image.append(b"")
        self._label = self._example.features.feature["label"].int64_list.value
        self._label.append(0)
        self._around: dict[tuple[int, int], tuple[bytes, bytes] | None] = {}   # (length, label) -> bytes

    def _serialized(self, pixels: bytes, label: int) -> bytes:
        self._image[0] = pixels
        self._label[0] = label
        return self._example.SerializeToString(deterministic=True)

    def _learn(self, pixels: np.ndarray, label: int) -> tuple[bytes, bytes] | None:
        """The bytes before and after `pixels` (uint8, at least one) for this length and label, or None if the
        record is not laid out as prefix + pixels + suffix."""
        n = len(pixels)
        low, high = self._serialized(bytes(n), label), self._serialized(b"\xff" * n, label)
        if len(low) != len(high):
            return None
        at = next(i for i, (a, b) in enumerate(zip(low, high)) if a != b)   # the first pixel
        prefix, suffix = low[:at], low[at + n:]
        real = self._serialized(pixels.tobytes(), label)
        return (prefix, suffix) if high[at + n:] == suffix and prefix + pixels.tobytes() + suffix == real else None

    def __call__(self, image, label: int) -> bytes:
        label = int(label)
        try:
            pixels = np.ascontiguousarray(image).reshape(-1).view(np.uint8)
        except (TypeError, ValueError):   # object arrays and the like: their bytes as NumPy gives them
            return self._serialized(np.ascontiguousarray(image).tobytes(), label)
        key = (len(pixels), label)
        around = self._around.get(key)
        if around is None and key not in self._around and len(self._around) < self.MAX_PAIRS:
            around = self._around[key] = self._learn(pixels, label) if len(pixels) else None
        if around is None:   # not learnt (or past MAX_PAIRS, where learning would cost more than it saves)
            return self._serialized(pixels.tobytes(), label)
        return b"".join((around[0], pixels, around[1]))


def example_from_float_list(image: np.ndarray, label: int) -> bytes:
    """The older article's encoding: one float per pixel in a `float_list` (about 4x the bytes)."""
    return _example(tf.train.Feature(float_list=tf.train.FloatList(value=np.asarray(image, np.float32).ravel())), label)


def example_from_tensor(image: np.ndarray, label: int) -> bytes:
    """The image as a serialized `TensorProto` (`tf.io.serialize_tensor`): carries its own dtype and shape."""
    return _example(_bytes_feature(tf.io.serialize_tensor(image).numpy()), label)


def example_from_png(png_bytes: bytes, label: int) -> bytes:
    """A PNG file's bytes stored as they are; they are decoded at read time with `tf.io.decode_png`."""
    return _example(_bytes_feature(bytes(png_bytes)), label)


def make_encoder(encoding: str) -> Callable[[np.ndarray, int], bytes]:
    """The encoder function for an encoding name in ENCODINGS."""
    encoders = {"raw": RawExampleEncoder, "float_list": lambda: example_from_float_list,
                "tensor": lambda: example_from_tensor, "png": lambda: example_from_png}
    if encoding not in encoders:
        raise ValueError(f"unknown encoding {encoding!r}; choose one of {ENCODINGS}")
    return encoders[encoding]()


def png_header(data: bytes) -> tuple[int, int, int]:
    """(height, width, bit depth) from a PNG file's IHDR chunk, or `ValueError` if it is not a PNG."""
    if len(data) < 26 or bytes(data[:8]) != PNG_SIGNATURE or bytes(data[12:16]) != b"IHDR":
        raise ValueError("not the bytes of a PNG file")
    width, height, depth = struct.unpack(">IIB", bytes(data[16:25]))
    return height, width, depth


def record_checker(spec: FeatureSpec, encoding: str) -> Callable[[int, object, object], None]:
    """A function `check(index, image, label)` that raises `ShardError` naming record `index` if it does not fit
    `spec` (shape, dtype, integer label). Built once per split: it runs for every record."""
    shape, dtype = spec.image_shape, np.dtype(spec.image_dtype)
    png_expected = (spec.image_shape[:2], 8 * dtype.itemsize)

    def check_label(index: int, label) -> None:
        if isinstance(label, (bool, np.bool_)) or not isinstance(label, (int, np.integer)):
            raise ShardError(f"record {index}: label {label!r} is a {type(label).__name__}; labels must be integers.")

    def check_png(index: int, image, label) -> None:
        check_label(index, label)
        try:
            height, width, depth = png_header(image)
        except (TypeError, ValueError):
            raise ShardError(f"record {index}: the png encoding takes the bytes of a PNG file, got "
                             f"{type(image).__name__}.") from None
        if ((height, width), depth) != png_expected:
            raise ShardError(f"record {index}: the PNG is {height}x{width} at {depth} bits, but the feature spec says "
                             f"{spec.image_dtype} {spec.image_shape}.")

    def check_array(index: int, image, label) -> None:
        check_label(index, label)
        if image.shape != shape or image.dtype != dtype:  # dtype objects compare fast; .name is slow
            raise ShardError(f"record {index}: image is {image.dtype.name} {tuple(image.shape)}, but the feature spec "
                             f"says {spec.image_dtype} {spec.image_shape}. Every record in a split must have the same "
                             f"shape and dtype.")

    return check_png if encoding == "png" else check_array


def _spec_mismatch(source: str, spec: FeatureSpec) -> str:
    return (f"records in {source} do not hold {spec.image_dtype} {spec.image_shape} images "
            f"({spec.nbytes} bytes each) as the manifest's feature spec says: the manifest does not describe "
            f"these files. Write the split again with write_shards().")


def _decode(image, encoding: str, spec: FeatureSpec, source: str, batch: bool = False):
    dtype, shape = tf.as_dtype(spec.image_dtype), ((-1, *spec.image_shape) if batch else spec.image_shape)
    if encoding == "raw":
        fits = tf.debugging.assert_equal(tf.strings.length(image), spec.nbytes, message=_spec_mismatch(source, spec))
        with tf.control_dependencies([fits]):  # check first: a wrong spec must not reach the reshape
            return tf.reshape(tf.io.decode_raw(image, dtype), shape)
    if encoding == "float_list":
        return tf.reshape(tf.cast(image, dtype), shape)
    if batch:   # tensors and PNGs decode one image at a time
        return tf.map_fn(lambda one: _decode(one, encoding, spec, source), image,
                         fn_output_signature=tf.TensorSpec(spec.image_shape, dtype))
    if encoding == "tensor":
        return tf.ensure_shape(tf.io.parse_tensor(image, dtype), spec.image_shape)
    return tf.ensure_shape(tf.io.decode_png(image, channels=spec.image_shape[-1], dtype=dtype), spec.image_shape)


def _parse_fn(parse_features, batch: bool, encoding: str, spec: FeatureSpec, source: str):
    image = (tf.io.FixedLenFeature([spec.size], tf.float32) if encoding == "float_list"
             else tf.io.FixedLenFeature([], tf.string))
    description = {"image": image, "label": tf.io.FixedLenFeature([], tf.int64)}

    def parse(serialized):
        features = parse_features(serialized, description)
        return _decode(features["image"], encoding, spec, source, batch), features["label"]

    return parse


def parse_example_fn(encoding: str, spec: FeatureSpec, source: str = "these shards"):
    """A function for `dataset.map`: one serialized record -> `(image, label)` in the original dtype and shape.
    `source` (a folder or file name) goes into the error raised when the records do not fit `spec`."""
    return _parse_fn(tf.io.parse_single_example, False, encoding, spec, source)


def parse_batch_fn(encoding: str, spec: FeatureSpec, source: str = "these shards"):
    """`parse_example_fn` for `dataset.batch(n).map(...)`: a vector of records -> `(images, labels)`, parsed with
    one op per batch instead of one per record."""
    return _parse_fn(tf.io.parse_example, True, encoding, spec, source)
