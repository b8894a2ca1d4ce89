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


def notebook_of(nodeid: str) -> str | None:
    """The notebook file a test's node id runs a cell of (`notebooks/NN_name.ipynb`), or None for other tests."""
    path = nodeid.split("::", 1)[0]
    return path if path.startswith("notebooks/") and path.endswith(".ipynb") else None


def notebook_chain(nodeid: str) -> str:
    """The scheduling group of a notebook cell's test: its notebook's chain; a notebook the map does not name runs in
    chain a (after the others there: a new notebook then costs time, never correctness)."""
    number = nodeid.removeprefix("notebooks/")[:2]
    return f"notebooks-{NOTEBOOK_CHAINS.get(number, 'a')}"


def chain_scope(nodeid: str) -> str:
    """What the scheduler hands to one process as a whole: a notebook's chain for its cells, the test itself for any
    other test (so the unit tests spread over both processes). Any `@group` suffix an xdist release appends is
    ignored: the chain is read from the notebook's own path."""
    return notebook_chain(nodeid) if notebook_of(nodeid) else nodeid


def _notebook_chain_scheduling():
    """pytest-xdist's scope scheduler, scoped by `chain_scope`. This replaces `--dist loadgroup` with `xdist_group`
    marks, which groups by a suffix it writes into each item's node id: from pytest 9.2 that write no longer changes
    the id, every group is silently dropped and a notebook's cells run in two kernels (pytest-xdist issue #1386).
    Here the group comes from the id pytest reports, whatever either release does with it;
    tests/test_notebook_chains.py runs small notebooks through this scheduler in two processes and fails if one
    notebook's cells ran in both."""
    from xdist.scheduler import LoadScopeScheduling

    class NotebookChainScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return chain_scope(nodeid)

    return NotebookChainScheduling


@pytest.hookimpl(optionalhook=True)   # a hook of pytest-xdist's: without it installed, no process runs beside
def pytest_xdist_make_scheduler(config, log):
    """The scheduler of the two test processes: notebooks by chain (see `_notebook_chain_scheduling`). Only for the
    project's own distribution mode (pyproject.toml's `--dist loadscope`); another `--dist` given on the command
    line gets xdist's own scheduler, and `check_one_process_per_notebook` still stops a notebook split in two."""
    if config.getvalue("dist") == "loadscope":
        return _notebook_chain_scheduling()(config, log)
    return None


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(items):
    """Cells tagged `alone` time what their notebook asserts, so they run while nothing runs in the other process."""
    for item in items:
        if notebook_of(item.nodeid):
            cell = getattr(item, "cell", None) or {}   # nbval's cell; tag "alone": it times what it asserts
            if "alone" in cell.get("metadata", {}).get("tags", []):
                item.add_marker(pytest.mark.alone)


def check_one_process_per_notebook(notebook: str, worker: str, folder: str) -> None:
    """Record that `worker` runs `notebook`'s cells; fail the cell if another process ran some of them before: its
    kernel never ran the setup cell, so the notebook would fail with confusing `NameError`s, or pass by chance."""
    records = Path(folder) / "notebook-processes"
    records.mkdir(mode=0o700, exist_ok=True)
    record = records / notebook.replace("/", "_")
    with open(record, "a+") as file:
        lock(file, exclusive=True)
        try:
            file.seek(0)
            first = file.read().strip()
            if not first:
                file.write(worker)
                file.flush()
        finally:
            unlock(file)
    if first and first != worker:
        pytest.fail(f"{notebook}: its cells ran in two test processes ({first} and {worker}), so this cell's kernel "
                    f"never ran the ones before it. The notebook scheduler in conftest.py was not used: run pytest "
                    f"with the project's options (pyproject.toml: -n 2 --dist loadscope), or -n 0.", pytrace=False)


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


def pytest_runtest_setup(item):
    folder = os.environ.get(LOCKS_ENV)
    notebook = notebook_of(item.nodeid)
    if notebook and hasattr(item.config, "workerinput") and fcntl is not None and folder:
        check_one_process_per_notebook(notebook, item.config.workerinput["workerid"], folder)


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
