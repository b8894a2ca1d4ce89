"""Diagrams of the series' pipelines and clusters, drawn with matplotlib: what runs where, in parallel, and where
the buffers are. Each function draws one figure and returns it; the notebook shows it.

    >>> import matplotlib
    >>> matplotlib.use("Agg")
    >>> len(tfdata_pipeline_diagram().axes)
    1

Introduced in notebooks/04_tfdata_mnist.ipynb (the pipeline) and notebooks/06_scaling_out.ipynb (the clusters).
"""
from __future__ import annotations

import matplotlib.pyplot as plt
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch, Patch

# What a box is, by its colour; the legend explains every kind drawn.
KINDS = {
    "storage": ("#d9d9d9", "files on disk or a store"),
    "step": ("#ffffff", "a step run in order, one element at a time"),
    "parallel": ("#b7d7f0", "runs in parallel (several threads)"),
    "buffer": ("#f9d49b", "a buffer: elements held in memory"),
    "process": ("#d5ecd4", "a process (a machine, on a cluster)"),
    "model": ("#e8d4f0", "the model, training"),
}


def _canvas(width: float, height: float, title: str):
    fig, ax = plt.subplots(figsize=(width, height), layout="constrained")
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.set_axis_off()
    ax.set_title(title)
    return fig, ax


def _box(ax, x: float, y: float, w: float, h: float, text: str, kind: str, fontsize: float = 8.5):
    """A rounded box whose lower left corner is (x, y), its text centred."""
    ax.add_patch(FancyBboxPatch((x, y), w, h, boxstyle="round,pad=0.02,rounding_size=0.08",
                                facecolor=KINDS[kind][0], edgecolor="black", linewidth=0.9))
    ax.text(x + w / 2, y + h / 2, text, ha="center", va="center", fontsize=fontsize, wrap=True)


def _arrow(ax, start, end, text: str = "", *, both: bool = False, dashed: bool = False, offset=(0, 0.12)):
    ax.add_patch(FancyArrowPatch(start, end, arrowstyle="<|-|>" if both else "-|>", mutation_scale=11,
                                 linewidth=1.1, color="black", linestyle="--" if dashed else "-",
                                 shrinkA=2, shrinkB=2))
    if text:
        ax.text((start[0] + end[0]) / 2 + offset[0], (start[1] + end[1]) / 2 + offset[1], text, ha="center",
                va="bottom", fontsize=7.5, style="italic")


def _legend(fig, kinds):
    """The kinds drawn, below the drawing (outside it)."""
    handles = [Patch(facecolor=KINDS[k][0], edgecolor="black", label=KINDS[k][1]) for k in kinds]
    fig.legend(handles=handles, loc="outside lower center", ncols=min(len(handles), 3), fontsize=8, frameon=False)


def tfdata_pipeline_diagram(cycle_length: int = 4, buffer: int = 10_000, batch_size: int = 128):
    """Notebook 04's `make_train_ds`, left to right: the shard files, the six steps, the model."""
    fig, ax = _canvas(13, 3.6, "The training pipeline of make_train_ds: what runs in parallel, where the buffers are")
    _box(ax, 0.1, 0.9, 1.3, 1.8, "8 shard files\n(TFRecord)", "storage")
    _box(ax, 1.8, 1.3, 1.4, 1.0, "1. shuffle\nfile order\n(8 names)", "buffer")
    lanes = [0.55 + i * (2.0 / cycle_length) for i in reversed(range(cycle_length))]   # file 1 on top
    for i, y in enumerate(lanes):   # one lane per file read at once
        _box(ax, 3.6, y, 1.9, 2.0 / cycle_length - 0.12, f"read file {i + 1}", "parallel", fontsize=7.5)
    ax.text(4.55, 2.75, f"2. interleave: {cycle_length} files at once,\nfirst record ready first",
            ha="center", va="bottom", fontsize=8)
    _box(ax, 5.9, 1.2, 1.6, 1.2, f"3. shuffle buffer\n{buffer:,} records", "buffer")
    _box(ax, 7.9, 1.3, 1.2, 1.0, f"4. batch\n{batch_size} records", "step")
    _box(ax, 9.5, 1.2, 1.4, 1.2, "5. parse whole\nbatches\n(parallel calls)", "parallel")
    _box(ax, 11.2, 1.3, 1.0, 1.0, "6. prefetch\nbuffer", "buffer")
    _box(ax, 12.35, 1.3, 0.6, 1.0, "fit", "model")
    _arrow(ax, (1.4, 1.8), (1.8, 1.8))
    for y in lanes:
        _arrow(ax, (3.2, 1.8), (3.6, y + (2.0 / cycle_length - 0.12) / 2))
        _arrow(ax, (5.5, y + (2.0 / cycle_length - 0.12) / 2), (5.9, 1.8))
    for start, end in ((7.5, 7.9), (9.1, 9.5), (10.9, 11.2), (12.2, 12.35)):
        _arrow(ax, (start, 1.8), (end, 1.8))
    ax.text(6.5, 0.25, "records (serialized bytes) flow left to right; from step 4 on, whole batches",
            ha="center", fontsize=8, style="italic")
    _legend(fig, ("storage", "buffer", "parallel", "step", "model"))
    return fig


def data_service_diagram(workers: int = 3):
    """Notebook 06's tf.data service: a dispatcher, `workers` workers running the pipeline, the training client."""
    fig, ax = _canvas(12, 5.2, f"The tf.data service: a dispatcher, {workers} workers and the training client")
    _box(ax, 0.2, 1.6, 1.6, 1.6, "the shard\nfiles\n(shared\nstorage)", "storage")
    _box(ax, 4.4, 4.0, 3.0, 0.9, "dispatcher: hands out work,\nwatches the workers' heartbeats", "process")
    height = 3.2 / workers
    for i in range(workers):
        y = 0.3 + i * height
        _box(ax, 3.6, y, 4.6, height - 0.25, f"worker {workers - 1 - i}: runs the whole pipeline\n(read, blur, "
             "batch) in its own process", "process", fontsize=8)
        _arrow(ax, (1.8, 2.4), (3.6, y + (height - 0.25) / 2))
        _arrow(ax, (8.2, y + (height - 0.25) / 2), (9.6, 1.9))
    _arrow(ax, (6.9, 3.55), (6.9, 4.0), "heartbeats, every 200 ms", both=True, offset=(1.05, -0.2))
    _arrow(ax, (4.9, 4.0), (4.9, 3.55), "distributed_epoch:\nthe next file", offset=(-1.05, -0.2))
    _box(ax, 9.6, 1.3, 2.2, 1.2, "client: training\n(receives finished\nbatches over gRPC)", "model")
    _arrow(ax, (10.7, 2.5), (7.4, 4.45), dashed=True)
    ax.text(9.5, 3.75, "which job,\nwhich workers", fontsize=7.5, style="italic")
    ax.text(2.7, 0.0, "distributed_epoch: each file goes to one worker;\nparallel_epochs: every worker "
            "reads them all", ha="center", fontsize=7.5, style="italic")
    _legend(fig, ("storage", "process", "model"))
    return fig


def multi_worker_diagram(workers: int = 2):
    """Notebook 06's MultiWorkerMirroredStrategy: `workers` processes, each with its TF_CONFIG, its own files, its
    own pipeline and a replica of the model, adding up their gradients after every step."""
    fig, ax = _canvas(12, 4.6, f"MultiWorkerMirroredStrategy: {workers} workers, one model, the same program")
    width = 11.4 / workers
    for i in range(workers):
        x = 0.3 + i * width
        _box(ax, x, 0.9, width - 0.4, 3.0, "", "process")
        ax.text(x + (width - 0.4) / 2, 3.6, f'worker {i}: TF_CONFIG "task": {{"index": {i}}}', ha="center",
                va="center", fontsize=8.5, weight="bold")
        _box(ax, x + 0.2, 2.2, 1.5, 0.9, f"its own files\n(FILE policy:\n{i}, {i + workers}, …)", "storage",
             fontsize=7.5)
        _box(ax, x + 2.0, 2.2, 1.6, 0.9, "its pipeline:\nits part of each\nglobal batch", "parallel", fontsize=7.5)
        _box(ax, x + 3.9, 2.2, width - 4.5, 0.9, "model replica\n(the same weights)", "model", fontsize=7.5)
        _arrow(ax, (x + 1.7, 2.65), (x + 2.0, 2.65))
        _arrow(ax, (x + 3.6, 2.65), (x + 3.9, 2.65))
        _box(ax, x + 3.9, 1.15, width - 4.5, 0.7, "its gradients", "model", fontsize=7.5)
        _arrow(ax, (x + 3.9 + (width - 4.5) / 2, 2.2), (x + 3.9 + (width - 4.5) / 2, 1.85))
    for i in range(workers - 1):   # between neighbours' gradients: the all-reduce
        _arrow(ax, (0.3 + i * width + width - 0.6, 1.5), (0.3 + (i + 1) * width + 3.9, 1.5), both=True)
    ax.text(6.0, 0.35, "all-reduce over gRPC after every step: each worker adds up all the gradients, "
            "then updates its replica", ha="center", fontsize=8, style="italic")
    _legend(fig, ("process", "storage", "parallel", "model"))
    return fig
