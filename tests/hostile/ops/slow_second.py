"""One quick impl and one that sleeps a minute (it writes KK_TEST_MARKER first): a run to interrupt."""

import os
import time

import torch

import kernelkit as kk


@kk.op(sizes=[(4, 4)], dtypes=[torch.float32])
def ident(x):
    return x + 0


@ident.impl("eager_fast")
def eager_fast(x):
    return x + 0


@ident.impl("eager_slow")
def eager_slow(x):
    open(os.environ["KK_TEST_MARKER"], "w").close()
    time.sleep(60)
    return x + 0
