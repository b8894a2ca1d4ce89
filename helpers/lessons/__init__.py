"""Code written in the notebooks and saved from them by `python -m tools.notebooks save` (one module per notebook)."""
