"""What a kernel compiles to: Triton's IRs, PTX and SASS for a GPU target, after a summary of what matters most.

    report = kernelkit.profiling.asm.report_for("square", "cuda_vec4")     # no GPU needed
    print(report.listing("sass"))

The impl's backend compiles the kernels one call launches for the case (``Backend.asm``: Triton's as they launch,
CUDA C++ kernels as a launch builds them, load_inline extensions as their compile-only check does) or says why it
cannot; sass.py reads each cubin: registers, spills, shared and local memory, the width of global loads and stores.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path

import torch

from kernelkit import backends
from kernelkit.backends.cuda import default_arch
from kernelkit.backends.sass import KernelAsm
from kernelkit.errors import SpecError
from kernelkit.spec import CaseSetup, Size, dtype_name
from kernelkit.target import open_target, pick

IRS = ("ttir", "ttgir", "llir", "ptx", "sass")
DEFAULT_OUT_DIR = Path("kernelkit-results/asm")
_SUFFIX = {"ttir": "ttir", "ttgir": "ttgir", "llir": "ll", "ptx": "ptx", "sass": "sass"}

# ---- the report ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class AsmReport:
    """The kernels one case (op, impl, size, dtype) launches, compiled for ``arch``."""

    case: str  # 'square/cuda_vec4/4096x4096/float32'
    arch: str
    ir: str  # the listing asked for
    kernels: tuple[KernelAsm, ...]
    notes: tuple[str, ...] = ()

    def listing(self, ir: str | None = None) -> str:
        """Every kernel's ``ir`` (default: the report's), each under a header line."""
        ir = ir or self.ir
        parts = [f"// ==== {k.name}: {ir} for {self.arch} ({k.compiler}) ====\n"
                 + k.listings.get(ir, f"// no {ir} for this kernel") for k in self.kernels]
        return "\n\n".join(parts)

    def save(self, out_dir: str | Path = DEFAULT_OUT_DIR) -> list[Path]:
        """Write each kernel's listings and cubin as ``<case>.<kernel>.<ir suffix>`` in ``out_dir``."""
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        stem = re.sub(r"\W+", "_", self.case)
        paths = []
        for k in self.kernels:
            base = folder / f"{stem}.{re.sub(r'[^A-Za-z0-9_]+', '_', k.name.split('(')[0])}"
            for ir, text in k.listings.items():
                paths.append(base.with_name(f"{base.name}.{_SUFFIX[ir]}"))
                paths[-1].write_text(text + "\n", encoding="utf-8")
            if k.cubin:
                paths.append(base.with_name(f"{base.name}.cubin"))
                paths[-1].write_bytes(k.cubin)
        return paths


# ---- the API and the command ---------------------------------------------------------------------------------


def report_for(target: str, impl: str, *, ir: str = "sass", arch: str | None = None,
               size: Size | str | None = None, dtype: torch.dtype | str | None = None, config: int | None = None,
               op_name: str | None = None) -> AsmReport:
    """Compile the kernels ``impl`` of ``target`` (a built-in op name or a .py file) launches, for ``arch``.

    No GPU is needed. size: default the op's first GPU size (the code may depend on it: block sizes, i32 or i64
    offsets); dtype: default the op's first that the impl takes; config: an autotuned Triton kernel's config, by
    index in ``configs=`` (default 0). ir: the listing ``AsmReport.listing()`` gives (ttir/ttgir/llir: Triton only).
    SpecError/LoadError for a bad case, BackendUnavailable for impls whose backend cannot show them, CompileError
    when a kernel does not build.
    """
    if ir not in IRS:
        raise SpecError(f"unknown IR {ir!r}; use one of {', '.join(IRS)}")
    arch = arch or default_arch()
    if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
        raise SpecError(f"bad arch {arch!r}: write sm_XY, e.g. sm_90 (H100) or sm_80 (A100)")
    setup = _setup(target, impl, op_name, size, dtype)
    kernels, notes = backends.backend(setup.impl.backend).asm(setup, arch, ir, config)
    if config is not None and not any("autotune config" in d for k in kernels for d in k.details):
        notes.append("--config ignored: the impl launches no autotuned Triton kernel")
    return AsmReport(setup.label, arch, ir, tuple(kernels), tuple(notes))


def _setup(target: str, impl: str, op_name: str | None, size: Size | str | None,
           dtype: torch.dtype | str | None) -> CaseSetup:
    opened = open_target(target)
    op = opened.op(op_name)
    # The code generated depends on the size: default to the op's first GPU size, even with no GPU here.
    chosen, case_size, case_dtype = pick(op, impl, size if size is not None else op.sizes[0], dtype, opened.device)
    if chosen.dtypes and case_dtype not in chosen.dtypes:
        raise SpecError(f"impl {impl!r} supports {', '.join(map(dtype_name, chosen.dtypes))} only")
    return opened.case(impl, op_name=op.name, size=case_size, dtype=case_dtype, build=False)
