"""Load every problem of a KernelBench checkout without running it: which would not load, and why.

For each problem file: import it, call get_init_inputs(), construct Model on the meta device (no memory; on the
CPU when meta fails), call get_inputs() on the meta device for the input shapes and bytes, and run forward on
the meta device for the output shapes. A failure in the first four is a load failure; a forward that cannot run
on the meta device (data-dependent shapes, .item()) is only noted: it says nothing about a real device.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernelkit.errors import LoadError, describe_exception
from kernelkit.formats import kernelbench
from kernelkit.spec import Size


@dataclass(frozen=True)
class ScanResult:
    """One problem file: ``stage`` is where it failed to load ('' when it loaded)."""

    path: Path
    stage: str = ""
    message: str = ""
    input_shapes: tuple[Size, ...] = ()
    input_bytes: int = 0
    output_shapes: tuple[Size, ...] = ()
    note: str = ""

    @property
    def loaded(self) -> bool:
        return not self.stage


def scan_problem(path: Path) -> ScanResult:
    try:
        problem = kernelbench.load_problem(path)
    except LoadError as exc:
        return ScanResult(path, "import", str(exc))
    try:
        with kernelbench.seeded(kernelbench.KERNELBENCH_SEED):
            init = list(problem.get_init_inputs())
    except Exception as exc:  # noqa: BLE001 - reported
        return ScanResult(path, "get_init_inputs", describe_exception(exc))
    note = ""
    try:
        with torch.device("meta"), kernelbench.seeded(kernelbench.KERNELBENCH_SEED):
            model = problem.model(*init)
    except Exception as meta_exc:  # noqa: BLE001 - some constructors need real tensors: try the CPU
        try:
            with torch.no_grad(), kernelbench.seeded(kernelbench.KERNELBENCH_SEED):
                problem.model(*init)
            model, note = None, f"Model(*init) needs real tensors ({describe_exception(meta_exc)}); built on the CPU"
        except Exception as exc:  # noqa: BLE001 - reported
            return ScanResult(path, "Model(*init)", describe_exception(exc))
    try:
        with torch.device("meta"), kernelbench.seeded(0):
            inputs = list(problem.get_inputs())
    except Exception as exc:  # noqa: BLE001 - reported
        return ScanResult(path, "get_inputs", describe_exception(exc), note=note)
    tensors = [x for x in inputs if isinstance(x, torch.Tensor)]
    shapes = tuple(tuple(x.shape) for x in tensors)
    nbytes = sum(x.numel() * x.element_size() for x in tensors)
    outputs: tuple[Size, ...] = ()
    if model is not None and any(isinstance(m, torch.nn.RNNBase) for m in model.modules()):
        note = "forward not run on the meta device: recurrent layers take minutes there"
    elif model is not None:
        try:
            with torch.no_grad():
                out = model(*[_on_meta(x) for x in inputs])
            outs = out if isinstance(out, (tuple, list)) else (out,)
            outputs = tuple(tuple(o.shape) for o in outs if isinstance(o, torch.Tensor))
        except Exception as exc:  # noqa: BLE001 - noted only
            note = f"forward does not run on the meta device: {describe_exception(exc)}"
    return ScanResult(path, input_shapes=shapes, input_bytes=nbytes, output_shapes=outputs, note=note)


def _on_meta(x: Any) -> Any:
    return x.to("meta") if isinstance(x, torch.Tensor) and x.device.type != "meta" else x


def level_dirs(root: str | Path) -> list[Path]:
    """The level folders of a KernelBench checkout (``<root>/KernelBench/level*`` or ``<root>/level*``), or
    ``root`` itself when it holds problem files."""
    root = Path(root)
    for base in (root / "KernelBench", root):
        found = sorted((p for p in base.glob("level*") if p.is_dir()), key=lambda p: (len(p.name), p.name))
        if found:
            return found
    return [root]


def scan(root: str | Path) -> dict[str, list[ScanResult]]:
    """Every problem of every level under ``root``, by level folder name."""
    return {d.name: [scan_problem(p) for p in kernelbench.problem_files(d)] for d in level_dirs(root)}
