"""Torch extensions from C++/CUDA source via ``torch.utils.cpp_extension.load_inline``: built lazily, cached by content.

    ext = load_inline("square_vec4_ext", cpp_sources="torch::Tensor square_vec4(torch::Tensor x);",
                      cuda_sources="square_inline.cu", functions=["square_vec4"])   # nothing built yet
    y = ext.square_vec4(x)       # the first use builds (or loads from the disk cache), then calls the function

Builds are for the GPU present only (not every architecture torch knows), their compiler output is shown only when
they fail, and errors point at the user's own lines. Without a GPU, or with a CPU build of torch, ``compile()``
proves the sources build and loads nothing (inline_check.py).
"""

from __future__ import annotations

import contextlib
import linecache
import os
import re
import shutil
import sys
import sysconfig
import tempfile
import threading
import time
import warnings
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, replace
from importlib import util as importlib_util
from pathlib import Path
from types import ModuleType
from typing import Any

import torch

from kernelkit.backends.cuda.build import (
    caller_location,
    default_arch,
    include_dirs,
    line_directive,
    local_includes,
    locate_source,
    nvcc_version,
)
from kernelkit.backends.cuda.inline_check import check
from kernelkit.backends.cuda.inline_plan import BINDINGS_FILE, BuildPlan, BuiltExtension, cxx_standard, find_nvcc
from kernelkit.backends.cuda.signature import COMMENT
from kernelkit.cache import cache_dir, content_key
from kernelkit.errors import BackendUnavailable, CompileError, LoadError, SpecError

__all__ = ["BuiltExtension", "InlineExtension", "is_built", "load_inline"]

SOURCE_SUFFIXES = (".cu", ".cuh", ".cpp", ".cc", ".cxx", ".h", ".hpp")
STALE_BUILD_S = 3600  # a build directory this old was left by a killed process
_NINJA_NOISE = re.compile(r"^(\[\d+/\d+\] |ninja: |Error building extension )")

Source = str | os.PathLike[str]


@dataclass(frozen=True)
class _Source:
    text: str
    file: str  # where compiler errors should point
    path: Path | None  # the file it was read from; None for text given inline


def load_inline(name: str, *, cpp_sources: Source | Sequence[Source], cuda_sources: Source | Sequence[Source] = (),
                functions: str | Sequence[str], extra_cuda_cflags: Sequence[str] = (),
                extra_cflags: Sequence[str] = ()) -> InlineExtension:
    """A torch extension named ``name`` binding ``functions``; built on first use (see ``InlineExtension``).

    Sources are C++/CUDA text or paths to .cu/.cpp files (a relative path is relative to the calling file); files
    are read now (a missing one is a LoadError), nothing is compiled. ``cpp_sources`` must declare each function.
    """
    caller = caller_location(__name__)
    return InlineExtension(name, _read_sources(name, cpp_sources, caller), _read_sources(name, cuda_sources, caller),
                           functions, extra_cuda_cflags, extra_cflags, caller)


class InlineExtension:
    """A load_inline extension, built by ``compile()`` or on first attribute access: ``ext.square_vec4(x)``.

    Usable in an impl's ``kernels=[...]``: where no GPU is present ``compile()`` only checks that it builds.
    """

    def __init__(self, name: str, cpp: tuple[_Source, ...], cuda: tuple[_Source, ...],
                 functions: str | Sequence[str], extra_cuda_cflags: Sequence[str], extra_cflags: Sequence[str],
                 caller: tuple[str, int]) -> None:
        if not name.isidentifier():
            raise SpecError(f"load_inline: name {name!r} must be a Python identifier (it names the module)")
        self.name = name
        self.functions = (functions,) if isinstance(functions, str) else tuple(functions)
        self.extra_cuda_cflags, self.extra_cflags = tuple(extra_cuda_cflags), tuple(extra_cflags)
        self._cpp, self._cuda, self._caller = cpp, cuda, caller
        self._built: dict[str, BuiltExtension] = {}  # arch -> build
        self._lock = threading.Lock()
        for fn in self.functions:
            if hasattr(type(self), fn) or fn in self.__dict__:
                raise SpecError(f"load_inline {name!r}: function {fn!r} is hidden by InlineExtension.{fn}; rename "
                                f"it, or call it as ext.compile().module.{fn}")

    def __repr__(self) -> str:
        return f"InlineExtension({self.name!r}, functions={list(self.functions)})"

    def __getattr__(self, attr: str) -> Any:  # only called for names that are not found otherwise
        if attr not in self.__dict__.get("functions", ()):
            raise AttributeError(f"{self!r} has no attribute {attr!r}")
        built = self.compile()
        if built.module is None:
            raise BackendUnavailable(f"no GPU: cannot call {self.name}.{attr} ({built})")
        fn = getattr(built.module, attr)
        self.__dict__[attr] = fn  # later calls find it directly
        return fn

    def key(self, arch: str | None = None) -> str:
        """The build's content key: sources, functions, flags, arch, torch, nvcc and Python versions."""
        return self.plan(arch).key

    def compile(self, arch: str | None = None) -> BuiltExtension:
        """Build (or load from the cache) and load the extension for ``arch`` (default: default_arch()).

        Where it cannot be loaded (no GPU, a CPU build of torch, or ``arch`` is not the GPU's), check that it
        compiles instead. A C++-only extension is built and loaded anywhere.
        """
        start = time.perf_counter()
        target = "host" if not self._cuda else arch or default_arch()
        with self._lock:
            if target in self._built:
                return replace(self._built[target], cached=True, seconds=time.perf_counter() - start)
            self._check_functions()
            plan = self.plan(target)
            built = _build(plan) if plan.loadable else check(plan)
            self._built[target] = replace(built, seconds=time.perf_counter() - start)
            return self._built[target]

    def _check_functions(self) -> None:
        """Each function must be declared in cpp_sources: load_inline binds it there, and a typo would otherwise
        surface as a compiler error in generated code, or an undefined symbol at import."""
        declared = COMMENT.sub(" ", "\n".join([*(s.text for s in self._cpp), *self._included(self._cpp)]))
        defined = COMMENT.sub(" ", "\n".join(s.text for s in self._cuda))
        for fn in self.functions:
            if re.search(rf"\b{re.escape(fn)}\b", declared):
                continue
            where = ("is defined in cuda_sources but not declared in cpp_sources, where load_inline binds it"
                     if re.search(rf"\b{re.escape(fn)}\b", defined) else "is in neither cpp_sources nor cuda_sources")
            raise CompileError(f"load_inline {self.name!r}: function {fn!r} (in functions=) {where}; declare it in "
                               f"cpp_sources with its signature, e.g. 'torch::Tensor {fn}(torch::Tensor x);'")

    def _included(self, sources: Sequence[_Source]) -> list[str]:
        seen: set[Path] = set()
        search = include_dirs([*self.extra_cuda_cflags, *self.extra_cflags], Path.cwd())
        found = [data for s in sources for data in local_includes(s.text, _directory(s, self._caller), seen, search)]
        return [data.decode("utf-8", "replace") for data in found]

    def plan(self, arch: str | None = None) -> BuildPlan:
        """The build for ``arch`` (default: default_arch()) as this machine would make it; nothing is compiled."""
        arch = "host" if not self._cuda else arch or default_arch()
        gpu = torch.version.cuda is not None and torch.cuda.is_available()
        loadable = not self._cuda or (gpu and arch == default_arch())
        cpp, cuda = [_with_line(s, self._caller) for s in self._cpp], [_with_line(s, self._caller) for s in self._cuda]
        includes = list(dict.fromkeys(str(_directory(s, self._caller)) for s in (*self._cpp, *self._cuda)))
        std = cxx_standard()
        tools = nvcc_version(str(find_nvcc(loadable))) if self._cuda else os.environ.get("CXX", "c++")
        key = content_key("load_inline 1", self.name, *cpp, "\0cuda", *cuda, *self.functions, "\0flags",
                          repr(self.extra_cuda_cflags), repr(self.extra_cflags), std, arch, torch.__version__, tools,
                          sysconfig.get_config_var("EXT_SUFFIX") or sys.version,
                          *self._included(self._cpp), *self._included(self._cuda))
        return BuildPlan(self.name, key, f"{self.name}_{key[:12]}", arch, loadable, cpp, cuda, includes, self.functions,
                     self.extra_cflags, self.extra_cuda_cflags, std)


# ---- building and loading (a GPU, or a C++-only extension) ---------------------------------------------------


def _build(plan: BuildPlan) -> BuiltExtension:
    """Load ``plan``'s .so from the cache, or build it with load_inline in a private directory and move it there."""
    final = cache_dir("inline", plan.key)
    library = final / f"{plan.module}.so"
    compiler = "nvcc" if plan.cuda else "c++"
    if library.is_file():
        with contextlib.suppress(ImportError):  # a damaged file is rebuilt
            return BuiltExtension(plan.name, plan.arch, compiler, 0.0, True, _import(plan.module, library))
    with _build_lock(final):  # another process building the same key (an early build, another GPU's worker): wait
        if library.is_file():
            with contextlib.suppress(ImportError):
                return BuiltExtension(plan.name, plan.arch, compiler, 0.0, True, _import(plan.module, library))
        return _build_locked(plan, final, library, compiler)


def is_built(ext: InlineExtension) -> bool:
    """Whether ``ext``'s build for this machine's GPU is in the disk cache already (nothing is compiled)."""
    plan = ext.plan()
    return (cache_dir("inline", plan.key) / f"{plan.module}.so").is_file()


@contextlib.contextmanager
def _build_lock(folder: Path) -> Iterator[None]:
    """An exclusive lock on ``folder`` held across processes (fcntl.flock: released when its holder dies)."""
    try:
        import fcntl
    except ImportError:  # not POSIX: builds may overlap; each lands atomically (os.replace)
        yield
        return
    with open(folder / ".build.lock", "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _build_locked(plan: BuildPlan, final: Path, library: Path, compiler: str) -> BuiltExtension:
    from torch.utils import cpp_extension  # heavy, and only needed here

    if plan.cuda:
        find_nvcc(True)
    if not cpp_extension.is_ninja_available():
        raise BackendUnavailable("load_inline needs ninja: pip install ninja")
    _remove_stale_builds(final)
    work = Path(tempfile.mkdtemp(prefix="build-", dir=final))  # private: a killed build leaves no lock behind
    arch_list = {"TORCH_CUDA_ARCH_LIST": torch_arch(plan.arch)} if plan.cuda else {}
    try:
        with _environment(arch_list), _captured_output() as output:
            try:
                module = cpp_extension.load_inline(
                    plan.module, cpp_sources=[*plan.cpp, f'#line 1 "{BINDINGS_FILE}"'], cuda_sources=[*plan.cuda],
                    functions=list(plan.functions), extra_cflags=list(plan.cflags),
                    extra_cuda_cflags=list(plan.cuda_cflags), extra_include_paths=plan.includes,
                    build_directory=str(work), verbose=False)
            except (RuntimeError, ImportError, OSError) as exc:  # ninja's failure, or an undefined symbol at import
                error = exc
            else:
                error = None
        if error is not None:
            log = compiler_log("\n".join([str(error), *output]))
            raise CompileError(f"load_inline {plan.name!r} failed to build for {plan.arch} with {compiler}", log
                               ) from None
        os.replace(work / f"{plan.module}.so", library)  # atomic: a reader sees no .so or a whole one
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the loaded module stays mapped
    return BuiltExtension(plan.name, plan.arch, compiler, 0.0, False, module)


def _import(module_name: str, library: Path) -> ModuleType:
    spec = importlib_util.spec_from_file_location(module_name, library)
    if spec is None or spec.loader is None:
        raise ImportError(f"cannot load {library}")
    module = importlib_util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _remove_stale_builds(final: Path) -> None:
    for old in final.glob("build-*"):
        with contextlib.suppress(OSError):
            if time.time() - old.stat().st_mtime > STALE_BUILD_S:
                shutil.rmtree(old)


@contextlib.contextmanager
def _environment(values: dict[str, str]) -> Iterator[None]:
    saved = {k: os.environ.get(k) for k in values}
    os.environ.update(values)
    try:
        yield
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@contextlib.contextmanager
def _captured_output() -> Iterator[list[str]]:
    """Collect what the build writes to fds 1 and 2 (subprocesses included) and its warnings, instead of showing it."""
    collected: list[str] = []
    sys.stdout.flush()
    sys.stderr.flush()
    saved = os.dup(1), os.dup(2)
    with tempfile.TemporaryFile() as sink, warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        os.dup2(sink.fileno(), 1)
        os.dup2(sink.fileno(), 2)
        try:
            yield collected
        finally:
            sys.stdout.flush()
            sys.stderr.flush()
            for fd, copy in zip((1, 2), saved):  # noqa: B905 - both have 2
                os.dup2(copy, fd)
                os.close(copy)
            sink.seek(0)
            collected += [sink.read().decode("utf-8", "replace"), *(str(w.message) for w in caught)]


def compiler_log(text: str) -> str:
    """The compiler's messages from ninja's output: without progress lines and the (long) failed command lines."""
    kept, after_failed = [], False
    for line in text.splitlines():
        if after_failed:  # ninja prints the failed command on the line after "FAILED:"
            after_failed = False
        elif line.startswith("FAILED:"):
            after_failed = True
        elif line.strip() and not _NINJA_NOISE.match(line):
            kept.append(line)
    return "\n".join(kept)


# ---- sources and targets -----------------------------------------------------------------------------------------


def _read_sources(name: str, sources: Source | Sequence[Source], caller: tuple[str, int]) -> tuple[_Source, ...]:
    items = [sources] if isinstance(sources, (str, os.PathLike)) else list(sources)
    read = []
    for item in items:
        text = os.fspath(item)
        if not isinstance(item, os.PathLike) and ("\n" in text or not text.strip().endswith(SOURCE_SUFFIXES)):
            read.append(_Source(text, caller[0], None))
            continue
        path = Path(text).expanduser()
        if not path.is_absolute():
            path = (Path(caller[0]).parent if Path(caller[0]).is_file() else Path.cwd()) / path
        try:
            read.append(_Source(path.read_text(encoding="utf-8"), str(path), path))
        except OSError as exc:
            raise LoadError(f"load_inline {name!r}: source not found at {path} ({exc.strerror}); a relative path is "
                            f"relative to the calling file {caller[0]}: fix it or give an absolute path") from None
    return tuple(read)


def _with_line(source: _Source, caller: tuple[str, int]) -> str:
    """The source behind a ``#line`` naming where it sits, so compiler errors point at the user's file and line."""
    line = 1 if source.path is not None else locate_source(source.text, linecache.getlines(caller[0]), caller[1])
    return line_directive(source.text, source.file, line)


def _directory(source: _Source, caller: tuple[str, int]) -> Path:
    return source.path.parent if source.path is not None else Path(caller[0]).resolve().parent


def torch_arch(arch: str) -> str:
    """``sm_90`` -> ``9.0``, ``sm_90a`` -> ``9.0a``: the spelling of TORCH_CUDA_ARCH_LIST."""
    match = re.fullmatch(r"sm_(\d+)(\d)([a-z]?)", arch)
    if match is None:
        raise SpecError(f"cannot build a torch extension for arch {arch!r}; expected sm_XY (e.g. sm_90)")
    return f"{match[1]}.{match[2]}{match[3]}"
