"""Benchmarks that print ratios measured in one run: `python -m benchmarks.run [--quick] [--json]`."""
