"""helpers.measure.plots: each chart of notebooks 01 and 02 draws what it says, with its labels."""
import matplotlib
import numpy as np
import pytest

from helpers.measure import plots

matplotlib.use("Agg")


@pytest.fixture
def figure(monkeypatch):
    import matplotlib.pyplot as plt

    monkeypatch.setattr(plt, "show", lambda: None)
    yield lambda: plt.gcf()
    plt.close("all")


def test_peak_memory_draws_a_line_per_way_on_log_axes_with_plain_ticks(figure):
    plots.peak_memory([1_000, 10_000], {"list": [8e5, 8e6], "generator": [2e3, 2e3]}, record_bytes=784)
    ax = figure().axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["list", "generator"]
    assert ax.get_xscale() == ax.get_yscale() == "log" and "784-byte" in ax.get_xlabel()
    assert ax.xaxis.get_major_formatter()(1000, 0) == "1,000"


def test_image_row_titles_each_image_with_its_label(figure):
    plots.image_row(np.zeros((3, 28, 28), np.uint8), [7, 1, 4], "first batch")
    assert [ax.get_title() for ax in figure().axes] == ["7", "1", "4"]


def test_training_curves_draw_training_and_validation(figure):
    plots.training_curves({"accuracy": [0.8, 0.9], "val_accuracy": [0.85, 0.92]}, "MLP")
    ax = figure().axes[0]
    assert [line.get_label() for line in ax.get_lines()] == ["training", "validation (held out)"]
    assert list(ax.get_lines()[1].get_ydata()) == [0.85, 0.92] and ax.get_ylabel() == "accuracy"


def test_labels_in_order_draws_one_panel_per_pipeline(figure):
    orders = {"in order": np.repeat(np.arange(10), 5), "shuffled": np.arange(50) % 10}
    plots.labels_in_order(orders, {"in order": "1.0 classes", "shuffled": "10.0 classes"}, "labels")
    axes = figure().axes
    assert [ax.get_title() for ax in axes] == ["in order\n1.0 classes", "shuffled\n10.0 classes"]
    assert list(axes[0].get_lines()[0].get_ydata()) == list(orders["in order"])
