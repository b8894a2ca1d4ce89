"""The stored run's figures behind a table of choices (notebook 99): each key's figure and its verdict by the
rule, rows without keys named, and clear errors for a missing file or key."""
import pytest

from helpers.measure.figures_by_row import figures_by_row

STORED = """key          median        95 % CI        min–max        goal  met  meaning
fast_ratio        2.345    2.057–2.507    1.992–2.524       ≥ 1.0  yes  a pipeline / a GPU
                                                   alone 154,839 img/s over 9 rounds; the H200 trains 66,031
even_ratio        0.982    0.854–1.065    0.778–1.075  median ≥ 0.95 and holds 1  yes  disk / memory
                                                   1,289 img/s vs memory 1,328 img/s (medians) over 9 rounds
slow_ratio        0.665    0.537–0.769    0.525–0.822           -    -  parallel / one file at a time
                                                   cache parallel 167,701 records/s over 9 rounds
thin_ratio        1.007    1.000–1.013    1.000–1.013      ≤ 1.05  yes  peak memory 5x / 1x
                                                   peak MiB (median of 2 rounds): stream 782, 787
edge_ratio        1.437    1.005–1.882    1.005–1.882           -    -  grain / tf.data, printed 1.00–1.88
                                                   200,000 digits, batch 1024, 8 rounds
a_size            1.069                                    ≤ 1.10  yes  file bytes per pixel byte
                                                   8,380,000 bytes for 7,840,000 pixel bytes

Rows with 2 rounds are too few for a 95 % interval: their interval is the whole range, at a lower confidence.

full run, 13.0 min on 2 cores (x86_64), Python 3.11.7. Goals are judged on the unfavourable bound of each interval.
"""


@pytest.fixture
def stored(tmp_path):
    path = tmp_path / "last_full_run.txt"
    path.write_text(STORED, encoding="utf-8")
    return path


def test_each_key_is_printed_with_its_row_figure_and_verdict(stored, capsys):
    figures = figures_by_row({"A": ["fast_ratio", "even_ratio"], "B": ["slow_ratio", "thin_ratio", "a_size"],
                              "C": [], "L": ["edge_ratio"]}, stored)
    lines = {line.split()[1]: line for line in capsys.readouterr().out.splitlines()
             if line[:1] in "ABL" and line[1:3] == "  "}
    assert lines["fast_ratio"].startswith("A ") and "2.35× (2.06–2.51)" in lines["fast_ratio"]
    assert lines["fast_ratio"].endswith("above 1") and lines["slow_ratio"].endswith("below 1")
    assert lines["even_ratio"].endswith("no measurable difference")
    # printed "1.44× (1.00–1.88)": a low end that reads 1.00 is not above 1
    assert "(1.00–1.88)" in lines["edge_ratio"] and lines["edge_ratio"].endswith("no measurable difference")
    assert lines["thin_ratio"].endswith("too few rounds to tell")   # 2 rounds: the range, not 95 %
    assert lines["a_size"].startswith("B ") and lines["a_size"].split()[-3:] == ["1.07×", "(a", "size)"]
    assert set(figures) == {"fast_ratio", "even_ratio", "slow_ratio", "thin_ratio", "edge_ratio", "a_size"}
    assert figures["slow_ratio"].median == 0.665


def test_rows_without_keys_are_named(stored, capsys):
    figures_by_row({"A": ["fast_ratio"], "F": [], "K": []}, stored)
    assert "rows with no key in the stored run: F, K" in capsys.readouterr().out


def test_a_missing_key_or_file_is_an_error_naming_it(stored, tmp_path):
    with pytest.raises(KeyError, match=r"holds no row for no_such_key"):
        figures_by_row({"A": ["fast_ratio", "no_such_key"]}, stored)
    with pytest.raises(FileNotFoundError, match="absent.txt"):
        figures_by_row({"A": ["fast_ratio"]}, tmp_path / "absent.txt")
