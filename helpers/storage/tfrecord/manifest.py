"""The shard layout: file names, and `manifest.json`, which says what each split's shards hold.

`manifest.json` records, per split, the record count of every shard and in total, the feature
spec, the encoding, the compression, a SHA-256 of every file and of the records in it. Nothing
in it is trusted as a path: a shard's file name must be exactly the name its split and index
give, or the manifest is refused. Writers update it under a lock, so writers of different
splits can share a folder.
"""
from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

from helpers.storage.files import FileLock, atomic_write_text, check_name, temporaries_of
from helpers.storage.tfrecord.format import ENCODINGS, FeatureSpec, ShardError

MANIFEST = "manifest.json"
MANIFEST_LOCK = ".manifest.lock"
COMPRESSIONS = (None, "GZIP")
FORMAT = "bigger-than-memory tfrecord shards"


@dataclass
class ShardInfo:
    """One shard file: its name, record count, size, the file's SHA-256, and the SHA-256 of its records."""

    file: str
    records: int
    bytes: int
    sha256: str
    records_sha256: str | None = None  # what the input gave for this shard; lets a resume prove it is the same data


@dataclass
class SplitManifest:
    """Everything a reader needs to know about one split's shards."""

    split: str
    encoding: str
    compression: str | None
    feature_spec: dict
    num_shards: int
    total_records: int
    fingerprint: str | None = None
    shards: list[ShardInfo] = field(default_factory=list)
    complete: bool = False

    @property
    def spec(self) -> FeatureSpec:
        return FeatureSpec.from_json(self.feature_spec)

    def files(self, directory: str | Path) -> list[str]:
        return [str(Path(directory) / s.file) for s in self.shards]

    def settings(self) -> tuple:
        return (self.encoding, self.compression, self.feature_spec, self.num_shards, self.total_records, self.fingerprint)


def check_split_name(split: str) -> str:
    """A split name becomes part of file names, so it must be one plain name (`train`, `test`, …)."""
    try:
        return check_name(split, "split name")
    except ValueError as e:
        raise ShardError(str(e)) from None


def shard_name(split: str, index: int, num_shards: int) -> str:
    """`{split}-{index:05d}-of-{num_shards:05d}.tfrecord`.

    >>> shard_name("train", 3, 8)
    'train-00003-of-00008.tfrecord'
    """
    return f"{check_split_name(split)}-{index:05d}-of-{num_shards:05d}.tfrecord"


def manifest_path(directory: str | Path) -> Path:
    """`directory/manifest.json`."""
    return Path(directory) / MANIFEST


def _is_count(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _split_from_json(name: str, entry: dict) -> SplitManifest:
    """One split's entry, checked field by field; a `ValueError` says what is wrong."""
    check_split_name(name)
    entry = dict(entry)
    shards = [ShardInfo(**s) for s in entry.pop("shards")]
    split = SplitManifest(**entry, shards=shards)
    if split.split != name:
        raise ValueError(f"the entry for split {name!r} says it is split {split.split!r}")
    if split.encoding not in ENCODINGS or split.compression not in COMPRESSIONS:
        raise ValueError(f"split {name!r}: unknown encoding {split.encoding!r} or compression {split.compression!r}")
    split.spec  # noqa: B018 -- raises for a malformed feature spec
    if not (_is_count(split.num_shards) and split.num_shards >= 1 and _is_count(split.total_records)):
        raise ValueError(f"split {name!r}: num_shards and total_records must be whole numbers")
    if len(split.shards) > split.num_shards:
        raise ValueError(f"split {name!r} lists {len(split.shards)} shards but num_shards is {split.num_shards}")
    for index, info in enumerate(split.shards):
        expected = shard_name(name, index, split.num_shards)
        if info.file != expected:  # never a path taken from the file: only the name we would give it
            raise ValueError(f"shard {index} of split {name!r} is called {info.file!r}, but must be {expected!r}")
        if not (_is_count(info.records) and _is_count(info.bytes) and isinstance(info.sha256, str)):
            raise ValueError(f"shard {info.file}: records, bytes and sha256 are malformed")
    if split.complete:
        written = [info.records for info in split.shards]
        if len(written) != split.num_shards or sum(written) != split.total_records:
            raise ValueError(f"split {name!r} says total_records={split.total_records:,} in {split.num_shards} shards, "
                             f"but its {len(written)} shards list {sum(written):,} records")
    return split


def load_manifest(directory: str | Path) -> dict[str, SplitManifest]:
    """All splits described by `directory/manifest.json` (empty if there is none yet).

    A manifest that is not valid JSON, or whose entries are malformed (including a shard file
    name other than the one its split and index give), raises `ShardError` naming the file.
    """
    path = manifest_path(directory)
    if not path.exists():
        return {}
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(raw, dict) or not isinstance(raw.get("splits"), dict):
            raise ValueError("it has no 'splits' object")
        return {name: _split_from_json(name, entry) for name, entry in raw["splits"].items()}
    except (ValueError, KeyError, TypeError, AttributeError, RecursionError, ShardError) as e:
        raise ShardError(
            f"{path} is not a valid shard manifest ({type(e).__name__}: {e}). Delete it and the shards beside it "
            f"and write them again with write_shards()."
        ) from None


def read_manifest(directory: str | Path, split: str) -> SplitManifest:
    """One split's manifest; a clear error if it is missing or the split was never finished."""
    check_split_name(split)
    splits = load_manifest(directory)
    if split not in splits:
        known = ", ".join(splits) or "none"
        raise ShardError(f"{manifest_path(directory)} has no split {split!r} (splits there: {known}). "
                         f"Write it with write_shards().")
    manifest = splits[split]
    if not manifest.complete:
        raise ShardError(
            f"split {split!r} in {directory} is incomplete ({len(manifest.shards)} of {manifest.num_shards} "
            f"shards written): run the same write_shards() call again to resume it."
        )
    return manifest


def save_split(directory: str | Path, manifest: SplitManifest) -> None:
    """Put one split's entry into `manifest.json`, leaving the other splits' entries as they are.

    The read-modify-write happens under a lock file, so writers of different splits in one
    folder never lose each other's entries, and the file is replaced atomically.
    """
    path = manifest_path(directory)
    with FileLock(Path(directory) / MANIFEST_LOCK, f"the manifest {path}", wait=True):
        for stale in temporaries_of(path):
            stale.unlink(missing_ok=True)  # a writer killed while saving; no one else is saving now
        splits = load_manifest(directory)
        splits[manifest.split] = manifest
        doc = {"format": FORMAT, "version": 2, "splits": {k: asdict(v) for k, v in splits.items()}}
        atomic_write_text(path, json.dumps(doc, indent=1))
