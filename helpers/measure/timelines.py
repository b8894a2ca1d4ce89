"""Pipeline timelines recorded as they run (notebook 05 §4): when each batch's stages ran inside the graph, how long
the training loop waited for it, and its training step. Measuring tools, not lesson code: the notebook calls them.

- `start_spans(dataset)`: every element gets an empty dict of spans, carried along with it.
- `traced_map(dataset, fn, stage, **map_args)`: `dataset.map(fn)` that adds `stage`'s `tf.timestamp()` span, taken
  just before `fn`'s ops start and once every output of `fn` exists (control dependencies).
- `record_timeline(dataset, consume, max_batches)`: iterate it in Python, timing each `next()` (`WAIT`) and
  `consume(*batch)` (`STEP`); a `Timeline`, drawn by `helpers.measure.timeline_chart.plot_timelines`.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import numpy as np
import tensorflow as tf

WAIT, STEP = "waiting for input", "training step"   # the consumer's two stages, timed in Python


def start_spans(dataset):
    """Give every element an empty dict of spans, so that `traced_map` can add to it."""
    return dataset.map(lambda *element: (*element, {}))


def traced_map(dataset, fn, stage, **map_args):
    """`dataset.map(fn, **map_args)` on elements from `start_spans`, recording when `fn` started and ended. `fn`'s
    ops start after the start time is taken, and the end time is taken once every output of `fn` exists (control
    dependencies): the span covers exactly `fn`'s work."""
    def timed(*element):
        *payload, spans = element
        start = tf.timestamp()
        with tf.control_dependencies([start]):
            out = fn(*payload)
        out = out if isinstance(out, tuple) else (out,)
        with tf.control_dependencies(tf.nest.flatten(out)):
            end = tf.timestamp()
        return (*out, {**spans, stage: tf.stack([start, end])})

    return dataset.map(timed, **map_args)


@dataclass
class Timeline:
    """Per batch, each stage's (start, end) in seconds since the first request for a batch."""
    rows: list = field(default_factory=list)

    @property
    def seconds(self):
        """From the first request to the end of the last batch's step."""
        return max(end for row in self.rows for _, end in row.values())

    @property
    def waiting_share(self):
        """The share of the whole run the consumer spent waiting for its next batch."""
        return sum(row[WAIT][1] - row[WAIT][0] for row in self.rows) / self.seconds

    @property
    def typical_wait(self):
        """The median seconds waited for a batch, the first left out: its wait is the start-up."""
        waits = [row[WAIT][1] - row[WAIT][0] for row in self.rows[1:]]
        if not waits:
            raise ValueError("typical_wait needs at least two batches")
        return float(np.median(waits))


def record_timeline(dataset, consume=None, max_batches=None):
    """Iterate `dataset` (elements from `traced_map`), timing the wait for each batch and `consume(*batch)`."""
    raw, iterator = [], iter(dataset)
    while max_batches is None or len(raw) < max_batches:
        asked = time.time()   # the clock tf.timestamp() reads too: seconds since the epoch
        try:
            *payload, spans = next(iterator)
        except StopIteration:
            break
        got = time.time()
        if consume is not None:
            consume(*payload)
        row = {stage: (float(np.min(s.numpy()[..., 0])), float(np.max(s.numpy()[..., 1])))
               for stage, s in spans.items()}
        row[WAIT], row[STEP] = (asked, got), (got, time.time())
        raw.append(row)
    if not raw:
        raise ValueError("record_timeline: the dataset produced no batches")
    origin = min(start for row in raw for start, _ in row.values())
    return Timeline([{stage: (a - origin, b - origin) for stage, (a, b) in row.items()} for row in raw])
