# Notebook 99's saved code, pasted into an empty file, on plain inputs: token records of varying length written
# to a temporary file, batched padded and bucketed; every sequence comes back whole, padded with 0 to its batch's
# longest, and a bucket's batch holds only lengths of its range.
import tempfile
from pathlib import Path

rng = np.random.default_rng(1)
lengths = [1, 2, 3, 5, 8, 9, 10, 12, 30, 31, 40, 7, 2, 33, 4, 11, 35]
sequences = [rng.integers(1, 500, n) for n in lengths]
with tempfile.TemporaryDirectory() as folder:
    path = Path(folder) / "tokens.tfrecord"
    with tf.io.TFRecordWriter(str(path)) as writer:
        for label, tokens in enumerate(sequences):
            writer.write(token_record(tokens, label))

    tokens, label = parse_tokens(next(iter(tf.data.TFRecordDataset([str(path)]))))
    assert tokens.dtype == tf.int64 and tokens.numpy().tolist() == sequences[0].tolist() and int(label) == 0

    def unpadded(batches):
        """{label: its tokens without the padding}, and each batch's (width, lengths in it)."""
        found, shapes = {}, []
        for x, y in batches:
            x, y = x.numpy(), y.numpy()
            widths = [int(np.count_nonzero(row)) for row in x]
            assert x.shape[1] == max(widths), "a batch pads to its longest sequence, no further"
            for row, n, label in zip(x, widths, y):
                assert not row[n:].any(), "padding is 0, after the tokens"
                found[int(label)] = row[:n].tolist()
            shapes.append((x.shape[1], widths))
        return found, shapes

    everything = {label: tokens.tolist() for label, tokens in enumerate(sequences)}
    padded, padded_shapes = unpadded(length_batches([path], 4))
    assert padded == everything and [len(w) for _, w in padded_shapes] == [4, 4, 4, 4, 1]
    boundaries = [6, 20]
    bucketed, bucket_shapes = unpadded(length_batches([path], 4, boundaries))
    assert bucketed == everything
    for width, widths in bucket_shapes:   # one bucket per batch: below 6, 6 to 19, 20 and up
        assert len({sum(n >= b for b in boundaries) for n in widths}) == 1, widths
    positions = lambda shapes: sum(width * len(widths) for width, widths in shapes)
    assert positions(bucket_shapes) < positions(padded_shapes), "buckets pad less here"
    shuffled, _ = unpadded(length_batches([path], 4, boundaries, shuffle_buffer=17))
    assert shuffled == everything
print("notebook 99's saved code: every sequence back whole, padded and bucketed")
