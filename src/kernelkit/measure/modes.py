"""The timing modes, as a registry (as backends are): each ``Mode`` says what it needs and how its samples are taken.

    cold    one call per sample, the cache evicted before it, a CUDA event pair around it (CPU: perf_counter_ns)
    hot     back-to-back calls per sample, nothing between them (the rate a host issues them at)
    graph   calls unrolled in a CUDA graph, each replay timed: no launch cost (GPU only)
    kernel  the device time of the kernels each call launched, from CUPTI or torch.profiler (GPU only)

A mode is one ``Mode`` in one place and one ``register`` line: ``sampler`` builds the object the timer draws
samples from (``Sampler``: ``calls_per_sample``, ``method``, ``one()`` and ``batch(k, deadline)``); the flags tell
the timer, the ceilings' SUSPECT rule and the command line what differs. Nothing outside this module compares a
mode's name.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from kernelkit.measure import samplers
from kernelkit.measure.samplers import MeasureError, Sample

if TYPE_CHECKING:
    import torch

    from kernelkit.measure.contender import Contender

KERNEL_CALL_OVERHEAD = 5e-4  # kernel mode's first guess of a traced call's own cost (synchronize, records)


class Sampler(Protocol):
    """What the timer draws samples from."""

    calls_per_sample: int
    method: str  # how each sample is taken, in words (Measurement.method)

    def one(self) -> float: ...

    def batch(self, k: int, deadline: float | None = None) -> list[Sample]: ...


class Session(Protocol):
    """What a mode's sampler needs of its timing session (measure.environment.Environment is one)."""

    device: str  # "cuda" or "cpu"
    cache_bytes: int
    clock: Any
    graph_warm: bool

    @property
    def flush(self) -> torch.Tensor: ...

    @property
    def kernel_timer(self) -> Any: ...

    @property
    def l2(self) -> Any: ...  # measure.l2.PersistingL2

    def eviction_seconds(self) -> float: ...


SamplerFactory = Callable[[Session, "Contender", float], Sampler]


@dataclass(frozen=True)
class Mode:
    """One way of timing a call."""

    name: str
    summary: str  # one line, for help texts
    sampler: SamplerFactory  # (environment, contender, warm-up estimate of one call in seconds) -> Sampler
    needs_gpu: bool = False
    evicts: bool = False  # the cache is evicted before the calls of a sample (its cost is part of the sample's)
    # Every sample starts from memory, alone: a rate above the device's calibrated ceiling is impossible, so strict
    # mode fails it (SUSPECT). Hot, graph-warm and kernel samples may read the L2 (or a CPU's caches) faster.
    from_memory: bool = False
    device_time: bool = False  # samples are the kernels' device time, not the call's (no launch cost)
    sample_overhead: float = 0.0  # seconds a sample costs beyond its calls and its eviction (tracing, say)
    probes_launches: bool = False  # under 10 ms, the kernel time of the same calls is probed (launch-bound check)
    # How far its median may read from the reference's on a large kernel (kernelkit doctor): ncu's where the mode
    # evicts, else the default mode's. Cold mode held within 1.4% of ncu on an H100.
    agreement: float = 0.05

    def first_cost(self, env: Session, sampler: Sampler, estimate: float) -> float:
        """What one sample should cost in wall clock before any is taken: its calls, the eviction where there is
        one, the mode's own overhead. Later batches use the measured cost."""
        return estimate * sampler.calls_per_sample + (env.eviction_seconds() if self.evicts else 0.0) + \
            self.sample_overhead


_MODES: dict[str, Mode] = {}
DEFAULT = "cold"  # the mode a benchmark times in unless told otherwise


def register(mode: Mode) -> Mode:
    """Add ``mode`` (or replace the one of its name); returns it."""
    _MODES[mode.name] = mode
    return mode


def get(name: str) -> Mode:
    """The mode called ``name``; MeasureError naming the modes when there is none."""
    if name not in _MODES:
        raise MeasureError(f"unknown mode {name!r}; use one of {', '.join(_MODES)}")
    return _MODES[name]


def names(device: str | None = None) -> tuple[str, ...]:
    """Every mode's name, or those that run on ``device`` ('cpu': no GPU-only mode)."""
    return tuple(name for name, mode in _MODES.items() if device != "cpu" or not mode.needs_gpu)


# ---- the built-in modes ---------------------------------------------------------------------------------------


def _cold(env: Session, contender: Contender, estimate: float) -> Any:
    evicted = samplers.eviction_bytes(env.cache_bytes, env.device) >> 20
    if env.device == "cpu":
        sampler = samplers.CpuSampler(contender.fn, 1, env.flush)
        sampler.method = f"cold: one call per sample, timed with perf_counter_ns after reading {evicted} MiB"
        return sampler
    sampler = samplers.EventSampler(contender.fn, env.flush, env.clock, env.l2)
    reset = "resetting persisting L2 lines and " if env.l2.runtime is not None else ""
    sampler.method = f"cold: a CUDA event pair around each call, after {reset}reading {evicted} MiB (2x the L2)"
    return sampler


def _hot(env: Session, contender: Contender, estimate: float) -> Any:
    if env.device == "cpu":
        sampler: Any = samplers.CpuSampler(contender.fn, samplers.hot_calls(estimate), None)
        clock = "perf_counter_ns"
    else:
        sampler = samplers.HotSampler(contender.fn, estimate, env.clock)
        clock = "one CUDA event pair"
    sampler.method = (f"hot: {sampler.calls_per_sample} back-to-back calls per sample between {clock}; a sample is "
                      "their mean (spread figures describe means of that many calls)")
    return sampler


def _graph(env: Session, contender: Contender, estimate: float) -> Any:
    from kernelkit.measure.graph import GraphSampler  # CUDA graphs: imported where a GPU times

    sampler = GraphSampler(contender.fn, estimate, env.cache_bytes, args=contender.args,
                           make_call=contender.make_call, per_call_bytes=contender.working_set, warm=env.graph_warm,
                           clock=env.clock)
    note = warm_graph_note(env, contender, sampler.calls_per_sample)
    if note:
        sampler.warnings.append(note)
    return sampler


def warm_graph_note(env: Session, contender: Contender, calls_per_sample: int) -> str:
    """The warning a warm graph replay gets when its inputs fit in the L2 (it then times warm cache); else ''."""
    working = contender.working_set if contender.working_set is not None else _tensor_bytes(contender.args)
    if not (env.graph_warm and 0 < working <= env.cache_bytes):
        return ""
    return (f"graph mode (warm): the inputs ({working / 2**20:.1f} MiB) fit in L2 ({env.cache_bytes / 2**20:.0f} "
            f"MiB), so the {calls_per_sample} unrolled calls read warm cache; drop --graph-warm for cold replays")


def _tensor_bytes(args: Any) -> int:
    import torch

    return sum(a.numel() * a.element_size() for a in args if isinstance(a, torch.Tensor))


def _kernel(env: Session, contender: Contender, estimate: float) -> Any:
    from kernelkit.measure.kernel_time import KernelSampler  # CUPTI or the profiler: imported where a GPU times

    return KernelSampler(contender.fn, env.kernel_timer, env.flush, env.clock, env.l2)


# The built-in modes, in the order the command line lists them (a user's file may ``register`` another).
_MODES.update({m.name: m for m in (
    Mode("cold", "one call per sample, the cache evicted first (the default)", _cold, evicts=True, from_memory=True,
         probes_launches=True, agreement=0.02),
    Mode("hot", "back-to-back calls per sample, warm cache", _hot, probes_launches=True),
    Mode("graph", "calls replayed from a CUDA graph: no launch cost", _graph, needs_gpu=True),
    Mode("kernel", "the kernels' device time (CUPTI or torch.profiler), cache evicted", _kernel, needs_gpu=True,
         evicts=True, device_time=True, sample_overhead=KERNEL_CALL_OVERHEAD, agreement=0.03),
)})
