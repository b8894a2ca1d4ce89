"""Helper processes a notebook starts (servers, workers) and is sure to stop.

`ChildProcesses` starts Python programs, waits until each says it is ready, and stops them all
when its `with` block ends, also when the block raises. Should the notebook's own process die
without cleaning up, each child stops itself: it asks Linux to send it SIGTERM when its parent
dies (`prctl(PR_SET_PDEATHSIG)`), and checks every second that its parent is still there
(`exit_with_parent`, called by every child program of the series).

    with ChildProcesses() as children:
        children.start("dispatcher", ["-m", "helpers.data_service", "dispatcher", "--port", "5050"])

Introduced in notebooks/06_scaling_out.ipynb.
"""
from __future__ import annotations

import atexit
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from collections import deque

READY = "READY"  # the line a child prints when it is ready to serve


def free_port() -> int:
    """A TCP port on localhost that nothing listens on right now (the kernel picks it).

    Introduced in notebooks/06_scaling_out.ipynb.

    >>> 1024 <= free_port() <= 65535
    True
    """
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("localhost", 0))
        return s.getsockname()[1]


def exit_with_parent() -> None:
    """In a child program: stop when the process that started it is gone.

    Introduced in notebooks/06_scaling_out.ipynb.
    """
    parent = os.getppid()
    if sys.platform.startswith("linux"):
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass

    def watch():
        while os.getppid() == parent:
            time.sleep(1)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


class ChildProcesses:
    """Python child processes that all stop when the `with` block ends (or the interpreter exits).

    Introduced in notebooks/06_scaling_out.ipynb.
    """

    def __init__(self) -> None:
        self.processes: dict[str, subprocess.Popen] = {}
        self._output: dict[str, deque] = {}
        self._ready: dict[str, threading.Event] = {}

    def start(self, name: str, args: list[str], env: dict | None = None, ready_timeout: float = 60,
              wait: bool = True) -> subprocess.Popen:
        """Run `python *args` as `name`; return once it prints READY (or raise with its last output).

        With `wait=False`, return at once; `wait_ready(name)` waits later (to start several together)."""
        if name in self.processes:
            raise ValueError(f"a child named {name!r} is already running")
        environment = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1", **(env or {})}
        process = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   text=True, env=environment)
        self.processes[name] = process
        self._output[name] = lines = deque(maxlen=20)
        ready = threading.Event()

        def read():
            for line in process.stdout:
                lines.append(line.rstrip())
                if line.strip() == READY:
                    ready.set()

        threading.Thread(target=read, daemon=True, name=f"read-{name}").start()
        self._ready[name] = ready
        if wait:
            self.wait_ready(name, ready_timeout)
        return process

    def wait_ready(self, name: str, timeout: float = 60) -> None:
        """Wait until `name` has printed READY; stop it and raise with its last output if it exits or times out."""
        process, ready = self.processes[name], self._ready[name]
        deadline = time.monotonic() + timeout
        while not ready.wait(0.05):
            if process.poll() is not None or time.monotonic() > deadline:
                lines = self.output(name)
                self.stop(name)
                raise RuntimeError(f"{name} did not start (exit code {process.returncode}); its last output:\n"
                                   + "\n".join(lines))

    def output(self, name: str) -> list[str]:
        """The last lines `name` printed."""
        return list(self._output[name])

    def kill(self, name: str) -> None:
        """SIGKILL `name` at once, as a crashed machine would vanish; it stays listed until `stop`."""
        self.processes[name].kill()
        self.processes[name].wait()

    def stop(self, name: str, grace: float = 5) -> None:
        """SIGTERM `name`, then SIGKILL it if it has not exited after `grace` seconds."""
        process = self.processes.pop(name)
        if process.poll() is None:
            process.terminate()
            try:
                process.wait(grace)
            except subprocess.TimeoutExpired:
                process.kill()
                process.wait()
        if process.stdout:
            process.stdout.close()

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def __enter__(self) -> "ChildProcesses":
        atexit.register(self.stop_all)
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()
        atexit.unregister(self.stop_all)
