"""The workshop kit: a day's plan from measured run times, and the folder to copy into a room without network.

    python -m tools.workshop plan --allowance 40 01 02 04 05 07   # these notebooks, in this order
    python -m tools.workshop plan --allowance 40 --allowance 05=70     # every notebook; 05 gets 70 minutes
    python -m tools.workshop prepare DIR     # the folder to copy onto each machine: series, data, wheels
                                             # (a new or empty DIR, or one it made: `prepare_problem`)

`plan` adds up two figures per notebook, and says which is which. The run time is measured: each notebook's run,
kernel start included, in a book build's record (`python -m tools.book --quick` writes build/book/record.json; the
book's landing page shows the same figures). The allowance is the instructor's: the minutes given to each notebook
for reading, explaining and exercises (`--allowance`). Nobody has timed learners through the series, so nothing
here estimates how long they read.
"""
from __future__ import annotations

import argparse
import math
import re
import shutil
import subprocess
import sys
from pathlib import Path

from helpers.storage.files import atomic_write_text
from tools import folders
from tools.build_record import RecordError, read_record
from tools.notebooks import NotebookError, notebooks, read_notebook, write_learner_copies

ROOT = Path(__file__).resolve().parent.parent
RECORD = ROOT / "build" / "book" / "record.json"
MAX_ALLOWANCE = 24 * 60      # minutes: an allowance longer than a day is a typing error


# ---------------------------------------------------------------- the plan


class PlanError(ValueError):
    """A plan that cannot be made from what was asked and what was measured; the message says which."""


def parse_allowances(values: list[str], plan: list[str]) -> dict[str, float]:
    """Minutes per notebook of `plan` from `--allowance` values: "40" for every notebook, "05=70" for one (the
    later value wins). Without any, every allowance is 0."""
    allowance = dict.fromkeys(plan, 0.0)
    for value in values:
        number, _, text = value.rpartition("=")
        try:
            minutes = float(text)
        except ValueError:
            minutes = math.nan
        if not 0 <= minutes <= MAX_ALLOWANCE:
            raise PlanError(f"--allowance {value!r}: give minutes from 0 to {MAX_ALLOWANCE}, as 40 or 05=70")
        if number and number not in allowance:
            raise PlanError(f"--allowance {value!r}: notebook {number!r} is not in the plan ({' '.join(plan)})")
        for name in [number] if number else plan:
            allowance[name] = minutes
    return allowance


def chosen_notebooks(numbers: list[str], paths: list[Path]) -> list[Path]:
    """The notebooks named by number ("05"), in the order given; every notebook, in series order, when none is."""
    by_number = {p.name[:2]: p for p in paths}
    if not numbers:
        return list(paths)
    if unknown := [n for n in numbers if n not in by_number]:
        raise PlanError(f"no notebook numbered {', '.join(unknown)}: the series has {' '.join(by_number)}")
    if twice := sorted({n for n in numbers if numbers.count(n) > 1}):
        raise PlanError(f"notebook {', '.join(twice)} is named more than once")
    return [by_number[n] for n in numbers]


def title(path: Path) -> str:
    """A notebook's short title: its first heading without the number and the subtitle ("# 01 · Title: subtitle")."""
    try:
        cells = read_notebook(path)["cells"]
    except NotebookError:
        return path.stem
    for cell in cells:
        source = cell["source"] if isinstance(cell["source"], str) else "".join(cell["source"])
        if cell["cell_type"] == "markdown" and (heading := re.search(r"^# (.+)$", source, re.M)):
            return heading[1].split(" · ", 1)[-1].split(":")[0].strip()
    return path.stem


def _duration(minutes: float) -> str:
    if 0 < minutes < 1:
        return f"{minutes * 60:.0f} s"
    minutes = round(minutes)
    return f"{minutes // 60} h {minutes % 60:02d}" if minutes >= 60 else f"{minutes} min"


def plan(record: dict, paths: list[Path], allowance: dict[str, float]) -> str:
    """The plan as Markdown: per notebook, its measured run time, the allowance, and where the day stands after it."""
    missing = [p.name[:2] for p in paths if p.name not in record["notebooks"]]
    if missing:
        raise PlanError(f"notebook {', '.join(missing)} is not in this book build, so its run time was not "
                        f"measured: build the book with it (`python -m tools.book --quick`)")
    mode = "quick mode" if record["quick"] else "a full run"
    rows = ["| notebook | run time (measured) | allowance (yours) | block | day so far |", "|---|---|---|---|---|"]
    elapsed = run_total = 0.0
    failed = []
    for path in paths:
        run = record["notebooks"][path.name]
        minutes, given = run["seconds"] / 60, allowance[path.name[:2]]
        elapsed += minutes + given
        run_total += minutes
        if run["errors"]:
            failed.append(path.name[:2])
        rows.append(f"| {path.name[:2]} {title(path)}{' (failed)' if run['errors'] else ''} | {_duration(minutes)} "
                    f"| {_duration(given)} | {_duration(minutes + given)} | {_duration(elapsed)} |")
    lines = [f"Plan: {' '.join(p.name[:2] for p in paths)}, in this order.", "", *rows, "",
             f"Total **{_duration(elapsed)}**: {_duration(run_total)} of measured run time and "
             f"{_duration(elapsed - run_total)} of allowance.", "",
             f"Run time: each notebook's run, kernel start included, in the book build of {record['date']} in {mode} "
             f"on {record['cpu']} ({record['cores'] or 'unknown'} cores). A learner's machine differs; a full run "
             f"takes longer (the README's table)."]
    if not any(allowance.values()):
        lines.append("Allowance: none set (`--allowance MINUTES`), so the total is the cells' run time alone, not "
                     "the time a class takes.")
    else:
        lines.append("Allowance: the minutes you gave each notebook for reading, explaining and exercises. It is "
                     "not measured: nobody has timed learners through the series.")
    if failed:
        lines.append(f"Notebook {', '.join(failed)} failed in this build: its run time is the time to the error.")
    return "\n".join(lines)


# ---------------------------------------------------------------- preparing the room

# What a learner's machine needs of the checkout (the package, its install files, the notebooks and data/).
# helpers/ holds the stored full run notebook 99 reads (measure/last_full_run.txt); docs/: the README and the
# notebooks link its pages.
SERIES_FILES = ["README.md", "requirements.txt", "constraints.txt", "pyproject.toml", "data/README.md"]
SERIES_FOLDERS = ["helpers", "docs"]
ROOM_README = """\
Bigger Than Memory, prepared for a room without network on {date} by `python -m tools.workshop prepare`.

On each machine, with Python 3.10 or newer (a virtual environment is a good idea):

    cd bigger-than-memory
    pip install --no-index --find-links ../wheels -r requirements.txt
    jupyter lab notebooks/

The notebooks find the datasets in bigger-than-memory/data/. For a quick run (small sizes: the series in
minutes), put `%env TUTORIAL_QUICK=1` in a cell above a notebook's setup cell, or start JupyterLab with
TUTORIAL_QUICK=1 set. These copies of the notebooks have no solutions: the instructor has them.

What this folder holds:
{parts}
"""


KIT_MARKER = ".workshop-kit"     # the file `prepare` writes into its folder: only a folder holding it is ever replaced
KIT_COMMAND = "python -m tools.workshop prepare"
SERIES_NAME = "bigger-than-memory"
KIT_PARTS = (SERIES_NAME, "wheels", "README.txt", "requirements-wheels.txt")   # what `prepare` writes in its folder


def prepare_problem(folder: Path) -> str | None:
    """Why `prepare` may not make its kit in `folder`, or None. It removes and rewrites what it made there, so the
    folder must be new, empty or one it made earlier (its marker inside), and neither be, hold nor lie inside this
    checkout (compared after symlinks); none of its parts may be a symlink."""
    if problem := folders.inside_checkout_problem(folder, inside_ok=False):
        return f"{problem}: choose a folder outside this checkout"
    if problem := folders.home_or_root_problem(folder):     # it says what to choose instead
        return problem
    if problem := folders.replace_problem(folder, KIT_MARKER, KIT_COMMAND, inside_ok=False):
        return problem
    folder = Path(folder).resolve()
    for part in KIT_PARTS:
        if (folder / part).is_symlink():
            return f"{folder / part} is a symlink; `prepare` writes its own {part} there and never through a link"
    return None


def _copy_series(target: Path) -> None:
    if target.exists():     # made by an earlier `prepare`: its folder holds the marker (`prepare_problem`)
        shutil.rmtree(target)
    for name in SERIES_FILES:
        if (ROOT / name).exists():
            (target / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, target / name)
    for folder in SERIES_FOLDERS:
        shutil.copytree(ROOT / folder, target / folder,
                        ignore=shutil.ignore_patterns("__pycache__", "*.egg-info", ".ipynb_checkpoints"))
    write_learner_copies(target / "notebooks")
    (target / "data").mkdir(exist_ok=True)


def _prepare_data(data: Path) -> tuple[bool, str]:
    """The real datasets in `data`: copied from this checkout's data folder when it has them, else downloaded."""
    from helpers.data import datasets
    from helpers.setup.config import data_dir

    local = data_dir()
    problems = []
    for name, entry, download in (("MNIST", datasets.MNIST_FILE, datasets.download_mnist),
                                  ("CIFAR-10", datasets.CIFAR_DIR, datasets.download_cifar10)):
        source = local / entry
        try:
            if source.is_dir():
                shutil.copytree(source, data / entry)
                datasets.read_cifar_folder(data / entry)
            elif source.is_file():
                shutil.copy2(source, data / entry)
                datasets.read_mnist_npz(data / entry)
            else:
                download(data)
        except (OSError, datasets.DatasetFileError) as e:
            problems.append(f"{name} ({e})")
    if problems:
        return False, (f"could not get {'; '.join(problems)}. Run this again where the network reaches the datasets, "
                       f"or on a connected machine run `python -m helpers.data.datasets download` and copy its "
                       f"data/ into {data}.")
    return True, f"MNIST and CIFAR-10 in {data}"


def series_requirements(extras: set[str]) -> list[str]:
    """What the installed series package requires, with the named extras (from its metadata, as pip reads it)."""
    from importlib import metadata

    try:
        requires = metadata.requires("bigger-than-memory") or []
    except metadata.PackageNotFoundError:
        return []
    wanted = []
    for requirement in requires:
        spec, _, marker = requirement.partition(";")
        extra = re.search(r"extra\s*==\s*[\"']([^\"']+)[\"']", marker)
        if extra is None or extra[1] in extras:
            wanted.append(spec.strip())
    return wanted


def _prepare_wheels(wheels: Path) -> tuple[bool, str]:
    """`pip download` of requirements.txt at constraints.txt's versions, with the tools that install the series."""
    wheels.mkdir(parents=True, exist_ok=True)
    requirements = wheels.parent / "requirements-wheels.txt"
    text = (ROOT / "requirements.txt").read_text(encoding="utf-8")
    lines = [line.split("#")[0].strip() for line in text.splitlines()]
    wanted = [line for line in lines if line and not line.startswith("-")]
    # `-e .[extras]` installs the series itself from its folder: its build needs setuptools, its extras their packages.
    extras = set()
    for line in lines:
        if line.startswith("-e") and (named := re.search(r"\[([^\]]*)\]", line)):
            extras |= {extra.strip() for extra in named[1].split(",")}
    wanted += series_requirements(extras) + ["setuptools>=68", "wheel"]
    atomic_write_text(requirements, "\n".join(wanted) + "\n")
    command = [sys.executable, "-m", "pip", "download", "--quiet", "-d", str(wheels), "-r", str(requirements),
               "-c", str(ROOT / "constraints.txt")]
    done = subprocess.run(command, capture_output=True, text=True)
    requirements.unlink()
    if done.returncode:
        lines = [line.strip() for line in (done.stderr or done.stdout).splitlines() if line.strip()]
        errors = [line for line in lines if line.startswith("ERROR") and "for help visit" not in line] or lines[-1:]
        why = next((line for line in errors if "No matching distribution" in line or "Could not" in line),
                   errors[0] if errors else "no output")
        return False, (f"`pip download -r requirements.txt` failed ({why}). Run this again on a machine "
                       f"that reaches PyPI, or fill {wheels} there with `pip download -r requirements.txt -c "
                       f"constraints.txt -d {wheels.name}`.")
    return True, f"{sum(1 for _ in wheels.iterdir())} files in {wheels}"


def prepare(folder: Path) -> int:
    """Make the folder to copy onto each machine; report each part; return 1 when a part is missing."""
    import datetime as dt

    folder = folder.resolve()
    if problem := prepare_problem(folder):
        print(f"error: {problem}", file=sys.stderr)
        return 2
    folders.claim(folder, KIT_MARKER, f"Made by `{KIT_COMMAND}`, which replaces what it made here when run again.\n")
    series = folder / SERIES_NAME
    _copy_series(series)
    report = [("series", True, f"the helpers, the docs pages and the learners' notebooks (no solutions) in {series}"),
              ("data", *_prepare_data(series / "data")),
              ("wheels", *_prepare_wheels(folder / "wheels"))]
    parts = "\n".join(f"  {name}: {'ok' if ok else 'MISSING'}: {text}" for name, ok, text in report)
    atomic_write_text(folder / "README.txt", ROOM_README.format(date=dt.date.today(), parts=parts))
    for name, ok, text in report:
        print(f"{name}: {'ok' if ok else 'MISSING'}: {text}", file=sys.stdout if ok else sys.stderr)
    if not all(ok for _, ok, _ in report):
        print(f"{folder} is not ready: make the MISSING parts as said above", file=sys.stderr)
        return 1
    print(f"{folder} is ready: copy it onto each machine (its README.txt says how to install)")
    return 0


# ---------------------------------------------------------------- the command


def load_record(path: Path = RECORD) -> dict | None:
    """A book build's record, checked (`RecordError` naming the file if it is not one); None if missing."""
    return read_record(path) if path.exists() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.workshop", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    p = sub.add_parser("plan", help="the notebooks' measured run times plus your allowance, in teaching order")
    p.add_argument("notebooks", nargs="*", metavar="NN", help="notebook numbers in teaching order (default: all)")
    p.add_argument("--allowance", action="append", default=[], metavar="MINUTES",
                   help="minutes for reading, explaining and exercises: 40 for every notebook, 05=70 for one")
    p.add_argument("--record", type=Path, default=RECORD, help="a book build's record.json")
    p = sub.add_parser("prepare", help="the folder to copy onto each machine")
    p.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        return prepare(args.folder.expanduser())
    try:
        record = load_record(args.record)
        if record is None:
            raise PlanError(f"no book build recorded at {args.record}, so no run time was measured: run "
                            f"`python -m tools.book --quick` first")
        chosen = chosen_notebooks(args.notebooks, notebooks())
        print(plan(record, chosen, parse_allowances(args.allowance, [p.name[:2] for p in chosen])))
    except (RecordError, PlanError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    return 0


if __name__ == "__main__":
    sys.exit(main())
