"""The memory budget of `helpers.measure.peak_memory` (notebook 05 §8): a watchdog on the child's
resident memory that kills it past its budget, the budget set from the child's own floor, the platforms where
it cannot run, and the stored full-run figure the notebooks print beside their own."""
import math
import re
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np
import pytest

import helpers.measure.peak_memory as peak_memory
from helpers.measure.full_run import FULL_RUN_FILE
from helpers.data.standins import make_digits
from helpers.measure.peak_memory import FULL_RUN, budget_unavailable, peak_memory_each, peak_training_memory
from helpers.storage.tfrecord import write_shards
from tests.conftest import small_split

CHILD = {"train": "helpers.measure.memory_budget:train_one_epoch",
         "model": "helpers.lessons.tfdata_mnist:article_mlp"}


@pytest.fixture(scope="module")
def digits_split(tmp_path_factory):
    """20,000 MNIST-shaped digits (15 MiB): loading them grows a process by more than a MiB, streaming barely."""
    x, y = make_digits(1_000, seed=8)
    directory = tmp_path_factory.mktemp("digits")
    n = 20_000
    write_shards(((x[i % 1_000], y[i % 1_000]) for i in range(n)), directory, "train", 4, total=n, progress=False)
    return directory


def test_a_child_past_its_headroom_is_killed_and_one_within_it_finishes(digits_split):
    with ThreadPoolExecutor(max_workers=2) as pool:   # two fresh processes at once, each under its own budget
        load, stream = pool.map(lambda job: peak_training_memory(job[0], digits_split, "train", headroom_mib=job[1],
                                                                 **CHILD), [("load", 1), ("stream", 384)])
    # Loading 15 MiB of images cannot stay within 1 MiB of its floor: killed, at a reading over its budget.
    assert not load.finished and load.error.startswith("killed"), load
    assert load.budget_mib == pytest.approx(load.floor_mib + 1) and load.peak_mib > load.budget_mib
    assert load.samples == 20_000 and load.floor_mib > 100   # known from the child's first report
    # The budget is the child's own floor + the headroom, and a run that stayed within it finished.
    assert stream.finished and stream.budget_mib == pytest.approx(stream.floor_mib + 384), stream
    assert stream.floor_mib <= stream.peak_mib <= stream.budget_mib


def test_one_child_streams_each_split_in_turn_and_reports_a_peak_after_each(digits_split, tmp_path):
    x, y = make_digits(1_000, seed=9)
    write_shards(zip(x, y), tmp_path, "train", 2, total=1_000, progress=False)
    small, large = peak_memory_each("stream", [tmp_path, digits_split], "train", headroom_mib=384, **CHILD)
    assert (small.samples, large.samples) == (1_000, 20_000), (small, large)   # in the order given
    assert small.finished and large.finished and small.floor_mib == large.floor_mib > 100
    # a high-water mark only grows: the later report is at least the earlier one
    assert small.floor_mib <= small.peak_mib <= large.peak_mib <= large.budget_mib


def test_a_child_killed_on_one_split_reports_the_splits_after_it_as_not_reached(digits_split, tmp_path):
    x, y = make_digits(100, seed=9)
    write_shards(zip(x, y), tmp_path, "train", 1, total=100, progress=False)
    killed, after = peak_memory_each("load", [digits_split, tmp_path], "train", headroom_mib=1, **CHILD)
    assert killed.error.startswith("killed") and killed.samples == 20_000, killed
    assert not after.finished and after.error.startswith("not reached") and after.samples == 100, after


def test_a_directory_named_like_an_option_is_a_directory(tmp_path, monkeypatch):
    """The child's directories come last on its command line, after a fixed-position flag: one named "--wait"
    (relative) is trained on, not taken for the flag that makes the child wait for a budget."""
    x, y = make_digits(100, seed=9)
    write_shards(zip(x, y), tmp_path / "--wait", "train", 1, total=100, progress=False)
    monkeypatch.chdir(tmp_path)
    run, = peak_memory_each("stream", ["--wait"], "train", timeout=120, **CHILD)
    assert run.finished and run.samples == 100, run


@pytest.mark.parametrize("directories", ["data/big", Path("data/big"), b"data/big"])
def test_one_path_instead_of_a_list_is_refused_before_any_child_starts(directories, monkeypatch):
    monkeypatch.setattr(peak_memory.subprocess, "Popen", lambda *a, **k: pytest.fail("a child was started"))
    with pytest.raises(ValueError, match="a list of directories, not one path"):
        peak_memory_each("stream", directories, "train", **CHILD)


@pytest.mark.parametrize("timeout", [None, 0, -1, float("nan"), float("inf"), True, "60"])
def test_a_timeout_that_is_no_number_of_seconds_is_refused_before_any_child_starts(timeout, monkeypatch):
    monkeypatch.setattr(peak_memory.subprocess, "Popen", lambda *a, **k: pytest.fail("a child was started"))
    with pytest.raises(ValueError, match="timeout must be a finite number"):
        peak_memory_each("stream", ["data/big"], "train", timeout=timeout, **CHILD)


def test_a_peak_past_the_budget_between_two_readings_is_not_reported_as_finished(digits_split, monkeypatch):
    # The watchdog here sees nothing (every reading 0 MiB), so the child trains to the end; its own high-water mark
    # passed the budget all the same, and that fails the run.
    monkeypatch.setattr(peak_memory, "_rss_mib", lambda pid="self": 0.0)
    run = peak_training_memory("load", digits_split, "train", headroom_mib=1, **CHILD)
    assert not run.finished and "between two readings" in run.error, run
    assert run.peak_mib > run.budget_mib == pytest.approx(run.floor_mib + 1)


def test_a_budget_and_a_headroom_together_are_refused(tmp_path):
    with pytest.raises(ValueError, match="not both"):
        peak_training_memory("stream", tmp_path, "train", budget_mib=900, headroom_mib=256, **CHILD)
    with pytest.raises(ValueError, match="headroom_mib must be a finite number"):
        peak_training_memory("stream", tmp_path, "train", headroom_mib=0, **CHILD)


@pytest.mark.parametrize("platform, names", [("win32", ["Windows", "WSL 2", "resource"]), ("darwin", ["macOS"])])
def test_where_there_is_no_proc_a_budget_is_refused_with_what_to_use(tmp_path, monkeypatch, platform, names):
    monkeypatch.setattr(peak_memory.sys, "platform", platform)
    reason = budget_unavailable()
    assert reason and all(name in reason for name in [*names, "Colab", "Linux machine"]), reason
    started = []
    monkeypatch.setattr(peak_memory.subprocess, "Popen", lambda *a, **k: started.append(a))
    with pytest.raises(RuntimeError, match="needs Linux"):
        peak_training_memory("stream", tmp_path, "train", headroom_mib=256, **CHILD)
    assert not started


def test_a_budget_is_available_on_linux():
    if not Path("/proc/self/statm").exists():
        pytest.skip("no /proc here")
    assert budget_unavailable() is None


def test_the_stored_full_run_figure_is_the_benchmarks_last_full_run():
    """FULL_RUN is what helpers/measure/last_full_run.txt says (a full run that changes them must change it too)."""
    text = FULL_RUN_FILE.read_text(encoding="utf-8")
    ratio = re.search(r"^stream_vs_memory_peak_rss_5x\s+([\d.]+)\s+([\d.]+)–([\d.]+)", text, re.M)
    detail = re.search(r"stream ([\d,]+) at ([\d,]+) images, ([\d,]+) at ([\d,]+); load ([\d,]+) and ([\d,]+)", text)
    assert ratio and detail, "the memory rows are missing from helpers/measure/last_full_run.txt"
    number = [float(v.replace(",", "")) for v in detail.groups()]
    assert (FULL_RUN.ratio, *FULL_RUN.interval) == tuple(float(v) for v in ratio.groups())
    assert FULL_RUN.images == (number[1], number[3]) and FULL_RUN.stream_mib == (number[0], number[2])
    assert FULL_RUN.load_mib == (number[4], number[5])
    assert FULL_RUN.ratio == pytest.approx(FULL_RUN.stream_mib[1] / FULL_RUN.load_mib[1], abs=0.01)
    assert "0.258×" in FULL_RUN.sentence() and "1,000,000" in FULL_RUN.sentence()


def test_the_large_split_is_written_once_and_written_again_when_a_shard_was_cut_short(tmp_path):
    from helpers.data.photo_sized import write_large_split

    x, y = make_digits(8, seed=3)
    first = write_large_split(x, y, tmp_path, 1, num_shards=2)   # 1 MiB: 8 photo-sized images, cycled
    shard = tmp_path / first.shards[0].file
    written_at = shard.stat().st_mtime_ns
    assert write_large_split(x, y, tmp_path, 1, num_shards=2) == first   # found there, used as it is
    assert shard.stat().st_mtime_ns == written_at
    with open(shard, "r+b") as f:   # a shard cut short (a copy stopped, a disk full)
        f.truncate(shard.stat().st_size // 2)
    again = write_large_split(x, y, tmp_path, 1, num_shards=2)
    assert [s.sha256 for s in again.shards] == [s.sha256 for s in first.shards]
    assert shard.stat().st_size == first.shards[0].bytes


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


def test_a_memory_budget_larger_than_setrlimit_takes_is_refused():
    from helpers.measure.peak_memory import check_budget
    with pytest.raises(ValueError, match="at most 2"):
        check_budget(1e30)
