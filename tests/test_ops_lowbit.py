"""The low-bit linear ops: the packing round-trips, the quantizer's error bound, every Triton kernel in the
interpreter against the reference (M = 1, 3, 17; K of 64 to 256, short groups and padded words; fp16 and fp32),
the dispatcher, PyTorch's own packed matmuls, LowBitLinear against its nn.Linear and under torch.compile, and the
errors bad inputs get. GPU tests (the default sizes, every kernel in bf16) carry the gpu marker.
"""

from __future__ import annotations

import math

import pytest
import torch

import kernelkit as kk
from kernelkit.ops import lowbit
from kernelkit.ops.lowbit import inputs as lowbit_inputs
from kernelkit.ops.lowbit import launch, packing, quantization, torch_packed
from kernelkit.ops.lowbit import module as lowbit_module
from kernelkit.results import Status
from kernelkit.spec import seeded_normal
from opkit import assert_matches_reference

try:  # the GPU machine may lack hypothesis: only the property tests need it
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ImportError:  # pragma: no cover - exercised where hypothesis is missing
    given = None

TRITON = ["triton_gemv", "triton_splitk", "triton_splitk_twopass", "triton_gemm", "triton_dequant_cublas"]
CPU = torch.device("cpu")
# (bits, group_size, symmetric): each op's default inputs, and the other quantizations the kernels take.
QUANTIZATIONS = [(4, 128, False), (8, None, True), (2, 64, False), (4, 32, True), (8, 64, False), (2, None, False),
                 (4, None, False)]


def _inputs(bits, group_size, symmetric, size, dtype, seed=0, device=CPU):
    return lowbit_inputs.seeded_inputs(bits, group_size, symmetric)(size, dtype, torch.device(device), seed)


# ---- packing ----------------------------------------------------------------------------------------------


def test_the_packed_layout_is_the_documented_one() -> None:
    # 4 bits: k = 8j + i sits in word j at bits 4i..4i+3, the lowest k in the lowest bits.
    codes = torch.tensor([[0, 1, 2, 3, 4, 5, 6, 7, 15, 14]], dtype=torch.int32)
    words = packing.pack(codes, 4)
    assert words.dtype == torch.int32 and words.shape == (1, 2)
    assert words[0, 0].item() == 0x76543210
    assert words[0, 1].item() == 0xEF  # k = 8, 9; the padding codes of the last word are 0
    # The top code fills the sign bit: the word is a bit pattern, negative as an int32.
    assert packing.pack(torch.full((1, 8), 15), 4)[0, 0].item() == -1
    assert packing.pack(torch.tensor([[1, 2, 3, 255]]), 8)[0, 0].item() == (0xFF030201 - (1 << 32))
    assert packing.pack(torch.tensor([[1, 2, 3] + [0] * 12 + [3]]), 2)[0, 0].item() == (0xC0000039 - (1 << 32))


def _roundtrip(n: int, k: int, bits: int, seed: int) -> None:
    gen = torch.Generator().manual_seed(seed)
    codes = torch.randint(0, 1 << bits, (n, k), generator=gen, dtype=torch.int32)
    words = packing.pack(codes, bits)
    per_word = 32 // bits
    assert words.shape == (n, math.ceil(k / per_word)) and words.dtype == torch.int32
    assert torch.equal(packing.unpack(words, bits, k), codes)
    if k % per_word:  # the padding of the last word is zero bits
        padded = packing.unpack(words, bits, words.shape[1] * per_word)
        assert not padded[:, k:].any()


if given is not None:

    @settings(max_examples=60, deadline=None)
    @given(n=st.integers(0, 5), k=st.integers(0, 70), bits=st.sampled_from(packing.BITS), seed=st.integers(0, 99))
    def test_packing_round_trips_exactly(n: int, k: int, bits: int, seed: int) -> None:
        _roundtrip(n, k, bits, seed)

else:

    @pytest.mark.parametrize("bits", packing.BITS)
    @pytest.mark.parametrize("n, k", [(0, 5), (3, 0), (1, 1), (4, 33), (2, 70)])
    def test_packing_round_trips_exactly(n: int, k: int, bits: int) -> None:  # without hypothesis: fixed cases
        _roundtrip(n, k, bits, n * 100 + k)


def test_packing_rejects_what_it_cannot_pack() -> None:
    with pytest.raises(ValueError, match=r"4-bit codes must lie in \[0, 15\], got values in \[0, 16\]"):
        packing.pack(torch.tensor([[0, 16]]), 4)
    with pytest.raises(ValueError, match=r"\[-1, 3\]"):
        packing.pack(torch.tensor([[-1, 3]]), 2)
    with pytest.raises(TypeError, match="integer tensor"):
        packing.pack(torch.zeros(2, 8), 4)
    with pytest.raises(ValueError, match="bits must be one of"):
        packing.pack(torch.zeros(2, 8, dtype=torch.int32), 3)
    with pytest.raises(ValueError, match=r"2-D \(N, K\)"):
        packing.pack(torch.zeros(8, dtype=torch.int32), 4)
    words = packing.pack(torch.zeros(2, 20, dtype=torch.int32), 4)
    with pytest.raises(ValueError, match=r"3 words per row; K = 32 at 4 bits needs 4 \(ceil\(K / 8\)\)"):
        packing.unpack(words, 4, 32)


# ---- quantization -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits, group_size, symmetric", QUANTIZATIONS)
@pytest.mark.parametrize("scale_dtype", [torch.float32, torch.float16, torch.bfloat16])
def test_every_weight_is_within_half_a_step_of_its_code(bits, group_size, symmetric, scale_dtype) -> None:
    k = 200  # not a multiple of 32, 64 or 128: a short last group
    weight = seeded_normal((6, k), torch.float32, CPU, 3) * torch.linspace(0.01, 3, 6)[:, None]
    weight[2, :40] = 0  # a group of zeros at every group size
    q = quantization.quantize(weight, bits, group_size, symmetric=symmetric, scale_dtype=scale_dtype)
    groups = quantization.n_groups(k, group_size)
    assert q.packed.shape == (6, packing.packed_width(k, bits)) and q.scales.shape == (6, groups)
    assert q.scales.dtype == scale_dtype and bool((q.scales > 0).all())
    assert (q.zeros is None) == symmetric
    if q.zeros is not None:
        assert q.zeros.dtype == torch.uint8 and int(q.zeros.max()) < 1 << bits
    per_column = torch.repeat_interleave(q.scales.double(), group_size or k, dim=1)[:, :k]
    error = (q.dequantize(torch.float64) - weight.double()).abs()
    assert bool((error <= per_column / 2 * (1 + 1e-12)).all()), float((error / per_column).max())
    size = group_size or k
    assert not q.dequantize()[2, : 40 // size * size].any()  # whole groups of zeros stay exactly zero
    codes = packing.unpack(q.packed, bits, k)
    if symmetric:  # codes 1 .. 2**bits - 1 around the middle; zero is exact
        assert int(codes.min()) >= 1
    # The stored scale is never below the exact one: rounding it down could clamp the group's extremes.
    wg = torch.nn.functional.pad(weight, (0, groups * size - k)).view(6, groups, size)
    top = (1 << bits) - 1
    exact = wg.abs().amax(-1) / (top >> 1) if symmetric else (wg.amax(-1).clamp(min=0) - wg.amin(-1).clamp(max=0)) / top
    assert bool((q.scales.float() >= exact).all())


def test_quantize_rejects_bad_arguments() -> None:
    w = torch.ones(4, 64)
    with pytest.raises(ValueError, match=r"power of two of at least 8 at 4 bits .* or None for per-channel; got 48"):
        quantization.quantize(w, 4, 48)
    with pytest.raises(ValueError, match="at least 16 at 2 bits"):
        quantization.quantize(w, 2, 8)
    with pytest.raises(ValueError, match="bits must be one of"):
        quantization.quantize(w, 3, 32)
    with pytest.raises(TypeError, match="scale_dtype"):
        quantization.quantize(w, 4, 32, scale_dtype=torch.int32)
    with pytest.raises(ValueError, match="NaN or infinite"):
        quantization.quantize(torch.full((2, 32), float("nan")), 4, 32)
    with pytest.raises(ValueError, match="overflows torch.float16"):
        quantization.quantize(torch.tensor([[1e9, -1e9]]), 4, None, scale_dtype=torch.float16)


# ---- every kernel in the interpreter ----------------------------------------------------------------------

# (M, N, K) with the activation dtype: M = 1, 3, 17 with K = 64 .. 256; 100 pads a word (and a 2-bit one), 192 is
# 1.5 groups of 128, 200 ends on a short group of 8 at g32. N = 33 and 40 leave partial tiles of rows.
KERNEL_CASES = [((1, 40, 256), torch.float16), ((3, 33, 100), torch.float32), ((17, 40, 192), torch.float16),
                ((3, 24, 64), torch.float32), ((1, 33, 200), torch.float16), ((17, 16, 128), torch.float32)]


@pytest.mark.parametrize("quantization", range(len(QUANTIZATIONS)))
def test_every_kernel_matches_the_reference_in_the_interpreter(quantization: int, cpu_process) -> None:
    # Each quantization on two of the cases, in turn (the interpreter runs ~1 ms a program): every case and both
    # dtypes meet every bit width.
    bits, group_size, symmetric = QUANTIZATIONS[quantization]
    op = lowbit.OPS[bits]
    for index in (quantization % len(KERNEL_CASES), (quantization + 3) % len(KERNEL_CASES)):
        size, dtype = KERNEL_CASES[index]
        args = _inputs(bits, group_size, symmetric, size, dtype, seed=index)
        for name in TRITON:
            if name == "triton_gemv" and size[0] > 3:
                continue  # a row of programs per row of x: 17 rows cost ~2 s here (the test below has them)
            out = op.impls[name].fn(*args)
            assert out.shape == (size[0], size[1]) and out.dtype == dtype, name
            assert_matches_reference(out, lowbit.OPS[bits].reference, *args)


@pytest.mark.parametrize("split_k", [1, 4])
def test_gemv_with_and_without_split_k_on_ragged_n_and_k(split_k: int, cpu_process, monkeypatch) -> None:
    # One config at a time (the interpreter's default splits in 2). N = 33: a partial block of 16 rows; K = 200:
    # a short last group at g128, 25 words in tiles of 8 (a partial tile; 4 splits of 8, 8, 8, 1 words); K = 100
    # at 8 bits: 25 words again, per-channel; 2 rows of x: the counters of one row never serve another.
    from kernelkit.ops.lowbit import triton_gemv

    config = triton_gemv._config(16, 8, 4, 1, split_k)
    monkeypatch.setattr(triton_gemv.lowbit_gemv_kernel, "configs", [config])
    assert (config.pre_hook is None) == (split_k == 1)
    for bits, group_size, symmetric, size, dtype in [(4, 128, False, (1, 33, 200), torch.float16),
                                                      (8, None, True, (2, 33, 100), torch.float32)]:
        args = _inputs(bits, group_size, symmetric, size, dtype)
        first = lowbit.OPS[bits].impls["triton_gemv"].fn(*args)
        assert_matches_reference(first, lowbit.OPS[bits].reference, *args)
        if split_k > 1:  # nothing left behind: a second call computes the same (its workspace is its own)
            assert torch.equal(lowbit.OPS[bits].impls["triton_gemv"].fn(*args), first)


def test_gemv_configs_are_the_measured_winners_and_split_ones_zero_their_workspace() -> None:
    from kernelkit.ops.lowbit import triton_gemv

    shown = {(c.kwargs["BLOCK_N"], c.kwargs["BLOCK_KW"], c.num_warps, c.num_stages, c.kwargs["SPLIT_K"])
             for c in triton_gemv.GEMV_CONFIGS}
    assert shown == {(8, 64, 4, 1, 1), (4, 128, 4, 1, 1), (16, 64, 4, 1, 4), (4, 128, 4, 2, 2)}
    for config in triton_gemv.GEMV_CONFIGS:
        assert (config.pre_hook is None) == (config.kwargs["SPLIT_K"] == 1)
    workspace = torch.ones(6, dtype=torch.int32)
    triton_gemv._zero_workspace({"ws_ptr": workspace})
    assert not workspace.any()
    # whole tiles a split, none empty: 25 words in tiles of 8 over 4 splits are 8 + 8 + 8 + 1
    assert triton_gemv.words_per_split(25, 8, 4) == 8 and triton_gemv.words_per_split(25, 8, 1) == 32
    assert math.ceil(1792 / triton_gemv.words_per_split(1792, 64, 4)) == 4  # 4096x14336 int8 at sk4
    assert math.ceil(512 / triton_gemv.words_per_split(512, 128, 8)) == 4  # never more splits than tiles


def test_the_checker_passes_every_impl_on_cpu(cpu_process) -> None:
    report = kk.check("linear_w4", device="cpu", isolate=False, sizes=[(3, 32, 256)],
                      dtypes=[torch.float16, torch.bfloat16])
    assert {r.impl for r in report.results} == set(lowbit.linear_w4.impls)
    for r in report.results:
        on_cpu_bf16 = r.backend == "triton" and r.dtype == "bfloat16"
        skipped = on_cpu_bf16 or r.backend == "cuda"  # CUDA kernels are compiled, then SKIPPED: no GPU
        assert r.status is (Status.SKIPPED if skipped else Status.PASSED), (r.case_id, r.status, r.message)


def test_leading_dimensions_and_non_contiguous_activations(cpu_process) -> None:
    x, packed, scales, zeros, group_size = _inputs(4, 32, False, (6, 24, 64), torch.float16)
    x3 = x.t().contiguous().t().view(2, 3, 64)  # (2, 3, 64), column-major underneath
    assert lowbit.linear_w4.reference(x3, packed, scales, zeros, group_size).shape == (2, 3, 24)
    for name in ("triton_auto", "triton_gemv", "eager_dequant"):
        out = lowbit.linear_w4.impls[name].fn(x3, packed, scales, zeros, group_size)
        assert out.shape == (2, 3, 24)
        assert_matches_reference(out.view(6, 24), lowbit.OPS[4].reference, x, packed, scales, zeros, group_size)


def test_empty_outputs_launch_nothing_and_an_empty_k_gives_zeros(monkeypatch) -> None:
    def no_launch(*args, **kwargs):
        raise AssertionError("launched a kernel for an empty output")

    monkeypatch.setattr(launch, "KERNELS", {name: no_launch for name in launch.KERNELS})
    x, packed, scales, zeros, group_size = _inputs(4, 32, False, (3, 8, 64), torch.float16)
    for name in ("triton_auto", "eager_dequant"):
        fn = lowbit.linear_w4.impls[name].fn
        assert fn(x[:0], packed, scales, zeros, group_size).shape == (0, 8)
        assert fn(x, packed[:0], scales[:0], zeros[:0], group_size).shape == (3, 0)
    empty_k = lowbit.linear_w4.impls["triton_auto"].fn(
        x[:, :0], torch.zeros(8, 0, dtype=torch.int32), scales[:, :1], zeros[:, :1], group_size)
    assert empty_k.shape == (3, 8) and not empty_k.any()


# ---- the dispatcher ---------------------------------------------------------------------------------------


def test_the_dispatcher_picks_by_rows() -> None:
    pick = launch.pick_kernel
    assert [pick(m) for m in (1, 2, 16, 64, 65, 300, 1023, 1024, 4096)] == [
        "gemv", "splitk", "splitk", "splitk", "gemm", "gemm", "gemm", "dequant_cublas", "dequant_cublas"]
    assert launch.GEMV_MAX_M < launch.SPLITK_MAX_M < launch.DEQUANT_CUBLAS_MIN_M


@pytest.mark.parametrize("m, kernel", [(1, "gemv"), (3, "splitk"), (17, "splitk"), (65, "gemm"),
                                       (1024, "dequant_cublas")])
def test_triton_auto_runs_the_kernel_it_picks(m: int, kernel: str, monkeypatch) -> None:
    used: list[str] = []
    reference = lowbit.linear_w4.impls["eager_dequant"].fn
    fake = {name: (lambda p, name=name: (used.append(name), torch.zeros(p.shape.m, p.shape.n, dtype=p.x.dtype))[1])
            for name in launch.KERNELS}
    monkeypatch.setattr(launch, "KERNELS", fake)
    args = _inputs(4, 32, False, (m, 8, 32), torch.float32)
    assert lowbit.linear_w4.impls["triton_auto"].fn(*args).shape == reference(*args).shape
    assert used == [kernel]


def test_split_k_fills_the_machine_without_empty_splits() -> None:
    # N = 4096: 64 tiles of 64 channels; 132 SMs want ~264 programs, so 5 splits of 32 K tiles (7, 7, 7, 7, 4).
    assert launch.split_count(16, 4096, 4096, 132) == 5
    assert launch.split_count(16, 14336, 4096, 132) == 2  # 224 tiles: two splits make 448 programs
    assert launch.split_count(1, 64, 256, 132) == 2  # only 2 K tiles: never more splits than tiles
    assert launch.split_count(64, 14336, 14336, 132) == 2
    assert [launch.splitk_tiles(m) for m in (1, 16, 17, 33, 64)] == [16, 16, 32, 64, 64]
    for m, n, k in [(5, 100, 1000), (16, 4096, 14336), (64, 4096, 128)]:
        split = launch.split_count(m, n, k, 132)
        k_tiles = math.ceil(k / launch.SPLITK_BLOCK_K)
        per_split = math.ceil(k_tiles / split)
        assert (split - 1) * per_split < k_tiles  # the last split has work


# ---- PyTorch's packed matmuls -----------------------------------------------------------------------------


def test_torch_int4pack_and_int8pack_match_the_reference_on_cpu() -> None:
    for dtype in (torch.float32, torch.float16, torch.bfloat16):
        args = _inputs(4, 32, False, (3, 32, 128), dtype)
        assert_matches_reference(lowbit.linear_w4.impls["eager_int4pack_mm"].fn(*args), lowbit.OPS[4].reference, *args)
        args = _inputs(8, None, True, (3, 24, 112), dtype)
        assert_matches_reference(lowbit.linear_w8.impls["eager_int8pack_mm"].fn(*args), lowbit.OPS[8].reference, *args)
    args = _inputs(8, None, True, (3, 24, 104), torch.bfloat16)  # K = 8 mod 16: PyTorch's CPU kernel is wrong there
    with pytest.raises(kk.BackendUnavailable, match="multiple of 16"):
        lowbit.linear_w8.impls["eager_int8pack_mm"].fn(*args)


def test_torch_packed_impls_skip_what_pytorch_does_not_take() -> None:
    args = _inputs(4, 128, False, (1, 32, 192), torch.float16)  # K not a multiple of the group
    with pytest.raises(kk.BackendUnavailable, match="dividing K"):
        lowbit.linear_w4.impls["eager_int4pack_mm"].fn(*args)
    args = _inputs(8, 64, True, (1, 32, 128), torch.float16)
    with pytest.raises(kk.BackendUnavailable, match="per-channel"):
        lowbit.linear_w8.impls["eager_int8pack_mm"].fn(*args)
    args = _inputs(8, None, True, (1, 32, 100), torch.float16)  # PyTorch's CPU kernel would read past the rows
    with pytest.raises(kk.BackendUnavailable, match="K a multiple of 8"):
        lowbit.linear_w8.impls["eager_int8pack_mm"].fn(*args)
    args = _inputs(4, 32, False, (1, 24, 128), torch.float16)
    with pytest.raises(kk.BackendUnavailable, match="N a multiple of 16"):
        lowbit.linear_w4.impls["eager_int4pack_mm"].fn(*args)


def test_the_conversion_cache_never_answers_for_another_tensor() -> None:
    calls: list[int] = []
    a = torch.arange(4)
    first = torch_packed.cached("test", (a,), lambda: (calls.append(1), (a * 2,))[1])
    assert torch_packed.cached("test", (a,), lambda: (calls.append(1), (a * 3,))[1]) is first
    a.add_(1)  # modified in place: converted again
    torch_packed.cached("test", (a,), lambda: (calls.append(1), (a * 2,))[1])
    b = torch.arange(4)  # another tensor, whatever its address
    assert torch_packed.cached("test", (b,), lambda: (calls.append(1), (b * 5,))[1])[0].tolist() == [0, 5, 10, 15]
    assert len(calls) == 3


# ---- bad inputs -------------------------------------------------------------------------------------------


def test_bad_inputs_get_errors_that_name_the_argument() -> None:
    x, packed, scales, zeros, group_size = _inputs(4, 32, False, (2, 8, 64), torch.float16)
    fn = lowbit.linear_w4.impls["triton_auto"].fn
    with pytest.raises(ValueError, match=r"packed has 8 words a row, but x has K = 72: 4-bit codes need 9"):
        fn(torch.zeros(2, 72, dtype=torch.float16), packed, scales, zeros, group_size)
    with pytest.raises(ValueError, match=r"scales must be float of shape \(8, 2\) \(N, G: groups of 32"):
        fn(x, packed, scales[:, :1], zeros, group_size)
    with pytest.raises(ValueError, match=r"zeros must be uint8 codes of shape \(8, 2\)"):
        fn(x, packed, scales, zeros.to(torch.int32), group_size)
    with pytest.raises(TypeError, match="packed must be the int32"):
        fn(x, packed.to(torch.int64), scales, zeros, group_size)
    with pytest.raises(TypeError, match="x must be a float tensor"):
        fn(x.to(torch.int32), packed, scales, zeros, group_size)
    with pytest.raises(TypeError, match="x must be a float tensor"):
        fn(x.double(), packed, scales, zeros, group_size)  # only the reference takes float64
    with pytest.raises(ValueError, match="power of two"):
        fn(x, packed, scales, zeros, 24)
    meta = torch.empty(8, 2, dtype=torch.float16, device="meta")
    with pytest.raises(ValueError, match="one device"):
        fn(x, packed, meta, zeros, group_size)


# ---- LowBitLinear -----------------------------------------------------------------------------------------


@pytest.mark.parametrize("bits, group_size", [(4, 64), (8, None), (2, 32)])
def test_lowbit_linear_matches_its_linear_within_the_quantization_error(bits, group_size) -> None:
    torch.manual_seed(bits)
    linear = torch.nn.Linear(96, 20)
    layer = lowbit.LowBitLinear.from_linear(linear, bits=bits, group_size=group_size)
    x = torch.randn(2, 3, 96)
    y = layer(x)
    assert y.shape == (2, 3, 20) and y.dtype == torch.float32
    # Each weight is within half a step of its code: |y - y_linear| <= sum_k |x_k| s_k / 2 (plus fp32 rounding).
    steps = torch.repeat_interleave(layer.scales.float(), group_size or 96, dim=1)[:, :96]
    bound = x.abs() @ (steps / 2).T + 1e-4
    assert bool(((y - linear(x)).abs() <= bound).all())
    assert layer.impl_for(torch.device("cpu")) == "eager_dequant"
    on_gpu = "cuda_auto" if bits in (4, 8) and lowbit_module.cuda_kernels_run() else "triton_auto"
    assert layer.impl_for(torch.device("cuda")) == on_gpu
    assert "bits=" in repr(layer)


def test_lowbit_linear_compiles_fullgraph_on_cpu(cpu_process) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 32), torch.nn.ReLU(), torch.nn.Linear(32, 16))
    quantized = torch.nn.Sequential(lowbit.LowBitLinear.from_linear(model[0], bits=4, group_size=32),
                                    torch.nn.ReLU(), lowbit.LowBitLinear.from_linear(model[2], bits=8))
    x = torch.randn(5, 64)
    expected = quantized(x)
    compiled = torch.compile(quantized, fullgraph=True, backend="aot_eager")  # fullgraph: a graph break raises
    torch.testing.assert_close(compiled(x), expected)
    # The Triton GEMV path as an operator too (it runs in the interpreter here).
    gemv = lowbit.LowBitLinear.from_linear(model[0], bits=4, group_size=32, dtype=torch.float16, impl="triton_gemv")
    x16 = x[:1].half()
    torch.testing.assert_close(torch.compile(gemv, fullgraph=True, backend="aot_eager")(x16), gemv(x16))


def test_the_ops_as_pytorch_operators_pass_opcheck(cpu_process) -> None:
    # The schema, the fake impl (the reference on FakeTensors) and the gradient (the reference's, for x and the
    # scales), for the eager path and for the dispatcher (in the interpreter).
    for impl, dtype in (("eager_dequant", torch.float32), ("triton_auto", torch.float16)):
        operator = kk.torch_op(lowbit.linear_w4, impl)
        assert str(operator.default._schema).endswith(
            "(Tensor x, Tensor packed, Tensor scales, Tensor? zeros=None, SymInt? group_size=128) -> Tensor")
        args = _inputs(4, 32, False, (3, 16, 64), dtype)
        result = torch.library.opcheck(operator, args, test_utils=(
            "test_schema", "test_faketensor", "test_autograd_registration"))
        assert set(result.values()) == {"SUCCESS"}, result


def test_lowbit_linear_rejects_bad_arguments() -> None:
    linear = torch.nn.Linear(64, 8)
    with pytest.raises(ValueError, match="has no impl 'triton_fast'"):
        lowbit.LowBitLinear.from_linear(linear, impl="triton_fast")
    with pytest.raises(TypeError, match="takes an nn.Linear"):
        lowbit.LowBitLinear.from_linear(torch.nn.Conv1d(2, 2, 1))
    with pytest.raises(ValueError, match="power of two"):
        lowbit.LowBitLinear.from_linear(linear, bits=4, group_size=100)


# ---- GPU --------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("op_name", ["linear_w4", "linear_w8", "linear_w2"])
def test_every_impl_at_the_default_sizes_on_gpu(op_name: str) -> None:
    report = kk.check(op_name, device="cuda")
    assert {r.impl for r in report.results} == set(lowbit.OPS[int(op_name[-1])].impls)
    partial = ("eager_int4pack_mm", "eager_int8pack_mm", "cuda_gemv", "triton_gemv_unrolled")
    for r in report.results:
        if r.impl in partial and r.status is Status.SKIPPED:
            continue  # PyTorch's kernels and the M <= 16 GEMVs take fewer shapes and dtypes; the message says why
        assert r.status is Status.PASSED, (r.case_id, r.status, r.message)


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.parametrize("bits, group_size, symmetric", QUANTIZATIONS)
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_every_kernel_at_every_path_on_gpu(bits, group_size, symmetric, dtype) -> None:
    op = lowbit.OPS[bits]
    for size in [(1, 4096, 4096), (1, 1000, 1000), (5, 4104, 520), (16, 2048, 4096), (64, 512, 14336),
                 (300, 1000, 1000), (1024, 1024, 2048)]:
        args = _inputs(bits, group_size, symmetric, size, dtype, device="cuda")
        for name in (*TRITON, "triton_auto"):
            assert_matches_reference(op.impls[name].fn(*args), op.reference, *args)


@pytest.mark.gpu
def test_lowbit_linear_compiles_fullgraph_on_gpu() -> None:
    torch.manual_seed(0)
    linear = torch.nn.Linear(4096, 1024).cuda().to(torch.bfloat16)
    layer = lowbit.LowBitLinear.from_linear(linear, bits=4, group_size=128)
    compiled = torch.compile(layer, fullgraph=True)
    for m in (1, 16, 300):
        x = torch.randn(m, 4096, device="cuda", dtype=torch.bfloat16)
        torch.testing.assert_close(compiled(x), layer(x))


def test_the_gemm_never_offers_8_bit_codes_the_config_that_computed_them_wrong(cpu_process) -> None:
    from kernelkit.ops.lowbit import launch

    tk = launch.triton_kernels.load()
    wrong = tk.WRONG_FOR_INT8
    shapes = [(c.kwargs, c.num_warps, c.num_stages) for c in tk.GEMM_CONFIGS]
    assert wrong in shapes  # still in the list: int4 takes it
    for named, extra in (({"BITS": 8}, {}), ({}, {"BITS": 8})):  # positional or keyword, as the autotuner passes
        kept = tk.prune_gemm_configs(tk.GEMM_CONFIGS, named, **extra)
        assert len(kept) == len(shapes) - 1 and wrong not in [(c.kwargs, c.num_warps, c.num_stages) for c in kept]
    assert tk.prune_gemm_configs(tk.GEMM_CONFIGS, {"BITS": 4}) == tk.GEMM_CONFIGS
    assert tk.lowbit_gemm_kernel.early_config_prune is tk.prune_gemm_configs


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_every_gemm_config_offered_to_8_bit_codes_is_right_on_gpu(dtype: torch.dtype) -> None:
    from kernelkit import verify
    from kernelkit.ops.lowbit import launch

    tk = launch.triton_kernels.load()
    kernel, configs = tk.lowbit_gemm_kernel, list(tk.lowbit_gemm_kernel.configs)
    args = tuple(lowbit.linear_w8.make_inputs((2048, 4096, 4096), dtype, torch.device("cuda"), 0))
    expected = lowbit.linear_w8.reference(*[verify.to_reference_precision(a) for a in args]).float()
    try:
        for config in tk.prune_gemm_configs(configs, {"BITS": 8}):
            kernel.configs, kernel.cache = [config], {}
            y = lowbit.linear_w8.impls["triton_gemm"].fn(*args).float()
            assert torch.isfinite(y).all() and ((y - expected).abs() <= 0.02 * (1 + expected.abs())).all(), config
    finally:
        kernel.configs, kernel.cache = configs, {}
