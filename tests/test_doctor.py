"""`kernelkit doctor` on the CPU: verdicts from chosen timings, NVML findings from a fake pynvml, one real CPU run."""

from __future__ import annotations

import json
import math
import types

import pytest
from typer.testing import CliRunner

import kernelkit as kk
from kernelkit.cli import app
from kernelkit.doctor import machine, timing
from kernelkit.doctor.report import Check, DoctorReport
from kernelkit.measure.clocks import ClockReader
from kernelkit.measure.measurement import Measurement

US = 1e-6


def _statuses(checks, topic):
    return [c.status for c in checks if c.topic == topic]


def test_a_halved_kernel_mode_fails_and_faithful_modes_pass():
    medians = {"ncu": 174.2 * US, "cold": 176.3 * US, "kernel": 86.1 * US, "graph": 179.8 * US, "hot": 190.0 * US}
    checks = timing.large_verdicts(medians, {})
    by_topic = {c.topic: c for c in checks}
    assert by_topic["large: cold"].status == "ok" and "within 1.2% of ncu" in by_topic["large: cold"].detail
    assert by_topic["large: kernel"].status == "fail" and "-50.6% from ncu" in by_topic["large: kernel"].detail
    assert by_topic["large: graph"].status == "ok" and "of cold" in by_topic["large: graph"].detail
    assert by_topic["large: hot"].status == "warn"  # +7.8% over cold: more than the 5% allowed, less than 15%
    medians["hot"] = 182.3 * US
    assert _statuses(timing.large_verdicts(medians, {}), "large: hot") == ["ok"]


def test_without_ncu_the_large_kernel_is_judged_against_cold_and_a_launch_warning_there_fails():
    checks = timing.large_verdicts({"cold": 100 * US, "kernel": 99 * US, "hot": 101 * US}, {"cold": True})
    assert _statuses(checks, "large: cold") == ["info", "fail"]  # the reference, then the false launch warning
    assert _statuses(checks, "large: kernel") == ["ok"]


def test_the_tiny_kernel_modes_must_keep_their_order():
    good = {"cold": 4.5 * US, "hot": 11 * US, "graph": 1.6 * US, "kernel": 1.3 * US, "ncu": 2.7 * US}
    checks = timing.tiny_verdicts(good, {"hot": True, "cold": False})
    assert {c.topic: c.status for c in checks if c.topic != "tiny: cold"} == {
        "tiny: kernel": "ok", "tiny: graph": "ok", "tiny: hot": "ok", "tiny: ncu": "info"}
    bad = {**good, "kernel": 5.0 * US, "graph": 6.0 * US, "hot": 9.0 * US}
    checks = timing.tiny_verdicts(bad, {"hot": False})
    assert _statuses(checks, "tiny: kernel") == ["warn"] and _statuses(checks, "tiny: graph") == ["warn"]
    assert _statuses(checks, "tiny: hot") == ["ok"]  # 9 us against a 5 us kernel: only 4 us apart, no warning due


class FakeReader:
    def __init__(self, reasons=(), persistent=True):
        self.reasons, self.persistent = list(reasons), persistent

    def driver_version(self):
        return "580.95.05"

    def sm_clock_mhz(self):
        return 1410.0

    def max_sm_clock_mhz(self):
        return 1980.0

    def mem_clock_mhz(self):
        return 2619.0

    def throttle_reasons(self):
        return self.reasons

    def temperature_c(self):
        return 71.0

    def power_w(self):
        return 650.0, 700.0

    def persistence_mode(self):
        return self.persistent


def test_nvml_findings_say_what_holds_the_gpu_back():
    checks = machine.nvml_checks(FakeReader(reasons=["sw_power_cap", "hw_thermal"], persistent=False))
    by_topic = {c.topic: c for c in checks}
    assert by_topic["driver"].detail == "NVIDIA driver 580.95.05"
    assert by_topic["clocks"].status == "warn" and "hw_thermal, sw_power_cap" in by_topic["clocks"].detail
    assert "SM 1410 of 1980 MHz" in by_topic["clocks"].detail and "650 of 700 W" in by_topic["clocks"].detail
    assert by_topic["persistence"].status == "warn" and "never changes it" in by_topic["persistence"].detail
    checks = machine.nvml_checks(FakeReader(reasons=["idle"]))
    assert _statuses(checks, "clocks") == ["ok"] and _statuses(checks, "persistence") == ["ok"]
    assert _statuses(machine.nvml_checks(None), "NVML") == ["warn"]


def test_the_clock_reader_only_ever_reads_nvml():
    called = []

    class NVMLError(Exception):
        pass

    def getter(name, value):
        def get(*args):
            called.append(name)
            return value
        return get

    nvml = types.SimpleNamespace(NVMLError=NVMLError, NVML_CLOCK_SM=1, NVML_CLOCK_MEM=2, nvmlShutdown=lambda: None)
    for name, value in [("nvmlDeviceGetClockInfo", 1500), ("nvmlDeviceGetMaxClockInfo", 1980),
                        ("nvmlDeviceGetCurrentClocksEventReasons", 0x1), ("nvmlSystemGetDriverVersion", "580"),
                        ("nvmlDeviceGetPersistenceMode", 1), ("nvmlDeviceGetTemperature", 40),
                        ("nvmlDeviceGetPowerUsage", 90_000), ("nvmlDeviceGetEnforcedPowerLimit", 700_000)]:
        setattr(nvml, name, getter(name, value))
    reader = ClockReader(nvml, handle=object())
    checks = machine.nvml_checks(reader)
    assert "90 of 700 W" in next(c.detail for c in checks if c.topic == "clocks")
    assert called and all(name.startswith(("nvmlDeviceGet", "nvmlSystemGet")) for name in called)
    reader.close()
    assert math.isnan(reader.temperature_c())


def _fake_bench(seconds_by_mode):
    def bench(fn, *args, mode="cold", budget=None, label=""):
        fn(*args)
        return Measurement(label=label, mode=mode, device="cpu", device_name="CPU: test", first_call=0.0,
                           samples=[seconds_by_mode[mode] * (1 + 0.001 * i) for i in range(-5, 6)],
                           warmup_calls=3, stop_reason="converged")
    return bench


def test_doctor_on_the_cpu_checks_what_it_can_and_skips_the_rest(fresh_cache):
    report = kk.doctor("cpu", bench=_fake_bench({"cold": 30 * US, "hot": 3 * US}))
    assert isinstance(report, DoctorReport) and report.device == "cpu" and report.ok
    topics = [c.topic for c in report.checks]
    for topic in ("CPU", "cold mode", "GPU", "ceilings", "large: cold", "large: hot", "tiny: cold", "tiny: hot"):
        assert topic in topics
    assert _statuses(report.checks, "GPU") == ["skipped"]
    assert _statuses(report.checks, "ceilings") == ["warn"]  # an empty cache: not calibrated yet
    assert _statuses(report.checks, "large: graph, kernel") == ["skipped"]
    tiny = next(v for k, v in report.timings.items() if k.startswith("tiny"))
    assert tiny == {"cold": pytest.approx(30 * US), "hot": pytest.approx(3 * US)}
    json.dumps(report.to_dict())  # plain data


def test_a_failing_mode_fails_the_report():
    report = DoctorReport("cuda", "Fake GPU", [Check("large: kernel", "fail", "halved")])
    assert not report.ok
    with pytest.raises(ValueError, match="unknown check status"):
        Check("x", "great", "")


@pytest.mark.slow
def test_the_doctor_command_on_this_cpu_runs_for_real_in_seconds(fresh_cache):
    result = CliRunner().invoke(app, ["doctor", "--device", "cpu", "--json"])
    assert result.exit_code == 0, result.output
    report = json.loads(result.output)
    assert report["ok"] and report["seconds"] < 30
    assert {"large: cold", "tiny: hot", "GPU"} <= {c["topic"] for c in report["checks"]}
    text = CliRunner().invoke(app, ["doctor", "--device", "cpu", "--budget", "0.1"]).output
    assert "kernelkit doctor" in text and "Nothing was changed on this machine" in text
