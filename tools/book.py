"""The series as a book: execute every notebook once, then render the outputs with Sphinx + MyST-NB into site/.

    python -m tools.book --quick          # offline: generated stand-ins, small sizes (a few minutes on 2 cores)
    python -m tools.book --quick --first-run   # each notebook a first run, in an empty data folder (as .ci/run)
    python -m tools.book                  # a full run on the real data (data/, or Keras's download)
    python -m tools.book --quick --only 01,04 --out /tmp/site
    python -m tools.book --render-only    # render the last run again (after changing the book's pages, not a notebook)

Needs the `[book]` extra (`pip install -e ".[book]"`: Sphinx, MyST-NB, the book theme, a local MathJax). Open
`site/index.html` in a browser, or serve it: `python -m http.server -d site`.

How it works. Every `notebooks/NN_*.ipynb` is executed in a fresh kernel (working directory notebooks/, as pytest
runs them), into a copy under build/book/: nothing is written into notebooks/. The run records each notebook's wall
time and each cell's, and, from inside the kernel after the last cell, where each dataset came from and whether quick
mode was on. The pages are then made from those copies: a banner on each says which data and mode its outputs come
from, links between notebooks point at their pages, the Colab badge is served from the site itself (the book must
load offline), long text outputs scroll, progress bars (widgets) show their last state as text, and TensorFlow's C++
start-up lines are left out (every other output is shown as the run made it). The landing page holds the README's
table of notebooks, the date, versions, device and each notebook's run time (`python -m tools.workshop plan` reads
the same record).
The Markdown pages of docs/ are pages of the book too, linked from the landing page; links between notebooks, docs
pages and the README lead to their pages, and links to other files of the repository lead to GitHub.
A notebook whose run raised an error is still rendered, with a red banner, and the build exits with status 1.
The site replaces only a folder the book made (its marker file inside, `out_problem`), or a new or empty one.
"""
from __future__ import annotations

import argparse
import contextlib
import copy
import datetime as dt
import json
import os
import platform
import re
import shutil
import signal
import sys
import time
from importlib import metadata
from pathlib import Path
from typing import Iterator

from tools import folders
from tools.build_record import RecordError, read_record
from tools.notebooks import colab_url, github_url
from helpers.data.datasets import CIFAR_DIR, MNIST_FILE
from helpers.setup.config import DATA_DIR_ENV, REPO_BRANCH, REPO_URL
from helpers.storage.files import FileLock, LockHeldError, atomic_write_text, file_problem

ROOT = Path(__file__).resolve().parent.parent
NOTEBOOK_DIR = ROOT / "notebooks"
SCRATCH = ROOT / "build" / "book"
ASSETS = Path(__file__).resolve().parent / "book_assets"
SITE_MARKER = ".made-by-tools-book"   # written into every site the book makes: only a folder holding it is replaced
SITE_COMMAND = "python -m tools.book"
NOTEBOOK_NAME = re.compile(r"^\d\d_\w+\.ipynb$")
CELL_TIMEOUT = 900
SCROLL_LINES = 40          # text outputs longer than this get a scroll box on the page
BANNER_CLASS = "book-banner"
COLAB_BADGE = "https://colab.research.google.com/assets/colab-badge.svg"
INLINE_BACKEND = "module://matplotlib_inline.backend_inline"   # MPLBACKEND=Agg (pytest's) would draw no chart
# Run in the kernel after the notebook's last cell: what the run really used, read from the helpers themselves.
PROBE = """\
import json as _json, sys as _sys
_report = {}
_datasets = _sys.modules.get("helpers.data.datasets")
if _datasets is not None:
    _names = getattr(_datasets, "DISPLAY_NAMES", ("mnist", "cifar10"))
    _report["sources"] = {_n: _datasets.source_of(_n) for _n in _names if _datasets.source_of(_n) != "not loaded yet"}
_config = _sys.modules.get("helpers.setup.config")
if _config is not None:
    _report["quick"] = _config.quick_mode()
_report["made"] = {_n.rsplit(".", 1)[1]: (_m.__doc__ or "").strip().split("\\n")[0].rstrip(".")
                  for _n, _m in list(_sys.modules.items())
                  if _n.startswith("helpers.data.") and _n.rsplit(".", 1)[1] not in ("datasets", "standins", "labels")}
_setup = _sys.modules.get("helpers.setup.notebook")
try:
    _report["branch"] = str(_setup.branch())
except Exception:
    pass
print("BOOK-PROBE " + _json.dumps(_report))
"""
STANDIN_LINE = re.compile(r"Quick mode: (\S+) is not in .*? uses a generated stand-in")
VERSIONS = ["tensorflow", "keras", "numpy", "sphinx", "myst-nb", "sphinx-book-theme"]


# ---------------------------------------------------------------- which notebooks


def discover(only: list[str] | None = None) -> list[Path]:
    """Every `notebooks/NN_*.ipynb`, in order; with `only`, those whose number or name is listed."""
    found = sorted(p for p in NOTEBOOK_DIR.glob("*.ipynb") if NOTEBOOK_NAME.match(p.name))
    if only:
        found = [p for p in found if p.name[:2] in only or p.stem in only or p.name in only]
    return found


# ---------------------------------------------------------------- executing

# The datasets' offline files the loaders read (helpers.data.datasets): a first run finds them as a learner who
# downloaded them would. Nothing else in the data folder is copied.
DATASET_FILES = (MNIST_FILE, *(f"{CIFAR_DIR}/{name}" for name in
                               [f"data_batch_{i}" for i in range(1, 6)] + ["test_batch"]))
FIRST_RUN_DATA = "first-run-data"   # the first run's data folder, under the build folder


class BookError(Exception):
    """A problem found before any notebook runs; `build` prints it and returns status 2."""


def data_source() -> Path:
    """The data folder the notebooks would read, found without creating it: `TUTORIAL_DATA_DIR` (a relative path
    from notebooks/, where the kernels run), else data/ in the checkout."""
    env = os.environ.get(DATA_DIR_ENV)
    return NOTEBOOK_DIR / Path(env).expanduser() if env else ROOT / "data"


def remove_first_run_data(folder: Path) -> None:
    """Remove a first run's data folder; a folder that will not go is a warning, never the build's end (its
    record is written either way)."""
    try:
        shutil.rmtree(folder)   # a symlink inside is removed, never followed
    except FileNotFoundError:
        pass
    except OSError as e:
        print(f"warning: could not remove {folder} ({e.strerror}: {e.filename}); remove it by hand",
              file=sys.stderr)


@contextlib.contextmanager
def first_run_data(scratch: Path) -> Iterator[Path]:
    """A data folder in which every notebook runs as a learner's first run does: `scratch`/first-run-data, empty but
    for copies of the datasets' files found in the data folder (their bytes, as new regular files), removed
    afterwards (and, left by a killed build, at the next one's start: the caller holds the build folder's lock).
    `BookError` names a dataset file that is there but cannot be read. Without it a notebook finds what an earlier
    run wrote: notebook 05's section 8 then reads back a 1.3 GB split, from the disk if the page cache has let it go,
    where a first run writes it and reads it from memory."""
    folder = scratch / FIRST_RUN_DATA
    if folder.is_symlink() or folder.exists() and not folder.is_dir():   # not a folder a build made: leave it
        raise BookError(f"{folder} is {file_problem(folder) or 'a file'} where a first run makes its data folder; "
                        f"move it away and build again.")
    remove_first_run_data(folder)
    try:
        folder.mkdir(parents=True)
    except OSError as e:
        raise BookError(f"{folder} could not be made for --first-run ({e.strerror}).") from None
    try:
        source = data_source()
        for name in DATASET_FILES:
            found = source / name
            if not os.path.lexists(found):
                continue
            if problem := file_problem(found):
                raise BookError(f"{found} is {problem}: --first-run copies the datasets' files from the data folder. "
                                f"Remove it or put the dataset's file there.")
            (folder / name).parent.mkdir(parents=True, exist_ok=True)
            try:
                shutil.copyfile(found, folder / name)   # the bytes (through a symlink), without its modes
            except OSError as e:
                raise BookError(f"{found} could not be copied for --first-run ({e.strerror}).") from None
        yield folder
    finally:
        remove_first_run_data(folder)


def kernel_env(quick: bool, data: Path | None = None) -> dict[str, str]:
    """The kernels' environment: quick mode on or off, and with `data` (a first run's folder) that data folder."""
    env = dict(os.environ)
    env["TUTORIAL_QUICK"] = "1" if quick else "0"
    if data is not None:
        env[DATA_DIR_ENV] = str(data)
    env["MPLBACKEND"] = INLINE_BACKEND
    env.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    env.setdefault("PYDEVD_DISABLE_FILE_VALIDATION", "1")
    return env


def cell_seconds(cell: dict) -> float | None:
    """How long a code cell ran, from the timestamps nbclient records (record_timing)."""
    timing = cell.get("metadata", {}).get("execution", {})
    start, end = timing.get("iopub.execute_input"), timing.get("shell.execute_reply")
    if not (start and end):
        return None
    parse = lambda s: dt.datetime.fromisoformat(s.replace("Z", "+00:00"))
    return round((parse(end) - parse(start)).total_seconds(), 3)


def execute(path: Path, quick: bool, log: Path, data: Path | None = None) -> tuple[dict, dict]:
    """Execute a copy of one notebook; return the executed notebook and what the run recorded.

    The kernel's own stderr (TensorFlow's start-up lines) goes to `log`; cells' outputs go into the notebook. With
    `data`, the kernel's data folder is that one instead of `data/`.
    """
    import warnings

    import nbformat
    from nbclient import NotebookClient

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")          # cells without ids: normalize() gives them ids
        nb = nbformat.reads(path.read_text(encoding="utf-8"), as_version=4)
        nb = nbformat.validator.normalize(nb)[1]
    nb = nbformat.from_dict(nb)
    nb.cells.append(nbformat.v4.new_code_cell(PROBE))
    client = NotebookClient(nb, timeout=CELL_TIMEOUT, kernel_name="python3", allow_errors=True, record_timing=True,
                            resources={"metadata": {"path": str(NOTEBOOK_DIR)}})
    started, failure = time.perf_counter(), None
    with open(log, "w") as stderr:
        try:
            client.execute(env=kernel_env(quick, data), stderr=stderr)
        except Exception as e:                   # a cell over the timeout, a kernel that died: the run stops there
            last = (str(e).strip().splitlines() or [""])[-1]
            failure = f"the run stopped: {type(e).__name__}: {last}"
    seconds = time.perf_counter() - started
    probe = nb.cells.pop()
    record = {"seconds": round(seconds, 1), "quick": quick, "cells": [], "errors": [failure] if failure else []}
    for out in probe.get("outputs", []):
        for line in out.get("text", "").splitlines():
            if line.startswith("BOOK-PROBE "):
                record.update(json.loads(line.removeprefix("BOOK-PROBE ")))
    for number, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        record["cells"].append([number, cell_seconds(cell)])
        cell.metadata.pop("execution", None)
        for out in cell.get("outputs", []):
            if out.output_type == "error":
                record["errors"].append(f"cell {number}: {out.ename}: {out.evalue}"[:300])
    return nb, record


# ---------------------------------------------------------------- the run's record, read back and shown

_CONTROL = re.compile(r"[\x00-\x1f\x7f]")


def md_text(value) -> str:
    r"""A value from the run as Markdown that shows it as it is, in the middle of a line: each character that can
    start markup, a role, math, a table cell or HTML backslash-escaped (CommonMark and MyST then read it as text),
    line breaks as spaces.

    >>> print(md_text("<b>x</b> *y* 2026-01-02 10:00"))
    \<b\>x\</b\> \*y\* 2026-01-02 10:00
    """
    return re.sub(r"([\\`*_\[\]<>&{}$|!~#])", r"\\\1", _CONTROL.sub(" ", str(value)))


def md_code(value) -> str:
    """A value from the run as inline code: fenced by more backticks than any run of them inside it.

    >>> md_code("data/mnist.npz"), md_code("a`b")
    ('`data/mnist.npz`', '``a`b``')
    """
    text = _CONTROL.sub(" ", str(value))
    fence = "`" * (max(map(len, re.findall("`+", text)), default=0) + 1)
    pad = " " if text[:1] in ("`", " ") or text[-1:] in ("`", " ") else ""
    return f"{fence}{pad}{text}{pad}{fence}"


# ---------------------------------------------------------------- what a page's outputs come from


def data_sources(nb: dict, record: dict) -> dict[str, str]:
    """Dataset name → where it came from: the probe's answer, or else the stand-in announcements in the outputs."""
    sources = dict(record.get("sources") or {})
    if not sources:
        for cell in nb["cells"]:
            for out in cell.get("outputs", []):
                for name in STANDIN_LINE.findall(out.get("text", "")):
                    sources[name.lower().replace("-", "")] = "stand-in (generated)"
    return sources


DISPLAY = {"mnist": "MNIST", "cifar10": "CIFAR-10"}


def describe_source(name: str, source: str, short: bool = False) -> str:
    """What the banner says of one dataset's source; `short`, the landing page's shorter words.

    >>> describe_source("mnist", "stand-in (generated)")
    'MNIST: a generated stand-in, not the real MNIST'
    >>> describe_source("cifar10", "stand-in (generated)", short=True), describe_source("mnist", "file /x/data/mnist.npz", short=True)
    ('CIFAR-10 stand-in (generated)', 'MNIST from `data/mnist.npz`')
    """
    label = DISPLAY.get(name) or md_text(name)
    where = Path(source.removeprefix("file "))
    if source.startswith("stand-in"):
        return f"{label} stand-in (generated)" if short else f"{label}: a generated stand-in, not the real {label}"
    if source.startswith("file "):
        return (f"{label} from " if short else f"{label}: the real dataset, from ") + md_code(f"{where.parent.name}/{where.name}")
    if "keras" in source:
        return f"{label} (downloaded by Keras)" if short else f"{label}: the real dataset, downloaded by Keras"
    return f"{label}: {md_text(source)}"


def banner(nb: dict, record: dict, date: str) -> str:
    """The note at the top of a page: which mode and data its outputs come from, and when they were made."""
    sources = data_sources(nb, record)
    quick = record.get("quick", True)
    standin = any(s.startswith("stand-in") for s in sources.values())
    if quick:
        title = "Outputs from a quick run" + (" on generated stand-in data" if standin else "")
        mode = ("Quick mode (`TUTORIAL_QUICK=1`): small sizes and few epochs, so numbers, charts and timings are "
                "smaller than a full run's")
    else:
        title = "Outputs from a full run" + (" on the real data" if sources and not standin else "")
        mode = "A full run (`TUTORIAL_QUICK=0`): the sizes the notebook is written for"
    described = [describe_source(n, s) for n, s in sorted(sources.items())]
    described += [md_code(f"helpers.data.{name}") + (f", {md_text(what[0].lower() + what[1:])}" if what else "")
                  for name, what in sorted((record.get("made") or {}).items())]
    data = "; ".join(described) or "none of the series' datasets (the notebook makes its own)"
    lines = [f"{mode}. Data: {data}.",
             f"Executed {md_text(date)} in {record['seconds']:.0f} s, {md_text(record.get('branch', 'device not recorded'))}. "
             "Every output below comes from that one run; open the notebook in Colab or JupyterLab to run it yourself."]
    kind = "danger" if record["errors"] else ("warning" if quick or standin else "note")
    if record["errors"]:
        title = "This run failed: " + title[0].lower() + title[1:]
        lines.append("Errors: " + "; ".join(md_code(e) for e in record["errors"][:3]))
    return "\n".join([f"```{{admonition}} {title}", f":class: {kind} {BANNER_CLASS}", "", "\n\n".join(lines), "```"])


# ---------------------------------------------------------------- pages


LINK = re.compile(r"\]\(([^)\s]+)\)")
NOTEBOOK_LINK = re.compile(r"^(?:(?:\.\./)?notebooks/)?(\d\d_\w+\.ipynb)$")
DOCS = "docs"   # the docs pages' folder, in the repository and in the site alike


def rewrite_links(text: str, in_book: set[str], docs: set[str] | None = None, at: str = "notebooks") -> str:
    """Links written for the repository, made to work in the site. `at` is the repository folder the text comes from
    ("notebooks", "" for the README, "docs"): notebooks' pages and the landing page sit at the site's top, the docs
    pages in its docs/ folder. A notebook's link leads to its page when it is in the book, otherwise to GitHub; a
    link to a page of docs/ (`docs`: their names, default those in docs/) to that page; the README to the landing
    page; any other file of the repository to GitHub. A link to nothing in the repository is left as written, so
    the renderer warns of it. The Colab badge's image is served from the site (the book must load offline).

    >>> rewrite_links("[next](02_b.ipynb) [x](03_c.ipynb#top)", {"02_b.ipynb"}).split(" ")[0]
    '[next](02_b.ipynb)'
    >>> rewrite_links("[figures](../docs/reading-figures.md#rounds)", set(), {"reading-figures.md"})
    '[figures](docs/reading-figures.md#rounds)'
    >>> rewrite_links("[04](../notebooks/04_x.ipynb) [home](../README.md)", {"04_x.ipynb"}, set(), at="docs")
    '[04](../04_x.ipynb) [home](../index.md)'
    """
    docs = {p.name for p in doc_pages()} if docs is None else docs
    here = DOCS if at == DOCS else ""           # the folder of the page in the site

    def link(match: re.Match) -> str:
        target, hash_, anchor = match[1].partition("#")
        anchor = hash_ + anchor
        if not target or re.match(r"^[a-z][\w+.-]*:", target, re.I) or target.startswith("/"):
            return match[0]                      # an anchor on this page, an address, an absolute path
        if notebook := NOTEBOOK_LINK.match(target):
            name = notebook[1]
            if name not in in_book:
                return f"]({github_url(Path(name))}{anchor})"
            site = name
        else:
            path = os.path.normpath(os.path.join(at, target)).replace(os.sep, "/")
            folder, _, name = path.rpartition("/")
            if folder == DOCS and name in docs:
                site = path
            elif path == "README.md" and not anchor:
                site = "index.md"
            elif path == ".":
                return f"]({REPO_URL}{anchor})"
            elif not path.startswith("../") and (ROOT / path).exists():
                kind = "tree" if (ROOT / path).is_dir() else "blob"
                return f"]({REPO_URL}/{kind}/{REPO_BRANCH}/{path}{anchor})"
            else:
                return match[0]
        return f"]({os.path.relpath(site, here or '.').replace(os.sep, '/')}{anchor})"

    return LINK.sub(link, text).replace(COLAB_BADGE, "colab-badge.svg")


def doc_pages(folder: Path | None = None) -> list[Path]:
    """The Markdown pages of docs/, shown in the book after the notebooks: those in `DOC_ORDER` first, in that order,
    then any other by name."""
    found = sorted((folder or ROOT / DOCS).glob("*.md"))
    rank = {name: i for i, name in enumerate(DOC_ORDER)}
    return sorted(found, key=lambda p: (rank.get(p.stem, len(rank)), p.name))


DOC_ORDER = ("reading-figures", "benchmarks", "book", "workshop", "contributing")


def doc_title(text: str, fallback: str) -> str:
    """A page's `# title`, else `fallback`."""
    found = re.search(r"^# (.+)$", text, re.M)
    return found[1].strip() if found else fallback


def write_doc_pages(src: Path, in_book: set[str], folder: Path | None = None) -> list[tuple[str, str]]:
    """Write the pages of docs/ into `src`/docs with their links made to work in the site; return each page's
    document name and title, in the book's order."""
    pages = doc_pages(folder)
    names = {p.name for p in pages}
    (src / DOCS).mkdir(parents=True, exist_ok=True)
    written = []
    for path in pages:
        text = path.read_text(encoding="utf-8")
        (src / DOCS / path.name).write_text(rewrite_links(text, in_book, names, at=DOCS), encoding="utf-8")
        written.append((f"{DOCS}/{path.stem}", doc_title(text, path.stem)))
    return written


WIDGET_VIEW = "application/vnd.jupyter.widget-view+json"
WIDGET_STATE = "application/vnd.jupyter.widget-state+json"


def settle_widgets(nb: dict) -> None:
    """Progress bars (tqdm's widgets) become the text line of their final state, as tqdm prints in a terminal.

    A static page cannot run a widget, and a widget's text fallback is its first state ("0%"); the state nbclient
    saved at the end of the run holds the last one. Widgets without a saved state are dropped.
    """
    import html

    state = nb.get("metadata", {}).pop("widgets", {}).get(WIDGET_STATE, {}).get("state", {})

    def text_of(model_id: str) -> str | None:
        model = state.get(model_id, {})
        parts = []
        for child in model.get("state", {}).get("children", []):
            child = state.get(child.removeprefix("IPY_MODEL_"), {})
            value = child.get("state", {})
            if child.get("model_name") == "FloatProgressModel" and value.get("max"):
                filled = round(10 * value.get("value", 0) / value["max"])
                parts.append("|" + "█" * filled + " " * (10 - filled) + "|")
            elif child.get("model_name") == "HTMLModel":
                parts.append(html.unescape(value.get("value", "")).replace("\u2007", " "))
        return "".join(parts).strip() or None

    for cell in nb.get("cells", []):
        kept = []
        for out in cell.get("outputs", []):
            view = out.get("data", {}).get(WIDGET_VIEW)
            if view is None:
                kept.append(out)
            elif (text := text_of(view.get("model_id", ""))) is not None:
                kept.append({"output_type": "stream", "name": "stdout", "text": text + "\n"})
        if "outputs" in cell:
            cell["outputs"] = kept


# TensorFlow's C++ start-up lines (absl's format), printed while its libraries load, before TF_CPP_MIN_LOG_LEVEL
# applies: a notebook that imports TensorFlow before its setup cell's start() shows them. They are left off the pages.
TF_STARTUP_LINE = re.compile(r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to "
                             r"STDERR|[IWEF]\d{4} [\d:.]+ +\d+ [\w.]+:\d+\] .*)\n?", re.M)


def drop_startup_lines(nb: dict) -> None:
    """Remove TensorFlow's C++ start-up lines from stderr outputs (and outputs left empty by that)."""
    for cell in nb.get("cells", []):
        kept = []
        for out in cell.get("outputs", []):
            if out.get("output_type") == "stream" and out.get("name") == "stderr":
                text = out["text"] if isinstance(out["text"], str) else "".join(out["text"])
                out["text"] = TF_STARTUP_LINE.sub("", text)
                if not out["text"].strip():
                    continue
            kept.append(out)
        if "outputs" in cell:
            cell["outputs"] = kept


def page(nb: dict, record: dict, date: str, in_book: set[str], path: Path, docs: set[str] | None = None) -> dict:
    """The notebook as the book shows it: links rewritten (`rewrite_links`; `docs`, the docs pages in the book), a
    banner under the title, long outputs in a scroll box."""
    import nbformat

    nb = copy.deepcopy(nb)
    settle_widgets(nb)
    drop_startup_lines(nb)
    nb = nbformat.from_dict(nb)
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            cell.source = rewrite_links(cell.source, in_book, docs)
        elif _text_lines(cell) > SCROLL_LINES:
            cell.metadata.setdefault("tags", []).append("scroll-output")
    note = banner(nb, record, date)
    if "colab-badge.svg" not in "".join(c.source for c in nb.cells if c.cell_type == "markdown"):
        note += f"\n\n[![Open In Colab](colab-badge.svg)]({colab_url(path)})"
    at = 1 if nb.cells and nb.cells[0].cell_type == "markdown" else 0
    nb.cells.insert(at, nbformat.v4.new_markdown_cell(note))
    return nb


def _text_lines(cell: dict) -> int:
    lines = 0
    for out in cell.get("outputs", []):
        text = out.get("text") or out.get("data", {}).get("text/plain", "")
        lines += (text if isinstance(text, str) else "".join(text)).count("\n")
    return lines


def readme_section(heading: str) -> str:
    """A `## heading` section of the README, without its heading."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    match = re.search(rf"^## {re.escape(heading)}\n(.*?)(?=^## |\Z)", text, re.M | re.S)
    return match[1].strip() if match else ""


def versions() -> dict[str, str]:
    found = {"Python": platform.python_version()}
    for name in VERSIONS:
        try:
            found[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            pass
    return found


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def landing(run: dict, names: list[str], docs: list[tuple[str, str]] | None = None) -> str:
    """index.md: the README's opening and table of notebooks, the other pages (`docs`: each docs page's document
    name and title, default those of docs/), then this build's date, versions, device and times."""
    if docs is None:
        docs = [(f"{DOCS}/{p.stem}", doc_title(p.read_text(encoding="utf-8"), p.stem)) for p in doc_pages()]
    doc_names = {f"{name.rpartition('/')[2]}.md" for name, _ in docs}
    intro = (ROOT / "README.md").read_text(encoding="utf-8").split("\n## ", 1)[0].split("\n", 1)[1].strip()
    intro = rewrite_links(intro, set(names), doc_names, at="")
    table = rewrite_links(readme_section("The notebooks"), set(names), doc_names, at="")
    mode = "quick mode (`TUTORIAL_QUICK=1`, generated stand-ins where the real data is missing)" if run["quick"] \
        else "a full run (`TUTORIAL_QUICK=0`) on the data the notebooks found"
    rows = []
    for name in names:
        rec = run["notebooks"][name]
        data = ", ".join([describe_source(n, s, short=True) for n, s in sorted((rec.get("sources") or {}).items())]
                         + [md_code(f"helpers.data.{n}") for n in sorted(rec.get("made") or {})]) or "none"
        result = f"**failed** ({len(rec['errors'])} error{'s' * (len(rec['errors']) > 1)})" if rec["errors"] \
            else "checks passed"
        rows.append(f"| [{name[:2]}]({name}) | {rec['seconds']:.0f} s | {data} | {result} |")
    total = sum(run["notebooks"][n]["seconds"] for n in names)
    branch = next((run["notebooks"][n].get("branch") for n in names if run["notebooks"][n].get("branch")), None)
    version_list = " · ".join(f"{md_text(k)} {md_text(v)}" for k, v in run["versions"].items())
    return "\n".join([
        "# Bigger Than Memory", "", intro, "",
        "## The notebooks", "", table, "",
        "## More pages", "",
        *[f"- [{md_text(title)}]({name}.md)" for name, title in docs], "",
        "## This build", "",
        f"Every output in this book comes from one run of each notebook, made on **{md_text(run['date'])}** in "
        f"{mode}, by `python -m tools.book{' --quick' if run['quick'] else ''}"
        f"{' --first-run' if run.get('first_run') else ''}`"
        f"{': each notebook a first run, in a data folder empty at the start' if run.get('first_run') else ''}. "
        f"Device: {md_text(run['cpu'])}, {md_text(run['cores'])} cores; {md_text(branch or 'branch not recorded')}. "
        f"Versions: {version_list}.",
        "",
        "| notebook | run time (kernel start included) | data | result |", "|---|---|---|---|", *rows, "",
        f"All {len(names)} notebooks: {total / 60:.1f} min of execution. Each page starts with a banner saying which "
        f"mode and data its outputs come from. The quick-mode and full-run times in the table of notebooks were "
        f"measured on an idle machine; the times here are this build's.", "",
        "```{toctree}", ":hidden:", ":maxdepth: 1", ":caption: Notebooks", "", *names, "```", "",
        "```{toctree}", ":hidden:", ":maxdepth: 1", ":caption: More pages", "",
        *[name for name, _ in docs], "```", "",
    ])


CONF = """\
# Generated by tools/book.py for one build: edit that file, not this one.
project = "Bigger Than Memory"
author = "the Bigger Than Memory authors"
copyright = "the Bigger Than Memory authors"
extensions = ["myst_nb", "sphinx.ext.githubpages"]
exclude_patterns = []
html_theme = "sphinx_book_theme"
html_title = "Bigger Than Memory"
html_static_path = ["_static"]
html_css_files = ["book.css"]
html_context = {{"default_mode": "light"}}   # the theme logs a console error without one
html_theme_options = {{"repository_url": {repo!r}, "use_repository_button": True, "home_page_in_toc": True,
                      "show_toc_level": 2}}
html_last_updated_fmt = None
nb_execution_mode = "off"          # tools/book.py executed the notebooks already, once, and recorded the run
nb_merge_streams = True
nb_ipywidgets_js = {{}}              # no widget JavaScript from a CDN: tools/book.py turned progress bars into text
myst_enable_extensions = ["dollarmath"]
myst_heading_anchors = 3
mathjax_path = "mathjax/tex-svg.js"   # MathJax 3, copied into the site: the book must load offline; its SVG
                                      # output draws glyphs as paths, so no font file is fetched either
html_favicon = "favicon.svg"       # else browsers ask the server for /favicon.ico
"""


def mathjax_file() -> Path:
    """MathJax 3's single-file TeX-to-SVG build, as the sphinx-mathjax-offline package ships it."""
    return Path(metadata.distribution("sphinx-mathjax-offline").locate_file(
        "sphinx-mathjax-offline/static/mathjax/tex-svg.js"))


def render(run: dict, executed: dict[str, dict], src: Path, out: Path, docs_folder: Path | None = None) -> list[str]:
    """Write the Sphinx source for the run (its notebooks, the pages of docs/ or `docs_folder`) into `src` and build
    the HTML into `out`; return Sphinx's warnings."""
    import nbformat
    from sphinx.cmd.build import build_main

    from helpers.setup.config import REPO_URL

    if src.exists():
        shutil.rmtree(src)
    (src / "_static").mkdir(parents=True)
    names = sorted(executed)
    docs = write_doc_pages(src, set(names), docs_folder)
    doc_names = {f"{name.rpartition('/')[2]}.md" for name, _ in docs}
    for name in names:
        nb = page(executed[name], run["notebooks"][name], run["date"], set(names), NOTEBOOK_DIR / name, doc_names)
        nbformat.write(nb, src / name)
    (src / "index.md").write_text(landing(run, names, docs), encoding="utf-8")
    (src / "conf.py").write_text(CONF.format(repo=REPO_URL), encoding="utf-8")
    shutil.copy(ASSETS / "colab-badge.svg", src / "colab-badge.svg")
    shutil.copy(ASSETS / "favicon.svg", src / "favicon.svg")
    shutil.copy(ASSETS / "book.css", src / "_static" / "book.css")
    (src / "_static" / "mathjax").mkdir()
    shutil.copy(mathjax_file(), src / "_static" / "mathjax" / "tex-svg.js")
    # Sphinx writes into scratch/html (MyST-NB puts its own files beside the output folder, in jupyter_execute/),
    # and the finished site is then copied to `out`.
    html, warnings = src.parent / "html", src.parent / "sphinx-warnings.txt"
    if html.exists():
        shutil.rmtree(html)
    folders.remove(out, SITE_MARKER, SITE_COMMAND, inside_ok=True)    # only a site the book made (`out_problem`)
    status = build_main(["-b", "html", "-q", "-d", str(src.parent / "doctrees"), "-w", str(warnings),
                         str(src), str(html)])
    found = [w for w in warnings.read_text(encoding="utf-8").splitlines() if w.strip()] if warnings.exists() else []
    if status:
        found.append(f"sphinx-build exited with status {status}")
    elif html.is_dir():
        folders.claim(out, SITE_MARKER, f"Made by `{SITE_COMMAND}`, which replaces this folder when it builds into "
                                        f"it again; without this file it would refuse to.\n")
        shutil.copytree(html, out, dirs_exist_ok=True)
    return found


def out_problem(out: Path, scratch: Path = SCRATCH) -> str | None:
    """Why the book may not put its site into `out` (it removes what is there first), or None: `out` must be new,
    empty or a site it made (its marker inside); never the checkout, a folder holding it, one of its source
    folders (`folders.SOURCE_FOLDERS`), the home folder, its own scratch folder nor anything in it."""
    if problem := folders.checkout_problem(out, inside_ok=True):
        return problem
    resolved, scratch = Path(out).resolve(), Path(scratch).resolve()
    if resolved == scratch or resolved in scratch.parents or scratch in resolved.parents:   # the build writes there
        return f"{resolved} overlaps the book's scratch folder {scratch}: choose another folder"
    return folders.replace_problem(out, SITE_MARKER, SITE_COMMAND, inside_ok=True)


# ---------------------------------------------------------------- the command


def _read(path: Path):
    import nbformat

    return nbformat.read(path, as_version=4)


def build(quick: bool, out: Path, only: list[str] | None = None, render_only: bool = False,
          scratch: Path = SCRATCH, first_run: bool = False) -> int:
    """Execute (unless `render_only`) and render; print what happened; return the exit status. With `first_run`,
    the notebooks share a data folder empty at the start (`first_run_data`), as on a learner's first day. One
    build at a time per build folder: a second one is refused, naming the first's process."""
    try:
        scratch.mkdir(parents=True, exist_ok=True)
        with FileLock(scratch / ".build.lock", f"the book's build folder {scratch}"):
            return _build(quick, out, only, render_only, scratch, first_run)
    except (BookError, LockHeldError) as e:
        print(f"error: {e}", file=sys.stderr)
        return 2


def _build(quick: bool, out: Path, only: list[str] | None, render_only: bool, scratch: Path,
           first_run: bool) -> int:
    import nbformat

    executed_dir, record_file = scratch / "executed", scratch / "record.json"
    if problem := out_problem(out, scratch):     # before minutes of executing, not after
        print(f"error: --out {out}: {problem}", file=sys.stderr)
        return 2
    started = time.perf_counter()
    if render_only:
        if not record_file.exists():
            print(f"error: no earlier run in {scratch}: build once without --render-only", file=sys.stderr)
            return 2
        try:
            run = read_record(record_file)
        except RecordError as e:
            print(f"error: {e}", file=sys.stderr)
            return 2
    else:
        paths = discover(only)
        if not paths:
            print(f"error: no notebook matches {only} in {NOTEBOOK_DIR}", file=sys.stderr)
            return 2
        _check_renderer()
        # the first run's data folder is made (or refused) before the last run's notebooks are removed
        with first_run_data(scratch) if first_run else contextlib.nullcontext() as data:
            for folder in (executed_dir, scratch / "kernels"):
                if folder.exists():
                    shutil.rmtree(folder)
                folder.mkdir(parents=True)
            run = {"date": dt.datetime.now().astimezone().strftime("%Y-%m-%d %H:%M %Z"), "quick": quick,
                   "versions": versions(), "cpu": cpu_name(), "cores": os.cpu_count(), "first_run": first_run,
                   "notebooks": {}}
            # Ctrl-C ends the build after the notebook it interrupted: during a notebook nbclient takes it and
            # interrupts the kernel (the cell's error says KeyboardInterrupt); between two, this handler notes it
            interrupted: list[int] = []
            previous = signal.getsignal(signal.SIGINT)
            try:
                for path in paths:
                    signal.signal(signal.SIGINT, lambda number, frame: interrupted.append(number))
                    print(f"executing {path.name} ({'quick' if quick else 'full'}) ...", end=" ", flush=True)
                    nb, record = execute(path, quick, scratch / "kernels" / f"{path.stem}.log", data)
                    run["notebooks"][path.name] = record
                    nbformat.write(nb, executed_dir / path.name)
                    print(f"{record['seconds']:.0f} s" + (f", {len(record['errors'])} error(s)"
                                                          if record["errors"] else ""))
                    if interrupted or any(": KeyboardInterrupt" in error for error in record["errors"]):
                        interrupted.append(signal.SIGINT)
                        break
            finally:
                signal.signal(signal.SIGINT, previous)
        run["execute_seconds"] = round(time.perf_counter() - started, 1)
        atomic_write_text(record_file, json.dumps(run, indent=1))   # a killed build leaves the last whole record
        if interrupted:
            print(f"interrupted: the build stopped after {path.name}; nothing was rendered ({record_file} "
                  f"holds the notebooks that ran: --render-only renders them)", file=sys.stderr)
            return 130
    executed = {name: _read(executed_dir / name) for name in run["notebooks"]}
    rendering = time.perf_counter()
    warnings = render(run, executed, scratch / "src", out)
    if out.is_dir():       # what the pages were made from, for the browser test and for readers
        (out / "build-record.json").write_text(json.dumps(run, indent=1), encoding="utf-8")
    print(f"rendered {len(executed)} pages into {out} in {time.perf_counter() - rendering:.0f} s; the build took "
          f"{(time.perf_counter() - started) / 60:.1f} min" + ("" if render_only else
                                                               f" (executing {run['execute_seconds'] / 60:.1f} min)"))
    for w in warnings:
        print(f"warning: {w}", file=sys.stderr)
    failed = [f"{name}: {e}" for name, rec in run["notebooks"].items() for e in rec["errors"]]
    for f in failed:
        print(f"error: {f}", file=sys.stderr)
    if failed or warnings:
        print(f"the book has {len(failed)} failed cell(s) and {len(warnings)} warning(s): see above", file=sys.stderr)
        return 1
    print(f"open {out / 'index.html'} (or: python -m http.server -d {out})")
    return 0


def _check_renderer() -> None:
    """Fail before executing anything when the [book] extra is missing."""
    missing = []
    for name in ("sphinx", "myst-nb", "sphinx-book-theme", "sphinx-mathjax-offline"):
        try:
            metadata.version(name)
        except metadata.PackageNotFoundError:
            missing.append(name)
    if missing:
        raise SystemExit(f"error: the book needs {', '.join(missing)}: pip install -e \".[book]\"")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tools.book", description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="quick mode: small sizes, stand-ins when offline")
    parser.add_argument("--out", type=Path, default=ROOT / "site", help="where the HTML goes (default: site/)")
    parser.add_argument("--only", help="comma-separated notebook numbers or names, e.g. 01,04")
    parser.add_argument("--render-only", action="store_true", help="render the last run again without executing")
    parser.add_argument("--first-run", action="store_true",
                        help="each notebook a first run: a data folder empty at the start but for the datasets' "
                             "files, removed afterwards (.ci/run's build, whose times the README gives)")
    args = parser.parse_args(argv)
    only = [s.strip() for s in args.only.split(",")] if args.only else None
    if args.first_run and args.render_only:
        parser.error("--first-run executes the notebooks; --render-only does not")
    return build(args.quick, args.out.expanduser().resolve(), only, args.render_only, first_run=args.first_run)


if __name__ == "__main__":
    sys.exit(main())
