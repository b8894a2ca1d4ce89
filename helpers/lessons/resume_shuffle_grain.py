# Generated from notebooks/08_resume_shuffle_grain.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""08 · Interrupted and shuffled: exact mid-epoch resume, a shuffle without a buffer, Grain: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import numpy as np
import tensorflow as tf
import keras


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 1. What a resume loses
from helpers.lessons.tfdata_mnist import article_mlp   # notebook 04's 784-512-10 MLP
from helpers.data.datasets import load_mnist


class SeenIds(keras.layers.Layer):
    """Passes the images through; while training, appends each batch's sample ids to `log`, a
    weight saved and restored with the model: after any resume `log[:count]` lists the samples
    that trained these weights."""

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


def id_mlp(capacity, seed=0):
    """Notebook 04's MLP behind a `SeenIds` layer; inputs `{"image": uint8 images,
    "id": int64 ids}`. The same `seed` gives the same initial weights."""
    keras.utils.set_random_seed(seed)
    image = keras.Input((28, 28), dtype="uint8", name="image")
    ids = keras.Input((), dtype="int64", name="id")
    logged = SeenIds(capacity, name="seen")(image, ids)
    model = keras.Model({"image": image, "id": ids}, article_mlp()(logged))
    model.compile(optimizer=keras.optimizers.RMSprop(1e-3), loss="sparse_categorical_crossentropy")
    return model


def seen_ids(model):
    """The ids the model's weights were trained on, in order."""
    layer = model.get_layer("seen")
    return layer.log.numpy()[: int(layer.count.numpy())]


def training_data(n):
    """The first `n` MNIST training images and labels (quick mode: the stand-ins)."""
    (x, y), _ = load_mnist()
    return x[:n], y[:n].astype(np.int64)


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 1. What a resume loses
def buffer_batches(x, y, batch_size, buffer, seed=1):
    """Notebook 04's recipe over sample ids: a shuffle buffer (a new order every pass), batch,
    fetch the batch's images."""
    return (tf.data.Dataset.range(len(x)).shuffle(buffer, seed=seed).batch(batch_size)
            .map(lambda ids: ({"image": tf.gather(x, ids), "id": ids}, tf.gather(y, ids))))


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
from pathlib import Path


def iterator_checkpoint_bytes(dataset, directory, batches=3):
    """Bytes of a `tf.train.Checkpoint` of an iterator over `dataset` after `batches` batches."""
    iterator = iter(dataset)
    for _ in range(batches):
        next(iterator)
    prefix = tf.train.Checkpoint(iterator=iterator).write(str(Path(directory) / "iterator"))
    return sum(p.stat().st_size for p in Path(directory).glob(Path(prefix).name + "*"))


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 2. Exact resume: the position saved with the model
import json

from helpers.storage.files import FileLock, fingerprint_arrays


class SavePosition(keras.callbacks.Callback):
    """Every `every` batches, saves the model, its optimizer, the run's batch count and what
    the count means (`settings`: batch size, data length, seed, a fingerprint of the data) to
    `directory` (`tf.train.CheckpointManager`, the last two kept). `restore()` loads the latest
    and returns the count; a checkpoint saved with other settings is refused (`ValueError`
    naming each setting that differs) before anything is loaded."""

    def __init__(self, directory, model, every, settings):
        super().__init__()
        self.every, self.position = every, tf.Variable(0, dtype=tf.int64)
        self.settings = settings
        model.optimizer.build(model.trainable_variables)   # its variables exist before a restore
        checkpoint = tf.train.Checkpoint(model=model, optimizer=model.optimizer,
                                         position=self.position,
                                         settings=tf.Variable(json.dumps(settings)))
        self.manager = tf.train.CheckpointManager(checkpoint, str(directory), max_to_keep=2)

    def restore(self):
        latest = self.manager.latest_checkpoint
        if not latest:
            return 0
        saved = tf.train.load_checkpoint(latest)
        key = "settings/.ATTRIBUTES/VARIABLE_VALUE"
        was = json.loads(saved.get_tensor(key)) if saved.has_tensor(key) else {}
        differ = [f"{name} was {was.get(name, 'not saved')!r}, now {value!r}"
                  for name, value in self.settings.items() if was.get(name) != value]
        if differ:
            raise ValueError(f"{latest} was saved with other settings ({'; '.join(differ)}): "
                             f"its batch count would mean other samples. Resume with its "
                             f"settings, or train in a new folder.")
        self.manager.checkpoint.restore(latest).assert_existing_objects_matched()
        return int(self.position.numpy())

    def on_train_batch_end(self, batch, logs=None):
        self.position.assign_add(1)
        if int(self.position.numpy()) % self.every == 0:
            self.manager.save()


def train_exact(model, x, y, directory, *, epochs, batch_size, save_every, seed=1,
                callbacks=()):
    """`fit` from the latest position saved in `directory` (or the start), saving it every
    `save_every` batches: killed anywhere and called again with the same data and settings, it
    trains the same batches as a run never stopped; with others, it refuses (`ValueError`).
    One run per folder at a time: a second meanwhile is refused (`LockHeldError`)."""
    Path(directory).mkdir(parents=True, exist_ok=True)
    with FileLock(Path(directory) / ".lock", f"the run in {directory}"):
        _train_from_position(model, x, y, directory, epochs, batch_size, save_every, seed,
                             callbacks)


def _train_from_position(model, x, y, directory, epochs, batch_size, save_every, seed,
                         callbacks):
    per_epoch = -(-len(x) // batch_size)
    settings = {"batch_size": int(batch_size), "len(x)": len(x), "seed": int(seed),
                "fingerprint of x and y": fingerprint_arrays(np.asarray(x), np.asarray(y))}
    saver = SavePosition(directory, model, save_every, settings)
    epoch, step = divmod(saver.restore(), per_epoch)
    if epoch * per_epoch + step > epochs * per_epoch:
        raise ValueError(f"{directory} holds a run saved in epoch {epoch + 1}, past the "
                         f"epochs={epochs} asked for: ask for {epoch + 1} or more")
    if step:   # finish the interrupted epoch: Keras starts every epoch at its first batch
        rest = index_batches(x, y, batch_size, epoch * per_epoch + step, (epoch + 1) * per_epoch,
                             seed)
        model.fit(rest, initial_epoch=epoch, epochs=epoch + 1, verbose=0,
                  callbacks=[saver, *callbacks])
        epoch += 1
    if epoch < epochs:
        model.fit(index_batches(x, y, batch_size, epoch * per_epoch, epochs * per_epoch, seed),
                  steps_per_epoch=per_epoch, initial_epoch=epoch, epochs=epochs, verbose=0,
                  callbacks=[saver, *callbacks])


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 3. A global shuffle without a buffer
def displacement(order):
    """Mean distance from each sample's stored position to its place in `order`, as a share
    of the dataset."""
    order = np.asarray(order)
    return float(np.mean(np.abs(order - np.arange(len(order))))) / len(order)


def mean_class_run(labels_in_order):
    """Mean length of runs of one label in a row."""
    labels = np.asarray(labels_in_order)
    return len(labels) / (1 + int(np.count_nonzero(labels[1:] != labels[:-1])))


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 4. ArrayRecord and Grain
import grain
from helpers.storage.array_record import decode_record   # plumbing: bytes -> (image, label)


def grain_batches(source, info, batch_size, epochs, seed=1):
    """Grain over ArrayRecord: every epoch a new global order (shuffle, then repeat), batched."""
    return (grain.MapDataset.source(source)
            .shuffle(seed=seed)                      # a permutation by index: no buffer
            .map(lambda record: decode_record(record, info))
            .batch(batch_size)
            .repeat(epochs))                         # after shuffle: each epoch reshuffled


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 5. Any backend: the same model on TensorFlow and JAX
from helpers.measure import alternate, fit_epoch   # the series' timing (notebook 05)


def grain_order(n, seed=1):
    """The order in which `MapDataset.shuffle(seed=seed)` gives `n` records in its first epoch."""
    return np.fromiter(grain.MapDataset.range(n).shuffle(seed=seed), np.int64, count=n)


def backend_loaders(x, y, source, info, batch_size, seed=1):
    """Two loaders of the same batches in the same order, as functions that make one epoch:
    tf.data over the arrays in memory, and Grain over the ArrayRecord `source` (2 threads read
    ahead)."""
    order = grain_order(len(x), seed)

    def tf_data():
        return (tf.data.Dataset.from_tensor_slices(order).batch(batch_size)
                .map(lambda ids: (tf.gather(x, ids), tf.gather(y, ids)))
                .prefetch(tf.data.AUTOTUNE))

    def grain_reader():
        return grain_batches(source, info, batch_size, epochs=1, seed=seed).to_iter_dataset(
            grain.ReadOptions(num_threads=2, prefetch_buffer_size=8))

    return {"tf.data": tf_data, "Grain": grain_reader}


def losses_from(initial_weights, batches, steps):
    """Notebook 04's MLP set to `initial_weights` (a `.weights.h5` file), trained `steps` steps on
    `batches`: the loss Keras reports after each step, and the model."""
    model = article_mlp()
    model.load_weights(initial_weights)
    losses = []
    log = keras.callbacks.LambdaCallback(
        on_train_batch_end=lambda batch, logs: losses.append(float(logs["loss"])))
    model.fit(batches, epochs=1, steps_per_epoch=steps, verbose=0, callbacks=[log])
    return losses, model


def loader_rates(model, loaders, batch_size, steps, rounds):
    """Training samples per second from each loader, epochs of `steps` steps, in alternating
    rounds (`helpers.measure`)."""
    return alternate({name: (lambda make=make: fit_epoch(model, x=make(), batch_size=batch_size,
                                                         steps_per_epoch=steps))
                      for name, make in loaders.items()}, rounds=rounds)


# ---------------- defined in notebooks/08_resume_shuffle_grain.ipynb, section: 6. The proof: Grain alone against a GPU's appetite
import functools
# plumbing: a batch's bytes -> arrays; the same for block records
from helpers.storage.array_record import decode_batch, decode_blocks


def epoch_order(n, seed, epoch):
    """Epoch `epoch`'s order of `n` records, drawn from `(seed, epoch)` alone."""
    return np.random.default_rng([seed, epoch]).permutation(n)


def grain_batch_reads(records, info, batch_size, epochs, seed=1):
    """Grain over batches: element `g` is batch `g` of the run, its records read with one
    `records.__getitems__` call and decoded in one NumPy call; every epoch in a new global order."""
    n = len(records)
    per_epoch = -(-n // batch_size)
    order = functools.lru_cache(maxsize=2)(lambda epoch: epoch_order(n, seed, epoch))

    def read(g):
        epoch, first = g // per_epoch, g % per_epoch * batch_size
        return decode_batch(records.__getitems__(order(epoch)[first:first + batch_size]), info)

    return grain.MapDataset.range(epochs * per_epoch).map(read)


def grain_block_reads(blocks, info, batch_size, epochs, seed=1):
    """Grain over block records: element `g` is batch `g` of the run, `batch_size // block_size`
    blocks read with one `blocks.__getitems__` call and decoded in one NumPy call, their samples
    shuffled together; every epoch the blocks in a new global order."""
    if batch_size % info.block_size:
        raise ValueError(f"batch_size {batch_size} is not a whole number of blocks of "
                         f"{info.block_size}")
    per_batch = batch_size // info.block_size   # blocks a batch
    per_epoch = -(-len(blocks) // per_batch)
    order = functools.lru_cache(maxsize=2)(lambda epoch: epoch_order(len(blocks), seed, epoch))

    def read(g):
        epoch, first = g // per_epoch, g % per_epoch * per_batch
        images, labels = decode_blocks(blocks.__getitems__(order(epoch)[first:first + per_batch]),
                                       info)
        mix = np.random.default_rng([seed, epoch, g]).permutation(len(labels))
        return images[mix], labels[mix]

    return grain.MapDataset.range(epochs * per_epoch).map(read)
