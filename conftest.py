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


# The notebooks run as two chains, one in each pytest-xdist process (pyproject.toml runs two), so the test run takes
# about as long as the longer chain rather than all nine notebooks one after another. Within a chain they run in
# order, each notebook's cells in one kernel. Notebooks that share files in data/ share a chain: 06 reads (or
# writes, if missing) the photo-sized split 05 writes. Every other notebook writes only its own folders; the
# stand-in cache both chains read is drawn once under a lock (helpers.data.datasets).
NOTEBOOK_CHAINS = {"01": "a", "02": "a", "04": "a", "05": "a", "06": "a",
                   "03": "b", "07": "b", "08": "b", "99": "b"}


def notebook_chain(nodeid: str) -> str:
    """The xdist group of a notebook cell's test: its notebook's chain; a notebook the map does not name runs in
    chain a (after the others there: a new notebook then costs time, never correctness)."""
    number = nodeid.removeprefix("notebooks/")[:2]
    return f"notebooks-{NOTEBOOK_CHAINS.get(number, 'a')}"


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    """Each notebook's cells go to its chain's group (see NOTEBOOK_CHAINS); cells tagged `alone` time what their
    notebook asserts, so they run while nothing runs in the other process."""
    for item in items:
        if item.nodeid.startswith("notebooks/"):
            item.add_marker(pytest.mark.xdist_group(notebook_chain(item.nodeid)))
            cell = getattr(item, "cell", None) or {}   # nbval's cell; tag "alone": it times what it asserts
            if "alone" in cell.get("metadata", {}).get("tags", []):
                item.add_marker(pytest.mark.alone)


LOCKS_ENV = "BTM_TEST_LOCKS"   # the folder of the run's locks, made by the main process, read by the workers


def pytest_configure(config):
    if not hasattr(config, "workerinput") and fcntl is not None:
        os.environ[LOCKS_ENV] = tempfile.mkdtemp(prefix="btm-test-locks-")   # inherited by the workers


def pytest_unconfigure(config):
    if not hasattr(config, "workerinput") and os.environ.get(LOCKS_ENV):
        shutil.rmtree(os.environ.pop(LOCKS_ENV), ignore_errors=True)


def lock(file, exclusive: bool, wait: bool = True) -> None:
    """Take `file`'s lock, shared or exclusive, waiting for it (else `BlockingIOError` when it is held): a POSIX
    record lock (`lockf`), which the operating system releases when its holder exits and which a child forked by
    a test does not inherit (with `flock`, a forked child that outlived a killed test process held the lock, and
    the other process waited for it)."""
    fcntl.lockf(file, (fcntl.LOCK_EX if exclusive else fcntl.LOCK_SH) | (0 if wait else fcntl.LOCK_NB))


def unlock(file) -> None:
    fcntl.lockf(file, fcntl.LOCK_UN)


def lock_file(folder: str, name: str):
    """The lock file `name` in the run's lock folder, opened to read and write (a shared lock reads); the folder
    is made again if something removed it during the run (opening failed, and the run stopped, before)."""
    Path(folder).mkdir(mode=0o700, parents=True, exist_ok=True)
    return open(Path(folder) / name, "a+")


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
    with lock_file(folder, "turnstile") as turnstile, lock_file(folder, "running") as running:
        lock(turnstile, exclusive=True)
        try:
            lock(running, exclusive=alone)
        finally:
            unlock(turnstile)
        try:
            yield
        finally:
            unlock(running)
