"""The stored full run is read by key: medians, intervals, sizes without one, and clear errors."""
import shutil
import subprocess
import sys
import zipfile

import pytest

from helpers.measure.full_run import FULL_RUN_FILE, full_run_figure, read_full_run

STORED = """key          median        95 % CI        min–max        goal  met  meaning
some_ratio_ae    21.048  14.073–25.902  14.073–25.902        ≥ 15   NO  writing: float_list / raw
                                                   float_list 1,967 ms, raw 106 ms (medians)
a_size            1.069                                    ≤ 1.10  yes  file bytes per pixel byte
                                                   8,380,000 bytes for 7,840,000 pixel bytes
big_headroom    400.775  282.338–492.813  212.400–604.542           -    -  memmap alone / training

full run, 15.4 min on 2 cores (x86_64), Python 3.11.7. Goals are judged on the unfavourable bound.
"""


def test_a_row_is_read_with_its_interval_detail_and_run(tmp_path):
    path = tmp_path / "last_full_run.txt"
    path.write_text(STORED, encoding="utf-8")
    figure = full_run_figure("some_ratio_ae", path)
    assert (figure.median, figure.interval) == (21.048, (14.073, 25.902))
    assert figure.detail == "float_list 1,967 ms, raw 106 ms (medians)"
    assert figure.run == "15.4 min on 2 cores (x86_64), Python 3.11.7"
    assert figure.brief(".1f") == "21.0× (14.1–25.9)"
    assert figure.beside(".1f") == "full run: 21.0× (14.1–25.9) (some_ratio_ae in helpers/measure/last_full_run.txt)"
    size = full_run_figure("a_size", path)
    assert size.interval is None and size.brief() == "1.07×"
    assert full_run_figure("big_headroom", path).interval == (282.338, 492.813)


def test_an_unknown_key_and_a_missing_file_are_named(tmp_path):
    path = tmp_path / "last_full_run.txt"
    path.write_text(STORED, encoding="utf-8")
    with pytest.raises(KeyError, match="no_such_key"):
        full_run_figure("no_such_key", path)
    with pytest.raises(FileNotFoundError, match="absent.txt"):
        full_run_figure("some_ratio_ae", tmp_path / "absent.txt")


@pytest.mark.parametrize("key", ["tfrecord_raw_vs_float_list_write", "tfrecord_bytes_per_raw_byte",
                                 "gpu_headroom_ae_png", "pydataset_png_vs_memory_ae", "cold_read_slowdown"])
def test_the_stored_run_holds_the_keys_notebooks_02_and_03_print(key):
    assert FULL_RUN_FILE.is_file()
    assert full_run_figure(key).median > 0


def test_the_stored_run_is_installed_with_the_package(tmp_path):
    """A wheel built from the package's files holds the stored run (notebook 99 reads it on Colab, where there is
    no checkout), byte for byte."""
    root = FULL_RUN_FILE.parents[2]
    for name in ("pyproject.toml", "README.md"):
        shutil.copy(root / name, tmp_path / name)
    shutil.copytree(root / "helpers", tmp_path / "helpers", ignore=shutil.ignore_patterns("__pycache__"))
    built = subprocess.run([sys.executable, "-c", "import sys; from setuptools import build_meta; "
                            "print(build_meta.build_wheel(sys.argv[1]))", str(tmp_path / "dist")],
                           cwd=tmp_path, capture_output=True, text=True, timeout=300)
    assert built.returncode == 0, built.stderr[-3000:]
    with zipfile.ZipFile(tmp_path / "dist" / built.stdout.split()[-1]) as wheel:
        assert wheel.read("helpers/measure/last_full_run.txt") == FULL_RUN_FILE.read_bytes()


def test_the_stored_run_parses_with_intervals_and_details():
    rows = read_full_run()
    gain = rows["slow_store_parallel_interleave_gain"]
    assert gain.interval is not None and gain.interval[0] <= gain.median <= gain.interval[1]
    assert "records/s" in gain.detail
    assert rows["tfrecord_bytes_per_raw_byte"].interval is None   # a size: no rounds
    # every row of the table, none of the header or footer lines
    table = [line for line in FULL_RUN_FILE.read_text().splitlines() if line[:1].islower()]
    assert len(rows) == len(table) - 2 and "key" not in rows and "full" not in rows


def test_a_file_that_is_no_table_is_named(tmp_path):
    path = tmp_path / "run.txt"
    path.write_text("nothing here\n")
    with pytest.raises(ValueError, match="run.txt"):
        read_full_run(path)


def test_missing_file_and_unknown_key(tmp_path):
    with pytest.raises(FileNotFoundError, match="absent.txt"):
        full_run_figure("slow_store_parallel_interleave_gain", tmp_path / "absent.txt")
    with pytest.raises(KeyError, match="no_such_key"):
        full_run_figure("no_such_key")
