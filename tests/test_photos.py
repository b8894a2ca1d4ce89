"""The photo folder of notebook 07 (helpers.data.photos) and the notebook's scan of it (inspect_photo)."""
import io
import os

import numpy as np
import pytest
from PIL import Image

from helpers.data.photos import SIDES, SOURCES, make_photo_folder, plant_bad_files
from helpers.lessons.capstone_photos import jpeg_bytes, resized_pixels
from helpers.storage import photo_scan
from helpers.storage.photo_scan import inspect_photo, jpeg_end, scan_photos
from tests.conftest import finishes_within, jpeg_file


def test_the_folder_has_a_class_folder_per_photograph_and_jpegs_of_many_sizes(tmp_path):
    folder = make_photo_folder(tmp_path / "photos", 40, progress=False)
    files = sorted(folder.glob("*/*/*.jpg"))
    assert len(files) == 40 and {p.parent.name for p in files} == set(SOURCES)
    assert len(list(folder.glob("train/*/*.jpg"))) == 32 and len(list(folder.glob("val/*/*.jpg"))) == 8
    sizes = []
    for path in files:
        with Image.open(path) as image:
            assert image.format == "JPEG" and image.mode == "RGB"
            sizes.append(image.size)
    assert SIDES[0] <= np.min(sizes) and np.max(sizes) <= SIDES[1] and len(set(sizes)) > 30


def test_the_folder_resumes_and_shrinks_to_the_size_asked(tmp_path):
    folder = make_photo_folder(tmp_path / "photos", 24, progress=False)
    files = sorted(folder.glob("*/*/*.jpg"))
    before = {p: p.read_bytes() for p in files}
    stamps = {p: p.stat().st_mtime_ns for p in files}
    files[3].unlink()
    (files[5].parent / f"{files[5].name}.0123abcd.partial").write_bytes(b"half")   # a killed run's temporary
    make_photo_folder(folder, 24, progress=False)
    assert {p: p.read_bytes() for p in sorted(folder.glob("*/*/*.jpg"))} == before   # the same file made again
    assert [p for p in files if p.stat().st_mtime_ns != stamps[p]] == [files[3]]
    assert not list(folder.glob("*/*/*.partial"))
    make_photo_folder(folder, 16, progress=False)
    assert len(list(folder.glob("*/*/*.jpg"))) == 16


def test_every_planted_bad_file_is_named_by_the_scan_and_the_usable_ones_convert(tmp_path):
    folder = make_photo_folder(tmp_path / "photos", 16, progress=False)
    planted = plant_bad_files(folder, tmp_path / "bad")
    report = {str(p.relative_to(tmp_path / "bad")): inspect_photo(p) for p in (tmp_path / "bad").glob("*/*/*")}
    flagged = {name: result for name, result in report.items() if result[0]}
    assert set(flagged) == set(planted)
    assert {name for name, (_, usable) in flagged.items() if not usable} == {
        name for name, what in planted.items() if "truncated" in what or "empty" in what}
    for name, (_, usable) in flagged.items():
        if usable:
            path = tmp_path / "bad" / name
            assert resized_pixels(jpeg_bytes(path), 32).shape == (32, 32, 3) and jpeg_bytes(path)[:3] == b"\xff\xd8\xff"
    assert len(list((tmp_path / "bad").glob("*/*/*"))) == 16 + 6   # the copy, and the six planted


# ---------------------------------------------------------------- the scan of odd files


@pytest.mark.parametrize("size", [(5, 5), (800, 4), (4, 800), (1, 1)])
def test_a_tiny_or_thin_valid_jpeg_is_a_plain_photo(tmp_path, size):
    assert inspect_photo(jpeg_file(tmp_path / "small.jpg", size)) == (None, True)   # was ZeroDivisionError


def test_what_is_no_file_in_a_class_folder_is_named_and_left_out_without_hanging(tmp_path):
    (tmp_path / "sub.jpg").mkdir()
    os.mkfifo(tmp_path / "pipe.jpg")
    os.symlink("/dev/zero", tmp_path / "zero.jpg")
    report = finishes_within(20, lambda: {p.name: inspect_photo(p) for p in tmp_path.iterdir()})
    assert report == {"sub.jpg": ("a folder, not a file", False), "pipe.jpg": ("a FIFO (named pipe), not a file", False),
                      "zero.jpg": ("a character device (a symlink to /dev/zero), not a file", False)}


@pytest.mark.parametrize("progressive", [False, True])
def test_a_jpeg_cut_short_with_its_end_marker_put_back_is_named(tmp_path, progressive):
    rng = np.random.default_rng(0)
    pixels = (rng.random((200, 240, 3)) * 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90, progressive=progressive)
    whole = out.getvalue()
    (tmp_path / "whole.jpg").write_bytes(whole)
    assert inspect_photo(tmp_path / "whole.jpg") == (None, True)
    for cut in (len(whole) // 3, len(whole) // 2, len(whole) - 200):
        (tmp_path / "cut.jpg").write_bytes(whole[:cut] + b"\xff\xd9")
        problem, usable = inspect_photo(tmp_path / "cut.jpg")
        assert not usable and "cut short" in problem, (cut, problem)


# Round three of the review: the scan judged wholeness by the last FF DA of the whole file. A cut file with
# "FF D9, a scan header, FF D9" appended passed; a whole photo with trailing data holding FF DA (the video of a
# phone's motion photo) was called cut short.
SCAN_HEADER = b"\xff\xda\x00\x08\x01\x01\x00\x00\x3f\x00"


TRAILING = b"\x00\x00\x00\x18ftypmp42" + SCAN_HEADER + b"video frames, no end marker after them"


def noisy_jpeg(**save) -> bytes:
    pixels = (np.random.default_rng(0).random((200, 240, 3)) * 255).astype(np.uint8)
    out = io.BytesIO()
    Image.fromarray(pixels).save(out, "JPEG", quality=90, **save)
    return out.getvalue()


JPEG_KINDS = {"baseline": {}, "progressive": {"progressive": True}, "restart markers": {"restart_marker_blocks": 1}}


@pytest.mark.parametrize("kind", JPEG_KINDS)
def test_the_segment_walk_finds_the_first_end_marker_of_the_jpeg_proper(kind):
    whole = noisy_jpeg(**JPEG_KINDS[kind])
    assert jpeg_end(whole) == len(whole) - 2 and whole[-2:] == b"\xff\xd9"
    assert jpeg_end(whole + TRAILING) == len(whole) - 2                    # trailing data is not the picture's
    assert jpeg_end(whole + b"\xff\xd9" + TRAILING) == len(whole) - 2     # nor a second end marker in it
    for cut in (len(whole) // 3, len(whole) // 2, len(whole) - 200):
        assert jpeg_end(whole[:cut]) is None                              # stops in its picture data
        assert jpeg_end(whole[:cut] + TRAILING) is None                   # (a scan header in the rest changes nothing)
        assert jpeg_end(whole[:cut] + b"\xff\xd9") == cut                 # its end marker put back
        assert jpeg_end(whole[:cut] + b"\xff\xd9" + SCAN_HEADER + b"\xff\xd9") == cut
    assert jpeg_end(b"not a jpeg") is None and jpeg_end(b"") is None


@pytest.mark.parametrize("kind", JPEG_KINDS)
def test_a_whole_photo_with_trailing_data_is_plain_and_a_cut_one_is_named_whatever_follows(tmp_path, kind):
    whole = noisy_jpeg(**JPEG_KINDS[kind])
    photo = tmp_path / "photo.jpg"
    for data in (whole, whole + TRAILING, whole + b"\xff\xd9" + TRAILING):
        photo.write_bytes(data)
        assert inspect_photo(photo) == (None, True)                       # the motion photo was "cut short"
    for cut in (len(whole) // 3, len(whole) - 200):
        for tail, says in [(b"", "no end marker: the file stops in its picture data"),
                           (TRAILING, "no end marker: the file stops in its picture data"),
                           (b"\xff\xd9", "its end marker put back"),
                           (b"\xff\xd9" + SCAN_HEADER + b"\xff\xd9", "its end marker put back")]:   # the bypass
            photo.write_bytes(whole[:cut] + tail)
            problem, usable = inspect_photo(photo)
            assert not usable and problem.startswith("a JPEG cut short") and says in problem, (cut, tail, problem)


def test_a_file_too_large_for_a_photo_is_named_without_being_read(tmp_path, monkeypatch):
    """Round three: read_bytes() of a 6 GB sparse file raised MemoryError and stopped the scan unnamed."""
    huge = tmp_path / "huge.jpg"
    with open(huge, "wb") as f:
        f.truncate(6 * 2**30)   # sparse: no disk space used
    assert finishes_within(5, lambda: inspect_photo(huge)) == ("too large for a photo: over 64 MiB", False)
    photo = tmp_path / "photo.jpg"
    photo.write_bytes(noisy_jpeg())
    assert inspect_photo(photo) == (None, True)
    monkeypatch.setattr(photo_scan, "MAX_PHOTO_BYTES", photo.stat().st_size - 1, raising=False)
    problem, usable = inspect_photo(photo)
    assert problem.startswith("too large for a photo") and not usable    # the cap is what decides
