"""Grid sizes of the built-in elementwise kernels: one thread per item on a GPU, a tiny grid in the simulator."""

import torch

from kernelkit.backends.cuda.grid import BLOCK, MAX_BLOCKS, SIMULATOR_BLOCKS, elementwise_blocks


def test_one_thread_per_item_on_a_gpu():
    gpu = torch.device("cuda", 0)  # only the type is read: no GPU needed
    assert elementwise_blocks(2**28 // 4, gpu) == 2**26 // BLOCK  # 2^28 floats as 16-byte vectors
    assert elementwise_blocks(1000, gpu) == 4
    assert elementwise_blocks(1, gpu) == 1
    assert elementwise_blocks(0, gpu) == 1
    assert elementwise_blocks(2**45, gpu) == MAX_BLOCKS  # the grid-stride loop covers the rest


def test_the_simulator_runs_the_loop_on_two_blocks():
    assert elementwise_blocks(10**6, torch.device("cpu")) == SIMULATOR_BLOCKS
    assert elementwise_blocks(10, torch.device("cpu")) == 1
