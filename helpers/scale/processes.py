"""Helper processes a notebook starts (servers, workers) and is sure to stop.

`ChildProcesses` starts Python programs, waits until each says it is ready, and stops them all
when its `with` block ends, also when the block raises. Should the notebook's own process die
without cleaning up, each child stops itself: it asks Linux to send it SIGTERM when its parent
dies (`prctl(PR_SET_PDEATHSIG)`), and checks every second that its parent is still there
(`exit_with_parent`, called by every child program of the series).

    with ChildProcesses() as children:
        children.start("dispatcher", ["-m", "helpers.scale.data_service", "dispatcher", "--port", "5050"])

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

from helpers.setup.accelerator import REHEARSAL_ENV

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


PARENT_ENV = "BTM_PARENT"  # "<pid>:main" or "<pid>:thread": who started this child, from which thread


def child_environment(extra: dict | None = None, *, gpu: bool) -> dict:
    """The environment for a child program of the series: this one, quiet TensorFlow, unbuffered
    output, `BTM_PARENT` saying which process started it and whether from its main thread (read by
    `exit_with_parent`), and an explicit decision about the GPU.

    Every caller says `gpu=`. With `gpu=False` (every child the series starts: servers, workers, the memory ones) the child
    sees no GPU (`CUDA_VISIBLE_DEVICES=""`), so it cannot take GPU memory from the notebook's kernel, and a
    process under a memory budget never loads CUDA. With `gpu=True` it sees the GPUs and lets their memory
    grow as needed (`TF_FORCE_GPU_ALLOW_GROWTH`), so that it can share a GPU with the kernel. A child never
    rehearses the GPU branch: it takes the branch of what it sees.
    """
    thread = "main" if threading.current_thread() is threading.main_thread() else "thread"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1", PARENT_ENV: f"{os.getpid()}:{thread}"}
    env.pop(REHEARSAL_ENV, None)
    if gpu:
        if env.get("CUDA_VISIBLE_DEVICES") == "":   # hidden from this process: show the child what a GPU run would
            del env["CUDA_VISIBLE_DEVICES"]
        env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    return {**env, **(extra or {})}


def exit_with_parent() -> None:
    """In a child program: stop when the process that started it is gone, even if it went before
    this child got this far.

    The parent's process id comes from `BTM_PARENT` (set by `child_environment`), not from
    `os.getppid()` now: a parent killed while this child's Python was still starting has already
    been replaced by init, and the child would watch the wrong process. Where the parent started
    the child from its main thread, Linux is also asked to send SIGTERM the moment the parent
    dies (`prctl(PR_SET_PDEATHSIG)`); not from another thread, because that signal follows the
    thread that started the child, and would stop it when the thread ends. A watcher thread
    checks every 0.2 s that the parent is still the parent.
    Introduced in notebooks/06_scaling_out.ipynb.
    """
    pid, _, thread = os.environ.get(PARENT_ENV, "").partition(":")
    parent = int(pid) if pid.isdigit() else os.getppid()
    if sys.platform.startswith("linux") and thread == "main":
        try:
            import ctypes

            ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG = 1
        except (OSError, AttributeError):
            pass
    if os.getppid() != parent:   # checked after asking for the signal: the parent died before it was set
        os._exit(1)

    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="exit-with-parent").start()


def exposure_warning(what: str, ports: int | list[int]) -> str:
    """The one line printed whenever the series starts a TensorFlow gRPC server, saying what it exposes.

    TensorFlow's servers (the tf.data service, a multi-worker cluster) take a port but no address to
    bind to and no credentials: they listen on every network interface, and a tf.data worker runs any
    dataset graph a client sends it (tensorflow/tensorflow#11689: "designed to run on private networks").
    Introduced in notebooks/06_scaling_out.ipynb.
    """
    ports = [ports] if isinstance(ports, int) else list(ports)
    where = f"port {ports[0]}" if len(ports) == 1 else f"ports {', '.join(map(str, ports[:-1]))} and {ports[-1]}"
    return (f"Note: {what} listens on {where} on every network interface of this machine, without "
            f"authentication; anyone who can reach that port can use it. Use it on a private network or behind a "
            f"firewall. It stops when its `with` block (this cell) ends.")


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
        environment = child_environment(env, gpu=False)   # servers: preprocessing, on the CPU
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
