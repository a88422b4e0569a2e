"""The Backend interface: what kernelkit asks of a way to run an impl (a kernel DSL, or PyTorch itself).

An impl names its backend (``@op.impl("triton_flat")`` is a Triton impl); everything kernelkit does differently per
backend is a method here, so no code outside ``kernelkit.backends`` asks which backend it holds:

- ``prepare_process``: what the process must be told before the DSL is first imported (Triton's interpreter and
  Numba's CUDA simulator are chosen at import, by environment variables);
- ``runs_on`` and ``ensure_runnable``: whether an impl can run here, else why not (SKIPPED) or how it failed to
  build (COMPILE_ERROR);
- ``build_state`` / ``build_details``: what a call built (autotuning, torch.compile time), kept with each case;
- ``early_builds``: the impl's kernels whose first build is slow enough to start before the run needs them;
- ``is_compile_error``: which of the DSL's own exceptions are compiler errors;
- ``asm``: the kernels an impl launches, compiled for a GPU target, or why they cannot be shown;
- ``baseline_impl``: the impl an op gets without registering it, for the baselines named after a backend
  (eager: the reference itself; compile: torch.compile of it);
- ``packages``: the distributions whose versions a results fingerprint records.

The defaults describe a backend that runs PyTorch code on any device and builds nothing; a backend overrides what
differs. A new backend is a subclass in its own module plus one line in ``kernelkit.backends.BUILTIN`` (or a
``backends.register(MyBackend())`` call in the user's file, before its impls are declared).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from kernelkit.errors import BackendUnavailable

if TYPE_CHECKING:
    import torch

    from kernelkit.backends.sass import KernelAsm
    from kernelkit.spec import CaseSetup, Impl, Op

AsmKernels = tuple[list["KernelAsm"], list[str]]  # the kernels of one case, and notes about how they were found


class Backend:
    """One way to run an impl. Subclasses set ``name`` and override what differs from running PyTorch code."""

    name: str = ""
    description: str = ""
    packages: Mapping[str, str] = {}  # fingerprint key -> distribution name, e.g. {"triton": "triton"}
    cpu_stand_in: str = ""  # what runs its kernels on the CPU in place of a GPU (registry.CPU_STAND_INS), if any
    # Why ``kernelkit asm`` cannot show this backend's kernels ({impl}: the impl's name); see ``asm``.
    no_asm = ("impl {impl!r} runs PyTorch's own kernels (backend {backend}): asm shows the Triton and CUDA C++ "
              "kernels an impl launches; for torch.compile's code see kernelkit codegen")

    def prepare_process(self, device: str) -> None:
        """Set what the DSL reads when it is first imported; called before any user file is imported."""

    def runs_on(self, device: str) -> bool:
        """Whether impls of this backend can run on ``device`` at all ('cpu' or 'cuda')."""
        return True

    def ensure_runnable(self, impl: Impl, dtype: torch.dtype, device: str) -> None:
        """Raise BackendUnavailable (the case is SKIPPED, with the reason) or CompileError; return when ``impl``
        can run on ``device`` in ``dtype``. The impl's own dtype list is checked before this is called."""

    def build_state(self, op: Op, impl: Impl) -> dict[str, Any]:
        """What the impl's builds look like before a call, for ``build_details`` to tell what the call built."""
        return {}

    def build_details(self, op: Op, impl: Impl, before: dict[str, Any]) -> dict[str, Any]:
        """What the calls since ``build_state`` built (autotuning, compile time), apart from run time."""
        return {}

    def early_builds(self, impl: Impl, device: str) -> list[Any]:
        """The impl's kernels (objects with ``compile()``) whose first build takes tens of seconds, for a run on
        ``device`` to build in a separate process while other cases run (runs/early.py). Default: none."""
        return []

    def is_compile_error(self, exc: BaseException) -> bool:
        """Whether ``exc``, raised by an impl, is this DSL's compiler rejecting a kernel."""
        return False

    def asm(self, case: CaseSetup, arch: str, ir: str, config: int | None) -> AsmKernels:
        """The kernels one call of ``case``'s impl launches, compiled for ``arch``, and notes; BackendUnavailable
        when this backend's kernels cannot be shown (the default), SpecError for an IR it does not have."""
        raise BackendUnavailable(self.no_asm.format(impl=case.impl.name, backend=self.name))

    def baseline_impl(self, op: Op) -> Impl | None:
        """The impl named after this backend that ``op`` has without registering it, if there is one."""
        return None

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.name!r})"
