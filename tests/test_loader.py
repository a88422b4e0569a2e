import textwrap

import pytest
import torch

from kernelkit import loader
from kernelkit.errors import LoadError, SpecError


def write(tmp_path, name, text):
    path = tmp_path / name
    path.write_text(textwrap.dedent(text))
    return path


def test_builtin_op_resolves_to_its_module():
    assert loader.resolve("square") == "kernelkit.ops.square"
    ops = loader.load("kernelkit.ops.square")
    assert set(ops["square"].impls) >= {"eager", "triton_rowwise", "numba_2d", "cuda_2d"}


def test_unknown_op_and_missing_file_say_what_exists(tmp_path):
    with pytest.raises(LoadError, match="unknown op 'sqaure'; built-in ops: square"):
        loader.resolve("sqaure")
    with pytest.raises(LoadError, match="no such file"):
        loader.resolve(str(tmp_path / "nope.py"))


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
    source = loader.resolve(str(path))
    ops = loader.load(source)
    assert list(ops) == ["triple"] and list(ops["triple"].impls) == ["eager"]


def test_syntax_error_in_user_file_names_file_and_line(tmp_path):
    path = write(tmp_path, "broken.py", "import torch\n\ndef f(:\n    pass\n")
    with pytest.raises(LoadError, match=r"broken.py:3"):
        loader.load(loader.resolve(str(path)))


def test_import_error_in_user_file_is_a_load_error(tmp_path):
    path = write(tmp_path, "needs.py", "import torch\nimport not_a_real_module_xyz\n")
    with pytest.raises(LoadError, match=r"line 2.*not_a_real_module_xyz"):
        loader.load(loader.resolve(str(path)))


def test_file_without_ops_is_a_load_error(tmp_path):
    path = write(tmp_path, "empty_ops.py", "X = 1\n")
    with pytest.raises(LoadError, match="defines no op"):
        loader.load(loader.resolve(str(path)))


def test_cases_cover_impls_sizes_dtypes_seeds_and_reject_unknown_impls():
    source = "kernelkit.ops.square"
    ops = list(loader.load(source).values())
    cases = loader.make_cases(source, ops, "cpu", impls=["eager"], seeds=2)
    op = ops[0]
    assert len(cases) == len(op.cpu_sizes) * len(op.dtypes) * 2
    assert {c.seed for c in cases} == {0, 1} and {c.impl for c in cases} == {"eager"}
    gpu = loader.make_cases(source, ops, "cuda", impls=["eager"], sizes=[(5, 5)], dtypes=[torch.float16])
    assert [(c.size, c.dtype) for c in gpu] == [((5, 5), "float16")]
    with pytest.raises(LoadError, match=r"unknown impl .fast.; impls here: cuda_2d, .*eager"):
        loader.make_cases(source, ops, "cpu", impls=["fast"])
    with pytest.raises(SpecError, match="at least 1"):
        loader.make_cases(source, ops, "cpu", seeds=0)
