"""KernelBench problems as kernelkit ops.

A KernelBench problem is a Python file defining ``Model(nn.Module)``, ``get_inputs()`` and ``get_init_inputs()``;
a solution file defines ``ModelNew`` with the same constructor and forward signature. KernelBench's evaluator
(``src/kernelbench/eval.py`` at commit 423217d, March 2026) does, and so does this module:

- ``torch.manual_seed(42)``, then ``init = get_init_inputs()``; ``torch.manual_seed(42)`` again before constructing
  each of ``Model(*init)`` and ``ModelNew(*init)`` (KernelBench: on the CPU, then moved to the device and cast to
  the precision; here on the case's device with the default inputs_on="device", where a 4 GiB Linear initialises
  in milliseconds instead of ~13 s, so other weights from the same seed; on the CPU with inputs_on="cpu"). The
  weights are shared only through that seed: no state_dict is copied, so a ModelNew that creates its parameters
  in another order or another way gets other weights, as it would in KernelBench.
- Inputs: ``torch.manual_seed(s)``, then ``get_inputs()``, drawn on the case's device (KernelBench draws on the
  CPU and moves them: a level-1 problem's 6 GiB input takes 6 s to draw there, milliseconds on a GPU; other
  numbers, as seeded). Here ``s`` is the case's seed; only floating tensors take the case's dtype (KernelBench casts
  integer ones too, which breaks class targets); ``inputs_on="cpu"`` draws them as KernelBench does. Its own
  verdict (verdicts.kernelbench_verdict) always draws as KernelBench does: on the CPU, with its trial seeds.
- Models run under ``torch.no_grad()``, in training mode (KernelBench never calls ``eval()``).

The op: reference = ``Model(*init)`` called on the inputs (a float64 copy of the model when kernelkit asks for
its high-precision reference); impls ``reference`` (the Model built again: a solution that is the reference must
pass) and ``solution`` (``ModelNew``). Tolerance: KernelBench's, atol = rtol = KERNELBENCH_TOLERANCE[dtype],
under kernelkit's rule (which adds twice the reference's own low-precision error). A problem's inputs are fixed,
so the op has one size: the shape of its first tensor input (a label; (0,) when it cannot be read), on every
device. A random model (an active Dropout, a torch.randn in forward) runs every call from the same fixed seed, so the
reference and a solution making the same torch RNG calls draw the same numbers (KernelBench's own verdict does not
do this: there even the reference itself fails such a problem). Cost: FLOPs counted from the Model itself
(measure.count, on the meta device where it runs there: a 4096^3 matmul problem is 2*4096^3 FLOPs and compute-bound),
unless the problem file (get_flops, get_bytes) or the caller (problem_op's flops=, bytes=) declares its own.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch

from kernelkit.deadline import Expired, deadline
from kernelkit.errors import CompileError, LoadError, SpecError
from kernelkit.formats._imports import import_file
from kernelkit.formats.kernelbench_models import (  # the models' side, named here too (a problem's one API)
    KERNELBENCH_SEED as KERNELBENCH_SEED,
)
from kernelkit.formats.kernelbench_models import (
    STOCHASTIC_SEED as STOCHASTIC_SEED,
)
from kernelkit.formats.kernelbench_models import (
    InputsOn as InputsOn,
)
from kernelkit.formats.kernelbench_models import (
    Models as Models,
)
from kernelkit.formats.kernelbench_models import (
    Problem as Problem,
)
from kernelkit.formats.kernelbench_models import (
    cuda_indices as cuda_indices,
)
from kernelkit.formats.kernelbench_models import (
    draws_in_forward as draws_in_forward,
)
from kernelkit.formats.kernelbench_models import (
    held_bytes as held_bytes,
)
from kernelkit.formats.kernelbench_models import (
    move as move,
)
from kernelkit.formats.kernelbench_models import (
    seeded as seeded,
)
from kernelkit.measure.count import counted
from kernelkit.spec import CostFn, Impl, Op, Size

KERNELBENCH_TRIALS = 5  # scripts/eval_from_generations.py: num_correct_trials = 5
# get_tolerance_for_precision (atol = rtol) at 423217d. KernelBench v0 and v0.1 (the paper's fast_p figures)
# used 1e-2 for fp32: pass tolerance=KERNELBENCH_V01_TOLERANCE to reproduce those.
KERNELBENCH_TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
KERNELBENCH_V01_TOLERANCE = 1e-2
SHAPE_READ_S = 10.0  # reading the size label off get_inputs() on the meta device: it makes no data, so it is quick
_GENERATED = re.compile(r"level_\d+_problem_(\d+)_sample_(\d+)_kernel\.py$")  # KernelBench's generated samples


def looks_like_problem(path: Path) -> bool:
    """Whether ``path`` reads like a KernelBench problem (checked on the text, nothing imported)."""
    try:
        text = path.read_text(errors="replace")
    except OSError:
        return False
    return bool(re.search(r"^class Model\b", text, re.M) and re.search(r"^def get_inputs\b", text, re.M))


def load_problem(path: str | Path) -> Problem:
    """Import a problem file; LoadError (file and line) when it fails or lacks Model / get_inputs / get_init_inputs."""
    path = Path(path).resolve()
    module = import_file(path, "kernelbench")
    missing = [n for n in ("Model", "get_inputs", "get_init_inputs") if not callable(getattr(module, n, None))]
    if missing:
        raise LoadError(f"{path} is not a KernelBench problem: it defines no {', '.join(missing)} (a problem defines "
                        "Model(nn.Module), get_inputs() and get_init_inputs())")
    return Problem(path, module, module.Model, module.get_inputs, module.get_init_inputs)


def load_solution(path: str | Path) -> type:
    """The ``ModelNew`` class of a solution file; LoadError when the file fails to import or defines none."""
    path = Path(path).resolve()
    module = import_file(path, "kernelbench_solution")
    model_new = getattr(module, "ModelNew", None)
    if not isinstance(model_new, type):
        raise LoadError(f"{path} defines no ModelNew class: a KernelBench solution defines ModelNew(nn.Module)")
    return model_new


def input_shape(problem: Problem) -> Size:
    """The op's size: the shape of the first tensor get_inputs() returns, read on the meta device (no memory), in
    at most SHAPE_READ_S (a get_inputs that hangs hangs again in the case's worker, which stops it)."""
    try:
        with torch.device("meta"), seeded(0), deadline(SHAPE_READ_S):
            inputs = list(problem.get_inputs())
    except (Exception, Expired):  # noqa: BLE001 - an input factory that needs real data only loses its size label
        return (0,)
    shapes = [tuple(x.shape) for x in inputs if isinstance(x, torch.Tensor) and x.dim() > 0]
    return shapes[0] if shapes else (0,)


def problem_op(
    problem: Problem,
    solution: str | Path | None = None,
    *,
    precision: torch.dtype = torch.float32,
    tolerance: float | None = None,
    inputs_on: InputsOn = "device",
    flops: CostFn | None = None,
    bytes: CostFn | None = None,  # noqa: A002 - the name kk.op gives the same argument
) -> Op:
    """The op of a loaded problem, with impls ``reference`` and (given a solution file) ``solution``.

    tolerance: atol = rtol for every dtype (default KernelBench's per-precision table). inputs_on: "device" (the
    default) draws get_inputs() on the case's device (a problem with 8 GiB of inputs takes ~30 s to draw on a CPU
    and milliseconds on a GPU); "cpu" draws them on the CPU and moves them (KernelBench's way: a seed gives the same
    data on every device). A solution that fails to import becomes an impl that
    raises CompileError (KernelBench's "compiled: false"), not a failed load.

    Cost: flops(*inputs) and bytes(*inputs) as kk.op takes them, else the problem file's own ``get_flops`` and
    ``get_bytes`` (same signature: the inputs forward gets), else FLOPs counted from the Model by FlopCounterMode
    (measure.count: on the meta device, where the model builds and runs there) and bytes as every input read and
    every output written once.
    """
    if inputs_on not in ("cpu", "device"):
        raise SpecError(f"inputs_on must be 'cpu' or 'device', got {inputs_on!r}")
    size = input_shape(problem)
    models = Models(problem, precision, inputs_on)

    def make_inputs(case_size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[Any, ...]:
        if tuple(case_size) != size:
            raise SpecError(f"{problem.name}: a KernelBench problem's inputs are fixed by get_inputs() "
                            f"(size {_label(size)}); it cannot run at size {_label(case_size)}")
        with seeded(seed), torch.device(device if inputs_on == "device" else "cpu"):
            inputs = list(problem.get_inputs())
        return tuple(move(x, device, dtype) for x in inputs)

    tolerances = {d: (t, t) if tolerance is None else (tolerance, tolerance) for d, t in KERNELBENCH_TOLERANCE.items()}
    op = counted(Op(
        name=problem.name, reference=models.runner("reference", problem.model), sizes=[size],
        dtypes=[precision], cpu_sizes=[size], make_inputs=make_inputs, bench_sizes=[size], tolerance=tolerances,
        bytes_fn=bytes or _declared(problem, "get_bytes"), flops_fn=flops or _declared(problem, "get_flops"),
        description=f"KernelBench problem {problem.path.parent.name}/{problem.path.name} (fixed inputs; size = "
                    f"the first input's shape)",
    ))
    op.impls["reference"] = Impl("reference", "eager", models.runner("impl_reference", problem.model),
                                 description="the problem's Model built again: a solution that is the reference")
    if solution is not None:
        op.impls["solution"] = _solution_impl(Path(solution).resolve(), models)
    return op


def _declared(problem: Problem, name: str) -> CostFn | None:
    """The problem file's own cost function ``name`` (get_flops, get_bytes), when it defines one."""
    fn = getattr(problem.module, name, None)
    return fn if callable(fn) else None


def _solution_impl(path: Path, models: Models) -> Impl:
    """ModelNew of ``path``, imported at the impl's first call (in the worker that runs it): a solution's
    import-time code never runs in the process that makes the references and judges. One that fails to import
    raises CompileError (KernelBench's "compiled: false")."""
    loaded: list[type] = []

    def model_new() -> type:
        if not loaded:
            try:
                loaded.append(load_solution(path))
            except LoadError as exc:
                raise CompileError(f"the solution did not load: {exc}") from None
        return loaded[0]

    try:
        text = path.read_text(errors="replace")
    except OSError:
        text = ""
    backend = "triton" if re.search(r"^\s*(import|from)\s+triton\b", text, re.M) else "eager"
    return Impl("solution", backend, models.runner("solution", model_new), description=f"ModelNew of {path.name}")


def _label(size: Sequence[int]) -> str:
    return "x".join(map(str, size))


def problem_files(directory: str | Path) -> list[Path]:
    """A level's problem files, in KernelBench's order (by the number their names start with)."""
    files = [p for p in Path(directory).glob("*.py") if p.name != "__init__.py"]
    return sorted(files, key=lambda p: (_problem_id(p) is None, _problem_id(p) or 0, p.name))


def _problem_id(path: Path) -> int | None:
    head = path.name.split("_", 1)[0]
    return int(head) if head.isdigit() else None


def find_solution(problem: Path, solutions: Path) -> Path | None:
    """The solution of ``problem`` in the folder ``solutions``: a file of the same name, else KernelBench's
    generated ``level_<L>_problem_<id>_sample_<k>_kernel.py`` with the problem's number (lowest k); else None."""
    same = solutions / problem.name
    if same.is_file():
        return same
    pid = _problem_id(problem)
    generated = sorted((int(m[2]), p) for p in solutions.glob("level_*_problem_*_sample_*_kernel.py")
                       if (m := _GENERATED.search(p.name)) and int(m[1]) == pid)
    return generated[0][1] if generated else None


def level_ops(
    directory: str | Path,
    solutions: str | Path | None = None,
    *,
    precision: torch.dtype = torch.float32,
    tolerance: float | None = None,
    inputs_on: InputsOn = "device",
) -> list[Op]:
    """One op per problem file of ``directory``; solutions matched in the folder ``solutions`` (see find_solution).

    A problem that fails to load is still an op: each of its cases ends in RUNTIME_ERROR with the load error.
    """
    ops = []
    for path in problem_files(directory):
        solution = find_solution(path, Path(solutions)) if solutions is not None else None
        try:
            problem = load_problem(path)
            ops.append(problem_op(problem, solution, precision=precision, tolerance=tolerance, inputs_on=inputs_on))
        except LoadError as exc:
            ops.append(broken_op(path.stem, str(exc), with_solution=solution is not None, precision=precision))
    return ops


def broken_op(name: str, message: str, *, with_solution: bool = False,
              precision: torch.dtype = torch.float32) -> Op:
    """An op standing for a problem that did not load: every case of it fails with ``message``."""

    def fail(*args: Any) -> Any:
        raise LoadError(message)

    op = Op(name=name, reference=fail, sizes=[(0,)], dtypes=[precision], cpu_sizes=[(0,)], make_inputs=fail,
            bench_sizes=[(0,)], description=f"did not load: {message.splitlines()[0]}")
    for impl in ("reference", "solution") if with_solution else ("reference",):
        op.impls[impl] = Impl(impl, "eager", fail, description="the problem did not load")
    return op

