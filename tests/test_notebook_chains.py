"""The test run's two notebook chains (conftest.py): every notebook is in one, and notebooks that use the same
folder of data/ are in the same one, so two notebooks never write one folder at once."""
import importlib.util
import json
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
    assert "photo-sized" in shared   # the one folder two notebooks use (05 writes it, 06 reads it)
    split = {folder: numbers for folder, numbers in shared.items()
             if len({NOTEBOOK_CHAINS[n] for n in numbers}) > 1}
    assert not split, f"folders of data/ used by notebooks in different chains: {split}"


def test_a_cell_goes_to_its_notebooks_chain():
    assert notebook_chain("notebooks/06_scaling_out.ipynb::Cell 3") == "notebooks-a"
    assert notebook_chain("notebooks/08_resume_shuffle_grain.ipynb::Cell 0") == "notebooks-b"
    assert notebook_chain("notebooks/42_new.ipynb::Cell 0") == "notebooks-a"
