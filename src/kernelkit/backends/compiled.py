"""The ``compile`` baseline: an op's reference run through ``torch.compile`` (inductor), the code to beat.

Every op has it without registering it (``op.get_impl("compile")``, ``--impl compile``); an impl the user registers
under the name ``compile`` replaces it. Nothing compiles at import or when the impl is looked up: the compiled
function is made on the first call in the process that runs it (a worker), one per (reference, mode), and inductor
compiles once per input signature (shapes, strides, dtypes, device). The first call of a signature is compile time
and is recorded apart (``compile_seconds``); later calls of that signature run the compiled code only.

The mode comes from ``$KERNELKIT_COMPILE_MODE`` (default "default"); ``kernelkit check --compile-mode MODE`` sets
it before the workers are spawned, so they inherit it.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Hashable
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelkit.backends.base import Backend
from kernelkit.errors import CompileError, SpecError
from kernelkit.spec import Impl, Op

MODE_ENV = "KERNELKIT_COMPILE_MODE"
DEFAULT_MODE = "default"

# Dynamo compiles one function at most `recompile_limit` times (8) and then runs it eagerly, silently: checking
# 3 sizes x 3 dtypes already takes 9 compiles. While the baseline compiles it raises the limit and asks Dynamo to
# fail instead of falling back, so a `compile` result is always compiled code.
RECOMPILE_LIMIT = 256

Signature = tuple[Hashable, ...]


def compile_modes() -> tuple[str, ...]:
    """The modes this torch.compile accepts: ('default', 'reduce-overhead', 'max-autotune', ...)."""
    from torch._inductor import list_mode_options

    return tuple(list_mode_options())


def resolve_mode(mode: str | None = None) -> str:
    """``mode``, else ``$KERNELKIT_COMPILE_MODE``, else "default"; an unknown mode is a SpecError naming the valid."""
    from_env = mode is None and bool(os.environ.get(MODE_ENV))
    chosen = (os.environ.get(MODE_ENV) if from_env else mode) or DEFAULT_MODE
    valid = compile_modes()
    if chosen not in valid:
        where = f" (from ${MODE_ENV})" if from_env else ""
        raise SpecError(f"unknown torch.compile mode {chosen!r}{where}; use one of {', '.join(valid)}")
    return chosen


@dataclass
class CompiledReference:
    """An op's reference under torch.compile in one mode. Compiles on the first call of each input signature."""

    op_name: str
    mode: str
    fn: Callable[..., Any]
    seen: set[Signature] = field(default_factory=set)
    compile_seconds: list[float] = field(default_factory=list)  # one entry per signature compiled

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        key = signature(args, kwargs)
        if key in self.seen:
            return self.fn(*args, **kwargs)  # Dynamo's guards pass: the compiled code runs, nothing recompiles
        from torch._dynamo import config as dynamo_config

        start = time.perf_counter()
        with dynamo_config.patch(recompile_limit=RECOMPILE_LIMIT, fail_on_recompile_limit_hit=True):
            try:
                out = self.fn(*args, **kwargs)
            except Exception as exc:
                if _is_compiler_failure(exc):
                    raise CompileError(f"torch.compile (mode {self.mode!r}) of {self.op_name!r} failed: {exc}") from exc
                raise
        if any(isinstance(a, torch.Tensor) and a.is_cuda for a in args):
            torch.cuda.synchronize()  # the first run is part of this call's time; let it finish inside it
        self.compile_seconds.append(time.perf_counter() - start)
        self.seen.add(key)
        return out


# One compiled function per (reference, mode) in this process; made on first call, never at import.
_compiled: dict[tuple[Callable[..., Any], str], CompiledReference] = {}


def compiled_reference(op: Op, mode: str | None = None) -> CompiledReference:
    """The cached compiled reference of ``op`` in ``mode`` (default: ``$KERNELKIT_COMPILE_MODE`` or "default")."""
    raw = mode or os.environ.get(MODE_ENV) or DEFAULT_MODE
    found = _compiled.get((op.reference, raw))
    if found is None:
        resolved = resolve_mode(raw)
        # dynamic=False: one kernel specialised to each shape, which is what inductor makes for a fixed-shape
        # model. With automatic dynamic shapes the second size would switch to a shape-generic kernel, so sizes
        # after the first would be run with different (usually slower) code than the first.
        fn = torch.compile(op.reference, mode=resolved, dynamic=False)
        found = _compiled[(op.reference, raw)] = CompiledReference(op.name, resolved, fn)
    return found


def baseline_impl(op: Op) -> Impl:
    """The ``compile`` impl of ``op``: same inputs and outputs as the reference (any shapes, any dtypes)."""

    def compile_baseline(*args: Any, **kwargs: Any) -> Any:
        return compiled_reference(op)(*args, **kwargs)

    description = "torch.compile of the reference: the baseline to beat (run it with --impl compile)"
    return Impl("compile", "compile", compile_baseline, description=description)


class CompileBackend(Backend):
    """Impls named ``compile``: the op's reference under torch.compile, built on its first call of each shape."""

    name = "compile"
    description = "torch.compile (inductor) of the reference"

    def prepare_process(self, device: str) -> None:
        """Inductor's cache under kernelkit's (not /tmp/torchinductor_$USER), unless the user chose one."""
        if "TORCHINDUCTOR_CACHE_DIR" not in os.environ:
            from kernelkit.cache import cache_dir

            try:
                os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(cache_dir("inductor"))
            except OSError:  # no usable cache directory: inductor keeps its default
                pass

    def build_state(self, op: Op, impl: Impl) -> dict[str, Any]:
        return {"compile_seconds": compile_seconds(op.name)}

    def build_details(self, op: Op, impl: Impl, before: dict[str, Any]) -> dict[str, Any]:
        spent = compile_seconds(op.name) - before.get("compile_seconds", 0.0)
        return {"compile_seconds": spent} if spent else {}

    def baseline_impl(self, op: Op) -> Impl:
        return baseline_impl(op)


def compile_seconds(op_name: str, mode: str | None = None) -> float:
    """Seconds this process spent compiling ``op_name``'s baseline (in ``mode``, or any): first calls only.

    Each first call of a signature is counted whole: tracing, inductor's codegen, the C++/Triton build and one run
    (microseconds to milliseconds, next to compiles of about a second).
    """
    return sum(
        sum(c.compile_seconds) for c in _compiled.values()
        if c.op_name == op_name and (mode is None or c.mode == mode)
    )


def forget_signatures() -> None:
    """Count the next call of every signature as a compile again; call after ``torch._dynamo.reset()``."""
    for compiled in _compiled.values():
        compiled.seen.clear()


def signature(args: tuple[Any, ...], kwargs: dict[str, Any]) -> Signature:
    """What Dynamo guards on with dynamic=False: each tensor's shape, strides, dtype, device and requires_grad;
    other arguments by value; and grad mode."""
    return (_key(args), _key(sorted(kwargs.items())), torch.is_grad_enabled())


def _key(value: Any) -> Hashable:
    if isinstance(value, torch.Tensor):
        return (tuple(value.shape), value.stride(), value.dtype, str(value.device), value.requires_grad)
    if isinstance(value, (list, tuple)):
        return (type(value).__name__, *(_key(v) for v in value))
    try:
        hash(value)
    except TypeError:
        return (type(value).__name__, repr(value))
    return (type(value).__name__, value)


def _is_compiler_failure(exc: BaseException) -> bool:
    """Inductor or a backend compiler failed (not the reference itself raising while traced)."""
    names = {cls.__name__ for cls in type(exc).__mro__ if (cls.__module__ or "").startswith("torch._")}
    return bool(names & {"BackendCompilerFailed", "InductorError", "CppCompileError"})
