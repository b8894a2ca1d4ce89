# Notebook 08's saved code, pasted into an empty file, on plain inputs: small arrays trained with the exact recipe,
# interrupted and resumed (the same ids, in the same order, to the same weights as a run never stopped), a resume
# with another batch size refused, the index shuffle, and Grain over ArrayRecord files written
# in a temporary folder (by ArrayRecord's own writer, which Grain installs).
import tempfile
from pathlib import Path

from array_record.python.array_record_module import ArrayRecordWriter

tf.config.experimental.enable_op_determinism()   # bit-equal weights need the same result from every op
n, batch, epochs = 320, 32, 2                    # 10 batches an epoch
rng = np.random.default_rng(0)
x = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
y = rng.integers(0, 10, n).astype(np.int64)


class Interrupted(Exception):
    pass


class StopAfter(keras.callbacks.Callback):   # an interruption: an exception right after batch `at`
    def __init__(self, at):
        super().__init__()
        self.at, self.batches = at, 0

    def on_train_batch_end(self, batch, logs=None):
        self.batches += 1
        if self.batches == self.at:
            raise Interrupted


def run(folder, stop_at=None, **settings):
    model = id_mlp(2 * epochs * n)
    options = dict(epochs=epochs, batch_size=batch, save_every=4) | settings
    train_exact(model, x, y, folder, callbacks=[StopAfter(stop_at)] if stop_at else [], **options)
    return model


with tempfile.TemporaryDirectory() as folder:
    folder = Path(folder)
    ids = np.concatenate([b["id"].numpy() for b, _ in index_batches(x, y, batch, 0, 2 * 10)])
    assert all(sorted(e.tolist()) == list(range(n)) for e in ids.reshape(2, n)), "every id once an epoch"
    assert not np.array_equal(*ids.reshape(2, n)), "a new order every epoch"

    reference = run(folder / "reference")
    assert len(seen_ids(reference)) == epochs * n
    try:
        run(folder / "killed", stop_at=14)                   # mid-epoch 2, two batches past a checkpoint
        raise AssertionError("the interruption did not happen")
    except Interrupted:
        pass
    resumed = run(folder / "killed")                          # a new model, resumed from the checkpoint
    assert np.array_equal(seen_ids(resumed), seen_ids(reference)), "the same ids in the same order"
    assert all(np.array_equal(a, b) for a, b in zip(reference.get_weights(), resumed.get_weights()))

    try:
        run(folder / "killed", batch_size=2 * batch)
        raise AssertionError("a resume with another batch size was accepted")
    except ValueError as error:
        assert "batch_size was 32, now 64" in str(error), error
    with lock_folder(folder / "killed"):
        try:
            run(folder / "killed")
            raise AssertionError("a second run in a locked folder was accepted")
        except RuntimeError as error:
            assert "another run" in str(error), error

    backup = id_mlp(2 * epochs * n)
    train_with_backup(backup, x, y, folder / "backup", epochs=1, batch_size=batch, save_every=4)
    assert sorted(seen_ids(backup).tolist()) == list(range(n))

    order = grain_order(n)
    assert sorted(order.tolist()) == list(range(n)) and not np.array_equal(order, np.arange(n))

    files, samples = [folder / f"train-{i}.array_record" for i in range(2)], np.array_split(np.arange(n), 2)
    for path, part in zip(files, samples):                   # a record: the label's 8 bytes, then the image
        writer = ArrayRecordWriter(str(path), "group_size:1")
        for i in part:
            writer.write(int(y[i]).to_bytes(8, "little") + x[i].tobytes())
        writer.close()
    source = grain.sources.ArrayRecordDataSource(files)
    image, label = decode_record(source[200], (28, 28), np.uint8)
    assert np.array_equal(image, x[200]) and label == y[200]
    per_record = grain_batches(source, (28, 28), np.uint8, batch, epochs=2)
    labels = np.concatenate([b[1] for b in per_record.to_iter_dataset()])
    assert len(per_record) == 20 and sorted(labels[:n].tolist()) == sorted(y.tolist())
    assert not np.array_equal(labels[:n], labels[n:]), "each epoch reshuffled"

    read = grain_batch_reads(source, (28, 28), np.uint8, batch, epochs=2)
    first = epoch_order(n, 1, 0)[:batch]
    assert np.array_equal(read[0][0], x[first]) and np.array_equal(read[0][1], y[first])
    assert np.array_equal(read[15][1], list(read[15:].to_iter_dataset())[0][1]), "resumed at batch 15"

    block_files = [folder / "blocks.array_record"]            # blocks of 8 samples back to back
    writer = ArrayRecordWriter(str(block_files[0]), "group_size:1")
    for start in range(0, n, 8):
        writer.write(b"".join(int(y[i]).to_bytes(8, "little") + x[i].tobytes() for i in range(start, start + 8)))
    writer.close()
    blocks = grain.sources.ArrayRecordDataSource(block_files)
    images, labels = grain_batch_reads(blocks, (28, 28), np.uint8, batch, 1, block_size=8)[0]
    kept = np.concatenate([np.arange(b * 8, b * 8 + 8) for b in epoch_order(n // 8, 1, 0)[:4]])
    assert sorted(labels.tolist()) == sorted(y[kept].tolist()) and len(images) == batch
    assert sorted(i.tobytes() for i in images) == sorted(i.tobytes() for i in x[kept])
    try:
        grain_batch_reads(blocks, (28, 28), np.uint8, 30, 1, block_size=8)
        raise AssertionError("a batch of 30 from blocks of 8 was accepted")
    except ValueError as error:
        assert "whole number of blocks" in str(error), error

    loaders = backend_loaders(x, y, source, (28, 28), np.uint8, batch)
    first_batches = {name: next(iter(make())) for name, make in loaders.items()}
    assert np.array_equal(np.asarray(first_batches["tf.data"][1]), first_batches["Grain"][1])


    def small_mlp():
        model = keras.Sequential([keras.Input((28, 28), dtype="uint8"), keras.layers.Rescaling(1 / 255),
                                  keras.layers.Flatten(), keras.layers.Dense(10, activation="softmax")])
        model.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy")
        return model

    small_mlp().save_weights(folder / "initial.weights.h5")
    losses = {name: losses_from(small_mlp(), folder / "initial.weights.h5", make(), 5)
              for name, make in loaders.items()}
    assert len(losses["Grain"]) == 5 and losses["Grain"] == losses["tf.data"], losses
print("notebook 08's saved code works on its own")
