"""The record a book build writes (build/book/record.json), read back and checked: the book's landing page and
`tools.workshop plan` both show its run times, so both read it through here. Anything else in the file is an error
naming it."""
from __future__ import annotations

import json
import os
import stat
from pathlib import Path

from helpers.storage.files import file_problem
from tools.notebooks import NOTEBOOK_DIR, notebooks

MAX_RECORD_BYTES = 16 << 20   # a build's record is a few kB: a file this large is something else


class RecordError(ValueError):
    """A build record (record.json) that is not what `build` writes; the message names the file."""


def _number(value) -> bool:
    """A duration as a build writes it: a number of seconds, not negative, not NaN, not absurd."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and 0 <= value < 1e12


def _cores(value) -> bool:
    return value is None or isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= 1 << 20


def _strings(value) -> bool:
    return isinstance(value, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in value.items())


def record_problem(run) -> str | None:
    """What in a build record differs from what `build` writes (the fields the pages and the plan use), or None.
    Notebook names become paths under the build folder: only this series' notebooks are accepted."""
    if not isinstance(run, dict):
        return f"it holds a JSON {type(run).__name__}, not an object"
    if not isinstance(run.get("notebooks"), dict):
        return "its 'notebooks' is missing or not an object"
    if unknown := sorted(set(run["notebooks"]) - {p.name for p in notebooks()}):
        return f"it names notebooks that are not in {NOTEBOOK_DIR}: {unknown}"
    wanted = {"date": lambda v: isinstance(v, str), "quick": lambda v: isinstance(v, bool), "versions": _strings,
              "cpu": lambda v: isinstance(v, str), "cores": _cores,
              "notebooks": lambda v: isinstance(v, dict)}
    if not isinstance(run.get("first_run", False), bool):   # older records have none: not a first run
        return "its 'first_run' is not what a build writes"
    for key, fits in wanted.items():
        if key not in run or not fits(run[key]):
            return f"its {key!r} is missing or not what a build writes"
    for name, rec in run["notebooks"].items():
        if not isinstance(rec, dict):
            return f"the record of notebook {name!r} is not an object"
        cells = rec.get("cells")
        fields = {"seconds": _number(rec.get("seconds")), "quick": isinstance(rec.get("quick"), bool),
                  "cells": isinstance(cells, list) and all(
                      isinstance(c, list) and len(c) == 2 and isinstance(c[0], int) and not isinstance(c[0], bool)
                      and c[0] >= 0
                      and (c[1] is None or _number(c[1])) for c in cells),
                  "errors": isinstance(rec.get("errors"), list) and all(isinstance(e, str) for e in rec["errors"]),
                  "sources": _strings(rec.get("sources", {})), "made": _strings(rec.get("made", {})),
                  "branch": isinstance(rec.get("branch", ""), str)}
        if wrong := [key for key, fits in fields.items() if not fits]:
            return f"notebook {name!r}: its {', '.join(map(repr, wrong))} missing or not what a build writes"
    return None


def _record_bytes(path: Path) -> bytes:
    """The file's bytes, if it is a regular file of a record's size: a FIFO would block the read for ever, a folder
    or a device is no record, and a huge file is not read into memory."""
    if problem := file_problem(path):
        raise RecordError(f"{path} is not a build record: it is {problem}")
    # O_NONBLOCK: a FIFO put there since the check opens at once, and is refused below instead of blocking.
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    with os.fdopen(fd, "rb") as f:
        info = os.fstat(f.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise RecordError(f"{path} is not a build record: not a regular file")
        if info.st_size > MAX_RECORD_BYTES:
            raise RecordError(f"{path} is not a build record: {info.st_size:,} bytes is too large for one (a build "
                              f"writes a few kB; at most {MAX_RECORD_BYTES:,} are read)")
        return f.read(MAX_RECORD_BYTES + 1)


def read_record(path: Path) -> dict:
    """A build record written by `build`, checked; `RecordError` naming the file if it is not one."""
    data = _record_bytes(Path(path))
    try:
        run = json.loads(data.decode("utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise RecordError(f"{path} is not a build record: not valid JSON ({e}); build the book again without "
                          f"--render-only") from None
    except (RecursionError, ValueError) as e:     # nested too deeply; a number of more than 4300 digits
        raise RecordError(f"{path} is not a build record: JSON that cannot be read "
                          f"({'nested too deeply' if isinstance(e, RecursionError) else e}); build the book again "
                          f"without --render-only") from None
    if problem := record_problem(run):
        raise RecordError(f"{path} is not a build record: {problem}; build the book again without --render-only")
    return run
