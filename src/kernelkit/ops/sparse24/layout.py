"""cuSPARSELt's compressed form of a 2:4 fp16/bf16 weight on sm_90: its size and its bytes, in plain PyTorch.

The layout, as cuSPARSELt 0.8 writes it on sm_90 for fp16 and bf16 (read back from its output, byte for byte, on
an H200; tests/fixtures/cusparselt holds what the library wrote for three shapes, and a GPU test compares ten):

- values: the two kept elements of each group of four, in order, row-major: an (N, K/2) matrix, N K bytes;
- then metadata: 4 bits a group, ``i | j << 2`` for kept positions i < j, over N padded to 64 rows and K to 32
  columns (a padded row's groups read 0xE: positions 2 and 3). A band of 64 rows is 8 Kp bytes; in it, each 32
  columns are a 256-byte tile. In a tile, the byte of row 16a + l and group g (of the 8) holds row 16a + l in its
  low nibble and row 16a + 8 + l in its high one, at byte 4 (16a + 2l + (g // 2) % 2) + 2 (g % 2) + g // 4;
- the metadata's size rounded up to 512 bytes (the library leaves that tail unwritten). The metadata starts right
  after the values, which need not be a multiple of 512 bytes: a 48x80 weight is 3840 bytes of values and 1024 of
  metadata (768 written), 4864 in all, where rounding the whole would give 5120 (torch gave it 48 x 51 on an H200).

A group with fewer than two nonzeros keeps its nonzeros and the highest positions left (all zero: 2 and 3). A
group with more than two nonzeros is not 2:4: prune first. ``layout_reference`` is the specification of the Triton
kernel in compress.py.
"""

from __future__ import annotations

import torch

ROWS = 64  # the metadata covers the rows padded to a multiple of this (a band)
COLS = 32  # ... and the columns padded to a multiple of this (a tile)
ALIGN = 512  # the metadata's size is a multiple of this many bytes
EMPTY = 0xE  # the nibble of a group with no nonzero: positions 2 and 3


def padded(n: int, multiple: int) -> int:
    return -(-n // multiple) * multiple


def metadata_bytes(n_rows: int, n_cols: int) -> int:
    """Bytes of metadata written for a 16-bit (n_rows, n_cols) weight: 4 bits a group over the padded weight."""
    return padded(n_rows, ROWS) * padded(n_cols, COLS) // 8


def written_bytes(n_rows: int, n_cols: int) -> int:
    """Bytes of a 16-bit (n_rows, n_cols) weight's compressed form that are written: values, then the metadata."""
    return n_rows * n_cols + metadata_bytes(n_rows, n_cols)


def compressed_bytes(n_rows: int, n_cols: int) -> int:
    """cuSPARSELt's compressed size (cusparseLtSpMMACompressedSize2) of a 16-bit (n_rows, n_cols) weight: the
    values, then the metadata rounded up to ALIGN bytes."""
    return n_rows * n_cols + padded(metadata_bytes(n_rows, n_cols), ALIGN)


def _kept_positions(groups: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(i, j) of each group of four (last dimension): its nonzeros, filled up from the highest positions."""
    pos = torch.arange(4, device=groups.device)
    nonzero = groups != 0
    first = torch.where(nonzero & (pos < 3), pos, 2).amin(-1)
    last = torch.where(nonzero, pos, -1).amax(-1)
    return first, torch.where(last > first, last, 3)


def metadata_offsets(rows_p: int, cols_p: int, device: torch.device | str = "cpu"
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """(byte, high) of each group of a padded (rows_p, cols_p) weight, both (rows_p, cols_p / 4): the metadata
    byte that holds the group's nibble, counted from the metadata's start, and whether it is the high nibble."""
    r = torch.arange(rows_p, device=device)[:, None]
    g = torch.arange(cols_p // 4, device=device)[None, :]
    band, a, high, lane = r // 64, (r % 64) // 16, (r // 8) % 2, r % 8
    tile, g8 = g // 8, g % 8
    byte = band * 8 * cols_p + tile * 256 + 4 * (16 * a + 2 * lane + (g8 // 2) % 2) + 2 * (g8 % 2) + g8 // 4
    return byte, high.expand_as(byte)


def layout_reference(w: torch.Tensor) -> torch.Tensor:
    """The compressed form of a pruned 16-bit w (N, K) in plain PyTorch (any device): a (N, cols) tensor of w's
    dtype, as ``compress`` and torch._cslt_compress return it. The kernel's specification."""
    n_rows, n_cols = w.shape
    groups = w.reshape(n_rows, n_cols // 4, 4)
    first, second = _kept_positions(groups)
    values = torch.stack([groups.gather(-1, first[..., None])[..., 0], groups.gather(-1, second[..., None])[..., 0]],
                         -1).reshape(n_rows, n_cols // 2)
    rows_p, cols_p = padded(n_rows, ROWS), padded(n_cols, COLS)
    nibbles = torch.full((rows_p, cols_p // 4), EMPTY, dtype=torch.int64, device=w.device)
    nibbles[:n_rows, : n_cols // 4] = first | (second << 2)
    byte, high = metadata_offsets(rows_p, cols_p, w.device)
    meta = torch.zeros(metadata_bytes(n_rows, n_cols), dtype=torch.int64, device=w.device)
    meta.index_add_(0, byte.flatten(), (nibbles << (4 * high)).flatten())  # rows l and l + 8 share a byte
    out = _allocate(w)
    flat = out.view(torch.uint8).reshape(-1)
    flat[: n_rows * n_cols] = values.contiguous().view(torch.uint8).reshape(-1)
    flat[n_rows * n_cols: n_rows * n_cols + meta.numel()] = meta.to(torch.uint8)
    return out


def compressed_shape(n_rows: int, n_cols: int) -> tuple[int, int]:
    """PyTorch's tensor for a compressed 16-bit (n_rows, n_cols) weight: its rows, whole columns enough for the
    bytes (torch._cslt_compress allocates so, and torch._cslt_sparse_mm reads the weight's N from its rows)."""
    return n_rows, -(-compressed_bytes(n_rows, n_cols) // (2 * n_rows))


def _allocate(w: torch.Tensor) -> torch.Tensor:
    return torch.zeros(compressed_shape(*w.shape), dtype=w.dtype, device=w.device)
