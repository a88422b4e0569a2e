"""Strict mode's worker side: what runs where the impl lives, and what it sends back (jobs/strict.py judges it).

``StrictCallJob`` unpacks each input set (``pack``/``unpack``: tensors as bytes, layout kept, no shared storage),
or makes it from its seed where the judge says so and checks it is the judge's (``Drawn``),
calls the impl under the guards of guards.py and answers with a ``StrictReply``: per call a ``CallRecord`` of
the outputs and inputs as bytes and what the guards saw. It never holds a reference output.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch

from kernelkit import backends, verify, wire
from kernelkit.errors import BackendUnavailable, CompileError, describe_exception
from kernelkit.jobs import OnBuilt, caught_warnings, guards, kept_sets, seal, unique
from kernelkit.jobs.check import describe_compile_error
from kernelkit.jobs.kept_sets import fingerprint
from kernelkit.loading import load
from kernelkit.results import Status
from kernelkit.spec import Case, parse_dtype

SEAL = seal.Seal.take()  # before any user code: kernelkit is imported before it loads a user's file
UNGUARDED_BACKENDS = ("compile",)  # kernelkit's own baseline: torch.compile runs unguarded (dynamo and modes)


# ---- tensors as bytes ---------------------------------------------------------------------------------------


def pack(values: Sequence[Any]) -> bytes:
    """Values as bytes (kernelkit.wire): each tensor with its whole storage, strides and offset (so its layout
    survives); plain values as they are; anything else only by its type's name. Nothing in them is unpickled or
    run by the receiver, and no storage is shared with it."""
    return wire.encode(tuple(values))


def unpack(data: bytes, device: str | None = None) -> tuple[Any, ...]:
    """``pack``'s values, each tensor on ``device`` (default: where it was); an object that was not sent comes back
    as a wire.Opaque naming its type."""
    values = wire.decode(data, device)
    if not isinstance(values, tuple):
        raise wire.WireError(f"packed values are a tuple, not {type(values).__name__}")
    return values


@dataclass(frozen=True)
class Drawn:
    """An input set the worker makes itself, as the judge made its own: ``op.make_inputs(size, dtype, device,
    seed)`` (inside values.device_draws when ``on_device``), then checked against the judge's ``fingerprint`` of
    its copy. Nothing crosses the pipe but these numbers: on a GPU a set is no longer copied to the host, sent
    and copied back. The worker learns the seed when the job comes, as it learned the bytes before; a worker that
    makes other inputs (an op whose inputs are not a function of their seed, or a patched factory) fails the
    fingerprint, and the judge sends that case's sets as bytes."""

    size: tuple[int, ...]
    seed: int
    on_device: bool
    fingerprint: tuple[str, ...]


class Undrawn(Exception):
    """The worker's set is not the judge's (``Drawn.fingerprint``)."""


def set_inputs(entry: bytes | Drawn, op: Any, dtype: torch.dtype, device: str) -> tuple[Any, ...]:
    """One input set of a job: unpacked from its bytes, or made here (``Drawn``; a set of the case's own seed is
    kept for the next jobs); Undrawn when what was made here is not what the judge made, or making it failed here
    (the judge then sends the bytes)."""
    if not isinstance(entry, Drawn):
        return unpack(entry, device)
    key = (id(op), getattr(op, "name", ""), entry.size, dtype, device, entry.seed, entry.on_device)
    kept = kept_sets.get(key)
    if kept is not None:
        try:
            if fingerprint(kept) == entry.fingerprint:
                return kept
        except Exception:  # noqa: BLE001 - made again below
            pass
        kept_sets.drop(key)
    made = _made(entry, op, dtype, device)
    if not entry.on_device:  # a secret seed's set is used once: not kept
        kept_sets.keep(key, made)
    return made


def _made(entry: Drawn, op: Any, dtype: torch.dtype, device: str) -> tuple[Any, ...]:
    from kernelkit import values

    try:
        with values.device_draws(entry.on_device):
            made = tuple(op.make_inputs(entry.size, dtype, torch.device(device), entry.seed))
    except Exception as exc:  # noqa: BLE001 - the judge made them: here the bytes will do
        raise Undrawn(f"making the inputs here failed: {describe_exception(exc)}") from None
    try:
        same = fingerprint(made) == entry.fingerprint
    except Exception:  # noqa: BLE001 - what the judge could read, this process cannot: the bytes instead
        same = False
    if not same:
        raise Undrawn(f"the inputs made here for size {'x'.join(map(str, entry.size))} and seed {entry.seed} are "
                      "not the judge's")
    return made


# ---- the worker's side ----------------------------------------------------------------------------------------


@wire.register
@dataclass
class CallRecord:
    """What the worker saw of one call."""

    kind: str = ""  # "tensor", "tuple", "list" or another type's name: what the call returned
    outputs: tuple[Any, ...] = ()  # copies of the outputs taken once the call's stream was done (sent as data)
    # Arguments whose contents the call changed, compared here with the set as it came (bitwise): the inputs do not
    # travel back. What a worker says here can only hide its own mutation; the judge's inputs are its own.
    mutated: list[int] = field(default_factory=list)
    subclasses: list[str] = field(default_factory=list)  # outputs of a torch.Tensor subclass (type names)
    threads: list[str] = field(default_factory=list)
    late: list[int] = field(default_factory=list)  # outputs that changed after the call returned
    breaches: list[str] = field(default_factory=list)
    aliases: list[tuple[int, int]] = field(default_factory=list)  # (output, argument) sharing storage
    replays: list[tuple[int, int]] = field(default_factory=list)  # (output, earlier call) sharing storage
    poisoned: list[int] = field(default_factory=list)  # outputs never written
    error: str = ""
    kernels: list[tuple[str, float, int]] = field(default_factory=list)  # (name, device us, stream) on a GPU
    streams: list[str] = field(default_factory=list)  # work seen on a stream other than the timed one


@wire.register
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

    @property
    def raised(self) -> bool:
        """Whether a call raised (its status is still PASSED: it ran): the worker's log tail is kept for it."""
        return any(call.error for call in self.calls)


@dataclass(frozen=True)
class StrictCallJob:
    """Run ``case``'s impl on the packed input ``sets`` in ``plan`` order: (set index, 'new' or 'inplace')."""

    case: Case
    sets: tuple[bytes | Drawn, ...]
    plan: tuple[tuple[int, str], ...]

    def failed(self, device: str, status: Status, message: str, log: str = "") -> StrictReply:
        return StrictReply(status, message, log=log)

    def execute(self, device: str, on_built: OnBuilt | None = None) -> StrictReply:
        notices: list[str] = []
        started = time.perf_counter()
        with caught_warnings(notices):
            reply = self._execute(device, on_built)
        # the whole job here (loading, builds, calls, packing): the judge's round trip less this is the transport
        reply.details.setdefault("strict_s", {})["job"] = time.perf_counter() - started
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
        streams = guards.StreamWatch(device == "cuda" and guarded)
        watch = guards.LaunchWatch(impl.kernels, streams)
        built = backends.build_state(op, impl)
        # seconds, for the judge's breakdown; "calls" holds "profiled" (call 1 on a GPU, under torch.profiler),
        # "settle" (the outputs' settled copies and late-write check) and "host" (their copies to the host)
        spent = dict.fromkeys(("unpack", "calls", "profiled", "settle", "host", "compare"), 0.0)
        pristine: dict[int, tuple[Any, ...]] = {}  # sets made here, as made: each call gets a copy in new memory
        with watch:
            for number, (which, placement) in enumerate(self.plan):
                clock = time.perf_counter()
                entry = self.sets[which]
                if isinstance(entry, Drawn):
                    try:
                        if which not in pristine:
                            pristine[which] = set_inputs(entry, op, parse_dtype(self.case.dtype), device)
                    except Undrawn as exc:  # the judge sends this case's sets as bytes instead
                        return StrictReply(Status.RUNTIME_ERROR, str(exc), backend=impl.backend,
                                           details={"undrawn": which}, tampered=SEAL.tampered())
                    inputs = verify.fresh_copies(pristine[which])
                else:
                    inputs = unpack(entry, device)
                spent["unpack"] += time.perf_counter() - clock
                if placement == "inplace" and previous:
                    with torch.no_grad():
                        for old, new in zip(previous, inputs, strict=True):
                            if isinstance(old, torch.Tensor) and old.shape == new.shape:
                                old.copy_(new)  # new contents at the same address (its _version moves, as promised)
                    inputs = previous
                clock = time.perf_counter()
                sent = _snapshot(inputs)  # what the call is given, where it is given it (a device copy on a GPU)
                spent["compare"] += time.perf_counter() - clock
                record = CallRecord()
                try:
                    clock = time.perf_counter()
                    self._call(impl.fn, inputs, device, number, record, kept, guarded, streams, spent)
                    spent["calls"] += time.perf_counter() - clock  # the call, its guards, profile and packed outputs
                    clock = time.perf_counter()
                    record.mutated = verify.mutated_inputs(inputs, sent)
                    spent["compare"] += time.perf_counter() - clock
                except BackendUnavailable as exc:  # raised by the impl: it cannot run here (as in a plain check)
                    reply.status, reply.message = Status.SKIPPED, str(exc)
                    return reply
                except Exception as exc:  # noqa: BLE001 - the impl's failure is this call's record
                    if number == 0 and _build_failure(exc)[0] is Status.COMPILE_ERROR:  # a lazy first build
                        reply.status, reply.message = _build_failure(exc)
                        return reply
                    record.error = describe_exception(exc)
                reply.calls.append(record)
                if number == 0:  # the first call builds: autotuning and torch.compile time, apart (as in a check)
                    reply.details.update(backends.build_details(op, impl, built))
                if record.error and number < 3:
                    break
                previous = inputs
                reply.tampered = unique([*reply.tampered, *SEAL.tampered()])
        reply.launches = dict(watch.launches)
        reply.details["strict_s"] = spent
        return reply

    def _call(self, fn: Any, inputs: tuple[Any, ...], device: str, number: int, record: CallRecord,
              kept: list[torch.Tensor], guarded: bool, streams: guards.StreamWatch, spent: dict[str, float]) -> None:
        guard = guards.GuardedAllocations(streams)
        clock = time.perf_counter()
        # On a GPU call 1 is profiled (streams, aten's share), without fences: their fills are aten kernels too.
        profile = device == "cuda" and number == 1 and guarded
        fenced = guarded and not profile
        if device == "cuda":
            torch.cuda.synchronize()
        with _profiled(profile) as prof:
            if prof is not None:
                torch.cuda._sleep(1)  # the marker: the first spin kernel of the trace names the timed stream
            before = guards.live_threads()  # after the profiler started: its threads are not the call's
            with streams:
                if fenced:
                    with guard:
                        value = fn(*inputs)
                else:
                    value = fn(*inputs)
            threads = guards.new_threads(before)
            if device == "cuda":
                torch.cuda.current_stream().synchronize()
        if profile:
            spent["profiled"] += time.perf_counter() - clock
        record.threads = threads  # call 0's count only when it fails (a build starts pools)
        record.streams = list(streams.seen)
        record.kind = "tensor" if isinstance(value, torch.Tensor) else type(value).__name__
        outs = value if isinstance(value, (tuple, list)) else (value,)
        record.subclasses = [type(o).__name__ for o in outs if isinstance(o, torch.Tensor) and type(o) is not
                             torch.Tensor]
        if record.subclasses:
            return  # never touched: a subclass may compute when read
        clock = time.perf_counter()
        first = guards.settled_copy(outs, device)
        record.late = guards.changed_after_return(outs, first, device) if guarded else []
        spent["settle"] += time.perf_counter() - clock
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
        # To the host now, once: the device keeps no second copy of every call's outputs until the reply is sent.
        clock = time.perf_counter()
        record.outputs = tuple(_host(f) if f is not None else o for f, o in zip(first, outs, strict=True))
        spent["host"] += time.perf_counter() - clock
        record.kind += "|" + ",".join(str(o.device) if isinstance(o, torch.Tensor) else "" for o in outs)
        if prof is not None:
            clock = time.perf_counter()
            record.kernels, off = _device_kernels(prof)
            record.streams.extend(off)
            spent["profiled"] += time.perf_counter() - clock


def _host(value: Any) -> Any:
    """A tensor's contents on the host (what the reply carries)."""
    return value.detach().cpu() if isinstance(value, torch.Tensor) else value


def _snapshot(inputs: Sequence[Any]) -> tuple[Any, ...]:
    """Copies of the tensor arguments where they are, to compare them with after the call (on a GPU a clone at
    device speed, not every argument copied to the host after every call)."""
    return tuple(x.detach().clone() if isinstance(x, torch.Tensor) else x for x in inputs)


def _build_failure(exc: BaseException) -> tuple[Status, str]:
    if isinstance(exc, (CompileError, SyntaxError)) or backends.is_compile_error(exc):
        return Status.COMPILE_ERROR, describe_compile_error(exc)  # as a plain check says it
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


def _device_kernels(prof: Any) -> tuple[list[tuple[str, float, int]], list[str]]:
    """(name, device microseconds, stream) of each kernel the profiled call ran, and what of its device work
    (kernels, copies, fills) ran off the timed stream, named by the marker: the first spin kernel in the trace,
    launched on the timed stream before the call. ([], []) when unreadable; no stream list without the marker."""
    try:
        events = [e for e in prof.profiler.kineto_results.events() if "cuda" in str(e.device_type()).lower()]
        marks = sorted((e for e in events if "spin_kernel" in e.name()), key=lambda e: e.start_ns())
        marker = marks[0] if marks else None
        timed = int(marker.device_resource_id()) if marker is not None else None
        found, off = [], []
        for e in events:
            if e is marker:
                continue
            stream = int(e.device_resource_id())
            if timed is not None and stream != timed and len(off) < guards.StreamWatch.SEEN_MAX:
                off.append(f"{e.name()[:80]} ran on stream {stream} (the timed stream is {timed}, by the profiler)")
            if "memcpy" in e.name().lower() or "memset" in e.name().lower():
                continue
            found.append((e.name(), e.duration_ns() / 1e3, stream))
        return found, off
    except Exception:  # noqa: BLE001 - an older profiler: no stream or share check
        return [], []
