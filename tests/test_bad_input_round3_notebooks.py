"""Issue 25, items 16-18: tools.notebooks against hostile input. Each test failed before its fix."""
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
