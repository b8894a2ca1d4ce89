"""Image datasets as folders of PNG files with a label file, in the older article's layout (notebook 03):

    dataset/train/tr_00000.png … tr_label.txt      (one integer label per line)

`export_png_folder` writes one (resumable, atomic per file, refusing to mix two datasets); `check_png_folder`
matches images to labels before training starts; `load_png` reads one image with errors that name the file;
`without_bad_files` leaves out, with a warning each, the files a reader cannot read (notebook 03 calls these beside
its `PngBatches`).
"""
from __future__ import annotations

import contextlib
import io
import json
import os
import re
import stat
import warnings
from pathlib import Path
from typing import Callable

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from helpers.storage.files import (PNG_SIGNATURE, atomic_write_bytes, atomic_write_text, check_name, file_problem,
                                   fingerprint_arrays, sync_all)
from helpers.storage.labels import class_label, class_labels

PNG_END = b"\x00\x00\x00\x00IEND\xaeB`\x82"  # the last 12 bytes of every complete PNG file


class PngFolderError(ValueError):
    """A PNG folder, one of its images, or its label file is not what was expected. Names the file."""


def _prefix(prefix: str) -> str:
    try:
        return check_name(prefix, "file name prefix")
    except ValueError as e:
        raise PngFolderError(str(e)) from None


def image_name(prefix: str, index: int) -> str:
    """`{prefix}_{index:05d}.png`, the article's image file name.

    >>> image_name("tr", 7)
    'tr_00007.png'
    """
    return f"{_prefix(prefix)}_{index:05d}.png"


def label_file(folder: str | Path, prefix: str) -> Path:
    """`folder/{prefix}_label.txt`: one integer label per line, line i for image i."""
    return Path(folder) / f"{_prefix(prefix)}_label.txt"


def _index_of(path: Path, prefix: str) -> int:
    """The number in `{prefix}_{number}.png`, or -1 for any other name."""
    match = re.fullmatch(rf"{re.escape(prefix)}_(\d+)\.png", path.name)
    return int(match[1]) if match else -1


def _export_files(folder: Path, prefix: str) -> list[Path]:
    """What an export with this prefix writes, and nothing else (not `tr_big_00000.png` beside `tr_00000.png`):
    `{prefix}_NNNNN.png`, the label file, the export record, and their temporaries."""
    final = rf"{re.escape(prefix)}_(?:\d{{5,}}\.png|label\.txt|export\.json)"
    pattern = re.compile(rf"{final}(?:\.[0-9a-f]{{8}}\.partial)?")
    return sorted(p for p in folder.iterdir() if pattern.fullmatch(p.name)) if folder.is_dir() else []


def _is_complete_png(path: Path) -> bool:
    """A regular file (not a symlink, nor a FIFO that would block the open) with a PNG's first and last bytes."""
    try:
        if not stat.S_ISREG(os.lstat(path).st_mode):
            return False
        with open(path, "rb") as f:
            if f.read(8) != PNG_SIGNATURE:
                return False
            f.seek(-12, os.SEEK_END)
            return f.read(12) == PNG_END
    except OSError:
        return False


def export_png_folder(images: np.ndarray, labels: np.ndarray, folder: str | Path, prefix: str, *,
                      num_classes: int | None = None, fingerprint: str | None = None, overwrite: bool = False,
                      progress: bool = True) -> Path:
    """Write `images[i]` to `folder/{prefix}_{i:05d}.png`, each atomically, then the integer labels to
    `{prefix}_label.txt` (its presence means the export finished). Complete files are skipped, so an
    interrupted export resumes. `{prefix}_export.json` records a fingerprint of the data (`fingerprint_arrays`
    unless given): exporting other data over an export, or over PNG files it did not write, is refused, or with
    `overwrite=True` replaces them. Every label is checked (`helpers.storage.labels`: a whole number from 0, below
    `num_classes` when given) before the first file is written.

    >>> import tempfile
    >>> folder = export_png_folder(np.zeros((3, 32, 32, 3), np.uint8), [1, 2, 3], tempfile.mkdtemp(), "tr", progress=False)
    >>> sorted(p.name for p in folder.iterdir() if p.suffix == ".png")
    ['tr_00000.png', 'tr_00001.png', 'tr_00002.png']
    """
    folder = Path(folder)
    info_path = folder / f"{_prefix(prefix)}_export.json"
    try:
        labels = class_labels(labels, f"labels for {folder}", num_classes)
    except ValueError as e:
        raise PngFolderError(str(e)) from None
    if len(images) != len(labels):
        raise PngFolderError(f"{len(images)} images but {len(labels)} labels for {folder}.")
    fingerprint = fingerprint_arrays(np.asarray(images), labels) if fingerprint is None else fingerprint
    folder.mkdir(parents=True, exist_ok=True)
    previous = None if not _export_files(folder, prefix) else "unknown (no export record)"
    if os.path.lexists(info_path):
        previous = "unreadable"
        with contextlib.suppress(ValueError, KeyError, TypeError):
            if file_problem(info_path) is None:   # never open a FIFO: it would block
                previous = json.loads(info_path.read_text(encoding="utf-8"))["fingerprint"]
    if previous is not None and previous != fingerprint:
        if not overwrite:
            raise PngFolderError(
                f"{folder} holds images exported from other data (fingerprint {previous}, now {fingerprint}). "
                f"Export to another folder, or pass overwrite=True to replace them.")
        for stale in _export_files(folder, prefix):
            stale.unlink()
    beyond = [p for p in _export_files(folder, prefix) if _index_of(p, prefix) >= len(images)]
    if beyond and not overwrite:
        raise PngFolderError(
            f"{folder} already holds {len(beyond):,} images beyond the {len(images):,} being exported "
            f"(e.g. {sorted(beyond)[0].name}). Export to another folder, or pass overwrite=True.")
    for stale in beyond + [p for p in _export_files(folder, prefix) if p.name.endswith(".partial")]:
        stale.unlink()   # beyond the data, or left by an export killed mid-file
    atomic_write_text(info_path, json.dumps({"fingerprint": fingerprint}))
    written = skipped = 0
    for index in tqdm(range(len(images)), desc=f"PNG → {folder.name}/", unit="img", disable=not progress):
        path = folder / image_name(prefix, index)
        if _is_complete_png(path):
            skipped += 1
            continue
        buffer = io.BytesIO()
        Image.fromarray(np.asarray(images[index])).save(buffer, format="PNG")
        atomic_write_bytes(path, buffer.getvalue(), durable=False)   # thousands of files: one flush, below
        written += 1
    sync_all()   # every PNG on the disk before the label file says the export is complete (a resume checks each)
    atomic_write_text(label_file(folder, prefix), "".join(f"{v}\n" for v in labels.tolist()))
    if progress:
        print(f"{folder}: {written:,} PNG files written, {skipped:,} already there")
    return folder


# ASCII digits only: int() and float() also take "1_0" and other scripts' digits, which no writer here writes
WHOLE = re.compile(r"[+-]?[0-9]+")
SAVETXT = re.compile(r"[+-]?[0-9]+(?:\.[0-9]*)?(?:[eE][+-]?[0-9]+)?")


def _parse_label(text: str) -> int:
    """A whole number that fits int64, written as `6` or as `np.savetxt` writes it (`6.000000000000000000e+00`)."""
    if WHOLE.fullmatch(text):
        value = int(text)
    elif SAVETXT.fullmatch(text):
        number = float(text)
        if not number.is_integer():   # nor inf (1e999)
            raise ValueError(text)
        value = int(number)
    else:
        raise ValueError(text)
    if not -2**63 <= value < 2**63:
        raise ValueError(text)
    return value


def read_labels(folder: str | Path, prefix: str) -> np.ndarray:
    """The label file as an int64 array; `PngFolderError` naming the file and line when it is missing or malformed,
    or holds a label the writers refuse (below 0: `helpers.storage.labels`)."""
    path = label_file(Path(folder), prefix)
    if (problem := file_problem(path)) is not None:
        raise PngFolderError(f"{path} is {problem}: the folder needs one label per image, one per line.")
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError as e:
        raise PngFolderError(f"{path} is not a text file ({e}).") from None
    labels = []
    for line_number, line in enumerate(lines, start=1):
        if line.strip():
            try:
                value = _parse_label(line.strip())
            except ValueError:
                raise PngFolderError(f"{path}, line {line_number}: {line!r} is not a label (a whole number).") from None
            try:
                labels.append(class_label(value, f"{path}, line {line_number}"))
            except ValueError as e:
                raise PngFolderError(str(e)) from None
    return np.asarray(labels, dtype=np.int64)


def check_png_folder(folder: str | Path, prefix: str) -> tuple[list[Path], np.ndarray]:
    """The image paths in label order and the labels, after checking that the label file (which decides how
    many images there are) and the `{prefix}_{i:05d}.png` files agree; errors name the missing or extra files."""
    folder = Path(folder)
    labels = read_labels(folder, prefix)
    expected = [folder / image_name(prefix, i) for i in range(len(labels))]
    missing = [p.name for p in expected if not os.path.lexists(p)]
    if missing:
        shown = ", ".join(missing[:5]) + (f" and {len(missing) - 5:,} more" if len(missing) > 5 else "")
        present = sum(p.suffix == ".png" for p in _export_files(folder, prefix))
        raise PngFolderError(f"{label_file(folder, prefix)} has {len(labels):,} labels but {folder} has {present:,} "
                             f"images; missing: {shown}.")
    extra = [p.name for p in _export_files(folder, prefix) if _index_of(p, prefix) >= len(labels)]
    if extra:
        raise PngFolderError(
            f"{folder} has {len(extra):,} images beyond the {len(labels):,} labels in "
            f"{label_file(folder, prefix).name} (e.g. {sorted(extra)[0]}): the label file and the images do not match.")
    for path in expected:   # a reader would fail on a folder, and wait forever on a FIFO
        if (problem := file_problem(path)) is not None:
            raise PngFolderError(f"{path} is {problem}: every name in {folder} the label file counts must be an "
                                 f"image file.")
    return expected, labels


def without_bad_files(paths: list[Path], labels: np.ndarray, read: Callable[[Path], object],
                      ) -> tuple[list[Path], np.ndarray, list[tuple[Path, str]]]:
    """The paths and labels of the images `read` can read (notebook 03 passes its `read_png`), and `(path, what
    is wrong)` of each other one. Every file is read once; each bad one (`read` raised a `ValueError`) is named in a
    warning, and a last warning counts them.

    >>> import tempfile
    >>> folder = Path(tempfile.mkdtemp())
    >>> _ = (folder / "a.png").write_bytes(b"fine"), (folder / "b.png").write_bytes(b"bad")
    >>> def read(path):
    ...     if Path(path).read_bytes() == b"bad":
    ...         raise ValueError(f"{path} is bad")
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     kept, kept_labels, skipped = without_bad_files([folder / "a.png", folder / "b.png"], [3, 4], read)
    >>> [p.name for p in kept], kept_labels.tolist(), [p.name for p, _ in skipped]
    (['a.png'], [3], ['b.png'])
    """
    if len(paths) != len(labels):
        raise PngFolderError(f"{len(paths)} paths but {len(labels)} labels")
    keep, skipped = [], []
    for i, path in enumerate(tqdm(paths, desc="checking PNG files", unit="img", leave=False)):
        try:
            if (problem := file_problem(path)) is not None:   # never open a FIFO: the read would wait forever
                raise PngFolderError(f"{path} is {problem}, not an image.")
            read(path)
            keep.append(i)
        except ValueError as error:   # PngFolderError is one
            skipped.append((path, str(error)))
            warnings.warn(f"skipping {error}", stacklevel=2)
    if skipped:
        warnings.warn(f"skipped {len(skipped):,} of {len(paths):,} files in {Path(paths[0]).parent}", stacklevel=2)
    return [paths[i] for i in keep], np.asarray(labels)[keep], skipped


def load_png(path: str | Path, shape: tuple[int, ...] = (32, 32, 3)) -> np.ndarray:
    """One PNG as a uint8 array of `shape`, or a `PngFolderError` saying which file and what is wrong."""
    path = Path(path)
    if os.path.lexists(path) and file_problem(path) is not None:
        raise PngFolderError(f"{path} is not a regular file (a folder, a FIFO or a device), so it is not an image.")
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
