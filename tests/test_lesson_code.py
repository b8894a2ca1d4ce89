"""The copy test: the code a learner copies (a notebook's `#@save` cells) runs on its own.

For every notebook with a smoke file `tests/lesson_smoke/NN.py` (tests/lesson_smoke/README.md):
(a) no saved cell imports the series' own packages (`helpers`, `tools`, `benchmarks`);
(b) its saved cells, pasted in order into an empty file that starts with the imports a learner has
    (`PREAMBLE`, and Grain for notebook 08), followed by the smoke file, run in a fresh process, in an empty
    folder, with a clean environment, and exit 0. The series is installed in editable mode here, so that process
    also refuses to import its packages, as a learner's project would not have them.
A notebook without a smoke file is skipped: its editor adds one when the notebook's lesson code stands alone.
"""
from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

import pytest

from tools.notebooks import read_notebook, saved_cells

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR, SMOKE_DIR = ROOT / "notebooks", ROOT / "tests" / "lesson_smoke"
SERIES_PACKAGES = ("helpers", "tools", "benchmarks")
PREAMBLE = "import numpy as np\nimport tensorflow as tf\nimport keras\n"
EXTRA_IMPORTS = {"08": "import grain\n"}   # the one notebook whose lesson code uses Grain
# Runs the pasted file as __main__, with the series' packages refused (they are importable here, installed in
# editable mode, but not in a learner's project).
RUNNER = """import importlib.abc, runpy, sys
class RefuseTheSeries(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in {packages!r}:
            raise ModuleNotFoundError(f"No module named {{name!r}} (the copy test runs without the series' packages)")
sys.meta_path.insert(0, RefuseTheSeries())
runpy.run_path(sys.argv[1], run_name="__main__")
"""


def numbered_notebooks() -> list[Path]:
    return sorted(p for p in NOTEBOOK_DIR.glob("[0-9][0-9]_*.ipynb"))


def smoke_file(notebook: Path, smoke_dir: Path = SMOKE_DIR) -> Path:
    return smoke_dir / f"{notebook.name[:2]}.py"


def saved_code(notebook: Path) -> list[tuple[str, str]]:
    """(where, code) of each `#@save` cell, in order, found as `tools.notebooks save` finds them."""
    cells = read_notebook(notebook)["cells"]
    return [(f"{notebook.name}, {section or 'the top'} (cell {number})", code)
            for section, number, code in saved_cells(notebook, cells)]


def series_imports(code: str) -> list[str]:
    """The imports in `code` of the series' own packages, or relative ones, anywhere (inside functions too).

    >>> series_imports("import os\\nfrom helpers.measure import Samples\\ndef f():\\n    import tools.notebooks")
    ['helpers.measure', 'tools.notebooks']
    """
    found = []
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            found += [alias.name for alias in node.names if alias.name.split(".")[0] in SERIES_PACKAGES]
        elif isinstance(node, ast.ImportFrom):
            module = "." * node.level + (node.module or "")
            if node.level or module.split(".")[0] in SERIES_PACKAGES:
                found.append(module)
    return found


def import_problems(notebook: Path, smoke: Path | None = None) -> list[str]:
    """Every saved cell (and the smoke file, when given) that imports the series' packages, named."""
    parts = saved_code(notebook) + ([(str(smoke), smoke.read_text(encoding="utf-8"))] if smoke else [])
    return [f"{where} imports {', '.join(names)}" for where, code in parts if (names := series_imports(code))]


def pasted_source(notebook: Path, smoke: Path, preamble: str = PREAMBLE) -> str:
    """What a learner's file holds: the imports they have, the saved cells in order, then the smoke file."""
    cells = "\n\n".join(code for _, code in saved_code(notebook))
    extra = EXTRA_IMPORTS.get(notebook.name[:2], "")
    return f"{preamble}{extra}\n{cells}\n\n\n{smoke.read_text(encoding='utf-8')}"


def run_pasted(source: str, scratch: Path, timeout: float = 600) -> subprocess.CompletedProcess:
    """Run `source` in a fresh process: cwd an empty folder, HOME another, no PYTHONPATH or other settings."""
    code, work, home = scratch / "code", scratch / "work", scratch / "home"
    for folder in (code, work, home):
        folder.mkdir(parents=True)
    pasted = code / "lesson.py"
    pasted.write_text(source, encoding="utf-8")
    env = {"PATH": os.environ.get("PATH", "/usr/bin:/bin"), "HOME": str(home), "LANG": "C.UTF-8",
           "TF_CPP_MIN_LOG_LEVEL": "2"}
    runner = RUNNER.format(packages=set(SERIES_PACKAGES))
    return subprocess.run([sys.executable, "-c", runner, str(pasted)], cwd=work, env=env, capture_output=True,
                          text=True, timeout=timeout)


def with_smoke_file(notebook: Path) -> Path:
    """The notebook's smoke file; a notebook with code to copy must have one (one without is skipped)."""
    smoke = smoke_file(notebook)
    if not saved_code(notebook):
        pytest.skip(f"{notebook.name} has no #@save cells: nothing to copy")
    assert smoke.is_file(), f"{notebook.name} has #@save cells but no smoke file {smoke.relative_to(ROOT)}"
    return smoke


def test_the_central_lessons_are_copy_tested():
    """02's records, 03's PyDataset, 04's pipeline, 05's block records, 07's photo pipeline, 08's exact resume."""
    for number in ("02", "03", "04", "05", "07", "08"):
        assert (ROOT / "tests" / "lesson_smoke" / f"{number}.py").is_file(), number


@pytest.mark.parametrize("notebook", numbered_notebooks(), ids=lambda p: p.name[:2])
def test_saved_cells_import_no_series_package(notebook):
    problems = import_problems(notebook, with_smoke_file(notebook))
    assert not problems, "code a learner copies may import only the standard library, NumPy, TensorFlow, Keras " \
                         "(and Grain in 08):\n" + "\n".join(problems)


@pytest.mark.parametrize("notebook", numbered_notebooks(), ids=lambda p: p.name[:2])
def test_saved_cells_run_pasted_into_an_empty_file(notebook, tmp_path):
    result = run_pasted(pasted_source(notebook, with_smoke_file(notebook)), tmp_path)
    assert result.returncode == 0, f"{notebook.name}'s saved cells + its smoke file failed:\n{result.stderr}"


# The harness itself, on a tiny notebook of our own: it refuses what it must, and its run can fail.
LIGHT = "import numpy as np\n"   # the self-tests need no TensorFlow: a faster start, the same harness


def tiny_notebook(folder: Path, *saved: str) -> Path:
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "## 1. Doubling"}]
    cells += [{"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
               "source": f"#@save\n{code}"} for code in saved]
    cells.append({"cell_type": "code", "metadata": {}, "execution_count": None, "outputs": [],
                  "source": "from helpers.measure import Samples   # not saved: may use the series"})
    path = folder / "50_tiny.ipynb"
    path.write_text(__import__("json").dumps({"cells": cells, "metadata": {}, "nbformat": 4,
                                              "nbformat_minor": 5}), encoding="utf-8")
    return path


def smoke(folder: Path, text: str) -> Path:
    (folder / "smoke").mkdir(exist_ok=True)
    path = folder / "smoke" / "50.py"
    path.write_text(text, encoding="utf-8")
    return path


def test_a_saved_cell_that_imports_the_series_is_refused(tmp_path):
    ok = tiny_notebook(tmp_path, "def double(x):\n    return 2 * np.asarray(x)")
    assert import_problems(ok) == []
    bad = tiny_notebook(tmp_path, "from helpers.measure import Samples\n\ndef double(x):\n    return 2 * x",
                        "def half(x):\n    import tools.notebooks\n    return x / 2")
    problems = import_problems(bad)
    assert len(problems) == 2 and "Doubling (cell 1) imports helpers.measure" in problems[0]
    assert "tools.notebooks" in problems[1]
    assert import_problems(ok, smoke(tmp_path, "from benchmarks import run\n"))   # a smoke file is checked too


def test_the_pasted_file_runs_and_a_failing_smoke_file_fails(tmp_path):
    notebook = tiny_notebook(tmp_path, "def double(x):\n    return 2 * np.asarray(x)",
                             "def quadruple(x):\n    return double(double(x))")
    source = pasted_source(notebook, smoke(tmp_path, "assert quadruple([1, 2]).tolist() == [4, 8]\n"), LIGHT)
    assert source.index("def double") < source.index("def quadruple") < source.index("assert quadruple")
    assert pasted_source(notebook, tmp_path / "smoke" / "50.py").startswith(PREAMBLE)
    passed = run_pasted(source, tmp_path / "good")
    assert passed.returncode == 0, passed.stderr
    wrong = pasted_source(notebook, smoke(tmp_path, "assert quadruple([1]).tolist() == [5], 'wrong'\n"), LIGHT)
    failed = run_pasted(wrong, tmp_path / "bad")
    assert failed.returncode != 0 and "AssertionError: wrong" in failed.stderr


def test_the_run_has_no_series_packages_no_repository_path_and_an_empty_folder(tmp_path):
    probe = ("import os, sys\n"
             "assert os.listdir('.') == [], os.listdir('.')\n"
             "assert 'PYTHONPATH' not in os.environ and 'TUTORIAL_QUICK' not in os.environ\n"
             f"assert not any(p.startswith({str(ROOT)!r}) for p in sys.path if p), sys.path\n"
             "import helpers\n")
    result = run_pasted(probe, tmp_path)
    assert result.returncode != 0 and "No module named 'helpers' (the copy test" in result.stderr, result.stderr
