"""Files converted to record shards by several processes at once, each writing its own shards of one split.

`ConversionProcesses(makers, processes=n)` starts n Python processes together; each imports TensorFlow and the record
makers once, then waits for work (`start_up` says how long that took). `convert(files, labels, out, split,
num_shards)` gives process p the shards p, p + n, p + 2n, ... of the split, for every kind of record, and waits for
all of them. Each process writes with notebook 02's `write_shards(..., shards=[i])`, which makes that safe:

- a lock file per shard (`.train-00003.lock`), held while the shard is written: two processes given one shard by
  mistake cannot both write it (the second stops with an error naming the holder);
- one manifest for the folder, each finished shard added under the manifest's own lock after reading it again, so
  that no process overwrites another's entries; whichever adds a split's last shard marks it complete;
- a process killed half-way leaves its half shard under a temporary name: the same call again checks the whole
  shards (their checksums, and the records encoded again) and writes the rest.

A record maker is named, never passed as code: "helpers.<module>:<function>" and JSON keyword arguments (the rule of
`helpers.measure.peak_memory`), called as `function(path, label, **kwargs)`; it returns the record's serialized bytes.
Every label is checked (`helpers.storage.labels`) before the first byte is written. (This module launches lesson code
in processes, so it lives with the other launchers in helpers/scale, above the lessons.)

    makers = {"resized": ("helpers.lessons.capstone_photos:resized_record", {"size": 96})}
    with ConversionProcesses(makers, processes=2) as processes:
        processes.convert(paths, labels, "data/photos-records", "train", 8, image_shape=(96, 96, 3))

`records_per_second(paths, labels, kind, using=k)` converts again into a scratch folder, which it removes, with k of
the processes: a rate past the processes' start-up, by which one process and several compare. `cores_used[kind, k]`
keeps, call by call, the CPU seconds the k processes spent per second of that conversion: several processes can only
be faster where the machine gives them the cores (a busy shared machine may not).

Introduced in notebooks/07_capstone_photos.ipynb.
"""
from __future__ import annotations

import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from pathlib import Path

from helpers.measure.peak_memory import check_function_name, load_function
from helpers.setup.processes import child_environment, exit_with_parent, skip_unused_imports
from helpers.storage.labels import class_labels

REPLY = "CONVERTED "   # the prefix of a child's JSON replies on its standard output


def files_fingerprint(paths: list) -> str:
    """A hash of the files' names and sizes, kept in the manifest: a conversion resumed on a folder that changed
    meanwhile is refused instead of mixing old and new records."""
    names_and_sizes = json.dumps([[str(p), os.stat(p).st_size] for p in paths])
    return hashlib.sha256(names_and_sizes.encode()).hexdigest()[:16]


class ConversionProcesses:
    """`processes` child processes that convert files to record shards when asked (see the module's docstring).

    `makers`: {kind: (name, kwargs)}; each kind is written to its own folder, `out/kind`."""

    def __init__(self, makers: dict[str, tuple[str, dict]], processes: int | None = None) -> None:
        if not makers:
            raise ValueError("ConversionProcesses needs at least one record maker")
        for kind, (name, kwargs) in makers.items():
            check_function_name(name)
            json.dumps(kwargs)   # a TypeError here, not in the child
        self.makers = {kind: [name, kwargs] for kind, (name, kwargs) in makers.items()}
        count = processes or os.cpu_count() or 1
        self._begun = time.perf_counter()
        self.start_up: float | None = None   # seconds until every process was ready
        self.cores_used: dict[tuple[str, int], list[float]] = {}   # CPU seconds per second, timing by timing
        self._cpu = 0.0   # the CPU seconds of the last conversion, summed over its processes
        self._children = [subprocess.Popen(
            [sys.executable, "-m", "helpers.scale.parallel_conversion", json.dumps(self.makers)], text=True,
            stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=child_environment(gpu=False))
            for _ in range(count)]
        self._errors = [deque(maxlen=30) for _ in self._children]
        for child, errors in zip(self._children, self._errors):
            threading.Thread(target=lambda c=child, e=errors: e.extend(line.rstrip() for line in c.stderr),
                             daemon=True, name="conversion-stderr").start()

    @property
    def processes(self) -> int:
        return len(self._children)

    def wait_ready(self) -> float:
        """Wait until every process has started Python and TensorFlow; the seconds that took since they started."""
        if self.start_up is None:
            for index in range(self.processes):
                self._answer(index)
            self.start_up = time.perf_counter() - self._begun
        return self.start_up

    def _answer(self, index: int) -> dict:
        child = self._children[index]
        for line in child.stdout:
            if line.startswith(REPLY):
                reply = json.loads(line[len(REPLY):])
                if "error" in reply:
                    raise RuntimeError(f"conversion process {index}: {reply['error']}")
                return reply
        child.wait()
        raise RuntimeError(f"conversion process {index} exited with code {child.returncode}; its last error "
                           f"output:\n" + "\n".join(self._errors[index]))

    def convert(self, paths: list, labels, out: str | Path, split: str, num_shards: int, *,
                image_shape: tuple[int, ...], shards: list[int] | None = None, kinds: list[str] | None = None,
                using: int | None = None, num_classes: int | None = None) -> dict[str, float]:
        """Write `shards` (all by default) of `split` of every kind in `kinds` (all by default), from `paths` and
        their `labels` (the whole split's, in order), spread over `using` processes (all by default), and wait for
        them. `image_shape`: what the records' parser makes of one image (uint8), kept in the manifest. Returns
        the seconds each kind took, summed over the processes."""
        using = using or self.processes
        if not 1 <= using <= self.processes:
            raise ValueError(f"using={using}: there are {self.processes} processes")
        if not paths:
            raise ValueError(f"no files to convert into split {split!r} of {out}: is their folder empty?")
        checked = class_labels(labels, f"the labels of split {split!r} for {out}", num_classes)
        if len(checked) != len(paths):
            raise ValueError(f"{len(paths)} files but {len(checked)} labels for split {split!r} of {out}")
        kinds = list(kinds or self.makers)
        unknown = [kind for kind in kinds if kind not in self.makers]
        if unknown:
            raise ValueError(f"no record maker for {unknown}; the makers are {list(self.makers)}")
        shards = list(range(num_shards) if shards is None else shards)
        self.wait_ready()   # every argument checked before this: a bad one needs no process
        job = {"paths": [str(p) for p in paths], "labels": [int(label) for label in checked], "out": str(out),
               "split": split, "num_shards": num_shards, "kinds": kinds, "image_shape": list(image_shape),
               "fingerprint": files_fingerprint(paths)}
        asked = [index for index in range(using) if shards[index::using]]
        for index in asked:   # every process starts before any is waited for
            self._children[index].stdin.write(json.dumps({**job, "shards": shards[index::using]}) + "\n")
            self._children[index].stdin.flush()
        seconds, failures, self._cpu = dict.fromkeys(kinds, 0.0), [], 0.0
        for index in asked:   # every answer read, so that none is left for the next call
            try:
                answer = self._answer(index)
            except RuntimeError as failure:
                failures.append(failure)
                continue
            for kind, spent in answer["seconds"].items():
                seconds[kind] += spent
            self._cpu += answer["cpu"]
        if failures:
            raise failures[0]
        return seconds

    def records_per_second(self, paths: list, labels, kind: str, *, using: int, num_shards: int,
                           image_shape: tuple[int, ...]) -> float:
        """Records per second converting `paths` to `num_shards` shards of `kind` with `using` processes, into a
        scratch folder made and removed here: from the jobs sent to the last process done."""
        scratch = Path(tempfile.mkdtemp(prefix="conversion-timing-"))
        try:
            started = time.perf_counter()
            self.convert(paths, labels, scratch, "timing", num_shards, image_shape=image_shape, kinds=[kind],
                         using=using)
            seconds = time.perf_counter() - started
            self.cores_used.setdefault((kind, using), []).append(self._cpu / seconds)
            return len(paths) / seconds
        finally:
            shutil.rmtree(scratch, ignore_errors=True)

    def close(self) -> None:
        for child in self._children:
            if child.poll() is None:
                try:
                    child.stdin.close()   # the child's loop ends at the end of its input
                    child.wait(10)
                except (OSError, subprocess.TimeoutExpired):
                    child.kill()
                    child.wait()
            child.stdout.close()

    def __enter__(self) -> "ConversionProcesses":
        return self

    def __exit__(self, *exc) -> None:
        self.close()


def _reply(doc: dict) -> None:
    sys.stdout.write(REPLY + json.dumps(doc) + "\n")
    sys.stdout.flush()


def _convert(job: dict, makers: dict) -> dict:
    """One job in the child: each of its shards, every kind in turn, written with `write_shards`."""
    from helpers.storage.tfrecord import FeatureSpec, write_shards
    from helpers.storage.tfrecord.write import shard_range

    paths, labels, spec = job["paths"], job["labels"], FeatureSpec(tuple(job["image_shape"]), "uint8")
    seconds, cpu = dict.fromkeys(job["kinds"], 0.0), time.process_time()
    for index in job["shards"]:
        positions = shard_range(len(paths), job["num_shards"], index)   # every process cuts the split alike
        for kind in job["kinds"]:
            make, kwargs = makers[kind]
            started = time.perf_counter()
            write_shards((make(paths[p], labels[p], **kwargs) for p in positions), Path(job["out"]) / kind,
                         job["split"], job["num_shards"], total=len(paths), shards=[index], encoding="serialized",
                         spec=spec, fingerprint=job["fingerprint"], progress=False)
            seconds[kind] += time.perf_counter() - started
    return {"seconds": seconds, "cpu": time.process_time() - cpu}


def _serve(makers: dict) -> None:
    """The child: start TensorFlow and the makers, say so, then convert each job read from stdin until it ends."""
    exit_with_parent()
    skip_unused_imports()
    import tensorflow as tf   # started here, before the first job, so that jobs time conversion only

    # One thread per process: the processes are the parallelism. TensorFlow's own pools (a thread per core each)
    # would make every process's small ops wait for threads the other processes are using.
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)

    loaded = {kind: (load_function(name), kwargs) for kind, (name, kwargs) in makers.items()}
    _reply({"ready": True})
    for line in sys.stdin:
        try:
            _reply(_convert(json.loads(line), loaded))
        except Exception as error:   # the parent raises it, with this text
            _reply({"error": f"{type(error).__name__}: {error}"})


if __name__ == "__main__":
    _serve(json.loads(sys.argv[1]))
