"""Which records arrived, and how often: notebook 06 tags every record with an id (a hash of its bytes) and counts
what comes out of a pipeline, out of the tf.data service, and into `fit`.

    all_ids = count_ids(dataset)           # {id: times it arrived}, from batches of (images, labels, ids)
    log = IdLog()                          # dataset.map(log.note): fit gets (images, labels); the ids are noted
    seen, ended = read_until_silent(dataset, after=250, kill=lambda: cluster.kill_worker_reading(folder))

Introduced in notebooks/06_scaling_out.ipynb.
"""
from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import tensorflow as tf


def count_ids(dataset) -> Counter:
    """How many times each record id arrived, over one pass of batches of `(images, labels, ids)`.

    >>> ds = tf.data.Dataset.from_tensor_slices((tf.zeros(4), tf.zeros(4), tf.constant([7, 8, 7, 9], tf.int64)))
    >>> sorted(count_ids(ds.batch(2)).items())
    [(7, 2), (8, 1), (9, 1)]
    """
    return Counter(int(i) for _, _, ids in dataset for i in ids.numpy())


class IdLog:
    """Notes the ids of every batch as it is taken (`dataset.map(log.note)`), and passes on `(images, labels)`.

    >>> log = IdLog()
    >>> ds = tf.data.Dataset.from_tensor_slices((tf.zeros(4), tf.zeros(4), tf.range(4, dtype=tf.int64)))
    >>> _ = list(ds.batch(2).map(log.note).repeat(2))
    >>> [sorted(epoch) for epoch in log.epochs(2)]
    [[0, 1, 2, 3], [0, 1, 2, 3]]
    """

    def __init__(self) -> None:
        self.batches: list = []   # each batch's ids, in the order taken

    def note(self, images, labels, ids):
        def keep(batch_ids):
            self.batches.append(batch_ids.numpy())
            return batch_ids

        with tf.control_dependencies([tf.py_function(keep, [ids], tf.int64)]):
            return tf.identity(images), tf.identity(labels)

    def epochs(self, steps: int) -> list[Counter]:
        """The ids noted, cut into epochs of `steps` batches: how many times each arrived in each epoch."""
        return [Counter(int(i) for batch in self.batches[e * steps:(e + 1) * steps] for i in batch)
                for e in range(len(self.batches) // steps)]


def read_until_silent(dataset, after: int, kill: Callable[[], object], silence: float = 2.0,
                      patience: float = 60.0) -> tuple[Counter, bool]:
    """Read `dataset` (batches of `(images, labels, ids)`) in a thread, call `kill()` once `after` records have
    arrived, and stop waiting when nothing has arrived for `silence` seconds after it (`patience` before it).
    Returns how many times each id arrived and whether the dataset ended by itself. An error of the dataset before
    the kill, or of `kill()` itself, is raised here; after the kill, an error ends nothing (what the dead worker
    held is what is missing)."""
    seen, done, killed = Counter(), threading.Event(), threading.Event()
    failed: list[BaseException] = []
    last_arrival = [time.monotonic()]

    def consume() -> None:
        try:
            for _, _, ids in dataset:
                for i in ids.numpy():
                    seen[int(i)] += 1
                last_arrival[0] = time.monotonic()
                if sum(seen.values()) >= after and not killed.is_set():
                    kill()
                    killed.set()
                    last_arrival[0] = time.monotonic()   # the silence counts from the kill, however long it took
        except BaseException as error:
            if not killed.is_set():
                failed.append(error)
            return
        done.set()

    threading.Thread(target=consume, daemon=True, name="read-until-silent").start()
    while not done.wait(0.1):
        if failed:
            raise failed[0]
        if time.monotonic() - last_arrival[0] > (silence if killed.is_set() else patience):
            break   # silent: what is still to come waits for the dead worker
    return seen, done.is_set()
