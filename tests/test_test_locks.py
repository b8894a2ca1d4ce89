"""The test run's lock (conftest.py): what a killed test process or a removed lock folder does to it."""
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

fcntl = pytest.importorskip("fcntl")   # Windows: no lock, tests marked `alone` run beside others

import conftest

ROOT = Path(__file__).parents[1]

# A test process holding the lock exclusively forks a child (as a fork-started worker pool does), and is
# killed while the child lives on.
KILLED_HOLDER = """
import os, signal, sys, time
import conftest
running = conftest.lock_file(sys.argv[1], "running")
conftest.lock(running, exclusive=True)
child = os.fork()
if child == 0:   # off the parent's output, so that the caller stops reading when the parent dies
    null = os.open(os.devnull, os.O_RDWR)
    os.dup2(null, 1), os.dup2(null, 2)
    time.sleep(30)
    os._exit(0)
print(child, flush=True)
os.kill(os.getpid(), signal.SIGKILL)
"""


def test_a_killed_test_process_leaves_the_lock_free_though_its_forked_child_lives_on(tmp_path):
    holder = subprocess.run([sys.executable, "-c", KILLED_HOLDER, str(tmp_path)], cwd=ROOT, capture_output=True,
                            text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert holder.returncode == -signal.SIGKILL, holder.stderr
    child = int(holder.stdout)
    os.kill(child, 0)   # still alive (else ProcessLookupError)
    try:
        with conftest.lock_file(str(tmp_path), "running") as running:
            conftest.lock(running, exclusive=True, wait=False)   # with flock: BlockingIOError, the child held it
            conftest.unlock(running)
    finally:
        os.kill(child, signal.SIGKILL)


def test_a_removed_lock_folder_is_made_again(tmp_path):
    folder = tmp_path / "locks"
    with conftest.lock_file(str(folder), "turnstile") as turnstile:
        conftest.lock(turnstile, exclusive=True)
        conftest.unlock(turnstile)
    (folder / "turnstile").unlink()
    folder.rmdir()
    with conftest.lock_file(str(folder), "running") as running:   # opening it raised FileNotFoundError before
        conftest.lock(running, exclusive=False)
        conftest.unlock(running)
    assert (folder / "running").is_file()
