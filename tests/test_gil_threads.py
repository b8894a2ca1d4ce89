"""helpers.measure.threads: notebook 01's GIL measurement runs each side as it says, pairs the rounds, and leaves
the warm-up round out (structure only: speeds are the benchmarks' business, never a timed unit test)."""
import threading

import pytest

from helpers.measure import threads


def test_each_job_runs_twice_per_side_per_round_and_the_warm_up_is_left_out():
    calls, seen_threads = {"a": 0, "b": 0}, set()

    def job(name):
        def run():
            calls[name] += 1
            seen_threads.add(threading.get_ident())
        return run

    result = threads.one_thread_against_two({"a": job("a"), "b": job("b")}, rounds=3)
    # (3 kept rounds + 1 warm-up) x (twice on one thread + once on each of two threads)
    assert calls == {"a": 16, "b": 16}
    assert sorted(result) == ["a", "b"]
    for figures in result.values():
        assert figures.speedup.n == 3 and figures.cores_busy.n == 3
        assert all(value >= 0 for value in figures.cores_busy.values)
    assert threading.get_ident() in seen_threads and len(seen_threads) >= 2   # this thread, and the pool's


def test_no_job_is_an_error():
    with pytest.raises(ValueError, match="at least one job"):
        threads.one_thread_against_two({}, rounds=2)


def test_usable_cores_is_a_positive_count():
    assert threads.usable_cores() >= 1
