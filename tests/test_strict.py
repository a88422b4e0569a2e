"""Strict mode: every planted cheat in tests/cheats fails with its reason; honest impls of every built-in op pass."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch

import kernelkit as kk
from kernelkit import verify
from kernelkit.jobs import guards, seal
from kernelkit.jobs.strict_worker import pack, unpack
from kernelkit.ops import BUILTIN_OPS
from kernelkit.results import Status
from kernelkit.target import open_target

CHEATS = Path(__file__).parent / "cheats"
SRC = Path(__file__).parent.parent / "src"

# impl -> (status, words its message must hold): the cheat table of the README's "Strict mode" section.
EXPECTED = {
    "eager_honest": (Status.PASSED, ""),
    "triton_honest": (Status.PASSED, ""),
    "eager_reads_freed_reference": (Status.INCORRECT_NUMERICS, "never written"),
    "eager_replay_by_address": (Status.CHEATED, "replayed"),
    "eager_replay_by_version": (Status.PASSED, ""),  # correct by PyTorch's contract: strict bench catches it
    "eager_call_counter_3": (Status.PASSED, ""),  # every call of a check computes: strict bench catches it
    "eager_call_counter_8": (Status.PASSED, ""),
    "eager_replay_by_content": (Status.CHEATED, "replayed"),
    "eager_background_thread": (Status.CHEATED, "thread"),
    "eager_lazy_subclass": (Status.CHEATED, "torch.Tensor subclass"),
    "eager_patches_torch_equal": (Status.CHEATED, "torch.equal"),
    "eager_patches_timer": (Status.CHEATED, "time.perf_counter"),
    "eager_patches_verdict": (Status.CHEATED, "kernelkit.jobs.check.judge"),
    "eager_expected_from_gc": (Status.INCORRECT_NUMERICS, "never written"),
    "eager_predicted_seed": (Status.INCORRECT_NUMERICS, "fresh inputs"),
    "triton_falls_back": (Status.FALLBACK, "cheat_square_kernel never launched"),
    "eager_hard_coded_shape": (Status.INCORRECT_NUMERICS, "hard-coded shapes"),
    "eager_one_tuple": (Status.INCORRECT_SHAPE, "a tuple where the reference returns a tensor"),
    "triton_writes_past_end": (Status.OUT_OF_BOUNDS, "past its end"),
    "eager_writes_past_end_raw": (Status.OUT_OF_BOUNDS, "1024 bytes written past its end"),
}


@pytest.fixture(scope="module")
def strict_results():
    """One strict check of every planted cheat, in workers (the reference stays in this process)."""
    report = kk.check(str(CHEATS / "cheat_ops.py"), device="cpu", strict=True)
    return {r.impl: r for r in report.results}


@pytest.mark.parametrize("impl", list(EXPECTED))
def test_each_planted_cheat_fails_strict_mode_with_its_reason(strict_results, impl):
    status, words = EXPECTED[impl]
    result = strict_results[impl]
    assert result.status is status, f"{impl}: {result.status.value}: {result.message}"
    assert words in result.message


def test_every_cheat_of_the_suite_is_in_the_table(strict_results):
    assert set(strict_results) == set(EXPECTED)


def _strict_in_a_fresh_process(path: Path) -> list[tuple[str, str, str]]:
    """(impl, status, message) of a strict check run in its own interpreter: the file changes the process."""
    code = textwrap.dedent(f"""
        import kernelkit as kk
        for r in kk.check({str(path)!r}, device="cpu", strict=True).results:
            print(r.impl, r.status.value, r.message.replace(chr(10), " "), sep="\\t")
    """)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=600,
                          env={"PYTHONPATH": str(SRC), "PATH": "/usr/bin:/bin", "HOME": str(Path.home()),
                               "KERNELKIT_CACHE_DIR": os.environ["KERNELKIT_CACHE_DIR"]})  # the test's own cache
    assert done.returncode == 0, done.stderr[-2000:]
    return [tuple(line.split("\t", 2)) for line in done.stdout.splitlines() if line.count("\t") == 2]


def test_a_file_that_replaces_a_built_in_ops_reference_is_caught():
    rows = _strict_in_a_fresh_process(CHEATS / "replaces_reference.py")
    assert rows and all(status == "CHEATED" for _, status, _ in rows), rows
    assert all("built-in op 'square''s reference" in message for _, _, message in rows)


def test_a_file_that_patches_the_harness_at_import_is_caught():
    rows = _strict_in_a_fresh_process(CHEATS / "patches_at_import.py")
    assert rows and all(status == "CHEATED" for _, status, _ in rows), rows
    assert all("loading the target replaced" in message and "torch.allclose" in message for _, _, message in rows)


def test_the_size_probe_is_left_out_past_its_memory_limit_and_says_so(monkeypatch):
    from kernelkit.runs import strict

    def check(size: tuple[int, int]):
        return kk.check(str(CHEATS / "cheat_ops.py"), impls=["eager_hard_coded_shape"], device="cpu",
                        isolate=False, strict=True, sizes=[size]).results[0]

    caught = check((64, 48))  # the probe runs: a kernel for the listed shape only is wrong at 128x96
    assert caught.status is Status.INCORRECT_NUMERICS and "hard-coded shapes" in caught.message
    # 64x48 float32 is 12 KiB: a limit of 8 KiB leaves the probe out, and the result says why
    monkeypatch.setattr(strict, "PROBE_BYTES", 8 << 10)
    unprobed = check((64, 48))
    assert unprobed.status is Status.PASSED
    said = "unlisted-size probe (hard-coded shapes) was left out: this case's inputs take 12.0 KiB"
    assert any(said in w for w in unprobed.warnings), unprobed.warnings


@pytest.mark.parametrize("name", list(BUILTIN_OPS))
def test_honest_impls_of_every_built_in_op_pass_strict_mode_on_cpu(cpu_process, name):
    op = open_target(name, "cpu").op()
    size = op.cpu_sizes[0]
    dtype = next((d for d in op.dtypes if d != torch.bfloat16), op.dtypes[0])  # the interpreter's bf16 is wrong
    report = kk.check(name, device="cpu", isolate=False, strict=True, sizes=[size], dtypes=[dtype])
    for r in report.results:
        assert r.status in (Status.PASSED, Status.SKIPPED), f"{r.case_id}: {r.status.value}: {r.message}"
    assert any(r.status is Status.PASSED for r in report.results), [(r.impl, r.message) for r in report.results]


def test_a_stored_bench_is_strict_by_default_and_times_only_what_passed_strictly(tmp_path):
    from kernelkit.store import Store

    with Store.open(tmp_path / "results.db") as store:
        report = kk.bench_op(str(CHEATS / "cheat_ops.py"), device="cpu", impls=["eager_honest", "eager_one_tuple"],
                             baselines=False, budget=0.05, store=store)
    by_impl = {r.impl: r for r in report.results}
    assert by_impl["eager_one_tuple"].status is Status.INCORRECT_SHAPE
    honest = by_impl["eager_honest"]
    assert honest.status is Status.PASSED and honest.measurement is not None and honest.details.get("strict")


def test_a_cache_keyed_on_the_inputs_version_is_caught_by_strict_bench():
    report = kk.bench_op(str(CHEATS / "cheat_ops.py"), device="cpu", impls=["eager_replay_by_version"],
                         baselines=False, budget=0.05, strict=True)
    (result,) = report.results
    assert result.status is Status.CHEATED and "same output storage" in result.message, result.message


def test_a_cache_keyed_on_a_call_count_is_caught_by_strict_bench():
    # Right whenever timed calls cycle over 3 (or 8) input sets in order; the sets are drawn at random call by call.
    report = kk.bench_op(str(CHEATS / "cheat_ops.py"), device="cpu", baselines=False, budget=0.05, strict=True,
                         impls=["eager_honest", "eager_call_counter_3", "eager_call_counter_8"])
    by_impl = {r.impl: r for r in report.results}
    assert by_impl["eager_honest"].status is Status.PASSED, by_impl["eager_honest"].message
    for impl in ("eager_call_counter_3", "eager_call_counter_8"):
        result = by_impl[impl]
        assert result.status is Status.CHEATED, f"{impl}: {result.status.value}: {result.message}"
        assert "answer: replayed, not computed" in result.message and "call count" in result.message


# ---- the pieces ---------------------------------------------------------------------------------------------


def test_pack_keeps_layout_and_shares_no_storage():
    base = torch.arange(30, dtype=torch.float32)
    view = base[3:].view(3, 9).t()  # non-contiguous, offset into its storage
    back, value = unpack(pack([view, 7]))
    assert value == 7 and torch.equal(back, view)
    assert back.stride() == view.stride() and back.storage_offset() == view.storage_offset()
    back.fill_(0)
    assert base[3] == 3  # a copy: writing the received tensor leaves the sent one alone


def test_guarded_allocations_poison_and_catch_writes_past_either_end():
    mode = guards.GuardedAllocations()
    with mode:
        y = torch.empty(4, 5)
    assert guards.is_poison(y) and mode.breaches([y]) == []
    raw = y.untyped_storage()
    start = y.storage_offset() * y.element_size()
    raw[start + 20 * 4 + 3] = 0  # one byte past the tensor's 80
    assert mode.breaches([y]) == ["output 0 (4x5 float32 tensor): 1 bytes written past its end (from byte 3 to 3 "
                                  "after it)"]
    raw[start - 8] = 0
    assert len(mode.breaches([y])) == 1  # the tail is named first; the head is checked once the tail holds


def test_guarded_zeros_stay_zeros():
    with guards.GuardedAllocations():
        z = torch.zeros_like(torch.ones(3, 3))
    assert torch.equal(z, torch.zeros(3, 3))


def test_the_seal_names_what_was_replaced(monkeypatch):
    sealed = seal.Seal.take()
    assert sealed.tampered() == []
    monkeypatch.setattr(torch, "allclose", lambda *a, **k: True)
    monkeypatch.setattr(verify, "compare", lambda *a, **k: None)
    assert set(sealed.tampered()) == {"torch.allclose", "kernelkit.verify.compare"}


def _says_yes(*args, **kwargs):
    return True


@pytest.mark.parametrize("part", ["__code__", "__defaults__", "__kwdefaults__"])
def test_the_seal_sees_a_function_rewritten_in_place(monkeypatch, part):
    # The same object doing something else: identity alone would call it untouched.
    sealed = seal.Seal.take()
    value = {"__code__": _says_yes.__code__, "__defaults__": (1.0,), "__kwdefaults__": {"x": 1}}[part]
    monkeypatch.setattr(verify.passes, part, value)
    assert sealed.tampered() == ["kernelkit.verify.passes"]


def test_the_seal_sees_a_method_rewritten_in_place(monkeypatch):
    sealed = seal.Seal.take()
    monkeypatch.setattr(seal.Seal.take.__func__, "__code__", _says_yes.__code__)  # a classmethod's function
    assert sealed.tampered() == ["kernelkit.jobs.seal.Seal.take"]
    monkeypatch.undo()
    assert sealed.tampered() == []


def test_a_one_element_output_is_not_weak_by_construction():
    x, other = torch.tensor([3.0]), torch.tensor([5.0])
    ref, lo = (x * 2).double(), x * 2
    assert verify.weak_probes([x], [ref], [lo], 1e-5, 1.3e-6, other=[other * 2]) == []
    assert verify.weak_probes([x], [ref], [lo], 1e-5, 1.3e-6) == []  # no other answer: no constant probe
    same = torch.tensor([6.0])  # an impl ignoring its input would return this for every input
    assert verify.weak_probes([x], [ref], [lo], 1e-5, 1.3e-6, other=[same]) == ["a constant"]


def test_outputs_far_from_order_one_carry_a_note():
    assert "magnitude 1e+03" in verify.scale_note([torch.full((8,), 1000.0, dtype=torch.float64)])
    assert "magnitude 0.001" in verify.scale_note([torch.full((8,), 1e-3, dtype=torch.float64)])
    assert verify.scale_note([torch.ones(8, dtype=torch.float64)]) == ""
    assert verify.scale_note([torch.zeros(8, dtype=torch.float64)]) == ""


# ---- GPU: streams, threads, the ceiling ------------------------------------------------------------------------


@pytest.fixture(scope="module")
def gpu_strict_results():
    report = kk.check(str(CHEATS / "gpu_cheats.py"), device="cuda", strict=True, impls=[
        "eager_honest", "eager_side_stream", "eager_gpu_thread", "eager_side_stream_joined",
        "eager_side_stream_entered"])
    return {(r.op, r.impl): r for r in report.results}


@pytest.mark.gpu
@pytest.mark.parametrize(("op", "impl", "status", "words"), [
    ("gpu_cheat", "eager_honest", Status.PASSED, ""),
    ("gpu_cheat", "eager_side_stream", Status.CHEATED, "another stream"),
    ("gpu_cheat", "eager_gpu_thread", Status.CHEATED, "thread"),
    # 16x16: the side stream's work ends within microseconds and is joined before the call returns
    ("tiny_stream", "eager_honest", Status.PASSED, ""),
    ("tiny_stream", "eager_side_stream_joined", Status.CHEATED, "another stream"),
    ("tiny_stream", "eager_side_stream_entered", Status.CHEATED, "another stream"),
])
def test_work_off_the_timed_stream_fails_strict_mode_on_gpu(gpu_strict_results, op, impl, status, words):
    result = gpu_strict_results[(op, impl)]
    assert result.status is status, f"{impl}: {result.status.value}: {result.message}"
    assert words in result.message


@pytest.mark.gpu
def test_a_time_above_the_ceiling_is_suspect_and_fails_strict_bench():
    report = kk.bench_op(str(CHEATS / "gpu_cheats.py"), device="cuda", strict=True, impls=["eager_honest"],
                         baselines=False, budget=1.0)
    mine = [r for r in report.results if r.op == "inflated"]
    assert mine and mine[0].status is Status.SUSPECT, [(r.op, r.status.value, r.message) for r in mine]
    assert "% of the calibrated ceiling" in mine[0].message
    honest = [r for r in report.results if r.op == "gpu_cheat"]
    assert honest and honest[0].status is Status.PASSED, [(r.status.value, r.message) for r in honest]
    assert not report.ok


@pytest.mark.gpu
@pytest.mark.parametrize("name", list(BUILTIN_OPS))
def test_honest_impls_of_every_built_in_op_pass_strict_mode_on_gpu(name):
    op = open_target(name, "cuda").op()
    size = min(op.sizes, key=lambda s: torch.Size(s).numel())
    report = kk.check(name, device="cuda", strict=True, sizes=[size], dtypes=[op.dtypes[0]])
    if report.interrupted:  # a SIGINT (Ctrl-C, a time limit) cut the check: a partial report is no verdict
        raise KeyboardInterrupt
    for r in report.results:
        assert r.status in (Status.PASSED, Status.SKIPPED), f"{r.case_id}: {r.status.value}: {r.message}"
    assert any(r.status is Status.PASSED for r in report.results), [(r.impl, r.message) for r in report.results]


@pytest.mark.parametrize("strict", [True, False])
def test_an_output_whose_unpickling_runs_code_runs_nothing_in_the_judge_and_fails(strict, tmp_path, monkeypatch):
    # The worker's messages are data only (kernelkit.wire): an object from the impl reaches the judging process as
    # its type's name, never as something to unpickle. Before, strict mode's verdict channel created this file.
    planted = tmp_path / "created-by-the-payload"
    monkeypatch.setenv("KERNELKIT_PAYLOAD_FILE", str(planted))
    report = kk.check(str(CHEATS / "pickle_payload.py"), device="cpu", strict=strict)
    results = {r.impl: r for r in report.results}
    assert results["eager_honest"].status is Status.PASSED, results["eager_honest"].message
    assert results["eager_payload"].status.failed and "Payload" in results["eager_payload"].message, (
        results["eager_payload"].status, results["eager_payload"].message)
    assert not planted.exists()
