# Notebook 03's saved code, pasted into an empty file, on plain inputs: a few tiny PNG files written here with
# tf.io.encode_png, read by the PyDatasets and the tf.data pipeline, and the autoencoder trained from them.
import tempfile
from pathlib import Path


def epoch_of(dataset):
    """One pass: each batch's size, and every (image, target) it served, as uint8 images."""
    sizes, pairs = [], []
    for i in range(len(dataset)):
        x, y = dataset[i]
        assert x.dtype == np.float32 and x.shape[1:] == (32, 32, 3) and 0 <= x.min() and x.max() <= 1, x.shape
        sizes.append(len(x))
        pairs += list(zip(np.round(x * 255).astype(np.uint8), y))
    return sizes, pairs


n = 23
images = np.random.default_rng(0).integers(0, 256, (n, 32, 32, 3), dtype=np.uint8)
labels = np.arange(n) * 3   # each image's own label, to find it again
with tempfile.TemporaryDirectory() as folder:
    paths = [Path(folder) / f"img_{i:02d}.png" for i in range(n)]
    for path, image in zip(paths, images):
        path.write_bytes(tf.io.encode_png(image).numpy())

    # PngBatches from a list of paths, with labels: 23 images in batches of 5, the last batch of 3 kept;
    # every image once per epoch, with its own label, in a new order after on_epoch_end.
    dataset = PngBatches(paths, 5, labels=labels, seed=1)
    assert len(dataset) == 5, len(dataset)
    orders = []
    for _ in range(2):
        sizes, pairs = epoch_of(dataset)
        assert sizes == [5, 5, 5, 5, 3], sizes
        assert sorted(int(label) for _, label in pairs) == labels.tolist(), "every image once per epoch"
        assert all(np.array_equal(image, images[label // 3]) for image, label in pairs), "images keep their labels"
        orders.append([int(label) for _, label in pairs])
        dataset.on_epoch_end()
    assert orders[0] != orders[1], "a new order every epoch"
    assert len(PngBatches(paths, 5, drop_remainder=True)) == 4

    # Without labels the target is the input itself (an autoencoder); the array version serves the same batches.
    x, y = PngBatches(paths, 5, shuffle=False)[4]
    assert x is y and len(x) == 3 and np.array_equal(np.round(x * 255), images[20:])
    from_files, from_array = PngBatches(paths, 4, seed=7), ArrayImageBatches(images, 4, seed=7)
    assert all(np.array_equal(from_files[i][0], from_array[i][0]) for i in range(len(from_array)))
    # Worker processes are forked copies, where TensorFlow can hang: refused with the TensorFlow reader,
    # taken with a reader of one's own; any reader is called as read(path, shape).
    try:
        PngBatches(paths, 4, workers=3, use_multiprocessing=True)
    except ValueError as error:
        assert "forked" in str(error), str(error)
    else:
        raise AssertionError("worker processes were taken with the TensorFlow reader")
    grey = PngBatches(paths, 4, read=lambda path, shape: np.full(shape, 51, np.uint8), workers=3,
                      use_multiprocessing=True)
    assert grey.workers == 3 and np.allclose(grey[0][0], 0.2)

    # The tf.data pipeline: (x, x) pairs, every image once, the last batch kept.
    batches = list(tf_dataset_from_pngs(paths, 5, seed=0).as_numpy_iterator())
    assert [len(x) for x, _ in batches] == [5, 5, 5, 5, 3]
    assert all(np.array_equal(x, y) for x, y in batches)
    read_back = sorted(np.round(x * 255).astype(np.uint8).tobytes() for batch, _ in batches for x in batch)
    assert read_back == sorted(image.tobytes() for image in images)

    # The autoencoder trains from the files, with two worker threads.
    model = article_autoencoder()
    assert model.output_shape == (None, 32, 32, 3)
    history = model.fit(PngBatches(paths, 8, workers=2), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])

    # A bad file: the error names it, in the PyDataset and in the tf.data pipeline.
    paths[7].write_bytes(paths[7].read_bytes()[:60])                     # truncated
    paths[11].write_bytes(tf.io.encode_jpeg(images[11]).numpy())         # a JPEG under a .png name
    paths[15].write_bytes(tf.io.encode_png(images[15][:28]).numpy())     # another size
    for i, problem in [(7, "not a readable PNG"), (11, "not a PNG file"), (15, "holds a (28, 32, 3) image")]:
        try:
            read_png(paths[i])
        except ValueError as error:
            assert paths[i].name in str(error) and problem in str(error), str(error)
        else:
            raise AssertionError(f"{paths[i].name} was read")
        try:
            list(tf_dataset_from_pngs([paths[i]], 1))
        except tf.errors.InvalidArgumentError as error:
            assert paths[i].name in str(error), str(error)
        else:
            raise AssertionError(f"tf.data read {paths[i].name}")
print("notebook 03's lesson code works on its own")
