"""One core feeds the GPU (issue 30): the recommended pipelines alone in a child process pinned to one CPU,
against the reference GPU's appetite, with the physical ceiling of that core beside them.

On Colab's usual runtime a GPU shares two virtual CPUs with the Python process that drives training, so the input
pipeline gets about one core. Each pipeline here runs in a child pinned with `os.sched_setaffinity` before
TensorFlow starts, with TensorFlow's thread pools and tf.data's private pool of 1 thread
(`helpers.measure.one_core`); the parent alternates the rounds (`helpers.measure.alternate`) and waits while the
child runs. The recommended pipelines are named in advance, as in `bench_mnist` and `bench_autoencoder`:
- the MLP's: block records (notebook 05), `bench_mnist.recommended`, batch 1024, over 300,000 MNIST-shaped
  images (5 times MNIST's training set);
- the autoencoder's: block records of CIFAR-sized images, cast to float32 pairs, `bench_autoencoder.recommended`,
  batch 256, over 50,000 images (CIFAR-10's training set). Until issue 30 it was raw uint8 TFRecords
  (`bench_autoencoder.raw_tfrecord`, one 3 KB record per image), measured here too.

What one core spends its time on (issue 30's profile: the pipeline cut after each stage, each prefix alone on
one core, 3 rounds each on a shared machine, images/s): CIFAR-sized block records read 216,000, shuffled
241,000, parsed 227,000, mixed 226,000, rebatched 189,000, then cast to float32 pairs 108,000: the cast, which
writes 4 bytes for every pixel byte (twice the pixels, as input and target), is the largest single step; it
could move into the model (onto the GPU), as the MLP's `uint8_input` does. MNIST-sized blocks: read 872,000,
shuffled 514,000, parsed 276,000, mixed 293,000, rebatched 228,000: no one step dominates; every copy of the
pixels costs. The copy ceiling is 20-60 times these rates: the bytes are not the limit, the work per byte is.

Keys (rates of one epoch on one core, start-up counted, / the reference H200's training rate, goal ≥ 1.0 on the
interval's lower end):
- mlp_pipeline_vs_gpu_bs1024_one_core
- ae_pipeline_vs_gpu_bs256_one_core
- ae_blocks_vs_tfrecord_one_core: the autoencoder's block records / its raw uint8 TFRecords, both on one core
  (reported: why block records are the recommended pipeline now)

Keys (the ceiling: bytes per second the same pinned core copies the same shard files from the page cache into a
preallocated buffer with reads of 8 MiB, divided by the bytes a record of one image takes on disk: the
samples/s no pipeline reading those files on one core can beat, over the H200's appetite; reported):
- mnist_copy_ceiling_one_core_vs_gpu_bs1024
- cifar_copy_ceiling_one_core_vs_gpu_bs256

Where the machine has no `os.sched_setaffinity` (macOS, Windows), the module says so and reports no key.
Files are page-cached (just written): RAM speed, as the other GPU-relative keys.
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path

import numpy as np

from benchmarks.run import Result, digits, one_core_child
from helpers.data.standins import make_cifar_like
from helpers.lessons.pipeline_profiling import write_blocks
from helpers.storage.blocks import write_block_split
from helpers.measure import alternate
from helpers.measure.gpu_reference import gpu_appetite
from helpers.storage.tfrecord import write_shards

MLP_BATCH, AE_BATCH = 1024, 256


def shard_files(directory: Path) -> list[str]:
    return sorted(str(p) for p in directory.glob("train-*.tfrecord"))


def run(quick: bool) -> list[Result]:
    child = one_core_child()   # asked first: it starts TensorFlow while this process writes the data
    if child is None:
        return []
    n_mlp, n_ae, rounds = (10_000, 3_000, 2) if quick else (300_000, 50_000, 9)
    x, y = digits(n_mlp // 5)
    cifar, cifar_labels = make_cifar_like(min(n_ae, 1_500), seed=0)
    many = np.arange(n_ae) % len(cifar)
    workdir = Path(tempfile.mkdtemp(prefix="bench-one-core-"))
    try:
        mlp_dir, ae_dir, raw_dir = workdir / "mnist-blocks", workdir / "cifar-blocks", workdir / "cifar-tfrecord"
        write_block_split(write_blocks, np.concatenate([x] * 5), np.concatenate([y] * 5), mlp_dir, "train",
                          num_shards=16)
        write_block_split(write_blocks, cifar[many], cifar_labels[many, 0], ae_dir, "train", num_shards=16)
        write_shards(((cifar[i], cifar_labels[i, 0]) for i in many), raw_dir, "train", 16, total=n_ae, progress=False)
        pipelines = {
            "mlp": ("benchmarks.bench_mnist:recommended", {"directory": str(mlp_dir), "batch_size": MLP_BATCH}),
            "ae": ("benchmarks.bench_autoencoder:recommended", {"directory": str(ae_dir), "batch_size": AE_BATCH}),
            "ae tfrecord": ("benchmarks.bench_autoencoder:raw_tfrecord",
                            {"directory": str(raw_dir), "batch_size": AE_BATCH}),
        }
        files = {"mnist": shard_files(mlp_dir), "cifar": shard_files(ae_dir)}
        images = {"mnist": n_mlp, "cifar": n_ae}
        bytes_per_image = {kind: sum(Path(f).stat().st_size for f in names) / images[kind]
                           for kind, names in files.items()}
        for name, (factory, kwargs) in pipelines.items():
            child.add(name, factory, kwargs)
        measured = alternate({
            **{name: (lambda name=name: child.epoch(name)) for name in pipelines},
            **{f"copy {kind}": (lambda kind=kind: child.copy_rate(files[kind])) for kind in files},
        }, rounds=rounds, warmup=1)   # the warm-up round also brings every file into the page cache
        cpu = child.cpus
    finally:
        shutil.rmtree(workdir, ignore_errors=True)

    gpu_mlp = gpu_appetite("mnist_mlp", MLP_BATCH).samples_per_second
    gpu_ae = gpu_appetite("cifar_autoencoder", AE_BATCH).samples_per_second
    pinned = f"pinned to CPU {cpu[0]}" if len(cpu) == 1 else f"on CPUs {cpu}"

    def versus_gpu(key, name, kind, images, gpu, batch, meaning):
        alone, ceiling = measured.samples(name), ceiling_rate(kind)
        detail = (f"one core ({pinned}): {alone.median:,.0f} samples/s over {images:,}-image epochs at batch {batch}, "
                  f"each with a {measured.start_up(name).median * 1e3:.0f} ms start-up (counted); the H200 trains "
                  f"{gpu:,}; the copy ceiling of that core for these files: {ceiling:,.0f} samples/s")
        return Result(key, meaning, "≥ 1.0", detail, alone.scaled(1 / gpu))

    def ceiling_rate(kind):
        return measured.samples(f"copy {kind}").median / bytes_per_image[kind]

    def ceiling(key, kind, gpu, batch):
        copy = measured.samples(f"copy {kind}")
        detail = (f"one core copies {copy.median / 1e9:.2f} GB/s from the page cache (reads of 8 MiB into one buffer); "
                  f"{bytes_per_image[kind]:,.0f} bytes a {kind} image on disk (block records): "
                  f"{ceiling_rate(kind):,.0f} images/s; the H200 trains {gpu:,} at batch {batch}")
        return Result(key, f"the physical ceiling: one core's page-cache copy rate of the {kind} block files, in "
                      f"images/s / the reference H200 at batch {batch}", "-", detail,
                      copy.scaled(1 / bytes_per_image[kind] / gpu))

    blocks, raw = measured.samples("ae"), measured.samples("ae tfrecord")
    return [
        versus_gpu("mlp_pipeline_vs_gpu_bs1024_one_core", "mlp", "mnist", n_mlp, gpu_mlp, MLP_BATCH,
                   f"the MLP's recommended pipeline (block records) alone on one core, batch {MLP_BATCH} / the "
                   f"reference H200 training the MLP at batch {MLP_BATCH}"),
        versus_gpu("ae_pipeline_vs_gpu_bs256_one_core", "ae", "cifar", n_ae, gpu_ae, AE_BATCH,
                   f"the autoencoder's recommended pipeline (block records, float32 pairs) alone on one core, batch "
                   f"{AE_BATCH} / the reference H200 training the autoencoder at batch {AE_BATCH}"),
        Result("ae_blocks_vs_tfrecord_one_core", "the autoencoder's pipeline on one core: block records / raw uint8 "
               "TFRecords (recommended until issue 30)", "-",
               f"block records {blocks.median:,.0f} vs raw TFRecords {raw.median:,.0f} images/s (medians) over "
               f"{blocks.n} rounds of {n_ae:,}-image epochs", measured.ratio("ae", "ae tfrecord")),
        ceiling("mnist_copy_ceiling_one_core_vs_gpu_bs1024", "mnist", gpu_mlp, MLP_BATCH),
        ceiling("cifar_copy_ceiling_one_core_vs_gpu_bs256", "cifar", gpu_ae, AE_BATCH),
    ]
