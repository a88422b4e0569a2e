"""Nsight Compute for one case: re-run it under ncu, profile only the impl's call, read back metrics and findings.

    report = run_ncu("square", "triton_flat", size="8192x8192", dtype="float32")   # or: kernelkit ncu ...

The case runs in a fresh process (``python -m kernelkit.profiling.ncu_driver``) that warms it up outside an NVTX
push/pop range and calls it once inside; ncu profiles only the kernels inside that range and exports one report,
so the kernel is profiled once. The report is read with NVIDIA's ncu_report module from the same Nsight Compute
install where it imports (ncu_rep.py), else read back twice as CSV (raw page: metrics; details page: rule findings;
ncu_csv.py). ``NcuReport.reader`` says which, and why not ncu_report.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from kernelkit import target as targets
from kernelkit.errors import BackendUnavailable, KernelkitError
from kernelkit.profiling import ncu_rep
from kernelkit.profiling.ncu_csv import NcuKernel, parse_pages
from kernelkit.spec import Size, dtype_name

if TYPE_CHECKING:
    import torch

ERROR_MARK = "kernelkit-ncu-driver: error:"  # the driver prints this before a failure, for run_ncu to find

NCU_ENV = "KERNELKIT_NCU"  # the ncu executable to use, before any search
NCU_SEARCH_GLOBS: tuple[str, ...] = ("/usr/local/cuda*/bin/ncu", "/opt/nvidia/nsight-compute/*/ncu")
# ncu locks the clocks to base by default; kernelkit reports kernels at the clocks they really run at (and locking
# needs rights a shared machine may not give).
CLOCK_CONTROL = ("--clock-control", "none")
DEFAULT_SET = "basic"  # ncu's own default set, named so that --metrics adds to it instead of replacing it
READER_NCU_REPORT, READER_CSV = "ncu_report", "csv"  # how a report was read (NcuReport.reader)
RANGE_PREFIX = "kernelkit:"
_NVTX_QUANTIFIERS = re.compile(r"[@,\[\]/*+\\]")  # characters with a meaning in --nvtx-include expressions
PERMISSION_HELP = (
    "ncu may not read this GPU's performance counters (ERR_NVGPUCTRPERM). Run it as root (sudo -E env "
    "PATH=$PATH kernelkit ncu ...), or allow every user: put `options nvidia NVreg_RestrictProfilingToAdminUsers=0` "
    "in a file under /etc/modprobe.d/ and reload the nvidia module (or reboot); in a container, start it with "
    "--cap-add SYS_ADMIN. See https://developer.nvidia.com/ERR_NVGPUCTRPERM"
)


class NcuError(KernelkitError):
    """ncu ran but gave no usable profile (no counter access, no kernel profiled, the case failed). ``output``
    holds ncu's own output."""

    def __init__(self, message: str, output: str = "") -> None:
        super().__init__(message)
        self.output = output


class NcuPermissionError(NcuError):
    """ncu may not read the GPU's performance counters (ERR_NVGPUCTRPERM)."""


class NcuNoKernels(NcuError):
    """ncu profiled no kernel: the impl launched none inside the NVTX range, or the filter matched nothing."""


class NcuNotFound(BackendUnavailable):
    """No ncu executable on PATH or in the usual install folders."""


@dataclass
class NcuReport:
    """What ncu measured for one case: one NcuKernel per kernel launched by the impl's one profiled call."""

    case: str
    nvtx_range: str
    ncu: str
    section_set: str
    metrics: list[str]
    command: list[str]
    kernels: list[NcuKernel]
    output: str
    report_path: str | None = None
    reader: str = READER_CSV  # READER_NCU_REPORT, or READER_CSV and why not ncu_report

    def to_dict(self) -> dict[str, Any]:
        return {"case": self.case, "nvtx_range": self.nvtx_range, "ncu": self.ncu, "set": self.section_set,
                "metrics": self.metrics, "command": self.command, "report_path": self.report_path,
                "reader": self.reader, "ncu_messages": ncu_messages(self.output),
                "kernels": [k.to_dict(self.metrics) for k in self.kernels]}


def _version_key(path: str) -> tuple[int, ...]:
    """'/opt/nvidia/nsight-compute/2025.3.1/ncu' -> (2025, 3, 1); '/usr/local/cuda/bin/ncu' -> ()."""
    return tuple(int(n) for n in re.findall(r"\d+", path))


def find_ncu() -> Path:
    """$KERNELKIT_NCU, else ncu on PATH, else the newest under /usr/local/cuda*/bin or /opt/nvidia/nsight-compute/*/."""
    if os.environ.get(NCU_ENV):
        return Path(os.environ[NCU_ENV])
    on_path = shutil.which("ncu")
    if on_path:
        return Path(on_path)
    for pattern in NCU_SEARCH_GLOBS:
        found = [p for p in glob.glob(pattern) if os.access(p, os.X_OK)]
        if found:
            return Path(max(found, key=_version_key))
    raise NcuNotFound(
        f"Nsight Compute (ncu) not found: not in ${NCU_ENV}, not on PATH, not in {', '.join(NCU_SEARCH_GLOBS)}. "
        "Install Nsight Compute (it ships with the CUDA toolkit, or as the nsight-compute package from NVIDIA's "
        f"repositories), then put its folder on PATH or set {NCU_ENV}=/path/to/ncu."
    )


def nvtx_range_name(label: str) -> str:
    """'square/triton_flat/8192x8192/float32' -> 'kernelkit:square:triton_flat:8192x8192:float32'.

    The label's '/' (and any other NVTX-filter quantifier) becomes ':' so the name needs no escaping.
    """
    return RANGE_PREFIX + _NVTX_QUANTIFIERS.sub(":", label)


def nvtx_include(range_name: str) -> str:
    """The --nvtx-include expression for a push/pop range: a trailing '/' (without it ncu matches start/end
    ranges); quantifier characters in the name escaped with '\\'."""
    return _NVTX_QUANTIFIERS.sub(lambda m: "\\" + m.group(0), range_name) + "/"


def profile_command(ncu: str | Path, report_base: str | Path, range_name: str, driver_args: Sequence[str], *,
                    section_set: str | None = None, metrics: Sequence[str] = ()) -> list[str]:
    """The ncu command line that profiles the driver's one call inside ``range_name`` into ``report_base``."""
    extra = ["--metrics", ",".join(metrics)] if metrics else []
    return [str(ncu), *CLOCK_CONTROL, "--nvtx", "--nvtx-include", nvtx_include(range_name),
            "--set", section_set or DEFAULT_SET, *extra, "-o", str(report_base), "--force-overwrite",
            sys.executable, "-m", "kernelkit.profiling.ncu_driver", *driver_args, "--range", range_name]


def import_commands(ncu: str | Path, report: str | Path) -> tuple[list[str], list[str]]:
    """The two read-backs of one report: the raw page (every metric per kernel) and the details page (with rules)."""
    base = [str(ncu), "--import", str(report), "--csv", "--print-units", "base"]
    return [*base, "--page", "raw"], [*base, "--page", "details", "--print-details", "all"]


def ncu_messages(output: str) -> list[str]:
    """ncu's ==WARNING== / ==ERROR== lines, each with the plain lines that follow it (e.g. 'Available Kernels:')."""
    messages: list[str] = []
    for line in output.splitlines():
        if line.startswith(("==WARNING==", "==ERROR==")):
            messages.append(line.strip())
        elif messages and line.strip() and not line.startswith("==") and len(messages[-1]) < 2000:
            messages[-1] += "\n  " + line.strip()
    return messages


def check_profile_output(output: str, returncode: int, report: Path, range_name: str) -> None:
    """Raise the NcuError that explains a profiling run that gave no report to read."""
    if "ERR_NVGPUCTRPERM" in output:
        raise NcuPermissionError(PERMISSION_HELP, output)
    failed = [line.split(ERROR_MARK, 1)[1].strip() for line in output.splitlines() if ERROR_MARK in line]
    if failed:
        raise NcuError(f"the case failed under ncu before it could be profiled: {failed[-1]}", output)
    said = "\n".join(ncu_messages(output))
    if "No kernels were profiled" in output or (returncode == 0 and not report.exists()):
        raise NcuNoKernels(
            f"ncu profiled no kernel inside the NVTX range {range_name!r} (filter --nvtx-include "
            f"{nvtx_include(range_name)!r}): the impl launched no CUDA kernel there, or ncu did not see the "
            f"range. ncu said:\n{said or output[-2000:]}", output)
    if returncode != 0 or not report.exists():
        raise NcuError(f"ncu failed (exit {returncode}):\n{said or output[-2000:]}", output)


def resolve_case(target: str, impl: str, op_name: str | None, size: Size | str | None,
                 dtype: torch.dtype | str | None) -> tuple[str, list[str]]:
    """Load the op here (bad names fail fast, before ncu starts): -> (the case's label, the driver's arguments)."""
    opened = targets.open_target(target, "cuda")
    op = opened.op(op_name)
    chosen, case_size, case_dtype = targets.pick(op, impl, size, dtype, "cuda")
    label = targets.CaseSetup(op, chosen, case_size, case_dtype, "cuda", ()).label
    args = [opened.source if Path(opened.source).is_file() else target, impl, "--op", op.name,
            "--size", "x".join(map(str, case_size)), "--dtype", dtype_name(case_dtype)]
    return label, args


def driver_env() -> dict[str, str]:
    """This environment, with this kernelkit first on PYTHONPATH so the driver imports the same code."""
    here = str(Path(__file__).resolve().parents[2])  # the folder that holds this kernelkit package
    path = os.pathsep.join(filter(None, [here, os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PYTHONUNBUFFERED": "1"}


def _run(command: list[str], timeout: float, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    try:
        return subprocess.run(command, capture_output=True, text=True, errors="replace", timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        raise NcuError(f"ncu did not finish within {timeout:g} s: {' '.join(command)}") from None


def run_ncu(target: str, impl: str, *, op_name: str | None = None, size: Size | str | None = None,
            dtype: torch.dtype | str | None = None, section_set: str | None = None, metrics: Sequence[str] = (),
            seed: int = 0, warmup: int = 3, timeout: float = 600.0, ncu: str | Path | None = None,
            export: str | Path | None = None) -> NcuReport:
    """Profile one case (op x impl x size x dtype) on CUDA under Nsight Compute.

    ``section_set``: ncu's --set (basic by default; full for everything); ``metrics`` are collected on top.
    ``export`` keeps ncu's .ncu-rep report there (open it in ncu-ui). Raises NcuNotFound without ncu, NcuError
    (NcuPermissionError, NcuNoKernels) when ncu gives no profile, KernelkitError for a bad target or no GPU.
    """
    ncu_path = Path(ncu) if ncu else find_ncu()
    targets.resolve_device("cuda")
    label, driver_args = resolve_case(target, impl, op_name, size, dtype)
    range_name = nvtx_range_name(label)
    env = driver_env()
    with tempfile.TemporaryDirectory(prefix="kernelkit-ncu-") as tmp:
        report = Path(tmp) / "case.ncu-rep"
        command = profile_command(ncu_path, Path(tmp) / "case", range_name,
                                  [*driver_args, "--seed", str(seed), "--warmup", str(warmup)],
                                  section_set=section_set, metrics=metrics)
        profiled = _run(command, timeout, env)
        output = profiled.stdout + profiled.stderr
        check_profile_output(output, profiled.returncode, report, range_name)
        kernels, reader = read_report(ncu_path, report, timeout, output)
        kept = None
        if export:
            kept = str(shutil.copyfile(report, Path(export).with_suffix(".ncu-rep")))
    if not kernels:
        raise NcuNoKernels(f"ncu's report of {label} lists no kernel; ncu said:\n"
                           f"{chr(10).join(ncu_messages(output)) or output[-2000:]}", output)
    return NcuReport(label, range_name, str(ncu_path), section_set or DEFAULT_SET, list(metrics), command,
                     kernels, output, kept, reader)


def read_report(ncu: str | Path, report: str | Path, timeout: float = 600.0,
                output: str = "") -> tuple[list[NcuKernel], str]:
    """The kernels of ``report`` and the reader that read them: NVIDIA's ncu_report from the install of ``ncu``
    where it imports and reads the report, in a child interpreter ('ncu_report'), else ncu's CSV pages
    ('csv (why not ncu_report)')."""
    try:
        return ncu_rep.read_isolated(ncu, report, min(timeout, 120.0)), READER_NCU_REPORT
    except ncu_rep.ReportReadError as exc:
        why_not = str(exc)
    return read_csv_pages(ncu, report, timeout, output), f"{READER_CSV} ({why_not})"


def read_csv_pages(ncu: str | Path, report: str | Path, timeout: float = 600.0, output: str = "") -> list[NcuKernel]:
    """The kernels of ``report`` from ncu's raw and details CSV pages (two ``ncu --import`` runs)."""
    pages = []
    for read_back in import_commands(ncu, report):
        done = _run(read_back, timeout, {**os.environ, "LC_ALL": "C"})  # C locale: '1,234.5' numbers
        if done.returncode != 0:
            raise NcuError(f"ncu could not read its report back (exit {done.returncode}): "
                           f"{' '.join(read_back)}\n{done.stderr[-2000:]}", output)
        pages.append(done.stdout)
    return parse_pages(*pages)
