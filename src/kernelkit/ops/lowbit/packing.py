"""The one bit-packing format of the low-bit linear ops: b-bit codes packed along K into int32 words.

Layout, for ``bits`` b in (2, 4, 8) and P = 32 // b codes per word (16, 8, 4):

- A weight of logical shape (N, K) is stored as an int32 tensor of shape (N, ceil(K / P)), row-major: row n holds
  the codes of output channel n, in order of k.
- Code k of row n sits in word ``k // P`` of that row, at bits ``[(k % P) * b, (k % P) * b + b)``: the lowest
  bits hold the lowest k (little-endian within the word). For 4 bits, word j holds k = 8j in bits 0-3, 8j + 1 in
  bits 4-7, ..., 8j + 7 in bits 28-31. The word is a bit pattern: the int32's sign is meaningless, unpackers mask
  after an arithmetic shift.
- Codes are unsigned, 0 <= q < 2**b. What a code means is the quantizer's convention (quantization.py):
  w = (q - z) * s, with z an integer zero point per group (asymmetric) or z = 2**(b - 1) (symmetric).
- K need not be a multiple of P: the last word of each row is padded with zero codes (bits beyond K are 0), and
  unpacking takes K to drop them. Kernels mask the activations beyond K, so the padding contributes nothing.

Every kernel (GEMV, split-K, GEMM, the dequantize kernel) and the conversions to PyTorch's own packed formats
read this layout, through ``unpack`` here or the same shifts and masks in Triton.
"""

from __future__ import annotations

import torch

BITS = (2, 4, 8)


def values_per_word(bits: int) -> int:
    """P: how many ``bits``-bit codes one int32 word holds."""
    check_bits(bits)
    return 32 // bits


def packed_width(k: int, bits: int) -> int:
    """Words per row for K codes: ceil(K / P)."""
    per_word = values_per_word(bits)
    return -(-k // per_word)


def check_bits(bits: int) -> None:
    if bits not in BITS:
        raise ValueError(f"bits must be one of {BITS}, got {bits!r}")


def pack(codes: torch.Tensor, bits: int) -> torch.Tensor:
    """(N, K) integer codes in [0, 2**bits) -> (N, ceil(K / P)) int32 words, laid out as the module says."""
    check_bits(bits)
    if codes.dim() != 2:
        raise ValueError(f"codes must be 2-D (N, K), got shape {tuple(codes.shape)}")
    if codes.is_floating_point() or codes.is_complex() or codes.dtype == torch.bool:
        raise TypeError(f"codes must be an integer tensor, got {codes.dtype}")
    if codes.numel() and (int(codes.min()) < 0 or int(codes.max()) >= 1 << bits):
        raise ValueError(f"{bits}-bit codes must lie in [0, {(1 << bits) - 1}], got values in "
                         f"[{int(codes.min())}, {int(codes.max())}]")
    n, k = codes.shape
    per_word = 32 // bits
    width = packed_width(k, bits)
    padded = torch.zeros((n, width * per_word), dtype=torch.int64, device=codes.device)
    padded[:, :k] = codes
    shifts = torch.arange(per_word, device=codes.device, dtype=torch.int64) * bits
    words = (padded.view(n, width, per_word) << shifts).sum(dim=-1)  # distinct bits: the sum is an OR
    # Words are 32-bit patterns: 2**31 and above wrap to negative int32 (two's complement), done explicitly.
    return torch.where(words >= 1 << 31, words - (1 << 32), words).to(torch.int32)


def unpack(words: torch.Tensor, bits: int, k: int) -> torch.Tensor:
    """(N, ceil(K / P)) int32 words -> (N, K) int32 codes in [0, 2**bits): the inverse of ``pack``.

    Plain PyTorch (shifts and masks), so it also runs on FakeTensors under torch.compile.
    """
    check_bits(bits)
    if words.dim() != 2 or words.dtype != torch.int32:
        raise ValueError(f"packed weights must be a 2-D int32 tensor, got {words.dtype} of shape {tuple(words.shape)}")
    if words.shape[1] != packed_width(k, bits):
        raise ValueError(f"packed weights have {words.shape[1]} words per row; K = {k} at {bits} bits needs "
                         f"{packed_width(k, bits)} (ceil(K / {32 // bits}))")
    per_word = 32 // bits
    shifts = torch.arange(per_word, device=words.device, dtype=torch.int32) * bits
    codes = (words.unsqueeze(-1) >> shifts) & ((1 << bits) - 1)  # arithmetic shift; the mask drops the sign
    return codes.reshape(words.shape[0], words.shape[1] * per_word)[:, :k]
