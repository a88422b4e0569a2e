"""What one KernelBench verdict holds and draws, read on the meta device (no memory, no data): a level's verdicts are
packed beside each other on one GPU by these numbers, and the problems whose trials are worth spreading over
workers are found by them.

KernelBench draws each trial's inputs on the CPU, one core, ~250 million elements a second: a level-1 problem with
2**31 input elements spends ~9 s per trial there, ~45 s per verdict, while its model is a single op. Such a
verdict is split by trial (formats.verdicts.kernelbench_verdict's ``only``), each part on a worker of its own.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernelkit.deadline import Expired, deadline
from kernelkit.formats import kernelbench

DRAWS_PER_SECOND = 2.5e8  # torch.rand / randn elements a second on one CPU core (measured: 2.4e8 on a Xeon)
SPLIT_DRAWS = 2.5e8  # a verdict whose trials each draw at least this many elements is split by trial
SPLIT_PARAMETERS = 10_000_000  # ... unless its models are big: each part builds both models again
READ_S = 10.0  # reading a problem on the meta device makes no data: it is quick, or it hangs
WORKSPACE = 256 * 2**20  # what a verdict's worker holds beyond its tensors (allocator blocks, library workspaces)


@dataclass(frozen=True)
class Footprint:
    """One KernelBench verdict's needs: ``host`` and ``device`` bytes held at once, ``draws`` input elements drawn
    on the CPU per trial, ``splittable`` (its trials may run apart: plain parameters and no buffers whose state a
    trial could carry to the next, no random draws in forward); ``known`` False when the problem could not be read
    on the meta device (the numbers are then guesses)."""

    host: int
    device: int
    draws: int
    splittable: bool
    known: bool = True

    def seconds(self, trials: int) -> float:
        """A rough cost of ``trials`` trials, for ordering: the draws and the two builds on one CPU core."""
        return 1.0 + (self.draws * trials) / DRAWS_PER_SECOND

    def split(self, trials: int) -> bool:
        return self.known and self.splittable and trials > 1 and self.draws >= SPLIT_DRAWS


UNKNOWN = Footprint(host=0, device=0, draws=0, splittable=False, known=False)


def footprint(problem: str | Path, precision: torch.dtype = torch.float32) -> Footprint:
    """The footprint of KernelBench's verdict on ``problem`` (the problem's Model stands for the solution: the
    solution's own file is not imported here, it may build kernels at import)."""
    try:
        loaded = kernelbench.load_problem(problem)
        with torch.device("meta"), torch.no_grad(), deadline(READ_S):
            inputs = list(loaded.get_inputs())
            model = loaded.model(*loaded.get_init_inputs())
            try:
                outputs = model(*inputs)
            except Exception:  # noqa: BLE001 - an op without a meta kernel: its output is taken as its inputs' size
                outputs = inputs
    except (Exception, Expired):  # noqa: BLE001 - a problem that cannot be read is planned alone, not split
        return UNKNOWN
    width = torch.tensor([], dtype=precision).element_size()
    draws = _elements(inputs)
    parameters = sum(p.numel() for p in model.parameters()) if isinstance(model, torch.nn.Module) else 0
    buffers = sum(1 for _ in model.buffers()) if isinstance(model, torch.nn.Module) else 0
    # The inputs drawn on the CPU then copied to the device; both models' weights; both outputs.
    host = width * (draws + 2 * parameters)
    device = width * (draws + 2 * parameters + 2 * _elements(outputs)) + WORKSPACE
    plain = buffers == 0 and parameters <= SPLIT_PARAMETERS and not kernelbench.draws_in_forward(loaded.model)
    return Footprint(host=host, device=device, draws=draws, splittable=plain)


def _elements(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (tuple, list)):
        return sum(_elements(v) for v in value)
    if isinstance(value, dict):
        return sum(_elements(v) for v in value.values())
    return 0
