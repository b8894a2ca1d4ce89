"""Run every `benchmarks/bench_*.py` module and print one table of ratios.

    python -m benchmarks.run            # full sizes
    python -m benchmarks.run --quick    # small sizes, for a smoke test
    python -m benchmarks.run --json     # one JSON object {key: ratio, ...} on stdout
    python -m benchmarks.run --only tfrecord

Each module defines `run(quick: bool) -> list[Result]`. A ratio compares two things measured
in this same run, alternately, so a machine's drift in speed cancels out.
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import sys
from dataclasses import dataclass

from helpers.notebook_setup import stderr_to_devnull


@dataclass
class Result:
    key: str            # stable name, e.g. "tfrecord_write_speedup_vs_seed"
    ratio: float
    meaning: str        # what the ratio is, in words
    goal: str = ""      # the bar it should meet, in words ("≥ 15")
    met: bool | None = None
    detail: str = ""    # timings behind the ratio


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

    results: list[Result] = []
    for name in modules():
        if args.only and args.only not in name:
            continue
        with stderr_to_devnull():  # TensorFlow's load-time log lines, which ignore TF_CPP_MIN_LOG_LEVEL
            module = importlib.import_module(f"benchmarks.{name}")
        print(f"running {name} ({'quick' if args.quick else 'full'})…", file=sys.stderr)
        results.extend(module.run(quick=args.quick))

    if args.json:
        print(json.dumps({r.key: round(r.ratio, 4) for r in results}))
    else:
        width = max((len(r.key) for r in results), default=10)
        print(f"{'key':<{width}}  {'ratio':>8}  {'goal':>6}  met  meaning")
        for r in results:
            met = {True: "yes", False: "NO", None: "-"}[r.met]
            print(f"{r.key:<{width}}  {r.ratio:>8.3f}  {r.goal:>6}  {met:>3}  {r.meaning}")
            if r.detail:
                print(f"{'':<{width}}  {r.detail}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
