"""What a Keras model costs per sample, counted from its layers' shapes, and a GPU's appetite carried over by it.

The series' reference GPU (`helpers.measure.gpu_reference`) was measured on the series' models, not on every model a
notebook trains. `carried_appetite` estimates how fast it would train another one: the reference rate of a measured
model, times that model's multiply-adds per sample over the new model's. An estimate, not a measurement: it leaves
out what multiply-adds do not count (the optimizer's update, augmentation layers, each step's fixed cost).

    appetite = carried_appetite(model, article_autoencoder(), "cifar_autoencoder", batch=256)

Introduced in notebooks/07_capstone_photos.ipynb.
"""
from __future__ import annotations

import numpy as np

from helpers.measure.gpu_reference import gpu_appetite


def multiply_adds(model) -> int:
    """Multiply-adds per sample of a model's forward pass, from its layers' shapes: a layer with a kernel (Conv2D,
    Dense) does the kernel's size in multiply-adds at each output position; a model inside the model is counted
    layer by layer.

    >>> import keras
    >>> multiply_adds(keras.Sequential([keras.Input((4,)), keras.layers.Dense(3)]))
    12
    """
    total = 0
    for layer in model.layers:
        if hasattr(layer, "layers"):
            total += multiply_adds(layer)
        elif getattr(layer, "kernel", None) is not None:
            total += int(np.prod(layer.kernel.shape)) * int(np.prod(layer.output.shape[1:-1]))
    return total


def carried_appetite(model, reference_model, reference: str, batch: int) -> float:
    """Samples per second the reference GPU would train `model` at batch `batch`: its measured rate for
    `reference_model` (named `reference` in the reference table) at the same multiply-adds per second."""
    measured = gpu_appetite(reference, batch).samples_per_second
    return measured * multiply_adds(reference_model) / multiply_adds(model)
