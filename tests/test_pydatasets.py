import warnings

import keras
import numpy as np
import pytest

from helpers.lessons.pydataset_autoencoder import ArrayImageBatches, PngBatches, article_autoencoder, read_png
from helpers.storage import png_folder as P
from helpers.storage.packed_images import export_packed_uint8
from helpers.storage.png_folder import PngFolderError


def make_folder(tmp_path, n=25, seed=0):
    """A PNG folder of `n` random images; returns the images, labels and checked paths."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
    labels = rng.integers(0, 10, n)
    P.export_png_folder(images, labels, tmp_path, "tr", progress=False)
    paths, _ = P.check_png_folder(tmp_path, "tr")
    return images, labels, paths


def all_indices(dataset):
    return np.concatenate([dataset.batch_indices(i) for i in range(len(dataset))])


def test_lengths_and_the_last_partial_batch(tmp_path):
    images, _, paths = make_folder(tmp_path, n=25)
    kept = PngBatches(paths, batch_size=10)
    assert len(kept) == 3 and [len(kept[i][0]) for i in range(3)] == [10, 10, 5]
    dropped = ArrayImageBatches(images, batch_size=10, drop_remainder=True)
    assert len(dropped) == 2 and len(all_indices(dropped)) == 20
    with pytest.raises(IndexError):
        kept.batch_indices(3)
    first_ten = PngBatches(paths[:10], batch_size=4, shuffle=False)
    assert len(first_ten) == 3 and np.allclose(np.concatenate([first_ten[i][0] for i in range(3)]) * 255, images[:10])
    with pytest.raises(ValueError, match="batch_size"):
        PngBatches(paths, batch_size=0)


def test_every_image_once_per_epoch_in_a_new_order(tmp_path):
    images, _, paths = make_folder(tmp_path, n=25)
    dataset = PngBatches(paths, batch_size=4, seed=1)
    first = all_indices(dataset)
    assert sorted(first) == list(range(25))
    dataset.on_epoch_end()
    second = all_indices(dataset)
    assert sorted(second) == list(range(25)) and not np.array_equal(first, second)
    assert np.array_equal(all_indices(ArrayImageBatches(images, 4, shuffle=False)), np.arange(25))


def test_batches_are_input_target_pairs_scaled_to_unit_range(tmp_path):
    images, _, paths = make_folder(tmp_path, n=9)
    for dataset in (PngBatches(paths, batch_size=4, seed=2), ArrayImageBatches(images, 4, seed=2)):
        x, y = dataset[1]
        assert x is y and x.dtype == np.float32 and x.shape == (4, 32, 32, 3)
        assert np.allclose(x * 255, images[np.sort(dataset.batch_indices(1))])


def test_labels_when_given_are_the_targets_of_their_own_images(tmp_path):
    images, labels, paths = make_folder(tmp_path, n=11)
    png, array = PngBatches(paths, 4, labels=labels, seed=5), ArrayImageBatches(images, 4, labels=labels, seed=5)
    for i in range(len(png)):
        (xp, yp), (xa, ya) = png[i], array[i]
        indices = np.sort(png.batch_indices(i))
        assert np.array_equal(xp, xa) and np.array_equal(yp, labels[indices]) and np.array_equal(ya, yp)
    with pytest.raises(ValueError, match="3 labels for 11 images"):
        PngBatches(paths, 4, labels=labels[:3])


def test_memory_mapped_file_gives_the_same_batches_as_the_array(tmp_path):
    images, _, _ = make_folder(tmp_path / "png", n=30)
    packed = np.load(export_packed_uint8(images, tmp_path / "packed.npy"), mmap_mode="r")
    a, b = ArrayImageBatches(images, 8, seed=3), ArrayImageBatches(packed, 8, seed=3)
    for i in range(len(a)):
        assert np.array_equal(a[i][0], b[i][0])


def test_worker_settings_reach_keras(tmp_path):
    _, _, paths = make_folder(tmp_path, n=5)
    dataset = PngBatches(paths, batch_size=2, read=P.load_png, workers=2, use_multiprocessing=True,
                         max_queue_size=3)
    assert (dataset.workers, dataset.use_multiprocessing, dataset.max_queue_size) == (2, True, 3)


def test_worker_processes_are_refused_with_the_tensorflow_reader(tmp_path):
    # A forked worker that runs TensorFlow ops can hang for good (seen in notebook 03: a child stuck on a
    # TensorFlow mutex its parent held when it forked), so processes need a reader without TensorFlow.
    _, _, paths = make_folder(tmp_path, n=5)
    with pytest.raises(ValueError, match="forked copies"):
        PngBatches(paths, batch_size=2, workers=2, use_multiprocessing=True)
    assert PngBatches(paths, batch_size=2, workers=2).workers == 2   # threads: the reader is fine


def test_a_reader_of_ones_own_is_used(tmp_path):
    _, _, paths = make_folder(tmp_path, n=5)
    seen = []

    def read(path, shape):
        seen.append(path)
        return np.full(shape, 51, np.uint8)

    x, _ = PngBatches(paths, batch_size=5, read=read, shuffle=False)[0]
    assert sorted(seen) == sorted(map(str, paths)) and np.allclose(x, 0.2)


@pytest.mark.parametrize("damage, message", [
    ("truncated", "tr_00002.png is not a readable PNG file"),
    ("jpeg", "tr_00002.png is not a PNG file"),
    ("small", r"tr_00002.png holds a \(16, 16, 3\) image"),
])
def test_bad_file_raises_naming_it_when_its_batch_is_read(tmp_path, damage, message):
    _, _, paths = make_folder(tmp_path, n=6)
    bad = tmp_path / "tr_00002.png"
    if damage == "truncated":
        bad.write_bytes(bad.read_bytes()[:70])
    else:
        P.Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(bad, format="JPEG" if damage == "jpeg" else "PNG")
    dataset = PngBatches(paths, batch_size=6)
    with pytest.raises(ValueError, match=message):
        dataset[0]


def test_without_bad_files_warns_for_each_and_counts(tmp_path):
    images, labels, paths = make_folder(tmp_path, n=8)
    (tmp_path / "tr_00002.png").write_bytes((tmp_path / "tr_00002.png").read_bytes()[:70])
    P.Image.fromarray(np.zeros((16, 16, 3), np.uint8)).save(tmp_path / "tr_00005.png")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        kept, kept_labels, skipped = P.without_bad_files(paths, labels, read_png)
    messages = [str(w.message) for w in caught]
    assert any("tr_00002.png" in m for m in messages) and any("tr_00005.png" in m for m in messages)
    assert messages[-1].startswith("skipped 2 of 8 files")
    assert [p.name for p, _ in skipped] == ["tr_00002.png", "tr_00005.png"]
    assert len(kept) == 6 and kept_labels.tolist() == np.delete(labels, [2, 5]).tolist()
    dataset = PngBatches(kept, batch_size=4, labels=kept_labels, shuffle=False)
    x = np.concatenate([dataset[i][0] for i in range(len(dataset))])
    assert np.allclose(x * 255, np.delete(images, [2, 5], axis=0))


def test_label_mismatch_stops_before_training(tmp_path):
    make_folder(tmp_path, n=5)
    (tmp_path / "tr_label.txt").write_text("1\n2\n3\n4\n5\n6\n")
    with pytest.raises(PngFolderError, match="missing: tr_00005.png"):
        P.check_png_folder(tmp_path, "tr")


def test_autoencoder_trains_from_png_files_with_worker_processes(tmp_path):
    _, _, paths = make_folder(tmp_path, n=40)
    keras.utils.set_random_seed(0)
    model = article_autoencoder()
    assert model.output_shape == (None, 32, 32, 3)
    kinds = [type(layer).__name__ for layer in model.layers]
    assert kinds.count("MaxPooling2D") == 3 and kinds.count("UpSampling2D") == 3
    assert model.layers[-1].activation.__name__ == "sigmoid"
    dataset = PngBatches(paths, batch_size=8, read=P.load_png, workers=2, use_multiprocessing=True)
    history = model.fit(dataset, epochs=2, verbose=0)
    assert len(history.history["loss"]) == 2 and np.isfinite(history.history["loss"]).all()
