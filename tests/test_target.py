import pytest
import torch

from kernelkit.errors import BackendUnavailable, LoadError
from kernelkit.target import prepare_case


def test_prepare_case_defaults_to_the_ops_first_cpu_size_and_dtype():
    setup = prepare_case("square", "eager", device="cpu")
    assert setup.size == setup.op.cpu_sizes[0] and setup.dtype == setup.op.dtypes[0]
    assert setup.label == "square/eager/64x48/float32"
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
    from kernelkit.target import pick

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
