"""The series' reading budget: what a learner reads, kept to about a working day, each cell read at a glance.

Prose is the notebooks' Markdown; the budgets are the series' own (a notebook's prose, its overview and summary, the
size of its code cells and lines, the README). A notebook or README that grows past one fails here, naming the budget.
"""
import json
import re
import statistics
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))
SERIES_WORDS, NOTEBOOK_WORDS, OVERVIEW_WORDS, SUMMARY_WORDS, README_WORDS = 20_000, 3_200, 150, 150, 2_500
MEDIAN_CELL_LINES, LONGEST_CELL_LINES, BIG_CELL_LINES, BIG_CELLS, LINE_WIDTH = 12, 40, 25, 3, 100


def words(text: str) -> int:
    """Words a reader reads: link targets are not read."""
    return len(re.findall(r"[\w'’.-]+", re.sub(r"\(https?://[^)]*\)", "", text)))


def shape(path: Path) -> dict:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    markdown = ["".join(c["source"]) for c in cells if c["cell_type"] == "markdown"]
    code = [s for c in cells if c["cell_type"] == "code" and (s := "".join(c["source"])).strip()]
    lines = [len(c.splitlines()) for c in code] or [0]
    return {"words": sum(map(words, markdown)),
            "overview": next((words(m) for m in markdown if m.startswith("## Overview")), 0),
            "summary": next((words(m) for m in markdown if m.startswith("## Summary")), 0),
            "median cell": statistics.median(lines), "longest cell": max(lines),
            "big cells": sum(n > BIG_CELL_LINES for n in lines),
            "wide lines": [line for c in code for line in c.splitlines() if len(line) > LINE_WIDTH]}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_a_notebook_is_within_its_reading_budget(path):
    s = shape(path)
    assert s["words"] <= NOTEBOOK_WORDS, f"{s['words']:,} words of prose (budget {NOTEBOOK_WORDS:,})"
    assert 0 < s["overview"] <= OVERVIEW_WORDS, f"overview: {s['overview']} words (budget {OVERVIEW_WORDS})"
    assert 0 < s["summary"] <= SUMMARY_WORDS, f"summary: {s['summary']} words (budget {SUMMARY_WORDS})"
    assert s["median cell"] <= MEDIAN_CELL_LINES, f"median code cell: {s['median cell']} lines"
    assert s["longest cell"] <= LONGEST_CELL_LINES, f"a code cell of {s['longest cell']} lines"
    assert s["big cells"] <= BIG_CELLS, f"{s['big cells']} code cells over {BIG_CELL_LINES} lines"
    assert not s["wide lines"], f"code lines over {LINE_WIDTH} characters: {s['wide lines'][:3]}"


def test_the_series_and_the_readme_are_within_their_budgets():
    total = sum(shape(p)["words"] for p in NOTEBOOKS)
    assert total <= SERIES_WORDS, f"the series has {total:,} words of prose (budget {SERIES_WORDS:,})"
    readme = words((ROOT / "README.md").read_text(encoding="utf-8"))
    assert readme <= README_WORDS, f"README: {readme:,} words (budget {README_WORDS:,})"


def test_the_budget_counts_what_a_reader_reads(tmp_path):
    assert words("Read [the guide](https://example.org/a-long-path) now.") == 4   # the link target is not read
    assert words("1,280 MiB isn't 1.3 GB") == 6   # "1,280" reads as two
    notebook = {"cells": [{"cell_type": "markdown", "source": ["## Overview\n", "Two words"]},
                          {"cell_type": "code", "source": ["x = 1\n", "y = 2"]},
                          {"cell_type": "code", "source": ["   "]}]}
    path = tmp_path / "probe.ipynb"
    path.write_text(json.dumps(notebook), encoding="utf-8")
    s = shape(path)
    assert (s["words"], s["overview"], s["median cell"], s["longest cell"]) == (3, 3, 2, 2)   # the heading's "##" is not a word
