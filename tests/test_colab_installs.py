"""Each notebook's Colab cell installs what the notebook imports: every third-party package a notebook's code
imports, directly or through the helpers it imports, is one of the package's own dependencies or comes with an extra
its Colab cell installs (tools/notebooks.py: COLAB_EXTRAS). On Colab nothing else is installed for it."""
import ast
import json
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

import pytest

from tools import notebooks as nbtools

ROOT = Path(__file__).resolve().parent.parent
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]
OURS = {"helpers", "tools", "benchmarks", "google"}   # google.colab: only looked for, never imported


def normalized(name: str) -> str:
    return re.sub(r"[-_.]+", "-", name).lower()


def requirement_name(requirement: str) -> str:
    return normalized(re.match(r"[A-Za-z0-9._-]+", requirement.strip()).group())


def modules_used(source: str) -> set[str]:
    """Modules a piece of code imports or looks up with `find_spec("name")`; imports guarded by a `try` that
    catches ImportError are optional and left out."""
    found: set[str] = set()

    def visit(node: ast.AST, guarded: bool) -> None:
        if isinstance(node, ast.Try):
            catches = any(h.type is None or re.search(r"ImportError|ModuleNotFoundError|Exception", ast.unparse(h.type))
                          for h in node.handlers)
            for child in node.body:
                visit(child, guarded or catches)
            for child in [*node.handlers, *node.orelse, *node.finalbody]:
                visit(child, guarded)
            return
        if not guarded:
            if isinstance(node, ast.Import):
                found.update(alias.name for alias in node.names)
            elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                found.add(node.module)
                found.update(f"{node.module}.{alias.name}" for alias in node.names)
            elif (isinstance(node, ast.Call) and getattr(node.func, "id", getattr(node.func, "attr", "")) == "find_spec"
                  and node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str)):
                found.add(node.args[0].value)
        for child in ast.iter_child_nodes(node):
            visit(child, guarded)

    visit(ast.parse(source), False)
    return found


def helper_file(module: str) -> Path | None:
    base = ROOT / module.replace(".", "/")
    return next((p for p in (base.with_suffix(".py"), base / "__init__.py") if p.is_file()), None)


def third_party_imports(source: str) -> set[str]:
    """Top-level third-party modules the code needs, following the helpers modules it imports."""
    todo, seen, third = list(modules_used(source)), set(), set()
    while todo:
        module = todo.pop()
        top = module.split(".")[0]
        if top == "helpers":
            path = helper_file(module)
            if path and path not in seen:
                seen.add(path)
                todo.extend(modules_used(path.read_text(encoding="utf-8")))
        elif top not in sys.stdlib_module_names and top not in OURS:
            third.add(top)
    return third


def notebook_code(path: Path) -> str:
    cells = json.loads(path.read_text(encoding="utf-8"))["cells"]
    lines = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code").splitlines()
    return "\n".join(line for line in lines if not line.lstrip().startswith(("%", "!")))   # IPython magics


def distributions(modules: set[str]) -> set[str]:
    """The distributions that provide the modules (an uninstalled module is taken to be its own distribution)."""
    known = packages_distributions()
    return {normalized(d) for m in modules for d in known.get(m, [m])}


def allowed_on_colab(notebook: Path) -> set[str]:
    names = {requirement_name(r) for r in PROJECT["dependencies"]}
    for extra in nbtools.colab_extras(notebook):
        names |= {requirement_name(r) for r in PROJECT["optional-dependencies"][extra]}
    return names


@pytest.mark.parametrize("path", nbtools.notebooks(), ids=lambda p: p.name)
def test_the_colab_cell_installs_every_package_the_notebook_imports(path):
    missing = distributions(third_party_imports(notebook_code(path))) - allowed_on_colab(path)
    assert not missing, (f"{path.name} imports {sorted(missing)}, which its Colab cell does not install: add the "
                         f"extra that has it to COLAB_EXTRAS in tools/notebooks.py, then `python -m tools.notebooks sync`")


def test_every_extra_a_colab_cell_names_exists():
    for number, extras in nbtools.COLAB_EXTRAS.items():
        assert set(extras) <= PROJECT["optional-dependencies"].keys(), number
        assert set(extras) <= nbtools.EXTRA_WORDS.keys(), number


def test_the_check_follows_the_helpers_and_sees_a_guarded_import_as_optional():
    assert "mfusepy" in third_party_imports("from helpers.storage.slow_store import mounted_slow_store")
    assert "grain" in third_party_imports("import grain")
    assert "skimage" in third_party_imports("from importlib.util import find_spec\nfind_spec('skimage')")
    assert third_party_imports("try:\n    import jax\nexcept ImportError:\n    jax = None") == set()
    assert distributions({"PIL"}) == {"pillow"}
    assert {"scikit-image", "mfusepy"} <= allowed_on_colab(Path("notebooks/07_x.ipynb"))
    assert "apache-beam" not in allowed_on_colab(Path("notebooks/01_x.ipynb"))
