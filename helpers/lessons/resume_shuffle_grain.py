# Generated from notebooks/08_resume_shuffle_grain.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""08 · Interrupted and shuffled: exact resume, a shuffle without a buffer, Grain: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import numpy as np
import tensorflow as tf
import keras


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 1. What a resume loses
class SeenIds(keras.layers.Layer):
    """Passes the images through; while training, appends each batch's sample ids to `log`, a
    weight saved and restored with the model."""

    def __init__(self, capacity, **kwargs):
        super().__init__(**kwargs)
        self.log = self.add_weight(shape=(capacity,), dtype="int64", initializer="zeros",
                                   trainable=False, name="log")
        self.count = self.add_weight(shape=(), dtype="int64", initializer="zeros", trainable=False,
                                     name="count")

    def call(self, images, ids, training=False):
        if training:
            size = keras.ops.shape(ids)[0]
            where = self.count + keras.ops.arange(size, dtype="int64")   # the next `size` places
            self.log.assign(keras.ops.scatter_update(self.log, where[:, None], ids))
            self.count.assign_add(keras.ops.cast(size, "int64"))
        return images


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 1. What a resume loses
def id_mlp(capacity, seed=0):
    """Notebook 04's 784-512-10 MLP behind a `SeenIds` layer; inputs `{"image": uint8 images,
    "id": int64 ids}`. The same `seed` gives the same initial weights."""
    keras.utils.set_random_seed(seed)
    image = keras.Input((28, 28), dtype="uint8", name="image")
    ids = keras.Input((), dtype="int64", name="id")
    pixels = keras.layers.Rescaling(1 / 255)(SeenIds(capacity, name="seen")(image, ids))
    hidden = keras.layers.Dense(512, activation="relu")(keras.layers.Flatten()(pixels))
    model = keras.Model({"image": image, "id": ids},
                        keras.layers.Dense(10, activation="softmax")(hidden))
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3), loss="sparse_categorical_crossentropy")
    return model


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 1. What a resume loses
def seen_ids(model):
    """The ids the model's weights were trained on, in order."""
    layer = model.get_layer("seen")
    return layer.log.numpy()[: int(layer.count.numpy())]


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 1. What a resume loses
def buffer_batches(x, y, batch_size, buffer, seed=1):
    """Notebook 04's recipe over sample ids: a shuffle buffer (a new order every pass), batch,
    fetch the batch's images."""
    return (tf.data.Dataset.range(len(x)).shuffle(buffer, seed=seed).batch(batch_size)
            .map(lambda ids: ({"image": tf.gather(x, ids), "id": ids}, tf.gather(y, ids))))


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 1. What a resume loses
def train_with_backup(model, x, y, directory, *, epochs, batch_size, save_every, callbacks=()):
    """`fit` with `BackupAndRestore` saving every `save_every` batches: called again after a
    crash, it resumes from the last backup."""
    backup = keras.callbacks.BackupAndRestore(directory, save_freq=save_every)
    model.fit(buffer_batches(x, y, batch_size, len(x) // 10), epochs=epochs, verbose=0,
              callbacks=[backup, *callbacks])


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 2. Exact resume: the position saved with the model
def index_batches(x, y, batch_size, start, stop, seed=1):
    """Batches `start` to `stop - 1` of a run, counted over epochs: epoch `e`'s order is
    `index_shuffle` with seed `(seed, e)`, so batch `g` is built from its number alone, and a run
    can start at any batch."""
    n = len(x)
    per_epoch = -(-n // batch_size)

    def batch(g):
        epoch, first = g // per_epoch, g % per_epoch * batch_size
        positions = tf.range(first, tf.minimum(first + batch_size, n))
        epoch_seed = tf.stack([tf.constant(seed, tf.int64), epoch])
        ids = tf.random.experimental.index_shuffle(positions, epoch_seed, n - 1)
        return {"image": tf.gather(x, ids), "id": ids}, tf.gather(y, ids)

    return tf.data.Dataset.range(start, stop).map(batch).prefetch(2)


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 2. Exact resume: the position saved with the model
import json
from pathlib import Path


class SavePosition(keras.callbacks.Callback):
    """Every `every` batches, saves the model, its optimizer, the run's batch count and its
    `settings` to `directory` (the last two checkpoints kept). `restore()` loads the latest and
    returns the count; one saved with other settings is refused, naming each that differs."""

    def __init__(self, directory, model, every, settings):
        super().__init__()
        self.every, self.settings = every, settings
        self.position = tf.Variable(0, dtype=tf.int64)
        model.optimizer.build(model.trainable_variables)   # its variables exist before a restore
        checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer,
                                         position=self.position,
                                         settings=tf.Variable(json.dumps(settings)))
        self.manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=2)

    def restore(self):
        latest = self.manager.latest_checkpoint
        if not latest:
            return 0
        saved, key = tf.train.load_checkpoint(latest), "settings/.ATTRIBUTES/VARIABLE_VALUE"
        was = json.loads(saved.get_tensor(key)) if saved.has_tensor(key) else {}
        differ = [f"{name} was {was.get(name, 'not saved')!r}, now {value!r}"
                  for name, value in self.settings.items() if was.get(name) != value]
        if differ:
            raise ValueError(f"{latest} was saved with other settings ({'; '.join(differ)}): its "
                             f"batch count would mean other samples. Resume with its settings, "
                             f"or train in a new folder.")
        self.manager.checkpoint.restore(latest).assert_existing_objects_matched()
        return int(self.position.numpy())

    def on_train_batch_end(self, batch, logs=None):
        self.position.assign_add(1)
        if int(self.position.numpy()) % self.every == 0:
            self.manager.save()


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 2. Exact resume: the position saved with the model
import hashlib


def data_fingerprint(x, y):
    """A short SHA-256 of the arrays' dtypes, shapes and bytes."""
    digest = hashlib.sha256()
    for array in (np.ascontiguousarray(x), np.ascontiguousarray(y)):
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()[:16]


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 2. Exact resume: the position saved with the model
import fcntl


def lock_folder(directory):
    """An open file holding a lock on `directory`: closing it, or the end of the process, releases
    it. `RuntimeError` while another run holds it."""
    lock = open(Path(directory) / ".lock", "w")
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        lock.close()
        raise RuntimeError(f"another run trains in {directory} now") from None
    return lock


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 2. Exact resume: the position saved with the model
def train_exact(model, x, y, directory, *, epochs, batch_size, save_every, seed=1,
                callbacks=()):
    """`fit` from the latest position saved in `directory` (or the start), saving it every
    `save_every` batches: killed anywhere and called again with the same data and settings, it
    trains the same batches as a run never stopped; with others, it refuses (`ValueError`)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    per_epoch = -(-len(x) // batch_size)
    settings = {"batch_size": int(batch_size), "len(x)": len(x), "seed": int(seed),
                "fingerprint of x and y": data_fingerprint(x, y)}
    batches = lambda start, stop: index_batches(x, y, batch_size, start, stop, seed)
    with lock_folder(directory):   # one run at a time in a folder
        saver = SavePosition(directory, model, save_every, settings)
        epoch, step = divmod(saver.restore(), per_epoch)
        if epoch * per_epoch + step > epochs * per_epoch:
            raise ValueError(f"{directory} holds a run saved in epoch {epoch + 1}, past the "
                             f"epochs={epochs} asked for: ask for {epoch + 1} or more")
        if step:   # finish the interrupted epoch
            model.fit(batches(epoch * per_epoch + step, (epoch + 1) * per_epoch),
                      initial_epoch=epoch, epochs=epoch + 1, verbose=0,
                      callbacks=[saver, *callbacks])
            epoch += 1
        if epoch < epochs:
            model.fit(batches(epoch * per_epoch, epochs * per_epoch), steps_per_epoch=per_epoch,
                      initial_epoch=epoch, epochs=epochs, verbose=0, callbacks=[saver, *callbacks])


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 4. ArrayRecord and Grain
import grain


def decode_record(record, shape, dtype):
    """One record's bytes -> (image, label)."""
    label = np.frombuffer(record, "<i8", count=1)[0]
    return np.frombuffer(record, dtype, offset=8).reshape(shape), label


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 4. ArrayRecord and Grain
def grain_batches(source, shape, dtype, batch_size, epochs, seed=1):
    """Grain over a random-access `source` of records: every epoch a new global order
    (shuffle, then repeat), batched."""
    return (grain.MapDataset.source(source)
            .shuffle(seed=seed)                      # a permutation by index: no buffer
            .map(lambda record: decode_record(record, shape, dtype))
            .batch(batch_size)
            .repeat(epochs))                         # after shuffle: each epoch reshuffled


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 5. Any backend: the same model on TensorFlow and JAX
def grain_order(n, seed=1):
    """The order in which `MapDataset.shuffle(seed=seed)` gives `n` records in its first epoch."""
    return np.fromiter(grain.MapDataset.range(n).shuffle(seed=seed), np.int64, count=n)


def backend_loaders(x, y, source, shape, dtype, batch_size, seed=1):
    """Two loaders of the same batches in the same order, as functions that make one epoch:
    tf.data over the arrays `x`, `y`, and Grain over `source`, their records."""
    order = grain_order(len(x), seed)

    def tf_data():
        return (tf.data.Dataset.from_tensor_slices(order).batch(batch_size)
                .map(lambda ids: (tf.gather(x, ids), tf.gather(y, ids)))
                .prefetch(tf.data.AUTOTUNE))

    def grain_reader():   # 2 threads read ahead
        epoch = grain_batches(source, shape, dtype, batch_size, epochs=1, seed=seed)
        return epoch.to_iter_dataset(grain.ReadOptions(num_threads=2, prefetch_buffer_size=8))

    return {"tf.data": tf_data, "Grain": grain_reader}


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 5. Any backend: the same model on TensorFlow and JAX
def losses_from(model, initial_weights, batches, steps):
    """`model` set to `initial_weights` (a `.weights.h5` file), then trained `steps` steps on
    `batches`: the loss Keras reports after each step."""
    model.load_weights(initial_weights)
    losses = []
    log = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"])))
    model.fit(batches, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[log])
    return losses


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 6. The proof: Grain alone against a GPU's appetite
def epoch_order(n, seed, epoch):
    """Epoch `epoch`'s order of `n` records, drawn from `(seed, epoch)` alone."""
    return np.random.default_rng([seed, epoch]).permutation(n)


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 6. The proof: Grain alone against a GPU's appetite
def decode_samples(records, shape, dtype):
    """Records holding samples back to back (one each, or a block each) -> (images, labels), in
    one NumPy call: a sample is its label as 8 little-endian bytes, then its image."""
    size = 8 + int(np.prod(shape)) * np.dtype(dtype).itemsize
    rows = np.frombuffer(b"".join(records), np.uint8).reshape(-1, size)
    labels = rows[:, :8].copy().view("<i8")[:, 0]
    return rows[:, 8:].copy().view(dtype).reshape(-1, *shape), labels


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 6. The proof: Grain alone against a GPU's appetite
import functools


def grain_batch_reads(records, shape, dtype, batch_size, epochs, seed=1, block_size=1):
    """Grain over whole batches: element `g` is batch `g` of the run, its records read with one
    `records.__getitems__` call and decoded in one NumPy call; every epoch a new global order.
    Block records (`block_size` samples each): the blocks ordered, each batch's samples mixed."""
    if batch_size % block_size:
        raise ValueError(f"batch_size {batch_size} is not a whole number of blocks of {block_size}")
    per_batch = batch_size // block_size   # records a batch
    per_epoch = -(-len(records) // per_batch)
    order = functools.lru_cache(maxsize=2)(lambda epoch: epoch_order(len(records), seed, epoch))

    def read(g):
        epoch, first = g // per_epoch, g % per_epoch * per_batch
        ids = order(epoch)[first:first + per_batch]
        images, labels = decode_samples(records.__getitems__(ids), shape, dtype)
        if block_size > 1:   # the samples of the batch's blocks, shuffled together
            mix = np.random.default_rng([seed, epoch, g]).permutation(len(labels))
            images, labels = images[mix], labels[mix]
        return images, labels

    return grain.MapDataset.range(epochs * per_epoch).map(read)
