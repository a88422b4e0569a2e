"""Opening a target: a built-in op or a user's file, found, imported in a prepared process, turned into cases."""

import os
import textwrap

import pytest
import torch

from kernelkit import target as targets
from kernelkit.errors import BackendUnavailable, LoadError, SpecError
from kernelkit.target import open_target, pick, prepare_case


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


# ---- opening: the process first, then the file -------------------------------------------------------------


def test_open_target_prepares_the_process_before_importing_the_file(tmp_path, monkeypatch):
    monkeypatch.setenv("TRITON_INTERPRET", "0")
    monkeypatch.setenv("NUMBA_ENABLE_CUDASIM", "0")
    path = write(tmp_path, "sees_env.py", """
        import os
        import kernelkit as kk

        SEEN = os.environ["TRITON_INTERPRET"], os.environ["NUMBA_ENABLE_CUDASIM"]

        @kk.op(sizes=[(4,)])
        def ident(x):
            return x
    """)
    opened = open_target(str(path), "cpu")
    assert (opened.device, opened.source, [o.name for o in opened.ops]) == ("cpu", str(path.resolve()), ["ident"])
    module = next(m for name, m in list(os.sys.modules.items()) if name.startswith("kernelkit_user_sees_env"))
    assert module.SEEN == ("1", "1")  # the interpreter and the simulator were chosen before the file ran


def test_a_builtin_name_opens_that_op_of_a_module_that_defines_several():
    opened = open_target("gelu_backward", "cpu")
    assert [o.name for o in opened.ops] == ["gelu_backward"] and opened.op().name == "gelu_backward"
    assert {"gelu", "gelu_erf"} <= set(opened.defined) and opened.op("gelu").name == "gelu"
    with pytest.raises(LoadError, match="no op 'gelu3'"):
        opened.op("gelu3")


def test_devices_are_checked():
    with pytest.raises(SpecError, match="unknown device 'tpu'"):
        targets.resolve_device("tpu")
    if not torch.cuda.is_available():
        with pytest.raises(SpecError, match="--device cuda asked for"):
            open_target("square", "cuda")


# ---- finding ops ---------------------------------------------------------------------------------------------


def test_builtin_op_resolves_to_its_module():
    assert targets.resolve("square") == "kernelkit.ops.square"
    ops = targets.load("kernelkit.ops.square")
    assert set(ops["square"].impls) >= {"eager", "triton_rowwise", "numba_2d", "cuda_2d"}


def test_unknown_op_and_missing_file_say_what_exists(tmp_path):
    with pytest.raises(LoadError, match=r"unknown op 'sqaure' \(did you mean 'square'\?\); built-in ops: square"):
        targets.resolve("sqaure")
    with pytest.raises(LoadError, match="no such file"):
        targets.resolve(str(tmp_path / "nope.py"))


def test_user_file_ops_are_found_and_can_import_their_neighbours(tmp_path):
    write(tmp_path, "helper_mod.py", "FACTOR = 3\n")
    path = write(tmp_path, "my_ops.py", """
        import kernelkit as kk
        from helper_mod import FACTOR

        @kk.op(sizes=[(4, 4)])
        def triple(x):
            return FACTOR * x

        @triple.impl("eager")
        def triple_eager(x):
            return x * FACTOR
    """)
    opened = open_target(str(path), "cpu")
    assert list(opened.defined) == ["triple"] and list(opened.op().impls) == ["eager"]


def test_syntax_error_in_user_file_names_file_and_line(tmp_path):
    path = write(tmp_path, "broken.py", "import torch\n\ndef f(:\n    pass\n")
    with pytest.raises(LoadError, match=r"broken.py:3"):
        open_target(str(path), "cpu")


def test_import_error_in_user_file_is_a_load_error(tmp_path):
    path = write(tmp_path, "needs.py", "import torch\nimport not_a_real_module_xyz\n")
    with pytest.raises(LoadError, match=r"line 2.*not_a_real_module_xyz"):
        targets.load(targets.resolve(str(path)))


def test_file_without_ops_is_a_load_error(tmp_path):
    path = write(tmp_path, "empty_ops.py", "X = 1\n")
    with pytest.raises(LoadError, match="defines no op"):
        targets.load(targets.resolve(str(path)))


def test_cases_cover_impls_sizes_dtypes_seeds_and_reject_unknown_impls():
    source = "kernelkit.ops.square"
    ops = list(targets.load(source).values())
    cases = targets.make_cases(source, ops, "cpu", impls=["eager"], seeds=2)
    op = ops[0]
    assert len(cases) == len(op.cpu_sizes) * len(op.dtypes) * 2
    assert {c.seed for c in cases} == {0, 1} and {c.impl for c in cases} == {"eager"}
    gpu = targets.make_cases(source, ops, "cuda", impls=["eager"], sizes=[(5, 5)], dtypes=[torch.float16])
    assert [(c.size, c.dtype) for c in gpu] == [((5, 5), "float16")]
    with pytest.raises(LoadError, match=r"unknown impl .fast.; impls here: cuda_2d, .*eager"):
        targets.make_cases(source, ops, "cpu", impls=["fast"])
    with pytest.raises(SpecError, match="at least 1"):
        targets.make_cases(source, ops, "cpu", seeds=0)


# ---- one case, ready to call here ----------------------------------------------------------------------------


def test_prepare_case_defaults_to_the_ops_first_cpu_size_and_dtype():
    setup = prepare_case("square", "eager", device="cpu")
    assert setup.size == setup.op.cpu_sizes[0] and setup.dtype == setup.op.dtypes[0]
    assert setup.label == "square/eager/64x48/float32" and setup.source == "kernelkit.ops.square"
    torch.testing.assert_close(setup.call(), setup.inputs[0] ** 2)


def test_prepare_case_takes_size_dtype_and_reports_bad_impls():
    setup = prepare_case("square", "eager", device="cpu", size=(3, 5), dtype=torch.float16, seed=4)
    assert setup.inputs[0].shape == (3, 5) and setup.inputs[0].dtype == torch.float16
    with pytest.raises(LoadError, match="has no impl 'fast'; its impls: eager"):
        prepare_case("square", "fast", device="cpu")


@pytest.mark.skipif(torch.cuda.is_available(), reason="checks the no-GPU path")
def test_prepare_case_builds_then_says_why_it_cannot_run():
    with pytest.raises(BackendUnavailable, match="no GPU"):
        prepare_case("square", "cuda_2d", device="cpu")


def test_pick_defaults_to_the_first_dtype_the_impl_supports_and_reads_strings():
    import kernelkit as kk

    @kk.op(sizes=[(8, 4)], dtypes=[torch.bfloat16, torch.float32])
    def twice(x):
        return 2 * x

    twice.impl("eager_fp32", dtypes=[torch.float32])(lambda x: 2 * x)
    impl, size, dtype = pick(twice, "eager_fp32", None, None, "cpu")
    assert (impl.name, size, dtype) == ("eager_fp32", (8, 4), torch.float32)
    assert pick(twice, "eager_fp32", "3x5", "bf16", "cuda")[1:] == ((3, 5), torch.bfloat16)
    assert pick(twice, "eager_fp32", (), None, "cpu")[1] == ()  # a 0-d size is a size, not "no size"
    with pytest.raises(LoadError, match="its impls: eager_fp32, compile"):
        pick(twice, "nope", None, None, "cpu")


# ---- an Op as a target ----------------------------------------------------------------------------------------


def test_an_op_is_checked_from_the_file_that_defines_it_and_a_built_in_op_by_its_name(tmp_path):
    import importlib.util

    import kernelkit as kk
    from kernelkit.ops import softmax

    path = write(tmp_path, "user_op.py", """
        import torch
        import kernelkit as kk

        @kk.op(sizes=[(8, 8)], cpu_sizes=[(8, 8)], dtypes=[torch.float32])
        def twice(x):
            return x + x

        @twice.impl("eager_mul")
        def mul(x):
            return x * 2
    """)
    spec = importlib.util.spec_from_file_location("user_op", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)  # as the user's own script has it: an Op object, defined in that file
    assert targets.target_text(module.twice) == str(path.resolve())
    assert targets.target_text(softmax.softmax) == "softmax"
    report = kk.check(module.twice, device="cpu", strict=False, isolate=False)
    assert [(r.impl, r.status.value) for r in report.results] == [("eager_mul", "PASSED")]


def test_an_op_made_outside_a_file_or_a_target_of_another_kind_is_refused_with_the_fix():
    namespace: dict = {}
    exec("import torch, kernelkit as kk\n@kk.op(sizes=[(4,)], dtypes=[torch.float32])\ndef cell(x):\n    return x\n",
         namespace)
    with pytest.raises(SpecError, match="not defined in a .py file .* put it in one and pass the file's path"):
        targets.target_text(namespace["cell"])
    with pytest.raises(SpecError, match="not a int"):
        open_target(3)
