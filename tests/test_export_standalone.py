"""Exports that run without kernelkit: the KernelBench pair and the GPU MODE task a `kernelkit export` writes are run
in a fresh interpreter where `import kernelkit` fails, the way each format's evaluator loads them (KernelBench: the
problem exec'd, the solution exec'd beside it or imported from a file for Triton, trials seeded as its eval does;
GPU MODE: each spec line parsed as eval.py parses it, generate_input, custom_kernel on a clone,
check_implementation). Triton impls run in Triton's interpreter. CPU only; the ops are kernelkit's own and small
ones written here."""

from __future__ import annotations

import ast
import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import pytest
import torch
import yaml
from typer.testing import CliRunner

from kernelkit import formats
from kernelkit.cli import app
from kernelkit.runs.export import exportable_impls
from kernelkit.runs.standalone import NotStandalone
from kernelkit.spec import Op
from kernelkit.target import load, open_target

# The harness, run with `python -I` (no PYTHONPATH, no user site) and every sys.path entry that holds a kernelkit
# package removed. Jobs come as JSON in argv[1]; one result per job goes to stdout as JSON.
HARNESS = r'''
import importlib.util, json, re, sys
from pathlib import Path

sys.path[:] = [p for p in sys.path if not (Path(p or ".") / "kernelkit").is_dir()]
try:
    import kernelkit
except ImportError:
    pass
else:
    raise SystemExit("kernelkit is importable here: the harness proves nothing")
import torch

SPEC = r"\s*([a-zA-Z]+):\s*([a-zA-Z]+|[+-]?[0-9]+)\s*"  # GPU MODE eval.py's test-line grammar


def kernelbench(job):
    context = {}
    exec(compile(Path(job["problem"]).read_text(), "<string>", "exec"), context)  # load_original_model_and_inputs
    source = Path(job["solution"]).read_text()
    if job["triton"]:  # load_custom_model_with_tempfile: @triton.jit needs a file
        spec = importlib.util.spec_from_file_location("temp_module", job["solution"])
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
        model_new = module.ModelNew
    else:  # load_custom_model: exec'd into the problem's context
        exec(compile(source, "<string>", "exec"), context)
        model_new = context["ModelNew"]
    torch.manual_seed(42)
    init = context["get_init_inputs"]()
    model, new = context["Model"](*init), model_new(*init)
    torch.manual_seed(42)
    seeds = [torch.randint(0, 2**32 - 1, (1,)).item() for _ in range(job.get("trials", 3))]
    found = []
    with torch.no_grad():
        for seed in seeds:
            torch.manual_seed(seed)
            inputs = context["get_inputs"]()
            want, got = model(*inputs), new(*inputs)
            same = want.shape == got.shape and bool(torch.allclose(want, got, atol=1e-4, rtol=1e-4))
            found.append([list(want.shape), same])
    return found


def gpumode(job):
    sys.path.insert(0, job["task"])
    for name in ("reference", "submission", "utils", "task"):
        sys.modules.pop(name, None)
    from reference import check_implementation, generate_input
    from submission import custom_kernel
    from utils import clear_l2_cache, set_seed
    from task import TestSpec
    set_seed(42)
    found = []
    for line in job["lines"]:
        args = {}
        for part in line.split(";"):
            assert re.fullmatch(SPEC, part), f"eval.py would refuse test line {line!r}"
            key, value = re.match(SPEC, part).groups()
            args[key] = int(value)
        data = generate_input(**args)
        clear_l2_cache()
        output = custom_kernel(tuple(x.clone() for x in data))
        good, message = check_implementation(data, output)
        found.append([bool(good), message])
    sys.path.remove(job["task"])
    return found


print(json.dumps([globals()[job["kind"]](job) for job in json.loads(sys.argv[1])]))
'''


def run_hidden(tmp_path: Path, jobs: list[dict[str, Any]], interpret: bool = False) -> list[Any]:
    """Run the harness on ``jobs`` in a fresh interpreter that cannot import kernelkit."""
    harness = tmp_path / "harness.py"
    harness.write_text(HARNESS)
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTHON", "TRITON_INTERPRET"))}
    if interpret:
        env["TRITON_INTERPRET"] = "1"
    done = subprocess.run([sys.executable, "-I", str(harness), json.dumps(jobs)], capture_output=True, text=True,
                          env=env, cwd=tmp_path, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout.splitlines()[-1])


def spec_lines(path: Path) -> list[str]:
    """task.yml's tests as the runner writes them for eval.py: 'key: value; key: value'."""
    spec = yaml.safe_load((path / "task.yml").read_text())
    return ["; ".join(f"{k}: {v}" for k, v in test.items()) for test in spec["tests"] + spec["benchmarks"]]


def no_kernelkit_import(path: Path) -> None:
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            assert not any(a.name.startswith("kernelkit") for a in node.names), path
        elif isinstance(node, ast.ImportFrom):
            assert not (node.module or "").startswith("kernelkit"), path


@pytest.fixture
def square(cpu_process: None) -> Op:
    return load("kernelkit.ops.square")["square"]


def test_a_torch_impl_runs_as_each_evaluator_loads_it_and_a_wrong_one_fails(tmp_path: Path, square: Op):
    problem = formats.export_problem(square, "kernelbench", tmp_path / "square_problem.py", sizes=[(33, 17)])
    solution = formats.export_submission(square, "eager", "kernelbench", tmp_path / "square_solution.py")
    task = formats.export_problem(square, "gpumode", tmp_path / "square_py", sizes=[(33, 17), (1, 5), (7,)])
    formats.export_submission(square, "eager", "gpumode", task / "submission.py")
    for path in (problem, solution, task / "reference.py", task / "submission.py"):
        no_kernelkit_import(path)
    # Off by 1e-3 everywhere: KernelBench's allclose at 1e-4 and the task's check must both refuse it.
    wrong_solution = tmp_path / "wrong_solution.py"
    wrong_solution.write_text(solution.read_text() + "\n\nModelNew.forward = lambda self, x: x * x + 1e-3\n")
    wrong_task = tmp_path / "wrong_py"
    wrong_task.mkdir()
    for name in ("task.yml", "task.py", "utils.py", "reference.py"):
        (wrong_task / name).write_text((task / name).read_text())
    (wrong_task / "submission.py").write_text("def custom_kernel(data):\n    return data[0] * data[0] + 1e-3\n")
    lines = spec_lines(task)
    assert lines[:3] == ["m: 33; n: 17; seed: 1000", "m: 1; n: 5; seed: 1001", "size: 7; seed: 1002"]
    kb, gm, kb_wrong, gm_wrong = run_hidden(tmp_path, [
        {"kind": "kernelbench", "problem": str(problem), "solution": str(solution), "triton": False},
        {"kind": "gpumode", "task": str(task), "lines": lines},
        {"kind": "kernelbench", "problem": str(problem), "solution": str(wrong_solution), "triton": False},
        {"kind": "gpumode", "task": str(wrong_task), "lines": lines[:1]},
    ])
    assert kb == [[[33, 17], True]] * 3
    assert gm == [[True, ""]] * len(lines)
    assert kb_wrong == [[[33, 17], False]] * 3
    [[good, message]] = gm_wrong
    assert not good and "561 of 561 elements off" in message


def test_triton_impls_run_in_the_interpreter_without_kernelkit(tmp_path: Path, cpu_process: None):
    jobs = []
    for op_name, impl, size in (("square", "triton_flat", (33, 17)), ("softmax", "triton_rowwise", (7, 33)),
                                ("matmul", "triton_blocked", (33, 29, 17))):
        op = open_target(op_name, "cpu").op(op_name)
        problem = formats.export_problem(op, "kernelbench", tmp_path / f"{op_name}_problem.py", sizes=[size])
        solution = formats.export_submission(op, impl, "kernelbench", tmp_path / f"{op_name}_{impl}.py")
        no_kernelkit_import(solution)
        jobs.append({"kind": "kernelbench", "problem": str(problem), "solution": str(solution), "triton": True,
                     "trials": 2})
    softmax = open_target("softmax", "cpu").op("softmax")
    task = formats.export_problem(softmax, "gpumode", tmp_path / "softmax_py", sizes=[(7, 33), (2, 3, 65)])
    formats.export_submission(softmax, "triton_online", "gpumode", task / "submission.py")
    jobs.append({"kind": "gpumode", "task": str(task), "lines": spec_lines(task)[:2]})
    *kernelbench, gpumode = run_hidden(tmp_path, jobs, interpret=True)
    assert kernelbench == [[[[33, 17], True]] * 2, [[[7, 33], True]] * 2, [[[33, 29], True]] * 2]
    assert gpumode == [[True, ""], [True, ""]]


def test_a_load_inline_impl_carries_its_cuda_source(tmp_path: Path, square: Op, monkeypatch: pytest.MonkeyPatch):
    solution = formats.export_submission(square, "cuda_inline_vec4", "kernelbench", tmp_path / "inline_solution.py")
    no_kernelkit_import(solution)
    built: list[dict[str, Any]] = []

    class Extension:  # what load_inline returns, as far as the impl uses it (CPU torch cannot build CUDA)
        @staticmethod
        def square_vec4(x: torch.Tensor) -> torch.Tensor:
            return x * x

    def load_inline(**kwargs: Any) -> Extension:
        built.append(kwargs)
        return Extension()

    monkeypatch.setattr("torch.utils.cpp_extension.load_inline", load_inline)
    spec = importlib.util.spec_from_file_location("inline_solution", solution)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # load_inline runs at import, as GPU MODE's compile step expects
    cu = Path(sys.modules["kernelkit.ops.square"].__file__).parent / "inline.cu"  # type: ignore[arg-type]
    [call] = built
    assert call["cuda_sources"] == [cu.read_text()] and call["functions"] == ["square_vec4"]
    assert call["cpp_sources"] == ["torch::Tensor square_vec4(torch::Tensor x);"] and call["name"] == "square_vec4_ext"
    x = torch.randn(5, 3)
    assert torch.equal(module.ModelNew()(x), x * x)


def test_an_impl_that_needs_kernelkit_is_refused_with_the_ones_that_export(tmp_path: Path, square: Op):
    with pytest.raises(NotStandalone, match=r"impl 'cuda_vec4' of op 'square' cannot run without kernelkit: it "
                                            r"launches CUDA kernel 'square_vec4_f32_kernel'.*NVRTC.*impls of "
                                            r"'square' that export: eager, triton_rowwise, triton_flat, "
                                            r"cuda_inline_vec4, compile"):
        formats.export_submission(square, "cuda_vec4", "kernelbench", tmp_path / "x.py")
    with pytest.raises(NotStandalone, match="Numba kernel launched through kernelkit"):
        formats.export_submission(square, "numba_flat", "gpumode", tmp_path / "x.py")
    assert not (tmp_path / "x.py").exists()
    why = exportable_impls(square)
    assert [name for name, reason in why.items() if not reason] == ["eager", "triton_rowwise", "triton_flat",
                                                                    "cuda_inline_vec4", "compile"]
    # The command line: exit 2, the reason, and no file (nor half of a pair).
    out = CliRunner().invoke(app, ["export", "square", "--impl", "cuda_2d", "--format", "kernelbench", "-o",
                                   str(tmp_path / "y.py"), "--problem", str(tmp_path / "p.py")])
    assert out.exit_code == 2 and "cannot run without kernelkit" in out.output
    assert not (tmp_path / "y.py").exists() and not (tmp_path / "p.py").exists()


USER_OPS = '''
import torch
import kernelkit as kk
import helpers
from helpers import offset as shift

offset = 0.5  # the same name as the helper's function: one of the two must be renamed in an export


@kk.op(sizes=[(64, 48)], cpu_sizes=[(6, 5)], shapes=lambda M, N: ((M, N), (N,)))
def scaled_add(x, w):
    return x * helpers.SCALE + w + offset


def _register(target, twice):
    @target.impl("eager_closure")
    def eager_closure(x, w):
        """Made in a function: its captured values are written out."""
        out = x * (2 * helpers.SCALE / 2 if twice else helpers.SCALE)
        return shift(out, w) + offset

    @target.impl("eager_kernelkit")
    def eager_kernelkit(x, w):
        from kernelkit.spec import seeded_normal
        return x * helpers.SCALE + w + offset + 0 * seeded_normal(x.shape, x.dtype, x.device, 0)


_register(scaled_add, True)
'''

HELPERS = '''
SCALE = 3.0


def offset(x, w):
    return x + w
'''


def test_user_code_is_followed_renamed_and_closed_over(tmp_path: Path, cpu_process: None):
    (tmp_path / "helpers.py").write_text(textwrap.dedent(HELPERS))
    (tmp_path / "user_ops.py").write_text(textwrap.dedent(USER_OPS))
    op = load(str(tmp_path / "user_ops.py"))["scaled_add"]
    out = tmp_path / "out"
    problem = formats.export_problem(op, "kernelbench", out / "problem.py")
    solution = formats.export_submission(op, "eager_closure", "kernelbench", out / "solution.py")
    text = solution.read_text()
    assert "twice = True" in text and "offset_2" in text and "SCALE = 3.0" in text
    assert "SIZE = (64, 48)" in problem.read_text()  # the GPU size, not the CPU one
    [kb] = run_hidden(out, [{"kind": "kernelbench", "problem": str(problem), "solution": str(solution),
                             "triton": False, "trials": 2}])
    assert kb == [[[64, 48], True]] * 2
    with pytest.raises(NotStandalone, match=r"it imports kernelkit.spec at run time \(line \d+ of kernelkit_user"):
        formats.export_submission(op, "eager_kernelkit", "gpumode", out / "x.py")


def test_problems_get_the_ops_gpu_sizes_on_any_machine(tmp_path: Path, square: Op):
    problem = formats.export_problem(square, "kernelbench", tmp_path / "p.py")
    assert "SIZE = (4096, 4096)" in problem.read_text() and "DTYPE = torch.float32" in problem.read_text()
    task = formats.export_problem(square, "gpumode", tmp_path / "t", dtype=torch.bfloat16)
    spec = yaml.safe_load((task / "task.yml").read_text())
    assert [(t["m"], t["n"]) for t in spec["tests"]] == square.sizes
    assert [(t["size"],) for t in spec["benchmarks"]] == square.bench_sizes
    assert {"templates", "config", "description"} <= set(spec) and spec["config"] == {"main": "eval.py"}
    assert "dtype = torch.bfloat16" in (task / "reference.py").read_text()  # read off generate_input by kernelkit
    out = CliRunner().invoke(app, ["export", "square", "--impl", "eager", "--format", "kernelbench", "--device",
                                   "cpu", "-o", str(tmp_path / "s.py"), "--problem", str(tmp_path / "cli.py")])
    assert out.exit_code == 0, out.output
    assert "SIZE = (4096, 4096)" in (tmp_path / "cli.py").read_text()


# A stand-in for GPU MODE's eval.py that runs on a CPU (theirs synchronizes CUDA): the same imports, test-file
# grammar and POPCORN_FD protocol, so that scripts/gpu-formats' runner (files, compile step, cases, pipe) is tested.
FAKE_EVAL = r'''
import os, re, sys
from utils import set_seed, clear_l2_cache
from reference import check_implementation, generate_input

def main():
    out = os.fdopen(int(os.environ["POPCORN_FD"]), "w")
    mode, cases = sys.argv[1], open(sys.argv[2]).read().splitlines()
    set_seed(42)
    from submission import custom_kernel
    passed = True
    out.write(f"{mode}-count: {len(cases)}\n")
    for i, line in enumerate(cases):
        args = {k: int(v) for k, v in (re.fullmatch(r"\s*([a-zA-Z]+):\s*([+-]?[0-9]+)\s*", p).groups()
                                       for p in line.split(";"))}
        data = generate_input(**args)
        good, message = check_implementation(data, custom_kernel(tuple(x.clone() for x in data)))
        passed = passed and good
        if mode == "benchmark":
            out.write(f"benchmark.{i}.mean: 1000.0\n")
    out.write(f"check: {'pass' if passed else 'fail'}\n")
    out.close()
    return 0 if passed else 112

sys.exit(main())
'''


def test_gpu_formats_runs_a_task_the_way_gpu_modes_runner_does(tmp_path: Path, square: Op):
    from importlib.machinery import SourceFileLoader

    path = Path(__file__).parents[1] / "scripts" / "gpu-formats"
    spec = importlib.util.spec_from_loader("gpu_formats", SourceFileLoader("gpu_formats", str(path)))
    assert spec is not None and spec.loader is not None
    script = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(script)
    rows = []
    for name, kernel in (("right", "data[0] * data[0]"), ("wrong", "data[0] * data[0] + 1e-3")):
        task = formats.export_problem(square, "gpumode", tmp_path / name, sizes=[(33, 17), (5,)])
        (task / "submission.py").write_text(f"def custom_kernel(data):\n    return {kernel}\n")
        (task / "eval.py").write_text(FAKE_EVAL)
        rows.append({"impl": f"square/{name}", "format": "gpumode", "task": str(task)})
        script.judge_gpumode(rows[-1])
    right, wrong = rows
    assert right["verdict"] == "accepted" and right["compile_step_exit"] == 0, right
    assert right["detail"] == "test: pass (2 tests), benchmark: pass (2 benchmarks, geomean 1.0 us)"
    assert wrong["verdict"] == "rejected" and wrong["runs"]["test"]["exit_code"] == 112
    assert "benchmark" not in wrong["runs"]
    assert wrong["detail"].startswith("test: fail (2 tests), benchmark: not run")
