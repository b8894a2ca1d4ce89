"""Class labels, checked once for every writer: whole numbers, not negative, below the class count if known
(a plain `astype` would turn 7.9 into 7 and -1 into 255)."""
from __future__ import annotations

import numpy as np


def class_labels(labels, where: str, num_classes: int | None = None) -> np.ndarray:
    """`labels` (shape (n,) or (n, 1)) as a flat int64 array after checking each is a whole number from 0 (to
    `num_classes` - 1 when given); `ValueError` naming `where` and the first bad position if not. Floats are
    refused even when they look whole: a float label is a sign the wrong column was passed.

    >>> class_labels(np.array([[3], [250]]), "here").tolist()
    [3, 250]
    >>> class_labels(np.array([7.9]), "here")
    Traceback (most recent call last):
    ...
    ValueError: here: labels must be whole numbers (an integer dtype), got float64 values such as 7.9.
    """
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise ValueError(f"{where}: labels must be one number per image, got an array of shape {labels.shape}.")
    if labels.dtype.kind not in "iu":
        example = f" such as {labels.reshape(-1)[0].item()!r}" if labels.size else ""
        raise ValueError(f"{where}: labels must be whole numbers (an integer dtype), got {labels.dtype} values{example}.")
    bad = labels < 0
    if num_classes is not None:
        bad |= labels >= num_classes
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        allowed = f"0 to {num_classes - 1}" if num_classes is not None else "0 or more"
        raise ValueError(f"{where}: label {labels[first]} at position {first} is outside {allowed}.")
    return labels.astype(np.int64)
