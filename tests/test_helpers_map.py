"""The map in helpers/__init__.py lists every hand-written module, and says truly which notebooks import it."""
import json
import re
from pathlib import Path

import helpers

ROOT = Path(__file__).resolve().parent.parent
HELPERS = ROOT / "helpers"
ENTRY = re.compile(r"^    (\S+(?:\.py|/))\s{2,}(.+?)\s{2,}((?:\d\d )*\d\d|-)$")


def the_map() -> dict[str, set[str]]:
    entries = {}
    for line in helpers.__doc__.splitlines():
        if match := ENTRY.match(line):
            entries[match[1]] = set() if match[3] == "-" else set(match[3].split())
    return entries


def importers(entry: str) -> set[str]:
    """The notebooks whose code names this module or package (`helpers.measure` stands for measure/core.py)."""
    dotted = "helpers." + entry.removesuffix(".py").rstrip("/").replace("/", ".")
    names = [dotted] + (["helpers.measure"] if dotted == "helpers.measure.core" else [])
    after = r"(?![\w])" if entry.endswith("/") else r"(?![\w.])"   # a package's modules count for the package
    pattern = re.compile("|".join(rf"\b{re.escape(name)}{after}" for name in names))
    found = set()
    for notebook in sorted((ROOT / "notebooks").glob("*.ipynb")):
        cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
        code = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
        if pattern.search(code):
            found.add(notebook.name[:2])
    return found


def test_every_hand_written_module_is_on_the_map():
    entries = the_map()
    modules = {str(p.relative_to(HELPERS)) for p in HELPERS.rglob("*.py")
               if p.name != "__init__.py" and "lessons" not in p.parts}
    folders = [e for e in entries if e.endswith("/")]
    unmapped = {m for m in modules if m not in entries and not any(m.startswith(f) for f in folders)}
    assert not unmapped, f"add these to the map in helpers/__init__.py: {sorted(unmapped)}"
    assert not {e for e in entries if not (HELPERS / e).exists()}, "the map names modules that do not exist"


def test_the_map_says_which_notebooks_import_each_module():
    wrong = {entry: (listed, importers(entry)) for entry, listed in the_map().items() if listed != importers(entry)}
    assert not wrong, f"listed vs actually imported: {wrong}"
