"""Bad input and faults, round two (issue 16): block records, child processes, the tf.data service,
the Beam conversion and the memory-budget child. One test per defect; each failed before its fix
(a hang shows as a failure, because every call that used to hang runs under a time limit).
"""
from __future__ import annotations

import json
import math
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

from helpers.storage import tfrecord as T
from helpers.storage.tfrecord import read_split   # notebook 04's pipeline, with the manifest's checks
from helpers.storage.tfrecord import ShardError
from helpers.lessons import pipeline_profiling as lesson
from helpers.storage.blocks import read_block_index, read_block_split, write_block_split
from tests.test_bad_input import edit_manifest, finishes_within, small_split


def write_blocks(x, y, directory, split, **options):   # notebook 05's writer inside the plumbing
    return write_block_split(lesson.write_blocks, x, y, directory, split, **options)


def read_blocks(directory, split, batch_size=256, **options):   # the plumbing's checks, then the lesson's reader
    return read_block_split(lesson.read_blocks, directory, split, batch_size, **options)

# What the peak-memory child runs, by name: notebook 05's train_one_epoch on notebook 04's MLP.
CHILD = {"train": "helpers.measure.memory_budget:train_one_epoch", "model": "helpers.lessons.tfdata_mnist:article_mlp"}

ROOT = Path(__file__).resolve().parent.parent


def run_python(code: str, timeout: float = 120, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-c", textwrap.dedent(code)], cwd=ROOT, capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"},
                          **kwargs)


def block_split(directory, value: int, n: int = 600, split: str = "train", num_shards: int = 3):
    images = np.full((n, 4, 4), value, np.uint8)
    return write_blocks(images, np.arange(n) % 10, directory, split, num_shards=num_shards, block_size=50)


def pixel_values(directory, split="train") -> set[int]:
    return {int(v) for images, _ in read_blocks(directory, split, 100) for v in np.unique(images.numpy())}


# ---------------------------------------------------------------- 1. a killed re-write never reads back mixed


def test_a_rewrite_of_a_block_split_killed_after_its_first_file_reads_back_the_old_write(tmp_path):
    block_split(tmp_path, value=1)
    killed = run_python(f"""
        import os, signal
        import numpy as np
        real_replace, renamed = os.replace, []
        def replace_then_die(src, dst):
            real_replace(src, dst)
            renamed.append(dst)
            if len(renamed) == 1:
                os.kill(os.getpid(), signal.SIGKILL)   # kill -9 right after the first new file is in place
        os.replace = replace_then_die
        from helpers.lessons.pipeline_profiling import write_blocks
        from helpers.storage.blocks import write_block_split
        write_block_split(write_blocks, np.full((600, 4, 4), 2, np.uint8), np.arange(600) % 10, {str(tmp_path)!r},
                          "train", num_shards=3, block_size=50)
    """)
    assert killed.returncode == -signal.SIGKILL, killed.stderr
    assert pixel_values(tmp_path) == {1}             # the old write, whole: never 1s and 2s together
    block_split(tmp_path, value=2)                   # the next write finishes, and cleans up
    assert pixel_values(tmp_path) == {2}
    assert len(list(tmp_path.glob("train-*.blocks.tfrecord"))) == 3 and not list(tmp_path.glob("*.partial"))


def test_a_rewrite_with_fewer_shards_leaves_no_old_files(tmp_path):
    block_split(tmp_path, value=1, num_shards=4)
    block_split(tmp_path, value=2, num_shards=2)
    assert len(list(tmp_path.glob("train-*.blocks.tfrecord"))) == 2 and pixel_values(tmp_path) == {2}


# ---------------------------------------------------------------- 2. bad sizes: refused, never a hang or a crash


@pytest.mark.parametrize("value", [0, -5, 2.5, "256", True, None])
def test_an_index_with_a_bad_block_size_is_refused(tmp_path, value):
    block_split(tmp_path, value=1)
    index = tmp_path / "train.blocks.json"
    doc = json.loads(index.read_text())
    doc["block_size"] = value
    index.write_text(json.dumps(doc))
    with pytest.raises(ShardError, match="train.blocks.json is not a block index"):
        finishes_within(20, lambda: read_blocks(tmp_path, "train", 100))


@pytest.mark.parametrize("argument", [dict(batch_size=-1), dict(batch_size=0), dict(mix_blocks=-1),
                                      dict(mix_blocks=0), dict(shuffle_blocks=0), dict(parallel_reads=0)])
def test_bad_reader_arguments_are_refused(tmp_path, argument):
    block_split(tmp_path, value=1)
    name = next(iter(argument))
    with pytest.raises(ValueError, match=f"{name} must be a whole number of at least 1"):
        finishes_within(20, lambda: read_blocks(tmp_path, "train", **{"batch_size": 100, "shuffle": True, **argument}))


@pytest.mark.parametrize("num_shards", [0, -1])
def test_a_writer_refuses_a_shard_count_its_reader_would_refuse(tmp_path, num_shards):
    with pytest.raises(ValueError, match="num_shards must be a whole number of at least 1"):
        block_split(tmp_path, value=1, num_shards=num_shards)
    assert not (tmp_path / "train.blocks.json").exists()


# ---------------------------------------------------------------- 3. another spec of the same byte count


@pytest.mark.parametrize("shape, dtype", [([2, 8], "uint8"), ([4, 4], "int8"), ([4, 2], "uint16")])
def test_an_index_edited_to_another_spec_of_the_same_size_is_refused(tmp_path, shape, dtype):
    block_split(tmp_path, value=1)
    index = tmp_path / "train.blocks.json"
    doc = json.loads(index.read_text())
    doc["spec"]["image"] = {"shape": shape, "dtype": dtype}
    index.write_text(json.dumps(doc))
    with pytest.raises(ShardError, match="its layout tag 'uint8 \\(4, 4\\) -> int64 \\(\\)' does not start with"):
        read_blocks(tmp_path, "train", 100)
    doc["tag"] = f"{dtype} {tuple(shape)} -> int64 ()"   # the index edited all through: the first block refuses it
    index.write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"holds uint8 \(4, 4\) images, but train\.blocks\.json says"):
        read_blocks(tmp_path, "train", 100)


def test_weak_inputs_to_the_block_writer_are_named_or_accepted(tmp_path):
    # 100 classes and labels shaped (n, 1) are legitimate; object arrays and float labels are not.
    write_blocks(np.zeros((40, 2, 2), np.uint8), (np.arange(40) * 2).reshape(-1, 1), tmp_path, "many", num_shards=2)
    assert sorted(int(v) for _, y in read_blocks(tmp_path, "many", 40) for v in y.numpy()) == list(range(0, 80, 2))
    with pytest.raises(ValueError, match="images must be a numeric array"):
        write_blocks(np.array([object()] * 4).reshape(4, 1), np.zeros(4, int), tmp_path, "objects", num_shards=2)
    with pytest.raises(ValueError, match="labels must be whole numbers"):
        write_blocks(np.zeros((4, 2, 2), np.uint8), np.full(4, 7.9), tmp_path, "floats", num_shards=2)


def test_a_flipped_byte_in_a_block_file_is_named_with_verify(tmp_path):
    block_split(tmp_path, value=1)
    victim = read_block_index(tmp_path, "train").files[1]
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    with pytest.raises(ShardError, match=f"{victim.name}: its checksum differs"):
        read_blocks(tmp_path, "train", 100, verify=True)


@pytest.mark.parametrize("target", ["/dev/zero", "loop"])
def test_a_block_file_that_is_a_device_or_a_symlink_loop_is_called_what_it_is(tmp_path, target):
    block_split(tmp_path, value=1)
    victim = read_block_index(tmp_path, "train").files[0]
    victim.unlink()
    if target == "loop":
        victim.symlink_to(victim.name)
        expected = "a symlink loop"
    else:
        victim.symlink_to(target)
        expected = "a character device"
    with pytest.raises(ShardError, match=expected):
        read_blocks(tmp_path, "train", 100)


# ---------------------------------------------------------------- 4. read_split(verify=True) checks the counts


def test_verify_catches_a_shard_whose_record_count_was_edited(tmp_path):
    small_split(tmp_path, n=40, num_shards=4)

    def shrink(split):   # shard 0 holds 10 records; say 1, and keep the total consistent with it
        split["shards"][0]["records"] = 1
        split["total_records"] = 31

    edit_manifest(tmp_path, shrink)
    with pytest.raises(ShardError, match=r"train-00000-of-00004\.tfrecord: holds 10 records but the manifest says 1"):
        read_split(tmp_path, "train", 8, verify=True)


def test_a_total_that_does_not_add_up_is_refused_without_verify(tmp_path):
    small_split(tmp_path, n=40, num_shards=4)
    edit_manifest(tmp_path, lambda split: split.update(total_records=30))
    with pytest.raises(ShardError, match="total_records=30 in 4 shards, but its 4 shards list 40 records"):
        read_split(tmp_path, "train", 8)


# ---------------------------------------------------------------- 5. cleanup removes only the writer's own files


def test_a_writer_removes_only_its_own_temporary_files(tmp_path):
    others = ["train-extra-00000-of-00002.tfrecord.0123abcd.partial",      # another split's shard in progress
              "train-00000-of-00002-89abcdef.blocks.tfrecord.0123abcd.partial"]  # write_blocks of the same split
    own = "train-00001-of-00004.tfrecord.fedcba98.partial"                 # a killed run of this very split
    tmp_path.mkdir(exist_ok=True)
    for name in [*others, own]:
        (tmp_path / name).write_bytes(b"in progress")
    small_split(tmp_path, n=40, num_shards=4)
    assert all((tmp_path / name).exists() for name in others) and not (tmp_path / own).exists()


# ---------------------------------------------------------------- 6. a PNG prefix never reaches another export


def test_overwriting_one_png_export_keeps_an_export_whose_prefix_starts_the_same(tmp_path):
    from helpers.storage.png_folder import check_png_folder, export_png_folder

    big = np.zeros((4, 32, 32, 3), np.uint8)
    export_png_folder(big, [1, 2, 3, 4], tmp_path, "tr_big", progress=False)
    export_png_folder(big[:2] + 1, [5, 6], tmp_path, "tr", progress=False)      # no refusal: tr_big is not "tr"
    export_png_folder(big[:3] + 2, [7, 8, 9], tmp_path, "tr", overwrite=True, progress=False)
    paths, labels = check_png_folder(tmp_path, "tr_big")
    assert len(paths) == 4 and labels.tolist() == [1, 2, 3, 4]
    assert check_png_folder(tmp_path, "tr")[1].tolist() == [7, 8, 9]


# ---------------------------------------------------------------- 7. the Beam conversion refuses bad labels


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


# ---------------------------------------------------------------- 8. no orphan when the parent dies at start-up


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


# ---------------------------------------------------------------- 9. a memory budget must be a real limit


@pytest.mark.parametrize("budget", [-5, 0, math.nan, math.inf, True, "1280"])
def test_a_budget_that_is_no_limit_is_refused(tmp_path, budget):
    from helpers.measure.peak_memory import peak_training_memory

    small_split(tmp_path)
    with pytest.raises(ValueError, match="budget_mib must be a finite number of MiB above 0"):
        peak_training_memory("stream", tmp_path, "train", budget_mib=budget, **CHILD)


def test_a_budget_below_tensorflows_own_size_is_reported_not_raised(tmp_path):
    from helpers.measure.peak_memory import peak_training_memory

    small_split(tmp_path)
    run = peak_training_memory("stream", tmp_path, "train", budget_mib=64, **CHILD)
    assert not run.finished and run.error.startswith("killed") and run.floor_mib == 0, run   # before its floor


# ---------------------------------------------------------------- 10. a FIFO in Keras's cache


def test_a_fifo_in_keras_cache_does_not_hang_the_loader(tmp_path):
    cache = tmp_path / "keras-home" / "datasets"
    cache.mkdir(parents=True)
    os.mkfifo(cache / "mnist.npz")
    done = run_python(f"""
        import os
        os.environ["KERAS_HOME"] = {str(tmp_path / "keras-home")!r}
        os.environ["TUTORIAL_DATA_DIR"] = {str(tmp_path / "data")!r}
        os.environ["TUTORIAL_QUICK"] = "1"
        from helpers.data.datasets import load_mnist, source_of
        (x, y), _ = load_mnist()
        print(source_of("mnist"), len(x))
    """, timeout=60)
    assert done.returncode == 0, done.stderr
    assert "stand-in" in done.stdout and "mnist.npz is a FIFO (named pipe), not a file" in done.stdout


# ---------------------------------------------------------------- 11. what the servers listen on, said plainly


def test_the_data_service_says_it_listens_on_every_interface_and_it_does(capsys):
    from helpers.scale.data_service import DataServiceCluster

    with DataServiceCluster(workers=1) as cluster:   # the dispatcher in this process, the worker in its own
        pids = [p.pid for p in cluster.children.processes.values()]
        deadline = time.monotonic() + 20
        listening: dict[int, list[str]] = {}
        while time.monotonic() < deadline and len(listening) < len(pids):
            listening = _listening(pids)
            time.sleep(0.2)
        dispatcher = [a for a in _listening([os.getpid()]).get(os.getpid(), [])
                      if a.rsplit(":", 1)[1] == str(cluster.port)]
    printed = capsys.readouterr().out
    assert "every network interface" in printed and str(cluster.port) in printed
    assert set(listening) == set(pids) and dispatcher, (listening, dispatcher)
    listening[os.getpid()] = dispatcher
    for pid, addresses in listening.items():   # the text is true: wildcard addresses, not 127.0.0.1
        assert all(a.rsplit(":", 1)[0] in ("*", "0.0.0.0", "[::]") for a in addresses), (pid, addresses)


def _listening(pids: list[int]) -> dict[int, list[str]]:
    """Local addresses each process listens on, from `ss -ltnp`."""
    out = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True).stdout
    found: dict[int, list[str]] = {}
    for line in out.splitlines():
        for pid in pids:
            if f"pid={pid}," in line:
                found.setdefault(pid, []).append(line.split()[3])
    return found


def test_a_taken_port_is_named_as_taken():
    import socket

    with socket.socket() as s:
        s.bind(("0.0.0.0", 0))
        s.listen()
        port = s.getsockname()[1]
        done = run_python(f"""
            import sys
            sys.argv = ["helpers.scale.data_service", "dispatcher", "--port", "{port}"]
            import runpy
            runpy.run_module("helpers.scale.data_service", run_name="__main__")
        """, timeout=60)
    assert done.returncode != 0 and f"port {port}: another process is using it" in done.stderr


# ---------------------------------------------------------------- 12. ignore_errors() ends


def test_ignore_errors_after_read_split_ends_with_the_readable_records(tmp_path):
    manifest = small_split(tmp_path, n=40, num_shards=2)
    victim = tmp_path / manifest.shards[0].file
    data = bytearray(victim.read_bytes())
    data[len(data) // 2] ^= 0xFF
    victim.write_bytes(bytes(data))
    for batch_size in (None, 4):
        ds = read_split(tmp_path, "train", batch_size).ignore_errors()
        assert int(ds.cardinality()) != 0
        batches = finishes_within(30, lambda: list(ds))
        labels = [int(v) for _, y in batches for v in np.atleast_1d(y.numpy())]
        assert 20 <= len(labels) < 40 and set(range(20, 40)) <= set(labels)   # shard 1 whole, shard 0 in part


def test_a_dataset_that_ends_before_its_length_says_so_and_ignore_errors_ends():
    from helpers.storage.tfrecord.read import exact_length

    three_of_five = exact_length(tf.data.Dataset.range(3), 5, "a test split")
    assert int(three_of_five.cardinality()) == 5            # known to Keras, as assert_cardinality gives
    with pytest.raises(tf.errors.InvalidArgumentError, match="a test split ended before the 5 elements"):
        list(three_of_five)
    assert [int(v) for v in finishes_within(20, lambda: list(three_of_five.ignore_errors()))] == [0, 1, 2]
    # What it replaces never ends: assert_cardinality's error, ignored, is raised again for ever. Shown in a child
    # process that is killed after 3 s (a thread here would spin on a core for the rest of the test run).
    looping = ("import sys, tensorflow as tf\n"
               "ds = tf.data.Dataset.range(3).apply(tf.data.experimental.assert_cardinality(5)).ignore_errors()\n"
               "print('reading', flush=True)\n"
               "list(ds)\n")
    child = subprocess.Popen([sys.executable, "-c", looping], stdout=subprocess.PIPE, text=True,
                             env={**os.environ, "TF_CPP_MIN_LOG_LEVEL": "3"})
    try:
        assert child.stdout.readline().strip() == "reading"
        with pytest.raises(subprocess.TimeoutExpired):
            child.wait(timeout=3)
    finally:
        child.kill()
        child.wait()


# ---------------------------------------------------------------- weak: the data folder


@pytest.mark.parametrize("kind, words", [("dangling", "a broken symlink"), ("loop", "a symlink loop"),
                                         ("file", "a file, not a folder"), ("unreachable", "cannot be created")])
def test_a_data_folder_that_cannot_be_one_is_called_what_it_is(tmp_path, monkeypatch, kind, words):
    from helpers.setup.config import data_dir

    target = tmp_path / "data"
    if kind == "dangling":
        target.symlink_to(tmp_path / "nowhere")
    elif kind == "loop":
        target.symlink_to(target)
    elif kind == "file":
        target.write_text("")
    else:
        (tmp_path / "locked").write_text("")
        target = tmp_path / "locked" / "data"          # a parent that is a file: nothing can be made below it
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(target))
    with pytest.raises(NotADirectoryError, match=words):
        data_dir()
