"""Strict mode's check: the reference where the impl never runs, the impl where the reference never is.

The judging process (the one that calls ``run_cases``/``check``) makes each case's inputs and computes their
reference; the worker gets only the inputs, as bytes (``pack``), runs the impl under the guards of guards.py and
sends back, as bytes, what it returned and its inputs after each call, with what it saw (threads, late writes,
breached canaries, replaced harness objects, kernel launches). The judging process then judges every call with
``check.judge``, resolved when kernelkit was imported. Nothing of the reference ever reaches the worker.

One case is two calls; the first case of each impl in a run has the probes 2 and 3 too (3 when the op takes
the other size):
0. the case's seed (reproducible) in new memory: the build call;
1. a seed drawn here with ``secrets`` written into call 0's own tensors: same addresses, new contents, so an
   output cached by address is stale (the write moves ``_version``, as PyTorch promises: a cache keyed on it is
   correct, and what it wins is time, which strict bench sees as one output storage returned twice);
2. call 0's inputs again in new memory: an answer kept by content comes back as the same storage (replay);
3. every dimension doubled (when the op's inputs and reference take it; doubling keeps an op's divisibility
   rules): a kernel hard-coded to the listed shapes is wrong there.
"""

from __future__ import annotations

import io
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelkit import backends, verify
from kernelkit.errors import BackendUnavailable, CompileError, describe_exception
from kernelkit.jobs import OnBuilt, caught_warnings, guards, unique
from kernelkit.jobs import check as _check_module
from kernelkit.results import CaseResult, Status
from kernelkit.spec import Case, Op, parse_dtype
from kernelkit.target import load

SEAL = guards.Seal.take()  # before any user code: kernelkit is imported before it loads a user's file
_judge = _check_module.judge
FALLBACK_SHARE = 0.5  # on a GPU, more than this share of a call's device time in aten's own kernels -> FALLBACK
UNGUARDED_BACKENDS = ("compile",)  # kernelkit's own baseline: torch.compile runs unguarded (dynamo and modes)


# ---- tensors as bytes ---------------------------------------------------------------------------------------


def pack(values: Sequence[Any]) -> bytes:
    """Values as bytes: each tensor with its whole storage, strides and offset (so its layout survives), moved
    to the CPU; other values as they are. No storage is shared with the receiver."""
    items = []
    for v in values:
        if isinstance(v, torch.Tensor):
            raw = torch.empty(0, dtype=torch.uint8, device=v.device).set_(v.detach().untyped_storage())
            items.append(("tensor", raw.cpu(), v.dtype, tuple(v.shape), v.stride(), v.storage_offset(), str(v.device)))
        else:
            items.append(("value", v))
    buffer = io.BytesIO()
    torch.save(items, buffer)
    return buffer.getvalue()


def unpack(data: bytes, device: str | None = None) -> tuple[Any, ...]:
    """``pack``'s values, each tensor on ``device`` (default: where it was)."""
    items = torch.load(io.BytesIO(data), weights_only=False)
    values: list[Any] = []
    for item in items:
        if item[0] != "tensor":
            values.append(item[1])
            continue
        _, raw, dtype, shape, stride, offset, where = item
        target = torch.device(device or where)
        t = torch.empty(0, dtype=dtype, device=target)
        t.set_(raw.to(target).untyped_storage(), offset, shape, stride)
        values.append(t)
    return tuple(values)


# ---- the worker's side ----------------------------------------------------------------------------------------


@dataclass
class CallRecord:
    """What the worker saw of one call."""

    kind: str = ""  # "tensor", "tuple", "list" or another type's name: what the call returned
    outputs: bytes = b""  # pack() of the outputs (host copies taken once the call's stream was done)
    inputs_after: bytes = b""
    subclasses: list[str] = field(default_factory=list)  # outputs of a torch.Tensor subclass (type names)
    threads: list[str] = field(default_factory=list)
    late: list[int] = field(default_factory=list)  # outputs that changed after the call returned
    breaches: list[str] = field(default_factory=list)
    aliases: list[tuple[int, int]] = field(default_factory=list)  # (output, argument) sharing storage
    replays: list[tuple[int, int]] = field(default_factory=list)  # (output, earlier call) sharing storage
    poisoned: list[int] = field(default_factory=list)  # outputs never written
    error: str = ""
    kernels: list[tuple[str, float, int]] = field(default_factory=list)  # (name, device us, stream) on a GPU


@dataclass
class StrictReply:
    """The worker's answer to a StrictCallJob: a status only when the impl could not be run at all."""

    status: Status
    message: str = ""
    backend: str = "?"
    calls: list[CallRecord] = field(default_factory=list)
    launches: dict[str, int] = field(default_factory=dict)
    tampered: list[str] = field(default_factory=list)
    log: str = ""
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)


@dataclass(frozen=True)
class StrictCallJob:
    """Run ``case``'s impl on the packed input ``sets`` in ``plan`` order: (set index, 'new' or 'inplace')."""

    case: Case
    sets: tuple[bytes, ...]
    plan: tuple[tuple[int, str], ...]

    def failed(self, device: str, status: Status, message: str, log: str = "") -> StrictReply:
        return StrictReply(status, message, log=log)

    def execute(self, device: str, on_built: OnBuilt | None = None) -> StrictReply:
        notices: list[str] = []
        with caught_warnings(notices):
            reply = self._execute(device, on_built)
        reply.warnings = unique([*reply.warnings, *notices])
        return reply

    def _execute(self, device: str, on_built: OnBuilt | None) -> StrictReply:
        try:
            op = load(self.case.source)[self.case.op]
            impl = op.get_impl(self.case.impl)
        except Exception as exc:  # noqa: BLE001 - reported as the case's status
            return StrictReply(Status.RUNTIME_ERROR, describe_exception(exc), tampered=SEAL.tampered())
        reply = StrictReply(Status.PASSED, backend=impl.backend, tampered=SEAL.tampered())
        try:
            backends.ensure_runnable(impl, parse_dtype(self.case.dtype), device)
        except BackendUnavailable as exc:
            reply.status, reply.message = Status.SKIPPED, str(exc)
            return reply
        except Exception as exc:  # noqa: BLE001 - a build error
            reply.status, reply.message = _build_failure(exc)
            return reply
        if on_built is not None:
            on_built()
        guarded = impl.backend not in UNGUARDED_BACKENDS
        kept: list[torch.Tensor] = []  # earlier outputs, alive so that their storage cannot be handed out again
        previous: tuple[Any, ...] = ()
        watch = guards.LaunchWatch(impl.kernels)
        with watch:
            for number, (which, placement) in enumerate(self.plan):
                inputs = unpack(self.sets[which], device)
                if placement == "inplace" and previous:
                    with torch.no_grad():
                        for old, new in zip(previous, inputs, strict=True):
                            if isinstance(old, torch.Tensor) and old.shape == new.shape:
                                old.copy_(new)  # new contents at the same address (its _version moves, as promised)
                    inputs = previous
                record = CallRecord()
                try:
                    self._call(impl.fn, inputs, device, number, record, kept, guarded)
                except BackendUnavailable as exc:  # raised by the impl: it cannot run here (as in a plain check)
                    reply.status, reply.message = Status.SKIPPED, str(exc)
                    return reply
                except Exception as exc:  # noqa: BLE001 - the impl's failure is this call's record
                    if number == 0 and backends.is_compile_error(exc):
                        reply.status, reply.message = _build_failure(exc)
                        return reply
                    record.error = describe_exception(exc)
                reply.calls.append(record)
                if record.error and number < 3:
                    break
                previous = inputs
                reply.tampered = unique([*reply.tampered, *SEAL.tampered()])
        reply.launches = dict(watch.launches)
        return reply

    def _call(self, fn: Any, inputs: tuple[Any, ...], device: str, number: int, record: CallRecord,
              kept: list[torch.Tensor], guarded: bool) -> None:
        before = guards.live_threads()
        guard = guards.GuardedAllocations()
        profile = device == "cuda" and number == 1 and guarded
        if device == "cuda":
            torch.cuda.synchronize()
        with _profiled(profile) as prof:
            if guarded:
                with guard:
                    value = fn(*inputs)
            else:
                value = fn(*inputs)
            if device == "cuda":
                torch.cuda.current_stream().synchronize()
        record.threads = guards.new_threads(before)  # call 0's count only when it fails (a build starts pools)
        record.kind = "tensor" if isinstance(value, torch.Tensor) else type(value).__name__
        outs = value if isinstance(value, (tuple, list)) else (value,)
        record.subclasses = [type(o).__name__ for o in outs if isinstance(o, torch.Tensor) and type(o) is not
                             torch.Tensor]
        if record.subclasses:
            return  # never touched: a subclass may compute when read
        first = guards.settled_copy(outs, device)
        record.late = guards.changed_after_return(outs, first, device) if guarded else []
        record.breaches = guard.breaches(outs)
        arg_ptrs = {x.untyped_storage().data_ptr(): j for j, x in enumerate(inputs) if isinstance(x, torch.Tensor)}
        kept_ptrs = {t.untyped_storage().data_ptr(): n for n, t in kept}
        for i, o in enumerate(outs):
            if not isinstance(o, torch.Tensor) or o.numel() == 0:
                continue
            ptr = o.untyped_storage().data_ptr()
            if ptr in arg_ptrs:
                record.aliases.append((i, arg_ptrs[ptr]))
            if ptr in kept_ptrs:
                record.replays.append((i, kept_ptrs[ptr]))
            if guarded and any(f.buffer.untyped_storage().data_ptr() == ptr for f in guard.fences) and \
                    guards.is_poison(first[i]):
                record.poisoned.append(i)
        kept.extend((number, o) for o in outs if isinstance(o, torch.Tensor))
        record.outputs = pack([f if f is not None else o for f, o in zip(first, outs, strict=True)])
        record.inputs_after = pack(inputs)
        record.kind += "|" + ",".join(str(o.device) if isinstance(o, torch.Tensor) else "" for o in outs)
        if prof is not None:
            record.kernels = _device_kernels(prof)


def _build_failure(exc: BaseException) -> tuple[Status, str]:
    if isinstance(exc, (CompileError, SyntaxError)) or backends.is_compile_error(exc):
        return Status.COMPILE_ERROR, f"{type(exc).__name__}: {exc}"
    return Status.RUNTIME_ERROR, describe_exception(exc)


class _profiled:
    """torch.profiler around one call on a GPU (its kernels' names, device time and stream); else nothing."""

    def __init__(self, on: bool) -> None:
        self.on = on
        self.prof: Any = None

    def __enter__(self) -> Any:
        if not self.on:
            return None
        try:
            from torch.profiler import ProfilerActivity, profile

            self.prof = profile(activities=[ProfilerActivity.CUDA])
            self.prof.__enter__()
        except Exception:  # noqa: BLE001 - no profiler here: the launch hooks still count
            self.prof = None
        return self.prof

    def __exit__(self, *exc: object) -> None:
        if self.prof is not None:
            try:
                self.prof.__exit__(None, None, None)
            except Exception:  # noqa: BLE001
                self.prof = None


def _device_kernels(prof: Any) -> list[tuple[str, float, int]]:
    """(name, device microseconds, stream) of each kernel the profiled call ran; [] when unreadable."""
    try:
        events = prof.profiler.kineto_results.events()
        found = []
        for e in events:
            if "cuda" not in str(e.device_type()).lower():
                continue
            if "memcpy" in e.name().lower() or "memset" in e.name().lower():
                continue
            found.append((e.name(), e.duration_ns() / 1e3, int(e.device_resource_id())))
        return found
    except Exception:  # noqa: BLE001 - an older profiler: no stream or share check
        return []


# ---- the judging side -----------------------------------------------------------------------------------------

@dataclass
class Prepared:
    """One case's input sets with their references, made in the judging process."""

    inputs: list[tuple[Any, ...]]
    refs: list[tuple[torch.Tensor, ...]]
    los: list[tuple[torch.Tensor, ...]]
    kind: str
    off_size: tuple[int, ...] | None
    seeds: list[int]


def prepare(op: Op, case: Case, device: str, probes: bool = True) -> Prepared:
    """The case's seed, a secret one and (``probes``), where the op takes it, every dimension doubled."""
    dtype = parse_dtype(case.dtype)
    seeds = [case.seed, secrets.randbelow(2**31 - 1) + 1]
    made = [_check_module.reference_outputs(op, case.size, dtype, device, s) for s in seeds]
    kind = reference_kind(op, made[0][0])
    off = tuple(2 * d for d in case.size)  # doubled, not +1: an op's divisibility rules (groups, 2:4) still hold
    off_size: tuple[int, ...] | None = off if probes else None
    try:
        if off_size is None:
            raise LookupError("no size probe")
        made.append(_check_module.reference_outputs(op, off, dtype, device, secrets.randbelow(2**31 - 1) + 1))
    except Exception:  # noqa: BLE001 - the op does not take that size: no probe
        off_size = None
    return Prepared([m[0] for m in made], [m[1] for m in made], [m[2] for m in made], kind, off_size, seeds)


def reference_kind(op: Op, inputs: Sequence[Any]) -> str:
    """'tensor' when the reference returns one tensor, else 'tuple:<n>'."""
    value = op.reference(*verify.clone_inputs(inputs))
    return "tensor" if isinstance(value, torch.Tensor) else f"tuple:{len(verify.as_outputs(value))}"


def strict_case(case: Case, op: Op, device: str, run: Any, tampered_here: Sequence[str] = (),
                probes: bool = True) -> CaseResult:
    """Check ``case`` in strict mode: ``run(job)`` runs a StrictCallJob where the impl lives (a worker) and
    returns its StrictReply; the references stay here. Every exception becomes a status. ``probes``: calls 2
    and 3 too (a run makes them for the first case of each impl: they cost a call each)."""
    result = CaseResult(op=case.op, impl=case.impl, backend="?", size=case.size, dtype=case.dtype, seed=case.seed,
                        device=device, status=Status.PASSED, details={"strict": True})
    start = time.perf_counter()
    try:
        _strict(result, case, op, device, run, tampered_here, probes)
    except Exception as exc:  # noqa: BLE001 - the reference or the harness failed: reported, never raised
        result.status, result.message = Status.RUNTIME_ERROR, describe_exception(exc)
    result.seconds = time.perf_counter() - start
    return result


def _strict(result: CaseResult, case: Case, op: Op, device: str, run: Any, tampered_here: Sequence[str],
            probes: bool) -> None:
    if tampered_here:
        result.status = Status.CHEATED
        result.message = guards.describe_tampering(list(tampered_here), "loading the target")
        return
    prepared = prepare(op, case, device, probes)
    plan = [(0, "new"), (1, "inplace")] + ([(0, "new")] if probes else []) + ([(2, "new")] if prepared.off_size else [])
    job = StrictCallJob(case, tuple(pack(x) for x in prepared.inputs), tuple(plan))
    reply: StrictReply = run(job)
    result.backend = reply.backend
    result.warnings = list(reply.warnings)
    if reply.log:
        result.log = reply.log
    result.details.update(reply.details)
    if reply.tampered:
        result.status = Status.CHEATED
        result.message = guards.describe_tampering(reply.tampered, "the impl's module or call")
        return
    if reply.status is not Status.PASSED:
        result.status, result.message = reply.status, reply.message
        return
    dtype = parse_dtype(case.dtype)
    atol, rtol = op.tolerance_for(dtype)
    result.bytes, result.flops = op.cost(prepared.inputs[0], prepared.los[0])
    outputs: list[tuple[Any, ...]] = []
    for number, ((which, _), record) in enumerate(zip(plan, reply.calls, strict=False)):
        verdict = _judge_call(number, which, record, prepared, outputs, atol, rtol, device)
        if verdict is not None:
            result.status, result.message = verdict
            if number == 3 and verdict[0] is Status.RUNTIME_ERROR:  # the impl does not take the other size
                result.status, result.message = Status.PASSED, ""
                result.warnings.append(f"strict: the impl raised at the unlisted size "
                                       f"{'x'.join(map(str, prepared.off_size or ()))}, not judged there")
                break
            return
    watched = [n for n in reply.launches]
    if watched and not any(reply.launches.values()):
        result.status = Status.FALLBACK
        result.message = (f"the declared kernel{'s' if len(watched) > 1 else ''} {', '.join(watched)} never "
                          "launched: the impl computed its answer some other way (a fallback?)")
        return
    share = _aten_share(reply.calls)
    if watched and share is not None and share > FALLBACK_SHARE:
        result.status = Status.FALLBACK
        result.message = f"{share:.0%} of the call's device time is in aten's own kernels, not its declared ones"
        return
    streams = {s for c in reply.calls for _, _, s in c.kernels}
    if len(streams) > 1:
        result.status = Status.CHEATED
        result.message = f"the call's kernels ran on {len(streams)} streams: all of its work belongs on the timed one"
        return
    trivial = verify.weak_probes(prepared.inputs[0], prepared.refs[0], prepared.los[0], atol, rtol,
                                 other=prepared.los[1])
    if trivial:
        result.status = Status.WEAK
        result.message = f"{' and '.join(trivial)} would also pass: the case cannot tell a broken impl from this one"
        return
    note = verify.scale_note(prepared.refs[0])
    if note:
        result.warnings.append(note)
    result.status = Status.PASSED


def _judge_call(number: int, which: int, record: CallRecord, prepared: Prepared, earlier: list[tuple[Any, ...]],
                atol: float, rtol: float, device: str) -> tuple[Status, str] | None:
    """None when call ``number`` is right; else its status and why, in the order: it ran, it cheated (subclass,
    thread, late writes, out of bounds), its structure and kind, its values (replay and unwritten named)."""
    when = ["", "on fresh inputs written over the first call's (same addresses): ",
            "on the first inputs again, in new memory: ", "at the unlisted size "][number]
    if number == 3:
        when += "x".join(map(str, prepared.off_size or ())) + " (hard-coded shapes?): "
    if record.error:
        return Status.RUNTIME_ERROR, f"{when}{record.error}".strip()
    if record.subclasses:
        return Status.CHEATED, (f"it returned a {record.subclasses[0]}, a torch.Tensor subclass: outputs must be "
                                "plain tensors (a subclass can compute when it is compared)")
    if record.threads and number > 0:
        return Status.CHEATED, (f"a thread the call started ({', '.join(record.threads)}) was still running when it "
                                "returned: work outside the timed call")
    if record.late:
        return Status.CHEATED, (f"output {record.late[0]} changed after the call returned and its stream was done: "
                                "work left running on another stream or thread")
    if record.breaches:
        return Status.OUT_OF_BOUNDS, "; ".join(record.breaches)
    kind, _, devices = record.kind.partition("|")
    want_tensor = prepared.kind == "tensor"
    if want_tensor and kind != "tensor":
        return Status.INCORRECT_SHAPE, (f"it returned a {kind} where the reference returns a tensor")
    if not want_tensor and kind not in ("tuple", "list"):
        return Status.INCORRECT_SHAPE, f"it returned a {kind} where the reference returns a tuple"
    places = devices.split(",")
    outs = tuple(o.to(places[i]) if isinstance(o, torch.Tensor) and places[i] else o
                 for i, o in enumerate(unpack(record.outputs, "cpu")))
    after = unpack(record.inputs_after)
    verdict = _judge(outs, prepared.refs[which], prepared.los[which], atol, rtol, inputs=after,
                     snapshot=prepared.inputs[which])
    if record.aliases and verdict.status is Status.PASSED:
        i, j = record.aliases[0]
        return Status.CHEATED, f"{when}output {i} shares its storage with argument {j}: write a new tensor".strip()
    if record.replays:
        i, j = record.replays[0]
        return Status.CHEATED, (f"{when}output {i} is call {j}'s output again (same storage): an answer replayed, "
                                "not computed").strip()
    if verdict.status is not Status.PASSED and record.threads:
        return Status.CHEATED, (f"{when}a thread the call started ({', '.join(record.threads)}) was still running "
                                f"when it returned, and the output was wrong then: {verdict.message}").strip()
    if verdict.status is Status.INCORRECT_NUMERICS:
        for j, old in enumerate(earlier):
            if len(old) == len(outs) and all(isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)
                                             and a.shape == b.shape and a.dtype == b.dtype and
                                             torch.equal(a.cpu(), b.cpu()) for a, b in zip(old, outs, strict=True)):
                return Status.CHEATED, (f"{when}it returned call {j}'s answer for different inputs: an output "
                                        "replayed (keyed on the inputs' address or version?)").strip()
        if record.poisoned:
            return Status.INCORRECT_NUMERICS, (
                f"{when}output {record.poisoned[0]} was never written (still the poison its torch.empty memory "
                "was filled with; no reference output exists in the impl's process to read)").strip()
    earlier.append(outs)
    if verdict.status is not Status.PASSED:
        return verdict.status, f"{when}{verdict.message}".strip()
    return None


def _aten_share(calls: Sequence[CallRecord]) -> float | None:
    kernels = [k for c in calls for k in c.kernels]
    total = sum(us for _, us, _ in kernels)
    if not kernels or total <= 0:
        return None
    return sum(us for name, us, _ in kernels if "at::native" in name) / total


# ---- a strict run ----------------------------------------------------------------------------------------------

_builtin: dict[int, tuple[Any, ...]] = {}


def _op_state(op: Op) -> tuple[Any, ...]:
    return (op.reference, op.make_inputs, dict(op.tolerance), op.bytes_fn, op.flops_fn, op.name)


def seal_builtin_ops() -> None:
    """Record what each built-in op is (reference, inputs, tolerance, cost) before a user's file is imported: a
    file that changes one of them is then told apart from one that uses it."""
    from kernelkit.ops import BUILTIN_OPS

    for module in dict.fromkeys(BUILTIN_OPS.values()):
        for op in load(module).values():
            _builtin.setdefault(id(op), (op, _op_state(op)))


def builtin_changes(op: Op) -> list[str]:
    """What of built-in op ``op`` differs from its sealed state (empty for a user's own op)."""
    sealed = _builtin.get(id(op))
    if sealed is None or sealed[0] is not op:
        return []
    names = ("reference", "make_inputs", "tolerance", "bytes_fn", "flops_fn", "name")
    now = _op_state(op)
    return [f"built-in op {sealed[1][5]!r}'s {n}" for n, a, b in zip(names, sealed[1], now, strict=True)
            if (a != b if n == "tolerance" else a is not b)]


class StrictChecker:
    """Strict checks of the cases of one run, judged in this process; ``worker`` (a runner.Worker) runs the impl,
    or, without one, the impl runs here too (every check but the reference's isolation)."""

    def __init__(self, device: str, worker: Any = None, timeout: float = 60.0) -> None:
        self.device = device
        self.worker = worker
        self.timeout = timeout
        self.tampered = SEAL.tampered()  # the target was imported here already (planning): did it change any?
        self.probed: set[tuple[str, str, str]] = set()

    def check(self, case: Case) -> CaseResult:
        try:
            op = load(case.source)[case.op]
        except Exception as exc:  # noqa: BLE001 - reported as the case's status
            return CaseResult(op=case.op, impl=case.impl, backend="?", size=case.size, dtype=case.dtype,
                              seed=case.seed, device=self.device, status=Status.RUNTIME_ERROR,
                              message=describe_exception(exc))
        changed = [*self.tampered, *builtin_changes(op)]

        def run(job: StrictCallJob) -> StrictReply:
            if self.worker is None:
                return job.execute(self.device)
            return self.worker.run(job, self.timeout)

        first = (case.source, case.op, case.impl) not in self.probed
        self.probed.add((case.source, case.op, case.impl))
        result = strict_case(case, op, self.device, run, changed, probes=first)
        if self.worker is not None and result.status is Status.CHEATED and any(
                word in result.message for word in ("replaced", "thread")):
            self.worker.stop()  # a replaced harness object or a stray thread must not meet the next case
        return result
