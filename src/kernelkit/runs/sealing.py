"""The seal on built-in ops and harness objects, taken before a user's file is imported: what the target changed
while this process loaded it (a replaced reference, a patched torch.allclose) is told apart from what the caller
had changed already, so strict mode can call such a target CHEATED (runs/strict.py)."""

from __future__ import annotations

import sys
from typing import Any

from kernelkit.jobs.strict_worker import SEAL
from kernelkit.loading import load
from kernelkit.spec import Op

_builtin: dict[int, tuple[Any, ...]] = {}
# The harness objects already changed since the seal when a run began: the caller's own doing (a test's patch, a
# debugging session), not the target's, whose file the run loads after. Each run records them anew.
_changed_before: dict[str, Any] = {}


def _op_state(op: Op) -> tuple[Any, ...]:
    return (op.reference, op.make_inputs, dict(op.tolerance), op.tolerance_fn, op.bytes_fn, op.flops_fn, op.name)


def seal_builtin_ops() -> None:
    """Record what each built-in op is (reference, inputs, tolerance, cost) before a user's file is imported: a
    file that changes one of them is then told apart from one that uses it. The harness objects that differ from
    the seal already (changed before this run, by its caller) are recorded as they are now."""
    from kernelkit.ops import BUILTIN_OPS

    _changed_before.clear()
    _changed_before.update({name: _current(name) for name in SEAL.tampered()})
    for module in dict.fromkeys(BUILTIN_OPS.values()):
        for op in load(module).values():
            _builtin.setdefault(id(op), (op, _op_state(op)))


def target_tampering() -> list[str]:
    """The harness objects the target changed while this process loaded it: those that differ from the seal, but
    not those its caller had changed already when the run began (and left as they were)."""
    return [name for name in SEAL.tampered()
            if name not in _changed_before or _current(name) is not _changed_before[name]]


def _current(name: str) -> Any:
    module, _, attr = name.rpartition(".")
    return getattr(sys.modules.get(module), attr, None)


def builtin_changes(op: Op) -> list[str]:
    """What of built-in op ``op`` differs from its sealed state (empty for a user's own op)."""
    sealed = _builtin.get(id(op))
    if sealed is None or sealed[0] is not op:
        return []
    names = ("reference", "make_inputs", "tolerance", "tolerance_fn", "bytes_fn", "flops_fn", "name")
    now = _op_state(op)
    return [f"built-in op {sealed[1][-1]!r}'s {n}" for n, a, b in zip(names, sealed[1], now, strict=True)
            if (a != b if n == "tolerance" else a is not b)]
