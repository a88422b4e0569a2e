"""What torch.compile makes of an op: the code inductor generates for its reference at one size and dtype.

The same code ``TORCH_LOGS=output_code`` prints: a Python module per compiled graph, holding the C++ (OpenMP)
kernels on the CPU or the Triton kernels on a GPU, and the wrapper that allocates buffers and launches them.
It is captured through inductor's own output-code hook (``torch._inductor.utils.run_and_get_code``, what
PyTorch's tests use), and an FX-graph cache hit passes its stored code through that hook too.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch

from kernelkit.backends import compiled
from kernelkit.errors import CompileError
from kernelkit.spec import Op, Size, dtype_name, to_dtype, to_size
from kernelkit.target import open_target, resolve_device

DEFAULT_OUT_DIR = Path("kernelkit-codegen")


@dataclass(frozen=True)
class GeneratedCode:
    """Inductor's output for one op at one size, dtype and device: one Python module per compiled graph."""

    op: str
    size: Size
    dtype: torch.dtype
    device: str
    mode: str
    sources: tuple[str, ...]  # more than one where Dynamo split the reference into several graphs

    @property
    def stem(self) -> str:
        """'square_1823x781_float32': the file name of the saved code, without its suffix."""
        return f"{self.op}_{'x'.join(map(str, self.size))}_{dtype_name(self.dtype)}"

    @property
    def text(self) -> str:
        """Every graph's module, each under a header naming the case."""
        parts = []
        for i, source in enumerate(self.sources):
            graph = f", graph {i + 1} of {len(self.sources)}" if len(self.sources) > 1 else ""
            header = (f"# inductor output for {self.op} {'x'.join(map(str, self.size))} {dtype_name(self.dtype)} "
                      f"on {self.device} (mode {self.mode}{graph})\n")
            parts.append(header + source)
        return "\n\n".join(parts)

    def save(self, out_dir: str | Path = DEFAULT_OUT_DIR) -> list[Path]:
        """Write ``<out_dir>/<stem>.py`` (``<stem>_graph<N>.py`` for each graph when there are several)."""
        folder = Path(out_dir)
        folder.mkdir(parents=True, exist_ok=True)
        if len(self.sources) == 1:
            paths = [folder / f"{self.stem}.py"]
        else:
            paths = [folder / f"{self.stem}_graph{i + 1}.py" for i in range(len(self.sources))]
        for path, source in zip(paths, self.sources, strict=True):
            path.write_text(source)
        return paths


def codegen(
    target: str | Op,
    size: Size | str | None = None,
    dtype: torch.dtype | str | None = None,
    device: str | None = None,
    *,
    mode: str | None = None,
    op_name: str | None = None,
) -> GeneratedCode:
    """Compile ``target``'s reference for one case with torch.compile and return the code inductor generated.

    target: a built-in op name, a .py file of ops (``op_name`` picks one when it defines several), or an Op.
    size: e.g. (1823, 781) or "1823x781", default the op's first size for the device; dtype: default the op's
    first; device: "cpu" or "cuda", default cuda when a GPU is visible; mode: torch.compile's mode, default
    ``$KERNELKIT_COMPILE_MODE`` or "default". Inputs are the op's inputs for that case (seed 0).
    Resets Dynamo's caches in this process (that is what makes inductor compile afresh, so there is code to see):
    functions compiled earlier compile again on their next call.
    """
    dev = resolve_device(device)
    op = target if isinstance(target, Op) else open_target(target, dev).op(op_name)
    shape, kind = to_size(size), to_dtype(dtype)
    shape = op.sizes_for(dev)[0] if shape is None else shape
    kind = op.dtypes[0] if kind is None else kind
    chosen_mode = compiled.resolve_mode(mode)
    inputs = tuple(op.make_inputs(shape, kind, torch.device(dev), 0))
    sources = _capture(op, inputs, chosen_mode)
    return GeneratedCode(op.name, shape, kind, dev, chosen_mode, tuple(sources))


def _capture(op: Op, inputs: Sequence[Any], mode: str) -> list[str]:
    """Run the compiled reference once and return the modules inductor wrote (the output_code artifact)."""
    try:
        from torch._inductor.utils import run_and_get_code
    except ImportError:
        raise CompileError(
            f"torch {torch.__version__} has no torch._inductor.utils.run_and_get_code to capture inductor's output; "
            "run your reference under torch.compile with TORCH_LOGS=output_code to see it instead"
        ) from None
    fn = torch.compile(op.reference, mode=mode, dynamic=False)  # one case, one shape: see backends/compiled.py
    try:
        _, sources = run_and_get_code(fn, *inputs)
    except Exception as exc:
        raise CompileError(f"torch.compile (mode {mode!r}) of {op.name!r} failed: {type(exc).__name__}: {exc}") from exc
    finally:
        compiled.forget_signatures()  # run_and_get_code reset Dynamo: the baseline's next calls compile again
    if not sources:
        raise CompileError(
            f"inductor generated no code for {op.name!r}: its reference has no tensor operations Dynamo could "
            "capture (or every one of them broke the graph)"
        )
    return list(sources)
