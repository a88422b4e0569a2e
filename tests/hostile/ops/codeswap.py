"""An op file that, at import, rewrites kernelkit's comparisons in place (their __code__, not the names): the
judging process imports it, so the seal must see code, not identity."""

import torch

import kernelkit as kk
import kernelkit.verify as _verify


def _says_ok(out, ref, atol, rtol, ref_err=0.0):
    from kernelkit.verify import Comparison

    return Comparison(ok=True, max_abs_err=0.0, max_rel_err=0.0, n_mismatched=0, n_total=ref.numel(),
                      mismatches=(), atol=atol, rtol=rtol, ref_err=ref_err)


def _passes(out, ref, atol, rtol, ref_err=0.0):
    return True


def _no_probes(*args, **kwargs):
    return []


_verify.compare.__code__ = _says_ok.__code__
_verify.passes.__code__ = _passes.__code__
_verify.weak_probes.__code__ = _no_probes.__code__


@kk.op(sizes=[(64,)], dtypes=["float32"], cpu_sizes=[(64,)])
def doubled(x: torch.Tensor) -> torch.Tensor:
    return x * 2


@doubled.impl("eager_zeros")
def eager_zeros(x: torch.Tensor) -> torch.Tensor:
    return torch.zeros_like(x)
