"""Peak memory of one training epoch, measured in a fresh child process, optionally under a memory budget.

What the child runs is given by the caller: a function that builds the model for the split's images
(`model(image_shape)`) and one that trains it for one epoch (`train(model, mode, directory, split, batch_size)`;
`helpers.measure.memory_budget.train_one_epoch` loads everything into arrays or streams from shards). They cross to the child as
importable "module:function" names inside the `helpers` package, so nothing passed on its command line can become
other code to run. A process's peak resident set size (RSS) only ever grows, and TensorFlow keeps memory it has used,
so each run is a fresh Python process: it builds the model, notes its resident memory (the floor every run pays,
whatever the data), trains one epoch and reports its own peak. On Linux the peak is the kernel's high-water mark for
the process's memory (`VmHWM` in `/proc/self/status`), not `getrusage`'s `ru_maxrss`: a child started from a large
parent (a notebook kernel with TensorFlow loaded) inherits the parent's `ru_maxrss` across `fork` and `exec`.

    from helpers.measure.memory_budget import train_one_epoch
    from helpers.lessons.tfdata_mnist import article_mlp
    peak_training_memory("load", "data/mnist-tfrecord", "train", train=train_one_epoch, model=article_mlp)
    peak_training_memory("stream", "data/big", "train", headroom_mib=256, train=..., model=...)  # under a budget
    peak_memory_each("stream", ["data/small", "data/big"], "train", ...)   # one child, each split in turn
    python -m helpers.measure.peak_memory helpers.measure.memory_budget:train_one_epoch \\
        helpers.lessons.tfdata_mnist:article_mlp stream train 256 go data/mnist-tfrecord   # what the child runs

**The budget** is a limit on the child's resident memory, enforced from here: a watchdog reads the child's RSS
(`/proc/<pid>/statm`) every few milliseconds and kills the child (SIGKILL) the moment it passes the budget, as
Linux's out-of-memory killer ends a process in a container or a Colab runtime that outgrows its memory. A child that
finishes although its own high-water mark passed the budget between two readings is reported as failed too, so no
run over its budget counts as finished. `budget_mib` is the limit itself; `headroom_mib` sets it from the child's own
floor: the child builds the model, reports its resident memory and waits until its budget (floor + headroom) is in
force before it touches the data. `setrlimit` cannot express this limit: `RLIMIT_AS` counts address space, of which
TensorFlow reserves gigabytes it never touches, and `RLIMIT_DATA` counts writable mappings (thread stacks among
them), not resident memory, so the limit and the measured peak would be in different units. A budget needs Linux's
`/proc` (`budget_unavailable` says why not elsewhere).

**Several splits in one child** (`peak_memory_each`): the child trains one epoch on each split in turn and reports
its high-water mark after each. A peak only grows, so each report is the most the process held up to then: for the
first split its own peak, for a later one an upper bound of its own. Where a way of reading holds about the same
whatever the size (streaming), one child shows it at every size and pays TensorFlow's start-up once, not once per
size. Introduced in notebooks/05_pipeline_profiling.ipynb.
"""
from __future__ import annotations

import importlib
import json
import math
import os
import queue
import re
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Callable

from helpers.setup.processes import child_environment

MODES = ("load", "stream")
# The functions a child may run: a module of this package and a function in it, by name (never a path or code).
FUNCTION_NAME = re.compile(r"helpers(?:\.[A-Za-z_]\w*)+:[A-Za-z_]\w*")
WATCH_INTERVAL = 0.005   # seconds between two readings of a child's resident memory under a budget
GO = "go"                # what the parent sends a waiting child once its budget is in force


@dataclass(frozen=True)
class MemoryRun:
    """One child process's training run: how it read the data, how much, and its memory in MiB."""

    mode: str
    samples: int
    data_mib: float          # the images' size in memory, uint8
    floor_mib: float         # RSS after importing TensorFlow and building the model (0 if killed before)
    peak_mib: float          # peak RSS over the whole run (killed: the reading that passed the budget)
    budget_mib: float | None = None   # the limit on its resident memory, if any
    error: str = ""                   # why the run failed under its budget ("" if it finished)

    @property
    def finished(self) -> bool:
        return not self.error


@dataclass(frozen=True)
class FullRunMemory:
    """Peak memory measured by the maintainers' full benchmark run (no budget): streaming against loading."""

    images: tuple[int, int]          # the two dataset sizes, MNIST-shaped images (784 bytes each)
    stream_mib: tuple[float, float]  # streaming's peak RSS at each size
    load_mib: tuple[float, float]    # loading everything's peak RSS at each size
    ratio: float                     # streaming / loading at the larger size, median of the rounds
    interval: tuple[float, float]    # its 95 % interval
    where: str

    def sentence(self) -> str:
        (small, large), (s_small, s_large), (l_small, l_large) = self.images, self.stream_mib, self.load_mib
        return (f"a full run on MNIST-sized digits measured streaming's peak at {s_small:,.0f} MiB for {small:,} "
                f"digits and {s_large:,.0f} MiB for {large:,}, loading everything's at {l_small:,.0f} and "
                f"{l_large:,.0f} MiB: streaming ÷ loading {self.ratio:.3f}× at {large:,} digits ({self.where})")


# `python -m benchmarks.run` (bench_profiling.memory): 2 rounds, each a streaming and a loading child at once at
# each size, batch 1024, the article's MLP; rows stream_peak_rss_growth_5x and stream_vs_memory_peak_rss_5x of
# helpers/measure/last_full_run.txt (tests/test_peak_memory.py checks they agree).
FULL_RUN = FullRunMemory(images=(200_000, 1_000_000), stream_mib=(782, 787), load_mib=(1_210, 3_053),
                         ratio=0.258, interval=(0.258, 0.258),
                         where="benchmarks, 2026-12-03, an idle 2-core x86-64 VM, TensorFlow 2.21")


def budget_unavailable() -> str | None:
    """Why a memory budget cannot be enforced on this machine, or None where it can (Linux, /proc mounted)."""
    if sys.platform.startswith("linux") and os.path.exists(f"/proc/{os.getpid()}/statm"):
        return None
    if sys.platform == "win32":
        return ("A memory budget needs Linux: its watchdog reads a process's resident memory from /proc, which "
                "Windows does not have (nor Python's `resource` module); run this section in WSL 2, on Colab, "
                "or on a Linux machine.")
    system = "macOS" if sys.platform == "darwin" else sys.platform
    return (f"A memory budget needs Linux: its watchdog reads a process's resident memory from /proc, which "
            f"{system} does not have (and macOS enforces no limit on resident memory, RLIMIT_RSS); run this "
            f"section on Colab, in a Linux container, or on a Linux machine.")


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


def _rss_mib(pid: int | str = "self") -> float | None:
    """The resident memory of process `pid` (Linux; None once it is gone or where there is no /proc)."""
    try:  # the second field of statm is the resident pages
        with open(f"/proc/{pid}/statm") as f:
            return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20
    except (OSError, ValueError, IndexError):
        return None


def _current_rss_mib() -> float:
    rss = _rss_mib()
    return _peak_rss_mib() if rss is None else rss


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


def check_budget(budget_mib, name: str = "budget_mib") -> float:
    """A memory budget in MiB as a float, or `ValueError`: it must be a finite number above 0.

    >>> check_budget(1280)
    1280.0
    """
    if isinstance(budget_mib, bool) or not isinstance(budget_mib, (int, float)) or not math.isfinite(budget_mib) \
            or budget_mib <= 0 or budget_mib > 2**40:
        raise ValueError(f"{name} must be a finite number of MiB above 0 and at most 2**40 (a mebibyte short of "
                         f"an exbibyte), not {budget_mib!r}: a budget of 0, a negative one, infinity or more than "
                         f"any machine holds would mean no limit or no memory at all")
    return float(budget_mib)


def peak_training_memory(mode: str, directory: str | Path, split: str, batch_size: int = 256,
                         timeout: float = 900, budget_mib: float | None = None, *,
                         headroom_mib: float | None = None, train: Callable | str,
                         model: Callable | str) -> MemoryRun:
    """Run `train(model(image_shape), mode, directory, split, batch_size)` in a fresh Python process and return
    what it measured.

    Under a budget (`budget_mib`, or `headroom_mib` above the child's own floor; Linux only), a child killed for
    passing it comes back as a `MemoryRun` whose `error` says so. Any other failure of the child is raised here
    as a `RuntimeError` with its last lines of output.
    """
    return peak_memory_each(mode, [directory], split, batch_size, timeout, budget_mib, headroom_mib=headroom_mib,
                            train=train, model=model)[0]


def peak_memory_each(mode: str, directories: list[str | Path], split: str, batch_size: int = 256,
                     timeout: float = 900, budget_mib: float | None = None, *,
                     headroom_mib: float | None = None, train: Callable | str,
                     model: Callable | str) -> list[MemoryRun]:
    """One fresh Python process builds `model(image_shape)` once and trains it for one epoch on `split` of each of
    `directories` in turn (`train(model, mode, directory, split, batch_size)`); one `MemoryRun` per directory, in
    order. Each run's `peak_mib` is the process's high-water mark after that epoch: for the first its own peak, for
    each later one an upper bound of its own (a peak only grows). The splits must hold images of one shape.

    Under a budget, the run the child was killed in says so; the runs after it say they were not reached.
    """
    if mode not in MODES:
        raise ValueError(f"mode must be one of {MODES}, not {mode!r}")
    if isinstance(directories, (str, bytes, os.PathLike)):   # one path: iterating it would give its characters
        raise ValueError(f"directories must be a list of directories, not one path ({directories!r}): "
                         f"give [{str(directories)!r}]")
    directories = [str(d) for d in directories]
    if not directories:
        raise ValueError("give at least one directory to train on")
    if isinstance(timeout, bool) or not isinstance(timeout, (int, float)) or not 0 < timeout < math.inf:
        raise ValueError(f"timeout must be a finite number of seconds above 0, not {timeout!r}")
    if budget_mib is not None and headroom_mib is not None:
        raise ValueError("give budget_mib (the limit) or headroom_mib (the limit above the child's floor), not both")
    if budget_mib is not None:
        budget_mib = check_budget(budget_mib)
    if headroom_mib is not None:
        headroom_mib = check_budget(headroom_mib, "headroom_mib")
    limited = budget_mib is not None or headroom_mib is not None
    if limited and (reason := budget_unavailable()):
        raise RuntimeError(reason)
    functions = [function_name(train), function_name(model)]
    env = child_environment(gpu=False)   # host memory is measured; under a budget CUDA must never load
    # the directories last, after a fixed-position flag: no name of theirs can be taken for an option
    command = [sys.executable, "-m", "helpers.measure.peak_memory", *functions, mode, split, str(batch_size),
               "wait" if headroom_mib is not None else "go", *directories]
    child = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             text=True, env=env)
    watched = _watch(child, timeout, budget_mib, headroom_mib)
    start, results = watched.messages[:1], watched.messages[1:]
    floor, splits = (start[0]["floor_mib"], start[0]["splits"]) if start else (0.0, [])
    sized = [(s["samples"], s["data_mib"]) for s in splits] + [(0, 0.0)] * (len(directories) - len(splits))
    tail = "\n".join(watched.stderr[-5:])
    if watched.killed_at is None and child.returncode != 0:
        if child.returncode < 0:
            number = -child.returncode
            name = signal.Signals(number).name if number in signal.valid_signals() else "?"
            raise RuntimeError(f"the {mode} child process was stopped by signal {number} ({name}), not by its "
                               f"memory budget; its last output:\n{tail}")
        raise RuntimeError(f"the {mode} child process failed (exit {child.returncode}):\n{tail}")
    if watched.killed_at is None and len(results) != len(directories):
        raise RuntimeError(f"the {mode} child process reported {len(results)} of {len(directories)} runs:\n{tail}")
    runs = []
    for at, (samples, data_mib) in enumerate(sized):
        if at < len(results):
            run = MemoryRun(**{**results[at], "budget_mib": watched.budget})
            if watched.budget is not None and run.peak_mib > watched.budget:   # between two readings
                run = MemoryRun(**{**run.__dict__, "error": f"its peak, {run.peak_mib:,.0f} MiB, passed its "
                                                            f"budget of {watched.budget:,.0f} MiB between two "
                                                            f"readings"})
        elif at == len(results):   # the run it was killed in
            run = MemoryRun(mode, samples, data_mib, floor, watched.killed_at, watched.budget,
                            f"killed: its resident memory reached {watched.killed_at:,.1f} MiB, over its budget "
                            f"of {watched.budget:,.1f} MiB")   # a decimal: rounded whole, the two can read equal
        else:
            run = MemoryRun(mode, samples, data_mib, floor, 0.0, watched.budget,
                            f"not reached: the child was killed on {directories[len(results)]}")
        runs.append(run)
    return runs


@dataclass
class _Watched:
    messages: list        # the child's JSON lines: where it starts (floor), then its report
    stderr: list          # its error output, line by line
    budget: float | None  # the budget in force at the end
    killed_at: float | None = None   # the resident memory that passed it, if the child was killed


def _watch(child: subprocess.Popen, timeout: float, budget: float | None,
           headroom: float | None) -> _Watched:
    """Run `child` to its end: collect its output; under a budget, read its resident memory every
    `WATCH_INTERVAL` seconds and kill it the moment that passes the budget."""
    lines: queue.Queue = queue.Queue()
    stderr: list[str] = []
    readers = [threading.Thread(target=lambda: [lines.put(line) for line in child.stdout], daemon=True),
               threading.Thread(target=lambda: stderr.extend(line.rstrip() for line in child.stderr), daemon=True)]
    for reader in readers:
        reader.start()
    watched = _Watched([], stderr, budget)
    deadline = time.monotonic() + timeout
    try:
        while True:
            ended = child.poll() is not None
            rss = None if ended or watched.budget is None else _rss_mib(child.pid)
            if rss is not None and rss > watched.budget:
                child.kill()
                watched.killed_at = rss
                break
            while not lines.empty():
                message = _message(lines.get())
                if message is None:
                    continue
                watched.messages.append(message)
                if "floor_mib" in message and headroom is not None:   # its budget first, then it may go on
                    watched.budget = message["floor_mib"] + headroom
                    try:
                        child.stdin.write(GO + "\n")
                        child.stdin.flush()
                    except OSError:   # the child is gone already: its end is seen next time round
                        pass
            if ended:
                break
            if time.monotonic() > deadline:
                child.kill()
                raise RuntimeError(f"the memory child ran longer than {timeout:g} s and was stopped")
            time.sleep(WATCH_INTERVAL if watched.budget is not None else 0.05)
    finally:
        if child.poll() is None:
            child.kill()
        child.wait()
        for reader in readers:
            reader.join(timeout=5)
        if child.stdin:
            try:
                child.stdin.close()
            except OSError:   # the child is gone: nothing left to tell it
                pass
    while not lines.empty():
        message = _message(lines.get())
        if message is not None:
            watched.messages.append(message)
    return watched


def _message(line: str) -> dict | None:
    """A JSON line of the child's (its other output, a library's print, is not a message)."""
    try:
        message = json.loads(line)
    except ValueError:
        return None
    return message if isinstance(message, dict) else None


def _measure(train: str, build: str, mode: str, split: str, batch_size: int, directories: list[str],
             wait: bool):
    """In the child: build the model, note the floor, (wait for the budget), train one epoch on each directory,
    printing a report after each; `train` and `build` are checked names."""
    from helpers.storage.tfrecord import read_manifest

    train_one_epoch, build_model = load_function(train), load_function(build)
    manifests = [read_manifest(directory, split) for directory in directories]
    shapes = {m.spec.image_shape for m in manifests}
    if len(shapes) > 1:
        raise ValueError(f"the splits hold images of different shapes ({sorted(shapes)}): one model cannot train "
                         f"on all of {directories}")
    sizes = [{"samples": m.total_records, "data_mib": m.total_records * m.spec.nbytes / 2**20} for m in manifests]
    model = build_model(manifests[0].spec.image_shape)
    floor = _current_rss_mib()
    print(json.dumps({"floor_mib": floor, "splits": sizes}), flush=True)
    if wait and sys.stdin.readline().strip() != GO:   # the parent is gone or sent something else
        os._exit(1)
    for directory, size in zip(directories, sizes):
        train_one_epoch(model, mode, directory, split, batch_size)
        run = MemoryRun(mode, size["samples"], size["data_mib"], floor, _peak_rss_mib())
        print(json.dumps(run.__dict__), flush=True)


if __name__ == "__main__":
    from helpers.setup.processes import exit_with_parent, skip_unused_imports

    exit_with_parent()  # an interrupted notebook must not leave a training child behind
    skip_unused_imports()
    train_arg, model_arg, mode_arg, split_arg, batch_arg, wait_arg, *directory_args = sys.argv[1:]
    _measure(train_arg, model_arg, mode_arg, split_arg, int(batch_arg), directory_args, wait=wait_arg == "wait")
    os._exit(0)  # the reports are out: skip TensorFlow's teardown (a second or two per child)
