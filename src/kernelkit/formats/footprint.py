"""What one KernelBench verdict holds and draws, read on the meta device (no memory, no data): a level's verdicts are
packed beside each other on one GPU by these numbers, and the problems whose trials are worth spreading over
workers are found by them.

KernelBench draws each trial's inputs on the CPU, one core, ~250 million elements a second: a level-1 problem with
2**31 input elements spends ~9 s per trial there, ~45 s per verdict, while its model is a single op. Such a
verdict is split by trial (formats.verdicts.kernelbench_verdict's ``only``), each part on a worker of its own.
"""

from __future__ import annotations

import fcntl
import os
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
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
GPU_TURN_ENV = "KERNELKIT_GPU_TURN"  # the folder of the turns the verdicts of one pool take (set by runs/verdicts)
HEARTBEAT_S = 5.0  # while waiting for a turn, the worker tells its caller it is alive this often
ALLCLOSE_COPIES = 3.5  # torch.allclose's temporaries, in outputs' sizes (|a - b|, atol + rtol * |b|, masks)
WORKSPACE = 256 * 2**20  # what a verdict's worker holds beyond its tensors (allocator blocks, library workspaces)


@dataclass(frozen=True)
class Footprint:
    """One KernelBench verdict's needs: ``host`` and ``device`` bytes held throughout (device: both models'
    weights), ``turn`` bytes more on the device during each trial's GPU turn (gpu_turn), ``draws`` input elements drawn
    on the CPU per trial, ``splittable`` (its trials may run apart: plain parameters and no buffers whose state a
    trial could carry to the next, no random draws in forward); ``known`` False when the problem could not be read
    on the meta device (the numbers are then guesses)."""

    host: int
    device: int
    draws: int
    splittable: bool
    known: bool = True
    turn: int = 0  # device bytes of one trial's inputs, outputs and comparison, held only during its GPU turn

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
    # Host: the inputs drawn on the CPU and both models built there. Device: both models' weights throughout; in
    # a trial's turn its inputs, both outputs and allclose's temporaries.
    host = width * (draws + 2 * parameters)
    device = width * 2 * parameters + WORKSPACE
    turn = int(width * (draws + (2 + ALLCLOSE_COPIES) * _elements(outputs)))
    plain = buffers == 0 and parameters <= SPLIT_PARAMETERS and not kernelbench.draws_in_forward(loaded.model)
    return Footprint(host=host, device=device, draws=draws, splittable=plain, turn=turn)


@contextmanager
def gpu_turn(device: torch.device, on_wait: Callable[[], None] | None = None) -> Iterator[None]:
    """The block (a trial's GPU work) in one of the turns the verdicts of one pool on ``device`` share, where the
    pool set GPU_TURN_ENV (a folder: its file ``slots`` says how many turns run at once; default one): the draws
    on the CPU, the slow part, overlap; the GPU memory a trial needs is there for it. The block's memory goes back
    to the GPU as the turn ends (empty_cache), for the next one. ``on_wait`` is called every HEARTBEAT_S while
    waiting (a worker's clock restarts: waiting is not the problem's code hanging). A worker that dies in its turn
    lets it go with its file."""
    folder = os.environ.get(GPU_TURN_ENV)
    if not folder or device.type != "cuda":
        yield
        return
    try:
        slots = max(1, int((Path(folder) / "slots").read_text()))
    except (OSError, ValueError):
        slots = 1
    locks = [open(Path(folder) / f"turn{n}.lock", "a") for n in range(slots)]  # noqa: SIM115 - closed below
    try:
        held = _take_one(locks, on_wait)
        if on_wait is not None:
            on_wait()  # the turn's own work gets the whole limit
        try:
            yield
        finally:
            try:
                torch.cuda.synchronize(device)
                torch.cuda.empty_cache()
            finally:
                fcntl.flock(held, fcntl.LOCK_UN)
    finally:
        for lock in locks:
            lock.close()


def _take_one(locks: list[Any], on_wait: Callable[[], None] | None) -> Any:
    beat = time.monotonic()
    while True:
        for lock in locks:
            try:
                fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
                return lock
            except BlockingIOError:
                continue
        time.sleep(0.02)
        if on_wait is not None and time.monotonic() - beat > HEARTBEAT_S:
            on_wait()
            beat = time.monotonic()


def _elements(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel()
    if isinstance(value, (tuple, list)):
        return sum(_elements(v) for v in value)
    if isinstance(value, dict):
        return sum(_elements(v) for v in value.values())
    return 0
