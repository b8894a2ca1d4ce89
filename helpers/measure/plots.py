"""The plain charts of notebooks 01 and 02: peak memory against data size, a row of images, training curves, and
the labels of an epoch in the order a pipeline delivers them. Each draws one figure and shows it.

Introduced in notebooks/01_generators_and_iterables.ipynb (and used in 02; 04 draws its training curves).

    >>> import matplotlib; matplotlib.use("Agg")
    >>> peak_memory([1_000, 10_000], {"list": [8e5, 8e6], "generator": [2e3, 2e3]}, record_bytes=784)
"""
from __future__ import annotations

from typing import Mapping, Sequence

import numpy as np


def _plain_ticks(axis) -> None:
    """Tick labels "1,000", not "10³", on a log axis."""
    from matplotlib.ticker import FuncFormatter, NullFormatter

    axis.set_major_formatter(FuncFormatter(lambda value, _: f"{value:,.0f}"))
    axis.set_minor_formatter(NullFormatter())


def peak_memory(sizes: Sequence[int], peaks: Mapping[str, Sequence[float]], *, record_bytes: int) -> None:
    """Peak bytes allocated against the number of records, one line per way of computing (log-log)."""
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 4), layout="constrained")
    for (label, values), marker in zip(peaks.items(), "os^v"):
        ax.loglog(sizes, np.asarray(values, dtype=float) / 2**10, f"{marker}-", label=label)
    _plain_ticks(ax.xaxis)
    _plain_ticks(ax.yaxis)
    ax.set_xticks(list(sizes))
    ax.set_xlabel(f"number of {record_bytes:,}-byte records (log scale)")
    ax.set_ylabel("peak memory allocated (KiB, log scale)")
    ax.set_title("Peak memory while computing a mean pixel value")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()


def image_row(images: np.ndarray, labels: Sequence[int], title: str) -> None:
    """The images side by side, each titled with its label."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(images), figsize=(len(images), 1.8), layout="constrained", squeeze=False)
    for ax, image, label in zip(axes[0], images, labels):
        ax.imshow(image, cmap="gray")
        ax.set_title(int(label))
        ax.axis("off")
    fig.suptitle(title)
    plt.show()


def training_curves(history: Mapping[str, Sequence[float]], title: str, metric: str = "accuracy") -> None:
    """`metric` on the training data and on the validation split, epoch by epoch (`history`: `fit(...).history`)."""
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    fig, ax = plt.subplots(figsize=(7, 3.5), layout="constrained")
    epochs = np.arange(1, len(history[metric]) + 1)
    ax.plot(epochs, history[metric], "o-", label="training")
    ax.plot(epochs, history[f"val_{metric}"], "s-", label="validation (held out)")
    ax.set_xlabel("epoch")
    ax.xaxis.set_major_locator(MaxNLocator(integer=True))   # whole epochs only
    ax.set_ylabel(metric)
    ax.set_title(title)
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1))
    plt.show()


def labels_in_order(orders: Mapping[str, np.ndarray], notes: Mapping[str, str], title: str) -> None:
    """One panel per pipeline: the label of every record against its position in the epoch, titled with its note."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(orders), figsize=(3.5 * len(orders), 3), sharey=True, layout="constrained",
                             squeeze=False)
    for ax, (name, labels) in zip(axes[0], orders.items()):
        ax.plot(labels, ".", markersize=1, alpha=0.4)
        ax.set_title(f"{name}\n{notes[name]}", fontsize=9)
        ax.set_xlabel("position in the epoch")
    axes[0][0].set_ylabel("label")
    fig.suptitle(title)
    plt.show()
