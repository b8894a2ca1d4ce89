"""Every public helper says where the series introduces it, d2l-style, so a reader can find the lesson."""
import importlib
import inspect
import pkgutil
import re
from pathlib import Path

import pytest

import helpers

ROOT = Path(__file__).resolve().parent.parent
INTRODUCED = re.compile(r"Introduced in\s+(notebooks/\d\d_[a-z0-9_]+\.ipynb)")


def public_helpers():
    names = [m.name for m in pkgutil.walk_packages(helpers.__path__, "helpers.")]
    for module_name in names:
        module = importlib.import_module(module_name)
        for name, thing in vars(module).items():
            if name.startswith("_") or not (inspect.isfunction(thing) or inspect.isclass(thing)):
                continue
            if thing.__module__ == module_name:  # defined here, not imported
                yield f"{module_name}.{name}", thing


HELPERS = dict(public_helpers())


def test_there_are_helpers_to_check():
    assert len(HELPERS) > 40 and "helpers.tfrecord.write.write_shards" in HELPERS


@pytest.mark.parametrize("name", sorted(HELPERS))
def test_docstring_names_the_notebook_that_introduces_it(name):
    doc = inspect.getdoc(HELPERS[name]) or ""
    match = INTRODUCED.search(" ".join(doc.split()))
    assert match, f"{name}'s docstring should end with 'Introduced in notebooks/NN_name.ipynb.'"
    assert (ROOT / match[1]).exists(), f"{name} names {match[1]}, which does not exist"
