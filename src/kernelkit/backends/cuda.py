"""CUDA C++ kernels: ``extern "C" __global__`` functions compiled with NVRTC and launched on torch tensors.

    square = cuda_kernel("square.cu", "square_kernel")     # beside the caller's .py; nothing compiled yet
    square.launch(*grid_1d(x.numel()), x, out, x.numel())   # compiles once (cached on disk), checks, launches

Compiling needs no GPU (NVRTC through cuda.core, else nvcc); launching does. Arguments are checked against the
kernel's C signature at every launch: a wrong dtype or a CPU tensor would otherwise give a silently wrong
answer or an illegal memory access.
"""

from __future__ import annotations

import contextlib
import importlib
import linecache
import operator
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Container, Sequence
from dataclasses import dataclass, field, replace
from functools import cache, cached_property, partial
from pathlib import Path
from threading import get_ident
from typing import Any

import numpy as np
import torch

from kernelkit.cache import cache_dir, content_key, write_atomic
from kernelkit.errors import BackendUnavailable, CompileError, LaunchError, LoadError

DEFAULT_OPTIONS = ("-std=c++17", "-lineinfo")  # line info lets profilers map SASS back to the user's lines
NVCC_TIMEOUT_S = 300

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

_COMMENT = re.compile(r"//[^\n]*|/\*.*?\*/", re.S)
_LAUNCH_BOUNDS = re.compile(r"__launch_bounds__\s*\([^)]*\)")
_EXTERN_C = re.compile(r'extern\s+"C"')
_EXTERN_C_BLOCK = re.compile(r'extern\s+"C"\s*\{')
_GLOBAL = re.compile(r"\b__global__\b")
_LOCAL_INCLUDE = re.compile(r'^\s*#\s*include\s*"([^"]+)"', re.M)

Converter = Callable[[Any, int], Any]  # (argument, device index; -1 for the CPU) -> value to launch with

# What inductor calls to read torch's device and stream: 0.1 and 0.2 us, against 0.6 and 3.4 us for the public
# torch.cuda calls (H100 host). CPU builds of torch lack both; the public ones then raise "no CUDA".
_current_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
_raw_stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)
_EVERY_DTYPE = frozenset(v for v in vars(torch).values() if isinstance(v, torch.dtype))


@dataclass(frozen=True)
class Param:
    """One kernel parameter: ``const float* __restrict__ x_ptr`` -> Param("x_ptr", "float", 1)."""

    name: str
    ctype: str  # the base type, qualifiers dropped
    pointer_depth: int = 0

    def __str__(self) -> str:
        return f"{self.ctype}{'*' * self.pointer_depth} {self.name}"


@dataclass(frozen=True)
class CompiledKernel:
    """A kernel built for one architecture. ``seconds``: time to compile it, or to read it from the cache."""

    name: str
    arch: str
    compiler: str  # "nvrtc" or "nvcc"
    seconds: float
    cached: bool
    cubin: bytes = field(repr=False)

    def __str__(self) -> str:
        cached = " (from cache)" if self.cached else ""
        return f"{self.name}: {self.arch} cubin by {self.compiler.upper()} in {self.seconds:.2f} s{cached}"


def default_arch() -> str:
    """``sm_XY`` of torch's current CUDA device; without a GPU, ``$KERNELKIT_CUDA_ARCH`` or sm_90 (H100)."""
    if torch.cuda.is_available():
        major, minor = torch.cuda.get_device_capability()
        return f"sm_{major}{minor}"
    return os.environ.get("KERNELKIT_CUDA_ARCH", "sm_90")


def grid_1d(n: int, block: int = 256) -> tuple[int, int]:
    """(blocks, threads per block) for one thread per element of ``n``; 0 blocks when n == 0."""
    if n < 0 or block <= 0:
        raise LaunchError(f"grid_1d needs n >= 0 and block > 0, got n={n}, block={block}")
    return -(-n // block), block


def cuda_kernel(source: str | os.PathLike[str], name: str, *, options: Sequence[str] = ()) -> CudaKernel:
    """Kernel ``name`` from CUDA C++ text, or from a .cu/.cuh file (a path, or a one-line str so named).

    A relative path is taken relative to the calling file: ``cuda_kernel("square.cu", ...)`` finds the .cu
    beside the .py that asks for it. The file is read now (a missing one is a LoadError), compiled later.
    """
    text = os.fspath(source)
    if not isinstance(source, os.PathLike) and ("\n" in text or not text.strip().endswith((".cu", ".cuh"))):
        return CudaKernel(text, name, options=options)  # finds where the text sits from the same caller
    caller = _caller_location()[0]
    path = Path(text).expanduser()
    if not path.is_absolute():
        path = (Path(caller).parent if Path(caller).is_file() else Path.cwd()) / path
    try:
        code = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise LoadError(f"CUDA source for kernel {name!r} not found at {path} ({exc.strerror}); a relative "
                        f"path is relative to the calling file {caller}: fix it or give an absolute path"
                        ) from None
    return CudaKernel(code, name, options=options, origin=(str(path), 1))


class CudaKernel:
    """One ``extern "C" __global__`` kernel from CUDA C++ source, compiled with NVRTC, launched on tensors.

    origin: (file, line) where ``source`` starts, so compiler errors point there; by default found by looking
    for the text in the calling file. Constructing is cheap: nothing is parsed, compiled or put on a GPU.
    """

    def __init__(self, source: str, name: str, *, options: Sequence[str] = (),
                 origin: tuple[str, int] | None = None) -> None:
        self.source = source
        self.name = name
        self.options = tuple(options)
        self._origin = origin
        self._caller = _caller_location() if origin is None else ("<unknown>", 1)
        self._compiled: dict[str, CompiledKernel] = {}  # arch -> build
        self._kernels: dict[int, Any] = {}  # device index -> cuda.core Kernel
        self._streams: dict[tuple[int, int], Any] = {}  # (device, raw handle) -> cuda.core Stream
        self._contexts: set[tuple[int, int]] = set()  # (thread, device) where cuda.core's context is current
        self._configs: dict[tuple[int, Any, Any, int], Any] = {}  # (device, grid, block, shared_mem) -> config
        self._core: Any = None

    def __repr__(self) -> str:
        return f"CudaKernel({self.name!r}, origin={self.origin})"

    @cached_property
    def origin(self) -> tuple[str, int]:
        if self._origin is not None:
            return self._origin
        file, call_line = self._caller
        return file, _locate(self.source, linecache.getlines(file), call_line)

    @cached_property
    def params(self) -> tuple[Param, ...]:
        """The kernel's parameters, parsed from the source. CompileError if the source has no such kernel."""
        return kernel_params(self.source, self.name)

    @cached_property
    def _converters(self) -> tuple[Converter, ...]:
        return tuple(_converter(self.name, p) for p in self.params)  # built once, run at every launch

    def compile(self, arch: str | None = None) -> CompiledKernel:
        """The cubin for ``arch`` (default: default_arch()): from memory, the disk cache, or the compiler."""
        arch = arch or default_arch()
        if arch in self._compiled:
            return replace(self._compiled[arch], cached=True)
        self.params  # noqa: B018 - a kernel name missing from the source is reported before compiling
        compiler = _find_compiler()
        file, line = self.origin
        text = f'#line {line} "{_c_escape(file)}"\n{self.source}'
        options = (*(o for o in DEFAULT_OPTIONS if not _overridden(o, self.options)), *self.options)
        includes = _local_includes(self.source, Path(file).parent, set())
        key = content_key(text, self.name, repr(options), arch, compiler.version, *includes)
        start = time.perf_counter()
        cubin = _read_cubin(key)
        cached = cubin is not None
        if cubin is None:
            cubin = compiler.build(text, file, arch, options, self.name)
            _write_cubin(key, cubin)
        built = CompiledKernel(self.name, arch, compiler.name, time.perf_counter() - start, cached, cubin)
        self._compiled[arch] = built
        return built

    def marshal(self, *args: Any, device: torch.device | str = "cuda") -> list[Any]:
        """Check ``args`` against the kernel's C signature; convert them for a launch on ``device``.

        Tensors for pointers (contiguous, on ``device``, of the pointee's dtype) become device addresses;
        numbers become Python ints or numpy scalars that fit the parameter's C type. A mismatch is a
        LaunchError naming the argument.
        """
        dev = torch.device(device)
        index = -1 if dev.type == "cpu" else dev.index or 0
        converters = self._converters
        if len(args) != len(converters):
            raise self._count_error(args)
        return [convert(arg, index) for convert, arg in zip(converters, args)]  # noqa: B905 - lengths checked

    def _count_error(self, args: tuple[Any, ...]) -> LaunchError:
        given = ", ".join(_describe(a) for a in args) or "nothing"
        return LaunchError(f"kernel {self.name!r} takes {len(self.params)} arguments "
                           f"({', '.join(map(str, self.params))}); given {len(args)}: {given}")

    def launch(self, grid: int | tuple[int, ...], block: int | tuple[int, ...], *args: Any,
               shared_mem: int = 0) -> None:
        """Launch on torch's current device and stream; asynchronous, like any CUDA launch.

        grid: blocks; block: threads per block (each an int or a tuple of up to 3 ints);
        shared_mem: bytes of dynamic shared memory per block.
        """
        try:
            index = _current_device()
        except (AssertionError, RuntimeError) as exc:  # CPU-only torch asserts; CUDA torch with no GPU raises
            raise BackendUnavailable(f"no GPU: cannot launch CUDA kernel {self.name!r} ({exc})") from None
        kernel = self._kernels.get(index)
        if kernel is None:
            kernel = self._load(index)
        converters = self._converters  # marshal(), inlined: this path runs at every launch
        if len(args) != len(converters):
            raise self._count_error(args)
        values = [convert(arg, index) for convert, arg in zip(converters, args)]  # noqa: B905 - checked
        try:
            config = self._configs[index, grid, block, shared_mem]
        except (KeyError, TypeError):  # TypeError: a list for grid or block cannot be a key
            config = self._config(index, grid, block, shared_mem)
        if (get_ident(), index) not in self._contexts:
            # cuda.core launches into the thread's current context; a thread torch has not used has none.
            self._core.Device(index).set_current()
            self._contexts.add((get_ident(), index))
        handle = _raw_stream(index)
        stream = self._streams.get((index, handle))
        if stream is None:
            stream = self._wrap_stream(index, handle)
        self._core.launch(stream, config, kernel, *values)

    def _load(self, index: int) -> Any:
        if not torch.cuda.is_available():
            raise BackendUnavailable(f"no GPU: cannot launch CUDA kernel {self.name!r}")
        major, minor = torch.cuda.get_device_capability(index)
        compiled = self.compile(f"sm_{major}{minor}")
        try:
            self._core = _cuda_core()
        except ImportError as exc:
            raise BackendUnavailable(f"launching needs cuda.core ({exc}): pip install 'kernelkit[cuda]'"
                                     ) from None
        self._core.Device(index).set_current()
        self._kernels[index] = self._core.ObjectCode.from_cubin(compiled.cubin).get_kernel(self.name)
        return self._kernels[index]

    def _config(self, index: int, grid: Any, block: Any, shared_mem: int) -> Any:
        grid_dims, block_dims = launch_dims(self.name, grid, block)
        if not isinstance(shared_mem, int) or shared_mem < 0:
            raise LaunchError(f"kernel {self.name!r}: shared_mem must be an int >= 0, got {shared_mem!r}")
        if shared_mem > 48 * 1024:  # past 48 KiB a kernel must opt in, per device (H100: up to 227 KiB)
            driver = importlib.import_module("cuda.bindings.driver")
            attribute = driver.CUfunction_attribute.CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
            (status,) = driver.cuKernelSetAttribute(attribute, shared_mem, self._kernels[index].handle, index)
            if status != driver.CUresult.CUDA_SUCCESS:
                raise LaunchError(f"kernel {self.name!r}: cannot have {shared_mem} bytes of shared memory on "
                                  f"cuda:{index} ({status.name})")
        if len(self._configs) > 256:  # sizes that vary from call to call must not grow the table forever
            self._configs.clear()
        config = self._core.LaunchConfig(grid=grid_dims, block=block_dims, shmem_size=shared_mem)
        self._configs[index, grid_dims, block_dims, shared_mem] = config
        with contextlib.suppress(TypeError):
            self._configs[index, grid, block, shared_mem] = config
        return config

    def _wrap_stream(self, index: int, handle: int) -> Any:
        if len(self._streams) > 64:  # handles of destroyed streams are reused: keep the table small
            self._streams.clear()
        self._streams[index, handle] = self._core.Stream.from_handle(handle)  # ~10 us: once per stream
        return self._streams[index, handle]


# ---- source parsing ---------------------------------------------------------------------------------------


def kernel_params(source: str, name: str) -> tuple[Param, ...]:
    """Parameters of ``extern "C" __global__ void name(...)`` in ``source``; CompileError if it is absent."""
    found = _global_functions(source)
    if name in found and found[name][0]:
        return tuple(_parse_param(text, i) for i, text in enumerate(_split_params(found[name][1])))
    kernels = [n for n, (extern_c, _) in found.items() if extern_c]
    defined = f"it defines: {', '.join(kernels)}" if kernels else 'it defines no extern "C" __global__ kernel'
    hint = ""
    if re.search(rf"\b{re.escape(name)}\b", _COMMENT.sub(" ", source)):
        hint = f'; {name!r} appears, but not as an extern "C" __global__ function: did you forget extern "C"?'
    raise CompileError(f'kernel {name!r} is no extern "C" __global__ function ({defined}){hint}')


def extern_c_kernels(source: str) -> list[str]:
    """Names of the ``extern "C" __global__`` functions in ``source``, in order."""
    return [n for n, (extern_c, _) in _global_functions(source).items() if extern_c]


def _global_functions(source: str) -> dict[str, tuple[bool, str]]:
    """name -> (declared extern "C", parameter list text) for each ``__global__`` function in ``source``."""
    blank = lambda m: " " * len(m.group())  # keeps offsets, so the positions found below stay valid
    code = _LAUNCH_BOUNDS.sub(blank, _COMMENT.sub(blank, source))
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


def _converter(kernel: str, param: Param) -> Converter:
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
        raise LaunchError(f"{where}: needs a torch.Tensor, got {_describe(value)}")
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
            raise LaunchError(f"{where}: needs an integer, got {_describe(value)}") from None
        if not lo <= number <= hi:
            raise LaunchError(f"{where}: {number} is out of range for this C type [{lo}, {hi}]")
        return np_type(number)

    return convert


def _float_converter(where: str, np_type: Any, dtype: torch.dtype) -> Converter:
    largest = float(torch.finfo(dtype).max)

    def convert(value: Any, index: int) -> Any:
        if not isinstance(value, (int, float, np.integer, np.floating)) or isinstance(value, bool):
            raise LaunchError(f"{where}: needs a real number, got {_describe(value)}")
        if abs(value) > largest and np.isfinite(value):
            raise LaunchError(f"{where}: {value} overflows {dtype} (largest {largest:g})")
        if dtype == torch.bfloat16:  # no numpy bfloat16: pass the 16 bits, rounded as torch rounds
            return np.uint16(torch.tensor(float(value), dtype=dtype).view(torch.uint16).item())
        return np_type(value)

    return convert


def _describe(value: Any) -> str:
    if isinstance(value, torch.Tensor):
        return f"Tensor({value.dtype}, {value.device}, shape {tuple(value.shape)})"
    return f"{type(value).__name__} {value!r}"[:80]


def launch_dims(kernel: str, grid: Any, block: Any) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """Check grid and block (an int or 1 to 3 positive ints each) against CUDA's limits; return tuples."""
    dims = []
    for what, value, limits in (("grid", grid, (2**31 - 1, 65535, 65535)), ("block", block, (1024, 1024, 64))
                                 ):
        shape = (value,) if isinstance(value, (int, np.integer)) else tuple(value)
        if not 1 <= len(shape) <= 3 or not all(isinstance(d, (int, np.integer)) for d in shape):
            raise LaunchError(f"kernel {kernel!r}: {what} must be an int or 1 to 3 ints, got {value!r}")
        if 0 in shape:
            raise LaunchError(f"kernel {kernel!r}: {what} {value!r} has a zero dimension, so the launch has "
                              f"no {'blocks' if what == 'grid' else 'threads'}; when there is no work (an "
                              "empty tensor), skip the launch")
        if any(d < 0 or d > limit for d, limit in zip(shape, limits)):  # noqa: B905 - limits has 3
            raise LaunchError(f"kernel {kernel!r}: {what} {value!r} is outside CUDA's limits {limits}")
        dims.append(tuple(int(d) for d in shape))
    threads = int(np.prod(dims[1]))
    if threads > 1024:
        raise LaunchError(f"kernel {kernel!r}: block {block!r} has {threads} threads, CUDA's limit is 1024")
    return dims[0], dims[1]


# ---- compilers and the disk cache ------------------------------------------------------------------------


@dataclass(frozen=True)
class _Compiler:
    name: str
    version: str
    build: Callable[[str, str, str, Sequence[str], str], bytes]  # (text, file, arch, options, kernel)


def _cuda_core() -> Any:
    """The cuda.core namespace: ``cuda.core`` since 0.4, ``cuda.core.experimental`` before."""
    try:
        core = importlib.import_module("cuda.core")
        if hasattr(core, "Program"):
            return core
    except ImportError:
        pass
    return importlib.import_module("cuda.core.experimental")


def _find_compiler() -> _Compiler:
    try:
        _cuda_core()
        _, major, minor = importlib.import_module("cuda.bindings.nvrtc").nvrtcVersion()  # loads libnvrtc
        bundled = (major, minor) >= (13, 3)  # NVRTC carries its own CUDA headers from 13.3
        return _Compiler("nvrtc", f"nvrtc {major}.{minor}", partial(_nvrtc_build, bundled_headers=bundled))
    except (ImportError, OSError, RuntimeError) as exc:
        problem = f"{type(exc).__name__}: {exc}"
    nvcc = shutil.which("nvcc")
    if nvcc is not None:
        return _Compiler("nvcc", _nvcc_version(nvcc), _nvcc_build)
    raise BackendUnavailable(f"cannot compile CUDA C++: NVRTC is unavailable ({problem}) and nvcc is not on "
                             "PATH; pip install 'kernelkit[cuda]'")


def _nvrtc_build(text: str, file: str, arch: str, options: Sequence[str], kernel: str, *,
                 bundled_headers: bool) -> bytes:
    core = _cuda_core()
    raw = [o.encode() for o in options]

    class RawOptions(core.ProgramOptions):  # type: ignore[misc, name-defined]
        # ProgramOptions has a field per NVRTC flag; the user's flags are strings, passed on as given.
        def as_bytes(self, *args: Any, **kwargs: Any) -> list[bytes]:
            return [*super().as_bytes(*args, **kwargs), *raw]

        def _as_bytes(self) -> list[bytes]:  # the name in older cuda.core
            return [*super()._as_bytes(), *raw]

    headers: dict[str, Any] = {}  # NVRTC finds no headers alone: cuda_fp16.h & co. are bundled or a toolkit's
    if bundled_headers and "use_bundled_headers" in getattr(core.ProgramOptions, "__dataclass_fields__", {}):
        headers = {"use_bundled_headers": True}
    elif _toolkit_include() is not None:
        headers = {"include_path": [str(_toolkit_include())]}
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
def _nvcc_version(nvcc: str) -> str:
    done = subprocess.run([nvcc, "--version"], capture_output=True, text=True, timeout=60, check=False)
    lines = done.stdout.strip().splitlines()
    return f"nvcc {lines[-1] if lines else 'unknown'}"


def _toolkit_include() -> Path | None:
    nvcc = shutil.which("nvcc")
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda",
             Path(nvcc).resolve().parent.parent if nvcc else None]
    found = (Path(r, "include") for r in roots if r and Path(r, "include", "cuda_fp16.h").is_file())
    return next(found, None)


def _overridden(default: str, user: Sequence[str]) -> bool:
    flag = default.split("=")[0].lstrip("-")
    return any(o.split("=")[0].lstrip("-") == flag for o in user)


def _local_includes(source: str, directory: Path, seen: set[Path]) -> list[bytes]:
    """Contents of the files ``source`` includes "like this", recursively: editing one must miss the cache."""
    found: list[bytes] = []
    for name in _LOCAL_INCLUDE.findall(_COMMENT.sub(" ", source)):
        path = (directory / name).resolve()
        if path not in seen and path.is_file():
            seen.add(path)
            data = path.read_bytes()
            found += [data, *_local_includes(data.decode("utf-8", "replace"), path.parent, seen)]
    return found


def _read_cubin(key: str) -> bytes | None:
    try:
        data = (cache_dir("cuda") / f"{key}.cubin").read_bytes()
    except OSError:
        return None
    return data if _is_whole_elf(data) else None  # a corrupt or truncated file is rebuilt


def _write_cubin(key: str, cubin: bytes) -> None:
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


# ---- where the user's source text sits -------------------------------------------------------------------


def _caller_location() -> tuple[str, int]:
    """(file, line) of the nearest frame outside this module."""
    frame = sys._getframe(1)
    while frame.f_back is not None and frame.f_globals.get("__name__") == __name__:
        frame = frame.f_back
    return frame.f_code.co_filename, frame.f_lineno


def _locate(source: str, file_lines: Sequence[str], call_line: int) -> int:
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


def _c_escape(path: str) -> str:
    return path.replace("\\", "\\\\").replace('"', '\\"')
