"""Each format's own verdict, reproduced, and side by side with kernelkit's.

kernelbench_verdict follows KernelBench's eval_kernel_against_ref and run_and_check_correctness (commit 423217d):
init inputs and both models from seed 42, five trials whose seeds are drawn from seed 42, every input tensor
(integers too) cast to the precision and moved to the device, ``torch.allclose(atol=rtol=tolerance)`` per trial.
gpumode_verdict follows eval.py's test mode over the tests, then the check its leaderboard mode makes of every
benchmark before timing it: set_seed(42); per spec ``data = generate_input(**spec)``,
``output = custom_kernel(clone(data))``, ``check_implementation(data, output)``. Where eval.py would abort the
whole run on an exception, the spec here fails with the exception's message and the others still run.

Both take ``on_call``, called before each trial or spec: in a worker it restarts the job's clock (runner.Worker),
so every call of the problem's code gets the whole --timeout, and a hang in one ends the verdict there.
"""

from __future__ import annotations

import random
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any, Protocol

import numpy
import torch

from kernelkit import wire
from kernelkit.errors import LoadError, describe_exception
from kernelkit.formats import gpumode, kernelbench, task_data
from kernelkit.formats.footprint import gpu_turn
from kernelkit.results import Status


@wire.register
@dataclass(frozen=True)
class KernelBenchVerdict:
    """KernelBench's verdict: ``compiled`` (the solution imported and ModelNew was built), ``correct``."""

    compiled: bool
    correct: bool
    trials_passed: int = 0
    trials: int = kernelbench.KERNELBENCH_TRIALS
    tolerance: float = 0.0
    message: str = ""
    max_difference: tuple[float, ...] = ()
    ran: tuple[int, ...] = ()  # the trials this verdict ran (all unless it is one part of a split verdict)
    stopped: str = ""  # "shape" or "error": the trial ran(-1) ended the verdict there, as KernelBench's loop ends

    @property
    def ok(self) -> bool:
        return self.correct

    def describe(self) -> str:
        why = f"; {self.message}" if self.message and not self.correct else ""
        verdict = ("correct" if self.correct else "incorrect") if self.compiled else "not compiled"
        trials = f"{self.trials_passed}/{self.trials} trials, atol=rtol={self.tolerance:g}{why}"
        return f"KernelBench: {verdict} ({trials if self.compiled else self.message})"


def kernelbench_verdict(
    problem: kernelbench.Problem | str | Path,
    solution: type | str | Path,
    *,
    device: str = "cuda",
    precision: torch.dtype = torch.float32,
    trials: int = kernelbench.KERNELBENCH_TRIALS,
    seed: int = kernelbench.KERNELBENCH_SEED,
    tolerance: float | None = None,
    on_call: Callable[[], None] | None = None,
    only: Sequence[int] | None = None,
) -> KernelBenchVerdict:
    """KernelBench's correctness verdict of ``solution`` (a ModelNew class or a solution file) on ``problem``;
    ``on_call`` is called before each trial. ``only``: run just these trials (their seeds as in the whole run,
    the models built as for it): one part of a verdict split over workers, put together by merge_kernelbench."""
    if not isinstance(problem, kernelbench.Problem):
        problem = kernelbench.load_problem(problem)
    tol = tolerance if tolerance is not None else kernelbench.KERNELBENCH_TOLERANCE[precision]
    try:
        model_new = solution if isinstance(solution, type) else kernelbench.load_solution(solution)
    except LoadError as exc:
        return KernelBenchVerdict(False, False, trials=trials, tolerance=tol, message=str(exc))
    dev = torch.device(device)

    def process(x: Any) -> Any:  # eval.py's _process_input_tensor: every tensor to the precision, then the device
        return x.to(dtype=precision).to(device=dev) if isinstance(x, torch.Tensor) else x

    with _rng_restored(dev):
        torch.manual_seed(seed)
        init = [process(x) for x in problem.get_init_inputs()]
        with torch.no_grad():
            torch.manual_seed(seed)
            original = problem.model(*init)
        try:
            with torch.no_grad():
                torch.manual_seed(seed)
                custom = model_new(*init)
                original, custom = original.to(device=dev, dtype=precision), custom.to(device=dev, dtype=precision)
        except RuntimeError as exc:
            return KernelBenchVerdict(True, False, trials=trials, tolerance=tol, stopped="error",
                                      message=f"runtime error building ModelNew: {describe_exception(exc)}")
        ran = tuple(range(trials)) if only is None else tuple(sorted(only))
        try:
            return _trials(problem, original, custom, process, dev, trials, seed, tol, on_call, ran)
        except Exception as exc:  # noqa: BLE001 - KernelBench records any failure here as a runtime error
            return KernelBenchVerdict(True, False, trials=trials, tolerance=tol, ran=ran, stopped="error",
                                      message=f"runtime error: {describe_exception(exc)}")


def _trials(problem: kernelbench.Problem, original: Any, custom: Any, process: Any, dev: torch.device,
            trials: int, seed: int, tol: float, on_call: Callable[[], None] | None,
            ran: tuple[int, ...]) -> KernelBenchVerdict:
    torch.manual_seed(seed)
    trial_seeds = [int(torch.randint(0, 2**32 - 1, (1,)).item()) for _ in range(trials)]
    passed, diffs, message = 0, [], ""
    with torch.no_grad():
        for index in ran:
            trial_seed = trial_seeds[index]
            if on_call is not None:
                on_call()
            torch.manual_seed(trial_seed)
            drawn = list(problem.get_inputs())
            with gpu_turn(dev, on_call):  # the draw above ran beside other verdicts' GPU work; this does not
                shapes, diff = _trial(drawn, original, custom, process, dev, trial_seed, tol)
            del drawn
            if shapes:
                return KernelBenchVerdict(True, False, passed, trials, tol, message=f"output shape mismatch: {shapes}",
                                          ran=ran[:ran.index(index) + 1], stopped="shape")
            if diff is None:
                passed += 1
            else:
                diffs.append(diff)
                message = _mismatch(len(diffs), trials, diffs)
    return KernelBenchVerdict(True, passed == trials, passed, trials, tol, message, tuple(diffs), ran)


def _trial(drawn: list[Any], original: Any, custom: Any, process: Any, dev: torch.device, trial_seed: int,
           tol: float) -> tuple[str, float | None]:
    """One trial on inputs drawn for it: ("expected ..., got ..." on a shape mismatch, else "") and the largest
    difference where allclose fails (None where it passes). Its tensors die with it, inside the caller's turn."""
    inputs = [process(x) for x in drawn]
    torch.manual_seed(trial_seed)
    output = original(*inputs)
    _sync(dev)
    output_new = custom(*inputs)
    _sync(dev)
    if output.shape != output_new.shape:
        return f"expected {tuple(output.shape)}, got {tuple(output_new.shape)}", None
    if torch.allclose(output, output_new, atol=tol, rtol=tol):
        return "", None
    return "", float((output - output_new).abs().max())


def _mismatch(count: int, trials: int, diffs: Sequence[float]) -> str:
    return f"output mismatch in {count} of {trials} trials, max difference {max(diffs):.6g}"


def merge_kernelbench(parts: Sequence[KernelBenchVerdict]) -> KernelBenchVerdict:
    """The verdict one run over all trials gives, from parts that each ran some of them (kernelbench_verdict's
    ``only``): trials in order, the first part that stopped (a shape mismatch, a runtime error, not compiled) ends
    it there as KernelBench's loop would, with the passes before it."""
    ordered = sorted(parts, key=lambda p: p.ran[0] if p.ran else -1)
    first = ordered[0]
    passed, diffs = 0, []
    for part in ordered:
        if not part.compiled or part.stopped == "error":
            return part  # KernelBench reports a runtime error with no trials passed
        if part.stopped:
            return replace(part, trials_passed=passed + part.trials_passed)
        passed += part.trials_passed
        diffs.extend(part.max_difference)
    message = _mismatch(len(diffs), first.trials, diffs) if diffs else ""
    ran = tuple(sorted(i for p in ordered for i in p.ran))
    return KernelBenchVerdict(True, passed == first.trials, passed, first.trials, first.tolerance, message,
                              tuple(diffs), ran)


@wire.register
@dataclass(frozen=True)
class GpuModeTest:
    spec: dict[str, Any]
    passed: bool
    message: str = ""
    benchmark: bool = False  # a benchmarks spec, checked as the leaderboard checks it before timing


@wire.register
@dataclass(frozen=True)
class GpuModeVerdict:
    """GPU MODE's verdict: every test spec, and every benchmark spec, passed check_implementation."""

    passed: bool
    tests: tuple[GpuModeTest, ...] = ()
    message: str = ""  # why no test ran

    @property
    def ok(self) -> bool:
        return self.passed

    def describe(self) -> str:
        if not self.tests:
            return f"GPU MODE: fail ({self.message})"
        failed = [t for t in self.tests if not t.passed]
        counts = []
        for benchmark, what in ((False, "test"), (True, "benchmark")):
            ran = [t for t in self.tests if t.benchmark is benchmark]
            bad = sum(not t.passed for t in ran)
            if ran:
                counts.append(f"{f'{bad} of ' if failed else ''}{len(ran)} {what}{'' if len(ran) == 1 else 's'}")
        if not failed:
            return f"GPU MODE: pass ({', '.join(counts)})"
        first = failed[0]
        which = "benchmark" if first.benchmark else "test"
        return f"GPU MODE: fail ({', '.join(counts)} failed; {which} {first.spec}: {first.message})"


def gpumode_verdict(
    task: gpumode.Task, specs: Sequence[dict[str, Any]] | None = None, *, secret_seed: int | None = None,
    on_call: Callable[[], None] | None = None,
) -> GpuModeVerdict:
    """check_implementation's verdict on the task's submission for each spec (default: the task's tests, then its
    benchmarks, as its leaderboard mode checks them); ``on_call`` is called before each spec.

    secret_seed: eval.py's POPCORN_SEED: combined into every spec's seed, and the global seed instead of 42.
    """
    submission = task.load_submission()
    if submission is None:
        return GpuModeVerdict(False, message=task.submission_error or "no submission")
    ref, kernel = task.reference, submission.custom_kernel
    results = []
    with _rng_restored(torch.device("cuda" if torch.cuda.is_available() else "cpu"), python=True):
        seed = secret_seed or 42
        random.seed(seed)
        numpy.random.seed(seed)
        torch.manual_seed(seed)
        chosen = [(s, False) for s in specs] if specs is not None else [
            *((s, False) for s in task.tests), *((s, True) for s in task.benchmarks)]
        for spec, benchmark in chosen:
            if on_call is not None:
                on_call()
            args = dict(spec)
            if secret_seed is not None and "seed" in args:
                args["seed"] = gpumode.combine_seed(args["seed"], secret_seed)
            try:
                data = ref.generate_input(**args)
                output = kernel(gpumode.clone_data(data))
                _sync_data(data)
                good, message = ref.check_implementation(data, output)
            except Exception as exc:  # noqa: BLE001 - the test fails with the exception's message
                good, message = False, describe_exception(exc)
            results.append(GpuModeTest(dict(spec), bool(good), str(message), benchmark))
    return GpuModeVerdict(all(t.passed for t in results), tuple(results))


@contextmanager
def _rng_restored(device: torch.device, python: bool = False) -> Iterator[None]:
    """The generators the block seeds (torch's, and with ``python`` random's and numpy's) are put back after it."""
    state = (random.getstate(), numpy.random.get_state()) if python else None
    with torch.random.fork_rng(devices=kernelbench.cuda_indices(device)):
        try:
            yield
        finally:
            if state is not None:
                random.setstate(state[0])
                numpy.random.set_state(state[1])


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def _sync_data(data: Any) -> None:
    tensors = [x for x in task_data.spread(data)[:-1] if isinstance(x, torch.Tensor)]  # through tuples and dicts
    if any(t.is_cuda for t in tensors):
        torch.cuda.synchronize()


# Side by side ----------------------------------------------------------------------------------------------------

# Why kernelkit fails a case that the format's own check passes, by kernelkit's status.
_STRICTER: dict[Status, str] = {
    Status.WEAK: "a trivial output passes these inputs",
    Status.INPUT_MUTATED: "the impl writes into its inputs, which {fmt} does not look at",
    Status.INCORRECT_NUMERICS: "kernelkit compares with a float64 reference, its tolerance rule, and a second input",
    Status.INCORRECT_SHAPE: "kernelkit also checks the number, kind and shape of the outputs",
    Status.INCORRECT_DTYPE: "kernelkit also checks the outputs' dtype and device",
}


class Judged(Protocol):
    """kernelkit's result for a case: a CaseResult, or a BenchResult from a sweep's correctness gate."""

    status: Status
    message: str


@dataclass(frozen=True)
class SideBySide:
    """The format's verdict and kernelkit's on one case, and why they differ."""

    format: str
    format_ok: bool
    format_says: str
    status: Status
    kernelkit_says: str
    agree: bool
    why: str = ""

    def line(self) -> str:
        left = f"{self.format}: {'correct' if self.format_ok else 'incorrect'}"
        tail = f" — {self.why}" if self.why else ""
        return f"{left}; kernelkit: {self.status.value}{tail}"


def side_by_side(verdict: KernelBenchVerdict | GpuModeVerdict, result: Judged) -> SideBySide:
    """Put a format's verdict beside kernelkit's result for the same impl; ``why`` explains a disagreement."""
    fmt = "KernelBench" if isinstance(verdict, KernelBenchVerdict) else "GPU MODE"
    status, says = result.status, result.message
    if status is Status.SKIPPED:
        return SideBySide(fmt, verdict.ok, verdict.describe(), status, says, agree=True, why=f"not run here: {says}")
    kk_ok = status is Status.PASSED
    if verdict.ok == kk_ok:
        why = "" if kk_ok else f"{fmt}: {verdict.message or verdict.describe()}; kernelkit: {says}"
        return SideBySide(fmt, verdict.ok, verdict.describe(), status, says, agree=True, why=why)
    if verdict.ok:
        reason = _STRICTER.get(status, "kernelkit's check failed").format(fmt=fmt)
        return SideBySide(fmt, True, verdict.describe(), status, says, agree=False, why=f"{reason}: {says}")
    why = f"{fmt} says {verdict.message or verdict.describe()}; kernelkit's checks all pass"
    return SideBySide(fmt, False, verdict.describe(), status, says, agree=False, why=why)

