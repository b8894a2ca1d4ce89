"""Reading files from the disk, not from the page cache: drop them from the cache, see how much of them it holds,
read them raw at the device's own pace, and the machine's RAM and free disk space for data larger than memory.

- `drop_from_page_cache(paths)`: write each file's dirty pages out (`fsync`), then ask the kernel to drop its
  cached pages (`posix_fadvise(POSIX_FADV_DONTNEED)`), so that the next read comes from the device.
- `cached_fraction(paths)`: the share of their pages in the page cache now (`mincore`), to check a drop worked.
- `read_raw(paths)`: every file to its end, one after another, in large sequential reads into one buffer: the
  rate no reader of these files beats, the reference a pipeline's cold read is compared with; `raw_read_marks(paths)`
  the same read with the time of each read, as a pipeline's epoch has the time of each batch.
- `advise_sequential`, `advise_willneed`: the kernel's read-ahead hints for one open file.
- `memory_bytes()`, `free_bytes(folder)`: the machine's RAM, and the space left where data would be written.
- `cold_read_slowdown(paths)`: the same files read just after a drop against read again at once (cached), in
  alternating rounds; its interval's low end above `REACHED_DISK` shows the cold reads reached the disk
  (notebook 05, `benchmarks/bench_autoencoder.py`).

Linux only for the drop and `mincore` (`can_drop_page_cache()` says whether this platform can). Used by the
benchmarks of reading from the disk (`benchmarks/bench_cold_read.py`, `benchmarks/bench_bigger_than_ram.py`).
"""
from __future__ import annotations

import ctypes
import ctypes.util
import mmap
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from helpers.measure.core import Samples, alternate, timed

RAW_CHUNK = 8 * 1024 * 1024   # bytes per read of `read_raw`: large enough that a read's own cost is negligible


class ColdReadUnsupported(RuntimeError):
    """This platform cannot drop a file from the page cache (no `posix_fadvise`: macOS, Windows)."""


def can_drop_page_cache() -> bool:
    """Whether files can be dropped from the page cache here (Linux: yes)."""
    return hasattr(os, "posix_fadvise") and hasattr(os, "POSIX_FADV_DONTNEED")


def drop_from_page_cache(paths: Iterable[str | Path]) -> None:
    """Write out and drop every file's cached pages, so that the next read of it comes from the device.

    The kernel keeps pages it cannot drop (dirty ones, hence the `fsync` first; pages another process has mapped):
    `cached_fraction` tells what is left. `ColdReadUnsupported` where the platform has no `posix_fadvise`.

    >>> drop_from_page_cache([__file__]) if can_drop_page_cache() else None
    """
    if not can_drop_page_cache():
        raise ColdReadUnsupported(f"{os.name}/{os.uname().sysname if hasattr(os, 'uname') else ''} has no "
                                  f"posix_fadvise: files cannot be dropped from the page cache here (Linux can)")
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)   # dirty pages cannot be dropped: write them out first
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)


def _libc():
    libc = ctypes.CDLL(ctypes.util.find_library("c"), use_errno=True)
    libc.mmap.restype, libc.mmap.argtypes = ctypes.c_void_p, [ctypes.c_void_p, ctypes.c_size_t, ctypes.c_int,
                                                               ctypes.c_int, ctypes.c_int, ctypes.c_long]
    libc.munmap.argtypes = [ctypes.c_void_p, ctypes.c_size_t]
    libc.mincore.argtypes = [ctypes.c_void_p, ctypes.c_size_t, ctypes.POINTER(ctypes.c_ubyte)]
    return libc


def cached_pages(path: str | Path) -> tuple[int, int]:
    """`(pages in the page cache, pages in all)` for one file, from `mincore` on a mapping of it (mapping a file
    reads none of it). `ColdReadUnsupported` where there is no `mincore` (only Linux is known to have it here)."""
    if not hasattr(os, "uname") or os.uname().sysname != "Linux":
        raise ColdReadUnsupported("mincore is used on Linux only")
    size, page = os.path.getsize(path), mmap.PAGESIZE
    pages = -(-size // page)
    if pages == 0:
        return 0, 0
    libc = _libc()
    fd = os.open(path, os.O_RDONLY)
    try:
        address = libc.mmap(None, size, mmap.PROT_READ, mmap.MAP_SHARED, fd, 0)
        if address in (None, ctypes.c_void_p(-1).value):
            raise OSError(ctypes.get_errno(), f"mmap of {path} failed")
        try:
            vector = (ctypes.c_ubyte * pages)()
            if libc.mincore(address, size, vector) != 0:
                raise OSError(ctypes.get_errno(), f"mincore of {path} failed")
            return sum(byte & 1 for byte in vector), pages
        finally:
            libc.munmap(address, size)
    finally:
        os.close(fd)


def cached_fraction(paths: Iterable[str | Path]) -> float:
    """The share of these files' pages the page cache holds now (0: all dropped, 1: all cached)."""
    cached = total = 0
    for path in paths:
        c, t = cached_pages(path)
        cached, total = cached + c, total + t
    return cached / total if total else 0.0


def read_raw(paths: Iterable[str | Path], chunk: int = RAW_CHUNK) -> int:
    """Read every file to its end, one after another, in reads of `chunk` bytes into one preallocated buffer (no
    Python buffering, nothing kept); the number of bytes read."""
    buffer = memoryview(bytearray(chunk))
    total = 0
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while count := f.readinto(buffer):
                total += count
    return total


def raw_read_marks(paths: Iterable[str | Path], chunk: int = RAW_CHUNK) -> tuple[float, list[tuple[float, int]]]:
    """`read_raw`, timed: its start (`time.perf_counter()`) and, after each read, `(time, bytes read so far)`: the
    marks `helpers.measure.steady_epoch` makes an `Epoch` of (its samples then bytes), as a pipeline's batches."""
    buffer = memoryview(bytearray(chunk))
    start, total, marks = time.perf_counter(), 0, []
    for path in paths:
        with open(path, "rb", buffering=0) as f:
            while count := f.readinto(buffer):
                total += count
                marks.append((time.perf_counter(), total))
    return start, marks


def _advise(fd: int, advice: str) -> bool:
    if not hasattr(os, "posix_fadvise"):
        return False
    os.posix_fadvise(fd, 0, 0, getattr(os, advice))
    return True


def advise_sequential(fd: int) -> bool:
    """Tell the kernel this open file will be read from start to end (Linux doubles its read-ahead window for this
    descriptor). False, doing nothing, where the platform has no `posix_fadvise`."""
    return _advise(fd, "POSIX_FADV_SEQUENTIAL")


def advise_willneed(path: str | Path) -> bool:
    """Ask the kernel to start reading the whole file into the page cache now, in the background (the call returns
    once the reads are queued). False, doing nothing, where the platform has no `posix_fadvise`."""
    if not hasattr(os, "posix_fadvise"):
        return False
    fd = os.open(path, os.O_RDONLY)
    try:
        return _advise(fd, "POSIX_FADV_WILLNEED")
    finally:
        os.close(fd)


def memory_bytes() -> int:
    """This machine's RAM in bytes: `MemTotal` of /proc/meminfo where there is one, else the physical pages."""
    try:
        with open("/proc/meminfo") as f:
            for line in f:
                if line.startswith("MemTotal:"):
                    return int(line.split()[1]) * 1024
    except OSError:
        pass
    return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")


def free_bytes(folder: str | Path) -> int:
    """Bytes an ordinary user may still write on the file system holding `folder` (or its nearest existing
    parent)."""
    folder = Path(folder).absolute()
    while not folder.exists():
        folder = folder.parent
    return shutil.disk_usage(folder).free


# Cold reads at least this many times slower than cached ones (the interval's low end) reached the disk; below it,
# the drop failed or the storage is as fast as RAM for these files.
REACHED_DISK = 1.2


@dataclass(frozen=True)
class ColdRead:
    """Seconds per read of the same files cold and cached, and their ratio, round by round."""

    cold: Samples
    cached: Samples
    slowdown: Samples   # cold seconds / cached seconds, paired by round
    megabytes: float

    @property
    def reached_disk(self) -> bool:
        return self.slowdown.interval[0] > REACHED_DISK


def cold_read_slowdown(paths: list[str | Path], rounds: int = 6) -> ColdRead:
    """Seconds to read `paths` just after dropping them from the page cache, against reading them again at once
    (cached), in alternating rounds after a warm-up round; the drop is not timed. `ColdReadUnsupported` where the
    platform cannot drop files (`can_drop_page_cache`)."""
    read = timed(lambda: read_raw(paths))

    def cold() -> float:
        drop_from_page_cache(paths)   # before the clock starts
        return read()

    measured = alternate({"cold": cold, "cached": read}, rounds=rounds)
    megabytes = sum(Path(p).stat().st_size for p in paths) / 2**20
    return ColdRead(measured.samples("cold"), measured.samples("cached"), measured.ratio("cold", "cached"),
                    megabytes)
