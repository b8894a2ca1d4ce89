"""The pictures of notebook 07: a photo folder at a glance, and test photos with the class a classifier guessed.
Each draws one figure, prints a line and shows it.

Introduced in notebooks/07_capstone_photos.ipynb, which calls each in one line.

    show_photo_folder(folder, classes)
    test_guesses(model, test_ds, classes)
"""
from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image


def show_photo_folder(folder: str | Path, classes: list[str]) -> None:
    """One training file per class, each drawn at its own size on the same pixel axes, and a line on the sizes of
    all the files (read from their headers)."""
    import matplotlib.pyplot as plt

    folder = Path(folder)
    paths = sorted(folder.glob("*/*/*.jpg"))
    sizes, kilobytes = [], []
    for path in paths:
        with Image.open(path) as image:   # the header only
            sizes.append(image.size)
        kilobytes.append(path.stat().st_size / 1e3)
    sizes, kilobytes = np.array(sizes), np.array(kilobytes)
    fig, axes = plt.subplots(2, -(-len(classes) // 2), figsize=(11, 5.5), layout="constrained", squeeze=False)
    for ax, name in zip(axes.flat, classes):
        path = sorted((folder / "train" / name).glob("*.jpg"))[0]
        with Image.open(path) as image:
            ax.imshow(image, extent=(0, image.width, image.height, 0))
            ax.set_title(f"{name}: {image.width}×{image.height} px, {path.stat().st_size / 1e3:.0f} kB", fontsize=9)
        ax.set_xlim(0, sizes.max())
        ax.set_ylim(sizes.max(), 0)
        ax.tick_params(labelsize=7)
    fig.suptitle("One file of each class, drawn at its own size (axes in pixels)")
    plt.show()
    print(f"{len(paths):,} files: {sizes.min()}–{sizes.max()} pixels a side, "
          f"{np.median(sizes[:, 0] * sizes[:, 1]) / 1e3:.0f} thousand pixels and {np.median(kilobytes):.0f} kB in "
          f"the median file, {kilobytes.sum() / 1e3:.1f} MB in all")


def test_guesses(model, dataset, classes: list[str], per_class: int = 2) -> dict[str, float]:
    """The accuracy on each class of `dataset` (batches of float pixels 0-255 and int labels, read batch by batch:
    it need not fit in memory), printed, and `per_class` photos of each class drawn with the guessed class (green
    when right, red when wrong). Returns the accuracy by class."""
    import matplotlib.pyplot as plt

    labels, guesses, shown = [], [], {}
    for x, y in dataset:
        guess = np.argmax(model.predict_on_batch(x), axis=1)
        labels.append(np.asarray(y))
        guesses.append(guess)
        for image, label, g in zip(np.asarray(x), np.asarray(y), guess):
            if len(shown.setdefault(int(label), [])) < per_class:
                shown[int(label)].append((image, int(label), int(g)))
    labels, guesses = np.concatenate(labels), np.concatenate(guesses)
    accuracy = {name: float(np.mean(guesses[labels == k] == k)) for k, name in enumerate(classes) if np.any(labels == k)}
    print("accuracy per class: " + ", ".join(f"{name} {value:.0%}" for name, value in accuracy.items()))
    photos = [photo for k in sorted(shown) for photo in shown[k]]
    fig, axes = plt.subplots(per_class, -(-len(photos) // per_class), figsize=(12, 1.8 * per_class),
                             layout="constrained", squeeze=False)
    for ax, (image, label, guess) in zip(axes.flat, photos):
        ax.imshow(np.clip(image, 0, 255).astype(np.uint8))
        ax.set_title(f"{classes[guess]}\n(true: {classes[label]})", fontsize=8,
                     color="tab:green" if guess == label else "tab:red")
    for ax in axes.flat:
        ax.axis("off")
    fig.suptitle("Test photos, as the records hold them: predicted class (true class)")
    plt.show()
    return accuracy
