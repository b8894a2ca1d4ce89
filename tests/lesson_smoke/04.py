# Notebook 04's saved code, pasted into an empty file, on plain inputs: a few tiny shards in the series' record
# format (notebook 02: raw uint8 pixels under "image", an int64 "label"), written here without the series' helpers.
import tempfile
from pathlib import Path


def write_tiny_shards(folder, images, labels, num_shards):
    """Records i, i + num_shards, ... into shard i; returns the files and how many records each holds."""
    files, counts = [], []
    for shard in range(num_shards):
        path, rows = Path(folder) / f"train-{shard:05d}-of-{num_shards:05d}.tfrecord", range(shard, len(images), num_shards)
        with tf.io.TFRecordWriter(str(path)) as writer:
            for i in rows:
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[images[i].tobytes()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(labels[i])])),
                })).SerializeToString())
        files.append(path)
        counts.append(len(rows))
    return files, counts


def parse(serialized):
    features = tf.io.parse_example(serialized, {"image": tf.io.FixedLenFeature([], tf.string),
                                                "label": tf.io.FixedLenFeature([], tf.int64)})
    return tf.reshape(tf.io.decode_raw(features["image"], tf.uint8), (-1, 28, 28)), features["label"]


def epoch(ds):
    """One pass: the batches' sizes, and the records' ids (the labels) with their images, in order."""
    sizes, ids, images = [], [], []
    for x, y in ds:
        assert x.dtype == tf.uint8 and y.dtype == tf.int64 and x.shape[1:] == (28, 28), (x.dtype, y.dtype, x.shape)
        sizes.append(int(x.shape[0]))
        ids.append(y.numpy())
        images.append(x.numpy())
    return sizes, np.concatenate(ids), np.concatenate(images)


n, batch = 203, 32
images = np.random.default_rng(0).integers(0, 256, (n, 28, 28), dtype=np.uint8)
with tempfile.TemporaryDirectory() as folder:
    files, counts = write_tiny_shards(folder, images, np.arange(n), num_shards=5)   # the label is the record's id
    ds = make_train_ds(files, counts, batch, parse, buffer=50)
    assert len(ds) == 7, len(ds)                          # 203 records: six batches of 32 and one of 11
    orders = []
    for _ in range(2):
        sizes, ids, seen = epoch(ds)
        assert sizes == [32] * 6 + [11], sizes
        assert sorted(ids) == list(range(n)), "every record once per epoch"
        assert np.array_equal(seen, images[ids]), "each image arrives with its own label"
        orders.append(ids)
    assert not np.array_equal(*orders), "a new order every epoch"
    assert not np.array_equal(orders[0], np.arange(n)), "shuffled, not in the order written"

    one_file = make_train_ds(files, counts, batch, parse, buffer=1, cycle_length=1, prefetch=False, seed=1)
    assert sorted(epoch(one_file)[1]) == list(range(n))

    too_many = make_train_ds(files, [c + batch for c in counts], batch, parse)   # the files hold fewer
    try:
        epoch(too_many)
        raise AssertionError("an epoch shorter than the counts promise went unnoticed")
    except tf.errors.OpError as error:
        assert "cardinality" in str(error) or "expected" in str(error), error

    cache_file = Path(folder) / "cache" / "train"
    cache_file.parent.mkdir()
    cached = make_cached_ds(files, counts, batch, parse, cache_file, buffer=64)
    first, second = epoch(cached)[1:], epoch(cached)[1:]
    assert sorted(first[0]) == sorted(second[0]) == list(range(n))
    assert all(np.array_equal(seen, images[ids]) for ids, seen in (first, second))
    assert any(p.name.startswith("train") for p in cache_file.parent.iterdir()), "the cache file was written"

    model = article_mlp()
    history = model.fit(ds.map(lambda x, y: (x, y % 10)), epochs=1, verbose=0)
    assert np.isfinite(history.history["loss"][0])
    assert model.predict(images[:3], verbose=0).shape == (3, 10)
print("notebook 04's saved code works on its own")
