"""Workers started early (pool.started_early, as check and bench start theirs while the target opens): a run
takes the one started for it and spawns none of its own; one never taken is killed when its block ends, also when
the run fails before its first case; a spread run starts one per slot."""

from __future__ import annotations

import multiprocessing
import threading
import time
from pathlib import Path

import pytest

import kernelkit as kk
from kernelkit import pool, runner
from kernelkit.errors import LoadError
from kernelkit.scale.slots import Slot

PLANTED = str(Path(__file__).parent / "planted" / "planted_ops.py")
SPREAD = str(Path(__file__).parent / "planted" / "spread_ops.py")


@pytest.fixture
def spawned(monkeypatch):
    """Every worker spawned in the test: (device, env) per spawn."""
    calls: list[tuple[str, dict[str, str]]] = []
    real = runner.spawn

    def counting(device, env, log_path):
        calls.append((device, dict(env)))
        return real(device, env, log_path)

    monkeypatch.setattr(runner, "spawn", counting)
    return calls


def _alive_children() -> list[int]:
    return [p.pid for p in multiprocessing.active_children() if p.is_alive()]


def test_a_check_takes_the_worker_started_early_and_spawns_none_of_its_own(spawned):
    report = kk.check(PLANTED, impls=["eager_correct"], device="cpu", strict=False)
    assert report.ok and len(report.results) >= 1
    assert spawned == [("cpu", {})]
    assert not pool._early and not _alive_children()


def test_a_bench_takes_it_too(spawned):
    report = kk.bench_op(PLANTED, impls=["eager_correct"], device="cpu", budget=0.02, baselines=False)
    assert report.ok and spawned == [("cpu", {})]
    assert not pool._early and not _alive_children()


def test_an_early_worker_never_taken_is_killed_when_the_run_fails_to_load(spawned, tmp_path):
    with pytest.raises(LoadError):
        kk.check(str(tmp_path / "missing.py"), device="cpu")
    assert spawned == [("cpu", {})]  # it was started before the target was opened
    assert not pool._early and not _alive_children()


def test_an_outer_block_s_early_worker_serves_the_run_inside_it(spawned):
    with runner.started_early("cpu"):
        assert len(pool._early) == 1
        report = kk.check(PLANTED, impls=["eager_correct"], device="cpu", strict=False)
        assert not pool._early  # taken
    assert report.ok and spawned == [("cpu", {})]
    assert not _alive_children()


def test_a_spread_run_starts_one_early_worker_per_slot_and_uses_them(spawned):
    two = [Slot(0, {"KERNELKIT_TEST_SLOT": "0"}), Slot(1, {"KERNELKIT_TEST_SLOT": "1"})]
    report = kk.check(SPREAD, device="cpu", impls=["eager_add"], gpus=two)
    assert report.ok and len(report.results) == 4
    assert sorted(env["KERNELKIT_TEST_SLOT"] for _, env in spawned) == ["0", "1"]
    assert not pool._early and not _alive_children()


def test_an_unchecked_run_in_this_process_starts_no_worker(spawned):
    report = kk.check("square", impls=["eager"], device="cpu", isolate=False, strict=False)
    assert report.ok and spawned == []


def test_a_strict_check_takes_it_as_the_fast_path_does(spawned):
    report = kk.check(PLANTED, impls=["eager_correct"], device="cpu")
    assert report.ok and report.strict and spawned == [("cpu", {})]


class _SlowToAnswer:
    """A held worker's process whose liveness check yields the thread: the moment another slot's take runs."""

    def is_alive(self) -> bool:
        time.sleep(0.0005)
        return True


def test_two_slots_taking_at_once_never_get_the_same_worker(monkeypatch):
    # A spread run's slots take their workers from their own threads at the same moment; both keys are the same on
    # the CPU ({}). A worker handed to two slots crosses their jobs' answers: a result goes missing.
    held = [pool.Held(pool.key_of("cpu", {}), _SlowToAnswer(), None, "", True) for _ in range(8)]
    monkeypatch.setattr(pool, "_early", list(held))
    taken: list[pool.Held | None] = []
    start = threading.Barrier(8)

    def slot() -> None:
        start.wait()
        taken.append(pool.take(pool.key_of("cpu", {})))

    threads = [threading.Thread(target=slot) for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert sorted(map(id, taken)) == sorted(map(id, held)) and not pool._early
