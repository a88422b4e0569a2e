"""What a kernel compiles to: Triton's IRs, PTX and SASS for a GPU target, after a summary of what matters most.

    report = kernelkit.profiling.asm.inspect("square", "cuda_vec4")     # no GPU needed
    print(report.listing("sass"))

Per kernel: registers per thread, bytes spilled, shared and local memory, and the width of each global load and
store in the SASS (``LDG.E.128`` moves 16 bytes per thread, plain ``LDG.E`` 4). Triton impls are compiled as they
launch for the case (asm_triton.py); CUDA C++ kernels as a launch builds them (NVRTC), load_inline extensions with
``nvcc -cubin`` as their compile-only check does (asm_cuda.py). Disassembly by nvdisasm and cuobjdump (triton's wheel
ships both).
"""

from __future__ import annotations

import importlib.util
import os
import re
import shutil
import subprocess
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import torch

from kernelkit import backends, loader, runner
from kernelkit.backends.cuda import default_arch
from kernelkit.errors import BackendUnavailable, CompileError, SpecError
from kernelkit.spec import Size, dtype_name
from kernelkit.target import CaseSetup, pick, prepare_case

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


# ---- tools: nvdisasm, cuobjdump ------------------------------------------------------------------------------


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
    if backend == "triton":
        kernels, notes = _triton_kernels(setup, target, arch, config)
    else:
        from kernelkit.profiling.asm_cuda import cuda_kernels

        kernels, notes = cuda_kernels(setup, arch)
    if config is not None and not any("autotune config" in d for k in kernels for d in k.details):
        notes.append("--config ignored: the impl launches no autotuned Triton kernel")
    return AsmReport(setup.label, arch, ir, tuple(kernels), tuple(notes))


def _setup(target: str, impl: str, op_name: str | None, size: Size | str | None,
           dtype: torch.dtype | str | None) -> CaseSetup:
    device = runner.resolve_device(None)
    backends.prepare_process(device)  # before the target's file imports triton or numba
    op = loader.find_op(target, op_name)
    # The code generated depends on the size: default to the op's first GPU size, even with no GPU here.
    chosen, case_size, case_dtype = pick(op, impl, size if size is not None else op.sizes[0], dtype, device)
    if chosen.dtypes and case_dtype not in chosen.dtypes:
        raise SpecError(f"impl {impl!r} supports {', '.join(map(dtype_name, chosen.dtypes))} only")
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
