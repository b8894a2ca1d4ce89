# Generated from notebooks/04_tfdata_mnist.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""04 · tf.data MNIST classification: can the pipeline feed a GPU?: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import keras


# ---------------- defined in notebooks/04_tfdata_mnist.ipynb, section: 4. The model, and training with a validation split
def article_mlp(input_shape=(28, 28), *, uint8_input=True, dropout=0.0, learning_rate=1e-3, jit_compile="auto",
                steps_per_execution=1):
    """The older article's classifier, 784-512-10, compiled as it was: RMSprop and sparse categorical
    cross-entropy (integer labels, no one-hot encoding).

    With `uint8_input=True` the model takes raw uint8 pixels and scales them itself: a quarter of the bytes
    cross to the accelerator, and the host does no float work. `dropout` adds a Dropout layer after the
    hidden one (the article had none); `learning_rate` may be a schedule. Under a `mixed_float16` policy the
    output layer stays float32, so the softmax and the loss keep full precision.
    """
    inputs = keras.Input(shape=input_shape, dtype="uint8" if uint8_input else "float32")
    x = keras.layers.Rescaling(1 / 255)(inputs) if uint8_input else inputs
    x = keras.layers.Flatten()(x)
    x = keras.layers.Dense(512, activation="relu")(x)
    if dropout:
        x = keras.layers.Dropout(dropout)(x)
    outputs = keras.layers.Dense(10, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name="article_mlp")
    model.compile(optimizer=keras.optimizers.RMSprop(learning_rate), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"], jit_compile=jit_compile, steps_per_execution=steps_per_execution)
    return model
