"""Peak memory of one training epoch, measured in a fresh child process: the launcher and the measurement.

What the child runs is given by the caller: a function that builds the model (`model`) and one that trains it for
one epoch (`train(model, mode, directory, split, batch_size)`; notebook 05's `train_one_epoch` loads everything into
arrays or streams from shards). They cross to the child as importable "module:function" names inside the `helpers`
package, so nothing passed on its command line can become other code to run. A process's peak resident set size (RSS)
only ever grows, and TensorFlow keeps memory it has used, so each run is a fresh Python process: it builds the model,
notes its size (the floor every run pays, whatever the data), trains one epoch and reports its own peak. On Linux the peak is the kernel's high-water mark for the
process's memory (`VmHWM` in `/proc/self/status`), not `getrusage`'s `ru_maxrss`: a child
started from a large parent (a notebook kernel with TensorFlow loaded) inherits the parent's
`ru_maxrss` across `fork` and `exec`, so it would report the parent's size, not its own.

    from helpers.lessons.pipeline_profiling import train_one_epoch
    from helpers.lessons.tfdata_mnist import article_mlp
    peak_training_memory("load", "data/mnist-tfrecord", "train", train=train_one_epoch, model=article_mlp)  # MemoryRun
    peak_training_memory("stream", "data/big", "train", budget_mib=1280, train=..., model=...)  # under a budget
    python -m helpers.measure.peak_memory helpers.lessons.pipeline_profiling:train_one_epoch \
        helpers.lessons.tfdata_mnist:article_mlp stream data/mnist-tfrecord train 256   # what the child runs

With `budget_mib`, the child limits its own memory before importing anything heavy
(`resource.setrlimit(RLIMIT_DATA, ...)`: the kernel refuses to give the process more writable
memory than that), so a run that would need more fails there, as it would on a smaller machine,
instead of slowing this one down. The failure is reported, not raised.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import re
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from helpers.setup.processes import child_environment

MODES = ("load", "stream")
# The functions a child may run: a module of this package and a function in it, by name (never a path or code).
FUNCTION_NAME = re.compile(r"helpers(?:\.[A-Za-z_]\w*)+:[A-Za-z_]\w*")
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


def function_name(function: Callable | str) -> str:
    """The "module:function" name a child process imports `function` by, checked: a function defined at the top
    of a module of the `helpers` package (a lesson's saved code, say), which that name gives back. A name given as a
    string is checked the same way. Anything else is a `ValueError` saying why.

    >>> function_name(check_budget)
    'helpers.measure.peak_memory:check_budget'
    """
    name = function if isinstance(function, str) else \
        f"{getattr(function, '__module__', '?')}:{getattr(function, '__qualname__', '?')}"
    if not FUNCTION_NAME.fullmatch(name):
        raise ValueError(f"{name!r} cannot run in a child process: it must be a function defined at the top of a "
                         f"module of the helpers package (a notebook's function: save it with #@save first), given "
                         f"as the function or as 'helpers.<module>:<function>'")
    found = load_function(name)
    if not isinstance(function, str) and found is not function:
        raise ValueError(f"{name} does not name the function passed (another definition of it was run since)")
    return name


def check_function_name(name: str, roots: tuple[str, ...] = ("helpers",)) -> str:
    """`name` if it is a "<root>.<module>:<function>" name a child may import, `<root>` one of `roots` (the
    helpers package, or also the benchmarks for `one_core`; nothing is imported to check it); `ValueError` for any
    other (a name such as "os:system" would run anything). `one_core` checks by it too.

    >>> check_function_name("os:system")
    Traceback (most recent call last):
    ...
    ValueError: 'os:system' is not a 'helpers.<module>:<function>' name
    """
    pattern = "|".join(re.escape(root) for root in roots)
    if not isinstance(name, str) or not re.fullmatch(rf"(?:{pattern})(?:\.[A-Za-z_]\w*)+:[A-Za-z_]\w*", name):
        raise ValueError(f"{name!r} is not a {' or '.join(repr(r + '.<module>:<function>') for r in roots)} name")
    return name


def load_function(name: str, roots: tuple[str, ...] = ("helpers",)) -> Callable:
    """The function a checked "<root>.<module>:<function>" name gives (`ValueError` for any other name)."""
    check_function_name(name, roots)
    module, _, attribute = name.partition(":")
    function = getattr(importlib.import_module(module), attribute, None)
    if not callable(function):
        raise ValueError(f"{module} has no function {attribute!r}")
    return function


def peak_training_memory(mode: str, directory: str | Path, split: str, batch_size: int = 256,
                         timeout: float = 900, budget_mib: float | None = None, *, train: Callable | str,
                         model: Callable | str) -> MemoryRun:
    """Run `train(model(), mode, directory, split, batch_size)` in a fresh Python process and return what it measured.

    Without a budget, a failure in the child is raised here as a `RuntimeError` with the
    child's last lines of output. With `budget_mib`, a child that runs out of memory under
    its budget comes back as a `MemoryRun` whose `error` says how it failed.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if budget_mib is not None:
        budget_mib = check_budget(budget_mib)
    functions = [function_name(train), function_name(model)]
    env = child_environment(gpu=False)   # host memory is measured; under a budget CUDA must never load
    command = [sys.executable, "-m", "helpers.measure.peak_memory", *functions, mode, str(directory), split,
               str(batch_size)]
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
            or budget_mib <= 0 or budget_mib > 2**40:
        raise ValueError(f"budget_mib must be a finite number of MiB above 0 and at most 2**40 (a mebibyte short of "
                         f"an exbibyte), not {budget_mib!r}: a budget of 0, a negative one, infinity or more than "
                         f"setrlimit takes would mean no limit or no memory at all")
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


def _measure(train: str, build: str, mode: str, directory: str, split: str, batch_size: int) -> MemoryRun:
    """In the child: build the model, note the floor, train one epoch; `train` and `build` are checked names."""
    from helpers.storage.tfrecord import read_manifest

    train_one_epoch, build_model = load_function(train), load_function(build)
    manifest = read_manifest(directory, split)
    model = build_model()
    floor = _current_rss_mib()
    train_one_epoch(model, mode, directory, split, batch_size)
    return MemoryRun(mode, manifest.total_records, manifest.total_records * manifest.spec.nbytes / 2**20, floor,
                     _peak_rss_mib())


if __name__ == "__main__":
    from helpers.setup.processes import exit_with_parent

    exit_with_parent()  # an interrupted notebook must not leave a training child behind
    train_arg, model_arg, mode_arg, directory_arg, split_arg, batch_arg = sys.argv[1:7]
    budget = check_budget(float(sys.argv[7])) if len(sys.argv) > 7 else None
    if budget is not None:
        limit_memory(budget)  # before TensorFlow is imported, so everything it allocates counts
    try:
        run = _measure(train_arg, model_arg, mode_arg, directory_arg, split_arg, int(batch_arg))
    except Exception as error:  # under a budget, an allocation that fails anywhere (even importing TensorFlow)
        if budget is None or not _is_out_of_memory(error):
            raise
        print(f"{type(error).__name__}: {str(error).splitlines()[0][:200] if str(error) else ''}", flush=True)
        os._exit(OUT_OF_MEMORY_EXIT)
    print(json.dumps({**run.__dict__, "budget_mib": budget}), flush=True)
    os._exit(0)  # the report is out: skip TensorFlow's teardown (a second or two per child)
