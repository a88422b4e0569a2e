"""The Ray path (kernelkit.scale.cluster) on a local CPU cluster: one task per (op, size, dtype) group, results
streamed back to the caller's store. The merged store must hold exactly a local run's cases, and killing a Ray
worker mid-sweep may cost at most the case it was running (Ray runs the task again)."""

from __future__ import annotations

import inspect
import os
from pathlib import Path

import pytest

import kernelkit as kk
from kernelkit.results import Status
from kernelkit.store import Store

ray = pytest.importorskip("ray", reason="the ray extra is not installed: pip install 'kernelkit[ray]'")

OPS = str(Path(__file__).parent / "planted" / "spread_ops.py")
# Strict mode (on by default for a stored run, where bench_op has it) times on one worker: off here.
NOT_STRICT = {"strict": False} if "strict" in inspect.signature(kk.bench_op).parameters else {}
SIZES = [(8, 8), (16, 16)]
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    """A local Ray cluster whose workers know where the kill marker goes (the env is read when Ray starts)."""
    mark = tmp_path_factory.mktemp("ray") / "killed"
    os.environ["KERNELKIT_TEST_KILL_MARK"] = str(mark)
    ray.init(num_cpus=2, include_dashboard=False, log_to_driver=False)
    yield mark
    ray.shutdown()
    del os.environ["KERNELKIT_TEST_KILL_MARK"]


def _cases(results):
    return sorted((r.case_id, r.status) for r in results)


def test_a_check_through_ray_equals_a_local_check(cluster):
    local = kk.check(OPS, device="cpu", impls=["eager_add"], sizes=SIZES)
    remote = kk.check(OPS, device="cpu", impls=["eager_add"], sizes=SIZES, ray="local")
    assert remote.ok and _cases(remote.results) == _cases(local.results)
    assert [r.case_id for r in remote.results] == [r.case_id for r in local.results]
    assert all(r.details.get("host") for r in remote.results)  # each says which node ran it


def test_a_sweep_through_ray_streams_into_one_stored_run(cluster, tmp_path):
    store = Store.open(tmp_path / "results.sqlite")
    seen = []
    report = kk.bench_op(OPS, impls=["eager_add", "eager"], sizes=SIZES, device="cpu", mode="hot", budget=0.05,
                         ray="local", store=store, command="kernelkit bench spread_ops.py --ray local",
                         on_result=seen.append, **NOT_STRICT)
    expected = sorted((f"twice/{impl}/{m}x{n}/float32", Status.PASSED) for impl in ("eager_add", "eager")
                      for m, n in SIZES)
    assert report.ok and _cases(report.results) == expected and len(seen) == len(expected)
    assert _cases(store.results(report.run_id)) == expected
    assert store.run(report.run_id).env["ray"] == "local"
    store.close()


def test_killing_a_ray_worker_mid_sweep_loses_at_most_its_case(cluster):
    # The kill comes from inside a case (the impl kills the Ray task process running it, once), not from a timer:
    # which task is in flight when is up to the machine's load.
    report = kk.check(OPS, device="cpu", impls=["eager_kills_its_ray_task"], ray="local")
    assert cluster.exists(), "no case ran under a Ray task"
    assert len(report.results) == report.planned == 4
    lost = [r for r in report.results if r.status is not Status.PASSED]
    assert len(lost) <= 1
