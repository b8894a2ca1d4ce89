"""Padding counted (notebook 99): the tokens and every position of dense padded batches, ragged batches without
padding, and each way of batching the same sequences side by side."""
import numpy as np
import pytest
import tensorflow as tf

from helpers.measure.padding import count_padding, padding_table

SEQUENCES = [[3, 4, 5, 6, 7, 8], [9], [10, 11], [12, 13, 14, 15, 16, 17, 18, 19]]


def dataset():
    lengths = [len(s) for s in SEQUENCES]
    ragged = tf.RaggedTensor.from_row_lengths(np.concatenate(SEQUENCES), lengths)
    return tf.data.Dataset.from_tensor_slices((ragged, np.arange(len(SEQUENCES)))).map(lambda x, y: (x, y))


def test_padded_batches_count_their_tokens_and_every_position():
    count = count_padding(dataset().padded_batch(2))   # widths 6 and 8: 2×6 + 2×8 positions, 17 tokens
    assert (count.batches, count.sequences, count.tokens, count.positions) == (2, 4, 17, 28)
    assert count.share == pytest.approx(11 / 28)


def test_ragged_batches_hold_no_padding_and_refuse_a_zero_token():
    count = count_padding(dataset().ragged_batch(3))
    assert (count.batches, count.sequences, count.tokens, count.positions, count.share) == (2, 4, 17, 17, 0.0)
    zero = tf.RaggedTensor.from_row_lengths([1, 0, 2], [2, 1])
    with pytest.raises(ValueError, match="token ids start from 1"):
        count_padding([(zero, tf.constant([0, 1]))])
    assert count_padding([]).share == 0.0


def test_the_table_compares_ways_of_batching_the_same_sequences(capsys):
    counts = padding_table({"padded": dataset().padded_batch(4), "ragged": dataset().ragged_batch(4)})
    assert counts["padded"].positions == 4 * 8 and counts["ragged"].share == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].split() == ["way", "batches", "sequences", "tokens", "positions", "padded", "share"]
    assert out[1].split() == ["padded", "1", "4", "17", "32", "47%"] and out[2].split()[-1] == "0%"
