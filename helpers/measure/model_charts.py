"""What a classifier gets wrong, drawn: test images with the labels it predicted, and its confusion matrix.
Introduced in notebooks/04_tfdata_mnist.ipynb (which calls it in one line; its training curves are
`helpers.measure.plots.training_curves`).

    confusion = predictions(model, test_ds, title="MNIST test digits")
"""
from __future__ import annotations

import numpy as np


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
