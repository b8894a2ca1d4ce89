"""A folder of real photographs to practise on: class sub-folders of JPEG files of every size, made offline.

Each class is one of the colour photographs scikit-image ships inside its wheel (no download); each file is a
random crop of it, scaled to 200-800 px a side, maybe mirrored, saved at a random JPEG quality, so decoding
costs what real photos cost. The layout is Imagenette's (`train/` and `val/`, one folder per class), so
`keras.utils.image_dataset_from_directory` or your own folder can take its place. A copy with the bad files
real folders hold (truncated JPEGs, one with its end marker put back, a PNG named .jpg, CMYK and greyscale JPEGs,
an empty file) is a second call.

    folder = make_photo_folder(data_dir() / "photos", files=400)
    bad = plant_bad_files(folder, data_dir() / "photos-bad")

Introduced in notebooks/07_capstone_photos.ipynb.
"""
from __future__ import annotations

import io
import os
import re
import shutil
from concurrent.futures import ThreadPoolExecutor
from importlib.util import find_spec
from pathlib import Path

import numpy as np
from PIL import Image
from tqdm.auto import tqdm

from helpers.storage.files import atomic_write_bytes, stale_temporaries

# class name -> the photograph in scikit-image's wheel (skimage/data/) it is cut from
SOURCES = {"astronaut": "astronaut.png", "cat": "chelsea.png", "coffee": "coffee.png", "galaxies": "hubble_deep_field.jpg",
           "motorcycle": "motorcycle_left.png", "retina": "retina.jpg", "rocket": "rocket.jpg", "tissue": "ihc.png"}
SPLITS = {"train": 0.8, "val": 0.2}   # the share of the files each split gets
SIDES = (200, 800)                    # pixels, smallest and largest side of a file
_NAME = re.compile(r"(?P<cls>[a-z]+)_(?P<index>\d{6})\.jpg")


def source_photo(name: str) -> Image.Image:
    """One of the photographs, in RGB, read from the installed scikit-image package (never fetched)."""
    spec = find_spec("skimage")
    if spec is None or not spec.submodule_search_locations:
        raise ModuleNotFoundError("the photo folder is cut from scikit-image's sample photographs: "
                                  "pip install scikit-image (see requirements.txt)")
    with Image.open(Path(spec.submodule_search_locations[0]) / "data" / SOURCES[name]) as photo:
        return photo.convert("RGB")


def photo_file(photo: Image.Image, rng: np.random.Generator) -> bytes:
    """A random crop of `photo` (40-100 % of each side), 200-800 px a side, maybe mirrored, as JPEG bytes."""
    width, height = photo.size
    w, h = (int(side * rng.uniform(0.4, 1.0)) for side in (width, height))
    left, top = int(rng.integers(0, width - w + 1)), int(rng.integers(0, height - h + 1))
    longest = rng.uniform(*SIDES)
    scale = longest / max(w, h)
    size = tuple(int(np.clip(round(side * scale), *SIDES)) for side in (w, h))
    image = photo.crop((left, top, left + w, top + h)).resize(size, Image.Resampling.BILINEAR)
    if rng.random() < 0.5:
        image = image.transpose(Image.Transpose.FLIP_LEFT_RIGHT)
    out = io.BytesIO()
    image.save(out, "JPEG", quality=int(rng.integers(70, 96)))
    return out.getvalue()


def planned_files(files: int) -> list[tuple[str, str, int]]:
    """(split, class, index) of every file of a folder of `files` files: classes in turn, splits by share."""
    classes = sorted(SOURCES)
    cut = round(files * SPLITS["train"])
    return [("train" if i < cut else "val", classes[i % len(classes)], i) for i in range(files)]


def make_photo_folder(folder: str | Path, files: int, *, seed: int = 0, progress: bool = True) -> Path:
    """Make (or finish) `folder/{train,val}/<class>/<class>_<index>.jpg`, `files` files in all; returns `folder`.

    File `i` depends only on `seed` and `i`, and each is written under a temporary name and renamed, so a run
    stopped half-way resumes where it stopped; files an earlier call with another `files` put elsewhere go.

    >>> import tempfile
    >>> folder = make_photo_folder(Path(tempfile.mkdtemp()) / "photos", 16, progress=False)
    >>> sorted(p.name for p in folder.iterdir()), len(list(folder.glob("*/*/*.jpg")))
    (['train', 'val'], 16)
    """
    folder = Path(folder)
    plan = planned_files(files)
    wanted = {folder / split / cls / f"{cls}_{i:06d}.jpg" for split, cls, i in plan}
    for split, cls, _ in plan:
        (folder / split / cls).mkdir(parents=True, exist_ok=True)
    for path in folder.glob("*/*/*"):
        if _NAME.fullmatch(path.name) and path not in wanted:   # from a call with another number of files
            path.unlink()
    for directory in {folder / split / cls for split, cls, _ in plan}:
        for leftover in stale_temporaries(directory, r"[a-z]+_\d{6}\.jpg"):
            leftover.unlink()
    todo = [(split, cls, i) for split, cls, i in plan if not (folder / split / cls / f"{cls}_{i:06d}.jpg").exists()]
    photos = {cls: source_photo(cls) for cls in {cls for _, cls, _ in todo}}

    def make(item):
        split, cls, index = item
        data = photo_file(photos[cls], np.random.default_rng([seed, index]))
        atomic_write_bytes(folder / split / cls / f"{cls}_{index:06d}.jpg", data)

    with ThreadPoolExecutor(os.cpu_count() or 1) as pool:   # Pillow lets go of the GIL while it codes images
        for _ in tqdm(pool.map(make, todo), total=len(todo), desc=f"photos → {folder.name}", unit="file",
                      disable=not progress or not todo):
            pass
    return folder


def plant_bad_files(folder: str | Path, copy: str | Path) -> dict[str, str]:
    """A copy of `folder` (hard links where the file system allows) with six bad files added to its training
    split; returns {path relative to `copy`: what is wrong with it}. Run again, it remakes the copy."""
    folder, copy = Path(folder), Path(copy)
    shutil.rmtree(copy, ignore_errors=True)
    shutil.copytree(folder, copy, copy_function=_link_or_copy)
    first = sorted((copy / "train").glob("*/*.jpg"))[0]
    good = first.read_bytes()
    with Image.open(io.BytesIO(good)) as image:
        image = image.convert("RGB")
        encoded = {}
        for mode, form in (("PNG", "PNG"), ("CMYK", "JPEG"), ("L", "JPEG")):
            out = io.BytesIO()
            (image if mode == "PNG" else image.convert(mode)).save(out, form)
            encoded[mode] = out.getvalue()
    classes = sorted(p.name for p in (copy / "train").iterdir())
    bad = {"truncated.jpg": (good[: len(good) // 2], "a truncated JPEG: the file ends half-way"),
           "truncated_marked.jpg": (good[: len(good) // 2] + b"\xff\xd9",   # decoders fill the rest with grey
                                    "a truncated JPEG with its end marker put back: it decodes without an error"),
           "png_named.jpg": (encoded["PNG"], "a PNG file named .jpg"),
           "cmyk.jpg": (encoded["CMYK"], "a CMYK JPEG (4 colour channels)"),
           "greyscale.jpg": (encoded["L"], "a greyscale JPEG (1 channel)"),
           "empty.jpg": (b"", "an empty file (0 bytes)")}
    planted = {}
    for n, (name, (data, what)) in enumerate(bad.items()):
        path = copy / "train" / classes[n % len(classes)] / name
        atomic_write_bytes(path, data)
        planted[str(path.relative_to(copy))] = what
    return planted


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)
    except OSError:
        shutil.copy2(source, target)
