"""What a kernel compiles to: Triton's IRs, PTX and SASS for a GPU target, after a summary of what matters most.

    report = kernelkit.profiling.asm.inspect("square", "cuda_vec4")     # no GPU needed
    print(report.listing("sass"))

Per kernel: registers per thread, bytes spilled, shared and local memory, and the width of each global load and
store in the SASS (``LDG.E.128`` moves 16 bytes per thread, plain ``LDG.E`` 4). Triton impls are compiled as they
launch for the case (asm_triton.py); CUDA C++ kernels as a launch builds them (NVRTC), load_inline extensions with
``nvcc -cubin`` as their compile-only check does. Disassembly by nvdisasm and cuobjdump (triton's wheel ships both).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import sysconfig
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any
from unittest import mock

import torch

from kernelkit import backends, loader, runner
from kernelkit.backends.cuda import DEFAULT_OPTIONS, CudaKernel, InlineExtension, default_arch
from kernelkit.errors import BackendUnavailable, CompileError, SpecError
from kernelkit.spec import Size, dtype_name, parse_dtype, parse_size
from kernelkit.target import CaseSetup, prepare_case

IRS = ("ttir", "ttgir", "llir", "ptx", "sass")
DEFAULT_OUT_DIR = Path("kernelkit-results/asm")
TOOL_TIMEOUT_S = 300
_SUFFIX = {"ttir": "ttir", "ttgir": "ttgir", "llir": "ll", "ptx": "ptx", "sass": "sass"}

# ---- the report ---------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Resources:
    """Per-thread registers, bytes of stack frame, shared (static, per block), local memory, and spills."""

    registers: int | None = None
    stack: int | None = None
    shared: int | None = None
    local: int | None = None
    spill_stores: int | None = None
    spill_loads: int | None = None


@dataclass(frozen=True)
class SassMemory:
    """Memory instructions in one kernel's SASS: global loads and stores by width (bits -> count), local ones."""

    global_loads: dict[int, int]
    global_stores: dict[int, int]
    local_loads: int = 0  # LDL: a spill reloaded, or a local array read
    local_stores: int = 0  # STL
    uncounted: int = 0  # global memory through TMA (UTMALDG, UBLKCP, ...) or generic LD/ST: no width to report

    @staticmethod
    def describe(widths: dict[int, int]) -> str:
        """{128: 2, 32: 1} -> '128-bit x2, 32-bit x1'; {} -> 'none'."""
        return ", ".join(f"{bits}-bit x{n}" for bits, n in sorted(widths.items(), reverse=True)) or "none"


@dataclass(frozen=True)
class KernelAsm:
    """One kernel for one target: its listings by IR, resource use, and the memory instructions of its SASS."""

    name: str
    compiler: str
    arch: str
    listings: dict[str, str]  # ir -> text, for the IRs this kernel has
    resources: Resources
    memory: SassMemory | None  # None without a disassembler
    details: tuple[str, ...] = ()
    cubin: bytes = field(default=b"", repr=False)


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


# ---- reading SASS, cuobjdump -res-usage and ptxas -v (pure) -------------------------------------------------

# "/*0570*/   @!P0 LDG.E.128.CONSTANT R4, desc[UR8][R8.64] ;" -> LDG.E.128.CONSTANT (nvdisasm and cuobjdump alike)
_INSTRUCTION = re.compile(r"^\s*/\*[0-9a-f]+\*/\s+(?:@!?U?P(?:T|\d+)\s+)?([A-Z][A-Z0-9_]*(?:\.[A-Z0-9_]+)*)", re.M)
_FUNCTION = re.compile(r"^(?://-+ \.text\.(\S+) +-+|\s*Function : (\S+))\s*$", re.M)
_SECTION = re.compile(r"^//-+ \S", re.M)


def memory_ops(sass: str) -> SassMemory:
    """Count LDG/LDGSTS (global loads) and STG (global stores) by width, LDL and STL, in a SASS listing."""
    loads: dict[int, int] = {}
    stores: dict[int, int] = {}
    counts = {"LDL": 0, "STL": 0, "other": 0}
    for opcode in _INSTRUCTION.findall(sass):
        base, *modifiers = opcode.split(".")
        if base in ("LDG", "LDGSTS", "STG"):
            table = stores if base == "STG" else loads
            table[_width(modifiers)] = table.get(_width(modifiers), 0) + 1
        elif base in ("LDL", "STL"):
            counts[base] += 1
        elif base in ("LD", "ST") or base.startswith(("UTMA", "UBLKCP")):
            counts["other"] += 1
    return SassMemory(loads, stores, counts["LDL"], counts["STL"], counts["other"])


def _width(modifiers: Sequence[str]) -> int:
    for m in modifiers:
        if m in ("64", "128", "256"):
            return int(m)
        if m in ("U8", "S8", "U16", "S16"):
            return int(m[1:])
    return 32


def split_sass(listing: str) -> dict[str, str]:
    """nvdisasm or cuobjdump -sass output of a cubin -> each function's own listing, by (mangled) name."""
    heads = list(_FUNCTION.finditer(listing))
    found = {}
    for head, after in zip(heads, [*heads[1:], None]):  # noqa: B905 - after is one behind
        end = after.start() if after is not None else len(listing)
        section_end = _SECTION.search(listing, head.end(), end)  # nvdisasm's next section (symbols, ...)
        found[head[1] or head[2]] = listing[head.start():section_end.start() if section_end else end].strip("\n")
    return found


def parse_res_usage(text: str) -> dict[str, Resources]:
    """``cuobjdump -res-usage``: ' Function NAME:' then 'REG:32 STACK:0 SHARED:0 LOCAL:0 ...' per kernel."""
    found = {}
    for name, values in re.findall(r"^\s*Function ([^\s:]+):\s*\n([^\n]*)", text, re.M):
        v = {key: int(n) for key, n in re.findall(r"(\w+):(\d+)", values)}
        found[name] = Resources(v.get("REG"), v.get("STACK"), v.get("SHARED"), v.get("LOCAL"))
    return found


def parse_ptxas_log(text: str) -> dict[str, Resources]:
    """``ptxas -v`` (as nvcc, NVRTC or Triton run it): registers, stack frame and spill bytes per function."""
    found: dict[str, Resources] = {}
    name = None
    for line in text.splitlines():
        if m := re.search(r"(?:Compiling entry function|Function properties for) '?([^'\s]+)'?", line):
            name = m[1]
            found.setdefault(name, Resources())
        elif name is not None and (m := re.search(r"(\d+) bytes stack frame, (\d+) bytes spill stores, "
                                                  r"(\d+) bytes spill loads", line)):
            found[name] = replace(found[name], stack=int(m[1]), spill_stores=int(m[2]), spill_loads=int(m[3]))
        elif name is not None and (m := re.search(r"Used (\d+) registers", line)):
            found[name] = replace(found[name], registers=int(m[1]))
    return found


# ---- tools: nvdisasm, cuobjdump, c++filt ---------------------------------------------------------------------


@dataclass(frozen=True)
class Disassembly:
    """A cubin's SASS and ``cuobjdump -res-usage`` per function (mangled name); ``missing``: tools not found."""

    sass: dict[str, str]
    usage: dict[str, Resources]
    missing: tuple[str, ...] = ()


def find_tool(name: str) -> str | None:
    """nvdisasm, cuobjdump, ptxas: ``$TRITON_<NAME>_PATH``, triton's wheel, PATH, then /usr/local/cuda/bin."""
    spec = importlib.util.find_spec("triton")  # locates the wheel without importing triton
    wheel = Path(spec.origin).parent / "backends" / "nvidia" / "bin" / name if spec and spec.origin else None
    for candidate in (os.environ.get(f"TRITON_{name.upper()}_PATH"), wheel, shutil.which(name),
                      Path("/usr/local/cuda/bin", name)):
        if candidate and Path(candidate).is_file() and os.access(candidate, os.X_OK):
            return str(candidate)
    return None


def disassemble(cubin: bytes) -> Disassembly:
    """SASS by ``nvdisasm -c -g`` (source lines as comments; ``cuobjdump -sass`` without it) and resource usage."""
    nvdisasm, cuobjdump = find_tool("nvdisasm"), find_tool("cuobjdump")
    with tempfile.TemporaryDirectory(prefix="kernelkit-asm-") as tmp:
        path = Path(tmp, "kernel.cubin")
        path.write_bytes(cubin)
        sass_tool = [nvdisasm, "-c", "-g"] if nvdisasm else [cuobjdump, "-sass"] if cuobjdump else None
        sass = split_sass(_run([*sass_tool, str(path)])) if sass_tool else {}
        usage = parse_res_usage(_run([cuobjdump, "-res-usage", str(path)])) if cuobjdump else {}
    missing = tuple(name for name, found in (("nvdisasm", nvdisasm), ("cuobjdump", cuobjdump)) if not found)
    return Disassembly(sass, usage, missing)


def _run(command: list[Any], cwd: str | None = None) -> str:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                          cwd=cwd, check=False)
    if done.returncode:
        raise CompileError(f"{Path(command[0]).name} failed (exit {done.returncode})",
                           (done.stderr + done.stdout).strip()[-4000:])
    return done.stdout + done.stderr


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


def _kernel(symbol: str, dis: Disassembly, *, name: str, compiler: str, arch: str, listings: dict[str, str],
            ptxas_log: str, details: Sequence[str], cubin: bytes, extra_shared: int = 0) -> KernelAsm:
    """Put together one kernel's report from its cubin's disassembly and the ptxas -v report of its build."""
    usage, ptxas = dis.usage.get(symbol, Resources()), parse_ptxas_log(ptxas_log).get(symbol, Resources())
    sass = dis.sass.get(symbol)
    memory = memory_ops(sass) if sass is not None else None
    shared = None if usage.shared is None and not extra_shared else (usage.shared or 0) + extra_shared
    resources = Resources(usage.registers if usage.registers is not None else ptxas.registers,
                          usage.stack if usage.stack is not None else ptxas.stack, shared, usage.local,
                          ptxas.spill_stores, ptxas.spill_loads)
    notes = list(details)
    target = re.search(r"^\s*\.target\s+(\w+)", listings.get("ptx", ""), re.M)
    if target and target[1] != arch:
        notes.append(f"built for {target[1]} (the PTX's .target)")
    if memory is not None and (memory.local_loads or memory.local_stores):
        notes.append(f"local memory instructions: LDL x{memory.local_loads}, STL x{memory.local_stores}")
    if memory is not None and memory.uncounted:
        notes.append(f"{memory.uncounted} global memory instructions not in the widths: TMA or generic LD/ST")
    if dis.missing:
        notes.append(f"not found: {', '.join(dis.missing)} (triton's wheel ships both, so does the CUDA toolkit)")
    if resources.spill_stores is None:
        notes.append("spill bytes unknown: no ptxas -v report for this build")
    listings = {**listings, **({"sass": sass} if sass is not None else {})}
    return KernelAsm(name, compiler, arch, listings, resources, memory, tuple(notes), cubin)


# ---- CUDA C++: NVRTC kernels and load_inline extensions -------------------------------------------------------


def _cuda_kernels(setup: CaseSetup, arch: str) -> tuple[list[KernelAsm], list[str]]:
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
    details = [f"{file}:{line}, options {' '.join(_options(kernel))}"]
    try:
        ptx, log = _nvrtc_ptx(kernel, arch)
        listings = {"ptx": ptx_entry(ptx, kernel.name)}
    except (ImportError, OSError, RuntimeError) as exc:  # no cuda-bindings, or no libnvrtc
        listings, log = {}, ""
        details.append(f"no PTX: NVRTC is unavailable ({exc})")
    return _kernel(kernel.name, disassemble(built.cubin), name=kernel.name, compiler=built.compiler, arch=arch,
                   listings=listings, ptxas_log=log, details=details, cubin=built.cubin)


def _nvrtc_ptx(kernel: CudaKernel, arch: str) -> tuple[str, str]:
    """(PTX, ptxas -v report) from NVRTC, for the text and options CudaKernel.compile builds with.

    Through cuda.bindings.nvrtc: cuda.core's Program.compile("ptx") asks the driver whether it can load the PTX, and
    fails where there is no driver.
    """
    from cuda.bindings import nvrtc

    from kernelkit.backends.cuda.build import _c_escape, _toolkit_include
    from kernelkit.cache import cache_dir

    file, line = kernel.origin
    text = f'#line {line} "{_c_escape(file)}"\n{kernel.source}'
    _, major, minor = nvrtc.nvrtcVersion()
    include = _toolkit_include()  # NVRTC carries its own CUDA headers from 13.3 (as build.py decides)
    headers = [f"--use-bundled-headers={cache_dir('nvrtc-headers')}"] if (major, minor) >= (13, 3) else (
        [f"--include-path={include}"] if include else [])
    flags = [f"--gpu-architecture={arch}", "--ptxas-options=-v", *headers, *_options(kernel)]
    _, program = nvrtc.nvrtcCreateProgram(text.encode(), file.encode(), 0, [], [])
    try:
        (result,) = nvrtc.nvrtcCompileProgram(program, len(flags), [f.encode() for f in flags])
        log = _nvrtc_text(nvrtc.nvrtcGetProgramLogSize, nvrtc.nvrtcGetProgramLog, program)
        if result != nvrtc.nvrtcResult.NVRTC_SUCCESS:
            raise CompileError(f"CUDA kernel {kernel.name!r} failed to compile to PTX for {arch} with NVRTC", log)
        return _nvrtc_text(nvrtc.nvrtcGetPTXSize, nvrtc.nvrtcGetPTX, program), log
    finally:
        nvrtc.nvrtcDestroyProgram(program)


def _options(kernel: CudaKernel) -> list[str]:
    """The options CudaKernel.compile passes: its defaults, less those the kernel's own options override."""
    from kernelkit.backends.cuda.build import _overridden

    return [*(o for o in DEFAULT_OPTIONS if not _overridden(o, kernel.options)), *kernel.options]


def _nvrtc_text(size_of: Any, get: Any, program: Any) -> str:
    _, size = size_of(program)
    buffer = b" " * size
    get(program, buffer)
    return buffer.rstrip(b"\0 ").decode("utf-8", "replace")


def _inline_kernels(ext: InlineExtension, arch: str) -> list[KernelAsm]:
    """``nvcc -cubin`` of the extension's CUDA sources, with the flags, headers and defines of its compile-only
    check (mirrors inline._check), keeping the PTX (-keep) and ptxas's report (-Xptxas -v). Slow: 15 s and more."""
    from torch.utils import cpp_extension

    from kernelkit.backends.cuda import inline

    plan = ext._plan(arch)
    if not plan.cuda:
        raise SpecError(f"load_inline {ext.name!r} has no cuda_sources: no GPU code to show")
    defines = ["-DTORCH_API_INCLUDE_EXTENSION_H", f"-DTORCH_EXTENSION_NAME={plan.module}"]
    headers = cpp_extension.include_paths()
    if not any(Path(d, "c10/cuda/impl/cuda_cmake_macros.h").is_file() for d in headers):
        defines.append("-DC10_CUDA_NO_CMAKE_CONFIGURE_FILE")  # a CPU build of torch lacks it, as inline.py says
    includes = [f"-I{d}" for d in [*headers, sysconfig.get_paths()["include"], *plan.includes]]
    flags = [*inline._std(plan.std, plan.cuda_cflags), *getattr(cpp_extension, "COMMON_NVCC_FLAGS", ())]
    with tempfile.TemporaryDirectory(prefix="kernelkit-asm-") as tmp:
        Path(tmp, "cuda.cu").write_text("\n".join([inline._CUDA_PRELUDE, *plan.cuda]), encoding="utf-8")
        log = _run([inline._nvcc(False), "-cubin", f"-arch={arch}", "-lineinfo", "-Xptxas=-v", "-keep",
                    f"-keep-dir={tmp}", *flags, *defines, *includes, *plan.cuda_cflags, "-o", "cuda.cubin",
                    "cuda.cu"], cwd=tmp)
        cubin = Path(tmp, "cuda.cubin").read_bytes()
        ptx = Path(tmp, "cuda.ptx").read_text(encoding="utf-8") if Path(tmp, "cuda.ptx").is_file() else None
    dis = disassemble(cubin)
    symbols = list(dis.usage or dis.sass)
    readable = _demangle(symbols)
    return [_kernel(s, dis, name=readable[s].split("(")[0], compiler="nvcc, load_inline", arch=arch,
                    listings={"ptx": ptx_entry(ptx, s)} if ptx else {}, ptxas_log=log,
                    details=[f"{ext.name}: {readable[s]}"], cubin=cubin) for s in symbols]


# ---- the API and the command ---------------------------------------------------------------------------------


def inspect(target: str, impl: str, *, ir: str = "sass", arch: str | None = None, size: Size | str | None = None,
            dtype: torch.dtype | str | None = None, config: int | None = None, op_name: str | None = None
            ) -> AsmReport:
    """Compile the kernels ``impl`` of ``target`` (a built-in op name or a .py file) launches, for ``arch``.

    No GPU is needed. size: default the op's first GPU size (the code may depend on it: block sizes, i32 or i64
    offsets); dtype: default the op's first that the impl takes; config: an autotuned Triton kernel's config, by
    index in ``configs=`` (default 0). ir: the listing ``AsmReport.listing()`` gives (ttir/ttgir/llir: Triton only).
    SpecError/LoadError for a bad case, BackendUnavailable for impls asm cannot show (Numba, eager), CompileError
    when a kernel does not build.
    """
    if ir not in IRS:
        raise SpecError(f"unknown IR {ir!r}; use one of {', '.join(IRS)}")
    arch = arch or default_arch()
    if not re.fullmatch(r"sm_\d{2,3}[a-z]?", arch):
        raise SpecError(f"bad arch {arch!r}: write sm_XY, e.g. sm_90 (H100) or sm_80 (A100)")
    setup = _setup(target, impl, op_name, size, dtype)
    backend = setup.impl.backend
    if backend == "numba":
        raise BackendUnavailable(f"kernelkit asm does not support Numba impls yet ({impl!r}): Numba builds PTX "
                                 "for a GPU it can see, and its CPU simulator has none; on a GPU, use the kernel's "
                                 "inspect_asm()")
    if backend not in ("triton", "cuda"):
        raise BackendUnavailable(f"impl {impl!r} runs PyTorch's own kernels (backend {backend}): asm shows the "
                                 "Triton and CUDA C++ kernels an impl launches; for torch.compile's code see "
                                 "kernelkit codegen")
    if backend == "cuda" and ir in ("ttir", "ttgir", "llir"):
        raise SpecError(f"{ir} is a Triton IR; CUDA C++ kernels have ptx and sass")
    kernels, notes = _triton_kernels(setup, target, arch, config) if backend == "triton" else \
        _cuda_kernels(setup, arch)
    if config is not None and not any("autotune config" in d for k in kernels for d in k.details):
        notes.append("--config ignored: the impl launches no autotuned Triton kernel")
    return AsmReport(setup.label, arch, ir, tuple(kernels), tuple(notes))


def _setup(target: str, impl: str, op_name: str | None, size: Size | str | None,
           dtype: torch.dtype | str | None) -> CaseSetup:
    device = runner.resolve_device(None)
    backends.prepare_process(device)  # before the target's file imports triton or numba
    op = loader.find_op(target, op_name)
    case_size = parse_size(size) if isinstance(size, str) else tuple(size) if size is not None else op.sizes[0]
    case_dtype = parse_dtype(dtype) if isinstance(dtype, str) else dtype
    takes = op.impls[impl].dtypes if impl in op.impls else ()
    if case_dtype is None:
        case_dtype = takes[0] if takes and op.dtypes[0] not in takes else op.dtypes[0]
    elif takes and case_dtype not in takes:
        raise SpecError(f"impl {impl!r} supports {', '.join(map(dtype_name, takes))} only")
    return prepare_case(target, impl, op_name=op.name, size=case_size, dtype=case_dtype, device=device, build=False)


def _triton_kernels(setup: CaseSetup, target: str, arch: str, config: int | None) -> tuple[list[KernelAsm], list[str]]:
    from kernelkit.ops import BUILTIN_OPS
    from kernelkit.profiling.asm_triton import compile_triton

    source = target if target in BUILTIN_OPS else str(Path(target).expanduser().resolve())
    builds = compile_triton(source, setup.impl.name, op_name=setup.op.name, size=setup.size,
                            dtype=dtype_name(setup.dtype), arch=arch, config=config)
    return [_kernel(b.name, disassemble(b.cubin), name=b.name, compiler=b.compiler, arch=arch, listings=b.irs,
                    ptxas_log=b.ptxas_log, details=b.details, cubin=b.cubin, extra_shared=b.shared)
            for b in builds], []


def print_summary(report: AsmReport, console: Any) -> None:
    """The summary table (one row per kernel), then each kernel's details and the report's notes."""
    from rich.table import Table

    table = Table(title=f"{report.case} compiled for {report.arch}", title_justify="left")
    for column in ("kernel", "registers", "spilled B (st/ld)", "shared B", "stack/local B", "global loads",
                   "global stores"):
        table.add_column(column)
    for k in report.kernels:
        r, m = k.resources, k.memory
        widths = [SassMemory.describe(w) for w in (m.global_loads, m.global_stores)] if m else ["?", "?"]
        table.add_row(k.name, _number(r.registers), f"{_number(r.spill_stores)}/{_number(r.spill_loads)}",
                      _number(r.shared), f"{_number(r.stack)}/{_number(r.local)}", *widths)
    console.print(table)
    for k in report.kernels:
        console.print("\n  ".join([f"{k.name} ({k.compiler}):", *k.details]), highlight=False, markup=False)
    for note in report.notes:
        console.print(f"note: {note}", highlight=False, markup=False)


def _number(value: int | None) -> str:
    return "?" if value is None else str(value)
