"""The measurement commands on the CPU: bench (table, JSON, CSV, plots, store), runs, compare, calibrate."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from typer.testing import CliRunner

from kernelkit.cli import app

OPS = str(Path(__file__).parent / "planted" / "bench_ops.py")
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def two_runs(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("bench")
    store = tmp / "results.sqlite"
    runner = CliRunner()
    first = runner.invoke(app, ["bench", OPS, "--device", "cpu", "--impl", "eager_add", "--impl", "eager",
                                "--mode", "hot", "--budget", "0.2", "--store", str(store), "--json",
                                str(tmp / "out.json"), "--csv", str(tmp / "out.csv"), "--plot", str(tmp / "plots")])
    second = runner.invoke(app, ["bench", OPS, "--device", "cpu", "--impl", "eager_add", "--impl", "eager",
                                 "--mode", "hot", "--budget", "0.2", "--store", str(store)])
    return tmp, store, first, second


def test_bench_prints_the_table_and_writes_every_output(two_runs):
    tmp, _, first, _ = two_runs
    assert first.exit_code == 0, first.output
    assert "eager_add" in first.output and "CPU timings: not GPU performance" in first.output
    doc = json.loads((tmp / "out.json").read_text())
    assert {r["impl"] for r in doc["results"]} == {"eager_add", "eager"}
    assert all(r["measurement"]["samples"] for r in doc["results"])
    assert doc["env"]["device_name"].startswith("CPU")
    assert len((tmp / "out.csv").read_text().strip().splitlines()) == 1 + len(doc["results"])
    names = sorted(p.name for p in (tmp / "plots").iterdir())  # the rate against size, and the roofline
    assert names == [f"double_float32_hot{kind}.{ext}" for kind in ("", "_roofline") for ext in ("png", "svg")]


def test_runs_lists_both_and_compare_matches_cases(two_runs):
    _, store, _, second = two_runs
    assert second.exit_code == 0, second.output
    runner = CliRunner()
    runs = runner.invoke(app, ["runs", "--store", str(store)])
    assert runs.exit_code == 0 and runs.output.count("finished") == 2
    listed = json.loads(runner.invoke(app, ["runs", "--store", str(store), "--json"]).stdout)
    assert listed["store"] == str(store) and [r["status"] for r in listed["runs"]] == ["finished", "finished"]
    compared = runner.invoke(app, ["compare", "latest-1", "latest", "--store", str(store), "--json"])
    assert compared.exit_code == 0, compared.output
    changes = json.loads(compared.stdout)["changes"]
    assert {c["case"] for c in changes} >= {"double/eager_add/64x64/float32", "double/eager/64x64/float32"}
    # Every case is judged against the CPU's default noise floor, or three times its IQR when the runs spread wider.
    # Whether real 2-5 µs CPU timings of two runs on a shared 2-core machine drift past it is the machine's
    # business (the A/A rule itself is pinned with controlled drift in test_compare_noise.py); what must hold here
    # is the floor's source and the verdict words.
    assert all(c["floor_from"] == "default (cpu)" or c["floor_from"].startswith("spread (3 x IQR") for c in changes)
    assert {c["verdict"] for c in changes} <= {"same", "faster", "slower"}, changes
    # With a floor wider than this drift (99%), the same two runs are "same" everywhere: --min-effect reaches the rule.
    wide = runner.invoke(app, ["compare", "latest-1", "latest", "--store", str(store), "--json",
                               "--min-effect", "99%"])
    assert wide.exit_code == 0, wide.output
    assert {c["verdict"] for c in json.loads(wide.stdout)["changes"]} == {"same"}


def test_a_wrong_impl_fails_the_exit_code_and_says_why(tmp_path):
    result = CliRunner().invoke(app, ["bench", OPS, "--device", "cpu", "--impl", "eager_wrong", "--no-baselines",
                                      "--budget", "0.1", "--no-store", "--sizes", "64x64"])
    assert result.exit_code == 1
    assert "INCORRECT_NUMERICS" in result.output and "not timed" in result.output


def test_a_foreign_store_is_a_clear_error_not_a_traceback(tmp_path):
    bad = tmp_path / "not-a-db.sqlite"
    bad.write_text("hello, I am a text file\n")
    for args in (["runs", "--store", str(bad)], ["compare", "1", "2", "--store", str(bad)],
                 ["bench", OPS, "--device", "cpu", "--budget", "0.1", "--store", str(bad)]):
        result = CliRunner().invoke(app, args)
        assert result.exit_code == 2, (args, result.output)
        assert "not a SQLite database" in result.output and "Traceback" not in result.output


@pytest.mark.parametrize(("args", "message"), [
    (["--mode", "warm"], "unknown mode 'warm'"),
    (["--mode", "graph"], "needs a CUDA GPU"),
    (["--budget", "0"], "must be positive"),
])
def test_bad_arguments_name_the_problem(args, message):
    result = CliRunner().invoke(app, ["bench", OPS, "--device", "cpu", "--no-store", "--impl", "eager_add",
                                      "--no-baselines", "--sizes", "64x64", *args])
    assert result.exit_code == 2, result.output
    assert message in result.output


def test_calibrate_on_the_cpu_prints_its_ceilings(fresh_cache, monkeypatch):
    from kernelkit.measure import ceilings
    from kernelkit.measure.measurement import Measurement

    def steady(fn, *args, mode="cold", bytes=None, flops=None, budget=10.0, rse_target=0.005, label=""):
        fn(*args)  # the real copy and matmul, once; timings steady (a busy CPU's spread is refused, see below)
        return Measurement(label=label, mode=mode, device="cpu", device_name="fake", samples=[1e-3] * 5,
                           first_call=1e-3, warmup_calls=1, stop_reason="converged", bytes=bytes, flops=flops)

    monkeypatch.setattr(ceilings, "CPU_COPY_BYTES", 1 << 20)
    monkeypatch.setattr(ceilings, "CPU_MATMUL_N", 64)
    real = ceilings.calibrate
    monkeypatch.setattr(ceilings, "calibrate", lambda device, force=False: real(device, force=force, bench=steady))
    result = CliRunner().invoke(app, ["calibrate", "--device", "cpu"])
    assert result.exit_code == 0, result.output
    assert "copy bandwidth" in result.output and "2 GB/s" in result.output and "CPU" in result.output
    assert "matmul fp32" in result.output and "torch.mm(a, b, out=c), 64x64x64, hot, n=5, spread 0%" in result.output


def test_worker_warnings_are_printed_once_with_the_cases_they_came_from():
    from kernelkit.measure.measurement import BenchResult
    from kernelkit.report.bench_table import warning_lines
    from kernelkit.results import Status

    notice = "no % of ceiling: RuntimeError: no GPU memory"
    results = [BenchResult("double", name, "eager", (64, 64), "float32", "cpu", "cold", Status.PASSED,
                           warnings=[notice]) for name in ("eager_add", "eager")]
    lines = warning_lines(results)
    assert len(lines) == 1
    assert "double/eager_add/64x64/float32 and 1 more" in lines[0] and "no % of ceiling" in lines[0]


def test_the_html_reports_list_of_bench_flags_follows_the_bench_command():
    import typer.main

    from kernelkit.report.html_tables import BENCH_FLAGS

    command = typer.main.get_command(app).commands["bench"]
    flags = {name for p in command.params if getattr(p, "is_flag", False) for name in (*p.opts, *p.secondary_opts)}
    assert flags == set(BENCH_FLAGS)


def test_report_writes_one_html_page_of_a_stored_run(tmp_path: Path):
    from kernelkit.measure.measurement import BenchResult
    from kernelkit.results import Status
    from kernelkit.store import Store

    db = tmp_path / "results.db"
    with Store.open(db) as store:
        run = store.begin_run("kernelkit bench square", {"device_name": "CPU: test"}, op="square", device="cpu")
        store.add_result(run, BenchResult("square", "eager", "eager", (4, 4), "float32", "cpu", "cold",
                                          Status.SKIPPED, message="no reason"))
        store.finish_run(run)
    page = tmp_path / "out" / "report.html"
    result = CliRunner().invoke(app, ["report", "latest", "--store", str(db), "-o", str(page)])
    assert result.exit_code == 0, result.output
    assert page.is_file() and "<html" in page.read_text() and f"wrote {page}" in result.output
    missing = CliRunner().invoke(app, ["report", "7", "--store", str(db), "-o", str(page)])
    assert missing.exit_code == 2 and "error:" in missing.output


SLOW_EVICTION_OPS = """
import time

import torch

import kernelkit as kk
from kernelkit.measure import samplers

EVICTIONS = {count!r}


def slow_evict(buffer):
    # A fake slow eviction (5 ms), counted: installed in every process that imports this file, the workers too.
    with open(EVICTIONS, "a") as f:
        f.write("evicted\\n")
    end = time.perf_counter() + 0.005
    while time.perf_counter() < end:
        pass


samplers.evict = slow_evict


@kk.op(sizes=[(64, 64)], cpu_sizes=[(64, 64)], bytes=lambda x: 2 * x.numel() * x.element_size())
def triple(x):
    return x * 3


@triple.impl("eager_add")
def triple_add(x):
    return x + x + x
"""


def test_bench_in_the_default_mode_evicts_before_each_sample_and_times(tmp_path: Path, monkeypatch):
    """No --mode: cold, the default. Each sample follows an eviction (a fake, slow one), which stays out of the
    timed window and inside the budget; the table fits 120 columns and says the mode."""
    from kernelkit.measure import samplers

    monkeypatch.setattr(samplers, "evict", samplers.evict)  # the op file replaces it in this process: put it back after
    count = tmp_path / "evictions.txt"
    ops = tmp_path / "slow_eviction_ops.py"
    ops.write_text(SLOW_EVICTION_OPS.format(count=str(count)))
    # --no-strict: the fake eviction replaces one of kernelkit's own functions, which strict mode rightly calls
    # tampering with the harness (CHEATED); this test is about where the eviction falls, not about strictness.
    result = CliRunner().invoke(app, ["bench", str(ops), "--device", "cpu", "--budget", "0.3", "--no-store",
                                      "--no-baselines", "--no-strict", "--json", str(tmp_path / "out.json")])
    assert result.exit_code == 0, result.output
    assert "cold mode" in result.output
    doc = json.loads((tmp_path / "out.json").read_text())
    rows = {r["impl"]: r for r in doc["results"]}
    assert set(rows) == {"eager_add"}
    for r in rows.values():
        m = r["measurement"]
        assert r["status"] == "PASSED" and m["mode"] == "cold" and len(m["samples"]) >= 10, r
        slow = [s for s in m["samples"] if s >= 4e-3]  # the 5 ms eviction is outside the timed window:
        assert m["stats"]["median"] < 2e-3 and len(slow) < len(m["samples"]) / 4, m  # a busy host may add a few
    evictions = len(count.read_text().splitlines())
    assert evictions >= sum(len(r["measurement"]["samples"]) for r in rows.values())
    table = [line for line in result.output.splitlines() if line.startswith(("┏", "┃", "│", "└"))]
    assert table and max(len(line) for line in table) <= 120


def test_bench_json_dash_prints_the_document_alone_on_stdout(tmp_path: Path):
    done = CliRunner().invoke(app, ["bench", OPS, "--device", "cpu", "--impl", "eager_add", "--no-baselines",
                                    "--mode", "hot", "--budget", "0.05", "--no-store", "--json", "-"])
    assert done.exit_code == 0, done.output
    doc = json.loads(done.stdout)  # the table went to stderr
    assert [r["impl"] for r in doc["results"]] == ["eager_add", "eager_add"] and doc["results"][0]["measurement"]
