# Generated from notebooks/05_pipeline_profiling.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""05 · Profiling an input pipeline: is training input-bound?: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import numpy as np
import tensorflow as tf
import keras


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Block records: one record, many images
from helpers.storage.blocks import spec_tag   # plumbing: a spec as 'uint8 (28, 28)'

BLOCK_SIZE = 256   # images per block record

def block_example(images, labels, tag):
    """One block record, serialized: the images' pixel bytes, their labels, the spec tag `tag`."""
    pixels = np.ascontiguousarray(images).tobytes()
    feature = {
        "images": tf.train.Feature(bytes_list=tf.train.BytesList(value=[pixels])),
        "labels": tf.train.Feature(
            int64_list=tf.train.Int64List(value=np.asarray(labels, np.int64))),
        "spec": tf.train.Feature(bytes_list=tf.train.BytesList(value=[tag.encode()])),
    }
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Writing: one file per shard, one record per block
# plumbing: checks, lock, file names, temporary files, index
from helpers.storage.blocks import block_write

def write_blocks(images, labels, directory, split, num_shards=8, block_size=BLOCK_SIZE,
                 num_classes=None):
    """Write `images` and their whole-number `labels` (below `num_classes` when given) as
    `num_shards` files of block records, with an index written last; returns the folder."""
    with block_write(images, labels, directory, split, num_shards, block_size,
                     num_classes) as write:
        tag = spec_tag(write.spec)
        for path, first, end in write.shards():   # one file per shard: images first to end - 1
            with tf.io.TFRecordWriter(str(path)) as writer:
                for start in range(first, end, block_size):   # one record per block
                    stop = min(start + block_size, end)
                    block = block_example(write.images[start:stop], write.labels[start:stop], tag)
                    writer.write(block)
    return write.directory


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Reading: parse, mix, rebatch
def parse_block_fn(spec, source="these block records"):
    """A function for `dataset.map`: one block record -> `(images, labels)`, the block's images."""
    description = {"images": tf.io.FixedLenFeature([], tf.string),
                   "labels": tf.io.VarLenFeature(tf.int64),
                   "spec": tf.io.FixedLenFeature([], tf.string, default_value="")}
    dtype, tag = tf.as_dtype(spec.image_dtype), spec_tag(spec)

    def parse(serialized):
        features = tf.io.parse_single_example(serialized, description)
        labels = tf.sparse.to_dense(features["labels"])
        same_spec = tf.debugging.Assert(  # (assert_equal cannot compare strings when run eagerly)
            tf.equal(features["spec"], tag),
            [f"a block in {source} does not hold {tag} images (its index was edited?)"])
        fits = tf.debugging.assert_equal(
            tf.strings.length(features["images"]), tf.cast(tf.size(labels), tf.int32) * spec.nbytes,
            message=f"a block in {source} does not hold one {spec.image_dtype} {spec.image_shape} "
                    f"image per label")
        with tf.control_dependencies([same_spec, fits]):  # check first: no reshape of a wrong spec
            pixels = tf.io.decode_raw(features["images"], dtype)
            images = tf.reshape(pixels, (-1, *spec.image_shape))
        return images, labels

    return parse


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Reading: parse, mix, rebatch
def mix_images(images, labels, seed=None):
    """A window of images and their labels, shuffled together with one gather."""
    order = tf.random.shuffle(tf.range(tf.shape(labels)[0]), seed=seed)
    return tf.gather(images, order), tf.gather(labels, order)


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Reading: parse, mix, rebatch
from helpers.storage.blocks import open_block_split   # plumbing: argument checks, index, checksums
from helpers.storage.tfrecord.read import exact_length

def read_blocks(directory, split, batch_size=256, *, shuffle=False, mix_blocks=8, shuffle_blocks=64,
                parallel_reads=4, seed=None, verify=False):
    """`(images, labels)` batches of `batch_size` from block records written by `write_blocks`."""
    info = open_block_split(directory, split, verify=verify, batch_size=batch_size,
                            mix_blocks=mix_blocks, shuffle_blocks=shuffle_blocks,
                            parallel_reads=parallel_reads)
    where = f"block split {split!r} of {directory}"
    parse = parse_block_fn(info.spec, where)
    files = tf.data.Dataset.from_tensor_slices([str(f) for f in info.files])
    # No read buffer: it would copy every byte once more, and a block is big enough that reading
    # it straight into its record costs only a few more system calls.
    records = lambda file: tf.data.TFRecordDataset(file, buffer_size=0)
    if not shuffle:   # one file after another: the written order
        ds = files.flat_map(records).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        window = info.block_size * mix_blocks                     # images mixed together
        ds = (files.shuffle(len(info.files), seed=seed)            # the file order
              .interleave(records, cycle_length=parallel_reads,   # several files
                          num_parallel_calls=parallel_reads,       # at once, whichever block
                          deterministic=False)                     # is ready
              .shuffle(shuffle_blocks, seed=seed)                  # the blocks
              .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
              .rebatch(window))                                    # mix_blocks blocks ...
        # ... mixed, unless a window is one batch: the order inside a batch does not change its
        if window != batch_size:                                   # gradient (a sum over images)
            ds = ds.map(lambda x, y: mix_images(x, y, seed), num_parallel_calls=tf.data.AUTOTUNE)
    return exact_length(ds.rebatch(batch_size), -(-info.total_records // batch_size), where)


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
SHUFFLE_BUFFER = 10_000

def float_features():
    """How the article's records are described to the parser: 784 floats and an integer label."""
    return {"image": tf.io.FixedLenFeature([28 * 28], tf.float32),
            "label": tf.io.FixedLenFeature([], tf.int64)}

def parse_float_record(serialized):
    """The article's parse: one record → a float image scaled to 0-1, and its label."""
    features = tf.io.parse_single_example(serialized, float_features())
    return tf.reshape(features["image"], (28, 28)) / 255.0, features["label"]


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
def tf1_options():
    """tf.data options that run a pipeline as TensorFlow 1.x ran it: none of the three optimisations
    above."""
    options = tf.data.Options()
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.map_and_batch_fusion = False
    options.experimental_optimization.inject_prefetch = False
    return options

def article_pipeline(files, n_records, batch_size, shuffle_buffer=SHUFFLE_BUFFER):
    """The older article's train.py input: files in order, per-record parse, shuffle, batch. No
    parallelism."""
    return (tf.data.TFRecordDataset(files)
            .apply(tf.data.experimental.assert_cardinality(n_records))   # the manifest's count
            .map(parse_float_record)
            .shuffle(shuffle_buffer)
            .batch(batch_size)
            .with_options(tf1_options()))


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
import time

import keras
import tensorflow as tf

from helpers.measure import fit_epoch, pipeline_epoch

class CpuClock(keras.callbacks.Callback):
    """The CPU seconds this process used (every thread: the model's and tf.data's) from the start of
    an epoch of `fit` to the end of its last step, the stretch `fit_epoch` times."""
    def on_epoch_begin(self, epoch, logs=None):
        self.start = self.end = time.process_time()

    def on_train_batch_end(self, batch, logs=None):
        self.end = time.process_time()

def pipeline_epoch_cpu(dataset, spent):
    """`pipeline_epoch(dataset)`, appending to the list `spent` the CPU seconds the epoch used
    (every thread): from its iterator's creation, as `pipeline_epoch` times it, to its last
    batch."""
    start = time.process_time()
    epoch = pipeline_epoch(dataset)
    spent.append(time.process_time() - start)
    return epoch

def trace_training_step(model, first_batch):
    """Trace `model`'s training step, for `first_batch`'s size and for a shorter batch (Keras
    traces it again for each new batch size, and an epoch's last batch is often shorter): the
    warm-up timed epochs need, in three steps instead of a whole round of untimed epochs."""
    shorter = tf.nest.map_structure(lambda tensor: tensor[:1], first_batch)
    model.fit(tf.data.Dataset.from_tensors(first_batch).repeat(2), verbose=0)
    model.fit(tf.data.Dataset.from_tensors(shorter), verbose=0)

def fit_epoch_cpu(model, x, batch_size, spent):
    """`fit_epoch(model, x=x, batch_size=batch_size)`, appending to `spent` its CPU seconds."""
    clock = CpuClock()
    epoch = fit_epoch(model, x=x, batch_size=batch_size, callbacks=[clock])
    spent.append(clock.end - clock.start)
    return epoch


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
from helpers.measure import Samples

def waiting_share(model_alone, together, after_first_step=False):
    """Per round, the share of a training step spent waiting for input: 1 - model-alone step time /
    step time together, floored at 0. Both are lists of `Epoch`s of the same steps, so their seconds
    compare as step times; `after_first_step` leaves out each epoch's first step (the start-up)."""
    def seconds(epoch):
        if after_first_step and epoch.seconds <= epoch.start_up:
            raise ValueError("an epoch of one step (or one chunk of steps_per_execution) has "
                             "nothing after its first")
        return epoch.seconds - epoch.start_up if after_first_step else epoch.seconds

    return Samples([max(0.0, 1 - seconds(alone) / seconds(both))
                    for alone, both in zip(model_alone, together)])


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
def pipeline_cpu_share(pipeline_cpu, pipeline_epochs, model_cpu, model_epochs):
    """Per round, the pipeline's share of the CPU that training from it needs: c / (c + m), with c
    and m the CPU seconds per sample of the pipeline alone and of the model alone (lists of seconds
    and of `Epoch`s)."""
    shares = []
    rounds = zip(pipeline_cpu, pipeline_epochs, model_cpu, model_epochs)
    for p_cpu, p_epoch, m_cpu, m_epoch in rounds:
        c, m = p_cpu / p_epoch.samples, m_cpu / m_epoch.samples
        shares.append(c / (c + m))
    return Samples(shares)


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
def rate_once_started(epochs, first_batch):
    """Per round, samples/s after each epoch's first batch (of `first_batch` samples): the rate once
    the start-up (opening files, filling buffers) is paid."""
    return Samples([(e.samples - first_batch) / (e.seconds - e.start_up) for e in epochs])


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
NOT_INPUT_BOUND, HIGHLY_INPUT_BOUND = 0.05, 0.20   # the TensorFlow Profiler's lines on the share
CHEAP = 1 / 3   # a CPU share under this: the pipeline needs under half the CPU the model does

def input_bound_verdict(share):
    """The profiler's verdict on a waiting share (a number from 0 to 1)."""
    if share < NOT_INPUT_BOUND:
        return "not input-bound"
    return "moderately input-bound" if share <= HIGHLY_INPUT_BOUND else "highly input-bound"

VERDICT_SENTENCES = {   # what each verdict means where the pipeline and the model share the cores
    "not input-bound": "Training hardly waits for input.",
    "moderately input-bound": ("Over whole epochs the pipeline alone is slower than the model "
                               "alone: training waits for it, here and beside a GPU."),
    "highly input-bound": ("Over whole epochs the pipeline alone is slower than the model alone: "
                           "training waits for it, here and beside a GPU."),
    "keeps up, costly on shared cores": (
        "The pipeline alone outruns the model but needs half the CPU the model does or more, so on "
        "shared cores it slows training; with cores to spare it would not be input-bound."),
    "keeps up, cheap": (
        "The pipeline alone outruns the model at a small CPU cost: the waiting is the little CPU "
        "it takes from the model and each epoch's start-up."),
    "keeps up": (
        "The pipeline alone outruns the model (its CPU share was not measured): the waiting is "
        "the CPU it takes from the model on shared cores and each epoch's start-up."),
}

def diagnose_verdict(share, headroom=None, cpu_share=None):
    """The verdict on medians: the waiting share and, where measured, the headroom (the pipeline
    alone's rate ÷ the model alone's, over whole epochs) and the pipeline's CPU share."""
    if share < NOT_INPUT_BOUND or headroom is None or headroom < 1:
        return input_bound_verdict(share)   # the profiler's: barely waits, or cannot keep up
    if cpu_share is None:
        return "keeps up"
    return "keeps up, cheap" if cpu_share < CHEAP else "keeps up, costly on shared cores"

def crossed_lines(share):
    """The profiler's lines inside the interval of `share` (`Samples`): the verdict is not firm."""
    low, high = share.interval
    return [f"{line:.0%}" for line in (NOT_INPUT_BOUND, HIGHLY_INPUT_BOUND) if low < line <= high]


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
from dataclasses import dataclass

@dataclass
class Diagnosis:
    """What `diagnose` measured: steady-state samples/s, the waiting and CPU shares, per round."""
    pipeline_alone: Samples     # no model
    model_alone: Samples        # training on the pipeline's first batch, held in memory, repeated
    together: Samples           # training from the pipeline
    waiting_share: Samples      # of each training step, the share spent waiting for input
    gpu_appetite: float | None = None   # samples/s a GPU trains this model at, if known
    past_start_up: Samples | None = None   # the waiting share after each epoch's first step
    cpu_share: Samples | None = None   # the pipeline's share of the CPU training from it needs
    started: Samples | None = None     # the pipeline alone's samples/s after its first batch

    @property
    def verdict(self):
        cpu_share = self.cpu_share.median if self.cpu_share is not None else None
        return diagnose_verdict(self.waiting_share.median, self.headroom.median, cpu_share)

    @property
    def headroom(self):
        """How many times faster the pipeline alone runs than the model alone, round by round."""
        return Samples([p / m for p, m in zip(self.pipeline_alone.values, self.model_alone.values)])

    @property
    def feeds_gpu(self):
        """"could", "could not" or "no measurable margin": the pipeline alone's interval against the
        GPU's rate."""
        if self.gpu_appetite:
            return {"above": "could", "below": "could not", "holds": "no measurable margin"}[
                self.pipeline_alone.compared_to(self.gpu_appetite)]

    def __str__(self):
        return describe_diagnosis(self)


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
def describe_diagnosis(d):
    """A `Diagnosis` in words: the verdict, the rates, the CPU share, whether the verdict is firm,
    and the GPU."""
    text = (f"{d.verdict}: {d.waiting_share.brief('.0%')} of each step waits for input. "
            f"{VERDICT_SENTENCES[d.verdict]} Pipeline alone {d.pipeline_alone.median:,.0f} "
            f"samples/s, model alone {d.model_alone.median:,.0f}, "
            f"together {d.together.median:,.0f} (headroom {d.headroom.median:.2f}×).")
    if d.cpu_share is not None:
        text += f" The pipeline takes {d.cpu_share.median:.0%} of the CPU training from it needs."
    if (crossed := crossed_lines(d.waiting_share)) and d.verdict == input_bound_verdict(
            d.waiting_share.median):
        text += (f" The interval crosses the profiler's {' and '.join(crossed)} "
                 f"line{'s' * (len(crossed) > 1)}: the verdict, from the median, is not firm.")
    low, high = d.headroom.interval
    if d.waiting_share.median >= NOT_INPUT_BOUND and low < 1 <= high:
        text += (" The headroom's interval holds 1: whether the pipeline keeps up alone is not "
                 "firm.")
    if d.feeds_gpu == "no measurable margin":
        text += (f" Over whole epochs its interval holds the {d.gpu_appetite:,.0f} samples/s a "
                 f"GPU trains: no measurable margin.")
    elif d.feeds_gpu:
        text += (f" Over whole epochs, each one's start-up included, it {d.feeds_gpu} feed a GPU "
                 f"that trains {d.gpu_appetite:,.0f} samples/s.")
    if d.started is not None:
        text += f" Alone, once started, it runs {d.started.median:,.0f} samples/s"
        held_back = d.gpu_appetite and d.feeds_gpu != "could" and d.started.median > d.gpu_appetite
        text += (": faster than the GPU, so what holds it back is its work before each "
                 "epoch's first batch." if held_back else ".")
    if d.past_start_up is not None:
        text += (f" Leaving out each epoch's first step (the pipeline's start-up): "
                 f"{d.past_start_up.median:.0%} waits.")
    return text


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
from helpers.measure import alternate, fit_epoch, pipeline_epoch

def diagnose(make, model, *, rounds=6, gpu_appetite=None):
    """Is training `model` from `make()` (a fresh tf.data.Dataset of batches per call) input-bound
    here? The pipeline alone, the model alone and the two together in alternating rounds, after
    `trace_training_step`; the first two also count the CPU seconds they used."""
    steps = int(make().cardinality())
    if steps < 2:
        raise ValueError("diagnose needs a dataset of known length with at least two batches: a "
                         "TFRecordDataset's length is unknown until read, so add "
                         ".apply(tf.data.experimental.assert_cardinality(n)) with the number of "
                         "records (read_split does this from the manifest)")
    first = next(iter(make()))   # the first batch, held in memory: the model alone pays no input
    batch_size = int(first[0].shape[0])
    trace_training_step(model, first)   # the warm-up
    cpu = {"pipeline alone": [], "model alone": []}
    measured = alternate({
        "pipeline alone": lambda: pipeline_epoch_cpu(make(), cpu["pipeline alone"]),
        "model alone": lambda: fit_epoch_cpu(
            model, tf.data.Dataset.from_tensors(first).repeat(steps), batch_size,
            cpu["model alone"]),
        "together": lambda: fit_epoch(model, x=make(), batch_size=batch_size),
    }, rounds=rounds, warmup=0)
    alone, together = measured.epochs["model alone"], measured.epochs["together"]
    several_marks = all(e.seconds > e.start_up for e in alone + together)   # else none after step 1
    cpu_share = pipeline_cpu_share(cpu["pipeline alone"], measured.epochs["pipeline alone"],
                                   cpu["model alone"], alone)
    return Diagnosis(measured.samples("pipeline alone"), measured.samples("model alone"),
                     measured.samples("together"), waiting_share(alone, together), gpu_appetite,
                     waiting_share(alone, together, True) if several_marks else None,
                     cpu_share, rate_once_started(measured.epochs["pipeline alone"], batch_size))


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 3. One technique at a time, on the page cache and on a slow store
def gain_verdict(gain):
    """A gain (a ratio of rates, with its interval) in words, chosen by the interval: faster, slower
    or no measurable difference. Notebook 07 words its own ladder with it."""
    low, high = gain.interval
    return {"above": f"faster: ×{gain.median:.2f} (interval ×{low:.2f}–×{high:.2f}, above 1)",
            "below": f"slower: ×{gain.median:.2f} (interval ×{low:.2f}–×{high:.2f}, below 1)",
            "holds": f"no measurable difference here (interval ×{low:.2f}–×{high:.2f} holds 1)"}[
        gain.compared_to(1.0)]


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 4. Timelines: where the time goes
WAIT, STEP = "waiting for input", "training step"   # the consumer's two stages, timed in Python

def start_spans(dataset):
    """Give every element an empty dict of spans, so that `traced_map` can add to it."""
    return dataset.map(lambda *element: (*element, {}))

def traced_map(dataset, fn, stage, **map_args):
    """`dataset.map(fn, **map_args)` on elements from `start_spans`, recording when `fn` started and
    ended.

    `fn`'s ops start only after the start time is taken, and the end time is taken only after every
    output of `fn` exists (control dependencies), so the span covers exactly `fn`'s work.
    """
    def timed(*element):
        *payload, spans = element
        start = tf.timestamp()
        with tf.control_dependencies([start]):
            out = fn(*payload)
        out = out if isinstance(out, tuple) else (out,)
        with tf.control_dependencies(tf.nest.flatten(out)):
            end = tf.timestamp()
        return (*out, {**spans, stage: tf.stack([start, end])})

    return dataset.map(timed, **map_args)


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 4. Timelines: where the time goes
from dataclasses import dataclass, field

@dataclass
class Timeline:
    """Per batch, each stage's (start, end) in seconds since the first request for a batch."""
    rows: list = field(default_factory=list)

    @property
    def seconds(self):
        """From the first request to the end of the last batch's step."""
        return max(end for row in self.rows for _, end in row.values())

    def total(self, stage):
        """Seconds spent in `stage`, summed over batches (different batches' stages may overlap)."""
        return sum(row[stage][1] - row[stage][0] for row in self.rows if stage in row)

    @property
    def waiting_share(self):
        """The share of the whole run the consumer spent waiting for its next batch."""
        return self.total(WAIT) / self.seconds

    @property
    def typical_wait(self):
        """The median seconds waited for a batch, the first left out: its wait is the pipeline's
        start-up
        (opening files, filling buffers), paid once per epoch, not per batch."""
        waits = [row[WAIT][1] - row[WAIT][0] for row in self.rows[1:]]
        if not waits:
            raise ValueError("typical_wait needs at least two batches")
        return float(np.median(waits))


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 4. Timelines: where the time goes
import time

def record_timeline(dataset, consume=None, max_batches=None):
    """Iterate `dataset` (elements from `traced_map`), timing the wait for each batch and
    `consume(*batch)`."""
    raw = []
    iterator = iter(dataset)
    while max_batches is None or len(raw) < max_batches:
        asked = time.time()  # the clock tf.timestamp() reads too: seconds since the epoch
        try:
            *payload, spans = next(iterator)
        except StopIteration:
            break
        got = time.time()
        if consume is not None:
            consume(*payload)
        row = {stage: (float(np.min(s.numpy()[..., 0])), float(np.max(s.numpy()[..., 1])))
               for stage, s in spans.items()}
        row[WAIT], row[STEP] = (asked, got), (got, time.time())
        raw.append(row)
    if not raw:
        raise ValueError("record_timeline: the dataset produced no batches")
    origin = min(start for row in raw for start, _ in row.values())
    return Timeline([{stage: (a - origin, b - origin) for stage, (a, b) in row.items()}
                     for row in raw])


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 4. Timelines: where the time goes
# extra code – draw a Timeline: one row per batch (the first at the top), one coloured bar per stage
def plot_timeline(timeline, ax, title):
    """Draw `timeline` on `ax`, one bar per stage per batch, with the legend below the axes."""
    from matplotlib.patches import Patch

    stages = [s for s in timeline.rows[0] if s not in (WAIT, STEP)] + [WAIT, STEP]
    colours = {**dict(zip(stages[:-2], ("tab:blue", "tab:orange", "tab:purple", "tab:brown"))),
               WAIT: "tab:red", STEP: "tab:green"}
    for row_index, row in enumerate(timeline.rows):
        for lane, stage in enumerate(stages):
            if stage in row:
                start, end = row[stage]
                ax.broken_barh([(start * 1e3, max((end - start) * 1e3, 0.05))],
                               (row_index + lane / len(stages) * 0.8, 0.8 / len(stages)),
                               color=colours[stage])
    ax.set_ylim(len(timeline.rows), 0)
    ax.set_xlabel("milliseconds since the first request")
    ax.set_ylabel("batch")
    ax.set_title(f"{title}: waiting {timeline.waiting_share:.0%} of "
                 f"{timeline.seconds * 1e3:,.0f} ms")
    ax.legend(handles=[Patch(color=colours[s], label=s) for s in stages], loc="upper center",
              bbox_to_anchor=(0.5, -0.15), ncol=len(stages),
              fontsize="small")   # below the axes, off the bars


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 8. Memory: streaming stays flat, loading everything grows
from helpers.storage.tfrecord import read_split   # notebook 04's pipeline, with its checks
from helpers.storage.tfrecord import read_manifest

SHUFFLE_MIB = 16   # the most the stream's shuffle buffer holds
BUFFERS_MIB = 64   # the most the buffers tf.data's autotuner grows may hold
READ_MIB = 16      # the most one read of the loader holds

def records_in(mib, spec, most):
    """How many records of `spec` fit in `mib` MiB: at least 1, at most `most`."""
    return int(max(1, min(most, mib * 2**20 // spec.nbytes)))

def train_one_epoch(model, mode, directory, split, batch_size=256):
    """Train `model` for one epoch of the shards of `split`: "load" reads them all into arrays
    first, "stream" reads batches from the shards while it trains. Buffers are sized in bytes,
    not records: 10,000 MNIST digits are 7.5 MiB, 10,000 photos of 224 × 224 pixels 1.4 GiB."""
    manifest = read_manifest(directory, split)
    if mode == "load":
        shape = (manifest.total_records, *manifest.spec.image_shape)
        images, labels = np.empty(shape, np.uint8), np.empty(manifest.total_records, np.int64)
        at = 0
        for x, y in read_split(directory, split, records_in(READ_MIB, manifest.spec, 4096)):
            images[at:at + len(y)], labels[at:at + len(y)] = x.numpy(), y.numpy()
            at += len(y)
        model.fit(images, labels, batch_size=batch_size, epochs=1, shuffle=True, verbose=0)
    elif mode == "stream":
        buffer = records_in(SHUFFLE_MIB, manifest.spec, 10_000)
        stream = read_split(directory, split, batch_size, parallel_reads=4, shuffle_buffer=buffer)
        options = tf.data.Options()
        options.autotune.ram_budget = BUFFERS_MIB * 2**20   # unset: up to half the machine's RAM
        model.fit(stream.prefetch(tf.data.AUTOTUNE).with_options(options), epochs=1, verbose=0)
    else:
        raise ValueError(f'mode must be "load" or "stream", not {mode!r}')


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 8. Memory: streaming stays flat, loading everything grows
from helpers.storage.tfrecord import ShardError, fingerprint_arrays, write_shards
from helpers.storage.tfrecord.read import check_shard_files

PHOTO_SHAPE = (224, 224, 3)   # a photo as an ImageNet model takes it: 224 × 224 pixels, RGB

def photo_sized(images):
    """Grey `images` (n, 28, 28) enlarged to PHOTO_SHAPE by repeating each pixel: the bytes of
    a decoded photo, 147 KiB each."""
    factor = PHOTO_SHAPE[0] // images.shape[1]
    enlarged = images.repeat(factor, axis=1).repeat(factor, axis=2)
    return np.repeat(enlarged[..., None], 3, axis=-1)

def write_large_split(images, labels, directory, mib, num_shards=8):
    """At least `mib` MiB of `photo_sized(images)`, cycled, as split "train" of `directory`,
    written once, then found there (same images, as many) and used as it is."""
    big = photo_sized(images)
    total = -(-mib * 2**20 // big[0].nbytes)   # whole images
    fingerprint = fingerprint_arrays(big, labels)
    try:
        manifest = read_manifest(directory, "train")
        if (manifest.fingerprint, manifest.total_records) == (fingerprint, total):
            check_shard_files(directory, manifest)   # every file there, of its size
            return manifest
    except (OSError, ShardError):   # not written yet, or not completely: write it
        pass
    records = ((big[i % len(big)], labels[i % len(big)]) for i in range(total))
    return write_shards(records, directory, "train", num_shards, total=total,
                        fingerprint=fingerprint, overwrite=True, progress=False)

def pooled_classifier(image_shape=PHOTO_SHAPE):
    """A classifier cheap enough that reading the data is the work: the mean of each 8 × 8
    patch (for a photo-sized digit, the digit's own pixels again), then one dense layer."""
    inputs = keras.Input(shape=image_shape, dtype="uint8")
    x = keras.layers.AveragePooling2D(8)(keras.layers.Rescaling(1 / 255)(inputs))
    outputs = keras.layers.Dense(10, activation="softmax")(keras.layers.Flatten()(x))
    model = keras.Model(inputs, outputs, name="pooled_classifier")
    model.compile(optimizer="rmsprop", loss="sparse_categorical_crossentropy", metrics=["accuracy"])
    return model
