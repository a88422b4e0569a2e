"""Open a target for a device: a built-in op name or a user's .py file, imported in a process prepared for it.

    target = open_target("my_kernels.py", device="cpu")    # the process is prepared, then the file imported
    open_target("level1/19_ReLU.py", solution="mine.py")  # a KernelBench problem, a level folder, a GPU MODE task
    target.ops                                             # the ops it names
    target.cases(impls=["triton_flat"])                    # Cases for the runner (check, bench)
    setup = target.case("triton_flat", size="64x48")       # one case with its inputs, ready to call here

The one rule this module keeps: importing triton (or numba-cuda) fixes, for the whole process, whether their
kernels run compiled or in the interpreter / simulator, and a user's file may import them at its top. So the
process is prepared for the device (``backends.prepare_process``) before the target's file is imported. Every
command and API function opens its target here; a worker prepares itself once when it starts, then ``load``s
each case's op by its source.

Outside problem formats (a KernelBench problem file or level folder, a GPU MODE task folder) are resolved here
too, and only here: ``formats.source_file`` writes a small op file that rebuilds the problem's ops, and that file
is the target's source, loaded by workers like any other.
"""

from __future__ import annotations

import inspect
import os
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path

import torch

from kernelkit import backends
from kernelkit.errors import LoadError, SpecError, did_you_mean
from kernelkit.formats import sources as formats
from kernelkit.loading import load
from kernelkit.ops import BUILTIN_OPS
from kernelkit.spec import Case, CaseSetup, Impl, Op, Size, dtype_name, to_dtype, to_size

DEVICES = ("cpu", "cuda")

def resolve_device(device: str | None) -> str:
    """None -> 'cuda' when a GPU is visible, else 'cpu'. Asking for cuda without a GPU is an error."""
    if device is None:
        return "cuda" if torch.cuda.is_available() else "cpu"
    if device not in DEVICES:
        raise SpecError(f"unknown device {device!r}; use cpu or cuda")
    if device == "cuda" and not torch.cuda.is_available():
        build = "this torch is a CPU build" if torch.version.cuda is None else "no GPU is visible"
        raise SpecError(f"--device cuda asked for, but {build}; use --device cpu")
    return device


@dataclass
class Target:
    """A target opened on one device: where its ops are defined and the ops it names.

    ``name`` is the target as given (a built-in op name or a file path); ``source`` is what a worker loads it by
    (a module name such as kernelkit.ops.square, or the file's absolute path); ``defined`` holds every op of the
    source (a built-in op's module may define several), ``ops`` those the target names.
    """

    name: str
    source: str
    device: str
    ops: list[Op]
    defined: dict[str, Op] = field(default_factory=dict)
    format: str | None = None  # 'kernelbench', 'kernelbench-level' or 'gpumode' (formats.detect); None: kernelkit's
    solution: str | None = None  # the solution file or folder given with a problem, as an absolute path

    @property
    def user_file(self) -> str | None:
        """The user's file or folder, for a run's fingerprint: the problem's path, an op file's, None when built in."""
        if self.format is not None:
            return str(Path(self.name).expanduser().resolve())
        return self.source if self.source.endswith(".py") else None


    def op(self, name: str | None = None) -> Op:
        """Op ``name`` of the source; a built-in name or a file of one op needs none."""
        if name is None and self.name in self.defined:
            return self.defined[self.name]
        if name is None and len(self.defined) == 1:
            return next(iter(self.defined.values()))
        if name is None:
            raise LoadError(f"{self.name} defines {len(self.defined)} ops ({', '.join(self.defined)}); name the one "
                            "you mean")
        if name not in self.defined:
            raise LoadError(f"no op {name!r} in {self.name}; ops there: {', '.join(self.defined)}")
        return self.defined[name]

    def cases(self, impls: Sequence[str] = (), sizes: Sequence[Size] = (), dtypes: Sequence[torch.dtype] = (),
              seeds: int = 1, ops: Sequence[Op] | None = None) -> list[Case]:
        """Every case asked for, of ``ops`` (default: the target's); see ``make_cases``."""
        return make_cases(self.source, self.ops if ops is None else ops, self.device, impls, sizes, dtypes, seeds)

    def case(self, impl: str, *, op_name: str | None = None, size: Size | str | None = None,
             dtype: torch.dtype | str | None = None, seed: int = 0, build: bool = True) -> CaseSetup:
        """Impl ``impl`` of op ``op_name`` at one size and dtype, with its inputs made on the target's device.

        size/dtype ('1823x781', 'bf16' or values) default as in ``pick``. ``build`` compiles the impl's CUDA
        kernels and raises BackendUnavailable or CompileError when the impl cannot run here, as a check would.
        """
        op = self.op(op_name)
        chosen, case_size, case_dtype = pick(op, impl, size, dtype, self.device)
        if build:
            backends.ensure_runnable(chosen, case_dtype, self.device)
        inputs = tuple(op.make_inputs(case_size, case_dtype, torch.device(self.device), seed))
        return CaseSetup(op, chosen, case_size, case_dtype, self.device, inputs, self.source)


TargetLike = str | os.PathLike | Op  # what kk.check, kk.bench_op and open_target take as a target


def target_text(target: TargetLike) -> str:
    """``target`` as the runs name it: a name or path as text; an ``Op`` as its built-in name, or the .py file that
    defines it (workers load ops from files: every op of that file runs). SpecError for an op made outside a file
    (a notebook cell, the REPL) or anything else."""
    if isinstance(target, str | os.PathLike):
        return os.fspath(target)
    if not isinstance(target, Op):
        raise SpecError(f"a target is a built-in op name, a path or an Op, not a {type(target).__name__}")
    if target.name in BUILTIN_OPS and getattr(target.reference, "__module__", "").startswith("kernelkit."):
        return target.name
    try:
        path = inspect.getsourcefile(target.reference)
    except TypeError:
        path = None
    if path is None or not Path(path).is_file():
        raise SpecError(f"op {target.name!r} was not defined in a .py file (a notebook cell or the REPL?): "
                        "workers load ops from files; put it in one and pass the file's path")
    return str(Path(path).resolve())


def open_target(target: TargetLike, device: str | None = None, solution: str | None = None) -> Target:
    """Prepare this process for ``device`` (default: cuda when a GPU is visible), then load ``target``: a
    built-in op name, a .py file of ops, a KernelBench problem file or level folder, a GPU MODE task folder, or an
    ``Op`` (see ``target_text``).

    solution: a problem's ModelNew file, a level's folder of solutions (matched by file name), or a task's
    submission file (default: the task's submission.py); a problem without one runs its reference as the solution.
    LoadError for an unknown name, a missing file or one that fails to import; SpecError for a bad device."""
    target = target_text(target)
    dev = resolve_device(device)
    backends.prepare_process(dev)  # before the target's file can import triton or numba
    source, kind = resolve_problem(target, solution)
    defined = load(source)
    named = [defined[target]] if target in BUILTIN_OPS and target in defined else list(defined.values())
    chosen = str(Path(solution).expanduser().resolve()) if solution is not None else None
    return Target(target, source, dev, named, defined, format=kind, solution=chosen)


def prepare_case(
    target: str,
    impl: str,
    *,
    op_name: str | None = None,
    size: Size | str | None = None,
    dtype: torch.dtype | str | None = None,
    device: str | None = None,
    seed: int = 0,
    build: bool = True,
    solution: str | None = None,
) -> CaseSetup:
    """Open ``target`` (see ``open_target``) on ``device`` and make one case of impl ``impl`` (see ``Target.case``)."""
    opened = open_target(target, device, solution)
    return opened.case(impl, op_name=op_name, size=size, dtype=dtype, seed=seed, build=build)


def pick(
    op: Op, impl: str, size: Size | str | None, dtype: torch.dtype | str | None, device: str
) -> tuple[Impl, Size, torch.dtype]:
    """The impl named ``impl`` and the case's size and dtype: the given ones, else the op's first size for
    ``device`` and its first dtype that the impl supports. An unknown impl is a LoadError listing the known."""
    try:
        chosen = op.get_impl(impl)
    except KeyError:
        raise LoadError(f"op {op.name!r} has no impl {impl!r}; its impls: {', '.join(op.all_impls())}") from None
    case_size = to_size(size)
    if case_size is None:
        case_size = op.sizes_for(device)[0]
    case_dtype = to_dtype(dtype)
    if case_dtype is None:
        supported = [d for d in op.dtypes if not chosen.dtypes or d in chosen.dtypes]
        case_dtype = (supported or op.dtypes)[0]
    return chosen, case_size, case_dtype


# ---- finding ops: by source, in a process already prepared -------------------------------------------------


def resolve(target: str) -> str:
    """An op name or file path as typed by the user -> a source: a module name or an absolute file path."""
    path = Path(target).expanduser()
    if target in BUILTIN_OPS and os.sep not in target:  # a built-in name wins over a file or folder named like it
        return BUILTIN_OPS[target]
    if target.endswith(".py") or os.sep in target or path.exists():
        if not path.is_file():
            what = "a folder" if path.is_dir() else "no such file"
            raise LoadError(f"{target!r}: {what}; give a built-in op ({', '.join(BUILTIN_OPS)}) or a .py file")
        if path.suffix != ".py":
            raise LoadError(f"{target!r} is not a .py file; an op file is Python, named *.py (rename it)")
        return str(path.resolve())
    raise LoadError(f"unknown op {target!r}{did_you_mean(target, BUILTIN_OPS)}; built-in ops: "
                    f"{', '.join(BUILTIN_OPS)}; or give the path of a .py file")


def resolve_problem(target: str, solution: str | None = None) -> tuple[str, str | None]:
    """(source, format): an outside problem (formats.detect) -> the generated op file and its format; anything
    else -> ``resolve(target)`` and None. A ``solution`` is only for a problem; LoadError names what is wrong."""

    path = Path(target).expanduser()
    builtin = target in BUILTIN_OPS and os.sep not in target  # a built-in name wins over a file or folder like it
    kind = formats.detect(path) if path.exists() and not builtin else None
    if kind is None:
        if path.is_dir() and not builtin:
            formats.load_ops(path)  # raises the LoadError that says what a folder must hold
        if solution is not None:
            raise LoadError(f"--solution is for a KernelBench problem, a folder of them or a GPU MODE task; {target} "
                            "is none of these")
        return resolve(target), None
    if solution is not None:
        chosen = Path(solution).expanduser()
        if not chosen.exists():
            raise LoadError(f"no such solution: {solution!r}")
        if kind == "kernelbench-level" and not chosen.is_dir():
            raise LoadError(f"the solution of a level is a folder of solution files (matched by name); {solution} "
                            "is a file")
        if kind == "gpumode" and not chosen.is_file():
            raise LoadError(f"the solution of a GPU MODE task is a submission file; {solution} is a folder")
    return formats.source_file(path, solution), kind


def make_cases(
    source: str,
    ops: Sequence[Op],
    device: str,
    impls: Sequence[str] = (),
    sizes: Sequence[Size] = (),
    dtypes: Sequence[torch.dtype] = (),
    seeds: int = 1,
) -> list[Case]:
    """Every (op, impl, size, dtype, seed) asked for. Unknown impl names are an error listing the known ones.

    No ``impls``: every registered impl. Baselines (``compile``) run when named in ``impls``.
    """
    if seeds < 1:
        raise SpecError(f"--seeds must be at least 1, got {seeds}")
    known = {name for op in ops for name in op.all_impls()}
    unknown = [name for name in impls if name not in known]
    if unknown:
        registered = ", ".join(sorted({name for op in ops for name in op.impls})) or "none"
        baselines = ", ".join(sorted({name for op in ops for name in op.baselines}))
        also = f"; baselines: {baselines}" if baselines else ""
        hint = did_you_mean(unknown[0], known)
        raise LoadError(f"unknown impl {', '.join(map(repr, unknown))}{hint}; impls here: {registered}{also}")
    cases = []
    for op in ops:
        chosen = [name for name in op.all_impls() if name in impls] if impls else list(op.impls)
        for impl in chosen:
            for size in sizes or op.sizes_for(device):
                for dtype in dtypes or op.dtypes:
                    for seed in range(seeds):
                        cases.append(Case(source, op.name, impl, tuple(size), dtype_name(dtype), seed))
    return cases
