"""Pipeline timelines drawn side by side: one row per batch, one coloured bar per stage (notebook 05 §4 records
them with `helpers.measure.timelines`; this module only draws).

A timeline is anything with `rows` (per batch, a dict of stage -> (start, end) in seconds since the first request),
`seconds` and `waiting_share`, as `helpers.measure.timelines.Timeline` has.

    >>> import matplotlib; matplotlib.use("Agg")
    >>> from types import SimpleNamespace
    >>> t = SimpleNamespace(rows=[{"parse": (0, .1), "waiting for input": (0, .1), "training step": (.1, .2)}],
    ...                     seconds=.2, waiting_share=.5)
    >>> plot_timelines({"one batch": t})
"""
from __future__ import annotations

from typing import Mapping

CONSUMER = ("waiting for input", "training step")   # the loop's own two stages, drawn last, red and green
PIPELINE_COLOURS = ("tab:blue", "tab:orange", "tab:purple", "tab:brown")


def plot_timeline(timeline, ax, title: str, consumer: tuple[str, str] = CONSUMER) -> None:
    """Draw `timeline` on `ax`: one bar per stage per batch, the first batch at the top, the legend below."""
    from matplotlib.patches import Patch

    stages = [s for s in timeline.rows[0] if s not in consumer] + list(consumer)
    colours = {**dict(zip(stages[:-2], PIPELINE_COLOURS)), consumer[0]: "tab:red", consumer[1]: "tab:green"}
    for row_index, row in enumerate(timeline.rows):
        for lane, stage in enumerate(stages):
            if stage in row:
                start, end = row[stage]
                ax.broken_barh([(start * 1e3, max((end - start) * 1e3, 0.05))],
                               (row_index + lane / len(stages) * 0.8, 0.8 / len(stages)), color=colours[stage])
    ax.set_ylim(len(timeline.rows), 0)
    ax.set_xlabel("milliseconds since the first request")
    ax.set_ylabel("batch")
    ax.set_title(f"{title}: waiting {timeline.waiting_share:.0%} of {timeline.seconds * 1e3:,.0f} ms")
    ax.legend(handles=[Patch(color=colours[s], label=s) for s in stages], loc="upper center",
              bbox_to_anchor=(0.5, -0.15), ncol=len(stages), fontsize="small")   # below the axes, off the bars


def plot_timelines(timelines: Mapping[str, object]) -> None:
    """The timelines side by side, each titled with its name, its waiting share and its length; shown at once."""
    import matplotlib.pyplot as plt

    fig, axes = plt.subplots(1, len(timelines), figsize=(6.5 * len(timelines), 5.5), layout="constrained",
                             squeeze=False)
    for ax, (name, timeline) in zip(axes[0], timelines.items()):
        plot_timeline(timeline, ax, name)
    plt.show()
