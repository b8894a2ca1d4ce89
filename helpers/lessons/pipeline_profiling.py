# Generated from notebooks/05_pipeline_profiling.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""05 · Profiling an input pipeline: is training input-bound?: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import numpy as np
import tensorflow as tf


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Block records: one record, many images
BLOCK_SIZE = 256   # rows (here images) per block record

def block_spec(x, y):
    """What a block holds, as a text every block carries: the dtype and shape of one x, of one y."""
    x, y = np.asarray(x), np.asarray(y)
    return f"{x.dtype.name} {tuple(x.shape[1:])} -> {y.dtype.name} {tuple(y.shape[1:])}"

def read_spec(spec):
    """`block_spec`'s text as ((dtype, shape) of one x, (dtype, shape) of one y)."""
    def one(part):
        dtype, shape = part.split(" ", 1)
        return tf.as_dtype(dtype), [int(d) for d in shape.strip("()").split(",") if d.strip()]
    return tuple(one(part) for part in spec.split(" -> "))


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Block records: one record, many images
def block_example(x, y, spec):
    """One block record, serialized: the bytes of `x`, the bytes of `y`, and their `spec`."""
    values = {"x": np.ascontiguousarray(x).tobytes(), "y": np.ascontiguousarray(y).tobytes(),
              "spec": spec.encode()}
    feature = {name: tf.train.Feature(bytes_list=tf.train.BytesList(value=[value]))
               for name, value in values.items()}
    example = tf.train.Example(features=tf.train.Features(feature=feature))
    return example.SerializeToString(deterministic=True)


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Writing: a list of files, one record per block
def write_blocks(x, y, files, block_size=BLOCK_SIZE):
    """Write `x` and `y` (one row per example) as block records: a consecutive run of rows into
    each of `files` (the first ones a row longer where they do not divide evenly), one record per
    `block_size` rows."""
    spec = block_spec(x, y)
    for path, rows in zip(files, np.array_split(np.arange(len(x)), len(files))):
        with tf.io.TFRecordWriter(str(path)) as writer:
            for start in range(0, len(rows), block_size):   # one record per block
                block = rows[start:start + block_size]
                writer.write(block_example(x[block], y[block], spec))


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Reading: parse, mix, rebatch
def parse_block_fn(spec, source="these block records"):
    """A function for `dataset.map`: one block record -> `(x, y)`, its rows, once it has checked
    that the block holds `spec` and as many x as y."""
    (x_dtype, x_shape), (y_dtype, y_shape) = read_spec(spec)
    x_bytes = x_dtype.size * int(np.prod(x_shape))   # the bytes of one x, and of one y
    y_bytes = y_dtype.size * int(np.prod(y_shape))
    description = {name: tf.io.FixedLenFeature([], tf.string) for name in ("x", "y", "spec")}

    def parse(serialized):
        block = tf.io.parse_single_example(serialized, description)
        rows = tf.strings.length(block["y"]) // y_bytes
        checks = [tf.debugging.Assert(tf.equal(block["spec"], spec),
                                      [f"a block in {source} does not hold {spec}"]),
                  tf.debugging.Assert(tf.equal(tf.strings.length(block["x"]), rows * x_bytes),
                                      [f"a block in {source} does not hold one x per y"])]
        with tf.control_dependencies(checks):   # checked before its bytes are cut into rows
            x = tf.reshape(tf.io.decode_raw(block["x"], x_dtype), [-1, *x_shape])
            y = tf.reshape(tf.io.decode_raw(block["y"], y_dtype), [-1, *y_shape])
        return x, y

    return parse


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Reading: parse, mix, rebatch
def mix_images(x, y, seed=None):
    """A window of rows (images) and their targets, shuffled together with one gather."""
    order = tf.random.shuffle(tf.range(tf.shape(y)[0]), seed=seed)
    return tf.gather(x, order), tf.gather(y, order)

def block_layout(file):
    """The spec and the block size of the block records in `file`, read from its first block."""
    first = next(iter(tf.data.TFRecordDataset(str(file))))
    spec = tf.train.Example.FromString(first.numpy()).features.feature["spec"]
    spec = spec.bytes_list.value[0].decode()
    return spec, int(parse_block_fn(spec)(first)[1].shape[0])


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: Reading: parse, mix, rebatch
def read_blocks(files, batch_size=256, *, count=None, shuffle=False, mix_blocks=8,
                shuffle_blocks=64, parallel_reads=4, read_size=2**20, seed=None):
    """`(x, y)` batches from the block records in `files`; `count`, the rows they hold, gives
    tf.data and Keras the epoch's length; `read_size`, the bytes of each read from a file (1 MiB:
    a read from the disk then costs less CPU than with TensorFlow's 256 KiB)."""
    spec, block_size = block_layout(files[0])
    parse = parse_block_fn(spec)
    names = tf.data.Dataset.from_tensor_slices([str(f) for f in files])
    records = lambda name: tf.data.TFRecordDataset(name, buffer_size=read_size)
    if not shuffle:   # the written order
        ds = names.flat_map(records).map(parse, num_parallel_calls=tf.data.AUTOTUNE)
    else:
        window = block_size * mix_blocks                          # rows mixed together
        ds = (names.shuffle(len(files), seed=seed)                # a new file order each epoch
              .interleave(records, cycle_length=parallel_reads,   # several files at once,
                          num_parallel_calls=parallel_reads,      # whichever block is
                          deterministic=False)                    # ready first
              .shuffle(shuffle_blocks, seed=seed)                 # the blocks
              .map(parse, num_parallel_calls=tf.data.AUTOTUNE)
              .rebatch(window))                                   # mix_blocks blocks mixed,
        if window != batch_size:   # unless one batch: the order in a batch changes no gradient
            ds = ds.map(lambda x, y: mix_images(x, y, seed), num_parallel_calls=tf.data.AUTOTUNE)
    ds = ds.rebatch(batch_size)   # the epoch's length: count / batch_size, rounded up
    return ds if count is None else ds.apply(
        tf.data.experimental.assert_cardinality(-(-count // batch_size)))


# ---------------- defined in notebooks/05_pipeline_profiling.ipynb, section: 2. The method: the pipeline alone, the model alone, both together
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
    """tf.data options that run a pipeline as TensorFlow 1.x ran it: no automatic parallel map,
    map-and-batch fusion or final prefetch."""
    options = tf.data.Options()
    options.experimental_optimization.map_parallelization = False
    options.experimental_optimization.map_and_batch_fusion = False
    options.experimental_optimization.inject_prefetch = False
    return options

def article_pipeline(files, n_records, batch_size, shuffle_buffer=10_000):
    """The older article's train.py input: files in order, per-record parse, shuffle, batch."""
    return (tf.data.TFRecordDataset(files)
            .apply(tf.data.experimental.assert_cardinality(n_records))   # the manifest's count
            .map(parse_float_record)
            .shuffle(shuffle_buffer)
            .batch(batch_size)
            .with_options(tf1_options()))
