"""Correctness: is an impl's output the reference's, to within what the dtype allows?

The rule (also in the README): with ``ref`` the reference computed in float64 and ``lo`` the reference computed
in the case's own dtype, the reference's own error is

    eps_lo = max over finite elements of |lo - ref| / (1 + |ref|)

and an output element passes when

    |out - ref| <= atol + rtol * |ref| + 2 * eps_lo * (1 + |ref|)

with (atol, rtol) the per-dtype floor from ``spec.TOLERANCES``. So an impl may be twice as wrong as PyTorch itself
is in that dtype, and never needs to beat the floor. NaN must meet NaN, +-inf the same inf.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelkit.results import Comparison, Mismatch, Status
from kernelkit.wire import Opaque

MAX_MISMATCHES_SHOWN = 5


@dataclass(frozen=True)
class Verdict:
    status: Status
    message: str = ""
    comparison: Comparison | None = None


def as_outputs(value: Any) -> tuple[Any, ...]:
    """Normalize an op's return value to a tuple of outputs."""
    if isinstance(value, (tuple, list)):
        return tuple(value)
    return (value,)


def to_reference_precision(value: Any, dtype: torch.dtype = torch.float64) -> Any:
    """Floating tensors to ``dtype`` (copies, so the reference cannot touch the impl's inputs)."""
    if isinstance(value, torch.Tensor):
        return value.to(dtype) if value.is_floating_point() else value.clone()
    return value


def clone_inputs(inputs: Sequence[Any]) -> tuple[Any, ...]:
    return tuple(x.clone() if isinstance(x, torch.Tensor) else x for x in inputs)


def fresh_copies(inputs: Sequence[Any]) -> tuple[Any, ...]:
    """Copies of the tensor inputs in new memory with the same layout: strides, storage offset and so the same
    alignment (a view one element into its buffer stays one element in), so an impl sees what it was given."""
    return tuple(_same_layout_copy(x) if isinstance(x, torch.Tensor) else x for x in inputs)


def _same_layout_copy(x: torch.Tensor) -> torch.Tensor:
    copy = torch.empty(0, dtype=x.dtype, device=x.device)
    copy.set_(x.untyped_storage().clone(), x.storage_offset(), x.size(), x.stride())
    return copy


# Elements compared at a time: the float64 temporaries of one chunk are a few hundred MiB, whatever the output's
# size, so checking a 6 GiB output does not take several times its size again (a KernelBench level-1 problem's
# 1.6 G-element output went out of memory on an 80 GiB GPU when compared whole).
# On the CPU a chunk stays small enough for the allocator to reuse its memory: fresh pages for every 128 MiB
# temporary cost more than the arithmetic on them.
CHUNK_ELEMENTS = 1 << 24
CPU_CHUNK_ELEMENTS = 1 << 18


Probe = torch.Tensor | float  # an output, or a constant standing for an output of the reference's shape


def _chunks(*tensors: Probe) -> Iterator[tuple[int, tuple[torch.Tensor, ...]]]:
    """(offset, flat float64 slices) of same-shaped tensors, CHUNK_ELEMENTS at a time (the last one's device); a
    float stands for a tensor full of it and takes no memory beyond one chunk."""
    real = [t for t in tensors if isinstance(t, torch.Tensor)]
    device, numel = real[-1].device, real[-1].numel()
    flats = [t.detach().reshape(-1) if isinstance(t, torch.Tensor) else t for t in tensors]
    step = CHUNK_ELEMENTS if device.type == "cuda" else CPU_CHUNK_ELEMENTS
    for start in range(0, numel, step):
        n = min(step, numel - start)
        yield start, tuple(f[start:start + n].to(device=device, dtype=torch.float64) if isinstance(f, torch.Tensor)
                           else torch.full((n,), f, dtype=torch.float64, device=device) for f in flats)


def reference_error(lo: torch.Tensor, ref: torch.Tensor) -> float:
    """eps_lo: the low-precision reference's own error, max |lo - ref| / (1 + |ref|) over finite elements."""
    worst = 0.0
    for _, (lo64, ref64) in _chunks(lo, ref):
        err = (lo64 - ref64).abs_().div_(ref64.abs().add_(1))
        finite = torch.isfinite(err)  # NaN or inf on either side, or both
        if bool(finite.all()):
            worst = max(worst, float(err.max()))
        elif bool(finite.any()):
            worst = max(worst, float(err[finite].max()))
    return worst


def _allowed(exp: torch.Tensor, atol: float, rtol: float, ref_err: float) -> torch.Tensor:
    """atol + rtol |ref| + 2 eps_lo (1 + |ref|), in one pass over |ref|."""
    return exp.abs().mul_(rtol + 2 * ref_err).add_(atol + 2 * ref_err)


def compare(out: Probe, ref: torch.Tensor, atol: float, rtol: float, ref_err: float = 0.0) -> Comparison:
    """Compare ``out`` with the high-precision ``ref`` element by element, NaN- and inf-aware (in chunks). Where a
    chunk is all finite (the usual case) it takes four passes over it; NaN and inf take the careful path."""
    max_abs = max_rel = 0.0
    n_bad = 0
    nonfinite_bad = False
    first_bad: list[int] = []
    for start, (got, exp) in _chunks(out, ref):
        diff = (got - exp).abs_()
        allowed = _allowed(exp, atol, rtol, ref_err)
        finite = torch.isfinite(diff)  # both finite (a float64 difference of finite values does not overflow)
        if bool(finite.all()):
            bad = diff > allowed
            max_abs = max(max_abs, float(diff.max()))
            rel = diff.div_(exp.abs()).nan_to_num_(nan=0.0, posinf=0.0)  # undefined where the reference is 0
            max_rel = max(max_rel, float(rel.max()))
        else:
            both_nan = torch.isnan(got) & torch.isnan(exp)
            same_inf = torch.isinf(exp) & (got == exp)
            finite = torch.isfinite(exp) & torch.isfinite(got)
            bad = ~(both_nan | same_inf | (finite & (diff <= allowed)))
            if bool(finite.any()):
                max_abs = max(max_abs, float(diff[finite].max()))
            nonzero = finite & (exp != 0)
            if bool(nonzero.any()):
                max_rel = max(max_rel, float((diff[nonzero] / exp[nonzero].abs()).max()))
            nonfinite_bad = nonfinite_bad or bool((~finite & bad).any())
        count = int(bad.sum())
        n_bad += count
        if count and len(first_bad) < MAX_MISMATCHES_SHOWN:
            wanted = MAX_MISMATCHES_SHOWN - len(first_bad)
            first_bad += [start + i for i in torch.nonzero(bad)[:wanted, 0].tolist()]
    if nonfinite_bad:
        max_abs = max_rel = float("inf")  # a NaN or inf where none belongs

    shown: list[Mismatch] = []
    exp_flat = ref.detach().reshape(-1)
    got_flat = out.detach().reshape(-1) if isinstance(out, torch.Tensor) else None
    for flat in first_bad:
        index = tuple(int(i) for i in torch.unravel_index(torch.tensor(flat), ref.shape)) if ref.dim() else ()
        got_value = float(got_flat[flat].double()) if got_flat is not None else float(out)
        shown.append(Mismatch(index, got_value, float(exp_flat[flat].double())))
    return Comparison(
        ok=n_bad == 0, max_abs_err=max_abs, max_rel_err=max_rel, n_mismatched=n_bad, n_total=ref.numel(),
        mismatches=tuple(shown), atol=atol, rtol=rtol, ref_err=ref_err,
    )


def passes(out: Probe, ref: torch.Tensor, atol: float, rtol: float, ref_err: float = 0.0) -> bool:
    """Whether ``out`` would pass ``compare``: stops at the first chunk with an element that fails (a probe that
    fails, as most do, costs one chunk)."""
    for _, (got, exp) in _chunks(out, ref):
        diff = (got - exp).abs_()
        allowed = _allowed(exp, atol, rtol, ref_err)
        ok = torch.isfinite(diff) & (diff <= allowed)  # a finite difference: both sides finite
        if not bool(ok.all()):
            both_nan = torch.isnan(got) & torch.isnan(exp)
            same_inf = torch.isinf(exp) & (got == exp)
            finite_ok = torch.isfinite(got) & torch.isfinite(exp) & (diff <= allowed)
            if not bool((finite_ok | both_nan | same_inf).all()):
                return False
    return True


def kind_of(value: Any) -> str:
    """What a call returned, before ``as_outputs``: 'tensor', 'tuple', 'list' or another type's name."""
    return "tensor" if isinstance(value, torch.Tensor) else type(value).__name__


def check_kind(returned: str, expected: str) -> Verdict | None:
    """The kind of a call's return value (``kind_of``) against the reference's: a tensor where it returns a tensor
    (a 1-tuple is not one), a tuple or list where it returns a tuple or list; None when they match, or when the
    reference returns something else (its structure is then compared output by output)."""
    sequence = ("tuple", "list")
    if expected == "tensor" and returned != "tensor":
        return Verdict(Status.INCORRECT_SHAPE, f"it returned a {returned} where the reference returns a tensor")
    if expected in sequence and returned not in sequence:
        return Verdict(Status.INCORRECT_SHAPE, f"it returned a {returned} where the reference returns a {expected}")
    return None


def check_structure(outs: Sequence[Any], expected: Sequence[Any]) -> Verdict | None:
    """Number, kind, shape, dtype and device of the outputs; None when all match."""
    if len(outs) != len(expected):
        return Verdict(Status.INCORRECT_SHAPE, f"returned {len(outs)} outputs, the reference returns {len(expected)}")
    for i, (out, exp) in enumerate(zip(outs, expected, strict=True)):
        name = f"output {i}" if len(outs) > 1 else "output"
        if not isinstance(out, torch.Tensor):
            kind = out.type_name if isinstance(out, Opaque) else type(out).__name__  # Opaque: not sent, only named
            return Verdict(Status.INCORRECT_SHAPE, f"{name} is a {kind}, expected a tensor")
        if out.shape != exp.shape:
            return Verdict(Status.INCORRECT_SHAPE, f"{name} has shape {tuple(out.shape)}, expected {tuple(exp.shape)}")
        if out.dtype != exp.dtype:
            return Verdict(Status.INCORRECT_DTYPE, f"{name} has dtype {out.dtype}, expected {exp.dtype}")
        if out.device != exp.device:
            return Verdict(Status.INCORRECT_DTYPE, f"{name} is on {out.device}, expected {exp.device}")
    return None


def mutated_inputs(inputs: Sequence[Any], snapshot: Sequence[Any]) -> list[int]:
    """Positions of tensor inputs whose contents changed (bitwise; NaN equals NaN)."""
    changed = []
    for i, (now, before) in enumerate(zip(inputs, snapshot, strict=True)):
        if isinstance(now, torch.Tensor) and not torch.equal(now, before):
            if now.is_floating_point() and torch.equal(now.isnan(), before.isnan()):
                if torch.equal(torch.nan_to_num(now), torch.nan_to_num(before)):
                    continue
            changed.append(i)
    return changed


def compare_outputs(
    outs: Sequence[torch.Tensor], refs: Sequence[torch.Tensor], los: Sequence[torch.Tensor], atol: float, rtol: float,
    errors: Sequence[float] | None = None,
) -> list[Comparison]:
    """Each output against its reference; ``errors``: each output's eps_lo, where the caller has it already."""
    errs = errors if errors is not None else reference_errors(refs, los)
    return [compare(o, r, atol, rtol, e) for o, r, e in zip(outs, refs, errs, strict=True)]


def reference_errors(refs: Sequence[torch.Tensor], los: Sequence[torch.Tensor]) -> list[float]:
    return [reference_error(lo, r) for r, lo in zip(refs, los, strict=True)]


def weak_probes(
    inputs: Sequence[Any], refs: Sequence[torch.Tensor], los: Sequence[torch.Tensor], atol: float, rtol: float,
    other: Sequence[torch.Tensor] | None = None, errors: Sequence[float] | None = None,
) -> list[str]:
    """Trivial outputs that would also pass: all zeros, an input echoed back, a constant. Empty means none.

    The constant is the mean of the answer, which for a one-element output is the answer itself: there the
    probe is the answer to ``other`` inputs (the reference's output on a second input set) instead, the constant
    an impl that ignored its input would return; without ``other`` one-element outputs skip the probe. Zeros and
    constants are compared as numbers (no output-sized tensor is made), and each probe stops at its first failing
    chunk.
    """
    passing = []
    errs = errors if errors is not None else reference_errors(refs, los)
    others = list(other) if other is not None else [None] * len(los)
    probes: dict[str, Callable[[torch.Tensor, torch.Tensor | None], Probe | None]] = {
        "all zeros": lambda lo, _: 0.0,
        "the input echoed": lambda lo, _: _echo(inputs, lo),
        "a constant": _constant,
    }
    for name, make in probes.items():
        fakes = [make(lo, o) for lo, o in zip(los, others, strict=True)]
        if any(f is None for f in fakes):
            continue
        if all(passes(f, r, atol, rtol, e) for f, r, e in zip(fakes, refs, errs, strict=True)):
            passing.append(name)
    return passing


def _constant(lo: torch.Tensor, other: torch.Tensor | None) -> Probe | None:
    if lo.numel() == 0:
        return 0.0
    if lo.numel() == 1:
        if other is None or other.shape != lo.shape:
            return None
        return other.to(lo.dtype).clone()
    mean = float(lo.sum(dtype=torch.float64)) / lo.numel()  # accumulated in float64, no float64 copy of the output
    return float(torch.tensor(mean, dtype=lo.dtype)) if lo.is_floating_point() else mean  # as the dtype holds it


# The tolerance rule's (1 + |ref|) term assumes outputs of order one: far above it, eps_lo is a large absolute
# allowance; far below it, the atol floor dwarfs every value. Neither is rescaled (an op that means it sets its own
# tolerance=, and the all-zeros probe still marks a case that cannot fail as WEAK); the check warns instead.
SCALE_BOUNDS = (1e-2, 1e2)
SCALE_SAMPLE = 1 << 20


def scale_note(refs: Sequence[torch.Tensor]) -> str:
    """A warning when the reference's typical magnitude (median |ref| of its finite elements) is far from 1."""
    for i, ref in enumerate(refs):
        if not isinstance(ref, torch.Tensor) or not ref.numel() or not (ref.is_floating_point() or ref.is_complex()):
            continue
        flat = ref.detach().reshape(-1)
        step = max(1, flat.numel() // SCALE_SAMPLE)  # an evenly spaced sample: a median needs no sort of it all
        values = flat[::step].abs().to(torch.float64)
        values = values[torch.isfinite(values)]
        if not values.numel():
            continue
        typical = float(values.median())
        if typical == 0 or SCALE_BOUNDS[0] <= typical <= SCALE_BOUNDS[1]:
            continue
        where = f"output {i}" if len(refs) > 1 else "the output"
        return (f"{where} is of magnitude {typical:.3g}: the tolerance rule's (1 + |ref|) term assumes values near 1, "
                "so its allowance is loose in relative terms there (or, below 1, its atol floor dominates); scale the "
                "op's inputs so outputs are O(1), or give the op its own tolerance=")
    return ""


def _echo(inputs: Sequence[Any], like: torch.Tensor) -> torch.Tensor | None:
    for x in inputs:
        if isinstance(x, torch.Tensor) and x.shape == like.shape:
            return x.to(like.dtype)
    return None
