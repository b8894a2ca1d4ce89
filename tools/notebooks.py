"""Maintenance for the notebooks: strip outputs, keep Colab links in sync, save the lessons' code.

    python -m tools.notebooks clean   # drop outputs and execution counts from every notebook; give cells ids
    python -m tools.notebooks sync    # rewrite Colab badges and install cells from helpers.setup.config
    python -m tools.notebooks save    # write every `#@save` cell into helpers/lessons/ (see below)
    python -m tools.notebooks check   # exit 1 if any notebook has outputs, a cell without an id, a stale URL, or unsaved code
    python -m tools.notebooks strip-solutions OUT_DIR   # learner copies: the solutions taken out (see below)

The repository URL lives only in helpers/setup/config.py (REPO_URL, REPO_BRANCH).

`strip-solutions` writes every notebook into OUT_DIR (never notebooks/ itself: the originals keep the solutions, for
the instructor) without the cells between the `### Solutions` heading and `## Summary`, with one empty code cell per
exercise in their place and the exercises' "Solutions are below" turned into where to write. Outputs are cleared.

Code is born in the lesson, d2l-style: a code cell whose first line is `#@save` holds code that a later
notebook, a test or a benchmark reuses. `save` copies those cells, in order, into one generated module per
notebook, `helpers/lessons/<notebook name without its number>.py` (notebook 03_pydataset_autoencoder.ipynb
gives `helpers.lessons.pydataset_autoencoder`), headed by a note that it is generated and, above each
cell, where in the notebook it comes from. A saved cell may only define things (imports, functions,
classes, constants): it runs both in the notebook and when the module is imported. It may use `np`, `tf`
and `keras`, which every notebook's setup cell provides; anything else it imports itself.
"""
from __future__ import annotations

import ast
import json
import re
import sys
import uuid
from pathlib import Path

from helpers.setup.config import REPO_BRANCH, REPO_URL

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
LESSON_DIR = ROOT / "helpers" / "lessons"
PACKAGE_NAME = "bigger-than-memory"
SAVE_MARKER = "#@save"
# What a saved cell may hold at its top level: definitions only, so that importing the module runs nothing.
DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef, ast.Assign,
               ast.AnnAssign)
LESSON_HEADER = """\
# Generated from {notebook} by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
\"\"\"{title}: the code its lesson writes, saved for later notebooks, tests and benchmarks.\"\"\"
"""
# The names every notebook's setup cell provides, imported by a generated module only where its code uses them
# (so that a module using only Keras also runs on a machine without TensorFlow, as tools/gpu_appetite.py must).
SETUP_NAMES = {"np": "import numpy as np", "tf": "import tensorflow as tf", "keras": "import keras"}


def notebooks() -> list[Path]:
    return sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def colab_url(notebook: Path) -> str:
    """The 'Open in Colab' address of a notebook in this repository."""
    repo = REPO_URL.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{repo}/blob/{REPO_BRANCH}/notebooks/{notebook.name}"


def github_url(notebook: Path) -> str:
    return f"{REPO_URL}/blob/{REPO_BRANCH}/notebooks/{notebook.name}"


def badges(notebook: Path) -> str:
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(notebook)})"
        f" · [View on GitHub]({github_url(notebook)})"
    )


def pip_target() -> str:
    return f"{PACKAGE_NAME} @ git+{REPO_URL}@{REPO_BRANCH}"


def outputs_of(cells: list[dict]) -> list[int]:
    """Indices of code cells that carry outputs or an execution count."""
    return [
        i
        for i, c in enumerate(cells)
        if c.get("cell_type") == "code" and (c.get("outputs") or c.get("execution_count") is not None)
    ]


def stale_links(notebook: Path, cells: list[dict]) -> list[str]:
    """Colab/GitHub links or pip targets in the notebook that differ from helpers.setup.config."""
    text = "".join("".join(c.get("source", "")) for c in cells)
    problems = []
    if colab_url(notebook) not in text:
        problems.append(f"missing Colab link {colab_url(notebook)}")
    if pip_target() not in text:
        problems.append(f"missing Colab install of {pip_target()!r}")
    return problems


class SaveError(ValueError):
    """A `#@save` cell that cannot be saved as it is."""


def lesson_module(notebook: Path) -> str:
    """The module a notebook's saved cells go to: its file name without the number.

    >>> lesson_module(Path("notebooks/03_pydataset_autoencoder.ipynb"))
    'pydataset_autoencoder'
    """
    return notebook.stem.split("_", 1)[1]


def saved_cells(notebook: Path, cells: list[dict]) -> list[tuple[str, int, str]]:
    """(section heading, cell number, code without the marker) of every `#@save` cell, checked to define only."""
    section, saved = "", []
    for number, cell in enumerate(cells):
        source = "".join(cell.get("source", ""))
        if cell["cell_type"] == "markdown":
            heading = re.search(r"^##+ (.+)$", source, re.M)
            section = heading[1].strip() if heading else section
            continue
        first, _, rest = source.partition("\n")
        if first.strip() != SAVE_MARKER:
            continue
        where = f"{notebook.name}, cell {number}"
        try:
            tree = ast.parse(rest)
        except SyntaxError as e:
            raise SaveError(f"{where}: the saved cell is not plain Python ({e.msg}, line {e.lineno}).") from None
        for node in tree.body:
            docstring = isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
            if not (isinstance(node, DEFINITIONS) or docstring):
                raise SaveError(f"{where}, line {node.lineno + 1}: a saved cell may only define things (imports, "
                                f"functions, classes, constants), so that importing the module runs nothing; move "
                                f"`{ast.get_source_segment(rest, node).splitlines()[0]}` to a cell of its own.")
        saved.append((section, number, rest.strip("\n")))
    return saved


def lesson_source(notebook: Path, cells: list[dict]) -> str | None:
    """The generated module of a notebook's saved cells, or None when it has none."""
    saved = saved_cells(notebook, cells)
    if not saved:
        return None
    title = next(("".join(c["source"]).lstrip("# ").splitlines()[0] for c in cells if c["cell_type"] == "markdown"),
                 notebook.stem)
    used = {node.id for _, _, code in saved for node in ast.walk(ast.parse(code)) if isinstance(node, ast.Name)}
    parts = [LESSON_HEADER.format(notebook=f"notebooks/{notebook.name}", title=title.replace('"', "'")),
             *(f"{line}\n" for name, line in SETUP_NAMES.items() if name in used)]
    for section, number, code in saved:
        parts.append(f"\n\n# {'-' * 16} from {notebook.name}, {section or 'the top'} (cell {number})\n{code}\n")
    return "".join(parts)


def save_lessons(check: bool = False) -> list[str]:
    """Write (or, with `check`, only compare) every notebook's lesson module; return what differs or is stale."""
    wanted = {}
    for path in notebooks():
        source = lesson_source(path, json.loads(path.read_text(encoding="utf-8"))["cells"])
        if source is not None:
            wanted[LESSON_DIR / f"{lesson_module(path)}.py"] = source
    wanted[LESSON_DIR / "__init__.py"] = ('"""Code written in the notebooks and saved from them by '
                                          '`python -m tools.notebooks save` (one module per notebook)."""\n')
    problems = []
    for path, source in wanted.items():
        if not path.exists() or path.read_text(encoding="utf-8") != source:
            problems.append(f"{path.relative_to(ROOT)} differs from its notebook's #@save cells")
            if not check:
                LESSON_DIR.mkdir(exist_ok=True)
                path.write_text(source, encoding="utf-8")
    for stale in sorted(set(LESSON_DIR.glob("*.py")) - set(wanted)) if LESSON_DIR.is_dir() else []:
        problems.append(f"{stale.relative_to(ROOT)} comes from no notebook")
        if not check:
            stale.unlink()
    return problems


SOLUTIONS_HEADING = re.compile(r"^### Solutions\s*$", re.M)
SUMMARY_HEADING = re.compile(r"^## Summary\s*$", re.M)
SOLUTION_LABEL = re.compile(r"^# Solution (\d+)")
LEARNER_NOTE = ("### Your answers\n\nWrite your answers in the cells below, one per exercise. "
                "The solutions are in your instructor's copy of the notebook.")


def strip_solutions(cells: list[dict]) -> tuple[list[dict], int]:
    r"""The cells of a learner's copy, and how many solution cells were taken out.

    >>> cells = [{"cell_type": "markdown", "source": "## Exercises\n\n1. Do it.\n\nSolutions are below. Try first."},
    ...          {"cell_type": "markdown", "source": "### Solutions"},
    ...          {"cell_type": "code", "source": "# Solution 1\nprint(42)", "outputs": []},
    ...          {"cell_type": "markdown", "source": "## Summary\n\nDone."}]
    >>> learner, removed = strip_solutions(cells)
    >>> removed, [c["cell_type"] for c in learner], learner[2]["source"]
    (1, ['markdown', 'markdown', 'code', 'markdown'], '# Exercise 1: your answer')
    """
    text = ["".join(c.get("source", "")) for c in cells]
    start = next((i for i, t in enumerate(text) if _is_markdown(cells[i]) and SOLUTIONS_HEADING.search(t)), None)
    if start is None:
        return [dict(c) for c in cells], 0
    end = next((i for i in range(start + 1, len(cells)) if _is_markdown(cells[i]) and SUMMARY_HEADING.search(text[i])),
               len(cells))
    numbers = [int(m[1]) for t in text[start + 1:end] if (m := SOLUTION_LABEL.match(t))]
    answers = [{"cell_type": "code", "execution_count": None, "id": f"answer-{n}", "metadata": {}, "outputs": [],
                "source": f"# Exercise {n}: your answer"} for n in numbers or [1]]
    heading = dict(cells[start], source=SOLUTIONS_HEADING.sub(LEARNER_NOTE, text[start]))
    learner = []
    for cell, source in zip(cells[:start], text[:start]):
        if _is_markdown(cell):
            cell = dict(cell, source=re.sub(r"Solutions are below\.( Try first\.)?",
                                            "Write your answers under *Your answers* below.", source))
        learner.append(dict(cell))
    return learner + [heading, *answers] + [dict(c) for c in cells[end:]], end - start - 1


def _is_markdown(cell: dict) -> bool:
    return cell.get("cell_type") == "markdown"


def write_learner_copies(out_dir: Path, paths: list[Path] | None = None) -> list[tuple[Path, int]]:
    """Write learner copies of the notebooks into `out_dir`; return (copy, solution cells removed) for each."""
    out_dir = Path(out_dir).resolve()
    if out_dir == NOTEBOOK_DIR.resolve():
        raise ValueError(f"{out_dir} holds the instructor's notebooks: choose another folder for the learner copies")
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for path in paths or notebooks():
        nb = json.loads(path.read_text(encoding="utf-8"))
        nb["cells"], removed = strip_solutions(nb["cells"])
        taken = {c.get("id") for c in nb["cells"]}
        for number, c in enumerate(nb["cells"]):
            if c["cell_type"] == "code":
                c["outputs"], c["execution_count"] = [], None
            if "id" not in c and nb.get("nbformat_minor", 0) >= 5:     # nbformat 4.5 wants an id on every cell
                c["id"] = f"learner-{number}"
                while c["id"] in taken:
                    c["id"] += "x"
                taken.add(c["id"])
        _save(out_dir / path.name, nb)
        written.append((out_dir / path.name, removed))
    return written


def _rewrite(source: str, notebook: Path) -> str:
    source = re.sub(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)( · \[View on GitHub\]\([^)]*\))?", badges(notebook), source)
    return re.sub(rf"{PACKAGE_NAME} @ git\+[^\s\"']+", pip_target(), source)


def _save(path: Path, nb: dict) -> None:
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    command = (argv or sys.argv[1:] or ["check"])[0]
    bad = 0
    if command == "strip-solutions":
        args = (argv or sys.argv[1:])[1:]
        if len(args) != 1:
            print("usage: python -m tools.notebooks strip-solutions OUT_DIR", file=sys.stderr)
            return 2
        try:
            written = write_learner_copies(Path(args[0]))
        except ValueError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
        for path, removed in written:
            print(f"{path}: {removed} solution cell{'s' * (removed != 1)} taken out"
                  + ("" if removed else " (no '### Solutions' heading: copied as it is)"))
        return 0
    if command in ("save", "check"):
        for problem in save_lessons(check=command == "check"):
            print(problem if command == "check" else f"saved: {problem.split(' ')[0]}")
            bad += command == "check"
        if command == "save":
            return 0
    for path in notebooks():
        nb = json.loads(path.read_text(encoding="utf-8"))
        if command == "clean":
            for c in nb["cells"]:
                if c["cell_type"] == "code":
                    c["outputs"], c["execution_count"] = [], None
                if not c.get("id"):   # nbformat 4.5 wants one per cell, and warns (later: fails) without
                    c["id"] = uuid.uuid4().hex[:8]
            _save(path, nb)
        elif command == "sync":
            for c in nb["cells"]:
                c["source"] = _rewrite("".join(c["source"]), path).splitlines(keepends=True)
            _save(path, nb)
        elif command == "check":
            no_id = [i for i, c in enumerate(nb["cells"]) if not c.get("id")]
            for problem in ([f"outputs in cells {outputs_of(nb['cells'])}"] if outputs_of(nb["cells"]) else []) + (
                    [f"cells {no_id} have no id (clean gives them one)"] if no_id else []) + stale_links(path, nb["cells"]):
                print(f"{path.name}: {problem}")
                bad += 1
        else:
            print(__doc__)
            return 2
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
