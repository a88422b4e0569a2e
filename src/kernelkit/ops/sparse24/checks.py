"""Checks specific to 2:4 sparsity, for any sparsifier's output, and what a mask keeps.

Each ``problems_*`` function returns a list of readable problems (empty: none), the first few with where they
are, so a test asserts ``== []`` and a failure says what went wrong. Genuine zeros in the input are accounted
for: a group of four whose input has fewer than two non-zeros keeps all of them (and zeros, which leave no trace
in the output), so the counts asked for are min(2, non-zeros of the input group).
"""

from __future__ import annotations

import torch

from kernelkit.ops.sparse24 import patterns

SHOWN = 3  # problem locations listed per kind
# Kept magnitude of a transposable mask may fall short of the best mask's by float32 rounding of two eight-term
# sums (patterns.py: the kernels compare float32 scores), never by more.
SCORE_RTOL = 16 * 2.0**-24
CHUNK_BLOCK_ROWS = 256  # block rows scored at once: 256 x (K/4) x 90 float64 scores


def _where(bad: torch.Tensor, describe: str) -> list[str]:
    """'describe at (i, j), ...' for the first few True entries of bad, with how many there are."""
    found = torch.nonzero(bad)
    if not len(found):
        return []
    places = ", ".join(str(tuple(int(v) for v in row)) for row in found[:SHOWN])
    more = f" (+{len(found) - SHOWN} more)" if len(found) > SHOWN else ""
    return [f"{describe} at {places}{more}"]


def _shape_problems(pruned: torch.Tensor, dense: torch.Tensor, block_rows: int) -> list[str]:
    if pruned.shape != dense.shape or pruned.dim() != 2:
        return [f"pruned shape {tuple(pruned.shape)} is not the 2-D input's {tuple(dense.shape)}"]
    if dense.shape[1] % 4 or dense.shape[0] % block_rows:
        return [f"shape {tuple(dense.shape)} does not split into groups of {block_rows} x 4"]
    return []


def _subset_problems(pruned: torch.Tensor, dense: torch.Tensor) -> list[str]:
    """Every non-zero of the pruned matrix is the input's value at that place."""
    return _where((pruned != 0) & (pruned != dense), "a kept value differs from the input (group, element)")


def _count_problems(pruned: torch.Tensor, dense: torch.Tensor, dim: int, wanted: torch.Tensor | None = None
                    ) -> list[str]:
    """Along ``dim`` (1: rows, 0: columns) every group of four keeps ``wanted`` non-zeros (per group; default
    min(2, the input group's non-zeros)) and never more than two."""
    if dim == 0:
        pruned, dense = pruned.t(), dense.t()
    kept = (pruned != 0).reshape(pruned.shape[0], pruned.shape[1] // 4, 4).sum(-1)
    if wanted is None:
        wanted = (dense != 0).reshape(dense.shape[0], dense.shape[1] // 4, 4).sum(-1).clamp(max=2)
    where = "row, group" if dim == 1 else "column, group"
    return _where((kept != wanted) | (kept > 2), f"a group of four along {'rows' if dim == 1 else 'columns'} "
                                                 f"keeps the wrong number of non-zeros ({where})")


def problems_rowwise(pruned: torch.Tensor, dense: torch.Tensor) -> list[str]:
    """What is wrong with ``pruned`` as sparsify24(dense): counts per group, kept values, the two largest
    magnitudes kept, and the tie rule (of equal magnitudes the lower index is kept)."""
    problems = _shape_problems(pruned, dense, 1)
    if problems:
        return problems
    problems = _subset_problems(pruned, dense) + _count_problems(pruned, dense, dim=1)
    a = dense.abs().reshape(dense.shape[0], dense.shape[1] // 4, 4)
    kept = (pruned != 0).reshape(a.shape)
    dropped = (pruned == 0).reshape(a.shape) & (a != 0)
    index = torch.arange(4, device=dense.device)
    # j beats i: larger, or equal and earlier. No dropped non-zero may beat a kept one.
    beats = (a[..., :, None] > a[..., None, :]) | ((a[..., :, None] == a[..., None, :]) & (index[:, None] < index))
    wrong = (dropped[..., :, None] & kept[..., None, :] & beats).any(-1).any(-1)
    return problems + _where(wrong, "a dropped value outranks a kept one (row, group)")


def problems_transposable(pruned: torch.Tensor, dense: torch.Tensor) -> list[str]:
    """What is wrong with ``pruned`` as sparsify24_transposable(dense): two non-zeros along every row and column
    of each 4x4 block (at most two where the block's input has zeros: a best mask may then keep a zero), kept
    values, and kept magnitude equal to the best mask's (to float32 rounding)."""
    problems = _shape_problems(pruned, dense, 4)
    if problems:
        return problems
    # Blocks whose input has no zeros keep exactly two per row and column; others at most two (checked anyway).
    full = _blocks(dense != 0).all(-1).all(-1)  # (M/4, K/4)
    row_counts = (pruned != 0).reshape(pruned.shape[0], pruned.shape[1] // 4, 4).sum(-1)
    col_counts = (pruned.t() != 0).reshape(pruned.shape[1], pruned.shape[0] // 4, 4).sum(-1)
    rows_wanted = torch.where(full.repeat_interleave(4, dim=0), 2, row_counts)
    cols_wanted = torch.where(full.t().repeat_interleave(4, dim=0), 2, col_counts)
    problems = _subset_problems(pruned, dense)
    problems += _count_problems(pruned, dense, 1, rows_wanted) + _count_problems(pruned, dense, 0, cols_wanted)
    magnitudes, kept = _blocks(dense.abs().double()), _blocks(pruned.abs().double()).sum((-1, -2))
    short = torch.zeros(full.shape, dtype=torch.bool, device=dense.device)
    for start in range(0, full.shape[0], CHUNK_BLOCK_ROWS):  # 90 scores per block: a slice at a time
        part = slice(start, start + CHUNK_BLOCK_ROWS)
        best = patterns.transposable_scores(magnitudes[part]).amax(-1)
        short[part] = kept[part] < best * (1 - SCORE_RTOL)
    return problems + _where(short, "a block keeps less magnitude than its best mask (block row, block column)")


def _blocks(x: torch.Tensor) -> torch.Tensor:
    """(M, K) -> (M/4, K/4, 4, 4)."""
    return x.reshape(x.shape[0] // 4, 4, x.shape[1] // 4, 4).permute(0, 2, 1, 3)


def is_24(x: torch.Tensor, dim: int = 1) -> bool:
    """At most two non-zeros in every group of four consecutive elements along ``dim`` (1: rows, 0: columns)."""
    t = x if dim == 1 else x.t()
    if t.shape[-1] % 4:
        return False
    return bool(((t != 0).reshape(t.shape[0], t.shape[1] // 4, 4).sum(-1) <= 2).all())


def kept_fraction(pruned: torch.Tensor, dense: torch.Tensor) -> float:
    """Sum |pruned| / sum |dense| in float64: the share of the input's magnitude a mask keeps (1.0 for zeros)."""
    total = float(dense.double().abs().sum())
    return float(pruned.double().abs().sum()) / total if total else 1.0


def kept_vs_rowwise(dense: torch.Tensor) -> dict[str, float]:
    """Magnitude kept by the transposable mask against the row-wise one, on ``dense`` (references on its device):
    {'rowwise': share kept, 'transposable': share kept, 'ratio': transposable / rowwise, <= 1}."""
    from kernelkit.ops import sparse24

    rowwise = kept_fraction(sparse24.sparsify24(dense), dense)
    transposable = kept_fraction(sparse24.sparsify24_transposable(dense), dense)
    return {"rowwise": rowwise, "transposable": transposable,
            "ratio": transposable / rowwise if rowwise else 1.0}
