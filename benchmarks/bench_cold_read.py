"""Reading block records from the disk, not from the page cache: does the pipeline read as fast as the disk gives,
and could the disk feed the reference GPU? (issue 44)

Every other speed figure of the series reads files the page cache holds. Data larger than RAM cannot sit there:
each epoch comes from the device again. Here every file is dropped from the page cache (`fsync`, then
`posix_fadvise(POSIX_FADV_DONTNEED)`: `helpers.measure.cold_read`) before each side of each round, and `mincore`
checks that the drop left nothing cached.

Sides, in one alternation per dataset (`helpers.measure.alternate`):
- raw: the same files read one after another in reads of 8 MiB into one buffer, nothing decoded
  (`raw_read_marks`): the device's rate for these files, which no reader of them beats;
- pipeline: notebook 05's `read_blocks` with the change proposed for it, reads of 1 MiB (`READ_SIZE`) instead of
  256 KiB (`read_from_disk`), batches handed over as `fit` gets them, no model;
- lesson: notebook 05's `read_blocks` as it is today, for comparison.

The steps behind the proposal (`python -m benchmarks.run --only cold_steps`): 1 MiB reads cut the CPU a cold read
costs (about 1.25 -> 0.9-1.05 CPU s/GB); keeping blocks as the pipeline's elements up to the batch (one
`parse_example` call per window, `bench_cold_steps.read_blocks_batched`) gave no steady gain; a
`posix_fadvise(WILLNEED)` hint per file, made in a `tf.py_function`, helped a little but can hang the process at
exit (an iterator alive when Python shuts down waits for a hint that waits for the interpreter lock: 2 exits in 5
here), which a lesson cannot ship; raw fixed-length blocks (no CRC, no protocol buffer) cost a third less CPU.

Both datasets are block records of images drawn at random (uniform noise): no storage layer between the VM and
the device can read them faster by compressing or de-duplicating them, and nothing measured here depends on the
pixels. The MLP's are MNIST-shaped (28x28 uint8, batch 1024 as the MLP's GPU keys), the autoencoder's
CIFAR-shaped (32x32x3 uint8, batch 256; uint8 batches, as a model that casts its input itself takes them).

Keys (each round's steady MB/s: over the middle half of the epoch, the raw read's as the pipelines', once a
pipeline's buffers are full and before they drain (`steady_rate`); an epoch of data larger than RAM runs at that
rate, its start-up a rounding error. Each side's start-up and whole-epoch MB/s are on the detail line, as are the
CPU seconds each side spent per GB over the whole epoch, every thread's, user and system: on two shared cores, what
reading costs in CPU decides how fast a pipeline can read, and it is the steadier measure on a busy machine):
- cold_pipeline_vs_raw_read_mlp, cold_pipeline_vs_raw_read_ae: the pipeline / the raw read (goal ≥ 0.90)
- cold_lesson_vs_raw_read_mlp, cold_lesson_vs_raw_read_ae: notebook 05's read_blocks as it is / the raw read
- cold_pipeline_vs_gpu_bs1024 (MLP), cold_pipeline_vs_gpu_bs256 (autoencoder): the pipeline's samples/s read cold
  / the samples/s the reference H200 trains (`helpers.measure.gpu_reference`); the detail line gives the disk's
  MB/s and the GPU's appetite in MB/s (its samples/s times the bytes a sample takes in these files).

"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import numpy as np
import tensorflow as tf

from benchmarks.run import Result
from helpers.lessons.pipeline_profiling import BLOCK_SIZE, read_blocks, write_blocks
from helpers.measure import Epoch, Rounds, alternate, batch_size_of, steady_epoch
from helpers.measure.cold_read import cached_fraction, can_drop_page_cache, drop_from_page_cache, raw_read_marks, read_raw
from helpers.measure.gpu_reference import gpu_appetite
from helpers.storage.blocks import open_block_split, read_block_split, write_block_split

GOAL = "≥ 0.90"
REPLY = "COLD-READ "   # the prefix of the measuring child's one line of JSON
MLP_SHAPE, AE_SHAPE = (28, 28), (32, 32, 3)
MLP_BATCH, AE_BATCH = 1024, 256
FILE_MIB = 64          # about this many MiB per file of block records
MIN_FILES = 8          # and at least this many files (a quick run's small splits too: 4 are read at once)
LEFT_CACHED = 0.02     # a drop that leaves more than this share of the files cached did not work
STEADY = (0.25, 0.75)  # the stretch of an epoch (shares of its samples) whose rate is its steady rate


READ_SIZE = 2**20   # notebook 05's read_blocks reads 1 MiB at a time: bench_cold_steps


def read_from_disk(directory, split, batch_size=256, *, verify=False, **options):
    """Notebook 05's `read_blocks` reading `READ_SIZE` bytes at a time (its default; `read_size` given overrides it)
    over a block split, or over a list of splits of one image spec and block size read as one (data written
    in parts, one `write_block_split` call each), their indexes checked first."""
    splits = [split] if isinstance(split, str) else list(split)
    counts = {name: options[name] for name in ("mix_blocks", "shuffle_blocks", "parallel_reads") if name in options}
    parts = [open_block_split(directory, name, verify=verify, batch_size=batch_size, **counts) for name in splits]
    if any((p.tag, p.block_size) != (parts[0].tag, parts[0].block_size) for p in parts):
        raise ValueError(f"splits {splits} of {directory} differ in image spec or block size: read them apart")
    return read_blocks([f for p in parts for f in p.files], batch_size, count=sum(p.total_records for p in parts),
                       **{"read_size": READ_SIZE, **options})


def mix_blocks_for(batch_size: int, block_size: int = BLOCK_SIZE) -> int:
    """Blocks mixed at a time, as the MLP's recommended pipeline chooses (`bench_mnist.recommended`): one batch where
    a batch holds 4 blocks or more, else 8."""
    per_batch = batch_size // block_size
    return per_batch if per_batch >= 4 and batch_size % block_size == 0 else 8


def random_images(n: int, shape: tuple, seed: int) -> tuple[np.ndarray, np.ndarray]:
    """`n` images of uniform noise and their labels (0-9): bytes no storage layer can compress or de-duplicate."""
    rng = np.random.default_rng(seed)
    return rng.integers(0, 256, (n, *shape), dtype=np.uint8), rng.integers(0, 10, n, dtype=np.uint8)


def write_cold_split(directory: Path, n: int, shape: tuple, seed: int, file_mib: float = FILE_MIB) -> list[Path]:
    """`n` random images as block records in files of about `file_mib` MiB; the files."""
    images, labels = random_images(n, shape, seed)
    shards = max(MIN_FILES, round(images.nbytes / 2**20 / file_mib))
    write_block_split(write_blocks, images, labels, directory, "train", num_shards=shards)
    return open_block_split(directory, "train").files


def steady_rate(marks: list[tuple[float, int]], stretch: tuple[float, float] = STEADY) -> float:
    """Samples (or bytes) per second between the marks `(time, done so far)` that open and close `stretch` of the
    epoch: the rate once every buffer of a pipeline is full and before they drain at the end (the first batch comes
    after the shuffle buffer filled, the last ones from buffers that no longer fill), which an epoch's whole rate
    (its start-up in) understates and its rate past the first batch (the buffers' fill out) overstates.

    >>> steady_rate([(1.0, 10), (2.0, 30), (3.0, 50), (4.0, 70), (5.0, 90), (5.5, 100)])   # from 30 to 70
    20.0
    """
    total = marks[-1][1]
    opening = next(m for m in marks if m[1] >= stretch[0] * total)
    closing = [m for m in marks if m[1] <= stretch[1] * total][-1]
    if closing[0] <= opening[0]:
        raise ValueError(f"an epoch of {len(marks)} marks has none between {stretch[0]:.0%} and {stretch[1]:.0%} of "
                         f"it: too few batches to tell a steady rate")
    return (closing[1] - opening[1]) / (closing[0] - opening[0])


def timed_epoch(dataset: tf.data.Dataset) -> tuple[Epoch, float]:
    """One epoch of `dataset`, every batch produced as `fit` gets it (as `pipeline_epoch`): the `Epoch` and its
    `steady_rate` in samples per second."""
    start, done, marks = time.perf_counter(), 0, []
    for batch in dataset:
        done += batch_size_of(batch)
        marks.append((time.perf_counter(), done))
    return steady_epoch(start, marks), steady_rate(marks)


@dataclass
class ColdSides:
    """What one dataset's alternation measured: steady MB/s per side and round, every side's epochs (the raw read's
    in bytes), the drops, the CPU cost."""

    rounds: Rounds
    epochs: dict[str, list[Epoch]] = field(default_factory=dict)
    left_cached: list[float] = field(default_factory=list)   # the files' cached share after each drop
    cpu: dict[str, list[float]] = field(default_factory=dict)   # CPU seconds (every thread, user and system) per GB
    whole: dict[str, list[float]] = field(default_factory=dict)   # MB/s over the whole epoch, start-up included

    def mb_per_s(self, side: str) -> float:
        return self.rounds.samples(side).median / 1e6

    def cpu_per_gb(self, side: str) -> float:
        """The median CPU seconds the side spent per GB read, from the first round kept (the warm-up's left out)."""
        return float(np.median(self.cpu[side][1:] or self.cpu[side]))

    def whole_mb_per_s(self, side: str) -> float:
        return float(np.median(self.whole[side][1:] or self.whole[side]))

    def start_up_ms(self, side: str) -> float:
        return float(np.median([e.start_up for e in self.epochs[side]]) * 1e3)

    def to_json(self) -> dict:
        return {"values": self.rounds.values, "left_cached": self.left_cached, "cpu": self.cpu, "whole": self.whole,
                "epochs": {side: [[e.samples, e.seconds, e.start_up, e.first_samples] for e in epochs]
                           for side, epochs in self.epochs.items()}}

    @classmethod
    def from_json(cls, doc: dict) -> "ColdSides":
        return cls(Rounds(list(doc["values"]), doc["values"]),
                   {side: [Epoch(*e) for e in epochs] for side, epochs in doc["epochs"].items()},
                   doc["left_cached"], doc["cpu"], doc["whole"])


def cold_alternation(files: list[Path], pipelines: dict[str, Callable[[], tf.data.Dataset]],
                     bytes_per_sample: float | dict[str, float], rounds: int, cached: tuple[str, ...] = (),
                     files_of: dict[str, list[Path]] | None = None) -> ColdSides:
    """The raw read of `files` and each pipeline, every file dropped from the page cache before each, in alternating
    rounds after one warm-up round (it traces the pipelines); each side's value is its steady rate in bytes per
    second (`steady_rate`: the middle half of the epoch, for the raw read as for the pipelines). The pipelines named in `cached` read their files from the
    page cache instead (read once, untimed, just before): the reference a cold read's cost is told from.
    A pipeline may read other files than `files` (`files_of[name]`, `bytes_per_sample[name]`: the same images in
    another format); every side drops every file of the alternation."""
    measured = ColdSides(Rounds([]))
    files_of = files_of or {}
    everything = list(files) + [f for name in files_of for f in files_of[name]]

    def drop():
        drop_from_page_cache(everything)
        measured.left_cached.append(cached_fraction(everything))

    def cpu_seconds() -> float:   # every thread's, user and system (os.times ticks are 10 ms)
        return time.process_time()

    def raw() -> float:
        drop()
        cpu = cpu_seconds()
        start, marks = raw_read_marks(files)
        epoch = steady_epoch(start, marks)
        measured.cpu.setdefault("raw", []).append((cpu_seconds() - cpu) / epoch.samples * 1e9)
        measured.whole.setdefault("raw", []).append(epoch.rate / 1e6)
        measured.epochs.setdefault("raw", []).append(epoch)
        return steady_rate(marks)

    def pipeline(name: str, make: Callable[[], tf.data.Dataset]) -> Callable[[], float]:
        per_sample = bytes_per_sample[name] if isinstance(bytes_per_sample, dict) else bytes_per_sample

        def side() -> float:
            dataset = make()   # reads the first block: before the drop
            if name in cached:
                drop()
                read_raw(files_of.get(name, files))
            else:
                drop()
            cpu = cpu_seconds()
            epoch, rate = timed_epoch(dataset)
            measured.cpu.setdefault(name, []).append((cpu_seconds() - cpu) / (epoch.samples * per_sample) * 1e9)
            measured.whole.setdefault(name, []).append(epoch.rate * per_sample / 1e6)
            measured.epochs.setdefault(name, []).append(epoch)
            return rate * per_sample

        return side

    sides = {"raw": raw, **{name: pipeline(name, make) for name, make in pipelines.items()}}
    measured.rounds = alternate(sides, rounds=rounds, warmup=1)
    for name in sides:
        del measured.epochs[name][0]   # the warm-up round's
    return measured


def measure(quick: bool) -> list[dict]:
    """Both datasets' alternations, as JSON-ready documents (`cold_results` reads them)."""
    # About 1 GB a dataset in a full run: a second or less a side at this machine's cold rates.
    n_mlp, n_ae, rounds = (64_000, 16_000, 1) if quick else (1_300_000, 330_000, 6)
    workdir = Path(tempfile.mkdtemp(prefix="bench-cold-read-"))
    try:
        docs = []
        for model, shape, n, batch_size, seed in (("mlp", MLP_SHAPE, n_mlp, MLP_BATCH, 1),
                                                  ("ae", AE_SHAPE, n_ae, AE_BATCH, 2)):
            directory = workdir / model
            files = write_cold_split(directory, n, shape, seed)
            file_bytes = sum(f.stat().st_size for f in files)
            mix = mix_blocks_for(batch_size)
            measured = cold_alternation(files, {
                "pipeline": lambda: read_from_disk(directory, "train", batch_size, shuffle=True, mix_blocks=mix),
                "lesson": lambda: read_block_split(read_blocks, directory, "train", batch_size, shuffle=True,
                                                   mix_blocks=mix),
            }, file_bytes / n, rounds)
            docs.append({"model": model, "n": n, "n_files": len(files), "file_bytes": file_bytes,
                         "batch_size": batch_size, "load": os.getloadavg()[0], **measured.to_json()})
            shutil.rmtree(directory)
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
    return docs


def run(quick: bool) -> list[Result]:
    """The measurement runs in a fresh Python process: earlier modules of a run change this one in ways that change
    what a pipeline's bytes cost (a `from_generator` dataset, as Keras makes for a `PyDataset`, sets glibc's trim
    threshold for the whole process, TensorFlow's "memory patch", and with it every tensor of a block or more was
    a fresh mapping of zeroed pages: 1.05 against 0.77-0.81 CPU s/GB for the same pipeline reading from the page
    cache, measured here)."""
    if not can_drop_page_cache():
        print(f"cold reads need posix_fadvise, which {sys.platform} does not have (Linux does): skipped",
              file=sys.stderr)
        return []
    from helpers.setup.processes import child_environment

    command = [sys.executable, "-m", "benchmarks.bench_cold_read", "--child", "quick" if quick else "full"]
    out = subprocess.run(command, cwd=Path(__file__).resolve().parent.parent, env=child_environment(gpu=False),
                         capture_output=True, text=True, timeout=1800)
    replies = [line[len(REPLY):] for line in out.stdout.splitlines() if line.startswith(REPLY)]
    if out.returncode != 0 or not replies:
        raise RuntimeError(f"the cold-read child failed (exit {out.returncode}): {out.stderr.strip()[-2000:]}")
    return [result for doc in json.loads(replies[-1]) for result in cold_results(doc)]


def cold_results(doc: dict) -> list[Result]:
    """The keys of one dataset's alternation (a document of `measure`)."""
    model, n, n_files, file_bytes, batch_size = (doc[k] for k in ("model", "n", "n_files", "file_bytes", "batch_size"))
    measured = ColdSides.from_json(doc)
    names = {"mlp": ("the MLP's", "MNIST-shaped", "mnist_mlp"), "ae": ("the autoencoder's", "CIFAR-shaped",
                                                                      "cifar_autoencoder")}
    whose, shaped, reference = names[model]
    per_sample = file_bytes / n
    raw_mb, pipeline_mb = measured.mb_per_s("raw"), measured.mb_per_s("pipeline")
    cached = max(measured.left_cached)
    files = (f"{n:,} {shaped} images, {file_bytes / 1e6:,.0f} MB in {n_files} files, batch {batch_size}, "
             f"{measured.rounds.samples('raw').n} rounds, load {doc['load']:.1f}; after each drop at most {cached:.1%} "
             f"of the files stayed cached" + (" (THE DROP DID NOT WORK: these reads were not cold)"
                                              if cached > LEFT_CACHED else ""))

    def side(name: str) -> str:
        return (f"{measured.mb_per_s(name):,.0f} MB/s steady ({measured.whole_mb_per_s(name):,.0f} over the whole "
                f"epoch, start-up {measured.start_up_ms(name):.0f} ms), {measured.cpu_per_gb(name):.2f} CPU s/GB")

    gpu = gpu_appetite(reference, batch_size).samples_per_second
    pipeline_rate = measured.rounds.samples("pipeline").scaled(1 / per_sample)
    return [
        Result(f"cold_pipeline_vs_raw_read_{model}",
               f"{whose} block records read cold by read_blocks with 1 MiB reads (the change proposed for notebook "
               f"05) / the same files read raw, cold, in 8 MiB reads", GOAL,
               f"pipeline {side('pipeline')}; raw {side('raw')} (medians); {files}",
               measured.rounds.ratio("pipeline", "raw")),
        Result(f"cold_lesson_vs_raw_read_{model}",
               f"the same read by notebook 05's read_blocks as it is / the raw read", "-",
               f"read_blocks {side('lesson')}; raw {raw_mb:,.0f} MB/s", measured.rounds.ratio("lesson", "raw")),
        Result(f"cold_pipeline_vs_gpu_bs{batch_size}",
               f"{whose} pipeline alone reading cold / the reference H200 training the "
               f"{'MLP' if model == 'mlp' else 'autoencoder'} at batch {batch_size}", "-",
               f"disk (raw cold read) {raw_mb:,.0f} MB/s; pipeline {pipeline_mb:,.0f} MB/s = "
               f"{pipeline_rate.median:,.0f} samples/s; the H200 trains {gpu:,} samples/s = {gpu * per_sample / 1e6:,.0f}"
               f" MB/s at {per_sample:,.0f} bytes a sample in these files", pipeline_rate.scaled(1 / gpu)),
    ]


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    from helpers.setup.processes import exit_with_parent, skip_unused_imports

    exit_with_parent()
    skip_unused_imports()
    print(REPLY + json.dumps(measure(quick=sys.argv[2:3] == ["quick"])), flush=True)
