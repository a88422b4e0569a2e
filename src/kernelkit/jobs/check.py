"""Check one case: run the impl on fresh inputs and judge it against the reference.

``CheckJob`` is the job the runner sends to a worker for one case; ``check_case`` does the work in the current
process (tests and debuggers may call it directly). ``judge`` holds the order of the checks of one call's outputs,
written once: the benchmark's recheck of each timed output uses it too.
"""

from __future__ import annotations

import gc
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelkit import backends, values, verify
from kernelkit.errors import BackendUnavailable, CompileError, InputError, describe_exception
from kernelkit.formats import kernelbench
from kernelkit.jobs import OnBuilt, caught_warnings, evidence, kept_sets, progress, unique
from kernelkit.jobs.evidence import CheckOptions
from kernelkit.loading import load
from kernelkit.results import CaseResult, Status
from kernelkit.spec import Case, Impl, Op, parse_dtype

# The second input set (stale-output probe) uses a seed far from any the user is likely to pick.
STALE_SEED_OFFSET = 7_919_000


@dataclass(frozen=True)
class CheckJob:
    """Check ``case`` where the job runs: its op is loaded there by the case's source; ``options``: the
    determinism call and where failing cases are saved (jobs/evidence.py)."""

    case: Case
    options: CheckOptions = CheckOptions()

    def execute(self, device: str, on_built: OnBuilt | None = None) -> CaseResult:
        """The case's result, with what the worker warned about meanwhile; every exception becomes a status."""
        notices: list[str] = []
        with caught_warnings(notices):
            try:
                op = load(self.case.source)[self.case.op]
            except Exception as exc:  # noqa: BLE001 - reported as the case's status
                result = self.failed(device, Status.RUNTIME_ERROR, describe_exception(exc))
            else:
                result = check_case(self.case, op, device, on_built, self.options)
        result.warnings = unique([*result.warnings, *notices])
        return result

    def failed(self, device: str, status: Status, message: str, log: str = "") -> CaseResult:
        case = self.case
        return CaseResult(op=case.op, impl=case.impl, backend="?", size=case.size, dtype=case.dtype, seed=case.seed,
                          device=device, status=status, message=message, log=log)


def check_case(case: Case, op: Op, device: str, on_built: OnBuilt | None = None,
               options: CheckOptions | None = None) -> CaseResult:
    """Run ``case`` and return its result; every exception becomes a status, none escapes.

    ``on_built`` is called once the impl's kernels are built and the case itself starts (the runner starts the
    case's timeout there: a first build may legitimately take a minute).
    """
    impl = op.get_impl(case.impl)
    result = CaseResult(
        op=case.op, impl=case.impl, backend=impl.backend, size=case.size, dtype=case.dtype, seed=case.seed,
        device=device, status=Status.SKIPPED,
    )
    start = time.perf_counter()
    try:
        progress.say(f"{case.impl}: building its kernels" if impl.kernels else f"{case.impl}: preparing")
        backends.ensure_runnable(impl, parse_dtype(case.dtype), device)
        if on_built is not None:
            on_built()
        progress.say(f"{case.impl}: checking against the reference")
        _check(result, op, impl, case, device, options or CheckOptions())
    except BackendUnavailable as exc:
        result.status, result.message = Status.SKIPPED, str(exc)
    except InputError as exc:
        result.status, result.message = Status.INPUT_ERROR, str(exc)
    except (CompileError, SyntaxError) as exc:
        result.status, result.message = Status.COMPILE_ERROR, describe_compile_error(exc)
    except Exception as exc:  # noqa: BLE001 - every failure of user code becomes a status
        if backends.is_compile_error(exc):
            result.status, result.message = Status.COMPILE_ERROR, describe_compile_error(exc)
        else:
            result.status, result.message = Status.RUNTIME_ERROR, describe_exception(exc)
            if device == "cuda" and backends.cuda_context_lost():
                result.status = Status.CRASHED
                result.message = f"the CUDA context is lost (the worker is replaced): {result.message}"
                result.details["context_lost"] = True
    result.seconds = time.perf_counter() - start
    return result


def _check(result: CaseResult, op: Op, impl: Impl, case: Case, device: str, options: CheckOptions) -> None:
    """One call judged (with ``options``, called again on the same inputs, and saved when it fails); the weak-test
    probes on its inputs; then a second input (a stale or unwritten output fails it). Each input set's copies and
    outputs are let go before the next is made, and a set too big to keep beside the next is not kept: a
    1.6 G-element fp32 case (6 GiB a tensor) fits an 80 GiB GPU."""
    dtype = parse_dtype(case.dtype)
    inputs, refs, los = reference_outputs(op, case.size, dtype, device, case.seed)
    atol, rtol = op.tolerance_for(dtype, inputs)
    expected = reference_kind(op, case.size, dtype, device, case.seed)
    result.bytes, result.flops = op.cost(inputs, los)
    errors = verify.reference_errors(refs, los)

    snapshot = verify.clone_inputs(inputs)
    before = backends.build_state(op, impl)
    try:
        value = _call(impl, inputs, los, device)
    except Exception:
        evidence.save_failing(result, options, case, device, snapshot, refs)  # what made it raise, without an output
        raise
    outs = verify.as_outputs(value)
    result.details.update(backends.build_details(op, impl, before))  # tuning and compile time, apart from run time
    verdict = judge(outs, refs, los, atol, rtol, inputs=inputs, snapshot=snapshot, errors=errors,
                    kinds=(verify.kind_of(value), expected))
    if options.determinism:  # the same inputs again, in fresh copies (the first call may have written its own)
        again = _call(impl, reference_outputs(op, case.size, dtype, device, case.seed)[0], los, device)
        evidence.note_determinism(result, outs, verify.as_outputs(again))
    if verdict.comparison is not None:
        result.max_abs_err = verdict.comparison.max_abs_err
        result.max_rel_err = verdict.comparison.max_rel_err
    if verdict.status is not Status.PASSED:
        result.status, result.message = verdict.status, verdict.message
        evidence.save_failing(result, options, case, device, snapshot, refs, outs)
        return
    del outs, value, snapshot
    # The probes (inputs untouched: the impl did not write them); a one-element output's constant probe needs the
    # second set's answer and runs after it, where every output has one element (with larger outputs beside it,
    # their references are let go by then, and that probe is not made).
    trivial = verify.weak_probes(inputs, refs, los, atol, rtol, errors=errors)
    single = [(r, lo, e) for r, lo, e in zip(refs, los, errors, strict=True) if lo.numel() == 1]
    del inputs, refs, los
    _let_go_if_big(op, case, dtype, device)

    # Stale or unwritten output: a second, different input must give that input's answer.
    stale_seed = case.seed + STALE_SEED_OFFSET
    inputs2, refs2, los2 = reference_outputs(op, case.size, dtype, device, stale_seed)
    snapshot2 = verify.clone_inputs(inputs2)
    value2 = _call(impl, inputs2, los2, device)
    verdict2 = judge(verify.as_outputs(value2), refs2, los2, atol, rtol, inputs=inputs2, snapshot=snapshot2,
                     kinds=(verify.kind_of(value2), expected))
    if verdict2.status is not Status.PASSED:
        result.status = verdict2.status
        result.message = f"the output did not follow a second input (seed {stale_seed}): {verdict2.message}"
        evidence.save_failing(result, options, case, device, snapshot2, refs2, verify.as_outputs(value2))
        return
    if single and "a constant" not in trivial and len(single) == len(los2):
        other = [lo2 for lo2 in los2 if lo2.numel() == 1]
        if all(verify.passes(o.to(lo.dtype), r, atol, rtol, e) for (r, lo, e), o in zip(single, other, strict=True)):
            trivial.append("a constant")
    if trivial:
        result.status = Status.WEAK
        result.message = f"{' and '.join(trivial)} would also pass: the case cannot tell a broken impl from this one"
        return
    note = verify.scale_note(refs2)
    if note:
        result.warnings.append(note)
    result.status = Status.PASSED


def _let_go_if_big(op: Op, case: Case, dtype: torch.dtype, device: str) -> None:
    """Drop the case's first input set from the kept references when it holds over a quarter of the GPU's memory:
    the second set is made next, and both together would not fit."""
    if device != "cuda":
        return
    key = (id(op), op.name, tuple(case.size), dtype, device, case.seed)
    made = _references.get(key)
    total = torch.cuda.get_device_properties(torch.cuda.current_device()).total_memory
    if made is not None and _made_bytes(made) * 4 > total:
        del _references[key]
        gc.collect()
        torch.cuda.empty_cache()


Made = tuple[tuple[Any, ...], tuple[torch.Tensor, ...], tuple[torch.Tensor, ...]]
# A worker checks every impl of one (size, dtype) in a row, then times them: the last few references are kept
# (inputs pristine; each caller gets fresh copies), so a 1 GiB case computes its float64 reference once, not
# once per impl.
_REFERENCES_KEPT = 2
_references: dict[tuple[Any, ...], Made] = {}
_kinds: dict[tuple[Any, ...], str] = {}  # the same keys: what the reference returned (verify.kind_of)


def reference_outputs(op: Op, size: tuple[int, ...], dtype: torch.dtype, device: str, seed: int,
                      keep: bool = True) -> Made:
    """Fresh inputs, the reference in float64 (fp32 where the device has no float64), and in the case dtype.
    ``keep=False``: a set used once (strict mode's secret seeds) is made without being kept, so the sets that
    every impl of a size shares stay kept.

    BackendUnavailable ("out of memory on this GPU") when they do not fit even with no earlier case's kept: the
    case is too big for the device, no impl is to blame (an impl's own out-of-memory is its RUNTIME_ERROR).
    """
    key = (id(op), op.name, tuple(size), dtype, device, seed, values.drawing_on_device())
    if not keep and key not in _references:
        return _fitting(lambda: _make_reference(op, size, dtype, device, seed), device)[0]
    if key not in _references:
        while len(_references) >= _REFERENCES_KEPT:
            oldest = next(iter(_references))
            del _references[oldest]
            _kinds.pop(oldest, None)
        _references[key], _kinds[key] = _fitting(lambda: _make_reference(op, size, dtype, device, seed), device)
    inputs, refs, los = _references[key]
    return _fitting(lambda: verify.fresh_copies(inputs), device), refs, los


def reference_kind(op: Op, size: tuple[int, ...], dtype: torch.dtype, device: str, seed: int) -> str:
    """What the reference returns on this input set (verify.kind_of: 'tensor', 'tuple', ...), noted when
    ``reference_outputs`` made it."""
    key = (id(op), op.name, tuple(size), dtype, device, seed, values.drawing_on_device())
    if key not in _kinds:
        reference_outputs(op, size, dtype, device, seed)
    return _kinds[key]


def kept_bytes(device: str) -> int:
    """Bytes of ``device`` memory the kept references hold: the worker's own cache, not memory a case left behind
    (a 64M-element fp32 case keeps 1 GiB: its input, float64 reference and fp32 reference), and the models a
    KernelBench problem keeps between its cases (its reference in float32 and float64, the Model built again)."""
    return (sum(_made_bytes(made, device) for made in _references.values()) + kernelbench.held_bytes(device)
            + kept_sets.held(device))


def _made_bytes(made: Made, device: str | None = None) -> int:
    """Bytes of one input set's tensors (on ``device``, or anywhere), each storage once."""
    seen: set[int] = set()
    total = 0
    for t in (*made[0], *made[1], *made[2]):
        if isinstance(t, torch.Tensor) and (device is None or t.device.type == device):
            storage = t.untyped_storage()
            if storage.data_ptr() not in seen:
                seen.add(storage.data_ptr())
                total += storage.nbytes()
    return total


def _fitting(make: Callable[[], Any], device: str) -> Any:
    """``make()``; on running out of memory, once more after dropping the references kept from earlier cases."""
    why = None
    for _ in range(2):
        try:
            return make()
        except Exception as exc:  # noqa: BLE001 - only running out of memory is handled here
            why = out_of_memory(exc)
            if why is None:
                raise
        _references.clear()
        gc.collect()
        if device == "cuda":
            torch.cuda.empty_cache()
    where = "this GPU" if device == "cuda" else "this machine"
    raise BackendUnavailable(f"out of memory on {where}: the case's inputs and reference do not fit: {why}")


# CUDA's and cuBLAS's "out of memory"; the CPU allocator's "can't allocate memory".
_OOM = re.compile(r"out of memory|can't allocate memory", re.I)


def out_of_memory(exc: BaseException) -> str | None:
    """The first line of the out-of-memory error in ``exc``'s chain (its cause, its context), or None."""
    seen: BaseException | None = exc
    while seen is not None:
        text = str(seen).strip()
        if isinstance(seen, torch.OutOfMemoryError) or (isinstance(seen, RuntimeError) and _OOM.search(text)):
            return text.splitlines()[0] if text else type(seen).__name__
        seen = seen.__cause__ or seen.__context__
    return None


def _make_reference(op: Op, size: tuple[int, ...], dtype: torch.dtype, device: str,
                    seed: int) -> tuple[Made, str]:
    """The input set and its references, and what the reference returned (verify.kind_of). InputError when the
    op's inputs cannot be made or its reference raises on them: no impl is to blame."""
    shown = "x".join(map(str, size))
    try:
        inputs = tuple(op.make_inputs(size, dtype, torch.device(device), seed))
    except BackendUnavailable:
        raise  # the inputs need a device this process lacks (a GPU MODE task on the CPU): SKIPPED, not the op's error
    except InputError:
        raise  # the op's own account of why (a GPU MODE task names its spec and seed)
    except Exception as exc:  # noqa: BLE001 - the op's input factory failed: reported as the op's error
        raise InputError(f"op {op.name!r}: making its inputs for size {shown} failed: {describe_exception(exc)}; "
                         f"fix its shapes= or inputs=") from exc
    try:
        try:
            refs = verify.as_outputs(op.reference(*[verify.to_reference_precision(x) for x in inputs]))
        except (RuntimeError, TypeError):
            refs = verify.as_outputs(op.reference(*[verify.to_reference_precision(x, torch.float32) for x in inputs]))
        lo = op.reference(*verify.clone_inputs(inputs))
        los = verify.as_outputs(lo)
    except InputError:
        raise
    except Exception as exc:  # noqa: BLE001 - the reference rejects the op's own inputs: not the impl's fault
        given = ", ".join("x".join(map(str, x.shape)) if isinstance(x, torch.Tensor) else type(x).__name__
                          for x in inputs)
        raise InputError(f"op {op.name!r}: its reference raised on the generated inputs ({given}) for size "
                         f"{shown}: {describe_exception(exc)}; the inputs do not fit the reference: declare each "
                         f"input's shape with shapes= (or make them with inputs=) on kk.op") from exc
    return (inputs, refs, los), verify.kind_of(lo)


def _call(impl: Impl, inputs: Sequence[Any], expected: Sequence[torch.Tensor], device: str) -> Any:
    """What the impl returned (its kind is judged: a 1-tuple is not a tensor)."""
    _poison_free_memory(expected)
    value = impl.fn(*inputs)
    if device == "cuda":
        try:
            torch.cuda.synchronize()  # surface asynchronous kernel errors inside this case
        except Exception as exc:  # noqa: BLE001 - re-raised with where it came from
            first = str(exc).strip().splitlines()[0] if str(exc).strip() else type(exc).__name__
            raise RuntimeError(f"a kernel launched by the impl failed after the impl returned: {first}") from None
    return value


def _poison_free_memory(expected: Sequence[torch.Tensor]) -> None:
    """Leave NaNs in the allocator's free blocks of the outputs' sizes, so an unwritten output shows as NaN."""
    for like in expected:
        if isinstance(like, torch.Tensor) and like.is_floating_point() and like.numel():
            torch.full_like(like, float("nan"))


def judge(
    outs: Sequence[Any], refs: Sequence[torch.Tensor], los: Sequence[torch.Tensor], atol: float, rtol: float, *,
    inputs: Sequence[Any] = (), snapshot: Sequence[Any] | None = None, errors: Sequence[float] | None = None,
    kinds: tuple[str, str] | None = None, changed: Sequence[int] | None = None,
) -> verify.Verdict:
    """The order of the checks of one call, written once: its inputs untouched (when a ``snapshot`` of them is
    given, or the positions ``changed`` as the worker that ran it found them), then the kind of its return value
    (``kinds``: what it returned and what the reference returns, as verify.check_kind reads them), its outputs'
    structure (count, kind, shape, dtype, device), then their values
    against the reference ``refs`` (tolerance: ``atol``/``rtol`` plus twice the low-precision reference ``los``'s
    own error)."""
    if changed is None:
        changed = verify.mutated_inputs(inputs, snapshot) if snapshot is not None else []
    if changed:
        which = ", ".join(f"argument {i}" for i in changed)
        return verify.Verdict(Status.INPUT_MUTATED, f"the impl changed its input ({which}); write to a new tensor")
    wrong_kind = verify.check_kind(*kinds) if kinds is not None else None
    if wrong_kind is not None:
        return wrong_kind
    bad_structure = verify.check_structure(outs, los)
    if bad_structure is not None:
        return bad_structure
    comparisons = verify.compare_outputs(outs, refs, los, atol, rtol, errors)
    worst = max(comparisons, key=lambda c: (not c.ok, c.max_abs_err))
    for i, comp in enumerate(comparisons):
        if not comp.ok:
            where = f"output {i}: " if len(comparisons) > 1 else ""
            return verify.Verdict(Status.INCORRECT_NUMERICS, where + comp.describe(), comp)
    return verify.Verdict(Status.PASSED, "", worst)


def describe_compile_error(exc: BaseException) -> str:
    """A COMPILE_ERROR's message: a SyntaxError with its file and line (``name.py:9``), else the compiler's own."""
    if isinstance(exc, SyntaxError) and exc.filename:
        line = (exc.text or "").rstrip()
        return f"SyntaxError: {exc.msg} ({exc.filename}:{exc.lineno})" + (f"\n    {line.strip()}" if line else "")
    return f"{type(exc).__name__}: {exc}"
