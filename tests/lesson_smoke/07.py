# Notebook 07's saved code, pasted into an empty file, on plain inputs: a few tiny photos made here with
# tf.io.encode_jpeg (and one PNG named .jpg), converted to both kinds of records with the lesson's record makers,
# written with a plain tf.io.TFRecordWriter, and read back by the lesson's pipelines.
import tempfile
from pathlib import Path

SIZE, CLASSES = 16, 3


def tiny_photo(path, label, height, width, png=False):
    """A photo whose pixels say its class: every pixel of class k is (80 k, 80 k, 80 k) plus a little noise."""
    noise = np.random.default_rng(label * 1000 + height).integers(0, 8, (height, width, 3))
    pixels = tf.constant((80 * label + noise).astype(np.uint8))
    data = tf.io.encode_png(pixels) if png else tf.io.encode_jpeg(pixels, quality=95)
    tf.io.write_file(str(path), data)
    return path


with tempfile.TemporaryDirectory() as folder:
    folder = Path(folder)
    photos = [tiny_photo(folder / f"{i}.jpg", i % CLASSES, 20 + 9 * i, 70 - 5 * i, png=(i == 4))
              for i in range(9)]
    labels = [i % CLASSES for i in range(9)]
    assert jpeg_bytes(photos[4])[:3] == b"\xff\xd8\xff", "the PNG named .jpg comes back as a JPEG"
    assert resized_pixels(jpeg_bytes(photos[8]), SIZE).shape == (SIZE, SIZE, 3)

    for kind, make in (("resized", lambda p, y: resized_record(p, y, SIZE)), ("original", original_record)):
        for shard in range(2):
            with tf.io.TFRecordWriter(str(folder / f"{kind}-{shard}.tfrecord")) as writer:
                for photo, label in list(zip(photos, labels))[shard::2]:
                    writer.write(make(photo, label))
    resized = [folder / f"resized-{shard}.tfrecord" for shard in range(2)]
    original = [folder / f"original-{shard}.tfrecord" for shard in range(2)]

    def epoch(ds):
        images, classes = zip(*[(x.numpy(), y.numpy()) for x, y in ds])
        images, classes = np.concatenate(images), np.concatenate(classes)
        assert images.dtype == np.float32 and images.shape[1:] == (SIZE, SIZE, 3), (images.dtype, images.shape)
        assert classes.dtype == np.int32 and sorted(classes) == sorted(labels), classes
        for image, label in zip(images, classes):   # each photo arrives with its own label
            assert abs(image.mean() - 80 * label) < 12, (image.mean(), label)
        return images, classes

    epoch(read_photos(resized, 4, SIZE))
    shuffled = [epoch(read_photos(resized, 4, SIZE, shuffle=True, shuffle_buffer=4, parallel_reads=1))[1]
                for _ in range(3)]
    assert any(not np.array_equal(shuffled[0], order) for order in shuffled[1:]), "a new order every epoch"
    epoch(read_photos(resized, 4, SIZE, augment=augmentation(seed=1)))
    decoded, _ = epoch(read_originals(original, 4, SIZE))
    epoch(read_originals(original, 4, SIZE, crop=True))
    cached = read_originals(original, 4, SIZE, cache=str(folder / "cache"))
    assert np.array_equal(epoch(cached)[0], epoch(cached)[0]), "the second epoch reads the cache back"

    train = read_photos(resized, 4, SIZE, records=9, shuffle=True)
    assert len(train) == 3, len(train)   # the length fit sees: batches of 4, 4 and 1
    try:
        epoch(read_photos(resized, 4, SIZE, records=13))   # a wrong count: 4 batches promised, 3 read
        raise AssertionError("a wrong record count went unnoticed")
    except tf.errors.FailedPreconditionError:
        pass
    model = photo_classifier((SIZE, SIZE, 3), CLASSES, augment=True)
    model.fit(train, epochs=1, verbose=0)
    assert model.predict(read_photos(resized, 4, SIZE), verbose=0).shape == (9, CLASSES)
