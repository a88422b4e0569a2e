"""The backend registry and interface: built-in backends by name, and a backend added at run time by a user's file
(tests/planted/interp_backend.py) that check, bench and asm handle like any other."""

from __future__ import annotations

from pathlib import Path

import pytest
import torch

import kernelkit as kk
from kernelkit import backends
from kernelkit.errors import BackendUnavailable, SpecError
from kernelkit.results import Status

INTERP = str(Path(__file__).parent / "planted" / "interp_backend.py")


def test_builtin_backends_are_found_by_name() -> None:
    assert backends.names()[:5] == ("eager", "compile", "triton", "cuda", "numba")
    for name in ("eager", "compile", "triton", "cuda", "numba"):
        assert backends.backend(name).name == name
    assert not backends.backend("cuda").runs_on("cpu") and backends.backend("triton").runs_on("cpu")
    assert backends.backend("triton").packages == {"triton": "triton"}
    with pytest.raises(SpecError, match="unknown backend 'opencl'"):
        backends.backend("opencl")


def test_a_builtin_name_cannot_be_taken_and_names_are_one_word() -> None:
    class Impostor(backends.Backend):
        name = "triton"

    with pytest.raises(SpecError, match="built-in backend"):
        backends.register(Impostor())
    Impostor.name = "two_words"
    with pytest.raises(SpecError, match="one word"):
        backends.register(Impostor())


def test_a_registered_backend_runs_its_impls_in_a_check() -> None:
    report = kk.check(INTERP, device="cpu", isolate=False)
    by_impl = {(r.impl, r.size): r for r in report.results}
    assert {r.backend for r in report.results} == {"interp"}
    assert [by_impl["interp_loop", s].status for s in ((33,), (4, 5))] == [Status.PASSED] * 2
    rejected = by_impl["interp_rejected", (33,)]
    assert rejected.status is Status.COMPILE_ERROR and "interp cannot compile" in rejected.message  # its own errors


@pytest.mark.slow
def test_a_registered_backend_is_benchmarked_in_a_worker() -> None:
    # The worker imports the file, which registers the backend there too.
    report = kk.bench_op(INTERP, impls=["interp_loop"], sizes=[(33,)], device="cpu", mode="hot", budget=0.05,
                         baselines=False)
    (result,) = report.results
    assert (result.impl, result.backend, result.status) == ("interp_loop", "interp", Status.PASSED), result.message
    assert result.measurement is not None and result.measurement.median > 0


def test_asm_says_why_a_registered_backend_cannot_show_its_kernels() -> None:
    with pytest.raises(BackendUnavailable, match="plain Python .backend interp.: there is no machine code"):
        kk.asm(INTERP, "interp_loop", dtype=torch.float32)


def test_each_baseline_is_derived_by_the_backend_of_its_name() -> None:
    from kernelkit.spec import BASELINES, LISTED_BASELINES
    from kernelkit.target import load

    square = load("kernelkit.ops.square")["square"]
    for name in BASELINES:
        derived = backends.baseline_impl(name, square)
        assert (derived.name, derived.backend) == (name, name)
    assert backends.baseline_impl("triton", square) is None  # a kernel DSL derives nothing from a reference
    assert list(square.baselines) == [n for n in LISTED_BASELINES if n not in square.impls]
