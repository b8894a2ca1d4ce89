"""Peak memory of one training epoch, measured in a fresh child process: the launcher and the measurement.

What the child trains is notebook 05's `train_one_epoch` (load everything into arrays, or stream
from shards; `helpers.lessons.pipeline_profiling`). A process's peak resident set size (RSS) only
ever grows, and TensorFlow keeps memory it has used, so each run is a fresh Python process: it
builds the article's MLP, notes its size (the floor every run pays, whatever the data), trains one
epoch and reports its own peak. On Linux the peak is the kernel's high-water mark for the
process's memory (`VmHWM` in `/proc/self/status`), not `getrusage`'s `ru_maxrss`: a child
started from a large parent (a notebook kernel with TensorFlow loaded) inherits the parent's
`ru_maxrss` across `fork` and `exec`, so it would report the parent's size, not its own.

    peak_training_memory("load", "data/mnist-tfrecord", "train")     # -> MemoryRun
    peak_training_memory("stream", "data/big", "train", budget_mib=1280)  # under a memory budget
    python -m helpers.measure.peak_memory stream data/mnist-tfrecord train 256  # what the child runs

With `budget_mib`, the child limits its own memory before importing anything heavy
(`resource.setrlimit(RLIMIT_DATA, ...)`: the kernel refuses to give the process more writable
memory than that), so a run that would need more fails there, as it would on a smaller machine,
instead of slowing this one down. The failure is reported, not raised.
"""
from __future__ import annotations

import json
import math
import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers.setup.processes import child_environment

MODES = ("load", "stream")
OUT_OF_MEMORY_EXIT = 3  # the child's exit code when an allocation failed under its budget


@dataclass(frozen=True)
class MemoryRun:
    """One child process's training run: how it read the data, how much, and its memory in MiB."""

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


def peak_training_memory(mode: str, directory: str | Path, split: str, batch_size: int = 256,
                         timeout: float = 900, budget_mib: float | None = None) -> MemoryRun:
    """Run notebook 05's `train_one_epoch` in a fresh Python process and return what it measured.

    Without a budget, a failure in the child is raised here as a `RuntimeError` with the
    child's last lines of output. With `budget_mib`, a child that runs out of memory under
    its budget comes back as a `MemoryRun` whose `error` says how it failed.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if budget_mib is not None:
        budget_mib = check_budget(budget_mib)
    env = child_environment(gpu=False)   # host memory is measured; under a budget CUDA must never load
    command = [sys.executable, "-m", "helpers.measure.peak_memory", mode, str(directory), split, str(batch_size)]
    if budget_mib is not None:
        command.append(repr(budget_mib))
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=env)
    lines = done.stdout.strip().splitlines()
    if done.returncode == 0 and lines:
        return MemoryRun(**json.loads(lines[-1]))
    tail = "\n".join((done.stderr or done.stdout).strip().splitlines()[-5:])
    if budget_mib is not None:
        if done.returncode == OUT_OF_MEMORY_EXIT:   # the child caught its own allocation failure
            return MemoryRun(mode, 0, 0.0, 0.0, 0.0, budget_mib, f"ran out of memory under the budget: {lines[-1] if lines else tail}")
        native = _native_allocation_failure(done.stderr or "")
        if native is not None:   # a library ran out before Python could catch it (OpenBLAS, C++), and exited
            return MemoryRun(mode, 0, 0.0, 0.0, 0.0, budget_mib, f"ran out of memory under the budget: {native}")
    if done.returncode < 0:
        name = signal.Signals(-done.returncode).name if -done.returncode in signal.valid_signals() else "?"
        raise RuntimeError(f"the {mode} child process was stopped by signal {-done.returncode} ({name}), not by its "
                           f"memory budget; its last output:\n{tail}")
    raise RuntimeError(f"the {mode} child process failed (exit {done.returncode}):\n{tail}")


def check_budget(budget_mib) -> float:
    """A memory budget in MiB as a float, or `ValueError`: it must be a finite number above 0.

    >>> check_budget(1280)
    1280.0
    """
    if isinstance(budget_mib, bool) or not isinstance(budget_mib, (int, float)) or not math.isfinite(budget_mib) \
            or budget_mib <= 0:
        raise ValueError(f"budget_mib must be a finite number of MiB above 0, not {budget_mib!r}: a budget of 0, "
                         f"a negative one or infinity would mean no limit or no memory at all")
    return float(budget_mib)


# What native libraries print when an allocation fails and they end the process themselves: matched as
# whole messages at the start of a line, never a word such as "OOM" that a path could contain.
NATIVE_ALLOCATION_FAILURES = ("OpenBLAS error: Memory allocation still failed",
                              "terminate called after throwing an instance of 'std::bad_alloc'",
                              "MemoryError", "Fatal Python error: _PyMem", "std::bad_alloc")


def _native_allocation_failure(stderr: str) -> str | None:
    for line in stderr.splitlines():
        if any(line.strip().startswith(message) for message in NATIVE_ALLOCATION_FAILURES):
            return line.strip()
    return None


def _is_out_of_memory(error: BaseException) -> bool:
    """Whether `error`, or an error it was raised from, is an allocation that failed."""
    import errno

    while error is not None:
        if isinstance(error, MemoryError) or (isinstance(error, OSError) and error.errno == errno.ENOMEM):
            return True
        if type(error).__name__ == "ResourceExhaustedError" or "Cannot allocate memory" in str(error) \
                or "failed to map segment" in str(error):
            return True
        error = error.__cause__ or error.__context__
    return False


def limit_memory(budget_mib: float) -> None:
    """In this process: let the kernel refuse writable memory beyond `budget_mib` (Linux and macOS)."""
    import resource

    limit = int(budget_mib * 2**20)
    resource.setrlimit(resource.RLIMIT_DATA, (limit, limit))


def _measure(mode: str, directory: str, split: str, batch_size: int) -> MemoryRun:
    """In the child: build the article's MLP, note the floor, train one epoch with notebook 05's `train_one_epoch`."""
    from helpers.lessons.pipeline_profiling import train_one_epoch
    from helpers.lessons.tfdata_mnist import article_mlp
    from helpers.storage.tfrecord import read_manifest

    manifest = read_manifest(directory, split)
    model = article_mlp()
    floor = _current_rss_mib()
    train_one_epoch(model, mode, directory, split, batch_size)
    return MemoryRun(mode, manifest.total_records, manifest.total_records * manifest.spec.nbytes / 2**20, floor,
                     _peak_rss_mib())


if __name__ == "__main__":
    from helpers.setup.processes import exit_with_parent

    exit_with_parent()  # an interrupted notebook must not leave a training child behind
    mode_arg, directory_arg, split_arg, batch_arg = sys.argv[1:5]
    budget = check_budget(float(sys.argv[5])) if len(sys.argv) > 5 else None
    if budget is not None:
        limit_memory(budget)  # before TensorFlow is imported, so everything it allocates counts
    try:
        run = _measure(mode_arg, directory_arg, split_arg, int(batch_arg))
    except Exception as error:  # under a budget, an allocation that fails anywhere (even importing TensorFlow)
        if budget is None or not _is_out_of_memory(error):
            raise
        print(f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}", flush=True)
        os._exit(OUT_OF_MEMORY_EXIT)
    print(json.dumps({**run.__dict__, "budget_mib": budget}), flush=True)
    os._exit(0)  # the report is out: skip TensorFlow's teardown (a second or two per child)
