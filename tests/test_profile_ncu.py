"""kernelkit ncu: reading ncu's CSV pages, the command line it runs, its errors, and (on a GPU) a real profile.

The inline details page copies the layout of a public ncu 2025.1 capture: every field quoted, metric rows that end
after "Metric Value" (a trailing comma), rule rows that leave the metric columns empty, thousands separators. The
inline raw page follows the layout several public parsers are tested against (one header row, a units row empty
under the ID columns, one row per kernel). Rule names CPIStall and AchievedOccupancy are as ncu printed them; the
others are plausible stand-ins. Captures from our GPU machine (scripts/capture-ncu-fixtures) go in
tests/fixtures/ncu/, one line each in PAGES.
"""

from __future__ import annotations

import json
import os
import stat
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
import typer
from typer.testing import CliRunner

from kernelkit.profiling import ncu, ncu_driver
from kernelkit.profiling.ncu_csv import csv_rows, parse_number, parse_pages, to_base_unit

FIXTURES = Path(__file__).parent / "fixtures" / "ncu"
ID_COLUMNS = '"ID","Process ID","Process Name","Host Name","Kernel Name","Context","Stream","Block Size","Grid Size",' \
             '"Device","CC"'
TORCH_KERNEL = ("void at::native::vectorized_elementwise_kernel<4, at::native::CUDAFunctor_add<float>, "
                "std::array<char *, 3>>(int, T2, T3)")

RAW_TWO_KERNELS = f"""==PROF== Connected to process 4242 (/usr/bin/python3.12)
==PROF== Profiling "square_flat_kernel" - 0: 0%....50%....100% - 8 passes
==PROF== Profiling "vectorized_elementwise_kernel" - 1: 0%....50%....100% - 8 passes
==WARNING== Found outstanding GPU clock reset, trying to revert...Success.
{ID_COLUMNS},"gpu__compute_memory_throughput.avg.pct_of_peak_sustained_elapsed",\
"gpu__dram_throughput.avg.pct_of_peak_sustained_elapsed","gpu__time_duration.sum","launch__grid_size",\
"launch__registers_per_thread","launch__shared_mem_per_block_dynamic","launch__shared_mem_per_block_static",\
"sm__throughput.avg.pct_of_peak_sustained_elapsed","sm__warps_active.avg.pct_of_peak_sustained_active"
"","","","","","","","block","grid","","","%","%","nsecond","block","register/thread","byte/block","byte/block",\
"%","%"
"0","4242","python3.12","127.0.0.1","square_flat_kernel","1","7","(256, 1, 1)","(65,536, 1, 1)","0","9.0",\
"91.37","91.37","1,512,352","65,536","16","0","0","12.51","84.20"
"1","4242","python3.12","127.0.0.1","{TORCH_KERNEL}","1","7","(128, 1, 1)","(1,184, 1, 1)","0","9.0",\
"4.10","n/a","3,620","1,184","28","1,024","48","1.23","9.87"
==PROF== Disconnected from process 4242
"""

RULE_COLUMNS = '"Section Name","Metric Name","Metric Unit","Metric Value","Rule Name","Rule Type",' \
               '"Rule Description","Estimated Speedup Type","Estimated Speedup"'
K0 = '"0","4242","python3.12","127.0.0.1","square_flat_kernel","1","7","(256, 1, 1)","(65,536, 1, 1)","0","9.0"'
K1 = f'"1","4242","python3.12","127.0.0.1","{TORCH_KERNEL}","1","7","(128, 1, 1)","(1,184, 1, 1)","0","9.0"'
DETAILS_TWO_KERNELS = f"""{ID_COLUMNS},{RULE_COLUMNS}
{K0},"GPU Speed Of Light Throughput","DRAM Frequency","hz","2,619,000,000",
{K0},"GPU Speed Of Light Throughput","Duration","nsecond","1,512,352",
{K0},"SpeedOfLight","","","","SOLBottleneck","INF","The workload is utilizing greater than 80.0% of the available \
compute or memory performance of the device.","",""
{K0},"LaunchStats","","","","TailEffect","OPT","A wave of thread blocks is defined as the maximum number of blocks \
that can be executed in parallel, on the target GPU. This kernel launch results in 62 full waves and a partial wave \
of 80 thread blocks.","global","1.52"
{K0},"Occupancy","Achieved Occupancy","%","84.20",
{K1},"WarpStateStats","","","","CPIStall","OPT","On average, each warp of this workload spends 11.4 cycles being \
stalled waiting for a scoreboard dependency on a L1TEX (local, global, surface, texture) operation. This stall \
type represents about 53.1% of the total average of 21.5 cycles between issuing two instructions.","global","53.07"
{K1},"MemoryWorkloadAnalysis_Tables","","","","UncoalescedGlobalAccess","OPT","This kernel has uncoalesced global \
accesses resulting in a total of 1,048,576 excessive sectors (50% of the total ""1,048,576"" sectors).\
","local","1,050.5"
{K1},"Occupancy","","","","AchievedOccupancy","OPT","The difference between calculated theoretical (100.0%) and \
measured achieved occupancy (9.9%) can be the result of warp scheduling overheads.","local","90.13"
{K1},"Occupancy","","","","AchievedOccupancy","OPT","The difference between calculated theoretical (100.0%) and \
measured achieved occupancy (9.9%) can be the result of warp scheduling overheads.","local","90.13"
"""

# Units as ncu prints them without --print-units base: scaled to fit, which the parser must undo.
RAW_AUTO_UNITS = f"""{ID_COLUMNS},"gpu__time_duration.sum","launch__shared_mem_per_block_dynamic",\
"launch__shared_mem_per_block_static","dram__bytes_read.sum.per_second"
"","","","","","","","","","","","usecond","Kbyte/block","byte/block","Tbyte/second"
"3","77","python","host","square_2d_kernel","1","7","(16, 16, 1)","(256, 256, 1)","0","9.0","1.51","16.38","0",\
"3.02"
"""


@dataclass(frozen=True)
class Expect:
    """What a page pair must give: the kernel count, a kernel whose name contains ``name``, rules it must list."""

    kernels: int
    name: str
    rules: tuple[str, ...] = ()


def captured(stem: str, expect: Expect) -> object:
    """A real capture: tests/fixtures/ncu/<stem>.raw.csv and <stem>.details.csv (scripts/capture-ncu-fixtures)."""
    raw, details = (FIXTURES / f"{stem}.{page}.csv" for page in ("raw", "details"))
    return pytest.param(raw.read_text(), details.read_text(), expect, id=stem)


PAGES = [
    pytest.param(RAW_TWO_KERNELS, DETAILS_TWO_KERNELS,
                 Expect(2, "square_flat_kernel", ("TailEffect", "SOLBottleneck")), id="inline-two-kernels"),
    pytest.param(RAW_AUTO_UNITS, "", Expect(1, "square_2d_kernel"), id="inline-auto-units"),
    # Captured with ncu 2025.3.1 on an H100 (scripts/capture-ncu-fixtures):
    captured("square_triton_flat_8192x8192_float32", Expect(1, "square_flat_kernel", ("SOLBottleneck",))),
    captured("square_cuda_2d_4096x4096_float32", Expect(1, "square_2d_kernel", ("AchievedOccupancy",))),
    captured("square_triton_flat_8192x8192_float32_full",
             Expect(1, "square_flat_kernel", ("CPIStall", "MemoryL2Compression", "SOLFPRoofline"))),
]


@pytest.mark.parametrize(("raw", "details", "expect"), PAGES)
def test_every_page_pair_gives_sane_kernel_rows(raw, details, expect):
    kernels = parse_pages(raw, details)
    assert len(kernels) == expect.kernels
    kernel = next(k for k in kernels if expect.name in k.name)
    assert {r.name for r in kernel.rules} >= set(expect.rules)
    for k in kernels:
        summary = k.summary()
        assert k.id.isdigit() and k.name
        assert summary["duration_ns"] is not None and summary["duration_ns"] > 0
        for key in ("sm_throughput_pct", "memory_throughput_pct", "dram_throughput_pct", "achieved_occupancy_pct"):
            assert summary[key] is None or 0 <= summary[key] <= 100.5, key
        assert k.grid_size.startswith("(") and "," not in k.grid_size.replace(", ", "")
        assert all(r.name and r.type and r.message for r in k.rules)
        json.dumps(k.to_dict())


def test_captured_h100_pages_give_ncus_own_figures():
    """The numbers ncu printed for these runs (see the fixtures' .ncu-output.txt), read back from the CSV pages."""
    stem = "square_triton_flat_8192x8192_float32"
    (flat,) = parse_pages(*((FIXTURES / f"{stem}.{page}.csv").read_text() for page in ("raw", "details")))
    assert (flat.grid_size, flat.block_size) == ("(65536, 1, 1)", "(128, 1, 1)")
    assert flat.summary() == {
        "duration_ns": 173_888.0, "sm_throughput_pct": 5.95, "memory_throughput_pct": 88.56,
        "dram_throughput_pct": 88.56, "achieved_occupancy_pct": 83.74, "registers_per_thread": 18.0,
        "shared_mem_per_block_bytes": 0.0,
    }
    occupancy = next(r for r in flat.rules if r.name == "AchievedOccupancy")
    assert occupancy.type == "OPT" and occupancy.speedup_pct is not None


def test_raw_page_reads_units_separators_na_and_quoted_commas():
    flat, torch_add = parse_pages(RAW_TWO_KERNELS, DETAILS_TWO_KERNELS)
    assert flat.name == "square_flat_kernel" and torch_add.name == TORCH_KERNEL  # commas inside quotes kept
    assert flat.grid_size == "(65536, 1, 1)" and flat.block_size == "(256, 1, 1)"
    assert flat.summary() == {
        "duration_ns": 1_512_352.0, "sm_throughput_pct": 12.51, "memory_throughput_pct": 91.37,
        "dram_throughput_pct": 91.37, "achieved_occupancy_pct": 84.2, "registers_per_thread": 16.0,
        "shared_mem_per_block_bytes": 0.0,
    }
    assert torch_add.summary()["dram_throughput_pct"] is None  # n/a
    assert torch_add.summary()["shared_mem_per_block_bytes"] == 1024 + 48  # dynamic + static
    assert torch_add.metrics["gpu__time_duration.sum"].unit == "nsecond"


def test_details_page_gives_rules_per_kernel_with_speedups_and_no_repeats():
    flat, torch_add = parse_pages(RAW_TWO_KERNELS, DETAILS_TWO_KERNELS)
    assert [(r.name, r.type, r.speedup_pct) for r in flat.rules] == [
        ("SOLBottleneck", "INF", None), ("TailEffect", "OPT", 1.52)]
    assert [r.name for r in torch_add.rules] == ["CPIStall", "UncoalescedGlobalAccess", "AchievedOccupancy"]
    uncoalesced = torch_add.rules[1]
    assert uncoalesced.speedup_pct == 1050.5 and uncoalesced.speedup_type == "local"
    assert '"1,048,576" sectors' in uncoalesced.message and uncoalesced.section == "MemoryWorkloadAnalysis_Tables"


def test_scaled_units_are_converted_to_base_units():
    (kernel,) = parse_pages(RAW_AUTO_UNITS)
    assert kernel.summary()["duration_ns"] == pytest.approx(1510.0)
    assert kernel.summary()["shared_mem_per_block_bytes"] == pytest.approx(16380.0)
    bandwidth = kernel.metrics["dram__bytes_read.sum.per_second"]
    assert bandwidth.unit == "byte/second" and bandwidth.value == pytest.approx(3.02e12)
    assert kernel.rules == []


@pytest.mark.parametrize(
    ("text", "value"),
    [("1,234.56", 1234.56), ("1,458,823,529.41", 1458823529.41), ("5,875", 5875.0), ("0.10", 0.1), ("32", 32.0),
     ("1.234,56", 1234.56), ("0,55", 0.55), ("12 345", 12345.0), ("12\u202f345,5", 12345.5), ("1.234.567", 1234567.0),
     ("-3.5", -3.5), ("42%", 42.0), ("n/a", None), ("N/A", None), ("", None), ("240; 240; 240", None),
     ("(256, 1, 1)", None)],
)
def test_parse_number(text, value):
    assert parse_number(text) == value


@pytest.mark.parametrize(
    ("value", "unit", "expected"),
    [(1.5, "usecond", (1500.0, "nsecond")), (2.0, "msecond", (2e6, "nsecond")), (7.0, "nsecond", (7.0, "nsecond")),
     (16.38, "Kbyte/block", (16380.0, "byte/block")), (1.0, "Mbyte", (1e6, "byte")), (1.5, "Gbyte", (1.5e9, "byte")),
     (3.2, "Tbyte/second", (3.2e12, "byte/second")), (2.0, "byte/usecond", (2e6, "byte/second")),
     (84.2, "%", (84.2, "%")), (16.0, "register/thread", (16.0, "register/thread"))],
)
def test_to_base_unit(value, unit, expected):
    got = to_base_unit(value, unit)
    assert got[1] == expected[1] and got[0] == pytest.approx(expected[0])


def test_csv_rows_drop_tool_lines_program_output_and_keep_multiline_fields():
    text = ('==PROF== Connected to process 1 (python)\nhello from the program\n\n'
            '"ID","Rule Description"\n"0","two\nlines, one field"\n==WARNING== Some warning.\n')
    assert csv_rows(text) == [["ID", "Rule Description"], ["0", "two\nlines, one field"]]


# The command line and the errors ---------------------------------------------------------------------------

def test_profile_command_clocks_nvtx_filter_and_pass_through():
    name = ncu.nvtx_range_name("square/triton_flat/8192x8192/float32")
    assert name == "kernelkit:square:triton_flat:8192x8192:float32"
    cmd = ncu.profile_command("/x/ncu", "/tmp/r", name, ["square", "triton_flat"], section_set="full",
                              metrics=["dram__bytes_read.sum", "lts__t_sector_hit_rate.pct"])
    joined = " ".join(cmd)
    assert cmd[0] == "/x/ncu" and "--clock-control none" in joined
    assert "--nvtx --nvtx-include kernelkit:square:triton_flat:8192x8192:float32/ " in joined  # push/pop: trailing /
    assert "--set full" in joined and "--metrics dram__bytes_read.sum,lts__t_sector_hit_rate.pct" in joined
    assert "-o /tmp/r" in joined
    driver = cmd.index("kernelkit.profiling.ncu_driver")
    assert cmd[driver - 2:driver] == [sys.executable, "-m"] and cmd[-2:] == ["--range", name]
    default = ncu.profile_command("ncu", "r", name, [])
    assert "--set basic" in " ".join(default) and "--metrics" not in default


def test_nvtx_include_escapes_quantifiers():
    assert ncu.nvtx_include("kernelkit:a b") == "kernelkit:a b/"
    assert ncu.nvtx_include("a/b@c[1]*+,") == "a\\/b\\@c\\[1\\]\\*\\+\\,/"


def test_import_commands_read_raw_and_details_pages_as_csv():
    raw, details = ncu.import_commands("ncu", "r.ncu-rep")
    for cmd in (raw, details):
        assert cmd[:3] == ["ncu", "--import", "r.ncu-rep"] and "--csv" in cmd and "--print-units" in cmd
    assert raw[-2:] == ["--page", "raw"] and ["--page", "details", "--print-details", "all"] == details[-4:]


def test_ncu_not_found_says_where_it_looked_and_what_to_install(monkeypatch, tmp_path):
    monkeypatch.delenv(ncu.NCU_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(ncu, "NCU_SEARCH_GLOBS", (str(tmp_path / "cuda*/bin/ncu"),))
    with pytest.raises(ncu.NcuNotFound, match="not on PATH") as info:
        ncu.find_ncu()
    assert str(tmp_path / "cuda*/bin/ncu") in str(info.value) and "Install Nsight Compute" in str(info.value)


def _executable(path: Path, text: str = "#!/bin/sh\n") -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(path.stat().st_mode | stat.S_IXUSR)
    return path


def test_find_ncu_prefers_path_then_the_newest_install(monkeypatch, tmp_path):
    monkeypatch.delenv(ncu.NCU_ENV, raising=False)
    monkeypatch.setenv("PATH", str(tmp_path / "empty"))
    for version in ("2024.3.2", "2025.3.1", "2025.10.0"):
        _executable(tmp_path / "nsight-compute" / version / "ncu")
    globs = (str(tmp_path / "cuda*/bin/ncu"), str(tmp_path / "nsight-compute/*/ncu"))
    monkeypatch.setattr(ncu, "NCU_SEARCH_GLOBS", globs)
    assert ncu.find_ncu() == tmp_path / "nsight-compute" / "2025.10.0" / "ncu"
    _executable(tmp_path / "bin" / "ncu")
    monkeypatch.setenv("PATH", str(tmp_path / "bin"))
    assert ncu.find_ncu() == tmp_path / "bin" / "ncu"


def test_counter_permission_error_says_what_to_do(tmp_path):
    output = ("==PROF== Connected to process 9 (/usr/bin/python3)\n==ERROR== ERR_NVGPUCTRPERM - The user does not have "
              "permission to access NVIDIA GPU Performance Counters on the target device 0. For instructions on "
              "enabling permissions and to get more information see https://developer.nvidia.com/ERR_NVGPUCTRPERM\n"
              "==PROF== Disconnected from process 9\n==WARNING== No kernels were profiled.\n")
    with pytest.raises(ncu.NcuPermissionError, match="NVreg_RestrictProfilingToAdminUsers=0") as info:
        ncu.check_profile_output(output, 1, tmp_path / "missing.ncu-rep", "kernelkit:x")
    assert "root" in str(info.value) and info.value.output == output


def test_no_kernels_profiled_quotes_ncus_warning(tmp_path):
    output = ("==PROF== Connected to process 9 (/usr/bin/python3)\n==PROF== Disconnected from process 9\n"
              "==WARNING== No kernels were profiled.\nAvailable Kernels:\n1. square_flat_kernel\n")
    with pytest.raises(ncu.NcuNoKernels, match="No kernels were profiled") as info:
        ncu.check_profile_output(output, 0, tmp_path / "case.ncu-rep", "kernelkit:square:eager:4x4:float32")
    assert "1. square_flat_kernel" in str(info.value) and "kernelkit:square:eager:4x4:float32/" in str(info.value)


def test_a_case_that_fails_under_ncu_says_why(tmp_path):
    output = f"{ncu.ERROR_MARK} BackendUnavailable: impl 'cuda_2d' supports float32 only\n" \
             "==ERROR== The application returned an error code (3).\n==WARNING== No kernels were profiled.\n"
    with pytest.raises(ncu.NcuError, match="supports float32 only"):
        ncu.check_profile_output(output, 3, tmp_path / "case.ncu-rep", "kernelkit:x")


def test_driver_reports_a_case_it_cannot_prepare(capsys, monkeypatch):
    for name in ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM"):  # prepare_case sets them on a GPU; restore after
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    code = ncu_driver.main(["square", "no_such_impl", "--range", "kernelkit:x", "--warmup", "0"])
    assert code == ncu_driver.EXIT_CASE_FAILED
    assert ncu.ERROR_MARK in capsys.readouterr().err


# The whole flow against a stand-in ncu (no GPU): arguments in, pages out ---------------------------------------

FAKE_NCU = """#!{python}
import json, pathlib, sys
here = pathlib.Path(__file__).parent
args = sys.argv[1:]
if "--import" in args:
    print((here / (args[args.index("--page") + 1] + ".csv")).read_text())
else:
    (here / "argv.json").write_text(json.dumps(args))
    pathlib.Path(args[args.index("-o") + 1] + ".ncu-rep").write_text("report")
    print("==PROF== Connected to process 1 (python)\\n==PROF== Disconnected from process 1")
"""


@pytest.fixture
def fake_ncu(monkeypatch, tmp_path):
    (tmp_path / "raw.csv").write_text(RAW_TWO_KERNELS)
    (tmp_path / "details.csv").write_text(DETAILS_TWO_KERNELS)
    monkeypatch.setenv(ncu.NCU_ENV, str(_executable(tmp_path / "ncu", FAKE_NCU.format(python=sys.executable))))
    monkeypatch.setattr(ncu.targets, "resolve_device", lambda device: "cuda")
    for name in ("TRITON_INTERPRET", "NUMBA_ENABLE_CUDASIM"):  # prepare_process("cuda") sets them; restore after
        monkeypatch.setenv(name, os.environ.get(name, "1"))
    return tmp_path


def test_run_ncu_builds_the_case_runs_ncu_once_and_reads_both_pages(fake_ncu):
    report = ncu.run_ncu("square", "triton_flat", size="8192x8192", dtype="float32", section_set="full",
                         metrics=["gpu__time_duration.sum"], export=fake_ncu / "kept")
    argv = json.loads((fake_ncu / "argv.json").read_text())
    assert argv[argv.index("kernelkit.profiling.ncu_driver") + 1:] == [
        "square", "triton_flat", "--op", "square", "--size", "8192x8192", "--dtype", "float32", "--seed", "0",
        "--warmup", "3", "--range", "kernelkit:square:triton_flat:8192x8192:float32"]
    assert report.case == "square/triton_flat/8192x8192/float32" and report.section_set == "full"
    assert [k.name for k in report.kernels] == ["square_flat_kernel", TORCH_KERNEL]
    assert Path(report.report_path or "").read_text() == "report"
    data = report.to_dict()
    assert data["kernels"][0]["metrics"]["gpu__time_duration.sum"]["value"] == 1_512_352.0


def _ncu_app() -> typer.Typer:
    from kernelkit.cli import app

    return app


def test_ncu_command_prints_a_table_or_json(fake_ncu):
    result = CliRunner().invoke(_ncu_app(), ["ncu", "square", "--impl", "triton_flat", "--size", "64x64"])
    assert result.exit_code == 0, result.output
    assert "square_flat_kernel" in result.output and "TailEffect" in result.output and "1.51 ms" in result.output
    result = CliRunner().invoke(_ncu_app(), ["ncu", "square", "--impl", "triton_flat", "--json"])
    assert json.loads(result.stdout)["kernels"][1]["rules"][0]["name"] == "CPIStall"


def test_ncu_command_exit_codes(fake_ncu, monkeypatch):
    bad = CliRunner().invoke(_ncu_app(), ["ncu", "square", "--impl", "fast"])
    assert bad.exit_code == 2 and "no impl 'fast' in square" in bad.output and "its impls: eager" in bad.output
    (fake_ncu / "raw.csv").write_text("==WARNING== No kernels were profiled.\n")
    empty = CliRunner().invoke(_ncu_app(), ["ncu", "square", "--impl", "eager"])
    assert empty.exit_code == 1 and "lists no kernel" in empty.output


# On the GPU machine ------------------------------------------------------------------------------------------

def _ncu_missing() -> bool:
    try:
        ncu.find_ncu()
    except ncu.NcuNotFound:
        return True
    return False


@pytest.mark.gpu
@pytest.mark.slow
@pytest.mark.skipif(_ncu_missing(), reason="Nsight Compute (ncu) not found")
def test_ncu_profiles_the_flat_triton_square_as_memory_bound():
    result = CliRunner().invoke(_ncu_app(), ["ncu", "square", "--impl", "triton_flat", "--size", "8192x8192", "--json"])
    assert result.exit_code == 0, result.output
    (kernel,) = json.loads(result.stdout)["kernels"]
    assert "square_flat_kernel" in kernel["name"]
    assert kernel["memory_throughput_pct"] > 50 and kernel["duration_ns"] > 0
