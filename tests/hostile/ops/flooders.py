"""Output floods: a module-level print (check --json must stay pure JSON) and an impl that prints tens of MB."""

import os
import sys

import torch

import kernelkit as kk

print("hello from the op file's import")  # lands before --json's document unless the CLI keeps stdout clean
print("and on stderr", file=sys.stderr)


@kk.op(sizes=[(8, 8)], cpu_sizes=[(8, 8)], dtypes=[torch.float32])
def flooded(x):
    return x * x


@flooded.impl("eager_prints")
def prints(x):
    print("printed by the impl")
    return x * x


@flooded.impl("eager_floods")
def floods(x):
    line = "y" * 1023 + "\n"
    for _ in range(int(os.environ.get("KK_FLOOD_MB", "32")) * 1024):
        sys.stdout.write(line)
    raise RuntimeError("failed after flooding its output")
