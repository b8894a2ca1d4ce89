"""Run every `benchmarks/bench_*.py` module and print one table of ratios.

    python -m benchmarks.run            # full sizes (about 15 minutes on 2 cores)
    python -m benchmarks.run --quick    # small sizes, a smoke test (about a minute)
    python -m benchmarks.run --json     # one JSON object {key: ratio, ..., "intervals": {...}} on stdout
    python -m benchmarks.run --only tfrecord
    python -m benchmarks.run --only bigger_than_ram   # on request only (see ON_REQUEST)
    python -m benchmarks.run > helpers/measure/last_full_run.txt   # the maintainers' full run, stored

The stored full run ships with the package (helpers/measure/last_full_run.txt): the notebooks print its figures
beside their own quick ones (helpers.measure.full_run), on Colab too.

Each module defines `run(quick: bool) -> list[Result]`. A ratio compares two things measured
in this same run, in rounds whose order alternates (A B, then B A: `helpers.measure.alternate`),
so a machine's drift in speed cancels out. Each ratio is the median over rounds, reported with a
95 % confidence interval of that median (`helpers.measure.Samples`) and its lowest and highest
round; a goal is judged on the interval's unfavourable bound: a "≥" goal on its lower end, a "≤"
goal on its upper end, "contains 1" (an A/A control) on the interval holding 1; "median ≥ 0.95 and
holds 1" (training from files indistinguishable from training from memory) on the median and on the
interval holding 1 (`helpers.measure.Samples.meets`).
"""
from __future__ import annotations

import argparse
import importlib
import json
import os
import pkgutil
import platform
import sys
import time
from dataclasses import dataclass

from helpers.measure import Samples
from helpers.setup.notebook import stderr_to_devnull


@dataclass
class Result:
    key: str                       # stable name, e.g. "tfrecord_raw_vs_float_list_write"
    meaning: str                   # what the ratio is, in words
    goal: str = "-"                # "≥ 15", "≤ 1.10", "contains 1", or "-" for none
    detail: str = ""               # the measurements behind the ratio
    samples: Samples | None = None  # the ratio, round by round
    value: float | None = None     # or one deterministic value (a size), where there are no rounds

    @property
    def ratio(self) -> float:
        return self.samples.median if self.samples is not None else self.value

    @property
    def met(self) -> bool | None:
        if self.samples is None:
            return judge_value(self.value, self.goal)
        if self.goal.strip() == "contains 1":
            return self.samples.compared_to(1.0) == "holds"
        return self.samples.meets(self.goal)

    @property
    def interval_text(self) -> str:
        if self.samples is None:
            return ""
        low, high = self.samples.interval
        return f"{low:.3f}–{high:.3f}"

    @property
    def range_text(self) -> str:
        return "" if self.samples is None else f"{self.samples.low:.3f}–{self.samples.high:.3f}"


_drawn: dict = {}


DISTINCT_DIGITS = 12_000   # digits drawn per run; a larger request repeats them


def digits(n: int, seed: int = 0):
    """`n` MNIST-shaped digits (`helpers.data.standins.make_digits`): at most `DISTINCT_DIGITS` are drawn, once
    per run (drawing costs about half a millisecond an image: 60,000 took half a minute of every full run), and a
    larger request repeats them in order. What the benchmarks measure (rates, bytes, peak memory) depends on the
    images' shape, not on their pixels. A module that asks for no more than an earlier one drew gets the first `n`
    of those. The arrays are shared: never change them in place.

    >>> images, labels = digits(5)
    >>> images.shape, labels.shape
    ((5, 28, 28), (5,))
    """
    import numpy as np

    from helpers.data.standins import make_digits

    drawn = min(n, DISTINCT_DIGITS)
    if seed not in _drawn or len(_drawn[seed][1]) < drawn:
        _drawn[seed] = make_digits(drawn, seed)
    images, labels = _drawn[seed]
    if n <= len(labels):
        return images[:n], labels[:n]
    repeats = -(-n // len(labels))
    return np.tile(images, (repeats, 1, 1))[:n], np.tile(labels, repeats)[:n]


_one_core = []   # the run's one pinned child, once a module asked for it


def one_core_child():
    """The run's child process pinned to one CPU (`helpers.measure.one_core.PipelineChild`), started by the first
    module that asks (it starts TensorFlow while that module writes its data) and shared by the rest, each adding
    its pipelines under names of its own; stopped when the run ends. None where no process can be pinned (the
    message says so once)."""
    from helpers.measure.one_core import PipelineChild, one_core_supported, unsupported_message

    if not _one_core:
        if not one_core_supported():
            print(unsupported_message(), file=sys.stderr)
        _one_core.append(PipelineChild() if one_core_supported() else None)
    return _one_core[0]


def judge_value(value: float, goal: str) -> bool | None:
    """A deterministic value (no rounds, no interval) against a goal such as '≤ 1.10'."""
    return Samples([value]).meets(goal)


# Modules a full run leaves out: they run only when `--only` names them (writing more than the machine's RAM,
# or the minutes of steps behind a recommendation).
ON_REQUEST = ("bench_bigger_than_ram", "bench_cold_steps")


def modules(only: str | None = None) -> list[str]:
    """The benchmark modules to run: every `bench_*` module but those `ON_REQUEST`, or those whose name holds
    `only` (then `ON_REQUEST` ones too)."""
    here = os.path.dirname(__file__)
    names = sorted(m.name for m in pkgutil.iter_modules([here]) if m.name.startswith("bench_"))
    if only:
        return [name for name in names if only in name]
    return [name for name in names if name not in ON_REQUEST]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m benchmarks.run", description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small sizes (a smoke test; ratios are rougher)")
    parser.add_argument("--json", action="store_true", help="print one JSON object of ratios instead of a table")
    parser.add_argument("--only", default=None, help="run only modules whose name contains this")
    args = parser.parse_args(argv)
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    started = time.perf_counter()

    results: list[Result] = []
    for name in modules(args.only):
        with stderr_to_devnull():  # TensorFlow's load-time log lines, which ignore TF_CPP_MIN_LOG_LEVEL
            module = importlib.import_module(f"benchmarks.{name}")
        print(f"running {name} ({'quick' if args.quick else 'full'})…", file=sys.stderr, end=" ", flush=True)
        module_started = time.perf_counter()
        try:
            results.extend(module.run(quick=args.quick))
        except BaseException:
            if _one_core and _one_core[0] is not None:
                _one_core[0].close()
            raise
        print(f"{time.perf_counter() - module_started:.0f} s", file=sys.stderr)
    if _one_core and _one_core[0] is not None:
        _one_core[0].close()
    elapsed = time.perf_counter() - started

    if args.json:
        doc = {r.key: round(r.ratio, 4) for r in results}
        rounds = [r for r in results if r.samples is not None]
        doc["intervals"] = {r.key: [round(v, 4) for v in r.samples.interval] for r in rounds}
        doc["ranges"] = {r.key: [round(r.samples.low, 4), round(r.samples.high, 4)] for r in rounds}
        doc["rounds"] = {r.key: r.samples.n for r in rounds}
        doc["goals"] = {r.key: r.goal for r in results if r.met is not None}
        doc["goals_met"] = {r.key: r.met for r in results if r.met is not None}
        doc["elapsed_seconds"] = round(elapsed, 1)
        print(json.dumps(doc))
    else:
        width = max((len(r.key) for r in results), default=10)
        print(f"{'key':<{width}}  {'median':>8}  {'95 % CI':>13}  {'min–max':>13}  {'goal':>10}  met  meaning")
        for r in results:
            met = {True: "yes", False: "NO", None: "-"}[r.met]
            print(f"{r.key:<{width}}  {r.ratio:>8.3f}  {r.interval_text:>13}  {r.range_text:>13}  {r.goal:>10}  "
                  f"{met:>3}  {r.meaning}")
            if r.detail:
                print(f"{'':<{width}}  {r.detail}")
        thin = sorted({r.samples.n for r in results if r.samples is not None and not r.samples.enough})
        if thin:
            print(f"\nRows with {', '.join(map(str, thin))} rounds are too few for a 95 % interval: "
                  f"their interval is the whole range, at a lower confidence.")
        print(f"\n{'quick' if args.quick else 'full'} run, {elapsed / 60:.1f} min on {os.cpu_count()} cores "
              f"({platform.processor() or platform.machine()}), Python {platform.python_version()}. "
              f"Goals are judged on the unfavourable bound of each interval (\"median ≥ ... and holds 1\": on the "
              f"median and the interval holding 1).")
    return 0


if __name__ == "__main__":
    sys.exit(main())
