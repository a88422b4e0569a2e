"""Plain-data results: the status a case ends in and what was found on the way."""

from __future__ import annotations

import enum
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

from kernelkit import wire

# The baselines every op has without registering them (spec.BASELINES says what each is): here, where every layer
# and the CLI can read the names without importing torch.
BASELINE_NAMES = ("eager", "compile")


@wire.register
class Status(str, enum.Enum):
    """How a case ended. Never a bare boolean: each failure says which way it failed."""

    PASSED = "PASSED"
    WEAK = "WEAK"  # passed, but a trivial output (zeros, the input, a constant) would pass too
    INCORRECT_SHAPE = "INCORRECT_SHAPE"  # wrong shape, or wrong number/kind of outputs
    INCORRECT_DTYPE = "INCORRECT_DTYPE"  # wrong tensor type: dtype or device
    INCORRECT_NUMERICS = "INCORRECT_NUMERICS"  # values outside tolerance, or a stale output
    INPUT_MUTATED = "INPUT_MUTATED"
    INPUT_ERROR = "INPUT_ERROR"  # the op's inputs do not fit its reference (it raised on them): not the impl's fault
    COMPILE_ERROR = "COMPILE_ERROR"
    RUNTIME_ERROR = "RUNTIME_ERROR"
    TIMEOUT = "TIMEOUT"
    CRASHED = "CRASHED"  # the worker process died (segfault, abort, poisoned CUDA context)
    # Strict mode's (jobs/strict.py): the harness saw what an honest kernel does not do; the message names it.
    CHEATED = "CHEATED"  # replayed output, work off the timed call, a Tensor subclass, a replaced harness object
    FALLBACK = "FALLBACK"  # the declared kernels never launched, or aten's kernels took most of the device time
    OUT_OF_BOUNDS = "OUT_OF_BOUNDS"  # a write into the canaries around a tensor the call allocated
    SUSPECT = "SUSPECT"  # timed above 105% of the calibrated ceiling: skipped work or a wrong cost model
    SKIPPED = "SKIPPED"

    @property
    def ok(self) -> bool:
        return self is Status.PASSED

    @property
    def failed(self) -> bool:
        return self not in (Status.PASSED, Status.SKIPPED)


@wire.register
@dataclass(frozen=True)
class Mismatch:
    """One element that is outside tolerance: its index and both values."""

    index: tuple[int, ...]
    got: float
    expected: float


@wire.register
@dataclass(frozen=True)
class Comparison:
    """The outcome of comparing one output tensor with the reference."""

    ok: bool
    max_abs_err: float
    max_rel_err: float
    n_mismatched: int
    n_total: int
    mismatches: tuple[Mismatch, ...] = ()
    atol: float = 0.0
    rtol: float = 0.0
    ref_err: float = 0.0  # the low-precision reference's own error (see verify.tolerance_for)

    def _rel_text(self) -> str:
        """The max relative error, over the elements whose reference is not 0 (undefined where it is)."""
        if self.max_rel_err == 0 and self.max_abs_err > 0:
            return "n/a (the reference is 0 where they differ)"
        return f"{self.max_rel_err:.3g}"

    def describe(self) -> str:
        text = (
            f"{self.n_mismatched} of {self.n_total} elements differ; "
            f"max abs err {self.max_abs_err:.3g}, max rel err {self._rel_text()} "
            f"(allowed {self.atol:.2g} + {self.rtol:.2g}*|ref| + 2*{self.ref_err:.2g}*(1+|ref|))"
        )
        if self.mismatches:
            shown = ", ".join(f"{list(m.index)}: got {m.got:.6g}, expected {m.expected:.6g}" for m in self.mismatches)
            text += f"; first mismatches: {shown}"
        return text


@wire.register
@dataclass
class CaseResult:
    """What happened to one case (op x impl x size x dtype x seed)."""

    op: str
    impl: str
    backend: str
    size: tuple[int, ...]
    dtype: str
    seed: int
    device: str
    status: Status
    message: str = ""
    seconds: float = 0.0  # wall time of the whole check (references, probes): not a kernel timing
    max_abs_err: float | None = None
    max_rel_err: float | None = None
    bytes: int | None = None
    flops: int | None = None
    log: str = ""  # the tail of what the worker printed, kept when a case fails
    details: dict[str, Any] = field(default_factory=dict)
    warnings: list[str] = field(default_factory=list)  # what the worker warned about while it checked the case
    gpu: int | None = None  # the GPU that ran it, in a run spread over several (--gpus, --ray); else None

    @property
    def case_id(self) -> str:
        size = "x".join(map(str, self.size))
        return f"{self.op}/{self.impl}/{size}/{self.dtype}/seed{self.seed}"

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["status"] = self.status.value
        data["size"] = list(self.size)
        data["case"] = self.case_id
        return data


OnResult = Callable[[CaseResult], None]

SIZE_LABEL = "size_label"  # a result's details key: its size as its op shows it (a GPU MODE spec: size=16 seed=4)


def size_text(result: Any) -> str:
    """How a result's size is shown: its op's own label when it has one (details[SIZE_LABEL]), else 1823x781."""
    details = getattr(result, "details", None)
    label = details.get(SIZE_LABEL) if isinstance(details, dict) else None
    return label if isinstance(label, str) and label else "x".join(map(str, result.size))


def case_text(result: Any) -> str:
    """A result's case as people read it: its case_id, the size shown by ``size_text``."""
    parts = result.case_id.split("/")
    if len(parts) >= 3:
        parts[2] = size_text(result)
    return "/".join(parts)


@dataclass
class RunReport:
    """Every finished case of a check, in plan order; ``interrupted`` when Ctrl-C stopped the run early."""

    device: str
    results: list[CaseResult] = field(default_factory=list)
    interrupted: bool = False
    planned: int = 0
    strict: bool = False  # judged in strict mode
    path: str = ""  # one line: which path judged the run (strict mode or the fast path), and why

    @property
    def ok(self) -> bool:
        return not self.interrupted and bool(self.results) and all(r.status.ok for r in self.results)
