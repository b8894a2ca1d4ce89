"""A timeline of a tf.data pipeline: when each stage worked on each batch, and when training waited.

`traced_map` is `dataset.map(fn)` that also records, inside the graph, the time (`tf.timestamp()`)
just before and just after `fn` ran, carried along with the element in a dict of spans. After
`batch`, a per-record span becomes one span per record; the timeline draws the stretch from the
first record's start to the last one's end. `record_timeline` then consumes the dataset in
Python, timing how long each `next()` waited and how long the training step (or whatever
`consume` does) took, and `plot_timeline` draws a bar per stage per batch with matplotlib.

Everything drawn is real work timed as it ran, not `sleep` calls standing in for it.

Introduced in notebooks/05_pipeline_profiling.ipynb.
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Callable

import numpy as np
import tensorflow as tf

WAIT, STEP = "waiting for input", "training step"
COLOURS = {WAIT: "tab:red", STEP: "tab:green"}
STAGE_COLOURS = ("tab:blue", "tab:orange", "tab:purple", "tab:brown")


def start_spans(dataset: tf.data.Dataset) -> tf.data.Dataset:
    """Give every element an empty dict of spans, so `traced_map` can add to it.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    return dataset.map(lambda *element: (*element, {}))


def traced_map(dataset: tf.data.Dataset, fn: Callable, stage: str, **map_args) -> tf.data.Dataset:
    """`dataset.map(fn, **map_args)` on elements made by `start_spans`, recording `fn`'s start and end.

    The end time is taken only after every output of `fn` exists (a control dependency), and
    `fn`'s ops only start after the start time is taken, so the span covers exactly `fn`'s work.
    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
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
    """Per batch, each stage's (start, end) in seconds since the first request for a batch.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """

    rows: list[dict[str, tuple[float, float]]] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        """From the first request to the end of the last batch's step."""
        return max(end for row in self.rows for _, end in row.values())

    def total(self, stage: str) -> float:
        """Seconds spent in `stage`, summed over batches (stages of different batches may overlap)."""
        return sum(row[stage][1] - row[stage][0] for row in self.rows if stage in row)

    @property
    def waiting_share(self) -> float:
        """The share of the whole run the consumer spent waiting for its next batch."""
        return self.total(WAIT) / self.seconds

    @property
    def typical_wait(self) -> float:
        """The median seconds the consumer waited for a batch, the first left out: its wait is the
        pipeline's start-up (opening files, filling buffers), paid once per epoch, not per batch."""
        waits = [row[WAIT][1] - row[WAIT][0] for row in self.rows[1:]]
        if not waits:
            raise ValueError("typical_wait needs at least two batches")
        return float(np.median(waits))


def record_timeline(dataset: tf.data.Dataset, consume: Callable | None = None, max_batches: int | None = None,
                    ) -> Timeline:
    """Iterate `dataset` (elements from `traced_map`), timing the wait for each batch and `consume(*batch)`.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    raw: list[dict[str, tuple[float, float]]] = []
    iterator = iter(dataset)
    while max_batches is None or len(raw) < max_batches:
        asked = time.time()  # the clock tf.timestamp() reads too: seconds since the epoch
        try:
            *payload, spans = next(iterator)
        except StopIteration:
            break
        got = time.time()
        if consume is not None:
            consume(*payload)
        row = {stage: (float(np.min(s.numpy()[..., 0])), float(np.max(s.numpy()[..., 1]))) for stage, s in spans.items()}
        row[WAIT] = (asked, got)
        row[STEP] = (got, time.time())
        raw.append(row)
    if not raw:
        raise ValueError("record_timeline: the dataset produced no batches")
    origin = min(start for row in raw for start, _ in row.values())
    return Timeline([{stage: (a - origin, b - origin) for stage, (a, b) in row.items()} for row in raw])


def plot_timeline(timeline: Timeline, ax, title: str) -> None:
    """One row per batch (the first at the top), one coloured bar per stage.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    from matplotlib.patches import Patch

    stages = [s for s in timeline.rows[0] if s not in (WAIT, STEP)] + [WAIT, STEP]
    colours = {**dict(zip(stages, STAGE_COLOURS)), **COLOURS}
    for row_index, row in enumerate(timeline.rows):
        for lane, stage in enumerate(stages):
            if stage in row:
                start, end = row[stage]
                ax.broken_barh([(start * 1e3, max((end - start) * 1e3, 0.05))], (row_index + lane / len(stages) * 0.8,
                               0.8 / len(stages)), color=colours[stage])
    ax.set_ylim(len(timeline.rows), 0)
    ax.set_xlabel("milliseconds since the first request")
    ax.set_ylabel("batch")
    ax.set_title(f"{title}: waiting {timeline.waiting_share:.0%} of {timeline.seconds * 1e3:,.0f} ms")
    ax.legend(handles=[Patch(color=colours[s], label=s) for s in stages], loc="lower right", fontsize="small")
