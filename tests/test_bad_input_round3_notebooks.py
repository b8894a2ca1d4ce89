"""Issue 25, items 16-18: tools.notebooks against hostile input. Each test failed before its fix."""
import ast
import json
import os
from pathlib import Path

import pytest

from tools import notebooks as nbtools

ROOT = Path(__file__).resolve().parent.parent
FIRST_NOTEBOOK = sorted((ROOT / "notebooks").glob("01_*.ipynb"))[0]


def _cell(kind, source):
    return {"cell_type": kind, "metadata": {}, "source": source.splitlines(keepends=True), "outputs": []}


def _saved(body):
    return nbtools.saved_cells(Path("09_demo.ipynb"), [_cell("markdown", "## 3. Files\n"), _cell("code", body)])


# ---------------------------------------------------------------- 16. strip-solutions never writes through a link


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


# ---------------------------------------------------------------- 17. a saved cell runs nothing on import


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


# ---------------------------------------------------------------- 18. an invalid notebook is named


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


# ---------------------------------------------------------------- review, round three: hooks Python runs on import


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


# ---------------------------------------------------------------- headings and titles stay inside comments


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


# ---------------------------------------------------------------- constants that crash the check or fill the memory


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


# ---------------------------------------------------------------- notebooks whose JSON is not a notebook's


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
