"""The maintainers' last full benchmark run, read by key: the figure a notebook prints beside its quick one.

The rows are those of `benchmarks/last_full_run.txt`, the whole output of `python -m benchmarks.run` (full sizes)
that the README's "The last full run" describes; `MEASURED` says where and how it ran. A notebook run from a copy
of the repository finds the file; an installed package without the repository (Colab's `pip install`) has none,
and `full_run_figure` then returns None, which the notebook says in a sentence.

    >>> figure = full_run_figure("slow_store_parallel_interleave_gain")
    >>> figure is None or figure.median > 1
    True

Introduced in notebooks/04_tfdata_mnist.ipynb.
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

FULL_RUN_FILE = Path(__file__).resolve().parents[2] / "benchmarks" / "last_full_run.txt"
MEASURED = ("the maintainers' full benchmark run of 2026-12-02 (`python -m benchmarks.run` on an idle 2-core "
            "x86-64 VM without a GPU; benchmarks/last_full_run.txt)")

_NUMBER = r"[\d,]+(?:\.\d+)?"
_ROW = re.compile(rf"^(?P<key>[a-z]\w*)\s+(?P<median>{_NUMBER})"
                  rf"(?:\s+(?P<low>{_NUMBER})–(?P<high>{_NUMBER})\s+{_NUMBER}–{_NUMBER})?\s")


@dataclass(frozen=True)
class FullRunFigure:
    """One row: the median over rounds, its 95 % interval (None for a size, which has no rounds), the detail
    line under the row (the rates behind the ratio)."""

    key: str
    median: float
    interval: tuple[float, float] | None
    detail: str

    def describe(self, fmt: str = ".2f", unit: str = "×") -> str:
        """"4.25× (95 % CI 4.13–4.29)", the way the full run printed it."""
        if self.interval is None:
            return f"{self.median:{fmt}}{unit}"
        low, high = self.interval
        return f"{self.median:{fmt}}{unit} (95 % CI {low:{fmt}}–{high:{fmt}})"


def _number(text: str) -> float:
    return float(text.replace(",", ""))


def read_full_run(path: Path = FULL_RUN_FILE) -> dict[str, FullRunFigure]:
    """Every row of a `python -m benchmarks.run` table, by key. Raises ValueError naming the file if it holds
    no row (not such a table)."""
    rows: dict[str, FullRunFigure] = {}
    key = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.startswith(" ") and key is not None and not rows[key].detail:   # the row's detail line
            rows[key] = FullRunFigure(key, rows[key].median, rows[key].interval, line.strip())
            continue
        match = _ROW.match(line)
        key = match["key"] if match else None
        if match:
            interval = None if match["low"] is None else (_number(match["low"]), _number(match["high"]))
            rows[key] = FullRunFigure(key, _number(match["median"]), interval, "")
    if not rows:
        raise ValueError(f"{path}: no benchmark rows found (expected the table `python -m benchmarks.run` prints)")
    return rows


def full_run_figure(key: str, path: Path = FULL_RUN_FILE) -> FullRunFigure | None:
    """The last full run's row `key`, or None where the file is absent (an installed package without the
    repository). Raises KeyError naming the file for a key it does not hold."""
    if not path.exists():
        return None
    rows = read_full_run(path)
    if key not in rows:
        raise KeyError(f"{path} holds no row {key!r}; it holds {sorted(rows)}")
    return rows[key]
