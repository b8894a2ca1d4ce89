"""Measurement: the timing core (`core`, imported here), the reference GPU's speed, peak memory."""
from helpers.measure.core import (CONFIDENCE, Epoch, EpochClock, Rounds, Samples, alternate, batch_size_of, batches_of,
                                  fit_epoch, median_interval_ranks, pipeline_epoch, round_orders, samples_trained,
                                  steady_epoch, time_repeats, timed)

__all__ = ["CONFIDENCE", "Epoch", "EpochClock", "Rounds", "Samples", "alternate", "batch_size_of", "batches_of",
           "fit_epoch", "median_interval_ranks", "pipeline_epoch", "round_orders", "samples_trained", "steady_epoch",
           "time_repeats", "timed"]
