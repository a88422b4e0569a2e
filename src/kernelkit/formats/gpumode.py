"""GPU MODE leaderboard tasks (gpu-mode/reference-kernels) as kernelkit ops.

A task directory holds ``task.yml`` (YAML, read with PyYAML's safe_load: its ``files`` map, ``tests`` and
``benchmarks``, lists of mappings such as ``{"size": 127, "seed": 4242}``), ``reference.py`` (``ref_kernel(data)``,
``generate_input(**spec)``, ``check_implementation(data, output)``) and a ``submission.py`` with
``custom_kernel(data)``. The task's files import each other by plain names (``utils``, ``task``, ``reference``), as
the ``files`` map lays them out.

The op (one per task): its sizes are the tests' specs, its bench_sizes the benchmarks' specs, each spec's values
in key order as the size tuple (``(size, seed)``); a bool is 0/1 and any other non-integer value is its index
in a table the description lists. Inputs: ``generate_input(**spec)`` with the spec's own seed for case seed 0
(GPU MODE's test exactly), else the spec's seed combined with the case seed as eval.py combines it with its
secret seed. ``data`` is handed to kernelkit as its items (a tuple of tensors becomes the inputs) and packed back
for each call. Reference: ``ref_kernel``, always at the dtypes generate_input made (the task's own precision);
impls ``reference`` and ``submission`` (``custom_kernel``). Tolerance: the atol/rtol the task gives
make_match_reference when it uses it; kernelkit's rule otherwise.

GPU MODE hands the kernel its own clone of ``data`` and lets it write there (an output buffer is part of many
tasks' data). kernelkit reports a written input as INPUT_MUTATED, so with ``copy_inputs`` (the default) every
call here gets a clone, and a timing then includes copying the inputs once, on both sides of a speedup.
"""

from __future__ import annotations

import inspect
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import torch
import yaml

from kernelkit.errors import BackendUnavailable, CompileError, LoadError, SpecError
from kernelkit.formats._imports import aliased_imports
from kernelkit.spec import DTYPE_NAMES, TOLERANCES, Impl, Op, Size, dtype_name

SUBMISSION_PLACEHOLDER = "@SUBMISSION@"
HARNESS_FILES = ("eval.py",)  # the task's evaluator: not needed to load the task


@dataclass
class Task:
    """A GPU MODE task directory, imported; ``submission_error`` says why the submission did not load."""

    directory: Path
    spec: dict[str, Any]
    reference: ModuleType
    submission: ModuleType | None = None
    submission_path: Path | None = None
    submission_error: str = ""

    @property
    def name(self) -> str:
        return self.directory.name

    @property
    def tests(self) -> list[dict[str, Any]]:
        return list(self.spec.get("tests") or [])

    @property
    def benchmarks(self) -> list[dict[str, Any]]:
        return list(self.spec.get("benchmarks") or [])


def is_task(directory: Path) -> bool:
    return directory.is_dir() and (directory / "task.yml").is_file()


def load_task(directory: str | Path, submission: str | Path | None = None) -> Task:
    """Import a task's reference (and its submission: ``submission`` or the task's own submission.py)."""
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
        task = Task(directory, spec, reference, submission_path=sub_path)
        if sub_path is not None:
            try:
                task.submission = session.load(sub_path)
                if not callable(getattr(task.submission, "custom_kernel", None)):
                    task.submission_error = f"{sub_path} defines no custom_kernel(data)"
            except LoadError as exc:
                task.submission_error = str(exc)
    return task


SPEC_LISTS = ("files", "tests", "benchmarks")  # task.yml keys kernelkit reads: each a list of mappings


def read_task_yml(path: Path) -> dict[str, Any]:
    """task.yml as a dict (YAML's safe subset). LoadError names the file and what is wrong: unreadable, not YAML,
    not a mapping, or a files/tests/benchmarks entry that is not a mapping."""
    try:
        with open(path, "rb") as stream:  # bytes: PyYAML detects the encoding and names the file in its marks
            spec = yaml.safe_load(stream)
    except OSError as exc:
        raise LoadError(f"{path}: cannot read it: {exc.strerror or exc}") from None
    except yaml.YAMLError as exc:
        raise LoadError(f"{path}{_yaml_where(exc)}: not valid YAML: {_yaml_problem(exc)}") from None
    if spec is None:  # empty, or comments only
        return {}
    if not isinstance(spec, dict):
        raise LoadError(f"{path}: not a GPU MODE task: its top level is a {type(spec).__name__}, not a mapping of "
                        f"keys such as {', '.join(SPEC_LISTS)}")
    for key in SPEC_LISTS:
        entries = spec.get(key)
        if entries is None:
            continue
        if not isinstance(entries, list):
            raise LoadError(f"{path}: {key} must be a list of mappings, got a {type(entries).__name__}")
        for n, entry in enumerate(entries, 1):
            if not isinstance(entry, dict):
                raise LoadError(f"{path}: entry {n} of {key} is {entry!r}, not a mapping such as "
                                f"{{\"size\": 127, \"seed\": 4242}}")
    return spec


def _yaml_where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    return f":{mark.line + 1}:{mark.column + 1}" if mark is not None else ""


def _yaml_problem(exc: yaml.YAMLError) -> str:
    if isinstance(exc, yaml.reader.ReaderError):  # its own text calls an undecodable byte a character
        if exc.encoding == "unicode":  # decoded: a control character
            return f"character #x{exc.character:04x} at position {exc.position} is not allowed in YAML"
        return f"not {exc.encoding} text (at byte {exc.position}: {exc.reason})"
    problem = getattr(exc, "problem", None)
    if not problem:
        return str(exc)
    context = getattr(exc, "context", None)
    return f"{problem} ({context})" if context else problem


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


# Specs as sizes -------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class ShapeCodec:
    """A task spec (a dict) <-> a kernelkit size (a tuple of non-negative ints), key by key."""

    keys: tuple[str, ...]
    tables: dict[str, tuple[Any, ...]] = field(default_factory=dict)  # keys whose values are looked up by index
    bools: frozenset[str] = frozenset()

    @classmethod
    def of(cls, specs: Sequence[dict[str, Any]]) -> ShapeCodec:
        keys = tuple(dict.fromkeys(k for spec in specs for k in spec))
        tables, bools = {}, set()
        for key in keys:
            values = [spec.get(key) for spec in specs]
            if all(isinstance(v, bool) for v in values):
                bools.add(key)
            elif not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in values):
                table: list[Any] = []  # by equality: a value may be a list (a group of shapes)
                for v in values:
                    if v not in table:
                        table.append(v)
                tables[key] = tuple(table)
        return cls(keys, tables, frozenset(bools))

    def encode(self, spec: dict[str, Any]) -> Size:
        size = []
        for key in self.keys:
            value = spec.get(key)
            size.append(self.tables[key].index(value) if key in self.tables else int(value))
        return tuple(size)

    def decode(self, size: Sequence[int]) -> dict[str, Any]:
        if len(size) != len(self.keys):
            raise SpecError(f"a size of this task has {len(self.keys)} numbers ({', '.join(self.keys)}), "
                            f"got {tuple(size)}")
        spec: dict[str, Any] = {}
        for key, value in zip(self.keys, size, strict=True):
            if key in self.tables:
                if not 0 <= value < len(self.tables[key]):
                    raise SpecError(f"{key} = {value} is not an index of its table {self.tables[key]}")
                if self.tables[key][value] is not None:
                    spec[key] = self.tables[key][value]
            else:
                spec[key] = bool(value) if key in self.bools else int(value)
        return spec

    def describe(self) -> str:
        text = f"size = ({', '.join(self.keys)})"
        for key, table in self.tables.items():
            text += f"; {key}: " + ", ".join(f"{i}={v!r}" for i, v in enumerate(table))
        return text


def combine_seed(a: int, b: int) -> int:
    """eval.py's _combine: the test's public seed and a second seed into one (a Cantor pairing)."""
    return int(a + (a + b) * (a + b + 1) // 2)


# The op ---------------------------------------------------------------------------------------------------------

def clone_data(data: Any) -> Any:
    """A copy of ``data`` with every tensor cloned, through tuples, lists and dicts (as eval.py's _clone_data)."""
    if isinstance(data, (tuple, list)):
        return type(data)(clone_data(x) for x in data)
    if isinstance(data, dict):
        return {k: clone_data(v) for k, v in data.items()}
    return data.clone() if isinstance(data, torch.Tensor) else data


def _to_device(data: Any, device: torch.device) -> Any:
    if isinstance(data, (tuple, list)):
        return type(data)(_to_device(x, device) for x in data)
    if isinstance(data, dict):
        return {k: _to_device(v, device) for k, v in data.items()}
    return data.to(device) if isinstance(data, torch.Tensor) and data.device != device else data


class Data:
    """How ``data`` was spread into kernelkit's inputs, and the dtypes generate_input gave them."""

    def __init__(self) -> None:
        self.kind: type | None = None  # tuple or list: its items are the inputs; None: data is the one input
        self.native: list[torch.dtype | None] = []

    def spread(self, data: Any) -> tuple[Any, ...]:
        self.kind = type(data) if isinstance(data, (tuple, list)) else None
        items = tuple(data) if self.kind is not None else (data,)
        self.native = [x.dtype if isinstance(x, torch.Tensor) else None for x in items]
        return items

    def pack(self, items: Sequence[Any], native: bool = False) -> Any:
        if native:  # kernelkit's float64 reference request: back to the task's own dtypes
            items = [x.to(d) if isinstance(x, torch.Tensor) and d is not None and x.dtype != d else x
                     for x, d in zip(items, self.native, strict=False)]
        return self.kind(items) if self.kind is not None else items[0]


def task_op(task: Task, *, copy_inputs: bool = True) -> Op:
    """The op of a loaded task: reference ``ref_kernel``; impls ``reference`` and (when there is a submission)
    ``submission``; sizes from the tests, bench_sizes from the benchmarks."""
    if not task.tests:
        raise LoadError(f"{task.directory / 'task.yml'} lists no tests")
    codec = ShapeCodec.of(task.tests + task.benchmarks)
    sizes = list(dict.fromkeys(codec.encode(s) for s in task.tests))
    bench = list(dict.fromkeys(codec.encode(s) for s in task.benchmarks)) or sizes
    data = Data()
    ref = task.reference

    label = dtype_label(ref.generate_input)

    def make_inputs(size: Size, dtype: torch.dtype, device: torch.device, seed: int) -> tuple[Any, ...]:
        if dtype != label:
            raise SpecError(f"{task.name}'s generate_input makes its own dtypes ({dtype_name(label)}); "
                            f"it cannot run in {dtype_name(dtype)}")
        spec = codec.decode(size)
        if seed and "seed" in spec:
            spec["seed"] = combine_seed(spec["seed"], seed)
        try:
            made = ref.generate_input(**spec)
        except Exception as exc:
            if device.type == "cpu" and not torch.cuda.is_available() and re.search(r"cuda|gpu", str(exc), re.I):
                raise BackendUnavailable(f"{task.name}'s generate_input needs a GPU: {exc}") from None
            raise
        return data.spread(_to_device(made, device))

    def call(fn: Callable[[Any], Any], native: bool = False) -> Callable[..., Any]:
        def run(*items: Any) -> Any:
            packed = data.pack(items, native)
            return fn(clone_data(packed) if copy_inputs else packed)

        run.__name__ = f"{task.name}_{getattr(fn, '__name__', 'kernel')}"
        return run

    found = match_tolerance(ref.check_implementation)
    tolerance = {d: found for d in TOLERANCES} if found else {}
    told = f"atol={found[0]:g}, rtol={found[1]:g} from check_implementation" if found else "kernelkit's rule"
    op = Op(
        name=task.name, reference=call(ref.ref_kernel, native=True), sizes=sizes, dtypes=[label],
        cpu_sizes=sizes, make_inputs=make_inputs, bench_sizes=bench, tolerance=tolerance,
        description=f"GPU MODE task {task.name}: {codec.describe()} from task.yml; dtype is read off "
                    f"generate_input; tolerance {told}",
    )
    op.impls["reference"] = Impl("reference", "eager", call(ref.ref_kernel), description="the task's ref_kernel")
    if task.submission_path is not None:
        op.impls["submission"] = _submission_impl(task, call)
    return op


def _submission_impl(task: Task, call: Callable[..., Callable[..., Any]]) -> Impl:
    path = task.submission_path
    assert path is not None
    if task.submission_error:
        message = task.submission_error

        def failed(*items: Any) -> Any:
            raise CompileError(f"the submission did not load: {message}")

        return Impl("submission", "eager", failed, description=f"custom_kernel of {path.name} (failed to load)")
    text = path.read_text(errors="replace")
    backend = "triton" if re.search(r"^\s*(import|from)\s+triton\b", text, re.M) else "eager"
    assert task.submission is not None
    return Impl("submission", backend, call(task.submission.custom_kernel), description=f"custom_kernel of {path.name}")


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
