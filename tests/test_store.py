"""The results store: results round-trip, runs list and resolve, a killed run keeps its cases, files that are not
ours get a StoreError (never a sqlite3 traceback), and compare calls a change only when the interval excludes 1.0."""

import os
import signal
import sqlite3
import subprocess
import sys
import textwrap
from pathlib import Path

import numpy as np
import pytest

from kernelkit.measure.measurement import BenchResult, Ceiling
from kernelkit.measure.stats import Ratio
from kernelkit.results import Status
from kernelkit.store import APPLICATION_ID, SCHEMA_VERSION, Store, StoreError, compare, default_store_path
from resultkit import bench_result, measurement, noisy_samples

SRC = str(Path(__file__).resolve().parents[1] / "src")
ENV = {"gpu": "NVIDIA H100 80GB HBM3", "driver": "580.65", "cuda": "13.0", "torch": "2.11.0", "triton": "3.6.0",
       "clocks": {"sm_max_mhz": 1980}, "git_commit": "abc123"}


def result(impl: str = "triton_flat", times: list[float] | None = None, *, status: Status = Status.PASSED,
           size: tuple[int, ...] = (4096, 4096), mode: str = "hot", message: str = "") -> BenchResult:
    m = None
    if times is not None:
        m = measurement(impl, times, mode=mode, device_name=ENV["gpu"], first_call=0.2, warmup_calls=25,
                        bytes=2 * 4096 * 4096 * 4)
    return bench_result(impl, size, m=m, backend="triton", mode=mode, status=status, message=message)


@pytest.fixture
def store(tmp_path: Path):
    with Store.open(tmp_path / "sub" / "results.sqlite") as s:
        yield s


def assert_helpful(err: pytest.ExceptionInfo, path: Path, *words: str) -> None:
    """A StoreError (not a sqlite3 error) that names the file, the problem and the --store fix."""
    assert err.type is StoreError and not isinstance(err.value, sqlite3.Error)
    text = str(err.value)
    assert str(path) in text and "--store" in text, text
    for word in words:
        assert word in text, text


# -- writing and reading --


def test_default_path_is_in_the_kernelkit_cache(fresh_cache: Path):
    assert default_store_path() == fresh_cache / "results.sqlite"
    with Store.open() as s:
        assert s.path == fresh_cache / "results.sqlite" and s.runs() == []


def test_a_result_round_trips_with_measurement_speedups_and_ceiling(store: Store):
    r = result(times=[1.0e-4, 1.1e-4, 0.9e-4, 1.05e-4])
    r.measurement.ceiling = Ceiling(bandwidth_gbps=3000.0, tflops=51.0, flops_kind="fp32", pct_bandwidth=112.0)
    r.measurement.clocks_mhz, r.measurement.max_clock_mhz = [1980.0, 1965.0, 1980.0, 1980.0], 1980.0
    r.measurement.warnings.append("noisy: IQR/median 12%")
    r.speedups = {"eager": Ratio(1.8, 1.7, 1.9), "compile": Ratio(1.01, 0.97, 1.05)}
    r.details = {"block_size": 1024}
    failed = result("cuda_vec4", status=Status.INCORRECT_NUMERICS, message="3 of 16M elements differ")
    run = store.begin_run("kernelkit bench square", ENV, op="square", mode="hot")
    store.add_result(run, r)
    store.add_result(run, failed)
    assert store.results(run) == [r, failed]
    row = store._conn.execute("SELECT case_key, size, median_s, gbps, suspect FROM results ORDER BY id").fetchall()
    assert row[0] == ("square/triton_flat/4096x4096/float32", "4096x4096", r.measurement.median, r.measurement.gbps, 1)
    assert row[1][2:] == (None, None, 0)


def test_runs_are_listed_newest_first_with_counts_and_limit(store: Store):
    ids = []
    for i, end in enumerate(["finished", "interrupted", None]):
        run = store.begin_run(f"kernelkit bench square --run {i}", ENV, op="square", mode="hot")
        store.add_result(run, result("a", [1e-4] * 3))
        store.add_result(run, result("b", status=Status.RUNTIME_ERROR))
        if end:
            store.finish_run(run, end)
        ids.append(run)
    listed = store.runs()
    assert [r.id for r in listed] == ids[::-1]
    assert [r.status for r in listed] == ["incomplete", "interrupted", "finished"]
    assert listed[0].finished is None and listed[2].finished is not None
    assert all((r.n_results, r.n_passed, r.op, r.mode) == (2, 1, "square", "hot") for r in listed)
    assert listed[0].device == ENV["gpu"] and listed[0].env == ENV  # device name falls back to the fingerprint
    assert listed[2].command == "kernelkit bench square --run 0"
    assert [r.id for r in store.runs(limit=2)] == ids[:0:-1]
    assert store.run(ids[0]).status == "finished"


def test_run_references_resolve(store: Store):
    with pytest.raises(StoreError, match="no runs yet"):
        store.resolve_run("latest")
    ids = [store.begin_run("kk", {}, device="cpu") for _ in range(3)]
    assert store.resolve_run("latest") == store.resolve_run("last") == store.resolve_run(-1) == ids[-1]
    assert store.resolve_run("-2") == store.resolve_run(-2) == ids[1]
    assert store.resolve_run(str(ids[0])) == store.resolve_run(ids[0]) == ids[0]
    assert store.run("latest").device == "cpu"
    for bad in (999, -4, "yesterday", 0):
        with pytest.raises(StoreError) as err:
            store.resolve_run(bad)
        assert f"latest runs: {ids[2]}, {ids[1]}, {ids[0]}" in str(err.value)


def test_writes_to_an_unknown_run_or_with_a_bad_status_are_refused(store: Store):
    with pytest.raises(StoreError, match="no run 7"):
        store.add_result(7, result())
    run = store.begin_run("kk", ENV)
    with pytest.raises(ValueError, match="finished"):
        store.finish_run(run, "done")
    assert store.run(run).status == "incomplete" and store.results(run) == []


def test_a_run_killed_mid_sweep_keeps_its_finished_cases(tmp_path: Path):
    path = tmp_path / "results.sqlite"
    script = textwrap.dedent(f"""
        import os, signal
        from kernelkit.measure.measurement import BenchResult
        from kernelkit.results import Status
        from kernelkit.store import Store
        store = Store.open({str(path)!r})
        run = store.begin_run("kernelkit bench square", {{"gpu": "H100"}})
        for i in range(3):
            store.add_result(run, BenchResult("square", f"impl{{i}}", "eager", (8,), "float32", "cpu", "hot",
                                              Status.PASSED))
        os.kill(os.getpid(), signal.SIGKILL)  # no finish_run, no close: the process dies mid-sweep
    """)
    proc = subprocess.run([sys.executable, "-c", script], env={**os.environ, "PYTHONPATH": SRC},
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    with Store.open(path) as store:
        (run,) = store.runs()
        assert (run.status, run.finished, run.n_results) == ("incomplete", None, 3)
        assert [r.impl for r in store.results("latest")] == ["impl0", "impl1", "impl2"]


# -- files that are not ours --


def test_an_empty_file_is_a_new_store(tmp_path: Path):
    path = tmp_path / "results.sqlite"
    path.touch()
    with Store.open(path) as s:
        assert s.runs() == []
        s.begin_run("kk", ENV)
    with sqlite3.connect(path) as conn:
        assert conn.execute("PRAGMA application_id").fetchone()[0] == APPLICATION_ID
        assert conn.execute("PRAGMA user_version").fetchone()[0] == SCHEMA_VERSION


@pytest.mark.parametrize(
    "content, words",
    [
        (np.random.default_rng(1).bytes(8192), ["not a SQLite database", "binary"]),
        (b"case,median\nsquare,1e-4\n", ["not a SQLite database", "text file"]),
        (b"SQLite format 3\x00" + b"\x10\x00", ["truncated"]),
    ],
    ids=["random-bytes", "text-file", "header-only"],
)
def test_a_file_that_is_not_a_database_is_refused(tmp_path: Path, content: bytes, words: list[str]):
    path = tmp_path / "results.sqlite"
    path.write_bytes(content)
    with pytest.raises(StoreError) as err:
        Store.open(path)
    assert_helpful(err, path, *words)
    assert path.read_bytes() == content  # left as it was


def test_another_programs_database_is_refused(tmp_path: Path):
    path = tmp_path / "notes.db"
    with sqlite3.connect(path) as conn:
        conn.execute("CREATE TABLE notes (id INTEGER PRIMARY KEY, body TEXT)")
    with pytest.raises(StoreError) as err:
        Store.open(path)
    assert_helpful(err, path, "not a kernelkit results store", "notes")
    with sqlite3.connect(path) as conn:
        conn.execute("PRAGMA application_id = 1234")
    with pytest.raises(StoreError) as err:
        Store.open(path)
    assert_helpful(err, path, "another program", "0x4d2")


def test_a_newer_schema_is_refused(tmp_path: Path):
    path = tmp_path / "results.sqlite"
    Store.open(path).close()
    with sqlite3.connect(path) as conn:
        conn.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StoreError) as err:
        Store.open(path)
    assert_helpful(err, path, "newer kernelkit", "upgrade kernelkit")


def filled_store(path: Path, n: int = 40) -> None:
    with Store.open(path) as s:
        run = s.begin_run("kk", ENV)
        for i in range(n):
            s.add_result(run, result(f"impl{i}", noisy_samples(1e-4, 0.01, n=100, seed=i)))
        s.finish_run(run)


def test_a_truncated_database_is_refused(tmp_path: Path):
    path = tmp_path / "results.sqlite"
    filled_store(path)
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(StoreError) as err:
        Store.open(path)
    assert_helpful(err, path, "truncated")


def test_a_damaged_database_gives_a_store_error_on_read(tmp_path: Path):
    path = tmp_path / "results.sqlite"
    filled_store(path)
    data = bytearray(path.read_bytes())
    page = int.from_bytes(data[16:18], "big")
    data[page:] = b"\xab" * (len(data) - page)  # keep the header and the schema page, clobber every table page
    path.write_bytes(bytes(data))
    with pytest.raises(StoreError) as err:
        with Store.open(path) as s:
            s.results(1)
    assert_helpful(err, path, "damaged")


def test_a_directory_is_refused(tmp_path: Path):
    with pytest.raises(StoreError, match="is a directory"):
        Store.open(tmp_path)


# -- compare --


def test_compare_calls_changes_only_when_the_interval_excludes_one(store: Store):
    a = store.begin_run("kk bench square", ENV)
    b = store.begin_run("kk bench square", {**ENV, "driver": "590.10", "git_commit": "def456",
                                            "clocks": {"sm_max_mhz": 1755}})
    base = noisy_samples(100e-6, 0.01, seed=1)
    for run, scale, seed in ((a, 1.0, 2), (b, 0.8, 3)):  # B 20% faster
        store.add_result(run, result("faster", noisy_samples(100e-6 * scale, 0.01, seed=seed)))
    for run, scale, seed in ((a, 1.0, 4), (b, 1.25, 5)):  # B 25% slower
        store.add_result(run, result("slower", noisy_samples(100e-6 * scale, 0.01, seed=seed)))
    noisy = noisy_samples(100e-6, 0.20, n=30, seed=6)  # B 1% slower under 20% noise: no detectable change
    store.add_result(a, result("same", noisy))
    store.add_result(b, result("same", [1.01 * t for t in reversed(noisy)]))
    store.add_result(a, result("only_a", base))
    store.add_result(a, result("broken_in_b", base))
    store.add_result(b, result("broken_in_b", status=Status.INCORRECT_NUMERICS, message="max abs err 0.5"))
    store.add_result(a, result("graph_vs_hot", base, mode="hot"))
    store.add_result(b, result("graph_vs_hot", base, mode="graph"))
    store.add_result(b, result("only_b", base))

    cmp = compare(store, a, "latest")
    rows = {c.impl: c for c in cmp.changes}
    assert list(rows) == ["faster", "slower", "same", "only_a", "broken_in_b", "graph_vs_hot", "only_b"]
    assert rows["faster"].verdict == "faster" and rows["faster"].ratio.low > 1.2
    assert rows["faster"].median_b == pytest.approx(0.8 * rows["faster"].median_a, rel=0.01)
    assert rows["slower"].verdict == "slower" and rows["slower"].ratio.high < 0.85
    assert rows["same"].verdict == "same" and rows["same"].ratio.low < 1.0 < rows["same"].ratio.high
    assert rows["faster"].case == "square/faster/4096x4096/float32" and rows["faster"].mode == "hot"

    not_compared = {k: (rows[k].ratio, rows[k].verdict, rows[k].note) for k in ("only_a", "only_b", "broken_in_b")}
    assert not_compared == {
        "only_a": (None, None, "only in A"),
        "only_b": (None, None, "only in B"),
        "broken_in_b": (None, None, "not timed in B (INCORRECT_NUMERICS: max abs err 0.5)"),
    }
    assert rows["broken_in_b"].status_b == "INCORRECT_NUMERICS" and rows["broken_in_b"].median_b is None
    assert rows["only_a"].status_b is None and rows["only_a"].median_a is not None
    assert rows["graph_vs_hot"].verdict is None and "mode differs: hot in A, graph in B" in rows["graph_vs_hot"].note

    assert {d.key: (d.a, d.b) for d in cmp.env_diffs} == {
        "clocks.sm_max_mhz": (1980, 1755), "driver": ("580.65", "590.10"), "git_commit": ("abc123", "def456"),
    }
    assert cmp.run_a.id == a and cmp.run_b.env["driver"] == "590.10"


def test_compare_of_a_run_with_itself_is_all_same_and_unknown_runs_are_refused(store: Store):
    run = store.begin_run("kk", ENV)
    store.add_result(run, result("x", noisy_samples(1e-4, 0.02)))
    cmp = compare(store, run, run)
    assert [c.verdict for c in cmp.changes] == ["same"] and cmp.env_diffs == []
    with pytest.raises(StoreError, match="no run 42"):
        compare(store, run, 42)
