"""How much of a batch of token sequences is padding, counted batch by batch (notebooks/99_choosing_for_your_data.ipynb).

Sequences of different lengths become one tensor by padding: `padded_batch` fills each with 0 up to the longest of
its batch. With token ids from 1 up (0 kept for padding, as `keras.layers.Embedding(mask_zero=True)` expects), a
batch's non-zero positions are its tokens and the rest is padding: a count, the same every run. A ragged batch
(`tf.RaggedTensor`) holds no padding. The padded share is the part of the work that a layer running over every
position spends on nothing.

>>> import tensorflow as tf
>>> count = count_padding([(tf.constant([[5, 6, 7], [8, 0, 0]]), tf.constant([0, 1]))])
>>> count.tokens, count.positions, f"{count.share:.2f}"
(4, 6, '0.33')
"""
from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from helpers.measure.report import table


@dataclass(frozen=True)
class Padding:
    """What one pass over some batches of (tokens, labels) held."""

    batches: int
    sequences: int
    tokens: int      # the sequences' own tokens: the non-zero positions
    positions: int   # every position of every batch, padding included

    @property
    def share(self) -> float:
        """The share of positions that are padding."""
        return 1 - self.tokens / self.positions if self.positions else 0.0


def count_padding(batches: Iterable) -> Padding:
    """Count one pass of `(tokens, labels)` batches: dense ones padded with 0, or ragged ones (no padding).
    A zero token inside a ragged batch is refused: 0 is the padding, so ids start from 1."""
    import tensorflow as tf

    batches_seen = sequences = tokens = positions = 0
    for x, _ in batches:
        values = x.flat_values if isinstance(x, tf.RaggedTensor) else x
        non_zero, size = int(tf.math.count_nonzero(values)), int(tf.size(values))
        if isinstance(x, tf.RaggedTensor) and non_zero != size:
            raise ValueError("a ragged batch holds token 0: token ids start from 1 (0 is the padding)")
        batches_seen, sequences = batches_seen + 1, sequences + int(x.shape[0])
        tokens, positions = tokens + non_zero, positions + size
    return Padding(batches_seen, sequences, tokens, positions)


def padding_table(ways: Mapping[str, Iterable | Padding]) -> dict[str, Padding]:
    """Count each way of batching the same sequences (or take its `Padding`, counted already), print one row each,
    and return the counts by name.

    >>> import tensorflow as tf
    >>> counts = padding_table({"padded": [(tf.constant([[5, 6], [7, 0]]), tf.constant([0, 1]))]})
    way     batches  sequences  tokens  positions  padded share
    padded        1          2       3          4           25%
    >>> _ = padding_table({"counted": counts["padded"]})   # a count made already: printed as it is
    way      batches  sequences  tokens  positions  padded share
    counted        1          2       3          4           25%
    """
    counts = {name: batches if isinstance(batches, Padding) else count_padding(batches)
              for name, batches in ways.items()}
    table({name: {"batches": c.batches, "sequences": c.sequences, "tokens": c.tokens, "positions": c.positions,
                  "padded share": c.share} for name, c in counts.items()},
          fmt={"batches": ",d", "sequences": ",d", "tokens": ",d", "positions": ",d", "padded share": ".0%"},
          first="way")
    return counts
