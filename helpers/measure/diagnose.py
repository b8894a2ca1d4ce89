"""Notebook 05's method, packaged: is training a model from a pipeline input-bound here, and could the pipeline
alone feed a GPU? (Notebook 05 §2 takes the same three timings one at a time; notebooks 99 and 05 §6 call
`diagnose`.)

- `diagnose(make, model, rounds=6, gpu_appetite=None)`: the pipeline alone, the model alone (training on the
  pipeline's first batch, held in memory) and the two together, in alternating rounds after `trace_training_step`;
  the first two also count the CPU seconds the process used. A `Diagnosis`.
- `Diagnosis`: the three rates past each epoch's first step (its wait, the start-up, kept apart), the waiting share,
  the headroom (pipeline alone ÷ model alone), the pipeline's CPU share, and a verdict. Every verdict word comes
  from `helpers.measure.report.verdict`, the series' one rule: 6 rounds or more, and the interval clear of the line.
- `pipeline_epoch_cpu`, `fit_epoch_cpu`, `trace_training_step`: the parts of the three timings.

The verdicts, on the waiting share's lines (the TensorFlow Profiler's: under 5 % not input-bound, over 20 % highly),
the headroom against 1 and the CPU share against a third. Each verdict holds at its interval's unfavourable end (the
series' rule for goals): a claim such as "keeps up" needs the whole interval on its side of the line, and an interval
that holds a line that decides gives "cannot tell at this size", never the kinder word:
- fewer than 6 rounds: "too few rounds to tell";
- waiting under 5 % (the interval's high end): "not input-bound"; an interval that holds 5 %: "cannot tell at this
  size";
- waiting over 5 % (the low end) and the pipeline alone slower than the model alone (headroom's high end below 1):
  "highly input-bound" over 20 % (the low end), "moderately input-bound" under it (the high end), "input-bound, how
  much cannot tell at this size" where the interval holds 20 %;
- waiting over 5 % and faster alone (headroom's low end above 1): "keeps up, cheap" with a CPU share under a third
  (the high end), "keeps up, costly on shared cores" over it (the low end), "keeps up, its cost cannot tell at this
  size" where the interval holds a third, "keeps up" where the CPU share was not measured;
- a headroom whose interval holds 1: "cannot tell at this size".
"""
from __future__ import annotations

import time
from dataclasses import dataclass, field

import keras
import tensorflow as tf

from helpers.measure.core import Epoch, Rounds, Samples, alternate, fit_epoch, pipeline_epoch
from helpers.measure.report import NO_DIFFERENCE, TOO_FEW, around, verdict

NOT_INPUT_BOUND, HIGHLY_INPUT_BOUND = 0.05, 0.20   # the TensorFlow Profiler's lines on the waiting share
CHEAP = 1 / 3   # a CPU share under this: the pipeline needs under half the CPU the model does
CANNOT_TELL = "cannot tell at this size"   # an interval holds a line that decides

VERDICT_SENTENCES = {   # what each verdict means where the pipeline and the model share the cores
    "not input-bound": "Training hardly waits for input.",
    "moderately input-bound": ("Past each epoch's start-up the pipeline alone is slower than the model alone: "
                               "training waits for it, here and beside a GPU."),
    "highly input-bound": ("Past each epoch's start-up the pipeline alone is slower than the model alone: "
                           "training waits for it, here and beside a GPU."),
    "input-bound, how much cannot tell at this size": (
        "Past each epoch's start-up the pipeline alone is slower than the model alone: training waits for it; the "
        "waiting share's interval holds the 20 % line, so how much, this run cannot tell."),
    "keeps up, costly on shared cores": (
        "The pipeline alone outruns the model but needs half the CPU the model does or more, so on shared cores it "
        "slows training; with cores to spare it would not."),
    "keeps up, cheap": ("The pipeline alone outruns the model at a small CPU cost: the waiting is the little CPU it "
                        "takes from the model."),
    "keeps up, its cost cannot tell at this size": (
        "The pipeline alone outruns the model: the waiting is the CPU it takes from the model; the CPU share's "
        "interval holds a third, so whether that is cheap, this run cannot tell."),
    "keeps up": "The pipeline alone outruns the model: the waiting is the CPU it takes from the model.",
    CANNOT_TELL: ("An interval holds the line that decides (the waiting share's 5 %, or the headroom's 1): this "
                  "run cannot tell; more rounds, a larger epoch or an idle machine can."),
    TOO_FEW: "Fewer than 6 rounds give no verdict (docs/reading-figures.md).",
}


class CpuClock(keras.callbacks.Callback):
    """The CPU seconds this process used (every thread: the model's and tf.data's) from the start of an epoch of
    `fit` to the end of its last step, the stretch `fit_epoch` times."""

    def on_epoch_begin(self, epoch, logs=None):
        self.start = self.end = time.process_time()

    def on_train_batch_end(self, batch, logs=None):
        self.end = time.process_time()


def pipeline_epoch_cpu(dataset, spent: list) -> Epoch:
    """`pipeline_epoch(dataset)`, appending to `spent` the CPU seconds the epoch used (every thread), over the
    stretch `pipeline_epoch` times."""
    start = time.process_time()
    epoch = pipeline_epoch(dataset)
    spent.append(time.process_time() - start)
    return epoch


def fit_epoch_cpu(model, x, batch_size: int, spent: list) -> Epoch:
    """`fit_epoch(model, x=x, batch_size=batch_size)`, appending to `spent` its CPU seconds."""
    clock = CpuClock()
    epoch = fit_epoch(model, x=x, batch_size=batch_size, callbacks=[clock])
    spent.append(clock.end - clock.start)
    return epoch


def trace_training_step(model, first_batch) -> None:
    """Trace `model`'s training step for `first_batch`'s size and for a shorter batch (Keras traces again for each
    new batch size, and an epoch's last batch is often shorter): the warm-up timed epochs need, in three steps."""
    shorter = tf.nest.map_structure(lambda tensor: tensor[:1], first_batch)
    model.fit(tf.data.Dataset.from_tensors(first_batch).repeat(2), verbose=0)
    model.fit(tf.data.Dataset.from_tensors(shorter), verbose=0)


def _after_first_step(epoch: Epoch) -> float:
    if epoch.seconds <= epoch.start_up:
        raise ValueError("an epoch of one step (or one chunk of steps_per_execution) has nothing after its first")
    return epoch.seconds - epoch.start_up


def waiting_shares(model_alone: list[Epoch], together: list[Epoch]) -> Samples:
    """Per round, the share of a training step spent waiting for input, past each epoch's first step: 1 - the model
    alone's seconds / training from the pipeline's, over the same steps, floored at 0 (a round where training from
    the pipeline came out a hair faster is noise)."""
    return Samples([max(0.0, 1 - _after_first_step(alone) / _after_first_step(both))
                    for alone, both in zip(model_alone, together)])


def cpu_shares(pipeline_cpu: list[float], pipeline_epochs: list[Epoch], model_cpu: list[float],
               model_epochs: list[Epoch]) -> Samples:
    """Per round, the pipeline's share of the CPU that training from it needs: c / (c + m), with c and m the CPU
    seconds per sample of the pipeline alone and of the model alone."""
    shares = []
    for p_cpu, p_epoch, m_cpu, m_epoch in zip(pipeline_cpu, pipeline_epochs, model_cpu, model_epochs):
        c, m = p_cpu / p_epoch.samples, m_cpu / m_epoch.samples
        shares.append(c / (c + m))
    return Samples(shares)


@dataclass
class Diagnosis:
    """What the three timings measured: samples/s past each epoch's first step, the waiting and CPU shares, the
    first steps' seconds, per round."""

    pipeline_alone: Samples     # no model
    model_alone: Samples        # training on the pipeline's first batch, held in memory, repeated
    together: Samples           # training from the pipeline
    waiting_share: Samples      # of each step after the first, the share spent waiting for input
    gpu_appetite: float | None = None   # samples/s a GPU trains this model at, if known
    cpu_share: Samples | None = None    # the pipeline's share of the CPU training from it needs
    start_up: dict[str, Samples] = field(default_factory=dict)   # seconds to each epoch's first step, by side

    @property
    def headroom(self) -> Samples:
        """How many times faster the pipeline alone runs than the model alone, round by round."""
        return Samples([p / m for p, m in zip(self.pipeline_alone.values, self.model_alone.values)])

    @property
    def verdict(self) -> str:
        return diagnosis_verdict(self.waiting_share, self.headroom, self.cpu_share)

    @property
    def feeds_gpu(self) -> str | None:
        """The rule's word on the pipeline alone against the GPU's appetite: "could feed it", "would starve it",
        no measurable difference, or too few rounds; None where no appetite is given."""
        if self.gpu_appetite:
            return verdict(self.pipeline_alone, "could feed it", "would starve it", against=self.gpu_appetite)
        return None

    def __str__(self) -> str:
        return describe_diagnosis(self)


def diagnosis_verdict(waiting: Samples, headroom: Samples, cpu_share: Samples | None = None) -> str:
    """The verdict of the module's docstring: every line judged by `report.verdict`, whose word is said only when
    the whole interval (so its unfavourable end) is past the line; an interval that holds a deciding line gives
    `CANNOT_TELL`, never the kinder verdict."""
    share_line = verdict(waiting, "over", "under", against=NOT_INPUT_BOUND)
    keeps_up = verdict(headroom, "keeps up", "falls behind", against=1.0)
    if TOO_FEW in (share_line, keeps_up) or (cpu_share is not None and not cpu_share.enough):
        return TOO_FEW
    if share_line == "under":
        return "not input-bound"
    if share_line == NO_DIFFERENCE or keeps_up == NO_DIFFERENCE:
        return CANNOT_TELL
    if keeps_up == "falls behind":
        degree = verdict(waiting, "over", "under", against=HIGHLY_INPUT_BOUND)
        return {"over": "highly input-bound", "under": "moderately input-bound"}.get(
            degree, "input-bound, how much cannot tell at this size")
    if cpu_share is None:
        return "keeps up"
    cost = verdict(cpu_share, "costly", "cheap", against=CHEAP)
    return {"costly": "keeps up, costly on shared cores", "cheap": "keeps up, cheap"}.get(
        cost, "keeps up, its cost cannot tell at this size")


def describe_diagnosis(d: Diagnosis) -> str:
    """A `Diagnosis` in words: the verdict and what it means, the rates, the CPU share, the first steps, the GPU."""
    rate = lambda s: around(s, ",.0f", "")
    text = (f"{d.verdict}: {around(d.waiting_share, '.0%', '')} of each step past the first waits for input. "
            f"{VERDICT_SENTENCES[d.verdict]} Past each epoch's first step: pipeline alone {rate(d.pipeline_alone)} "
            f"samples/s, model alone {rate(d.model_alone)}, together {rate(d.together)} "
            f"(headroom {around(d.headroom)}).")
    if d.cpu_share is not None:
        text += f" The pipeline takes {around(d.cpu_share, '.0%', '')} of the CPU training from it needs."
    if d.start_up:
        text += " Each epoch's first step came after " + ", ".join(
            f"{s.median * 1e3:,.0f} ms {side}" for side, s in d.start_up.items()) + " (medians)."
    if d.feeds_gpu is not None:
        said = {NO_DIFFERENCE: "no measurable margin", TOO_FEW: "too few rounds to tell"}.get(d.feeds_gpu, d.feeds_gpu)
        text += f" Against a GPU that trains {d.gpu_appetite:,.0f} samples/s, the pipeline alone: {said}."
    return text


def diagnosis_of(measured: Rounds, cpu: dict[str, list[float]] | None = None,
                 gpu_appetite: float | None = None) -> Diagnosis:
    """The `Diagnosis` of three timings already run by `alternate` with sides named "pipeline alone", "model alone"
    and "together" (and, in `cpu`, the first two's CPU seconds per round, if counted)."""
    alone, together = measured.epochs["model alone"], measured.epochs["together"]
    past = measured.past_start_up()
    cpu_share = None
    if cpu:
        cpu_share = cpu_shares(cpu["pipeline alone"], measured.epochs["pipeline alone"], cpu["model alone"], alone)
    return Diagnosis(past.samples("pipeline alone"), past.samples("model alone"), past.samples("together"),
                     waiting_shares(alone, together), gpu_appetite, cpu_share,
                     {side: measured.start_up(side) for side in ("pipeline alone", "together")})


def diagnose(make, model, *, rounds: int = 6, gpu_appetite: float | None = None) -> Diagnosis:
    """Is training `model` from `make()` (a fresh tf.data.Dataset of batches per call, of known length) input-bound
    here? The three timings of notebook 05 §2 in alternating rounds, after `trace_training_step`."""
    steps = int(make().cardinality())
    if steps < 2:
        raise ValueError("diagnose needs a dataset of known length with at least two batches: a TFRecordDataset's "
                         "length is unknown until read, so add .apply(tf.data.experimental.assert_cardinality(n)) "
                         "with the number of batches (read_blocks does this given count=)")
    first = next(iter(make()))   # the first batch, held in memory: the model alone pays no input
    batch_size = int(tf.nest.flatten(first)[0].shape[0])
    trace_training_step(model, first)   # the warm-up
    cpu = {"pipeline alone": [], "model alone": []}
    measured = alternate({
        "pipeline alone": lambda: pipeline_epoch_cpu(make(), cpu["pipeline alone"]),
        "model alone": lambda: fit_epoch_cpu(model, tf.data.Dataset.from_tensors(first).repeat(steps), batch_size,
                                             cpu["model alone"]),
        "together": lambda: fit_epoch(model, x=make(), batch_size=batch_size),
    }, rounds=rounds, warmup=0)
    return diagnosis_of(measured, cpu, gpu_appetite)
