"""The older article's CIFAR-10 convolutional autoencoder, in Keras 3.

Introduced in notebooks/03_pydataset_autoencoder.ipynb.
"""
from __future__ import annotations

import keras
from keras import layers


def conv_block(x, filters: int):
    """Conv 3x3 → BatchNorm → ReLU: the article's repeating unit.

    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """
    x = layers.Conv2D(filters, (3, 3), padding="same")(x)
    x = layers.BatchNormalization()(x)
    return layers.Activation("relu")(x)


def article_autoencoder(input_shape: tuple[int, int, int] = (32, 32, 3)) -> keras.Model:
    """Encoder: (Conv-BN-ReLU, MaxPool) with 32, 16, 8 filters → a 4x4x8 code for a 32x32x3 image.
    Decoder: the mirror image with UpSampling, ending in Conv(3)-BN-sigmoid; trained with
    binary cross-entropy against the input, as in the article.

    Introduced in notebooks/03_pydataset_autoencoder.ipynb.

    >>> model = article_autoencoder(); model.output_shape
    (None, 32, 32, 3)
    """
    inputs = keras.Input(shape=input_shape)
    x = inputs
    for filters in (32, 16, 8):
        x = layers.MaxPooling2D((2, 2))(conv_block(x, filters))
    for filters in (8, 16, 32):
        x = layers.UpSampling2D((2, 2))(conv_block(x, filters))
    x = layers.Conv2D(input_shape[-1], (3, 3), padding="same")(x)
    x = layers.BatchNormalization()(x)
    outputs = layers.Activation("sigmoid")(x)
    model = keras.Model(inputs, outputs, name="article_autoencoder")
    model.compile(optimizer="adam", loss="binary_crossentropy")
    return model
