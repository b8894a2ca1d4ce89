"""The GIL, measured: two jobs one after the other on one thread against the same two jobs on two threads at once,
in alternating rounds, with the cores the process kept busy while its two threads ran.

Introduced in notebooks/01_generators_and_iterables.ipynb (section 8).

    >>> result = one_thread_against_two({"sleep": lambda: time.sleep(0.001)}, rounds=3)
    >>> result["sleep"].speedup.n, result["sleep"].cores_busy.n   # one paired ratio per round, warm-up left out
    (3, 3)
"""
from __future__ import annotations

import os
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Callable, Mapping

from helpers.measure.core import Samples, alternate, timed


@dataclass(frozen=True)
class ThreadResult:
    """One job's figures: `speedup` is one thread's time ÷ two threads' time, paired by round (above 1: two threads
    finished sooner); `cores_busy` is the process's CPU time ÷ wall-clock time while the two threads ran."""

    speedup: Samples
    cores_busy: Samples


def usable_cores() -> int:
    """The cores this process may run on (its affinity where the platform has one)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def one_thread_against_two(jobs: Mapping[str, Callable[[], object]], rounds: int) -> dict[str, ThreadResult]:
    """For each job: twice on this thread, one after the other, against once on each of two threads at once. Every
    side of every job runs once per round, in an order that rotates (`alternate`), after one warm-up round."""
    if not jobs:
        raise ValueError("one_thread_against_two needs at least one job")
    busy: dict[str, list[float]] = {name: [] for name in jobs}

    def two_threads(name: str, job: Callable[[], object], pool: ThreadPoolExecutor) -> Callable[[], float]:
        def run() -> float:
            start, cpu_start = time.perf_counter(), time.process_time()   # CPU time of all the process's threads
            list(pool.map(lambda _: job(), range(2)))
            seconds = time.perf_counter() - start
            busy[name].append((time.process_time() - cpu_start) / seconds)
            return seconds
        return run

    with ThreadPoolExecutor(max_workers=2) as pool:
        sides = {}
        for name, job in jobs.items():
            sides[f"{name}, 1 thread"] = timed(lambda job=job: (job(), job()))
            sides[f"{name}, 2 threads"] = two_threads(name, job, pool)
        measured = alternate(sides, rounds=rounds)
    return {name: ThreadResult(measured.ratio(f"{name}, 1 thread", f"{name}, 2 threads"),
                               Samples(busy[name][-rounds:]))   # the warm-up round left out
            for name in jobs}
