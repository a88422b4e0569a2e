"""One CUDA C++ kernel: an ``extern "C" __global__`` function compiled with NVRTC and launched on torch tensors.

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
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from functools import cached_property
from pathlib import Path
from threading import get_ident
from typing import Any

import numpy as np
import torch

from kernelkit.backends.cuda.build import (
    DEFAULT_OPTIONS,
    caller_location,
    cuda_core,
    default_arch,
    find_compiler,
    include_dirs,
    line_directive,
    local_includes,
    locate_source,
    overridden,
    read_cubin,
    write_cubin,
)
from kernelkit.backends.cuda.signature import Converter, Param, converter, describe_arg, kernel_params
from kernelkit.cache import content_key
from kernelkit.errors import BackendUnavailable, LaunchError, LoadError

__all__ = ["CompiledKernel", "CudaKernel", "cuda_kernel", "grid_1d", "launch_dims"]

# What inductor calls to read torch's device and stream: 0.1 and 0.2 us, against 0.6 and 3.4 us for the public
# torch.cuda calls (H100 host). CPU builds of torch lack both; the public ones then raise "no CUDA".
_current_device: Callable[[], int] = getattr(torch._C, "_cuda_getDevice", None) or torch.cuda.current_device
_raw_stream: Callable[[int], int] = getattr(torch._C, "_cuda_getCurrentRawStream", None) or (
    lambda index: torch.cuda.current_stream(index).cuda_stream)


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
    caller = caller_location(__name__)[0]
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
        self._caller = caller_location(__name__) if origin is None else ("<unknown>", 1)
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
        return file, locate_source(self.source, linecache.getlines(file), call_line)

    @cached_property
    def params(self) -> tuple[Param, ...]:
        """The kernel's parameters, parsed from the source. CompileError if the source has no such kernel."""
        return kernel_params(self.source, self.name)

    @cached_property
    def _converters(self) -> tuple[Converter, ...]:
        return tuple(converter(self.name, p) for p in self.params)  # built once, run at every launch

    def compile(self, arch: str | None = None) -> CompiledKernel:
        """The cubin for ``arch`` (default: default_arch()): from memory, the disk cache, or the compiler."""
        arch = arch or default_arch()
        if arch in self._compiled:
            return replace(self._compiled[arch], cached=True)
        self.params  # noqa: B018 - a kernel name missing from the source is reported before compiling
        compiler = find_compiler()
        file, line = self.origin
        text = line_directive(self.source, file, line)
        options = self.build_options()
        includes = local_includes(self.source, Path(file).parent, set(), include_dirs(options, Path.cwd()))
        key = content_key(text, self.name, repr(options), arch, compiler.version, *includes)
        start = time.perf_counter()
        cubin = read_cubin(key)
        cached = cubin is not None
        if cubin is None:
            cubin = compiler.build(text, file, arch, options, self.name)
            write_cubin(key, cubin)
        built = CompiledKernel(self.name, arch, compiler.name, time.perf_counter() - start, cached, cubin)
        self._compiled[arch] = built
        return built

    def build_options(self) -> tuple[str, ...]:
        """The options ``compile`` passes: the defaults, less those the kernel's own options override, then those."""
        return (*(o for o in DEFAULT_OPTIONS if not overridden(o, self.options)), *self.options)

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
        given = ", ".join(describe_arg(a) for a in args) or "nothing"
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
            self._core = cuda_core()
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
