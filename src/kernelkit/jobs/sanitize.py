"""``kernelkit check --sanitize TOOL``: the same check again under one of compute-sanitizer's tools (GPU).

Guard regions (jobs/guards.py) catch a write past a tensor the call allocated through torch's factories;
memcheck catches every out-of-bounds or misaligned access of every kernel, at a large cost in time; racecheck
reports shared-memory data races, initcheck reads of global memory never written, synccheck invalid uses of
barriers and other synchronization primitives. The check is re-run as a child process under
``compute-sanitizer --tool TOOL --target-processes all`` (the workers are its children), and its error summary
decides the exit code. memcheck also counts CUDA API calls that returned an error (a library probing pointer
attributes, say, and handling the answer): those are listed apart and alone do not fail the check.
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
SANITIZERS = ("memcheck", "racecheck", "initcheck", "synccheck")  # compute-sanitizer's --tool values
SUMMARY = re.compile(r"ERROR SUMMARY:\s*(\d+)\s+error")
# racecheck's own summary: "RACECHECK SUMMARY: 3 hazards displayed (2 errors, 1 warning)"; its hazards that are
# errors count, its warnings do not.
RACE_SUMMARY = re.compile(r"RACECHECK SUMMARY:[^(\n]*\((\d+)\s+error")
# An error a CUDA API call returned, which memcheck also counts in its summary: "Program hit cudaErrorInvalidValue
# (error 1) due to "invalid argument" on CUDA API call to cudaPointerGetAttributes." Libraries probe with such calls
# (pointer attributes, peer access) and handle the error; it is not a kernel's memory access.
API_ERROR = re.compile(r"Program hit (\w+)[^\n]*? on CUDA API call to (\w+)")


@dataclass(frozen=True)
class SanitizerRun:
    returncode: int
    errors: int  # what the tool's summaries count, API-call errors included
    output: str
    api_calls: tuple[str, ...] = ()  # "cudaErrorX from cudaY" for each API-call error the tool reported

    @property
    def kernel_errors(self) -> int:
        """The errors that are not an API call's: memory accesses, hazards, barriers."""
        return max(self.errors - len(self.api_calls), 0)

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


def command(check_args: Sequence[str], path: str, tool: str = "memcheck") -> list[str]:
    """The sanitized command line: compute-sanitizer at ``path`` running ``tool`` over the check; ``check_args``
    are the check's own arguments, its --sanitize (with its value) left out."""
    if tool not in SANITIZERS:
        raise ValueError(f"unknown compute-sanitizer tool {tool!r}; one of {', '.join(SANITIZERS)}")
    args: list[str] = []
    skip = False
    for arg in check_args:
        if skip:
            skip = False
        elif arg == "--sanitize":
            skip = True  # and its value, the next argument
        elif not arg.startswith("--sanitize="):
            args.append(arg)
    return [path, "--tool", tool, "--target-processes", "all", "--error-exitcode", str(ERROR_EXIT),
            sys.executable, "-m", "kernelkit", "check", *args]


def errors_in(output: str) -> int:
    """The errors compute-sanitizer's summaries report in ``output`` (every process's ERROR SUMMARY; racecheck's
    own summary where no ERROR SUMMARY was printed)."""
    counts = [int(m) for m in SUMMARY.findall(output)] or [int(m) for m in RACE_SUMMARY.findall(output)]
    return sum(counts)


def api_calls_in(output: str) -> tuple[str, ...]:
    """Each API-call error reported in ``output``, as 'cudaErrorInvalidValue from cudaPointerGetAttributes'."""
    return tuple(f"{error} from {call}" for error, call in API_ERROR.findall(output))


def run(check_args: Sequence[str], timeout: float | None = None, tool: str = "memcheck") -> SanitizerRun:
    """Run the check under compute-sanitizer's ``tool``; its output and error count."""
    done = subprocess.run(command(check_args, find_tool(), tool), capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    return SanitizerRun(done.returncode, errors_in(output), output, api_calls_in(output))
