"""Is training input-bound? Time the pipeline alone, the model alone, and the two together.

`diagnose` answers the question a learner has: how much of each training step is spent waiting
for input, with the TensorFlow profiler's verdicts (under 5 % of step time waiting: not
input-bound; 5-20 %: moderately; over 20 %: highly), and whether the pipeline could feed a given
GPU (`helpers.gpu_reference`). Its three sides run in alternating rounds (`helpers.measure`), and
every figure comes with the confidence interval of its median.

Introduced in notebooks/04_tfdata_mnist.ipynb (section 7); notebook 05 takes it apart.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable

import keras
import tensorflow as tf

from helpers.measure import Samples, alternate, fit_epoch, pipeline_epoch

NOT_INPUT_BOUND, HIGHLY_INPUT_BOUND = 0.05, 0.20  # the TensorFlow profiler's thresholds on the waiting share


@dataclass
class Diagnosis:
    """What `diagnose` measured, and what it means. Rates are steady-state samples/s, per round.

    Introduced in notebooks/04_tfdata_mnist.ipynb.
    """

    pipeline_alone: Samples     # no model
    model_alone: Samples        # training on one batch held in memory
    together: Samples           # training from the pipeline
    waiting_share: Samples      # of each training step, the part spent waiting for input
    gpu_appetite: float | None = None

    @property
    def headroom(self) -> Samples:
        """How many times faster the pipeline alone runs than the model alone, round by round."""
        return Samples([p / m for p, m in zip(self.pipeline_alone.values, self.model_alone.values)])

    @property
    def verdict(self) -> str:
        """The profiler's verdict on the median waiting share (`str` says when the interval crosses a line)."""
        share = self.waiting_share.median
        if share < NOT_INPUT_BOUND:
            return "not input-bound"
        if share <= HIGHLY_INPUT_BOUND:
            return "moderately input-bound"
        return "highly input-bound"

    @property
    def feeds_gpu(self) -> str | None:
        """"could", "could not", or "no measurable margin": the pipeline alone's interval against the GPU."""
        if not self.gpu_appetite:
            return None
        return {"above": "could", "below": "could not", "holds": "no measurable margin"}[
            self.pipeline_alone.compared_to(self.gpu_appetite)]

    def __str__(self) -> str:
        text = (f"{self.verdict}: {self.waiting_share.median:.0%} of each step waits for input "
                f"({self.waiting_share.interval_text('.0%')}). Pipeline alone "
                f"{self.pipeline_alone.median:,.0f} samples/s, model alone {self.model_alone.median:,.0f}, together "
                f"{self.together.median:,.0f} (headroom {self.headroom.median:.1f}×).")
        low, high = self.waiting_share.interval
        crossed = [f"{line:.0%}" for line in (NOT_INPUT_BOUND, HIGHLY_INPUT_BOUND) if low < line <= high]
        if crossed:
            text += (f" The interval crosses the profiler's {' and '.join(crossed)} line: the verdict, taken from "
                     f"the median, is not firm.")
        if self.feeds_gpu == "no measurable margin":
            text += f" Its interval holds the {self.gpu_appetite:,.0f} samples/s a GPU trains: no measurable margin."
        elif self.feeds_gpu:
            text += f" It {self.feeds_gpu} feed a GPU that trains {self.gpu_appetite:,.0f} samples/s."
        return text


def diagnose(make: Callable[[], tf.data.Dataset], model: keras.Model, *, rounds: int = 6,
             gpu_appetite: float | None = None) -> Diagnosis:
    """Is training `model` from `make()` input-bound on this machine?

    Three sides, in rounds that alternate their order (after one untimed warm-up round): the
    pipeline alone; the model alone, trained on the pipeline's first batch cached in memory and
    repeated for as many steps (the same compute with no input cost); and training from the
    pipeline. Each is a steady-state rate (`helpers.measure`). The waiting share of a round is
    1 - (model-alone step time / step time together) = 1 - together / model alone, floored at 0.
    `gpu_appetite`, a GPU's samples/s for this model (`helpers.gpu_reference.gpu_appetite`), adds
    whether the pipeline alone could feed it, judged on its interval.
    Introduced in notebooks/04_tfdata_mnist.ipynb.
    """
    steps = int(make().cardinality())
    if steps < 2:
        raise ValueError("diagnose needs a dataset of known length with at least two batches: a TFRecordDataset's "
                         "length is unknown until read, so add .apply(tf.data.experimental.assert_cardinality(n)) "
                         "with the number of records (read_split does this from the manifest)")
    batch_size = int(next(iter(make()))[0].shape[0])

    def model_alone() -> tf.data.Dataset:
        return make().take(1).cache().repeat(steps)

    measured = alternate({
        "pipeline alone": lambda: pipeline_epoch(make()),
        "model alone": lambda: fit_epoch(model, x=model_alone(), batch_size=batch_size),
        "together": lambda: fit_epoch(model, x=make(), batch_size=batch_size),
    }, rounds=rounds, warmup=1)
    together, compute = measured.values["together"], measured.values["model alone"]
    waiting = Samples([max(0.0, 1.0 - t / c) for t, c in zip(together, compute)])
    return Diagnosis(measured.samples("pipeline alone"), measured.samples("model alone"),
                     measured.samples("together"), waiting, gpu_appetite)
