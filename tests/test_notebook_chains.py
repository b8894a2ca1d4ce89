"""The test run's two notebook chains (conftest.py): every notebook is in one, and notebooks that use the same
folder of data/ are in the same one, so two notebooks never write one folder at once."""
import importlib.util
import json
import os
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("root_conftest", ROOT / "conftest.py")   # not tests/conftest.py
root_conftest = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(root_conftest)
NOTEBOOK_CHAINS, notebook_chain = root_conftest.NOTEBOOK_CHAINS, root_conftest.notebook_chain
FOLDER = re.compile(r'data_dir\(\)\s*/\s*\(?f?"([^"/{]+)')   # the first part of a path under data/


def folders_of(notebook: Path) -> set[str]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    return set(FOLDER.findall(code))


def test_every_notebook_is_in_a_chain():
    numbers = {p.name[:2] for p in (ROOT / "notebooks").glob("*.ipynb")}
    assert numbers - NOTEBOOK_CHAINS.keys() == set(), "add the new notebook to NOTEBOOK_CHAINS in conftest.py"
    assert set(NOTEBOOK_CHAINS.values()) == {"a", "b"}


def test_notebooks_that_share_a_folder_share_a_chain():
    users: dict[str, set[str]] = {}
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        for folder in folders_of(notebook):
            users.setdefault(folder, set()).add(notebook.name[:2])
    shared = {folder: numbers for folder, numbers in users.items() if len(numbers) > 1}
    assert {"05"} <= users["photo-sized"] and len(users) > 10   # the finder sees the notebooks' folders
    split = {folder: numbers for folder, numbers in shared.items()
             if len({NOTEBOOK_CHAINS[n] for n in numbers}) > 1}
    assert not split, f"folders of data/ used by notebooks in different chains: {split}"


def test_a_cell_goes_to_its_notebooks_chain():
    assert notebook_chain("notebooks/06_scaling_out.ipynb::Cell 3") == "notebooks-a"
    assert notebook_chain("notebooks/08_resume_shuffle_grain.ipynb::Cell 0") == "notebooks-b"
    assert notebook_chain("notebooks/42_new.ipynb::Cell 0") == "notebooks-a"


def test_a_notebook_scope_is_its_chain_and_other_tests_stand_alone():
    chain_scope = root_conftest.chain_scope
    cells = [f"notebooks/0{n}_x.ipynb::Cell {i}" for n in (1, 2, 4) for i in range(3)]
    assert {chain_scope(c) for c in cells} == {"notebooks-a"}
    assert chain_scope("notebooks/03_y.ipynb::Cell 0@notebooks-b") == "notebooks-b"   # a suffix xdist wrote
    assert chain_scope("tests/test_x.py::test_a") == "tests/test_x.py::test_a"
    assert chain_scope("helpers/setup/config.py::helpers.setup.config.pick") != chain_scope("tests/test_x.py::test_a")


def _small_project(folder: Path) -> Path:
    """Four notebooks of four cells (two in each chain) and a few unit tests, run with the project's conftest.py and
    pytest options. Each cell appends its notebook and its process to `record`; every cell after the first uses a
    name the first one set, so a cell in a kernel that did not run the first fails as a split notebook does."""
    import tomllib
    (folder / "conftest.py").write_text((ROOT / "conftest.py").read_text(encoding="utf-8"), encoding="utf-8")
    options = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["tool"]["pytest"]["ini_options"]
    (folder / "pytest.ini").write_text(f"[pytest]\naddopts = {options['addopts']}\ntestpaths = tests notebooks\n"
                                       f"markers =\n    alone: -\n    book: -\n", encoding="utf-8")
    record = folder / "record.txt"
    (folder / "notebooks").mkdir()
    for name in ("01_a", "02_b", "03_c", "07_d"):
        first = f"import os\nworker = os.environ['PYTEST_XDIST_WORKER']\nrecord = {str(record)!r}"
        later = f"open(record, 'a').write({name!r} + ' ' + worker + '\\n')"
        cells = [{"cell_type": "code", "metadata": {}, "source": source, "outputs": [], "execution_count": None,
                  "id": f"c{i}"} for i, source in enumerate([first, later, later, later])]
        notebook = {"cells": cells, "metadata": {"kernelspec": {"name": "python3", "display_name": "Python 3",
                                                                "language": "python"}},
                    "nbformat": 4, "nbformat_minor": 5}
        (folder / "notebooks" / f"{name}.ipynb").write_text(json.dumps(notebook), encoding="utf-8")
    (folder / "tests").mkdir()
    (folder / "tests" / "test_units.py").write_text(
        "import pytest\n\n@pytest.mark.parametrize('n', range(6))\ndef test_unit(n):\n    assert n >= 0\n")
    return record


def _run(folder: Path, *extra: str):
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST_", "BTM_TEST_LOCKS"))}
    return subprocess.run([sys.executable, "-m", "pytest", "-q", *extra], cwd=folder, env=env,
                          capture_output=True, text=True, timeout=300)


def test_every_notebooks_cells_run_in_one_process_with_the_installed_pytest_and_xdist(tmp_path):
    record = _small_project(tmp_path)
    run = _run(tmp_path)
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-3000:]
    workers: dict[str, set[str]] = {}
    for line in record.read_text().splitlines():
        name, worker = line.split()
        workers.setdefault(name, set()).add(worker)
    assert sorted(workers) == ["01_a", "02_b", "03_c", "07_d"]
    assert all(len(w) == 1 for w in workers.values()), f"a notebook's cells ran in two processes: {workers}"
    assert workers["01_a"] == workers["02_b"] and workers["03_c"] == workers["07_d"]   # a chain stays together
    assert workers["01_a"] != workers["03_c"]                                         # the chains run side by side


def test_a_notebook_split_over_two_processes_is_stopped_by_name(tmp_path):
    _small_project(tmp_path)
    run = _run(tmp_path, "--dist", "load")   # xdist's own scheduler deals cells out to both processes
    assert run.returncode != 0
    assert "its cells ran in two test processes" in run.stdout, run.stdout[-3000:]
