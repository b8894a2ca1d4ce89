"""The workshop kit: learner copies without solutions, quick mode switched from inside a notebook, the plan from
measured run times, and `prepare`: the offline folder, its report of what it could not make, and the folders it
refuses.

The one test that executes a notebook (a learner copy of 01, in quick mode) is marked `book`: the default `pytest`
leaves it out, `.ci/run` runs it with the browser test (`python -m pytest -m book ...`).
"""
from __future__ import annotations

import ast
import json
import os
from pathlib import Path

import pytest

from tests.conftest import write_small_cifar_folder, write_small_mnist_npz
from tools import folders, workshop
from tools import notebooks as nbtool

ROOT = Path(__file__).resolve().parent.parent


def _cells(path: Path) -> list[dict]:
    return json.loads(path.read_text(encoding="utf-8"))["cells"]


def _text(cell: dict) -> str:
    return "".join(cell.get("source", ""))


def _solution_cells(cells: list[dict]) -> list[str]:
    return [_text(c) for c in cells if c["cell_type"] == "code" and _text(c).lstrip().startswith("# Solution")]


# ---------------------------------------------------------------- learner copies


def test_learner_copies_hold_no_solution_and_keep_the_originals(tmp_path):
    originals = {p: p.read_bytes() for p in nbtool.notebooks()}
    written = nbtool.write_learner_copies(tmp_path)
    assert {p.name for p, _ in written} == {p.name for p in originals}
    for copy, removed in written:
        source, learner = _cells(ROOT / "notebooks" / copy.name), _cells(copy)
        exercises = len(_solution_cells(source))
        assert exercises and removed >= exercises, copy.name
        assert not _solution_cells(learner), f"{copy.name} still holds a solution"
        # Every cell before the solutions is kept (the checks among them), and so is the summary after them.
        assert [_text(c) for c in learner if "## Check your work" in _text(c)]
        assert any("## Summary" in _text(c) for c in learner)
        assert len(learner) == len(source) - removed + exercises, copy.name
        answers = [c for c in learner if _text(c).startswith("# Exercise ")]
        assert len(answers) == exercises and all(c["outputs"] == [] for c in answers)
        assert not any("Solutions are below" in _text(c) for c in learner)
        assert all(not c.get("outputs") for c in learner if c["cell_type"] == "code")
    assert {p: p.read_bytes() for p in originals} == originals, "the instructor's notebooks changed"


def test_learner_copies_never_overwrite_the_originals():
    with pytest.raises(ValueError, match="instructor"):
        nbtool.write_learner_copies(ROOT / "notebooks")
    assert nbtool.main(["strip-solutions", str(ROOT / "notebooks")]) == 2


def test_a_notebook_without_solutions_is_copied_as_it_is():
    cells = [{"cell_type": "markdown", "source": "## Exercises\n\n1. Think."}, {"cell_type": "code", "source": "1"}]
    assert nbtool.strip_solutions(cells) == (cells, 0)


@pytest.mark.book
@pytest.mark.alone   # notebook 01's check times zlib on two threads against Python's: nothing else may run beside
def test_the_learner_copy_of_01_runs_and_passes_its_checks(tmp_path):
    """A learner copy executed in quick mode: every cell runs and the checks pass without the solutions."""
    import nbformat
    from nbclient import NotebookClient

    (copy, removed), = nbtool.write_learner_copies(tmp_path, [ROOT / "notebooks" / "01_generators_and_iterables.ipynb"])
    nb = nbformat.read(copy, as_version=4)
    assert removed >= 3 and not _solution_cells(nb.cells)
    env = dict(os.environ, TUTORIAL_QUICK="1", MPLBACKEND="Agg", TF_CPP_MIN_LOG_LEVEL="3")
    client = NotebookClient(nb, timeout=600, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
    client.execute(env=env)
    printed = "".join(o.get("text", "") for c in nb.cells if c.cell_type == "code" for o in c.outputs)
    assert "All checks passed." in printed


# ---------------------------------------------------------------- quick mode from inside a notebook


def test_quick_mode_is_read_when_called(monkeypatch):
    """`%env TUTORIAL_QUICK=1` in a running kernel works because the helpers read the variable at each call."""
    from helpers.setup.config import pick, quick_mode

    monkeypatch.setenv("TUTORIAL_QUICK", "0")
    assert not quick_mode() and pick(quick=1, full=2) == 2
    os.environ["TUTORIAL_QUICK"] = "1"          # what `%env TUTORIAL_QUICK=1` does in the kernel
    assert quick_mode() and pick(quick=1, full=2) == 1


def test_no_helper_reads_quick_mode_at_import():
    """Nothing under helpers/ calls quick_mode(), pick() or data_dir() outside a function, so a switch made in a
    notebook after `import helpers...` still takes effect."""
    offenders = []
    for path in (ROOT / "helpers").rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        stack = [n for n in tree.body if not isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))]
        classes = [n for n in tree.body if isinstance(n, ast.ClassDef)]
        stack += [b for c in classes for b in c.body if not isinstance(b, (ast.FunctionDef, ast.AsyncFunctionDef))]
        for node in stack:
            for call in (n for n in ast.walk(node) if isinstance(n, ast.Call)):
                name = getattr(call.func, "id", getattr(call.func, "attr", ""))
                if name in {"quick_mode", "pick", "data_dir"}:
                    offenders.append(f"{path.relative_to(ROOT)}:{call.lineno}")
    assert not offenders, offenders


# ---------------------------------------------------------------- the plan: measured run times plus your allowance


def _record(seconds: dict[str, float], errors: dict[str, list] | None = None, quick: bool = True) -> dict:
    return {"date": "2026-01-02 10:00 UTC", "quick": quick, "cpu": "a test CPU", "cores": 2, "versions": {},
            "notebooks": {name: {"seconds": s, "quick": quick, "cells": [], "errors": (errors or {}).get(name, [])}
                          for name, s in seconds.items()}}


def _numbered(*numbers):
    paths = {p.name[:2]: p for p in nbtool.notebooks()}
    return [paths[n] for n in numbers]


def test_a_plan_adds_the_measured_run_time_and_the_allowance_in_the_order_given():
    chosen = workshop.chosen_notebooks(["05", "01"], nbtool.notebooks())
    assert [p.name[:2] for p in chosen] == ["05", "01"]
    record = _record({p.name: s for p, s in zip(_numbered("01", "05"), (30, 90))})
    text = workshop.plan(record, chosen, workshop.parse_allowances(["40", "05=70"], ["05", "01"]))
    rows = [line for line in text.splitlines() if line.startswith("| 0")]
    assert workshop.title(chosen[0]) == "Profiling an input pipeline"
    assert rows == ["| 05 Profiling an input pipeline | 2 min | 1 h 10 | 1 h 12 | 1 h 12 |",
                    f"| 01 {workshop.title(chosen[1])} | 30 s | 40 min | 40 min | 1 h 52 |"], rows
    assert "Total **1 h 52**: 2 min of measured run time and 1 h 50 of allowance." in text
    assert "2026-01-02 10:00 UTC in quick mode on a test CPU (2 cores)" in text
    assert "not measured: nobody has timed learners" in text and "none set" not in text


def test_a_plan_without_an_allowance_says_its_total_is_run_time_alone():
    chosen = _numbered("01")
    text = workshop.plan(_record({chosen[0].name: 20}), chosen, workshop.parse_allowances([], ["01"]))
    assert "Allowance: none set" in text and "Total **20 s**" in text


def test_every_notebook_by_default_and_a_failed_run_is_named():
    paths = nbtool.notebooks()
    assert workshop.chosen_notebooks([], paths) == paths
    first = paths[0].name
    record = _record({p.name: 10 for p in paths}, errors={first: ["AssertionError: boom"]}, quick=False)
    text = workshop.plan(record, paths, workshop.parse_allowances(["30"], [p.name[:2] for p in paths]))
    assert f"Notebook {first[:2]} failed in this build" in text and " (failed) |" in text and "a full run" in text


@pytest.mark.parametrize("numbers, words", [(["42"], "no notebook numbered 42"), (["01", "01"], "more than once")])
def test_a_plan_names_a_notebook_it_cannot_have(numbers, words):
    with pytest.raises(workshop.PlanError, match=words):
        workshop.chosen_notebooks(numbers, nbtool.notebooks())


def test_a_notebook_missing_from_the_build_is_refused_not_counted_as_zero():
    chosen = _numbered("01", "04")
    with pytest.raises(workshop.PlanError, match="notebook 04 is not in this book build"):
        workshop.plan(_record({chosen[0].name: 20}), chosen, {"01": 0, "04": 0})


@pytest.mark.parametrize("value", ["-5", "abc", "nan", "inf", "1441", "07=30", "05="])
def test_an_allowance_that_is_not_minutes_for_a_planned_notebook_is_refused(value):
    with pytest.raises(workshop.PlanError, match="--allowance"):
        workshop.parse_allowances([value], ["01", "05"])


def test_the_command_prints_the_plan_from_a_record_and_refuses_without_one(tmp_path, capsys):
    record = tmp_path / "record.json"
    record.write_text(json.dumps(_record({p.name: 12 for p in _numbered("01", "02")})))
    assert workshop.main(["plan", "--record", str(record), "--allowance", "45", "02", "01"]) == 0
    out = capsys.readouterr().out
    assert out.index("| 02 ") < out.index("| 01 ") and "Total **1 h 30**" in out
    assert workshop.main(["plan", "--record", str(tmp_path / "none.json")]) == 2
    assert "no book build recorded" in capsys.readouterr().err
    assert workshop.main(["plan", "--record", str(record), "07"]) == 2
    assert "notebook 07 is not in this book build" in capsys.readouterr().err


# ---------------------------------------------------------------- preparing the room offline


@pytest.fixture
def no_network(monkeypatch):
    """pip and the dataset downloads fail as they do with no network, on any machine."""
    from helpers.data import datasets

    def fetch(url, dest, sha256, chunk=1 << 16):
        raise OSError(f"no network in this test ({url})")

    monkeypatch.setattr(datasets, "fetch", fetch)
    monkeypatch.setenv("PIP_CONFIG_FILE", os.devnull)
    monkeypatch.setenv("PIP_NO_INDEX", "1")
    monkeypatch.delenv("PIP_FIND_LINKS", raising=False)


def test_prepare_offline_names_each_missing_part(tmp_path, monkeypatch, no_network, capsys):
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(tmp_path / "empty-data"))
    kit = tmp_path / "kit"
    assert workshop.prepare(kit) == 1
    err = capsys.readouterr().err
    assert "data: MISSING" in err and "MNIST" in err and "CIFAR-10" in err and "datasets download" in err
    assert "wheels: MISSING" in err and "pip download" in err
    readme = (kit / "README.txt").read_text()
    assert "series: ok" in readme and "data: MISSING" in readme and "wheels: MISSING" in readme
    series = kit / "bigger-than-memory"
    assert (series / "pyproject.toml").exists() and (series / "helpers" / "setup" / "config.py").exists()
    # the README and the notebooks link the docs pages
    assert sorted(p.name for p in (series / "docs").iterdir()) == sorted(p.name for p in (ROOT / "docs").iterdir())
    # notebook 99 reads the stored full run's figures from the package
    assert (series / "helpers" / "measure" / "last_full_run.txt").read_bytes() == (
        ROOT / "helpers" / "measure" / "last_full_run.txt").read_bytes()
    copies = sorted((series / "notebooks").glob("*.ipynb"))
    assert [p.name for p in copies] == [p.name for p in nbtool.notebooks()]
    assert not any(_solution_cells(_cells(p)) for p in copies)


def test_prepare_copies_the_datasets_this_checkout_has(tmp_path, monkeypatch, no_network, capsys):
    data = tmp_path / "data"
    data.mkdir()
    write_small_mnist_npz(data / "mnist.npz")
    write_small_cifar_folder(data / "cifar-10-batches-py")
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(data))
    assert workshop.prepare(tmp_path / "kit") == 1          # the wheels still cannot be downloaded
    out, err = capsys.readouterr()
    assert "data: ok" in out and "wheels: MISSING" in err
    copied = tmp_path / "kit" / "bigger-than-memory" / "data"
    assert (copied / "mnist.npz").read_bytes() == (data / "mnist.npz").read_bytes()
    assert len(list((copied / "cifar-10-batches-py").iterdir())) == 6


def test_prepare_again_remakes_its_own_parts_and_keeps_what_it_did_not_make(tmp_path, monkeypatch, no_network):
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(tmp_path / "empty-data"))
    kit = tmp_path / "kit"
    assert workshop.prepare(kit) == 1
    series = kit / "bigger-than-memory"
    (series / "notebooks" / "01_generators_and_iterables.ipynb").write_text("a learner's copy, broken")
    (kit / "notes.txt").write_text("the instructor's notes")
    assert workshop.prepare(kit) == 1
    assert (kit / "notes.txt").read_text() == "the instructor's notes"
    copy = series / "notebooks" / "01_generators_and_iterables.ipynb"
    assert copy.read_text() != "a learner's copy, broken" and not _solution_cells(_cells(copy))
    assert not [p.name for p in kit.rglob("*.partial")], "a temporary file was left behind"


def test_prepare_refuses_a_folder_inside_the_checkout(capsys):
    assert workshop.prepare(ROOT / "notebooks" / "kit") == 2
    assert "outside this checkout" in capsys.readouterr().err


# ---------------------------------------------------------------- `prepare` never removes what it did not make


@pytest.fixture
def fake_checkout(tmp_path, monkeypatch):
    """A checkout under git clone's default name, `<tmp>/bigger-than-memory`, with uncommitted work in it."""
    checkout = tmp_path / "bigger-than-memory"
    (checkout / "notebooks").mkdir(parents=True)
    (checkout / "notebooks" / "mine.ipynb").write_text("uncommitted work")
    monkeypatch.setattr(folders, "ROOT", checkout)
    monkeypatch.setattr(workshop, "ROOT", checkout)
    return checkout


def test_prepare_dot_dot_never_removes_the_checkout(fake_checkout, capsys):
    """`prepare ..` inside `bigger-than-memory/` named the checkout itself as the series folder and removed it."""
    assert workshop.prepare(fake_checkout.parent) == 2
    assert "holds this checkout" in capsys.readouterr().err
    assert (fake_checkout / "notebooks" / "mine.ipynb").read_text() == "uncommitted work"


@pytest.mark.parametrize("where", ["checkout", "inside", "inside build", "parent", "link to checkout",
                                   "link to parent"])
def test_prepare_refuses_the_checkout_what_holds_it_and_what_lies_inside_it(fake_checkout, tmp_path, where):
    targets = {"checkout": fake_checkout, "inside": fake_checkout / "notebooks", "parent": tmp_path,
               "inside build": fake_checkout / "build" / "kit"}
    if where.startswith("link"):
        link = tmp_path / "elsewhere" / "link"
        link.parent.mkdir()
        link.symlink_to(fake_checkout if where.endswith("checkout") else tmp_path, target_is_directory=True)
        targets[where] = link
    problem = workshop.prepare_problem(targets[where])
    assert problem and "checkout" in problem and "outside" in problem


def test_prepare_refuses_a_folder_it_did_not_make_and_says_how_to_continue(tmp_path, capsys):
    kit = tmp_path / "usb"
    (kit / "bigger-than-memory").mkdir(parents=True)
    (kit / "bigger-than-memory" / "thesis.tex").write_text("a year of work")
    assert workshop.prepare(kit) == 2
    err = capsys.readouterr().err
    assert str(kit) in err and "not empty" in err and workshop.KIT_MARKER in err and "remove" in err
    assert (kit / "bigger-than-memory" / "thesis.tex").read_text() == "a year of work"


def test_prepare_accepts_a_new_an_empty_or_its_own_folder(tmp_path):
    assert workshop.prepare_problem(tmp_path / "new") is None
    (tmp_path / "empty").mkdir()
    assert workshop.prepare_problem(tmp_path / "empty") is None
    own = tmp_path / "own"
    folders.claim(own, workshop.KIT_MARKER, "made here")
    (own / "bigger-than-memory").mkdir()          # what an earlier, maybe interrupted, run left
    (own / "bigger-than-memory" / "README.md").write_text("old copy")
    assert workshop.prepare_problem(own) is None


def test_prepare_never_follows_a_link_in_its_own_folder(tmp_path):
    own, elsewhere = tmp_path / "own", tmp_path / "elsewhere"
    folders.claim(own, workshop.KIT_MARKER, "made here")
    elsewhere.mkdir()
    (own / "bigger-than-memory").symlink_to(elsewhere, target_is_directory=True)
    assert "symlink" in workshop.prepare_problem(own)
    (own / "bigger-than-memory").unlink()
    (own / workshop.KIT_MARKER).unlink()
    (own / workshop.KIT_MARKER).symlink_to(elsewhere / "marker")     # a marker must be the folder's own file
    (elsewhere / "marker").write_text("made here")
    assert "not empty" in workshop.prepare_problem(own)


def test_prepare_says_what_to_choose_instead_of_the_home_folder(tmp_path, monkeypatch):
    """`prepare ~` said "/root is your home folder: choose a folder outside this checkout"."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    problem = workshop.prepare_problem(home)
    assert problem == f"{home} is your home folder: choose a new or empty folder inside it", problem
    assert folders.home_or_root_problem(Path("/")) == "/ is the root of the file system: choose a new or empty folder"
    assert "outside this checkout" in workshop.prepare_problem(ROOT / "notebooks")


def test_the_wheel_folder_asks_for_every_package_the_room_installs(tmp_path, monkeypatch):
    """`pip download` gets requirements.txt's packages, the series' extras and its build tools, at tested versions."""
    asked = {}

    def run(command, **kwargs):
        asked["command"] = command
        asked["requirements"] = Path(command[command.index("-r") + 1]).read_text()
        return workshop.subprocess.CompletedProcess(command, 0, "", "")

    monkeypatch.setattr(workshop.subprocess, "run", run)
    ok, text = workshop._prepare_wheels(tmp_path / "wheels")
    assert ok, text
    wanted = asked["requirements"].split()
    assert "-e" not in asked["requirements"] and {"tensorflow>=2.16", "jupyterlab>=4.0", "setuptools>=68"} <= set(wanted)
    assert any(w.startswith("apache-beam[tfrecord]") for w in wanted)       # the [scale] extra of `-e .[scale,...]`
    assert asked["command"][-2:] == ["-c", str(ROOT / "constraints.txt")]


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_a_record_path_that_is_not_a_file_is_named_not_opened(tmp_path, kind):
    """`plan --record PATH` (then `measure`) blocked for ever on a FIFO and ended in IsADirectoryError's traceback on a folder
    (issue 41 item 8): each is refused, naming the path and what is there, at once."""
    import subprocess
    import sys

    path = tmp_path / "record.json"
    if kind == "fifo":
        os.mkfifo(path)
    elif kind == "folder":
        path.mkdir()
    else:
        path.symlink_to("/dev/zero")
    done = subprocess.run([sys.executable, "-m", "tools.workshop", "plan", "--record", str(path)], cwd=ROOT,
                          capture_output=True, text=True, timeout=60)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
    what = {"fifo": "FIFO", "folder": "folder", "device": "character device"}
    assert str(path) in done.stderr and what[kind] in done.stderr, done.stderr


def test_a_record_too_large_to_be_one_is_refused_unread(tmp_path):
    from tools.build_record import RecordError, read_record

    path = tmp_path / "record.json"
    with open(path, "wb") as f:
        f.truncate(1 << 30)   # sparse: a gigabyte of zeros the check must not read into memory
    with pytest.raises(RecordError, match="too large"):
        read_record(path)
