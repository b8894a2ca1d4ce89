"""Code cells fit the page (issue 27, item 4): every line of every notebook's code cells is at most 100
characters. The book shows code as written, without wrapping, so a longer line is cut at the column's edge
(or scrolls sideways); long outputs are wrapped by the book's stylesheet instead (tests/test_book.py)."""
import json
from pathlib import Path

import pytest

from tools import notebooks as nbtools

LIMIT = 100


def long_lines(cells: list[dict], limit: int = LIMIT) -> list[tuple[str, int, int, str]]:
    """(cell id, line number from 1, length, the line's start) of every code line longer than `limit`."""
    found = []
    for number, cell in enumerate(cells):
        if cell.get("cell_type") != "code":
            continue
        source = cell.get("source", "")
        source = source if isinstance(source, str) else "".join(source)
        for line_number, line in enumerate(source.splitlines(), start=1):
            if len(line) > limit:
                found.append((cell.get("id") or f"#{number}", line_number, len(line), line[:40]))
    return found


@pytest.mark.parametrize("path", nbtools.notebooks(), ids=lambda p: p.name)
def test_every_code_line_is_at_most_100_characters(path: Path):
    found = long_lines(json.loads(path.read_text(encoding="utf-8"))["cells"])
    assert not found, f"{path.name}: {len(found)} code lines over {LIMIT} characters:\n" + "\n".join(
        f"  cell {cell}, line {line}: {length} characters: {start!r}…" for cell, line, length, start in found)


def test_a_long_line_is_named_by_cell_and_line():
    cells = [{"cell_type": "markdown", "id": "m", "source": "x" * 300},          # prose wraps by itself
             {"cell_type": "code", "id": "a", "source": ["short\n", "y" * 100 + "\n", "z" * 101]},
             {"cell_type": "code", "source": "ok\n" + "é" * 101}]                  # characters, not bytes
    assert long_lines(cells) == [("a", 3, 101, "z" * 40), ("#2", 2, 101, "é" * 40)]
    assert long_lines([{"cell_type": "code", "id": "b", "source": "é" * 100}]) == []
