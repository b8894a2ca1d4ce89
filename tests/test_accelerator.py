"""The GPU branch and its rehearsal on the CPU (issue 18), and the environment every child process starts with."""
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from helpers.setup.accelerator import REHEARSAL_ENV, Accelerator, rehearsed_gpus
from helpers.setup.processes import child_environment

# What the peak-memory child runs, by name: notebook 05's train_one_epoch on notebook 04's MLP.
CHILD = {"train": "helpers.measure.memory_budget:train_one_epoch", "model": "helpers.lessons.tfdata_mnist:article_mlp"}

ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("value, gpus", [("", 0), ("0", 0), ("1", 1), ("2", 2), (" 2 ", 2)])
def test_the_rehearsal_switch_says_how_many_gpus(monkeypatch, value, gpus):
    monkeypatch.setenv(REHEARSAL_ENV, value)
    assert rehearsed_gpus() == gpus


@pytest.mark.parametrize("value", ["3", "yes", "-1", "1.5"])
def test_a_rehearsal_of_something_else_is_refused_by_name(monkeypatch, value):
    monkeypatch.setenv(REHEARSAL_ENV, value)
    with pytest.raises(ValueError, match=REHEARSAL_ENV):
        rehearsed_gpus()


def test_each_branch_picks_its_own_settings():
    cpu = Accelerator(0, False, ("/device:CPU:0",))
    rehearsed = Accelerator(1, True, ("/device:CPU:0",))
    real = Accelerator(1, False, ("/device:GPU:0",), (8, 0))
    old = Accelerator(1, False, ("/device:GPU:0",), (6, 1))
    assert [a.pick(cpu=128, gpu=1024) for a in (cpu, rehearsed, real)] == [128, 1024, 1024]
    assert [a.precision for a in (cpu, rehearsed, real, old)] == ["float32", "mixed_bfloat16", "mixed_float16", "float32"]
    assert "rehearsed on the CPU" in str(rehearsed) and "CPU branch" in str(cpu) and "compute capability 8.0" in str(real)


# Each case starts TensorFlow in a process of its own (seconds each), so each one tests something the others do not:
# a rehearsal overriding a larger and a smaller CPU request (one replica, then two), and the CPU branch splitting
# itself. The CPU branch's single device is what notebooks 01-05 start with in this same test run. The three
# processes run at the same time (one after the other, starting TensorFlow three times took three times as long).
CASES = [("1", 2, 1), ("2", 1, 2), ("", 2, 2)]   # (rehearsed GPUs, CPU devices asked for, replicas expected)


def test_a_rehearsal_configures_tensorflow_as_the_gpu_branch_would():
    """In a fresh process (devices are fixed once TensorFlow runs): a rehearsal of N GPUs gives N replicas
    whatever the notebook asked for its CPU branch, and the CPU branch gives what it asked."""
    def start(rehearse, cpu_devices):
        code = ("import json; from helpers.setup.notebook import start, branch; start(cpu_devices=%d); b = branch(); "
                "print(json.dumps([b.gpus, b.rehearsal, b.strategy().num_replicas_in_sync, b.precision]))"
                % cpu_devices)
        env = {**os.environ, REHEARSAL_ENV: rehearse, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
        return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                text=True, env=env)

    children = [start(rehearse, cpu_devices) for rehearse, cpu_devices, _ in CASES]
    try:
        for (rehearse, cpu_devices, replicas), child in zip(CASES, children):
            stdout, stderr = child.communicate(timeout=180)
            case = (rehearse, cpu_devices)
            assert child.returncode == 0, (case, stderr)
            gpus, rehearsal, got_replicas, precision = json.loads(stdout.strip().splitlines()[-1])
            assert (gpus, rehearsal, got_replicas) == (int(rehearse or 0), bool(rehearse), replicas), case
            assert precision == ("mixed_bfloat16" if rehearse else "float32"), case
    finally:
        for child in children:   # a failed case leaves no process behind
            if child.poll() is None:
                child.kill()
                child.communicate()


def test_a_child_sees_no_gpu_and_never_rehearses_unless_told(monkeypatch):
    monkeypatch.setenv(REHEARSAL_ENV, "1")
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "0")
    hidden = child_environment(gpu=False)
    assert hidden["CUDA_VISIBLE_DEVICES"] == "" and REHEARSAL_ENV not in hidden
    shown = child_environment({"EXTRA": "1"}, gpu=True)
    assert shown["CUDA_VISIBLE_DEVICES"] == "0" and shown["TF_FORCE_GPU_ALLOW_GROWTH"] == "true"
    assert shown["EXTRA"] == "1" and REHEARSAL_ENV not in shown
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "")
    assert "CUDA_VISIBLE_DEVICES" not in child_environment(gpu=True)


class Started(Exception):
    """Raised by the fake process starters below, once they have seen the environment."""


def test_every_child_process_of_the_series_is_started_without_the_gpu(tmp_path, monkeypatch):
    import platform

    import tensorflow  # noqa: F401  (imported before subprocess is replaced: importing may run a command)

    from helpers.measure.peak_memory import peak_training_memory
    from helpers.scale.beam import convert_with_beam, save_source
    from helpers.scale.data_service import DataServiceCluster
    from helpers.scale.multi_worker import train_on_workers

    platform.processor()   # cached now, before subprocess is replaced
    images, labels = save_source(np.zeros((4, 2, 2), np.uint8), np.arange(4), tmp_path / "source")
    from helpers.storage.tfrecord import write_shards   # the workers' shards are checked before any starts
    write_shards(zip(np.zeros((8, 28, 28), np.uint8), np.arange(8) % 10), tmp_path / "shards", "train", 2,
                 total=8, progress=False)
    started_envs = []

    def capture(*args, env=None, **kwargs):   # every environment a helper hands to Popen or run; nothing starts
        started_envs.append(env)
        raise Started()

    monkeypatch.setattr(subprocess, "Popen", capture)
    monkeypatch.setattr(subprocess, "run", capture)
    monkeypatch.setenv(REHEARSAL_ENV, "1")
    starters = {
        "memory child": lambda: peak_training_memory("stream", tmp_path, "train", **CHILD),
        "memory child under a budget": lambda: peak_training_memory("load", tmp_path, "train", budget_mib=900, **CHILD),
        "training workers": lambda: train_on_workers(tmp_path / "shards", "train", workers=2),
        "Beam conversion": lambda: convert_with_beam(images, labels, tmp_path / "out", "train", num_shards=2),
        "tf.data service": lambda: DataServiceCluster(workers=1).__enter__(),
    }
    for name, start in starters.items():
        before = len(started_envs)
        with pytest.raises(Started):
            start()
        assert len(started_envs) == before + 1, name
        env = started_envs[-1]
        assert env is not None and env["CUDA_VISIBLE_DEVICES"] == "" and REHEARSAL_ENV not in env, name
        assert env.get("TF_FORCE_GPU_ALLOW_GROWTH") is None, name


def test_a_child_that_skips_unused_imports_still_trains_and_never_loads_them():
    """`skip_unused_imports` (every TensorFlow child the notebooks start): TensorFlow and Keras still import and
    train, and neither JAX nor matplotlib was loaded; without the call, TensorFlow loads matplotlib (installed
    here), so the check can tell the two apart."""
    code = textwrap.dedent("""
        import json, sys
        from helpers.setup.processes import skip_unused_imports
        if sys.argv[1] == "skip":
            skip_unused_imports()
        import keras, numpy as np, tensorflow as tf
        model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
        model.compile("sgd", "mse")
        loss = model.fit(np.ones((8, 2)), np.ones(8), verbose=0).history["loss"][0]
        loaded = [name for name in ("jax", "matplotlib") if sys.modules.get(name) is not None]
        print(json.dumps([loss, loaded]))
    """)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    runs = {how: subprocess.run([sys.executable, "-c", code, how], capture_output=True, text=True, env=env,
                                timeout=180) for how in ("skip", "plain")}
    for how, run in runs.items():
        assert run.returncode == 0, (how, run.stderr[-2000:])
    skipped_loss, skipped_loaded = json.loads(runs["skip"].stdout.strip().splitlines()[-1])
    _, plain_loaded = json.loads(runs["plain"].stdout.strip().splitlines()[-1])
    assert skipped_loss > 0 and skipped_loaded == []
    assert "matplotlib" in plain_loaded


def test_start_skips_jax_while_tensorflow_imports_and_jax_imports_after_it():
    """`jax_skipped` (around TensorFlow's import in `start()`): inside it `import jax` fails as if JAX were missing,
    after it JAX imports as usual (notebook 08's JAX child, or a learner's own cell)."""
    pytest.importorskip("jax")
    code = textwrap.dedent("""
        import sys
        from helpers.setup.notebook import jax_skipped
        with jax_skipped():
            try:
                import jax
                print("inside: imported")
            except ImportError:
                print("inside: skipped")
        import jax
        print("after:", "imported" if sys.modules["jax"] is jax and hasattr(jax, "numpy") else "missing")
    """)
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=180,
                         env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert run.returncode == 0, run.stderr[-2000:]
    assert run.stdout.split("\n")[:2] == ["inside: skipped", "after: imported"], run.stdout


def test_a_child_imports_the_parents_helpers_not_a_copy_in_its_working_folder(tmp_path):
    """A `helpers/` folder in the working folder (a workshop kit's copy, say) must not shadow the parent's."""
    import subprocess
    import sys

    import helpers
    from helpers.setup.processes import child_environment

    shadow = tmp_path / "helpers"
    shadow.mkdir()
    (shadow / "__init__.py").write_text("raise SystemExit('the shadow copy ran')\n")
    done = subprocess.run([sys.executable, "-c", "import helpers; print(helpers.__file__)"], cwd=tmp_path,
                          capture_output=True, text=True, timeout=60, env=child_environment(gpu=False))
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == helpers.__file__, done.stdout
