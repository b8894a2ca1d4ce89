"""Exact resume (notebook 08): a training run killed by SIGKILL at three different points and resumed in another
process trains on the same sample ids, in the same order, as a run never stopped, and reaches the same weights.
And the check can fail: `BackupAndRestore`'s resume of the same kill does not give the same ids."""
import numpy as np
import pytest
import tensorflow as tf

from helpers.lessons.resume_shuffle_grain import id_mlp, seen_ids, train_exact, train_with_backup, training_data
from helpers.scale.killed_run import run_killed

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
