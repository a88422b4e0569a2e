"""Helpers shared by the outside-format tests that write their own problems: a GPU MODE task folder and a KernelBench
level folder in their real layouts, and a worker stand-in that runs each job here as a fresh worker would (it has
imported nothing: the job's op file is imported again, so nothing the judging process made reaches it)."""

from __future__ import annotations

import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from kernelkit import loading

CHECK = """
def check_implementation(data, output):
    expected = ref_kernel(data)
    good = torch.allclose(output.float(), expected.float(), atol=1e-5, rtol=1e-5)
    return good, "" if good else "mismatch"
"""


def write_task(folder: Path, reference: str, submission: str, tests: Sequence[Mapping[str, Any]],
               benchmarks: Sequence[Mapping[str, Any]] = ()) -> Path:
    """A GPU MODE task folder: task.yml (its tests and benchmarks, flow style as GPU MODE writes them),
    reference.py (``reference``: ref_kernel and generate_input, with `import torch` and CHECK's
    check_implementation added) and submission.py (``submission``: custom_kernel)."""
    folder.mkdir(parents=True, exist_ok=True)

    def specs(entries: Sequence[Mapping[str, Any]]) -> str:
        return "".join("  - {" + ", ".join(f'"{k}": {v!r}' for k, v in entry.items()) + "}\n" for entry in entries)

    yml = ('files:\n  - {"name": "submission.py", "source": "@SUBMISSION@"}\n'
           '  - {"name": "reference.py", "source": "reference.py"}\n\n'
           f"tests:\n{specs(tests)}" + (f"\nbenchmarks:\n{specs(benchmarks)}" if benchmarks else ""))
    (folder / "task.yml").write_text(yml)
    (folder / "reference.py").write_text("import torch\n\n" + textwrap.dedent(reference) + CHECK)
    (folder / "submission.py").write_text("import torch\n\n" + textwrap.dedent(submission))
    return folder


def write_level(folder: Path, problems: Mapping[str, str]) -> Path:
    """A KernelBench level: one file per problem (name -> its Model, get_inputs and get_init_inputs)."""
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in problems.items():
        (folder / f"{name}.py").write_text("import torch\nimport torch.nn as nn\n\n" + textwrap.dedent(text))
    return folder


class FreshWorker:
    """runner.Worker's interface, each job run in this process as a fresh worker runs it: its op file imported
    again (kernelkit's loader forgets what it loaded here for the job's length)."""

    def __init__(self, device: str, log_path: Path | None = None, env: Any = None, on_phase: Any = None) -> None:
        self.device = device
        self.on_phase = on_phase
        self.jobs = 0

    def run(self, job: Any, timeout: float, limit: str = "") -> Any:
        saved = dict(loading._loaded)
        loading._loaded.clear()
        try:
            self.jobs += 1
            return job.execute(self.device)
        finally:
            loading._loaded.clear()
            loading._loaded.update(saved)

    def stop(self) -> None:
        pass
