"""The plumbing a lesson stands on sits below it: no module of helpers/setup, data, storage or measure imports
`helpers.lessons` (issue 28). A lesson may use that plumbing; the plumbing takes lesson code only as an argument
(peak_memory's "module:function"). helpers/scale (notebook 06's launchers, notebook 07's conversion processes) and
helpers/training_runs (notebook 08's training runs in child processes) stand above the lessons: they run lesson code
in other processes."""
import ast
from pathlib import Path

HELPERS = Path(__file__).resolve().parent.parent / "helpers"
BELOW_THE_LESSONS = ("setup", "data", "storage", "measure")


def imported_modules(path: Path) -> set[str]:
    names = set()
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


def test_no_plumbing_module_imports_lesson_code():
    plumbing = [p for room in BELOW_THE_LESSONS for p in (HELPERS / room).rglob("*.py")]
    assert len(plumbing) > 10
    offenders = {str(p.relative_to(HELPERS)): sorted(m for m in imported_modules(p) if m.startswith("helpers.lessons"))
                 for p in plumbing}
    assert not {k: v for k, v in offenders.items() if v}, "plumbing must not import lesson code"


def test_the_check_sees_an_import_of_lesson_code(tmp_path):
    module = tmp_path / "m.py"
    module.write_text("def f():\n    from helpers.lessons.tfdata_mnist import article_mlp\n")
    assert "helpers.lessons.tfdata_mnist" in imported_modules(module)
