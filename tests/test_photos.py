"""The photo folder of notebook 07 (helpers.data.photos) and the notebook's scan of it (inspect_photo)."""
import numpy as np
from PIL import Image

from helpers.data.photos import SIDES, SOURCES, make_photo_folder, plant_bad_files
from helpers.lessons.capstone_photos import jpeg_bytes, resized_pixels
from helpers.storage.photo_scan import inspect_photo, scan_photos


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
