"""The workshop kit (issue 20): learner copies without solutions, the plans' arithmetic, quick mode switched from
inside a notebook, and the offline preparation's report of what it could not make.

The one test that executes a notebook (a learner copy of 01, in quick mode) is marked `book`: the default `pytest`
leaves it out, `.ci/run` runs it with the browser test (`python -m pytest -m book ...`).
"""
from __future__ import annotations

import ast
import json
import re
import os
from pathlib import Path

import pytest

from tests.conftest import write_small_cifar_folder, write_small_mnist_npz
from tools import notebooks as nbtool
from tools import workshop

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


# ---------------------------------------------------------------- the plans


def _toy_notebook(path: Path) -> Path:
    md = lambda s: {"cell_type": "markdown", "metadata": {}, "source": s}
    code = lambda s: {"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": s}
    cells = [md("# 09 · Toy"), md("## Overview\n\none two three"), md("## Setup"), code("import os"),
             md("## 1. First\n\n" + "word " * 150), code("a = 1\nb = 2\n\nc = 3"),
             md("## 2. Second\n\n" + "word " * 300), code("d = 4"),
             md("## Check your work"), code("assert a"),
             md("## Exercises\n\n1. " + "do " * 15 + "\n2. " + "think " * 30),
             md("### Solutions"), code("# Solution 1\nx = 1\ny = 2"), code("# Solution 2\nz = 3"),
             md("## Summary\n\nbye")]
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_block_is_reading_plus_code_plus_waiting_plus_exercises(tmp_path):
    path = _toy_notebook(tmp_path / "09_toy.ipynb")
    sections, exercises = workshop.read(path)
    assert [s.key for s in sections] == ["Title", "Overview", "Setup", "1", "2", "Check your work", "Exercises",
                                         "Summary"]
    first = next(s for s in sections if s.key == "1")
    assert (first.words, first.code_cells, first.code_lines) == (152, [5], 3)
    assert [(e.number, e.words, e.solution_lines) for e in exercises] == [(1, 15, 2), (2, 30, 1)]
    record = {"notebooks": {path.name: {"cells": [[3, 6.0], [5, 30.0], [7, 60.0], [9, 0.0], [12, 12.0],
                                                  [13, 600.0]]}}}
    b = workshop.block("toy", path, ["1"], [1], record)
    taught_words = 3 + 4 + 1 + 152 + 2        # title, overview, setup, §1, summary: headings count too
    assert b.reading == pytest.approx(taught_words / workshop.READ_WPM)
    assert b.code == pytest.approx(2 * workshop.CELL_MINUTES + (1 + 3) * workshop.LINE_MINUTES)   # setup and §1
    assert b.waiting == pytest.approx((6 + 30 + 60 + 0) / 60)      # every cell but the solutions, taught or not
    assert b.practice == pytest.approx(15 / workshop.READ_WPM + 2 * workshop.WRITE_MINUTES + 12 / 60)
    assert b.taught == ["1"] and b.exercises == [1]
    assert workshop.block("toy", path, "all", "all", record).exercises == [1, 2]


def test_each_part_of_each_plan_fits_its_time_before_waiting():
    """The plans fit their mornings, afternoons and days on reading, code and exercises alone; the page says
    whether they still fit with the run's waiting."""
    from tools.book import discover

    for name, parts in workshop.plans(None, discover()).items():
        for label, budget, blocks in parts:
            total = sum(b.minutes for b in blocks)
            assert 0 < total <= budget, f"{name}, {label}: {total:.0f} min for {budget:.0f}"


def test_the_instructors_page_names_what_each_plan_leaves_out():
    from tools.book import discover

    text = workshop.page(None, discover())
    for heading in ("## One day", "### Morning", "### Afternoon", "## Two days", "### Day 1, morning",
                    "### Day 2, afternoon", "## When a measurement comes out backwards on a laptop",
                    "## How the time of a block is computed", "%env TUTORIAL_QUICK=1", "strip-solutions",
                    "python -m tools.workshop prepare"):
        assert heading in text
    assert "Left out" in text and "§8 (Why a Python generator does not run in parallel)" in text


def _plan(*blocks):
    """A one-part plan of (notebook, sections) blocks, as `skipped_prerequisites` reads plans."""
    made = [workshop.Block("b", f"{n}_x.ipynb", list(keys), [], 0, 0, 0, 0) for n, keys in blocks]
    return [("Morning", workshop.HALF_DAY_MINUTES, made)]


def test_no_plan_teaches_a_section_before_what_it_builds_on():
    from tools.book import discover

    for name, plan in workshop.plans(None, discover()).items():
        assert workshop.skipped_prerequisites(plan) == [], name


def test_a_skipped_or_late_prerequisite_is_named():
    # 05 §4 reads the block records 05 §1 writes (issue 27's example): a plan without §1 is refused.
    assert workshop.skipped_prerequisites(_plan(("02", "123"), ("04", "1247"), ("05", "234"))) == [
        f"05 §{k} is taught without 05 §1, which it builds on" for k in "234"]
    assert workshop.skipped_prerequisites(_plan(("02", "123"), ("04", "1247"), ("05", "1234"))) == []
    # Across notebooks, and in order: 07 §4 after 02 §3, not before it.
    late = workshop.skipped_prerequisites(_plan(("07", "134"), ("02", "123")))
    assert late == ["07 §4 is taught before 02 §3, which it builds on"]
    assert workshop.skipped_prerequisites(_plan(("02", "123"), ("07", "134"))) == []
    # A build without notebook 02 (`--only 07`) does not ask for it: the page names the missing notebook instead.
    assert workshop.skipped_prerequisites(_plan(("07", "134")), present={"07"}) == []
    assert workshop.skipped_prerequisites(_plan(("07", "14")), present={"07"}) == [
        "07 §4 is taught without 07 §3, which it builds on"]


def test_every_prerequisite_names_a_section_the_notebooks_have():
    """Renumbered sections must be renumbered here too: each entry names a notebook and section that exist."""
    from tools.book import discover

    sections = {p.name[:2]: {s.key for s in workshop.read(p)[0] if s.key.isdigit()} for p in discover()}
    named = set(workshop.PREREQUISITES) | {n for needed in workshop.PREREQUISITES.values() for n in needed}
    missing = sorted(f"{n} §{k}" for n, k in named if k not in sections.get(n, set()))
    assert not missing, f"PREREQUISITES names sections the notebooks do not have: {missing}"
    # Every numbered section past the first of notebooks 01-07 says what it builds on.
    bare = sorted(f"{n} §{k}" for n, keys in sections.items() if "01" <= n <= "07" for k in keys
                  if k != "1" and (n, k) not in workshop.PREREQUISITES)
    assert not bare, f"sections with no prerequisite listed: {bare}"


def test_the_one_day_plan_teaches_the_series_point_at_full_size():
    from tools.book import discover

    plan = workshop.plans(None, discover())["One day"]
    blocks = [b for _, _, part in plan for b in part]
    taught = {(b.notebook[:2], k) for b in blocks for k in b.taught}
    demos = [b for b in blocks if b.demo and {(b.notebook[:2], k) for k in b.taught}
             & workshop.MEMORY_DEMONSTRATIONS]
    assert demos, "no bigger-than-memory demonstration run at full size"
    assert demos[0].waiting == pytest.approx(workshop.full_run_minutes(demos[0].notebook[:2]))
    assert {("07", "2"), ("07", "3"), ("07", "4")} <= taught
    assert all(b.objective for b in blocks)
    text = workshop.page(None, discover())
    one_day = text[text.index("## One day"):text.index("## Two days")]
    for row in ("| 9:00–9:30 | machines and questions", "| *break* |", "| 12:45–13:45 | *lunch* |"):
        assert row in one_day, row
    assert one_day.count("| *break* |") == 2 and "**demonstration**" in one_day


def test_a_schedule_has_clock_times_one_break_and_ends_within_its_half_day():
    make = lambda minutes: workshop.Block("t", "01_x.ipynb", ["1"], [], minutes, 0, 0, 0, "learn")
    table = workshop.schedule("Afternoon", 180, [make(60), make(50), make(40)])
    rows = [line for line in table.splitlines() if line.startswith("| 1")]
    assert [r.split(" | ")[0] for r in rows] == ["| 12:45–13:45", "| 13:45–14:45", "| 14:45–15:35",
                                                "| 15:35–15:50", "| 15:50–16:30", "| 16:30–17:00"]
    assert "*break*" in rows[3] and "catching up" in rows[-1]        # after the block ending nearest 90 min
    assert "within the 3 h 00" in table
    assert "**more than**" in workshop.schedule("Morning", 180, [make(200)])


def test_a_plan_names_a_notebook_missing_from_the_build():
    """Notebook 08 may be missing (written on another branch): its blocks are left out and the page says so."""
    from tools.book import discover

    without_07 = [p for p in discover() if not p.name.startswith("07")]
    assert all(b.notebook[:2] != "07" for parts in workshop.plans(None, without_07).values()
               for _, _, part in parts for b in part)
    assert "07" in workshop.left_out(without_07)
    only_99 = [p for p in discover() if p.name.startswith("99")]
    text = workshop.page(None, only_99)
    assert "Not in this build, so not counted above: notebook 01" in text and "without what they build" not in text
    assert "Not in this build, so not counted above: notebook 07" in workshop.page(None, without_07)


def test_full_run_minutes_are_read_from_the_readme_table(tmp_path):
    readme = tmp_path / "README.md"
    readme.write_text("| 06 | [Scaling](x) | what | 64 s | 5.3 min |\n| 07 | [C](y) | what | 45 s | 40 s |\n")
    assert workshop.full_run_minutes("06", readme) == pytest.approx(5.3)
    assert workshop.full_run_minutes("07", readme) == pytest.approx(40 / 60)
    assert workshop.full_run_minutes("08", readme) is None
    assert workshop.full_run_minutes("06") > 0            # the real README has the figure


def test_the_page_says_what_the_rates_rest_on_and_the_range():
    from tools.book import discover

    text = workshop.page(None, discover())
    assert "None of them was measured on learners" in text and "It has not been made" in text
    low, high = (h / workshop.MODEL_HOURS_THEN for h in workshop.LEARNER_ESTIMATE_HOURS)
    assert f"15 to 17 hours" in text and f"{low:.1f} to {high:.1f} times" in text


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
    # notebook 99 reads the stored full run's figures from the checkout
    assert (series / "benchmarks" / "last_full_run.txt").read_bytes() == (
        ROOT / "benchmarks" / "last_full_run.txt").read_bytes()
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


def test_prepare_refuses_a_folder_inside_the_checkout(capsys):
    assert workshop.prepare(ROOT / "notebooks" / "kit") == 2
    assert "outside this checkout" in capsys.readouterr().err


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


# ---------------------------------------------------------------- platforms, the set-up check, the network (issue 27)


def test_the_instructors_page_says_what_runs_where_and_warns_about_the_network():
    from tools.book import discover

    text = workshop.page(None, discover())
    table = text[text.index("## What runs where"):text.index("## Troubleshooting")]
    rows = {line.split(" | ")[0].strip("| "): line for line in table.splitlines() if line.startswith("| ")}
    assert {"Linux", "macOS", "Windows", "WSL 2 (Windows)", "Colab"} <= set(rows)
    # 05 §8 skips (with a sentence) where there is no /proc: on Windows and on macOS alike.
    for platform in ("Windows", "macOS"):
        assert "05 §8" in rows[platform] and "/proc" in rows[platform] and "FUSE" in rows[platform]
    assert "WSL 2" in rows["Windows"] and "fail" not in rows["Linux"]
    troubleshooting = text[text.index("## Troubleshooting"):]
    for platform in ("**Windows**", "**macOS**", "**Colab**", "**Apache Beam will not install**"):
        assert platform in troubleshooting
    check_block = text[text.index("## Before the day: the set-up check"):text.index("## What runs where")]
    assert "TUTORIAL_QUICK=1 python -m helpers.check" in check_block and "$env:TUTORIAL_QUICK=1" in check_block
    warning = text[text.index("## Notebook 06's servers and the classroom network"):]
    assert "every network interface" in warning and "without authentication" in warning
    assert "Wi-Fi" in warning and "private network" in warning and "Colab" in warning
    # The disk figure on the page is the check's own, not typed in.
    from helpers.check import data_bytes

    assert f"about {data_bytes(quick=True) / 1e9:.1f} GB in quick mode and {data_bytes(quick=False) / 1e9:.0f} GB" in text


def test_the_framing_sections_of_01_count_as_taught():
    sections, _ = workshop.read(ROOT / "notebooks" / "01_generators_and_iterables.ipynb")
    setup = next(s for s in sections if s.key == "Setup")
    assert setup.code_cells
    cost = lambda s: len(s.code_cells) * workshop.CELL_MINUTES + s.code_lines * workshop.LINE_MINUTES
    framing = {"Title", "Overview", "Setup", workshop.SETUP_CHECK_SECTION, "Summary", "Next"}
    overview_only = workshop.block("01", ROOT / "notebooks" / "01_generators_and_iterables.ipynb", [], [], None)
    # Every plan teaches them, even one that teaches no numbered section of 01. The set-up check is a
    # command (`python -m helpers.check`), not a section of 01.
    assert workshop.SETUP_CHECK_SECTION not in {s.key for s in sections}
    assert overview_only.code == pytest.approx(sum(cost(s) for s in sections if s.key in framing))
    assert cost(setup) >= workshop.CELL_MINUTES


# ---------------------------------------------------------------- following a plan as an instructor who did not write it


def test_each_half_day_says_what_to_drop_when_it_runs_late():
    """The model's times are the low end (a learner's estimate ran 1.3 to 1.5 times as long), so every half day
    names what to drop, in order. Each cut names a block and section of its half day; dropping them all leaves
    no section without what it builds on, keeps the one-day plan's point, and leaves room for blocks 1.3 times
    as long as shown."""
    from tools.book import discover

    paths = discover()
    present = {p.name[:2] for p in paths}
    by_number = {p.name[:2]: p for p in paths}
    low = workshop.LEARNER_ESTIMATE_HOURS[0] / workshop.MODEL_HOURS_THEN
    for name, parts in workshop.PLANS.items():
        assert len(workshop.LATE_CUTS[name]) == len(parts), name
        cut_parts = []
        for part, cuts in zip(parts, workshop.LATE_CUTS[name]):
            for cut in cuts:
                part = workshop.apply_cut(part, cut, paths)      # ValueError if the cut names nothing taught
            cut_parts.append(part)
        cut_plan = [(label, workshop.HALF_DAY_MINUTES,
                     [workshop.planned_block(b, by_number[b.notebook], None) for b in part])
                    for label, part in zip(workshop.PARTS[name], cut_parts)]
        assert workshop.skipped_prerequisites(cut_plan, present) == [], name
        for (label, budget, blocks), freed in zip(cut_plan, workshop.late_cuts(name, None, paths)):
            assert freed and all(minutes > 0 for _, minutes in freed), (name, label, freed)
            assert sum(b.minutes for b in blocks) * low <= budget, (name, label)
        if name == "One day":
            taught = {(b.notebook[:2], k) for _, _, blocks in cut_plan for b in blocks for k in b.taught}
            assert taught & workshop.MEMORY_DEMONSTRATIONS and {("07", "2"), ("07", "3"), ("07", "4")} <= taught
    with pytest.raises(ValueError, match="does not teach §9"):
        workshop.apply_cut(workshop.PLANS["One day"][1], workshop.Cut("05", "9"), paths)
    text = workshop.page(None, paths)
    one_day = text[text.index("## One day"):text.index("## Two days")]
    assert one_day.count("**Running late?** Drop, in this order: ") == 2
    assert "05 §3 (One technique at a time, on the page cache and on a slow store)" in one_day


def test_the_day_starts_in_quick_mode_and_warns_before_notebook_06():
    """The plans' times are quick mode's, which is not the default: the first row of each day says how to set it,
    and every block of notebook 06 (whose servers listen on every interface) points to the network warning."""
    from tools.book import discover

    text = workshop.page(None, discover())
    for day in ("### Morning", "### Day 1, morning"):
        first = text[text.index(day):].split("\n| 9:30")[0]
        assert "`TUTORIAL_QUICK=1 python -m helpers.check`" in first and "TUTORIAL_QUICK=1 jupyter lab" in first
    second_day = text[text.index("### Day 2, morning"):].split("\n| 9:30")[0]
    assert "TUTORIAL_QUICK=1 jupyter lab" in second_day
    rows = [line for line in text.splitlines() if re.match(r"\| \d+:\d\d–", line) and "](06_scaling_out" in line]
    assert len(rows) == 1     # the two-day block
    assert rows and all("every network interface: see the warning below" in row for row in rows)
    demo = next(line for line in text.splitlines() if re.match(r"\| \d+:\d\d–", line) and "**demonstration**" in line)
    assert demo.startswith("| 15:") and "](05_pipeline_profiling" in demo
    assert f"{workshop._demo_gigabytes():.1f} GB of photo-sized digits" in text


def test_a_page_made_without_a_run_says_its_waiting_is_zero():
    from tools.book import discover

    paths = discover()
    assert workshop.NO_RECORD in workshop.page(None, paths)
    record = {"notebooks": {p.name: {"cells": [[3, 120.0]]} for p in paths}, "quick": True}
    assert workshop.NO_RECORD not in workshop.page(record, paths)
    blocks = [b for _, _, part in workshop.plans(record, paths)["Two days"] for b in part]
    assert {b.waiting for b in blocks} == {2.0}     # the run's two minutes per notebook, now counted


@pytest.mark.parametrize("kind", ["fifo", "folder", "device"])
def test_a_record_path_that_is_not_a_file_is_named_not_opened(tmp_path, kind):
    """`measure --record PATH` blocked for ever on a FIFO and ended in IsADirectoryError's traceback on a folder
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
    done = subprocess.run([sys.executable, "-m", "tools.workshop", "measure", "--record", str(path)], cwd=ROOT,
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
