"""Beyond one worker: a sweep's groups spread over every GPU of this host, or over a Ray cluster.

    kk.bench_op("softmax", gpus="all")      # one worker per GPU, pinned by CUDA_VISIBLE_DEVICES
    kk.check("square", gpus=2)              # the first two GPUs
    kk.bench_op("softmax", ray="auto")      # Ray tasks with one GPU each, on the cluster this host joined

A group is one (op, size, dtype): its jobs stay on one GPU, so the impls and baselines timed side by side there
stay comparable. Each result records the GPU that ran it (``gpu``); the run's environment holds each GPU's
fingerprint. slots.py: which GPUs, and how a worker is pinned; shard.py: the groups shared among this host's
workers, and what happens when one fails; cluster.py: the same groups as Ray tasks; spread.py: the choice
between them, as bench_op and check make it.
"""

from kernelkit.scale.slots import GpuSpec, Slot, gpu_slots
from kernelkit.scale.spread import Spread, check_spread

__all__ = ["GpuSpec", "Slot", "Spread", "check_spread", "gpu_slots"]
