"""Helper processes a notebook starts (servers, workers) and is sure to stop: `ChildProcesses` stops them when
its `with` block ends, and each child stops itself when the notebook's process dies (`exit_with_parent`). Each
runs in a session of its own (`own_session`), out of reach of an interrupt or a kill meant for the kernel's process
group: it stops when its parent does, not when its parent's group is signalled."""
from __future__ import annotations

import atexit
import errno
import os
import signal
import socket
import subprocess
import sys
import threading
from pathlib import Path
import time
from collections import deque

from helpers.setup.accelerator import REHEARSAL_ENV

READY = "READY"  # the line a child prints when it is ready to serve, maybe followed by what it bound ("READY 5050")


def _bindable(family: int, host: str, port: int) -> bool | None:
    """Whether a TCP socket of `family` can bind `host:port` now; None when this machine lacks that family."""
    try:
        sock = socket.socket(family, socket.SOCK_STREAM)
    except OSError:
        return None
    with sock:
        if family == socket.AF_INET6:
            sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)   # this family alone: IPv4 is checked apart
        try:
            sock.bind((host, port))
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return False
            if e.errno in (errno.EADDRNOTAVAIL, errno.EAFNOSUPPORT):
                return None
            raise
    return True


def port_is_taken(port: int) -> bool:
    """Whether another socket already holds TCP `port` on any interface, IPv4 or IPv6: TensorFlow's gRPC servers
    bind both, and a client dialling `localhost` may reach either (a listener on `::1` alone counts).

    >>> port_is_taken(0)
    False
    """
    if not isinstance(port, int) or isinstance(port, bool) or not 0 <= port <= 65535:
        raise ValueError(f"a TCP port is a whole number from 0 to 65535, not {port!r}")
    if port == 0:
        return False
    return any(_bindable(family, host, port) is False
               for family, host in ((socket.AF_INET, "0.0.0.0"), (socket.AF_INET, "127.0.0.1"),
                                    (socket.AF_INET6, "::"), (socket.AF_INET6, "::1")))


def _kernel_port() -> int:
    """A port the kernel finds free on IPv4 localhost right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def free_port(attempts: int = 20) -> int:
    """A TCP port that nothing holds right now, on IPv4 or IPv6 (`port_is_taken`). It is free when chosen, not
    reserved: a server that can bind port 0 and report its port is better (the tf.data service does), and a
    launcher that cannot retries with new ports when a server fails to bind (`helpers.scale.multi_worker`).

    >>> 1024 <= free_port() <= 65535
    True
    """
    for _ in range(attempts):
        port = _kernel_port()
        if not port_is_taken(port):
            return port
    raise RuntimeError(f"no free TCP port found in {attempts} attempts (each was held on IPv4 or IPv6)")


PARENT_ENV = "BTM_PARENT"  # "<pid>:main" or "<pid>:thread": who started this child, from which thread


HELPERS_HOME = str(Path(__file__).resolve().parents[2])   # the folder that holds this `helpers` package


def child_environment(extra: dict | None = None, *, gpu: bool) -> dict:
    """The environment for a child program: this one, quiet TensorFlow, unbuffered output, `BTM_PARENT` (for
    `exit_with_parent`), no GPU rehearsal, and an explicit decision about the GPU: `gpu=False` hides it (the child
    cannot take the kernel's GPU memory nor load CUDA under a memory budget); `gpu=True` shows it with memory
    growth on, so that the child can share it with the kernel."""
    thread = "main" if threading.current_thread() is threading.main_thread() else "thread"
    env = {**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3", "PYTHONUNBUFFERED": "1", PARENT_ENV: f"{os.getpid()}:{thread}"}
    env.pop(REHEARSAL_ENV, None)
    if gpu:
        if env.get("CUDA_VISIBLE_DEVICES") == "":   # hidden from this process: show the child what a GPU run would
            del env["CUDA_VISIBLE_DEVICES"]
        env["TF_FORCE_GPU_ALLOW_GROWTH"] = "true"
    else:
        env["CUDA_VISIBLE_DEVICES"] = ""
    env = {**env, **(extra or {})}
    # The child imports this process's `helpers`, never a copy in its working folder (`python -m` puts the working
    # folder first on the path; PYTHONSAFEPATH, Python 3.11+, leaves it off).
    env["PYTHONPATH"] = os.pathsep.join(p for p in (HELPERS_HOME, env.get("PYTHONPATH", "")) if p)
    env["PYTHONSAFEPATH"] = "1"
    return env


def own_session() -> dict:
    """`subprocess.Popen` arguments that start a child in a session, and so a process group, of its own. Jupyter's
    "Interrupt kernel" sends SIGINT to the kernel's whole process group: a child the kernel keeps for later cells
    must not take it. A restart kills that group with SIGKILL: a child with something to clean up (the slow store's
    mount point) must outlive it to do so. The child must call `exit_with_parent` (or watch its parent as the slow
    store's server does), which stops it when the kernel itself dies, however it dies. On Windows, a new process
    group: Ctrl-C is not passed on to it."""
    if os.name == "nt":
        return {"creationflags": subprocess.CREATE_NEW_PROCESS_GROUP}
    return {"start_new_session": True}


def exit_with_parent() -> None:
    """In a child program: stop when the process that started it is gone, even if it went before this child got
    this far. The parent comes from `BTM_PARENT`, not `os.getppid()` (a parent killed during start-up has already
    been replaced by init). Linux sends SIGTERM when the parent dies (`PR_SET_PDEATHSIG`, only when started from
    the parent's main thread: the signal follows the thread), and a watcher thread checks every 0.2 s."""
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


def skip_unused_imports() -> None:
    """In a child program that trains or serves data with TensorFlow and draws nothing: mark JAX and matplotlib as
    missing before TensorFlow is imported. TensorFlow's import loads both when they are installed (JAX for tf.lite's
    converter, matplotlib for keras.visualization) and carries on without them when they are missing; here they are
    about a fifth of its CPU time (1.1-1.4 of 4.7-5.7 CPU-seconds), paid again by every child. Never call it in a
    process that draws or runs JAX."""
    for optional in ("jax", "matplotlib"):
        sys.modules.setdefault(optional, None)


def exposure_warning(what: str, ports: int | list[int], stops: str = "when its `with` block (this cell) ends") -> str:
    """The line printed whenever the series starts a TensorFlow gRPC server: they take no bind address and no
    credentials, so they listen on every interface, and a tf.data worker runs any graph a client sends
    (tensorflow/tensorflow#11689). `stops` says when it stops listening."""
    ports = [ports] if isinstance(ports, int) else list(ports)
    where = f"port {ports[0]}" if len(ports) == 1 else f"ports {', '.join(map(str, ports[:-1]))} and {ports[-1]}"
    return (f"Note: {what} listens on {where} on every network interface of this machine, without "
            f"authentication; anyone who can reach it can use it. Use it on a private network or behind a "
            f"firewall. It stops {stops}.")


class ChildProcesses:
    """Python child processes that all stop when the `with` block ends (or the interpreter exits); each in its own
    session (`own_session`), and each program must call `exit_with_parent`."""

    def __init__(self) -> None:
        self.processes: dict[str, subprocess.Popen] = {}
        self._output: dict[str, deque] = {}
        self._ready: dict[str, threading.Event] = {}
        self._said: dict[str, str] = {}

    def start(self, name: str, args: list[str], env: dict | None = None, ready_timeout: float = 60,
              wait: bool = True, stdin: bool = False) -> subprocess.Popen:
        """Run `python *args` as `name`; return once it prints READY (or raise with its last output). With
        `wait=False`, return at once; `wait_ready(name)` waits later (to start several together). With
        `stdin=True` its standard input is a pipe that `tell(name, line)` writes to."""
        if name in self.processes:
            raise ValueError(f"a child named {name!r} is already running")
        environment = child_environment(env, gpu=False)   # servers: preprocessing, on the CPU
        process = subprocess.Popen([sys.executable, *args], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                   stdin=subprocess.PIPE if stdin else None, text=True,
                                   env=environment, **own_session())
        self.processes[name] = process
        self._output[name] = lines = deque(maxlen=20)
        ready = threading.Event()

        def read():
            for line in process.stdout:
                lines.append(line.rstrip())
                words = line.split()
                if words[:1] == [READY] and not ready.is_set():
                    self._said[name] = " ".join(words[1:])
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
                lines = list(self._output[name])
                self.stop(name)
                raise RuntimeError(f"{name} did not start (exit code {process.returncode}); its last output:\n"
                                   + "\n".join(lines))

    def tell(self, name: str, line: str) -> None:
        """Write `line` to the standard input of `name` (started with `stdin=True`) and close it."""
        process = self.processes[name]
        try:
            process.stdin.write(line + "\n")
            process.stdin.close()
        except BrokenPipeError:   # it has exited: `wait_ready` reports that, with its output
            pass

    def ready_words(self, name: str) -> str:
        """What `name` printed after READY on its ready line ("" if nothing), e.g. the port it bound."""
        return self._said.get(name, "")

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
        for pipe in (process.stdout, process.stdin):
            if pipe and not pipe.closed:
                try:
                    pipe.close()
                except BrokenPipeError:
                    pass

    def stop_all(self) -> None:
        for name in list(self.processes):
            self.stop(name)

    def __enter__(self) -> "ChildProcesses":
        atexit.register(self.stop_all)
        return self

    def __exit__(self, *exc) -> None:
        self.stop_all()
        atexit.unregister(self.stop_all)
