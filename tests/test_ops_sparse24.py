"""The 2:4 sparsity ops: sparsify24 (row-wise), sparsify24_transposable, linear24, and SparseLinear.

CPU: every impl against the reference at edge shapes (Triton in its interpreter; cuSPARSELt and CUTLASS impls
SKIPPED with their reason); inputs full of ties, genuine zeros and non-contiguous layouts, on which planted wrong
sparsifiers must fail the check; property tests of the masks and of the sparsity checks; the weight cache;
SparseLinear's dense path, forward, backward and traced. GPU: the same on the device, cuSPARSELt against dense.

The ops below reuse the built-in impls on other inputs; they are module-level so ``kk.check(__file__)`` finds
them, in this process or in a worker.
"""

from __future__ import annotations

import math
import re
from pathlib import Path
from typing import Any

import pytest
import torch
import torch.nn.functional as F
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import kernelkit as kk
from kernelkit.errors import BackendUnavailable
from kernelkit.ops import sparse24 as sp
from kernelkit.ops.sparse24 import checks, cusparselt, patterns
from kernelkit.ops.sparse24.module import SparseLinear
from kernelkit.results import CaseResult, Status
from kernelkit.spec import seeded_normal
from opkit import assert_statuses, expected_on_cpu

CPU_FP = (torch.float32, torch.float16)  # the Triton interpreter computes bfloat16 wrongly
ROWWISE = sp.sparsify24.impls  # not the ops themselves: kk.check(__file__) would check them a second time
TRANSPOSABLE = sp.sparsify24_transposable.impls
LINEAR = sp.linear24.impls
PLANTED = {"eager_ties_to_higher_index", "eager_largest_by_value", "eager_greedy", "eager_rowwise_mask"}


def _grid_inputs(size, dtype, device, seed):
    """Values in {-3, -2, -1, 1, 2, 3}: most groups hold equal magnitudes, so the tie rule decides the mask."""
    gen = torch.Generator().manual_seed(seed)
    magnitude = torch.randint(1, 4, size, generator=gen)
    sign = torch.randint(0, 2, size, generator=gen) * 2 - 1
    return ((magnitude * sign).to(device=device, dtype=dtype),)


def _zeros_inputs(size, dtype, device, seed):
    """Normal values with about half exactly zero: groups with 0 to 4 non-zeros."""
    gen = torch.Generator().manual_seed(seed)
    zero = torch.rand(size, generator=gen) < 0.5
    return (seeded_normal(size, dtype, device, seed).masked_fill(zero.to(device), 0),)


def _permuted_inputs(size, dtype, device, seed):
    """A non-contiguous (column-major) view of a seeded normal matrix."""
    return (sp.nonzero_normal(size[::-1], dtype, device, seed).t(),)


_ROW_SIZES = [(1823, 780), (1, 4100), (64, 4096)]
_BLOCK_SIZES = [(1820, 780), (4, 4100), (64, 4096)]


@kk.op(sizes=_ROW_SIZES, cpu_sizes=[(7, 36)], dtypes=[torch.float32, torch.float16], inputs=_grid_inputs)
def sparsify24_ties(x):
    return sp.sparsify24(x)


@kk.op(sizes=_ROW_SIZES, cpu_sizes=[(1, 132)], dtypes=[torch.float32, torch.float16], inputs=_zeros_inputs)
def sparsify24_zeros(x):
    return sp.sparsify24(x)


@kk.op(sizes=_ROW_SIZES, cpu_sizes=[(33, 64)], dtypes=[torch.float32, torch.float16], inputs=_permuted_inputs)
def sparsify24_permuted(x):
    return sp.sparsify24(x)


@kk.op(sizes=_BLOCK_SIZES, cpu_sizes=[(8, 36)], dtypes=[torch.float32, torch.float16], inputs=_grid_inputs)
def sparsify24_transposable_ties(x):
    return sp.sparsify24_transposable(x)


@kk.op(sizes=_BLOCK_SIZES, cpu_sizes=[(12, 40)], dtypes=[torch.float32, torch.float16], inputs=_zeros_inputs)
def sparsify24_transposable_zeros(x):
    return sp.sparsify24_transposable(x)


@kk.op(sizes=_BLOCK_SIZES, cpu_sizes=[(12, 40)], dtypes=[torch.float32, torch.float16],
       inputs=_permuted_inputs)
def sparsify24_transposable_permuted(x):
    return sp.sparsify24_transposable(x)


for _op in (sparsify24_ties, sparsify24_zeros, sparsify24_permuted):
    _op.impl("eager_topk")(ROWWISE["eager_topk"].fn)
    _op.impl("triton_rowwise")(ROWWISE["triton_rowwise"].fn)
for _op in (sparsify24_transposable_ties, sparsify24_transposable_zeros, sparsify24_transposable_permuted):
    _op.impl("triton_blocks")(TRANSPOSABLE["triton_blocks"].fn)


def _keep_rowwise(x: torch.Tensor, key: torch.Tensor) -> torch.Tensor:
    """Keep, per group of four, the two largest ``key`` (distinct keys)."""
    groups = x.reshape(x.shape[0], -1, 4)
    keep = torch.zeros(groups.shape, dtype=torch.bool, device=x.device)
    keep.scatter_(-1, key.reshape(groups.shape).topk(2, dim=-1).indices, True)
    return torch.where(keep, groups, 0).reshape(x.shape)


@sparsify24_ties.impl("eager_ties_to_higher_index")
def _planted_higher_index_wins(x):
    """Wrong: of equal magnitudes the higher index is kept."""
    index = torch.arange(x.shape[1], device=x.device, dtype=torch.float64) % 4
    return _keep_rowwise(x, x.double().abs() * 8 + index)


@sparsify24_ties.impl("eager_largest_by_value")
def _planted_by_value(x):
    """Wrong: the two largest values, not magnitudes."""
    index = torch.arange(x.shape[1], device=x.device, dtype=torch.float64) % 4
    return _keep_rowwise(x, x.double() * 8 - index)


@sparsify24_transposable_ties.impl("eager_rowwise_mask")
def _planted_rowwise_mask(x):
    """Wrong: the row-wise mask, not 2:4 along columns."""
    return sp.sparsify24(x)


@sparsify24_transposable_ties.impl("eager_greedy")
def _planted_greedy(x):
    """Wrong (an approximation): the largest magnitudes first, each kept while its row and column have room."""
    return greedy_transposable(x)


def greedy_transposable(x: torch.Tensor) -> torch.Tensor:
    """The greedy transposable mask (xformers' and PyTorch's runtime sparsifier use one like it)."""
    n_rows, n_cols = x.shape
    blocks = x.reshape(n_rows // 4, 4, n_cols // 4, 4).permute(0, 2, 1, 3).reshape(-1, 16)
    order = blocks.abs().sort(dim=-1, descending=True, stable=True).indices
    keep = torch.zeros(blocks.shape, dtype=torch.bool, device=x.device)
    row_count = torch.zeros(blocks.shape[0], 4, dtype=torch.int64, device=x.device)
    col_count = torch.zeros_like(row_count)
    for step in range(16):
        index = order[:, step:step + 1]
        rows, cols = index // 4, index % 4
        room = (row_count.gather(1, rows) < 2) & (col_count.gather(1, cols) < 2)
        keep.scatter_(1, index, room)
        row_count.scatter_add_(1, rows, room.long())
        col_count.scatter_add_(1, cols, room.long())
    pruned = torch.where(keep, blocks, 0).reshape(n_rows // 4, n_cols // 4, 4, 4)
    return pruned.permute(0, 2, 1, 3).reshape(n_rows, n_cols)


def _on_cpu(r: CaseResult) -> Status:
    """As opkit.expected_on_cpu; linear24's sparse impls need a GPU."""
    if r.op == "linear24" and r.impl != "eager_dense":
        return Status.SKIPPED
    return expected_on_cpu(r.backend, getattr(torch, r.dtype))


# ---- CPU: the checker -----------------------------------------------------------------------------------------


def test_every_impl_at_edge_shapes_on_cpu(cpu_process: None) -> None:
    dtypes = [torch.float32, torch.float16, torch.bfloat16]
    for op, impls in (("sparsify24", ROWWISE), ("sparsify24_transposable", TRANSPOSABLE), ("linear24", LINEAR)):
        report = kk.check(op, device="cpu", isolate=False, dtypes=dtypes)
        sizes = getattr(sp, op).cpu_sizes
        assert len(report.results) == len(impls) * len(sizes) * len(dtypes), op
        assert_statuses(report, _on_cpu, PLANTED)
    skipped = {r.impl: r.message for r in report.results if r.status is Status.SKIPPED and r.dtype == "float16"}
    assert all("cuSPARSELt" in skipped[i] for i in ("cusparselt", "cusparselt_direct", "cusparselt_fused_t")), skipped
    assert "compute capability 8.x" in skipped["cutlass"], skipped
    assert any("supports float16, bfloat16 only" in r.message for r in report.results if r.dtype == "float32")


def test_ties_zeros_non_contiguous_inputs_and_planted_sparsifiers_on_cpu(cpu_process: None) -> None:
    assert not _permuted_inputs((8, 36), torch.float32, "cpu", 0)[0].is_contiguous()
    report = kk.check(__file__, device="cpu", isolate=False)
    assert {r.impl for r in report.results} >= PLANTED | {"eager_topk", "triton_rowwise", "triton_blocks"}
    assert_statuses(report, _on_cpu, PLANTED)


# ---- CPU: the references, the tie rule, the errors --------------------------------------------------------------

ROWWISE_FUNCTIONS = {"reference": sp.sparsify24, "eager_topk": ROWWISE["eager_topk"].fn,
                     "triton_rowwise": sp.prune_rowwise}
TRANSPOSABLE_FUNCTIONS = {"reference": sp.sparsify24_transposable, "triton_blocks": sp.prune_transposable}


@pytest.mark.parametrize("name", list(ROWWISE_FUNCTIONS))
def test_rowwise_tie_rule_keeps_the_lower_index(name: str, cpu_process: None) -> None:
    x = torch.tensor([[3.0, -3.0, 3.0, 1.0], [1.0, 2.0, -2.0, 2.0], [0.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0],
                      [-0.0, 0.0, 5.0, -5.0], [1.0, 1.0, 1.0, 1.0], [4.0, 1.0, 2.0, 3.0], [-1.0, -4.0, 9.0, 1.0]])
    expected = torch.tensor([[3.0, -3.0, 0.0, 0.0], [0.0, 2.0, -2.0, 0.0], [0.0, 0.0, 0.0, 0.0], [0.0, -1.0, 0.0, 0.0],
                             [0.0, 0.0, 5.0, -5.0], [1.0, 1.0, 0.0, 0.0], [4.0, 0.0, 0.0, 3.0], [0.0, -4.0, 9.0, 0.0]])
    for dtype in CPU_FP:
        out = ROWWISE_FUNCTIONS[name](x.to(dtype).reshape(2, 16))
        assert torch.equal(out, expected.to(dtype).reshape(2, 16)), (dtype, out)


def test_transposable_tie_rule_takes_the_first_mask_in_order(cpu_process: None) -> None:
    # All magnitudes equal: every mask scores the same, so the first of the 90 is kept.
    x = torch.tensor([[1.0, -1.0, 1.0, -1.0]] * 4)
    first = patterns.transposable_masks()[0]
    for fn in TRANSPOSABLE_FUNCTIONS.values():
        assert torch.equal(fn(x) != 0, first), fn
    # A clear winner: the two largest of each row fall in distinct column pairs that form a valid mask.
    y = torch.tensor([[9.0, 8.0, 1.0, 1.0], [7.0, 6.0, 1.0, 1.0], [1.0, 1.0, 5.0, 4.0], [1.0, 1.0, 3.0, 2.0]])
    for fn in TRANSPOSABLE_FUNCTIONS.values():
        assert torch.equal(fn(y), torch.where(first, y, 0)), fn


@pytest.mark.parametrize("name", ["rowwise", "transposable"])
def test_bad_shapes_and_types_give_clear_errors(name: str, cpu_process: None) -> None:
    functions = ROWWISE_FUNCTIONS if name == "rowwise" else TRANSPOSABLE_FUNCTIONS
    bad = [torch.zeros(4, 6), torch.zeros(8), torch.zeros(2, 4, 4), torch.zeros(4, 8, dtype=torch.int32)]
    if name == "transposable":
        bad.append(torch.zeros(6, 8))  # M not a multiple of 4
    for fn in functions.values():
        for x in bad:
            with pytest.raises(ValueError, match="2:4 pruning"):
                fn(x)


def test_empty_inputs_launch_nothing(cpu_process: None, monkeypatch: pytest.MonkeyPatch) -> None:
    class NoLaunch:
        def __getitem__(self, grid):
            raise AssertionError("launched a kernel on an empty input")

    kernels = type("Kernels", (), {"sparsify24_rowwise_kernel": NoLaunch(),
                                   "sparsify24_transposable_kernel": NoLaunch()})
    monkeypatch.setattr(sp.triton_kernels, "load", lambda: kernels)
    for fn in (*ROWWISE_FUNCTIONS.values(), *TRANSPOSABLE_FUNCTIONS.values()):
        for shape in ((0, 8), (4, 0)):
            assert fn(torch.empty(shape)).shape == shape, fn


def test_transposed_output_of_the_kernel(cpu_process: None) -> None:
    for x in (sp.nonzero_normal((12, 136), torch.float16, "cpu", 3), _permuted_inputs((8, 20), torch.float32,
                                                                                      "cpu", 4)[0]):
        pruned, pruned_t = sp.prune_transposable(x, transposed=True)
        assert pruned_t.is_contiguous() and torch.equal(pruned_t, pruned.t())
        assert torch.equal(pruned, sp.sparsify24_transposable(x))


def test_scan_in_the_kernel_is_the_generated_one() -> None:
    source = (Path(sp.__file__).parent / "triton.py").read_text()
    body = source.split("# BEGIN SCAN")[1].split("# END SCAN")[0]
    lines = [line.strip() for line in body.splitlines()[1:] if line.strip()]
    assert lines == patterns.scan_source()


def test_the_90_masks() -> None:
    masks = patterns.transposable_masks()
    assert masks.shape == (90, 4, 4) and len(set(patterns.TRANSPOSABLE)) == 90
    assert (masks.sum(-1) == 2).all() and (masks.sum(-2) == 2).all()
    assert len({tuple(m.flatten().tolist()) for m in masks}) == 90
    assert list(patterns.TRANSPOSABLE) == sorted(patterns.TRANSPOSABLE)
    # Every 0/1 4x4 matrix with two per row and column is among them (there are exactly 90).
    all_masks = [m for m in range(1 << 16) if all(bin((m >> (4 * r)) & 15).count("1") == 2 for r in range(4))
                 and all(sum((m >> (4 * r + c)) & 1 for r in range(4)) == 2 for c in range(4))]
    assert sorted(all_masks) == sorted(patterns.pattern_bits(rows) for rows in patterns.TRANSPOSABLE)


# ---- CPU: property tests of the masks and of the checks ---------------------------------------------------------

_small = st.integers(1, 6)
_values = st.sampled_from([-3.0, -2.0, -1.0, -0.5, 0.0, 0.5, 1.0, 2.0, 3.0, 1e-3, -7.25])


def _matrix(draw, rows: int, cols: int) -> torch.Tensor:
    values = draw(st.lists(_values, min_size=rows * cols, max_size=rows * cols))
    return torch.tensor(values, dtype=torch.float32).reshape(rows, cols)


@settings(max_examples=60, deadline=None)
@given(st.data(), _small, _small)
def test_rowwise_reference_and_topk_satisfy_the_checks(data, rows: int, groups: int) -> None:
    x = _matrix(data.draw, rows, 4 * groups)
    pruned = sp.sparsify24(x)
    assert checks.problems_rowwise(pruned, x) == []
    assert checks.is_24(pruned) and torch.equal(ROWWISE["eager_topk"].fn(x), pruned)
    half = x.half()  # the mask depends on the values only, not on the dtype holding them
    assert torch.equal(sp.sparsify24(half).float(), sp.sparsify24(half.float()))


@settings(max_examples=6, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(st.data(), st.integers(1, 4), st.integers(1, 16))  # one program of each kernel in the interpreter
def test_triton_kernels_match_the_references_on_ties_and_zeros(cpu_process: None, data, block_rows: int,
                                                             groups: int) -> None:
    x = _matrix(data.draw, 4 * block_rows, 4 * groups)
    assert torch.equal(sp.prune_rowwise(x), sp.sparsify24(x))
    assert torch.equal(sp.prune_transposable(x), sp.sparsify24_transposable(x))


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 3))
def test_transposable_reference_is_the_best_mask_and_2_4_both_ways(data, block_rows: int, block_cols: int) -> None:
    x = _matrix(data.draw, 4 * block_rows, 4 * block_cols)
    pruned = sp.sparsify24_transposable(x)
    assert checks.problems_transposable(pruned, x) == []
    assert checks.is_24(pruned, dim=1) and checks.is_24(pruned, dim=0)
    # No transposable mask keeps more than the row-wise one. A greedy fill keeps no more than the best mask when
    # it ends with one of the 90; it can end short (a row with one kept, its seven fitting no mask) and then keep
    # more: the 90 are the masks with exactly two per row and column.
    assert checks.kept_fraction(pruned, x) <= checks.kept_fraction(sp.sparsify24(x), x) + 1e-12
    greedy = greedy_transposable(x)
    assert checks.is_24(greedy, dim=1) and checks.is_24(greedy, dim=0)
    if (x != 0).all() and (greedy != 0).sum() == x.numel() // 2:
        assert checks.kept_fraction(greedy, x) <= checks.kept_fraction(pruned, x) + 1e-12


@settings(max_examples=60, deadline=None)
@given(st.data(), _small, _small)
def test_checks_catch_a_corrupted_mask(data, rows: int, groups: int) -> None:
    x = sp.nonzero_normal((rows, 4 * groups), torch.float32, "cpu", data.draw(st.integers(0, 10_000)))
    pruned = sp.sparsify24(x)
    row, group = data.draw(st.integers(0, rows - 1)), data.draw(st.integers(0, groups - 1))
    cols = slice(4 * group, 4 * group + 4)
    kept = (pruned[row, cols] != 0).nonzero().flatten().tolist()
    dropped = [i for i in range(4) if i not in kept]
    corrupted = pruned.clone()
    kind = data.draw(st.sampled_from(["swap", "drop", "add", "scale"]))
    if kind == "swap":  # keep a smaller element instead of a larger one
        corrupted[row, 4 * group + kept[0]] = 0
        corrupted[row, 4 * group + dropped[0]] = x[row, 4 * group + dropped[0]]
    elif kind == "drop":
        corrupted[row, 4 * group + kept[0]] = 0
    elif kind == "add":
        corrupted[row, 4 * group + dropped[0]] = x[row, 4 * group + dropped[0]]
    else:
        corrupted[row, 4 * group + kept[0]] *= 2
    assert checks.problems_rowwise(corrupted, x) != []


@settings(max_examples=40, deadline=None)
@given(st.data(), st.integers(1, 3), st.integers(1, 3))
def test_checks_catch_a_corrupted_transposable_mask(data, block_rows: int, block_cols: int) -> None:
    x = sp.nonzero_normal((4 * block_rows, 4 * block_cols), torch.float32, "cpu",
                          data.draw(st.integers(0, 10_000)))
    pruned = sp.sparsify24_transposable(x)
    kind = data.draw(st.sampled_from(["rowwise", "greedy", "other_mask", "drop"]))
    if kind == "rowwise":  # 2:4 along rows only (unless it happens to be transposable: then it is the best)
        corrupted = sp.sparsify24(x)
    elif kind == "greedy":  # transposable, but not always the best
        corrupted = greedy_transposable(x)
    elif kind == "other_mask":  # block (0, 0) takes its worst mask: 2:4 both ways, keeps less
        scores = patterns.transposable_scores(x[:4, :4].abs())
        corrupted = pruned.clone()
        corrupted[:4, :4] = torch.where(patterns.transposable_masks()[scores.argmin()], x[:4, :4], 0)
    else:  # one kept element dropped
        corrupted = pruned.clone()
        corrupted.view(-1)[int((pruned != 0).view(-1).nonzero()[0])] = 0
    if torch.equal(corrupted, pruned):
        return
    assert checks.problems_transposable(corrupted, x) != []


def test_kept_magnitude_of_the_transposable_mask_against_the_rowwise_one() -> None:
    x = sp.nonzero_normal((256, 256), torch.float32, "cpu", 5)
    kept = checks.kept_vs_rowwise(x)
    # Normal values: the row-wise mask keeps ~75% of |x|, the transposable one a few percent less.
    assert 0.72 < kept["rowwise"] < 0.78 and 0.9 < kept["ratio"] < 1.0, kept
    assert kept["transposable"] == pytest.approx(kept["ratio"] * kept["rowwise"])
    assert checks.kept_fraction(torch.zeros(4, 4), torch.zeros(4, 4)) == 1.0


def test_input_factories() -> None:
    assert (sp.nonzero_normal((4096, 64), torch.float16, "cpu", 0) != 0).all()
    x, w = sp.linear_inputs((3, 16, 32), torch.float16, torch.device("cpu"), 0)
    assert x.shape == (3, 32) and (w != 0).reshape(16, 8, 4).sum(-1).eq(2).all()


# ---- CPU: the weight cache --------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [lambda n: (n,), lambda n: (n // 8, 8)])  # torch 2.11 on the GPU gives it 2-D
def test_compress_gives_torchs_2d_layout(monkeypatch: pytest.MonkeyPatch, shape) -> None:
    w = sp.sparsify24(sp.nonzero_normal((64, 64), torch.float16, "cpu", 3))
    monkeypatch.setattr(torch, "_cslt_compress", lambda t: torch.zeros(shape(64 * 36), dtype=t.dtype))
    packed = cusparselt.compress(w)
    assert packed.shape == cusparselt.compressed_shape(w) == (64, 36)  # the custom op's fake (module.py) says so
    monkeypatch.setattr(torch, "_cslt_compress", lambda t: torch.zeros(64 * 40, dtype=t.dtype))
    with pytest.raises(RuntimeError, match="2560 elements.*64 x 36"):
        cusparselt.compress(w)  # a layout of another size: named, never reshaped into the wrong one


def test_weight_cache_keys_on_the_tensor_and_its_version() -> None:
    cache = cusparselt.WeightCache()
    made: list[int] = []

    def make(w: torch.Tensor) -> torch.Tensor:
        made.append(1)
        return w * 2

    w = torch.ones(4, 4)
    first = cache.get(w, "double", make)
    assert cache.get(w, "double", make) is first and len(made) == 1 and cache.hits == 1
    w.add_(1)  # an in-place write bumps the version: made again, from the new values
    assert torch.equal(cache.get(w, "double", make), torch.full((4, 4), 4.0)) and len(made) == 2
    twin = w.clone()  # same values, another tensor: its own entry
    cache.get(twin, "double", make)
    assert len(made) == 3 and len(cache) == 2
    cache.get(w, "other kind", make)
    assert len(made) == 4 and len(cache) == 3
    del twin
    assert len(cache) == 2  # entries die with their tensor: a reused id never finds an old entry
    with torch.inference_mode():
        frozen = torch.ones(2, 2)
    cache.get(frozen, "double", make)
    cache.get(frozen, "double", make)
    assert len(made) == 6  # no version counter: never cached
    cache.clear()
    assert len(cache) == 0


# ---- CPU: SparseLinear on the dense path ------------------------------------------------------------------------


def _linear(seed: int = 0) -> torch.nn.Linear:
    torch.manual_seed(seed)
    return torch.nn.Linear(32, 16)


def test_sparse_linear_inference_prunes_once() -> None:
    dense = _linear()
    layer = SparseLinear.from_linear(dense, mode="inference")
    assert layer.backend == "dense" and "mode=inference" in repr(layer)
    x = torch.randn(2, 3, 32)
    expected = F.linear(x, sp.sparsify24(dense.weight.detach()), dense.bias)
    torch.testing.assert_close(layer(x), expected)
    assert checks.is_24(layer.weight) and layer.weight_bytes() == 16 * 32 * 4


def test_sparse_linear_training_forward_and_straight_through_backward() -> None:
    dense = _linear(1)
    layer = SparseLinear.from_linear(dense, mode="training")
    x = torch.randn(5, 32, requires_grad=True)
    dy = torch.randn(5, 16)
    layer(x).backward(dy)
    w = dense.weight.detach()
    pruned = sp.sparsify24_transposable(w)
    x_ref = x.detach().clone().requires_grad_()
    torch.testing.assert_close(layer(x), F.linear(x_ref, pruned, dense.bias))
    torch.testing.assert_close(x.grad, dy @ pruned)
    torch.testing.assert_close(layer.weight.grad, dy.t() @ x.detach())  # dense: pruned-away weights get one too
    torch.testing.assert_close(layer.bias.grad, dy.sum(0))
    assert torch.equal(layer.weight.detach(), w)  # the parameter stays dense


def test_sparse_linear_traces_with_fullgraph() -> None:
    torch._dynamo.reset()
    layer = SparseLinear(32, 16, mode="training")
    compiled = torch.compile(layer, backend="aot_eager", fullgraph=True)
    x = torch.randn(4, 32, requires_grad=True)
    y = compiled(x)
    y.sum().backward()
    torch.testing.assert_close(y, layer(x))
    assert layer.weight.grad is not None and x.grad is not None


def test_sparse_linear_calls_the_operators_only_while_compiling(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelkit.ops.sparse24 import module

    eager: list[str] = []
    traced: list[str] = []
    pair = module.prune_transposable_pair
    monkeypatch.setattr(module.EAGER, "prune_transposable", lambda w: eager.append("eager") or pair(w))
    torch._dynamo.reset()
    layer = SparseLinear(32, 16, mode="training")
    x = torch.randn(4, 32)
    layer(x)
    assert eager == ["eager"]  # torch.library's dispatch skipped in eager mode

    def backend(gm: torch.fx.GraphModule, example_inputs: list) -> Any:
        for module_ in gm.modules():  # the autograd.Function's forward is a subgraph
            if isinstance(module_, torch.fx.GraphModule):
                traced.extend(str(node.target) for node in module_.graph.nodes if node.op == "call_function")
        return gm.forward

    torch.compile(layer, backend=backend, fullgraph=True)(x)
    assert eager == ["eager"] and any("kernelkit_sparse24.prune_transposable" in t for t in traced)


def test_sparse_linear_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="mode"):
        SparseLinear(8, 8, mode="frozen")
    with pytest.raises(ValueError, match="backend"):
        SparseLinear(8, 8, backend="cutlass")


def test_sparse_linear_matmuls_take_the_planned_path_where_it_runs(monkeypatch: pytest.MonkeyPatch) -> None:
    from kernelkit.ops.sparse24 import cusparselt_plan, module

    calls: list[str] = []
    reason: list[str] = []

    def planned(x: torch.Tensor, packed: torch.Tensor, n: int) -> torch.Tensor:
        if reason:
            raise BackendUnavailable(reason[0])
        calls.append("planned")
        return torch.ones(x.shape[0], n)

    monkeypatch.setattr(cusparselt_plan, "linear_compressed", planned)
    monkeypatch.setattr(cusparselt, "linear", lambda x, packed, bias: calls.append(f"torch {bias is None}") or bias)
    x, packed, bias = torch.zeros(3, 8), torch.zeros(18), torch.arange(4.0)
    assert torch.equal(module.sparse_matmul(x, packed, 4, bias), (1 + torch.arange(4.0)).expand(3, 4))  # bias added
    assert torch.equal(module.sparse_matmul(x, packed, 4, None), torch.ones(3, 4))
    reason.append("no libcusparseLt here")
    assert module.sparse_matmul(x, packed, 4, bias) is bias  # torch._cslt_sparse_mm, bias in its epilogue
    assert calls == ["planned", "planned", "torch False"]


def test_linear24_cost_model() -> None:
    x, w = sp.linear_inputs((4, 16, 32), torch.float16, torch.device("cpu"), 0)
    nbytes, flops = sp.linear24.cost((x, w), ())
    assert nbytes == (4 * 32 + 16 * 32 + 4 * 16) * 2 and flops == 2 * 4 * 16 * 32
    assert sp.sparsify24.cost((x,), ())[0] == 2 * x.numel() * 2


# ---- GPU --------------------------------------------------------------------------------------------------------


def _on_gpu(r: CaseResult) -> Status:
    """cutlass takes compute capability 8.x only."""
    if r.impl == "cutlass" and torch.cuda.get_device_capability()[0] != 8:
        return Status.SKIPPED
    return Status.PASSED


@pytest.mark.gpu
@pytest.mark.slow
def test_every_impl_at_the_default_sizes_on_gpu() -> None:
    for op in ("sparsify24", "sparsify24_transposable", "linear24"):
        # A first call compiles and autotunes four tiles per dtype: more than the default 60 s case clock allows.
        assert_statuses(kk.check(op, device="cuda", timeout=300), _on_gpu, PLANTED)


@pytest.mark.gpu
@pytest.mark.slow
def test_ties_zeros_non_contiguous_and_planted_on_gpu() -> None:
    assert_statuses(kk.check(__file__, device="cuda", timeout=300), _on_gpu, PLANTED)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float32])
def test_kernels_at_edges_and_the_checks_on_gpu(dtype: torch.dtype) -> None:
    for shape in [(1, 4), (3, 4100), (1823, 780), (4096, 4096)]:
        x = sp.nonzero_normal(shape, dtype, "cuda", 1)
        out = sp.prune_rowwise(x)
        assert torch.equal(out, sp.sparsify24(x)) and checks.problems_rowwise(out, x) == []
    for shape in [(4, 4), (8, 4100), (1820, 780), (2048, 2048)]:
        x = sp.nonzero_normal(shape, dtype, "cuda", 2)
        out, out_t = sp.prune_transposable(x, transposed=True)
        assert torch.equal(out, sp.sparsify24_transposable(x)) and torch.equal(out_t, out.t())
        assert checks.problems_transposable(out, x) == []


@pytest.mark.gpu
def test_cusparselt_matches_dense_and_caches_the_weight() -> None:
    x, w = sp.linear_inputs((64, 128, 256), torch.float16, torch.device("cuda"), 0)
    assert cusparselt.compress(w).shape == cusparselt.compressed_shape(w)  # what the compile fake assumes
    expected = F.linear(x.double(), w.double())
    misses = cusparselt.CACHE.misses
    for impl in ("cusparselt", "cusparselt_direct", "cusparselt_fused_t"):
        for _ in range(3):
            y = LINEAR[impl].fn(x, w)
            assert y.shape == (64, 128) and (y.double() - expected).abs().max() < 0.05 * math.sqrt(256)
    assert cusparselt.CACHE.misses == misses + 2  # one compression per weight and kind (direct and fused_t share)
    for impl in ("cusparselt_direct", "cusparselt_fused_t"):
        y = LINEAR[impl].fn(x[:5], w)  # 5 rows: padded to 8 inside
        assert y.shape == (5, 128) and y.is_contiguous()
        assert (y.double() - expected[:5]).abs().max() < 0.05 * math.sqrt(256)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["inference", "training"])
def test_sparse_linear_on_cusparselt_matches_the_dense_path_and_compiles(mode: str) -> None:
    torch.manual_seed(0)
    dense = torch.nn.Linear(256, 128, device="cuda", dtype=torch.float16)
    sparse = SparseLinear.from_linear(dense, mode=mode)
    reference = SparseLinear.from_linear(dense, mode=mode, backend="dense")
    assert sparse.backend == "cusparselt"
    x = torch.randn(3, 40, 256, device="cuda", dtype=torch.float16, requires_grad=mode == "training")
    x_ref = x.detach().clone().requires_grad_(mode == "training")
    y, y_ref = sparse(x), reference(x_ref)
    torch.testing.assert_close(y, y_ref, rtol=2e-3, atol=2e-2)
    compiled = torch.compile(sparse, fullgraph=True)
    torch.testing.assert_close(compiled(x), y, rtol=2e-3, atol=2e-2)
    if mode == "training":
        dy = torch.randn_like(y)
        y.backward(dy)
        y_ref.backward(dy)
        torch.testing.assert_close(x.grad, x_ref.grad, rtol=2e-3, atol=5e-2)
        torch.testing.assert_close(sparse.weight.grad, reference.weight.grad, rtol=2e-3, atol=5e-2)
    else:
        assert sparse.weight_bytes() == 128 * 256 * 2 * 9 // 16


def test_gpu_script_is_executable() -> None:
    script = Path(__file__).resolve().parents[1] / "scripts" / "gpu-sparse24"
    assert script.stat().st_mode & 0o111 and re.match(r"#!/usr/bin/env python3", script.read_text())
