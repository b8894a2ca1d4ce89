import os

import numpy as np
import pytest
from PIL import Image

from helpers.lessons.pydataset_autoencoder import read_png, tf_dataset_from_pngs
from helpers.storage.packed_images import export_packed_uint8
from helpers.storage import png_folder as P
from helpers.storage.files import fingerprint_arrays, temporaries_of
from helpers.storage.png_folder import PngFolderError
from tests.conftest import finishes_within, png_folder


def make_images(n, seed=0):
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8), rng.integers(0, 10, n)


def test_export_writes_the_articles_layout(tmp_path):
    images, labels = make_images(12)
    folder = P.export_png_folder(images, labels, tmp_path / "dataset" / "train", "tr", progress=False)
    names = sorted(p.name for p in folder.glob("tr_*.png"))
    assert names == [f"tr_{i:05d}.png" for i in range(12)]
    assert (folder / "tr_label.txt").read_text().split() == [str(v) for v in labels]
    paths, got_labels = P.check_png_folder(folder, "tr")
    assert np.array_equal(np.stack([P.load_png(p) for p in paths]), images)
    assert np.array_equal(got_labels, labels)
    assert np.array_equal(P.read_labels(folder, "tr"), labels)


def test_interrupted_export_resumes_and_skips_what_is_complete(tmp_path, monkeypatch):
    images, labels = make_images(20)
    folder = tmp_path / "train"
    real_write = P.atomic_write_bytes
    calls = {"n": 0}

    def dies_after_eight(path, data, **options):
        if calls["n"] == 8:
            (path.parent / f"{path.name}.deadbeef.partial").write_bytes(data[:50])  # as if killed mid-write
            raise KeyboardInterrupt
        calls["n"] += 1
        real_write(path, data, **options)

    monkeypatch.setattr(P, "atomic_write_bytes", dies_after_eight)
    with pytest.raises(KeyboardInterrupt):
        P.export_png_folder(images, labels, folder, "tr", progress=False)
    assert len(list(folder.glob("tr_*.png"))) == 8
    assert not (folder / "tr_label.txt").exists()  # written last: its absence means unfinished
    with pytest.raises(PngFolderError, match="tr_label.txt is missing"):
        P.check_png_folder(folder, "tr")
    stamps = {p.name: p.stat().st_mtime_ns for p in folder.glob("tr_*.png")}

    monkeypatch.setattr(P, "atomic_write_bytes", real_write)
    (folder / "tr_00003.png").write_bytes((folder / "tr_00003.png").read_bytes()[:40])  # damaged meanwhile
    P.export_png_folder(images, labels, folder, "tr", progress=False)
    assert not list(folder.glob("*.partial"))
    rewritten = {p.name for p in folder.glob("tr_*.png") if stamps.get(p.name) != p.stat().st_mtime_ns}
    assert rewritten == {"tr_00003.png"} | {f"tr_{i:05d}.png" for i in range(8, 20)}
    paths, _ = P.check_png_folder(folder, "tr")
    assert np.array_equal(np.stack([P.load_png(p) for p in paths]), images)


def test_export_from_other_data_is_refused_or_replaced(tmp_path):
    first, labels = make_images(5, seed=1)
    second, _ = make_images(5, seed=2)
    P.export_png_folder(first, labels, tmp_path, "tr", fingerprint=fingerprint_arrays(first), progress=False)
    with pytest.raises(PngFolderError, match="exported from other data"):
        P.export_png_folder(second, labels, tmp_path, "tr", fingerprint=fingerprint_arrays(second), progress=False)
    P.export_png_folder(second, labels, tmp_path, "tr", fingerprint=fingerprint_arrays(second), overwrite=True, progress=False)
    assert np.array_equal(P.load_png(tmp_path / "tr_00000.png"), second[0])


def test_label_file_that_does_not_match_the_images_is_an_error_before_training(tmp_path):
    images, labels = make_images(6)
    P.export_png_folder(images, labels, tmp_path, "tr", progress=False)
    (tmp_path / "tr_00004.png").unlink()
    with pytest.raises(PngFolderError, match=r"has 6 labels but .* has 5 images; missing: tr_00004.png"):
        P.check_png_folder(tmp_path, "tr")
    (tmp_path / "tr_label.txt").write_text("1\n2\n3\n")
    with pytest.raises(PngFolderError, match=r"2 images beyond the 3 labels in tr_label.txt \(e.g. tr_00003.png\)"):
        P.check_png_folder(tmp_path, "tr")
    (tmp_path / "tr_label.txt").write_text("1\ncat\n")
    with pytest.raises(PngFolderError, match=r"tr_label.txt, line 2: 'cat' is not a label"):
        P.check_png_folder(tmp_path, "tr")


def test_label_file_written_by_numpy_savetxt_is_read(tmp_path):
    np.savetxt(tmp_path / "te_label.txt", np.array([3, 1, 4]))
    assert P.read_labels(tmp_path, "te").tolist() == [3, 1, 4]


@pytest.mark.parametrize("damage, message", [
    ("missing", "is missing"),
    ("truncated", "not a readable image"),
    ("text", "not a readable image"),
    ("jpeg", "is a JPEG file, not a PNG"),
    ("wrong size", r"is uint8 \(28, 28, 3\), expected uint8 \(32, 32, 3\)"),
    ("grayscale", r"is uint8 \(32, 32\), expected"),
])
def test_bad_image_files_are_named(tmp_path, damage, message):
    path = tmp_path / "tr_00000.png"
    Image.fromarray(make_images(1)[0][0]).save(path)
    if damage == "missing":
        path.unlink()
    elif damage == "truncated":
        path.write_bytes(path.read_bytes()[:60])
    elif damage == "text":
        path.write_text("not an image")
    elif damage == "jpeg":
        Image.fromarray(make_images(1)[0][0]).save(path, format="JPEG")
    elif damage == "wrong size":
        Image.fromarray(np.zeros((28, 28, 3), np.uint8)).save(path)
    else:
        Image.fromarray(np.zeros((32, 32), np.uint8)).save(path)
    with pytest.raises(PngFolderError, match=message) as err:
        P.load_png(path)
    assert str(path) in str(err.value)


def test_packed_file_reads_back_as_a_memory_map(tmp_path):
    images, _ = make_images(9)
    path = export_packed_uint8(images, tmp_path / "train.npy", chunk=4)
    packed = np.load(path, mmap_mode="r")
    assert isinstance(packed, np.memmap) and np.array_equal(packed, images)
    assert not list(tmp_path.glob("*.partial")) and temporaries_of(path) == []


def test_tf_data_pipeline_reads_the_same_images(tmp_path):
    images, labels = make_images(7)
    P.export_png_folder(images, labels, tmp_path, "tr", progress=False)
    paths, _ = P.check_png_folder(tmp_path, "tr")
    batches = list(tf_dataset_from_pngs(paths, batch_size=3, shuffle=False).as_numpy_iterator())
    assert [len(x) for x, _ in batches] == [3, 3, 1]
    got = np.concatenate([x for x, _ in batches])
    assert sorted(map(bytes, np.round(got * 255).astype(np.uint8))) == sorted(map(bytes, images))
    assert all(np.array_equal(x, y) for x, y in batches)


@pytest.mark.parametrize("planted", ["tr_export.json", "tr_export.json.partial", "tr_00000.png", "tr_label.txt"])
def test_png_export_never_writes_through_a_planted_symlink(tmp_path, planted):
    victim = tmp_path / "victim.txt"
    victim.write_text("keep me")
    folder = tmp_path / "train"
    folder.mkdir()
    (folder / planted).symlink_to(victim)
    images = np.zeros((2, 32, 32, 3), np.uint8)
    try:
        P.export_png_folder(images, [1, 2], folder, "tr", progress=False)
    except PngFolderError:
        pass  # refused: the folder holds something this export did not write
    P.export_png_folder(images, [1, 2], folder, "tr", progress=False, overwrite=True)
    assert victim.read_text() == "keep me"
    assert not (folder / planted).is_symlink() or planted.endswith(".partial")


def test_png_reexport_of_other_data_without_fingerprint_is_refused(tmp_path):
    first, labels = png_folder(tmp_path)
    other = 255 - first
    with pytest.raises(PngFolderError, match="exported from other data"):
        P.export_png_folder(other, (labels + 1) % 10, tmp_path, "tr", progress=False)
    P.export_png_folder(other, (labels + 1) % 10, tmp_path, "tr", progress=False, overwrite=True)
    paths, got_labels = P.check_png_folder(tmp_path, "tr")
    assert np.array_equal(np.stack([P.load_png(p) for p in paths]), other)
    assert np.array_equal(got_labels, (labels + 1) % 10)


def test_png_export_into_a_folder_of_foreign_pngs_is_refused(tmp_path):
    Image.fromarray(np.zeros((32, 32, 3), np.uint8)).save(tmp_path / "tr_00000.png")
    with pytest.raises(PngFolderError, match="other data"):
        P.export_png_folder(np.ones((2, 32, 32, 3), np.uint8), [1, 2], tmp_path, "tr", progress=False)


def test_a_fifo_among_the_pngs_does_not_hang_the_check_the_skipping_or_the_export(tmp_path):
    images, labels = png_folder(tmp_path)
    (tmp_path / "tr_00001.png").unlink()
    os.mkfifo(tmp_path / "tr_00001.png")
    # Any reader would wait forever on the FIFO: the check before reading refuses it, naming it.
    with pytest.raises(PngFolderError, match="tr_00001.png is a FIFO"):
        finishes_within(30, lambda: P.check_png_folder(tmp_path, "tr"))
    paths = [tmp_path / P.image_name("tr", i) for i in range(len(labels))]
    with pytest.warns(UserWarning, match="tr_00001.png is a FIFO"):
        kept, _, _ = finishes_within(30, lambda: P.without_bad_files(paths, labels, read_png))
    assert len(kept) == 5
    finishes_within(30, lambda: P.export_png_folder(images, labels, tmp_path, "tr", progress=False))
    assert np.array_equal(P.load_png(tmp_path / "tr_00001.png"), images[1])


def test_overwriting_one_png_export_keeps_an_export_whose_prefix_starts_the_same(tmp_path):
    from helpers.storage.png_folder import check_png_folder, export_png_folder

    big = np.zeros((4, 32, 32, 3), np.uint8)
    export_png_folder(big, [1, 2, 3, 4], tmp_path, "tr_big", progress=False)
    export_png_folder(big[:2] + 1, [5, 6], tmp_path, "tr", progress=False)      # no refusal: tr_big is not "tr"
    export_png_folder(big[:3] + 2, [7, 8, 9], tmp_path, "tr", overwrite=True, progress=False)
    paths, labels = check_png_folder(tmp_path, "tr_big")
    assert len(paths) == 4 and labels.tolist() == [1, 2, 3, 4]
    assert check_png_folder(tmp_path, "tr")[1].tolist() == [7, 8, 9]
