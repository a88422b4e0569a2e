"""measure.clocks, measure.host and measure.ceilings on the CPU: fingerprint, git state, ceilings cache and math,
clock readings.

The timer is replaced by fakes passed as ``calibrate(bench=...)``, so these tests neither wait on nor depend on
kernelkit.measure.timer; one test runs the real timer where it exists. NVML is replaced by a fake ``pynvml``.
"""

from __future__ import annotations

import importlib.metadata
import json
import math
import os
import subprocess
import sys
import time
import types
from pathlib import Path

import pytest
import torch

from kernelkit.errors import BackendUnavailable
from kernelkit.measure import ceilings, clocks, host
from kernelkit.measure.ceilings import Ceilings, calibrate, ceiling_for, load_cached
from kernelkit.measure.clocks import CLOCK_FLOOR, ClockReader, keep_sample, reason_names
from kernelkit.measure.host import fingerprint, git_state
from kernelkit.measure.measurement import Measurement

ON_CPU = not torch.cuda.is_available()


def fake_bench(calls: list[dict], seconds: float = 1e-3, run: bool = False):
    """A stand-in for timer.bench: records each call, optionally runs fn once, reports ``seconds`` per call."""

    def bench(fn, *args, mode="cold", bytes=None, flops=None, budget=10.0, rse_target=0.005, label=""):
        calls.append({"fn": fn, "args": args, "mode": mode, "bytes": bytes, "flops": flops, "label": label})
        if run:
            fn(*args)
        return Measurement(label=label, mode=mode, device="cpu", device_name="fake", samples=[seconds] * 5,
                           first_call=seconds, warmup_calls=1, stop_reason="converged", bytes=bytes, flops=flops)

    return bench


# --- clocks ------------------------------------------------------------------------------------------------------


def test_keep_sample_drops_only_clearly_slow_samples():
    assert keep_sample(2000, 2000)
    assert keep_sample(CLOCK_FLOOR * 1980, 1980)  # exactly at the floor: kept
    assert not keep_sample(1400, 2000)
    assert keep_sample(math.nan, 2000)  # an unreadable clock is no evidence of a slow one
    assert keep_sample(1000, None)
    assert keep_sample(1000, math.nan)


def test_reason_names_decodes_bits_and_keeps_unknown_ones():
    assert reason_names(0) == []
    assert reason_names(0x4 | 0x20) == ["sw_power_cap", "sw_thermal"]
    assert reason_names(0x1 | 0x1000) == ["idle", "unknown_0x1000"]


class FakeNVMLError(Exception):
    pass


def fake_pynvml(*, init_fails: bool = False, pci_fails: bool = False, events_api: bool = True) -> types.ModuleType:
    """A pynvml with one H100-like GPU; ``nvml.log`` records the calls that matter."""
    nvml = types.ModuleType("pynvml")
    nvml.log = []
    nvml.NVMLError = FakeNVMLError
    nvml.NVML_CLOCK_SM, nvml.NVML_CLOCK_MEM = 1, 2

    def init():
        if init_fails:
            raise FakeNVMLError("Driver Not Loaded")
        nvml.log.append("init")

    def by_pci(bus_id):
        if pci_fails:
            raise FakeNVMLError("Not Found")
        return ("pci", bus_id)

    nvml.nvmlInit = init
    nvml.nvmlShutdown = lambda: nvml.log.append("shutdown")
    nvml.nvmlDeviceGetHandleByPciBusId = by_pci
    nvml.nvmlDeviceGetHandleByIndex = lambda index: ("index", index)
    nvml.nvmlDeviceGetClockInfo = lambda handle, kind: {1: 1755, 2: 2619}[kind]
    nvml.nvmlDeviceGetMaxClockInfo = lambda handle, kind: {1: 1980, 2: 2619}[kind]
    nvml.nvmlDeviceGetCurrentClocksThrottleReasons = lambda handle: 0x4
    if events_api:
        nvml.nvmlDeviceGetCurrentClocksEventReasons = lambda handle: 0x4 | 0x40
    nvml.nvmlSystemGetDriverVersion = lambda: "580.95.05"
    return nvml


def test_clock_reader_is_none_without_pynvml(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", None)  # makes `import pynvml` raise ImportError
    assert ClockReader.open(0) is None


def test_clock_reader_is_none_when_nvml_cannot_start(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(init_fails=True))
    assert ClockReader.open(0) is None


def test_clock_reader_reads_clocks_reasons_and_driver(monkeypatch):
    nvml = fake_pynvml()
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(clocks, "pci_bus_id", lambda index: "00000000:1B:00.0")
    with ClockReader.open(0) as reader:
        assert reader._handle == ("pci", "00000000:1B:00.0")  # mapped by PCI bus id, not by index
        assert reader.sm_clock_mhz() == 1755.0
        assert reader.max_sm_clock_mhz() == 1980.0
        assert reader.mem_clock_mhz() == 2619.0
        assert reader.throttle_reasons() == ["sw_power_cap", "hw_thermal"]
        assert reader.driver_version() == "580.95.05"
    reader.close()  # closing twice releases NVML once
    assert nvml.log == ["init", "shutdown"]
    assert math.isnan(reader.sm_clock_mhz())  # a closed reader reads nothing


def test_clock_reader_falls_back_to_index_and_old_reason_api(monkeypatch):
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml(pci_fails=True, events_api=False))
    monkeypatch.setattr(clocks, "pci_bus_id", lambda index: "00000000:1B:00.0")
    reader = ClockReader.open(3)
    assert reader._handle == ("index", 3)
    assert reader.throttle_reasons() == ["sw_power_cap"]
    reader.close()


def test_clock_reading_that_fails_is_nan_not_an_exception(monkeypatch):
    nvml = fake_pynvml()

    def lost(handle, kind):
        raise FakeNVMLError("GPU is lost")

    nvml.nvmlDeviceGetClockInfo = lost
    monkeypatch.setitem(sys.modules, "pynvml", nvml)
    monkeypatch.setattr(clocks, "pci_bus_id", lambda index: None)
    reader = ClockReader.open(0)
    assert math.isnan(reader.sm_clock_mhz())
    assert keep_sample(reader.sm_clock_mhz(), reader.max_sm_clock_mhz())
    reader.close()


# --- fingerprint -------------------------------------------------------------------------------------------------

FINGERPRINT_KEYS = {
    "device_name", "gpu_name", "gpu_count", "compute_capability", "driver_version", "cuda_runtime", "l2_bytes",
    "sm_clock_max_mhz", "sm_clock_mhz", "mem_clock_mhz", "throttle_reasons", "torch", "triton", "numba",
    "numba_cuda", "cuda_core", "python", "platform", "host", "cpu", "cpu_threads", "user_file", "git_commit",
    "git_dirty",
}


def test_fingerprint_has_every_field_and_is_json():
    info = fingerprint()
    assert set(info) == FINGERPRINT_KEYS
    assert info["torch"] == torch.__version__
    assert info["python"].count(".") == 2
    assert info["user_file"] is None and info["git_commit"] is None
    json.dumps(info)  # plain data, ready for the results store
    if ON_CPU:
        assert info["device_name"] == f"CPU: {info['cpu']}"
        assert info["gpu_count"] == 0
        assert all(info[k] is None for k in ("gpu_name", "compute_capability", "l2_bytes", "sm_clock_mhz"))


def test_fingerprint_reads_triton_version_without_importing_it():
    """In a fresh interpreter (this test process may have imported triton already): the fingerprint names triton's
    version, read from its distribution's metadata, and triton is still not imported."""
    code = ("import sys, json; from kernelkit.measure.host import fingerprint; info = fingerprint(); "
            "print(json.dumps([info.get('triton'), 'triton' in sys.modules]))")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120,
                          env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)})
    assert done.returncode == 0, done.stderr
    version, imported = json.loads(done.stdout.strip().splitlines()[-1])
    assert version == importlib.metadata.version("triton") and imported is False


def test_device_name_says_cpu():
    assert host.device_name("cpu") == f"CPU: {host.cpu_model()}"


def git(where: Path, *args: str) -> str:
    done = subprocess.run(["git", "-C", str(where), "-c", "user.name=t", "-c", "user.email=t@t", *args],
                          capture_output=True, text=True, check=True)
    return done.stdout.strip()


@pytest.fixture
def repo(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A git repository with one committed file, kernel.py; git may not search above tmp_path."""
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    root = tmp_path / "repo"
    root.mkdir()
    (root / "kernel.py").write_text("x = 1\n")
    git(root, "init", "-q")
    git(root, "add", "kernel.py")
    git(root, "commit", "-q", "-m", "first")
    return root


def test_fingerprint_reads_the_user_files_commit(repo):
    info = fingerprint(str(repo / "kernel.py"))
    assert info["git_commit"] == git(repo, "rev-parse", "HEAD")
    assert len(info["git_commit"]) == 40
    assert info["git_dirty"] is False
    assert info["user_file"] == str((repo / "kernel.py").resolve())


def test_git_dirty_flag_follows_the_file(repo):
    (repo / "other.py").write_text("y = 2\n")  # another file's change does not make kernel.py dirty
    assert git_state(repo / "kernel.py")[1] is False
    (repo / "kernel.py").write_text("x = 2\n")
    assert git_state(repo / "kernel.py")[1] is True
    assert git_state(repo / "other.py")[1] is True  # untracked: not what any commit holds


def test_git_state_is_none_outside_a_repository(tmp_path, monkeypatch):
    monkeypatch.setenv("GIT_CEILING_DIRECTORIES", str(tmp_path))
    (tmp_path / "plain").mkdir()
    (tmp_path / "plain" / "kernel.py").write_text("x = 1\n")
    assert git_state(tmp_path / "plain" / "kernel.py") == (None, None)
    assert git_state(tmp_path / "missing" / "kernel.py") == (None, None)


def test_git_state_is_none_without_git(repo, monkeypatch):
    monkeypatch.setenv("PATH", "")
    assert git_state(repo / "kernel.py") == (None, None)


def test_l2_bytes_on_cpu_is_a_positive_estimate():
    assert host.l2_bytes("cpu") >= 1 << 20
    assert host._parse_size("32768K\n") == 32 << 20
    assert host._parse_size("1M") == 1 << 20


# --- ceilings: math ----------------------------------------------------------------------------------------------


def h100() -> Ceilings:
    return Ceilings(device_name="NVIDIA H100 80GB HBM3", key="k", copy_gbps=3000.0,
                    matmul_tflops={"fp32": 50.0, "tf32": 400.0, "bf16": 750.0, "fp16": 750.0})


def test_ceiling_for_gives_percent_of_copy_bandwidth_and_matmul_rate():
    c = ceiling_for(1_500_000_000, 375 * 10**9, 1e-3, "bfloat16", h100())
    assert c.bandwidth_gbps == 3000.0
    assert c.pct_bandwidth == pytest.approx(50.0)  # 1500 GB/s of 3000
    assert (c.flops_kind, c.tflops) == ("bf16", 750.0)
    assert c.pct_flops == pytest.approx(50.0)  # 375 TFLOP/s of 750
    assert not c.suspect


def test_ceiling_for_marks_rates_above_105_percent_suspect():
    assert ceiling_for(3_300_000_000, None, 1e-3, "float32", h100()).suspect  # 110% of copy bandwidth
    assert not ceiling_for(3_120_000_000, None, 1e-3, "float32", h100()).suspect  # 104%
    assert ceiling_for(None, 60 * 10**9, 1e-3, "torch.float32", h100()).suspect  # 60 TFLOP/s vs fp32's 50


def test_ceiling_for_leaves_out_what_does_not_apply():
    c = ceiling_for(None, None, 1e-3, "float32", h100())
    assert (c.bandwidth_gbps, c.pct_bandwidth, c.tflops, c.pct_flops) == (None, None, None, None)
    assert ceiling_for(10**9, 10**12, 1e-3, "int8", h100()).pct_flops is None  # no int8 matmul rate
    assert ceiling_for(10**9, 10**12, 1e-3, "float8_e4m3fn", h100()).pct_flops is None  # fp8 not measured
    assert ceiling_for(10**9, 10**12, 0.0, "float32", h100()).pct_bandwidth is None


def test_an_ops_compute_dtype_picks_the_matmul_rate_its_flops_compare_with():
    from kernelkit.ops.matmul import matmul, matmul_fp8, matmul_tf32

    assert (matmul.compute_dtype, matmul_tf32.compute_dtype, matmul_fp8.compute_dtype) == ("", "tf32", "fp8")
    ceilings = h100()
    ceilings.matmul_tflops["fp8"] = 1300.0
    fp8 = ceiling_for(10**9, 650 * 10**9, 1e-3, "bfloat16", ceilings, compute_dtype=matmul_fp8.compute_dtype)
    assert (fp8.flops_kind, fp8.tflops, fp8.pct_flops) == ("fp8", 1300.0, pytest.approx(50.0))  # not bf16's 750
    tf32 = ceiling_for(10**9, 200 * 10**9, 1e-3, "float32", ceilings, compute_dtype="tf32")
    assert (tf32.flops_kind, tf32.pct_flops) == ("tf32", pytest.approx(50.0))  # not fp32's 50 (400%: SUSPECT)
    assert ceiling_for(10**9, 200 * 10**9, 1e-3, "float32", ceilings).flops_kind == "fp32"
    del ceilings.matmul_tflops["fp8"]
    assert ceiling_for(10**9, 10**12, 1e-3, "bfloat16", ceilings, compute_dtype="fp8").pct_flops is None


def test_a_2_4_sparse_matmul_compares_with_twice_the_dense_rate():
    # linear24 counts its FLOPs dense (2MNK); on the 2:4 tensor cores that is twice the dense rate, so its 1.4x
    # over cuBLAS must not read as 130% of the dense ceiling (SUSPECT, a failure in strict mode).
    from kernelkit.ops.sparse24 import linear24

    assert linear24.compute_dtype == "sparse24"
    ceilings = h100()
    dense = ceilings.matmul_tflops["fp16"]
    sparse = ceiling_for(10**9, int(1.3 * dense * 10**9), 1e-3, "float16", ceilings, compute_dtype="sparse24")
    assert (sparse.flops_kind, sparse.tflops, sparse.pct_flops) == ("fp16 2:4", 2 * dense, pytest.approx(65.0))
    assert not sparse.suspect


def test_compute_dtype_must_name_a_calibrated_matmul_rate():
    import kernelkit as kk
    from kernelkit.errors import SpecError

    with pytest.raises(SpecError, match="compute_dtype 'int4' is not one of"):
        kk.op(sizes=[(4,)], compute_dtype="int4")(lambda x: x)


def test_flops_ceiling_maps_case_dtypes_to_matmul_kinds():
    c = h100()
    c.matmul_tflops["fp8"] = 1500.0
    assert c.flops_ceiling("float32") == ("fp32", 50.0)  # fp32 cases compare with TF32 off
    assert c.flops_ceiling("float16") == ("fp16", 750.0)
    assert c.flops_ceiling("torch.bfloat16") == ("bf16", 750.0)
    assert c.flops_ceiling("float8_e4m3fn") == ("fp8", 1500.0)
    assert c.flops_ceiling("float64") is None


def test_ceilings_round_trip_through_json():
    c = h100()
    c.notes = {"copy": {"n": 5}, "fp8": {"skipped": "why"}}
    assert Ceilings.from_dict(json.loads(json.dumps(c.to_dict()))) == c


# --- ceilings: calibrate and its cache ---------------------------------------------------------------------------


@pytest.fixture
def small_cpu_sizes(monkeypatch: pytest.MonkeyPatch) -> None:
    """Tiny CPU calibration buffers: the fake timers below never need the real 256 MiB copy and 2048^3 matmul."""
    monkeypatch.setattr(ceilings, "CPU_COPY_BYTES", 1 << 20)
    monkeypatch.setattr(ceilings, "CPU_MATMUL_N", 64)


def test_calibrate_cpu_measures_then_reads_the_cache(fresh_cache, small_cpu_sizes):
    calls: list[dict] = []
    first = calibrate("cpu", bench=fake_bench(calls))
    assert [c["label"] for c in calls] == ["ceiling: copy", "ceiling: fp32 matmul"]
    assert all(c["mode"] == "hot" for c in calls)
    assert first.device == "cpu" and first.device_name.startswith("CPU: ")
    assert first.copy_gbps == pytest.approx(2 * ceilings.CPU_COPY_BYTES / 1e-3 / 1e9)
    assert first.matmul_tflops == {"fp32": pytest.approx(2 * ceilings.CPU_MATMUL_N**3 / 1e-3 / 1e12)}
    assert first.notes["copy"]["n"] == 5 and first.notes["copy"]["mode"] == "hot"
    assert "skipped" in first.notes["bf16"]
    assert (fresh_cache / "ceilings" / f"{first.key}.json").is_file()

    again = calibrate("cpu", bench=fake_bench(calls))
    assert len(calls) == 2  # read from disk: nothing timed
    assert again == first
    assert load_cached("cpu") == first


def test_calibrate_force_measures_again(fresh_cache, small_cpu_sizes):
    calls: list[dict] = []
    calibrate("cpu", bench=fake_bench(calls, seconds=1e-3))
    forced = calibrate("cpu", force=True, bench=fake_bench(calls, seconds=2e-3))
    assert len(calls) == 4
    assert load_cached("cpu") == forced
    assert forced.copy_gbps == pytest.approx(2 * ceilings.CPU_COPY_BYTES / 2e-3 / 1e9)


@pytest.mark.parametrize("content", ["{not json", "[]", '{"format": 999}', '{"format": 1, "key": "x"}'])
def test_unreadable_cache_file_is_measured_again(fresh_cache, small_cpu_sizes, content):
    path = fresh_cache / "ceilings" / f"{ceilings.cache_key('cpu')}.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(content)
    assert load_cached("cpu") is None
    calls: list[dict] = []
    measured = calibrate("cpu", bench=fake_bench(calls))
    assert len(calls) == 2
    assert Ceilings.from_dict(json.loads(path.read_text())) == measured  # overwritten with good data


def test_cache_key_names_device_and_torch_and_is_a_safe_file_name():
    key = ceilings.cache_key("cpu")
    assert key.startswith("CPU-") and key.endswith(f"_torch-{torch.__version__}")
    assert "-1threads_" in key  # the CPU workers' threads (one unless --threads), not this process's
    assert all(ch.isalnum() or ch in "._+-" for ch in key)
    assert ceilings._slug("NVIDIA H100 80GB HBM3") == "NVIDIA-H100-80GB-HBM3"


def test_calibrate_cpu_runs_copy_and_matmul_on_real_tensors(fresh_cache, small_cpu_sizes):
    calls: list[dict] = []
    calibrate("cpu", bench=fake_bench(calls, run=True))
    dst, src = calls[0]["args"]
    assert calls[0]["bytes"] == 2 * src.numel() and torch.equal(dst, src)
    a, b, out = calls[1]["args"]
    assert calls[1]["flops"] == 2 * a.shape[0] ** 3
    torch.testing.assert_close(out, a @ b)


@pytest.mark.skipif(not ON_CPU, reason="checks the error on a machine without a GPU")
def test_calibrate_cuda_without_a_gpu_says_so(fresh_cache):
    with pytest.raises(BackendUnavailable, match="calibrate\\('cpu'\\)"):
        calibrate("cuda", bench=fake_bench([]))
    assert load_cached("cuda") is None


def test_tf32_flag_is_restored():
    flags = torch.backends.cuda.matmul
    before = flags.allow_tf32
    with ceilings._tf32_matmul(not before):
        assert flags.allow_tf32 is (not before)
    assert flags.allow_tf32 is before


def test_tf32_flag_uses_the_new_api_when_the_legacy_flag_cannot_be_read(monkeypatch):
    class MixedFlags:  # what torch does after a process mixed allow_tf32 and fp32_precision
        fp32_precision = "none"

        @property
        def allow_tf32(self):
            raise RuntimeError("used mix of the legacy and new APIs")

    flags = MixedFlags()
    monkeypatch.setattr(torch.backends.cuda, "matmul", flags)
    with ceilings._tf32_matmul(False):
        assert flags.fp32_precision == "ieee"
    assert flags.fp32_precision == "none"


def test_calibrate_uses_timer_bench_by_default(fresh_cache, small_cpu_sizes, monkeypatch):
    timer = pytest.importorskip("kernelkit.measure.timer")
    calls: list[dict] = []
    monkeypatch.setattr(timer, "bench", fake_bench(calls), raising=False)
    calibrate("cpu")
    assert len(calls) == 2


def test_calibrate_cpu_for_real_with_a_small_budget(fresh_cache):
    pytest.importorskip("kernelkit.measure.timer")
    start = time.perf_counter()
    try:
        measured = calibrate("cpu", budget=0.3)
    except ceilings.NoisyCalibration as exc:  # a busy machine: every try spread over MAX_SPREAD, nothing kept
        assert "calibration refused" in str(exc) and load_cached("cpu") is None
        measured = None
    elapsed = time.perf_counter() - start
    if measured is not None:
        assert measured.copy_gbps > 0 and measured.matmul_tflops["fp32"] > 0
        assert measured.notes["copy"]["mode"] == "hot" and measured.notes["copy"]["n"] >= 1
        assert measured.worst_spread()[1] <= ceilings.MAX_SPREAD
    assert elapsed < 10 * ceilings.MEASURE_TRIES, f"CPU calibration took {elapsed:.1f} s"


# --- on a GPU (the gpu marker skips these elsewhere) -------------------------------------------------------------


@pytest.mark.gpu
def test_fingerprint_and_clocks_on_a_gpu():
    info = fingerprint()
    assert info["gpu_name"] == torch.cuda.get_device_name() == info["device_name"]
    assert info["gpu_count"] >= 1 and info["l2_bytes"] > 0 and info["driver_version"]
    reader = ClockReader.open(torch.cuda.current_device())
    if reader is None:
        pytest.skip("no NVML here (pip install nvidia-ml-py)")
    with reader:
        assert 0 < reader.sm_clock_mhz() <= reader.max_sm_clock_mhz()
        assert isinstance(reader.throttle_reasons(), list)
    assert info["sm_clock_max_mhz"] == reader.max_sm_clock_mhz()


@pytest.mark.gpu
@pytest.mark.slow
def test_calibrate_on_a_gpu(fresh_cache):
    before = torch.backends.cuda.matmul.allow_tf32
    measured = calibrate("cuda", budget=0.5)
    assert torch.backends.cuda.matmul.allow_tf32 == before
    assert measured.device == "cuda" and measured.device_name == torch.cuda.get_device_name()
    assert measured.copy_gbps > 100
    assert {"fp32", "tf32", "bf16", "fp16"} <= set(measured.matmul_tflops)
    if torch.cuda.get_device_capability() >= (8, 0):  # tensor cores: half precision and TF32 beat plain fp32
        assert measured.matmul_tflops["bf16"] > measured.matmul_tflops["tf32"] > measured.matmul_tflops["fp32"]
    assert ("fp8" in measured.matmul_tflops) != ("skipped" in measured.notes["fp8"])
    assert load_cached("cuda") == measured
