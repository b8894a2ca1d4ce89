"""Image datasets as folders of PNG files with a label file, in the older article's layout.

    dataset/train/tr_00000.png … tr_label.txt      (one integer label per line)
    dataset/test/te_00000.png  … te_label.txt

`export_png_folder` writes such a folder (resumable, atomic per file); `check_png_folder`
matches images to labels before training starts; `load_png` reads one image with errors that
name the file. `export_packed_uint8` writes the same images as one uint8 `.npy` file that
`np.load(mmap_mode="r")` reads without loading it.

Introduced in notebooks/03_pydataset_autoencoder.ipynb.
"""
from __future__ import annotations

import io
import json
import os
import re
from pathlib import Path

import numpy as np
import tensorflow as tf
from PIL import Image
from tqdm.auto import tqdm

from helpers.files import atomic_write_bytes, atomic_write_text, partial_path

PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"
PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the last 12 bytes of every complete PNG file
SPLIT_PREFIX = {"train": "tr", "test": "te"}


class PngFolderError(ValueError):
    """A PNG folder, one of its images, or its label file is not what was expected. Names the file."""


def image_name(prefix: str, index: int) -> str:
    return f"{prefix}_{index:05d}.png"


def label_file(folder: Path, prefix: str) -> Path:
    return Path(folder) / f"{prefix}_label.txt"


def _index_of(path: Path, prefix: str) -> int:
    """The number in `{prefix}_{number}.png`, or -1 for any other name."""
    match = re.fullmatch(rf"{re.escape(prefix)}_(\d+)\.png", path.name)
    return int(match[1]) if match else -1


def _png_bytes(image: np.ndarray) -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(image).save(buffer, format="PNG")
    return buffer.getvalue()


def _is_complete_png(path: Path) -> bool:
    """Cheap check that a file is a whole PNG: right signature at the start, IEND chunk at the end."""
    try:
        with open(path, "rb") as f:
            if f.read(8) != PNG_SIGNATURE:
                return False
            f.seek(-12, os.SEEK_END)
            return f.read(12) == PNG_END
    except OSError:
        return False


def export_png_folder(
    images: np.ndarray,
    labels: np.ndarray,
    folder: str | Path,
    prefix: str,
    *,
    fingerprint: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
) -> Path:
    """Write `images[i]` to `folder/{prefix}_{i:05d}.png` and all labels to `{prefix}_label.txt`.

    Each PNG is written under a temporary name and renamed when complete; files already there
    and complete are skipped, so an interrupted export resumes where it stopped. The label file
    is written last, so its presence means the export finished. `fingerprint` identifies the
    source (see `helpers.files.fingerprint_arrays`): a folder exported from other data is not
    mixed in; it is refused, or with `overwrite=True` replaced.

    >>> export_png_folder(x_train[:5000], y_train[:5000], "data/dataset/train", "tr")
    """
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    labels = np.asarray(labels).reshape(-1)
    if len(images) != len(labels):
        raise PngFolderError(f"{len(images)} images but {len(labels)} labels for {folder}.")
    info_path = folder / f"{prefix}_export.json"
    if info_path.exists():
        previous = json.loads(info_path.read_text(encoding="utf-8")).get("fingerprint")
        if previous != fingerprint:
            if not overwrite:
                raise PngFolderError(
                    f"{folder} holds images exported from other data (fingerprint {previous}, now {fingerprint}). "
                    f"Export to another folder, or pass overwrite=True to replace them."
                )
            for stale in folder.glob(f"{prefix}_*"):
                stale.unlink()
    beyond = [p for p in folder.glob(f"{prefix}_*.png") if _index_of(p, prefix) >= len(images)]
    if beyond and not overwrite:
        raise PngFolderError(
            f"{folder} already holds {len(beyond):,} images beyond the {len(images):,} being exported "
            f"(e.g. {sorted(beyond)[0].name}). Export to another folder, or pass overwrite=True."
        )
    for stale in beyond:
        stale.unlink()
    atomic_write_text(info_path, json.dumps({"fingerprint": fingerprint}))
    for stale in folder.glob(f"{prefix}_*.partial"):
        stale.unlink()  # left by an export that was killed mid-file

    written = skipped = 0
    for index in tqdm(range(len(images)), desc=f"PNG → {folder.name}/", unit="img", disable=not progress):
        path = folder / image_name(prefix, index)
        if _is_complete_png(path):
            skipped += 1
            continue
        atomic_write_bytes(path, _png_bytes(np.asarray(images[index])))
        written += 1
    # Only the first len(images) files are part of this export; a longer earlier export keeps its files
    # but the label file says how many belong to the dataset.
    atomic_write_text(label_file(folder, prefix), "".join(f"{int(v)}\n" for v in labels))
    if progress:
        print(f"{folder}: {written:,} PNG files written, {skipped:,} already there")
    return folder


def read_labels(folder: str | Path, prefix: str) -> np.ndarray:
    """The label file as an int64 array, with a clear error when it is missing or malformed."""
    path = label_file(Path(folder), prefix)
    if not path.exists():
        raise PngFolderError(f"{path} is missing: the folder needs one label per image, one per line.")
    labels = []
    for line_number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            labels.append(int(float(line)))  # np.savetxt writes floats such as 6.000000000000000000e+00
        except ValueError:
            raise PngFolderError(f"{path}, line {line_number}: {line!r} is not a label.") from None
    return np.asarray(labels, dtype=np.int64)


def check_png_folder(folder: str | Path, prefix: str) -> tuple[list[Path], np.ndarray]:
    """The image paths in label order and the labels, after checking the two agree.

    The label file decides how many images there are; every `{prefix}_{i:05d}.png` for those
    labels must exist. Errors name the missing files, or the mismatch in counts.
    """
    folder = Path(folder)
    labels = read_labels(folder, prefix)
    expected = [folder / image_name(prefix, i) for i in range(len(labels))]
    missing = [p.name for p in expected if not p.exists()]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5:,} more" if len(missing) > 5 else "")
        present = len(list(folder.glob(f"{prefix}_*.png")))
        raise PngFolderError(
            f"{label_file(folder, prefix)} has {len(labels):,} labels but {folder} has {present:,} images; "
            f"missing: {shown}."
        )
    extra = [p.name for p in folder.glob(f"{prefix}_*.png") if _index_of(p, prefix) >= len(labels)]
    if extra:
        raise PngFolderError(
            f"{folder} has {len(extra):,} images beyond the {len(labels):,} labels in "
            f"{label_file(folder, prefix).name} (e.g. {sorted(extra)[0]}): the label file and the images do not match."
        )
    return expected, labels


def load_png(path: str | Path, shape: tuple[int, ...] = (32, 32, 3)) -> np.ndarray:
    """One PNG as a uint8 array of `shape`, or a `PngFolderError` saying which file and what is wrong.

    >>> load_png("data/dataset/train/tr_00000.png").shape
    (32, 32, 3)
    """
    path = Path(path)
    try:
        with Image.open(path) as image:
            if image.format != "PNG":
                raise PngFolderError(f"{path} is a {image.format} file, not a PNG.")
            image.load()  # decodes now, so a truncated file fails here
            array = np.asarray(image)
    except FileNotFoundError:
        raise PngFolderError(f"{path} is missing.") from None
    except PngFolderError:
        raise
    except (OSError, SyntaxError, ValueError) as e:  # PIL's ways of saying "bad image data"
        raise PngFolderError(f"{path} is not a readable image ({e}); it may be truncated or not a PNG.") from None
    if array.shape != tuple(shape) or array.dtype != np.uint8:
        raise PngFolderError(f"{path} is {array.dtype} {array.shape}, expected uint8 {tuple(shape)}.")
    return array


def export_packed_uint8(images: np.ndarray, path: str | Path, chunk: int = 4096) -> Path:
    """Write images as one uint8 `.npy` file, chunk by chunk, renamed into place when complete.

    Read it back with `np.load(path, mmap_mode="r")`: the operating system pages in only the
    bytes a batch touches, so the file can be far larger than memory.
    """
    path = Path(path)
    partial = partial_path(path)
    packed = np.lib.format.open_memmap(partial, mode="w+", dtype=np.uint8, shape=tuple(images.shape))
    for start in range(0, len(images), chunk):
        packed[start:start + chunk] = images[start:start + chunk]
    packed.flush()
    del packed
    os.replace(partial, path)
    return path


def _read_png_pair(path):
    """One PNG file as an (input, target) pair of float32 images in [0, 1], in TensorFlow ops."""
    image = tf.io.decode_png(tf.io.read_file(path), channels=3)
    image = tf.cast(image, tf.float32) / 255.0
    return image, image


def tf_dataset_from_png_folder(folder: str | Path, prefix: str, batch_size: int, *, shuffle: bool = True,
                               seed: int | None = None, limit: int | None = None):
    """A `tf.data` pipeline over the same folder: file names → read → decode_png → batch.

    Reading and decoding are TensorFlow ops, so `num_parallel_calls` runs them on several
    threads at once without the GIL. Images come as `(x, x)` float32 pairs in [0, 1].
    """
    paths, _ = check_png_folder(folder, prefix)
    paths = paths[:limit]
    files = tf.data.Dataset.from_tensor_slices([str(p) for p in paths])
    if shuffle:
        files = files.shuffle(len(paths), seed=seed, reshuffle_each_iteration=True)

    return (files.map(_read_png_pair, num_parallel_calls=tf.data.AUTOTUNE, deterministic=False)
            .batch(batch_size)
            .prefetch(tf.data.AUTOTUNE))
