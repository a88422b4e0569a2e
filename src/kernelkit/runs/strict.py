"""Strict mode's check: the reference where the impl never runs, the impl where the reference never is.

The judging process (the one that calls ``run_cases``/``check``) makes each case's inputs and computes their
reference; the worker (strict_worker.py) gets only the inputs' sizes and seeds, makes them again and shows by
their fingerprint that they are the judge's (else the case's sets go as bytes), runs the impl under the guards of
guards.py and sends back, as data (kernelkit.wire), what it returned and which of its arguments each call
changed, with what it saw (threads, late writes, breached canaries, replaced harness objects, kernel launches).
The judging process then judges every call with ``check.judge``, resolved when kernelkit was imported. Nothing
of the reference ever reaches the worker.

One case is two calls; the first case of each impl in a run has the probes 2 and 3 too (3 when the op takes
the other size):
0. the case's seed (reproducible) in new memory: the build call;
1. a seed drawn here with ``secrets`` (drawn on the device: values.device_draws) written into call 0's own
   tensors: same addresses, new contents, so an output cached by address is stale (the write moves ``_version``,
   as PyTorch promises: a cache keyed on it is correct, and what it wins is time, which strict bench sees as one
   output storage returned twice);
2. call 0's inputs again in new memory: an answer kept by content comes back as the same storage (replay);
3. every dimension doubled (when the op's inputs and reference take it; doubling keeps an op's divisibility
   rules): a kernel hard-coded to the listed shapes is wrong there.
"""

from __future__ import annotations

import math
import secrets
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from kernelkit import values, verify, wire
from kernelkit.deadline import Expired, deadline
from kernelkit.errors import BackendUnavailable, InputError, describe_exception
from kernelkit.jobs import caught_warnings, evidence, seal, unique
from kernelkit.jobs import check as _check_module
from kernelkit.jobs.evidence import CheckOptions
from kernelkit.jobs.strict_worker import (
    SEAL,
    CallRecord,
    Drawn,
    StrictCallJob,
    StrictReply,
    fingerprint,
    pack,
    unpack,
)
from kernelkit.loading import load
from kernelkit.results import CaseResult, Status
from kernelkit.runs.sealing import builtin_changes, seal_builtin_ops, target_tampering
from kernelkit.spec import Case, Op, parse_dtype
from kernelkit.units import format_bytes

__all__ = ["SEAL", "StrictChecker", "pack", "seal_builtin_ops", "strict_case", "unpack"]

_judge = _check_module.judge  # resolved when kernelkit is imported, before any user code
# On a GPU, more than this share of a call's device time in aten's own kernels -> FALLBACK. Not half: an honest
# elementwise kernel fed a non-contiguous input spends about half its time in aten's copy to contiguous.
FALLBACK_SHARE = 0.8
# The unlisted-size probe runs where the case's own inputs take at most this much: every dimension doubled, a
# large first case takes 2^d times its memory in both processes (a task's one size N makes N x N tensors: 4x), its
# float64 reference more; on a CPU the OOM killer ends the run instead of an error.
PROBE_BYTES = 128 << 20


# ---- the judging side -----------------------------------------------------------------------------------------

@dataclass
class Prepared:
    """One case's input sets with their references, made in the judging process."""

    inputs: list[tuple[Any, ...]]
    refs: list[tuple[torch.Tensor, ...]]
    los: list[tuple[torch.Tensor, ...]]
    kind: str
    off_size: tuple[int, ...] | None
    draws: list[tuple[tuple[int, ...], int, bool]]  # each set's (size, seed, drawn on the device)
    note: str = ""  # why the size probe was left out, where a caller asked for it

    def sets(self) -> tuple[bytes | Drawn, ...]:
        """The sets as the worker makes them again (jobs/strict_worker.Drawn), with their fingerprints; as bytes
        where a set has no fingerprint (an input torch cannot read as plain values, such as a tensor subclass)."""
        try:
            return tuple(Drawn(size, seed, on_device, fingerprint(inputs))
                         for (size, seed, on_device), inputs in zip(self.draws, self.inputs, strict=True))
        except Exception:  # noqa: BLE001 - no fingerprint: the bytes themselves
            return tuple(pack(x) for x in self.inputs)


def prepare(op: Op, case: Case, device: str, probes: bool = True, timeout: float | None = None) -> Prepared:
    """The case's seed, a secret one and (``probes``), where the op takes it, every dimension doubled. ``timeout``:
    seconds for the first two sets (Expired past them), and again for the probe's (no probe past them)."""
    dtype = parse_dtype(case.dtype)
    seeds = [case.seed, secrets.randbelow(2**31 - 1) + 1]
    with deadline(timeout or 0):
        made = [_check_module.reference_outputs(op, case.size, dtype, device, seeds[0])]
        with values.device_draws():  # a secret set need only be the same where the same device makes it again
            made.append(_check_module.reference_outputs(op, case.size, dtype, device, seeds[1], keep=False))
        kind = reference_kind(op, made[0][0])
    draws = [(tuple(case.size), seeds[0], False), (tuple(case.size), seeds[1], True)]
    off = tuple(2 * d for d in case.size)  # doubled, not +1: an op's divisibility rules (groups, 2:4) still hold
    held = sum(t.numel() * t.element_size() for t in made[0][0] if isinstance(t, torch.Tensor))
    off_size: tuple[int, ...] | None = off if probes and held <= PROBE_BYTES else None
    note = "" if not probes or off_size else (
        f"strict: the unlisted-size probe (hard-coded shapes) was left out: this case's inputs take "
        f"{format_bytes(held)} (more than {format_bytes(PROBE_BYTES)}), and the probe doubles every dimension")
    try:
        if off_size is None:
            raise LookupError("no size probe")
        seed = secrets.randbelow(2**31 - 1) + 1
        with deadline(timeout or 0), values.device_draws():
            made.append(_check_module.reference_outputs(op, off, dtype, device, seed, keep=False))
        draws.append((off, seed, True))
    except (Exception, Expired):  # noqa: BLE001 - the op does not take that size (or not in time): no probe
        off_size = None
    return Prepared([m[0] for m in made], [m[1] for m in made], [m[2] for m in made], kind, off_size, draws, note)


def reference_kind(op: Op, inputs: Sequence[Any]) -> str:
    """'tensor' when the reference returns one tensor, else 'tuple:<n>'."""
    value = op.reference(*verify.clone_inputs(inputs))
    return "tensor" if isinstance(value, torch.Tensor) else f"tuple:{len(verify.as_outputs(value))}"


def strict_case(case: Case, op: Op, device: str, run: Any, tampered_here: Sequence[str] = (),
                probes: bool = True, timeout: float | None = None, options: CheckOptions | None = None) -> CaseResult:
    """Check ``case`` in strict mode: ``run(job)`` runs a StrictCallJob where the impl lives (a worker) and
    returns its StrictReply; the references stay here. Every exception becomes a status. ``probes``: calls 2
    and 3 too (a run makes them for the first case of each impl: they cost a call each). ``timeout``: seconds
    for making the inputs and references here (and for counting the case's cost), past which the case is
    TIMEOUT (deadline.py: this process stops the op's code itself). ``options``: with ``determinism`` call 2 is
    made for every case and its outputs compared bitwise with call 0's; ``save_failing``: a failing call's
    tensors saved from here (jobs/evidence.py)."""
    result = CaseResult(op=case.op, impl=case.impl, backend="?", size=case.size, dtype=case.dtype, seed=case.seed,
                        device=device, status=Status.PASSED, details={"strict": True})
    start = time.perf_counter()
    notices: list[str] = []  # what the op's own code warned of here (its inputs, its reference), as a worker's
    try:
        with caught_warnings(notices, echo=False):
            _strict(result, case, op, device, run, tampered_here, probes, timeout, options or CheckOptions())
    except BackendUnavailable as exc:  # the inputs need what this process lacks (a task's inputs made on a GPU)
        result.status, result.message = Status.SKIPPED, str(exc)
    except InputError as exc:  # the op's own inputs or reference failed: not the impl's fault
        result.status, result.message = Status.INPUT_ERROR, str(exc)
    except Exception as exc:  # noqa: BLE001 - the reference or the harness failed: reported, never raised
        result.status, result.message = Status.RUNTIME_ERROR, describe_exception(exc)
    except Expired as exc:
        result.status, result.message = Status.TIMEOUT, judging_timeout(exc.seconds)
    except SystemExit as exc:  # the op's own code, run here, called exit(): the case fails, the run goes on
        result.status = Status.RUNTIME_ERROR
        result.message = f"the op's own code (its inputs or reference, run here) called exit({exc.code!r})"
    result.warnings = unique([*result.warnings, *notices])
    result.seconds = time.perf_counter() - start
    return result


def judging_timeout(seconds: float) -> str:
    """A TIMEOUT's message when the op's own code ran past the limit in the judging process."""
    return (f"the op's own inputs and reference, made in this process for strict mode, gave no result after "
            f"{seconds:g} s (the case limit, --timeout {seconds:g}): its input factory or reference hangs, or is only "
            "slow (then raise --timeout)")


def _strict(result: CaseResult, case: Case, op: Op, device: str, run: Any, tampered_here: Sequence[str],
            probes: bool, timeout: float | None, options: CheckOptions) -> None:
    if tampered_here:
        result.status = Status.CHEATED
        result.message = seal.describe_tampering(list(tampered_here), "loading the target")
        return
    clock = time.perf_counter()
    prepared = prepare(op, case, device, probes, timeout)
    again = probes or options.determinism  # call 2: call 0's inputs again, in new memory
    plan = [(0, "new"), (1, "inplace")] + ([(0, "new")] if again else []) + ([(2, "new")] if prepared.off_size else [])
    job = StrictCallJob(case, prepared.sets(), tuple(plan))
    spent = result.details.setdefault("strict_s", {})  # where a strict case's time goes (scripts/gpu-strict)
    spent["prepare"], clock = time.perf_counter() - clock, time.perf_counter()
    reply: StrictReply = run(job)
    if "undrawn" in reply.details:  # the worker made other inputs from the same seeds: the sets go as bytes
        reply = run(StrictCallJob(case, tuple(pack(x) for x in prepared.inputs), tuple(plan)))
        reply.warnings.append("strict: this op's inputs were not the same when the worker made them again from "
                              "their seeds (inputs that are not a function of their seed?): they were sent as bytes")
    spent["worker"], clock = time.perf_counter() - clock, time.perf_counter()
    spent.update({f"worker_{k}": v for k, v in reply.details.pop("strict_s", {}).items()})
    result.backend = reply.backend
    result.warnings = [*reply.warnings, *([prepared.note] if prepared.note else [])]
    if reply.log:
        result.log = reply.log
    result.details.update(reply.details)
    if reply.tampered:
        result.status = Status.CHEATED
        result.message = seal.describe_tampering(reply.tampered, "the impl's module or call")
        return
    if reply.status is not Status.PASSED:
        result.status, result.message = reply.status, reply.message
        return
    dtype = parse_dtype(case.dtype)
    atol, rtol = op.tolerance_for(dtype, prepared.inputs[0])  # the first set's (the weak probes' below)
    with deadline(timeout or 0):  # FLOPs may be counted by running the reference
        result.bytes, result.flops = op.cost(prepared.inputs[0], prepared.los[0])
    late = target_tampering()  # the op's own code ran here since (its inputs, its reference, its cost)
    if late:
        result.status = Status.CHEATED
        result.message = seal.describe_tampering(late, "the target's own code, run here for its references,")
        return
    outputs: list[tuple[Any, ...]] = []
    worst: list[Any] = []  # the comparison of each call judged, for the result's errors
    for number, ((which, _), record) in enumerate(zip(plan, reply.calls, strict=False)):
        # each set judged at its own tolerance (a task's may scale with its size)
        verdict = _judge_call(number, which, record, prepared, outputs,
                              *op.tolerance_for(dtype, prepared.inputs[which]), worst)
        spent["judge"] = time.perf_counter() - clock
        if worst and worst[0] is not None and result.max_abs_err is None:
            result.max_abs_err, result.max_rel_err = worst[0].max_abs_err, worst[0].max_rel_err
        if verdict is not None:
            result.status, result.message = verdict
            if number == 3 and verdict[0] is Status.RUNTIME_ERROR:  # the impl does not take the other size
                result.status, result.message = Status.PASSED, ""
                result.warnings.append(f"strict: the impl raised at the unlisted size "
                                       f"{'x'.join(map(str, prepared.off_size or ()))}, not judged there")
                break
            evidence.save_failing(result, options, case, device, prepared.inputs[which], prepared.refs[which],
                                  _returned(record))
            return
    if options.determinism and len(outputs) > 2:
        evidence.note_determinism(result, outputs[0], outputs[2])
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


def _returned(record: CallRecord) -> tuple[Any, ...]:
    """What the call returned, as the worker sent it (data only: tensors, plain values, Opaque markers)."""
    if not isinstance(record.outputs, tuple | list):
        raise wire.WireError(f"the worker sent outputs of type {type(record.outputs).__name__}, not a sequence")
    return tuple(record.outputs)


def _judge_call(number: int, which: int, record: CallRecord, prepared: Prepared, earlier: list[tuple[Any, ...]],
                atol: float, rtol: float, comparisons: list[Any]) -> tuple[Status, str] | None:
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
    if record.streams:
        return Status.CHEATED, (f"{when}work of the call went to another stream than the timed one: "
                                f"{'; '.join(record.streams[:2])}. All of a call's work belongs on the stream it "
                                "was called on: the timer's events wait for no other").strip()
    if record.late:
        return Status.CHEATED, (f"output {record.late[0]} changed after the call returned and its stream was done: "
                                "work left running on another stream or thread")
    if record.breaches:
        return Status.OUT_OF_BOUNDS, "; ".join(record.breaches)
    kind, _, devices = record.kind.partition("|")
    wrong_kind = verify.check_kind(kind, "tensor" if prepared.kind == "tensor" else "tuple")
    if wrong_kind is not None:
        return wrong_kind.status, wrong_kind.message
    places = devices.split(",")
    outs = tuple(o.to(places[i]) if isinstance(o, torch.Tensor) and places[i] else o
                 for i, o in enumerate(_returned(record)))
    verdict = _judge(outs, prepared.refs[which], prepared.los[which], atol, rtol, changed=record.mutated)
    comparisons.append(verdict.comparison)
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

class StrictChecker:
    """Strict checks of the cases of one run, judged in this process; ``worker`` (a runner.Worker) runs the impl,
    or, without one, the impl runs here too (every check but the reference's isolation)."""

    def __init__(self, device: str, worker: Any = None, timeout: float = 60.0,
                 options: CheckOptions | None = None) -> None:
        self.device = device
        self.worker = worker
        self.timeout = timeout
        self.options = options or CheckOptions()
        self.tampered = target_tampering()  # the target was imported here already (planning): did it change any?
        self.probed: set[tuple[str, str, str]] = set()
        self.probe_at: dict[tuple[str, str, str], tuple[Any, ...]] = {}

    def plan(self, cases: Sequence[Case]) -> None:
        """Probe each impl at its smallest case (calls 2 and 3 cost a call each at that size, the size probe four
        times one and more), not at whichever case comes first."""
        smallest: dict[tuple[str, str, str], Case] = {}
        for case in cases:
            key = (case.source, case.op, case.impl)
            if key not in smallest or math.prod(case.size) < math.prod(smallest[key].size):
                smallest[key] = case
        self.probe_at = {key: _identity(case) for key, case in smallest.items()}

    def check(self, case: Case) -> CaseResult:
        try:
            op = load(case.source)[case.op]
        except Exception as exc:  # noqa: BLE001 - reported as the case's status
            return CaseResult(op=case.op, impl=case.impl, backend="?", size=case.size, dtype=case.dtype,
                              seed=case.seed, device=self.device, status=Status.RUNTIME_ERROR,
                              message=describe_exception(exc))
        changed = [*self.tampered, *builtin_changes(op)]

        def run(job: StrictCallJob) -> StrictReply:
            if self.worker is None:  # in this process: what its caller had changed is not the impl's doing
                reply = job.execute(self.device)
                reply.tampered = [name for name in reply.tampered if name in target_tampering()]
                return reply
            return self.worker.run(job, self.timeout)

        key = (case.source, case.op, case.impl)
        first = key not in self.probed and self.probe_at.get(key, _identity(case)) == _identity(case)
        if first:
            self.probed.add(key)
        result = strict_case(case, op, self.device, run, changed, probes=first, timeout=self.timeout,
                             options=self.options)
        if self.worker is not None and result.status is Status.CHEATED and any(
                word in result.message for word in ("replaced", "thread")):
            self.worker.stop()  # a replaced harness object or a stray thread must not meet the next case
        return result


def _identity(case: Case) -> tuple[Any, ...]:
    return tuple(case.size), case.dtype, case.seed
