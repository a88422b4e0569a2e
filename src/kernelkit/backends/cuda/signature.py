"""Kernel signatures: C type tables, parsing ``extern "C" __global__`` parameter lists, argument converters."""

from __future__ import annotations

import operator
import re
from collections.abc import Callable, Container
from dataclasses import dataclass
from typing import Any

import numpy as np
import torch

from kernelkit.errors import CompileError, LaunchError

# C type spellings -> (numpy scalar to pass one by value, torch dtype a pointer to one must point at).
# bfloat16 has no numpy type: a scalar is passed as its 16 raw bits.
_TYPE_ROWS: tuple[tuple[str, Any, torch.dtype], ...] = (
    ("float", np.float32, torch.float32),
    ("double", np.float64, torch.float64),
    ("half|__half", np.float16, torch.float16),
    ("__nv_bfloat16|nv_bfloat16", np.uint16, torch.bfloat16),
    ("int|signed|signed int|int32_t", np.int32, torch.int32),
    ("unsigned|unsigned int|uint32_t", np.uint32, torch.uint32),
    ("long|long int|long long|long long int|int64_t|ptrdiff_t|intptr_t|ssize_t", np.int64, torch.int64),
    ("unsigned long|unsigned long int|unsigned long long|unsigned long long int|uint64_t|size_t|uintptr_t",
     np.uint64, torch.uint64),
    ("short|short int|int16_t", np.int16, torch.int16),
    ("unsigned short|unsigned short int|uint16_t", np.uint16, torch.uint16),
    ("char|signed char|int8_t", np.int8, torch.int8),
    ("unsigned char|uint8_t", np.uint8, torch.uint8),
    ("bool", np.bool_, torch.bool),
)
_TYPES = {name: (np_type, dtype) for names, np_type, dtype in _TYPE_ROWS for name in names.split("|")}
# Vector types come by pointer only: a float4* must point at float32 data aligned to 16 bytes.
_VECTORS = {"float2": (torch.float32, 8), "float4": (torch.float32, 16), "double2": (torch.float64, 16),
            "int2": (torch.int32, 8), "int4": (torch.int32, 16), "half2": (torch.float16, 4),
            "__half2": (torch.float16, 4), "__nv_bfloat162": (torch.bfloat16, 4)}
_TYPE_WORDS = {w for name in (*_TYPES, *_VECTORS) for w in name.split()} | {"void"}
_QUALIFIERS = {"const", "volatile", "__restrict__", "__restrict", "restrict", "struct", "__grid_constant__"}

COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_EXTERN_C = re.compile(r'extern\s+"C"')
_EXTERN_C_BLOCK = re.compile(r'extern\s+"C"\s*\{')
_GLOBAL = re.compile(r"\b__global__\b")

Converter = Callable[[Any, int], Any]  # (argument, device index; -1 for the CPU) -> value to launch with
_EVERY_DTYPE = frozenset(v for v in vars(torch).values() if isinstance(v, torch.dtype))


@dataclass(frozen=True)
class Param:
    """One kernel parameter: ``const float* __restrict__ x_ptr`` -> Param("x_ptr", "float", 1)."""

    name: str
    ctype: str  # the base type, qualifiers dropped
    pointer_depth: int = 0

    def __str__(self) -> str:
        return f"{self.ctype}{'*' * self.pointer_depth} {self.name}"


# ---- source parsing ---------------------------------------------------------------------------------------


def kernel_params(source: str, name: str) -> tuple[Param, ...]:
    """Parameters of ``extern "C" __global__ void name(...)`` in ``source``; CompileError if it is absent."""
    found = _global_functions(source)
    if name in found and found[name][0]:
        return tuple(_parse_param(text, i) for i, text in enumerate(_split_params(found[name][1])))
    kernels = [n for n, (extern_c, _) in found.items() if extern_c]
    defined = f"it defines: {', '.join(kernels)}" if kernels else 'it defines no extern "C" __global__ kernel'
    hint = ""
    if re.search(rf"\b{re.escape(name)}\b", COMMENT.sub(" ", source)):
        hint = f'; {name!r} appears, but not as an extern "C" __global__ function: did you forget extern "C"?'
    raise CompileError(f'kernel {name!r} is no extern "C" __global__ function ({defined}){hint}')


def extern_c_kernels(source: str) -> list[str]:
    """Names of the ``extern "C" __global__`` functions in ``source``, in order."""
    return [n for n, (extern_c, _) in _global_functions(source).items() if extern_c]


def _global_functions(source: str) -> dict[str, tuple[bool, str]]:
    """name -> (declared extern "C", parameter list text) for each ``__global__`` function in ``source``."""
    blank = lambda m: " " * len(m.group())  # keeps offsets, so the positions found below stay valid
    code = _LAUNCH_BOUNDS.sub(blank, COMMENT.sub(blank, source))
    blocks = [(m.end(), _matching(code, m.end() - 1)) for m in _EXTERN_C_BLOCK.finditer(code)]
    found: dict[str, tuple[bool, str]] = {}
    for match in _GLOBAL.finditer(code):
        paren = code.find("(", match.end())
        name = re.search(r"(\w+)\s*$", code[match.end():paren]) if paren > 0 else None
        if name is None:
            continue
        start = max(code.rfind(c, 0, match.start()) for c in ";{}") + 1  # where this declaration begins
        extern_c = bool(_EXTERN_C.search(code, start, paren)) or any(a <= start < b for a, b in blocks)
        if not found.get(name.group(1), (False, ""))[0]:
            found[name.group(1)] = (extern_c, code[paren + 1:_matching(code, paren)])
    return found


def _matching(code: str, open_at: int) -> int:
    """Index of the bracket closing the one at ``open_at`` (the end of ``code`` if none does)."""
    opener, closer, depth = code[open_at], {"(": ")", "{": "}"}[code[open_at]], 0
    for i in range(open_at, len(code)):
        depth += (code[i] == opener) - (code[i] == closer)
        if depth == 0:
            return i
    return len(code)


def _split_params(text: str) -> list[str]:
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(text):
        depth += (ch in "(<[") - (ch in ")>]")
        if ch == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [p for p in (s.strip() for s in parts) if p and p != "void"]


def _parse_param(text: str, index: int) -> Param:
    text = re.sub(r"\b\w+\s*::\s*", "", text.split("=")[0])  # std::int64_t -> int64_t; no default value
    depth = text.count("*") + text.count("[")  # float x[] is a pointer too
    words = [w for w in re.findall(r"[A-Za-z_]\w*", re.sub(r"\[[^\]]*\]", "", text)) if w not in _QUALIFIERS]
    name = words.pop() if len(words) > 1 and words[-1] not in _TYPE_WORDS else f"arg{index}"
    return Param(name, " ".join(words), depth)


# ---- argument checks -------------------------------------------------------------------------------------


def converter(kernel: str, param: Param) -> Converter:
    where = f"kernel {kernel!r}, argument {param.name!r} ({param})"
    if param.pointer_depth:
        return _tensor_converter(where, param)
    if param.ctype not in _TYPES:
        def unsupported(value: Any, index: int) -> Any:
            raise LaunchError(f"{where}: kernelkit cannot pass a {param.ctype!r} by value; pass a pointer")
        return unsupported
    np_type, dtype = _TYPES[param.ctype]
    return (_float_converter if dtype.is_floating_point else _int_converter)(where, np_type, dtype)


def _tensor_converter(where: str, param: Param) -> Converter:
    dtype, align = None, 1  # dtype None: any (void*, float**, structs)
    if param.pointer_depth == 1 and param.ctype in _TYPES:
        dtype = _TYPES[param.ctype][1]
    elif param.pointer_depth == 1 and param.ctype in _VECTORS:
        dtype, align = _VECTORS[param.ctype]
    accepted = _EVERY_DTYPE if dtype is None else {dtype, torch.uint8} if param.ctype == "char" else {dtype}

    def convert(value: Any, index: int) -> int:
        # One pass of cheap checks (device index -1 is the CPU); the slow path takes subclasses and errors.
        if type(value) is torch.Tensor and value.get_device() == index and value.dtype in accepted \
                and value.is_contiguous() and (address := value.data_ptr()) % align == 0:
            return address  # cuda.core passes a Python int as a pointer-sized integer
        return _checked_address(where, param, value, index, accepted, align)

    return convert


def _checked_address(where: str, param: Param, value: Any, index: int, accepted: Container[torch.dtype],
                     align: int) -> int:
    if not isinstance(value, torch.Tensor):
        raise LaunchError(f"{where}: needs a torch.Tensor, got {describe_arg(value)}")
    on = value.get_device()
    if on != index:
        here, there = (f"cuda:{i}" if i >= 0 else "cpu" for i in (on, index))
        fix = ".cuda()" if on < 0 else f".to({there!r})"
        raise LaunchError(f"{where}: tensor is on {here} but the kernel runs on {there}; move it with {fix}")
    if value.dtype not in accepted:
        wanted = " or ".join(sorted(map(str, accepted)))
        raise LaunchError(f"{where}: tensor has dtype {value.dtype}, the kernel expects {wanted}")
    if not value.is_contiguous():
        raise LaunchError(f"{where}: tensor is not contiguous (shape {tuple(value.shape)}, strides "
                          f"{value.stride()}) and the kernel indexes it densely: pass x.contiguous()")
    if value.data_ptr() % align:
        raise LaunchError(f"{where}: address {value.data_ptr():#x} is not {align}-byte aligned as a "
                          f"{param.ctype} must be (a slice of a larger tensor?)")
    return value.data_ptr()  # a subclass of Tensor (nn.Parameter) that passes every check


def _int_converter(where: str, np_type: Any, dtype: torch.dtype) -> Converter:
    info = np.iinfo(np.uint8 if dtype == torch.bool else np_type)
    lo, hi = (0, 1) if dtype == torch.bool else (int(info.min), int(info.max))
    fast_hi = min(hi, 2**63 - 1)

    def convert(value: Any, index: int) -> Any:
        # The driver copies sizeof(param) bytes from each argument, so on a little-endian host a Python int
        # (passed as 8 bytes) fills any integer parameter; 0.4 us faster than making a numpy scalar.
        if type(value) is int and lo <= value <= fast_hi:
            return value
        try:
            number = operator.index(value)
        except TypeError:
            raise LaunchError(f"{where}: needs an integer, got {describe_arg(value)}") from None
        if not lo <= number <= hi:
            raise LaunchError(f"{where}: {number} is out of range for this C type [{lo}, {hi}]")
        return np_type(number)

    return convert


def _float_converter(where: str, np_type: Any, dtype: torch.dtype) -> Converter:
    largest = float(torch.finfo(dtype).max)

    def convert(value: Any, index: int) -> Any:
        if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
            raise LaunchError(f"{where}: needs a real number, got {describe_arg(value)}")
        if abs(value) > largest and np.isfinite(value):
            raise LaunchError(f"{where}: {value} overflows {dtype} (largest {largest:g})")
        if dtype == torch.bfloat16:  # no numpy bfloat16: pass the 16 bits, rounded as torch rounds
            return np.uint16(torch.tensor(float(value), dtype=dtype).view(torch.uint16).item())
        return np_type(value)

    return convert


def describe_arg(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor({value.dtype}, {value.device}, shape {tuple(value.shape)})"
    return f"{type(value).__name__} {value!r}"[:80]
