"""What a cubin holds, read without a GPU: its SASS (nvdisasm, cuobjdump), each kernel's resources and the width of
its global loads and stores; the pieces ``kernelkit asm`` puts together for every backend that can show its kernels.

Per kernel: registers per thread, bytes spilled, shared and local memory, and the width of each global load and
store in the SASS (``LDG.E.128`` moves 16 bytes per thread, plain ``LDG.E`` 4). Disassembly by nvdisasm and
cuobjdump (triton's wheel ships both).
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

from kernelkit.errors import CompileError

TOOL_TIMEOUT_S = 300

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
        sass = split_sass(run_tool([*sass_tool, str(path)])) if sass_tool else {}
        usage = parse_res_usage(run_tool([cuobjdump, "-res-usage", str(path)])) if cuobjdump else {}
    missing = tuple(name for name, found in (("nvdisasm", nvdisasm), ("cuobjdump", cuobjdump)) if not found)
    return Disassembly(sass, usage, missing)


def run_tool(command: list[Any], cwd: str | None = None) -> str:
    done = subprocess.run([str(c) for c in command], capture_output=True, text=True, timeout=TOOL_TIMEOUT_S,
                          cwd=cwd, check=False)
    if done.returncode:
        raise CompileError(f"{Path(command[0]).name} failed (exit {done.returncode})",
                           (done.stderr + done.stdout).strip()[-4000:])
    return done.stdout + done.stderr


def kernel_asm(symbol: str, dis: Disassembly, *, name: str, compiler: str, arch: str, listings: dict[str, str],
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
