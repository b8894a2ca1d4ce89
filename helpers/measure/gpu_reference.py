"""How fast a GPU trains the series' two models: the appetite an input pipeline must meet.

Measured on 2026-11-30 by the series' maintainers on one NVIDIA H200 (a host with 16 cores),
Keras 3.15.1 on the JAX backend, training from in-memory float32 NumPy arrays with
`model.fit`; steady-state throughput is the median of epochs 2-4 (the first epoch, which
compiles, left out), with the lowest and highest epoch as the spread. The models are the
series' own: the older article's 784-512-10 MNIST MLP and its CIFAR-10 convolutional
autoencoder (`article_autoencoder`, saved from notebook 03 into `helpers.lessons.pydataset_autoencoder`).
On the PyTorch backend the same GPU ran 4-10x slower for these small models (per-step overhead, not the GPU).

To measure them again on any machine with a GPU (one command, Keras 3 on any backend, no TensorFlow
needed): `KERAS_BACKEND=jax python -m tools.gpu_appetite`. The script (`tools/gpu_appetite.py`) follows
the method above and prints the `GpuFigure` lines to paste here; `--quick` only checks it on a CPU.

These numbers are a reference, not a promise: a notebook run on a GPU measures its own GPU.
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
    """The reference GPU's training throughput for `model` at `batch_size` (one that was measured).

    >>> gpu_appetite("cifar_autoencoder", 32).samples_per_second
    11506
    """
    for figure in GPU_TRAINING_THROUGHPUT[model]:
        if figure.batch_size == batch_size:
            return figure
    measured = [f.batch_size for f in GPU_TRAINING_THROUGHPUT[model]]
    raise KeyError(f"no reference figure for {model} at batch {batch_size}; measured batch sizes: {measured}")
