"""Reading block records from the disk, not from the page cache: does the pipeline read as fast as the disk gives,
and could the disk feed the reference GPU? (issue 44)

Every other speed figure of the series reads files the page cache holds. Data larger than RAM cannot sit there:
each epoch comes from the device again. Here every file is dropped from the page cache (`fsync`, then
`posix_fadvise(POSIX_FADV_DONTNEED)`: `helpers.measure.cold_read`) before each side of each round, and `mincore`
checks that the drop left nothing cached.

Sides, in one alternation per dataset (`helpers.measure.alternate`):
- raw: the same files read one after another in reads of 8 MiB into one buffer, nothing decoded (`read_raw`):
  the device's rate for these files, which no reader of them beats;
- pipeline: block records read by `read_from_disk` (below), batches made and handed over as `fit` gets them,
  no model (`pipeline_epoch`);
- lesson: notebook 05's `read_blocks` as it is today, for comparison (the change `read_from_disk` makes is the
  one the lesson should take).

Both datasets are block records of images drawn at random (uniform noise): no storage layer between the VM and
the device can read them faster by compressing or de-duplicating them, and nothing measured here depends on the
pixels. The MLP's are MNIST-shaped (28x28 uint8, batch 1024 as the MLP's GPU keys), the autoencoder's
CIFAR-shaped (32x32x3 uint8, batch 256; uint8 batches, as a model that casts its input itself takes them).

Keys (each round's MB/s, the same files' bytes on both sides; every epoch's start-up is counted; the detail lines
give the CPU seconds each side spent per GB, every thread's, user and system: on two cores, what a cold read costs
in CPU decides how fast a pipeline can read):
- cold_pipeline_vs_raw_read_mlp, cold_pipeline_vs_raw_read_ae: the pipeline / the raw read (goal ≥ 0.90)
- cold_lesson_vs_raw_read_mlp, cold_lesson_vs_raw_read_ae: notebook 05's read_blocks as it is / the raw read
- cold_pipeline_vs_gpu_bs1024 (MLP), cold_pipeline_vs_gpu_bs256 (autoencoder): the pipeline's samples/s read cold
  / the samples/s the reference H200 trains (`helpers.measure.gpu_reference`); the detail line gives the disk's
  MB/s and the GPU's appetite in MB/s (its samples/s times the bytes a sample takes in these files).

`python -m benchmarks.run --only cold_steps` measures the steps that led to `read_from_disk`, one at a time.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Callable

import numpy as np
import tensorflow as tf

from benchmarks.run import Result
from helpers.lessons.pipeline_profiling import BLOCK_SIZE, mix_images, parse_block_fn, read_blocks, write_blocks
from helpers.measure import Epoch, Rounds, alternate, pipeline_epoch
from helpers.measure.cold_read import (advise_willneed, cached_fraction, can_drop_page_cache, drop_from_page_cache,
                                       read_raw)
from helpers.measure.gpu_reference import gpu_appetite
from helpers.storage.blocks import open_block_split, read_block_split, write_block_split
from helpers.storage.tfrecord.read import exact_length

GOAL = "≥ 0.90"
REPLY = "COLD-READ "   # the prefix of the measuring child's one line of JSON
MLP_SHAPE, AE_SHAPE = (28, 28), (32, 32, 3)
MLP_BATCH, AE_BATCH = 1024, 256
FILE_MIB = 64          # about this many MiB per file of block records
MIN_FILES = 8          # and at least this many files (a quick run's small splits too: 4 are read at once)
LEFT_CACHED = 0.02     # a drop that leaves more than this share of the files cached did not work


def read_ahead_hint(file):
    """For `dataset.map` over file names: ask the kernel to read the whole file into the page cache in the background
    (`POSIX_FADV_WILLNEED`) as soon as the name comes up, and pass the name on."""
    def hint(name):
        advise_willneed(name.numpy().decode())
        return name

    return tf.ensure_shape(tf.py_function(hint, [file], tf.string), [])


def read_from_disk(directory, split, batch_size=256, *, shuffle=False, mix_blocks=8, shuffle_blocks=64,
                   parallel_reads=4, seed=None, verify=False, read_ahead=True, buffer_size=0):
    """Notebook 05's `read_blocks` with the change proposed for reading from the disk: each file, as the interleave
    takes it up, is first handed to `read_ahead_hint`, so that the kernel reads it whole, in large requests, while
    the pipeline still works on the files before it. `read_ahead=False, buffer_size=2**18` is `read_blocks` itself;
    `buffer_size` is TFRecordDataset's read buffer (0: none, the lesson's choice). `split` may also be a list of
    splits of one image spec and block size, read as one (data written in parts, one `write_blocks` call each)."""
    splits = [split] if isinstance(split, str) else list(split)
    parts = [open_block_split(directory, name, verify=verify, batch_size=batch_size, mix_blocks=mix_blocks,
                              shuffle_blocks=shuffle_blocks, parallel_reads=parallel_reads) for name in splits]
    info = parts[0]
    if any((p.tag, p.block_size) != (info.tag, info.block_size) for p in parts):
        raise ValueError(f"splits {splits} of {directory} differ in image spec or block size: read them apart")
    info = replace(info, files=[f for p in parts for f in p.files], total_records=sum(p.total_records for p in parts))
    where = f"block split{'s' * (len(splits) > 1)} {', '.join(map(repr, splits))} of {directory}"
    parse = parse_block_fn(info.tag, where)
    files = tf.data.Dataset.from_tensor_slices([str(f) for f in info.files])
    records = lambda file: tf.data.TFRecordDataset(file, buffer_size=buffer_size)
    if not shuffle:
        if read_ahead:
            files = files.map(read_ahead_hint)
        ds = files.flat_map(records).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        window = info.block_size * mix_blocks
        files = files.shuffle(len(info.files), seed=seed)
        if read_ahead:
            files = files.map(read_ahead_hint)
        ds = (files.interleave(records, cycle_length=parallel_reads, num_parallel_calls=parallel_reads,
                               deterministic=False)
              .shuffle(shuffle_blocks, seed=seed)
              .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
              .rebatch(window))
        if window != batch_size:
            ds = ds.map(lambda x, y: mix_images(x, y, seed), num_parallel_calls=tf.data.AUTOTUNE)
    return exact_length(ds.rebatch(batch_size), -(-info.total_records // batch_size), where)


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


@dataclass
class ColdSides:
    """What one dataset's alternation measured: MB/s per side and round, the epochs of the pipelines, the drops."""

    rounds: Rounds
    epochs: dict[str, list[Epoch]] = field(default_factory=dict)
    left_cached: list[float] = field(default_factory=list)   # the files' cached share after each drop
    cpu: dict[str, list[float]] = field(default_factory=dict)   # CPU seconds (every thread, user and system) per GB

    def mb_per_s(self, side: str) -> float:
        return self.rounds.samples(side).median / 1e6

    def cpu_per_gb(self, side: str) -> float:
        """The median CPU seconds the side spent per GB read, from the first round kept (the warm-up's left out)."""
        return float(np.median(self.cpu[side][1:] or self.cpu[side]))

    def to_json(self) -> dict:
        return {"values": self.rounds.values, "left_cached": self.left_cached, "cpu": self.cpu,
                "epochs": {side: [[e.samples, e.seconds, e.start_up] for e in epochs]
                           for side, epochs in self.epochs.items()}}

    @classmethod
    def from_json(cls, doc: dict) -> "ColdSides":
        return cls(Rounds(list(doc["values"]), doc["values"]),
                   {side: [Epoch(*e) for e in epochs] for side, epochs in doc["epochs"].items()},
                   doc["left_cached"], doc["cpu"])


def cold_alternation(files: list[Path], pipelines: dict[str, Callable[[], tf.data.Dataset]], bytes_per_sample: float,
                     rounds: int, cached: tuple[str, ...] = ()) -> ColdSides:
    """The raw read and each pipeline, every file dropped from the page cache before each, in alternating rounds
    after one warm-up round (it traces the pipelines); each side's value is its bytes per second. The pipelines
    named in `cached` read the files from the page cache instead (read once, untimed, just before): the reference
    a cold read's cost is told from."""
    measured = ColdSides(Rounds([]))

    def drop():
        drop_from_page_cache(files)
        measured.left_cached.append(cached_fraction(files))

    def cpu_seconds() -> float:
        times = os.times()
        return times.user + times.system

    def raw() -> float:
        drop()
        cpu, start = cpu_seconds(), time.perf_counter()
        total = read_raw(files)
        seconds = time.perf_counter() - start
        measured.cpu.setdefault("raw", []).append((cpu_seconds() - cpu) / total * 1e9)
        return total / seconds

    def pipeline(name: str, make: Callable[[], tf.data.Dataset]) -> Callable[[], float]:
        def side() -> float:
            dataset = make()   # reads the index and the first block: before the drop
            if name in cached:
                read_raw(files)
            else:
                drop()
            cpu = cpu_seconds()
            epoch = pipeline_epoch(dataset)
            measured.cpu.setdefault(name, []).append((cpu_seconds() - cpu) / (epoch.samples * bytes_per_sample) * 1e9)
            measured.epochs.setdefault(name, []).append(epoch)
            return epoch.samples * bytes_per_sample / epoch.seconds

        return side

    sides = {"raw": raw, **{name: pipeline(name, make) for name, make in pipelines.items()}}
    measured.rounds = alternate(sides, rounds=rounds, warmup=1)
    for name in pipelines:
        del measured.epochs[name][0]   # the warm-up round's
    return measured


def measure(quick: bool) -> list[dict]:
    """Both datasets' alternations, as JSON-ready documents (`cold_results` reads them)."""
    # About 1 GB a dataset in a full run: read at a few hundred MB/s to a few GB/s, each epoch's start-up (tens of
    # milliseconds) is a few per cent of it.
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
                         "batch_size": batch_size, **measured.to_json()})
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
    raw_mb, pipeline_mb, lesson_mb = (measured.mb_per_s(s) for s in ("raw", "pipeline", "lesson"))
    start_up = {s: np.median([e.start_up for e in measured.epochs[s]]) * 1e3 for s in ("pipeline", "lesson")}
    cached = max(measured.left_cached)
    files = (f"{n:,} {shaped} images, {file_bytes / 1e6:,.0f} MB in {n_files} files, batch {batch_size}, "
             f"{measured.rounds.samples('raw').n} rounds; after each drop at most {cached:.1%} of the files "
             f"stayed cached" + (" (THE DROP DID NOT WORK: these reads were not cold)" if cached > LEFT_CACHED else ""))
    gpu = gpu_appetite(reference, batch_size).samples_per_second
    pipeline_rate = measured.rounds.samples("pipeline").scaled(1 / per_sample)
    return [
        Result(f"cold_pipeline_vs_raw_read_{model}",
               f"{whose} block records read cold by the proposed pipeline (read-ahead hint per file) / the same "
               f"files read raw, cold, in 8 MiB reads", GOAL,
               f"pipeline {pipeline_mb:,.0f} MB/s (start-up {start_up['pipeline']:.0f} ms, counted; "
               f"{measured.cpu_per_gb('pipeline'):.2f} CPU s/GB), raw {raw_mb:,.0f} MB/s "
               f"({measured.cpu_per_gb('raw'):.2f} CPU s/GB) (medians); {files}", measured.rounds.ratio("pipeline", "raw")),
        Result(f"cold_lesson_vs_raw_read_{model}",
               f"the same read by notebook 05's read_blocks as it is (no hint) / the raw read", "-",
               f"read_blocks {lesson_mb:,.0f} MB/s (start-up {start_up['lesson']:.0f} ms; "
               f"{measured.cpu_per_gb('lesson'):.2f} CPU s/GB), raw {raw_mb:,.0f} MB/s",
               measured.rounds.ratio("lesson", "raw")),
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
