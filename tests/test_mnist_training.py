"""Notebook 04's training setup: the model, the streaming pipeline, and resuming after a kill."""
import json
import os
import signal
import subprocess
import sys
import re
import textwrap
import time
from pathlib import Path

import numpy as np
import pytest

from helpers.storage import tfrecord as T
from helpers.storage.tfrecord import read_split   # notebook 04's pipeline, with the manifest's checks
from helpers.lessons.tfdata_mnist import article_mlp, make_train_ds
from helpers.lessons.tfrecord_conversion import parse_batch

ROOT = Path(__file__).resolve().parent.parent


def write_digits(directory, n=512, num_shards=4, seed=0):
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
    labels = rng.integers(0, 10, n)
    T.write_shards(zip(images, labels), directory, "train", num_shards, total=n, progress=False)
    return images, labels


def test_the_article_mlp_takes_uint8_and_scales_inside():
    model = article_mlp()
    assert model.input.dtype == "uint8" and model.count_params() == 784 * 512 + 512 + 512 * 10 + 10
    assert model.loss == "sparse_categorical_crossentropy" and model.layers[-1].dtype_policy.compute_dtype == "float32"
    x = np.full((2, 28, 28), 255, np.uint8)
    float_model = article_mlp(uint8_input=False)
    float_model.set_weights(model.get_weights())
    assert np.allclose(model.predict(x, verbose=0), float_model.predict(x / 255.0, verbose=0), atol=1e-6)


def test_shuffled_read_split_gives_every_record_once_per_epoch_in_a_new_order(tmp_path):
    _, labels = write_digits(tmp_path)
    ds = read_split(tmp_path, "train", 64, parallel_reads=4, shuffle_buffer=100, seed=None)
    assert int(ds.cardinality()) == 8 and ds.element_spec[0].dtype.name == "uint8"
    epochs = [np.concatenate([y.numpy() for _, y in ds]) for _ in range(2)]
    assert all(np.array_equal(np.sort(e), np.sort(labels)) for e in epochs)
    assert not np.array_equal(epochs[0], epochs[1])


def test_the_lesson_pipeline_on_plain_files_reads_what_read_split_reads(tmp_path):
    """read_split's shuffled read is notebook 04's make_train_ds with the checks around it: same records, batches
    and element spec, though each is written once (plumbing cannot import lesson code)."""
    write_digits(tmp_path, n=500)
    shards = T.readable_shards(tmp_path, "train")
    by_hand = make_train_ds(shards.files, shards.counts, 64, parse_batch, buffer=100)
    packaged = read_split(tmp_path, "train", 64, parallel_reads=4, shuffle_buffer=100)
    assert by_hand.element_spec == packaged.element_spec and len(by_hand) == len(packaged) == 8

    def records(ds):
        return sorted((int(y), x.tobytes()) for xs, ys in ds.as_numpy_iterator() for x, y in zip(xs, ys))

    assert records(by_hand) == records(packaged) and len(records(by_hand)) == 500


def test_verify_names_a_shard_whose_bytes_changed(tmp_path):
    write_digits(tmp_path)
    manifest = T.read_manifest(tmp_path, "train")
    path = tmp_path / manifest.shards[2].file
    data = bytearray(path.read_bytes())
    data[-20] ^= 0xFF  # deep in the last record: the first-record check cannot see it
    path.write_bytes(bytes(data))
    read_split(tmp_path, "train", 64)  # size and first record are fine
    with pytest.raises(T.ShardError, match=rf"{re.escape(str(path))}: .*checksum"):
        read_split(tmp_path, "train", 64, verify=True)


TRAINER = textwrap.dedent("""
    import json, sys, time
    from pathlib import Path
    import keras
    from helpers.lessons.tfdata_mnist import article_mlp
    from helpers.storage.tfrecord import read_split

    shards, backup, log, marker, hang = sys.argv[1], sys.argv[2], Path(sys.argv[3]), Path(sys.argv[4]), sys.argv[5] == "hang"

    class Log(keras.callbacks.Callback):
        def on_epoch_begin(self, epoch, logs=None):
            with log.open("a") as f:
                f.write(json.dumps({"began": epoch}) + "\\n")
            if hang and epoch == 2:
                marker.touch()           # in the middle of the third epoch: wait here to be killed
                time.sleep(600)

    keras.utils.set_random_seed(0)
    model = article_mlp()
    history = model.fit(read_split(shards, "train", 64, shuffle_buffer=128), epochs=4, verbose=0,
                        callbacks=[keras.callbacks.BackupAndRestore(backup), Log()])
    with log.open("a") as f:
        f.write(json.dumps({"finished": len(history.epoch), "epochs": history.epoch}) + "\\n")
""")


def test_training_killed_mid_epoch_resumes_from_its_last_completed_epoch(tmp_path):
    write_digits(tmp_path / "shards")
    script, log, marker = tmp_path / "train.py", tmp_path / "log.jsonl", tmp_path / "marker"
    script.write_text(TRAINER)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TF_CPP_MIN_LOG_LEVEL": "3"}
    args = [sys.executable, str(script), str(tmp_path / "shards"), str(tmp_path / "backup"), str(log), str(marker)]
    run = subprocess.Popen(args + ["hang"], env=env)
    deadline = time.monotonic() + 180
    while not marker.exists():
        assert run.poll() is None and time.monotonic() < deadline, "training never reached its third epoch"
        time.sleep(0.1)
    run.send_signal(signal.SIGKILL)
    run.wait()
    subprocess.run(args + ["no-hang"], env=env, check=True, timeout=180)
    events = [json.loads(line) for line in log.read_text().splitlines()]
    began = [e["began"] for e in events if "began" in e]
    assert began == [0, 1, 2, 2, 3], began  # killed in epoch 2; the restart began at epoch 2, not 0
    assert events[-1] == {"finished": 2, "epochs": [2, 3]}  # and ended after epoch 3: 4 epochs in all
