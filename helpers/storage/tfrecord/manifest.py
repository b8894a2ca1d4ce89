"""The shard layout: file names, and `manifest.json`, which says what each split's shards hold.

`manifest.json` records, per split, the record count of every shard and in total, the feature
spec, the encoding, the compression, a SHA-256 of every file and of the records in it. Nothing
in it is trusted as a path: a shard's file name must be exactly the name its split and index
give, or the manifest is refused. Writers add each finished shard under a lock, so writers of
different splits, and of different shards of one split, can share a folder.
"""
from __future__ import annotations

import json
import re
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path

from helpers.storage.files import FileLock, atomic_write_text, check_name, temporaries_of
from helpers.storage.tfrecord.format import ENCODINGS, FeatureSpec, ShardError

MANIFEST = "manifest.json"
MANIFEST_LOCK = ".manifest.lock"
COMPRESSIONS = (None, "GZIP")
FORMAT = "bigger-than-memory tfrecord shards"
# Records the caller serialized itself (its own `tf.train.Example` layout, e.g. JPEG bytes of any size):
# written and checked like the others, but only the caller's own parser reads them, not `read_split`.
SERIALIZED = "serialized"
KNOWN_ENCODINGS = (*ENCODINGS, SERIALIZED)


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


def shard_index(split: str, file: str, num_shards: int) -> int | None:
    """The index `file` has as a shard of `split` in `num_shards`, or None if it is no such shard's name.

    >>> shard_index("train", "train-00003-of-00008.tfrecord", 8), shard_index("train", "../x", 8)
    (3, None)
    """
    match = re.fullmatch(rf"{re.escape(split)}-(\d{{5,}})-of-\d{{5,}}\.tfrecord", file)
    index = int(match[1]) if match else None
    return index if index is not None and index < num_shards and shard_name(split, index, num_shards) == file else None


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
    if split.encoding not in KNOWN_ENCODINGS or split.compression not in COMPRESSIONS:
        raise ValueError(f"split {name!r}: unknown encoding {split.encoding!r} or compression {split.compression!r}")
    split.spec  # noqa: B018 -- raises for a malformed feature spec
    if not (_is_count(split.num_shards) and split.num_shards >= 1 and _is_count(split.total_records)):
        raise ValueError(f"split {name!r}: num_shards and total_records must be whole numbers")
    if len(split.shards) > split.num_shards:
        raise ValueError(f"split {name!r} lists {len(split.shards)} shards but num_shards is {split.num_shards}")
    after = -1   # shards are listed by index; writers of different shards may finish them in any order
    for position, info in enumerate(split.shards):
        index = shard_index(name, info.file, split.num_shards) if isinstance(info.file, str) else None
        if index is None or index <= after:  # never a path taken from the file: only a name we would give it
            expected = shard_name(name, after + 1, split.num_shards)
            raise ValueError(f"shard entry {position} of split {name!r} is called {info.file!r}, but must be "
                             f"{expected!r} or a later shard's name")
        after = index
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


def read_manifest(directory: str | Path, split: str, *, serialized: bool = False) -> SplitManifest:
    """One split's manifest; a clear error if it is missing or the split was never finished.

    A split of records the caller serialized itself is refused unless `serialized=True`: only the
    caller's own parser can read it (a reader that asks for the manifest says it knows that)."""
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
    if manifest.encoding == SERIALIZED and not serialized:
        raise ShardError(f"split {split!r} in {directory} holds records their writer serialized itself (encoding "
                         f"{SERIALIZED!r}): read_split cannot parse them. Read its files with the parser of the code "
                         f"that wrote them (read_manifest(..., serialized=True).files(directory) lists them).")
    return manifest


def update_split(directory: str | Path, fresh: SplitManifest, *, add=(), drop=(), replaces: tuple | None = None,
                 ) -> SplitManifest:
    """Under the manifest's lock: put the shards `add` into the split's entry and take out the files named in
    `drop`, leaving every other shard and split as it is; the entry is complete once it lists every shard.

    The entry on disk must have `fresh`'s settings, or be missing (then `fresh`, without shards, starts it), or
    have the settings `replaces` (an overwrite: it is started afresh). Anything else means another writer
    changed the split meanwhile: `ShardError`. The file is replaced atomically. Returns the entry written.
    """
    path = manifest_path(directory)
    with FileLock(Path(directory) / MANIFEST_LOCK, f"the manifest {path}", wait=True):
        for stale in temporaries_of(path):
            stale.unlink(missing_ok=True)  # a writer killed while saving; no one else is saving now
        splits = load_manifest(directory)
        current = splits.get(fresh.split)
        if current is None or current.settings() != fresh.settings():
            if current is not None and current.settings() != replaces:
                raise ShardError(
                    f"split {fresh.split!r} in {directory} was written with other settings by another writer while "
                    f"this one ran (now {current.settings()}). Run one write of the split at a time with these settings.")
            current = replace(fresh, shards=[], complete=False)
        shards = {s.file: s for s in current.shards if s.file not in drop} | {s.file: s for s in add}
        current.shards = sorted(shards.values(), key=lambda s: shard_index(fresh.split, s.file, fresh.num_shards))
        current.complete = len(current.shards) == current.num_shards
        splits[fresh.split] = current
        doc = {"format": FORMAT, "version": 2, "splits": {k: asdict(v) for k, v in splits.items()}}
        atomic_write_text(path, json.dumps(doc, indent=1))
    return current
