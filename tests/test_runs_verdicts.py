"""A level's own verdicts (KernelBench's) on several workers at once: rows in plan order, each beside kernelkit's
result, and a verdict that ran out of memory beside the others reached again alone."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from kernelkit.formats.jobs import verdict_jobs
from kernelkit.runs import verdicts
from kernelkit.runs.verdicts import parallel_workers, run_verdicts

FIXTURES = Path(__file__).parent / "fixtures" / "formats" / "kernelbench"

# Its forward raises CUDA's out-of-memory error while the marker file exists, and removes it: the first try fails,
# a second passes.
OOM_ONCE = '''
import os
import torch
import torch.nn as nn

MARKER = {marker!r}


class Model(nn.Module):
    def forward(self, x):
        if os.path.exists(MARKER):
            os.remove(MARKER)
            raise RuntimeError("CUDA out of memory. Tried to allocate 6.00 GiB")
        return torch.relu(x)


def get_inputs():
    return [torch.randn(4, 8)]


def get_init_inputs():
    return []
'''


def test_how_many_workers_a_level_gets(monkeypatch: pytest.MonkeyPatch):
    monkeypatch.setattr(verdicts.os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    assert [parallel_workers(n) for n in (1, 5, 6, 9, 100)] == [1, 1, 2, 3, 4]
    monkeypatch.setattr(verdicts.os, "sched_getaffinity", lambda pid: {0, 1}, raising=False)
    assert parallel_workers(100) == 1  # two cores: the draws would only take turns


def test_verdicts_on_two_workers_keep_plan_order_and_retry_out_of_memory_alone(tmp_path: Path):
    level = tmp_path / "level"
    level.mkdir()
    relu = (FIXTURES / "relu.py").read_text()
    for n in (1, 2, 4, 5):
        (level / f"{n}_relu.py").write_text(relu)
    marker = tmp_path / "oom-once"
    marker.write_text("")
    (level / "3_oom_once.py").write_text(OOM_ONCE.format(marker=str(marker)))
    planned = verdict_jobs(level)
    rows = run_verdicts(planned, [], "cpu", timeout=60, workers=2)
    assert [row.op for row in rows] == ["1_relu", "2_relu", "3_oom_once", "4_relu", "5_relu"]
    assert not marker.exists()  # the first try ran and failed
    for row in rows:
        assert row.outcome.verdict is not None and row.outcome.verdict.correct, (row.op, row.line())


# Its output's shape is wrong from the third trial on (the trial is told by the input's first element, which
# each trial's seed draws anew): KernelBench's loop stops there, with the two passes before it.
SHAPE_FROM_TRIAL_3 = '''
import torch
import torch.nn as nn

SEEN = {seen!r}


class ModelNew(nn.Module):
    def forward(self, x):
        first = round(float(x.flatten()[0]), 6)
        if first in SEEN:
            return torch.relu(x)[:1]
        return torch.relu(x)
'''


def _trial_firsts(problem: Path) -> list[float]:
    """The first input element of each of KernelBench's trials on ``problem``, drawn as its verdict draws them."""
    import torch

    from kernelkit.formats import kernelbench

    loaded = kernelbench.load_problem(problem)
    torch.manual_seed(kernelbench.KERNELBENCH_SEED)
    seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(kernelbench.KERNELBENCH_TRIALS)]
    firsts = []
    for seed in seeds:
        torch.manual_seed(seed)
        firsts.append(round(float(loaded.get_inputs()[0].flatten()[0]), 6))
    return firsts


@pytest.mark.parametrize("solution", ["relu_solution.py", "relu_wrong.py", "shape_from_trial_3"])
def test_a_verdict_split_by_trial_over_workers_is_the_verdict_of_one_run(
    solution: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
):
    problem = FIXTURES / "relu.py"
    if solution == "shape_from_trial_3":
        path = tmp_path / "shape.py"
        path.write_text(SHAPE_FROM_TRIAL_3.format(seen=_trial_firsts(problem)[2:]))
    else:
        path = FIXTURES / solution
    planned = verdict_jobs(problem, path)
    whole = run_verdicts(planned, [], "cpu", timeout=60, isolate=False)[0].outcome.verdict
    monkeypatch.setattr("kernelkit.formats.footprint.SPLIT_DRAWS", 1)  # every trial a part of its own
    assert [p.job.trials for p in verdicts._parts(0, planned[0].job, True)] == [(t,) for t in range(5)]
    seen = []
    split = run_verdicts(planned, [], "cpu", timeout=60, workers=2, on_row=seen.append)
    assert len(seen) == 1 and seen[0] is split[0]
    verdict = split[0].outcome.verdict
    assert verdict is not None and whole is not None
    assert (verdict.correct, verdict.trials_passed, verdict.message, verdict.max_difference) == (
        whole.correct, whole.trials_passed, whole.message, whole.max_difference)
    expected = {"relu_solution.py": (True, 5), "relu_wrong.py": (False, 0), "shape_from_trial_3": (False, 2)}
    assert (verdict.correct, verdict.trials_passed) == expected[solution], verdict.describe()
    if solution == "shape_from_trial_3":
        assert "shape mismatch" in verdict.message


PROBLEM = """
import torch
import torch.nn as nn


class Model(nn.Module):
    def __init__(self):
        super().__init__()
        {layer}

    def forward(self, x):
        return {forward}


def get_inputs():
    return [torch.randn(4096, 393216)]


def get_init_inputs():
    return []
"""


def test_a_problem_with_big_draws_and_a_plain_model_is_split_and_one_with_buffers_is_not(tmp_path: Path):
    from kernelkit.formats.footprint import SPLIT_DRAWS, footprint

    (tmp_path / "big.py").write_text(PROBLEM.format(layer="pass", forward="torch.relu(x)"))
    need = footprint(tmp_path / "big.py")  # on the meta device: nothing of its 6 GiB is made
    assert need.draws == 4096 * 393216 >= SPLIT_DRAWS and need.split(5)
    assert need.turn >= 3 * 4 * need.draws  # in a trial's turn on the GPU: the input and both outputs, in float32
    (tmp_path / "bn.py").write_text(PROBLEM.format(layer="self.bn = nn.BatchNorm1d(393216)", forward="self.bn(x)"))
    assert not footprint(tmp_path / "bn.py").split(5)  # its running statistics go from trial to trial
    (tmp_path / "bad.py").write_text("class Model:\n    pass\n\ndef get_inputs():\n    raise ValueError\n\n"
                                     "def get_init_inputs():\n    return []\n")
    assert not footprint(tmp_path / "bad.py").known


def test_parts_wait_until_what_they_hold_fits_beside_the_others_and_one_runs_alone_whatever_it_needs():
    from kernelkit.formats.footprint import Footprint
    from kernelkit.formats.jobs import VerdictJob

    def part(n: int, gib: float) -> verdicts._Part:
        need = Footprint(host=0, device=int(gib * 2**30), draws=0, splittable=False)
        return verdicts._Part(n, VerdictJob("kernelbench", f"{n}.py"), need, seconds=gib)

    packer = verdicts._Packer([part(0, 60), part(1, 50), part(2, 30), part(3, 200)], "cuda", packed=True)
    packer.set_device_memory(100 * 2**30 / verdicts.DEVICE_SHARE, workers=1)
    taken = [packer.take(), packer.take()]
    assert [p.index for p in taken if p] == [0, 2]  # the biggest that fit: 60 + 30 in 100 (60 + 50 would not)
    waiting: list[verdicts._Part | None] = []
    waiter = threading.Thread(target=lambda: waiting.append(packer.take()))
    waiter.start()
    waiter.join(timeout=0.3)
    assert waiter.is_alive() and not waiting  # 50 waits until 60 or 30 is done
    packer.release(taken[0])
    waiter.join(timeout=5)
    assert [p.index for p in waiting if p] == [1]
    for part in (taken[1], waiting[0]):
        assert part is not None
        packer.release(part)
    alone = packer.take()
    assert alone is not None and alone.index == 3  # nothing else runs: it goes alone, whatever it needs


def test_turns_are_taken_one_per_slot_and_a_waiter_beats_its_heart(tmp_path: Path, monkeypatch: pytest.MonkeyPatch):
    import fcntl

    from kernelkit.formats import footprint

    first, second = (open(tmp_path / f"turn{n}.lock", "a") for n in range(2))  # noqa: SIM115
    other = open(tmp_path / "turn0.lock", "a")  # noqa: SIM115 - another holder of slot 0, as another worker
    fcntl.flock(other, fcntl.LOCK_EX)
    assert footprint._take_one([first, second], None) is second  # slot 0 is held: the next free one
    monkeypatch.setattr(footprint, "HEARTBEAT_S", 0.05)
    beats: list[int] = []
    waiter = threading.Thread(target=lambda: footprint._take_one([first], lambda: beats.append(1)))
    waiter.start()
    waiter.join(timeout=0.5)
    assert waiter.is_alive() and beats  # waiting, and saying so
    fcntl.flock(other, fcntl.LOCK_UN)
    waiter.join(timeout=5)
    assert not waiter.is_alive()
    for f in (first, second, other):
        f.close()
