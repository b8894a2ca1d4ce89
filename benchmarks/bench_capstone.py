"""The capstone (notebook 07): a folder of JPEG photos read as `image_dataset_from_directory` reads it, against the
same photos converted once to resized records and read by the capstone's pipeline.

Keys:
- capstone_pipeline_vs_image_dataset_from_directory: the pipeline alone, one epoch of the training folder:
  notebook 07's `read_photos` (resized-once raw uint8 records of 96x96 pixels made by its `resized_record`;
  shuffled files and records, 4 files read at once, a batch parsed at once, cast to float32, prefetch) against
  `keras.utils.image_dataset_from_directory(image_size=(96, 96))` on the same files (every file read, decoded
  and resized every epoch on parallel threads, prefetch). Batch 32; steady-state rates in alternating rounds
  (A B, then B A) after a warm-up round; files page-cached. Goal ≥ 3, on the lower bound of the 95 % interval.
- capstone_pipeline_one_core_vs_all_cores: the same `read_photos` pipeline in a child process pinned to one CPU
  (`helpers.measure.one_core`: `os.sched_setaffinity` before TensorFlow starts, thread pools of 1) against it
  on all cores in this process, in the same rounds. Reported: how much of the pipeline's speed is one core's.

The photos are `helpers.data.photos`' (crops of scikit-image's sample photographs, 200-800 px a side, as JPEG
files of random quality): 6,000 files in a full run, 400 in a quick one, where an epoch is so short that
tf.data's start-up weighs on the pipeline's rate.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import keras

from benchmarks.run import Result, one_core_child
from helpers.data.photos import make_photo_folder
from helpers.lessons.capstone_photos import read_photos, resized_record
from helpers.measure import alternate, pipeline_epoch
from helpers.storage.tfrecord import FeatureSpec, write_shards

IMAGE_SIZE, BATCH_SIZE, NUM_SHARDS = 96, 32, 8


def run(quick: bool) -> list[Result]:
    files, rounds = (400, 3) if quick else (6_000, 8)
    workdir = Path(tempfile.mkdtemp(prefix="bench-capstone-"))
    child = one_core_child()   # asked first: it starts TensorFlow while this process makes and converts the photos
    try:
        folder = make_photo_folder(workdir / "photos", files, progress=False) / "train"
        paths = sorted(folder.glob("*/*.jpg"))
        classes = sorted(p.name for p in folder.iterdir())
        records = (resized_record(p, classes.index(p.parent.name), IMAGE_SIZE) for p in paths)
        spec = FeatureSpec((IMAGE_SIZE, IMAGE_SIZE, 3), "uint8")
        manifest = write_shards(records, workdir / "records", "train", NUM_SHARDS, total=len(paths),
                                encoding="serialized", spec=spec, progress=False)
        files = [str(f) for f in manifest.files(workdir / "records")]
        baseline = keras.utils.image_dataset_from_directory(folder, image_size=(IMAGE_SIZE, IMAGE_SIZE),
                                                            batch_size=BATCH_SIZE, seed=0, verbose=False)
        pipeline = read_photos(files, BATCH_SIZE, IMAGE_SIZE, records=len(paths), shuffle=True)
        assert pipeline.element_spec == baseline.element_spec, (pipeline.element_spec, baseline.element_spec)
        sides = {"pipeline": lambda: pipeline_epoch(pipeline), "baseline": lambda: pipeline_epoch(baseline)}
        if child is not None:
            child.add("capstone", "helpers.lessons.capstone_photos:read_photos", {
                "files": files, "batch_size": BATCH_SIZE, "size": IMAGE_SIZE, "records": len(paths), "shuffle": True})
            sides["one core"] = lambda: child.epoch("capstone")
        measured = alternate(sides, rounds=rounds, warmup=1)
        detail = (f"read_photos {measured.samples('pipeline').median:,.0f} images/s vs image_dataset_from_directory "
                  f"{measured.samples('baseline').median:,.0f} (medians), {rounds} rounds of {len(paths):,}-photo epochs")
        results = [Result("capstone_pipeline_vs_image_dataset_from_directory",
                          "pipeline alone: resized-once records (notebook 07) / image_dataset_from_directory on the JPEGs",
                          "≥ 3", detail, measured.ratio("pipeline", "baseline"))]
        if "one core" in sides:
            results.append(Result(
                "capstone_pipeline_one_core_vs_all_cores", "read_photos alone: pinned to one CPU / on all cores", "-",
                f"one core {measured.samples('one core').median:,.0f} images/s, all cores "
                f"{measured.samples('pipeline').median:,.0f} (medians), {rounds} rounds",
                measured.ratio("one core", "pipeline")))
        return results
    finally:
        shutil.rmtree(workdir, ignore_errors=True)
