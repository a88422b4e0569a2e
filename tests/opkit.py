"""Helpers shared by the op tests: what an impl can do on a machine without a GPU, the edge-shape cases worth the
interpreter's time, inputs laid out at the edges (non-contiguous, misaligned), an op's impls on other inputs,
stand-ins for an op's kernel modules, an output checked against the reference by the checker's rule, and a
report's statuses asserted or shown compactly."""

from __future__ import annotations

import math
import shutil
import subprocess
from collections.abc import Callable, Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import torch

import kernelkit as kk
from kernelkit import verify
from kernelkit.results import CaseResult, Status
from kernelkit.spec import TOLERANCES, Case, Impl, Op, Size, seeded_normal

FP = (torch.float32, torch.float16, torch.bfloat16)
CPU_FP = (torch.float32, torch.float16)  # the Triton interpreter computes bfloat16 wrongly


def expected_on_cpu(backend: str, dtype: torch.dtype, numba_dtypes: tuple[torch.dtype, ...] = (torch.float32,)
                    ) -> Status:
    """What an impl of ``backend`` gives without a GPU: eager and compile run; Triton runs in its interpreter
    (not bfloat16); Numba in its simulator (``numba_dtypes``); CUDA C++ only compiles, then is SKIPPED."""
    if backend in ("eager", "compile"):
        return Status.PASSED
    if backend == "triton":
        return Status.SKIPPED if dtype == torch.bfloat16 else Status.PASSED
    if backend == "numba":
        return Status.PASSED if dtype in numba_dtypes else Status.SKIPPED
    return Status.SKIPPED


def assert_statuses(report: kk.RunReport, expected: Callable[[CaseResult], Status | tuple[Status, str]],
                    planted: Collection[str] = ()) -> None:
    """Every result as ``expected(result)`` says: a Status, or (Status, a word its message must hold); the impls
    in ``planted`` (wrong on purpose) must be INCORRECT_NUMERICS. Every mismatch is listed at once."""
    assert report.results, "the report has no results"
    wrong = []
    for r in report.results:
        want = Status.INCORRECT_NUMERICS if r.impl in planted else expected(r)
        status, word = want if isinstance(want, tuple) else (want, "")
        if r.status is not status or word not in r.message:
            wrong.append((r.case_id, r.status.value, f"expected {status.value}" + (f" saying {word!r}" if word else ""),
                          r.message))
    assert not wrong, wrong


def assert_expected_on_cpu(report: kk.RunReport, numba_dtypes: tuple[torch.dtype, ...] = (torch.float32,), *,
                           compiled: Collection[torch.dtype] = (), planted: Collection[str] = ()) -> None:
    """Every result as ``expected_on_cpu`` says for its backend and dtype; a CUDA C++ case in a ``compiled`` dtype
    (one its impl takes) says that it compiled before it was SKIPPED; the ``planted`` impls INCORRECT_NUMERICS."""
    def expected(r: CaseResult) -> tuple[Status, str]:
        dtype = getattr(torch, r.dtype)
        word = "it compiled" if r.backend == "cuda" and dtype in compiled else ""
        return expected_on_cpu(r.backend, dtype, numba_dtypes), word

    assert_statuses(report, expected, planted)


def assert_runs_on_gpu(report: kk.RunReport, impls: Mapping[str, Impl]) -> None:
    """On a GPU every impl PASSED, except in the dtypes it does not take (SKIPPED)."""
    def expected(r: CaseResult) -> Status:
        dtypes = impls[r.impl].dtypes
        return Status.PASSED if not dtypes or getattr(torch, r.dtype) in dtypes else Status.SKIPPED

    assert_statuses(report, expected)


def check_on_gpu(target: str, impls: Mapping[str, Impl], **options: Any) -> kk.RunReport:
    """``kk.check(target, device="cuda", **options)``, asserted as ``assert_runs_on_gpu`` says."""
    report = kk.check(target, device="cuda", **options)
    assert_runs_on_gpu(report, impls)
    return report


def assert_every_impl_passed(report: kk.RunReport, impls: Mapping[str, Impl], autotuned: Mapping[str, str]) -> None:
    """Every impl PASSED somewhere, and each impl in ``autotuned`` autotuned its kernel (impl -> kernel name)."""
    assert {r.impl for r in report.results if r.status is Status.PASSED} == set(impls)
    for r in report.results:
        if r.impl in autotuned:
            assert r.details["autotune"][autotuned[r.impl]]["tuned"] is True, r.case_id


def assert_matches_reference(out: Any, reference: Callable[..., Any], *inputs: Any,
                             tolerance: tuple[float, float] | None = None) -> None:
    """``out`` against ``reference`` run on the inputs in float64, by the checker's rule: at most ~2x the
    reference's own error in the inputs' dtype. tolerance: (atol, rtol), default TOLERANCES of the first input."""
    ref = reference(*[verify.to_reference_precision(t) for t in inputs])
    atol, rtol = tolerance or TOLERANCES[inputs[0].dtype]
    comparison = verify.compare(out, ref, atol, rtol, verify.reference_error(reference(*inputs), ref))
    assert comparison.ok, comparison.describe()


def edges_once_per_backend(cases: Sequence[Case], ops: Mapping[str, Op], at_edges: Collection[tuple[str, str]],
                           shape: Size) -> list[Case]:
    """``cases`` (every impl at every edge shape) cut to what the interpreter and the simulator need to see: the
    (op, impl) pairs in ``at_edges``, one per backend, at every shape; every other impl at ``shape`` alone, still in
    each dtype. The impls of one backend share its launch rules, so its edges are tested once, at ~1 s per impl,
    shape and dtype in the interpreter; an impl wrong at ``shape`` still fails."""
    backends = {(op, impl): ops[op].impls[impl].backend for op, impl in {(c.op, c.impl) for c in cases}}
    chosen = sorted(backends[pair] for pair in at_edges)
    assert chosen == sorted(set(backends.values())), f"one impl per backend at the edges, got {sorted(at_edges)}"
    kept = [c for c in cases if (c.op, c.impl) in at_edges or c.size == tuple(shape)]
    assert {(c.op, c.impl) for c in kept} == set(backends), f"an impl has no case at {shape}"
    return kept


def summary(report: kk.RunReport) -> list[tuple[str, str, str, str, str, str]]:
    """(op, impl, size, dtype, status, message) per result: a failed assertion shows what went wrong where."""
    return [(r.op, r.impl, "x".join(map(str, r.size)), r.dtype, r.status.value, r.message) for r in report.results]


def non_contiguous(t: torch.Tensor) -> torch.Tensor:
    """The same values with the dimensions laid out in reverse order in memory."""
    order = list(reversed(range(t.dim())))
    return t.permute(order).contiguous().permute(order)


def permuted(size: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, seed: int) -> torch.Tensor:
    """A seeded non-contiguous tensor of ``size``: drawn with its dimensions reversed, then permuted back."""
    x = seeded_normal(tuple(reversed(size)), dtype, device, seed)
    return x.permute(*reversed(range(x.dim())))


def misaligned(size: tuple[int, ...], dtype: torch.dtype, device: torch.device | str, seed: int) -> torch.Tensor:
    """A seeded contiguous view one element into a fresh (256-byte aligned) buffer: off every 16-byte boundary."""
    return seeded_normal((math.prod(size) + 1,), dtype, device, seed)[1:].view(size)


def each_input(make: Callable[..., torch.Tensor], n: int) -> Callable[..., tuple[torch.Tensor, ...]]:
    """An input factory of ``n`` tensors, each made by ``make(size, dtype, device, seed)`` from its own seed."""
    def factory(size, dtype, device, seed):
        return tuple(make(size, dtype, device, seed * 1009 + i) for i in range(n))
    return factory


def variant(op: Op, name: str, inputs: Callable[..., tuple[Any, ...]], *, sizes: Sequence[tuple[int, ...]],
            cpu_sizes: Sequence[tuple[int, ...]], dtypes: Sequence[torch.dtype] = FP) -> Op:
    """``op``'s reference and every impl under another name, on other inputs (non-contiguous, misaligned, ...).

    Bind it at module level in the test file: ``kk.check(__file__)`` checks every op there, in this process or in
    a worker.
    """
    copy = kk.op(sizes=list(sizes), cpu_sizes=list(cpu_sizes), dtypes=list(dtypes), inputs=inputs, name=name,
                 bytes=op.bytes_fn, flops=op.flops_fn, tolerance=op.tolerance or None)(op.reference)
    for impl_name, impl in op.impls.items():
        copy.impl(impl_name, impl.backend, kernels=impl.kernels, dtypes=impl.dtypes)(impl.fn)
    return copy


class NoLaunch:
    """Stands in for a kernel, a kernel table or a kernel module: using it to launch is an AssertionError."""

    def __init__(self, what: str = "a kernel") -> None:
        self.what = what

    def _refuse(self, *args: Any, **kwargs: Any) -> None:
        raise AssertionError(f"launched {self.what} on an empty input")

    launch = __call__ = _refuse

    def __getitem__(self, key: Any) -> NoLaunch:  # kernel[grid] and table[dtype]
        return self

    def __contains__(self, key: Any) -> bool:  # dtype in table: every dtype has a kernel
        return True

    def __iter__(self) -> Any:
        return iter(())

    def __getattr__(self, name: str) -> NoLaunch:  # module.some_kernel
        return NoLaunch(name)


class KernelSpy:
    """Stands in for an op's kernel module (``triton_kernels``): records the name of every kernel taken from it."""

    def __init__(self, module: Any) -> None:
        self.module = module
        self.used: list[str] = []

    def __getattr__(self, name: str) -> Any:
        self.used.append(name)
        return getattr(self.module, name)


# ---- host builds of CUDA sources (their __host__ __device__ lane code run on the CPU) --------------------------


def nvcc_host_build(folder: Path, harness: str, include_dir: Path) -> str:
    """``harness`` (C++ that includes a kernel source from ``include_dir``) built for the host by nvcc into
    ``folder``; the test is skipped where nvcc is missing. Returns the executable's path."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not here: the host build of a kernel's lane code needs it")
    (folder / "harness.cu").write_text(harness)
    subprocess.run([nvcc, "-std=c++17", "-O1", f"-I{include_dir}", "-o", str(folder / "harness"),
                    str(folder / "harness.cu")], check=True, capture_output=True, timeout=300)
    return str(folder / "harness")


def write_lowbit_args(folder: Path, x: torch.Tensor, packed: torch.Tensor, scales: torch.Tensor,
                      zeros: torch.Tensor | None) -> None:
    """A low-bit linear call's tensors as the host harnesses read them: x.bin, w.bin, s.bin, z.bin (raw bytes;
    16-bit floats as int16, no zeros as an empty file)."""
    for name, t in (("x", x.view(torch.int16)), ("w", packed), ("s", scales.view(torch.int16)),
                    ("z", zeros if zeros is not None else torch.zeros(0, dtype=torch.uint8))):
        t.contiguous().numpy().tofile(folder / f"{name}.bin")
