"""Rules every committed notebook follows (nbval executes them separately)."""
import json

import pytest

from helpers.config import data_dir, quick_mode, repo_root
from tools import notebooks as nbtools

NOTEBOOKS = nbtools.notebooks()


def test_there_are_notebooks():
    assert any(p.name.startswith("01_") for p in NOTEBOOKS)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_is_committed_without_outputs(path):
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    assert nbtools.outputs_of(cells) == [], f"{path.name} carries outputs: run `python -m tools.notebooks clean`"


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
    assert any(c["cell_type"] == "code" and "assert " in "".join(c["source"]) for c in cells)


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
