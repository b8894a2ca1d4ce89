"""Measurement: the timing core every number in the series goes through, and what it measures against.

- `core`: repeated samples with the confidence interval of their median, alternating rounds, one steady-state rate
  (imported here, so `from helpers.measure import alternate` reads as it did);
- `gpu_reference`: how fast a reference GPU trains the series' models (the appetite a pipeline must meet);
- `page_cache`: cold reads (the page cache dropped) against cached ones;
- `peak_memory`: one training epoch in a fresh process, its peak memory, under an optional budget.
"""
from helpers.measure.core import (CONFIDENCE, Epoch, EpochClock, Rounds, Samples, alternate, batches_of, fit_epoch,
                                  median_interval_ranks, pipeline_epoch, steady_epoch, time_repeats, timed)

__all__ = ["CONFIDENCE", "Epoch", "EpochClock", "Rounds", "Samples", "alternate", "batches_of", "fit_epoch",
           "median_interval_ranks", "pipeline_epoch", "steady_epoch", "time_repeats", "timed"]
