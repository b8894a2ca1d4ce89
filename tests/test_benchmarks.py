import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.timing import paired_ratio, time_runs

ROOT = Path(__file__).resolve().parent.parent


def test_paired_ratio_alternates_the_order_and_takes_the_median():
    calls = []
    result = paired_ratio(lambda: calls.append("slow"), lambda: calls.append("fast"), repeats=3, warmup=1)
    # warm-up, then A B, B A, A B: neither side always runs second
    assert calls == ["slow", "fast", "slow", "fast", "fast", "slow", "slow", "fast"]
    assert len(result.ratios) == 3 and len(result.slow.runs) == 3
    assert result.median == sorted(result.ratios)[1]


def test_time_runs_discards_the_warm_up():
    calls = []
    timing = time_runs(lambda: calls.append(1), repeats=4, warmup=2)
    assert len(calls) == 6 and len(timing.runs) == 4


# Every key the issues ask for (3, 4, 8, 9 and 10), renamed or new; a quick run must print all of them.
EXPECTED_KEYS = {
    "tfrecord_raw_vs_float_list_write", "tfrecord_helper_vs_seed_writer_same_encoding", "tfrecord_bytes_per_raw_byte",
    "tfrecord_seed_bytes_per_raw_byte", "tfrecord_vectorized_read_speedup",
    "recommended_disk_vs_memory_ae", "tfrecord_cold_vs_memory_ae", "memmap_vs_memory_ae", "pydataset_png_vs_memory_ae",
    "cold_read_slowdown", "gpu_headroom_ae", "gpu_headroom_ae_png",
    "stream_vs_memory_fit_bs256", "stream_vs_memory_fit_bs32", "seed_vs_memory_fit_bs256", "memory_vs_memory_fit_bs256",
    "gpu_headroom_mnist_bs256", "blocks_vs_memory_fit_bs256", "gpu_headroom_mnist_bs256_blocks",
    "optimized_vs_naive_pipeline", "stream_peak_rss_growth_5x", "stream_vs_memory_peak_rss_5x",
}


def test_benchmark_runner_prints_one_json_object_with_every_key():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--json"],
        cwd=ROOT, capture_output=True, text=True, timeout=600, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    ratios = json.loads(out.stdout)
    assert EXPECTED_KEYS <= set(ratios), f"missing: {EXPECTED_KEYS - set(ratios)}"
    assert "best_disk_vs_memory_ae" not in ratios and "tfrecord_write_speedup_vs_seed" not in ratios  # renamed
    assert ratios["tfrecord_bytes_per_raw_byte"] < 1.2  # a size, not a timing: deterministic
    for key, (low, high) in ratios["ranges"].items():
        assert low <= ratios[key] <= high, key
    assert ratios["elapsed_seconds"] > 0 and set(ratios["goals_met"]) <= set(ratios)


def test_a_goal_is_judged_on_the_unfavourable_end_of_the_range():
    from benchmarks.run import judge

    assert judge(14.9, 20.0, "≥ 15") is False  # a median of 17 does not meet ≥ 15 when a pair fell below
    assert judge(15.0, 20.0, "≥ 15") is True
    assert judge(1.05, 1.12, "≤ 1.10") is False and judge(1.0, 1.1, "≤ 1.10") is True
    assert judge(0.5, 2.0, "-") is None
