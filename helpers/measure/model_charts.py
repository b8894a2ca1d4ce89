"""How a classifier trained and what it gets wrong, drawn: its training curves, test images with the labels it
predicted, and its confusion matrix. Introduced in notebooks/04_tfdata_mnist.ipynb (which calls each in one line).

    training_curves(history, title="784-512-10 MLP")
    confusion = predictions(model, test_ds, title="MNIST test digits")
"""
from __future__ import annotations

import numpy as np


def training_curves(history, title: str, metrics: tuple[str, ...] = ("loss", "accuracy")) -> None:
    """One panel per metric of a `fit` history: training and validation, epoch by epoch.

    >>> import matplotlib.pyplot as plt; from types import SimpleNamespace
    >>> logs = {"loss": [0.5, 0.3], "val_loss": [0.4, 0.35], "accuracy": [0.8, 0.9], "val_accuracy": [0.85, 0.88]}
    >>> training_curves(SimpleNamespace(history=logs), title="two epochs"); plt.close("all")
    """
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    logs = history.history
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 3.5), layout="constrained",
                             squeeze=False)
    for ax, metric in zip(axes[0], metrics):
        epochs = np.arange(1, len(logs[metric]) + 1)
        ax.plot(epochs, logs[metric], "o-", label="training")
        if f"val_{metric}" in logs:
            ax.plot(epochs, logs[f"val_{metric}"], "s-", label="validation")
        ax.set_xlabel("epoch")
        ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_title(metric)
    axes[0][-1].legend(loc="upper left", bbox_to_anchor=(1.01, 1))   # one legend for all, outside
    fig.suptitle(title)
    plt.show()


def confusion_of(model, dataset, num_classes: int = 10) -> np.ndarray:
    """The confusion matrix of `model` on every `(images, labels)` batch of `dataset`: row = true label,
    column = predicted label.

    >>> import keras
    >>> model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(3, activation="softmax")])
    >>> int(confusion_of(model, [(np.zeros((4, 2)), np.array([0, 1, 2, 2]))], 3).sum())
    4
    """
    confusion = np.zeros((num_classes, num_classes), np.int64)
    for images, labels in dataset:
        predicted = np.argmax(model.predict_on_batch(images), axis=1)
        np.add.at(confusion, (np.asarray(labels), predicted), 1)
    return confusion


def predictions(model, dataset, title: str, shown: int = 24) -> np.ndarray:
    """Draw the first `shown` images of `dataset` with the label `model` predicts (green when right, red when
    wrong) and its confusion matrix over the whole of `dataset` (counts on a log colour scale, so that a handful of
    errors shows beside thousands of right answers); print the errors and the most frequent one. Returns the
    confusion matrix."""
    import matplotlib.pyplot as plt
    from matplotlib.colors import LogNorm
    from matplotlib.ticker import FuncFormatter

    images, labels = next(iter(dataset.unbatch().batch(shown)))
    guesses = np.argmax(model.predict_on_batch(images), axis=1)
    fig, axes = plt.subplots(3, -(-shown // 3), figsize=(10, 4.4), layout="constrained")
    for ax, image, label, guess in zip(axes.flat, images.numpy(), labels.numpy(), guesses):
        ax.imshow(image, cmap="gray")
        ax.set_title(f"{guess} (true {label})", fontsize=8, color="tab:green" if guess == label else "tab:red")
    for ax in axes.flat:
        ax.axis("off")
    fig.suptitle(f"{title}: predicted (true)")
    plt.show()

    confusion = confusion_of(model, dataset)
    fig, ax = plt.subplots(figsize=(6, 5.2), layout="constrained")
    drawn = ax.imshow(np.ma.masked_equal(confusion, 0), cmap="Blues", norm=LogNorm(vmin=1, vmax=confusion.max()))
    for (row, col), count in np.ndenumerate(confusion):
        if count:
            ax.text(col, row, f"{count:,}", ha="center", va="center", fontsize=7,
                    color="white" if count > confusion.max() ** 0.5 else "black")
    ax.set_xticks(range(len(confusion)))
    ax.set_yticks(range(len(confusion)))
    ax.set(xlabel="predicted label", ylabel="true label", title=f"Confusion matrix, {confusion.sum():,} {title}")
    fig.colorbar(drawn, ax=ax, label="images (log scale)", format=FuncFormatter(lambda v, _: f"{v:,.0f}"))
    plt.show()
    wrong = confusion - np.diag(np.diag(confusion))
    worst = np.unravel_index(np.argmax(wrong), wrong.shape)
    print(f"{wrong.sum():,} of {confusion.sum():,} misclassified; the most frequent mistake: "
          + (f"true {worst[0]} read as {worst[1]}" if wrong.any() else "none"))
    return confusion
