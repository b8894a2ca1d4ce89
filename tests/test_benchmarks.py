import json
import os
import subprocess
import sys
from pathlib import Path

from helpers.timing import paired_ratio, time_runs

ROOT = Path(__file__).resolve().parent.parent


def test_paired_ratio_alternates_and_takes_the_median():
    calls = []
    result = paired_ratio(lambda: calls.append("slow"), lambda: calls.append("fast"), repeats=3, warmup=1)
    assert calls == ["slow", "fast"] * 4
    assert len(result.ratios) == 3 and len(result.slow.runs) == 3
    assert result.median == sorted(result.ratios)[1]


def test_time_runs_discards_the_warm_up():
    calls = []
    timing = time_runs(lambda: calls.append(1), repeats=4, warmup=2)
    assert len(calls) == 6 and len(timing.runs) == 4


def test_benchmark_runner_prints_one_json_object_with_the_tfrecord_keys():
    out = subprocess.run(
        [sys.executable, "-m", "benchmarks.run", "--quick", "--json", "--only", "tfrecord"],
        cwd=ROOT, capture_output=True, text=True, timeout=300, env={**os.environ, "PYTHONPATH": str(ROOT)},
    )
    assert out.returncode == 0, out.stderr
    ratios = json.loads(out.stdout)
    assert {"tfrecord_write_speedup_vs_seed", "tfrecord_bytes_per_raw_byte"} <= set(ratios)
    assert ratios["tfrecord_bytes_per_raw_byte"] < 1.2  # a size, not a timing: deterministic
    assert ratios["tfrecord_write_speedup_vs_seed"] > 1
