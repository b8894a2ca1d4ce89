"""The rendered book (issue 20): how tools/book.py makes its pages, and every page opened in headless Chromium.

The first tests check the page-making on small inputs and run with the default `pytest`. The browser tests are
marked `book`, so the default `pytest` leaves them out. `.ci/run` builds the book in quick mode first
(`python -m tools.book --quick --first-run`) and then runs `python -m pytest -m book tests/test_book.py tests/test_workshop.py`.
The site checked is `$BOOK_SITE`, else `site/`; when neither holds a book, the test builds one in quick mode
(several minutes). It needs Debian's `chromium` and `chromium-driver` packages and the `[book]` extra (Selenium);
without Chromium it is skipped, saying which packages to install.

Each page is served over HTTP from 127.0.0.1, as GitHub Pages would serve it, with every other host unreachable
(so a resource fetched from the internet fails here on any machine). Asserted: no console error, every image
loaded (natural width > 0), every link inside the site reaching an existing page, file and anchor (a notebook's
link to `../docs/reading-figures.md` among them), a banner and a Colab badge on each notebook's page, the build's
record on the landing page, and a page for each of docs/*.md. A screenshot of each page is
saved under the test's temporary folder (its path is printed).
"""
from __future__ import annotations

import functools
import html.parser
import http.server
import json
import os
import re
import shutil
import threading
from pathlib import Path
from urllib.parse import unquote, urldefrag, urlparse

import pytest

from tools import book, build_record, folders, workshop

ROOT = Path(__file__).resolve().parent.parent
CHROMIUM = next((p for p in map(shutil.which, ("chromium", "chromium-browser")) if p), None)
CHROMEDRIVER = shutil.which("chromedriver")
MISSING = ("headless Chromium is missing: install Debian's packages `chromium` and `chromium-driver` "
           "(apt-get install -y chromium chromium-driver; .ci/run does)")


# ---------------------------------------------------------------- making the pages (default run)


def _nb(cells, metadata=None):
    import nbformat

    return nbformat.from_dict({"cells": cells, "metadata": metadata or {}, "nbformat": 4, "nbformat_minor": 5})


def _md(text):
    return {"cell_type": "markdown", "metadata": {}, "source": text}


def _code(text, outputs=()):
    return {"cell_type": "code", "metadata": {}, "source": text, "outputs": list(outputs), "execution_count": 1}


def _stream(text):
    return {"output_type": "stream", "name": "stdout", "text": text}


def test_the_book_takes_every_numbered_notebook():
    found = book.discover()
    assert [p.name for p in found] == sorted(p.name for p in (ROOT / "notebooks").glob("[0-9][0-9]_*.ipynb"))
    assert [p.name[:2] for p in book.discover(["01", "04_tfdata_mnist"])] == ["01", "04"]


def test_the_probe_reports_what_the_kernel_used(monkeypatch, capsys):
    """The cell run after a notebook's last one: which datasets came from where, quick mode, data made by helpers."""
    import sys
    import types

    from helpers.data import datasets

    made = types.ModuleType("helpers.data.toys", "Toy images, drawn here.\n\nMore words.")
    monkeypatch.setitem(sys.modules, "helpers.data.toys", made)      # data a notebook's helper module made
    monkeypatch.setitem(datasets._sources, "mnist", "stand-in (generated)")
    monkeypatch.setenv("TUTORIAL_QUICK", "1")
    exec(compile(book.PROBE, "probe", "exec"), {})
    line = capsys.readouterr().out.strip()
    assert line.startswith("BOOK-PROBE ")
    report = json.loads(line.removeprefix("BOOK-PROBE "))
    assert report["sources"]["mnist"] == "stand-in (generated)" and report["quick"] is True
    assert report["made"]["toys"] == "Toy images, drawn here"


def test_links_between_notebooks_point_at_pages_or_github():
    text = ("[next](02_b.ipynb) [later](03_c.ipynb#setup) [table](notebooks/02_b.ipynb) "
            "[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](https://colab.example/x)")
    out = book.rewrite_links(text, {"02_b.ipynb"})
    assert "[next](02_b.ipynb)" in out and "[table](02_b.ipynb)" in out           # MyST turns these into pages
    assert "[later](https://github.com/" in out and "notebooks/03_c.ipynb#setup)" in out   # not in this book
    assert "](colab-badge.svg)" in out and "assets/colab-badge.svg" not in out      # served by the site itself


def test_the_banner_says_which_mode_and_data():
    quick = book.banner(_nb([]), {"seconds": 23.4, "quick": True, "errors": [], "branch": "the CPU branch",
                                  "sources": {"mnist": "stand-in (generated)"}}, "2026-01-02 10:00 UTC")
    assert "quick run on generated stand-in data" in quick and "TUTORIAL_QUICK=1" in quick
    assert "MNIST: a generated stand-in, not the real MNIST" in quick and ":class: warning book-banner" in quick
    assert "Executed 2026-01-02 10:00 UTC in 23 s, the CPU branch" in quick
    full = book.banner(_nb([]), {"seconds": 300, "quick": False, "errors": [],
                                 "sources": {"cifar10": "file /x/data/cifar-10-batches-py"}}, "d")
    assert "full run on the real data" in full and "from `data/cifar-10-batches-py`" in full and ":class: note" in full
    failed = book.banner(_nb([]), {"seconds": 1, "quick": True, "errors": ["cell 9: AssertionError: no"]}, "d")
    assert "This run failed" in failed and ":class: danger" in failed and "AssertionError" in failed


def test_data_a_notebook_makes_is_named_from_its_module():
    text = book.banner(_nb([]), {"seconds": 9, "quick": True, "errors": [], "sources": {},
                                 "made": {"photos": "A folder of real photographs to practise on"}}, "d")
    assert "Data: `helpers.data.photos`, a folder of real photographs to practise on." in text


def test_tensorflows_start_up_lines_are_left_off_the_page():
    startup = ("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n"
               "I0000 00:00:1796179092.563947    5958 port.cc:153] oneDNN custom operations are on.\n")
    nb = _nb([_code("import x", [dict(_stream(startup), name="stderr"), dict(_stream("UserWarning: kept\n"),
                                                                              name="stderr"), _stream("hello\n")])])
    book.drop_startup_lines(nb)
    assert [o["text"] for o in nb["cells"][0]["outputs"]] == ["UserWarning: kept\n", "hello\n"]


def test_the_data_is_read_from_the_stand_in_announcement_when_the_probe_saw_nothing():
    nb = _nb([_code("load_mnist()", [_stream("Quick mode: MNIST is not in /d and could not be downloaded, so this "
                                             "run uses a generated stand-in (12,000 train / 2,000 test images)\n")])])
    assert book.data_sources(nb, {}) == {"mnist": "stand-in (generated)"}


def test_a_progress_bar_becomes_its_last_state():
    state = {"hb": {"model_name": "HBoxModel", "state": {"children": ["IPY_MODEL_a", "IPY_MODEL_b", "IPY_MODEL_c"]}},
             "a": {"model_name": "HTMLModel", "state": {"value": "train:\u2007100%"}},
             "b": {"model_name": "FloatProgressModel", "state": {"value": 8.0, "max": 8.0}},
             "c": {"model_name": "HTMLModel", "state": {"value": "\u20078/8\u2007[00:01&lt;00:00]"}}}
    widget = {"output_type": "display_data", "metadata": {},
              "data": {"text/plain": "train:   0%|", book.WIDGET_VIEW: {"model_id": "hb", "version_major": 2}}}
    nb = _nb([_code("write()", [widget])], {"widgets": {book.WIDGET_STATE: {"state": state}}})
    book.settle_widgets(nb)
    assert nb["cells"][0]["outputs"] == [_stream("train: 100%|██████████| 8/8 [00:01<00:00]\n")]
    assert "widgets" not in nb["metadata"]


def test_a_page_has_its_banner_under_the_title_and_long_outputs_scroll(tmp_path):
    nb = _nb([_md("# 09 · Title\n\n[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)](u)"),
              _code("print(1)", [_stream("line\n" * 50)]), _code("print(2)", [_stream("short\n")])])
    record = {"seconds": 5, "quick": True, "errors": [], "sources": {}}
    made = book.page(nb, record, "d", {"09_title.ipynb"}, tmp_path / "09_title.ipynb")
    assert [c.cell_type for c in made.cells] == ["markdown", "markdown", "code", "code"]
    assert "book-banner" in made.cells[1].source and "none of the series' datasets" in made.cells[1].source
    assert made.cells[2].metadata["tags"] == ["scroll-output"] and "tags" not in made.cells[3].metadata
    bare = book.page(_nb([_md("# 09 · Title")]), record, "d", set(), tmp_path / "09_title.ipynb")
    assert "colab-badge.svg" in bare.cells[1].source, "a notebook without a badge gets one in its banner"


def test_the_stylesheet_wraps_long_output_lines():
    """Outputs wrap at the column's edge instead of being cut (issue 27, item 4); the browser test below checks
    that the rule wins over the theme's in a real page."""
    css = (ROOT / "tools" / "book_assets" / "book.css").read_text(encoding="utf-8")
    css = re.sub(r"/\*.*?\*/", "", css, flags=re.S)
    rules = {selector.strip(): body for selector, body in re.findall(r"([^{}]+)\{([^}]*)\}", css)}
    wrapping = [s for s, body in rules.items() if "cell_output" in s and s.endswith("pre")
                and re.search(r"white-space:\s*pre-wrap", body)]
    assert wrapping, f"no rule in book.css gives output <pre> blocks white-space: pre-wrap: {rules}"


def test_the_landing_page_holds_the_readme_table_and_the_build():
    names = [p.name for p in book.discover()]
    run = {"date": "2026-01-02 10:00 UTC", "quick": True, "cpu": "a CPU", "cores": 2,
           "versions": {"Python": "3.11.7", "tensorflow": "2.21.0"},
           "notebooks": {n: {"seconds": 10 + i, "errors": [], "sources": {"mnist": "stand-in (generated)"},
                             "branch": "the CPU branch"} for i, n in enumerate(names)}}
    text = book.landing(run, names)
    assert "## The notebooks" in text and "| # | Notebook |" in text and "](notebooks/" not in text
    assert f"]({names[0]})" in text and "2026-01-02 10:00 UTC" in text and "tensorflow 2.21.0" in text
    assert all(f"| {10 + i} s |" in text for i in range(len(names)))
    assert "](docs/workshop.md)" in text          # the instructor's page is a docs page


def _docs(folder, untitled=True):
    """A small docs/ folder: pages linking each other, notebooks, the README, a repository file and nothing; and a
    page without a title (Sphinx warns of it in a table of contents, as it should)."""
    folder.mkdir()
    (folder / "reading-figures.md").write_text(
        "# How to read the figures\n\n## Rounds\n\n[the keys](benchmarks.md#the-keys) [04](../notebooks/04_x.ipynb) "
        "[99](../notebooks/99_y.ipynb) [the run](../helpers/measure/last_full_run.txt) [home](../README.md) "
        "[here](#rounds) [away](https://example.org/a.md) [gone](missing.md)\n")
    (folder / "benchmarks.md").write_text("# Benchmarks\n\n## The keys\n\n[figures](reading-figures.md#rounds)\n")
    if untitled:
        (folder / "zz-notes.md").write_text("no title here\n")
    return folder


def test_the_docs_pages_are_pages_of_the_book_with_their_links_made_for_the_site(tmp_path):
    """docs/*.md become pages under docs/ in the site, after the notebooks (issue 42): a link to another docs page,
    to a notebook in the book, to the README leads to its page; to a notebook not in this build or another file of
    the repository, to GitHub; a link to nothing is left as written, so Sphinx warns of it."""
    from helpers.setup.config import REPO_BRANCH, REPO_URL

    src = tmp_path / "src"
    made = book.write_doc_pages(src, {"04_x.ipynb"}, _docs(tmp_path / "docs"))
    assert made == [("docs/reading-figures", "How to read the figures"), ("docs/benchmarks", "Benchmarks"),
                    ("docs/zz-notes", "zz-notes")]
    text = (src / "docs" / "reading-figures.md").read_text()
    assert "[the keys](benchmarks.md#the-keys)" in text and "[04](../04_x.ipynb)" in text
    assert f"[99]({REPO_URL}/blob/{REPO_BRANCH}/notebooks/99_y.ipynb)" in text
    assert f"[the run]({REPO_URL}/blob/{REPO_BRANCH}/helpers/measure/last_full_run.txt)" in text
    assert "[home](../index.md)" in text and "[here](#rounds)" in text and "(https://example.org/a.md)" in text
    assert "[gone](missing.md)" in text
    assert "[figures](reading-figures.md#rounds)" in (src / "docs" / "benchmarks.md").read_text()
    # a notebook, at the site's top, links to the docs page as the repository has it: ../docs/reading-figures.md
    nb = _nb([_md("# 04 · X\n\nSee [how to read these figures](../docs/reading-figures.md#rounds).")])
    shown = book.page(nb, {"seconds": 1, "quick": True, "errors": []}, "d", {"04_x.ipynb"},
                      tmp_path / "04_x.ipynb", {"reading-figures.md", "benchmarks.md"})
    assert "[how to read these figures](docs/reading-figures.md#rounds)" in shown.cells[0].source
    # the README's links, on the landing page
    assert book.rewrite_links("[b](docs/benchmarks.md) [n](notebooks/04_x.ipynb)", {"04_x.ipynb"},
                              {"benchmarks.md"}, at="") == "[b](docs/benchmarks.md) [n](04_x.ipynb)"


def test_the_landing_page_lists_the_docs_pages():
    names = [p.name for p in book.discover()]
    run = {"date": "d", "quick": True, "cpu": "a CPU", "cores": 2, "versions": {},
           "notebooks": {n: {"seconds": 10, "errors": [], "sources": {}} for n in names}}
    text = book.landing(run, names, [("docs/reading-figures", "How to read the figures"), ("docs/book", "The book")])
    assert "- [How to read the figures](docs/reading-figures.md)\n- [The book](docs/book.md)" in text
    toctrees = re.findall(r"```\{toctree\}\n(.*?)```", text, re.S)
    assert [line for line in toctrees[-1].splitlines() if line and not line.startswith(":")] == [
        "docs/reading-figures", "docs/book"]
    assert set(names) <= set(toctrees[0].splitlines())
    pages = [f"docs/{p.stem}" for p in book.doc_pages()]       # by default, every page of the repository's docs/
    assert pages and all(f"]({name}.md)" in book.landing(run, names) for name in pages)


@pytest.mark.book
def test_a_notebooks_link_to_a_docs_page_reaches_it_in_the_rendered_site(tmp_path):
    """Rendered by Sphinx on small inputs: the notebook's `../docs/reading-figures.md#rounds` reaches that page and
    its anchor, the docs pages' links reach the notebook and each other, and the one link to nothing is the only
    warning."""
    pytest.importorskip("myst_nb", reason='the book\'s renderer is missing: pip install -e ".[book]"')
    nb = _nb([_md("# 04 · X\n\nSee [how to read these figures](../docs/reading-figures.md#rounds)."),
              _code("print(1)", [_stream("1\n")])],
             {"kernelspec": {"name": "python3", "display_name": "Python 3", "language": "python"}})
    run = {"date": "d", "quick": True, "cpu": "a CPU", "cores": 2, "versions": {},
           "notebooks": {"04_x.ipynb": {"seconds": 1, "errors": [], "sources": {}}}}
    site = tmp_path / "site"
    warnings = book.render(run, {"04_x.ipynb": nb}, tmp_path / "scratch" / "src", site, _docs(tmp_path / "docs", untitled=False))
    assert len(warnings) == 1 and "missing.md" in warnings[0], warnings

    def links(page: str) -> dict[str, Path]:
        """Each link's text → the file and anchor it reaches, from `page` of the site."""
        found = re.findall(r'href="([^"#]*)(#[^"]*)?"[^>]*>(?:<[^>]+>)*([^<]+)<', (site / page).read_text())
        return {text.strip(): ((site / page).parent / path if path else site / page, anchor.lstrip("#"))
                for path, anchor, text in found}

    html, anchor = links("04_x.html")["how to read these figures"]
    assert html.resolve() == (site / "docs" / "reading-figures.html").resolve() and anchor == "rounds"
    assert f'id="{anchor}"' in html.read_text()
    from_docs = links("docs/reading-figures.html")
    assert from_docs["04"][0].resolve() == (site / "04_x.html").resolve()
    assert from_docs["the keys"][0].resolve() == (site / "docs" / "benchmarks.html").resolve()
    index = links("index.html")
    assert index["How to read the figures"][0].resolve() == (site / "docs" / "reading-figures.html").resolve()


def test_a_first_run_has_a_data_folder_empty_but_for_the_datasets_files_and_removed_after(tmp_path, monkeypatch):
    data = tmp_path / "data"
    (data / "cifar-10-batches-py").mkdir(parents=True)
    (data / "cifar-10-batches-py" / "data_batch_1").write_bytes(b"cifar")
    (data / "mnist.npz").write_bytes(b"mnist")
    (data / "photo-sized").mkdir()   # what an earlier run wrote: a first run must not find it
    (data / "photo-sized" / "train-00000-of-00008.tfrecord").write_bytes(b"old")
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(data))
    scratch = tmp_path / "scratch"
    with book.first_run_data(scratch) as folder:
        assert folder.parent == scratch and folder != data
        assert sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*")) == [
            "cifar-10-batches-py", "cifar-10-batches-py/data_batch_1", "mnist.npz"]
        assert (folder / "mnist.npz").read_bytes() == b"mnist"
        assert book.kernel_env(True, folder)["TUTORIAL_DATA_DIR"] == str(folder)
    assert not folder.exists()
    with pytest.raises(RuntimeError), book.first_run_data(scratch) as folder:   # removed on the way out of an error
        raise RuntimeError("a notebook's kernel died")
    assert not folder.exists() and list(scratch.iterdir()) == []
    assert sorted(p.name for p in data.iterdir()) == ["cifar-10-batches-py", "mnist.npz", "photo-sized"]


def test_a_first_run_copies_only_the_datasets_files_as_plain_files(tmp_path, monkeypatch):
    data, elsewhere = tmp_path / "data", tmp_path / "elsewhere"
    (data / "cifar-10-batches-py").mkdir(parents=True)
    elsewhere.mkdir()
    (elsewhere / "mnist.npz").write_bytes(b"mnist")
    (data / "mnist.npz").symlink_to("../elsewhere/mnist.npz")   # relative: it would dangle if copied as a link
    (data / "cifar-10-batches-py" / "test_batch").write_bytes(b"test")
    (data / "cifar-10-batches-py" / "test_batch").chmod(0o444)   # a protected dataset
    (data / "cifar-10-batches-py" / "cifar-10-python.tar.gz").write_bytes(b"not read by the loader")
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(data))
    with book.first_run_data(tmp_path / "scratch") as folder:
        copies = sorted(p.relative_to(folder).as_posix() for p in folder.rglob("*") if p.is_file())
        assert copies == ["cifar-10-batches-py/test_batch", "mnist.npz"]
        assert not (folder / "mnist.npz").is_symlink() and (folder / "mnist.npz").read_bytes() == b"mnist"
        assert (folder / "cifar-10-batches-py" / "test_batch").stat().st_mode & 0o200   # its own, writable
    assert not folder.exists()


def test_a_first_run_refuses_a_dataset_file_it_cannot_read_before_removing_the_last_run(tmp_path, monkeypatch):
    data = tmp_path / "data"
    data.mkdir()
    os.mkfifo(data / "mnist.npz")   # opening it would block
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(data))
    scratch = tmp_path / "scratch"
    (scratch / "executed").mkdir(parents=True)
    (scratch / "executed" / "01_generators_and_iterables.ipynb").write_text("{}")   # the last run's
    (scratch / "first-run-data" / "photo-sized").mkdir(parents=True)   # left by a killed build
    monkeypatch.setattr(book, "_check_renderer", lambda: None)   # refused before rendering: no [book] extra needed
    with pytest.raises(book.BookError, match="mnist.npz is a FIFO"):
        with book.first_run_data(scratch):
            pass
    assert not (scratch / "first-run-data").exists()
    assert book.build(True, tmp_path / "site", only=["99"], scratch=scratch, first_run=True) == 2
    assert (scratch / "executed" / "01_generators_and_iterables.ipynb").exists()


def test_a_first_run_leaves_a_symlink_or_file_where_its_folder_goes(tmp_path, monkeypatch):
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(tmp_path / "data"))
    precious = tmp_path / "precious"
    precious.mkdir()
    (precious / "keep").write_text("mine")
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    (scratch / "first-run-data").symlink_to(precious)
    with pytest.raises(book.BookError, match="first-run-data"):
        with book.first_run_data(scratch):
            pass
    assert (precious / "keep").read_text() == "mine" and (scratch / "first-run-data").is_symlink()


def test_a_relative_data_folder_is_read_from_the_notebooks_folder_and_a_missing_one_is_not_made(tmp_path,
                                                                                              monkeypatch):
    monkeypatch.setenv("TUTORIAL_DATA_DIR", "../data")
    assert book.data_source() == book.NOTEBOOK_DIR / "../data"   # where the kernels, run in notebooks/, look
    monkeypatch.setenv("TUTORIAL_DATA_DIR", str(tmp_path / "missing"))
    with book.first_run_data(tmp_path / "scratch") as folder:
        assert list(folder.iterdir()) == []
    assert not (tmp_path / "missing").exists()


def test_a_second_build_in_the_same_folder_is_refused(tmp_path, capsys):
    from helpers.storage.files import FileLock

    scratch = tmp_path / "scratch"
    scratch.mkdir()
    with FileLock(scratch / ".build.lock", "a build"):
        assert book.build(True, tmp_path / "site", only=["99"], scratch=scratch, first_run=True) == 2
    assert "in use by another process" in capsys.readouterr().err


def test_ctrl_c_ends_the_build_after_the_notebook_it_interrupted(tmp_path, monkeypatch, capsys):
    import signal

    import nbformat

    ran = []

    def execute(path, quick, log, data=None):   # a notebook whose run is interrupted by Ctrl-C
        ran.append(path.name)
        os.kill(os.getpid(), signal.SIGINT)
        return nbformat.v4.new_notebook(), {"seconds": 1.0, "quick": True, "cells": [], "errors": []}

    monkeypatch.setattr(book, "execute", execute)
    monkeypatch.setattr(book, "_check_renderer", lambda: None)   # stopped before rendering: no [book] extra needed
    scratch, before = tmp_path / "scratch", signal.getsignal(signal.SIGINT)
    assert book.build(True, tmp_path / "site", only=["01", "02"], scratch=scratch) == 130
    assert ran == ["01_generators_and_iterables.ipynb"] and not (tmp_path / "site").exists()

    def execute(path, quick, log, data=None):   # Ctrl-C taken by nbclient: the kernel's cell was interrupted
        ran.append(path.name)
        return nbformat.v4.new_notebook(), {"seconds": 1.0, "quick": True, "cells": [],
                                            "errors": ["cell 5: KeyboardInterrupt: "]}

    monkeypatch.setattr(book, "execute", execute)
    ran.clear()
    assert book.build(True, tmp_path / "site", only=["01", "02"], scratch=scratch) == 130
    assert ran == ["01_generators_and_iterables.ipynb"] and not (tmp_path / "site").exists()
    record = json.loads((scratch / "record.json").read_text())
    assert list(record["notebooks"]) == ran   # the record matches the notebooks that ran
    assert "interrupted" in capsys.readouterr().err
    assert signal.getsignal(signal.SIGINT) is before   # the build's handler is gone


def test_the_landing_page_says_when_each_notebook_was_a_first_run():
    names = [p.name for p in book.discover()]
    run = {"date": "2026-01-02 10:00 UTC", "quick": True, "cpu": "a CPU", "cores": 2, "versions": {},
           "notebooks": {n: {"seconds": 10, "errors": [], "sources": {}} for n in names}}
    assert "by `python -m tools.book --quick`. Device" in book.landing(run, names)
    text = book.landing({**run, "first_run": True}, names)
    assert "`python -m tools.book --quick --first-run`: each notebook a first run, in a data folder empty" in text


# ---------------------------------------------------------------- `--out`: the book replaces only a site it made


def test_the_book_refuses_the_checkout_its_parents_home_and_dot(monkeypatch):
    monkeypatch.chdir(ROOT)
    for out, why in ((Path("."), "is this checkout"), (ROOT.parent, "holds this checkout"),
                     (Path("/"), "holds this checkout"), (Path.home(), "")):
        problem = book.out_problem(out.resolve())
        assert problem and why in problem, (out, problem)


def test_the_book_refuses_a_foreign_folder_and_its_own_scratch(tmp_path):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text("mine")
    problem = book.out_problem(docs)
    assert str(docs) in problem and "not empty" in problem and book.SITE_MARKER in problem
    assert book.out_problem(ROOT / "helpers") is not None          # inside the checkout, not the book's
    scratch = tmp_path / "scratch"
    assert "scratch" in book.out_problem(scratch / "src", scratch)
    assert book.out_problem(tmp_path / "new") is None
    folders.claim(tmp_path / "site", book.SITE_MARKER, "made by the book")
    (tmp_path / "site" / "index.html").write_text("old site")
    assert book.out_problem(tmp_path / "site") is None


def test_the_book_refuses_a_foreign_out_before_executing_anything(tmp_path, monkeypatch, capsys):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text("mine")

    def execute(*args, **kwargs):
        raise AssertionError("a notebook was executed before --out was checked")

    monkeypatch.setattr(book, "execute", execute)
    monkeypatch.setattr(book, "_check_renderer", lambda: None)
    assert book.build(True, docs, only=["01"], scratch=tmp_path / "scratch") == 2
    assert str(docs) in capsys.readouterr().err
    assert (docs / "notes.md").read_text() == "mine"


@pytest.mark.parametrize("where", ["build/book/record.json", "build/book/sphinx-warnings.txt", "build/book/new",
                                   "build/book", "build", "notebooks/site", "helpers/new", ".git/site", "tests/site",
                                   "tools/site", "benchmarks/site", "notebooks"])
def test_the_book_refuses_its_scratch_and_the_checkouts_own_folders_even_when_missing(where):
    out = ROOT / where
    problem = book.out_problem(out)
    assert problem and str(out.resolve()) in problem, (where, problem)
    assert ("scratch" in problem) == where.startswith("build"), problem


def test_the_book_still_accepts_a_new_folder_in_the_checkout_and_in_build():
    assert book.out_problem(ROOT / "site-new-for-test") is None
    assert book.out_problem(ROOT / "build" / "site-new-for-test") is None


def test_the_book_refuses_a_link_into_a_source_folder(tmp_path):
    link = tmp_path / "site"
    link.symlink_to(ROOT / "notebooks", target_is_directory=True)
    assert "notebooks/" in book.out_problem(link)


def _record(**hostile) -> dict:
    rec = {"seconds": 3.0, "quick": True, "cells": [[1, 0.5]], "errors": [], "sources": {}, "made": {},
           "branch": "the CPU branch"}
    run = {"date": "2026-01-01 10:00 UTC", "quick": True, "versions": {"Python": "3.11"}, "cpu": "x86",
           "cores": 2, "notebooks": {"01_generators_and_iterables.ipynb": rec}, "execute_seconds": 3.0}
    for key, value in hostile.items():
        (rec if key in rec else run)[key] = value
    return run


@pytest.fixture
def fake_sphinx(tmp_path, monkeypatch):
    """`render` without Sphinx: a build that writes one page, so that what `render` removes can be seen."""
    import sys
    import types

    def build_main(argv):
        Path(argv[-1]).mkdir(parents=True)
        (Path(argv[-1]) / "index.html").write_text("new site")
        return 0

    module = types.ModuleType("sphinx.cmd.build")
    module.build_main = build_main
    for name in ("sphinx", "sphinx.cmd"):
        monkeypatch.setitem(sys.modules, name, types.ModuleType(name))
    monkeypatch.setitem(sys.modules, "sphinx.cmd.build", module)
    mathjax = tmp_path / "tex-svg.js"
    mathjax.write_text("")
    monkeypatch.setattr(book, "mathjax_file", lambda: mathjax)


def test_render_replaces_only_a_site_the_book_made(tmp_path, fake_sphinx):
    docs = tmp_path / "docs"
    docs.mkdir()
    (docs / "notes.md").write_text("mine")
    with pytest.raises(ValueError, match="not empty"):
        book.render(_record(), {}, tmp_path / "scratch" / "src", docs)
    assert (docs / "notes.md").read_text() == "mine"
    site = tmp_path / "site"
    for _ in range(2):           # a new folder, then the site it made: replaced, marked again
        assert book.render(_record(), {}, tmp_path / "scratch" / "src", site) == []
        assert (site / "index.html").read_text() == "new site" and folders.has_marker(site, book.SITE_MARKER)


# ---------------------------------------------------------------- a hostile build record


@pytest.mark.parametrize("text", ["[1, 2]", "{not json", '{"date": 5}', "\xff\xfe"])
def test_a_broken_record_is_an_error_naming_the_file(tmp_path, capsys, text):
    scratch = tmp_path / "scratch"
    scratch.mkdir()
    record = scratch / "record.json"
    record.write_bytes(text.encode("latin-1"))
    with pytest.raises(build_record.RecordError, match="record.json"):
        build_record.read_record(record)
    assert book.build(True, tmp_path / "site", render_only=True, scratch=scratch) == 2
    assert str(record) in capsys.readouterr().err
    assert workshop.main(["plan", "--record", str(record)]) == 2
    assert str(record) in capsys.readouterr().err


def test_a_record_with_wrong_types_is_refused_before_rendering():
    assert build_record.record_problem(_record()) is None
    for bad in ({"seconds": "3"}, {"cells": [["1", 0.5]]}, {"errors": [1]}, {"versions": ["tensorflow"]},
                {"cores": "2"}, {"sources": {"mnist": 1}}, {"notebooks": []}, {"first_run": "yes"}):
        assert build_record.record_problem(_record(**bad)), bad


class _Tags(html.parser.HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.text = set(), []

    def handle_starttag(self, tag, attrs):
        self.tags.add(tag)
        self.tags |= {f"{tag}[{name}={value}]" for name, value in attrs if name == "href"}

    def handle_data(self, data):
        self.text.append(data)


HOSTILE = "<script>alert(1)</script> <img src=x onerror=alert(2)> *em* `code` [link](javascript:alert(3)) " \
          "{raw}`html` $x$ \\*"


def _rendered(markdown: str) -> _Tags:
    """Markdown as MyST's parser (markdown-it, raw HTML on, as in CommonMark) turns it into HTML."""
    from markdown_it import MarkdownIt

    parsed = _Tags()
    parsed.feed(MarkdownIt("commonmark").render(markdown))
    return parsed


def test_the_landing_page_and_banners_show_a_records_values_as_text(tmp_path):
    run = _record(cpu=HOSTILE, date=HOSTILE, versions={HOSTILE: HOSTILE}, branch=HOSTILE,
                  errors=[HOSTILE + " ``` `"], sources={HOSTILE: "file /x/" + HOSTILE}, made={"toys": HOSTILE})
    name = "01_generators_and_iterables.ipynb"
    for markdown in (book.landing(run, [name]).split("## This build", 1)[1],     # after the README's own text
                     book.banner({"cells": []}, run["notebooks"][name], run["date"]).split("\n", 3)[3]):
        page = _rendered(markdown)
        assert not {"script", "img", "em"} & page.tags
        assert not [t for t in page.tags if "javascript" in t]
        text = " ".join("".join(page.text).split())
        assert text.count(HOSTILE) >= 2, text          # shown as it is, no markup taken from it


@pytest.mark.parametrize("hostile", ["[" * 100_000 + "]" * 100_000, '{"cores": ' + "1" * 5000 + "}"],
                         ids=["nested", "5000 digits"])
def test_a_record_json_cannot_read_is_named(tmp_path, hostile):
    record = tmp_path / "record.json"
    record.write_text(hostile)
    with pytest.raises(build_record.RecordError, match="record.json is not a build record"):
        build_record.read_record(record)


@pytest.mark.parametrize("bad", [{"seconds": -1e11}, {"cores": -4}, {"cores": 0}, {"cores": True},
                                 {"cells": [[1, -0.5]]}, {"cells": [[-1, 0.5]]}, {"seconds": float("nan")},
                                 {"seconds": float("inf")}])
def test_a_record_with_negative_times_or_cores_is_refused(bad, tmp_path):
    assert build_record.record_problem(_record(**bad)), bad
    record = tmp_path / "record.json"
    record.write_text(json.dumps(_record(**bad)))
    with pytest.raises(build_record.RecordError, match="record.json"):
        build_record.read_record(record)


def test_a_record_as_a_build_writes_it_is_accepted():
    assert build_record.record_problem(_record(cores=None, cells=[[0, None], [3, 0.0]], seconds=0)) is None


# ---------------------------------------------------------------- the site in a browser (marked `book`)


@pytest.fixture(scope="session")
def site(tmp_path_factory) -> Path:
    chosen = Path(os.environ.get("BOOK_SITE", ROOT / "site"))
    if (chosen / "index.html").exists() and (chosen / "build-record.json").exists():
        return chosen
    out = tmp_path_factory.mktemp("site")
    assert book.main(["--quick", "--out", str(out)]) == 0, "the book did not build: see its output above"
    return out


@pytest.fixture(scope="session")
def served(site):
    handler = functools.partial(Quiet, directory=str(site))
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}/"
    server.shutdown()
    server.server_close()


class Quiet(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *args):
        pass


@pytest.fixture(scope="session")
def browser():
    if CHROMIUM is None or CHROMEDRIVER is None:
        pytest.skip(MISSING)
    webdriver = pytest.importorskip("selenium.webdriver", reason='Selenium is missing: pip install -e ".[book]"')
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = CHROMIUM
    for arg in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--window-size=1280,1000",
                "--host-resolver-rules=MAP * ~NOTFOUND, EXCLUDE 127.0.0.1"):
        options.add_argument(arg)
    options.set_capability("goog:loggingPrefs", {"browser": "ALL"})
    driver = webdriver.Chrome(service=Service(CHROMEDRIVER), options=options)
    driver.set_page_load_timeout(60)
    yield driver
    driver.quit()


def pages(site: Path) -> list[str]:
    """The site's pages: its HTML files outside Sphinx's underscore folders (theme templates live there)."""
    return sorted(str(p.relative_to(site)) for p in site.rglob("*.html")
                  if not any(part.startswith("_") for part in p.relative_to(site).parts))


WAIT_FOR_IMAGES = """
const done = arguments[arguments.length - 1];
const started = Date.now();
(function wait() {
  const pending = [...document.images].filter(i => !i.complete);
  if ((pending.length === 0 && document.readyState === "complete") || Date.now() - started > 15000) {
    const mathjax = window.MathJax && window.MathJax.startup && window.MathJax.startup.promise;
    if (mathjax) mathjax.then(() => done(true), () => done(false));   // formulas typeset first
    else if (document.querySelector("span.math, div.math") && Date.now() - started < 15000) setTimeout(wait, 100);
    else done(true);
  } else setTimeout(wait, 100);
})();
"""
COLLECT = """
return {
  title: document.title,
  images: [...document.images].map(i => [i.currentSrc || i.src, i.naturalWidth]),
  links: [...document.querySelectorAll("a[href]")].map(a => a.href),
  ids: [...document.querySelectorAll("[id]")].map(e => e.id),
  banners: [...document.querySelectorAll(".book-banner")].map(e => e.innerText),
  toc: document.querySelectorAll(".page-toc .toc-entry a").length,
  raw_math: [...document.querySelectorAll("span.math, div.math")].map(e => e.innerText).filter(t => t.includes("\\\\")),
  text: document.body.innerText,
};
"""


@pytest.fixture(scope="session")
def browsed(site, served, browser, tmp_path_factory) -> dict[str, dict]:
    """Open every page once; keep what each showed, its console messages, and a screenshot."""
    shots = tmp_path_factory.mktemp("screenshots")
    print(f"\nscreenshots of every page: {shots}")
    seen = {}
    browser.get_log("browser")                      # start from an empty log
    for name in pages(site):
        browser.get(served + name)
        browser.execute_async_script(WAIT_FOR_IMAGES)
        found = browser.execute_script(COLLECT)
        found["console"] = [e for e in browser.get_log("browser") if e["level"] == "SEVERE"]
        browser.save_screenshot(str(shots / (name.replace("/", "__") + ".png")))
        seen[name] = found
    assert seen, f"no page in {site}"
    return seen


@pytest.mark.book
def test_every_page_loads_without_console_errors(browsed):
    errors = {name: [e["message"] for e in page["console"]] for name, page in browsed.items() if page["console"]}
    assert not errors, json.dumps(errors, indent=1)


@pytest.mark.book
def test_every_image_loaded(browsed):
    broken = {name: [src for src, width in page["images"] if not width] for name, page in browsed.items()}
    assert not {k: v for k, v in broken.items() if v}, broken
    assert any(page["images"] for page in browsed.values()), "no image anywhere: were the charts rendered?"


@pytest.mark.book
def test_every_formula_is_typeset(browsed):
    raw = {name: page["raw_math"] for name, page in browsed.items() if page["raw_math"]}
    assert not raw, f"formulas MathJax left as TeX source: {raw}"


@pytest.mark.book
def test_every_internal_link_resolves(site, served, browsed):
    ids_of = {name: set(page["ids"]) for name, page in browsed.items()}
    broken = []
    for name, page in browsed.items():
        for href in page["links"]:
            if not href.startswith(served):
                continue
            target, fragment = urldefrag(href)
            path = unquote(urlparse(target).path).lstrip("/") or "index.html"
            if path.endswith("/"):
                path += "index.html"
            if not (site / path).is_file():
                broken.append(f"{name}: {href} (no file {path})")
            elif fragment and path.endswith(".html"):
                ids = ids_of.get(path) or set(re.findall(r'id="([^"]+)"', (site / path).read_text(encoding="utf-8")))
                if unquote(fragment) not in ids:
                    broken.append(f"{name}: {href} (no anchor #{fragment} in {path})")
    assert not broken, "\n".join(broken)


@pytest.mark.book
def test_each_notebook_has_a_page_with_banner_badge_and_contents(site, served, browsed):
    record = json.loads((site / "build-record.json").read_text(encoding="utf-8"))
    assert record["notebooks"], "the build recorded no notebook"
    for notebook, run in record["notebooks"].items():
        name = notebook.replace(".ipynb", ".html")
        assert name in browsed, f"no page for {notebook}"
        page = browsed[name]
        assert len(page["banners"]) == 1, f"{name}: {len(page['banners'])} banners"
        banner = page["banners"][0]
        assert ("quick run" in banner and "TUTORIAL_QUICK=1" in banner) if run["quick"] else "full run" in banner
        assert "Data:" in banner and "Executed" in banner
        assert any("colab.research.google.com/github/" in href for href in page["links"]), f"{name}: no Colab link"
        assert any("colab-badge" in src and width for src, width in page["images"]), f"{name}: no Colab badge"
        assert page["toc"] >= 3, f"{name}: no table of contents of its own"
        # Links between notebooks point at pages, never at .ipynb files of the site.
        assert not [h for h in page["links"] if h.startswith(served) and re.search(r"/\d\d_\w+\.ipynb", h)
                    and "/_sources/" not in h], f"{name} links to a notebook file instead of its page"


@pytest.mark.book
def test_the_landing_page_records_the_build(site, browsed):
    record = json.loads((site / "build-record.json").read_text(encoding="utf-8"))
    text = browsed["index.html"]["text"]
    assert record["date"] in text
    assert all(f"{name} {version}" in text for name, version in record["versions"].items())
    for notebook, run in record["notebooks"].items():
        assert f"{run['seconds']:.0f} s" in text, f"the landing page lacks {notebook}'s run time"
    links = browsed["index.html"]["links"]
    for notebook in record["notebooks"]:
        assert any(href.endswith(notebook.replace(".ipynb", ".html")) for href in links), notebook
    for doc in book.doc_pages():      # every page of docs/ is a page of the site, linked from the landing page
        assert f"docs/{doc.stem}.html" in browsed, f"no page for docs/{doc.name}"
        assert any(href.endswith(f"docs/{doc.stem}.html") for href in links), f"the landing page lacks docs/{doc.name}"


OUTPUT_WIDTHS = """
return [...document.querySelectorAll("div.cell_output pre")].map(
  p => [getComputedStyle(p).whiteSpace, p.scrollWidth, p.clientWidth, p.innerText.slice(0, 60)]);
"""


@pytest.mark.book
def test_long_output_lines_wrap_instead_of_being_cut(site, served, browser, browsed):
    """Every output block of every notebook's page wraps (computed style pre-wrap) and is no wider than its box."""
    record = json.loads((site / "build-record.json").read_text(encoding="utf-8"))
    seen, wide = 0, []
    for notebook in record["notebooks"]:
        browser.get(served + notebook.replace(".ipynb", ".html"))
        for white_space, scroll_width, client_width, start in browser.execute_script(OUTPUT_WIDTHS):
            seen += 1
            if white_space != "pre-wrap" or scroll_width > client_width + 1:
                wide.append(f"{notebook}: {white_space}, {scroll_width} px in {client_width} px: {start!r}")
    assert seen, "no output block on any page: were the notebooks executed?"
    assert not wide, "\n".join(wide)


CODE_WIDTHS = """
return [...document.querySelectorAll("div.cell_input pre")].map(
  p => [p.scrollWidth, p.clientWidth, p.innerText.split("\\n").reduce((a, b) => a.length >= b.length ? a : b)]);
"""


@pytest.mark.book
def test_code_cells_fit_their_column_in_a_wide_window(site, served, browser, browsed):
    """From a 1600-pixel window up, a code line of 100 characters fits without scrolling (book.css widens the page;
    tests/test_notebook_width.py keeps the lines that short)."""
    record = json.loads((site / "build-record.json").read_text(encoding="utf-8"))
    wide = []
    browser.set_window_size(1600, 1000)
    try:
        for notebook in record["notebooks"]:
            browser.get(served + notebook.replace(".ipynb", ".html"))
            wide += [f"{notebook}: {scroll} px in {client} px: {line[:60]!r}"
                     for scroll, client, line in browser.execute_script(CODE_WIDTHS) if scroll > client + 1]
    finally:
        browser.set_window_size(1280, 1000)
    assert not wide, "\n".join(wide)


def test_render_only_refuses_a_record_that_names_files_outside_the_series(tmp_path, capsys):
    """Names in record.json become paths under the build folder: one that is not a notebook of the series is refused."""
    scratch = tmp_path / "scratch"      # the site may not lie in the scratch folder (`out_problem`)
    scratch.mkdir()
    (scratch / "record.json").write_text(json.dumps({"date": "d", "quick": True, "notebooks": {
        "01_generators_and_iterables.ipynb": {}, "../../escape.ipynb": {}}}))
    assert book.build(True, tmp_path / "site", render_only=True, scratch=scratch) == 2
    assert "../../escape.ipynb" in capsys.readouterr().err and not (tmp_path / "site").exists()
