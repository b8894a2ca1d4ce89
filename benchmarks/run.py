"""Run every `benchmarks/bench_*.py` module and print one table of ratios.

    python -m benchmarks.run            # full sizes (about 13 minutes on 2 cores)
    python -m benchmarks.run --quick    # small sizes, for a smoke test
    python -m benchmarks.run --json     # one JSON object {key: ratio, ..., "ranges": {...}} on stdout
    python -m benchmarks.run --only tfrecord

Each module defines `run(quick: bool) -> list[Result]`. A ratio compares two things measured
in this same run, in pairs whose order alternates (A B, B A), so a machine's drift in speed
cancels out. Each ratio is the median over pairs, reported with its lowest and highest pair,
and a goal is judged on the unfavourable end of that range, never on the median of a lucky run.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import platform
import statistics
import sys
import time
from dataclasses import dataclass

from helpers.notebook_setup import stderr_to_devnull


@dataclass
class Result:
    key: str            # stable name, e.g. "tfrecord_raw_vs_float_list_write"
    ratio: float        # median over pairs (or the one value of a deterministic measurement)
    meaning: str        # what the ratio is, in words
    goal: str = ""      # the bar it should meet, in words ("≥ 15"), judged on the range's unfavourable end
    met: bool | None = None
    detail: str = ""    # timings behind the ratio
    low: float | None = None   # lowest pair
    high: float | None = None  # highest pair

    @classmethod
    def from_pairs(cls, key: str, ratios: list[float], meaning: str, goal: str = "-", detail: str = "") -> "Result":
        """A result from pairwise ratios: their median, their range, and the goal judged on its unfavourable end."""
        low, high = min(ratios), max(ratios)
        return cls(key, statistics.median(ratios), meaning, goal, judge(low, high, goal), detail, low, high)

    @property
    def range_text(self) -> str:
        return "" if self.low is None else f"{self.low:.3f}–{self.high:.3f}"


def judge(value_low: float, value_high: float, goal: str) -> bool | None:
    """Whether a range meets a goal such as '≥ 15' (on its low end) or '≤ 1.10' (on its high end)."""
    if goal.startswith("≥"):
        return value_low >= float(goal[1:])
    if goal.startswith(">"):
        return value_low > float(goal[1:])
    if goal.startswith("≤"):
        return value_high <= float(goal[1:])
    return None


def modules() -> list[str]:
    here = os.path.dirname(__file__)
    return sorted(m.name for m in pkgutil.iter_modules([here]) if m.name.startswith("bench_"))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test; ratios are rougher)")
    parser.add_argument("--json", action="store_true", help="print one JSON object of ratios instead of a table")
    parser.add_argument("--only", default=None, help="run only modules whose name contains this")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    started = time.perf_counter()

    results: list[Result] = []
    for name in modules():
        if args.only and args.only not in name:
            continue
        with stderr_to_devnull():  # TensorFlow's load-time log lines, which ignore TF_CPP_MIN_LOG_LEVEL
            module = importlib.import_module(f"benchmarks.{name}")
        print(f"running {name} ({'quick' if args.quick else 'full'})…", file=sys.stderr)
        results.extend(module.run(quick=args.quick))
    elapsed = time.perf_counter() - started

    if args.json:
        doc = {r.key: round(r.ratio, 4) for r in results}
        doc["ranges"] = {r.key: [round(r.low, 4), round(r.high, 4)] for r in results if r.low is not None}
        doc["goals_met"] = {r.key: r.met for r in results if r.met is not None}
        doc["elapsed_seconds"] = round(elapsed, 1)
        print(json.dumps(doc))
    else:
        width = max((len(r.key) for r in results), default=10)
        print(f"{'key':<{width}}  {'ratio':>8}  {'range':>13}  {'goal':>6}  met  meaning")
        for r in results:
            met = {True: "yes", False: "NO", None: "-"}[r.met]
            print(f"{r.key:<{width}}  {r.ratio:>8.3f}  {r.range_text:>13}  {r.goal:>6}  {met:>3}  {r.meaning}")
            if r.detail:
                print(f"{'':<{width}}  {r.detail}")
        print(f"\n{'quick' if args.quick else 'full'} run, {elapsed / 60:.1f} min on {os.cpu_count()} cores "
              f"({platform.processor() or platform.machine()}), Python {platform.python_version()}. "
              f"Goals are judged on the unfavourable end of each range.")
    return 0


if __name__ == "__main__":
    sys.exit(main())
