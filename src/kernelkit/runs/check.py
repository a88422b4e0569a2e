"""``kernelkit check`` (``kk.check``, ``kk.run_cases``): plan a target's cases, run each as a CheckJob in a worker,
spread them over GPUs or a Ray cluster when asked, and return a RunReport in plan order.

1. ``plan``: open the target once (target.open_target) and list its cases;
2. slow first builds (a load_inline extension) start at once in a process of their own (runs/early.py), and
   the cases that need them run last;
3. each case runs in the worker (runner.Worker: a crash or hang ends that case only), or in strict mode (the
   default, ``judging``) its reference is judged here and the impl watched there (runs/strict.py); asked, each
   impl is called twice on the same inputs (determinism) and a failing case's tensors are saved (jobs/evidence.py);
4. every result goes to ``on_result`` as it comes; Ctrl-C stops cleanly with what finished.
"""

from __future__ import annotations

import math
import shlex
import tempfile
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import torch

from kernelkit import runner
from kernelkit.errors import SpecError
from kernelkit.jobs.check import CheckJob
from kernelkit.jobs.evidence import CheckOptions
from kernelkit.results import OnResult, RunReport
from kernelkit.runner import DEFAULT_TIMEOUT, OnPhase, Worker
from kernelkit.runs import early
from kernelkit.scale.spread import worker_envs
from kernelkit.spec import Case, Size, size_labeller
from kernelkit.target import TargetLike, open_target, resolve_device, target_text

if TYPE_CHECKING:
    from kernelkit.runs.strict import StrictChecker
    from kernelkit.scale.slots import GpuSpec


def plan(target: str, *, impls: Sequence[str] = (), device: str | None = None, sizes: Sequence[Size] = (),
         dtypes: Sequence[torch.dtype] = (), seeds: int = 1, solution: str | None = None) -> tuple[str, list[Case]]:
    """The device and the cases of ``target`` (see target.open_target; ``solution`` too), without running them."""
    opened = open_target(target, device, solution)
    return opened.device, opened.cases(impls, sizes, dtypes, seeds)


def check(
    target: TargetLike,
    *,
    impls: Sequence[str] = (),
    device: str | None = None,
    sizes: Sequence[Size] = (),
    dtypes: Sequence[torch.dtype] = (),
    seeds: int = 1,
    timeout: float = DEFAULT_TIMEOUT,
    isolate: bool = True,
    on_result: OnResult | None = None,
    gpus: GpuSpec = None,
    ray: str | None = None,
    solution: str | None = None,
    strict: bool | None = None,
    on_phase: OnPhase | None = None,
    on_plan: Callable[[int], None] | None = None,
    determinism: bool = False,
    save_failing: str | Path | None = None,
) -> RunReport:
    """Check every case of ``target`` (a built-in op name, a .py file, a KernelBench problem or level folder, a
    GPU MODE task folder, an Op; ``solution``: see target.open_target) against its reference.

    Each case runs in a worker process with a per-case ``timeout`` in seconds; see README for the tolerance rule.
    gpus ('all', 2, '0,1'): the cases spread over one worker per GPU; ray ('auto', 'local', an address): over a
    Ray cluster's GPUs (see kernelkit.scale). Each result then records the GPU that ran it.
    strict: strict mode (README "Strict mode"; runs/strict.py): references judged here, the impl watched there.
    None, the default (as `kernelkit check`'s): strict, but a run spread with gpus=/ray= takes the fast path, and
    the report's ``path`` says so; True: strict, and a spread run is refused; False: the fast path.
    determinism: each impl called twice on the same inputs, its outputs compared bitwise (a note where they
    differ); save_failing: a folder for each failing case's inputs, expected and actual outputs (a .pt of plain
    tensors) and the command that checks it again (a .txt beside it).
    on_phase: told what the worker does now ("square: cuda_vec4: building its kernels"), for progress; on_plan:
    told once, before anything runs, how many cases there are.
    """
    target = target_text(target)
    strict_on, path = judging(strict, spread=gpus is not None or ray is not None)
    if strict_on:
        from kernelkit.runs.strict import seal_builtin_ops

        seal_builtin_ops()  # before the target's file is imported: it may change a built-in op
    if save_failing and ray is not None:
        raise SpecError("--save-failing writes on this host: a Ray cluster's workers run elsewhere; drop --ray")
    options = CheckOptions(determinism, str(Path(save_failing).resolve()) if save_failing else "",
                           _repro(target, solution, strict_on))
    # The workers start now, while the target opens (a level's hundred problem files) and its cases are listed.
    first = resolve_device(device)
    with runner.started_early(first, worker_envs(gpus, ray, first) if isolate else []):
        opened = open_target(target, device, solution)
        dev, cases = opened.device, opened.cases(impls, sizes, dtypes, seeds)
        if on_plan is not None:
            on_plan(len(cases))
        label = size_labeller(opened.ops)  # a GPU MODE task's sizes show as its specs: size=16 seed=4242
        told = (lambda result: on_result(label(result))) if on_result is not None else label
        if gpus is not None or ray is not None:
            from kernelkit.scale import check_spread

            report = check_spread(cases, dev, gpus=gpus, ray=ray, timeout=timeout, on_result=told, options=options,
                                  on_phase=on_phase)
        else:
            report = run_cases(cases, dev, timeout=timeout, isolate=isolate, on_result=told, strict=strict_on,
                               on_phase=on_phase, options=options)
        for result in report.results:
            label(result)
        report.path = path
        return report


def judging(strict: bool | None, spread: bool) -> tuple[bool, str]:
    """Whether a check runs in strict mode, and the one line that says which path judged it and why. ``strict``:
    None asks for the default (strict, but the fast path for a run ``spread`` over GPUs or a Ray cluster), True
    and False for the one path; SpecError for strict mode in a spread run."""
    if strict is False:
        return False, ("fast path (--no-strict): each impl judged in the worker that runs it, with its references; "
                       "not guarded against an impl that games the check")
    if spread and strict is None:
        return False, ("fast path: strict mode judges on one worker and this run is spread (--gpus/--ray); "
                       "--strict refuses such a run instead")
    if spread:
        raise SpecError("strict mode judges on one worker: drop gpus=/ray= (--gpus/--ray), or leave strict off")
    return True, (f"strict mode ({'--strict' if strict else 'the default'}): references judged in this process, "
                  "each impl run and watched in a worker that never sees them; --no-strict for the fast path")


def _repro(target: str, solution: str | None, strict: bool) -> str:
    """The command that checks ``target`` again the way this run does (a path made absolute)."""
    shown = lambda text: shlex.quote(str(Path(text).resolve()) if Path(text).exists() else text)
    return (f"kernelkit check {shown(target)}" + (f" --solution {shown(solution)}" if solution else "")
            + ("" if strict else " --no-strict"))


def run_cases(
    cases: Sequence[Case],
    device: str,
    *,
    timeout: float = DEFAULT_TIMEOUT,
    isolate: bool = True,
    on_result: OnResult | None = None,
    strict: bool = False,
    on_phase: OnPhase | None = None,
    options: CheckOptions | None = None,
) -> RunReport:
    """Run ``cases`` one after another; Ctrl-C stops cleanly and returns what finished. ``strict``: each case
    in strict mode (runs/strict.py), its reference computed and judged in this process. ``options``: the
    determinism call and the saved failing cases (jobs/evidence.py).

    Kernels that are slow to build the first time (runs/early.py) are built in a separate process meanwhile,
    and the cases that need them run last, so the build overlaps the others; results come back in plan order."""
    check_timeout(timeout)
    options = options or CheckOptions()
    report = RunReport(device=device, planned=len(cases), strict=strict)
    with tempfile.TemporaryDirectory(prefix="kernelkit-") as tmp, early.started(cases if isolate else (), device) as \
            building:
        worker = Worker(device, Path(tmp) / "worker.log") if isolate else None
        strict_checker = _strict_checker(device, worker, timeout, options) if strict else None
        if strict_checker is not None:
            strict_checker.plan(cases)
        waiting = set(building)
        # Every impl of one input set in a row (a worker keeps the last sets it made, and their references), the
        # impls being built elsewhere last; results come back in plan order.
        sets: dict[tuple[Any, ...], int] = {}
        for case in cases:
            sets.setdefault((case.source, case.op, case.size, case.dtype, case.seed), len(sets))
        key = lambda c: ((c.source, c.op, c.impl) in waiting, sets[c.source, c.op, c.size, c.dtype, c.seed])
        order = sorted(range(len(cases)), key=lambda n: key(cases[n]))
        try:
            for n in order:
                case = cases[n]
                if worker is not None and on_phase is not None:
                    worker.on_phase = lambda text, case=case: on_phase(f"{case.op}: {text}")
                job = CheckJob(case, options)
                if strict_checker is not None:
                    result = strict_checker.check(case)
                else:
                    result = worker.run(job, timeout) if worker else job.execute(device)
                report.results.append(result)
                if on_result is not None:
                    on_result(result)
        except KeyboardInterrupt:
            report.interrupted = True
        finally:
            if worker:
                worker.stop()
    ran = [order[k] for k in range(len(report.results))]
    report.results = [r for _, r in sorted(zip(ran, report.results, strict=True), key=lambda pair: pair[0])]
    return report


def _strict_checker(device: str, worker: Worker | None, timeout: float, options: CheckOptions) -> StrictChecker:
    from kernelkit.runs.strict import StrictChecker

    return StrictChecker(device, worker, timeout, options)


def check_timeout(timeout: float, flag: str = "--timeout") -> None:
    """SpecError unless ``timeout`` is a positive, finite number of seconds."""
    if not (isinstance(timeout, (int, float)) and math.isfinite(timeout) and timeout > 0):
        raise SpecError(f"{flag} must be positive and finite (seconds), got {timeout}")


