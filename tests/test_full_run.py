"""The last full run's figures, read by key (helpers/measure/full_run.py)."""
import pytest

from helpers.measure.full_run import FULL_RUN_FILE, full_run_figure, read_full_run


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
    assert full_run_figure("slow_store_parallel_interleave_gain", tmp_path / "absent.txt") is None
    with pytest.raises(KeyError, match="no_such_key"):
        full_run_figure("no_such_key")
