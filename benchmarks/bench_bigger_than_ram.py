"""More data than the machine holds, for real: block records totalling at least 1.25 times this machine's RAM,
streamed from the disk through the pipeline alone for one epoch and into a few hundred training steps of the MLP
(issue 44).

Not part of the default run: `python -m benchmarks.run --only bigger_than_ram` (about 5-10 minutes and 1.25x
RAM of disk space; `--quick` writes 256 MiB, the same code at a size that proves nothing about RAM).

1. Checks the free space first and refuses, in one line, unless the files and `RESERVE_BYTES` to spare fit.
2. Writes MNIST-shaped random images (uniform noise: nothing between here and the device can compress it or
   find it twice, `write_parts`) as block records, in parts of `PART_BYTES` (one `write_blocks` call each, split
   `part000`, `part001`, ...: data larger than RAM cannot be one array), under a new folder of the temporary
   directory (`TMPDIR` chooses it), with a progress bar.
3. Reads every file raw, cold, in 8 MiB reads (`helpers.measure.cold_read.read_raw`): the disk's rate.
4. In a fresh child process: one epoch of every part through `bench_cold_read.read_from_disk` (the parts read as
   one split), cold, no model; then `TRAIN_STEPS` steps of the article's MLP at batch 1024 from the same stream,
   cold again; its peak resident memory (`VmHWM`). The same child again over the first part alone (1 GiB): the
   peak a small run takes, which streaming should not exceed by much whatever the size.
5. Removes exactly what it wrote (the files of its own parts, then its folder if nothing else is in it), also
   after Ctrl-C or SIGTERM. A folder a run killed outright (SIGKILL) left behind is named, never removed.

Keys (one run each, no rounds: a value, no goal):
- bigger_than_ram_pipeline_vs_raw_read: the epoch's MB/s / the raw read's MB/s, the same files
- bigger_than_ram_peak_rss_vs_1gb: the child's peak RSS streaming everything / streaming 1 GiB
- bigger_than_ram_epoch_vs_gpu_bs1024: the epoch's samples/s / the reference H200 training the MLP at batch 1024
"""
from __future__ import annotations

import json
import math
import os
import re
import signal
import stat
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Callable, Iterator

import numpy as np

from benchmarks.run import Result

RAM_FACTOR = 1.25                  # the data is at least this many times the machine's RAM
PART_BYTES = 2**30                 # images per part: 1 GiB in memory while it is written
QUICK_TOTAL, QUICK_PART = 256 * 2**20, 64 * 2**20
FILES_PER_PART = 16                # 64 MiB files, as `bench_cold_read`
RESERVE_BYTES = 5 * 10**9          # free space left to the machine's other users once everything is written
BATCH, TRAIN_STEPS, QUICK_STEPS = 1024, 300, 20
SHAPE = (28, 28)
FOLDER_PREFIX = "bench-bigger-than-ram-"
REPLY = "BIGGER-THAN-RAM "


class NotEnoughSpace(RuntimeError):
    """The disk lacks the space for the files and the reserve: nothing was written."""


def plan(ram: int, quick: bool) -> tuple[int, int]:
    """`(parts, images per part)` for data of at least `RAM_FACTOR` x `ram` bytes (quick: `QUICK_TOTAL`).

    >>> plan(24 * 2**30, quick=False)
    (31, 1369568)
    """
    total, part = (QUICK_TOTAL, QUICK_PART) if quick else (RAM_FACTOR * ram, PART_BYTES)
    per_part = part // math.prod(SHAPE)
    return math.ceil(total / (per_part * math.prod(SHAPE))), per_part


def bytes_on_disk(images: int) -> int:
    """What `images` MNIST-shaped images take as block records, a little over their pixels (each 256-image block
    adds its labels, its spec and the record's framing, under 300 bytes): an upper bound for the space check."""
    return images * (math.prod(SHAPE) + 2) + 4096 * FILES_PER_PART


def check_free_space(folder: Path, needed: int, free: int, what: str) -> None:
    """`NotEnoughSpace`, with a one-line message, unless `free` bytes hold `needed` and the reserve."""
    if free < needed + RESERVE_BYTES:
        raise NotEnoughSpace(
            f"bigger_than_ram: needs {(needed + RESERVE_BYTES) / 1e9:.1f} GB free in {folder} ({what}, and "
            f"{RESERVE_BYTES / 1e9:.0f} GB to spare) but {free / 1e9:.1f} GB are; nothing was written (free space "
            f"there, or point TMPDIR at a larger disk)")


class OwnWrite:
    """A new folder of this run's own (made here, private to this user) and the parts written into it: `remove()`
    deletes exactly the files `write_blocks` makes for those parts (shards, index, lock, their temporaries), never
    following a symlink, then the folder if nothing else is left in it."""

    def __init__(self, parent: str | Path | None = None) -> None:
        self.folder = Path(tempfile.mkdtemp(prefix=FOLDER_PREFIX, dir=parent))
        self.parts: list[str] = []

    def own_name(self, name: str) -> bool:
        for part in self.parts:
            p = re.escape(part)
            pattern = (rf"(?:{p}-\d{{5}}-of-\d{{5}}-[0-9a-f]{{8}}\.blocks\.tfrecord|{p}\.blocks\.json)"
                       rf"(?:\.[0-9a-f]{{8}}\.partial)?|\.{p}\.blocks\.lock")
            if re.fullmatch(pattern, name):
                return True
        return False

    def remove(self) -> tuple[int, int, list[str]]:
        """`(files removed, their bytes, names left)`: what is not this run's own stays, and so does the folder."""
        removed = size = 0
        left = []
        if not self.folder.is_dir() or self.folder.is_symlink():
            return 0, 0, []
        for entry in os.scandir(self.folder):
            info = entry.stat(follow_symlinks=False)
            if self.own_name(entry.name) and stat.S_ISREG(info.st_mode):
                os.unlink(entry.path)
                removed, size = removed + 1, size + info.st_size
            else:
                left.append(entry.name)
        if not left:
            self.folder.rmdir()
        return removed, size, left


def stale_folders(parent: str | Path | None = None) -> list[Path]:
    """Folders an earlier run killed outright left in the temporary directory (named, never removed here)."""
    parent = Path(parent or tempfile.gettempdir())
    return sorted(p for p in parent.glob(f"{FOLDER_PREFIX}*") if p.is_dir() and not p.is_symlink())


def part_name(index: int) -> str:
    return f"part{index:03d}"


def write_parts(own: OwnWrite, parts: int, per_part: int, progress: Callable[[int], None]) -> list[str]:
    """Write `parts` parts of `per_part` random images as block records into `own.folder`; each part is listed in
    `own.parts` before its first byte is written. `progress(bytes)` after each part."""
    from helpers.lessons.pipeline_profiling import write_blocks
    from helpers.storage.blocks import write_block_split

    size = per_part * math.prod(SHAPE)
    bits = np.random.SFC64(0)   # numpy's fastest generator
    noise = bits.random_raw(-(-size // 8)).view(np.uint8)[:size]
    for index in range(parts):
        name = part_name(index)
        own.parts.append(name)
        # The noise drawn once, rotated by a different odd number of bytes for each part: no two 4 KiB pages of the
        # files alike, and no repeat within reach of any compressor's window (a GiB apart), at a copy's cost.
        images = np.roll(noise, index * 1_000_003).reshape(per_part, *SHAPE)
        labels = np.random.Generator(bits).integers(0, 10, per_part, dtype=np.uint8)
        write_block_split(write_blocks, images, labels, own.folder, name, num_shards=FILES_PER_PART)
        del images
        progress(sum(f.stat().st_size for f in own.folder.glob(f"{name}-*.blocks.tfrecord")))
    return list(own.parts)


class Terminated(KeyboardInterrupt):
    """SIGTERM, raised where the run is so that its clean-up runs as after Ctrl-C."""


def _terminate(signum, frame):
    raise Terminated()


def run_child(folder: Path, parts: list[str], steps: int, timeout: float) -> dict:
    """The streaming epoch and the training steps in a fresh Python process (its peak memory is its own)."""
    from helpers.setup.processes import child_environment

    command = [sys.executable, "-m", "benchmarks.bench_bigger_than_ram", "--child", str(folder), str(steps), *parts]
    root = Path(__file__).resolve().parent.parent
    with subprocess.Popen(command, cwd=root, env=child_environment(gpu=False), stdout=subprocess.PIPE,
                          stderr=subprocess.PIPE, text=True) as child:
        try:
            out, err = child.communicate(timeout=timeout)
        except BaseException:
            child.kill()
            child.wait()
            raise
    replies = [line[len(REPLY):] for line in out.splitlines() if line.startswith(REPLY)]
    if child.returncode != 0 or not replies:
        raise RuntimeError(f"the streaming child failed (exit {child.returncode}): {err.strip()[-2000:]}")
    return json.loads(replies[-1])


def run(quick: bool) -> list[Result]:
    from helpers.measure.cold_read import (can_drop_page_cache, drop_from_page_cache, free_bytes, memory_bytes,
                                           read_raw)
    from helpers.measure.gpu_reference import gpu_appetite

    if not can_drop_page_cache():
        raise SystemExit(f"bigger_than_ram: needs posix_fadvise to read from the disk, which {sys.platform} lacks")
    ram = memory_bytes()
    parts, per_part = plan(ram, quick)
    planned = bytes_on_disk(parts * per_part)
    parent = Path(tempfile.gettempdir())
    what = f"{planned / 1e9:.1f} GB of block records" + ("" if quick else f", {RAM_FACTOR}x this machine's "
                                                                            f"{ram / 1e9:.1f} GB of RAM")
    try:
        check_free_space(parent, planned, free_bytes(parent), what)
    except NotEnoughSpace as e:
        raise SystemExit(str(e)) from None
    for stale in stale_folders(parent):
        print(f"\nnote: {stale} was left by an earlier run killed outright; remove it yourself if it is not in use",
              file=sys.stderr)
    steps = QUICK_STEPS if quick else TRAIN_STEPS
    previous = signal.signal(signal.SIGTERM, _terminate)
    own = OwnWrite(parent)
    written = 0
    try:
        from tqdm.auto import tqdm

        started = time.perf_counter()
        with tqdm(total=planned, unit="B", unit_scale=True, desc=f"writing {what}", file=sys.stderr) as bar:
            names = write_parts(own, parts, per_part, bar.update)
        write_seconds = time.perf_counter() - started
        files = sorted(own.folder.glob("part*.blocks.tfrecord"))
        written = sum(f.stat().st_size for f in files)
        print(f"\nwrote {written / 1e9:.1f} GB in {len(files)} files in {write_seconds:.0f} s; reading them raw…",
              file=sys.stderr, flush=True)
        drop_from_page_cache(files)
        started = time.perf_counter()
        read_raw(files)
        raw_seconds = time.perf_counter() - started
        print(f"raw read {written / raw_seconds / 1e6:,.0f} MB/s; streaming them in a child…", file=sys.stderr,
              flush=True)
        big = run_child(own.folder, names, steps, timeout=3600)
        small = run_child(own.folder, names[:1], steps, timeout=900)   # one part: 1 GiB of images
    except KeyboardInterrupt:
        removed, size, left = own.remove()
        raise SystemExit(f"bigger_than_ram: interrupted; removed the {removed} files ({size / 1e9:.1f} GB) it wrote"
                         + (f"; left {own.folder} with what it did not write: {left}" if left else "")) from None
    finally:
        if own.folder.exists():
            removed, size, left = own.remove()
            if left:
                print(f"bigger_than_ram: left {own.folder}, which holds files it did not write: {left}",
                      file=sys.stderr)
        signal.signal(signal.SIGTERM, previous)

    raw_mb = written / raw_seconds / 1e6
    epoch_mb = big["bytes"] / big["epoch_seconds"] / 1e6
    epoch_rate = big["samples"] / big["epoch_seconds"]
    gpu = gpu_appetite("mnist_mlp", BATCH).samples_per_second
    per_sample = big["bytes"] / big["samples"]
    size_text = (f"{written / 1e9:.1f} GB in {len(files)} files ({written / ram:.2f}x this machine's "
                 f"{ram / 2**30:.1f} GiB of RAM), {big['samples']:,} MNIST-shaped images")
    return [
        Result("bigger_than_ram_pipeline_vs_raw_read",
               "one epoch of block records larger than RAM through the pipeline alone (read_from_disk), cold / the "
               "same files read raw, cold", "-",
               f"{size_text}; written in {write_seconds:.0f} s; raw read {raw_mb:,.0f} MB/s ({raw_seconds:.0f} s); "
               f"the epoch {epoch_mb:,.0f} MB/s = {epoch_rate:,.0f} samples/s ({big['epoch_seconds']:.0f} s, "
               f"start-up {big['epoch_start_up'] * 1e3:.0f} ms); then {big['train_steps']} MLP training steps at "
               f"batch {BATCH} from the stream, cold: {big['train_rate']:,.0f} samples/s after the first step",
               value=epoch_mb / raw_mb),
        Result("bigger_than_ram_peak_rss_vs_1gb",
               "peak resident memory of the child streaming all of it / the same child streaming one 1 GiB part", "-",
               f"peak {big['peak_mib']:,.0f} MiB over {big['bytes'] / 1e9:.1f} GB against {small['peak_mib']:,.0f} MiB "
               f"over {small['bytes'] / 1e9:.1f} GB (after TensorFlow and the model: {big['floor_mib']:,.0f} and "
               f"{small['floor_mib']:,.0f} MiB)", value=big["peak_mib"] / small["peak_mib"]),
        Result("bigger_than_ram_epoch_vs_gpu_bs1024",
               "the epoch from the disk / the reference H200 training the MLP at batch 1024", "-",
               f"{epoch_rate:,.0f} samples/s = {epoch_mb:,.0f} MB/s; the H200 trains {gpu:,} samples/s = "
               f"{gpu * per_sample / 1e6:,.0f} MB/s at {per_sample:,.0f} bytes a sample", value=epoch_rate / gpu),
    ]


def resident_mib(field: str) -> float:
    """`VmRSS` or `VmHWM` (the peak) of this process, in MiB, from /proc/self/status."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) / 1024
    raise RuntimeError(f"/proc/self/status has no {field}")


def child(folder: Path, steps: int, parts: list[str]) -> dict:
    """One epoch of `parts` through the pipeline alone, then `steps` training steps of the MLP, every file dropped
    from the page cache before each; this process's memory."""
    import tensorflow as tf

    from benchmarks.bench_cold_read import mix_blocks_for, read_from_disk
    from helpers.lessons.tfdata_mnist import article_mlp
    from helpers.measure import fit_epoch, pipeline_epoch
    from helpers.measure.cold_read import drop_from_page_cache
    from helpers.storage.blocks import open_block_split
    from helpers.storage.files import check_name

    parts = [check_name(p, "part name") for p in parts]
    files = [f for p in parts for f in open_block_split(folder, p).files]

    def stream():
        return read_from_disk(folder, parts, BATCH, shuffle=True, mix_blocks=mix_blocks_for(BATCH)).prefetch(
            tf.data.AUTOTUNE)

    model = article_mlp()
    model.fit(np.zeros((2 * BATCH, *SHAPE), np.uint8), np.zeros(2 * BATCH, np.int64), batch_size=BATCH, verbose=0)
    floor = resident_mib("VmRSS")
    dataset = stream()
    drop_from_page_cache(files)
    epoch = pipeline_epoch(dataset)
    dataset = stream().take(steps)
    drop_from_page_cache(files)
    training = fit_epoch(model, batch_size=BATCH, x=dataset)
    train_rate = (training.samples - BATCH) / (training.seconds - training.start_up)
    return {"samples": epoch.samples, "bytes": sum(f.stat().st_size for f in files), "epoch_seconds": epoch.seconds,
            "epoch_start_up": epoch.start_up, "train_steps": steps, "train_rate": train_rate, "floor_mib": floor,
            "peak_mib": resident_mib("VmHWM")}


if __name__ == "__main__" and sys.argv[1:2] == ["--child"]:
    from helpers.setup.processes import exit_with_parent, skip_unused_imports

    exit_with_parent()
    skip_unused_imports()
    folder_arg, steps_arg, *part_args = sys.argv[2:]
    print(REPLY + json.dumps(child(Path(folder_arg), int(steps_arg), part_args)), flush=True)
