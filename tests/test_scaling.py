"""Notebook 06's engines, run for real on localhost: child processes, the tf.data service and killing its workers,
counting what arrives, two training workers, the Beam conversion; and the memory budget notebook 05 teaches."""
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from helpers.data.standins import make_digits
from helpers.storage.tfrecord import write_shards

# What the peak-memory child runs, by name: notebook 05's train_one_epoch on notebook 04's MLP.
CHILD = {"train": "helpers.measure.memory_budget:train_one_epoch", "model": "helpers.lessons.tfdata_mnist:article_mlp"}

ROOT = Path(__file__).resolve().parent.parent


def alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] != "Z"
    except FileNotFoundError:
        return False


def wait_gone(pids, seconds=10.0) -> list[int]:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline and any(alive(p) for p in pids):
        time.sleep(0.1)
    return [p for p in pids if alive(p)]


pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to check the process table")


@pytest.fixture(scope="module")
def shards(tmp_path_factory):
    x, y = make_digits(2_000, seed=4)
    directory = tmp_path_factory.mktemp("shards")
    write_shards(zip(x, y), directory, "train", 8, total=len(x), progress=False)
    return directory, x, y


# ---------------------------------------------------------------- child processes


def test_children_stop_when_the_block_raises():
    from helpers.setup.processes import ChildProcesses

    program = "from helpers.setup.processes import exit_with_parent, READY; exit_with_parent(); print(READY); import time; time.sleep(600)"
    with pytest.raises(ZeroDivisionError):
        with ChildProcesses() as children:
            pids = [children.start(f"sleeper-{i}", ["-c", program]).pid for i in range(2)]
            1 / 0
    assert wait_gone(pids) == []


def test_a_child_that_fails_to_start_is_reported_with_its_output():
    from helpers.setup.processes import ChildProcesses

    with ChildProcesses() as children:
        with pytest.raises(RuntimeError, match="(?s)did not start.*no such thing"):
            children.start("broken", ["-c", "print('no such thing'); raise SystemExit(3)"])
        assert children.processes == {}


def test_a_child_started_with_stdin_reads_what_it_is_told_after_it_started():
    # The tf.data service's workers load TensorFlow while the dispatcher does, and learn its address this way.
    from helpers.setup.processes import ChildProcesses

    program = "import sys; from helpers.setup.processes import READY; print(READY, sys.stdin.readline().strip())"
    with ChildProcesses() as children:
        children.start("listener", ["-c", program], wait=False, stdin=True)
        children.tell("listener", "localhost:5050")
        children.wait_ready("listener", 60)
        assert children.ready_words("listener") == "localhost:5050"


def test_a_data_service_worker_told_no_address_exits_saying_so():
    done = subprocess.run([sys.executable, "-m", "helpers.scale.data_service", "worker", "--dispatcher", "-"],
                          input="", capture_output=True, text=True, timeout=300, cwd=ROOT)
    assert done.returncode != 0 and "no dispatcher address" in done.stderr, done.stderr[-500:]


def test_children_exit_when_their_parent_is_killed(tmp_path):
    # A parent that starts a child and is then SIGKILLed: no cleanup code runs in the parent, yet the child goes.
    pid_file = tmp_path / "child.pid"
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent(f"""
        from helpers.setup.processes import ChildProcesses
        import time
        children = ChildProcesses()
        child = children.start("sleeper", ["-c", "from helpers.setup.processes import exit_with_parent, READY; "
                                           "exit_with_parent(); print(READY); import time; time.sleep(600)"])
        open({str(pid_file)!r}, "w").write(str(child.pid))
        time.sleep(600)
    """)], cwd=ROOT)
    deadline = time.monotonic() + 60
    while not pid_file.exists() and time.monotonic() < deadline:
        time.sleep(0.1)
    child_pid = int(pid_file.read_text())
    assert alive(child_pid)
    parent.send_signal(signal.SIGKILL)
    parent.wait()
    assert wait_gone([child_pid]) == []


def test_a_child_whose_parent_dies_before_it_starts_watching_exits(tmp_path):
    parent = subprocess.Popen([sys.executable, "-c", textwrap.dedent("""
        import subprocess, sys, time
        from helpers.setup.processes import child_environment
        child = subprocess.Popen([sys.executable, "-c",
            "import time; time.sleep(1.0)\\n"                 # a slow start: TensorFlow still importing
            "from helpers.setup.processes import exit_with_parent\\n"
            "exit_with_parent()\\n"
            "time.sleep(60)"], env=child_environment(gpu=False))
        print(child.pid, flush=True)
        time.sleep(60)
    """)], cwd=ROOT, stdout=subprocess.PIPE, text=True, env={**os.environ, "PYTHONPATH": str(ROOT)})
    child_pid = int(parent.stdout.readline())
    parent.kill()                                          # SIGKILL within the child's first second
    parent.wait()
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and _running(child_pid):
        time.sleep(0.1)
    assert not _running(child_pid), "the child outlived its parent"


def _running(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_child_started_from_a_thread_survives_the_thread(tmp_path):
    # The parent-death signal follows the thread that started a child; a cluster started from a
    # worker thread must not lose its children when that thread ends.
    from helpers.setup.processes import ChildProcesses

    import threading

    children = ChildProcesses()
    started = threading.Thread(target=lambda: children.start("sleeper", ["-c", textwrap.dedent("""
        import time
        from helpers.setup.processes import READY, exit_with_parent
        exit_with_parent()
        print(READY, flush=True)
        time.sleep(60)
    """)], env={"PYTHONPATH": str(ROOT)}))
    with children:
        started.start()
        started.join()
        time.sleep(1.0)
        assert children.processes["sleeper"].poll() is None, "the child died with the thread that started it"


# The tf.data service (each element once in distributed_epoch, once per worker in parallel_epochs, no process
# left afterwards) and two workers ending with the same weights are asserted by notebook 06's check cell, which
# runs in this same test session. Below, the service's plumbing on stand-in workers: plain Python processes.

SLEEP = "from helpers.setup.processes import READY; print(READY, flush=True); import time; time.sleep(600)"


def stand_in_cluster(programs):
    """A DataServiceCluster whose workers are the given Python programs (no TensorFlow, no dispatcher)."""
    from helpers.scale.data_service import DataServiceCluster

    cluster = DataServiceCluster(workers=len(programs))
    cluster.children.__enter__()
    for index, program in enumerate(programs):
        cluster.children.start(f"worker-{index}", ["-c", program])
    cluster.worker_pids = [cluster.children.processes[name].pid for name in cluster.worker_names]
    return cluster


def holding_open(path):
    return (f"from helpers.setup.processes import READY; f = open({str(path)!r}); print(READY, flush=True)\n"
            "import time; time.sleep(600)")


def test_the_worker_killed_is_one_with_a_file_open_under_the_folder(tmp_path):
    shards, elsewhere = tmp_path / "shards, ü", tmp_path / "elsewhere"
    shards.mkdir(), elsewhere.mkdir()
    (shards / "train-0.tfrecord").write_bytes(b"x"), (elsewhere / "other").write_bytes(b"x")
    cluster = stand_in_cluster([holding_open(elsewhere / "other"), holding_open(shards / "train-0.tfrecord"),
                                SLEEP])
    try:
        assert cluster.kill_worker_reading(shards) == 1
        assert cluster.children.processes["worker-1"].poll() is not None
        with pytest.raises(RuntimeError, match="no worker .* had a file under .* open within 0.3 s"):
            cluster.kill_worker_reading(shards, patience=0.3)   # the one reading it is dead
        cluster.kill_worker(0), cluster.kill_worker(2)
        with pytest.raises(RuntimeError, match="every worker"):
            cluster.kill_worker_reading(shards)
    finally:
        cluster.stop()
    assert cluster.leftovers() == []


def test_leftovers_names_a_worker_still_running():
    cluster = stand_in_cluster([SLEEP])
    try:
        assert cluster.leftovers(grace=0.2) == [f"worker process {cluster.worker_pids[0]}"]
    finally:
        cluster.stop()
    assert cluster.leftovers() == []


def test_the_killer_callback_kills_its_worker_after_its_step_and_counts_the_steps():
    import keras

    cluster = stand_in_cluster([SLEEP, SLEEP])
    try:
        killer = cluster.killer(1, step=2)
        model = keras.Sequential([keras.Input((3,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        model.fit(np.zeros((40, 3)), np.zeros(40), batch_size=4, epochs=1, verbose=0, callbacks=[killer])
        assert killer.steps_done == 10
        assert cluster.children.processes["worker-1"].poll() is not None
        assert cluster.children.processes["worker-0"].poll() is None
    finally:
        cluster.stop()


def test_read_until_silent_stops_waiting_for_what_a_dead_worker_held():
    import threading

    from helpers.measure.arrivals import read_until_silent

    release = threading.Event()

    def batches():   # two batches of ids 0-3, then nothing (what a dead worker held never comes)
        for start in (0, 2):
            yield np.zeros(2), np.zeros(2), np.arange(start, start + 2)
        release.wait(60)

    kills = []
    dataset = tf.data.Dataset.from_generator(batches, output_signature=(
        tf.TensorSpec((2,), tf.float64), tf.TensorSpec((2,), tf.float64), tf.TensorSpec((2,), tf.int64)))
    started = time.monotonic()
    try:
        seen, ended = read_until_silent(dataset, after=4, kill=lambda: kills.append(True), silence=0.5)
    finally:
        release.set()
    assert dict(seen) == {0: 1, 1: 1, 2: 1, 3: 1} and kills == [True] and not ended
    assert time.monotonic() - started < 30
    whole, ended = read_until_silent(tf.data.Dataset.range(6).batch(2).map(lambda i: (i, i, i)),
                                     after=100, kill=lambda: None)
    assert sorted(whole) == list(range(6)) and ended


def test_read_until_silent_raises_what_the_kill_or_the_dataset_raised_before_it():
    from helpers.measure.arrivals import read_until_silent

    def no_worker_reading():
        raise RuntimeError("no worker of this tf.data service had a file under /x open within 10 s")

    six = tf.data.Dataset.range(6).batch(2).map(lambda i: (i, i, i))
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="no worker of this tf.data service"):
        read_until_silent(six, after=2, kill=no_worker_reading, silence=30, patience=30)
    def one_batch_then_an_error():
        yield np.zeros(2), np.zeros(2), np.arange(2)
        raise ValueError("a bad record")

    broken = tf.data.Dataset.from_generator(one_batch_then_an_error, output_signature=(
        tf.TensorSpec((2,), tf.float64), tf.TensorSpec((2,), tf.float64), tf.TensorSpec((2,), tf.int64)))
    with pytest.raises(tf.errors.OpError, match="a bad record"):
        read_until_silent(broken, after=100, kill=lambda: None, silence=30, patience=30)
    assert time.monotonic() - started < 20   # raised at once, not after the silence or the patience


# ---------------------------------------------------------------- Beam


def test_beam_writes_the_same_records_as_write_shards_and_nothing_else(shards, tmp_path):
    pytest.importorskip("apache_beam")
    from helpers.lessons.scaling_out import records_digest
    from helpers.scale.beam import convert_with_beam, save_source
    from helpers.storage.tfrecord import read_manifest

    directory, x, y = shards
    images_path, labels_path = save_source(x, y, tmp_path / "source")
    files = convert_with_beam(images_path, labels_path, tmp_path / "beam", "train", num_shards=4, chunk=300)
    assert [f.name for f in files] == [f"train-{i:05d}-of-00004.tfrecord" for i in range(4)]
    assert sorted(p.name for p in (tmp_path / "beam").iterdir()) == [f.name for f in files]  # no temporary folder left
    assert records_digest(files) == records_digest(read_manifest(directory, "train").files(directory))


def test_without_beam_the_conversion_says_why_and_what_to_install(monkeypatch):
    """Notebook 06 §5 skips on `beam_unavailable()`'s sentence where Beam is not installed (issue 27, item 10)."""
    import importlib.util

    from helpers.scale.beam import beam_unavailable

    real = importlib.util.find_spec
    assert (beam_unavailable() is None) == (real("apache_beam") is not None)
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "apache_beam" else real(name, *a))
    why = beam_unavailable()
    assert why.startswith("Apache Beam is not installed") and '.[scale]' in why and "Colab" in why


def test_a_failed_beam_conversion_leaves_no_shards(tmp_path):
    pytest.importorskip("apache_beam")
    from helpers.scale.beam import convert_with_beam

    images = tmp_path / "images.npy"
    labels = tmp_path / "labels.npy"
    np.save(images, np.zeros((10, 2, 2), np.uint8))
    np.save(labels, np.zeros(10, np.int64))
    # A job that fails inside Beam (here: a runner that does not exist) leaves nothing behind.
    with pytest.raises(RuntimeError, match="Beam conversion failed"):
        convert_with_beam(images, labels, tmp_path / "out", "train", num_shards=2, beam_args=["--runner=NoSuchRunner"])
    assert not (tmp_path / "out").exists() or list((tmp_path / "out").iterdir()) == []
    # A chunk that is not a whole number of records is refused before any job starts.
    with pytest.raises(ValueError, match="chunk is a whole number"):
        convert_with_beam(images, labels, tmp_path / "out", "train", num_shards=2, chunk=0)
    # A source that is not an array is refused by name before any job starts.
    labels.write_bytes(b"not a numpy file")
    with pytest.raises(ValueError, match="labels.npy is not a .npy array"):
        convert_with_beam(images, labels, tmp_path / "out", "train", num_shards=2)


@pytest.mark.parametrize("labels, message", [
    (np.array([7.9] * 5), "labels must be whole numbers"),
    (np.array([1, 2, -1, 3, 4]), "label -1 at position 2"),
    (np.array([1, 2, 300, 3, 4]), "label 300 at position 2 is outside 0 to 9"),
    (np.arange(3), "holds 5 images but .* 3 labels"),
])
def test_the_beam_conversion_refuses_bad_labels_before_it_starts(tmp_path, labels, message):
    from helpers.scale.beam import convert_with_beam

    np.save(tmp_path / "images.npy", np.zeros((5, 2, 2), np.uint8))
    np.save(tmp_path / "labels.npy", labels)
    with pytest.raises(ValueError, match=message):
        convert_with_beam(tmp_path / "images.npy", tmp_path / "labels.npy", tmp_path / "out", "train", num_shards=2,
                          num_classes=10)
    assert not (tmp_path / "out").exists()


def test_records_digest_ignores_order_and_file_boundaries(tmp_path):
    from helpers.lessons.scaling_out import records_digest

    records = [f"record {i}".encode() for i in range(10)]
    for name, part in [("a", records[:3]), ("b", records[3:]), ("c", records[::-1])]:
        with tf.io.TFRecordWriter(str(tmp_path / name)) as w:
            for r in part:
                w.write(r)
    assert records_digest([tmp_path / "a", tmp_path / "b"]) == records_digest([tmp_path / "c"])
    assert records_digest([tmp_path / "a"]) != records_digest([tmp_path / "c"])


# ---------------------------------------------------------------- a memory budget


def test_loading_more_than_the_budget_fails_where_streaming_fits(tmp_path):
    from concurrent.futures import ThreadPoolExecutor

    from helpers.measure.peak_memory import peak_training_memory

    x, y = make_digits(1_000, seed=6)
    # 339 MiB of pixels: more than a budget of 256 MiB above each child's floor. Images 9 times as wide and high
    # (252x252) make those bytes in an 81st of the records, with an 81st of the per-record work of writing them.
    # (Were the budget not enforced, the MLP would train on them.)
    big = np.repeat(np.repeat(x, 9, axis=1), 9, axis=2)
    n = 5_600
    write_shards(((big[i % 1_000], y[i % 1_000]) for i in range(n)), tmp_path, "train", 4, total=n, progress=False)
    small = tmp_path / "small"
    write_shards(zip(x, y), small, "train", 2, total=len(x), progress=False)
    with ThreadPoolExecutor(max_workers=2) as pool:   # both children at once, each under its own budget
        load, stream = pool.map(lambda job: peak_training_memory(job[0], job[1], "train", headroom_mib=256,
                                                                 **CHILD), [("load", tmp_path), ("stream", small)])
    assert not load.finished and load.error.startswith("killed")
    assert stream.finished and stream.peak_mib <= stream.budget_mib == stream.floor_mib + 256
