"""cuSPARSELt's compressed layout (layout.py) and the Triton kernel that writes it (compress.py).

CPU: the specification against the bytes the library wrote on an H200 (tests/fixtures/cusparselt), the kernel in
Triton's interpreter against the specification at edge cases (empty and one-element groups, padded rows and
columns), the sizes torch.compile's fake relies on, and the errors. GPU: the kernel byte for byte against
torch._cslt_compress at several shapes, its output through cuSPARSELt's matmul against the dense product, and the
once-per-device verification of the layout.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import torch
import torch.nn.functional as F

from kernelkit.errors import BackendUnavailable
from kernelkit.ops import sparse24 as sp
from kernelkit.ops.sparse24 import compress, cusparselt, cusparselt_plan, layout

FIXTURE = Path(__file__).parent / "fixtures" / "cusparselt" / "compressed.pt"


def _written(t: torch.Tensor, n: int) -> torch.Tensor:
    return t.view(torch.uint8).reshape(-1)[:n]


@pytest.mark.parametrize("key", ["128x128_float16", "80x64_bfloat16", "64x96_float16"])
def test_the_specification_is_the_librarys_bytes(key: str) -> None:
    case = torch.load(FIXTURE)[key]
    w, library = case["pruned"], case["library"]
    ours = layout.layout_reference(w)
    n = layout.written_bytes(*w.shape)  # past it, up to 512-byte multiple, the library writes nothing
    assert library.numel() == layout.compressed_bytes(*w.shape)
    assert ours.shape == layout.compressed_shape(*w.shape) and ours.dtype == w.dtype
    assert torch.equal(_written(ours, n), library[:n])


def test_compressed_sizes_are_pytorchs_allocation() -> None:
    assert layout.compressed_shape(11008, 4096) == (11008, 4096 * 9 // 16)  # both multiples of 64: 9/16
    # torch 2.11's tensors on an H200 (cslt_dumps and a GPU test's failure message): 80x96 gave 80 x 58
    assert layout.compressed_shape(80, 64) == (80, 39) and layout.compressed_shape(64, 96) == (64, 56)
    assert layout.compressed_shape(80, 96) == (80, 58) and layout.compressed_bytes(64, 96) == 7168
    # 3840 bytes of values, not a multiple of 512: the metadata's 768 bytes are rounded up, not the whole (an H200,
    # torch 2.11: 2448 elements; rounding the whole to 512 bytes would give 48 x 54, the values alone 48 x 48)
    assert layout.compressed_shape(48, 80) == (48, 51) and layout.compressed_bytes(48, 80) == 4864
    w = torch.zeros(80, 64, dtype=torch.float16)
    assert cusparselt.compressed_shape(w) == (80, 39)  # the custom op's fake (module.py)


def _with_sparse_groups(n_rows: int, n_cols: int, seed: int) -> torch.Tensor:
    """A pruned fp16 weight whose groups hold 0, 1 and 2 nonzeros, at every position."""
    w = sp.sparsify24(sp.nonzero_normal((n_rows, n_cols), torch.float16, "cpu", seed))
    generator = torch.Generator().manual_seed(seed)
    drop = torch.rand(n_rows, n_cols, generator=generator) < 0.3
    return torch.where(drop, 0, w)


@pytest.mark.parametrize("shape", [(64, 64), (16, 16), (80, 96), (200, 48), (128, 352), (48, 80)])
def test_the_triton_kernel_writes_the_specification(cpu_process, shape: tuple[int, int]) -> None:
    w = _with_sparse_groups(*shape, seed=shape[0] + shape[1])
    n = layout.written_bytes(*shape)
    ours = compress.compress_triton(w)
    assert ours.shape == layout.compressed_shape(*shape) and ours.dtype == w.dtype
    assert torch.equal(_written(ours, n), _written(layout.layout_reference(w), n))


def test_a_group_keeps_its_nonzeros_and_the_highest_positions_left() -> None:
    groups = torch.tensor([[0, 0, 0, 0], [5, 0, 0, 0], [0, 0, 0, 5], [0, 5, 0, 5], [0, 0, 5, 0], [5, 5, 0, 0]])
    first, second = layout._kept_positions(groups)
    assert list(zip(first.tolist(), second.tolist(), strict=True)) == [(2, 3), (0, 3), (2, 3), (1, 3), (2, 3), (0, 1)]


def test_compress_takes_gpu_tensors_only() -> None:
    w = torch.zeros(64, 64, dtype=torch.float16)
    with pytest.raises(BackendUnavailable, match="CUDA tensors only"):
        compress.compress(w)
    with pytest.raises(ValueError, match="multiples of 16"):
        compress.compress(torch.zeros(64, 40, dtype=torch.float16))


# ---- GPU --------------------------------------------------------------------------------------------------------


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
@pytest.mark.parametrize("shape", [(64, 64), (128, 256), (80, 64), (64, 96), (80, 96), (96, 160), (48, 80),
                                   (48, 112), (1024, 768), (4096, 11008)])
def test_the_kernel_is_torchs_compression_byte_for_byte(shape: tuple[int, int], dtype: torch.dtype) -> None:
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the layout is sm_90's")
    w = sp.sparsify24(sp.nonzero_normal(shape, dtype, "cuda", 7))
    ours, theirs = compress.compress_triton(w), cusparselt.compress(w)
    assert ours.shape == theirs.shape and ours.dtype == theirs.dtype
    n = layout.written_bytes(*shape)
    assert torch.equal(_written(ours, n), _written(theirs, n))
    assert compress.layout_verified(torch.cuda.current_device(), dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_the_kernels_compression_multiplies_right_with_empty_groups(dtype: torch.dtype) -> None:
    if torch.cuda.get_device_capability()[0] != 9:
        pytest.skip("the layout is sm_90's")
    w = _with_sparse_groups(512, 256, seed=3).to(dtype).cuda()
    x = torch.randn(64, 256, dtype=dtype, device="cuda")
    y = cusparselt_plan.linear_compressed(x, compress.compress(w), 512)
    expected = F.linear(x.double(), w.double())
    assert (y.double() - expected).abs().max().item() < 0.05 * 16
