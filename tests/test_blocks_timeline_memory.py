"""Block records (notebook 05's writer and reader with the plumbing beside them), pipeline timelines and peak memory
in a child process."""
import json
import signal
import time
from pathlib import Path

import numpy as np
import pytest
import tensorflow as tf

from helpers.measure.peak_memory import MemoryRun, peak_training_memory
from helpers.data.standins import make_digits
from helpers.storage.tfrecord import FeatureSpec, ShardError, write_shards
from helpers.lessons import pipeline_profiling as lesson
from helpers.lessons.pipeline_profiling import parse_block_fn
from helpers.measure.timelines import STEP, WAIT, record_timeline, start_spans, traced_map
from helpers.storage import blocks as plumbing
from helpers.storage.blocks import block_file_name, read_block_index
from tests.conftest import finishes_within, run_python


def write_blocks(x, y, directory, split, **options):   # the lesson's writer inside the plumbing
    return plumbing.write_block_split(lesson.write_blocks, x, y, directory, split, **options)


def read_blocks(directory, split, batch_size=256, **options):   # the plumbing's checks, then the lesson's reader
    return plumbing.read_block_split(lesson.read_blocks, directory, split, batch_size, **options)

# What the peak-memory child runs, by name: notebook 05's train_one_epoch on notebook 04's MLP.
CHILD = {"train": "helpers.measure.memory_budget:train_one_epoch", "model": "helpers.lessons.tfdata_mnist:article_mlp"}


@pytest.fixture(scope="module")
def digits():
    return make_digits(1_003, seed=3)


@pytest.fixture()
def blocks(tmp_path, digits):
    x, y = digits
    write_blocks(x, y, tmp_path, "train", num_shards=3, block_size=100)
    return tmp_path


# ---------------------------------------------------------------- block records


def test_unshuffled_blocks_give_every_image_in_written_order_in_full_batches(blocks, digits):
    x, y = digits
    ds = read_blocks(blocks, "train", batch_size=64)
    batches = [(a.numpy(), b.numpy()) for a, b in ds]
    assert [len(b) for _, b in batches] == [64] * 15 + [43]
    assert int(ds.cardinality()) == 16
    assert np.array_equal(np.concatenate([a for a, _ in batches]), x)
    assert np.array_equal(np.concatenate([b for _, b in batches]), y)
    assert ds.element_spec[0].dtype == tf.uint8


def test_shuffled_blocks_keep_every_image_once_and_change_order_each_epoch(blocks, digits):
    x, y = digits
    ds = read_blocks(blocks, "train", batch_size=64, shuffle=True, mix_blocks=3, seed=1)
    epochs = [np.concatenate([b.numpy() for _, b in ds]) for _ in range(2)]
    for labels in epochs:
        assert sorted(labels.tolist()) == sorted(y.tolist())
    assert not np.array_equal(epochs[0], epochs[1]) and not np.array_equal(epochs[0], y)
    first = next(iter(ds))
    pixel_sums = {int(v) for v in x.reshape(len(x), -1).sum(1)}
    assert all(int(s) in pixel_sums for s in first[0].numpy().reshape(64, -1).sum(1))  # images intact


def test_a_batch_draws_from_several_blocks_when_mixing(tmp_path):
    # Labels sorted, so each block of 100 holds one class: a mixed batch holds several.
    x = np.zeros((1_000, 4, 4), np.uint8)
    y = np.repeat(np.arange(10), 100)
    write_blocks(x, y, tmp_path, "sorted", num_shards=2, block_size=100)
    batch = next(iter(read_blocks(tmp_path, "sorted", 50, shuffle=True, mix_blocks=4, seed=0)))[1].numpy()
    assert len(set(batch.tolist())) >= 3


def test_a_mixing_window_of_one_batch_gives_whole_blocks_that_meet_differently_each_epoch(tmp_path):
    # 12 blocks of 50 images, each image filled with its block's number. Batches of 100 with mix_blocks=2: a window
    # is one batch, so read_blocks leaves the order inside it alone (it does not change the batch's gradient), but
    # every image must come once, and which blocks share a batch must change from epoch to epoch.
    block_of = np.repeat(np.arange(12, dtype=np.uint8), 50)
    write_blocks(np.broadcast_to(block_of[:, None, None], (600, 2, 2)), np.arange(600), tmp_path, "pairs",
                 num_shards=3, block_size=50)
    ds = read_blocks(tmp_path, "pairs", 100, shuffle=True, mix_blocks=2)
    epochs = [[(x.numpy()[:, 0, 0], y.numpy()) for x, y in ds] for _ in range(2)]
    for batches in epochs:
        assert sorted(np.concatenate([y for _, y in batches]).tolist()) == list(range(600))   # each image once
        assert all(np.array_equal(x, block_of[y]) for x, y in batches)                          # images intact
        assert all(len(set(x.tolist())) == 2 for x, _ in batches)                   # two whole blocks a batch
    pairs = [{frozenset(x.tolist()) for x, _ in batches} for batches in epochs]
    assert pairs[0] != pairs[1]


def test_missing_truncated_and_renamed_block_files_are_named(blocks):
    victim = read_block_index(blocks, "train").files[1]
    assert victim.name == block_file_name("train", 1, 3, read_block_index(blocks, "train").generation)
    data = victim.read_bytes()
    victim.write_bytes(data[:-10])
    with pytest.raises(ShardError, match=r"train-00001-of-00003-[0-9a-f]{8}\.blocks\.tfrecord is .* bytes"):
        read_blocks(blocks, "train")
    victim.unlink()
    with pytest.raises(ShardError, match=r"train-00001-of-00003-[0-9a-f]{8}\.blocks\.tfrecord is missing"):
        read_blocks(blocks, "train")
    index = blocks / "train.blocks.json"
    doc = json.loads(index.read_text())
    doc["shards"][0]["file"] = "../../etc/passwd"
    index.write_text(json.dumps(doc))
    with pytest.raises(ShardError, match="not 'train-00000-of-00003-"):
        read_block_index(blocks, "train")
    with pytest.raises(ShardError, match="write_blocks"):
        read_blocks(blocks, "nothing-here")
    del doc["shards"][1]["bytes"]  # a hand-edited index: a ShardError naming it, not a KeyError
    index.write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"train\.blocks\.json is not a block index"):
        read_block_index(blocks, "train")


def test_block_writer_rejects_bad_labels_and_leaves_no_temporary_files(tmp_path):
    with pytest.raises(ValueError, match="label -1 at position 0"):
        write_blocks(np.zeros((10, 2, 2), np.uint8), np.full(10, -1), tmp_path, "bad", num_shards=2)
    with pytest.raises(ValueError, match="label 12 at position 0 is outside 0 to 9"):
        write_blocks(np.zeros((10, 2, 2), np.uint8), np.full(10, 12), tmp_path, "bad", num_shards=2, num_classes=10)
    with pytest.raises(ValueError, match="10 images but 9 labels"):
        write_blocks(np.zeros((10, 2, 2), np.uint8), np.zeros(9, int), tmp_path, "bad", num_shards=2)
    assert not list(tmp_path.glob("*.partial"))


def test_a_wrong_image_spec_fails_instead_of_cutting_images_wrongly(blocks):
    index = blocks / "train.blocks.json"
    doc = json.loads(index.read_text())
    doc["spec"]["image"]["shape"] = [28, 27]
    doc["tag"] = "uint8 (28, 27) -> int64 ()"
    index.write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"holds uint8 \(28, 28\) images, but train\.blocks\.json says uint8 \(28, 27\)"):
        read_blocks(blocks, "train")
    # The parse checks every block too, before it cuts the bytes into images.
    record = next(iter(tf.data.TFRecordDataset(str(read_block_index_files(blocks)[0]))))
    with pytest.raises(tf.errors.InvalidArgumentError, match=r"does not hold uint8 \(28, 27\) -> int64"):
        parse_block_fn("uint8 (28, 27) -> int64 ()")(record)


def test_an_index_whose_targets_differ_from_its_blocks_is_refused(blocks):
    index = blocks / "train.blocks.json"
    doc = json.loads(index.read_text())
    doc["tag"] = "uint8 (28, 28) -> float64 ()"   # labels of the same byte count, read as floats
    index.write_text(json.dumps(doc))
    with pytest.raises(ShardError, match=r"holds blocks of uint8 \(28, 28\) -> int64 \(\), but train\.blocks\.json"):
        read_blocks(blocks, "train")


def test_the_plumbing_and_the_lesson_write_the_same_spec():
    for x, y in [(np.zeros((3, 28, 28), np.uint8), np.zeros(3, np.int64)),
                 (np.zeros((3, 12), np.float32), np.zeros((3, 2), np.float32))]:
        assert plumbing.block_spec(x, y) == lesson.block_spec(x, y)
        assert plumbing.spec_tag(FeatureSpec.of(x[0])) == lesson.block_spec(x, y).split(" -> ")[0]


def test_float_rows_with_float_targets_are_written_and_read_back(tmp_path):
    rng = np.random.default_rng(0)
    rows, targets = rng.normal(size=(500, 12)).astype(np.float32), rng.normal(size=(500, 3))   # float64 targets
    write_blocks(rows, targets, tmp_path, "rows", num_shards=3, block_size=64, classes=False)
    assert read_block_index(tmp_path, "rows").tag == "float32 (12,) -> float64 (3,)"
    x, y = (np.concatenate([p.numpy() for p in parts]) for parts in zip(*read_blocks(tmp_path, "rows", 100)))
    assert np.array_equal(x, rows) and np.array_equal(y, targets)
    shuffled = np.concatenate([y.numpy() for _, y in read_blocks(tmp_path, "rows", 100, shuffle=True, mix_blocks=2)])
    assert sorted(map(tuple, shuffled)) == sorted(map(tuple, targets))
    with pytest.raises(ValueError, match="labels must be whole numbers"):   # as classes, floats are refused
        write_blocks(rows, targets[:, 0], tmp_path, "as-classes", num_shards=2)
    bad = targets.copy()
    bad[7, 1] = np.nan
    with pytest.raises(ValueError, match="the target at position 7 is not a finite number"):
        write_blocks(rows, bad, tmp_path, "nan", num_shards=2, classes=False)
    assert not (tmp_path / "nan.blocks.json").exists() and not list(tmp_path.glob("nan-*"))


def test_a_writer_that_leaves_a_shard_empty_gets_no_index(tmp_path):
    def lazy(x, y, files, block_size):   # writes every file but the last
        lesson.write_blocks(x, y, files[:-1], block_size)

    with pytest.raises(RuntimeError, match="empty or missing"):
        plumbing.write_block_split(lazy, np.zeros((40, 2, 2), np.uint8), np.zeros(40, int), tmp_path, "lazy",
                                   num_shards=4)
    assert not (tmp_path / "lazy.blocks.json").exists() and not list(tmp_path.glob("*.partial"))


def read_block_index_files(directory):
    return sorted(Path(directory).glob("train-*.blocks.tfrecord"))


def block_split(directory, value: int, n: int = 600, split: str = "train", num_shards: int = 3):
    images = np.full((n, 4, 4), value, np.uint8)
    return write_blocks(images, np.arange(n) % 10, directory, split, num_shards=num_shards, block_size=50)


def pixel_values(directory, split="train") -> set[int]:
    return {int(v) for images, _ in read_blocks(directory, split, 100) for v in np.unique(images.numpy())}


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


# ---------------------------------------------------------------- timelines


def test_a_timeline_records_each_stage_and_the_consumer_in_order():
    def slow_parse(x):
        return tf.py_function(lambda v: (time.sleep(0.01), v)[1], [x], tf.int64)

    ds = traced_map(start_spans(tf.data.Dataset.range(40)), lambda x: x * 2, "double").batch(10)
    ds = traced_map(ds, slow_parse, "slow")
    sequential = tf.data.Options()  # no automatic prefetch: the consumer asks, then every stage runs
    sequential.experimental_optimization.inject_prefetch = False
    sequential.experimental_optimization.map_parallelization = False
    sequential.experimental_optimization.map_and_batch_fusion = False
    ds = ds.with_options(sequential)
    timeline = record_timeline(ds, consume=lambda x: time.sleep(0.005))
    assert len(timeline.rows) == 4
    for row in timeline.rows:
        assert set(row) == {"double", "slow", WAIT, STEP}
        assert row["double"][0] <= row["double"][1] <= row["slow"][0] + 1e-3
        assert row["slow"][1] - row["slow"][0] >= 0.009             # the sleep happened inside the span
        assert row[STEP][1] - row[STEP][0] >= 0.004
        assert row[WAIT][1] <= row[STEP][0] + 1e-6
    # Without prefetch the consumer waits through every slow stage: most of the run is waiting.
    assert 0.3 < timeline.waiting_share < 1
    assert timeline.typical_wait >= 0.009  # each batch waited at least for its 10 ms stage
    assert record_timeline(ds, max_batches=2).rows and len(record_timeline(ds, max_batches=2).rows) == 2


def test_plot_timeline_draws_one_bar_per_stage_per_batch():
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    from helpers.measure.timeline_chart import plot_timeline

    ds = traced_map(start_spans(tf.data.Dataset.range(6).batch(2)), lambda x: x + 1, "add")
    timeline = record_timeline(ds)
    fig, ax = plt.subplots()
    plot_timeline(timeline, ax, "test")
    assert len(ax.collections) == 3 * 3 and "waiting" in ax.get_title()
    plt.close(fig)


# ---------------------------------------------------------------- peak memory


def test_loading_everything_peaks_higher_than_streaming_in_a_child_process(tmp_path, digits):
    from concurrent.futures import ThreadPoolExecutor

    x, y = digits
    n = 20_000  # 15 MiB of pixels: loading holds them several times over, streaming does not
    picked = np.arange(n) % len(x)
    write_shards(((x[i], y[i]) for i in picked), tmp_path, "train", 4, total=n, progress=False)
    with ThreadPoolExecutor(max_workers=2) as pool:   # two fresh processes at once: each measures only itself
        load, stream = pool.map(lambda mode: peak_training_memory(mode, tmp_path, "train", **CHILD), ("load", "stream"))
    assert isinstance(load, MemoryRun) and load.samples == stream.samples == n
    assert load.floor_mib > 100 and load.peak_mib >= load.floor_mib
    assert load.peak_mib - stream.peak_mib > load.data_mib  # at least one extra copy of the data


def test_a_failing_child_is_reported_with_its_error(tmp_path):
    with pytest.raises(RuntimeError, match="manifest"):
        peak_training_memory("stream", tmp_path, "train", **CHILD)
    with pytest.raises(ValueError, match="mode"):
        peak_training_memory("neither", tmp_path, "train", **CHILD)


@pytest.mark.parametrize("function", ["os:system", "helpers.x:y; rm -rf /", "helpers/../x:y", "subprocess:run",
                                      "helpers.measure.peak_memory:no_such_function", lambda: None, print])
def test_the_memory_child_runs_only_a_named_function_of_the_helpers_package(tmp_path, function):
    """The child's function crosses the command line as a name: nothing there may become other code to run."""
    with pytest.raises(ValueError, match="helpers"):
        peak_training_memory("stream", tmp_path, "train", train=function, model=CHILD["model"])


def test_the_memory_child_names_the_function_it_was_given():
    from helpers.measure.memory_budget import train_one_epoch
    from helpers.measure.peak_memory import function_name, load_function

    assert function_name(train_one_epoch) == CHILD["train"] and load_function(CHILD["train"]) is train_one_epoch
