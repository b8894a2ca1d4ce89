"""A pipeline alone in a child process pinned to one CPU core: what an input pipeline gets on Colab's usual
runtime, where the GPU's Python process shares two virtual CPUs with it.

`PipelineChild` starts a Python child that pins itself with `os.sched_setaffinity(0, {cpu})` before TensorFlow
starts (every thread TensorFlow makes inherits that one CPU), sets TensorFlow's intra- and inter-op pools and
tf.data's private thread pool to 1 thread, builds its pipelines by calling factories ("helpers.<module>:<function>"
with JSON keyword arguments: the name rule of `peak_memory`, checked in parent and child, so no other code runs), and then runs one epoch of one of them each time the parent asks, replying with its `Epoch`
as one JSON line on stdout. The parent decides the rounds (`helpers.measure.alternate`), so a one-core
epoch alternates with whatever it is compared with.

The child sees no GPU and stops with its parent (`child_environment`, `exit_with_parent`). On a platform without
`os.sched_setaffinity` (macOS, Windows) `PipelineChild(cpu=...)` raises `OneCoreUnsupported`, whose message says so.

`copy_rate` measures the physical ceiling in the same pinned process: the bytes per second one core copies files
from the page cache into a preallocated buffer with large reads, which no pipeline reading those files can beat.
"""
from __future__ import annotations

import json
import os
import subprocess
import sys
import threading
import time
from collections import deque

from helpers.measure.core import Epoch, pipeline_epoch
from helpers.measure.peak_memory import check_function_name, load_function

FACTORY_ROOTS = ("helpers", "benchmarks")   # a pipeline factory is the series' code: the helpers or a benchmark
from helpers.storage.files import file_problem
from helpers.setup.processes import child_environment, exit_with_parent, skip_unused_imports

# The child's first statements: pin this process before anything imports TensorFlow (helpers.measure's package
# imports Keras, so even `python -m helpers.measure.one_core` would start TensorFlow's threads unpinned).
BOOTSTRAP = ("import os, runpy, sys; os.sched_setaffinity(0, {int(sys.argv[1])}); "
             "runpy.run_module('helpers.measure.one_core', run_name='__main__', alter_sys=True)")
REPLY = "ONE-CORE "           # the prefix of the child's JSON replies (anything else on stdout is not one)
COPY_CHUNK = 8 * 1024 * 1024  # bytes per read when measuring the page-cache ceiling


class OneCoreUnsupported(RuntimeError):
    """This platform cannot pin a process to one CPU (no `os.sched_setaffinity`: macOS, Windows)."""


def one_core_supported() -> bool:
    """Whether a process can be pinned to one CPU here (Linux: yes)."""
    return hasattr(os, "sched_setaffinity") and hasattr(os, "sched_getaffinity")


def unsupported_message() -> str:
    return (f"one-core measurements need os.sched_setaffinity, which {sys.platform} does not have (Linux does): "
            f"skipped; to see them, run this on Linux, on Colab, or on Windows inside WSL 2")


def pick_core() -> int:
    """The CPU a pinned child gets: the highest one this process may run on (the first is where the system's
    own interrupts and daemons tend to land)."""
    if not one_core_supported():
        raise OneCoreUnsupported(unsupported_message())
    return max(os.sched_getaffinity(0))


class PipelineChild:
    """A child process holding named pipelines: `epoch(name)` runs one epoch of one of them there and returns its
    `Epoch`.

    `pipelines` maps a name to `(factory, kwargs)`: `factory` is "helpers.<module>:<function>", and `function(**kwargs)` must
    return the dataset (anything `pipeline_epoch` takes); `kwargs` must be JSON (paths as strings). `cpu`: the CPU
    to pin the child to, or `"auto"` for `pick_core()`. `repeat`: each epoch reads every pipeline that many
    times (`dataset.repeat`), for splits so small that one pass lasts about as long as tf.data takes to start.

    >>> with PipelineChild({"n": ("helpers.measure.one_core:numbers", {"n": 1000, "batch_size": 100})}) as child:
    ...     child.cpus == [pick_core()], child.epoch("n").samples   # doctest: +SKIP
    (True, 1000)
    """

    def __init__(self, pipelines: dict[str, tuple[str, dict]] | None = None, *, cpu: int | str = "auto",
                 repeat: int = 1, start_timeout: float = 180) -> None:
        if not one_core_supported():
            raise OneCoreUnsupported(unsupported_message())
        cpu = pick_core() if cpu == "auto" else int(cpu)
        pipelines = pipelines or {}
        for name, (factory, _) in pipelines.items():
            _check_factory(name, factory)
        spec = json.dumps({"pipelines": {name: [f, kw or {}] for name, (f, kw) in pipelines.items()}, "cpu": cpu,
                           "repeat": int(repeat)})
        self.cpu, self.names, self._start_timeout, self._ready = cpu, list(pipelines), start_timeout, None
        self._errors: deque = deque(maxlen=30)
        self.process = subprocess.Popen([sys.executable, "-c", BOOTSTRAP, str(cpu), spec],
                                        text=True, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                                        stderr=subprocess.PIPE, env=child_environment(gpu=False))
        threading.Thread(target=self._collect_errors, daemon=True, name="one-core-stderr").start()

    def wait_ready(self) -> dict:
        """Wait until the child has started TensorFlow and built its pipelines (the first request waits for it
        too: start a child, prepare the data meanwhile, then `add` the pipelines that read it)."""
        if self._ready is None:
            self._ready = self._ask(None, timeout=self._start_timeout)
        return self._ready

    @property
    def cpus(self) -> list[int]:
        """The CPUs any of the child's threads may run on, as the child reports them when it is ready."""
        return self.wait_ready()["cpus"]

    @property
    def threads(self) -> int:
        """How many threads the child had when it was ready (TensorFlow's included)."""
        return self.wait_ready()["threads"]

    @property
    def threadpool(self) -> int:
        """The threads of tf.data's private pool in the child."""
        return self.wait_ready()["threadpool"]

    def add(self, name: str, factory: str, kwargs: dict | None = None) -> None:
        """Build one more pipeline in the child: `factory(**kwargs)`, as the constructor's."""
        _check_factory(name, factory)
        self.wait_ready()
        self._ask({"do": "add", "name": name, "factory": factory, "kwargs": kwargs or {}})
        self.names.append(name)

    def _collect_errors(self) -> None:
        for line in self.process.stderr:
            self._errors.append(line.rstrip())

    def _ask(self, request: dict | None, timeout: float | None = None) -> dict:
        """Send `request` (None: wait for the ready line) and return the child's reply."""
        if request is not None:
            self.process.stdin.write(json.dumps(request) + "\n")
            self.process.stdin.flush()
        timer = threading.Timer(timeout, self.process.kill) if timeout else None
        if timer:
            timer.start()
        try:
            for line in self.process.stdout:
                if line.startswith(REPLY):
                    reply = json.loads(line[len(REPLY):])
                    if "error" in reply:
                        raise RuntimeError(f"the pipeline child ({', '.join(self.names)}) failed: {reply['error']}")
                    return reply
        finally:
            if timer:
                timer.cancel()
        self.process.wait()
        raise RuntimeError(f"the pipeline child ({', '.join(self.names)}) exited with code {self.process.returncode}; "
                           f"its last error output:\n" + "\n".join(self._errors))

    def epoch(self, name: str) -> Epoch:
        """One epoch of the pipeline `name` in the child, timed there as `pipeline_epoch` times it."""
        if name not in self.names:
            raise KeyError(f"no pipeline {name!r} in this child; it has {self.names}")
        self.wait_ready()
        reply = self._ask({"do": "epoch", "name": name})
        return Epoch(reply["samples"], reply["seconds"], reply["start_up"])

    def copy_rate(self, paths: list[str], seconds: float = 0.3) -> float:
        """Bytes per second the child copies `paths` (read whole, again and again for at least `seconds`) into a
        preallocated buffer with reads of `COPY_CHUNK` bytes: the page cache's ceiling for one core, once the
        files are cached (read them once first). Only regular files: `/dev/zero` or a FIFO would never end."""
        _check_regular(paths)
        self.wait_ready()
        return float(self._ask({"do": "copy", "paths": [str(p) for p in paths], "seconds": seconds})["rate"])

    def close(self) -> None:
        if self.process.poll() is None:
            try:
                self.process.stdin.close()   # the child's loop ends at end of input
                self.process.wait(10)
            except (OSError, subprocess.TimeoutExpired):
                self.process.kill()
                self.process.wait()
        for stream in (self.process.stdout, self.process.stderr):
            stream.close()

    def __enter__(self) -> "PipelineChild":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _check_factory(name: str, factory: str) -> None:
    try:
        check_function_name(factory, FACTORY_ROOTS)
    except ValueError as error:
        raise ValueError(f"pipeline {name!r}: {error}") from None


def _check_regular(paths: list[str]) -> None:
    for path in paths:
        if (problem := file_problem(path)) is not None:
            raise ValueError(f"cannot measure a copy rate from {path}: it is {problem}")


def copy_files(paths: list[str], seconds: float) -> float:
    """Bytes per second read from `paths` into one preallocated buffer (no allocation per read), repeated for at
    least `seconds`. Only regular files (checked again here, in the child)."""
    _check_regular(paths)
    buffer = memoryview(bytearray(COPY_CHUNK))
    done, start = 0, time.perf_counter()
    while True:
        for path in paths:
            with open(path, "rb", buffering=0) as f:
                while (n := f.readinto(buffer)):
                    done += n
        elapsed = time.perf_counter() - start
        if elapsed >= seconds:
            return done / elapsed


def numbers(n: int, batch_size: int):
    """A tiny pipeline for tests: `n` numbers in batches, each as `(x, x)`."""
    import tensorflow as tf

    return tf.data.Dataset.range(n).map(lambda i: (i, i)).batch(batch_size)


def _all_threads_cpus() -> set[int]:
    """The CPUs any thread of this process may run on (affinity is per thread on Linux: one thread left unpinned
    would show here); elsewhere, the process's."""
    if not hasattr(os, "sched_getaffinity"):
        return set(range(os.cpu_count() or 1))
    cpus = set(os.sched_getaffinity(0))
    try:
        tasks = os.listdir("/proc/self/task")
    except OSError:
        return cpus
    for tid in tasks:
        try:
            cpus |= os.sched_getaffinity(int(tid))
        except OSError:   # the thread ended meanwhile
            pass
    return cpus


def _thread_count() -> int:
    """The threads this process has (TensorFlow's included), where the system lists them."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return threading.active_count()


def _reply(doc: dict) -> None:
    sys.stdout.write(REPLY + json.dumps(doc) + "\n")
    sys.stdout.flush()


def _serve(spec: dict) -> None:
    """The child: pin, start TensorFlow with pools of 1, build the pipeline, then answer requests until stdin ends."""
    exit_with_parent()
    skip_unused_imports()
    # BOOTSTRAP pinned this process already: every thread TensorFlow starts inherits its one CPU.
    import tensorflow as tf

    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
    options = tf.data.Options()
    options.threading.private_threadpool_size = 1

    def build(factory: str, kwargs: dict):
        dataset = load_function(factory, FACTORY_ROOTS)(**kwargs)   # a checked name, or a ValueError
        return (dataset.repeat(spec["repeat"]) if spec["repeat"] > 1 else dataset).with_options(options)

    datasets = {name: build(factory, kwargs) for name, (factory, kwargs) in spec["pipelines"].items()}
    _reply({"cpus": sorted(_all_threads_cpus()), "threads": _thread_count(), "threadpool": options.threading.private_threadpool_size})
    for line in sys.stdin:
        request = json.loads(line)
        try:
            if request["do"] == "epoch":
                e = pipeline_epoch(datasets[request["name"]])
                _reply({"samples": e.samples, "seconds": e.seconds, "start_up": e.start_up})
            elif request["do"] == "add":
                datasets[request["name"]] = build(request["factory"], request["kwargs"])
                _reply({"added": request["name"]})
            elif request["do"] == "copy":
                _reply({"rate": copy_files(request["paths"], request["seconds"])})
            else:
                _reply({"error": f"unknown request {request['do']!r}"})
        except Exception as e:   # the parent raises it with this text
            _reply({"error": f"{type(e).__name__}: {e}"})


if __name__ == "__main__":
    _serve(json.loads(sys.argv[2]))   # argv[1] is the CPU BOOTSTRAP pinned to
