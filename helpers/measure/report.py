"""How a notebook reports a measurement, in one line: the verdict, a comparison, the GPU's appetite, a dot plot,
a table. (Notebooks 01-08 and 99; docs/reading-figures.md explains the statistics to a learner.)

The verdict rule, the series' only one:

- A verdict word ("faster", "slower", "could feed", ...) needs **enough rounds**: 6 or more, so that the
  interval of the median reaches 95 % (`Samples.enough`). With fewer the interval is the whole range of the
  rounds, at lower confidence, and the verdict is "too few rounds to tell", whatever the numbers.
- With enough rounds, the word is said only when the **interval of the median ratio excludes 1** (or the
  reference a rate is held against): above it, the first word; below it, the second. An interval that holds 1
  gives "no measurable difference". The interval is judged **as printed** (`fmt`): an end that reads "1.00"
  holds 1, so no line says "faster" beside "(1.00–1.88)".

`verdict` applies the rule; every other function here takes its word from `verdict`. A figure of the stored
full run (`helpers.measure.full_run`) is judged by the same rule: its interval is a 95 % one unless the run
had too few rounds for that (`whole_range`).

Every figure is written "median (low–high)" by `around`, the series' one formatting (`core.median_text`, which
`Samples.brief` and the full run's figures use too).
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Union

from helpers.measure.core import median_text
from helpers.measure.full_run import FullRunFigure, full_run_figure
from helpers.measure.gpu_reference import GPU_NAME, gpu_appetite

if TYPE_CHECKING:
    from matplotlib.axes import Axes

    from helpers.measure.core import Rounds, Samples

    Figure = Union[Samples, FullRunFigure]

NO_DIFFERENCE = "no measurable difference"
TOO_FEW = "too few rounds to tell"
ENOUGH_ROUNDS = 6   # the fewest whose median has a 95 % interval (helpers.measure.core.median_interval_ranks)
LINE_STYLES = [("tab:purple", "--"), ("black", ":"), ("tab:red", "-."), ("grey", "-")]


def _enough(figure: Figure) -> bool:
    if isinstance(figure, FullRunFigure):
        return figure.interval is not None and not figure.whole_range
    return figure.enough


def _as_printed(value: float, fmt: str) -> float:
    """`value` at the precision `fmt` prints it: 1.0049 at ".2f" is 1.0 (it reads "1.00").

    >>> _as_printed(1.0049, ".2f"), _as_printed(186_431.4, ",.0f"), _as_printed(1.0049, ".1%")
    (1.0, 186431.0, 1.005)
    """
    text = format(value, fmt).replace(",", "")
    try:
        return float(text.removesuffix("%")) / (100 if text.endswith("%") else 1)
    except ValueError:   # a format that does not print a plain number: the value as it is
        return value


def verdict(figure: Figure, above: str = "faster", below: str = "slower", against: float = 1.0,
            fmt: str = ".2f") -> str:
    """The rule above: `above` or `below` when enough rounds put the interval, as `fmt` prints it, on that
    side of `against`; otherwise NO_DIFFERENCE or TOO_FEW. For a ratio of rates A/B, "faster" means A was
    faster. A low end of 1.004 prints as "1.00", which holds 1: no measurable difference.

    >>> from helpers.measure.core import Samples
    >>> verdict(Samples([1.2, 1.3, 1.25, 1.4, 1.22, 1.31])), verdict(Samples([0.9, 1.1, 1.0, 1.05, 0.95, 1.2]))
    ('faster', 'no measurable difference')
    >>> verdict(Samples([9.0, 9.2, 9.1])), verdict(Samples([800.0] * 6), "could feed it", "would starve it", 1000)
    ('too few rounds to tell', 'would starve it')
    >>> verdict(Samples([1.004, 1.3, 1.25, 1.4, 1.22, 1.31]))   # printed 1.00–1.40: the interval holds 1
    'no measurable difference'
    """
    if not _enough(figure):
        return TOO_FEW
    low, high = (_as_printed(end, fmt) for end in figure.interval)
    return above if low > against else below if high < against else NO_DIFFERENCE


def around(figure: Figure, fmt: str = ".2f", unit: str = "×") -> str:
    """A measured figure as the series writes it: its median and, in parentheses, its interval.

    >>> from helpers.measure.core import Samples
    >>> around(Samples([1.2, 1.3, 1.25, 1.4, 1.22, 1.31])), around(Samples([900, 1100, 1000]), ",.0f", " images/s")
    ('1.27× (1.20–1.40)', '1,000 images/s (900–1,100)')
    """
    return median_text(figure.median, figure.interval, fmt, unit)


def intervals_note(*samples: Samples) -> str:
    """What the parentheses mean for these measurements: a 95 % interval, or with too few rounds their range.

    >>> from helpers.measure.core import Samples
    >>> intervals_note(Samples([1.0] * 6), Samples([1.0] * 9))
    'in parentheses: the 95 % interval of each median (6–9 rounds)'
    >>> intervals_note(Samples([1.0] * 3))
    'in parentheses: the whole range of 3 rounds (≈75 % confidence; 6 rounds give a 95 % interval)'
    """
    fewest, most = min(s.n for s in samples), max(s.n for s in samples)
    rounds = f"{fewest}" if fewest == most else f"{fewest}–{most}"
    if all(s.enough for s in samples):
        return f"in parentheses: the 95 % interval of each median ({rounds} rounds)"
    coverage = min(s.coverage for s in samples if not s.enough)
    return (f"in parentheses: the whole range of {rounds} rounds (≈{coverage * 100:.0f} % confidence; "
            f"{ENOUGH_ROUNDS} rounds give a 95 % interval)")


def _said(word: str, figure: Figure) -> str:
    """The verdict as printed: "faster here", or how many rounds were too few."""
    if word != TOO_FEW:
        return f"{word} here"
    n = getattr(figure, "n", None)
    return f"{TOO_FEW} ({n} rounds; {ENOUGH_ROUNDS} give a 95 % interval)" if n else TOO_FEW


def goal(figure: Samples, target: str, what: str, fmt: str = ".2f", unit: str = "×") -> bool:
    """Print whether `what` meets a goal such as "≥ 3", judged on the interval's unfavourable end (its low end
    for "≥", its high end for "≤": `Samples.meets`), and return it.

    >>> from helpers.measure.core import Samples
    >>> goal(Samples([3.1, 3.4, 3.9, 3.3, 3.5, 3.6]), "≥ 3", "raw records against PNG decoding")
    raw records against PNG decoding: 3.45× (3.10–3.90): meets the goal ≥ 3 (judged on the interval's low end).
    True
    """
    met = figure.meets(target)
    if met is None or " and " in target or target.strip().startswith(("holds", "median")):
        raise ValueError(f"a goal reads like '≥ 3' or '≤ 0.5', not {target!r}")
    end = "low" if target.lstrip().startswith((">", "≥")) else "high"
    print(f"{what}: {around(figure, fmt, unit)}: {'meets' if met else 'misses'} the goal {target} "
          f"(judged on the interval's {end} end).")
    return met


def full_run_line(key: str, fmt: str = ".2f", unit: str = "×", size: str | None = None,
                  above: str | None = None, below: str | None = None) -> str:
    """The stored full run's figure for `key`, to print beside this run's: its verdict by the rule when words
    are given, the size it was measured at (`size`, e.g. "60,000 images an epoch, 8,192 here"), the file it comes from.

    >>> print(full_run_line("tfrecord_bytes_per_raw_byte", size="all of MNIST"))   # doctest: +ELLIPSIS
    full run (all of MNIST): ...× (tfrecord_bytes_per_raw_byte in helpers/measure/last_full_run.txt)
    """
    where = f"full run ({size})" if size else "full run"
    figure = full_run_figure(key)
    word = f": {verdict(figure, above, below, fmt=fmt)}" if above and below and figure.interval else ""
    return f"{where}: {around(figure, fmt, unit)}{word} ({key} in helpers/measure/last_full_run.txt)"


def compare(ratio: Samples | Rounds, a: str = "", b: str = "", *, fmt: str = ".2f", above: str = "faster",
            below: str = "slower", full_run: str | None = None, size: str | None = None,
            label: str | None = None) -> str:
    """Print "A against B: 1.23× (1.10–1.40): faster here." and, given a key of the stored full run, its figure
    on the next line (`full_run_line`, with `size` saying how the two runs' sizes differ). Returns the verdict.

    `ratio`: the paired ratio A/B (`rounds.ratio(a, b)`), or the `Rounds` themselves. `above`/`below`: the
    words for a ratio above/below 1 (for a ratio of times, above="slower", below="faster"). `label` replaces
    "A against B" (then `a` and `b` may be left out for a ratio given as Samples). End the line with `;` in a notebook, or assign the result, so that Jupyter does not echo it.

    >>> from helpers.measure.core import Samples
    >>> compare(Samples([1.2, 1.3, 1.25, 1.4, 1.22, 1.31]), "tf.data", "PIL")
    tf.data against PIL: 1.27× (1.20–1.40): faster here.
    'faster'
    >>> word = compare(Samples([9.0, 9.2, 9.1]), "Grain", "tf.data", full_run="grain_vs_tfdata_pipeline_alone",
    ...                size="200,000 images an epoch; 12,000 here")   # doctest: +ELLIPSIS
    Grain against tf.data: 9.10× (9.00–9.20): too few rounds to tell (3 rounds; 6 give a 95 % interval).
      full run (200,000 images an epoch; 12,000 here): 1.44× (1.00–1.88): no measurable difference ...
    """
    if not (label or a and b):
        raise ValueError("compare needs the two sides' names, a and b, or a label")
    if not hasattr(ratio, "median"):   # the Rounds: their paired ratio
        ratio = ratio.ratio(a, b)
    word = verdict(ratio, above, below, fmt=fmt)
    print(f"{label or f'{a} against {b}'}: {around(ratio, fmt)}: {_said(word, ratio)}.")
    if full_run:
        print(f"  {full_run_line(full_run, fmt, size=size, above=above, below=below)}")
    return word


def side(measured: Mapping[object, Rounds], name: str) -> dict[object, Samples]:
    """One side's rates out of several `alternate` runs (one per batch size, say): {key: its Samples}.

    >>> from helpers.measure.core import Rounds
    >>> side({32: Rounds(["alone"], {"alone": [1.0, 2.0, 3.0]})}, "alone")[32].median
    2.0
    """
    return {key: rounds.samples(name) for key, rounds in measured.items()}


def _here(model_here: Mapping[object, Samples] | Samples | None, key: object) -> Samples | None:
    return model_here.get(key) if isinstance(model_here, Mapping) else model_here


def appetite(rates: Mapping[object, Samples], model: str, *, batch: int | None = None,
             model_here: Mapping[object, Samples] | Samples | None = None, unit: str = "samples/s",
             chart: bool = False, title: str | None = None) -> dict[object, str]:
    """Could this pipeline feed the reference GPU? One sentence per rate of a pipeline alone, held against
    `gpu_appetite(model, batch size)` by the rule (`verdict`), beside the model alone here when given; with
    `chart`, a dot plot with the GPU drawn as a line. Returns each key's verdict.

    `rates`: by batch size ({256: Samples}), or, given `batch`, by pipeline name, all at that batch size.
    `model_here`: the model's own rate here, by the same keys or one for all.

    >>> from helpers.measure.core import Samples
    >>> words = appetite({256: Samples([2.5e5, 2.6e5] * 3)}, "mnist_mlp", model_here=Samples([4e4, 5e4] * 3))
    ... # doctest: +NORMALIZE_WHITESPACE
    batch 256: the pipeline alone 255,000 samples/s (250,000–260,000); the model alone here 45,000
    (40,000–50,000); the reference GPU 186,431: could feed it.
    """
    words, gpu = {}, {}
    for key, rate in rates.items():
        size = batch if batch is not None else key
        gpu[key] = gpu_appetite(model, size).samples_per_second
        words[key] = verdict(rate, "could feed it", "would starve it", against=gpu[key], fmt=",.0f")
        here = _here(model_here, key)
        alone = f"; the model alone here {around(here, ',.0f', '')}" if here is not None else ""
        name = f"batch {key}: the pipeline alone" if batch is None else f"{key} alone, batch {batch}:"
        print(f"{name} {around(rate, ',.0f', ' ' + unit)}{alone}; the reference GPU {gpu[key]:,}: "
              f"{_said(words[key], rate).removesuffix(' here')}.")
    if chart:
        _appetite_chart(rates, gpu, model, batch, model_here, unit, title)
    return words


def _appetite_chart(rates, gpu, model, batch, model_here, unit, title) -> None:
    rows = {(f"batch {key}" if batch is None else str(key)): key for key in rates}
    series = {"pipeline alone": {row: rates[key] for row, key in rows.items()}}
    if model_here is not None:
        series["model alone, here"] = {row: _here(model_here, key) for row, key in rows.items()}
    reference = f"{GPU_NAME} trains {model} (reference, measured elsewhere)"
    line = gpu[next(iter(rates))] if batch is not None else {row: gpu[key] for row, key in rows.items()}
    dots(series, title=title or f"Could the pipeline feed a GPU? ({model})", xlabel=unit, log=True,
         lines={reference: line})


def dots(series: Mapping[str, Samples] | Mapping[str, Mapping[str, Samples]], *, title: str, xlabel: str,
         log: bool = False, lines: Mapping[str, float | Mapping[str, float]] | None = None,
         ax: Axes | None = None) -> None:
    """A dot plot: each median a dot, its interval a line through it, one row per name. `series` maps names to
    Samples (one series), or series names to such maps: a colour each, side by side where they share a row (on
    rows of their own, a colour per kind). `lines`: reference values by label, one number (a line across) or
    one per row (a mark on that row). `log`: a log axis, where equal steps are equal ratios. Shown at once,
    unless drawn into a given `ax`.

    >>> import matplotlib.pyplot as plt
    >>> from helpers.measure.core import Samples
    >>> fig, ax = plt.subplots()
    >>> dots({"PIL": Samples([900, 1000, 1100]), "tf.data": Samples([1500, 1600, 1700])}, title="Decoding",
    ...      xlabel="images per second", lines={"training here": 1200}, ax=ax)
    >>> [label.get_text() for label in ax.get_yticklabels()], ax.get_xlabel()
    (['PIL', 'tf.data'], 'images per second; dot: median, line: its interval')
    """
    import matplotlib.pyplot as plt

    groups = series if all(isinstance(v, Mapping) for v in series.values()) else {"": series}
    rows = list(dict.fromkeys(row for group in groups.values() for row in group))
    shown = ax is None
    if shown:
        _, ax = plt.subplots(figsize=(10, 2.0 + 0.4 * len(rows)), layout="constrained")
    shared = {row for row in rows if sum(row in group for group in groups.values()) > 1}
    for index, (name, group) in enumerate(groups.items()):
        shift = (index - (len(groups) - 1) / 2) * 0.5 / len(groups)
        _dot_row(ax, [rows.index(row) + shift * (row in shared) for row in group], list(group.values()),
                 name or None)
    for (label, value), (colour, style) in zip((lines or {}).items(), LINE_STYLES):
        _reference(ax, value, rows, label, colour, style)
    ax.set_yticks(range(len(rows)), [str(row) for row in rows])
    ax.set_ylim(len(rows) - 0.5, -0.5)   # the first row on top
    _axis(ax, log)
    ax.set_xlabel(f"{xlabel}{' (log scale)' * log}; dot: median, line: its interval")
    ax.set_title(title)
    if ax.get_legend_handles_labels()[0] and shown:   # below the axes: long labels do not squeeze the dots
        ax.figure.legend(loc="outside lower center", ncols=2, fontsize="small")
    elif ax.get_legend_handles_labels()[0]:
        ax.legend(fontsize="small")
    if shown:
        plt.show()


def _dot_row(ax: Axes, positions: list[float], figures: list, label: str | None) -> None:
    medians = [f.median if hasattr(f, "median") else float(f) for f in figures]
    intervals = [getattr(f, "interval", None) or (m, m) for f, m in zip(figures, medians)]
    errors = [[m - low for m, (low, _) in zip(medians, intervals)],
              [high - m for m, (_, high) in zip(medians, intervals)]]
    ax.errorbar(medians, positions, xerr=errors, fmt="o", capsize=4, label=label)


def _reference(ax: Axes, value, rows: list, label: str, colour: str, style: str) -> None:
    if not isinstance(value, Mapping):
        ax.axvline(value, color=colour, linestyle=style, label=label)
        return
    where = [rows.index(row) for row in value]
    ax.vlines(list(value.values()), [w - 0.4 for w in where], [w + 0.4 for w in where], color=colour,
              linestyle=style, linewidth=2.5, label=label)


def _axis(ax: Axes, log: bool) -> None:
    from matplotlib.ticker import FuncFormatter, LogLocator, NullFormatter

    if log:
        ax.set_xscale("log")
        low, high = ax.get_xlim()
        # 1, 2, 5 per decade while they fit; over several decades, one label per decade (they would overlap)
        ax.xaxis.set_major_locator(LogLocator(subs=(1, 2, 5) if high / low < 300 else (1,)))
        ax.xaxis.set_minor_formatter(NullFormatter())
    ax.xaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:,.{0 if v >= 10 else 2}f}"))   # not 3×10³
    ax.grid(axis="x", alpha=0.3)


def table(rows: Mapping[str, Mapping[str, object]], *, fmt: str | Mapping[str, str] = ".2f",
          first: str = "") -> None:
    """Print the series' results table: one row per name, one column per key; a measurement (`Samples`, a
    full-run figure) as "median (low–high)", a number by `fmt` (one for all, or by column), text as it is. A
    note under it says what the parentheses are.

    >>> from helpers.measure.core import Samples
    >>> table({"PIL": {"images/s": Samples([900, 1000, 1100]), "bytes": 2800},
    ...        "tf.data": {"images/s": Samples([1500, 1600, 1700]), "bytes": 2800}},
    ...       fmt={"images/s": ",.0f", "bytes": ",d"}, first="pipeline")
    pipeline             images/s  bytes
    PIL         1,000 (900–1,100)  2,800
    tf.data   1,600 (1,500–1,700)  2,800
    in parentheses: the whole range of 3 rounds (≈75 % confidence; 6 rounds give a 95 % interval)
    """
    columns = list(dict.fromkeys(column for row in rows.values() for column in row))
    cells = [[first, *columns]] + [[name, *(_cell(row.get(c), fmt, c) for c in columns)]
                                   for name, row in rows.items()]
    widths = [max(len(line[i]) for line in cells) for i in range(len(cells[0]))]
    for line in cells:
        print(f"{line[0]:<{widths[0]}}" + "".join(f"  {text:>{width}}" for text, width in zip(line[1:], widths[1:])))
    measured = [v for row in rows.values() for v in row.values() if hasattr(v, "enough")]
    if measured:
        print(intervals_note(*measured))


def _cell(value: object, fmt: str | Mapping[str, str], column: str) -> str:
    form = fmt.get(column, ".2f") if isinstance(fmt, Mapping) else fmt
    if value is None:
        return ""
    if hasattr(value, "median"):
        return around(value, form, "")
    return format(value, form) if isinstance(value, (int, float)) else str(value)
