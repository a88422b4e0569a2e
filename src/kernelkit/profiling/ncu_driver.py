"""The program `kernelkit ncu` runs under Nsight Compute: one case, its impl called once inside an NVTX range.

    python -m kernelkit.profiling.ncu_driver TARGET IMPL --size 8192x8192 --dtype float32 --range NAME

Everything that is not the kernel under study happens before the range opens: loading the op, compiling its
kernels, making the inputs, and ``--warmup`` calls (Triton JIT and autotuning, CUDA module loads, the caching
allocator's first allocations). ncu, filtered to the range (``--nvtx --nvtx-include NAME/``), profiles only the
kernels of the one call inside it. Exit code: 0 when the call ran, 3 when the case could not be prepared or run.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence

EXIT_CASE_FAILED = 3


def nvtx_push_pop() -> tuple[Callable[[str], object], Callable[[], object]]:
    """torch's NVTX bindings, else the `nvtx` package's: both push a range in NVTX's default domain."""
    import torch

    from kernelkit.errors import BackendUnavailable

    if hasattr(torch._C, "_nvtx"):  # CPU builds of torch (and some others) leave NVTX out; their calls raise
        return torch.cuda.nvtx.range_push, torch.cuda.nvtx.range_pop
    try:
        import nvtx  # type: ignore[import-not-found]
    except ImportError:
        raise BackendUnavailable("this torch has no NVTX bindings (torch.cuda.nvtx) and the nvtx package is not "
                                 "installed: pip install nvtx") from None
    return nvtx.push_range, nvtx.pop_range


def profile_once(target: str, impl: str, *, op_name: str | None, size: str | None, dtype: str | None, seed: int,
                 warmup: int, range_name: str) -> None:
    """Prepare the case on CUDA, warm it up, then call it once inside the NVTX range ``range_name``."""
    import torch

    from kernelkit.target import prepare_case

    case = prepare_case(target, impl, op_name=op_name, size=size, dtype=dtype, device="cuda", seed=seed)
    push, pop = nvtx_push_pop()
    for _ in range(warmup):
        case.call()
    torch.cuda.synchronize()  # nothing of the warm-up may still run when the range opens
    push(range_name)
    try:
        case.call()
        torch.cuda.synchronize()
    finally:
        pop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelkit.profiling.ncu_driver", description=__doc__)
    parser.add_argument("target", help="a built-in op name or a .py file of ops")
    parser.add_argument("impl")
    parser.add_argument("--op", dest="op_name", default=None, help="the op, when the file defines several")
    parser.add_argument("--size", default=None, help="e.g. 8192x8192; default: the op's first")
    parser.add_argument("--dtype", default=None, help="e.g. float32; default: the op's first")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--warmup", type=int, default=3, help="calls before the profiled one (JIT, autotune)")
    parser.add_argument("--range", dest="range_name", required=True, help="the NVTX push/pop range to open")
    args = parser.parse_args(argv)

    from kernelkit.errors import KernelkitError
    from kernelkit.profiling.ncu import ERROR_MARK

    try:
        profile_once(args.target, args.impl, op_name=args.op_name, size=args.size, dtype=args.dtype,
                     seed=args.seed, warmup=args.warmup, range_name=args.range_name)
    except (KernelkitError, RuntimeError, ImportError) as exc:  # torch raises RuntimeError for CUDA errors
        print(f"{ERROR_MARK} {type(exc).__name__}: {exc}", file=sys.stderr, flush=True)
        return EXIT_CASE_FAILED
    return 0


if __name__ == "__main__":
    sys.exit(main())
