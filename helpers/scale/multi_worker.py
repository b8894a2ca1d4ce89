"""Launching notebook 06's `MultiWorkerMirroredStrategy` workers on localhost: each is
`python -m helpers.scale.multi_worker DIR SPLIT EPOCHS BATCH` with its own `TF_CONFIG`, runs `train_worker`
(`helpers.lessons.scaling_out`) and prints its report as one line of JSON.
"""
from __future__ import annotations

import json
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from helpers.setup.processes import child_environment, exit_with_parent, exposure_warning, free_port


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


def train_on_workers(directory: str | Path, split: str, workers: int = 2, epochs: int = 1,
                     global_batch: int = 256, timeout: float = 300) -> list[WorkerResult]:
    """Start `workers` processes (on free ports, saying what they expose) that run `train_worker` together, and
    return their reports. A failed worker raises with its last lines of output; every worker is stopped before
    this returns or raises."""
    addresses = [f"localhost:{free_port()}" for _ in range(workers)]
    print(exposure_warning(f"the cluster of {workers} training workers",
                           [int(address.rsplit(":", 1)[1]) for address in addresses]))
    processes = []
    try:
        for index in range(workers):
            env = child_environment({"TF_CONFIG": tf_config(addresses, index)}, gpu=False)   # CPU workers: one GPU cannot host two
            command = [sys.executable, "-m", "helpers.scale.multi_worker", str(directory), split, str(epochs),
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


if __name__ == "__main__":
    exit_with_parent()
    from helpers.lessons.scaling_out import train_worker   # the program notebook 06 writes

    directory_arg, split_arg, epochs_arg, batch_arg = sys.argv[1:5]
    print(json.dumps(train_worker(directory_arg, split_arg, int(epochs_arg), int(batch_arg))))
