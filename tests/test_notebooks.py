"""Rules every committed notebook follows (nbval executes them separately), and tools/notebooks.py, which keeps
them: lesson modules saved from `#@save` cells, learner copies, and every command against input that is no notebook
or a saved cell that would run code on import."""
import ast
import json
import re
from pathlib import Path

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


# ---------------------------------------------------------------- tools.notebooks against hostile input: links, saved cells that would run code, notebooks that are not notebooks


ROOT = Path(__file__).resolve().parent.parent


FIRST_NOTEBOOK = sorted((ROOT / "notebooks").glob("01_*.ipynb"))[0]


def _saved(body):
    return nbtools.saved_cells(Path("09_demo.ipynb"), [_cell("markdown", "## 3. Files\n"), _cell("code", body)])


def test_strip_solutions_replaces_a_symlink_instead_of_writing_the_notebook_it_points_at(tmp_path):
    original = FIRST_NOTEBOOK.read_bytes()
    out = tmp_path / "learner"
    out.mkdir()
    (out / FIRST_NOTEBOOK.name).symlink_to(FIRST_NOTEBOOK)
    nbtools.write_learner_copies(out, [FIRST_NOTEBOOK])
    assert FIRST_NOTEBOOK.read_bytes() == original, "the instructor's original was written through the link"
    copy = out / FIRST_NOTEBOOK.name
    assert not copy.is_symlink() and "### Your answers" in copy.read_text(encoding="utf-8")
    assert sorted(p.name for p in out.iterdir()) == [FIRST_NOTEBOOK.name]   # no temporary file left beside it


def test_strip_solutions_leaves_a_linked_file_elsewhere_untouched(tmp_path):
    target = tmp_path / "precious.ipynb"
    target.write_text("keep me")
    out = tmp_path / "learner"
    out.mkdir()
    (out / FIRST_NOTEBOOK.name).symlink_to(target)
    assert nbtools.main(["strip-solutions", str(out)]) == 0
    assert target.read_text() == "keep me"


@pytest.mark.parametrize("body, line", [
    ("X = open('/etc/passwd').read()\n", 2),
    ("import os\nX = os.getcwd()\n", 3),
    ("@print\ndef f():\n    pass\n", 2),
    ("def f(x=print('imported')):\n    return x\n", 2),
    ("class A:\n    x = print('imported')\n", 3),
    ("class A(type('B', (), {})):\n    pass\n", 2),
    ("SIZE = 3\nSIZES = [n for n in range(SIZE)]\n", 3),
    ("def f(x: print('annotation') = 1):\n    return x\n", 2),
])
def test_a_saved_cell_that_would_run_code_on_import_is_refused_with_its_line(body, line):
    with pytest.raises(nbtools.SaveError, match=rf"09_demo.ipynb, 3. Files \(cell 1\), line {line}: .*may only define"):
        _saved(f"#@save\n{body}")


def test_definitions_and_literal_constants_are_saved():
    body = ("#@save\nimport numpy as np\nfrom dataclasses import dataclass, field\n\nSIZE, NAME = 2**20, 'x'\n"
            "CHUNK = 1 << 22\nLIMIT: int = -1\n\n@dataclass(frozen=True)\nclass Box:\n    '''A box.'''\n"
            "    rows: list = field(default_factory=list)\n    size: int = SIZE\n\n    @property\n"
            "    def n(self) -> int:\n        return len(self.rows)\n\n"
            "def f(x: np.ndarray, n: int | None = None, dtype=np.uint8, shape=(28, 28), chunk=CHUNK):\n"
            "    return print(x)   # runs only when called\n")
    [(section, number, code)] = _saved(body)
    assert (section, number) == ("3. Files", 1) and code.startswith("import numpy as np")


@pytest.mark.parametrize("marker", ["# @save", "#@ save", "#@save:", "#@Save"])
def test_a_marker_that_is_not_exactly_the_marker_is_refused_by_name(marker):
    with pytest.raises(nbtools.SaveError, match=rf"line 1: '{marker}' is not a save marker"):
        _saved(f"{marker}\ndef f():\n    pass\n")


def test_a_marker_below_the_first_line_is_refused_by_name():
    with pytest.raises(nbtools.SaveError, match=r"line 2: '#@save' is not a save marker.*first line"):
        _saved("\n#@save\ndef f():\n    pass\n")


@pytest.mark.parametrize("text", ["{not json", '["a list"]', '{"cells": 3}', '{"cells": [1, 2]}'])
@pytest.mark.parametrize("command", ["check", "save", "clean", "sync"])
def test_every_command_names_an_invalid_notebook(tmp_path, monkeypatch, capsys, command, text):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    bad = folder / "09_broken.ipynb"
    bad.write_text(text)
    monkeypatch.setattr(nbtools, "NOTEBOOK_DIR", folder)
    monkeypatch.setattr(nbtools, "LESSON_DIR", tmp_path / "lessons")   # save must not touch helpers/lessons
    assert nbtools.main([command]) == 2
    error = capsys.readouterr().err
    assert str(bad) in error and "not a notebook" in error
    assert bad.read_text() == text and not (tmp_path / "lessons").exists()


def test_strip_solutions_names_an_invalid_notebook(tmp_path, capsys):
    bad = tmp_path / "09_broken.ipynb"
    bad.write_bytes(b"\xff\xfe not text")
    with pytest.raises(nbtools.NotebookError, match="09_broken.ipynb: not a notebook"):
        nbtools.write_learner_copies(tmp_path / "out", [bad])


@pytest.mark.parametrize("body, line", [
    ("class A:\n    def __init_subclass__(cls):\n        print('imported')\nclass B(A):\n    pass\n", 3),
    ("def hook(cls):\n    pass\nclass A:\n    __init_subclass__ = hook\n", 5),
    ("class A:\n    from subprocess import run as __init_subclass__\n", 3),
    ("class A(metaclass=print):\n    pass\n", 2),
    ("class A(keras.layers.Layer, flag=1):\n    pass\n", 2),
    ("class A:\n    def __class_getitem__(cls, item):\n        return print(item)\nX = 1\n", 3),
    ("class A:\n    pass\nX: A[1] = 1\n", 4),
    ("import typing\nY: typing.Optional[int] = None\n", 3),
    ("import numpy\ndef f(x=numpy.dtype[1]):\n    return x\n", 3),
    ("class A:\n    pass\nclass B(A[1]):\n    pass\n", 4),
    ("B = ValueError\nclass A(B):\n    pass\n", 3),
    ("def f():\n    pass\nclass A(f):\n    pass\n", 4),
    ("class A:\n    pass\nclass B(A.x):\n    pass\n", 4),
    ("class A(nowhere.Base):\n    pass\n", 2),
    ("import os\nfrom __future__ import annotations\n", 3),
    ("from dataclasses import dataclass, field\n@dataclass\nclass A:\n    x: list = field(default=A[1])\n", 5),
])
def test_a_saved_cell_that_would_run_a_hook_on_import_is_refused_with_its_line(body, line):
    with pytest.raises(nbtools.SaveError, match=rf"09_demo.ipynb, 3. Files \(cell 1\), line {line}: .*may only define"):
        _saved(f"#@save\n{body}")


def test_bases_from_imports_builtins_and_classes_above_are_saved():
    body = ("#@save\nimport keras\nfrom keras.callbacks import Callback\n\nclass Batches(keras.utils.PyDataset):\n"
            "    pass\n\nclass Arrays(Batches):\n    pass\n\nclass Stop(Callback):\n    pass\n\n"
            "class Broken(ValueError):\n    pass\n\nclass Plain(object):\n    pass\n\n"
            "def f(x: list[int] | None = None, size: int = 1 << 22) -> dict[str, float]:\n    return {}\n")
    assert len(_saved(body)) == 1


def test_a_class_hook_in_one_saved_cell_is_refused_even_when_nothing_subclasses_it_yet():
    """A later notebook could import and subclass it: the hook would run when that lesson module is imported."""
    with pytest.raises(nbtools.SaveError, match=r"line 4: .*__init_subclass__"):
        _saved("#@save\nclass A:\n    @classmethod\n    def __init_subclass__(cls):\n        pass\n")


def _module(title_cell: str, heading: str, code: str = "def f():\n    return 1\n") -> str:
    cells = [_cell("markdown", title_cell), _cell("markdown", heading), _cell("code", f"#@save\n{code}")]
    cells[1]["source"] = heading        # as written, with whatever line endings it holds
    return nbtools.lesson_source(Path("09_demo.ipynb"), cells)


@pytest.mark.parametrize("heading", ["## Reading shards\rimport os; os.system('touch /tmp/x')",
                                     "## Reading shards\x0bimport os", "## Reading\x1c shards\u2028import os",
                                     "## Reading shards\x85import os"])
def test_a_heading_with_a_line_break_python_sees_puts_no_code_into_the_module(heading, tmp_path):
    source = _module("# 09 · Demo\n", heading)
    tree = ast.parse(source)
    assert [type(n).__name__ for n in tree.body] == ["Expr", "FunctionDef"], source    # docstring, f: nothing else
    assert "# ---------------- defined in notebooks/09_demo.ipynb, section: Reading" in source
    assert all(ch.isprintable() or ch == "\n" for ch in source)


@pytest.mark.parametrize("title", ["# 09 · \\N{nope} and \\x", '# 09 · ends in a quote"', "# 09 · ends \\",
                                   '# 09 · """triple', "# 09 · a\rimport os"])
def test_a_title_goes_into_the_docstring_as_text(title, tmp_path):
    source = _module(title + "\n\nMore text.", "## 1. Files\n")
    namespace = {}
    exec(compile(source, "lesson.py", "exec"), namespace)     # a SyntaxError before the fix for \\N{nope}
    expected = title.split("\r")[0].lstrip("# ").replace('"', "'")
    assert namespace["__doc__"] == f"{expected}: the code its lesson writes, saved for later notebooks, tests and " \
                                   f"benchmarks."
    assert namespace["f"]() == 1 and "os" not in namespace


def test_a_notebook_name_that_is_no_module_name_is_refused():
    cells = [_cell("markdown", "# T\n"), _cell("code", "#@save\nX = 1\n")]
    with pytest.raises(nbtools.SaveError, match="needs a name like"):
        nbtools.lesson_source(Path("09_demo\nimport os.ipynb"), cells)


@pytest.mark.parametrize("value", ["2 ** 'a'", "'a' ** 2", "1 << (1 << 36)", "1 << 65", "1 << -1", "(2 ** 64) ** 64",
                                   "2 ** 64 ** 64", "10 ** 100000", "2 ** 65", "1 / 0", "10.0 ** 400", "~1.5",
                                   "(-8) ** 0.5", "'a' * 10 ** 9", "(1 << 64) * (1 << 64) * (1 << 64) ** 16"])
def test_a_constant_that_would_fail_or_fill_the_memory_on_import_is_refused(value):
    with pytest.raises(nbtools.SaveError, match=r"line 2: .*may only define"):
        _saved(f"#@save\nX = {value}\n")


@pytest.mark.parametrize("value", ["1 << 22", "2**20", "-(2 ** 10)", "3 * 1024 * 1024", "1 << 64", "2 ** 0.5",
                                   "10 ** -3", "(1, 2.5, -3)", "~0", "7 // 2 % 3"])
def test_bounded_arithmetic_on_numbers_is_saved(value):
    [(_, _, code)] = _saved(f"#@save\nX = {value}\n")
    assert code == f"X = {value}"


@pytest.mark.parametrize("text", ["[" * 100_000 + "]" * 100_000, '{"cells": [' + "1" * 5000 + "]}",
                                  '{"cells": [{"cell_type": "code", "source": 5}]}',
                                  '{"cells": [{"cell_type": "markdown", "source": null}]}',
                                  '{"cells": [{"cell_type": "code", "source": ["#@save\\n", 5]}]}',
                                  '{"cells": [{"cell_type": "code"}]}',
                                  '{"cells": [], "nbformat_minor": "5"}'],
                         ids=["deep", "5000 digits", "source 5", "source null", "a line 5", "no source", "minor"])
@pytest.mark.parametrize("command", ["check", "save", "clean", "sync"])
def test_every_command_names_a_notebook_it_cannot_read(tmp_path, monkeypatch, capsys, command, text):
    folder = tmp_path / "notebooks"
    folder.mkdir()
    bad = folder / "09_broken.ipynb"
    bad.write_text(text)
    monkeypatch.setattr(nbtools, "NOTEBOOK_DIR", folder)
    monkeypatch.setattr(nbtools, "LESSON_DIR", tmp_path / "lessons")
    assert nbtools.main([command]) == 2
    error = capsys.readouterr().err
    assert str(bad) in error and "not a notebook" in error
    assert bad.read_text() == text and not (tmp_path / "lessons").exists()


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
