"""helpers/measure/report.py: the verdict rule, and every sentence, chart and table that takes its word from it."""
import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402

from helpers.measure import full_run  # noqa: E402
from helpers.measure.core import Rounds, Samples  # noqa: E402
from helpers.measure.full_run import FullRunFigure  # noqa: E402
from helpers.measure.gpu_reference import gpu_appetite  # noqa: E402
from helpers.measure.report import (NO_DIFFERENCE, TOO_FEW, appetite, around, compare, dots,  # noqa: E402
                                    full_run_line, goal, intervals_note, side, table, verdict)

ABOVE = Samples([1.2, 1.3, 1.25, 1.4, 1.22, 1.31])        # 6 rounds, interval 1.20–1.40
BELOW = ABOVE.scaled(0.5)                                  # 0.60–0.70
HOLDS = Samples([0.9, 1.1, 1.0, 1.05, 0.95, 1.2])          # 0.90–1.20


def test_a_word_needs_six_rounds_and_an_interval_that_leaves_out_one():
    assert (verdict(ABOVE), verdict(BELOW), verdict(HOLDS)) == ("faster", "slower", NO_DIFFERENCE)
    five_far_apart = Samples([9.0, 9.1, 9.2, 9.3, 9.4])     # its whole range is far above 1, at ≈94 %
    assert verdict(five_far_apart) == TOO_FEW
    assert verdict(ABOVE, "slower", "faster") == "slower"   # a ratio of times: the caller's words


def test_a_rate_is_held_against_a_reference_by_the_same_rule():
    rate = Samples([900.0, 950.0, 1000.0, 1050.0, 1100.0, 1150.0])
    assert verdict(rate, "feeds", "starves", against=800) == "feeds"
    assert verdict(rate, "feeds", "starves", against=1200) == "starves"
    assert verdict(rate, "feeds", "starves", against=1000) == NO_DIFFERENCE


def test_a_full_run_figure_is_judged_by_the_same_rule():
    assert verdict(FullRunFigure("k", 1.44, (1.10, 1.88), "")) == "faster"
    assert verdict(FullRunFigure("k", 1.44, (1.00, 1.88), "")) == NO_DIFFERENCE   # the interval holds 1
    assert verdict(FullRunFigure("k", 1.44, (1.10, 1.88), "", whole_range=True)) == TOO_FEW
    assert verdict(FullRunFigure("k", 1.07, None, "")) == TOO_FEW                  # a size: no rounds


def test_an_end_that_prints_as_one_holds_one():
    # The stored run's grain_vs_tfdata_pipeline_alone: 1.437 (1.005–1.882), printed "1.44× (1.00–1.88)". A low end
    # that reads 1.00 is not above 1, whether the figure is the full run's or this run's.
    stored = FullRunFigure("k", 1.437, (1.005, 1.882), "")
    assert around(stored) == "1.44× (1.00–1.88)" and verdict(stored) == NO_DIFFERENCE
    assert verdict(FullRunFigure("k", 1.437, (1.006, 1.882), "")) == "faster"   # printed 1.01
    live = Samples([1.004, 1.3, 1.25, 1.4, 1.22, 1.31])
    assert around(live).endswith("(1.00–1.40)") and verdict(live) == NO_DIFFERENCE
    assert verdict(live, fmt=".3f") == "faster"            # printed 1.004: above 1
    assert verdict(live.scaled(1 / 1.4 * 0.996)) == NO_DIFFERENCE   # a high end that prints as 1.00
    line = full_run_line("grain_vs_tfdata_pipeline_alone", above="faster", below="slower")
    assert "faster" not in line and "slower" not in line, line


def test_one_formatting_for_every_figure():
    figure = FullRunFigure("k", 1.2345, (1.1, 1.5), "")
    assert around(figure) == figure.brief() == "1.23× (1.10–1.50)"
    assert around(ABOVE, ".1f", "") == ABOVE.brief(".1f") == "1.3 (1.2–1.4)"


def test_compare_prints_one_sentence_of_the_paired_ratio_and_returns_its_word(capsys):
    rounds = Rounds(["A", "B"], {"A": [2.0, 2.2, 2.1, 2.4, 2.3, 2.0], "B": [1.0] * 6})
    assert compare(rounds, "A", "B") == "faster"
    assert capsys.readouterr().out == "A against B: 2.15× (2.00–2.40): faster here.\n"
    assert compare(rounds, "B", "A", label="B over A") == "slower"   # B/A, not A/B
    assert capsys.readouterr().out.startswith("B over A: 0.47× (0.42–0.50): slower here.")
    compare(Samples([3.0, 3.1]), label="time ÷ time")
    assert capsys.readouterr().out == ("time ÷ time: 3.05× (3.00–3.10): too few rounds to tell (2 rounds; 6 give a "
                                       "95 % interval).\n")
    with pytest.raises(ValueError, match="names"):
        compare(ABOVE, "A")


def test_compare_prints_the_full_run_beside_with_its_size_and_verdict(capsys, tmp_path, monkeypatch):
    stored = tmp_path / "last_full_run.txt"
    stored.write_text("key                      median   95% CI       range\n"
                      "grain_vs_tfdata          1.44     1.00–1.88    0.90–2.00   \n"
                      "  block records, 12 rounds\n", encoding="utf-8")
    monkeypatch.setattr(full_run, "FULL_RUN_FILE", stored)
    monkeypatch.setattr(full_run.full_run_figure, "__defaults__", (stored,))
    compare(Samples([9.0] * 6), "Grain", "tf.data", full_run="grain_vs_tfdata", size="200,000 images, 12,000 here")
    here, beside = capsys.readouterr().out.splitlines()
    assert here == "Grain against tf.data: 9.00× (9.00–9.00): faster here."
    assert beside == ("  full run (200,000 images, 12,000 here): 1.44× (1.00–1.88): no measurable difference "
                      "(grain_vs_tfdata in helpers/measure/last_full_run.txt)")


def test_full_run_line_gives_a_word_only_when_asked():
    assert ": faster" not in full_run_line("cold_read_slowdown")   # a ratio of times: "faster" would be wrong
    line = full_run_line("cold_read_slowdown", above="slower", below="faster")
    assert ": slower" in line or f": {NO_DIFFERENCE}" in line or TOO_FEW in line


def test_appetite_holds_each_batch_size_against_its_own_reference(capsys):
    gpu_32, gpu_1024 = (gpu_appetite("mnist_mlp", b).samples_per_second for b in (32, 1024))
    rates = {32: Samples([gpu_32 * 1.5] * 6), 1024: Samples([gpu_1024 * 0.5] * 6)}
    words = appetite(rates, "mnist_mlp", model_here={32: Samples([1000.0] * 6)})
    assert words == {32: "could feed it", 1024: "would starve it"}
    first, second = capsys.readouterr().out.splitlines()
    assert first.startswith("batch 32: the pipeline alone") and f"reference GPU {gpu_32:,}" in first
    assert "model alone here 1,000" in first and "model alone here" not in second
    assert appetite({"PIL": Samples([1.0, 2.0])}, "cifar_autoencoder", batch=256) == {"PIL": TOO_FEW}
    assert capsys.readouterr().out.startswith("PIL alone, batch 256: 2 samples/s (1–2); the reference GPU 66,031")
    with pytest.raises(KeyError, match="measured batch sizes"):
        appetite({64: Samples([1.0] * 6)}, "mnist_mlp")


def test_appetite_chart_draws_the_reference_gpu_at_each_batch_size():
    plt.close("all")
    gpu = {b: gpu_appetite("mnist_mlp", b).samples_per_second for b in (32, 256)}
    rates = {b: Samples([v * 2] * 6) for b, v in gpu.items()}
    appetite(rates, "mnist_mlp", model_here={b: Samples([1000.0] * 6) for b in gpu}, chart=True)
    ax = plt.gcf().axes[0]
    marks = [c for c in ax.collections if "reference" in (c.get_label() or "")]
    assert len(marks) == 1 and sorted(s[0][0] for s in marks[0].get_segments()) == sorted(gpu.values())
    assert ax.get_xscale() == "log" and [t.get_text() for t in ax.get_yticklabels()] == ["batch 32", "batch 256"]
    legend = [t.get_text() for t in plt.gcf().legends[0].get_texts()]   # below the axes, on the figure
    assert "pipeline alone" in legend and "model alone, here" in legend
    plt.close("all")


def test_dots_draws_each_median_with_its_interval_and_the_series_side_by_side():
    fig, ax = plt.subplots()
    dots({"page cache": {"step 0": ABOVE, "step 1": HOLDS}, "slow store": {"step 0": BELOW}},
         title="Each step", xlabel="samples per second", lines={"GPU": 1.0}, ax=ax)
    bars = ax.containers   # one errorbar container per series
    assert len(bars) == 2
    xs, ys = bars[0].lines[0].get_data()
    assert list(xs) == [ABOVE.median, HOLDS.median] and list(ys) == [-0.125, 1.0]   # step 0 beside the store's
    whiskers = bars[0].lines[2][0].get_segments()[0]
    assert [point[0] for point in whiskers] == list(ABOVE.interval)
    assert ax.get_title() == "Each step" and ax.get_xlabel().startswith("samples per second")
    assert any(line.get_label() == "GPU" and line.get_xdata()[0] == 1.0 for line in ax.lines)
    plt.close(fig)


def test_table_aligns_rows_formats_once_and_says_what_the_parentheses_are(capsys):
    table({"PIL": {"images/s": Samples([900, 1000, 1100] * 2), "note": "decodes"},
           "full run": {"images/s": FullRunFigure("k", 1500.0, (1400.0, 1600.0), "")}},
          fmt={"images/s": ",.0f"}, first="pipeline")
    lines = capsys.readouterr().out.splitlines()
    assert lines[0].split() == ["pipeline", "images/s", "note"]
    assert lines[1].split(maxsplit=1) == ["PIL", "1,000 (900–1,100)  decodes"]
    assert lines[2].rstrip().endswith("1,500 (1,400–1,600)")   # the missing note is an empty cell
    assert len({len(line) for line in lines[:3]}) == 1         # aligned
    assert lines[3] == "in parentheses: the 95 % interval of each median (6 rounds)"


def test_intervals_note_says_too_few_rounds_give_only_their_range():
    assert "whole range of 2–9 rounds" in intervals_note(Samples([1.0] * 2), Samples([1.0] * 9))
    assert "95 % interval" in intervals_note(Samples([1.0] * 9)) and "range" not in intervals_note(Samples([1.0] * 9))


def test_side_takes_one_side_of_several_runs():
    measured = {32: Rounds(["a", "b"], {"a": [1.0, 3.0], "b": [5.0, 5.0]})}
    assert side(measured, "a")[32].median == 2.0



def test_dots_keeps_series_on_rows_of_their_own_centred():
    fig, ax = plt.subplots()
    dots({"decodes": {"PIL": ABOVE}, "raw": {"memmap": HOLDS}}, title="t", xlabel="x", ax=ax)
    assert [list(c.lines[0].get_data()[1]) for c in ax.containers] == [[0.0], [1.0]]
    plt.close(fig)


def test_a_goal_is_judged_on_the_unfavourable_end(capsys):
    assert goal(Samples([3.1, 3.4, 3.9, 3.3, 3.5, 3.6]), "≥ 3", "parse") is True
    assert goal(Samples([2.8, 3.4, 3.9, 3.3, 3.5, 3.6]), "≥ 3", "parse") is False   # median 3.45, low end 2.8
    assert goal(Samples([0.3, 0.4, 0.6, 0.4, 0.5, 0.45]), "≤ 0.5", "share", unit="") is False   # high end 0.6
    lines = capsys.readouterr().out.splitlines()
    assert "misses the goal ≥ 3 (judged on the interval's low end)" in lines[1] and "high end" in lines[2]
    with pytest.raises(ValueError, match="a goal reads like"):
        goal(ABOVE, "about 3", "parse")
