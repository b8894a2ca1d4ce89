"""Children a notebook's kernel keeps for later cells (notebook 08's `KilledRuns` and `BackendRun`, a
`ChildProcesses` server): Jupyter's "Interrupt kernel" sends SIGINT to the kernel's whole process group, so they
must not be in it (issue 41 item 9), yet they must still stop when the kernel dies, even by SIGKILL of the kernel
or of its group (what a restart does). A parent program stands in for the kernel: started in a session of its own,
as Jupyter starts kernels, so that the signals sent to its group reach none of pytest's processes."""
from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

ROOT = Path(__file__).resolve().parent.parent

# The kernel's part: start the children a notebook keeps, say their process ids, then (told "go") use them.
KERNEL = textwrap.dedent("""
    import json, signal, sys, threading
    from pathlib import Path
    from helpers.training_runs.killed_run import KilledRuns
    from helpers.training_runs.other_backend import BackendRun
    from helpers.setup.processes import ChildProcesses

    folder = Path(sys.argv[1])
    signal.signal(signal.SIGINT, lambda *_: print("interrupted", flush=True))   # the kernel lives on
    children = {}

    def start():
        children["killed"] = KilledRuns()
        children["backend"] = BackendRun("tensorflow", gpu=False)
        children["server"] = ChildProcesses()
        children["server"].start("server", ["-c", "from helpers.setup.processes import READY, exit_with_parent; "
                                 "exit_with_parent(); print(READY, flush=True); import sys, pathlib; "
                                 "pathlib.Path(sys.argv[1]).write_text(sys.stdin.readline().strip())",
                                 str(folder / "server.txt")], stdin=True)

    if sys.argv[2] == "thread":   # a child started from another thread: its parent's death is watched, not signalled
        threading.Thread(target=start).start()
        threading.Event().wait(0.5)
        while len(children) < 3 or not children["server"].processes:
            threading.Event().wait(0.05)
    else:
        start()
    print(json.dumps({name: (child.processes["server"] if name == "server" else child.process).pid
                      for name, child in children.items()}), flush=True)
    if sys.stdin.readline().strip() != "go":
        threading.Event().wait()   # until killed
    print(json.dumps({"killed": children["killed"].run([("exact", folder / "run", 64, 1)], epochs=1,
                                                        batch_size=64, save_every=1)}), flush=True)
    backend = children["backend"]
    backend.train(folder / "backend", folder / "ar", folder / "initial.weights.h5", n=128, steps=2, batch_size=64,
                  rounds=1)
    backend.wait_ready()
    result = backend.measure()
    print(json.dumps({"backend": result["losses"]["tf.data"]}), flush=True)
    server = children["server"]
    server.tell("server", "still here")
    server.processes["server"].wait(30)
    print(json.dumps({"server": (folder / "server.txt").read_text()}), flush=True)
    server.stop_all()
""")


def _alive(pid: int) -> bool:
    """Whether `pid` runs (a zombie waiting to be reaped has ended)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _start_kernel(tmp_path: Path, thread: str = "main") -> tuple[subprocess.Popen, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TUTORIAL_QUICK": "1"}
    kernel = subprocess.Popen([sys.executable, "-c", KERNEL, str(tmp_path), thread], cwd=ROOT, env=env,
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, start_new_session=True)
    pids = json.loads(kernel.stdout.readline())
    return kernel, pids


def _end(kernel: subprocess.Popen, pids: dict) -> None:
    with_group = [kernel.pid, *pids.values()]
    for pid in with_group:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    kernel.wait()
    for pipe in (kernel.stdin, kernel.stdout):
        pipe.close()


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
def test_an_interrupt_of_the_kernel_leaves_its_children_working(tmp_path):
    """SIGINT to the kernel's process group, as "Interrupt kernel" sends it, while the children import and again
    while they wait: each still does its work afterwards."""
    import keras

    from helpers.lessons.tfdata_mnist import article_mlp
    from helpers.storage.array_record import write_array_records
    from helpers.training_runs.killed_run import training_data

    x, y = training_data(128)
    write_array_records(x, y, tmp_path / "ar", "train", 2, num_classes=10)
    keras.utils.set_random_seed(0)
    article_mlp().save_weights(tmp_path / "initial.weights.h5")
    kernel, pids = _start_kernel(tmp_path)
    try:
        for wait in (0.5, 8):
            time.sleep(wait)
            os.killpg(kernel.pid, signal.SIGINT)
            assert kernel.stdout.readline().strip() == "interrupted"
        time.sleep(1)
        assert {name: _alive(pid) for name, pid in pids.items()} == {name: True for name in pids}
        kernel.stdin.write("go\n")
        kernel.stdin.flush()
        answers = {}
        for _ in range(3):
            line = kernel.stdout.readline()
            assert line, f"the kernel ended (exit code {kernel.wait()}) after answers {answers}"
            answers.update(json.loads(line))
        assert answers["killed"] == -signal.SIGKILL and (tmp_path / "run" / "checkpoint").is_file()
        assert len(answers["backend"]) == 2 and np.all(np.isfinite(answers["backend"]))
        assert answers["server"] == "still here"
        assert kernel.wait(60) == 0
    finally:
        _end(kernel, pids)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="process groups and /proc: Linux")
@pytest.mark.parametrize("kill, thread", [("kernel", "main"), ("group", "main"), ("kernel", "thread")])
def test_the_children_end_when_the_kernel_is_killed(tmp_path, kill, thread):
    """SIGKILL of the kernel alone, or of its whole group (a restart), runs no clean-up in it: each child notices its
    parent is gone and ends, whether started from the kernel's main thread or another."""
    kernel, pids = _start_kernel(tmp_path, thread)
    try:
        time.sleep(1)
        assert all(_alive(pid) for pid in pids.values())
        if kill == "group":
            os.killpg(kernel.pid, signal.SIGKILL)
        else:
            kernel.kill()
        kernel.wait()
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline and any(map(_alive, pids.values())):
            time.sleep(0.1)
        assert {name: _alive(pid) for name, pid in pids.items()} == {name: False for name in pids}
    finally:
        _end(kernel, pids)
