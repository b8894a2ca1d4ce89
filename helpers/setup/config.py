"""Series-wide settings: quick mode, the data directory and the repository's URL."""
from __future__ import annotations

import os
from pathlib import Path

# The one place the repository's address is kept. `python -m tools.notebooks sync`
# writes it into every notebook's Colab cell and badge; a test checks they agree.
REPO_URL = "https://github.com/bigger-than-memory/bigger-than-memory"
REPO_BRANCH = "main"

QUICK_ENV = "TUTORIAL_QUICK"
DATA_DIR_ENV = "TUTORIAL_DATA_DIR"


def quick_mode() -> bool:
    """True when `TUTORIAL_QUICK` is set to a true value (1, true, yes, on).

    Usage: `epochs = 1 if quick_mode() else 10` (or, shorter, `pick(quick=1, full=10)`).
    """
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
    """Where datasets and generated files live, created if missing.

    `TUTORIAL_DATA_DIR` wins; otherwise `data/` at the repository root; outside a checkout
    (for example on Colab, where `helpers` is pip-installed) `data/` under the working directory.
    """
    env = os.environ.get(DATA_DIR_ENV)
    if env:
        path = Path(env).expanduser()
        where = f"{DATA_DIR_ENV}={env}"
    else:
        root = repo_root()
        path = (root if root is not None else Path.cwd()) / "data"
        where = "the data directory"
    try:
        path.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        if os.path.islink(path) and not os.path.exists(path):
            what = "a symlink loop" if _is_loop(path) else f"a broken symlink (to {os.readlink(path)!r})"
        elif isinstance(e, (FileExistsError, NotADirectoryError)) and path.exists():
            what = "a file, not a folder"
        else:
            what = f"a folder that cannot be created ({e.strerror}: {e.filename})"
        raise NotADirectoryError(
            f"{where} names {path}, which is {what}. Point {DATA_DIR_ENV} at a folder "
            f"(it is created if missing), or unset it to use data/ in the repository."
        ) from None
    return path


def _is_loop(path: Path) -> bool:
    try:
        os.stat(path)
    except OSError as e:
        import errno

        return e.errno == errno.ELOOP
    return False
