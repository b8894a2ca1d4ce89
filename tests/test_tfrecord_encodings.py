"""helpers.measure.tfrecord_encodings: notebook 02's comparison writes every variant, reads it back, sizes it, and
reports each time against raw bytes' with the verdict rule; the article's writer writes what the article wrote."""
import matplotlib
import numpy as np
import pytest
import tensorflow as tf

from helpers.measure import tfrecord_encodings as enc

matplotlib.use("Agg")


@pytest.fixture(scope="module")
def measured(tmp_path_factory):
    images = np.random.default_rng(0).integers(0, 256, size=(30, 28, 28), dtype=np.uint8)
    images[:, :14] = 0   # half black, as digits are: GZIP has something to save
    labels = np.arange(30) % 10
    return images, enc.compare_encodings(images, labels, tmp_path_factory.mktemp("enc"), rounds=2, read_passes=2)


def test_every_variant_is_written_sized_and_timed(measured):
    _, result = measured
    assert set(result.bytes_per_record) == set(enc.VARIANTS) and result.pixel_bytes == 784
    sizes = result.bytes_per_record
    assert 784 < sizes["raw"] < 1.1 * 784 and 3.5 < sizes["float_list"] / sizes["raw"] < 4.5
    assert sizes["raw + GZIP"] < sizes["raw"] and sizes["float_list + GZIP"] < sizes["float_list"]
    for timings in (result.writes, result.reads):
        assert all(len(timings.values[name]) == 2 for name in enc.VARIANTS)
    assert result.against_raw(result.writes, "raw").values == (1.0, 1.0)


def test_the_reads_go_over_every_record_as_often_as_asked(measured, tmp_path):
    images, result = measured
    labels = np.arange(30) % 10
    from helpers.storage.tfrecord import write_shards

    write_shards(zip(images, labels), tmp_path, "train", 1, total=30, encoding="tensor", compression="GZIP",
                 progress=False)
    batches = list(enc.read_pass(tmp_path, passes=2).as_numpy_iterator())
    got = np.concatenate([x for x, _ in batches])
    assert np.array_equal(got, np.concatenate([images, images]))


def test_the_table_gives_no_verdict_from_two_rounds(measured, capsys):
    _, result = measured
    result.table()
    printed = capsys.readouterr().out
    assert "too few rounds to tell" in printed and "slower here" not in printed
    assert all(name in printed for name in enc.VARIANTS)


def test_the_chart_draws_sizes_and_both_timings(measured, monkeypatch):
    import matplotlib.pyplot as plt

    _, result = measured
    monkeypatch.setattr(plt, "show", lambda: None)
    result.chart("test")
    fig = plt.gcf()
    assert [ax.get_title() for ax in fig.axes][:2] == ["Size on disk", "Time ÷ raw bytes' time, paired by round"]
    plt.close(fig)


def test_the_article_writer_writes_floats_over_255_and_a_float_label(tmp_path):
    images, labels = np.full((3, 28, 28), 255, np.uint8), np.array([1, 2, 3])
    enc.article_writer(images, labels, str(tmp_path / "a.tfrecord"))
    records = [tf.train.Example.FromString(r.numpy()) for r in tf.data.TFRecordDataset(str(tmp_path / "a.tfrecord"))]
    assert [list(e.features.feature["y"].float_list.value) for e in records] == [[1.0], [2.0], [3.0]]
    assert all(list(e.features.feature["x"].float_list.value) == [1.0] * 784 for e in records)


def test_compare_writers_pairs_its_rounds_and_removes_what_it_wrote(tmp_path):
    images, labels = np.zeros((5, 28, 28), np.uint8), np.arange(5)
    (tmp_path / "mine.txt").write_text("not the comparison's")
    assert enc.compare_writers(images, labels, tmp_path, rounds=2).n == 2
    assert [p.name for p in tmp_path.iterdir()] == ["mine.txt"]
