"""Class labels, checked by one rule for every writer and loader: whole numbers (an integer type, not a float nor a
bool), from 0, below the class count when it is known, and never beyond int64, the type every file stores them as.
A plain `astype` would turn 7.9 into 7, -1 into 255 and a uint64 2**64-1 into -1, so nothing is cast until checked.

`class_labels` checks an array at once (writers that hold every label: check them all before the first byte is
written); `label_checker` and `class_label` check one label, for writers that stream their records.
"""
from __future__ import annotations

from typing import Callable

import numpy as np

INT64_END = 2**63   # labels are stored as int64: 0 to 2**63 - 1


def _outside(where: str, value: int, num_classes: int | None, position: int | None = None) -> str:
    allowed = f"0 to {num_classes - 1}" if num_classes is not None else "0 to 2**63 - 1 (int64)"
    at = f" at position {position}" if position is not None else ""
    return f"{where}: label {value}{at} is outside {allowed}."


def _limit(num_classes: int | None) -> int:
    if num_classes is None:
        return INT64_END
    if isinstance(num_classes, bool) or not isinstance(num_classes, (int, np.integer)) or not 1 <= num_classes <= INT64_END:
        raise ValueError(f"num_classes must be a whole number from 1 to 2**63 (labels are int64), not {num_classes!r}")
    return int(num_classes)


def _not_whole(label) -> bool:
    """A bool, a timedelta64 (numpy counts it as an integer type) or anything not an integer type."""
    return isinstance(label, (bool, np.bool_, np.timedelta64)) or not isinstance(label, (int, np.integer))


def _first_not_whole(items) -> object | None:
    """The first element of a list or tuple (one level of nesting: shape (n, 1)) that is not a whole number, or
    None. Checked before np.asarray, which would turn [1, True] into [1, 1]."""
    for item in items:
        for value in (item if isinstance(item, (list, tuple)) else [item]):
            if _not_whole(value):
                return value
    return None


def label_checker(where: str, num_classes: int | None = None) -> Callable[..., int]:
    """`check(label, record=None)`: one label as an int after the same checks as `class_labels`, or a `ValueError`
    naming `where` (and the record's index, when given). Built once, for writers that check record by record.

    >>> check = label_checker("split 'train'")
    >>> check(np.uint8(7), 0)
    7
    >>> check(-1, 3)
    Traceback (most recent call last):
    ...
    ValueError: split 'train', record 3: label -1 is outside 0 to 2**63 - 1 (int64).
    """
    limit = _limit(num_classes)

    def check(label, record: int | None = None) -> int:
        if _not_whole(label):
            at = where if record is None else f"{where}, record {record}"
            raise ValueError(f"{at}: label {label!r} is a {type(label).__name__}; labels must be whole numbers "
                             f"(an integer type).")
        value = int(label)
        if not 0 <= value < limit:
            raise ValueError(_outside(where if record is None else f"{where}, record {record}", value, num_classes))
        return value

    return check


def class_label(label, where: str, num_classes: int | None = None) -> int:
    """One label, checked as `label_checker` checks it.

    >>> class_label(-1, "record 3")
    Traceback (most recent call last):
    ...
    ValueError: record 3: label -1 is outside 0 to 2**63 - 1 (int64).
    """
    return label_checker(where, num_classes)(label)


def class_labels(labels, where: str, num_classes: int | None = None) -> np.ndarray:
    """`labels` (shape (n,) or (n, 1)) as a flat int64 array after checking each is a whole number from 0 (to
    `num_classes` - 1 when given, to 2**63 - 1 otherwise); `ValueError` naming `where` and the first bad position
    if not. Floats are refused even when they look whole: a float label is a sign the wrong column was passed.

    >>> class_labels(np.array([[3], [250]]), "here").tolist()
    [3, 250]
    >>> class_labels(np.array([7.9]), "here")
    Traceback (most recent call last):
    ...
    ValueError: here: labels must be whole numbers (an integer dtype), got float64 values such as 7.9.
    """
    limit = _limit(num_classes)
    if isinstance(labels, (list, tuple)) and (bad := _first_not_whole(labels)) is not None:
        raise ValueError(f"{where}: labels must be whole numbers (an integer type), got a {type(bad).__name__} "
                         f"such as {bad!r}.")
    labels = np.asarray(labels)
    if labels.ndim == 2 and labels.shape[1] == 1:
        labels = labels[:, 0]
    if labels.ndim != 1:
        raise ValueError(f"{where}: labels must be one number per image, got an array of shape {labels.shape}.")
    if labels.dtype.kind not in "iu":   # bool is kind "b", objects (e.g. strings from a CSV) kind "O"
        example = f" such as {labels[:1].tolist()[0]!r}" if labels.size else ""   # tolist: any dtype, objects too
        raise ValueError(f"{where}: labels must be whole numbers (an integer dtype), got {labels.dtype} values{example}.")
    bad = (labels < 0) | (labels >= limit)   # before any cast: uint64 2**64 - 1 must not become -1
    if bad.any():
        first = int(np.flatnonzero(bad)[0])
        raise ValueError(_outside(where, int(labels[first]), num_classes, first))
    return labels.astype(np.int64)
