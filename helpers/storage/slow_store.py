"""A slow store, on purpose: a folder served read-only through FUSE with the waits of a network disk, a bucket or
Colab's Google Drive mount (each a FUSE file system or a remote one), so that `tf.data` reads it natively
(`TFRecordDataset`, `tf.io.read_file`, `tf.io.gfile`) and pays, on every epoch, what such a store costs.

    with mounted_slow_store("data/shards", open_latency_ms=30, read_latency_ms=5, bandwidth_mb_s=100) as store:
        ds = tf.data.TFRecordDataset(sorted(str(p) for p in store.glob("*.tfrecord")))

The store's costs, in the server:
- every `open` waits `open_latency_ms` (time to first byte: a request, a round trip, a metadata look-up);
- every read request waits `read_latency_ms`, then its bytes pass through one link of `bandwidth_mb_s` shared by
  all reads, first come first served (the waits of up to 10 concurrent requests overlap, as on a real store;
  bandwidth does not);
- `direct_io`: the kernel caches no file contents, so a second epoch pays the same as the first.

Only regular files and folders are served, read-only. Paths are walked one component at a time from the source
folder without following any symlink (a symlink is not served at all), so nothing outside the source is reachable.
The server runs in a child process (its Python threads do not compete with the reader's for a GIL), mounts on a
new folder it creates itself, and unmounts and removes it when stopped or when the process that started it dies;
the reader removes it too, whatever became of the server. The server runs in a session of its own
(`helpers.setup.processes.own_session`), so that a SIGKILL of the reader's whole process group (Jupyter's restart)
leaves it alive to clean up.

    python -m helpers.storage.slow_store SOURCE MOUNTPOINT --open-latency-ms 30 --read-latency-ms 5 --bandwidth-mb-s 100

MOUNTPOINT must not exist (it is created, then removed at exit) and must not be inside SOURCE; stop with Ctrl-C.
"""
from __future__ import annotations

import argparse
import contextlib
import errno
import functools
import os
import re
import secrets
import shutil
import signal
import stat
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Iterator

# Moving to helpers/setup/processes.py; imported from where it is today.
from helpers.setup.processes import PARENT_ENV, READY, ChildProcesses

FUSERMOUNT = "fusermount3"
_WRITE_FLAGS = os.O_WRONLY | os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_TRUNC
_STAT_KEYS = ("st_mode", "st_nlink", "st_size", "st_uid", "st_gid", "st_atime", "st_mtime", "st_ctime")
_FOLLOW_NONE = os.O_NOFOLLOW | getattr(os, "O_CLOEXEC", 0)


class SlowStoreError(RuntimeError):
    """The slow store could not be mounted, or was given bad arguments."""


# --- where it can run --------------------------------------------------------------------------------------------

def _missing_requirement() -> str | None:
    """Why this machine cannot mount a FUSE file system (one sentence), or None. Cheap: no mount is tried."""
    if not sys.platform.startswith("linux"):
        return (f"The slow store needs FUSE on Linux, and this is {sys.platform} (macOS and Windows have no FUSE "
                f"by default): to see it, run this notebook on Linux with the fuse3 package, or on Windows inside "
                f"WSL 2.")
    if not os.path.exists("/dev/fuse"):
        return "This machine (or container) has no /dev/fuse, so it cannot mount a FUSE file system."
    if not os.access("/dev/fuse", os.R_OK | os.W_OK):
        return "This user may not open /dev/fuse, so it cannot mount a FUSE file system."
    if shutil.which(FUSERMOUNT) is None:
        return f"{FUSERMOUNT} is missing: install the fuse3 package (Debian and Ubuntu: apt-get install fuse3)."
    try:
        import mfusepy  # noqa: F401  (loads libfuse through ctypes)
    except ImportError:
        return "The Python package mfusepy is missing: pip install mfusepy."
    except (OSError, EnvironmentError) as e:
        return f"mfusepy could not load libfuse ({e}): install the fuse3 package."
    return None


@functools.lru_cache(maxsize=1)
def slow_store_available() -> tuple[bool, str]:
    """(True, "") where a slow store mounts here, else (False, the reason in one sentence). The first call tries a
    real mount of an empty folder (about a second), so that a container that forbids mounting says so too."""
    reason = _missing_requirement()
    if reason:
        return False, reason
    with tempfile.TemporaryDirectory(prefix="slow-store-trial-") as empty:
        try:
            with mounted_slow_store(empty, open_latency_ms=0, read_latency_ms=0, bandwidth_mb_s=None) as mount:
                os.listdir(mount)
        except (SlowStoreError, OSError) as e:
            lines = [line.strip() for line in str(e).splitlines() if line.strip()]
            said = [line for line in lines if "fuse" in line.lower() and "did not mount" not in line] or lines[-1:]
            return False, f"Mounting a FUSE file system failed here ({said[0] if said else type(e).__name__})."
    return True, ""


# --- the server (runs in the child process) ----------------------------------------------------------------------

class SharedLink:
    """One link of `bandwidth` bytes/s that every read's bytes pass through in turn (first come, first served):
    a read of n bytes finishes n / bandwidth seconds after the link is free, so concurrent reads share it."""

    def __init__(self, bandwidth: float | None) -> None:
        self.bandwidth = bandwidth
        self._free_at = 0.0
        self._lock = threading.Lock()

    def transmit(self, nbytes: int) -> None:
        if not self.bandwidth or nbytes <= 0:
            return
        with self._lock:
            start = max(time.monotonic(), self._free_at)
            self._free_at = done = start + nbytes / self.bandwidth
        _sleep_until(done)


def _sleep_until(deadline: float) -> None:
    """Sleep until `deadline` (time.monotonic), never less: a latency is a lower bound."""
    while (left := deadline - time.monotonic()) > 0:
        time.sleep(left)


def _wait(seconds: float) -> None:
    if seconds > 0:
        _sleep_until(time.monotonic() + seconds)


def path_parts(path: str) -> list[str]:
    """The components of a path inside the store; '..' (or '.') anywhere is refused, so no path climbs out.

    >>> path_parts("/a/b.tfrecord"), path_parts("/")
    (['a', 'b.tfrecord'], [])
    >>> path_parts("/a/../../etc/passwd")
    Traceback (most recent call last):
    ...
    PermissionError: [Errno 13] the slow store refuses '..' and '.' in a path: '/a/../../etc/passwd'
    """
    parts = [p for p in path.split("/") if p]
    if any(p in (".", "..") for p in parts):
        raise PermissionError(errno.EACCES, f"the slow store refuses '..' and '.' in a path: {path!r}")
    return parts


class SourceFolder:
    """Files and folders under one source folder, reached component by component from an open descriptor of it
    (`openat` with `O_NOFOLLOW`): a symlink anywhere on the way is not followed, so nothing outside is reached."""

    def __init__(self, source: str) -> None:
        # The source's own path is the caller's choice (a symlink to a data disk is fine); nothing below it follows one.
        self.fd = os.open(os.path.realpath(source), os.O_RDONLY | os.O_DIRECTORY | getattr(os, "O_CLOEXEC", 0))

    @contextlib.contextmanager
    def parent_of(self, path: str) -> Iterator[tuple[int, str | None]]:
        """(descriptor of the folder holding `path`, its last component); (the source's, None) for the root."""
        parts = path_parts(path)
        fd = os.dup(self.fd)
        try:
            for part in parts[:-1]:
                try:
                    child = os.open(part, os.O_RDONLY | os.O_DIRECTORY | _FOLLOW_NONE, dir_fd=fd)
                except OSError as e:   # a symlink gives ELOOP or ENOTDIR: it is not there, for the store
                    raise FileNotFoundError(errno.ENOENT, f"{path}: {e.strerror}") from None
                os.close(fd)
                fd = child
            yield fd, (parts[-1] if parts else None)
        finally:
            os.close(fd)

    def lstat(self, path: str) -> os.stat_result:
        """The entry's own status; only regular files and folders exist for the store."""
        with self.parent_of(path) as (fd, name):
            st = os.stat(fd) if name is None else os.stat(name, dir_fd=fd, follow_symlinks=False)
        if not (stat.S_ISREG(st.st_mode) or stat.S_ISDIR(st.st_mode)):
            raise FileNotFoundError(errno.ENOENT, f"{path}: not a regular file or a folder")
        return st

    def open_file(self, path: str) -> int:
        """A read-only descriptor of the regular file at `path` (never through a symlink)."""
        with self.parent_of(path) as (fd, name):
            if name is None:
                raise IsADirectoryError(errno.EISDIR, path)
            try:
                file = os.open(name, os.O_RDONLY | _FOLLOW_NONE, dir_fd=fd)
            except OSError as e:
                raise FileNotFoundError(errno.ENOENT, f"{path}: {e.strerror}") from None
        if not stat.S_ISREG(os.fstat(file).st_mode):
            os.close(file)
            raise FileNotFoundError(errno.ENOENT, f"{path}: not a regular file")
        return file

    def list(self, path: str) -> list[str]:
        """The regular files and folders in the folder at `path` (symlinks and devices left out)."""
        with self.parent_of(path) as (fd, name):
            folder = os.dup(fd) if name is None else os.open(name, os.O_RDONLY | os.O_DIRECTORY | _FOLLOW_NONE,
                                                             dir_fd=fd)
        try:
            names = []
            for entry in os.listdir(folder):
                mode = os.stat(entry, dir_fd=folder, follow_symlinks=False).st_mode
                if stat.S_ISREG(mode) or stat.S_ISDIR(mode):
                    names.append(entry)
            return names
        finally:
            os.close(folder)


def _operations(source: str, *, open_latency: float, read_latency: float, bandwidth: float | None):
    """The FUSE operations of a read-only, slow view of `source` (built here: mfusepy loads libfuse on import)."""
    import mfusepy

    def refuse(*_args, **_kwargs):
        raise mfusepy.FuseOSError(errno.EROFS)

    def as_fuse_error(method):
        """OSErrors become the errno FUSE answers with (ENOENT for anything not served)."""
        @functools.wraps(method)
        def wrapped(self, *args, **kwargs):
            try:
                return method(self, *args, **kwargs)
            except mfusepy.FuseOSError:
                raise
            except OSError as e:
                raise mfusepy.FuseOSError(e.errno or errno.EIO) from None
        return wrapped

    class SlowStore(mfusepy.Operations):
        use_ns = True

        def __init__(self) -> None:
            self.folder = SourceFolder(source)
            self.link = SharedLink(bandwidth)
            self.served = threading.Event()

        def init(self, path):
            self.served.set()
            print(READY, flush=True)   # the mount is up; the kernel's first requests follow this answer

        @as_fuse_error
        def getattr(self, path, fh=None):
            st = self.folder.lstat(path)
            attrs = {key: getattr(st, key) for key in _STAT_KEYS}
            attrs.update(st_atime=st.st_atime_ns, st_mtime=st.st_mtime_ns, st_ctime=st.st_ctime_ns,
                         st_mode=st.st_mode & ~0o222)   # read-only, as the store is
            return attrs

        @as_fuse_error
        def access(self, path, amode):
            self.folder.lstat(path)
            if amode & os.W_OK:
                raise mfusepy.FuseOSError(errno.EROFS)
            return 0

        @as_fuse_error
        def readdir(self, path, fh):
            return [".", "..", *self.folder.list(path)]

        @as_fuse_error
        def open(self, path, flags):
            if flags & _WRITE_FLAGS:
                raise mfusepy.FuseOSError(errno.EROFS)
            _wait(open_latency)   # time to first byte of a new file
            return self.folder.open_file(path)

        @as_fuse_error
        def read(self, path, size, offset, fh):
            _wait(read_latency)   # each request's round trip
            data = os.pread(fh, size, offset)
            self.link.transmit(len(data))
            return data

        def release(self, path, fh):
            os.close(fh)
            return 0

        @as_fuse_error
        def statfs(self, path):
            sv = os.statvfs(self.folder.fd)
            return {key: getattr(sv, key) for key in ("f_bsize", "f_frsize", "f_blocks", "f_bfree", "f_bavail",
                                                      "f_files", "f_ffree", "f_favail", "f_namemax")}

        # Every change is refused (the mount is read-only too: the kernel refuses most before they get here).
        create = write = truncate = unlink = mkdir = rmdir = rename = symlink = link = refuse
        chmod = chown = utimens = mknod = setxattr = removexattr = refuse

    return SlowStore()


def _parent() -> int | None:
    """The process id of the process that started this server (`BTM_PARENT`), or None if started by hand."""
    pid, _, _ = os.environ.get(PARENT_ENV, "").partition(":")
    return int(pid) if pid.isdigit() else None


def _stop_when_parent_dies(mountpoint: str) -> None:
    """In the server started by `mounted_slow_store`: when the process that started it dies, leave the FUSE loop,
    so that `serve` unmounts and removes the mount point (`helpers.setup.processes.exit_with_parent` would `_exit`
    at once and leave them behind). The parent comes from `BTM_PARENT` (see there). A watcher thread notices
    (within 0.2 s), unmounts from outside, which ends libfuse's loop, removes the empty mount point and ends the
    server. No parent-death signal: Linux sends it again each time a dying parent's threads hand the server on to
    another of its threads, and after the first has ended libfuse's loop, libfuse puts back the default action,
    so the next would kill the server before its clean-up."""
    parent = _parent()
    if parent is None:
        return   # started by hand: Ctrl-C stops it

    def watch():
        while os.getppid() == parent:
            time.sleep(0.2)
        while is_mounted(mountpoint):
            unmount(mountpoint)
            time.sleep(0.1)
        remove_mountpoint(mountpoint)
        os._exit(1)

    threading.Thread(target=watch, daemon=True, name="stop-with-parent").start()


def serve(source: str, mountpoint: str, *, open_latency_ms: float, read_latency_ms: float,
          bandwidth_mb_s: float | None) -> None:
    """Mount the slow view of `source` on `mountpoint` (created here: it must not exist) and serve until SIGTERM
    or SIGINT; then unmount and remove the mount point."""
    import mfusepy

    # Absolute from here on: libfuse changes this process's working folder, and the clean-up must find the folder.
    source, mountpoint = os.path.abspath(source), os.path.abspath(mountpoint)
    _check_arguments(source, open_latency_ms, read_latency_ms, bandwidth_mb_s)
    _check_mountpoint(source, mountpoint)

    def stop(signum, frame):   # until libfuse takes over SIGTERM (the finally below then removes the folder)
        raise SystemExit(128 + signum)

    signal.signal(signal.SIGTERM, stop)
    try:
        os.mkdir(mountpoint, 0o755)   # fails if anything is there: never mount over an existing folder
    except FileExistsError:
        raise SlowStoreError(f"{mountpoint} already exists: the slow store mounts only on a folder it creates "
                             f"itself") from None
    try:
        _stop_when_parent_dies(mountpoint)
        operations = _operations(source, open_latency=open_latency_ms / 1e3, read_latency=read_latency_ms / 1e3,
                                 bandwidth=None if bandwidth_mb_s is None else bandwidth_mb_s * 1e6)
        # libfuse installs its SIGTERM handler (leave the loop, unmount) only over the default one.
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        # auto_unmount: fusermount3 unmounts even if this process is killed outright; direct_io: no page cache.
        try:
            # The mount point is absolute, so a name starting with '-' is never read as an option.
            mfusepy.FUSE(operations, mountpoint, foreground=True, nothreads=False, ro=True, direct_io=True,
                         auto_unmount=True, subtype="slowstore", fsname=fuse_option_value(f"slow-store:{source}"))
        except RuntimeError:   # libfuse's status: not 0 when a signal ended the loop, which is how it stops
            if not operations.served.is_set():
                raise
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)   # a late SIGTERM must not cut the clean-up short
        if is_mounted(mountpoint):
            unmount(mountpoint)
        remove_mountpoint(mountpoint)


def fuse_option_value(text: str) -> str:
    """`text` as one value in FUSE's comma-separated `-o` list: libfuse reads a backslash as "the next character
    as it is", so a comma in a folder's name stays in the name instead of starting another option.

    >>> fuse_option_value("slow-store:/data/x,allow_other")
    'slow-store:/data/x\\\\,allow_other'
    """
    return text.replace("\\", "\\\\").replace(",", "\\,")


def _check_mountpoint(source: str, mountpoint: str) -> None:
    """Refuse a mount point inside the source (through symlinks too): the store would hold itself, and a walk over
    it would never end."""
    real_source, real_mountpoint = os.path.realpath(source), os.path.realpath(mountpoint)
    if os.path.commonpath([real_source, real_mountpoint]) == real_source:
        raise SlowStoreError(f"the mount point {mountpoint} is inside the source {source} ({real_mountpoint} in "
                             f"{real_source}): the store would contain itself; mount it outside the folder it serves"
                             + (" (the temporary folder is inside it: set TMPDIR to a folder outside)"
                                if real_mountpoint.startswith(os.path.realpath(tempfile.gettempdir()) + os.sep)
                                else ""))


def _check_arguments(source, open_latency_ms, read_latency_ms, bandwidth_mb_s) -> None:
    if not os.path.isdir(source):
        raise SlowStoreError(f"{source}: the slow store's source must be an existing folder")
    for name, value in (("open_latency_ms", open_latency_ms), ("read_latency_ms", read_latency_ms)):
        if not (value >= 0):
            raise SlowStoreError(f"{name} must be 0 or more, not {value!r}")
    if bandwidth_mb_s is not None and not (bandwidth_mb_s > 0):
        raise SlowStoreError(f"bandwidth_mb_s must be more than 0 (or None: unlimited), not {bandwidth_mb_s!r}")


# --- the reader's side -------------------------------------------------------------------------------------------

def unmount(mountpoint: str | Path) -> None:
    """Unmount a slow store left mounted (lazily: a reader still inside lets go first)."""
    subprocess.run([FUSERMOUNT, "-u", "-z", str(mountpoint)], check=False, capture_output=True)


def remove_mountpoint(mountpoint: str | Path, patience: float = 10.0) -> None:
    """Remove the (empty) mount point once nothing is mounted on it; rmdir removes nothing else. While an unmount
    is still under way rmdir may answer EBUSY: try again for up to `patience` seconds (a lazy unmount of a store
    whose reader was killed mid-read stayed busy for more than 2 s once, under load in CI)."""
    deadline = time.monotonic() + patience
    while True:
        try:
            os.rmdir(mountpoint)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            if e.errno != errno.EBUSY or time.monotonic() > deadline:
                return   # not empty (never ours to empty) or still busy: left in place, named by nothing else
            if is_mounted(mountpoint):
                unmount(mountpoint)
            time.sleep(0.05)


def is_mounted(path: str | Path) -> bool:
    """Whether something is mounted at `path`, from the kernel's table: unlike `os.path.ismount`, true also of a
    FUSE mount whose server has died (`stat` then fails with "Transport endpoint is not connected")."""
    target = os.path.abspath(path)
    try:
        with open("/proc/self/mountinfo", encoding="utf-8", errors="surrogateescape") as table:
            for line in table:
                point = line.split()[4]   # octal escapes for space, tab, newline and backslash
                point = re.sub(r"\\([0-7]{3})", lambda m: chr(int(m[1], 8)), point)
                if point == target:
                    return True
    except OSError:
        return os.path.ismount(target)
    return False


@contextlib.contextmanager
def mounted_slow_store(source_dir: str | Path, *, open_latency_ms: float = 30, read_latency_ms: float = 5,
                       bandwidth_mb_s: float | None = 100) -> Iterator[Path]:
    """Serve `source_dir` read-only through a slow FUSE store in a child process; yield the mount's path.

    - `open_latency_ms`: every file open waits this long (time to first byte);
    - `read_latency_ms`: every read request waits this long, concurrent requests overlapping;
    - `bandwidth_mb_s`: MB/s (10^6 bytes) shared by all reads; None for no limit.

    The defaults are a bucket's or a network disk's seen from a machine near it, the series' one setting
    (notebook 04 explains them; 05, 07 and the benchmarks use them unchanged).

    The mount point is a new folder in the temporary folder; the store unmounts and removes it when the block ends,
    when the reader crashes, and when this process dies (the child notices). Raises `SlowStoreError` where it
    cannot mount; `slow_store_available()` says why beforehand."""
    source = os.path.abspath(source_dir)
    _check_arguments(source, open_latency_ms, read_latency_ms, bandwidth_mb_s)
    reason = _missing_requirement()
    if reason:
        raise SlowStoreError(reason)
    # A fresh, random name, made by nobody yet: the server creates the folder (mkdir fails if anything is there), so
    # no instant exists in which this process has made a folder that no one would remove if it were killed.
    mountpoint = os.path.join(tempfile.gettempdir(), f"slow-store-{secrets.token_hex(8)}")
    try:
        _check_mountpoint(source, mountpoint)
        package_root = str(Path(__file__).resolve().parents[2])   # the child imports these helpers, not a copy
        python_path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
        args = ["-m", "helpers.storage.slow_store", source, mountpoint, "--open-latency-ms", str(open_latency_ms),
                "--read-latency-ms", str(read_latency_ms)]
        if bandwidth_mb_s is not None:
            args += ["--bandwidth-mb-s", str(bandwidth_mb_s)]
        with ChildProcesses() as children:
            try:
                try:
                    children.start("slow-store", args, env={"PYTHONPATH": python_path}, ready_timeout=30)
                    _wait_until_mounted(mountpoint, children.processes["slow-store"])
                except RuntimeError as e:
                    raise SlowStoreError(f"the slow store of {source} did not mount: {e}") from None
                yield Path(mountpoint)
            finally:
                if "slow-store" in children.processes:   # SIGTERM: libfuse leaves its loop and unmounts
                    children.stop("slow-store", grace=10)
    finally:   # whatever became of the server (killed while it started, too), nothing of it stays
        if is_mounted(mountpoint):   # a server killed before it could: its fusermount3 or this unmounts
            unmount(mountpoint)
        with contextlib.suppress(OSError):
            if os.lstat(mountpoint).st_uid == os.geteuid():   # the server's (this user's, under a random name)
                remove_mountpoint(mountpoint)


def _wait_until_mounted(mountpoint: str, process: subprocess.Popen, timeout: float = 10) -> None:
    deadline = time.monotonic() + timeout
    while not is_mounted(mountpoint):
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"{mountpoint} was not mounted within {timeout:.0f} s")
        time.sleep(0.01)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m helpers.storage.slow_store",
                                     description="Serve a folder read-only through FUSE, slowly, as a network "
                                                 "store would (see the module's docstring).")
    parser.add_argument("source", help="the folder to serve")
    parser.add_argument("mountpoint", help="where to mount it: a path outside the source that does not exist yet "
                                           "(created, then removed)")
    parser.add_argument("--open-latency-ms", type=float, default=30.0, help="wait per file open (default 30)")
    parser.add_argument("--read-latency-ms", type=float, default=5.0, help="wait per read request (default 5)")
    parser.add_argument("--bandwidth-mb-s", type=float, default=None,
                        help="MB/s shared by all reads (default: no limit)")
    args = parser.parse_args(argv)
    reason = _missing_requirement()
    if reason:
        print(reason, file=sys.stderr)
        return 2
    try:
        serve(args.source, args.mountpoint, open_latency_ms=args.open_latency_ms,
              read_latency_ms=args.read_latency_ms, bandwidth_mb_s=args.bandwidth_mb_s)
    except SlowStoreError as e:
        print(e, file=sys.stderr)
        return 2
    except RuntimeError as e:   # mfusepy: libfuse's fuse_main failed, after printing why
        print(f"the FUSE mount of {args.source} on {args.mountpoint} failed ({e}); libfuse's message is above",
              file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
