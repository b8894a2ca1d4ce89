"""Chart rules the notebooks follow (issue 27, item 3): no bar chart on a log axis.

A bar's length says "this much"; on a log axis it says nothing (where the bar starts is arbitrary), so a rate
spanning orders of magnitude is drawn as a dot with its interval as a line, or on a linear axis with
the ratio written on it. The check is static: a code cell that calls `.bar(`/`.barh(` on the same object
(an axes, `plt`) on which it sets a log scale fails.
"""
import ast
import json

import pytest

from tools import notebooks as nbtools

NOTEBOOKS = nbtools.notebooks()
BAR_CALLS = {"bar", "barh"}
SCALE_CALLS = {"set_xscale", "set_yscale", "xscale", "yscale"}   # axes methods and their pyplot twins
ALWAYS_LOG = {"loglog", "semilogx", "semilogy"}


def _receiver(call: ast.Call) -> str | None:
    return ast.unparse(call.func.value) if isinstance(call.func, ast.Attribute) else None


def _sets_log_scale(call: ast.Call) -> bool:
    name = call.func.attr
    if name in ALWAYS_LOG:
        return True
    scale = call.args[0] if call.args else next((k.value for k in call.keywords if k.arg == "value"), None)
    # a scale given as a variable is taken to be a log one: a chart whose scale may be log draws no bars
    linear = isinstance(scale, ast.Constant) and scale.value not in ("log", "symlog")
    return name in SCALE_CALLS and not linear


def bars_on_log_axes(source: str) -> set[str]:
    """The objects (`ax`, `axes[0]`, `plt`) on which `source` both draws bars and sets a log scale."""
    bars, logs = set(), set()
    # IPython's magics and shell lines (`%timeit`, `!ls`) are not Python: left out before parsing
    python = "\n".join("" if line.lstrip().startswith(("%", "!")) else line for line in source.splitlines())
    for node in ast.walk(ast.parse(python)):
        if isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute):
            if node.func.attr in BAR_CALLS:
                bars.add(_receiver(node))
            elif node.func.attr in SCALE_CALLS | ALWAYS_LOG and _sets_log_scale(node):
                logs.add(_receiver(node))
    return bars & logs


def offending_cells(path) -> list[str]:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    return [f"cell {c.get('id')}: bars and a log scale on {sorted(found)}"
            for c in cells if c["cell_type"] == "code"
            and (found := bars_on_log_axes("".join(c["source"])))]


@pytest.mark.parametrize("source", [
    'ax.barh(names, rates)\nax.set_xscale("log")',
    'ax.bar(x, y, yerr=e)\nax.set_yscale(value="log")',
    "axes[1].bar(x, y)\naxes[1].set_yscale('symlog')",
    'plt.bar(x, y)\nplt.yscale("log")',
    "ax.barh(x, y)\nax.semilogx()",
    "ax.bar(x, y)\nax.set_yscale(scale)",
    '%matplotlib inline\nax.barh(x, y)\nax.set_xscale("log")',
])
def test_bars_on_a_log_axis_are_found(source):
    assert bars_on_log_axes(source)


@pytest.mark.parametrize("source", [
    'ax.errorbar(m, rows, xerr=e, fmt="o")\nax.set_xscale("log")',   # a dot plot may sit on a log axis
    'ax.barh(names, ratios)\nax.set_xscale("linear")',
    'left.bar(x, y)\nright.set_yscale("log")',                       # bars on one axes, log on another
    'ax.broken_barh([(0, 1)], (0, 1))\nax.set_xscale("log")',        # not `.bar(`: a timeline's spans
])
def test_other_charts_pass(source):
    assert not bars_on_log_axes(source)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.name)
def test_no_bar_chart_on_a_log_axis(path):
    assert offending_cells(path) == [], (
        f"{path.name} draws bars on a log axis: draw each value as a dot with its interval as a line (a log "
        "axis is fine then), or keep the bars on a linear axis with the ratio written on each")
