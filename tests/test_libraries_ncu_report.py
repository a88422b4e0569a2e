"""NVIDIA's ncu_report module for .ncu-rep reports, the CSV pages where it is missing: where kernelkit finds it (the
Nsight Compute install of the ncu it runs), which reader run_ncu takes and why, and that both readers give the same
kernel records. On the CPU with a stand-in ncu and a stand-in ncu_report that mirrors NVIDIA's interface (load_report
-> ranges -> actions -> metrics and rule results); on a GPU machine with ncu, one real profile read both ways.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest

from kernelkit.profiling import ncu, ncu_rep
from kernelkit.profiling.ncu_csv import parse_pages
from test_profile_ncu import DETAILS_TWO_KERNELS, FAKE_NCU, RAW_TWO_KERNELS, TORCH_KERNEL, _executable

# The stand-in keeps NVIDIA's names: IAction.NameBase_*, IMetric.ValueKind_*, load_report, num_ranges/range_by_idx,
# num_actions/action_by_idx, name(base), metric_names, metric_by_name, kind/as_double/as_uint64/as_string/unit,
# rule_results_as_dicts. It reads the actions from actions.json beside itself; "fail" makes load_report raise.
FAKE_NCU_REPORT = '''
import json, pathlib


class IAction:
    NameBase_FUNCTION, NameBase_DEMANGLED, NameBase_MANGLED = 0, 1, 2


class IMetric:
    ValueKind_UNKNOWN, ValueKind_ANY, ValueKind_STRING, ValueKind_FLOAT, ValueKind_DOUBLE = 0, 1, 2, 3, 4
    ValueKind_UINT32, ValueKind_UINT64 = 5, 6


class Metric:
    def __init__(self, kind, value, unit):
        self._kind, self._value, self._unit = getattr(IMetric, "ValueKind_" + kind), value, unit
    def kind(self): return self._kind
    def as_double(self): return float(self._value)
    def as_uint64(self): return int(self._value)
    def as_string(self): return str(self._value)
    def unit(self): return self._unit


class Action:
    def __init__(self, data): self._data = data
    def name(self, base=IAction.NameBase_FUNCTION):
        return self._data["name"] if base == IAction.NameBase_DEMANGLED else self._data["name"].split("<")[0]
    def metric_names(self): return tuple(self._data["metrics"])
    def metric_by_name(self, name): return Metric(*self._data["metrics"][name])
    def rule_results_as_dicts(self): return self._data["rules"]


class Range:
    def __init__(self, actions): self._actions = actions
    def num_actions(self): return len(self._actions)
    def action_by_idx(self, i): return Action(self._actions[i])


class Context:
    def __init__(self, ranges): self._ranges = ranges
    def num_ranges(self): return len(self._ranges)
    def range_by_idx(self, i): return Range(self._ranges[i])


def load_report(path):
    ranges = json.loads((pathlib.Path(__file__).parent / "actions.json").read_text())
    if ranges == "fail":
        raise RuntimeError("Failed to load report: unsupported version")
    return Context(ranges)
'''


def _rule(name: str, section: str, kind: str, message: str, speedup_type: str | None = None,
          speedup: float | None = None) -> dict:
    rule = {"rule_identifier": name, "section_identifier": section,
            "rule_message": {"title": name, "message": message, "type": kind}}
    if speedup is not None:
        rule["speedup_estimation"] = {"type": speedup_type, "speedup": speedup}
    return rule


# The two kernels of test_profile_ncu's inline CSV pages, as ncu_report holds them: numbers, not text; the duration
# of the first in microseconds (ncu_report gives each metric's own unit; kernelkit keeps base units).
SAME_TWO_KERNELS = [[
    {"name": "square_flat_kernel", "metrics": {
        "gpu__time_duration.sum": ["DOUBLE", 1512.352, "usecond"],
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": ["DOUBLE", 91.37, "%"],
        "gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed": ["DOUBLE", 91.37, "%"],
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": ["DOUBLE", 12.51, "%"],
        "sm__warps_active.avg.pct_of_peak_sustained_active": ["DOUBLE", 84.2, "%"],
        "launch__registers_per_thread": ["UINT32", 16, "register/thread"],
        "launch__shared_mem_per_block_dynamic": ["UINT32", 0, "byte/block"],
        "launch__shared_mem_per_block_static": ["UINT32", 0, "byte/block"],
        "launch__grid_dim_x": ["UINT32", 65536, ""], "launch__grid_dim_y": ["UINT32", 1, ""],
        "launch__grid_dim_z": ["UINT32", 1, ""], "launch__block_dim_x": ["UINT32", 256, ""],
        "launch__block_dim_y": ["UINT32", 1, ""], "launch__block_dim_z": ["UINT32", 1, ""],
        "device__attribute_display_name": ["STRING", "NVIDIA H100 80GB HBM3", ""],
        "smsp__pcsamp_sample_count": ["UNKNOWN", None, ""],  # instanced: no single value
        "Duration": ["DOUBLE", 1.0, ""],  # not a metric column of the raw page
    }, "rules": [
        _rule("SOLBottleneck", "SpeedOfLight", "INFO", "The workload is utilizing greater than 80.0% of the available "
              "compute or memory performance of the device."),
        _rule("TailEffect", "LaunchStats", "MsgType.MSG_OPTIMIZATION", "A wave of thread blocks is defined as the "
              "maximum number of blocks that can be executed in parallel.", "SpeedupType.GLOBAL", 1.52),
        {"rule_identifier": "Passed", "section_identifier": "Occupancy", "rule_message": None},  # says nothing
    ]},
    {"name": TORCH_KERNEL, "metrics": {
        "gpu__time_duration.sum": ["UINT64", 3620, "nsecond"],
        "gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed": ["DOUBLE", 4.10, "%"],
        "sm__throughput.avg.pct_of_peak_sustained_elapsed": ["DOUBLE", 1.23, "%"],
        "sm__warps_active.avg.pct_of_peak_sustained_active": ["DOUBLE", 9.87, "%"],
        "launch__registers_per_thread": ["UINT32", 28, "register/thread"],
        "launch__shared_mem_per_block_dynamic": ["DOUBLE", 1.024, "Kbyte/block"],
        "launch__shared_mem_per_block_static": ["UINT32", 48, "byte/block"],
        "launch__grid_dim_x": ["UINT64", 1184, ""], "launch__grid_dim_y": ["UINT64", 1, ""],
        "launch__grid_dim_z": ["UINT64", 1, ""], "launch__block_dim_x": ["UINT64", 128, ""],
        "launch__block_dim_y": ["UINT64", 1, ""], "launch__block_dim_z": ["UINT64", 1, ""],
    }, "rules": [
        _rule("CPIStall", "WarpStateStats", "OPTIMIZATION", "On average, each warp of this workload spends 11.4 "
              "cycles being stalled.", "GLOBAL", 53.07),
    ]},
]]


@pytest.fixture
def fresh_import(monkeypatch: pytest.MonkeyPatch):
    """No ncu_report imported before or after the test, and sys.path as it was."""
    monkeypatch.setattr(sys, "path", list(sys.path))
    sys.modules.pop(ncu_rep.MODULE, None)
    yield
    sys.modules.pop(ncu_rep.MODULE, None)


def _install(root: Path, ranges: object = SAME_TWO_KERNELS, with_module: bool = True) -> Path:
    """A stand-in Nsight Compute install: <root>/ncu (answers as ncu does, from the inline CSV pages) and, with
    ``with_module``, <root>/extras/python/ncu_report.py reading ``ranges``."""
    root.mkdir(parents=True, exist_ok=True)
    (root / "raw.csv").write_text(RAW_TWO_KERNELS)
    (root / "details.csv").write_text(DETAILS_TWO_KERNELS)
    if with_module:
        extras = root / "extras" / "python"
        extras.mkdir(parents=True)
        (extras / "ncu_report.py").write_text(FAKE_NCU_REPORT)
        (extras / "actions.json").write_text(json.dumps(ranges))
    return _executable(root / "ncu", FAKE_NCU.format(python=sys.executable))


def test_ncu_report_is_looked_for_in_the_install_that_holds_ncu(tmp_path: Path):
    standalone = _install(tmp_path / "nsight-compute" / "2025.3.1")
    assert ncu_rep.module_folders(standalone) == [standalone.parent / "extras" / "python"]
    on_path = tmp_path / "bin" / "ncu"
    on_path.parent.mkdir()
    on_path.symlink_to(standalone)  # a link on PATH: the install is where it points
    assert ncu_rep.module_folders(on_path) == [standalone.parent / "extras" / "python"]
    cuda = tmp_path / "cuda-12.8"
    for version in ("2024.1.0", "2025.1.1"):  # a toolkit's bin/ncu runs <cuda>/nsight-compute-<version>/ncu
        (cuda / f"nsight-compute-{version}" / "extras" / "python").mkdir(parents=True)
        (cuda / f"nsight-compute-{version}" / "extras" / "python" / "ncu_report.py").write_text("")
    script = _executable(cuda / "bin" / "ncu")
    assert ncu_rep.module_folders(script) == [cuda / f"nsight-compute-{v}" / "extras" / "python"
                                              for v in ("2025.1.1", "2024.1.0")]
    assert ncu_rep.module_folders(_install(tmp_path / "bare", with_module=False)) == []
    # A toolkit's bin/ncu that is a script running a separate install, named by path and version (as CUDA 13's is).
    separate = _install(tmp_path / "nvidia" / "nsight-compute" / "2025.3.1")
    _install(tmp_path / "nvidia" / "nsight-compute" / "2026.1.0")  # newer, but not the one the script runs
    text = f'#!/bin/sh\nNCU_VERSION=2025.3.1\nexec "{tmp_path}/nvidia/nsight-compute/$NCU_VERSION/ncu" "$@"\n'
    wrapper = _executable(tmp_path / "cuda-13.0" / "bin" / "ncu", text)
    assert ncu_rep.module_folders(wrapper)[0] == separate.parent / "extras" / "python"


def test_load_module_imports_it_once_or_says_why_not(tmp_path: Path, fresh_import: None):
    bare = _install(tmp_path / "bare", with_module=False)
    module, why = ncu_rep.load_module(bare)
    assert module is None and why == f"no extras/python/ncu_report.py in the Nsight Compute install of {bare}"
    broken = _install(tmp_path / "broken")
    (broken.parent / "extras" / "python" / "ncu_report.py").write_text(
        "raise ImportError('libgcc_s.so.1: cannot open shared object file')\n")
    module, why = ncu_rep.load_module(broken)
    assert module is None and "ncu_report.py did not import: ImportError: libgcc_s.so.1" in why
    assert ncu_rep.MODULE not in sys.modules
    working = _install(tmp_path / "working")
    module, why = ncu_rep.load_module(working)
    assert module is not None and why == "" and Path(module.__file__).parent == working.parent / "extras" / "python"
    assert ncu_rep.load_module(bare)[0] is module  # imported once per process


def test_ncu_report_and_the_csv_pages_give_the_same_kernels(tmp_path: Path, fresh_import: None):
    module, _ = ncu_rep.load_module(_install(tmp_path / "install"))
    from_module = ncu_rep.read_report(module, tmp_path / "case.ncu-rep")
    from_csv = parse_pages(RAW_TWO_KERNELS, DETAILS_TWO_KERNELS)
    for a, b in zip(from_module, from_csv, strict=True):
        assert (a.id, a.name, a.grid_size, a.block_size) == (b.id, b.name, b.grid_size, b.block_size)
        assert a.summary() == pytest.approx(b.summary(), nan_ok=True)
        assert a.metrics["gpu__time_duration.sum"].unit == b.metrics["gpu__time_duration.sum"].unit == "nsecond"
    flat, torch_add = from_module
    assert [(r.name, r.type, r.section, r.speedup_type, r.speedup_pct) for r in flat.rules] == [
        ("SOLBottleneck", "INF", "SpeedOfLight", "", None), ("TailEffect", "OPT", "LaunchStats", "global", 1.52)]
    assert [(r.name, r.type, r.speedup_pct) for r in torch_add.rules] == [("CPIStall", "OPT", 53.07)]
    assert flat.metrics["device__attribute_display_name"].text == "NVIDIA H100 80GB HBM3"
    assert flat.metrics["smsp__pcsamp_sample_count"].value is None and "Duration" not in flat.metrics
    assert torch_add.summary()["dram_throughput_pct"] is None  # not in the report, as 'n/a' in the CSV
    json.dumps([k.to_dict(["gpu__time_duration.sum"]) for k in from_module])


def test_a_report_ncu_report_cannot_read_is_a_report_read_error(tmp_path: Path, fresh_import: None):
    module, _ = ncu_rep.load_module(_install(tmp_path / "install", ranges="fail"))
    with pytest.raises(ncu_rep.ReportReadError, match=r"ncu_report could not read .*case.ncu-rep: RuntimeError: "
                                                      "Failed to load report"):
        ncu_rep.read_report(module, tmp_path / "case.ncu-rep")


@pytest.fixture
def profiled_here(monkeypatch: pytest.MonkeyPatch):
    """run_ncu with no GPU: the case resolves to CUDA, and prepare_process's variables are put back after."""
    import os

    monkeypatch.setattr(ncu.targets, "resolve_device", lambda device: "cuda")
    for name in ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM"):
        monkeypatch.setenv(name, os.environ.get(name, "1"))


@pytest.mark.parametrize(("ranges", "with_module", "reader"), [
    (SAME_TWO_KERNELS, True, "ncu_report"),
    ("fail", True, "csv (ncu_report could not read "),
    (SAME_TWO_KERNELS, False, "csv (no extras/python/ncu_report.py in the Nsight Compute install of "),
], ids=["ncu-report", "ncu-report-fails", "no-ncu-report"])
def test_run_ncu_reads_with_ncu_report_where_it_can_else_the_csv_pages(
        tmp_path: Path, fresh_import: None, profiled_here: None, ranges: object, with_module: bool, reader: str):
    install = _install(tmp_path / "nsight-compute" / "2025.3.1", ranges, with_module)
    report = ncu.run_ncu("square", "triton_flat", size="64x64", dtype="float32", ncu=install)
    assert report.reader.startswith(reader) and report.to_dict()["reader"] == report.reader
    assert [k.name for k in report.kernels] == ["square_flat_kernel", TORCH_KERNEL]
    assert report.kernels[0].summary()["duration_ns"] == pytest.approx(1_512_352.0)



def test_an_ncu_report_that_crashes_takes_only_its_reader_down(tmp_path: Path, profiled_here: None):
    """NVIDIA's native module loaded beside torch's libraries can segfault: it runs in a child interpreter, the
    profile falls back to the CSV pages and says why."""
    install = _install(tmp_path / "nsight-compute" / "2025.3.1")
    module = install.parent / "extras" / "python" / "ncu_report.py"
    module.write_text("import os, signal\nos.kill(os.getpid(), signal.SIGSEGV)\n")
    with pytest.raises(ncu_rep.ReportReadError, match=r"ncu_report failed \(signal 11\)"):
        ncu_rep.read_isolated(install, tmp_path / "case.ncu-rep")
    report = ncu.run_ncu("square", "triton_flat", size="64x64", dtype="float32", ncu=install)
    assert report.reader.startswith("csv (ncu_report failed (signal 11)")
    assert [k.name for k in report.kernels] == ["square_flat_kernel", TORCH_KERNEL]

# On the GPU machine -------------------------------------------------------------------------------------------

def _ncu_report_missing() -> str:
    """Why the GPU comparison cannot run here ('' where it can)."""
    try:
        found = ncu.find_ncu()
    except ncu.NcuNotFound:
        return "Nsight Compute (ncu) not found"
    return "" if ncu_rep.module_folders(found) else f"no ncu_report beside {found}"


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(bool(_ncu_report_missing()), reason=_ncu_report_missing() or "ncu_report found")
def test_on_a_gpu_ncu_report_and_the_csv_pages_agree_on_duration_and_dram_bytes(tmp_path: Path):
    report = ncu.run_ncu("square", "triton_flat", size="4096x4096", dtype="float32", metrics=["dram__bytes.sum"],
                         export=tmp_path / "square")
    assert report.reader == ncu.READER_NCU_REPORT, report.reader
    kept = Path(report.report_path or "")
    from_module, from_csv = ncu_rep.read_isolated(report.ncu, kept), ncu.read_csv_pages(report.ncu, kept)
    (kernel,) = from_module
    (same,) = from_csv
    assert (kernel.name, kernel.grid_size, kernel.block_size) == (same.name, same.grid_size, same.block_size)
    for metric in ("gpu__time_duration.sum", "dram__bytes.sum"):
        assert kernel.value(metric) == pytest.approx(same.value(metric), rel=1e-3), metric
    # y = x * x over 4096 x 4096 float32 reads 64 MiB and writes 64 MiB, more than the L2 holds; some of the written
    # lines may still sit in the L2 when the kernel ends (an H200: 104 MiB of the 128).
    assert 64 << 20 <= kernel.value("dram__bytes.sum") <= 1.1 * (128 << 20)
    assert {r.name for r in kernel.rules} == {r.name for r in same.rules}
