"""The stored full run's figures behind a table of choices, printed row by row (notebooks/99_choosing_for_your_data.ipynb).

A table of choices names, for each of its rows, the keys of `helpers/measure/last_full_run.txt` that back it.
`figures_by_row` reads that file once (`helpers.measure.full_run.read_full_run`) and prints one line per key with
`helpers.measure.report.table`: the row, the figure "median (low–high)" and the verdict of the series' rule against
1 (`report.verdict`), in words that suit any ratio: "above 1", "below 1", "no measurable difference", or "too few
rounds to tell" where the parenthesis is the whole range of too few rounds rather than a 95 % interval. What a
ratio's first and second sides are, its key says (docs/benchmarks.md lists them all).

>>> figures = figures_by_row({"Z": ["tfrecord_bytes_per_raw_byte"], "Y": []})   # doctest: +ELLIPSIS
the stored full run: the maintainers' full benchmark run of ...
row and key                     full run  by the rule
Z  tfrecord_bytes_per_raw_byte     1.07×     (a size)
in parentheses: a 95 % interval, or the whole range of too few rounds (the rule then says so)
rows with no key in the stored run: Y
>>> figures["tfrecord_bytes_per_raw_byte"].interval is None
True
"""
from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path

from helpers.measure.full_run import FULL_RUN_FILE, MEASURED, FullRunFigure, read_full_run
from helpers.measure.report import table, verdict


def figures_by_row(rows: Mapping[str, Sequence[str]], path: str | Path = FULL_RUN_FILE) -> dict[str, FullRunFigure]:
    """Print the stored figure of every key of every row (in the rows' order), and the rows that have none;
    return all the run's figures by key. A missing file or a key the file does not hold is an error naming both."""
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"{path}: no stored full run there (the series' own is helpers/measure/last_full_run.txt)")
    figures = read_full_run(path)
    missing = [key for keys in rows.values() for key in keys if key not in figures]
    if missing:
        raise KeyError(f"{path} holds no row for {', '.join(missing)}")
    print(textwrap.fill(f"the stored full run: {MEASURED}; {figures[next(iter(figures))].run}", 100))
    table({f"{row}  {key}": {"full run": figures[key].brief(unit="×"),
                             "by the rule": verdict(figures[key], "above 1", "below 1") if figures[key].interval
                             else "(a size)"}
           for row, keys in rows.items() for key in keys}, first="row and key")
    print("in parentheses: a 95 % interval, or the whole range of too few rounds (the rule then says so)")
    empty = [row for row, keys in rows.items() if not keys]
    if empty:
        print(f"rows with no key in the stored run: {', '.join(empty)}")
    return figures
