"""The maintainers' last full benchmark run, read by key: the figure a notebook prints beside its quick one.

`python -m benchmarks.run` (full sizes, on an idle 2-core VM without a GPU) prints one row per key; its whole
output is stored beside this module, in `helpers/measure/last_full_run.txt` (installed with the package, so a pip
install on Colab has it too), and its date and machine in docs/benchmarks.md ("The last full run"). A notebook in
quick mode measures small sizes; `full_run_figure` gives the same quantity at size. `MEASURED` says where and how
it ran.
Introduced in notebooks/02_tfrecord_conversion.ipynb (and used in 03, 04, 05, 07, 08 and 99).
"""
from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

from helpers.measure.core import median_text

FULL_RUN_FILE = Path(__file__).resolve().parent / "last_full_run.txt"
MEASURED = ("the maintainers' full benchmark run of 2026-12-03 (`python -m benchmarks.run` on an idle 2-core "
            "x86-64 VM without a GPU; helpers/measure/last_full_run.txt)")
_NUMBER = r"-?[\d,]+(?:\.\d+)?"
_ROW = re.compile(rf"^(?P<key>[a-z]\w*)\s+(?P<median>{_NUMBER})"
                  rf"(?:\s+(?P<low>{_NUMBER})–(?P<high>{_NUMBER})\s+(?P<min>{_NUMBER})–(?P<max>{_NUMBER}))?\s+")


def _number(text: str) -> float:
    return float(text.replace(",", ""))


@dataclass(frozen=True)
class FullRunFigure:
    """One key of the last full run: its median, the 95 % interval of that median (None for a size, which has
    no rounds), the detail line under it, and how the run was made (from the file's last line). `whole_range`: the
    interval is the rounds' whole range and not shown to be a 95 % one: the row's round count (in its detail line)
    is among those the run's footer calls too few, or no count is given (up to 8 rounds give the whole range)."""

    key: str
    median: float
    interval: tuple[float, float] | None
    detail: str
    run: str = ""
    whole_range: bool = False

    def brief(self, fmt: str = ".2f", unit: str = "×") -> str:
        """"21.0× (14.1–25.9)": the median and its interval, as the notebooks print their own."""
        return median_text(self.median, self.interval, fmt, unit)

    def describe(self, fmt: str = ".2f", unit: str = "×") -> str:
        """"4.25× (95 % CI 4.13–4.29)", the way the full run printed it; "(range 0.26–0.26)" for too few rounds.

        >>> FullRunFigure("k", 0.26, (0.25, 0.27), "", whole_range=True).describe()
        '0.26× (range 0.25–0.27)'
        """
        if self.interval is None:
            return f"{self.median:{fmt}}{unit}"
        low, high = self.interval
        label = "range" if self.whole_range else "95 % CI"
        return f"{self.median:{fmt}}{unit} ({label} {low:{fmt}}–{high:{fmt}})"

    def beside(self, fmt: str = ".2f", unit: str = "×") -> str:
        """The sentence a notebook prints after its own figure.

        >>> print(FullRunFigure("k", 21.0, (14.1, 25.9), "", "9 min on 2 cores").beside(".1f"))
        full run: 21.0× (14.1–25.9) (k in helpers/measure/last_full_run.txt)
        """
        return f"full run: {self.brief(fmt, unit)} ({self.key} in helpers/measure/last_full_run.txt)"


def read_full_run(path: Path = FULL_RUN_FILE) -> dict[str, FullRunFigure]:
    """Every row of a `python -m benchmarks.run` table, by key. Raises ValueError naming the file if it holds
    no row (not such a table)."""
    path = Path(path)
    lines = path.read_text(encoding="utf-8").splitlines()
    footer = next((line.strip() for line in reversed(lines) if line.startswith("full run")), "full run")
    run = footer.split(". ")[0].removeprefix("full run").strip(" ,.")   # "15.4 min on 2 cores (x86_64), ..."
    thin = next((line.split(" rounds ")[0] for line in lines if line.startswith("Rows with ")), "")
    too_few = {int(n) for n in re.findall(r"\d+", thin)}   # "Rows with 2, 5 rounds are too few ...": {2, 5}
    rows: dict[str, FullRunFigure] = {}
    for index, line in enumerate(lines):
        match = _ROW.match(line)
        if match:
            interval = None if match["low"] is None else (_number(match["low"]), _number(match["high"]))
            following = lines[index + 1] if index + 1 < len(lines) else ""
            detail = following.strip() if following.startswith(" ") else ""
            rounds = re.search(r"(\d+) rounds", detail)
            whole_range = (interval is not None and interval == (_number(match["min"]), _number(match["max"]))
                           and (rounds is None or int(rounds[1]) in too_few))
            rows[match["key"]] = FullRunFigure(match["key"], _number(match["median"]), interval, detail, run,
                                               whole_range)
    if not rows:
        raise ValueError(f"{path}: no benchmark rows found (expected the table `python -m benchmarks.run` prints)")
    return rows


def full_run_figure(key: str, path: Path = FULL_RUN_FILE) -> FullRunFigure:
    """The row `key` of the stored full run.

    A key the file does not hold is an error naming the file: a notebook asks only for keys the
    benchmarks write.

    >>> full_run_figure("tfrecord_raw_vs_float_list_write").median > 1
    True
    """
    path = Path(path)
    rows = read_full_run(path)
    if key not in rows:
        raise KeyError(f"{path} holds no row for the key {key!r}")
    return rows[key]


def beside_full_run(key: str, fmt: str = ".2f", unit: str = "×") -> str:
    """What a notebook prints beside its own figure: the full run's.

    >>> beside_full_run("tfrecord_bytes_per_raw_byte").startswith("full run: ")
    True
    """
    return full_run_figure(key).beside(fmt, unit)
