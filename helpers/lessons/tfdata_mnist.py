# Generated from notebooks/04_tfdata_mnist.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""04 · tf.data MNIST classification: can the pipeline feed a GPU?: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import tensorflow as tf
import keras


# ---------------- defined in notebooks/04_tfdata_mnist.ipynb, section: 2. The pipeline, one line per step
from helpers.lessons.tfrecord_conversion import parse_batch   # notebook 02's: one op parses a batch
from helpers.storage.tfrecord.read import exact_length        # plumbing: an exact length, that ends


def make_train_ds(shards, batch_size, buffer=10_000, prefetch=True, *, cycle_length=4, seed=None,
                  parse=parse_batch):
    """The training pipeline over checked shards (`readable_shards`): a new order every epoch,
    batches parsed whole."""
    files = tf.data.Dataset.from_tensor_slices(
        (tf.constant(shards.files, tf.string), tf.constant(shards.counts, tf.int64)))
    ds = (files
          .shuffle(len(shards.files), seed=seed)             # 1. a new file order every epoch
          .interleave(lambda file, n: tf.data.TFRecordDataset(file, shards.compression).take(n),
                      cycle_length=cycle_length,             # 2. read 4 shards at once (each up to
                      num_parallel_calls=cycle_length,       #    its manifest's count), a reader
                      deterministic=False)                   #    each, first record ready first
          .shuffle(buffer, seed=seed)                        # 3. mix across a 10,000-record window
          .batch(batch_size)                                 # 4. batch first …
          .map(parse, num_parallel_calls=tf.data.AUTOTUNE))  # 5. … then parse whole batches
    ds = exact_length(ds, -(-shards.total // batch_size), shards.source)   # its length in batches
    return ds.prefetch(tf.data.AUTOTUNE) if prefetch else ds  # 6. next batches made while training


# ---------------- defined in notebooks/04_tfdata_mnist.ipynb, section: 2. The pipeline, one line per step
from helpers.storage.tfrecord.format import parse_batch_fn, parse_example_fn   # plumbing: checked
from helpers.storage.tfrecord.read import readable_shards   # plumbing: the files, checked


def read_split(directory, split, batch_size=128, *, vectorized=True, parallel_reads=None,
               shuffle_buffer=0, seed=None, skip_damaged=False, verify=False):
    """A dataset of `(image, label)` batches of a split (single records with `batch_size=None`),
    with the manifest's files, compression, decoding and exact length. Before anything is read,
    `readable_shards` names a missing, truncated or mis-described shard (`ShardError`);
    `verify=True` reads every shard once first and names each damaged one; `skip_damaged=True`
    reads only the records before each file's first damaged one and warns
    (`DamagedShardsWarning`) how many were lost.

    - `shuffle_buffer > 0`: `make_train_ds`, a new order every epoch, `parallel_reads` files at
      once.
    - otherwise file order; `parallel_reads` files read at once interleave their records, in a fixed
      order.
    - `vectorized=False`: parse record by record, then batch (notebook 02 measures what that costs).
    """
    shards = readable_shards(directory, split, skip_damaged=skip_damaged, verify=verify)
    spec, encoding, source = shards.manifest.spec, shards.manifest.encoding, shards.source
    if shuffle_buffer > 0:
        if batch_size is None or not vectorized:
            raise ValueError("a shuffled read parses whole batches: give a batch_size and keep "
                             "vectorized=True")
        return make_train_ds(shards, batch_size, shuffle_buffer, prefetch=False,
                             cycle_length=parallel_reads or 1, seed=seed,
                             parse=parse_batch_fn(encoding, spec, source))
    files = tf.data.Dataset.from_tensor_slices(
        (tf.constant(shards.files, tf.string), tf.constant(shards.counts, tf.int64)))
    records = files.interleave(
        lambda file, n: tf.data.TFRecordDataset(file, shards.compression).take(n),
        cycle_length=parallel_reads or 1, num_parallel_calls=parallel_reads,
        deterministic=None if parallel_reads is None else True)
    parse_one = parse_example_fn(encoding, spec, source)
    if batch_size is None:
        return exact_length(records.map(parse_one, num_parallel_calls=tf.data.AUTOTUNE),
                            shards.total, source)
    if vectorized:
        ds = records.batch(batch_size).map(parse_batch_fn(encoding, spec, source),
                                           num_parallel_calls=tf.data.AUTOTUNE)
    else:
        ds = records.map(parse_one, num_parallel_calls=tf.data.AUTOTUNE).batch(batch_size)
    return exact_length(ds, -(-shards.total // batch_size), source)   # a length counted in batches


# ---------------- defined in notebooks/04_tfdata_mnist.ipynb, section: 4. The model, and training with a validation split
def article_mlp(input_shape=(28, 28), *, uint8_input=True, dropout=0.0, learning_rate=1e-3,
                jit_compile="auto", steps_per_execution=1):
    """The older article's classifier, 784-512-10, compiled as it was: RMSprop and sparse
    categorical cross-entropy (integer labels, no one-hot encoding).

    With `uint8_input=True` the model takes raw uint8 pixels and scales them itself: a quarter of
    the bytes cross to the accelerator, and the host does no float work. `dropout` adds a Dropout
    layer after the hidden one (the article had none); `learning_rate` may be a schedule. Under a
    `mixed_float16` policy the output layer stays float32, so the softmax and the loss keep full
    precision.
    """
    inputs = keras.Input(shape=input_shape, dtype="uint8" if uint8_input else "float32")
    x = keras.layers.Rescaling(1 / 255)(inputs) if uint8_input else inputs
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(512, activation="relu")(x)
    if dropout:
        x = keras.layers.Dropout(dropout)(x)
    outputs = keras.layers.Dense(10, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name="article_mlp")
    model.compile(optimizer=keras.optimizers.RMSprop(learning_rate),
                  loss="sparse_categorical_crossentropy", metrics=["accuracy"],
                  jit_compile=jit_compile, steps_per_execution=steps_per_execution)
    return model


# ---------------- defined in notebooks/04_tfdata_mnist.ipynb, section: 7. Can this pipeline feed a GPU?
def make_cached_ds(shards, batch_size, cache_file):
    """The training pipeline with its parsed batches cached to `cache_file` during the first epoch,
    and read back from there later; the batch order is still shuffled every epoch."""
    ds = make_train_ds(shards, batch_size).cache(str(cache_file))
    return ds.shuffle(64).prefetch(tf.data.AUTOTUNE)
