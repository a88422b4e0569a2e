"""Where a run goes when it leaves this process's one worker: the GPUs of this host (``--gpus``) or a Ray cluster
(``--ray``). bench_op and check ask ``Spread.of`` and hand it their group runs."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from kernelkit.errors import SpecError
from kernelkit.results import OnResult, RunReport
from kernelkit.scale import shard
from kernelkit.scale.slots import GpuSpec, Slot, fingerprints, gpu_slots

if TYPE_CHECKING:
    from kernelkit.jobs.evidence import CheckOptions
    from kernelkit.spec import Case


@dataclass
class Spread:
    """Run groups on ``slots`` (one worker per GPU of this host) or, when ``ray`` is set, as Ray tasks."""

    device: str
    slots: list[Slot] = field(default_factory=list)
    ray: str | None = None

    @classmethod
    def of(cls, gpus: GpuSpec, ray: str | None, device: str) -> Spread | None:
        """None when neither is asked for (one worker here). SpecError for no GPUs, both, or no Ray installed."""
        if gpus is None and ray is None:
            return None
        if gpus is not None and ray is not None:
            raise SpecError("--gpus and --ray together: choose one (a Ray task gets one GPU of its node)")
        if ray is not None:
            from kernelkit.scale import cluster

            cluster.connect(ray)  # now, so that a cluster that cannot be joined fails before the run starts
            return cls(device, ray=ray)
        return cls(device, gpu_slots(gpus, device))

    def describe(self, user_file: str | None) -> dict[str, Any]:
        """What the run's environment adds: each GPU's fingerprint, or the Ray cluster's address."""
        if self.ray is not None:
            return {"ray": self.ray}
        return {"gpus": fingerprints(self.slots, self.device, user_file)}

    def run(self, runs: Sequence[shard.GroupRun], emit: Callable[[Any], None],
            on_phase: Callable[[str], None] | None = None) -> list[str]:
        """Run every group; ``emit(result)`` in this thread as each result comes, its ``gpu`` set; ``on_phase``
        told what each GPU's worker does now ("GPU 1: starting a worker ..."; not for Ray tasks). Returns why
        any slot stopped early."""
        if self.ray is not None:
            from kernelkit.scale import cluster

            return cluster.run_groups(runs, self.device, self.ray, emit)

        def tagged(index: int | None, result: Any) -> None:
            result.gpu = index
            emit(result)

        told = None if on_phase is None else (lambda index, text: on_phase(f"GPU {index}: {text}"))
        return shard.run_groups(runs, self.slots, self.device, tagged, told)


def worker_envs(gpus: GpuSpec, ray: str | None, device: str) -> list[dict[str, str]]:
    """The environment of each worker a run on this host will start: one per GPU slot with ``gpus``, none with
    ``ray`` (its tasks start theirs on the nodes), else one (runner.started_early starts them ahead)."""
    if ray is not None:
        return []
    if gpus is not None:
        return [dict(slot.env) for slot in gpu_slots(gpus, device)]
    return [{}]


def check_spread(cases: Sequence[Case], device: str, *, gpus: GpuSpec = None, ray: str | None = None,
                 timeout: float, on_result: OnResult | None = None, options: CheckOptions | None = None,
                 on_phase: Callable[[str], None] | None = None) -> RunReport:
    """runs.check.run_cases over several GPUs or a Ray cluster: cases of one (op, size, dtype) on one worker; the
    report lists the results in the cases' order; Ctrl-C keeps what finished. ``options``: each CheckJob's."""
    if not timeout > 0:
        raise SpecError(f"--timeout must be a positive number of seconds, got {timeout}")
    spread = Spread.of(gpus, ray, device)
    if spread is None:
        raise SpecError("check_spread needs gpus or ray")
    report = RunReport(device=device, planned=len(cases))
    order = {(c.op, c.impl, c.size, c.dtype, c.seed): i for i, c in enumerate(cases)}

    def emit(result: Any) -> None:
        report.results.append(result)
        if on_result is not None:
            on_result(result)

    try:
        spread.run(shard.check_runs(cases, timeout, options), emit, on_phase)
    except KeyboardInterrupt:
        report.interrupted = True
    report.results.sort(key=lambda r: order.get((r.op, r.impl, r.size, r.dtype, r.seed), len(order)))
    return report
