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

import inspect
import re
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType
from typing import Any, Literal

import torch

from kernelkit.deadline import Expired, deadline
from kernelkit.errors import CompileError, LoadError, SpecError
from kernelkit.formats._imports import import_file
from kernelkit.measure.count import counted
from kernelkit.spec import CostFn, Impl, Op, Size

KERNELBENCH_SEED = 42  # eval_kernel_against_ref(seed_num=42)
KERNELBENCH_TRIALS = 5  # scripts/eval_from_generations.py: num_correct_trials = 5
# get_tolerance_for_precision (atol = rtol) at 423217d. KernelBench v0 and v0.1 (the paper's fast_p figures)
# used 1e-2 for fp32: pass tolerance=KERNELBENCH_V01_TOLERANCE to reproduce those.
KERNELBENCH_TOLERANCE: dict[torch.dtype, float] = {torch.float32: 1e-4, torch.float16: 1e-2, torch.bfloat16: 1e-2}
KERNELBENCH_V01_TOLERANCE = 1e-2
STOCHASTIC_SEED = 1234  # the seed every call of a model with active dropout starts from
InputsOn = Literal["cpu", "device"]
SHAPE_READ_S = 10.0  # reading the size label off get_inputs() on the meta device: it makes no data, so it is quick
_GENERATED = re.compile(r"level_\d+_problem_(\d+)_sample_(\d+)_kernel\.py$")  # KernelBench's generated samples


@dataclass
class Problem:
    """A KernelBench problem file, imported under a module name of its own."""

    path: Path
    module: ModuleType
    model: type
    get_inputs: Callable[[], Sequence[Any]]
    get_init_inputs: Callable[[], Sequence[Any]]

    @property
    def name(self) -> str:
        return self.path.stem


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


@contextmanager
def seeded(seed: int) -> Iterator[None]:
    """KernelBench's set_seed(seed) for the block; the CPU generator's state is put back afterwards."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # also seeds the CUDA generators, as set_seed's torch.cuda.manual_seed does
        yield


def cuda_indices(device: torch.device) -> list[int]:
    """The CUDA generator indices ``fork_rng`` must save for ``device``: none for the CPU."""
    if device.type != "cuda":
        return []
    return [device.index if device.index is not None else torch.cuda.current_device()]


def move(value: Any, device: torch.device | str, dtype: torch.dtype | None) -> Any:
    """A tensor onto ``device``, floating ones cast to ``dtype``; anything else unchanged."""
    if not isinstance(value, torch.Tensor):
        return value
    if dtype is not None and value.is_floating_point():
        return value.to(device=device, dtype=dtype)
    return value.to(device=device)


_HELD: list[Models] = []  # the problem whose models are built now (at most one: the case a worker runs)


def _hold(models: Models) -> None:
    """``models`` becomes the one problem whose models are kept: another problem's are let go (a worker goes
    through a level's problems; each one's weights, 4 GiB for a 32768^2 Linear, would stay otherwise)."""
    for other in _HELD:
        if other is not models:
            other._made.clear()
    _HELD[:] = [models]


def held_bytes(device: str) -> int:
    """Bytes of ``device`` memory the kept models hold (the worker's own cache between the cases of a problem,
    not memory a case left behind)."""
    tensors = [t for models in _HELD for model in models._made.values() if isinstance(model, torch.nn.Module)
               for t in (*model.parameters(), *model.buffers()) if t.device.type == device]
    return sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in tensors}.values())


class Models:
    """The models of one problem, built lazily per (role, device, dtype) the way KernelBench builds them."""

    def __init__(self, problem: Problem, precision: torch.dtype, build_on: InputsOn = "cpu") -> None:
        self.problem = problem
        self.precision = precision
        self.build_on = build_on
        self._init: list[Any] | None = None
        self._made: dict[tuple[str, str, torch.dtype], torch.nn.Module] = {}
        self._stochastic: bool | None = None

    def init_inputs(self) -> list[Any]:
        if self._init is None:
            with seeded(KERNELBENCH_SEED):
                self._init = list(self.problem.get_init_inputs())
        return self._init

    def get(self, role: str, cls: type, device: torch.device, dtype: torch.dtype) -> torch.nn.Module:
        key = (role, str(device), dtype)
        if key not in self._made:
            if device.type != "meta":
                _hold(self)
            init = [move(x, device, dtype) for x in self.init_inputs()]
            model = self._build(cls, init, device)
            self._made[key] = model.to(device=device, dtype=dtype) if isinstance(model, torch.nn.Module) else model
        return self._made[key]

    def _build(self, cls: type, init: list[Any], device: torch.device) -> Any:
        """``cls(*init)`` from KernelBench's seed: on the meta device there (FLOPs counted from shapes, no weights);
        on the case's device with build_on="device" (a 32768x32768 Linear initialises in milliseconds there and in
        ~13 s on one CPU core), falling back to the CPU where the constructor cannot run on the device; else on the
        CPU, as KernelBench builds."""
        here = device.type == "meta" or (self.build_on == "device" and device.type != "cpu")
        if here:
            try:
                with torch.no_grad(), torch.random.fork_rng(devices=cuda_indices(device)), torch.device(device):
                    torch.manual_seed(KERNELBENCH_SEED)
                    return cls(*init)
            except Exception:  # noqa: BLE001 - a constructor that needs the CPU (numpy, .item()) is built there
                if device.type == "meta":
                    raise
        with torch.no_grad(), seeded(KERNELBENCH_SEED):
            return cls(*init)

    def stochastic(self, device: torch.device) -> bool:
        """Whether the reference's output depends on the RNG: an active Dropout, or a random draw in forward
        (some problems draw their initial hidden state there)."""
        if self._stochastic is None:
            model = self.get("reference", self.problem.model, device, self.precision)
            self._stochastic = draws_in_forward(self.problem.model) or (isinstance(model, torch.nn.Module) and any(
                isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 and m.training for m in model.modules()
            ))
        return self._stochastic

    def runner(self, role: str, cls: type) -> Callable[..., Any]:
        """A function of the inputs that calls model ``cls`` (built for the inputs' device and dtype)."""

        def run(*inputs: Any) -> Any:
            device, dtype = _placement(inputs, self.precision)
            if not self.stochastic(device):
                with torch.no_grad():
                    return self.get(role, cls, device, dtype)(*inputs)
            # float64 masks differ from float32 ones: a random model's reference runs at the problem's precision
            low = dtype == torch.float64 and self.precision != torch.float64
            args = [move(x, device, self.precision) for x in inputs] if low else list(inputs)
            with torch.no_grad(), torch.random.fork_rng(devices=cuda_indices(device)):
                torch.manual_seed(STOCHASTIC_SEED)
                out = self.get(role, cls, device, self.precision if low else dtype)(*args)
            return _cast_outputs(out, torch.float64) if low else out

        run.__name__ = f"{self.problem.name}_{role}"
        return run


# Random draws in forward's text; a Dropout module is found on the model itself (only when p > 0).
_RANDOM_CALL = re.compile(r"\b(rand|randn|randint|randperm|rand_like|randn_like|randint_like|bernoulli|"
                          r"multinomial|normal_|uniform_|F\.dropout|functional\.dropout)\b")


def draws_in_forward(cls: type) -> bool:
    """Whether ``cls.forward``'s source calls a random function (read from the text; False when there is none)."""
    try:
        source = inspect.getsource(cls.forward)
    except (OSError, TypeError, AttributeError):
        return False
    code = "\n".join(line.split("#", 1)[0] for line in source.splitlines())
    return bool(_RANDOM_CALL.search(code))


def _placement(inputs: Sequence[Any], default: torch.dtype) -> tuple[torch.device, torch.dtype]:
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    device = tensors[0].device if tensors else torch.device("cpu")
    floating = [x.dtype for x in tensors if x.is_floating_point()]
    return device, floating[0] if floating else default


def _cast_outputs(out: Any, dtype: torch.dtype) -> Any:
    if isinstance(out, (tuple, list)):
        return type(out)(_cast_outputs(o, dtype) for o in out)
    return out.to(dtype) if isinstance(out, torch.Tensor) and out.is_floating_point() else out


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
    try:
        model_new = load_solution(path)
    except LoadError as exc:
        message = str(exc)

        def failed(*inputs: Any) -> Any:
            raise CompileError(f"the solution did not load: {message}")

        return Impl("solution", "eager", failed, description=f"ModelNew of {path.name} (failed to load)")
    text = path.read_text(errors="replace")
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

