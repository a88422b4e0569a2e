"""Triton kernels compiled for a GPU target on a machine with no GPU, as the impl launches them for one case.

The impl's launcher runs on CPU tensors of the case with Triton's launches intercepted: each ``kernel[grid](...)``
is recorded, not run. Each recorded launch is then specialized exactly as Triton's JIT would specialize it (its
own binder: pointer dtypes, ``i32``/``i64``, constexprs, 16-byte divisibility, which decides vector widths) and
``triton.compile``d for ``sm_XY``. For an autotuned kernel, one config of its list is used (the first, or the one
asked for): which one the autotuner would pick needs a GPU.

This runs in a child process (``python -m kernelkit.backends.triton.asm``) with ``TRITON_INTERPRET=0``: where the
interpreter is on (kernelkit's CPU runs), ``@triton.jit`` makes interpreted functions, which cannot be compiled.
Checked against triton 3.6 and 3.9, which share these internals: ``JITFunction.run(*args, grid, warmup,
**kwargs)``, ``Autotuner.run``, ``create_function_from_signature``, ``JITFunction._pack_args`` and
``ASTSource(fn, signature, constexprs, attrs)``.
"""

from __future__ import annotations

import contextlib
import io
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from unittest import mock

from kernelkit.errors import BackendUnavailable, CompileError, KernelkitError, LaunchError, LoadError, SpecError

TRITON_IRS = ("ttir", "ttgir", "llir", "ptx")
CHILD_TIMEOUT_S = 300
# Set in the child before triton is imported: compile for real, compile even when Triton's cache has the kernel
# (only a real compile runs ptxas), and have Triton print ptxas's -v report (registers, spills).
_CHILD_ENV = {"TRITON_INTERPRET": "0", "TRITON_ALWAYS_COMPILE": "1", "TRITON_DUMP_PTXAS_LOG": "1"}
_ERRORS: dict[str, type[KernelkitError]] = {e.__name__: e for e in (LoadError, SpecError, LaunchError,
                                                                      BackendUnavailable)}


@dataclass(frozen=True)
class TritonBuild:
    """One launched Triton kernel, compiled for the target: its IRs, cubin and what it was specialized on."""

    name: str
    irs: dict[str, str]  # ttir, ttgir, llir, ptx
    cubin: bytes
    ptxas_log: str  # ptxas -v as Triton ran it: registers, stack frame, spill bytes
    shared: int  # bytes of shared memory per block Triton asks for at launch (dynamic)
    details: tuple[str, ...]  # signature, constexprs, specialization, config, grid, warps
    compiler: str  # "triton 3.9.0"


def compile_triton(source: str, impl: str, *, op_name: str, size: tuple[int, ...], dtype: str, arch: str,
                   config: int | None = None, seed: int = 0) -> list[TritonBuild]:
    """Compile the Triton kernels ``impl`` launches for the case, for ``arch`` (``sm_90``), in a child process.

    ``source`` is where the op is defined (a module name such as kernelkit.ops.square, or a .py path: a
    ``CaseSetup.source``); ``config`` picks an autotuned kernel's config by its index in ``configs=`` (default 0).
    LoadError/SpecError for a bad case, CompileError when Triton fails.
    """
    spec = {"source": source, "op": op_name, "impl": impl, "size": list(size), "dtype": dtype, "arch": arch,
            "config": config, "seed": seed}
    package_root = str(Path(__file__).resolve().parents[3])  # the child imports this kernelkit, not another
    path = os.pathsep.join(p for p in (package_root, os.environ.get("PYTHONPATH")) if p)
    env = {**os.environ, **_CHILD_ENV, "PYTHONPATH": path}
    with tempfile.TemporaryDirectory(prefix="kernelkit-asm-") as tmp:
        try:
            done = subprocess.run([sys.executable, "-m", __name__, json.dumps(spec), tmp], env=env,
                                  capture_output=True, text=True, timeout=CHILD_TIMEOUT_S, check=False)
        except subprocess.TimeoutExpired:
            raise CompileError(f"compiling {impl}'s Triton kernels ran over {CHILD_TIMEOUT_S} s") from None
        manifest = Path(tmp, "manifest.json")
        if done.returncode != 0 or not manifest.is_file():
            log = (done.stderr or done.stdout).strip()[-4000:]
            raise CompileError(f"compiling {impl}'s Triton kernels for {arch} failed (exit {done.returncode})", log)
        found = json.loads(manifest.read_text(encoding="utf-8"))
        if found.get("error") == "CompileError":
            raise CompileError(found["message"], found["log"])
        if "error" in found:
            raise _ERRORS.get(found["error"], KernelkitError)(found["message"])
        return [TritonBuild(k["name"], {ir: Path(tmp, f).read_text(encoding="utf-8") for ir, f in k["irs"].items()},
                            Path(tmp, k["cubin"]).read_bytes(), k["ptxas_log"], k["shared"], tuple(k["details"]),
                            found["compiler"]) for k in found["kernels"]]


# ---- the child process -----------------------------------------------------------------------------------


@dataclass
class _Launch:
    fn: Any  # triton.runtime.jit.JITFunction
    args: tuple[Any, ...]
    kwargs: dict[str, Any]
    grid: Any
    config: str | None  # the autotune config it came through, described


def _child(spec: dict[str, Any], out: Path) -> dict[str, Any]:
    import torch
    import triton

    from kernelkit.loading import load
    from kernelkit.spec import parse_dtype

    if getattr(getattr(triton, "knobs", None), "runtime", None) is not None and triton.knobs.runtime.interpret:
        raise SpecError("the Triton interpreter is on in the compiling process; TRITON_INTERPRET must be 0 there")
    op = load(spec["source"])[spec["op"]]
    impl = op.get_impl(spec["impl"])
    inputs = op.make_inputs(tuple(spec["size"]), parse_dtype(spec["dtype"]), torch.device("cpu"), spec["seed"])
    launches = _capture(lambda: impl.fn(*inputs), spec["config"] or 0)
    capability = int("".join(c for c in spec["arch"].removeprefix("sm_") if c.isdigit()))
    kernels, seen = [], set()
    for launch in launches:
        built = _compile(launch, capability)
        key = (built["name"], tuple(built["details"][:-1]))  # all but the grid
        if key in seen:  # the same kernel, specialized the same way, launched again (another grid, say)
            continue
        seen.add(key)
        stem = f"{len(kernels)}_{built['name']}"
        irs = {ir: f"{stem}.{ir}" for ir in TRITON_IRS if isinstance(built["asm"].get(ir), str)}
        for ir, file in irs.items():
            Path(out, file).write_text(built["asm"][ir], encoding="utf-8")
        Path(out, f"{stem}.cubin").write_bytes(built["asm"]["cubin"])
        kernels.append({"name": built["name"], "irs": irs, "cubin": f"{stem}.cubin", "ptxas_log": built["log"],
                        "shared": built["shared"], "details": built["details"]})
    return {"compiler": f"triton {triton.__version__}", "kernels": kernels}


def _capture(call: Callable[[], Any], config_index: int) -> list[_Launch]:
    """Run ``call`` with every Triton launch recorded instead of run; autotuners use config ``config_index``."""
    from triton.runtime.autotuner import Autotuner
    from triton.runtime.jit import JITFunction

    from kernelkit.backends.triton.autotune import format_config

    launches: list[_Launch] = []
    chosen: list[str] = []

    def record(self: Any, *args: Any, grid: Any, warmup: bool, **kwargs: Any) -> None:
        launches.append(_Launch(self, args, kwargs, grid, chosen.pop() if chosen else None))

    def tune(self: Any, *args: Any, **kwargs: Any) -> Any:
        if not 0 <= config_index < len(self.configs):
            raise SpecError(f"--config {config_index}: the autotuned kernel has {len(self.configs)} configs "
                            f"(0 to {len(self.configs) - 1})")
        picked = self.configs[config_index]
        chosen.append(f"autotune config {config_index} of {len(self.configs)} as listed (a GPU run picks the "
                      f"fastest): {format_config(picked)}")
        return self.fn.run(*args, **kwargs, **picked.all_kwargs())

    with mock.patch.object(JITFunction, "run", record), mock.patch.object(Autotuner, "run", tune):
        try:
            call()
        except SpecError:
            raise
        except Exception:
            if not launches:  # an impl may trip over the outputs its skipped launches left unwritten
                raise
    if not launches:
        raise SpecError("the impl launched no Triton kernel for this case (an empty input launches none)")
    return launches


def _compile(launch: _Launch, capability: int) -> dict[str, Any]:
    """Specialize ``launch`` with Triton's own binder for the target, then compile it; what the JIT would do."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.compiler import ASTSource, make_backend
    from triton.runtime.jit import create_function_from_signature

    fn = launch.fn
    target = GPUTarget("cuda", capability, 32)
    backend = make_backend(target)
    kwargs = {**launch.kwargs, "debug": launch.kwargs.get("debug", fn.debug) or triton.knobs.runtime.debug}
    bound, specialization, options = create_function_from_signature(fn.signature, fn.params, backend)(
        *launch.args, **kwargs)
    options, signature, constexprs, attrs = fn._pack_args(backend, kwargs, bound, specialization, options)
    log = io.StringIO()
    with contextlib.redirect_stdout(log):  # Triton prints ptxas's report (TRITON_DUMP_PTXAS_LOG)
        compiled = triton.compile(ASTSource(fn, signature, constexprs, attrs), target=target,
                                  options=options.__dict__)
    meta = compiled.metadata
    grid = launch.grid(bound) if callable(launch.grid) else launch.grid
    names = list(signature)
    typed = [f"{k}: {v}" for k, v in signature.items() if v != "constexpr"]
    fixed = [f"{names[path[0]]}={getattr(value, 'value', value)}" for path, value in constexprs.items()]
    divisible = [names[path[0]] for path, found in attrs.items() if any("divisibility" in str(a) for a in found)]
    details = [f"signature: {', '.join(typed)}", f"constexprs: {', '.join(fixed) or 'none'}",
               f"specialized as divisible by 16: {', '.join(divisible) or 'none'}",
               *([launch.config] if launch.config else []),
               f"num_warps={meta.num_warps}, num_stages={meta.num_stages}, shared memory {meta.shared} bytes "
               "(dynamic)", f"grid {tuple(grid)}"]
    return {"name": fn.__name__, "asm": compiled.asm, "log": log.getvalue(), "shared": int(meta.shared),
            "details": details}


def main(argv: list[str]) -> int:
    """``python -m kernelkit.backends.triton.asm SPEC_JSON OUT_DIR``: writes OUT_DIR/manifest.json."""
    spec, out = json.loads(argv[1]), Path(argv[2])
    try:
        result = _child(spec, out)
    except CompileError as exc:
        result = {"error": "CompileError", "message": str(exc).split("\n")[0], "log": exc.log}
    except KernelkitError as exc:
        result = {"error": type(exc).__name__, "message": str(exc)}
    except Exception as exc:  # noqa: BLE001 - Triton's CompilationError and the like: the message is the report
        result = {"error": "CompileError", "message": f"Triton failed to compile {spec['impl']} for {spec['arch']}",
                  "log": f"{type(exc).__name__}: {exc}"}
    Path(out, "manifest.json").write_text(json.dumps(result), encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
