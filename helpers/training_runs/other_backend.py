"""The same training on another Keras backend, in a child process (notebook 08).

Keras picks its backend once, when it is first imported, from `KERAS_BACKEND`: a kernel that runs TensorFlow starts
a child with `KERAS_BACKEND=jax` to train the same model there. The child imports its backend and TensorFlow at
once (seconds, which pass while the kernel works), then waits for its work as one JSON line on its standard input.
It runs notebook 08's lesson code (`helpers.lessons.resume_shuffle_grain`): from the initial weights the kernel
saved, it trains `steps` steps on each loader (tf.data and Grain, the same batches in the same order) and saves the
weights the tf.data run ended with; then it prints READY and waits for "go", so that its timing never overlaps the
kernel's; then it measures each loader's training rate (`helpers.measure.grain_rates.loader_rates`) and prints one
JSON line.

    run = BackendRun("jax", gpu=False)   # starts importing now
    run.train("data/run/jax", "data/run/array_record", "data/run/initial.weights.h5", n=2000, steps=20,
              batch_size=64, rounds=3)
    run.wait_ready()        # its agreement runs overlap the kernel's own
    ...                     # the kernel measures its rates meanwhile
    result = run.measure()  # {"backend", "versions", "devices", "losses", "rates", "samples", "weights"}
"""
from __future__ import annotations

import argparse
import json
import os
import queue
import secrets
import subprocess
import sys
import threading
from collections import deque
from pathlib import Path

from helpers.setup.processes import READY, child_environment, exit_with_parent, own_session

WEIGHTS = "{backend}.weights.h5"   # the file, in the run's folder, holding the tf.data run's final weights


class BackendRun:
    """A child process training notebook 08's MLP on `backend` (`KERAS_BACKEND`). `gpu=True` shows it the GPU (JAX
    takes memory as it needs it, not three quarters at once: the kernel may hold some); the child keeps its
    TensorFlow, which only loads data, off the GPU."""

    def __init__(self, backend: str, *, gpu: bool, timeout: float = 300) -> None:
        self.backend, self.timeout = backend, timeout
        env = child_environment({"KERAS_BACKEND": backend, "XLA_PYTHON_CLIENT_PREALLOCATE": "false"}, gpu=gpu)
        # Its own session: an interrupt of the kernel (SIGINT to its process group) must leave it for later cells.
        self.process = subprocess.Popen([sys.executable, "-m", "helpers.training_runs.other_backend", backend], env=env,
                                        stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                        text=True, **own_session())
        self._lines: queue.Queue = queue.Queue()
        self._errors: deque = deque(maxlen=40)
        threading.Thread(target=self._read, args=(self.process.stdout, self._lines.put), daemon=True).start()
        self._stderr = threading.Thread(target=self._read, args=(self.process.stderr, self._errors.append),
                                        daemon=True)
        self._stderr.start()

    def train(self, directory: str | Path, array_record_dir: str | Path, initial_weights: str | Path, *, n: int,
              steps: int, batch_size: int, rounds: int) -> None:
        """Give the child its work: the `n` training images of the ArrayRecord split in `array_record_dir` (read
        once into memory for tf.data, read by index for Grain), the initial weights, and where to save its final
        ones (`directory`)."""
        Path(directory).mkdir(parents=True, exist_ok=True)
        self._say(json.dumps({"directory": str(directory), "array_record_dir": str(array_record_dir),
                              "initial_weights": str(initial_weights), "n": int(n), "steps": int(steps),
                              "batch_size": int(batch_size), "rounds": int(rounds)}))

    def _say(self, line: str) -> None:
        try:
            self.process.stdin.write(line + "\n")
            self.process.stdin.flush()
        except BrokenPipeError:
            self._next_line("it was told its work")   # raises with its last words

    @staticmethod
    def _read(stream, put) -> None:
        for line in stream:
            put(line.rstrip("\n"))
        put(None)   # the stream ended: the child exited

    def _next_line(self, what: str) -> str:
        try:
            line = self._lines.get(timeout=self.timeout)
        except queue.Empty:
            line = None
        if line is None:
            self.stop()
            self._stderr.join(5)   # its last words, read to the end
            words = "\n".join(line for line in self._errors if line is not None)
            raise RuntimeError(f"the {self.backend} child stopped before {what} (exit code "
                               f"{self.process.returncode}); its last words:\n{words}")
        return line

    def wait_ready(self) -> None:
        """Wait until the child has trained its agreement runs and waits to be timed."""
        while self._next_line("it was ready").split()[:1] != [READY]:
            pass

    def measure(self) -> dict:
        """Let the child time its loaders now; return what it measured (after `wait_ready`)."""
        self._say("go")
        result = json.loads(self._next_line("it printed its results"))
        self.process.wait(self.timeout)
        return result

    def stop(self) -> None:
        """Stop the child if it still runs (it started nothing of its own)."""
        if self.process.poll() is None:
            self.process.kill()
        self.process.wait()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("backend")
    backend_name = parser.parse_args(argv).backend
    exit_with_parent()
    from helpers.setup.notebook import stderr_to_devnull

    with stderr_to_devnull():   # TensorFlow's and JAX's start-up logs
        import tensorflow as tf

        # TensorFlow only loads data here: on a GPU it would otherwise reserve the memory the backend needs.
        tf.config.set_visible_devices([], "GPU")
        import keras

        keras.ops.zeros(1)   # the backend finds its devices now, with its log silenced
    if keras.backend.backend() != backend_name:
        sys.exit(f"KERAS_BACKEND={os.environ.get('KERAS_BACKEND')!r} gave Keras the {keras.backend.backend()} "
                 f"backend, not {backend_name}")
    from helpers.lessons.resume_shuffle_grain import backend_loaders, losses_from
    from helpers.lessons.tfdata_mnist import article_mlp
    from helpers.measure.grain_rates import loader_rates
    from helpers.storage.array_record import array_record_readers, array_record_source, decode_batch

    line = sys.stdin.readline()
    if not line:
        sys.exit("the notebook gave no work")
    args = argparse.Namespace(**json.loads(line))
    source, info = array_record_source(args.array_record_dir, "train")
    if len(source) != args.n:
        sys.exit(f"{args.array_record_dir} holds {len(source)} records, not the {args.n} to train on")
    readers, _ = array_record_readers(args.array_record_dir, "train")
    x, y = decode_batch(readers.__getitems__(range(args.n)), info)   # tf.data's arrays: the same images, read once
    loaders = backend_loaders(x, y, source, tuple(info.image_shape), info.image_dtype, args.batch_size)
    losses = {}
    for name, make in loaders.items():
        trained = article_mlp()
        losses[name] = losses_from(trained, args.initial_weights, make(), args.steps)
        if name == "tf.data":
            model = trained
    weights = Path(args.directory) / WEIGHTS.format(backend=backend_name)
    partial = weights.with_name(f".{secrets.token_hex(4)}.{weights.name}")   # Keras wants the .weights.h5 ending
    model.save_weights(partial)
    os.replace(partial, weights)
    print(READY, flush=True)
    if sys.stdin.readline().strip() != "go":
        sys.exit("the notebook did not ask for the timing")
    rates = loader_rates(model, loaders, args.batch_size, -(-args.n // args.batch_size), args.rounds)
    backend = sys.modules.get(backend_name)
    print(json.dumps({
        "backend": backend_name,
        "versions": {"keras": keras.__version__, backend_name: getattr(backend, "__version__", "?")},
        "devices": [str(d) for d in backend.devices()] if hasattr(backend, "devices") else [],
        "losses": losses,
        "rates": rates.values,
        "samples": {name: [e.samples for e in epochs] for name, epochs in rates.epochs.items()},
        "weights": weights.name,
    }), flush=True)
    # Its weights are saved and its results printed: exit now, without the seconds that TensorFlow's and JAX's
    # teardown takes at interpreter exit (the kernel waits for this exit).
    os._exit(0)


if __name__ == "__main__":
    main()
