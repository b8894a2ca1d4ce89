"""Peak memory of training: load everything into arrays, or stream from shards. Measured in a child process.

A process's peak resident set size (RSS) only ever grows, and TensorFlow keeps memory it has
used, so each measurement runs in a fresh Python process that trains one epoch and reports its
own peak and its size just after importing TensorFlow and building the model (the floor every
run pays, whatever the data). On Linux the peak is the kernel's high-water mark for the
process's memory (`VmHWM` in `/proc/self/status`), not `getrusage`'s `ru_maxrss`: a child
started from a large parent (a notebook kernel with TensorFlow loaded) inherits the parent's
`ru_maxrss` across `fork` and `exec`, so it would report the parent's size, not its own.

    peak_training_memory("load", "data/mnist-tfrecord", "train")     # -> MemoryRun
    peak_training_memory("stream", "data/big", "train", budget_mib=1280)  # under a memory budget
    python -m helpers.peak_memory stream data/mnist-tfrecord train 256  # what the child runs

With `budget_mib`, the child limits its own memory before importing anything heavy
(`resource.setrlimit(RLIMIT_DATA, ...)`: the kernel refuses to give the process more writable
memory than that), so a run that would need more fails there, as it would on a smaller machine,
instead of slowing this one down. The failure is reported, not raised.

Introduced in notebooks/05_pipeline_profiling.ipynb.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

MODES = ("load", "stream")


@dataclass(frozen=True)
class MemoryRun:
    """One child process's training run: how it read the data, how much, and its memory in MiB.

    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """

    mode: str
    samples: int
    data_mib: float          # the images' size in memory, uint8
    floor_mib: float         # RSS after importing TensorFlow and building the model
    peak_mib: float          # peak RSS over the whole run
    budget_mib: float | None = None   # the memory limit the child ran under, if any
    error: str = ""                   # why the run failed under its budget ("" if it finished)

    @property
    def finished(self) -> bool:
        return not self.error


def _peak_rss_mib() -> float:
    try:  # Linux: this process's own high-water mark, in kB
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("VmHWM:"):
                    return int(line.split()[1]) / 2**10
    except OSError:
        pass
    import resource

    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    return peak / 2**20 if sys.platform == "darwin" else peak / 2**10  # bytes on macOS, KiB on Linux


def _current_rss_mib() -> float:
    try:  # Linux: the second field of statm is the resident pages
        with open("/proc/self/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError):
        return _peak_rss_mib()


def train_one_epoch(mode: str, directory: str, split: str, batch_size: int = 256) -> MemoryRun:
    """In this process: train the article's MLP for one epoch of `split`, loading it all first or streaming it.

    `load` reads every record into one uint8 array (the way `keras.datasets` hands MNIST over)
    and fits on the arrays; `stream` fits on notebook 04's shuffled pipeline, which holds a
    10,000-record shuffle buffer and a few batches, whatever the size of the split.
    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    import numpy as np
    import tensorflow as tf

    from helpers.mlp import article_mlp
    from helpers.tfrecord import read_manifest, read_split

    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    manifest = read_manifest(directory, split)
    model = article_mlp()
    floor = _current_rss_mib()
    if mode == "load":
        images = np.empty((manifest.total_records, *manifest.spec.image_shape), np.uint8)
        labels = np.empty(manifest.total_records, np.int64)
        at = 0
        for x, y in read_split(directory, split, 4096):
            images[at:at + len(y)], labels[at:at + len(y)] = x.numpy(), y.numpy()
            at += len(y)
        model.fit(images, labels, batch_size=batch_size, epochs=1, shuffle=True, verbose=0)
    else:
        stream = read_split(directory, split, batch_size, parallel_reads=4, shuffle_buffer=10_000)
        model.fit(stream.prefetch(tf.data.AUTOTUNE), epochs=1, verbose=0)
    data_mib = manifest.total_records * manifest.spec.nbytes / 2**20
    return MemoryRun(mode, manifest.total_records, data_mib, floor, _peak_rss_mib())


def peak_training_memory(mode: str, directory: str | Path, split: str, batch_size: int = 256,
                         timeout: float = 900, budget_mib: float | None = None) -> MemoryRun:
    """Run `train_one_epoch` in a fresh Python process and return what it measured.

    Without a budget, a failure in the child is raised here as a `RuntimeError` with the
    child's last lines of output. With `budget_mib`, a child that runs out of memory under
    its budget comes back as a `MemoryRun` whose `error` says how it failed.
    Introduced in notebooks/05_pipeline_profiling.ipynb.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    command = [sys.executable, "-m", "helpers.peak_memory", mode, str(directory), split, str(batch_size)]
    if budget_mib is not None:
        command.append(str(budget_mib))
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return MemoryRun(**json.loads(lines[-1]))
    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
    out_of_memory = any(word in tail for word in ("MemoryError", "bad_alloc", "Cannot allocate memory",
                                                  "ResourceExhausted", "OOM"))
    if budget_mib is not None and (out_of_memory or done.returncode < 0):
        how = tail.splitlines()[-1] if out_of_memory else f"killed by signal {-done.returncode}"
        return MemoryRun(mode, 0, 0.0, 0.0, 0.0, budget_mib, f"ran out of memory under the budget: {how}")
    raise RuntimeError(f"the {mode} child process failed (exit {done.returncode}):\n{tail}")


def limit_memory(budget_mib: float) -> None:
    """In this process: let the kernel refuse writable memory beyond `budget_mib` (Linux and macOS).

    Introduced in notebooks/06_scaling_out.ipynb.
    """
    import resource

    limit = int(budget_mib * 2**20)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


if __name__ == "__main__":
    from helpers.processes import exit_with_parent

    exit_with_parent()  # an interrupted notebook must not leave a training child behind
    mode_arg, directory_arg, split_arg, batch_arg = sys.argv[1:5]
    budget = float(sys.argv[5]) if len(sys.argv) > 5 else None
    if budget is not None:
        limit_memory(budget)  # before TensorFlow is imported, so everything it allocates counts
    run = train_one_epoch(mode_arg, directory_arg, split_arg, int(batch_arg))
    print(json.dumps({**run.__dict__, "budget_mib": budget}))
