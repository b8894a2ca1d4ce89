"""File utilities every writer in `helpers` goes through: a name read from a file is used as a path only if it
is one plain file name (`check_name`); a file is written under a fresh temporary name beside it and renamed
into place (`write_then_rename`), never through a symlink; two processes take turns (`FileLock`).
"""
from __future__ import annotations

import contextlib
import errno
import glob
import hashlib
import os
import re
import secrets
import stat
from pathlib import Path
from typing import Iterator

import numpy as np

try:  # POSIX: Linux, macOS, Colab
    import fcntl
except ImportError:  # Windows
    fcntl = None
    import msvcrt

# One path component: starts with a letter or digit, then letters, digits, '.', '_' or '-'.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")
# The first 8 bytes of every PNG file: PNG folders check files by it, TFRecord shards the PNG records they hold.
PNG_SIGNATURE = b"\x89PNG\r\n\x1a\n"


def check_name(name: str, what: str) -> str:
    """Return `name` if it is one plain file-name component (no separator, no `..`); `ValueError` naming `what`
    if not.

    >>> check_name("../escape", "split name")
    Traceback (most recent call last):
    ...
    ValueError: split name '../escape' must be one plain name (letters, digits, '.', '_', '-'; no '/' or '..')
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"{what} {name!r} must be one plain name (letters, digits, '.', '_', '-'; no '/' or '..')")
    return name


def sha256_of(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            digest.update(block)
    return digest.hexdigest()


def fingerprint_arrays(*arrays: np.ndarray) -> str:
    """A short SHA-256 of arrays' dtypes, shapes and bytes, to tell one data source from another.

    >>> fingerprint_arrays(np.zeros(3)) == fingerprint_arrays(np.zeros(3))
    True
    """
    digest = hashlib.sha256()
    for array in map(np.ascontiguousarray, arrays):
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()[:16]


def file_problem(path: str | Path) -> str | None:
    """None for a regular file (following symlinks); otherwise what is there instead, in words for an error
    message ("missing", "a broken symlink", "a symlink loop", "a folder", "a FIFO", a device). Opens nothing.

    >>> file_problem(__file__) is None, file_problem(Path(__file__).parent), file_problem("/no/such/file")
    (True, 'a folder, not a file', 'missing')
    """
    try:
        mode = os.stat(path).st_mode
    except OSError as e:
        if e.errno == errno.ELOOP:
            return "a symlink loop, not a file"
        if os.path.islink(path):
            return f"a broken symlink (to {os.readlink(path)!r})"
        return "missing" if e.errno == errno.ENOENT else f"unreadable ({e.strerror})"
    if stat.S_ISREG(mode):
        return None
    kinds = [(stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    target = f" (a symlink to {os.path.realpath(path)})" if os.path.islink(path) else ""
    return f"{kind}{target}, not a file"


def is_regular_file(path: str | Path) -> bool:
    """True for a regular file (following symlinks). Check before opening: opening a FIFO blocks."""
    return file_problem(path) is None


def temporaries_of(path: str | Path) -> list[Path]:
    """Temporary files `write_then_rename` left beside `path` (a run killed mid-write leaves one)."""
    path = Path(path)
    return sorted(path.parent.glob(f"{glob.escape(path.name)}.*.partial"))


def stale_temporaries(directory: str | Path, final_name: str) -> list[Path]:
    """Temporary files `write_then_rename` left in `directory` for final names matching the regular expression
    `final_name`, and no others: a writer removes only its own.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> for name in ("train-00000.x.0123abcd.partial", "train-extra-00000.x.0123abcd.partial"):
    ...     _ = (d / name).write_text("")
    >>> [p.name for p in stale_temporaries(d, r"train-\d{5}\.x")]
    ['train-00000.x.0123abcd.partial']
    """
    pattern, directory = re.compile(rf"(?:{final_name})\.[0-9a-f]{{8}}\.partial"), Path(directory)
    return sorted(p for p in directory.iterdir() if pattern.fullmatch(p.name)) if directory.is_dir() else []


def _flush_to_disk(fd: int) -> None:
    """Ask the disk to keep what `fd` wrote (macOS's `fsync` stops at the drive's cache: F_FULLFSYNC does not)."""
    if fcntl is not None and hasattr(fcntl, "F_FULLFSYNC"):
        try:
            fcntl.fcntl(fd, fcntl.F_FULLFSYNC)
            return
        except OSError:
            pass
    os.fsync(fd)


def sync_file(path: str | Path) -> None:
    """Flush a file's bytes to the disk (the file, never a symlink's target)."""
    fd = os.open(path, (os.O_RDWR if os.name == "nt" else os.O_RDONLY) | getattr(os, "O_NOFOLLOW", 0))
    try:
        _flush_to_disk(fd)
    finally:
        os.close(fd)


def sync_folder(folder: str | Path) -> None:
    """Flush a folder's entries (names made, renamed or removed) to the disk. Windows opens no folder, and NTFS
    journals its names itself; a file system that cannot sync a folder (EINVAL) is left as it is."""
    if os.name == "nt":
        return
    fd = os.open(folder, os.O_RDONLY | getattr(os, "O_DIRECTORY", 0))
    try:
        _flush_to_disk(fd)
    except OSError as e:
        if e.errno not in (errno.EINVAL, errno.ENOTSUP, errno.EOPNOTSUPP):
            raise
    finally:
        os.close(fd)


def sync_all() -> None:
    """Flush every file written so far to the disk, at once: what a writer of many small files (`durable=False`)
    does before it writes the record that says they are complete. Nothing on Windows, which lacks it."""
    if hasattr(os, "sync"):
        os.sync()


@contextlib.contextmanager
def write_then_rename(path: str | Path, *, durable: bool = True) -> Iterator[Path]:
    """Give a new, empty temporary file `NAME.<random>.partial` beside `path`; rename it to `path` when the block
    ends. If the block raises, the temporary file is removed and `path` is untouched. A symlink at either name
    is never written through (`O_EXCL` refuses one; `os.replace` replaces one). The file is flushed to the disk
    before the rename and its folder after it, so that the final name means the whole file after a power cut
    too, not only after a killed process (without the first flush, a file system may commit the rename before
    the bytes and leave an empty or short file under the final name). Each flush waits for the disk (about 3 to
    10 ms): a writer of thousands of small files passes `durable=False`, checks each file's completeness when
    it resumes, and calls `sync_all()` once before its final record.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "hello.txt"
    >>> with write_then_rename(target) as tmp:
    ...     _ = tmp.write_text("hello")
    >>> target.read_text()
    'hello'
    """
    path = Path(path)
    tmp = path.with_name(f"{path.name}.{secrets.token_hex(4)}.partial")
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # mode 0o666 minus the umask
    try:
        yield tmp
        if durable:
            sync_file(tmp)           # the bytes reach the disk before the name does
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    if durable:
        sync_folder(path.parent)     # and the rename itself


def atomic_write_bytes(path: str | Path, data: bytes, *, durable: bool = True) -> None:
    """Write `data` with `write_then_rename`: a reader sees the old file or the whole new one."""
    with write_then_rename(path, durable=durable) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | Path, text: str, *, durable: bool = True) -> None:
    """`atomic_write_bytes` for UTF-8 text."""
    atomic_write_bytes(path, text.encode("utf-8"), durable=durable)


class LockHeldError(RuntimeError):
    """Another process holds the lock. The message names the lock file and the holder."""


class FileLock:
    """An exclusive lock on `path` (created if missing, never through a symlink) for one process at a time.

    `wait=False` raises `LockHeldError` naming the holder's process id when the lock is taken; `wait=True`
    waits. The operating system releases the lock when its holder exits, even after `kill -9`.

    >>> import tempfile
    >>> with FileLock(Path(tempfile.mkdtemp()) / ".lock", "an example"):
    ...     pass
    """

    def __init__(self, path: str | Path, what: str, *, wait: bool = False) -> None:
        self.path, self.what, self.wait = Path(path), what, wait
        self.fd: int | None = None

    def __enter__(self) -> "FileLock":
        fd = os.open(self.path, os.O_RDWR | os.O_CREAT | getattr(os, "O_NOFOLLOW", 0), 0o666)
        try:
            if fcntl is not None:
                fcntl.flock(fd, fcntl.LOCK_EX | (0 if self.wait else fcntl.LOCK_NB))
            else:
                msvcrt.locking(fd, msvcrt.LK_LOCK if self.wait else msvcrt.LK_NBLCK, 1)
        except OSError as e:
            holder = ""
            if fcntl is not None:  # the holder wrote its process id into the file
                os.lseek(fd, 0, os.SEEK_SET)
                holder = os.read(fd, 100).decode(errors="replace").strip()
            os.close(fd)
            if e.errno in (errno.EAGAIN, errno.EACCES, errno.EWOULDBLOCK):
                raise LockHeldError(
                    f"{self.what} is in use by another process ({holder or 'unknown process'}; lock file {self.path}). "
                    f"Wait for it to finish, or write somewhere else."
                ) from None
            raise
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, f"process {os.getpid()}".encode())
        self.fd = fd
        return self

    def __exit__(self, *exc) -> None:
        if self.fd is not None:
            os.close(self.fd)  # closing releases the lock
            self.fd = None
