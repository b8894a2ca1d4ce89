"""Sharded TFRecord files of (image, label) records, with a manifest, atomic writes and resume.

    write_shards(zip(images, labels), "data/mnist-tfrecord", "train", num_shards=4, total=len(images))
    verify_shards("data/mnist-tfrecord");  readable_shards("data/mnist-tfrecord", "train")  # files, counts, checked

Files are `{split}-{index:05d}-of-{N:05d}.tfrecord`; `manifest.json` beside them records per split each shard's
record count, the feature spec, encoding, compression and checksums. Modules: `format` (spec, encoders, decoders),
`manifest`, `write`, `read` (the checked files a pipeline reads, and `read_split`: notebook 04's pipeline with
these checks around it), `check`; the main names are importable from here.
"""
from helpers.storage.files import fingerprint_arrays
from helpers.storage.tfrecord.check import count_records, scan_file, short_tf_error, verify_shards
from helpers.storage.tfrecord.format import (FLOAT_LIST_DTYPES, FeatureSpec, RawExampleEncoder, ShardError,
                                             example_from_raw, parse_batch_fn)
from helpers.storage.tfrecord.manifest import load_manifest, read_manifest, shard_name
from helpers.storage.tfrecord.read import (DamagedShardsWarning, ReadableShards, exact_length, read_split,
                                          readable_shards)
from helpers.storage.tfrecord.write import shard_sizes, write_shards
