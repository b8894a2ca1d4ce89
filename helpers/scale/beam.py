"""Running notebook 06's Apache Beam conversion (`build_conversion`, in `helpers.lessons.scaling_out`) as a job of
its own: saving and checking the source, and the launcher.

    files = convert_with_beam(*save_source(images, labels, "data/source"), "data/beam-shards", "train", num_shards=8,
                              chunk=1_000)   # records per unit of work
    beam_unavailable()   # None, or why not (Beam not installed) in one sentence: notebook 06 §5 then skips
"""
from __future__ import annotations

import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

from helpers.storage.files import check_name, file_problem, write_then_rename
from helpers.storage.labels import class_labels
from helpers.setup.processes import child_environment, exit_with_parent, skip_unused_imports


def beam_unavailable() -> str | None:
    """Why notebook 06's Beam conversion cannot run here (one sentence, with what to do), or None when Apache Beam is
    installed. Asks the installed packages only (no import: importing Beam in a notebook kernel loads its interactive
    tools), so an installed but broken Beam still fails in `convert_with_beam`, naming its error.

    >>> beam_unavailable() is None or "pip install" in beam_unavailable()
    True
    """
    import importlib.util

    if importlib.util.find_spec("apache_beam") is not None:
        return None
    return ("Apache Beam is not installed here, so this section's conversion is skipped: install it with "
            "pip install -e \".[scale]\" (if that fails, the tested versions: pip install -r requirements.txt -c "
            "constraints.txt, on Python 3.11), or run this notebook on Colab, whose first cell installs it.")


def save_source(images: np.ndarray, labels: np.ndarray, directory: str | Path,
                num_classes: int | None = None) -> tuple[Path, Path]:
    """Save images and labels (checked: whole numbers from 0, below `num_classes` when given) as two `.npy` files,
    each atomically: the "source records" a conversion reads. Returns their paths."""
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


def check_source(images_path: str | Path, labels_path: str | Path, num_classes: int | None = None) -> int:
    """Check the source files before a conversion starts: both `.npy` arrays, one label for every image, labels
    whole numbers from 0 (below `num_classes`), images numeric. Returns the record count; each problem is a
    `ValueError` naming the file."""
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
                      num_classes: int | None = None, chunk: int = 1_000) -> list[Path]:
    """Run the conversion as a Beam job (DirectRunner unless `beam_args` say otherwise) in a process of its own
    (in a notebook kernel Beam would load its interactive tools, which need pandas), `chunk` records per unit of
    work; return the shard files. Only a finished job's files are renamed into place from a temporary folder: a
    failed run leaves no partial shard."""
    check_name(split, "split name")
    if not isinstance(chunk, int) or isinstance(chunk, bool) or chunk < 1:
        raise ValueError(f"convert_with_beam: chunk is a whole number of records, at least 1, not {chunk!r}")
    check_source(images_path, labels_path, num_classes)   # before any worker starts: bad input fails here, by name
    command = [sys.executable, "-m", "helpers.scale.beam", str(images_path), str(labels_path), str(directory),
               split, str(num_shards), str(chunk), *(beam_args or ["--runner=DirectRunner"])]
    done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, env=child_environment(gpu=False))   # conversion: CPU work
    if done.returncode != 0:
        tail = "\n".join(done.stderr.strip().splitlines()[-6:])
        raise RuntimeError(f"the Beam conversion failed (exit {done.returncode}):\n{tail}")
    return [Path(line) for line in done.stdout.split("\n") if line.strip()]


def _run_conversion(images_path: str, labels_path: str, directory: str, split: str, num_shards: int, chunk: int,
                    beam_args: list[str]) -> list[Path]:
    import apache_beam as beam
    from apache_beam.options.pipeline_options import PipelineOptions

    from helpers.lessons.scaling_out import build_conversion   # the pipeline notebook 06 writes

    check_name(split, "split name")
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    work = Path(tempfile.mkdtemp(prefix=f".{split}-beam-", dir=directory))
    try:
        with beam.Pipeline(options=PipelineOptions(beam_args)) as pipeline:
            build_conversion(pipeline, images_path, labels_path, str(work / split), num_shards, chunk)
        written = sorted(work.glob(f"{split}-*-of-*.tfrecord"))
        if len(written) != num_shards:
            raise RuntimeError(f"Beam wrote {len(written)} shard files in {work}, expected {num_shards}")
        for path in written:
            os.replace(path, directory / path.name)
        return [directory / path.name for path in written]
    finally:
        shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    exit_with_parent()
    skip_unused_imports()
    images_arg, labels_arg, directory_arg, split_arg, shards_arg, chunk_arg, *beam_arguments = sys.argv[1:]
    for written_file in _run_conversion(images_arg, labels_arg, directory_arg, split_arg, int(shards_arg),
                                        int(chunk_arg), beam_arguments):
        print(written_file)
