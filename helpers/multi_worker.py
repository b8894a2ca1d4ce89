"""Data-parallel training over several worker processes with `MultiWorkerMirroredStrategy`.

Every worker runs this same program; `TF_CONFIG` tells each one the cluster's addresses and
which worker it is. Each reads its own files of the training shards (sharding by file), the
workers add up their gradients after every step (all-reduce over gRPC), and so all of them end
with the same weights. On a cluster the addresses are other machines; here they are ports on
localhost, chosen free at run time. The workers' gRPC servers still listen on every network
interface, without authentication (TensorFlow offers no bind address): `train_on_workers` prints
one line saying so.

    train_on_workers(shard_dir, "train", workers=2, epochs=1)   # starts and waits for the workers
    TF_CONFIG='{...}' python -m helpers.multi_worker DIR train 1 256   # what each runs; prints its report as JSON

Introduced in notebooks/06_scaling_out.ipynb.
"""
from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers.processes import child_environment, exit_with_parent, exposure_warning, free_port


@dataclass(frozen=True)
class WorkerResult:
    """What one worker reports after training.

    Introduced in notebooks/06_scaling_out.ipynb.
    """

    index: int
    replicas: int            # replicas in sync across the whole cluster
    steps: int               # training steps this worker ran
    samples: int             # samples this worker read
    loss: list[float]        # per epoch
    weights_sha256: str      # a digest of the final weights: equal on every worker


def tf_config(addresses: list[str], index: int) -> str:
    """The `TF_CONFIG` of worker `index` in a cluster of workers at `addresses`.

    Introduced in notebooks/06_scaling_out.ipynb.

    >>> tf_config(["localhost:1", "localhost:2"], 1)
    '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 1}}'
    """
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


def train_on_workers(directory: str | Path, split: str, workers: int = 2, epochs: int = 1,
                     global_batch: int = 256, timeout: float = 300) -> list[WorkerResult]:
    """Start `workers` processes that train the article's MLP together, wait for them, return their reports.

    A worker that fails makes this raise with its last lines of output; every worker is
    stopped before this returns or raises.
    Introduced in notebooks/06_scaling_out.ipynb.
    """
    addresses = [f"localhost:{free_port()}" for _ in range(workers)]
    print(exposure_warning(f"the cluster of {workers} training workers",
                           [int(address.rsplit(":", 1)[1]) for address in addresses]))
    processes = []
    try:
        for index in range(workers):
            env = child_environment({"TF_CONFIG": tf_config(addresses, index)})
            command = [sys.executable, "-m", "helpers.multi_worker", str(directory), split, str(epochs),
                       str(global_batch)]
            processes.append(subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                              text=True))
        results = []
        for index, process in enumerate(processes):
            output, errors = process.communicate(timeout=timeout)
            lines = output.strip().splitlines()
            if process.returncode != 0 or not lines:
                tail = "\n".join(errors.strip().splitlines()[-8:])
                raise RuntimeError(f"worker {index} failed (exit {process.returncode}):\n{tail}")
            results.append(WorkerResult(**json.loads(lines[-1])))  # each worker prints its report last
        return results
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
                process.wait()


def _train(directory: str, split: str, epochs: int, global_batch: int) -> dict:
    import keras
    import numpy as np
    import tensorflow as tf

    from helpers.mlp import article_mlp
    from helpers.tfrecord import read_manifest
    from helpers.tfrecord.format import parse_batch_fn

    strategy = tf.distribute.MultiWorkerMirroredStrategy()
    workers = strategy.cluster_resolver.cluster_spec().num_tasks("worker")
    manifest = read_manifest(directory, split)
    if len(manifest.shards) < workers:
        raise ValueError(f"{len(manifest.shards)} shards cannot be shared by file among {workers} workers: "
                         f"write at least one shard per worker")
    # Every worker must run the same number of steps (each step's all-reduce waits for all of them), so an
    # epoch is what the smallest share of files holds; files are as equal as write_shards can make them.
    per_worker_batch = global_batch // workers
    steps = min(s.records for s in manifest.shards) * (len(manifest.shards) // workers) // per_worker_batch

    files = tf.data.Dataset.from_tensor_slices(manifest.files(directory))
    dataset = (files.shuffle(len(manifest.shards), seed=0)   # the same seed on every worker: the same order
               .interleave(tf.data.TFRecordDataset, cycle_length=4, num_parallel_calls=4, deterministic=False)
               .shuffle(10_000).repeat()
               .batch(global_batch)   # the global batch: split among the workers' replicas when distributed
               .map(parse_batch_fn(manifest.encoding, manifest.spec), num_parallel_calls=tf.data.AUTOTUNE)
               .prefetch(tf.data.AUTOTUNE))
    options = tf.data.Options()
    # Each worker keeps every N-th file of the list (worker i of N: files i, i + N, ...) and reads only those.
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.FILE
    batches = iter(strategy.experimental_distribute_dataset(dataset.with_options(options)))

    with strategy.scope():  # variables mirrored on every worker
        model = article_mlp()
        optimizer = keras.optimizers.RMSprop()
    loss_of = keras.losses.SparseCategoricalCrossentropy(reduction=None)

    # Keras 3's fit() does not run under MultiWorkerMirroredStrategy (keras-team/keras#20585), so the
    # workers run tf.distribute's own training loop: each replica computes its part of the global batch,
    # and apply_gradients all-reduces the gradients across workers before updating.
    @tf.function
    def train_step(batch):
        def replica_step(images, labels):
            with tf.GradientTape() as tape:
                loss = tf.nn.compute_average_loss(loss_of(labels, model(images, training=True)),
                                                  global_batch_size=global_batch)
            optimizer.apply_gradients(zip(tape.gradient(loss, model.trainable_variables), model.trainable_variables))
            return loss
        return strategy.reduce("SUM", strategy.run(replica_step, args=batch), axis=None)

    epoch_losses = []
    for _ in range(epochs):
        losses = [float(train_step(next(batches))) for _ in range(steps)]
        epoch_losses.append(float(np.mean(losses)))
    weights = np.concatenate([w.ravel() for w in model.get_weights()])
    return {"index": strategy.cluster_resolver.task_id, "replicas": strategy.num_replicas_in_sync,
            "steps": steps * epochs, "samples": steps * epochs * per_worker_batch, "loss": epoch_losses,
            "weights_sha256": hashlib.sha256(weights.tobytes()).hexdigest()}


if __name__ == "__main__":
    exit_with_parent()
    directory_arg, split_arg, epochs_arg, batch_arg = sys.argv[1:5]
    print(json.dumps(_train(directory_arg, split_arg, int(epochs_arg), int(batch_arg))))
