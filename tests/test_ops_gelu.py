"""The gelu ops: references against autograd and the formulas, every impl on CPU (interpreter, simulator; each
backend at edge shapes) and at edge shapes on a GPU, values at the extremes, and planted wrong impls that the check
must catch.

The ops defined below reuse the gelu impls on other inputs (non-contiguous tensors, views off a 16-byte
boundary) or plant wrong impls. They are module-level so ``kk.check(__file__)`` finds them, in this process or
in a worker.
"""

from __future__ import annotations

import math
import os
import re
import subprocess
import sys
import textwrap
from collections.abc import Callable, Sequence
from types import SimpleNamespace

import pytest
import torch
import torch.nn.functional as F

import kernelkit as kk
from kernelkit.ops import gelu as gelu_module
from kernelkit.results import Status
from kernelkit.runs.check import plan
from kernelkit.spec import Case, Op, dtype_name, seeded_normal
from opkit import (
    FP,
    NoLaunch,
    assert_expected_on_cpu,
    assert_matches_reference,
    each_input,
    edges_once_per_backend,
    misaligned,
    permuted,
    summary,
    variant,
)

OPS: dict[str, Op] = {op.name: op for op in (gelu_module.gelu, gelu_module.gelu_erf, gelu_module.gelu_backward,
                                             gelu_module.gelu_erf_backward)}
# Tiny CPU shapes (the simulator runs ~100 us per thread), each at an edge:
CPU_SHAPES = [
    (33, 17),  # odd in both dimensions: a vector tail (561 = 4 * 140 + 1), a partial Triton block
    (1, 257),  # one row, one past a power of two
    (3, 5, 7),  # 3-D: flattened like any other shape
]
# One impl per backend at every CPU shape: gelu_backward's. Every op's impls of a backend share one launcher
# (flat inputs, a flat grid); gelu_backward's pass it two inputs, the forward ops' one. The other ops' impls differ
# from these in the math alone, which CPU_SHAPES[0] (a partial block, a vector tail) tests in every dtype.
AT_EDGES = {("gelu_backward", name) for name in ("eager", "triton_flat", "numba_flat", "cuda_vec")}
CUDA_VEC_KERNELS = {name: [f"{name}_vec_{s}_kernel" for s in ("f32", "f16", "bf16")] for name in OPS}


gelu_permuted = variant(OPS["gelu"], "gelu_permuted", each_input(permuted, 1), sizes=[(1823, 781), (5, 67, 3)],
                        cpu_sizes=[(33, 17)])
gelu_backward_misaligned = variant(OPS["gelu_backward"], "gelu_backward_misaligned", each_input(misaligned, 2),
                                   sizes=[(1823, 781), (1, 4099)], cpu_sizes=[(1, 257)])

# Planted wrong impls, each beside a correct one on the same copy of a reference.
gelu_planted = kk.op(sizes=[(1823, 781)], cpu_sizes=[(33, 17)], name="gelu_planted")(gelu_module.gelu.reference)
gelu_planted.impl("eager_tanh")(lambda x: F.gelu(x, approximate="tanh"))
gelu_planted.impl("eager_erf_form")(F.gelu)  # the exact GELU where the tanh one is asked: up to 5e-4 off
gelu_erf_backward_planted = kk.op(sizes=[(1823, 781)], cpu_sizes=[(33, 17)], name="gelu_erf_backward_planted"
                                  )(gelu_module.gelu_erf_backward.reference)
gelu_erf_backward_planted.impl("eager")(gelu_module.gelu_erf_backward_eager)
gelu_erf_backward_planted.impl("eager_cdf_only")(  # dy * Phi(x): the x phi(x) term forgotten
    lambda x, dy: dy * 0.5 * (1 + torch.erf(x * gelu_module.INV_SQRT_2)))
PLANTED_EXPECTED = {"eager_tanh": Status.PASSED, "eager_erf_form": Status.INCORRECT_NUMERICS,
                    "eager": Status.PASSED, "eager_cdf_only": Status.INCORRECT_NUMERICS}
FILE_OPS = {op.name: op for op in (gelu_permuted, gelu_backward_misaligned, gelu_planted, gelu_erf_backward_planted)}


def _cases(ops: Sequence[str], device: str, target: str | None = None, **kwargs) -> list[Case]:
    """The cases of ``ops``, of the built-in ops of those names or of ``target``, once each."""
    found: dict[Case, None] = {}
    for source in [target] if target else ops:  # a built-in name may plan its whole module: keep ours, once
        found.update(dict.fromkeys(c for c in plan(source, device=device, **kwargs)[1] if c.op in ops))
    return list(found)





# ---- references ---------------------------------------------------------------------------------------------

REFERENCE_SHAPES = [(0,), (2, 0, 3), (), (7,), (33, 17), (3, 5, 7)]


def _wide(shape: tuple[int, ...], seed: int) -> torch.Tensor:
    """float64 normal values with standard deviation 3: both tails, where the cancellations are."""
    return seeded_normal(shape, torch.float64, "cpu", seed) * 3


@pytest.mark.parametrize("shape", REFERENCE_SHAPES)
@pytest.mark.parametrize(("backward", "forward"), [("gelu_backward", "gelu"), ("gelu_erf_backward", "gelu_erf")])
def test_backward_reference_is_autograd_of_the_forward_reference(backward: str, forward: str,
                                                                 shape: tuple[int, ...]) -> None:
    x = _wide(shape, 1).requires_grad_()
    dy = _wide(shape, 2)
    (expected,) = torch.autograd.grad(OPS[forward](x), x, dy)
    got = OPS[backward](x.detach(), dy)
    assert got.shape == shape and got.dtype == torch.float64
    torch.testing.assert_close(got, expected, rtol=1e-12, atol=1e-14)


def test_forward_references_are_the_formulas() -> None:
    x = _wide((4097,), 3)
    tanh_form = 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)))
    erf_form = 0.5 * x * (1 + torch.erf(x / math.sqrt(2)))
    torch.testing.assert_close(OPS["gelu"](x), tanh_form, rtol=1e-13, atol=1e-15)
    torch.testing.assert_close(OPS["gelu_erf"](x), erf_form, rtol=1e-13, atol=1e-15)


# gelu(0) = 0 and gelu'(0) = 1/2; gelu(x) = x and gelu'(x) = 1 far right; both ~0 far left; NaN stays NaN.
MODERATE = [0.0, 1e-30, 10.0, 30.0, 1e4, -10.0, -30.0, -1e4]
# Where x^3 and x^2 overflow in fp32 (past ~1e13 and ~1e19): the kernels still give no NaN. PyTorch's own
# gelu_backward, and so the tanh backward reference written like it, gives 0 * inf = NaN there.
HUGE = [1e13, 1e20, -1e13, -1e20]


def _check_extremes(name: str, fn: Callable[..., torch.Tensor], dtype: torch.dtype, device: str,
                    huge: bool = True, top_may_overflow: bool = False) -> None:
    """fn at the values above, its dtype's largest finite value and NaN. ``top_may_overflow``: past half that
    value, +inf is allowed as well as x (see FORWARD_REFERENCES_MAY_OVERFLOW); everything else is exact."""
    top = torch.finfo(dtype).max
    values = MODERATE + ([v for v in HUGE if abs(v) < top] + [top, -top] if huge else []) + [float("nan")]
    x = torch.tensor(values, dtype=dtype, device=device)
    dy = torch.ones_like(x)
    out = (fn(x, dy) if "backward" in name else fn(x)).double().cpu()
    x = x.double().cpu()
    right, left, nan = x >= 10, x <= -10, x.isnan()
    at_right = torch.ones_like(x) if "backward" in name else x
    if top_may_overflow:
        overflowed = (x > top / 2) & (out == math.inf)
        assert set(x[overflowed].tolist()) <= {top}, (name, dtype, out)
        right &= ~overflowed
    assert not out[~nan].isnan().any(), (name, dtype, out)
    assert out[nan].isnan().all(), (name, dtype, out)
    assert out[0] == (0.5 if "backward" in name else 0.0), (name, dtype, out)
    torch.testing.assert_close(out[right], at_right[right], rtol=1e-6, atol=0)
    assert (out[left].abs() <= 1e-20).all(), (name, dtype, out)  # gelu_erf'(-10) = -7.7e-22


# The forward references are PyTorch's fused F.gelu. At x near the dtype's largest finite value the exact answer
# is x, but whether PyTorch's CPU kernel returns x or +inf depends on the machine: its vectorized paths differ by
# ISA (AVX2, AVX-512, ...), and one that forms x * (1 + erf(x / sqrt 2)) before halving reaches 2x, past the
# largest finite value (for bfloat16 too: it computes in float32, whose largest value bfloat16's nearly equals).
# Seen: x on an AVX2 EPYC, +inf for float32 and bfloat16 on a Xeon with a 480 MiB L3 (torch 2.13.0+cpu).
# That is the platform's libm, not kernelkit's contract: the check compares every impl with the reference run in
# float64, where the case dtype's largest value is far from overflowing. So the forward references may give x or
# +inf past half the largest finite value, and nothing else anywhere; every kernelkit kernel must give x (the
# tests of the emulated and the GPU impls below hold them to it), and the backward references, written out in
# kernelkit with PDF and CDF terms that stay finite, must be exact everywhere.
FORWARD_REFERENCES_MAY_OVERFLOW = {"gelu", "gelu_erf"}


@pytest.mark.parametrize("dtype", [torch.float64, *FP])
@pytest.mark.parametrize("name", list(OPS))
def test_references_at_the_extremes(name: str, dtype: torch.dtype) -> None:
    _check_extremes(name, OPS[name].reference, dtype, "cpu", huge=name != "gelu_backward",
                    top_may_overflow=name in FORWARD_REFERENCES_MAY_OVERFLOW)


def test_the_extremes_check_allows_only_what_the_platform_may_do() -> None:
    def overflows_at_top(x: torch.Tensor) -> torch.Tensor:  # a reference whose vectorized path multiplies first
        wide = x.double()
        return torch.where(x.isfinite(), F.gelu(wide), wide).to(x.dtype).masked_fill(x == torch.finfo(x.dtype).max,
                                                                                       math.inf)

    _check_extremes("gelu_erf", overflows_at_top, torch.float32, "cpu", top_may_overflow=True)
    with pytest.raises(AssertionError):  # the same overflow in a kernel is a bug
        _check_extremes("gelu_erf", overflows_at_top, torch.float32, "cpu")

    def wrong_far_right(x: torch.Tensor) -> torch.Tensor:  # +inf at 1e4: never allowed
        return F.gelu(x).masked_fill(x == 1e4, math.inf)

    with pytest.raises(AssertionError):
        _check_extremes("gelu_erf", wrong_far_right, torch.float32, "cpu", top_may_overflow=True)


@pytest.mark.filterwarnings("ignore:overflow encountered:RuntimeWarning")  # x^3 -> inf, as on a GPU
def test_extremes_in_the_cpu_emulated_impls(cpu_process: None) -> None:
    for name, op in OPS.items():
        for impl in ("triton_flat", "numba_flat"):
            _check_extremes(f"{name}/{impl}", op.impls[impl].fn, torch.float32, "cpu")


# ---- every impl on the CPU ----------------------------------------------------------------------------------


def test_each_backend_at_edge_shapes_and_every_impl_on_cpu(cpu_process: None, can_compile: bool) -> None:
    cases = edges_once_per_backend(_cases(list(OPS), "cpu", sizes=CPU_SHAPES, dtypes=list(FP)), OPS, AT_EDGES,
                                   CPU_SHAPES[0])
    report = kk.run_cases(cases, "cpu", isolate=False)
    impls = sum(len(op.impls) for op in OPS.values())
    assert len(report.results) == (len(AT_EDGES) * len(CPU_SHAPES) + impls - len(AT_EDGES)) * len(FP)
    assert_expected_on_cpu(report)
    for r in report.results:
        if r.impl.startswith("cuda") and r.dtype == "float32" and can_compile:  # built before "no GPU"
            assert "compiled" in r.message and all(k.name in r.message for k in OPS[r.op].impls[r.impl].kernels)
    tuned = [next(iter(r.details["autotune"].values())) for r in report.results
             if r.impl == "triton_flat" and r.status is Status.PASSED]
    assert len(tuned) == (len(OPS) + len(CPU_SHAPES) - 1) * 2  # float32 and float16
    assert all(re.match(r"BLOCK_SIZE=\d+, num_warps=\d+, num_stages=\d+$", t["config"]) for t in tuned)


def test_flat_impls_span_several_blocks_on_cpu(cpu_process: None) -> None:
    # 21003 elements: more than one program at every autotuned BLOCK_SIZE (at most 8192), with a partial last
    # one; and 41 grid-stride steps per simulated thread, the last of them partial.
    cases = _cases(["gelu", "gelu_erf_backward"], "cpu", impls=["triton_flat", "numba_flat"],
                   sizes=[(3, 7001)], dtypes=[torch.float32])
    report = kk.run_cases(cases, "cpu", isolate=False)
    assert [r.status for r in report.results] == [Status.PASSED] * 4, summary(report)


def test_non_contiguous_and_misaligned_inputs_on_cpu(cpu_process: None) -> None:
    assert not permuted((33, 17), torch.float32, "cpu", 0).is_contiguous()
    assert misaligned((1, 257), torch.float16, "cpu", 0).data_ptr() % 16 != 0
    cases = _cases(["gelu_permuted", "gelu_backward_misaligned"], "cpu", __file__, dtypes=[torch.float32])
    report = kk.run_cases(cases, "cpu", isolate=False)
    assert {r.op for r in report.results} == {"gelu_permuted", "gelu_backward_misaligned"}
    assert_expected_on_cpu(report)


def test_planted_wrong_formulas_are_incorrect_numerics() -> None:
    cases = _cases(["gelu_planted", "gelu_erf_backward_planted"], "cpu", __file__)
    report = kk.run_cases(cases, "cpu", isolate=False)
    assert {r.impl: r.status for r in report.results} == PLANTED_EXPECTED, summary(report)


def test_empty_input_gives_empty_output_without_a_launch(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gelu_module, "launch", NoLaunch("launch"))
    monkeypatch.setattr(gelu_module, "CUDA_DOUBLE", NoLaunch("CUDA_DOUBLE"))
    monkeypatch.setattr(gelu_module, "CUDA_VEC", {name: NoLaunch(name) for name in OPS})
    monkeypatch.setattr(gelu_module, "triton_kernels", NoLaunch("triton_kernels"))
    for shape in [(0,), (0, 5), (4, 0, 3)]:
        for dtype in (torch.float32, torch.float16):
            x = torch.empty(shape, dtype=dtype)
            for name, op in OPS.items():
                for impl in op.impls.values():
                    if impl.dtypes and dtype not in impl.dtypes:
                        continue
                    y = impl.fn(x, x) if "backward" in name else impl.fn(x)
                    assert (y.shape, y.dtype, y.device) == (x.shape, x.dtype, x.device), (name, impl.name)


def test_backward_impls_reject_a_dy_unlike_x() -> None:
    x = torch.zeros(4, 5)
    for bad in (torch.zeros(5, 4), torch.zeros(4, 5, dtype=torch.float16)):
        with pytest.raises(ValueError, match="dy must match x"):
            gelu_module.gelu_backward_triton_flat(x, bad)


# ---- what the kernels compile to (no GPU needed) ------------------------------------------------------------


def test_cuda_kernels_compile_for_sm90_without_a_gpu(can_compile: bool) -> None:
    if not can_compile:
        pytest.skip("neither NVRTC (cuda.core) nor nvcc is here")
    assert [k.name for k in OPS["gelu"].impls["cuda_double"].kernels] == ["gelu_double_kernel"]
    for name, op in OPS.items():
        kernels = op.impls["cuda_vec"].kernels
        assert [k.name for k in kernels] == CUDA_VEC_KERNELS[name]
        for kernel in (*kernels, *op.impls.get("cuda_double", SimpleNamespace(kernels=())).kernels):
            built = kernel.compile("sm_90")
            assert built.arch == "sm_90" and built.cubin[:4] == b"\x7fELF", built


# 16-byte loads and stores in the main loop: forward 2 x (x) and 2 x (y), unrolled twice; backward x, dy and dx.
VECTOR_ACCESSES = {"gelu": (2, 2), "gelu_erf_backward": (2, 1)}


@pytest.mark.parametrize(("name", "dtype"), [("gelu", "float32"), ("gelu_erf_backward", "bfloat16")])
def test_cuda_vec_moves_16_byte_vectors_in_fp32_math(name: str, dtype: str, can_compile: bool) -> None:
    if not can_compile:
        pytest.skip("neither NVRTC (cuda.core) nor nvcc is here")
    (kernel,) = kk.asm("gelu", "cuda_vec", op_name=name, dtype=dtype, ir="sass").kernels
    if kernel.memory is None:
        pytest.skip("no disassembler here")
    loads, stores = kernel.memory.global_loads.get(128, 0), kernel.memory.global_stores.get(128, 0)
    assert (loads, stores) == VECTOR_ACCESSES[name], kernel.memory
    assert kernel.resources.spill_stores == 0 and kernel.resources.registers <= 32  # 8 blocks of 256 per SM
    assert not re.search(r"\b(DADD|DMUL|DFMA|F2F\.F64)", kernel.listings["sass"])  # no double-precision math


@pytest.mark.slow
def test_numba_kernels_compile_to_float32_only_ptx() -> None:
    # A float literal in a Numba kernel is float64 and drags the math with it. Numba must compile for a real GPU
    # to show that, so in a process without the simulator; its PTX must hold no .f64 instruction.
    pytest.importorskip("numba")
    script = textwrap.dedent("""
        import re
        from kernelkit import backends
        backends.prepare_process("cuda")
        from numba import cuda, float32
        from kernelkit.ops.gelu import numba as gelu_numba
        for name in ("gelu_flat_kernel", "gelu_erf_flat_kernel", "gelu_backward_flat_kernel",
                     "gelu_erf_backward_flat_kernel"):
            args = 3 if "backward" in name else 2
            ptx, _ = cuda.compile_ptx(getattr(gelu_numba, name).py_func, (float32[::1],) * args, cc=(9, 0))
            print(name, "f64" if re.search(r"\\.f64\\b", ptx) else "f32")
    """)
    env = {**os.environ, "NUMBA_ENABLE_CUDASIM": "0", "TRITON_INTERPRET": "0"}
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, env=env, timeout=120)
    if done.returncode and ("CudaSupportError" in done.stderr or "NvvmSupportError" in done.stderr):
        pytest.skip(f"Numba cannot compile for a GPU here: {done.stderr.strip().splitlines()[-1]}")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:4] == [f"{name} f32" for name in (
        "gelu_flat_kernel", "gelu_erf_flat_kernel", "gelu_backward_flat_kernel", "gelu_erf_backward_flat_kernel")]


# ---- GPU: each case in a spawned worker, so this process's CPU-mode environment cannot leak in -------------


@pytest.mark.gpu
@pytest.mark.slow
def test_every_impl_on_large_tensors_on_gpu() -> None:
    # 4096x4096, 1823x781, 1x4097 in fp32, bf16, fp16, each op
    report = kk.run_cases(_cases(list(OPS), "cuda"), "cuda")
    for r in report.results:
        impl = OPS[r.op].impls[r.impl]
        runs_here = not impl.dtypes or getattr(torch, r.dtype) in impl.dtypes
        assert r.status is (Status.PASSED if runs_here else Status.SKIPPED), (r.case_id, r.status, r.message)
        if r.impl == "triton_flat":
            assert next(iter(r.details["autotune"].values()))["tuned"] is True, r.case_id
    passed = {(r.op, r.impl) for r in report.results if r.status is Status.PASSED}
    assert passed == {(name, impl) for name, op in OPS.items() for impl in op.impls}


@pytest.mark.gpu
@pytest.mark.slow
def test_non_contiguous_misaligned_and_planted_on_gpu() -> None:
    report = kk.check(__file__, device="cuda")
    for r in report.results:
        impl = FILE_OPS[r.op].get_impl(r.impl)
        if r.op.endswith("_planted"):
            expected = PLANTED_EXPECTED[r.impl]
        else:
            expected = Status.PASSED if not impl.dtypes or getattr(torch, r.dtype) in impl.dtypes else Status.SKIPPED
        assert r.status is expected, (r.case_id, r.status, r.message)
    assert {(r.impl, r.dtype) for r in report.results if r.status is Status.PASSED} >= {
        ("cuda_vec", dtype_name(dtype)) for dtype in FP}


@pytest.mark.gpu
def test_extremes_in_every_impl_on_gpu() -> None:
    for name, op in OPS.items():
        for impl in op.impls.values():
            for dtype in impl.dtypes or FP:
                _check_extremes(f"{name}/{impl.name}", impl.fn, dtype, "cuda", huge=impl.backend != "eager")


@pytest.mark.gpu
@pytest.mark.parametrize("offset", [0, 1, 3, 8])  # aligned; 1 and 3 elements off 16 B; 8 elements: aligned again
@pytest.mark.parametrize("dtype", FP)
def test_cuda_vec_at_every_alignment_and_tail_on_gpu(offset: int, dtype: torch.dtype) -> None:
    bases = [torch.randn(3 * 2**20 + 16, device="cuda").to(dtype) for _ in range(2)]
    # Shorter than one vector; odd tails; more elements than one full wave of threads covers (H100: 132 SMs x
    # 2048 threads x 4 or 8 elements x 2 unrolled), so threads take several grid-stride steps.
    for n in (1, 7, 4097, 3 * 2**20 + 5):
        x, dy = (b[offset:offset + n] for b in bases)
        for name, op in OPS.items():
            inputs = (x, dy) if "backward" in name else (x,)
            assert_matches_reference(op.impls["cuda_vec"].fn(*inputs), op.reference, *inputs,
                                     tolerance=op.tolerance_for(dtype))


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("impl", ["cuda_vec", "triton_flat"])
def test_offsets_past_2_to_the_31_on_gpu(impl: str) -> None:
    # 2**31 + 37 bf16 elements (4 GiB in, 4 GiB out): int32 offsets would wrap and write below the tensor.
    n = 2**31 + 37
    x = torch.randn(n, device="cuda", dtype=torch.bfloat16)
    y = OPS["gelu"].impls[impl].fn(x)
    for part in (slice(0, 4096), slice(2**31 - 4096, 2**31 + 4096), slice(n - 4096, n)):
        assert_matches_reference(y[part], OPS["gelu"].reference, x[part],
                                 tolerance=OPS["gelu"].tolerance_for(x.dtype))
