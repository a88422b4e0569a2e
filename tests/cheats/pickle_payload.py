"""A cheat at the verdict channel: an output whose unpickling would run code in the process that judges it.

The op returns a tensor and its sum; ``eager_payload`` returns the right tensor and, in place of the count, an object
whose ``__reduce__`` opens (creates) the file named by $KERNELKIT_PAYLOAD_FILE. Were the judge to unpickle what the
worker sends, the file would appear in the judging process. ``eager_honest`` is the same op done right.
"""

import os

import torch

import kernelkit as kk


class Payload:
    def __reduce__(self):
        return (open, (os.environ["KERNELKIT_PAYLOAD_FILE"], "w"))


@kk.op(sizes=[(16, 16)], cpu_sizes=[(16, 16)], dtypes=[torch.float32])
def counted(x):
    """x squared, and the sum of x."""
    return x * x, x.sum()


@counted.impl("eager_honest")
def counted_honest(x):
    return x * x, x.sum()


@counted.impl("eager_payload")
def counted_payload(x):
    return x * x, Payload()
