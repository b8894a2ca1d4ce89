# Notebook 06's saved code, pasted into an empty file, on plain inputs: a few tiny shards in the series' record
# format (notebook 02: raw uint8 pixels under "image", an int64 "label"), written here without the series' helpers.
import glob
import json
import os
import socket
import tempfile
from pathlib import Path


def write_tiny_shards(folder, images, labels, num_shards):
    """Records i, i + num_shards, ... into shard i; returns the files and how many records each holds."""
    files, counts = [], []
    for shard in range(num_shards):
        path = Path(folder) / f"train-{shard:05d}-of-{num_shards:05d}.tfrecord"
        rows = range(shard, len(images), num_shards)
        with tf.io.TFRecordWriter(str(path)) as writer:
            for i in rows:
                writer.write(tf.train.Example(features=tf.train.Features(feature={
                    "image": tf.train.Feature(bytes_list=tf.train.BytesList(value=[images[i].tobytes()])),
                    "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[int(labels[i])])),
                })).SerializeToString(deterministic=True))
        files.append(str(path))
        counts.append(len(rows))
    return files, counts


def parse(serialized):
    features = tf.io.parse_example(serialized, {"image": tf.io.FixedLenFeature([], tf.string),
                                                "label": tf.io.FixedLenFeature([], tf.int64)})
    return tf.reshape(tf.io.decode_raw(features["image"], tf.uint8), (-1, 28, 28)), features["label"]


def tiny_model():
    inputs = keras.Input(shape=(28, 28), dtype="uint8")
    x = keras.layers.Flatten()(keras.layers.Rescaling(1 / 255)(inputs))
    return keras.Model(inputs, keras.layers.Dense(10, activation="softmax")(x))


def free_port():
    with socket.socket() as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


n = 240
rng = np.random.default_rng(0)
labels = np.arange(n) % 10
images = (rng.integers(0, 60, (n, 28, 28)) + labels[:, None, None] * 19).astype(np.uint8)   # learnable
with tempfile.TemporaryDirectory() as folder:
    files, counts = write_tiny_shards(folder, images, labels, num_shards=4)   # 60 records each

    # train_worker first: its strategy must be made before TensorFlow runs an op. A cluster of one worker.
    os.environ["TF_CONFIG"] = json.dumps({"cluster": {"worker": [f"localhost:{free_port()}"]},
                                          "task": {"type": "worker", "index": 0}})
    report = train_worker(files, counts, parse, tiny_model, epochs=3, global_batch=32)
    assert report["index"] == 0 and report["replicas"] >= 1, report
    assert report["steps"] == 3 * (60 * 4 // 32) and report["samples"] == report["steps"] * 32, report
    assert len(report["loss"]) == 3 and report["loss"][-1] < report["loss"][0], report["loss"]
    assert len(report["weights_sha256"]) == 64

    # file_sharded_dataset: steps from the smallest share, global batches, and too few files refused.
    dataset, steps = file_sharded_dataset(files, counts, parse, global_batch=32, workers=2, buffer=50)
    assert steps == 60 * 2 // 16, steps
    x, y = next(iter(dataset))
    assert x.shape == (32, 28, 28) and x.dtype == tf.uint8 and y.dtype == tf.int64
    seen = {bytes(image.numpy().tobytes()) for image in x}
    assert seen <= {image.tobytes() for image in images}, "every image comes from the files"
    try:
        file_sharded_dataset(files[:1], counts[:1], parse, 32, workers=2)
        raise AssertionError("one file shared by two workers went unnoticed")
    except ValueError as error:
        assert "1 shards cannot be shared by file among 2 workers" in str(error), error

    # replicated_training on one device: the step lowers the loss of the batch it trains on.
    strategy = tf.distribute.MirroredStrategy(["/cpu:0"])
    model, train_step = replicated_training(strategy, tiny_model, global_batch=32)
    batch = next(iter(strategy.experimental_distribute_dataset(
        tf.data.Dataset.from_tensors((images[:32], labels[:32])))))
    losses = [float(train_step(batch)) for _ in range(20)]
    assert losses[-1] < losses[0], losses

    # A dispatcher and a worker of the tf.data service: distributed_epoch gives every element once.
    dispatcher = start_dispatcher(0)
    worker = start_worker(dispatcher.target.removeprefix("grpc://"))
    served = tf.data.Dataset.range(100).apply(
        tf.data.experimental.service.distribute("distributed_epoch", service=dispatcher.target))
    assert sorted(served.as_numpy_iterator()) == list(range(100))
    worker.stop()
    dispatcher.stop()

    # records_digest: the same records in any order and any split into files.
    assert records_digest(files) == records_digest(files[::-1])
    assert records_digest(files[:2]) != records_digest(files)

    # The Beam conversion (where Apache Beam is installed): the same records as the shards above.
    try:
        import apache_beam as beam
    except ImportError:
        beam = None
        print("Apache Beam is not installed: its conversion was not run")
    if beam is not None:
        np.save(Path(folder) / "images.npy", images)
        np.save(Path(folder) / "labels.npy", labels)
        with beam.Pipeline() as pipeline:
            build_conversion(pipeline, Path(folder) / "images.npy", Path(folder) / "labels.npy",
                             str(Path(folder) / "beam" / "train"), num_shards=3, chunk=50)
        written = sorted(glob.glob(str(Path(folder) / "beam" / "train-*-of-00003.tfrecord")))
        assert len(written) == 3, written
        assert records_digest(written) == records_digest(files) == (n, records_digest(files)[1])
print("notebook 06's saved code works on its own")
