# Run right after notebook 02's `#@save` cells, pasted into a fresh file (tests/test_lesson_code.py): the writer
# and the reader round-trip images and labels through TFRecord files in a temporary folder.
import os
import tempfile

rng = np.random.default_rng(0)
images = rng.integers(0, 256, size=(10, 4, 3), dtype=np.uint8)
labels = np.array([3, 1, 4, 1, 5, 9, 2, 6, 5, 3])
with tempfile.TemporaryDirectory() as folder:
    files = write_tfrecords(images, labels, folder, "train", num_shards=3)
    assert [os.path.basename(f) for f in files] == [f"train-0000{i}-of-00003.tfrecord" for i in range(3)]
    assert not [name for name in os.listdir(folder) if name.endswith(".partial")]
    batches = list(read_tfrecords(files, batch_size=4, shape=(4, 3)).as_numpy_iterator())
    assert [len(y) for _, y in batches] == [4, 4, 2]            # file order, the last batch kept
    assert np.array_equal(np.concatenate([x for x, _ in batches]), images)
    assert np.array_equal(np.concatenate([y for _, y in batches]), labels)
    colour = rng.integers(0, 256, size=(5, 2, 2, 3), dtype=np.uint8)   # another shape: RGB
    files = write_tfrecords(colour, labels[:5], folder, "rgb", num_shards=2)
    (got, got_labels), = read_tfrecords(files, batch_size=8, shape=(2, 2, 3)).as_numpy_iterator()
    assert np.array_equal(got, colour) and np.array_equal(got_labels, labels[:5])
    again = write_tfrecords(colour, labels[:5], os.path.join(folder, "again"), "rgb", num_shards=2)
    assert [open(a, "rb").read() for a in again] == [open(f, "rb").read() for f in files]   # same bytes
print("02: write_tfrecords and read_tfrecords round-trip images and labels")
