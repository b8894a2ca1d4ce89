"""Issue 25, round three, the tools and the plumbing: commands that must never remove a folder they did not make,
a hostile build record, worker output read together, ports chosen without a race, and writes that survive a
power cut. Each test failed before its fix. None builds the book or executes a notebook: they test the functions
that decide what may be removed, and the rendering of a record's values.
"""
from __future__ import annotations

import html.parser
import json
import os
import time
from pathlib import Path

import pytest

from tools import book, build_record, folders, workshop

ROOT = Path(__file__).resolve().parent.parent


# ---------------------------------------------------------------- 1. `tools.workshop prepare DIR`


@pytest.fixture
def fake_checkout(tmp_path, monkeypatch):
    """A checkout under git clone's default name, `<tmp>/bigger-than-memory`, with uncommitted work in it."""
    checkout = tmp_path / "bigger-than-memory"
    (checkout / "notebooks").mkdir(parents=True)
    (checkout / "notebooks" / "mine.ipynb").write_text("uncommitted work")
    monkeypatch.setattr(folders, "ROOT", checkout)
    monkeypatch.setattr(workshop, "ROOT", checkout)
    return checkout


def test_prepare_dot_dot_never_removes_the_checkout(fake_checkout, capsys):
    """`prepare ..` inside `bigger-than-memory/` named the checkout itself as the series folder and removed it."""
    assert workshop.prepare(fake_checkout.parent) == 2
    assert "holds this checkout" in capsys.readouterr().err
    assert (fake_checkout / "notebooks" / "mine.ipynb").read_text() == "uncommitted work"


@pytest.mark.parametrize("where", ["checkout", "inside", "inside build", "parent", "link to checkout",
                                   "link to parent"])
def test_prepare_refuses_the_checkout_what_holds_it_and_what_lies_inside_it(fake_checkout, tmp_path, where):
    targets = {"checkout": fake_checkout, "inside": fake_checkout / "notebooks", "parent": tmp_path,
               "inside build": fake_checkout / "build" / "kit"}
    if where.startswith("link"):
        link = tmp_path / "elsewhere" / "link"
        link.parent.mkdir()
        link.symlink_to(fake_checkout if where.endswith("checkout") else tmp_path, target_is_directory=True)
        targets[where] = link
    problem = workshop.prepare_problem(targets[where])
    assert problem and "checkout" in problem and "outside" in problem


def test_prepare_refuses_a_folder_it_did_not_make_and_says_how_to_continue(tmp_path, capsys):
    kit = tmp_path / "usb"
    (kit / "bigger-than-memory").mkdir(parents=True)
    (kit / "bigger-than-memory" / "thesis.tex").write_text("a year of work")
    assert workshop.prepare(kit) == 2
    err = capsys.readouterr().err
    assert str(kit) in err and "not empty" in err and workshop.KIT_MARKER in err and "remove" in err
    assert (kit / "bigger-than-memory" / "thesis.tex").read_text() == "a year of work"


def test_prepare_accepts_a_new_an_empty_or_its_own_folder(tmp_path):
    assert workshop.prepare_problem(tmp_path / "new") is None
    (tmp_path / "empty").mkdir()
    assert workshop.prepare_problem(tmp_path / "empty") is None
    own = tmp_path / "own"
    folders.claim(own, workshop.KIT_MARKER, "made here")
    (own / "bigger-than-memory").mkdir()          # what an earlier, maybe interrupted, run left
    (own / "bigger-than-memory" / "README.md").write_text("old copy")
    assert workshop.prepare_problem(own) is None


def test_prepare_never_follows_a_link_in_its_own_folder(tmp_path):
    own, elsewhere = tmp_path / "own", tmp_path / "elsewhere"
    folders.claim(own, workshop.KIT_MARKER, "made here")
    elsewhere.mkdir()
    (own / "bigger-than-memory").symlink_to(elsewhere, target_is_directory=True)
    assert "symlink" in workshop.prepare_problem(own)
    (own / "bigger-than-memory").unlink()
    (own / workshop.KIT_MARKER).unlink()
    (own / workshop.KIT_MARKER).symlink_to(elsewhere / "marker")     # a marker must be the folder's own file
    (elsewhere / "marker").write_text("made here")
    assert "not empty" in workshop.prepare_problem(own)


# ---------------------------------------------------------------- 2. `tools.book --out DIR`


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


# ---------------------------------------------------------------- 18. a hostile build record


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


# ---------------------------------------------------------------- the multi-worker launcher reads every worker


REPORT = 'print(json.dumps({"index": index, "replicas": 2, "steps": 1, "samples": 8, "loss": [0.5], ' \
         '"weights_sha256": "same"}))'
PRELUDE = "import json, os, sys, time\nfrom pathlib import Path\n" \
          "index = json.loads(os.environ['TF_CONFIG'])['task']['index']\nflag = Path(sys.argv[1])\n"


@pytest.fixture
def fake_workers(monkeypatch, tmp_path):
    """Make `train_on_workers` start `program` (given the worker's TF_CONFIG and a flag file) instead of training."""
    import subprocess
    import sys

    from helpers.scale import multi_worker

    real, started = subprocess.Popen, []

    def use(program: str):
        def popen(command, *args, **kwargs):
            started.append(command)
            return real([sys.executable, "-c", PRELUDE + program, str(tmp_path / "flag")], *args, **kwargs)

        monkeypatch.setattr(multi_worker.subprocess, "Popen", popen)
        return started

    return use


def test_a_worker_filling_its_stderr_does_not_stall_the_others(fake_workers, tmp_path):
    """Worker 0 waits for worker 1 (as a collective does) while worker 1 writes 1 MiB to stderr: read one process
    at a time, worker 1 blocked on its full pipe and both waited until the timeout."""
    from helpers.scale.multi_worker import train_on_workers

    fake_workers("if index == 1:\n    sys.stderr.write(('x' * 99 + '\\n') * 10_000); sys.stderr.flush(); "
                 "flag.write_text('done')\nelse:\n    deadline = time.time() + 60\n"
                 "    while not flag.exists() and time.time() < deadline: time.sleep(0.02)\n" + REPORT)
    results = train_on_workers(tmp_path, "train", workers=2, timeout=30)
    assert [r.index for r in results] == [0, 1] and (tmp_path / "flag").exists()


def test_a_failed_worker_stops_the_cluster_at_once_naming_itself(fake_workers, tmp_path):
    from helpers.scale.multi_worker import train_on_workers

    fake_workers("if index == 1:\n    sys.exit('worker 1 broke: no shard for it')\ntime.sleep(600)\n")
    started = time.monotonic()
    with pytest.raises(RuntimeError, match="(?s)worker 1 failed.*no shard for it"):
        train_on_workers(tmp_path, "train", workers=2, timeout=30)
    assert time.monotonic() - started < 25, "the launcher waited for the worker that was waiting for the failed one"


def test_a_port_taken_before_a_worker_binds_it_starts_the_cluster_again(fake_workers, tmp_path, capsys):
    from helpers.scale.multi_worker import train_on_workers

    started = fake_workers("if index == 1 and not flag.exists():\n    flag.write_text('once')\n"   # TF 2.21's words:
                           "    sys.exit('UnknownError: Could not start gRPC server')\n" + REPORT)
    results = train_on_workers(tmp_path, "train", workers=2, timeout=30)
    assert [r.index for r in results] == [0, 1] and len(started) == 4
    assert capsys.readouterr().out.count("every network interface") == 2     # new ports, said again


# ---------------------------------------------------------------- ports: IPv6, and no race with the data service


def _listener(family, host: str):
    import socket

    sock = socket.socket(family, socket.SOCK_STREAM)
    if family == socket.AF_INET6:
        sock.setsockopt(socket.IPPROTO_IPV6, socket.IPV6_V6ONLY, 1)
    sock.bind((host, 0))
    sock.listen()
    return sock


def test_a_port_held_only_on_ipv6_loopback_is_taken(monkeypatch):
    import socket

    from helpers.setup import processes

    try:
        held = _listener(socket.AF_INET6, "::1")
    except OSError:
        pytest.skip("this machine has no IPv6 loopback")
    with held:
        port = held.getsockname()[1]
        assert processes.port_is_taken(port)
        offered = iter([port, port, processes._kernel_port()])
        monkeypatch.setattr(processes, "_kernel_port", lambda: next(offered))
        assert processes.free_port() != port
    with _listener(socket.AF_INET, "127.0.0.1") as held:
        assert processes.port_is_taken(held.getsockname()[1])


def test_the_data_service_binds_port_0_and_reports_the_port_it_got(monkeypatch, capsys):
    """A port chosen here and bound later by the child could be taken in between (here: it is, by this test);
    the dispatcher binds port 0 and says which port it got."""
    import socket

    from helpers.scale import data_service
    from helpers.setup.processes import port_is_taken

    with _listener(socket.AF_INET, "0.0.0.0") as taken:
        monkeypatch.setattr(data_service, "free_port", lambda: taken.getsockname()[1], raising=False)
        with data_service.DataServiceCluster(workers=0) as cluster:     # the dispatcher alone, in this process
            assert cluster.port != taken.getsockname()[1] and port_is_taken(cluster.port)
            assert cluster.target == f"grpc://localhost:{cluster.port}"
            assert str(cluster.port) in capsys.readouterr().out
        assert not port_is_taken(cluster.port)   # stopped when the block ended


# ---------------------------------------------------------------- writes that survive a power cut


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor through /proc")
def test_a_write_reaches_the_disk_before_its_name_and_the_name_after(tmp_path, monkeypatch):
    from helpers.storage import files

    target, synced, real = tmp_path / "shard.bin", [], os.fsync

    def fsync(fd):
        synced.append((Path(os.readlink(f"/proc/self/fd/{fd}")), target.exists()))
        real(fd)

    monkeypatch.setattr(os, "fsync", fsync)
    with files.write_then_rename(target) as tmp:
        tmp.write_bytes(b"x" * 1000)
    assert synced == [(tmp, False), (tmp_path, True)], synced     # the bytes before the rename, the folder after
    synced.clear()
    files.atomic_write_bytes(tmp_path / "many.bin", b"y", durable=False)
    assert synced == []


@pytest.mark.skipif(not Path("/proc/self/fd").is_dir(), reason="names a file descriptor through /proc")
def test_a_png_export_flushes_once_before_its_label_file(tmp_path, monkeypatch):
    import numpy as np

    from helpers.storage import png_folder

    events = []
    monkeypatch.setattr(os, "fsync", lambda fd: events.append(Path(os.readlink(f"/proc/self/fd/{fd}")).name))
    monkeypatch.setattr(os, "sync", lambda: events.append("sync"), raising=False)
    png_folder.export_png_folder(np.zeros((3, 4, 4), np.uint8), np.arange(3), tmp_path, "tr", progress=False)
    assert events.count("sync") == 1
    assert not [e for e in events if e.endswith(".png") or ".png." in e], events     # no flush per image
    label = Path(png_folder.label_file(tmp_path, "tr")).name
    assert any(e.startswith(label) for e in events[events.index("sync"):]), events   # flushed after the PNGs


# ---------------------------------------------------------------- review, round three: --out, records, messages


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


def test_prepare_says_what_to_choose_instead_of_the_home_folder(tmp_path, monkeypatch):
    """`prepare ~` said "/root is your home folder: choose a folder outside this checkout"."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    problem = workshop.prepare_problem(home)
    assert problem == f"{home} is your home folder: choose a new or empty folder inside it", problem
    assert folders.home_or_root_problem(Path("/")) == "/ is the root of the file system: choose a new or empty folder"
    assert "outside this checkout" in workshop.prepare_problem(ROOT / "notebooks")
