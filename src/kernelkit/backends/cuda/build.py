"""Building cubins: NVRTC (cuda.core) or nvcc, the target arch, toolkit headers, local-include hashing, the on-disk
cubin cache, and where a kernel's source text sits in its file (for compiler errors)."""

from __future__ import annotations

import importlib
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import cache, partial
from pathlib import Path
from typing import Any

import torch

from kernelkit.backends.cuda.signature import COMMENT
from kernelkit.cache import cache_dir, write_atomic
from kernelkit.errors import BackendUnavailable, CompileError

NVCC_TIMEOUT_S = 300
DEFAULT_OPTIONS = ("-std=c++17", "-lineinfo")  # line info lets profilers map SASS back to the user's lines
_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)
_ANY_INCLUDE = re.compile(r'^\s*#\s*include\s*(?:"([^"]+)"|<([^>]+)>)', re.M)


def default_arch() -> str:
    """``sm_XY`` of torch's current CUDA device; without a GPU, ``$KERNELKIT_CUDA_ARCH`` or sm_90 (H100)."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    return os.environ.get("KERNELKIT_CUDA_ARCH", "sm_90")


@dataclass(frozen=True)
class Compiler:
    name: str
    version: str
    build: Callable[[str, str, str, Sequence[str], str], bytes]  # (text, file, arch, options, kernel)


def cuda_core() -> Any:
    """The cuda.core namespace: ``cuda.core`` since 0.4, ``cuda.core.experimental`` before."""
    try:
        core = importlib.import_module("cuda.core")
        if hasattr(core, "Program"):
            return core
    except ImportError:
        pass
    return importlib.import_module("cuda.core.experimental")


def find_compiler() -> Compiler:
    try:
        cuda_core()
        _, major, minor = importlib.import_module("cuda.bindings.nvrtc").nvrtcVersion()  # loads libnvrtc
        bundled = (major, minor) >= (13, 3)  # NVRTC carries its own CUDA headers from 13.3
        return Compiler("nvrtc", f"nvrtc {major}.{minor}", partial(_nvrtc_build, bundled_headers=bundled))
    except (ImportError, OSError, RuntimeError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    nvcc = shutil.which("nvcc")
    if nvcc is not None:
        return Compiler("nvcc", nvcc_version(nvcc), _nvcc_build)
    raise BackendUnavailable(f"cannot compile CUDA C++: NVRTC is unavailable ({problem}) and nvcc is not on "
                             "PATH; pip install 'kernelkit[cuda]'")


def _nvrtc_build(text: str, file: str, arch: str, options: Sequence[str], kernel: str, *,
                 bundled_headers: bool) -> bytes:
    core = cuda_core()
    raw = [o.encode() for o in options]

    class RawOptions(core.ProgramOptions):  # type: ignore[misc, name-defined]
        # ProgramOptions has a field per NVRTC flag; the user's flags are strings, passed on as given.
        def as_bytes(self, *args: Any, **kwargs: Any) -> list[bytes]:
            return [*super().as_bytes(*args, **kwargs), *raw]

        def _as_bytes(self) -> list[bytes]:  # the name in older cuda.core
            return [*super()._as_bytes(), *raw]

    headers: dict[str, Any] = {}  # NVRTC finds no headers alone: cuda_fp16.h & co. are bundled or a toolkit's
    if bundled_headers:
        # NVRTC unpacks its bundled headers into the folder named by the flag. cuda.core 1.2's boolean field
        # passes "true", which unpacks them into ./true of the working directory; name our cache instead.
        raw.append(f"--use-bundled-headers={cache_dir('nvrtc-headers')}".encode())
    elif toolkit_include() is not None:
        headers = {"include_path": [str(toolkit_include())]}
    program = core.Program(text, "c++", RawOptions(name=file, arch=arch, **headers))
    try:
        return bytes(program.compile("cubin").code)
    except Exception as exc:  # cuda.core's NVRTCError has no public import path
        if "NVRTC" not in type(exc).__name__:
            raise
        log = str(exc).split("compilation log:", 1)[-1].strip().rstrip("\x00").strip()
        raise CompileError(f"CUDA kernel {kernel!r} failed to compile for {arch} with NVRTC", log) from None


def _nvcc_build(text: str, file: str, arch: str, options: Sequence[str], kernel: str) -> bytes:
    with tempfile.TemporaryDirectory(prefix="kernelkit-nvcc-") as tmp:
        source, cubin = Path(tmp, "kernel.cu"), Path(tmp, "kernel.cubin")
        source.write_text(text, encoding="utf-8")
        include = f"-I{Path(file).parent}"  # "quoted" includes sit beside the user's file, not the temp one
        cmd = ["nvcc", "-cubin", f"-arch={arch}", include, *options, "-o", str(cubin), str(source)]
        try:
            done = subprocess.run(cmd, capture_output=True, text=True, timeout=NVCC_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise CompileError(f"CUDA kernel {kernel!r}: nvcc ran over {NVCC_TIMEOUT_S} s") from None
        if done.returncode != 0:
            log = (done.stderr + done.stdout).strip()
            raise CompileError(f"CUDA kernel {kernel!r} failed to compile for {arch} with nvcc", log)
        return cubin.read_bytes()


@cache
def nvcc_version(nvcc: str) -> str:
    done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=False)
    lines = done.stdout.strip().splitlines()
    return f"nvcc {lines[-1] if lines else 'unknown'}"


def toolkit_include() -> Path | None:
    nvcc = shutil.which("nvcc")
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
             Path(nvcc).resolve().parent.parent if nvcc else None]
    found = (Path(r, "include") for r in roots if r and Path(r, "include", "cuda_fp16.h").is_file())
    return next(found, None)


def overridden(default: str, user: Sequence[str]) -> bool:
    flag = default.split("=")[0].lstrip("-")
    return any(o.split("=")[0].lstrip("-") == flag for o in user)


def local_includes(source: str, directory: Path, seen: set[Path], search: Sequence[Path] = ()) -> list[bytes]:
    """Contents of the files ``source`` includes, recursively, found as the preprocessor finds them: "quoted"
    beside the including file, then in ``search`` (the -I folders of the options); <angled> in ``search`` only
    (system and toolkit headers are keyed by the compiler's version). Editing any of them must miss the cache."""
    found: list[bytes] = []
    for quoted, angled in _ANY_INCLUDE.findall(COMMENT.sub(" ", source)):
        folders = [directory, *search] if quoted else list(search)
        path = next((p for p in ((f / (quoted or angled)).resolve() for f in folders) if p.is_file()), None)
        if path is not None and path not in seen:
            seen.add(path)
            data = path.read_bytes()
            found += [data, *local_includes(data.decode("utf-8", "replace"), path.parent, seen, search)]
    return found


def include_dirs(options: Sequence[str], relative_to: Path) -> list[Path]:
    """The folders named by -I / --include-path options (as ``-Idir``, ``-I dir`` or ``--include-path=dir``)."""
    found: list[Path] = []
    items = list(options)
    for i, option in enumerate(items):
        value = None
        if option in ("-I", "--include-path") and i + 1 < len(items):
            value = items[i + 1]
        elif option.startswith("--include-path="):
            value = option.split("=", 1)[1]
        elif option.startswith("-I") and len(option) > 2:
            value = option[2:]
        if value:
            path = Path(value).expanduser()
            found.append(path if path.is_absolute() else relative_to / path)
    return found


def read_cubin(key: str) -> bytes | None:
    try:
        data = (cache_dir("cuda") / f"{key}.cubin").read_bytes()
    except OSError:
        return None
    return data if _is_whole_elf(data) else None  # a corrupt or truncated file is rebuilt


def write_cubin(key: str, cubin: bytes) -> None:
    try:
        write_atomic(cache_dir("cuda") / f"{key}.cubin", cubin)
    except OSError:  # a read-only or full cache costs a recompile next time, nothing more
        pass


def _is_whole_elf(data: bytes) -> bool:
    """A 64-bit ELF whose section header table (written last in a cubin) lies inside ``data``."""
    if len(data) < 64 or data[:4] != b"\x7fELF" or data[4] != 2:
        return False
    table, entry, count = (int.from_bytes(data[a:b], "little") for a, b in ((40, 48), (58, 60), (60, 62)))
    return table + entry * count <= len(data)


# ---- where the user's source text sits in its file, for compiler errors ---------------------------------


def locate_source(source: str, file_lines: Sequence[str], call_line: int) -> int:
    """Line of the file where ``source``'s first line sits: each non-blank line of the text must appear, in
    order, on consecutive lines (indented, or sharing a line with its quotes). The match nearest the call
    wins; when there is none (escapes, f-strings, generated text), the call's own line."""
    wanted = [(i, text.strip()) for i, text in enumerate(source.split("\n")) if text.strip()]
    if not wanted:
        return call_line
    n = len(file_lines)
    starts = [s for s in range(-wanted[0][0], n)
              if all(0 <= s + i < n and text in file_lines[s + i] for i, text in wanted)]
    return min(starts, key=lambda s: abs(s + 1 - call_line)) + 1 if starts else call_line


def c_escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace('"', '\\"')


def line_directive(text: str, file: str, line: int) -> str:
    """``text`` behind a ``#line`` naming where it sits, so compiler errors point at the user's file and line."""
    return f'#line {line} "{c_escape(file)}"\n{text}'


def caller_location(skip: str) -> tuple[str, int]:
    """(file, line) of the nearest calling frame outside module ``skip`` (the module whose functions call this)."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__") in (skip, __name__):
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno
