"""Cold reads: drop files from the operating system's page cache, and check that it worked.

A file written or read a moment ago is served from RAM (the page cache), not from the disk, so
a "disk" benchmark on fresh files measures memory. `drop_from_page_cache` asks the kernel to
forget a file's cached pages (`posix_fadvise(..., POSIX_FADV_DONTNEED)`, after `fsync` so no
page is dirty); `cold_read_slowdown` times a read after dropping against a read straight after,
to show whether the drop took effect on this machine.

Introduced in notebooks/03_pydataset_autoencoder.ipynb.
"""
from __future__ import annotations

import os
from pathlib import Path
from typing import Iterable

from helpers.timing import PairedRatio, paired_ratio


def can_drop_page_cache() -> bool:
    """True where the operating system offers `posix_fadvise` (Linux; not macOS or Windows).

    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """
    return hasattr(os, "posix_fadvise")


def drop_from_page_cache(paths: Iterable[str | Path]) -> bool:
    """Ask the kernel to drop these files' cached pages, so the next read comes from the disk.

    Returns False (and does nothing) where the operating system has no `posix_fadvise`. The
    kernel may still keep pages it is using; `cold_read_slowdown` tells whether it worked.
    Introduced in notebooks/03_pydataset_autoencoder.ipynb.

    >>> drop_from_page_cache([__file__]) in (True, False)
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
    """Read the files to the end; the number of bytes read.

    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """
    total = 0
    for path in paths:
        with open(path, "rb") as f:
            while block := f.read(chunk):
                total += len(block)
    return total


def cold_read_slowdown(paths: list[str | Path], repeats: int = 3) -> PairedRatio:
    """Seconds to read `paths` just after dropping them from the cache, over seconds to read them
    again at once (cached), in alternating pairs. About 1 means the drop did not work here (or
    the disk is as fast as memory); several times means cold reads really reach the disk.

    Introduced in notebooks/03_pydataset_autoencoder.ipynb.
    """
    def cold():
        drop_from_page_cache(paths)
        read_files(paths)

    return paired_ratio(cold, lambda: read_files(paths), repeats=repeats, warmup=1)
