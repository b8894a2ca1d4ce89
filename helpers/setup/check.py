"""Is this machine ready for the series? One line per check, "ok", "note" or "FAIL", each FAIL naming its fix.

    python -m helpers.setup.check    # before the day: exits with status 1 when a line is FAIL
    lines = run_checks(); print_report(lines)   # the same from Python, in a notebook say

TensorFlow is asked in a child process, never in this one, so the check takes no GPU memory and a notebook
kernel that runs it keeps its own devices. One child imports TensorFlow once (the import is most of the check's
time), reports TensorFlow's and Keras's versions and the GPUs it sees, then starts a tf.data service dispatcher
and a worker on port 0, as notebook 06 does; they stop when the child exits (servers only, no dataset: no GPU
memory is taken, and memory growth is on); last, it asks `budget_unavailable` (helpers.measure, which imports
TensorFlow) whether notebook 05 §8 can hold a child to a memory budget. Another child imports Apache Beam,
Grain and ArrayRecord (notebook 08 imports both at its start). They run at once: 9-10 s here, on 2 cores that other
jobs kept busy (load 6). The data folder is checked by writing a file there (and removing it), not by its permissions.

The README's set-up check; notebook 01's setup points at the command.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from helpers.setup.config import data_dir, quick_mode
from helpers.setup.processes import child_environment

OK, NOTE, FAIL = "ok", "note", "FAIL"
_COLOURS = {OK: "\033[32m", NOTE: "\033[33m", FAIL: "\033[31m"}   # green, yellow, red
INSTALL = "pip install -r requirements.txt -c constraints.txt"
# PowerShell: $env:TUTORIAL_QUICK=1; python -m helpers.setup.check
QUICK_COMMAND = "TUTORIAL_QUICK=1 python -m helpers.setup.check"
CHILD_TIMEOUT = 60   # seconds; a child that takes longer is reported as failed (a cold disk can be slow)

NETWORK_WARNING = (
    "Warning for notebook 06: its tf.data service and multi-worker servers listen on every network interface of "
    "this machine, without authentication (TensorFlow offers no bind address), and a tf.data worker runs any graph "
    "a client sends. Anyone on the same network can reach them while they run: on a shared classroom or café Wi-Fi, "
    "run notebook 06 on a private network, behind a firewall, or on Colab.")


@dataclass(frozen=True)
class Line:
    """One check's verdict: `state` is "ok", "note" (fine, but read it) or "FAIL" (with `fix`: what to do)."""
    name: str
    state: str
    text: str
    fix: str = ""

    def render(self, colour: bool = False) -> str:
        word = f"{self.state:<4}"
        if colour:
            word = f"{_COLOURS[self.state]}{word}\033[0m"
        return f"{word}  {self.name}: {self.text}" + (f" -> fix: {self.fix}" if self.fix else "")


# ---------------------------------------------------------------- what a full run writes

# Derived, not measured: what each notebook leaves in the data folder, as records × bytes per record, from the sizes
# its `pick(quick=..., full=...)` calls choose. Bytes per record: an MNIST image in a TFRecord (784 pixels, a label,
# tf.train.Example's and the TFRecord's framing: about 830 B); a CIFAR-10 image (3,072 + framing: 3,120 B); a CIFAR
# image as a PNG file (about 2,400 B); a photo of notebook 07 (33,900 B: the mean of 200 files `make_photo_folder`
# made here), 27,700 B resized to 96×96×3 in a record, and its original bytes again in a record; a photo-sized
# digit of notebook 05 §8 (224×224×3 bytes + framing).
MNIST, CIFAR, CIFAR_PNG, MNIST_FLOAT = 830, 3_120, 2_400, 784 * 4 + 50
PHOTO, PHOTO_RESIZED = 33_900, 96 * 96 * 3 + 50
PHOTO_SIZED_PIXELS = 224 * 224 * 3
# Notebook 05 §8's `sizes_mib` (MiB of photo-sized digits per split), quick and full (a test keeps them in step with
# the notebook).
PHOTO_SIZED_SPLITS_MIB = {"quick": (32, 1_280), "full": (64, 256, 2_048, 4_096)}


def _photo_sized_records(sizes_mib) -> int:
    return sum(-(-mib * 2**20 // PHOTO_SIZED_PIXELS) for mib in sizes_mib)   # whole images, as 05 writes them


DATA_WRITES = [   # (what, records in quick mode, records in a full run, bytes each)
    ("MNIST and CIFAR-10 files (python -m helpers.data.datasets download)", 0, 1, 190_000_000),
    ("02: MNIST shards", 10_000, 70_000, MNIST),
    ("02: one float per pixel, compared", 1_500, 20_000, MNIST_FLOAT),
    ("02: CIFAR-10 shards", 2_000, 50_000, CIFAR),
    ("03: CIFAR-10 as PNG files", 700, 60_000, CIFAR_PNG),
    ("04: MNIST shards", 8_000, 80_000, MNIST),
    ("04: a disk cache of parsed batches (float32)", 8_000, 80_000, MNIST_FLOAT),
    ("05: the same records in three formats", 3 * 8_000, 3 * 70_000, MNIST),
    ("05 §8: photo-sized digits for the memory budget",
     _photo_sized_records(PHOTO_SIZED_SPLITS_MIB["quick"]), _photo_sized_records(PHOTO_SIZED_SPLITS_MIB["full"]),
     PHOTO_SIZED_PIXELS + 60),
    ("06: shards, Beam's copy, Dataset.save, snapshot", 4 * 2_000, 4 * 70_000, MNIST),
    ("07: photos, resized records, original-bytes records", 320, 20_000, 2 * PHOTO + PHOTO_RESIZED),
    ("99: the checklist's folder of block records", 8_192, 60_000, MNIST),
]


def data_bytes(quick: bool) -> int:
    """What the series writes into the data folder in quick mode or in a full run (derived: `DATA_WRITES`).

    >>> 9e9 < data_bytes(quick=False) < 11e9, 1.2e9 < data_bytes(quick=True) < 2e9
    (True, True)
    """
    return sum((q if quick else f) * each for _, q, f, each in DATA_WRITES)


# ---------------------------------------------------------------- the checks

def check_python() -> Line:
    version = ".".join(map(str, sys.version_info[:3]))
    if sys.version_info >= (3, 10):
        return Line("Python", OK, f"{version} (3.10 or newer; 3.11 is the tested version)")
    return Line("Python", FAIL, f"{version} is older than 3.10",
                "install Python 3.10 or newer (3.11 is tested), make a virtual environment with it, then " + INSTALL)


def _version(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(c for c in piece if c.isdigit()) if piece else ""
        if not digits:
            break
        parts.append(int(digits))
        if not piece.isdigit():   # "0rc1": stop after its number
            break
    return tuple(parts)


def check_tensorflow(probe: dict) -> Line:
    if "error" in probe:
        return Line("TensorFlow", FAIL, f"could not import TensorFlow and Keras ({probe['error']})", INSTALL)
    tf, keras = probe["tensorflow"], probe["keras"]
    if _version(tf) >= (2, 16) and _version(keras) >= (3,):
        return Line("TensorFlow", OK, f"TensorFlow {tf} with Keras {keras} (2.16+ with Keras 3; tested: 2.21, 3.15)")
    return Line("TensorFlow", FAIL, f"TensorFlow {tf} with Keras {keras}: the series needs TensorFlow 2.16 or newer "
                "with Keras 3", INSTALL)


def check_gpu(probe: dict) -> Line:
    if "error" in probe:
        return Line("GPU", FAIL, "not known: TensorFlow did not start (see the TensorFlow line)", INSTALL)
    gpus = probe["gpus"]
    if gpus:
        return Line("GPU", OK, f"{len(gpus)} visible ({', '.join(gpus)}): notebooks 04, 06 and 07 take the GPU branch")
    return Line("GPU", OK, "none visible: the CPU branch, which the whole series runs on (on Colab, Runtime -> "
                "Change runtime type -> GPU shows the GPU branch)")


def _keras_cache() -> Path:
    return Path(os.path.expanduser(os.environ.get("KERAS_HOME") or "~/.keras")) / "datasets"


def check_data() -> Line:
    folder, cache = data_dir(), _keras_cache()
    # (the series' name in the data folder, what Keras's loader leaves in its cache)
    wanted = {"MNIST": ("mnist.npz", "mnist.npz"), "CIFAR-10": ("cifar-10-batches-py", "cifar-10-batches-py-target_archive")}
    missing = [name for name, (ours, keras) in wanted.items()
               if not (folder / ours).exists() and not (cache / ours).exists() and not (cache / keras).exists()]
    if not missing:
        return Line("data", OK, f"MNIST and CIFAR-10 found (in {folder} or Keras's cache {cache})")
    where = f"{' and '.join(missing)} not in {folder} nor in Keras's cache {cache}"
    fix = ("on a machine with network: python -m helpers.data.datasets download (or let the first full run "
           "download them); in a room without network, copy a data/ folder made that way, or set TUTORIAL_DATA_DIR")
    if not quick_mode():   # a class taught in quick mode needs no datasets: say how to check for that
        fix += f"; for a class in quick mode, check with {QUICK_COMMAND} instead"
    if quick_mode():
        return Line("data", NOTE, f"{where}: quick mode uses generated stand-ins instead; a full run needs them. "
                    f"To get them: {fix}")
    return Line("data", FAIL, where, fix)


def write_problem(folder: Path) -> str | None:
    """Why this user cannot write a file in `folder` (a read-only mount, a folder without write permission), or
    None. Tried for real (a permission check says yes to root on a read-only mount): a new file of its own, removed
    at once."""
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".write-check-") as probe:
            probe.write(b"x")
            probe.flush()
    except OSError as e:
        return e.strerror or type(e).__name__
    return None


def check_disk() -> Line:
    folder = data_dir()
    if problem := write_problem(folder):
        return Line("disk", FAIL, f"cannot write in the data folder {folder} ({problem}): every notebook writes there",
                    "make it writable, or point TUTORIAL_DATA_DIR at a folder this user can write")
    free = shutil.disk_usage(folder).free
    full, quick = data_bytes(quick=False), data_bytes(quick=True)
    said = (f"{free / 1e9:.1f} GB free in {folder}; a full run writes about {full / 1e9:.1f} GB there, quick mode "
            f"about {quick / 1e6:,.0f} MB (derived from the notebooks' sizes: helpers/setup/check.py DATA_WRITES)")
    fix = "free space on that disk, or point TUTORIAL_DATA_DIR at a folder on a disk with more room"
    if free >= full:
        return Line("disk", OK, said)
    if free >= quick and quick_mode():
        return Line("disk", NOTE, said + ": enough for quick mode, not for a full run", fix)
    return Line("disk", FAIL, said, fix)


def usable_cores() -> int:
    """The cores this process may run on (a container or `taskset` may allow fewer than the machine has)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def check_cores() -> Line:
    cores = usable_cores()
    if cores >= 2:
        return Line("cores", OK, f"{cores} usable (the series is sized for 2)")
    return Line("cores", NOTE, f"{cores} usable: the series is sized for 2, so parallel readers cannot show a "
                "speed-up here and a few speed checks may fail; Colab gives 2")


def check_servers(result: dict) -> Line:
    if "error" in result:
        return Line("tf.data service", FAIL, f"notebook 06's dispatcher and worker could not start ({result['error']})",
                    "let Python listen on a local port (a firewall or security software may block it), or run "
                    "notebook 06 on Colab")
    return Line("tf.data service", OK, f"a dispatcher (port {result['dispatcher']}) and a worker started, as notebook "
                "06 §4 starts them, and stopped (see the warning below)")


def check_memory_budget(result: dict) -> Line:
    """Whether notebook 05 §8 can hold a child process to a memory budget (Linux's /proc); where it
    cannot, it prints why and shows the stored full-run figure instead, so it is a note, not a FAIL."""
    if "error" in result:
        return Line("memory budget", FAIL, f"could not ask ({result['error']})", INSTALL)
    if result["unavailable"]:
        return Line("memory budget", NOTE, f"{result['unavailable']} Notebook 05 §8 says so and shows the "
                    "stored full-run figure instead")
    return Line("memory budget", OK, "notebook 05 §8 can hold a child process to a memory budget "
                "(its resident memory, read from /proc)")


def check_beam(result: dict) -> Line:
    """Beam not installed: notebook 06 §5 is skipped with a sentence (a note). Installed but broken: a FAIL, since
    06 §5 would try it and stop there."""
    if "error" in result:
        fix = ("pip install -e \".[scale]\" (apache-beam[tfrecord]); if that fails, use the tested versions "
               f"({INSTALL}) on Python 3.11, or Colab")
        if result["error"].startswith("ModuleNotFoundError: No module named 'apache_beam'"):
            return Line("Apache Beam", NOTE, "not installed: notebook 06 §5 (conversion with Beam) says so and is "
                        f"skipped; everything else runs without it. To run it: {fix}")
        return Line("Apache Beam", FAIL, f"installed but cannot be imported ({result['error']}): notebook 06 §5 "
                    "would stop there", fix)
    return Line("Apache Beam", OK, f"apache_beam {result['version']} imports (notebook 06 §5)")


# The [grain] extra's lower bounds (pyproject.toml; a test keeps the two in step).
GRAIN_NEEDS = {"grain": (0, 2, 12), "array_record": (0, 8)}


def check_grain(result: dict) -> Line:
    """Notebook 08 imports Grain and ArrayRecord at its start: either missing, broken or older than the [grain]
    extra asks for is a FAIL."""
    fix = ("pip install -e \".[grain]\" (grain and array-record); if that fails, use the tested versions "
           f"({INSTALL}) on Python 3.11, or Colab")
    if "error" in result:
        return Line("Grain and ArrayRecord", FAIL, f"cannot be imported ({result['error']}): notebook 08 stops at its "
                    "first cell", fix)
    old = [f"{name} {result[name]} is older than {'.'.join(map(str, least))}"
           for name, least in GRAIN_NEEDS.items() if _version(result[name]) < least]
    if old:
        return Line("Grain and ArrayRecord", FAIL, f"{'; '.join(old)}: notebook 08 needs the newer ones", fix)
    return Line("Grain and ArrayRecord", OK, f"grain {result['grain']} and array_record {result['array_record']} "
                "import, reader and writer (notebook 08)")


def check_slow_store() -> Line:
    try:
        from helpers.storage.slow_store import slow_store_available
    except ImportError:
        return Line("slow store", NOTE, "this version of the series has no slow store (helpers.storage.slow_store)")
    available, why = slow_store_available()
    if available:
        return Line("slow store", OK, "a FUSE file system mounts here: notebooks 04 §2, 05 §3 and 07 §5 read "
                    "through it")
    return Line("slow store", NOTE, f"it cannot mount here ({why}): notebooks 04 §2, 05 §3 and 07 §5 say so, "
                "measure the page cache only and show the stored full-run figures")


# ---------------------------------------------------------------- the child processes

# Each prints JSON lines, flushed one by one (a crash later keeps what came before): what it found, or an error.
_TENSORFLOW = """\
import json
from helpers.setup.processes import exit_with_parent
exit_with_parent()
try:
    import tensorflow as tf, keras
    gpus = [d.name for d in tf.config.list_physical_devices("GPU")]
    print(json.dumps({"probe": {"tensorflow": tf.__version__, "keras": keras.__version__, "gpus": gpus}}), flush=True)
except Exception as e:
    print(json.dumps({"probe": {"error": f"{type(e).__name__}: {e}"}}), flush=True)
    raise SystemExit(1)
try:
    service = tf.data.experimental.service
    dispatcher = service.DispatchServer(service.DispatcherConfig(port=0))
    port = int(dispatcher.target.rsplit(":", 1)[1])
    worker = service.WorkerServer(service.WorkerConfig(dispatcher_address=f"localhost:{port}", port=0))
    print(json.dumps({"servers": {"dispatcher": port}}), flush=True)
except Exception as e:
    print(json.dumps({"servers": {"error": f"{type(e).__name__}: {e}"}}), flush=True)
try:
    from helpers.measure.peak_memory import budget_unavailable
    print(json.dumps({"budget": {"unavailable": budget_unavailable()}}))
except Exception as e:
    print(json.dumps({"budget": {"error": f"{type(e).__name__}: {e}"}}))
"""
_LIBRARIES = """\
import json
try:
    import apache_beam
    print(json.dumps({"beam": {"version": apache_beam.__version__}}), flush=True)
except Exception as e:
    print(json.dumps({"beam": {"error": f"{type(e).__name__}: {e}"}}), flush=True)
try:   # as notebook 08 imports them: Grain, and ArrayRecord's writer and reader (native modules)
    import importlib.metadata
    import grain
    from array_record.python import array_record_data_source, array_record_module
    versions = {name: importlib.metadata.version(name) for name in ("grain", "array_record")}
    print(json.dumps({"grain": versions}), flush=True)
except Exception as e:
    print(json.dumps({"grain": {"error": f"{type(e).__name__}: {e}"}}), flush=True)
"""


def _start(code: str, gpu: bool) -> subprocess.Popen:
    root = Path(__file__).resolve().parents[2]   # so that `helpers` imports in the child as it does here
    path = os.pathsep.join(filter(None, [str(root), os.environ.get("PYTHONPATH")]))
    return subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                            env=child_environment({"PYTHONPATH": path}, gpu=gpu))


def _result(process: subprocess.Popen, names: tuple[str, ...]) -> dict[str, dict]:
    """Each of `names` as the child answered it; a name it never answered gets an error saying how it ended."""
    try:
        out, err = process.communicate(timeout=CHILD_TIMEOUT)
        ended = f"exit code {process.returncode}"
        last = [line for line in err.splitlines() if line.strip()][-1:]
        ended += f": {last[0]}" if last else ""
    except subprocess.TimeoutExpired:
        process.kill()
        out, _ = process.communicate()
        ended = f"no answer within {CHILD_TIMEOUT} s"
    answers = {}
    for line in out.splitlines():
        try:
            answer = json.loads(line)
        except ValueError:
            continue
        if isinstance(answer, dict):
            answers.update({name: value for name, value in answer.items() if name in names})
    return {name: answers.get(name, {"error": ended}) for name in names}


def _children() -> dict[str, dict]:
    """Start both children at once and collect their answers: "probe", "servers" and "budget" from TensorFlow's
    (the GPU visible, with memory growth: it counts GPUs), "beam" and "grain" from the other libraries' (no GPU)."""
    tensorflow, libraries = _start(_TENSORFLOW, gpu=True), _start(_LIBRARIES, gpu=False)
    return {**_result(tensorflow, ("probe", "servers", "budget")), **_result(libraries, ("beam", "grain"))}


def _safely(name: str, check, *args) -> Line:
    """A check that raises is a FAIL line naming the error, so one broken check never hides the others."""
    try:
        return check(*args)
    except Exception as e:   # a data folder that cannot be made, a disk that cannot be asked, ...
        return Line(name, FAIL, f"the check itself failed: {type(e).__name__}: {e}", "read the error above")


def run_checks() -> list[Line]:
    """Every check, in order: one `Line` each (`CHECK_NAMES`)."""
    answers = _children()
    return [
        _safely("Python", check_python),
        _safely("TensorFlow", check_tensorflow, answers["probe"]),
        _safely("data", check_data),
        _safely("disk", check_disk),
        _safely("cores", check_cores),
        _safely("GPU", check_gpu, answers["probe"]),
        _safely("tf.data service", check_servers, answers["servers"]),
        _safely("memory budget", check_memory_budget, answers["budget"]),
        _safely("Apache Beam", check_beam, answers["beam"]),
        _safely("Grain and ArrayRecord", check_grain, answers["grain"]),
        _safely("slow store", check_slow_store),
    ]


CHECK_NAMES = ("Python", "TensorFlow", "data", "disk", "cores", "GPU", "tf.data service", "memory budget",
               "Apache Beam", "Grain and ArrayRecord", "slow store")


def print_report(lines: list[Line], colour: bool | None = None, file=None) -> bool:
    """Print the lines, a summary and the network warning; return True when no line is FAIL."""
    file = file or sys.stdout
    colour = file.isatty() if colour is None else colour
    for line in lines:
        print(line.render(colour), file=file)
    failed = [line.name for line in lines if line.state == FAIL]
    mode = "quick mode (TUTORIAL_QUICK=1)" if quick_mode() else "a full run (set TUTORIAL_QUICK=1 for quick mode)"
    print(f"\nChecked for {mode}: " + (f"{len(failed)} FAIL ({', '.join(failed)}): do what each fix says, then run "
                                        "this again." if failed else "ready."), file=file)
    print(f"\n{NETWORK_WARNING}", file=file)
    return not failed


def main(argv: list[str] | None = None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog="python -m helpers.setup.check", description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-colour", action="store_true", help="plain words only (colour is used on a terminal)")
    args = parser.parse_args(argv)
    return 0 if print_report(run_checks(), colour=False if args.no_colour else None) else 1


if __name__ == "__main__":
    sys.exit(main())
