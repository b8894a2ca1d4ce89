"""Settings for the whole pytest run, read before any notebook kernel starts.

Kernels inherit this process's environment, so setting the variables here is how quick mode
reaches every notebook. Set TUTORIAL_QUICK=0 yourself to execute the notebooks in full.
"""
import os

os.environ.setdefault("TUTORIAL_QUICK", "1")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")  # TensorFlow's C++ start-up chatter
os.environ.setdefault("MPLBACKEND", "Agg")
