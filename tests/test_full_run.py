"""The stored full run is read by key: medians, intervals, sizes without one, and clear errors."""
import pytest

from helpers.measure.full_run import FULL_RUN_FILE, full_run_figure

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
    assert "key some_ratio_ae of benchmarks/last_full_run.txt" in figure.beside()
    size = full_run_figure("a_size", path)
    assert size.interval is None and size.brief() == "1.07×"
    assert full_run_figure("big_headroom", path).interval == (282.338, 492.813)


def test_an_unknown_key_names_the_file_and_a_missing_file_gives_none(tmp_path):
    path = tmp_path / "last_full_run.txt"
    path.write_text(STORED, encoding="utf-8")
    with pytest.raises(KeyError, match="no_such_key"):
        full_run_figure("no_such_key", path)
    assert full_run_figure("some_ratio_ae", tmp_path / "absent.txt") is None


@pytest.mark.parametrize("key", ["tfrecord_raw_vs_float_list_write", "tfrecord_bytes_per_raw_byte",
                                 "gpu_headroom_ae_png", "pydataset_png_vs_memory_ae", "cold_read_slowdown"])
def test_the_stored_run_holds_the_keys_notebooks_02_and_03_print(key):
    assert FULL_RUN_FILE.is_file()
    assert full_run_figure(key).median > 0
