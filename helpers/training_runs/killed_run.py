"""Training runs killed by SIGKILL mid-epoch, as a disconnect or a preempted machine stops one (notebook 08).

One child process trains notebook 08's id-logging MLP with the lesson's two recipes (`backup`: `BackupAndRestore`;
`exact`: the position saved with the model), one run per thread, each on the first `n` MNIST images. A run that has
trained its `kill_at`-th batch (counted over the whole run) stops right there, in its callback, and trains and writes
nothing more; once every run has stopped, the process kills itself with SIGKILL, so nothing gets to clean up. The
checkpoints stay in each run's directory, for a new process to resume from. One process for all the runs pays
TensorFlow's import (seconds of CPU) once, and it can start before its work is known, importing meanwhile:

    child = KilledRuns()   # imports TensorFlow now
    ...
    code = child.run([("exact", "data/run-a", 2000, 57), ("backup", "data/run-b", 2000, 57)])   # -9
    code = run_killed([("exact", "data/run-c", 2000, 5)])   # started and given its work at once
"""
from __future__ import annotations

import json
import os
import queue
import signal
import subprocess
import sys
import threading
from pathlib import Path

from helpers.setup.processes import child_environment, exit_with_parent, own_session, skip_unused_imports

KINDS = ("backup", "exact")


class KilledRuns:
    """A child process that imports TensorFlow as soon as it starts, then waits for `run`'s work."""

    def __init__(self, timeout: float = 300) -> None:
        self.timeout = timeout
        # Its own session: an interrupt of the kernel (SIGINT to its process group) must leave it for later cells.
        self.process = subprocess.Popen([sys.executable, "-m", "helpers.training_runs.killed_run"],
                                        env=child_environment(gpu=False), stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, **own_session())

    def run(self, runs: list[tuple[str, str | Path, int, int]], *, epochs: int = 3, batch_size: int = 64,
            save_every: int = 10) -> int:
        """Train every `(kind, directory, n, kill_at)` at once, each in its own thread, until the process is
        killed; return its exit code (`-signal.SIGKILL`, as planned). `RuntimeError` with the child's last words
        if it ended some other way."""
        work = []
        for kind, directory, n, kill_at in runs:
            if kind not in KINDS:
                raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
            work.append([kind, str(directory), int(n), int(kill_at)])
        if self.process.poll() is not None or self.process.stdin.closed:
            raise RuntimeError("this child has had its work already (or has exited): start a new KilledRuns")
        line = json.dumps({"runs": work, "epochs": int(epochs), "batch_size": int(batch_size),
                           "save_every": int(save_every)})
        try:
            _, err = self.process.communicate(line + "\n", timeout=self.timeout)
        except subprocess.TimeoutExpired:
            self.process.kill()
            _, err = self.process.communicate()
            raise RuntimeError(f"the killed runs {runs} took more than {self.timeout} s:\n{err[-2000:]}")
        if self.process.returncode != -signal.SIGKILL:
            raise RuntimeError(f"the killed runs {runs} exited with {self.process.returncode}, not SIGKILL:\n"
                               f"{err[-2000:]}")
        return self.process.returncode


def run_killed(runs: list[tuple[str, str | Path, int, int]], *, epochs: int = 3, batch_size: int = 64,
               save_every: int = 10, timeout: float = 300) -> int:
    """`KilledRuns(timeout).run(runs, ...)`: start the child and give it its work at once."""
    return KilledRuns(timeout).run(runs, epochs=epochs, batch_size=batch_size, save_every=save_every)


def training_data(n: int):
    """The first `n` MNIST training images and their labels as int64, as notebook 08 trains on them (quick mode
    without the real files: the generated stand-ins)."""
    import numpy as np

    from helpers.data.datasets import load_mnist

    (x, y), _ = load_mnist()
    return x[:n], y[:n].astype(np.int64)


def _fail(message: str) -> None:
    """Exit at once with `message` on stderr: threads stopped in their callbacks must not hold up the exit."""
    sys.stderr.write(message + "\n")
    sys.stderr.flush()
    os._exit(1)


def main() -> None:
    exit_with_parent()
    from helpers.setup.notebook import stderr_to_devnull

    skip_unused_imports()   # this child draws nothing and runs no JAX
    with stderr_to_devnull():
        import keras
        import tensorflow as tf
    tf.config.experimental.enable_op_determinism()   # as the notebook's kernel: the same weights, bit for bit
    from helpers.lessons.resume_shuffle_grain import id_mlp, train_exact, train_with_backup

    line = sys.stdin.readline()
    if not line:
        _fail("the notebook gave no work")
    work = json.loads(line)
    stopped: queue.Queue = queue.Queue()   # (run index, None) when a run stopped as planned, else (index, why)

    class StopAfter(keras.callbacks.Callback):
        """Right after the run's `kill_at`-th batch, reports it and waits for the SIGKILL: no further batch,
        callback or write of this run happens."""

        def __init__(self, index: int, kill_at: int) -> None:
            super().__init__()
            self.index, self.kill_at, self.batches = index, kill_at, 0

        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1
            if self.batches == self.kill_at:
                stopped.put((self.index, None))
                threading.Event().wait()   # for ever: the process dies here

    data = {n: training_data(n) for n in {n for _, _, n, _ in work["runs"]}}
    # The models are built one after another: `id_mlp` seeds the global random generators before it builds.
    models = [id_mlp(work["epochs"] * n * 2) for _, _, n, _ in work["runs"]]

    def train(index: int) -> None:
        kind, directory, n, kill_at = work["runs"][index]
        try:
            (train_exact if kind == "exact" else train_with_backup)(
                models[index], *data[n], Path(directory), epochs=work["epochs"], batch_size=work["batch_size"],
                save_every=work["save_every"], callbacks=[StopAfter(index, kill_at)])
            stopped.put((index, f"the run ended before its batch {kill_at}: nothing was killed"))
        except BaseException as e:   # reported by the main thread, which exits with it
            stopped.put((index, f"{type(e).__name__}: {e}"))

    for index in range(len(work["runs"])):
        threading.Thread(target=train, args=(index,), daemon=True).start()
    for _ in work["runs"]:
        index, why = stopped.get()
        if why is not None:
            _fail(f"run {work['runs'][index]}: {why}")
    os.kill(os.getpid(), signal.SIGKILL)


if __name__ == "__main__":
    main()
