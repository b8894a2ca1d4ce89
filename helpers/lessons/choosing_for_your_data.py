# Generated from notebooks/99_choosing_for_your_data.ipynb by `python -m tools.notebooks save`: do not edit by hand.
# Change the notebook's `#@save` cells and run that command again (a test fails while the two differ).
"""99 · Choosing for your data: which format, which reader, which settings: the code its lesson writes, saved for later notebooks, tests and benchmarks."""
import tensorflow as tf


# ---------------- defined in notebooks/99_choosing_for_your_data.ipynb, section: 2. Records of varying length
def token_record(tokens, label):
    """A serialized tf.train.Example: token ids from 1 up (0 is the padding), any number of
    them, and a whole-number label."""
    feature = {"tokens": tf.train.Feature(int64_list=tf.train.Int64List(value=tokens)),
               "label": tf.train.Feature(int64_list=tf.train.Int64List(value=[label]))}
    return tf.train.Example(features=tf.train.Features(feature=feature)).SerializeToString()


def parse_tokens(serialized):
    """One record -> (its tokens: a 1-D int64 tensor as long as the sequence; its label)."""
    features = tf.io.parse_single_example(serialized, {
        "tokens": tf.io.VarLenFeature(tf.int64), "label": tf.io.FixedLenFeature([], tf.int64)})
    return tf.sparse.to_dense(features["tokens"]), features["label"]


def length_batches(files, batch_size, boundaries=None, shuffle_buffer=0):
    """(tokens, labels) batches from token records, each padded with 0 to its longest sequence;
    with `boundaries` (ascending lengths), sequences of similar length share a batch."""
    ds = tf.data.TFRecordDataset([str(f) for f in files])
    if shuffle_buffer:   # before bucketing, or each bucket keeps the files' order
        ds = ds.shuffle(shuffle_buffer)
    ds = ds.map(parse_tokens, num_parallel_calls=tf.data.AUTOTUNE)
    if boundaries is None:
        return ds.padded_batch(batch_size)
    return ds.bucket_by_sequence_length(lambda tokens, label: tf.shape(tokens)[0], boundaries,
                                        [batch_size] * (len(boundaries) + 1))
