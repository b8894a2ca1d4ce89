# Notebook 05's saved code, pasted into an empty file, on plain inputs: a small split of block records written
# with write_blocks into files of a temporary folder and read back by read_blocks, in order and shuffled; float rows
# with float targets; a block of another spec refused. (Timelines and cold reads are measuring tools, in
# helpers/measure, not saved lesson code.)
import tempfile
from pathlib import Path

n, batch = 1_003, 64
rng = np.random.default_rng(0)
images = rng.integers(0, 256, (n, 28, 28), dtype=np.uint8)
labels = np.arange(n, dtype=np.int64)   # each label is its image's position: every record once is checkable

with tempfile.TemporaryDirectory() as folder:
    files = [Path(folder) / f"train-{i}.blocks.tfrecord" for i in range(3)]
    write_blocks(images, labels, files, block_size=100)
    assert block_layout(files[0]) == ("uint8 (28, 28) -> int64 ()", 100)

    ordered = read_blocks(files, batch, count=n)
    assert len(ordered) == 16, len(ordered)                    # 15 batches of 64 and one of 43
    x, y = (np.concatenate([part.numpy() for part in parts]) for parts in zip(*ordered))
    assert np.array_equal(x, images) and np.array_equal(y, labels), "unshuffled: the written order"

    shuffled = read_blocks(files, batch, count=n, shuffle=True, mix_blocks=3, shuffle_blocks=4)
    epochs = []
    for _ in range(2):
        batches = list(shuffled)
        assert [len(b[1]) for b in batches] == [64] * 15 + [43]
        x, y = (np.concatenate([part.numpy() for part in parts]) for parts in zip(*batches))
        assert sorted(y.tolist()) == list(range(n)), "every record once per epoch"
        assert np.array_equal(x, images[y]), "each image with its own label"
        epochs.append(y)
    assert not np.array_equal(epochs[0], labels) and not np.array_equal(*epochs), "a new order every epoch"
    first = next(iter(shuffled))[1].numpy()
    assert len({int(v) // 100 for v in first}) > 1, "a shuffled batch draws from several blocks"

    short = read_blocks(files, batch, count=n + batch)           # a count the files do not hold
    try:
        list(short)
        raise AssertionError("an epoch shorter than its count went unnoticed")
    except tf.errors.OpError as error:
        assert "expected" in str(error), error

    rows = rng.normal(size=(300, 12)).astype(np.float32)       # tabular rows, float targets
    targets = rng.normal(size=(300, 2)).astype(np.float32)
    table = [Path(folder) / f"rows-{i}.blocks.tfrecord" for i in range(2)]
    write_blocks(rows, targets, table, block_size=64)
    x, y = (np.concatenate([p.numpy() for p in parts]) for parts in zip(*read_blocks(table, 50, count=300)))
    assert x.dtype == np.float32 and y.dtype == np.float32 and y.shape == (300, 2)
    assert np.array_equal(x, rows) and np.array_equal(y, targets)

    wrong = parse_block_fn("uint8 (28, 27) -> int64 ()")         # the wrong spec: refused, not cut wrongly
    try:
        wrong(next(iter(tf.data.TFRecordDataset(str(files[0])))))
        raise AssertionError("a block of another spec was parsed")
    except tf.errors.InvalidArgumentError as error:
        assert "does not hold uint8 (28, 27)" in str(error), error

print("notebook 05's saved code works on its own")
