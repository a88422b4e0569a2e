"""``kernelkit check --sanitize``: the same check again under compute-sanitizer's memcheck (GPU).

Guard regions (jobs/guards.py) catch a write past a tensor the call allocated through torch's factories;
memcheck catches every out-of-bounds or misaligned access of every kernel, at a large cost in time. The check is
re-run as a child process under ``compute-sanitizer --tool memcheck --target-processes all`` (the workers are
its children), and its error summary decides the exit code.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from kernelkit.errors import BackendUnavailable

ERROR_EXIT = 86  # compute-sanitizer's exit code when it found errors (--error-exitcode)
SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")


@dataclass(frozen=True)
class SanitizerRun:
    returncode: int
    errors: int
    output: str

    @property
    def ok(self) -> bool:
        return self.returncode == 0 and self.errors == 0


def find_tool() -> str:
    """compute-sanitizer's path: on PATH, else under $CUDA_HOME or /usr/local/cuda; BackendUnavailable if none."""
    found = shutil.which("compute-sanitizer")
    if found:
        return found
    for root in (os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH"), "/usr/local/cuda"):
        if root and (Path(root) / "bin" / "compute-sanitizer").is_file():
            return str(Path(root) / "bin" / "compute-sanitizer")
    raise BackendUnavailable("--sanitize needs compute-sanitizer (CUDA toolkit), and none is installed here")


def command(check_args: Sequence[str], tool: str) -> list[str]:
    """The sanitized command line: ``check_args`` are the check's own arguments, without --sanitize."""
    args = [a for a in check_args if a != "--sanitize"]
    return [tool, "--tool", "memcheck", "--target-processes", "all", "--error-exitcode", str(ERROR_EXIT),
            sys.executable, "-m", "kernelkit", "check", *args]


def run(check_args: Sequence[str], timeout: float | None = None) -> SanitizerRun:
    """Run the check under memcheck; its output and error count."""
    done = subprocess.run(command(check_args, find_tool()), capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    counts = [int(m) for m in SUMMARY.findall(output)]
    return SanitizerRun(done.returncode, sum(counts), output)
