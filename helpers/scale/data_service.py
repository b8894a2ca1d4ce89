"""A tf.data service on this machine: one dispatcher, in this process, and N workers, each its own process, running
notebook 06's `start_dispatcher` / `start_worker` (`helpers.lessons.scaling_out`); and killing one of its workers,
as a machine that vanishes, mid-epoch or during training. On a cluster each machine runs one server:

    python -m helpers.scale.data_service dispatcher --port 5050
    python -m helpers.scale.data_service worker --dispatcher localhost:5050
    python -m helpers.scale.data_service worker --dispatcher -   # the address on stdin, once TF is loaded

In a notebook: `cluster = DataServiceCluster(workers=3).start()`, then `cluster.stop()` (or a `with` block).
"""
from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

from helpers.setup.processes import (READY, ChildProcesses, exit_with_parent, exposure_warning, port_is_taken,
                                     skip_unused_imports)


# How long a server may take to start: on a busy 2-core machine three workers importing TensorFlow at once
# took over 60 s (a GPU-rehearsal test run at load 15).
STARTUP_SECONDS = 180


class DataServiceCluster:
    """A dispatcher in this process and `workers` worker processes on localhost, started and ready inside the `with`
    block, which prints what they expose; `target` is the address for `distribute(service=...)`. The dispatcher
    only hands out work and is never killed, so it needs no process (nor a TensorFlow start-up) of its own; the
    workers, which run the pipeline and may be killed, each have one. Every server binds port 0 and the
    dispatcher reports the port it got: no port is chosen here and bound later, which another process could take
    in between."""

    def __init__(self, workers: int = 2) -> None:
        self.n_workers = workers
        self.children = ChildProcesses()
        self.dispatcher = None             # the DispatchServer, while the block runs
        self.port: int | None = None       # the dispatcher's, once it is running
        self.target: str | None = None
        self.worker_pids: list[int] = []   # every worker started, kept after they stop (to check they are gone)
        self._stops = "when its `with` block (this cell) ends"

    def start(self) -> "DataServiceCluster":
        """Start the servers outside a `with` block: they serve until `stop()`, or until this process ends."""
        self._stops = "at `cluster.stop()`, or when this process ends"
        return self.__enter__()

    def stop(self) -> None:
        """Stop every worker, then the dispatcher."""
        self.__exit__(None, None, None)

    @property
    def worker_names(self) -> list[str]:
        return [name for name in self.children.processes if name.startswith("worker")]

    def __enter__(self) -> "DataServiceCluster":
        self.children.__enter__()
        try:
            # The workers start first, so that they load TensorFlow while the dispatcher starts here (this process
            # has it loaded); each then reads the dispatcher's address on its standard input.
            for index in range(self.n_workers):
                self.children.start(f"worker-{index}", ["-m", "helpers.scale.data_service", "worker",
                                                        "--dispatcher", "-"], wait=False, stdin=True)
            from helpers.lessons.scaling_out import start_dispatcher

            self.dispatcher = start_dispatcher(0)   # port 0: one the system finds free
            self.port = int(self.dispatcher.target.rsplit(":", 1)[1])
            self.target = f"grpc://localhost:{self.port}"
            print(exposure_warning(f"the tf.data service's dispatcher (and each of its {self.n_workers} workers, on "
                                   f"ports of their own)", self.port, self._stops))
            for index in range(self.n_workers):
                self.children.tell(f"worker-{index}", f"localhost:{self.port}")
            for index in range(self.n_workers):
                self.children.wait_ready(f"worker-{index}", STARTUP_SECONDS)
            self.worker_pids = [self.children.processes[name].pid for name in self.worker_names]
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def kill_worker(self, index: int) -> None:
        """SIGKILL one worker, as if its machine had died."""
        self.children.kill(f"worker-{index}")

    def kill_worker_reading(self, folder, patience: float = 10.0) -> int:
        """SIGKILL a live worker that has a file under `folder` open, so it dies in the middle of a file, holding
        records it has not sent; return its index. Waits up to `patience` seconds for one (Linux: /proc/PID/fd);
        where there is no /proc, the first live worker."""
        live = self._live_workers()
        deadline = time.monotonic() + patience
        while True:
            reading = [index for index in live if open_files_under(self._pid(index), folder)]
            if reading or not Path("/proc").is_dir():
                chosen = (reading or live)[0]
                break
            if time.monotonic() > deadline:
                raise RuntimeError(f"no worker of this tf.data service had a file under {folder} open "
                                   f"within {patience:g} s")
            time.sleep(0.02)
            live = self._live_workers()
        self.kill_worker(chosen)
        return chosen

    def _pid(self, index: int) -> int:
        return self.children.processes[f"worker-{index}"].pid

    def _live_workers(self) -> list[int]:
        live = [int(name.split("-")[1]) for name in self.worker_names
                if self.children.processes[name].poll() is None]
        if not live:
            raise RuntimeError("every worker of this tf.data service has been killed already")
        return live

    def killer(self, index: int, step: int):
        """A Keras callback that SIGKILLs worker `index` after training step `step` (counted from 0), and counts the
        steps trained (`.steps_done`)."""
        import keras

        cluster = self

        class KillWorkerAt(keras.callbacks.Callback):
            steps_done = 0

            def on_train_batch_end(self, batch, logs=None):
                self.steps_done = batch + 1
                if batch == step:
                    cluster.kill_worker(index)

        return KillWorkerAt()

    def leftovers(self, grace: float = 5.0) -> list[str]:
        """What still runs after `stop()`: each worker process not yet gone (waited for up to `grace` seconds; Linux
        only, read from /proc) and the dispatcher's port if something still accepts connections on it. [] when
        everything stopped."""
        import socket

        deadline = time.monotonic() + grace
        while (running := [pid for pid in self.worker_pids if _running(pid)]) and time.monotonic() < deadline:
            time.sleep(0.1)
        left = [f"worker process {pid}" for pid in running]
        if self.port is not None:
            with socket.socket() as probe:   # connecting fails where nothing listens
                if probe.connect_ex(("127.0.0.1", self.port)) == 0:
                    left.append(f"a server on the dispatcher's port {self.port}")
        return left

    def __exit__(self, *exc) -> None:
        try:
            self.children.__exit__(*exc)
        finally:   # the dispatcher last: its port is free again once this returns
            if self.dispatcher is not None:
                self.dispatcher.stop()
                self.dispatcher = None


def open_files_under(pid: int, folder) -> list[Path]:
    """The files under `folder` that process `pid` has open (Linux: /proc/PID/fd), [] where that cannot be read."""
    folder = Path(folder).resolve()
    found = []
    try:
        descriptors = list(Path(f"/proc/{pid}/fd").iterdir())
    except OSError:
        return []
    for descriptor in descriptors:
        try:
            target = Path(descriptor.readlink())
        except OSError:   # closed since the listing
            continue
        if target.is_relative_to(folder):
            found.append(target)
    return found


def _running(pid: int) -> bool:
    """Whether process `pid` runs (exists and is not a zombie); False where there is no /proc."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def _serve(role: str, port: int, dispatcher: str | None) -> None:
    if port_is_taken(port):  # gRPC would only say "Could not start gRPC server"
        sys.exit(f"the {role} cannot listen on port {port}: another process is using it. Pick another --port.")
    from helpers.lessons.scaling_out import start_dispatcher, start_worker

    if role == "worker" and dispatcher == "-":   # its address comes on stdin, once the dispatcher has a port
        dispatcher = sys.stdin.readline().strip()
        if not dispatcher:
            sys.exit("the worker was told no dispatcher address on its standard input")
    server = start_dispatcher(port) if role == "dispatcher" else start_worker(dispatcher, port)
    bound = server.target.rsplit(":", 1)[1] if role == "dispatcher" else ""   # port 0: the one it got
    print(f"{READY} {bound}".strip(), flush=True)
    server.join()


if __name__ == "__main__":
    exit_with_parent()
    skip_unused_imports()
    parser = argparse.ArgumentParser(prog="python -m helpers.scale.data_service")
    parser.add_argument("role", choices=["dispatcher", "worker"])
    parser.add_argument("--port", type=int, default=0)
    parser.add_argument("--dispatcher", default=None,
                        help="host:port of the dispatcher (workers only; '-': read it from stdin)")
    arguments = parser.parse_args()
    if arguments.role == "worker" and not arguments.dispatcher:
        parser.error("a worker needs --dispatcher host:port")
    _serve(arguments.role, arguments.port, arguments.dispatcher)
