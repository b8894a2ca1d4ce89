"""Settings for the whole pytest run, read before any notebook kernel starts.

Kernels inherit this process's environment, so setting the variables here is how quick mode
reaches every notebook. Set TUTORIAL_QUICK=0 yourself to execute the notebooks in full.
"""
import os

import pytest

os.environ.setdefault("TUTORIAL_QUICK", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's C++ start-up chatter
os.environ.setdefault("MPLBACKEND", "Agg")


@pytest.hookimpl(tryfirst=True)   # before pytest-xdist reads the groups
def pytest_collection_modifyitems(items):
    """The notebooks run in one process, in order (pyproject.toml runs two with pytest-xdist): they share
    data/ (02 and 04 write the shards 05 reads; 06 reads the photo-sized split 05 writes), and each
    notebook's cells share one kernel."""
    for item in items:
        if item.nodeid.startswith("notebooks/"):
            item.add_marker(pytest.mark.xdist_group("notebooks"))
