"""Which branch a notebook takes, the CPU's or a GPU's, and a rehearsal of the GPU branch on a CPU.

The GPU branch (a larger batch, mixed precision, `steps_per_execution`, XLA, `MirroredStrategy` over several
GPUs) never runs on a CPU, so CI would never execute it: `TUTORIAL_GPU_REHEARSAL=1` (or `=2`) makes a CPU run
take the branch one (or two) GPUs would, with `mixed_bfloat16` for `mixed_float16` (CPUs lack fast float16
kernels) and one logical CPU device per rehearsed GPU. Child processes never rehearse
(`helpers.setup.processes.child_environment`).
"""
from __future__ import annotations

import os
from dataclasses import dataclass

REHEARSAL_ENV = "TUTORIAL_GPU_REHEARSAL"


def rehearsed_gpus() -> int:
    """How many GPUs `TUTORIAL_GPU_REHEARSAL` asks to rehearse: 0 (unset), 1 or 2; anything else a ValueError.

    >>> rehearsed_gpus() in (0, 1, 2)
    True
    """
    value = os.environ.get(REHEARSAL_ENV, "").strip()
    if value in ("", "0"):
        return 0
    if value not in ("1", "2"):
        raise ValueError(f"{REHEARSAL_ENV}={value!r}: set it to 1 or 2 (GPUs to rehearse on the CPU), or unset it")
    return int(value)


@dataclass(frozen=True)
class Accelerator:
    """The branch this run takes. `gpus` counts real GPUs, or rehearsed ones; 0 is the CPU branch."""

    gpus: int
    rehearsal: bool
    devices: tuple[str, ...]     # the logical devices a strategy mirrors across
    compute_capability: tuple[int, int] | None = None   # of the first real GPU

    @property
    def on_gpu(self) -> bool:
        return self.gpus > 0

    @property
    def precision(self) -> str:
        """The Keras precision policy: mixed precision where a GPU has tensor cores (compute capability 7.0 or
        more), its bfloat16 stand-in in a rehearsal, float32 otherwise."""
        if self.rehearsal:
            return "mixed_bfloat16"
        return "mixed_float16" if self.compute_capability and self.compute_capability >= (7, 0) else "float32"

    def pick(self, *, cpu, gpu):
        """`gpu` on the GPU branch (rehearsed or real), `cpu` otherwise: batch sizes, epochs, settings."""
        return gpu if self.on_gpu else cpu

    def strategy(self):
        """`MirroredStrategy` over the devices when there are several, the default strategy for one."""
        import tensorflow as tf

        return tf.distribute.MirroredStrategy(list(self.devices)) if len(self.devices) > 1 else tf.distribute.get_strategy()

    def __str__(self) -> str:
        if not self.on_gpu:
            return f"the CPU branch ({len(self.devices)} device{'s' if len(self.devices) > 1 else ''}: no GPU found)"
        what = f"{self.gpus} GPU{'s' if self.gpus > 1 else ''}"
        if self.rehearsal:
            return (f"the GPU branch, rehearsed on the CPU ({REHEARSAL_ENV}={self.gpus}: {what} stood in for by "
                    f"{len(self.devices)} CPU device{'s' if len(self.devices) > 1 else ''}; precision mixed_bfloat16, "
                    f"the CPU's stand-in for a GPU's mixed_float16)")
        return f"the GPU branch ({what}, compute capability {'.'.join(map(str, self.compute_capability or ()))})"


def configure(tf, cpu_devices: int = 1) -> Accelerator:
    """Before TensorFlow's first op: let each GPU's memory grow (another process may share it), or split the
    CPU into logical devices (`cpu_devices`, or one per rehearsed GPU). Returns the branch."""
    gpus = tf.config.list_physical_devices("GPU")
    rehearsal = rehearsed_gpus() if not gpus else 0
    capability = None
    try:   # (a setup cell run a second time finds TensorFlow already running: the devices are set by then)
        if gpus:
            for gpu in gpus:
                tf.config.experimental.set_memory_growth(gpu, True)
        elif (rehearsal or cpu_devices) > 1:
            cpu = tf.config.list_physical_devices("CPU")[0]
            tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * (rehearsal or cpu_devices))
    except RuntimeError:
        pass
    if gpus:
        capability = tuple(tf.config.experimental.get_device_details(gpus[0]).get("compute_capability", (0, 0)))
    devices = tuple(d.name for d in tf.config.list_logical_devices("GPU" if gpus else "CPU"))
    return Accelerator(len(gpus) or rehearsal, bool(rehearsal), devices, capability)
