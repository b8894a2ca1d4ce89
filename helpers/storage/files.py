"""Small file utilities the other helpers share: names, checksums, fingerprints, safe writes, locks.

Every writer in `helpers` goes through these, so that:

- a name read from a file (a manifest, a label file) is never used as a path unless it is one
  plain file name (`check_name`);
- a file is written under a fresh temporary name in the same folder and renamed into place
  (`write_then_rename`), so a reader sees the old file or the whole new one, and a symlink
  planted at the temporary or the final name is never written through;
- two processes working in one folder take turns (`FileLock`).
"""
from __future__ import annotations

import contextlib
import errno
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


def check_name(name: str, what: str) -> str:
    """Return `name` if it is one plain file-name component; raise `ValueError` naming `what` if not.

    Refuses separators, `..`, absolute paths and empty names, so a value read from a file or
    passed as a split name can never point outside its folder. Introduced in
    notebooks/02_tfrecord_conversion.ipynb.

    >>> check_name("train", "split name")
    'train'
    >>> check_name("../escape", "split name")
    Traceback (most recent call last):
    ...
    ValueError: split name '../escape' must be one plain name (letters, digits, '.', '_', '-'; no '/' or '..')
    """
    if not isinstance(name, str) or not _NAME.fullmatch(name) or ".." in name:
        raise ValueError(f"{what} {name!r} must be one plain name (letters, digits, '.', '_', '-'; no '/' or '..')")
    return name


def sha256_of(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of a file, read in chunks. Introduced in notebooks/02_tfrecord_conversion.ipynb.

    >>> len(sha256_of(__file__))
    64
    """
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
    for array in arrays:
        array = np.ascontiguousarray(array)
        digest.update(f"{array.dtype.str}{array.shape}".encode())
        digest.update(memoryview(array).cast("B"))
    return digest.hexdigest()[:16]


def is_regular_file(path: str | Path) -> bool:
    """True for a regular file (following symlinks); False for a folder, FIFO, device or nothing.

    Opening a FIFO blocks until someone writes to it, so readers check this first.

    >>> is_regular_file(__file__), is_regular_file(Path(__file__).parent)
    (True, False)
    """
    try:
        return stat.S_ISREG(os.stat(path).st_mode)
    except OSError:
        return False


def file_problem(path: str | Path) -> str | None:
    """None for a regular file (following symlinks); otherwise what is there instead, in words for an
    error message: "missing", "a broken symlink", "a symlink loop", "a folder", "a FIFO", a device.

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
        if e.errno == errno.ENOENT:
            return "missing"
        return f"unreadable ({e.strerror})"
    if stat.S_ISREG(mode):
        return None
    kinds = [(stat.S_ISDIR, "a folder"), (stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISCHR, "a character device"),
             (stat.S_ISBLK, "a block device"), (stat.S_ISSOCK, "a socket")]
    kind = next((name for test, name in kinds if test(mode)), "not a regular file")
    target = f" (a symlink to {os.path.realpath(path)})" if os.path.islink(path) else ""
    return f"{kind}{target}, not a file"


def temporary_name(path: str | Path) -> Path:
    """A fresh name beside `path` for writing it: `NAME.<random>.partial`."""
    path = Path(path)
    return path.with_name(f"{path.name}.{secrets.token_hex(4)}.partial")


def temporaries_of(path: str | Path) -> list[Path]:
    """Temporary files `write_then_rename` left beside `path` (a run killed mid-write leaves one)."""
    path = Path(path)
    return sorted(path.parent.glob(f"{_glob_escape(path.name)}.*.partial"))


def stale_temporaries(directory: str | Path, final_name: str) -> list[Path]:
    """Temporary files in `directory` that `write_then_rename` left for final names matching the
    regular expression `final_name` (a run killed mid-write leaves one): `<final>.<8 hex>.partial`.

    A writer removes only its own: the pattern names exactly the files it writes, so the
    temporaries of another split, prefix or format in the same folder (`train-extra-…` beside
    `train-…`, block files beside record files) are never touched.

    >>> import tempfile
    >>> d = Path(tempfile.mkdtemp())
    >>> for name in ("train-00000.x.0123abcd.partial", "train-extra-00000.x.0123abcd.partial"):
    ...     _ = (d / name).write_text("")
    >>> [p.name for p in stale_temporaries(d, r"train-\d{5}\.x")]
    ['train-00000.x.0123abcd.partial']
    """
    pattern = re.compile(rf"(?:{final_name})\.[0-9a-f]{{8}}\.partial")
    directory = Path(directory)
    if not directory.is_dir():
        return []
    return sorted(p for p in directory.iterdir() if pattern.fullmatch(p.name))


def _glob_escape(name: str) -> str:
    """`name` with glob's special characters escaped (names from `check_name` have none, but be safe)."""
    return re.sub(r"([*?\[])", r"[\1]", name)


@contextlib.contextmanager
def write_then_rename(path: str | Path) -> Iterator[Path]:
    """Give a new, empty temporary file beside `path`; when the block ends, rename it to `path`.

    The temporary file is created with `O_CREAT | O_EXCL`, which fails rather than follow a
    symlink, and `os.replace` replaces a symlink at `path` instead of writing through it. If the
    block raises, the temporary file is removed and `path` is untouched.

    >>> import tempfile
    >>> target = Path(tempfile.mkdtemp()) / "hello.txt"
    >>> with write_then_rename(target) as tmp:
    ...     _ = tmp.write_text("hello")
    >>> target.read_text()
    'hello'
    """
    path = Path(path)
    tmp = temporary_name(path)
    os.close(os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o666))  # mode 0o666 minus the umask
    try:
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    """Write `data` to a temporary file, then rename: a reader sees the old file or the whole new one."""
    with write_then_rename(path) as tmp:
        tmp.write_bytes(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    """`atomic_write_bytes` for UTF-8 text. Introduced in notebooks/02_tfrecord_conversion.ipynb."""
    atomic_write_bytes(path, text.encode("utf-8"))


class LockHeldError(RuntimeError):
    """Another process holds the lock. The message names the lock file and the holder."""


class FileLock:
    """An exclusive lock on `path` (created if missing) for one process at a time.

    `wait=False` raises `LockHeldError` naming the holder's process id at once when the lock
    is taken; `wait=True` waits for it. The lock file is opened without following symlinks,
    and the operating system releases the lock when its holder exits, even after `kill -9`.

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
