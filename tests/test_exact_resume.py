"""Exact resume (notebook 08): a training run killed by SIGKILL at three different points and resumed in another
process trains on the same sample ids, in the same order, as a run never stopped, and reaches the same weights.
And the check can fail: `BackupAndRestore`'s resume of the same kill does not give the same ids."""
import re

import numpy as np
import pytest
import tensorflow as tf

from helpers.lessons.resume_shuffle_grain import id_mlp, seen_ids, train_exact, train_with_backup
from helpers.training_runs.killed_run import run_killed, training_data

N, EPOCHS, BATCH, SAVE_EVERY = 640, 3, 64, 3   # 10 batches an epoch
PER_EPOCH = N // BATCH
CAPACITY = 2 * EPOCHS * N
KILL_POINTS = (2, PER_EPOCH, PER_EPOCH + 7)   # before the first checkpoint, at an epoch's end, mid-epoch


@pytest.fixture(scope="module")
def killed_runs(tmp_path_factory):
    tf.config.experimental.enable_op_determinism()
    root = tmp_path_factory.mktemp("killed")
    runs = [("exact", root / f"exact-{k}", N, k) for k in KILL_POINTS] + [("backup", root / "backup", N, KILL_POINTS[2])]
    code = run_killed(runs, epochs=EPOCHS, batch_size=BATCH, save_every=SAVE_EVERY)   # one process, a thread a run
    return root, code


def uninterrupted(train, directory):
    model = id_mlp(CAPACITY)
    x, y = training_data(N)
    train(model, x, y, directory, epochs=EPOCHS, batch_size=BATCH, save_every=SAVE_EVERY)
    return model


def test_the_child_was_killed(killed_runs):
    assert killed_runs[1] == -9


@pytest.fixture(scope="module")
def exact_reference(tmp_path_factory):
    """One uninterrupted run, the reference for every kill point (trained once: it does not depend on them)."""
    tf.config.experimental.enable_op_determinism()
    return uninterrupted(train_exact, tmp_path_factory.mktemp("reference"))


@pytest.mark.parametrize("kill_at", KILL_POINTS)
def test_a_killed_run_resumes_exactly(killed_runs, kill_at, exact_reference):
    root, _ = killed_runs
    reference = exact_reference
    resumed = uninterrupted(train_exact, root / f"exact-{kill_at}")   # resumes from the killed run's checkpoint
    assert len(seen_ids(reference)) == EPOCHS * N
    np.testing.assert_array_equal(seen_ids(resumed), seen_ids(reference))
    for a, b in zip(reference.get_weights(), resumed.get_weights()):
        np.testing.assert_array_equal(a, b)


def test_backup_and_restore_does_not(killed_runs, tmp_path):
    root, _ = killed_runs
    reference = seen_ids(uninterrupted(train_with_backup, tmp_path / "reference"))
    resumed = seen_ids(uninterrupted(train_with_backup, root / "backup"))
    assert len(resumed) > len(reference) == EPOCHS * N   # the interrupted epoch's first batches trained twice
    assert np.bincount(resumed, minlength=N).max() > EPOCHS


class Interrupted(Exception):
    pass


def _interrupted_run(directory, x, y, *, batch_size, stop_after, **settings):
    """A run of `train_exact` stopped by an exception right after its `stop_after`-th batch (saved every batch)."""
    import keras

    class StopAfter(keras.callbacks.Callback):
        def __init__(self):
            super().__init__()
            self.batches = 0

        def on_train_batch_end(self, batch, logs=None):
            self.batches += 1
            if self.batches == stop_after:
                raise Interrupted

    with pytest.raises(Interrupted):
        train_exact(id_mlp(CAPACITY), x, y, directory, epochs=2, batch_size=batch_size, save_every=1,
                    callbacks=[StopAfter()], **settings)


@pytest.mark.parametrize("change, named", [
    ({"batch_size": 64}, "batch_size"),
    ({"n": 448}, "len(x)"),
    ({"seed": 2}, "seed"),
    ({"reversed": True}, "fingerprint"),
])
def test_a_resume_with_other_settings_is_refused_by_name(tmp_path, change, named):
    """Interrupted at batch 3 of 2 x 256 samples, then resumed with another batch size, less data, another seed or
    other data of the same size: the saved batch count would mean other samples (issue 41 item 4), so the resume is
    refused, naming the setting, and the checkpoint is left as it was: the same settings then resume it."""
    x, y = training_data(512)
    _interrupted_run(tmp_path, x, y, batch_size=256, stop_after=3)
    saved = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    other_x, other_y = x[: change.get("n", 512)], y[: change.get("n", 512)]
    if change.get("reversed"):
        other_x, other_y = x[::-1], y[::-1]
    model = id_mlp(CAPACITY)
    with pytest.raises(ValueError, match=re.escape(named)) as refused:
        train_exact(model, other_x, other_y, tmp_path, epochs=2, batch_size=change.get("batch_size", 256),
                    save_every=1, **({"seed": change["seed"]} if "seed" in change else {}))
    assert str(tmp_path) in str(refused.value)
    assert len(seen_ids(model)) == 0   # nothing restored, nothing trained
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == saved
    resumed = id_mlp(CAPACITY)
    train_exact(resumed, x, y, tmp_path, epochs=2, batch_size=256, save_every=1)
    assert len(seen_ids(resumed)) == 2 * 512


def test_a_resume_past_the_epochs_asked_for_is_refused(tmp_path):
    """A run saved in its second epoch, called again for one epoch, has trained more than it is asked to."""
    x, y = training_data(512)
    _interrupted_run(tmp_path, x, y, batch_size=256, stop_after=3)
    with pytest.raises(ValueError, match="epochs"):
        train_exact(id_mlp(CAPACITY), x, y, tmp_path, epochs=1, batch_size=256, save_every=1)


def test_two_runs_in_one_folder_at_once_are_refused(tmp_path):
    """Found by the attack on this round's changes: two runs saving into one folder at once each number their
    checkpoints from 1, so each overwrites the other's files, and a resume reads a mixture. The second is refused,
    naming the folder, while the first runs; once it has ended, the folder is free again."""
    import threading

    import keras

    x, y = training_data(512)
    started, release = threading.Event(), threading.Event()

    class Hold(keras.callbacks.Callback):
        def on_train_batch_end(self, batch, logs=None):
            started.set()
            release.wait(120)

    first = threading.Thread(target=train_exact, args=(id_mlp(CAPACITY), x, y, tmp_path),
                             kwargs=dict(epochs=1, batch_size=256, save_every=1, callbacks=[Hold()]))
    first.start()
    try:
        assert started.wait(120)
        with pytest.raises(RuntimeError, match=f"another run trains in {re.escape(str(tmp_path))}"):
            train_exact(id_mlp(CAPACITY), x, y, tmp_path, epochs=1, batch_size=256, save_every=1)
    finally:
        release.set()
        first.join(120)
    model = id_mlp(CAPACITY)
    train_exact(model, x, y, tmp_path, epochs=2, batch_size=256, save_every=1)
    assert len(seen_ids(model)) == 2 * 512   # the first run's epoch, restored, and the second
