"""Series-wide settings: quick mode, the data directory and the repository's URL."""
from __future__ import annotations

import os
from pathlib import Path

from helpers.storage.files import file_problem

# The one place the repository's address is kept: `python -m tools.notebooks sync` writes it into every
# notebook's Colab cell and badge; a test checks they agree.
REPO_URL = "https://github.com/bigger-than-memory/bigger-than-memory"
REPO_BRANCH = "main"

QUICK_ENV = "TUTORIAL_QUICK"
DATA_DIR_ENV = "TUTORIAL_DATA_DIR"


def quick_mode() -> bool:
    """True when `TUTORIAL_QUICK` is set to a true value (1, true, yes, on)."""
    return os.environ.get(QUICK_ENV, "").strip().lower() in {"1", "true", "yes", "on"}


def pick(quick, full):
    """Return `quick` in quick mode and `full` otherwise: quick mode changes sizes only.

    >>> n_train = pick(quick=2_000, full=60_000)
    """
    return quick if quick_mode() else full


def repo_root() -> Path | None:
    """The checkout this package lives in, or None when installed from a wheel (Colab)."""
    root = Path(__file__).resolve().parents[2]   # helpers/setup/config.py → the checkout
    return root if (root / "pyproject.toml").exists() and (root / "notebooks").is_dir() else None


def data_dir() -> Path:
    """Where datasets and generated files live, created if missing: `TUTORIAL_DATA_DIR`, else `data/` in the
    checkout, else (pip-installed, as on Colab) `data/` under the working directory. `NotADirectoryError`
    saying what is there when it cannot be a folder."""
    env = os.environ.get(DATA_DIR_ENV)
    path = Path(env).expanduser() if env else (repo_root() or Path.cwd()) / "data"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if os.path.islink(path) and not os.path.exists(path):
            what = file_problem(path)   # a broken symlink, or a symlink loop
        elif isinstance(e, (FileExistsError, NotADirectoryError)) and path.exists():
            what = "a file, not a folder"
        else:
            what = f"a folder that cannot be created ({e.strerror}: {e.filename})"
        raise NotADirectoryError(
            f"{f'{DATA_DIR_ENV}={env}' if env else 'the data directory'} names {path}, which is {what}. Point "
            f"{DATA_DIR_ENV} at a folder (it is created if missing), or unset it to use data/ in the repository."
        ) from None
    return path
