"""The older article's MNIST classifier, a 784-512-10 MLP, in Keras 3.

Introduced in notebooks/04_tfdata_mnist.ipynb.
"""
from __future__ import annotations

import keras
from keras import layers


def article_mlp(input_shape: tuple[int, ...] = (28, 28), *, uint8_input: bool = True, jit_compile="auto",
                steps_per_execution: int = 1) -> keras.Model:
    """Flatten → Dense(512, relu) → Dense(10, softmax), compiled with RMSprop and sparse
    categorical cross-entropy (integer labels, no one-hot), as in the article.

    With `uint8_input=True` the model takes raw uint8 pixels and scales them itself with a
    `Rescaling(1/255)` layer: a quarter of the bytes cross to the accelerator, and the host does
    no float work. Under a `mixed_float16` policy the output layer stays float32, so the softmax
    and the loss keep full precision.
    Introduced in notebooks/04_tfdata_mnist.ipynb.

    >>> model = article_mlp(); model.count_params()
    407050
    """
    inputs = keras.Input(shape=input_shape, dtype="uint8" if uint8_input else "float32")
    x = layers.Rescaling(1 / 255)(inputs) if uint8_input else inputs
    x = layers.Flatten()(x)
    x = layers.Dense(512, activation="relu")(x)
    outputs = layers.Dense(10, activation="softmax", dtype="float32")(x)
    model = keras.Model(inputs, outputs, name="article_mlp")
    model.compile(optimizer=keras.optimizers.RMSprop(), loss="sparse_categorical_crossentropy",
                  metrics=["accuracy"], jit_compile=jit_compile, steps_per_execution=steps_per_execution)
    return model
