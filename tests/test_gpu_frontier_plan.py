"""scripts/gpu-frontier on a machine without a GPU: --plan lists every target with its op, impls, anchor and
threshold; a run without a GPU stops at once with a clear message; the table's verdicts read the right way."""

from __future__ import annotations

import os
import runpy
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch

from kernelkit.ops import attention, lowbit, softmax, sparse24

ROOT = Path(__file__).resolve().parent.parent
SCRIPT = ROOT / "scripts" / "gpu-frontier"
PIECES = ["matmul", "linear24", "softmax", "roofline", "aa", "lowbit", "attention", "check"]
# Each target of the script, as --plan must state it: (piece, the words that name it)
TARGETS = [
    ("lowbit", "target: linear_w4 M=1 >= 2.5x bf16 F.linear"),
    ("lowbit", "target: linear_w4 M=16 >= 1.8x bf16 F.linear"),
    ("lowbit", "target: linear_w4 faster than eager_int4pack_mm at M = 1, 16, 4096"),
    ("lowbit", "target: linear_w8 M=1 >= 1.8x bf16 F.linear"),
    ("lowbit", "target: linear_w8 M=4096 >= 0.9x bf16 F.linear"),
    ("attention", "target: forward >= 0.9x eager_sdpa_cudnn"),
    ("attention", "target: forward >= 1.0x eager_sdpa_flash"),
    ("attention", "target: backward >= 0.85x eager_sdpa_cudnn"),
    ("attention", "target: backward >= 1.0x eager_sdpa_flash"),
    ("linear24", "target: best 2:4 impl >= 1.2x eager_dense at each shape"),
    ("linear24", "target: training step (SparseLinear, training mode) >= 1.0x nn.Linear"),
    ("matmul", "target: best cuda_* rung >= 0.85x cuBLAS fp32"),
    ("softmax", "target: best impl >= 90% of the calibrated copy rate"),
    ("softmax", "target: best impl >= 1.0x torch.compile"),
    ("aa", "target: 0 cases faster or slower"),
    ("roofline", "target: roofline PNG of square, softmax and matmul"),
    ("check", "target: every impl PASSES"),
]


def _script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, str(SCRIPT), *args], capture_output=True, text=True, timeout=120,
                          cwd=ROOT, env={**os.environ, **(env or {})})


@pytest.fixture(scope="module")
def plan() -> str:
    done = _script("--plan")
    assert done.returncode == 0, done.stderr
    return done.stdout


def _section(plan: str, piece: str) -> str:
    """The plan's lines of one piece: its header line and the indented lines under it."""
    lines = plan.splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith(f"{piece} ("))
    end = next((i for i in range(start + 1, len(lines)) if not lines[i].startswith("  ")), len(lines))
    return "\n".join(lines[start:end])


def test_the_plan_lists_every_target_under_its_piece(plan):
    for piece, words in TARGETS:
        assert words in _section(plan, piece), (piece, words)
    assert plan.count("  target: ") == len(TARGETS)  # no target the test does not know of
    assert f"pieces in this order: {', '.join(PIECES)}" in plan


def test_the_plan_names_the_sizes_and_anchors(plan):
    assert "4096x4096, 14336x4096, 4096x14336" in _section(plan, "lowbit")
    assert "(4, 16, 4096, 128), (1, 16, 16384, 128), full and causal" in _section(plan, "attention")
    assert "(4096, 11008, 4096), (4096, 4096, 11008), (1024, 16384, 16384)" in _section(plan, "linear24")
    assert "float32 4096x4096x4096" in _section(plan, "matmul")
    assert "anchor: cuBLAS fp32 (eager, TF32 off)" in _section(plan, "matmul")
    assert "1024x65536 float32 and bfloat16" in _section(plan, "softmax")
    assert "eager_int4pack_mm" in _section(plan, "lowbit")


def test_the_plan_lists_the_impls_the_ops_have_now(plan):
    # Read from the registries: an impl added later (cuda_gemv, triton_flash_ws, ...) shows without a change here.
    kernels = [n for n in lowbit.linear_w4.impls if n.startswith(("triton_", "cuda_"))]
    dispatchers = ("cuda_auto", "triton_auto")
    assert (f"linear_w4 impls: {', '.join(n for n in kernels if n not in dispatchers)}, "
            f"{', '.join(dispatchers)}") in plan
    flash = [n for n in attention.attention.impls if n.startswith("triton_flash")]
    assert f"impls: forward {', '.join(flash)};" in plan
    assert ", ".join(n for n in sparse24.linear24.impls if n.startswith("cusparselt")) in plan
    assert ", ".join(n for n in softmax.softmax.impls if n.startswith(("triton_", "cuda_"))) in plan


def test_only_keeps_the_order_and_refuses_an_unknown_piece():
    done = _script("--plan", "--only", "check,matmul")
    assert done.returncode == 0, done.stderr
    assert "pieces in this order: matmul, check" in done.stdout
    assert done.stdout.startswith("matmul (4, ~") and "\ncheck (8, ~" in done.stdout
    assert "lowbit (" not in done.stdout  # the plan of the pieces asked for only
    refused = _script("--only", "matmul,flash")
    assert refused.returncode == 2
    assert "no piece named flash; pieces: " + ", ".join(PIECES) in refused.stderr


@pytest.mark.skipif(torch.cuda.is_available(), reason="with a GPU the script would start its run")
def test_without_a_gpu_it_stops_at_once_and_says_why(tmp_path):
    began = time.monotonic()
    done = _script("--limit", "30", env={"OUT": str(tmp_path)})
    assert done.returncode == 2
    assert "gpu-frontier needs an NVIDIA GPU (torch sees none)" in done.stderr
    assert "--plan" in done.stderr
    assert time.monotonic() - began < 30
    assert not list(tmp_path.iterdir())  # nothing written


@pytest.fixture(scope="module")
def script() -> dict:
    """The script's names, loaded without running it (its module level imports only the standard library)."""
    return runpy.run_path(str(SCRIPT), run_name="gpu_frontier")


@pytest.mark.parametrize(("unit", "ratio", "want", "verdict"), [
    ("x", 2.6, 2.5, "met"),
    ("x", 2.0, 2.5, "MISSED by 20%"),  # a speedup short of its target by a fifth
    ("x", 0.9, 0.9, "met"),  # the threshold itself meets
    ("%", 0.72, 0.90, "MISSED by 20%"),
    ("cases", 0.0, 0.0, "met"),
    ("cases", 3.0, 0.0, "MISSED by 3"),  # a count at most want: more is worse
    ("done", 0.0, 1.0, "MISSED by 100%"),
    ("x", None, 1.0, "no value"),  # a value or anchor that failed to time is neither met nor missed
])
def test_verdicts_read_each_unit_the_right_way(script, unit, ratio, want, verdict):
    target = script["Target"](1, "t", "v", None, "a", None, ratio, want, unit=unit)
    assert target.verdict() == verdict
    assert target.met is (None if ratio is None else verdict == "met")


def test_the_ratio_is_anchor_time_over_value_time(script):
    assert script["ratio"](3.0, 1.5) == 2.0  # the value twice as fast as its anchor
    assert script["ratio"](None, 1.0) is None and script["ratio"](1.0, None) is None
    assert script["fastest"]({"a": 2.0, "b": None, "c": 1.0}) == ("c", 1.0)
    assert script["fastest"]({"a": None}) == (None, None)


def test_a_wrong_gemv_is_named_and_not_timed() -> None:
    # The low-bit piece times each kernel only after its output matched the reference on the same inputs.
    script = runpy.run_path(str(SCRIPT), run_name="gpu_frontier")
    op = lowbit.linear_w4
    args = tuple(op.make_inputs((1, 64, 256), torch.bfloat16, torch.device("cpu"), 0))
    check = script["reference_check"](op, args)
    assert check(op.impls["eager_dequant"].fn(*args)) == ""
    assert "64 of 64 elements differ" in check(torch.zeros(1, 64, dtype=torch.bfloat16))
    assert "output shape (2, 64), expected (1, 64)" in check(torch.zeros(2, 64))


def test_the_check_piece_runs_ops_in_processes_of_their_own_and_says_what_did_not_run(script, tmp_path):
    check = script["check_in_processes"]
    found = check({"square": 1, "no_such_op": 1, "softmax": 50}, "cpu", 2, lambda: 10.0, tmp_path,
                  impls=["eager"], dtypes=["float32"])
    rows = found["square"]["rows"]
    assert rows and {status for _, _, _, status, _, _ in rows} == {"PASSED"}, rows
    assert "strict mode" in found["square"]["path"] and found["square"]["interrupted"] is False
    assert found["no_such_op"].startswith("failed: exit"), found  # its log says why
    assert "no_such_op" in (tmp_path / "check-no_such_op.log").read_text()
    assert found["softmax"] == "not run"  # 50 s of estimate, 10 left


def test_the_check_piece_kills_what_runs_past_its_deadline(script, tmp_path):
    clock = iter([10.0])  # room to start one op, then none: the running check is killed, not waited for
    began = time.monotonic()
    found = script["check_in_processes"]({"square": 1}, "cpu", 1, lambda: next(clock, -1.0), tmp_path)
    assert found == {"square": "cut"}
    assert time.monotonic() - began < 20


def test_a_check_of_a_few_ops_is_estimated_by_their_own_costs(script, tmp_path):
    # --check-ops linear24 must not be refused for a limit that fits the one op (the piece's 240 s is for all ten).
    run = script["Run"](limit=100.0, budget=0.3, out=tmp_path, aa_dtypes=[])
    check, matmul = (next(p for p in script["PIECES"] if p.name == name) for name in ("check", "matmul"))
    assert run.estimate(check) == check.seconds and run.estimate(matmul) == matmul.seconds
    run.check_ops = {"linear24": 25.0}
    assert run.estimate(check) == 25.0 + script["CHECK_STOP_S"]
