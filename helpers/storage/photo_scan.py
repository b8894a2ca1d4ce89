"""Every file of a photo folder looked at before converting it: what each really is, and whether it can be used.

`inspect_photo(path)` judges one file from what it holds, not from its name: that it is a regular file of at most
MAX_PHOTO_BYTES (a folder, a FIFO or a device is named and never opened), the format its bytes really are, the
header's colour mode, and a decode that proves the whole file is there. `scan_photos(folder)` does it for every file
of a folder's class sub-folders and prints the ones that stand out.

    report = scan_photos(data_dir() / "photos-bad" / "train")
    usable = [path for path, (_, ok) in report.items() if ok]

A JPEG cut short usually stops before its end marker (FF D9): `jpeg_end` walks the segments from the start marker
and finds none. Some copy tools put the marker back; such a file decodes without an error, its missing part grey.
`scan_is_whole` catches it: it decodes the JPEG twice, once as it is and once with PROBE slipped in before the end
marker. A whole file's picture data ends before PROBE, so the decoder skips it and the pixels stay the same; in a cut
file PROBE is decoded as more picture and the pixels change. The decodes are at 1/8 scale (the decoder's own
scaling: every byte read, a fraction of the work), except for a progressive JPEG, whose later passes change only
what a full decode shows.

Introduced in notebooks/07_capstone_photos.ipynb.
"""
from __future__ import annotations

import io
from pathlib import Path

import numpy as np
from PIL import Image

from helpers.storage.files import file_problem

# Bytes slipped in before a JPEG's end marker (no 0xFF among them: that would start a marker)
PROBE = b"Bytes a whole JPEG scan skips, and a scan cut short decodes as more of its picture."
# No photo comes near this (a 50-megapixel phone JPEG is tens of MB at most, and Pillow refuses pictures above
# 179 million pixels as decompression bombs); a bigger file is named, never read into memory.
MAX_PHOTO_BYTES = 64 * 2**20


def jpeg_end(data: bytes) -> int | None:
    """Where a JPEG's first end marker (FF D9) starts, found by walking its segments from the start marker, or
    None when the file stops before one. Bytes after that marker are not the picture's (a phone's motion photo
    appends a video there), so a search of the whole file for markers would be misled by them.

    >>> jpeg_end(b"\\xff\\xd8\\xff\\xd9 and a video"), jpeg_end(b"\\xff\\xd8\\xff\\xda\\x00\\x02 picture data")
    (2, None)
    """
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


def decoded_jpeg(data: bytes) -> np.ndarray:
    """A JPEG's pixels at 1/8 scale, or at full scale for a progressive JPEG."""
    with Image.open(io.BytesIO(data)) as image:
        scale = 1 if image.info.get("progressive") else 8
        image.draft(image.mode, (max(1, image.width // scale), max(1, image.height // scale)))
        return np.asarray(image)


def scan_is_whole(data: bytes, end: int) -> bool:
    """Whether a JPEG's picture data runs to its end marker at `end` (from `jpeg_end`): the pixels stay the same
    with PROBE slipped in before that marker. Trailing data is left out."""
    whole = data[:end + 2]
    return np.array_equal(decoded_jpeg(whole), decoded_jpeg(whole[:end] + PROBE + whole[end:]))


def inspect_photo(path: str | Path) -> tuple[str | None, bool]:
    """(what stands out in one image file, or None for a plain RGB JPEG; whether it can be used): a PNG, CMYK or
    greyscale file can (converted to RGB), an empty, truncated, unreadable or oversized one, or anything that is not a
    regular file, cannot."""
    if (problem := file_problem(path)) is not None:   # a folder, a FIFO, a device: opening it could hang
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


def scan_photos(folder: str | Path, *, show: bool = True) -> dict[Path, tuple[str | None, bool]]:
    """`inspect_photo` on every entry of `folder`'s class sub-folders (`folder/*/*`), in name order; with `show`,
    each one that stands out is printed ("used, as RGB" or "LEFT OUT"), then the counts."""
    folder = Path(folder)
    report = {path: inspect_photo(path) for path in sorted(folder.glob("*/*"))}
    if show:
        for path, (problem, usable) in report.items():
            if problem:
                print(f"{'used, as RGB' if usable else 'LEFT OUT':>13}: {path.relative_to(folder)}: {problem}")
        left_out = sum(1 for _, usable in report.values() if not usable)
        converted = sum(1 for problem, usable in report.values() if problem and usable)
        print(f"{folder.name}: {len(report):,} files looked at; {left_out} left out, {converted} used after "
              f"conversion to RGB")
    return report
