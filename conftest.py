"""Settings for the whole pytest run, read before any notebook kernel starts.

Kernels inherit this process's environment, so setting the variables here is how quick mode
reaches every notebook. Set TUTORIAL_QUICK=0 yourself to execute the notebooks in full.
"""
import os
import shutil
import tempfile
from pathlib import Path

import pytest

try:
    import fcntl
except ImportError:   # Windows: tests marked `alone` then run beside others, and may be slower or flaky there
    fcntl = None

os.environ.setdefault("TUTORIAL_QUICK", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's C++ start-up chatter
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    """The notebooks run in one process, in order (pyproject.toml runs two with pytest-xdist): they share
    data/ (02 and 04 write the shards 05 reads; 06 reads the photo-sized split 05 writes), and each
    notebook's cells share one kernel."""
    for item in items:
        if item.nodeid.startswith("notebooks/"):
            item.add_marker(pytest.mark.xdist_group("notebooks"))


LOCKS_ENV = "BTM_TEST_LOCKS"   # the folder of the run's locks, made by the main process, read by the workers


def pytest_configure(config):
    if not hasattr(config, "workerinput") and fcntl is not None:
        os.environ[LOCKS_ENV] = tempfile.mkdtemp(prefix="btm-test-locks-")   # inherited by the workers


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and os.environ.get(LOCKS_ENV):
        shutil.rmtree(os.environ.pop(LOCKS_ENV), ignore_errors=True)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test marked `alone` times something: it waits until the other process's test (or notebook cell) ends,
    and the other process waits for it. A readers-writer lock on a file: every test holds it shared, an `alone`
    test exclusively; the turnstile keeps new shared holders out while an `alone` test waits."""
    folder = os.environ.get(LOCKS_ENV)
    if not hasattr(item.config, "workerinput") or fcntl is None or not folder:
        yield   # one process: nothing runs beside a test
        return
    alone = item.get_closest_marker("alone") is not None
    with open(Path(folder) / "turnstile", "a") as turnstile, open(Path(folder) / "running", "a") as running:
        fcntl.flock(turnstile, fcntl.LOCK_EX)
        try:
            fcntl.flock(running, fcntl.LOCK_EX if alone else fcntl.LOCK_SH)
        finally:
            fcntl.flock(turnstile, fcntl.LOCK_UN)
        try:
            yield
        finally:
            fcntl.flock(running, fcntl.LOCK_UN)
