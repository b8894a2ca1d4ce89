# Generated from notebooks/04_tfdata_mnist.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""04 · tf.data MNIST classification: can the pipeline feed a GPU?: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import tensorflow as tf
import keras


# ---------------- defined in notebooks/04_tfdata_mnist.ipynb, section: 2. The pipeline, one line per step
def make_train_ds(files, counts, batch_size, parse, *, buffer=10_000, cycle_length=4,
                  prefetch=True, seed=None):
    """Batches in a new order every epoch from TFRecord `files`, `counts[i]` records read from
    `files[i]`; `parse` turns a batch of serialized records into `(images, labels)`."""
    files_and_counts = (tf.constant([str(f) for f in files]), tf.constant(counts, tf.int64))
    ds = (tf.data.Dataset.from_tensor_slices(files_and_counts)
          .shuffle(len(files), seed=seed)                     # 1. a new file order every epoch
          .interleave(lambda file, n: tf.data.TFRecordDataset(file).take(n),
                      cycle_length=cycle_length,              # 2. read 4 files at once, one
                      num_parallel_calls=cycle_length,        #    reader each, the first record
                      deterministic=False)                    #    ready first
          .shuffle(buffer, seed=seed)                         # 3. mix within a window of records
          .batch(batch_size)                                  # 4. batch first …
          .map(parse, num_parallel_calls=tf.data.AUTOTUNE))   # 5. … then parse whole batches
    steps = -(-sum(counts) // batch_size)                     # an epoch's batches, the last short
    ds = ds.apply(tf.data.experimental.assert_cardinality(steps))   # fit knows where it ends
    return ds.prefetch(tf.data.AUTOTUNE) if prefetch else ds  # 6. next batches made while training


# ---------------- defined in notebooks/04_tfdata_mnist.ipynb, section: 4. The model, and training with a validation split
def article_mlp(input_shape=(28, 28), *, uint8_input=True, dropout=0.0, learning_rate=1e-3,
                jit_compile="auto", steps_per_execution=1):
    """The older article's classifier, 784-512-10, compiled as it was: RMSprop and sparse
    categorical cross-entropy (integer labels). With `uint8_input` it scales raw pixels itself;
    `dropout` adds a Dropout layer (the article had none); `learning_rate` may be a schedule.
    Under a `mixed_float16` policy the output layer stays float32, for a precise loss."""
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
def make_cached_ds(files, counts, batch_size, parse, cache_file, *, buffer=10_000):
    """`make_train_ds`'s parsed batches, written to `cache_file` during the first epoch and read
    back from it later; the batches' order changes every epoch, their contents do not."""
    ds = make_train_ds(files, counts, batch_size, parse, buffer=buffer, prefetch=False)
    ds = ds.cache(str(cache_file))                            # parsed once, in the first epoch
    ds = ds.shuffle(max(1, buffer // batch_size))             # as many records as `buffer` holds
    return ds.prefetch(tf.data.AUTOTUNE)
