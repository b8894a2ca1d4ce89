"""Training runs in child processes: killed mid-epoch, or on another Keras backend (notebook 08)."""
