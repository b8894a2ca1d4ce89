"""Rules every committed notebook follows (nbval executes them separately)."""
import json
import re

import pytest

from helpers.setup.config import data_dir, quick_mode, repo_root
from tools import notebooks as nbtools

NOTEBOOKS = nbtools.notebooks()


def test_there_are_notebooks():
    assert any(p.name.startswith("01_") for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert nbtools.outputs_of(cells) == [], f"{path.name} carries outputs: run `python -m tools.notebooks clean`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_every_cell_has_a_unique_id(path):
    ids = [c.get("id") for c in json.loads(path.read_text(encoding="utf-8"))["cells"]]
    assert all(ids) and len(set(ids)) == len(ids), "run `python -m tools.notebooks clean` (nbformat 4.5 wants cell ids)"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_links_match_the_repository_url(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert nbtools.stale_links(path, cells) == [], "run `python -m tools.notebooks sync`"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_follows_the_house_skeleton(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    markdown = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "markdown")
    number = path.name[:2]
    assert markdown.lstrip().startswith(f"# {number} · ")
    for heading in ("## Overview", "## Setup", "## Check your work", "## Exercises", "## Summary", "## Next"):
        assert heading in markdown, f"{path.name} lacks {heading}"
    assert check_cells(cells), f"{path.name}: its asserts belong in code cells under ## Check your work"


def check_cells(cells: list[dict]) -> list[str]:
    """The code cells of the `## Check your work` section (up to the next `## ` heading) that hold an assert."""
    found, inside = [], False
    for cell in cells:
        source = "".join(cell["source"])
        if cell["cell_type"] == "markdown" and source.lstrip().startswith("## "):
            inside = source.lstrip().startswith("## Check your work")
        elif inside and cell["cell_type"] == "code" and re.search(r"^\s*assert\b", source, re.MULTILINE):
            found.append(source)
    return found


def test_asserts_outside_the_check_section_do_not_count():
    cells = [_cell("markdown", "## 2. Work\n"), _cell("code", "assert x == 1\n"), _cell("markdown", "## Check your work\n"),
             _cell("code", "# assert nothing here\nprint('done')\n"), _cell("markdown", "## Exercises\n"),
             _cell("code", "assert y\n")]
    assert check_cells(cells) == []
    cells[3] = _cell("code", "if quick:\n    assert x > 1, x\n")
    assert check_cells(cells) == ["if quick:\n    assert x > 1, x\n"]


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_listed_in_the_readme(path):
    assert path.name in (repo_root() / "README.md").read_text(encoding="utf-8")


def test_outputs_are_detected(tmp_path):
    cells = [{"cell_type": "code", "outputs": [{"output_type": "stream"}], "execution_count": 3, "source": []}]
    assert nbtools.outputs_of(cells) == [0]


def test_quick_mode_and_data_dir_follow_the_environment(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_QUICK", "1")
    assert quick_mode()
    monkeypatch.setenv("TUTORIAL_QUICK", "0")
    assert not quick_mode()
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(tmp_path / "elsewhere"))
    assert data_dir() == tmp_path / "elsewhere" and data_dir().is_dir()


def _cell(kind, source):
    return {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True), "outputs": []}


def test_every_lesson_module_is_what_its_notebook_saves():
    assert nbtools.save_lessons(check=True) == [], "run `python -m tools.notebooks save`"


def test_saved_cells_become_a_module_that_says_where_each_came_from():
    from pathlib import Path

    cells = [_cell("markdown", "# 09 · Demo\n"), _cell("markdown", "## 2. Squares\n"),
             _cell("code", "#@save\ndef square(x):\n    return np.square(x)\n"),
             _cell("code", "print(square(3))\n"),
             _cell("code", "#@save\nSIZE = 3\n")]
    source = nbtools.lesson_source(Path("notebooks/09_demo.ipynb"), cells)
    assert source.startswith("# Generated from notebooks/09_demo.ipynb by `python -m tools.notebooks save`")
    assert source.count("defined in notebooks/09_demo.ipynb, section: 2. Squares\n") == 2 and "print(" not in source
    assert "(cell" not in source   # a cell number changes whenever a cell is inserted above: the section names it
    assert "import numpy as np" in source and "import tensorflow" not in source   # only what the cells use
    namespace = {}
    exec(compile(source, "demo", "exec"), namespace)
    assert namespace["square"](3) == 9 and namespace["SIZE"] == 3
    assert nbtools.lesson_module(Path("notebooks/09_demo.ipynb")) == "demo"
    assert nbtools.lesson_source(Path("notebooks/09_demo.ipynb"), cells[3:4]) is None   # nothing saved


@pytest.mark.parametrize("body", ["print('hi')", "model.fit(x)", "x = make_data()\nfor i in x:\n    pass"])
def test_a_saved_cell_may_only_define_things(body):
    from pathlib import Path

    with pytest.raises(nbtools.SaveError, match=r"09_demo.ipynb, the top \(cell 0\), line 2: .*may only define"):
        nbtools.saved_cells(Path("09_demo.ipynb"), [_cell("code", f"#@save\n{body}\n")])


# start() loads TensorFlow with C-level stderr silenced; a helper imported above it that loads TensorFlow first
# prints TensorFlow's C++ start-up lines into the learner's output.
TENSORFLOW_FREE = ("helpers.setup.config", "helpers.setup.notebook", "helpers.data.datasets", "helpers.data.photos",
                   "helpers.training_runs.killed_run")   # 08 starts its killed-run child before start(), to overlap imports


def test_the_modules_a_setup_cell_may_import_before_start_do_not_load_tensorflow():
    import subprocess
    import sys

    code = f"import sys, {', '.join(TENSORFLOW_FREE)}; print('tensorflow' in sys.modules or 'keras' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=nbtools.ROOT, check=True)
    assert out.stdout.strip() == "False"


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_helper_that_loads_tensorflow_is_imported_before_start(path):
    cells = [c for c in json.loads(path.read_text(encoding="utf-8"))["cells"] if c["cell_type"] == "code"]
    setup = next("".join(c["source"]) for c in cells if "start(" in "".join(c["source"]))
    before = setup[:setup.index("start(")]
    early = [line for line in before.splitlines() if line.startswith("from helpers.")
             and line.split()[1] not in TENSORFLOW_FREE]
    assert not early, f"import these after start(): {early}"
