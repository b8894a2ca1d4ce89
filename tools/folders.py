"""Folders a command may replace: only those it made itself, recognised by a marker file it wrote inside them,
and never this checkout, a folder that holds it, one of its source folders (SOURCE_FOLDERS: notebooks/,
tools/, .git/, ...), the home folder or the file system's root.

`tools.book --out DIR` and `tools.workshop prepare DIR` both ask `replace_problem` before they remove anything,
and `claim` a folder (write their marker) before they put anything in it, so an interrupted run can be resumed.
"""
from __future__ import annotations

import os
import shutil
import stat
from pathlib import Path

from helpers.storage.files import atomic_write_text

ROOT = Path(__file__).resolve().parent.parent
SOURCE_FOLDERS = (".git", "benchmarks", "helpers", "notebooks", "tests", "tools")   # the series' own files


def inside_checkout_problem(folder: Path, *, inside_ok: bool) -> str | None:
    """Why `folder` (resolved, after symlinks) can never be a command's output because of where it lies in this
    checkout, or None: it is the checkout, holds it, lies inside it (unless `inside_ok`), and in any case lies in
    one of the checkout's SOURCE_FOLDERS (a site in notebooks/ or tools/ would be taken for the series' own files)."""
    folder, root = Path(folder).resolve(), ROOT.resolve()
    if folder == root:
        return f"{folder} is this checkout"
    if folder in root.parents:
        return f"{folder} holds this checkout ({root})"
    if not inside_ok and root in folder.parents:
        return f"{folder} lies inside this checkout ({root})"
    for name in SOURCE_FOLDERS:
        if folder == root / name or root / name in folder.parents:
            return f"{folder} lies in this checkout's {name}/, which holds the series' own files"
    return None


def home_or_root_problem(folder: Path) -> str | None:
    """Why `folder` can never be a command's output because it is the home folder or `/`, with what to do instead."""
    folder = Path(folder).resolve()
    if folder == Path.home().resolve():
        return f"{folder} is your home folder: choose a new or empty folder inside it"
    if folder == Path(folder.anchor):
        return f"{folder} is the root of the file system: choose a new or empty folder"
    return None


def checkout_problem(folder: Path, *, inside_ok: bool) -> str | None:
    """`inside_checkout_problem`, then `home_or_root_problem`: why `folder` can never be a command's output."""
    return inside_checkout_problem(folder, inside_ok=inside_ok) or home_or_root_problem(folder)


def has_marker(folder: Path, marker: str) -> bool:
    """True when `folder` holds `marker` as a regular file of its own (a symlink there does not count)."""
    try:
        return stat.S_ISREG(os.lstat(Path(folder) / marker).st_mode)
    except OSError:
        return False


def replace_problem(folder: Path, marker: str, command: str, *, inside_ok: bool) -> str | None:
    """Why `command` may not remove or fill `folder`, or None: it may when the folder is missing, empty, or holds
    `marker` (the command made it earlier), and `checkout_problem` has nothing against it."""
    if problem := checkout_problem(folder, inside_ok=inside_ok):
        return problem
    folder = Path(folder).resolve()
    if not folder.exists():
        return None
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if has_marker(folder, marker) or not any(folder.iterdir()):
        return None
    return (f"{folder} is not empty and was not made by `{command}` (it holds no {marker} file), so it is left "
            f"as it is: choose a new or empty folder, or remove this one yourself if nothing in it is needed")


def claim(folder: Path, marker: str, text: str) -> None:
    """Make `folder` (if missing) and write `marker` into it: from now on the command may replace it."""
    folder.mkdir(parents=True, exist_ok=True)
    atomic_write_text(folder / marker, text)


def remove(folder: Path, marker: str, command: str, *, inside_ok: bool) -> None:
    """Remove `folder` if `replace_problem` allows it; else raise `ValueError` with the reason. A missing folder is
    left missing; a symlink to a folder is never followed."""
    folder = Path(folder)
    if folder.is_symlink():
        raise ValueError(f"{folder} is a symlink (to {os.path.realpath(folder)}), not a folder `{command}` made")
    if problem := replace_problem(folder, marker, command, inside_ok=inside_ok):
        raise ValueError(problem)
    if folder.exists():
        shutil.rmtree(folder)
