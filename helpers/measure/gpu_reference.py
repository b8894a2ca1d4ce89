"""How fast a GPU trains the series' two models: the appetite an input pipeline must meet.

Measured on 2026-11-30 on one NVIDIA H200 (16 host cores), Keras 3.15.1 on JAX, `model.fit` from in-memory
float32 arrays: the median of epochs 2-4 and their spread, for the article's 784-512-10 MNIST MLP and its
CIFAR-10 autoencoder (notebook 03). PyTorch ran these small models 4-10x slower (per-step overhead).
Measure again on any GPU with `KERAS_BACKEND=jax python -m benchmarks.gpu_appetite` (it prints the lines to paste
here). A reference, not a promise: a notebook run on a GPU measures its own.
"""
from __future__ import annotations

from dataclasses import dataclass

GPU_NAME = "NVIDIA H200 (Keras 3.15.1, JAX)"


@dataclass(frozen=True)
class GpuFigure:
    """Samples per second a GPU trains at one batch size: the median and the spread of epochs 2-4."""

    batch_size: int
    samples_per_second: float
    low: float
    high: float


# model name -> measured figures, by batch size
GPU_TRAINING_THROUGHPUT: dict[str, list[GpuFigure]] = {
    "mnist_mlp": [GpuFigure(32, 22_795, 22_511, 23_404), GpuFigure(256, 186_431, 177_584, 207_674),
                  GpuFigure(1024, 563_715, 544_044, 571_809)],
    "cifar_autoencoder": [GpuFigure(32, 11_506, 11_430, 11_802), GpuFigure(256, 66_031, 64_625, 66_960)],
}


def gpu_appetite(model: str, batch_size: int) -> GpuFigure:
    """The reference GPU's training throughput for `model` at a measured `batch_size`.

    >>> gpu_appetite("cifar_autoencoder", 32).samples_per_second
    11506
    """
    for figure in GPU_TRAINING_THROUGHPUT[model]:
        if figure.batch_size == batch_size:
            return figure
    measured = [f.batch_size for f in GPU_TRAINING_THROUGHPUT[model]]
    raise KeyError(f"no reference figure for {model} at batch {batch_size}; measured batch sizes: {measured}")
