"""The workshop kit: a one-day and a two-day plan measured from the notebooks, and the offline preparation.

    python -m tools.workshop measure           # per notebook and section: words, code cells and lines, run time
    python -m tools.workshop plan              # the one-day and two-day plans (Markdown), from the last book build
    python -m tools.workshop prepare DIR       # the folder to copy onto each machine: series, data, wheels
                                               # (a new or empty DIR, or one it made: `prepare_problem`)

Run times come from a book build's record (`python -m tools.book --quick` writes build/book/record.json): each
cell's wall time in that run. How a block's learner time is computed (`minutes`):

    reading   prose words of the sections taught / READ_WPM
    code      per code cell taught: CELL_MINUTES (run it, look at the output) + its lines × LINE_MINUTES (read them)
    waiting   the measured run time of EVERY cell of the notebook: learners run the sections they are not taught
              too (later sections and the checks use their variables), they just do not stop to read them
    exercises per exercise chosen: its statement at READ_WPM + its solution's lines × WRITE_MINUTES (writing
              your own) + the solution's measured run time

The rates (constants below): prose read to learn it at 150 words a minute, a line of code written at a minute, half
a minute to run a cell and look at its output; the rate for reading code beside the prose that explains it (about 12
lines a minute) was set once so that notebooks 01 to 06 come to the 9 to 10 hours an instructor reported for working
through them. None was measured on learners: the page says so, shows the range a learner's reading of the series gave
(15 to 17 hours against the 11.5 computed then, issue 27) and leaves the calibration to a timed walk-through by a
reader who did not write the notebooks. Everything else follows from the notebooks and the run.

The plans (`PLANS`) are half days of blocks, each with its learning objective; `schedule` gives them clock times and
a break, and `skipped_prerequisites` refuses a plan that teaches a section before one it builds on (`PREREQUISITES`).
Each half day names what to drop first when it runs late (`LATE_CUTS`, in order, with the minutes each frees).
"""
from __future__ import annotations

import argparse
import json
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass, field, replace
from pathlib import Path

from helpers.storage.files import atomic_write_text
from tools import folders
from tools.build_record import RecordError, read_record

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
RECORD = ROOT / "build" / "book" / "record.json"

READ_WPM = 150             # prose read to learn it (casual reading runs at 200 to 250 words a minute)
CELL_MINUTES = 0.5         # run a cell, look at its output
LINE_MINUTES = 0.08        # read a line of code beside its prose (set so that notebooks 01-06 total 9-10 h,
                           # an instructor's report; not a timed walk-through: see `honest_time`)
WRITE_MINUTES = 1.0        # write a line of an exercise's solution yourself
DAY_MINUTES = 360          # 9:00 to 17:00, less lunch (1 h), two breaks (30 min) and 30 min for machines and questions

# The plans: each part (a half day) is a list of blocks; each block names its notebook (number), the sections
# taught ("all", or their numbers), the exercises set ("all" or their numbers) and what a learner can do after it.
# A demonstration (`demo=True`) is run by the instructor in a full run, on the projector, so that its effect shows
# at full size; the learners watch, and its waiting is the notebook's full-run time (README's table). The minutes
# are computed from the notebooks and the recorded run, never typed in. A block whose notebook is not in the build
# (08 on a branch without it) is left out, and the page names it.


@dataclass(frozen=True)
class Planned:
    title: str
    notebook: str
    taught: object          # "all" or a list of section numbers
    exercises: object       # "all" or a list of exercise numbers
    objective: str          # what a learner can do after the block
    demo: bool = False      # run by the instructor in a full run (TUTORIAL_QUICK=0), on the projector


PLANS = {
    "One day": [[
        Planned("Data that arrives one piece at a time", "01", ["1", "2", "3", "5", "6", "7"], [],
                "stream records from files with a generator into `fit`, and measure that a generator holds "
                "one item where a list holds them all"),
        Planned("Sharded TFRecord files, written safely", "02", ["1", "2", "3", "4", "5", "8"], [],
                "convert arrays to sharded raw `uint8` TFRecords with a manifest, read them back bit for bit, "
                "and find a damaged shard"),
        Planned("A PyDataset, from the ground up", "03", ["1", "2"], [],
                "write a `keras.utils.PyDataset` over a folder of image files"),
        Planned("A tf.data pipeline that feeds a model", "04", ["1", "2", "4", "5", "7"], [1],
                "build the pipeline over shards step by step, train with a validation split, and ask whether "
                "the pipeline could feed a GPU"),
    ], [
        Planned("Is training input-bound?", "05", ["1", "2", "3", "8"], [],
                "write block records, time the pipeline alone, the model alone and both together, measure "
                "each tf.data technique on the page cache and a slow store, and see streaming train under a "
                "memory budget that kills loading"),
        Planned("Bigger than memory, demonstrated", "05", ["8"], [],
                "see training stream a dataset larger than its memory budget while loading the same data is "
                "killed, at full size", demo=True),
        Planned("Your own folder of photos", "07", ["1", "2", "3", "4"], [],
                "measure `image_dataset_from_directory`, find and name the bad files of a folder, and convert "
                "it to records resized once"),
    ]],
    "Two days": [[
        Planned("Generators and iterables", "01", "all", [1, 3],
                "stream data with generators into Keras, and say why a Python generator does not run in "
                "parallel"),
        Planned("TFRecord files, written safely", "02", "all", [1, 3],
                "convert data to sharded TFRecords safely and resumably, choose the encoding, shuffle "
                "class-sorted data, and survive a damaged shard"),
    ], [
        Planned("A PyDataset over PNG files", "03", ["1", "2", "3", "4", "5", "6", "7", "8"], [],
                "stream a CIFAR-10 autoencoder from PNG files with a PyDataset, checkpoint it, and measure "
                "what streaming costs against memory"),
        Planned("tf.data, step by step", "04", "all", [1],
                "build, train, checkpoint and resume a tf.data pipeline, and measure whether it could feed "
                "a GPU"),
    ], [
        Planned("Profiling a pipeline", "05", ["1", "2", "3", "6", "8"], [],
                "diagnose an input-bound pipeline, measure each tf.data technique with its interval on the "
                "page cache and a slow store, and show memory flat while streaming"),
        Planned("Scaling out", "06", ["1", "2", "3", "4", "5", "6"], [],
                "train on several devices and processes, use the tf.data service and Beam, and keep "
                "preprocessing between runs"),
    ], [
        Planned("The capstone", "07", "all", [],
                "take a folder of photos from bad files to a trained classifier, and prove whether the "
                "pipeline keeps up"),
        Planned("Exact resume, global shuffle, Grain", "08", ["1", "2", "3", "4", "6"], [],
                "resume an epoch exactly and shuffle globally with ArrayRecord and Grain"),
    ]],
}
PARTS = {"One day": ("Morning", "Afternoon"),
         "Two days": ("Day 1, morning", "Day 1, afternoon", "Day 2, morning", "Day 2, afternoon")}
HALF_DAY_MINUTES = DAY_MINUTES / 2
# A half day's clock: the morning starts at 9:30 after half an hour for machines (the set-up check) or questions,
# the afternoon at 13:45 after lunch; each half has one break of BREAK_MINUTES, placed after the block that ends
# nearest its middle. Morning and afternoon then end at 12:45 and 17:00 when their blocks fill the half day.
PART_STARTS = {"morning": 9 * 60 + 30, "afternoon": 13 * 60 + 45}
BREAK_MINUTES = 15

# What a section builds on: taught before it in every plan, or the plan is refused (`skipped_prerequisites`). Within
# a notebook, what a section's lesson uses (05 §1 writes the block records §3, §4 and §6 read; 07 §4 converts the
# files §3 scanned); across notebooks, the lesson a section takes for granted (04 §2 reads the shards 02 §3 taught
# to write). A test checks that every entry names sections the notebooks have, and that every section of 01-07
# but the first of each is listed (an empty list: it stands alone).
PREREQUISITES = {
    ("01", "2"): [("01", "1")], ("01", "3"): [("01", "2")], ("01", "4"): [("01", "2")],
    ("01", "5"): [("01", "2")], ("01", "6"): [("01", "2")], ("01", "7"): [("01", "6")],
    ("01", "8"): [("01", "7")],
    ("02", "2"): [("02", "1")], ("02", "3"): [("02", "2")], ("02", "4"): [("02", "3")],
    ("02", "5"): [("02", "3")], ("02", "6"): [("02", "3")], ("02", "7"): [("02", "3")],
    ("02", "8"): [("02", "3")],
    ("03", "2"): [("03", "1")], ("03", "3"): [], ("03", "4"): [("03", "2"), ("03", "3")], ("03", "5"): [("03", "4")],
    ("03", "6"): [("03", "5")], ("03", "7"): [("03", "4")], ("03", "8"): [("03", "2"), ("03", "4")],
    ("03", "9"): [("03", "2")], ("03", "10"): [],   # §3, the article's model, and §10, its bugs, stand alone
    ("04", "2"): [("04", "1"), ("02", "3")], ("04", "3"): [("04", "2")], ("04", "4"): [("04", "2")],
    ("04", "5"): [("04", "4")], ("04", "6"): [("04", "4")], ("04", "7"): [("04", "2"), ("04", "4")],
    ("04", "8"): [("04", "2")],
    ("05", "1"): [("02", "2")], ("05", "2"): [("05", "1"), ("04", "7")],
    ("05", "3"): [("05", "1"), ("05", "2")], ("05", "4"): [("05", "1"), ("05", "3")],
    ("05", "5"): [("05", "3")], ("05", "6"): [("05", "1"), ("05", "2"), ("05", "3")],
    ("05", "7"): [("05", "2")], ("05", "8"): [("04", "2")], ("05", "9"): [("05", "1")],
    ("06", "2"): [("06", "1"), ("04", "4")], ("06", "3"): [("06", "2")], ("06", "4"): [("06", "1"), ("04", "2")],
    ("06", "5"): [("06", "1"), ("02", "3")], ("06", "6"): [("06", "4")],
    ("07", "2"): [("07", "1")], ("07", "3"): [("07", "1")], ("07", "4"): [("07", "3"), ("02", "3")],
    ("07", "5"): [("07", "4")], ("07", "6"): [("07", "5")], ("07", "7"): [("07", "2"), ("07", "6"), ("05", "2")],
    ("99", "2"): [("02", "2")], ("99", "3"): [("05", "1"), ("05", "2")],
}
# The section a plan's "bigger than memory" demonstration must hold (issue 27, item 8): one is enough.
MEMORY_DEMONSTRATIONS = {("05", "8")}


@dataclass(frozen=True)
class Cut:
    """What to drop from a half day when it runs late: a section of a block ("5"), the block's exercises
    ("exercises") or the whole block ("block"), of the block teaching `notebook` in that half day."""
    notebook: str
    item: str


# Per plan and half day, what to drop first when the blocks run longer than the model says (a learner's estimate
# ran 1.3 to 1.5 times as long: `honest_time`), in order. A test keeps every cut valid: each names a block of its
# half day and a section it teaches, dropping them all leaves no section without what it builds on, the one-day
# plan keeps its memory demonstration and 07 §2-4, and they leave room for blocks 1.3 times as long as shown.
LATE_CUTS = {
    "One day": [
        [Cut("03", "block"), Cut("02", "5"), Cut("04", "exercises"), Cut("04", "5")],
        [Cut("05", "3"), Cut("05", "2")],
    ],
    "Two days": [
        [Cut("01", "exercises"), Cut("02", "exercises"), Cut("02", "7")],
        [Cut("04", "exercises"), Cut("03", "8"), Cut("04", "8"), Cut("04", "6")],
        [Cut("05", "6"), Cut("06", "3"), Cut("05", "3")],
        [Cut("08", "6"), Cut("08", "3"), Cut("07", "7")],
    ],
}


@dataclass
class Section:
    key: str                 # "3" for "## 3. ...", else the heading ("Overview", "Setup", "Check your work", ...)
    title: str
    words: int = 0
    code_cells: list[int] = field(default_factory=list)
    code_lines: int = 0


@dataclass
class Exercise:
    number: int
    words: int
    solution_cells: list[int] = field(default_factory=list)
    solution_lines: int = 0


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return source if isinstance(source, str) else "".join(source)


def _words(markdown: str) -> int:
    return len(re.sub(r"```.*?```|\(https?://[^)]*\)|[#*`|>-]", " ", markdown, flags=re.S).split())


def _lines(code: str, comments: bool = True) -> int:
    return sum(1 for line in code.splitlines() if line.strip() and (comments or not line.lstrip().startswith("#")))


def read(path: Path) -> tuple[list[Section], list[Exercise]]:
    """A notebook's sections (split at `## ` headings) and its exercises with their solutions' size.

    Cells after `### Solutions` belong to the exercises, not to a section; `# Solution N` starts solution N.
    """
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    sections = [Section("Title", "Title")]
    exercises: dict[int, Exercise] = {}
    in_solutions, current = False, None
    for number, cell in enumerate(cells):
        text = _source(cell)
        if cell["cell_type"] == "markdown":
            heading = re.search(r"^## (.+)$", text, re.M)
            if heading:
                in_solutions = False
                name = heading[1].strip()
                numbered = re.match(r"(\d+)\.\s", name)
                sections.append(Section(numbered[1] if numbered else name, name))
            if re.search(r"^### Solutions", text, re.M):
                in_solutions = True
                continue
            if sections[-1].key == "Exercises" and not in_solutions:
                for item in re.findall(r"^(\d+)\. (.*?)(?=^\d+\. |\Z)", text, re.M | re.S):
                    exercises[int(item[0])] = Exercise(int(item[0]), _words(item[1]))
                sections[-1].words += _words(re.sub(r"^\d+\. .*", "", text, flags=re.M | re.S))
            elif not in_solutions:
                sections[-1].words += _words(text)
            continue
        if in_solutions:
            label = re.match(r"# Solution (\d+)", text)
            current = int(label[1]) if label else current
            if current is not None:
                exercise = exercises.setdefault(current, Exercise(current, 0))
                exercise.solution_cells.append(number)
                exercise.solution_lines += _lines(text, comments=False)   # the code a learner writes
            continue
        sections[-1].code_cells.append(number)
        sections[-1].code_lines += _lines(text)
    return sections, sorted(exercises.values(), key=lambda e: e.number)


def run_seconds(record: dict | None, name: str) -> dict[int, float]:
    """Cell number → seconds in the recorded run (empty when the run did not include the notebook)."""
    notebook = (record or {}).get("notebooks", {}).get(name, {})
    return {number: seconds or 0.0 for number, seconds in notebook.get("cells", [])}


@dataclass
class Block:
    title: str
    notebook: str
    taught: list[str]
    exercises: list[int]
    reading: float
    code: float
    waiting: float
    practice: float
    objective: str = ""
    demo: bool = False

    @property
    def minutes(self) -> float:
        return self.reading + self.code + self.waiting + self.practice


SETUP_CHECK_SECTION = "Is this machine ready for the series?"   # notebook 01's set-up check, run by everyone
ALWAYS_TAUGHT = ("Title", "Overview", "Setup", SETUP_CHECK_SECTION, "Summary", "Next")


def block(title: str, path: Path, taught, exercise_numbers, record: dict | None, demo: bool = False) -> Block:
    """One block of a plan with its learner minutes (see the module's docstring for the formula).

    `taught` is "all" or a list of section numbers; `exercise_numbers` is "all" or a list of exercise numbers.
    """
    sections, exercises = read(path)
    seconds = run_seconds(record, path.name)
    numbered = [s.key for s in sections if s.key.isdigit()]
    keys = set(numbered if taught == "all" else taught) | set(ALWAYS_TAUGHT)
    if demo:   # the instructor's machine ran the setup cell before the block: nobody reads it on the projector
        keys.discard("Setup")
    if taught == "all":
        keys |= {"Check your work", "Exercises"}
    chosen = [s for s in sections if s.key in keys]
    reading = sum(s.words for s in chosen) / READ_WPM
    code = sum(len(s.code_cells) * CELL_MINUTES + s.code_lines * LINE_MINUTES for s in chosen)
    solution_cells = {c for e in exercises for c in e.solution_cells}
    waiting = sum(t for c, t in seconds.items() if c not in solution_cells) / 60
    by_number = {e.number: e for e in exercises}
    numbers = sorted(by_number) if exercise_numbers == "all" else [n for n in exercise_numbers if n in by_number]
    practice = sum(by_number[n].words / READ_WPM + by_number[n].solution_lines * WRITE_MINUTES
                   + sum(seconds.get(c, 0) for c in by_number[n].solution_cells) / 60 for n in numbers)
    shown = numbered if taught == "all" else [k for k in taught if k in numbered]
    return Block(title, path.name, shown, numbers, reading, code, waiting, practice)


def full_run_minutes(notebook: str, readme: Path = ROOT / "README.md") -> float | None:
    """A notebook's full-run time from the README's table of notebooks (its last column, "5.3 min" or "30 s"),
    or None when the table has no such figure."""
    text = readme.read_text(encoding="utf-8") if readme.exists() else ""
    row = re.search(rf"^\| {re.escape(notebook)} \|.*\| ([\d.]+) (min|s) \|\s*$", text, re.M)
    if row is None:
        return None
    return float(row[1]) * (1 if row[2] == "min" else 1 / 60)


def planned_block(planned: Planned, path: Path, record: dict | None) -> Block:
    """A block of a plan: learner time as `block` computes it; a demonstration waits for the notebook's full run
    (the README's figure, the whole notebook's: the sections before the one shown run first)."""
    made = block(planned.title, path, planned.taught, planned.exercises, record, demo=planned.demo)
    made.objective, made.demo = planned.objective, planned.demo
    if planned.demo:
        made.waiting = full_run_minutes(planned.notebook) or 0.0
    return made


def plans(record: dict | None, paths: list[Path]) -> dict[str, list[tuple[str, float, list[Block]]]]:
    """Each plan as its parts (label, budget in minutes, blocks); blocks whose notebook is missing are left out."""
    by_number = {p.name[:2]: p for p in paths}
    return {name: [(label, HALF_DAY_MINUTES, [planned_block(b, by_number[b.notebook], record)
                                              for b in part if b.notebook in by_number])
                   for label, part in zip(PARTS[name], parts)]
            for name, parts in PLANS.items()}


def left_out(paths: list[Path]) -> list[str]:
    """Notebooks a plan names that are not in the build."""
    have = {p.name[:2] for p in paths}
    return sorted({b.notebook for parts in PLANS.values() for part in parts for b in part} - have)


def skipped_prerequisites(plan: list[tuple[str, float, list[Block]]], present: set[str] | None = None) -> list[str]:
    """Each section a plan teaches before (or without) a section it builds on (`PREREQUISITES`), in words. With
    `present` (the notebook numbers in the build), a section of a notebook not in it is not asked for: a partial
    build leaves whole notebooks out, and the page names them."""
    taught_at = {}
    for position, b in enumerate(b for _, _, part in plan for b in part):
        for key in b.taught:
            taught_at.setdefault((b.notebook[:2], key), position)
    problems = []
    for (notebook, key), position in sorted(taught_at.items()):
        for needed in PREREQUISITES.get((notebook, key), []):
            if present is not None and needed[0] not in present:
                continue
            if needed not in taught_at:
                problems.append(f"{notebook} §{key} is taught without {needed[0]} §{needed[1]}, which it builds on")
            elif taught_at[needed] > position:
                problems.append(f"{notebook} §{key} is taught before {needed[0]} §{needed[1]}, which it builds on")
    return problems


def _numbered(path: Path) -> list[str]:
    return [s.key for s in read(path)[0] if s.key.isdigit()]


def apply_cut(part: list[Planned], cut: Cut, paths: list[Path]) -> list[Planned]:
    """The half day `part` without what `cut` drops (ValueError if it names no block or section of it)."""
    by_number = {p.name[:2]: p for p in paths}
    index = next((i for i, b in enumerate(part) if b.notebook == cut.notebook), None)
    if index is None:
        raise ValueError(f"no block teaches notebook {cut.notebook} in this half day")
    planned = part[index]
    if cut.item == "block":
        return part[:index] + part[index + 1:]
    if cut.item == "exercises":
        changed = replace(planned, exercises=[])
    else:
        taught = _numbered(by_number[cut.notebook]) if planned.taught == "all" else list(planned.taught)
        if cut.item not in taught:
            raise ValueError(f"the block of notebook {cut.notebook} does not teach §{cut.item}")
        changed = replace(planned, taught=[k for k in taught if k != cut.item],
                          exercises=[] if planned.taught == "all" and planned.exercises == "all" else
                          planned.exercises)
    return part[:index] + [changed] + part[index + 1:]


def late_cuts(name: str, record: dict | None, paths: list[Path]) -> list[list[tuple[str, float]]]:
    """Per half day of plan `name`, each cut in order as (what it drops, in words; the minutes it frees)."""
    by_number = {p.name[:2]: p for p in paths}
    present = [[b for b in part if b.notebook in by_number] for part in PLANS[name]]
    result = []
    for part, cuts in zip(present, LATE_CUTS.get(name, [])):
        freed = []
        for cut in (c for c in cuts if c.notebook in by_number):
            before = sum(planned_block(b, by_number[b.notebook], record).minutes for b in part)
            part = apply_cut(part, cut, paths)
            after = sum(planned_block(b, by_number[b.notebook], record).minutes for b in part)
            if cut.item == "block":
                what = f"the whole {cut.notebook} block ({next(b.title for b in PLANS[name][len(result)] if b.notebook == cut.notebook)})"
            elif cut.item == "exercises":
                what = f"{cut.notebook}'s exercises"
            else:
                title = next(s.title for s in read(by_number[cut.notebook])[0] if s.key == cut.item)
                what = f"{cut.notebook} §{cut.item} ({title.split('. ', 1)[1]})"
            freed.append((what, before - after))
        result.append(freed)
    return result


def not_taught(plan: list[tuple[str, float, list[Block]]], paths: list[Path]) -> str:
    """What a plan leaves out, section by section, from the notebooks themselves."""
    taught, set_ = {}, {}
    for _, _, part in plan:
        for b in part:
            taught.setdefault(b.notebook, set()).update(b.taught)
            set_.setdefault(b.notebook, set()).update(b.exercises)
    left = []
    for path in paths:
        sections, exercises = read(path)
        if path.name not in taught:
            left.append(f"notebook {path.name[:2]} entirely")
            continue
        skipped = [f"§{s.key} ({s.title.split('. ', 1)[1]})" for s in sections
                   if s.key.isdigit() and s.key not in taught[path.name]]
        unset = [str(e.number) for e in exercises if e.number not in set_[path.name]]
        if skipped or unset:
            left.append(f"{path.name[:2]}: " + ", ".join(skipped + ([f"exercise{'s' * (len(unset) > 1)} "
                                                                     f"{', '.join(unset)}"] if unset else [])))
    if not left:
        return "Nothing is left out: every section and every exercise."
    return ("Left out, and still run for the variables later cells use (sections) or left for after the class "
            "(exercises): " + "; ".join(left) + ".")


def whole_series(record: dict | None, paths: list[Path]) -> list[Block]:
    """Every section and every exercise of every notebook: what working through the series costs."""
    return [block(title(p), p, "all", "all", record) for p in paths]


def title(path: Path) -> str:
    """A notebook's short title: its first heading without the number and the subtitle."""
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    heading = next((re.search(r"^# (.+)$", _source(c), re.M) for c in cells if c["cell_type"] == "markdown"), None)
    text = heading[1] if heading else path.stem
    return text.split(" · ", 1)[-1].split(":")[0].strip()


# ---------------------------------------------------------------- the instructor's page


def _fmt(minutes: float) -> str:
    minutes = round(minutes)
    return f"{minutes // 60} h {minutes % 60:02d}" if minutes >= 60 else f"{minutes}\u00a0min"


def _ranges(numbers) -> str:
    """Numbers as ranges.

    >>> _ranges(["1", "2", "3", "5", "7", "8"])
    '1–3, 5, 7–8'
    """
    values, runs = sorted(int(n) for n in numbers), []
    for n in values:
        if runs and n == runs[-1][1] + 1:
            runs[-1][1] = n
        else:
            runs.append([n, n])
    return ", ".join(f"{a}–{b}" if b > a else f"{a}" for a, b in runs)


def plan_table(blocks: list[Block], budget: float | None = None, label: str = "") -> str:
    rows = ["| block: notebook §§ | exercises set | reading | code | waiting | doing exercises | time |",
            "|---|---|---|---|---|---|---|"]
    for b in blocks:
        sections = f"§{_ranges(b.taught)}" if b.taught else "overview"
        exercises = _ranges(b.exercises) or "none"
        rows.append(f"| {b.title}: [{b.notebook[:2]}]({b.notebook}) {sections} | {exercises} | {_fmt(b.reading)} | "
                    f"{_fmt(b.code)} | {_fmt(b.waiting)} | {_fmt(b.practice)} | **{_fmt(b.minutes)}** |")
    total = sum(b.minutes for b in blocks)
    line = f"{label + ': ' if label else 'Total: '}**{_fmt(total)}**"
    if budget is not None:
        line += (", within" if total <= budget else ", **more than**") + f" the {_fmt(budget)} it has"
    return "\n".join(rows) + f"\n\n{line}."


def _clock(minute: float) -> str:
    minute = round(minute)
    return f"{minute // 60}:{minute % 60:02d}"


def schedule(label: str, budget: float, blocks: list[Block], cuts: list[tuple[str, float]] = ()) -> str:
    """A half day's table: clock times, each block with its learning objective, and the break placed after the
    block that ends nearest the middle of the half day; then the total against the half day's budget, and what to
    drop first when it runs late (`cuts`: what, minutes freed)."""
    afternoon = "afternoon" in label.lower()
    start = PART_STARTS["afternoon" if afternoon else "morning"]
    ends = [sum(b.minutes for b in blocks[:i + 1]) for i in range(len(blocks))]
    pause = min(range(len(blocks)), key=lambda i: abs(ends[i] - budget / 2)) if blocks else None
    rows = ["| clock | block: notebook §§ | after it, a learner can | exercises set "
            "| time (reading + code + waiting + exercises) |", "|---|---|---|---|---|"]
    if afternoon:
        rows.append(f"| {_clock(start - 60)}–{_clock(start)} | *lunch* | | | |")
    elif label.startswith(("Morning", "Day 1")):
        rows.append(f"| {_clock(start - 30)}–{_clock(start)} | machines and questions: everyone runs the set-up "
                    f"check in quick mode (`{QUICK_CHECK_COMMAND}`) and starts JupyterLab in quick mode "
                    f"(`{QUICK_LAB_COMMAND}`; see \"Quick mode\" below) | | | |")
    else:
        rows.append(f"| {_clock(start - 30)}–{_clock(start)} | questions from the day before; machines: JupyterLab "
                    f"started in quick mode again (`{QUICK_LAB_COMMAND}`) | | | |")
    clock = start
    for i, b in enumerate(blocks):
        sections = f"§{_ranges(b.taught)}" if b.taught else "overview"
        what = f"{b.title}: [{b.notebook[:2]}]({b.notebook}) {sections}"
        if b.demo:
            what += " (**demonstration**: the instructor runs the notebook in full, `TUTORIAL_QUICK=0`)"
        if b.notebook[:2] == SERVER_NOTEBOOK:
            what += " (its servers listen on every network interface: see the warning below)"
        parts = " + ".join(f"{m:.0f}" for m in (b.reading, b.code, b.waiting, b.practice))
        rows.append(f"| {_clock(clock)}–{_clock(clock + b.minutes)} | {what} | {b.objective} | "
                    f"{_ranges(b.exercises) or 'none'} | **{_fmt(b.minutes)}** ({parts}) |")
        clock += b.minutes
        if i == pause:
            rows.append(f"| {_clock(clock)}–{_clock(clock + BREAK_MINUTES)} | *break* | | | |")
            clock += BREAK_MINUTES
    end = start + budget + BREAK_MINUTES
    if clock < end - 0.5:
        rows.append(f"| {_clock(clock)}–{_clock(end)} | questions, catching up, exercises left over | | | |")
    total = sum(b.minutes for b in blocks)
    line = (f"{label}: **{_fmt(total)}**" + (", within" if total <= budget else ", **more than**")
            + f" the {_fmt(budget)} it has")
    late = ""
    if cuts:
        freed = sum(minutes for _, minutes in cuts)
        room = budget / (total - freed) if total > freed else float("inf")
        late = ("\n\n**Running late?** Drop, in this order: " + "; ".join(f"{what}, {_fmt(minutes)}"
                                                                      for what, minutes in cuts)
                + f". That frees {_fmt(freed)}, so this half day holds blocks up to {room:.1f} times as long as "
                "shown (a dropped section is still run, for the variables later cells use; a dropped block is not).")
    return "\n".join(rows) + f"\n\n{line}.{late}"


# What the learner estimated (issue 27, item 7: a reading of the series, not a timed walk-through), and
# what this page computed for the whole series when they did. Kept to show the range, not to set the rates.
LEARNER_ESTIMATE_HOURS = (15, 17)
MODEL_HOURS_THEN = 11.5


def honest_time(series: list[Block]) -> list[str]:
    """The page's paragraph on what the rates rest on, with the range a learner's estimate gives."""
    low, high = (hours / MODEL_HOURS_THEN for hours in LEARNER_ESTIMATE_HOURS)
    first_six = sum(b.minutes for b in series if b.notebook[:2] <= "06")
    return [
        "**What these rates rest on, and the range.** None of them was measured on learners. 150 words a minute "
        "and a minute per line written are common rules of thumb; half a minute per cell is a guess; the "
        f"code-reading rate ({LINE_MINUTES:g} minute a line) was set once so that notebooks 01 to 06 came to the "
        "9 to 10 hours an instructor reported for working through them (how that was timed is not recorded; it was "
        f"not a timed walk-through by a reader who did not write them). Here notebooks 01 to 06 come to "
        f"{_fmt(first_six)} and the whole series to {_fmt(sum(b.minutes for b in series))}. A learner's reading of "
        f"the series (issue 27) estimated {LEARNER_ESTIMATE_HOURS[0]} to {LEARNER_ESTIMATE_HOURS[1]} hours against "
        f"the {MODEL_HOURS_THEN:g} hours this page computed then: if the learner is nearer the truth, every block "
        f"below takes {low:.1f} to {high:.1f} times the time it shows, and a half day that fills its time here "
        "would overrun. The calibration the series needs is a measured walk-through: a reader who did not write "
        "the notebooks, timed through at least two of them. It has not been made; until it is, read the times "
        "below as the low end of a range, and cut a block rather than rush one.",
    ]


def _demo_gigabytes() -> float:
    """GB of photo-sized digits a full run of 05 §8 writes (from the set-up check's derived sizes)."""
    from helpers import check   # no TensorFlow: the check asks it in child processes

    return sum(f * each for what, _, f, each in check.DATA_WRITES if what.startswith("05 §8")) / 1e9


NO_RECORD = ("**No run recorded.** This page was made without a book build's record (`build/book/record.json`), so "
             "every block's waiting counts as 0 minutes: the times below are short by each notebook's quick-mode run "
             "time (the landing page's table: about a minute each). Build the book first (`python -m tools.book "
             "--quick`) and the waiting is measured.")
SERVER_NOTEBOOK = "06"   # the notebook whose servers listen on every interface (the network warning)

PLAN_NOTES = {
    "One day": "A day for people who came with their own data: the morning builds streaming from files up to a "
               "tf.data pipeline; the afternoon measures it, shows on each learner's machine (05 §8, quick mode) "
               "training streaming within a memory budget that kills loading, then shows the same at full size "
               "(05 §8 in a full run) on the projector, takes a folder of photos through conversion (07 §2 to §4), "
               "and leaves the "
               "decision table for their own data (notebook 99, about 17 minutes) to read after the day: the "
               "afternoon has no room for it. The demonstration runs all of notebook 05 with `TUTORIAL_QUICK=0` on "
               "the instructor's machine, which needs the real datasets (`python -m helpers.data.datasets download`, "
               "or a kit from `python -m tools.workshop prepare`) and room for what 05 §8 writes in a full "
               f"run ({_demo_gigabytes():.1f} GB of photo-sized digits); start it during the lunch break.",
    "Two days": "Every notebook, most sections, and about half of the exercises; notebook 08 where the series has "
                "it.",
}

BACKWARDS = """## When a measurement comes out backwards on a laptop

Every speed comparison in the series prints a ratio with an interval, measured in alternating rounds on the
learner's own machine. On a laptop in a classroom some come out the other way round: the "faster" pipeline
measures slower, or a gain's interval holds 1. What to say, in this order:

1. **Read the interval first.** If it holds 1, this run has no verdict: the notebook's printed sentence says so.
   Quick mode runs two or three rounds on small data, and its intervals are wide (two rounds give about 50 %
   confidence, not 95 %).
2. **Name what else was running.** Another notebook's kernel still training, a browser with video, a backup or an
   indexer: both sides shared the cores with it. Shut down other kernels (Kernel → Shut Down All Kernels) and run
   the cell again.
3. **Power and heat.** On battery, laptops slow their cores; after a minute of full load they slow again as they
   heat. Plug in; let the machine rest between the long cells.
4. **Quick mode's small data.** With a few thousand records each epoch's start-up (opening files, building the
   pipeline) weighs more than the records themselves; techniques that pay per record show less. The full-run
   figures in [99 · Choosing for your data](99_choosing_for_your_data.ipynb) show the same comparisons at full size.
5. **Some results are meant to come out "backwards".** Reading many files at once gains on a slow store and can
   lose when the files are already in the page cache (RAM): the stored full run measured both
   (`slow_store_parallel_interleave_gain` and `page_cache_parallel_interleave_gain`, row J of notebook 99). A
   backwards result on cached files is the lesson, not a fault.

Then say the rule the series keeps: the verdict belongs to this machine, now; the notebook's words follow its
numbers, so if the printed sentence says "no measurable difference", that is the answer for this laptop."""


def page(record: dict | None, paths: list[Path]) -> str:
    """workshop.md, the instructor's page of the book."""
    series = whole_series(record, paths)
    mode = "quick mode" if (record or {}).get("quick", True) else "a full run"
    parts = [
        "# For instructors: the workshop kit", "",
        f"Working through every section and exercise of the series takes a learner about "
        f"**{_fmt(sum(b.minutes for b in series))}** by the measure below. A one-day class must leave things out; "
        "the plans below say what, and how long each block takes.", "",
        "## How the time of a block is computed", "",
        "From the notebooks themselves and from the run this book was built from "
        f"({mode}), by `tools/workshop.py` (`python -m tools.workshop measure` prints the raw numbers per section):",
        "",
        f"- **reading**: the prose of the sections taught, at {READ_WPM} words a minute (text studied, not skimmed);",
        f"- **code**: per code cell taught, {CELL_MINUTES:g} minute to run it and look at its output, plus "
        f"{LINE_MINUTES:g} minute per line to read it beside the prose that explains it (a demonstration leaves out "
        "its setup cell, which the instructor ran before the block);",
        "- **waiting**: the measured run time of every cell of the notebook, taught or not: learners run the sections "
        "they skip too (later sections and the checks use their variables), without stopping to read them;",
        f"- **exercises**: the statement at the same reading rate, {WRITE_MINUTES:g} minute per line of the "
        "solution (writing your own), and the solution's measured run time.", "",
        *honest_time(series), "",
        *([] if record else [NO_RECORD, ""]),
        f"A teaching day holds {_fmt(DAY_MINUTES)} of learner time: 9:00 to 17:00, less an hour for lunch, two "
        f"breaks of {BREAK_MINUTES} minutes and half an hour for machines and questions. Waiting is measured in this "
        "book's run: in a full run on the real data the waits grow (the landing page gives each notebook's full-run "
        "time), so teach in quick mode and leave full runs for homework or a demonstration.", "",
        "## Every notebook, in full", "",
        plan_table(series),
    ]
    for name, plan in plans(record, paths).items():
        parts += ["", f"## {name}", "", PLAN_NOTES[name]]
        for (label, budget, blocks), cuts in zip(plan, late_cuts(name, record, paths) + [[]] * len(plan)):
            parts += ["", f"### {label}", "", schedule(label, budget, blocks, cuts)]
        parts += ["", not_taught(plan, paths)]
        problems = skipped_prerequisites(plan, {p.name[:2] for p in paths})
        parts += ["", "Every section taught comes after the sections it builds on." if not problems else
                  "**Sections taught without what they build on:** " + "; ".join(problems) + "."]
    missing = left_out(paths)
    if missing:
        parts += ["", f"Not in this build, so not counted above: notebook {', '.join(missing)} (a plan names it; "
                  "it is not in this checkout's notebooks/ folder)."]
    parts += ["", BACKWARDS]
    parts += ["", platforms_section()]
    parts += [
        "", "## Preparing the room", "",
        "On a connected machine, in a checkout, one command leaves a folder to copy onto each learner's machine:", "",
        "```bash", "python -m tools.workshop prepare /media/usb/btm", "```", "",
        "It holds the series with the learners' copies of the notebooks (solutions taken out), the datasets in its "
        "`data/` (copied from this checkout's `data/`, else `python -m helpers.data.datasets download`) and a "
        "`wheels/` folder (`pip download` of requirements.txt at the tested versions of constraints.txt), with a "
        "README.txt saying how to install in the room. Each part that cannot be made (no network) is named with "
        "what to do, and the others are still made. In the room, in `bigger-than-memory/`: `pip install --no-index "
        "--find-links ../wheels -r requirements.txt`, then `jupyter lab notebooks/`.", "",
        "## Learner copies without the solutions", "",
        "```bash", "python -m tools.notebooks strip-solutions learner-notebooks/", "```", "",
        "writes every notebook without the cells between `### Solutions` and `## Summary`, with an empty cell per "
        "exercise in their place; the originals in `notebooks/` keep the solutions for the instructor. The learner "
        "copies still pass their checks: `## Check your work` comes before the exercises.", "",
        "## Quick mode from inside JupyterLab or Colab", "",
        "The helpers read quick mode each time they are called, not when the kernel starts, so it can be switched "
        "from the notebook itself, in a cell above the setup cell:", "",
        "```python", "%env TUTORIAL_QUICK=1", "```", "",
        "or `import os; os.environ[\"TUTORIAL_QUICK\"] = \"1\"`. Then run the notebook from the top (Run → Run All "
        "Cells): sizes chosen by cells that ran before the switch stay as they were. `%env TUTORIAL_QUICK=0` "
        "switches back to a full run. On Colab the same cell works, until the runtime restarts.", "",
    ]
    return "\n".join(parts)


# ---------------------------------------------------------------- platforms, the set-up check, the network

SETUP_CHECK_COMMAND = "python -m helpers.check"
QUICK_CHECK_COMMAND = "TUTORIAL_QUICK=1 python -m helpers.check"
QUICK_LAB_COMMAND = "TUTORIAL_QUICK=1 jupyter lab notebooks/"


# What runs where: (platform, what runs, what does not and why). Tested: Linux and the quick run on 2 cores; the
# other rows say what the code needs that the platform lacks (`resource`, `posix_fadvise`, FUSE, a GPU build).
PLATFORMS = [
    ("Linux", "every notebook and section", "the slow store only where FUSE is installed (`fuse3`)"),
    ("macOS", "every notebook; the CPU branch",
     "skipped, each with a sentence saying why and the stored full-run figure: 05 §8 (a memory budget "
     "needs Linux's /proc), the slow store in 04 §2, 05 §3 and 07 §5 (no FUSE), cold reads in 03 and 05 §9 (no "
     "`posix_fadvise`), 07 §7's pipeline pinned to one core (no `os.sched_setaffinity`)"),
    ("Windows", "every notebook; the CPU branch only",
     "skipped as on macOS, each with its sentence: 05 §8 (no /proc), the slow store (no FUSE), cold reads, "
     "07 §7's one-core run; "
     "and no GPU (TensorFlow 2.11 and newer use one on Windows only through WSL 2). Use WSL 2 or Colab to see them"),
    ("WSL 2 (Windows)", "everything, as on Linux (it is a Linux); a GPU through WSL 2's CUDA support",
     "the slow store only where FUSE is installed (`sudo apt-get install fuse3`)"),
    ("Colab", "every notebook; the GPU branch on a GPU runtime",
     "untested here; files in the data folder vanish when the runtime is recycled, so a full run downloads the "
     "datasets again"),
]
# Without Apache Beam (any platform), 06 §5 says so and is skipped; the set-up check's Beam line says which.


def platforms_section() -> str:
    """The page's sections on platforms (what runs where, troubleshooting), the set-up check and the network."""
    from helpers.check import data_bytes   # no TensorFlow: the check asks it in child processes

    rows = ["| platform | runs | does not run, and why |", "|---|---|---|"]
    rows += [f"| {name} | {runs} | {fails} |" for name, runs, fails in PLATFORMS]
    return "\n".join([
        "## Before the day: the set-up check", "",
        "Ask every learner to run this in a terminal, in the series' folder, before the class (on Colab: "
        f"`!{SETUP_CHECK_COMMAND}` in a cell after the first cell has installed the helpers):", "",
        "```bash", f"{QUICK_CHECK_COMMAND}   # for a class in quick mode, as the plans above are",
        f"{SETUP_CHECK_COMMAND}                     # for full runs", "```", "",
        "It prints one line per check, `ok`, `note` or `FAIL` (green, yellow, red on a terminal), each FAIL with "
        "the fix, and exits with status 1 when a line is FAIL: the Python version (3.10 or newer), TensorFlow 2.16 "
        "or newer with Keras 3, the datasets (a note, not a FAIL, in quick mode, which uses generated stand-ins), "
        "free disk in the data folder against what the series writes (about "
        f"{data_bytes(quick=True) / 1e9:.1f} GB in quick mode and {data_bytes(quick=False) / 1e9:.0f} GB in a full "
        "run, derived from the notebooks' sizes), the usable cores, a GPU, whether notebook 06's tf.data service "
        "can start, and three platform limits, each a note where it applies, since the notebook then skips with a "
        "sentence: a memory budget (05 §8: Linux's /proc), Apache Beam (06 §5) and the slow store (FUSE). "
        "Notebook 01 runs the same check in its section \"Is this machine ready for the series?\". It takes about "
        "10 to 20 s.", "",
        f"For a class taught in quick mode, as the plans above are, the command is `{QUICK_CHECK_COMMAND}` (in "
        "Windows PowerShell: `$env:TUTORIAL_QUICK=1; python -m helpers.check`): without it the check is for a full "
        "run, and a machine without the datasets gets a FAIL it does not need to fix.", "",
        "## What runs where", "",
        "The series is tested on Linux (2 cores, no GPU, quick and full runs). Elsewhere, from what the code needs:",
        "", *rows, "",
        "## Troubleshooting", "",
        "- **Windows**: 05 §8 (the memory budget) and the slow store skip with a sentence each, and "
        "TensorFlow uses no GPU on native Windows. To see them, install WSL 2 (`wsl --install` in an "
        "administrator's PowerShell, then restart) and install Python and the series inside it as on Linux; or use "
        "Colab. Set quick mode in PowerShell with `$env:TUTORIAL_QUICK=1` before `jupyter lab` (untested there).",
        "- **macOS**: the series runs on the CPU branch; 05 §8 and the slow store skip as on Windows. When "
        "notebook 06 starts its servers, the firewall may ask whether Python may accept incoming connections: "
        "choose Deny; the notebook reaches its servers through localhost, and Deny keeps them off the Wi-Fi. Cold "
        "reads cannot be forced (no `posix_fadvise`): those cells say so.",
        "- **Colab**: open a notebook from its badge; its first cell installs the helpers. Choose the runtime "
        "(Runtime → Change runtime type) before running, since changing it restarts the notebook. Files in the data "
        "folder last as long as the runtime: a recycled runtime downloads the datasets again.",
        "- **Apache Beam will not install** (a resolver conflict over protobuf, or no wheel for a new Python): "
        "install the tested set, `pip install -r requirements.txt -c constraints.txt`, on Python 3.11; or leave "
        "Beam out (`pip install -e .` without the `[scale]` extra): notebook 06 §5 then says so and skips, and "
        "everything else runs. The set-up check's Apache Beam line says which: a note when Beam is not installed, "
        "a FAIL when it is installed but does not import (06 §5 would stop there).", "",
        "## Notebook 06's servers and the classroom network", "",
        "**Warning.** Notebook 06's servers (the tf.data service's dispatcher and workers, the multi-worker "
        "training processes) listen on **every network interface** of the learner's machine, **without "
        "authentication**: TensorFlow offers neither a bind address nor credentials, and a tf.data worker runs any "
        "graph a client sends. A classroom shares its Wi-Fi, so anyone on it can reach a learner's servers while "
        "notebook 06 runs. Run notebook 06 on a private network (a room network with client isolation, or a "
        "machine behind a firewall), or on Colab, whose runtime the room's network cannot reach. The set-up check "
        "prints this warning too, and notebook 06 prints it when it starts a server.",
    ])


# ---------------------------------------------------------------- preparing the room

# What a learner's machine needs of the checkout (the package, its install files, the notebooks and data/).
# benchmarks/last_full_run.txt: notebook 99 reads the stored full run's figures from it.
SERIES_FILES = ["README.md", "requirements.txt", "constraints.txt", "pyproject.toml", "data/README.md",
                "benchmarks/last_full_run.txt"]
SERIES_FOLDERS = ["helpers"]
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
    from tools.notebooks import write_learner_copies

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
    atomic_write_text(requirements, "\n".join(wanted + series_requirements(extras) + ["setuptools>=68", "wheel"]) + "\n")
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
    report = [("series", True, f"the helpers and the learners' notebooks (no solutions) in {series}"),
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


def measure(record: dict | None, paths: list[Path]) -> str:
    lines = [f"{'notebook':<32} {'section':<16} {'words':>6} {'cells':>6} {'lines':>6} {'run s':>7}"]
    for path in paths:
        sections, exercises = read(path)
        seconds = run_seconds(record, path.name)
        for s in sections:
            lines.append(f"{path.stem:<32} {s.key[:16]:<16} {s.words:>6} {len(s.code_cells):>6} {s.code_lines:>6} "
                         f"{sum(seconds.get(c, 0) for c in s.code_cells):>7.1f}")
        for e in exercises:
            lines.append(f"{path.stem:<32} {'exercise ' + str(e.number):<16} {e.words:>6} {len(e.solution_cells):>6} "
                         f"{e.solution_lines:>6} {sum(seconds.get(c, 0) for c in e.solution_cells):>7.1f}")
    return "\n".join(lines)


def load_record(path: Path = RECORD) -> dict | None:
    """A book build's record, checked (`tools.build_record.RecordError` naming the file if it is not one); None if missing."""

    return read_record(path) if path.exists() else None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.workshop", description=__doc__.split("\n\n")[0])
    sub = parser.add_subparsers(dest="command", required=True)
    for name in ("measure", "plan"):
        p = sub.add_parser(name)
        p.add_argument("--record", type=Path, default=RECORD, help="a book build's record.json")
    p = sub.add_parser("prepare", help="the folder to copy onto each machine")
    p.add_argument("folder", type=Path)
    args = parser.parse_args(argv)
    if args.command == "prepare":
        return prepare(args.folder.expanduser())
    from tools.notebooks import notebooks

    try:
        record = load_record(args.record)
    except RecordError as e:
        print(f"error: {e}", file=sys.stderr)
        return 2
    if record is None:
        print(f"note: no book build recorded at {args.record}, so run times count as 0: run "
              f"`python -m tools.book --quick` first", file=sys.stderr)
    print(measure(record, notebooks()) if args.command == "measure" else page(record, notebooks()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
