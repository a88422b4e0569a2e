"""check is strict by default: which path judged a run and why, the fast path where strict mode cannot judge, and
what a caller changed before the run is not the target's doing."""

from pathlib import Path

import pytest

import kernelkit as kk
from kernelkit.errors import SpecError
from kernelkit.results import Status
from kernelkit.runs.check import judging

PLANTED = str(Path(__file__).parent / "planted" / "planted_evidence.py")


def test_strict_by_default_falls_back_where_it_cannot_judge_unless_asked():
    assert judging(None, spread=False)[0] and judging(None, spread=False)[1].startswith("strict mode (the default)")
    assert judging(True, spread=False)[1].startswith("strict mode (--strict)")
    on, line = judging(None, spread=True)
    assert not on and line.startswith("fast path: strict mode judges on one worker")
    assert judging(False, spread=True)[1].startswith("fast path (--no-strict)")
    with pytest.raises(SpecError, match="strict mode judges on one worker"):
        judging(True, spread=True)



@pytest.mark.parametrize("isolate", [True, False])
def test_a_harness_object_its_caller_replaced_before_the_run_is_not_the_targets_tampering(monkeypatch, isolate):
    from kernelkit.jobs import strict_worker  # noqa: F401 - sealed before the patch below
    from kernelkit.measure import ceilings

    monkeypatch.setattr(ceilings, "calibrate", lambda *args, **kwargs: None)  # a test's or a notebook's patch
    report = kk.check(PLANTED, impls=["eager_exact"], device="cpu", isolate=isolate)
    assert report.strict and [r.status for r in report.results] == [Status.PASSED], report.results[0].message
