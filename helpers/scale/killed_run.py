"""Training runs killed by SIGKILL mid-epoch, as a disconnect or a preempted machine stops one (notebook 08).

The child trains notebook 08's id-logging MLP on the first `n` MNIST images with one of the lesson's two recipes
(`backup`: `BackupAndRestore`; `exact`: the position saved with the model) and kills itself with SIGKILL right after
its `kill_at`-th batch (counted over the whole run), so the point is exact and nothing gets to clean up. Its
checkpoints stay in `directory`, for a new process to resume from.

    codes = run_killed([("exact", "data/run-a", 2000, 57), ("backup", "data/run-b", 2000, 57)])   # concurrently
    python -m helpers.scale.killed_run exact data/run-a 2000 57 --epochs 3 --batch-size 64 --save-every 10
"""
from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
from pathlib import Path

from helpers.setup.processes import child_environment, exit_with_parent

KINDS = ("backup", "exact")


def run_killed(runs: list[tuple[str, str | Path, int, int]], *, epochs: int = 3, batch_size: int = 64,
               save_every: int = 10, timeout: float = 300) -> list[int]:
    """Start one child per `(kind, directory, n, kill_at)` at once and wait for all; return their exit codes
    (`-signal.SIGKILL` for each run killed as planned). `RuntimeError` with the child's last words if one
    failed some other way."""
    children = []
    for kind, directory, n, kill_at in runs:
        if kind not in KINDS:
            raise ValueError(f"kind must be one of {KINDS}, not {kind!r}")
        args = [sys.executable, "-m", "helpers.scale.killed_run", kind, str(directory), str(int(n)), str(int(kill_at)),
                "--epochs", str(int(epochs)), "--batch-size", str(int(batch_size)), "--save-every", str(int(save_every))]
        children.append(subprocess.Popen(args, env=child_environment(gpu=False), stdout=subprocess.PIPE,
                                         stderr=subprocess.PIPE, text=True))
    codes = []
    for child, run in zip(children, runs):
        _, err = child.communicate(timeout=timeout)
        if child.returncode != -signal.SIGKILL:
            raise RuntimeError(f"the killed run {run} exited with {child.returncode}, not SIGKILL:\n{err[-2000:]}")
        codes.append(child.returncode)
    return codes


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("kind", choices=KINDS)
    parser.add_argument("directory")
    parser.add_argument("n", type=int)
    parser.add_argument("kill_at", type=int)
    parser.add_argument("--epochs", type=int, default=3)
    parser.add_argument("--batch-size", type=int, default=64)
    parser.add_argument("--save-every", type=int, default=10)
    args = parser.parse_args(argv)
    exit_with_parent()
    from helpers.setup.notebook import stderr_to_devnull

    with stderr_to_devnull():
        import keras
        import tensorflow as tf
    tf.config.experimental.enable_op_determinism()   # as the notebook's kernel: the same weights, bit for bit
    from helpers.lessons.resume_shuffle_grain import id_mlp, train_exact, train_with_backup, training_data

    class KillAfter(keras.callbacks.Callback):
        """SIGKILL right after the run's `kill_at`-th batch: no `finally`, no callback, no flush runs after it."""

        def __init__(self, kill_at: int) -> None:
            super().__init__()
            self.kill_at, self.batches = kill_at, 0

        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1
            if self.batches == self.kill_at:
                os.kill(os.getpid(), signal.SIGKILL)

    x, y = training_data(args.n)
    model = id_mlp(args.epochs * args.n * 2)
    train = train_exact if args.kind == "exact" else train_with_backup
    train(model, x, y, Path(args.directory), epochs=args.epochs, batch_size=args.batch_size,
          save_every=args.save_every, callbacks=[KillAfter(args.kill_at)])
    sys.exit(f"the run ended before its batch {args.kill_at}: nothing was killed")


if __name__ == "__main__":
    main()
