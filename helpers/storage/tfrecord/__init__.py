"""Sharded TFRecord files of (image, label) records, with a manifest, atomic writes and resume.

Write:  `write_shards(zip(images, labels), "data/mnist-tfrecord", "train", num_shards=4, total=len(images))`
Read:   `read_split("data/mnist-tfrecord", "train", batch_size=128)`
Check:  `verify_shards("data/mnist-tfrecord")`

Files are named `{split}-{index:05d}-of-{N:05d}.tfrecord`; `manifest.json` beside them records,
per split, the record count of every shard and in total, the feature spec, the encoding, the
compression and checksums, so a reader never hard-codes how many records there are.

One module per job, the way TensorFlow Datasets separates its serializer, shard layout and writer:

- `format`: the feature spec, encoders (record → bytes) and parsers (bytes → tensors);
- `manifest`: shard names and `manifest.json`;
- `write`: `write_shards`;
- `read`: `read_split`;
- `check`: `count_records`, `verify_shards`.

Block records (a block of images per record) are notebook 05's: `write_blocks` and `read_blocks` in
`helpers.lessons.pipeline_profiling`, their file plumbing in `helpers.storage.blocks`.

Everything public is importable from `helpers.storage.tfrecord` itself.
"""
from helpers.storage.files import fingerprint_arrays
from helpers.storage.tfrecord.check import ShardReport, count_records, scan_file, short_tf_error, verify_shards
from helpers.storage.tfrecord.format import (ENCODINGS, FLOAT_LIST_DTYPES, FeatureSpec, RawExampleEncoder, ShardError,
                                     example_from_float_list, example_from_png, example_from_raw, example_from_tensor,
                                     make_encoder, parse_batch_fn, parse_example_fn)
from helpers.storage.tfrecord.manifest import (COMPRESSIONS, MANIFEST, ShardInfo, SplitManifest, load_manifest,
                                       read_manifest, shard_name)
from helpers.storage.tfrecord.read import DamagedShardsWarning, check_shard_files, read_split
from helpers.storage.tfrecord.write import shard_sizes, write_shards

__all__ = [
    "COMPRESSIONS", "ENCODINGS", "FLOAT_LIST_DTYPES", "MANIFEST", "DamagedShardsWarning", "FeatureSpec",
    "RawExampleEncoder", "ShardError", "ShardInfo", "ShardReport", "SplitManifest", "check_shard_files",
    "count_records", "example_from_float_list", "example_from_png", "example_from_raw", "example_from_tensor",
    "fingerprint_arrays", "load_manifest", "make_encoder", "parse_batch_fn", "parse_example_fn", "read_manifest",
    "read_split", "scan_file", "shard_name", "shard_sizes", "short_tf_error", "verify_shards", "write_shards",
]
