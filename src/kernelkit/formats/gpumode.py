"""GPU MODE leaderboard tasks (gpu-mode/reference-kernels) as kernelkit ops.

A task directory holds ``task.yml`` (YAML, read with PyYAML's safe_load: its ``files`` map, ``tests`` and
``benchmarks``, lists of mappings such as ``{"size": 127, "seed": 4242}``), ``reference.py`` (``ref_kernel(data)``,
``generate_input(**spec)``, ``check_implementation(data, output)``) and a ``submission.py`` with
``custom_kernel(data)``. The task's files import each other by plain names (``utils``, ``task``, ``reference``), as
the ``files`` map lays them out.

The op (one per task): its sizes are the tests' specs followed by the benchmarks' (GPU MODE's leaderboard mode
checks every benchmark too, so ``kernelkit check`` does), its bench_sizes the benchmarks' specs; each spec's values
in key order are the size tuple (``(size, seed)``, shown as ``size=16 seed=4242``); a bool is 0/1 and any other
non-integer value is its index in a table the description lists (task_data.py). Inputs: ``generate_input(**spec)``
with the spec's own seed for case seed 0 (GPU MODE's test exactly), else the spec's seed combined with the case
seed as eval.py combines it with its secret seed. ``data`` reaches kernelkit as its tensors plus its layout
(task_data.spread), so tuples, dicts and output buffers are judged tensor by tensor, and rebuilt for each call in
whichever process makes it. Reference: ``ref_kernel``, always at the dtypes generate_input made (the task's own
precision); impls ``reference`` and ``submission`` (``custom_kernel``). Tolerance: the atol/rtol the task gives
make_match_reference when it uses it; kernelkit's rule otherwise.

GPU MODE hands the kernel its own clone of ``data`` and lets it write there (an output buffer is part of many
tasks' data). kernelkit reports a written input as INPUT_MUTATED, so with ``copy_inputs`` (the default) every
call here gets a clone, and a timing then includes copying the inputs once, on both sides of a speedup.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
from torch.overrides import TorchFunctionMode

from kernelkit.errors import BackendUnavailable, CompileError, InputError, LoadError, SpecError, describe_exception
from kernelkit.formats._imports import aliased_imports
from kernelkit.formats.task_data import (
    SEED_LIMIT,
    ShapeCodec,
    clone_data,
    combine_seed,
    fill_unwritten,
    gather,
    spread,
    to_device,
)
from kernelkit.formats.task_yml import read_task_yml
from kernelkit.spec import DTYPE_NAMES, TOLERANCES, Impl, Op, Size, dtype_name

__all__ = ["ShapeCodec", "Task", "clone_data", "combine_seed", "is_task", "load_task", "read_task_yml", "task_op"]

SUBMISSION_PLACEHOLDER = "@SUBMISSION@"
HARNESS_FILES = ("eval.py",)  # the task's evaluator: not needed to load the task


@dataclass
class Task:
    """A GPU MODE task directory with its reference imported. The submission is imported only when asked for
    (``load_submission``: in the worker that runs it), never in the process that judges it; ``submission_error``
    says why it did not load."""

    directory: Path
    spec: dict[str, Any]
    reference: ModuleType
    submission: ModuleType | None = None
    submission_path: Path | None = None
    submission_error: str = ""
    aliases: dict[str, Path] = field(default_factory=dict)  # the plain module names the task's files import
    imported: dict[Path, ModuleType] = field(default_factory=dict)  # the task's files already executed

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def tests(self) -> list[dict[str, Any]]:
        return list(self.spec.get("tests") or [])

    @property
    def benchmarks(self) -> list[dict[str, Any]]:
        return list(self.spec.get("benchmarks") or [])

    def load_submission(self) -> ModuleType | None:
        """Import the submission (once), under the task's plain names; None with ``submission_error`` set when it
        fails to import or defines no custom_kernel."""
        if self.submission is not None or self.submission_error or self.submission_path is None:
            return self.submission
        with aliased_imports(self.aliases, "gpumode") as session:
            session.loaded.update(self.imported)  # the reference and what it imported: executed once, shared
            try:
                module = session.load(self.submission_path)
            except LoadError as exc:
                self.submission_error = str(exc)
                return None
        if not callable(getattr(module, "custom_kernel", None)):
            self.submission_error = f"{self.submission_path} defines no custom_kernel(data)"
            return None
        self.submission = module
        return module


def is_task(directory: Path) -> bool:
    return directory.is_dir() and (directory / "task.yml").is_file()


def load_task(directory: str | Path, submission: str | Path | None = None) -> Task:
    """Import a task's reference; its submission (``submission`` or the task's own submission.py) is only found
    here, and imported by ``Task.load_submission`` where it runs."""
    directory = Path(directory).resolve()
    if not is_task(directory):
        raise LoadError(f"{directory} is not a GPU MODE task: it has no task.yml")
    spec = read_task_yml(directory / "task.yml")
    aliases = _task_files(directory, spec)
    sub_path = Path(submission).resolve() if submission is not None else aliases.get("submission")
    if sub_path is not None:
        aliases["submission"] = sub_path
    if "reference" not in aliases:
        raise LoadError(f"{directory} has no reference.py")
    with aliased_imports(aliases, "gpumode") as session:
        reference = session.load(aliases["reference"])
        missing = [n for n in ("ref_kernel", "generate_input", "check_implementation")
                   if not callable(getattr(reference, n, None))]
        if missing:
            raise LoadError(f"{aliases['reference']} defines no {', '.join(missing)}: a GPU MODE reference defines "
                            "ref_kernel, generate_input and check_implementation")
        task = Task(directory, spec, reference, submission_path=sub_path, aliases=dict(aliases),
                    imported=dict(session.loaded))
    return task


def _task_files(directory: Path, spec: dict[str, Any]) -> dict[str, Path]:
    """Plain module name -> file: the task's own .py files, then task.yml's ``files`` map (``../utils.py``)."""
    files = {p.stem: p for p in directory.glob("*.py")}
    for entry in spec.get("files") or []:
        name, source = entry.get("name", ""), entry.get("source", "")
        if not name.endswith(".py") or source == SUBMISSION_PLACEHOLDER or name in HARNESS_FILES:
            continue
        path = (directory / source).resolve()
        if path.is_file():
            files[name[:-3]] = path
    for harness in HARNESS_FILES:
        files.pop(harness[:-3], None)
    return files


# The op -----------------------------------------------------------------------------------------------------------

def task_op(task: Task, *, copy_inputs: bool = True) -> Op:
    """The op of a loaded task: reference ``ref_kernel``; impls ``reference`` and (when there is a submission)
    ``submission``; sizes the tests' specs and then the benchmarks' (GPU MODE's leaderboard mode checks every
    benchmark too), bench_sizes the benchmarks'. Sizes show as their specs (``size=16 seed=4242``)."""
    if not task.tests:
        raise LoadError(f"{task.directory / 'task.yml'} lists no tests")
    codec = ShapeCodec.of(task.tests + task.benchmarks)
    bench = list(dict.fromkeys(codec.encode(s) for s in task.benchmarks))
    sizes = list(dict.fromkeys([*(codec.encode(s) for s in task.tests), *bench]))
    ref = task.reference
    label = dtype_label(ref.generate_input)

    def make_inputs(size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[Any, ...]:
        if dtype != label:
            raise SpecError(f"{task.name}'s generate_input makes its own dtypes ({dtype_name(label)}); "
                            f"it cannot run in {dtype_name(dtype)}")
        spec = codec.decode(size)
        return spread(to_device(generate(task, spec, seed, device), device))

    def call(fn: Callable[[Any], Any]) -> Callable[..., Any]:
        def run(*items: Any) -> Any:
            data = gather(items)
            return fn(clone_data(data) if copy_inputs else data)

        run.__name__ = f"{task.name}_{getattr(fn, '__name__', 'kernel')}"
        return run

    found = match_tolerance(ref.check_implementation)

    def reference(*items: Any) -> Any:
        """ref_kernel at the task's own dtypes; its failure on the task's own data is the task's (INPUT_ERROR).
        Asked for the case-precision reference (``items`` not raised to float64) of a task whose tolerance
        kernelkit cannot read, ref_kernel's own casts to float64 stay at the task's dtype: that answer's error is
        the allowance kernelkit's rule adds (a float64-only reference would leave none)."""
        data = clone_data(gather(items, native=True))
        raised = any(isinstance(x, torch.Tensor) and x.dtype == torch.float64 for x in items[:-1])
        try:
            if found or raised or label == torch.float64 or not label.is_floating_point:
                return at_task_precision(ref.ref_kernel(data), data, label)
            with _NoUpcast(label):
                return at_task_precision(ref.ref_kernel(data), data, label)
        except Exception as exc:  # noqa: BLE001 - the task's reference rejects the task's own data
            raise InputError(f"{task.name}: ref_kernel raised on generate_input's data: {describe_exception(exc)}; "
                             f"the task's reference.py and its generate_input do not fit each other") from exc

    def ref_kernel(data: Any) -> Any:
        return at_task_precision(ref.ref_kernel(data), data, label)

    tolerance = {d: found for d in TOLERANCES} if found else {}
    told = f"atol={found[0]:g}, rtol={found[1]:g} from check_implementation" if found else \
        "the atol/rtol check_implementation passes match_reference for each input (else kernelkit's rule)"
    op = Op(
        name=task.name, reference=reference, sizes=sizes, dtypes=[label], cpu_sizes=sizes,
        make_inputs=make_inputs, bench_sizes=bench or sizes, tolerance=tolerance, size_label=codec.label,
        tolerance_fn=None if found else told_tolerance(ref.check_implementation, gather),
        description=f"GPU MODE task {task.name}: {codec.describe()} from task.yml (its tests, then its benchmarks); "
                    f"dtype is read off generate_input; tolerance {told}",
    )
    op.impls["reference"] = Impl("reference", "eager", call(ref_kernel), description="the task's ref_kernel")
    if task.submission_path is not None:
        op.impls["submission"] = _submission_impl(task, call)
    return op


class _NoUpcast(TorchFunctionMode):
    """float64 casts and factories inside ref_kernel made at ``dtype`` instead (``x.to(torch.float64)``,
    ``x.double()``, ``dtype=torch.float64``): the task's answer computed at the precision it asks of a submission."""

    def __init__(self, dtype: torch.dtype) -> None:
        super().__init__()
        self.dtype = dtype

    def __torch_function__(self, func: Any, types: Any, args: Any = (), kwargs: Any = None) -> Any:
        kwargs = {k: self.dtype if v is torch.float64 else v for k, v in (kwargs or {}).items()}
        if getattr(func, "__name__", "") == "double":
            return args[0].to(self.dtype)
        if getattr(func, "__name__", "") in ("to", "type"):
            args = tuple(self.dtype if a is torch.float64 else a for a in args)
        return func(*args, **kwargs)


def at_task_precision(value: Any, data: Any, label: torch.dtype) -> Any:
    """ref_kernel's answer with each float64 tensor at the precision the task asks of a submission, where the task
    works in a lower one: the dtype of the last floating tensor of ``data`` of the same shape (its output buffer,
    or an input of that shape), else generate_input's ``label`` when it is floating. A task may compute its answer
    in float64 for accuracy (prefixsum_py returns float64 while its output buffer is float32); GPU MODE compares
    values only, and kernelkit checks dtypes, so without this every submission would be INCORRECT_DTYPE."""
    if label == torch.float64:
        return value
    tensors = [x for x in spread(data)[:-1] if isinstance(x, torch.Tensor) and x.is_floating_point()]

    def lowered(out: Any) -> Any:
        if not isinstance(out, torch.Tensor) or out.dtype != torch.float64:
            return out
        same = [x.dtype for x in tensors if x.shape == out.shape and x.dtype != torch.float64]
        want = same[-1] if same else label if label.is_floating_point else None
        return out.to(want) if want is not None else out

    if isinstance(value, tuple | list):
        return type(value)(lowered(v) for v in value)
    return lowered(value)


def generate(task: Task, spec: dict[str, Any], seed: int, device: torch.device) -> Any:
    """generate_input(**spec), the spec's seed combined with ``seed`` unless it is 0 (GPU MODE's own test then).

    BackendUnavailable when it needs a GPU this process lacks; InputError, naming the task and the spec, when it
    raises otherwise (with what a combined seed asks of it, when one was given)."""
    args = dict(spec)
    combined = bool(seed) and "seed" in args
    if combined:
        args["seed"] = combine_seed(args["seed"], seed)
        if args["seed"] >= SEED_LIMIT:
            raise InputError(f"{task.name}: spec {spec} has a seed too large to combine with a second one below "
                             f"2**63 (eval.py's _combine); give task.yml seeds below 2**31")
    try:
        return fill_unwritten(lambda: task.reference.generate_input(**args))
    except Exception as exc:  # noqa: BLE001 - the task's input factory failed
        if device.type == "cpu" and not torch.cuda.is_available() and re.search(r"cuda|gpu|nvidia", str(exc), re.I):
            said = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            said = said if len(said) <= 100 else said[:97] + "..."
            raise BackendUnavailable(f"{task.name}'s generate_input makes its inputs on a GPU, and this machine "
                                     f"has none ({said}); run it on a machine with a CUDA GPU") from None
        told = f"generate_input({', '.join(f'{k}={v!r}' for k, v in args.items())}) raised {describe_exception(exc)}"
        hint = (f"; its seed is the spec's {spec['seed']} combined with the case's seed as eval.py combines a "
                f"leaderboard run's secret POPCORN_SEED (a Cantor pairing, below 2**63): generate_input must take "
                f"such seeds (torch.Generator.manual_seed does; numpy.random.seed needs seed % 2**32)"
                if combined else "; the task's reference.py fails on its own spec")
        raise InputError(f"{task.name}: {told}{hint}") from exc


def _submission_impl(task: Task, call: Callable[..., Callable[..., Any]]) -> Impl:
    """The submission's custom_kernel, imported at its first call (in the worker that runs it): a submission's
    import-time code never runs in the process that judges it. One that fails to import raises CompileError."""
    path = task.submission_path
    assert path is not None

    def custom_kernel(data: Any) -> Any:
        module = task.load_submission()
        if module is None:
            raise CompileError(f"the submission did not load: {task.submission_error}")
        return module.custom_kernel(data)

    try:
        text = path.read_text(errors="replace")
    except OSError:
        text = ""
    backend = "triton" if re.search(r"^\s*(import|from)\s+triton\b", text, re.M) else "eager"
    return Impl("submission", backend, call(custom_kernel), description=f"custom_kernel of {path.name}")


def dtype_label(generate_input: Callable[..., Any]) -> torch.dtype:
    """The first ``dtype=torch.<name>`` in generate_input's source: a label for the case (float32 if none)."""
    try:
        source = inspect.getsource(generate_input)
    except (OSError, TypeError):
        return torch.float32
    for name in re.findall(r"dtype\s*=\s*torch\.(\w+)", source):
        if name in DTYPE_NAMES:
            return DTYPE_NAMES[name]
    return torch.float32


class _Told(Exception):  # noqa: N818 - not an error: how the recording match_reference stops the check
    def __init__(self, atol: float, rtol: float) -> None:
        super().__init__(atol, rtol)
        self.atol, self.rtol = atol, rtol


def told_tolerance(check: Callable[..., Any], gather: Callable[..., Any]) -> Callable[[Any], Any]:
    """items -> (atol, rtol) that ``check`` passes to ``match_reference`` for that data (a tolerance the task works
    out from its input, as prefixsum scales it with the square root of the size), or None where the check does not
    call match_reference by that name or its tolerance is not numbers. The check runs with its module's
    ``match_reference`` swapped for one that records the tolerance and stops it: nothing is compared, no reference
    is computed, no output is read."""
    names = getattr(check, "__globals__", None)
    if not isinstance(names, dict) or not callable(names.get("match_reference")):
        return lambda items: None

    def record(data: Any, output: Any, reference: Any = None, rtol: float = 1e-05, atol: float = 1e-08) -> Any:
        raise _Told(atol, rtol)

    def tolerance(items: Any) -> tuple[float, float] | None:
        original = names.get("match_reference")
        names["match_reference"] = record
        try:
            check(gather(items), None)
        except _Told as told:
            if isinstance(told.atol, (int, float)) and isinstance(told.rtol, (int, float)):
                return float(told.atol), float(told.rtol)
        except Exception:  # noqa: BLE001 - a check that reads the output first: kernelkit's rule
            return None
        finally:
            names["match_reference"] = original
        return None

    return tolerance


def match_tolerance(check: Callable[..., Any]) -> tuple[float, float] | None:
    """(atol, rtol) when ``check`` is a make_match_reference(ref_kernel, **kwargs) closure, else None."""
    code, cells = getattr(check, "__code__", None), getattr(check, "__closure__", None)
    if code is None or not cells:
        return None
    try:
        env = {name: cell.cell_contents for name, cell in zip(code.co_freevars, cells, strict=True)}
    except ValueError:  # an empty cell
        return None
    kwargs = env.get("kwargs")
    if "reference" not in env or not isinstance(kwargs, dict):
        return None
    match = getattr(check, "__globals__", {}).get("match_reference")
    defaults = {}
    if callable(match):
        defaults = {n: p.default for n, p in inspect.signature(match).parameters.items() if p.default is not p.empty}
    atol, rtol = kwargs.get("atol", defaults.get("atol")), kwargs.get("rtol", defaults.get("rtol"))
    if not isinstance(atol, (int, float)) or not isinstance(rtol, (int, float)):
        return None
    return float(atol), float(rtol)
