"""Conversion at scale: an Apache Beam pipeline that writes the same TFRecord shards as `write_shards`.

`write_shards` converts on one machine, one record after another. For data that takes a single
machine days, TensorFlow Datasets builds datasets with Apache Beam: the conversion becomes a
pipeline (read source chunks → encode records → write shards) that a runner spreads over many
machines. The same pipeline runs here on Beam's DirectRunner (in this process, no download), and,
with other options, unchanged on Dataflow, Flink or Spark.

    images_path, labels_path = save_source(images, labels, "data/source")
    files = convert_with_beam(images_path, labels_path, "data/beam-shards", "train", num_shards=8)
    records_digest(files) == records_digest(helper_files)    # the same records, in any order

Records are encoded by the series' own encoder (`RawExampleEncoder`), so they are byte for byte
the records `write_shards` writes; only their order across shards differs.

Introduced in notebooks/06_scaling_out.ipynb.
"""
from __future__ import annotations

import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from helpers.files import check_name, file_problem, write_then_rename
from helpers.labels import class_labels
from helpers.processes import child_environment, exit_with_parent

CHUNK = 1_000  # records per unit of work: what a runner hands to one worker at a time


def save_source(images: np.ndarray, labels: np.ndarray, directory: str | Path,
                num_classes: int | None = None) -> tuple[Path, Path]:
    """Save images and labels as two `.npy` files, the "source records" a conversion reads; returns their paths.

    Labels are checked first (whole numbers from 0, below `num_classes` when given). Each file is
    written under a temporary name and renamed.
    Introduced in notebooks/06_scaling_out.ipynb.
    """
    images, labels = np.asarray(images), class_labels(labels, "save_source", num_classes)
    if len(images) != len(labels):
        raise ValueError(f"save_source: {len(images):,} images but {len(labels):,} labels")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    paths = directory / "images.npy", directory / "labels.npy"
    for path, array in zip(paths, (images, labels)):
        with write_then_rename(path) as tmp, open(tmp, "wb") as f:
            np.save(f, array)
    return paths


def _encode_chunks():
    import apache_beam as beam

    class EncodeChunk(beam.DoFn):
        """Records `start` to `start + CHUNK` of the source, encoded as serialized tf.train.Examples."""

        def __init__(self, images_path: str, labels_path: str) -> None:
            self.images_path, self.labels_path = images_path, labels_path

        def setup(self):  # once per worker: the encoder and the memory-mapped source
            from helpers.tfrecord import RawExampleEncoder

            self.encode = RawExampleEncoder()
            self.images = np.load(self.images_path, mmap_mode="r")
            self.labels = np.load(self.labels_path, mmap_mode="r")

        def process(self, start: int):
            for index in range(start, min(start + CHUNK, len(self.labels))):
                yield self.encode(np.asarray(self.images[index]), int(self.labels[index]))

    return EncodeChunk


def build_conversion(pipeline, images_path: str | Path, labels_path: str | Path, output_prefix: str,
                     num_shards: int):
    """Add the conversion to a Beam `pipeline`: chunk starts → encoded records → `num_shards` TFRecord files.

    Introduced in notebooks/06_scaling_out.ipynb.
    """
    import apache_beam as beam

    total = len(np.load(labels_path, mmap_mode="r"))
    return (pipeline
            | "Chunks" >> beam.Create(list(range(0, total, CHUNK)))
            | "Encode" >> beam.ParDo(_encode_chunks()(str(images_path), str(labels_path)))
            | "Write" >> beam.io.WriteToTFRecord(output_prefix, file_name_suffix=".tfrecord", num_shards=num_shards,
                                                 shard_name_template="-SSSSS-of-NNNNN"))


def check_source(images_path: str | Path, labels_path: str | Path, num_classes: int | None = None) -> int:
    """Check the source files before a conversion starts: both `.npy` arrays, one label for every image,
    labels whole numbers from 0 (below `num_classes` when given), images numeric. Returns the record count;
    each problem is a `ValueError` naming the file.

    Introduced in notebooks/06_scaling_out.ipynb.
    """
    arrays = []
    for path in (Path(images_path), Path(labels_path)):
        if (problem := file_problem(path)) is not None:
            raise ValueError(f"{path} is {problem}: save the source with save_source() first.")
        try:
            arrays.append(np.load(path, mmap_mode="r", allow_pickle=False))
        except (ValueError, OSError) as e:
            raise ValueError(f"{path} is not a .npy array ({e}).") from None
    images, labels = arrays
    class_labels(labels, str(labels_path), num_classes)
    if len(images) != len(labels):
        raise ValueError(f"{images_path} holds {len(images):,} images but {labels_path} {len(labels):,} labels: every "
                         f"image needs its label (none may be dropped).")
    if images.dtype.kind not in "biuf":
        raise ValueError(f"{images_path}: images must be numeric, not {images.dtype}.")
    return len(labels)


def convert_with_beam(images_path: str | Path, labels_path: str | Path, directory: str | Path, split: str,
                      num_shards: int = 8, beam_args: list[str] | None = None, timeout: float = 3600,
                      num_classes: int | None = None) -> list[Path]:
    """Launch the conversion as a Beam job (DirectRunner unless `beam_args` say otherwise); return the shard files.

    The job runs as its own Python process, `python -m helpers.beam_convert ...`, the way a Beam
    pipeline is launched from a script (in a notebook kernel, Beam would also load its interactive
    tools, which need pandas). It writes into a fresh temporary folder beside the output; only a
    pipeline that finished has its files renamed into place (`{split}-00000-of-0000N.tfrecord`,
    the names `write_shards` uses), so a failed run leaves no partial shards behind.
    Introduced in notebooks/06_scaling_out.ipynb.
    """
    check_name(split, "split name")
    check_source(images_path, labels_path, num_classes)   # before any worker starts: bad input fails here, by name
    command = [sys.executable, "-m", "helpers.beam_convert", str(images_path), str(labels_path), str(directory),
               split, str(num_shards), *(beam_args or ["--runner=DirectRunner"])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=child_environment())
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-6:])
        raise RuntimeError(f"the Beam conversion failed (exit {done.returncode}):\n{tail}")
    return [Path(line) for line in done.stdout.split("\n") if line.strip()]


def _run_conversion(images_path: str, labels_path: str, directory: str, split: str, num_shards: int,
                    beam_args: list[str]) -> list[Path]:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    check_name(split, "split name")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{split}-beam-", dir=directory))
    try:
        with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
            build_conversion(pipeline, images_path, labels_path, str(work / split), num_shards)
        written = sorted(work.glob(f"{split}-*-of-*.tfrecord"))
        if len(written) != num_shards:
            raise RuntimeError(f"Beam wrote {len(written)} shard files in {work}, expected {num_shards}")
        files = []
        for path in written:
            os.replace(path, directory / path.name)
            files.append(directory / path.name)
        return files
    finally:
        shutil.rmtree(work, ignore_errors=True)


def records_digest(files: list[str | Path]) -> tuple[int, str]:
    """How many records the files hold, and a SHA-256 of their sorted per-record hashes: equal for the
    same records in any order and any split into files.

    Introduced in notebooks/06_scaling_out.ipynb.
    """
    import tensorflow as tf

    hashes = sorted(hashlib.sha256(record).digest()
                    for record in tf.data.TFRecordDataset([str(f) for f in files]).as_numpy_iterator())
    return len(hashes), hashlib.sha256(b"".join(hashes)).hexdigest()


if __name__ == "__main__":
    exit_with_parent()
    images_arg, labels_arg, directory_arg, split_arg, shards_arg, *beam_arguments = sys.argv[1:]
    for written_file in _run_conversion(images_arg, labels_arg, directory_arg, split_arg, int(shards_arg),
                                        beam_arguments):
        print(written_file)
