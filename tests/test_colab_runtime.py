"""Colab, simulated: notebooks that need extras run in an environment holding only what Colab preinstalls, each
notebook alone in an empty folder, its Colab cell installing the series' package (here from this checkout instead of
GitHub, which CI cannot reach) with the extras it names.

Marked `colab`, so the plain `pytest` leaves it out (it makes a virtual environment: a few minutes);
`.ci/run` runs it: `python -m pytest -m colab tests/test_colab_runtime.py`.
"""
import json
import os
import re
import subprocess
import sys
import tomllib
from pathlib import Path

import pytest

from tools import notebooks as nbtools

pytestmark = pytest.mark.colab
ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
# What Colab's runtime has before a notebook installs anything, as far as these notebooks reach (its images also hold
# pandas, scipy, torch and more); the versions are the tested set's.
PREINSTALLED = ["tensorflow", "keras", "numpy", "matplotlib", "pillow", "tqdm", "scikit-image", "jax",
                "ipykernel", "nbclient", "nbformat"]
# The ones whose extras Colab does not preinstall (Beam, mfusepy, Grain and ArrayRecord), and 99, which reads the
# stored full run from the installed package: no checkout there.
NOTEBOOKS = ["06", "07", "08", "99"]
RUN = """
import sys, nbformat, nbclient
path = sys.argv[1]
nb = nbformat.read(path, as_version=4)
nbclient.NotebookClient(nb, timeout=900, kernel_name="python3", resources={"metadata": {"path": sys.argv[2]}}).execute()
print("ran", len(nb.cells), "cells")
"""


@pytest.fixture(scope="module")
def colab_python(tmp_path_factory):
    """A virtual environment with Colab's preinstalled packages only, and an IPython start-up file that makes the
    kernel look like Colab's (`google.colab` imported)."""
    folder = tmp_path_factory.mktemp("colab")
    subprocess.run([sys.executable, "-m", "venv", str(folder / "env")], check=True)
    python = folder / "env" / "bin" / "python"
    subprocess.run([python, "-m", "pip", "install", "-q", *PREINSTALLED, "-c", str(ROOT / "constraints.txt")],
                   check=True)
    startup = folder / "ipython" / "profile_default" / "startup"
    startup.mkdir(parents=True)
    (startup / "00-colab.py").write_text('import sys, types\nsys.modules["google.colab"] = types.ModuleType("google.colab")\n')
    return python, folder / "ipython"


@pytest.mark.parametrize("number", NOTEBOOKS)
def test_a_notebook_runs_on_a_fresh_colab_runtime(colab_python, number, tmp_path):
    python, ipython_dir = colab_python
    original = next(p for p in nbtools.notebooks() if p.name.startswith(number))
    nb = json.loads(original.read_text(encoding="utf-8"))
    install = nbtools.colab_cell(nb["cells"])
    source = "".join(install["source"])
    assert '@ git+{REPO}@' in source
    install["source"] = source.replace("@ git+{REPO}@main", f"@ {ROOT.as_uri()}")   # this checkout, not GitHub
    folder = tmp_path / "content"
    folder.mkdir()
    (folder / original.name).write_text(json.dumps(nb), encoding="utf-8")
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TUTORIAL_", "PYTEST_", "BTM_", "VIRTUAL_ENV"))}
    env.update(TUTORIAL_QUICK="1", IPYTHONDIR=str(ipython_dir), MPLBACKEND="Agg",
               PATH=f"{python.parent}{os.pathsep}{env.get('PATH', '')}")
    run = subprocess.run([python, "-c", RUN, str(folder / original.name), str(folder)], cwd=folder, env=env,
                         capture_output=True, text=True, timeout=1500)
    assert run.returncode == 0, f"{original.name} failed on the simulated Colab runtime:\n{run.stderr[-6000:]}"
    wanted = [r for extra in nbtools.colab_extras(original) for r in PROJECT["optional-dependencies"][extra]]
    names = [re.match(r"[A-Za-z0-9._-]+", r).group() for r in wanted]
    check = "import importlib.metadata as m, sys; [m.version(n) for n in sys.argv[1:]]"
    assert subprocess.run([python, "-c", check, *names]).returncode == 0, f"the Colab cell did not install {names}"
