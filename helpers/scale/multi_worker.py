"""Launching notebook 06's `MultiWorkerMirroredStrategy` workers on localhost: each is
`python -m helpers.scale.multi_worker DIR SPLIT EPOCHS BATCH` with its own `TF_CONFIG`; it runs `train_worker`
(`helpers.lessons.scaling_out`) on the split's files, with the manifest's parser and notebook 04's MLP, and
prints its report as one line of JSON. `train_on_workers` checks the shards (`readable_shards`) before it starts
any worker; a worker reads only the manifest before `train_worker` runs, since the strategy must be made before
TensorFlow runs its first op.
"""
from __future__ import annotations

import json
import signal
import subprocess
import sys
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from helpers.setup.processes import (child_environment, exit_with_parent, exposure_warning, free_port,
                                     skip_unused_imports)


@dataclass(frozen=True)
class WorkerResult:
    """What one worker reports after training."""

    index: int
    replicas: int            # replicas in sync across the whole cluster
    steps: int               # training steps this worker ran
    samples: int             # samples this worker read
    loss: list[float]        # per epoch
    weights_sha256: str      # a digest of the final weights: equal on every worker


def tf_config(addresses: list[str], index: int) -> str:
    """The `TF_CONFIG` of worker `index` in a cluster of workers at `addresses`.

    >>> tf_config(["localhost:1", "localhost:2"], 1)
    '{"cluster": {"worker": ["localhost:1", "localhost:2"]}, "task": {"type": "worker", "index": 1}}'
    """
    return json.dumps({"cluster": {"worker": addresses}, "task": {"type": "worker", "index": index}})


BIND_FAILURE = "Could not start gRPC server"   # what a worker says when another process took its port first
BIND_ATTEMPTS = 3


def train_on_workers(directory: str | Path, split: str, workers: int = 2, epochs: int = 1,
                     global_batch: int = 256, timeout: float = 300) -> list[WorkerResult]:
    """Start `workers` processes (on free ports, saying what they expose) that run `train_worker` together, and
    return their reports. A failed worker raises with its last lines of output; every worker is stopped before
    this returns or raises. Every worker's `TF_CONFIG` names every port, so ports are chosen before any worker
    binds one: when another process takes one in between, the cluster is started again on new ports. A missing,
    truncated or mis-described shard is a `ShardError` naming the file, raised before any worker starts."""
    from helpers.storage.tfrecord import readable_shards

    readable_shards(directory, split)
    for attempt in range(1, BIND_ATTEMPTS + 1):
        addresses = [f"localhost:{free_port()}" for _ in range(workers)]
        print(exposure_warning(f"the cluster of {workers} training workers",
                               [int(address.rsplit(":", 1)[1]) for address in addresses],
                               stops="when its workers have trained, before this call returns"))
        commands = [[sys.executable, "-m", "helpers.scale.multi_worker", str(directory), split, str(epochs),
                     str(global_batch)]] * workers
        envs = [child_environment({"TF_CONFIG": tf_config(addresses, index)}, gpu=False)   # CPU workers: one GPU
                for index in range(workers)]                                               # cannot host two
        finished = run_together(commands, envs, timeout)
        failed = [(index, run) for index, run in enumerate(finished)
                  if run.returncode != 0 or not run.stdout.strip()]
        if failed and attempt < BIND_ATTEMPTS and any(BIND_FAILURE in run.stderr for _, run in failed):
            print("a worker could not bind its port (another process took it): starting again on new ports")
            continue
        if failed:   # the first that failed by itself, not one stopped because it waited for that one
            index, run = min(failed, key=lambda item: item[1].returncode == -signal.SIGKILL)
            tail = "\n".join(run.stderr.strip().splitlines()[-8:])
            raise RuntimeError(f"worker {index} failed (exit {run.returncode}):\n{tail}")
        return [WorkerResult(**json.loads(run.stdout.strip().splitlines()[-1]))   # each prints its report last
                for run in finished]
    raise AssertionError("unreachable")


def run_together(commands: list[list[str]], envs: list[dict], timeout: float) -> list[subprocess.CompletedProcess]:
    """Run the commands at once and read every one's output while they run (a thread per pipe), so that no
    worker stalls on a full pipe while another is waited for: workers of one collective wait for each other.
    Returns when all have exited, or when one has failed (the others, waiting for it, are stopped); raises
    `RuntimeError` at `timeout`. Every process is stopped before this returns or raises."""
    processes, outputs, readers = [], [], []

    def read(pipe, into: list) -> None:
        for line in pipe:
            into.append(line)
            if len(into) > 2000:          # a chatty worker: keep its last lines, not all of them
                del into[:1000]

    try:
        for command, env in zip(commands, envs):
            process = subprocess.Popen(command, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            processes.append(process)
            outputs.append(([], []))
            for pipe, into in zip((process.stdout, process.stderr), outputs[-1]):
                readers.append(threading.Thread(target=read, args=(pipe, into), daemon=True))
                readers[-1].start()
        deadline = time.monotonic() + timeout
        while None in (codes := [p.poll() for p in processes]):
            if any(code not in (None, 0) for code in codes):
                break                     # the others would wait for it until the timeout
            if time.monotonic() > deadline:
                waiting = [i for i, p in enumerate(processes) if p.poll() is None]
                raise RuntimeError(f"worker(s) {waiting} did not finish within {timeout:.0f} s; their last output:\n"
                                   + "\n".join("".join(outputs[i][1][-5:]) for i in waiting))
            time.sleep(0.05)
    finally:
        for process in processes:
            if process.poll() is None:
                process.kill()
            process.wait()
        for reader in readers:
            reader.join(5)
        for process in processes:
            process.stdout.close()
            process.stderr.close()
    return [subprocess.CompletedProcess(command, p.returncode, "".join(out), "".join(err))
            for command, p, (out, err) in zip(commands, processes, outputs)]


if __name__ == "__main__":
    exit_with_parent()
    skip_unused_imports()
    from helpers.lessons.scaling_out import train_worker   # the program notebook 06 writes
    from helpers.lessons.tfdata_mnist import article_mlp
    from helpers.storage.tfrecord import parse_batch_fn, read_manifest

    directory_arg, split_arg, epochs_arg, batch_arg = sys.argv[1:5]
    # The manifest only (JSON, no TensorFlow op): the shards were checked by train_on_workers, and
    # train_worker's strategy must be made before TensorFlow runs its first op.
    manifest = read_manifest(directory_arg, split_arg)
    parse = parse_batch_fn(manifest.encoding, manifest.spec, f"split {split_arg!r} of {directory_arg}")
    print(json.dumps(train_worker(manifest.files(directory_arg), [s.records for s in manifest.shards], parse,
                                  article_mlp, int(epochs_arg), int(batch_arg))))
