# Generated from notebooks/07_capstone_photos.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""07 · Capstone: your own folder of photos, end to end: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import numpy as np
import tensorflow as tf
import keras


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: 2. The baseline: `image_dataset_from_directory`
def augmentation(seed=None):
    """Random changes that keep a photo's class: a mirror image, a shift of up to a tenth of each
    side and a change of contrast. Keras preprocessing layers: they run inside a model (on its
    device, only while it trains) or in a tf.data pipeline (on the host's CPU)."""
    return keras.Sequential([keras.layers.RandomFlip("horizontal", seed=seed),
                             keras.layers.RandomTranslation(0.1, 0.1, seed=seed),
                             keras.layers.RandomContrast(0.2, seed=seed)], name="augmentation")


def photo_classifier(input_shape=(96, 96, 3), num_classes=8, *, augment=False, learning_rate=3e-3,
                     steps_per_execution=1):
    """A small convolutional classifier trained from scratch: float pixels from 0 to 255 in (as
    image_dataset_from_directory gives them), class probabilities out; with `augment`, the
    augmentation layers first. Under a mixed precision policy the output layer stays float32."""
    inputs = keras.Input(shape=input_shape)
    x = augmentation()(inputs) if augment else inputs
    x = keras.layers.Rescaling(1 / 255)(x)
    for filters in (16, 32, 64, 128):
        x = keras.layers.Conv2D(filters, 3, strides=2, padding="same", activation="relu")(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    outputs = keras.layers.Dense(num_classes, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name="photo_classifier")
    model.compile(optimizer=keras.optimizers.Adam(learning_rate),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  steps_per_execution=steps_per_execution)
    return model


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: 3. A real folder has bad files
import io
from pathlib import Path

from PIL import Image

from helpers.storage.files import file_problem

# Bytes slipped in before a JPEG's end marker (no 0xFF among them: that would start a marker)
PROBE = b"Bytes a whole JPEG scan skips, and a scan cut short decodes as more of its picture."
# No photo the series handles comes near this (a 50-megapixel phone JPEG is tens of MB at most, and
# Pillow refuses pictures above 179 million pixels as decompression bombs); a bigger file is named,
# never read into memory.
MAX_PHOTO_BYTES = 64 * 2**20


def jpeg_end(data):
    """Where a JPEG's first end marker (FF D9) starts, found by walking its segments from the start
    marker, or None when the file stops before one. Bytes after that marker are not the picture's (a
    phone's motion photo appends a video there), so a search of the whole file for markers would be
    misled by them."""
    if data[:2] != b"\xff\xd8":
        return None
    i = 2
    while i + 1 < len(data):
        if data[i] != 0xFF:          # stray bytes between segments: skipped, as libjpeg does
            if (i := data.find(b"\xff", i)) < 0:
                return None
            continue
        marker = data[i + 1]
        if marker == 0xFF:           # fill byte before a marker
            i += 1
        elif marker == 0xD9:
            return i
        elif 0xD0 <= marker <= 0xD7 or marker == 0x01:   # markers with no length
            i += 2
        else:                        # a segment: its length (2 bytes) counts itself
            length = int.from_bytes(data[i + 2:i + 4], "big")
            if length < 2:
                return None
            i += 2 + length
            if marker == 0xDA:       # a scan header: its coded data runs to the next marker,
                while (i := data.find(b"\xff", i)) >= 0 and i + 1 < len(data) and (
                        data[i + 1] == 0x00 or 0xD0 <= data[i + 1] <= 0xD7):
                    i += 2           # skipping FF 00 (a data byte FF) and restart markers
                if i < 0:
                    return None
    return None


def decoded_jpeg(data):
    """A JPEG's pixels at 1/8 scale (the decoder's own scaling: every byte read, a fraction of
    the work), or at full scale for a progressive JPEG, whose later passes change only what a full
    decode shows."""
    with Image.open(io.BytesIO(data)) as image:
        scale = 1 if image.info.get("progressive") else 8
        image.draft(image.mode, (max(1, image.width // scale),   # at least 1 pixel a side
                                 max(1, image.height // scale)))
        return np.asarray(image)


def scan_is_whole(data, end):
    """Whether a JPEG's picture data runs to its end marker at `end` (from `jpeg_end`): the pixels
    stay the same with PROBE slipped in before that marker (a cut file decodes PROBE as more
    picture). Trailing data is left out."""
    whole = data[:end + 2]
    return np.array_equal(decoded_jpeg(whole), decoded_jpeg(whole[:end] + PROBE + whole[end:]))


def inspect_photo(path):
    """(what stands out in one image file or None for a plain RGB JPEG, whether it can be used),
    judged from what is there: a regular file of at most MAX_PHOTO_BYTES (anything else is named,
    never opened or read), the format its bytes really are, the header's colour mode, and a decode
    that proves the whole file is there."""
    if (problem := file_problem(path)) is not None:   # a folder, a FIFO, a device: could hang
        return problem, False
    too_large = f"too large for a photo: over {MAX_PHOTO_BYTES // 2**20} MiB"
    if Path(path).stat().st_size > MAX_PHOTO_BYTES:
        return too_large, False
    with open(path, "rb") as f:
        data = f.read(MAX_PHOTO_BYTES + 1)            # at most that: the file may have grown since
    if len(data) > MAX_PHOTO_BYTES:
        return too_large, False
    if not data:
        return "an empty file", False
    try:
        with Image.open(io.BytesIO(data)) as image:
            kind, mode = image.format, image.mode
            if kind != "JPEG":
                image.load()                         # every byte decoded: a cut file fails
        if kind == "JPEG" and (end := jpeg_end(data)) is None:
            return "a JPEG cut short, no end marker: the file stops in its picture data", False
        if kind == "JPEG" and not scan_is_whole(data, end):   # decodes the file, twice
            return "a JPEG cut short, its end marker put back: the picture data stops early", False
    except (OSError, SyntaxError, ValueError, Image.DecompressionBombError) as error:
        return f"unreadable: {error}", False
    if kind != "JPEG":
        return f"a {kind} file named {Path(path).suffix}", True
    if mode != "RGB":
        return {"L": "a greyscale JPEG", "CMYK": "a CMYK JPEG"}.get(mode, f"a {mode} JPEG"), True
    return None, True


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: 4. Conversion: resized once, or the original bytes
def resized_pixels(path, size):
    """A file's pixels, decoded once and resized to size×size RGB uint8: a resized-once record."""
    with Image.open(path) as image:
        image.draft("RGB", (size, size))   # JPEG: decode straight to the smallest scale ≥ size
        return np.asarray(image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR))


def jpeg_bytes(path):
    """A file's bytes as they are when it is a JPEG; anything else (a PNG named .jpg) re-encoded
    as one."""
    data = Path(path).read_bytes()
    if data[:3] == b"\xff\xd8\xff":   # every JPEG file starts with these bytes
        return data
    with Image.open(io.BytesIO(data)) as image, io.BytesIO() as out:
        image.convert("RGB").save(out, "JPEG", quality=95)
        return out.getvalue()


def jpeg_example(data, label):
    """An original-bytes record: a JPEG file's bytes and its label, in a serialized
    tf.train.Example."""
    feature = {"jpeg": tf.train.Feature(bytes_list=tf.train.BytesList(value=[data])),
               "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(label)]))}
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: Several processes, one split
import time

from helpers.storage.labels import class_labels
from helpers.storage.tfrecord import FeatureSpec, write_shards
from helpers.storage.tfrecord.write import shard_range


def convert_shards(files, labels, out, split, num_shards, shards, size, fingerprint=None,
                   num_classes=None):
    """Write shards `shards` of `split` (`files`, all of the split's, in order, and their
    `labels`) twice: resized once to size×size into `out/resized`, and as the original bytes into
    `out/original`. Returns, per kind, the (records, seconds) of each shard this process wrote.
    Every label is checked before the first byte is written, so the two kinds always hold the same
    records."""
    if not files:
        raise ValueError(f"no files to convert into split {split!r} of {out}: is the folder "
                         f"they come from empty?")
    labels = class_labels(labels, f"the labels of split {split!r} for {out}", num_classes)
    if len(labels) != len(files):
        raise ValueError(f"{len(files)} files but {len(labels)} labels for split {split!r} of "
                         f"{out}.")
    spec = FeatureSpec((size, size, 3), "uint8")   # given, not read from a record: may be empty
    kinds = {"resized": (lambda path, label: (resized_pixels(path, size), label),
                         dict(encoding="raw")),
             "original": (lambda path, label: jpeg_example(jpeg_bytes(path), label),
                          dict(encoding="serialized"))}
    timings = {kind: [] for kind in kinds}
    for n, index in enumerate(sorted(shards)):
        # this shard's records: every process cuts the split the same way
        positions = shard_range(len(files), num_shards, index)
        for kind in list(kinds) if n % 2 == 0 else list(kinds)[::-1]:
            record, settings = kinds[kind]
            started = time.perf_counter()
            # shards=[index]: this one shard, written under its own lock file; once whole, it is
            # added to the folder's one manifest under the manifest's lock
            write_shards((record(files[p], int(labels[p])) for p in positions), Path(out) / kind,
                         split, num_shards, total=len(files), shards=[index], spec=spec,
                         fingerprint=fingerprint, progress=False, **settings)
            timings[kind].append((len(positions), time.perf_counter() - started))
    return timings


# ---------------- defined in notebooks/07_capstone_photos.ipynb, section: 5. The decode-and-augment pipeline, one step at a time
from helpers.storage.tfrecord import read_split


def read_photos(directory, split, batch_size, *, shuffle=False, augment=None, parallel_reads=4,
                seed=None):
    """Batches of (float32 pixels 0-255, int32 labels), as image_dataset_from_directory gives
    them, from resized-once records: files and records shuffled every epoch with `shuffle`, the
    Keras layers `augment` applied on the host when given; `parallel_reads` files read at once
    (None: one after another)."""
    ds = read_split(directory, split, batch_size, parallel_reads=parallel_reads,
                    shuffle_buffer=2_000 if shuffle else 0, seed=seed)
    ds = ds.map(lambda x, y: (tf.cast(x, tf.float32), tf.cast(y, tf.int32)),
                num_parallel_calls=tf.data.AUTOTUNE)
    if augment is not None:   # (cast back: under mixed precision they compute in 16 bits)
        ds = ds.map(lambda x, y: (tf.cast(augment(x, training=True), tf.float32), y),
                    num_parallel_calls=tf.data.AUTOTUNE)
    return ds.prefetch(tf.data.AUTOTUNE)
