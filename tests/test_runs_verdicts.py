"""A level's own verdicts (KernelBench's) on several workers at once: rows in plan order, each beside kernelkit's
result, and a verdict that ran out of memory beside the others reached again alone."""

from __future__ import annotations

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
