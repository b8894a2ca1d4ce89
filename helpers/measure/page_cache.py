"""Cold reads: drop files from the operating system's page cache, and check that it worked.

A file written or read a moment ago is served from RAM (the page cache), not from the disk, so
a "disk" benchmark on fresh files measures memory. `drop_from_page_cache` asks the kernel to
forget a file's cached pages (`posix_fadvise(..., POSIX_FADV_DONTNEED)`, after `fsync` so no
page is dirty); `cold_read_slowdown` times a read after dropping against a read straight after,
to show whether the drop took effect on this machine. One threshold says when it did, for every
notebook and benchmark: `REACHED_DISK`, judged on the lower bound of the slowdown's interval.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import Iterable

from helpers.measure import Samples, alternate, timed

# A cold read at least this many times slower than a cached one (the interval's lower bound) shows that
# the drop worked and the reads reached the disk; below it, the storage is as fast as RAM or the drop failed.
REACHED_DISK = 1.2


def can_drop_page_cache() -> bool:
    """True where the operating system offers `posix_fadvise` (Linux; not macOS or Windows)."""
    return hasattr(os, "posix_fadvise")


def drop_from_page_cache(paths: Iterable[str | Path]) -> bool:
    """Ask the kernel to drop these files' cached pages, so the next read comes from the disk.

    Returns False (and does nothing) where the operating system has no `posix_fadvise`. The
    kernel may still keep pages it is using; `cold_read_slowdown` tells whether it worked.

    >>> drop_from_page_cache([__file__]) == can_drop_page_cache()
    True
    """
    if not can_drop_page_cache():
        return False
    for path in paths:
        fd = os.open(path, os.O_RDONLY)
        try:
            os.fsync(fd)  # dirty pages cannot be dropped; write them out first
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
        finally:
            os.close(fd)
    return True


def read_files(paths: Iterable[str | Path], chunk: int = 1 << 22) -> int:
    """Read the files to the end; the number of bytes read."""
    total = 0
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                total += len(block)
    return total


@dataclass
class ColdRead:
    """Seconds per read of the same files cold and cached, and their ratio, round by round."""

    cold: Samples
    cached: Samples
    slowdown: Samples   # cold seconds / cached seconds
    megabytes: float

    @property
    def reached_disk(self) -> bool:
        """Whether cold reads were measurably slower (the interval's lower bound above `REACHED_DISK`)."""
        return self.slowdown.interval[0] > REACHED_DISK


def cold_read_slowdown(paths: list[str | Path], rounds: int = 6) -> ColdRead:
    """Seconds to read `paths` just after dropping them from the cache, against reading them again
    at once (cached), in alternating rounds. The drop itself (an `fsync` and an `fadvise` per
    file) happens before the clock starts, so only the reads are timed. A slowdown of about 1
    means the drop did not work here, or the disk is as fast as memory; several times means
    cold reads really reach the disk.
    """
    read = timed(lambda: read_files(paths))

    def cold() -> float:
        drop_from_page_cache(paths)   # not timed
        return read()

    measured = alternate({"cold": cold, "cached": read}, rounds=rounds, warmup=1)
    megabytes = sum(Path(p).stat().st_size for p in paths) / 2**20
    return ColdRead(measured.samples("cold"), measured.samples("cached"), measured.ratio("cold", "cached"), megabytes)
