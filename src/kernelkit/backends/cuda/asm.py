"""kernelkit asm for CUDA C++ impls: NVRTC kernels (PTX by cuda.bindings.nvrtc) and load_inline extensions (nvcc)."""

from __future__ import annotations

import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any
from unittest import mock

from kernelkit.backends.cuda.build import line_directive, toolkit_include
from kernelkit.backends.cuda.inline import InlineExtension
from kernelkit.backends.cuda.inline_plan import CUDA_PRELUDE, find_nvcc, std_flags, torch_flags
from kernelkit.backends.cuda.kernel import CudaKernel
from kernelkit.backends.sass import KernelAsm, disassemble, kernel_asm, run_tool
from kernelkit.cache import cache_dir
from kernelkit.errors import CompileError, SpecError

if TYPE_CHECKING:
    from kernelkit.spec import CaseSetup


def cuda_kernels(setup: CaseSetup, arch: str) -> tuple[list[KernelAsm], list[str]]:
    """The kernels a CUDA C++ impl launches for the case (else every one in its kernels=) for ``arch``, and notes."""
    listed = list(setup.impl.kernels)
    if not listed:
        raise SpecError(f"impl {setup.impl.name!r} lists no kernels: pass kernels=[cuda_kernel(...)] (or a "
                        "load_inline extension) to @op.impl so asm can find what it launches")
    launched, why = _launched(setup) if all(isinstance(k, CudaKernel) for k in listed) else ([], "")
    notes = []
    if len(listed) > 1:
        notes.append(f"the case launches {', '.join(k.name for k in launched)} of the {len(listed)} kernels in "
                     "kernels=" if launched else f"showing every kernel in kernels= {why}".strip())
    kernels: list[KernelAsm] = []
    for item in launched or listed:
        if isinstance(item, CudaKernel):
            kernels.append(_nvrtc_kernel(item, arch))
        elif isinstance(item, InlineExtension):
            kernels += _inline_kernels(item, arch)
        else:
            notes.append(f"skipped {item!r} in kernels=: neither a cuda_kernel nor a load_inline extension")
    return kernels, notes


def _launched(setup: CaseSetup) -> tuple[list[CudaKernel], str]:
    """The CudaKernels one call of the impl launches: launches are recorded, not run (so no GPU is needed)."""
    seen: list[CudaKernel] = []

    def record(self: CudaKernel, *args: Any, **kwargs: Any) -> None:
        if self not in seen:
            seen.append(self)

    with mock.patch.object(CudaKernel, "launch", record):
        try:
            setup.call()
        except Exception as exc:  # noqa: BLE001 - any failure: fall back to every listed kernel, saying why
            if not seen:
                return [], f"(the impl raised before launching: {type(exc).__name__}: {exc})"
    return seen, "" if seen else "(the impl launched none of them)"


def _nvrtc_kernel(kernel: CudaKernel, arch: str) -> KernelAsm:
    built = kernel.compile(arch)  # the cubin a launch loads: from the disk cache, or the compiler
    file, line = kernel.origin
    details = [f"{file}:{line}, options {' '.join(kernel.build_options())}"]
    try:
        ptx, log = _nvrtc_ptx(kernel, arch)
        listings = {"ptx": ptx_entry(ptx, kernel.name)}
    except (ImportError, OSError, RuntimeError) as exc:  # no cuda-bindings, or no libnvrtc
        listings, log = {}, ""
        details.append(f"no PTX: NVRTC is unavailable ({exc})")
    return kernel_asm(kernel.name, disassemble(built.cubin), name=kernel.name, compiler=built.compiler, arch=arch,
                   listings=listings, ptxas_log=log, details=details, cubin=built.cubin)


def _nvrtc_ptx(kernel: CudaKernel, arch: str) -> tuple[str, str]:
    """(PTX, ptxas -v report) from NVRTC, for the text and options CudaKernel.compile builds with.

    Through cuda.bindings.nvrtc: cuda.core's Program.compile("ptx") asks the driver whether it can load the PTX, and
    fails where there is no driver.
    """
    from cuda.bindings import nvrtc

    file, line = kernel.origin
    text = line_directive(kernel.source, file, line)
    _, major, minor = nvrtc.nvrtcVersion()
    include = toolkit_include()  # NVRTC carries its own CUDA headers from 13.3 (as build.py decides)
    headers = [f"--use-bundled-headers={cache_dir('nvrtc-headers')}"] if (major, minor) >= (13, 3) else (
        [f"--include-path={include}"] if include else [])
    flags = [f"--gpu-architecture={arch}", "--ptxas-options=-v", *headers, *kernel.build_options()]
    _, program = nvrtc.nvrtcCreateProgram(text.encode(), file.encode(), 0, [], [])
    try:
        (result,) = nvrtc.nvrtcCompileProgram(program, len(flags), [f.encode() for f in flags])
        log = _nvrtc_text(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, program)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"CUDA kernel {kernel.name!r} failed to compile to PTX for {arch} with NVRTC", log)
        return _nvrtc_text(nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, program), log
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _nvrtc_text(size_of: Any, get: Any, program: Any) -> str:
    _, size = size_of(program)
    buffer = b" " * size
    get(program, buffer)
    return buffer.rstrip(b"\0 ").decode("utf-8", "replace")


def _inline_kernels(ext: InlineExtension, arch: str) -> list[KernelAsm]:
    """``nvcc -cubin`` of the extension's CUDA sources, with the flags, headers and defines of its compile-only
    check (inline_check.check), keeping the PTX (-keep) and ptxas's report (-Xptxas -v). Slow: 15 s and more."""
    from torch.utils import cpp_extension

    plan = ext.plan(arch)
    if not plan.cuda:
        raise SpecError(f"load_inline {ext.name!r} has no cuda_sources: no GPU code to show")
    defines, includes = torch_flags(plan)
    flags = [*std_flags(plan.std, plan.cuda_cflags), *getattr(cpp_extension, "COMMON_NVCC_FLAGS", ())]
    with tempfile.TemporaryDirectory(prefix="kernelkit-asm-") as tmp:
        Path(tmp, "cuda.cu").write_text("\n".join([CUDA_PRELUDE, *plan.cuda]), encoding="utf-8")
        log = run_tool([find_nvcc(False), "-cubin", f"-arch={arch}", "-lineinfo", "-Xptxas=-v", "-keep",
                    f"-keep-dir={tmp}", *flags, *defines, *includes, *plan.cuda_cflags, "-o", "cuda.cubin",
                    "cuda.cu"], cwd=tmp)
        cubin = Path(tmp, "cuda.cubin").read_bytes()
        ptx = Path(tmp, "cuda.ptx").read_text(encoding="utf-8") if Path(tmp, "cuda.ptx").is_file() else None
    dis = disassemble(cubin)
    symbols = list(dis.usage or dis.sass)
    readable = _demangle(symbols)
    return [kernel_asm(s, dis, name=readable[s].split("(")[0], compiler="nvcc, load_inline", arch=arch,
                    listings={"ptx": ptx_entry(ptx, s)} if ptx else {}, ptxas_log=log,
                    details=[f"{ext.name}: {readable[s]}"], cubin=cubin) for s in symbols]


def _demangle(names: Sequence[str]) -> dict[str, str]:
    """C++ kernel names (load_inline's are mangled) -> readable ones, by c++filt where present."""
    tool = shutil.which("c++filt")
    if not tool or not names:
        return {n: n for n in names}
    done = subprocess.run([tool], input="\n".join(names), capture_output=True, text=True, timeout=60, check=False)
    readable = done.stdout.splitlines()
    return dict(zip(names, readable)) if len(readable) == len(names) else {n: n for n in names}  # noqa: B905


def ptx_entry(ptx: str, name: str) -> str:
    """The PTX module's header and the ``.entry`` of kernel ``name`` alone; the whole module if it has none."""
    entry = re.search(rf"^[^\n]*\.entry\s+{re.escape(name)}\s*\(.*?^\}}[^\n]*$", ptx, re.M | re.S)
    first = re.search(r"^\s*(?:\.(?:visible|weak|extern)\s+)*\.(?:entry|func)\b", ptx, re.M)
    return ptx if entry is None or first is None else ptx[:first.start()] + entry[0] + "\n"
