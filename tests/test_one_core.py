"""The one-core child (`helpers.measure.one_core`): pinned to one CPU, every thread of it, and returning rates."""
import os
import sys

import pytest

from helpers.measure import one_core
from helpers.measure.one_core import OneCoreUnsupported, PipelineChild, copy_files, one_core_supported, pick_core

NUMBERS = ("helpers.measure.one_core:numbers", {"n": 2_000, "batch_size": 100})
pinning = pytest.mark.skipif(not one_core_supported(), reason="no os.sched_setaffinity on this platform")


@pinning
def test_the_pinned_child_runs_on_one_cpu_and_returns_epochs(tmp_path, monkeypatch):
    files = [tmp_path / "a.bin", tmp_path / "b.bin"]
    for i, f in enumerate(files):
        f.write_bytes(bytes([i]) * 3_000_000)
    with PipelineChild({"numbers": NUMBERS, "small": ("helpers.measure.one_core:numbers", {"n": 300, "batch_size": 64}),
                        "empty": ("helpers.measure.one_core:numbers", {"n": 0, "batch_size": 64})},
                       repeat=2) as child:
        # What the child itself reports: every one of its threads (TensorFlow's too) may run on that CPU alone.
        assert child.cpus == [pick_core()] and child.threadpool == 1
        assert child.threads > 1 and child.process.pid != os.getpid()
        first, second = child.epoch("numbers"), child.epoch("numbers")
        assert first.samples == second.samples == 2 * 2_000 and 0 < first.start_up <= first.seconds
        assert child.epoch("small").samples == 2 * 300       # each pipeline by its name, with its own sizes, twice
        assert child.process.args[3] == str(pick_core())     # the CPU the bootstrap pinned (before TensorFlow)
        assert child.copy_rate([str(f) for f in files], seconds=0.05) > 0
        with pytest.raises(KeyError, match="no pipeline 'other'"):
            child.epoch("other")
        with pytest.raises(RuntimeError, match="the dataset is empty"):   # an error in the child, named here
            child.epoch("empty")
        assert child.epoch("small").samples == 2 * 300                      # and the child still serves
        child.add("later", "helpers.measure.one_core:numbers", {"n": 500, "batch_size": 50})
        assert child.epoch("later").samples == 2 * 500                      # a pipeline added once data exists
        # Issue 25, round three: only regular files are copied (/dev/zero never ends) ...
        with pytest.raises(ValueError, match="/dev/zero: it is a character device"):
            child.copy_rate(["/dev/zero"])
        # ... and the child itself refuses a factory outside helpers, had the parent's check been skipped.
        monkeypatch.setattr(one_core, "_check_factory", lambda name, factory: None)
        marker = tmp_path / "ran"
        with pytest.raises(RuntimeError, match="'os:system' is not a 'helpers.<module>:<function>' or 'benchmarks.<module>:<function>' name"):
            child.add("shell", "os:system", {"command": f"touch {marker}"})
        assert not marker.exists() and child.epoch("small").samples == 2 * 300
    assert child.process.poll() is not None   # stopped when its block ended


def test_without_sched_setaffinity_the_error_says_so(monkeypatch):
    monkeypatch.delattr(os, "sched_setaffinity", raising=False)
    with pytest.raises(OneCoreUnsupported, match=f"sched_setaffinity.*{sys.platform}"):
        PipelineChild({"numbers": NUMBERS})


def test_copy_files_counts_every_byte_read(tmp_path):
    f = tmp_path / "f.bin"
    f.write_bytes(b"x" * 10_000_000)
    rate = copy_files([str(f)], seconds=0.0)   # one pass: 10 MB in a second or less on any machine
    assert rate >= 10_000_000 / 1.0 - 1


@pytest.mark.parametrize("factory", ["os:system", "subprocess:getoutput", "helpers", "numbers", 7])
def test_a_factory_outside_the_helpers_package_is_refused_before_any_child_starts(factory):
    """Issue 25, round three: "os:system" with {"command": ...} ran a shell command in the child."""
    with pytest.raises(ValueError, match="pipeline 'x': .* is not a 'helpers.<module>:<function>' or"):
        one_core._check_factory("x", factory)


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no FIFOs on this platform")
def test_copy_files_refuses_what_is_no_regular_file_without_hanging(tmp_path):
    """Issue 25, round three: /dev/zero was read for ever, a FIFO blocked the child's open."""
    from tests.conftest import finishes_within

    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    for path, says in [("/dev/zero", "a character device"), (fifo, "a FIFO"), (tmp_path, "a folder")]:
        with pytest.raises(ValueError, match=f"from {path}: it is {says}"):
            finishes_within(5, lambda: copy_files([str(path)], seconds=0.0))


def test_where_one_core_cannot_run_the_message_says_why_and_what_to_use(monkeypatch):
    monkeypatch.setattr(sys, "platform", "darwin")
    message = one_core.unsupported_message()
    assert "os.sched_setaffinity" in message and "darwin" in message and "WSL 2" in message
