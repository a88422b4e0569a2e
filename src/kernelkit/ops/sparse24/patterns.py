"""The 2:4 masks as data: the pairs a group of four may keep, and the 90 masks of a 4x4 block that keep two of
four along every row and every column (the transposable masks), in one fixed order that every sparsifier shares.

Order and ties. A row keeps one of the six pairs PAIRS, numbered 0..5 as listed. A transposable mask is the
row pairs (p0, p1, p2, p3) of its four rows; the 90 valid ones are numbered in lexicographic order of that tuple.
Its score is the kept magnitude, summed in float32 in one fixed order,

    score = (s0[p0] + s1[p1]) + (s2[p2] + s3[p3]),   s_r[p] = |x[r, i]| + |x[r, j]| for (i, j) = PAIRS[p],

and the block keeps the highest-scoring mask, the first in order among equal scores. The reference and the
Triton kernel add the same float32 numbers in the same order, so even scores that differ only by rounding pick
the same mask in both.
"""

from __future__ import annotations

import itertools

import torch

PAIRS: tuple[tuple[int, int], ...] = ((0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3))
PAIR_FIRST = tuple(i for i, _ in PAIRS)
PAIR_SECOND = tuple(j for _, j in PAIRS)


def _valid(rows: tuple[int, ...]) -> bool:
    """Every column of the block is kept by exactly two of the rows' pairs."""
    counts = [0, 0, 0, 0]
    for p in rows:
        for col in PAIRS[p]:
            counts[col] += 1
    return counts == [2, 2, 2, 2]


# (p0, p1, p2, p3) per transposable mask, lexicographic: the order that decides ties.
TRANSPOSABLE: tuple[tuple[int, int, int, int], ...] = tuple(
    rows for rows in itertools.product(range(6), repeat=4) if _valid(rows))


def pattern_bits(rows: tuple[int, ...]) -> int:
    """The mask as 16 bits: bit 4 * r + c is set when row r keeps column c."""
    return sum(1 << (4 * r + c) for r, p in enumerate(rows) for c in PAIRS[p])


def transposable_masks(device: torch.device | str = "cpu") -> torch.Tensor:
    """(90, 4, 4) bool: the transposable masks in order."""
    bits = torch.tensor([pattern_bits(rows) for rows in TRANSPOSABLE], device=device)
    return ((bits[:, None] >> torch.arange(16, device=device)) & 1 == 1).reshape(len(TRANSPOSABLE), 4, 4)


def transposable_scores(a: torch.Tensor) -> torch.Tensor:
    """(..., 4, 4) magnitudes as float32 -> (..., 90) scores, added exactly as the module docstring says."""
    pair = a[..., list(PAIR_FIRST)] + a[..., list(PAIR_SECOND)]  # (..., 4 rows, 6 pairs)
    p0, p1, p2, p3 = (list(column) for column in zip(*TRANSPOSABLE, strict=True))
    return (pair[..., 0, p0] + pair[..., 1, p1]) + (pair[..., 2, p2] + pair[..., 3, p3])


def scan_source() -> list[str]:
    """The Triton kernel's scan over the 90 masks, two lines per mask (triton.py holds these lines verbatim, and
    a test compares them): row r's pair sums are ``s{r}_{p}``; ``best`` is the best score so far and ``keep``
    its mask's bits. ``score > best`` is strict, so among equal scores the earlier mask stays."""
    lines = []
    for rows in TRANSPOSABLE:
        p0, p1, p2, p3 = rows
        lines.append(f"score = (s0_{p0} + s1_{p1}) + (s2_{p2} + s3_{p3})")
        lines.append(f"keep, best = tl.where(score > best, {pattern_bits(rows)}, keep), tl.maximum(best, score)")
    return lines
