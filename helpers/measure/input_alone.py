"""The input alone, as `fit` takes it: one epoch of a dataset through `model.fit` with a model that does next to
nothing (`idle_model`), so that a `PyDataset`'s worker threads or processes run as they do in training; and the
model alone, from arrays. Both count their rate past the epoch's first batch, whose wait (workers starting,
buffers filling) is kept apart as the epoch's `start_up` (notebook 03, section 8).

    >>> import numpy as np
    >>> images = np.zeros((40, 8, 8, 3), np.float32)
    >>> epoch = model_epoch(idle_model((8, 8, 3)), images, batch_size=10)
    >>> epoch.samples   # the three batches after the first
    30
"""
from __future__ import annotations

import keras

from helpers.measure.core import Epoch, fit_epoch, pipeline_epoch


def idle_model(input_shape: tuple[int, ...]) -> keras.Model:
    """A model that does next to nothing: one weight per channel pair, applied pixel by pixel, trained with plain
    SGD on the squared error against its input. Its step is a small fraction of any reader's batch."""
    inputs = keras.Input(shape=input_shape)
    model = keras.Model(inputs, keras.layers.Dense(input_shape[-1])(inputs), name="idle")
    model.compile(optimizer="sgd", loss="mse")
    return model


def past_first_batch(epoch: Epoch, first_batch: int) -> Epoch:
    """The epoch after its first batch of `first_batch` samples: its rate is the steady one; `start_up` is the
    first batch's wait."""
    if epoch.samples <= first_batch:
        raise ValueError(f"an epoch of {epoch.samples} samples has nothing after its first batch of {first_batch}: "
                         f"give it more batches")
    return Epoch(epoch.samples - first_batch, epoch.seconds - epoch.start_up, epoch.start_up)


def input_epoch(dataset, model: keras.Model, batch_size: int) -> Epoch:
    """One epoch of `dataset` (a `PyDataset`, a `tf.data.Dataset` of `(x, y)` batches of `batch_size`) through
    `model.fit`, past its first batch."""
    return past_first_batch(fit_epoch(model, batch_size=batch_size, x=dataset, shuffle=False), batch_size)


def model_epoch(model: keras.Model, images, batch_size: int) -> Epoch:
    """One epoch of `model` trained on in-memory `images` against themselves (an autoencoder), past its first
    batch."""
    return past_first_batch(fit_epoch(model, batch_size=batch_size, x=images, y=images), batch_size)


def pipeline_alone(dataset, batch_size: int) -> Epoch:
    """One epoch of `dataset`'s batches with no model at all (`pipeline_epoch`: a `PyDataset` asked by index on
    this thread, without its workers), past its first batch."""
    return past_first_batch(pipeline_epoch(dataset), batch_size)
