"""Strict mode's input sets made again in the worker: the judge sends each set's size and seed with a fingerprint
of its own copy, the worker makes the set from them and must match it; where it cannot (inputs that are not a
function of their seed), the case's sets go as bytes and the result says so. CPU only."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest
import torch

import kernelkit as kk
from kernelkit import values
from kernelkit.jobs import strict_worker
from kernelkit.jobs.strict_worker import Drawn, StrictCallJob, fingerprint
from kernelkit.results import Status


@pytest.fixture
def jobs(monkeypatch: pytest.MonkeyPatch) -> list[StrictCallJob]:
    """Every StrictCallJob run in this process (strict checks with isolate=False), in order."""
    seen: list[StrictCallJob] = []
    execute = StrictCallJob.execute

    def recording(self: StrictCallJob, device: str, on_built=None):
        seen.append(self)
        return execute(self, device, on_built)

    monkeypatch.setattr(StrictCallJob, "execute", recording)
    return seen


def _strict_square(sizes: list[tuple[int, int]]):
    report = kk.check("square", impls=["eager"], device="cpu", isolate=False, strict=True, sizes=sizes,
                      dtypes=[torch.float32])
    assert all(r.status is Status.PASSED for r in report.results), report.results
    return report


def test_a_fingerprint_is_the_same_for_the_same_values_and_changes_with_one_element():
    x = torch.randn(64, 48)
    same = (x.clone(), 3, "layout")
    assert fingerprint((x, 3, "layout")) == fingerprint(same)
    y = x.clone()
    y[17, 5] += 1e-6
    assert fingerprint((y,)) != fingerprint((x,))
    assert fingerprint((x.t(),)) != fingerprint((x.t().contiguous(),))  # strides are part of it
    assert fingerprint((torch.full((3,), float("nan")),)) == fingerprint((torch.full((3,), float("nan")),))


def test_device_draws_leave_cpu_inputs_as_they_are():
    with values.device_draws():
        drawn = values.seeded_normal((5, 7), torch.float32, "cpu", 11)
    assert torch.equal(drawn, values.seeded_normal((5, 7), torch.float32, "cpu", 11))


def test_the_worker_gets_sizes_and_seeds_not_bytes_and_the_case_passes(jobs):
    report = _strict_square([(64, 48)])
    assert jobs and all(isinstance(entry, Drawn) for job in jobs for entry in job.sets)
    assert not any("sent as bytes" in w for r in report.results for w in r.warnings)


NOISY = '''
import torch

import kernelkit as kk


@kk.op(sizes=[(16, 8)], cpu_sizes=[(16, 8)], dtypes=[torch.float32],
       inputs=lambda size, dtype, device, seed: (torch.rand(size, dtype=dtype, device=device),))
def noisy(x):
    """Inputs from the global generator, not from the seed: made again, they differ."""
    return x * 2


@noisy.impl("eager_honest")
def honest(x):
    return x + x
'''


def test_inputs_that_are_not_a_function_of_their_seed_go_as_bytes_and_say_so(tmp_path: Path, monkeypatch):
    path = tmp_path / "noisy.py"
    path.write_text(textwrap.dedent(NOISY))
    undrawn: list[str] = []
    made = strict_worker.set_inputs

    def watching(entry, op, dtype, device):
        try:
            return made(entry, op, dtype, device)
        except strict_worker.Undrawn as exc:
            undrawn.append(str(exc))
            raise

    monkeypatch.setattr(strict_worker, "set_inputs", watching)
    report = kk.check(str(path), device="cpu", isolate=False, strict=True)
    (result,) = report.results
    assert result.status is Status.PASSED, result.message
    assert undrawn and "are not the judge's" in undrawn[0]
    assert any("were sent as bytes" in w for w in result.warnings), result.warnings


def test_strict_bench_times_undrawable_inputs_on_sets_sent_as_bytes(tmp_path: Path, cpu_process: None):
    from kernelkit.measure.timer import Settings
    from kernelkit.runs import bench as bench_run
    from kernelkit.runs import strict_bench
    from kernelkit.target import open_target
    from taskkit import FreshWorker

    path = tmp_path / "noisy.py"
    path.write_text(textwrap.dedent(NOISY))
    opened = open_target(str(path), "cpu")
    (group,) = bench_run.plan_groups(opened.source, opened.ops, "cpu", ["eager_honest"], [(16, 8)], [], True)
    results = []
    strict_bench.run_group(FreshWorker("cpu"), group, Settings(mode="cold", budget=0.02, calibrate=False), "cpu",
                           60.0, results.append)
    (timed,) = [r for r in results if r.impl == "eager_honest"]
    assert timed.status is Status.PASSED and timed.measurement is not None, timed.message
    assert any("sent as bytes" in w for w in timed.warnings), timed.warnings


def test_each_impl_is_probed_at_its_smallest_case_not_its_first(jobs):
    # The probes (the first inputs again, every dimension doubled) cost calls at the case's size and four times
    # it: on an H200 strict check of square spent most of its extra time there when the first case was large.
    _strict_square([(256, 192), (32, 16), (64, 48)])
    assert sorted((tuple(job.case.size), len(job.plan)) for job in jobs) == [
        ((32, 16), 4), ((64, 48), 2), ((256, 192), 2)]


def test_a_set_without_a_fingerprint_goes_as_bytes(jobs, monkeypatch):
    from kernelkit.runs import strict

    def unreadable(values):
        raise TypeError("a tensor subclass the fingerprint cannot read")

    monkeypatch.setattr(strict, "fingerprint", unreadable)
    _strict_square([(64, 48)])
    assert jobs and all(isinstance(entry, bytes | bytearray) for job in jobs for entry in job.sets)


def test_a_set_the_worker_cannot_make_again_is_undrawn_not_the_impls_failure():
    class Failing:
        @staticmethod
        def make_inputs(size, dtype, device, seed):
            raise RuntimeError("out of memory here")

    entry = Drawn((4, 4), 7, False, ("x",))
    with pytest.raises(strict_worker.Undrawn, match="making the inputs here failed: RuntimeError"):
        strict_worker.set_inputs(entry, Failing(), torch.float32, "cpu")


def test_a_kept_set_is_reused_until_something_writes_into_it():
    # The worker keeps the case's own seeded set for the next jobs (every impl of one set in a row); a set an impl
    # wrote into fails its fingerprint and is made again, and a secret (device-drawn) set is never kept.
    from kernelkit.jobs import kept_sets
    from kernelkit.target import open_target

    op = open_target("square", "cpu").op()
    made = tuple(op.make_inputs((8, 6), torch.float32, torch.device("cpu"), 3))
    entry = Drawn((8, 6), 3, False, fingerprint(made))
    first = strict_worker.set_inputs(entry, op, torch.float32, "cpu")
    assert strict_worker.set_inputs(entry, op, torch.float32, "cpu") is first and kept_sets.held("cpu") > 0
    first[0].add_(1)  # what an impl that found the kept set might do
    again = strict_worker.set_inputs(entry, op, torch.float32, "cpu")
    assert again is not first and torch.equal(again[0], made[0])
    secret = Drawn((8, 6), 5, True, fingerprint(tuple(op.make_inputs((8, 6), torch.float32, torch.device("cpu"), 5))))
    assert strict_worker.set_inputs(entry=secret, op=op, dtype=torch.float32, device="cpu") is not \
        strict_worker.set_inputs(entry=secret, op=op, dtype=torch.float32, device="cpu")
