"""Maintenance for the notebooks: strip outputs before committing, and keep Colab links in sync.

    python -m tools.notebooks clean   # drop outputs and execution counts from every notebook
    python -m tools.notebooks sync    # rewrite Colab badges and install cells from helpers.config
    python -m tools.notebooks check   # exit 1 if any notebook has outputs or a stale URL

The repository URL lives only in helpers/config.py (REPO_URL, REPO_BRANCH).
"""
from __future__ import annotations

import json
import re
import sys
from pathlib import Path

from helpers.config import REPO_BRANCH, REPO_URL

NOTEBOOK_DIR = Path(__file__).resolve().parent.parent / "notebooks"
PACKAGE_NAME = "bigger-than-memory"


def notebooks() -> list[Path]:
    return sorted(NOTEBOOK_DIR.glob("*.ipynb"))


def colab_url(notebook: Path) -> str:
    """The 'Open in Colab' address of a notebook in this repository."""
    repo = REPO_URL.removeprefix("https://github.com/")
    return f"https://colab.research.google.com/github/{repo}/blob/{REPO_BRANCH}/notebooks/{notebook.name}"


def github_url(notebook: Path) -> str:
    return f"{REPO_URL}/blob/{REPO_BRANCH}/notebooks/{notebook.name}"


def badges(notebook: Path) -> str:
    return (
        f"[![Open In Colab](https://colab.research.google.com/assets/colab-badge.svg)]({colab_url(notebook)})"
        f" · [View on GitHub]({github_url(notebook)})"
    )


def pip_target() -> str:
    return f"{PACKAGE_NAME} @ git+{REPO_URL}@{REPO_BRANCH}"


def outputs_of(cells: list[dict]) -> list[int]:
    """Indices of code cells that carry outputs or an execution count."""
    return [
        i
        for i, c in enumerate(cells)
        if c.get("cell_type") == "code" and (c.get("outputs") or c.get("execution_count") is not None)
    ]


def stale_links(notebook: Path, cells: list[dict]) -> list[str]:
    """Colab/GitHub links or pip targets in the notebook that differ from helpers.config."""
    text = "".join("".join(c.get("source", "")) for c in cells)
    problems = []
    if colab_url(notebook) not in text:
        problems.append(f"missing Colab link {colab_url(notebook)}")
    if pip_target() not in text:
        problems.append(f"missing Colab install of {pip_target()!r}")
    return problems


def _rewrite(source: str, notebook: Path) -> str:
    source = re.sub(r"\[!\[Open In Colab\]\([^)]*\)\]\([^)]*\)( · \[View on GitHub\]\([^)]*\))?", badges(notebook), source)
    return re.sub(rf"{PACKAGE_NAME} @ git\+[^\s\"']+", pip_target(), source)


def _save(path: Path, nb: dict) -> None:
    path.write_text(json.dumps(nb, indent=1, ensure_ascii=False) + "\n", encoding="utf-8")


def main(argv: list[str] | None = None) -> int:
    command = (argv or sys.argv[1:] or ["check"])[0]
    bad = 0
    for path in notebooks():
        nb = json.loads(path.read_text(encoding="utf-8"))
        if command == "clean":
            for c in nb["cells"]:
                if c["cell_type"] == "code":
                    c["outputs"], c["execution_count"] = [], None
            _save(path, nb)
        elif command == "sync":
            for c in nb["cells"]:
                c["source"] = _rewrite("".join(c["source"]), path).splitlines(keepends=True)
            _save(path, nb)
        elif command == "check":
            for problem in ([f"outputs in cells {outputs_of(nb['cells'])}"] if outputs_of(nb["cells"]) else []) + stale_links(path, nb["cells"]):
                print(f"{path.name}: {problem}")
                bad += 1
        else:
            print(__doc__)
            return 2
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
