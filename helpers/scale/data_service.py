"""A tf.data service on this machine: one dispatcher, in this process, and N workers, each its own process, running
notebook 06's `start_dispatcher` / `start_worker` (`helpers.lessons.scaling_out`). On a cluster each machine runs one:

    python -m helpers.scale.data_service dispatcher --port 5050
    python -m helpers.scale.data_service worker --dispatcher localhost:5050
    python -m helpers.scale.data_service worker --dispatcher -   # the address on stdin, once TF is loaded
"""
from __future__ import annotations

import argparse
import sys

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
                                   f"ports of their own)", self.port))
            for index in range(self.n_workers):
                self.children.tell(f"worker-{index}", f"localhost:{self.port}")
            for index in range(self.n_workers):
                self.children.wait_ready(f"worker-{index}", STARTUP_SECONDS)
        except BaseException:
            self.__exit__(None, None, None)
            raise
        return self

    def kill_worker(self, index: int) -> None:
        """SIGKILL one worker, as if its machine had died."""
        self.children.kill(f"worker-{index}")

    def __exit__(self, *exc) -> None:
        try:
            self.children.__exit__(*exc)
        finally:   # the dispatcher last: its port is free again once this returns
            if self.dispatcher is not None:
                self.dispatcher.stop()
                self.dispatcher = None


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
