import math

import pytest
import torch

from kernelkit import verify
from kernelkit.results import Status
from kernelkit.spec import TOLERANCES


def test_identical_tensors_pass():
    x = torch.randn(37, 5, dtype=torch.float64)
    c = verify.compare(x, x, *TOLERANCES[torch.float32])
    assert c.ok and c.n_mismatched == 0 and c.max_abs_err == 0.0 and c.n_total == 185


def test_mismatch_report_names_indices_and_values():
    ref = torch.zeros(4, 6, dtype=torch.float64)
    out = ref.clone()
    out[1, 2] = 0.5
    out[3, 5] = -2.0
    c = verify.compare(out, ref, 1e-5, 1e-6)
    assert not c.ok and c.n_mismatched == 2
    assert [m.index for m in c.mismatches] == [(1, 2), (3, 5)]
    assert c.mismatches[1].got == -2.0 and c.mismatches[1].expected == 0.0
    assert c.max_abs_err == 2.0
    text = c.describe()
    assert "2 of 24 elements differ" in text and "[1, 2]: got 0.5, expected 0" in text


def test_at_most_five_mismatches_shown():
    ref = torch.zeros(100, dtype=torch.float64)
    c = verify.compare(ref + 1, ref, 0.0, 0.0)
    assert c.n_mismatched == 100 and len(c.mismatches) == 5


def test_nan_must_meet_nan_and_inf_the_same_inf():
    ref = torch.tensor([math.nan, math.inf, -math.inf, 1.0], dtype=torch.float64)
    assert verify.compare(ref.clone(), ref, 0, 0).ok
    nan_for_value = torch.tensor([math.nan, math.inf, -math.inf, math.nan], dtype=torch.float64)
    c = verify.compare(nan_for_value, ref, 1.0, 1.0)
    assert not c.ok and c.n_mismatched == 1 and c.max_abs_err == math.inf
    wrong_inf = torch.tensor([math.nan, -math.inf, -math.inf, 1.0], dtype=torch.float64)
    assert verify.compare(wrong_inf, ref, 1.0, 1.0).n_mismatched == 1
    value_for_nan = torch.tensor([0.0, math.inf, -math.inf, 1.0], dtype=torch.float64)
    assert not verify.compare(value_for_nan, ref, 1.0, 1.0).ok


def test_reference_error_widens_tolerance_to_twice_its_size():
    ref = torch.full((10,), 1.0, dtype=torch.float64)
    lo = ref + 0.01  # the low-precision reference is off by 0.01/(1+1) = 0.005 in the mixed metric
    eps = verify.reference_error(lo, ref)
    assert eps == pytest.approx(0.005)
    # Allowed: 2 * 0.005 * (1 + 1) = 0.02 above the floor.
    assert verify.compare(ref + 0.019, ref, 0, 0, eps).ok
    assert not verify.compare(ref + 0.021, ref, 0, 0, eps).ok


def test_reference_error_ignores_non_finite_pairs():
    ref = torch.tensor([1.0, 2.0], dtype=torch.float64)
    lo = torch.tensor([math.inf, 2.0])
    assert verify.reference_error(lo, ref) == 0.0


def test_bf16_rounding_of_the_impl_passes_but_a_real_error_fails():
    x = torch.randn(1823, 781, generator=torch.Generator().manual_seed(0)).bfloat16()
    ref = x.double() ** 2  # the reference sees the same bf16 inputs as the impl
    lo = x * x
    atol, rtol = TOLERANCES[torch.bfloat16]
    good = (x.float() * x.float()).bfloat16()  # computed in fp32, rounded once: at least as accurate as lo
    assert verify.compare_outputs([good], [ref], [lo], atol, rtol)[0].ok
    bad = good.clone()
    bad[100, 7] += 0.1 + 0.1 * bad[100, 7].abs()
    c = verify.compare_outputs([bad], [ref], [lo], atol, rtol)[0]
    assert not c.ok and c.mismatches[0].index == (100, 7)


def test_structure_checks_count_kind_shape_dtype_device():
    ref = torch.zeros(3, 4)
    assert verify.check_structure([ref], [ref]) is None
    assert verify.check_structure([ref, ref], [ref]).status is Status.INCORRECT_SHAPE
    assert verify.check_structure([3.0], [ref]).status is Status.INCORRECT_SHAPE
    v = verify.check_structure([ref.t()], [ref])
    assert v.status is Status.INCORRECT_SHAPE and "(4, 3)" in v.message and "(3, 4)" in v.message
    v = verify.check_structure([ref.double()], [ref])
    assert v.status is Status.INCORRECT_DTYPE and "torch.float64" in v.message
    v = verify.check_structure([ref.to("meta")], [ref])
    assert v.status is Status.INCORRECT_DTYPE and "meta" in v.message


def test_mutation_detection_is_bitwise_and_nan_aware():
    x = torch.tensor([1.0, math.nan, 3.0])
    snap = verify.clone_inputs([x, 5])
    assert verify.mutated_inputs([x, 5], snap) == []
    x[0] = 1.0000001
    assert verify.mutated_inputs([x, 5], snap) == [0]
    y = torch.tensor([1.0, math.nan])
    snap = verify.clone_inputs([y])
    y[1] = 0.0
    assert verify.mutated_inputs([y], snap) == [0]


def test_weak_probes_flag_trivial_outputs():
    zeros = torch.zeros(8, 8)
    ref = zeros.double()
    atol, rtol = TOLERANCES[torch.float32]
    assert "all zeros" in verify.weak_probes([zeros], [ref], [zeros], atol, rtol)
    x = torch.randn(8, 8)
    ref = x.double() ** 2
    assert verify.weak_probes([x], [ref], [x * x], atol, rtol) == []
    # relu of non-negative inputs is the input itself: echoing it passes.
    pos = x.abs()
    assert "the input echoed" in verify.weak_probes([pos], [pos.double()], [pos], atol, rtol)
    const = torch.full((4, 4), 3.0)
    assert "a constant" in verify.weak_probes([x], [const.double()], [const], atol, rtol)


def test_empty_output_is_weak():
    empty = torch.empty(0, 16)
    assert verify.weak_probes([empty], [empty.double()], [empty], 1e-5, 1e-6)


def test_compare_in_chunks_gives_what_one_pass_gives(monkeypatch: pytest.MonkeyPatch) -> None:
    # Outputs are compared CHUNK_ELEMENTS at a time (a huge output's float64 copies would not fit); the counts, the
    # worst errors, the NaN rule and the first mismatches' indices must not depend on where the chunks fall.
    gen = torch.Generator().manual_seed(3)
    ref = torch.randn(5, 9, generator=gen, dtype=torch.float64)
    out = ref.float().clone()
    out[0, 2] += 1.0
    out[3, 8] = float("nan")
    out[4, 0] -= 2.0
    whole = verify.compare(out, ref, 1e-5, 1e-5)
    monkeypatch.setattr(verify, "CPU_CHUNK_ELEMENTS", 7)  # chunks 0-6 and 28-34 all finite: the fast path
    chunked = verify.compare(out, ref, 1e-5, 1e-5)
    assert (chunked.n_mismatched, chunked.max_abs_err, chunked.max_rel_err, chunked.n_total) == (
        whole.n_mismatched, whole.max_abs_err, whole.max_rel_err, whole.n_total)
    assert [m.index for m in chunked.mismatches] == [m.index for m in whole.mismatches]
    assert chunked.n_mismatched == 3 and chunked.max_abs_err == float("inf")
    assert [m.index for m in chunked.mismatches] == [(0, 2), (3, 8), (4, 0)]
    small = verify.reference_error(out, ref)
    monkeypatch.setattr(verify, "CPU_CHUNK_ELEMENTS", 1 << 24)
    assert small == verify.reference_error(out, ref) == pytest.approx(2.0 / (1 + abs(float(ref[4, 0]))))


@pytest.mark.parametrize("chunk", [1, 4, 1 << 18])
def test_passes_agrees_with_compare_and_a_number_stands_for_a_filled_output(
        monkeypatch: pytest.MonkeyPatch, chunk: int) -> None:
    # passes() stops at the first failing chunk and compare() takes a fast path on all-finite chunks: both must
    # give the verdict the careful rule gives, with NaN meeting NaN and an inf meeting the same inf.
    monkeypatch.setattr(verify, "CPU_CHUNK_ELEMENTS", chunk)
    ref = torch.tensor([0.0, 1.0, -2.0, float("nan"), float("inf"), 3.0], dtype=torch.float64)
    cases = {
        "equal": ref.float(),
        "nan where nan, inf where inf": ref.float(),
        "off by one": ref.float() + torch.tensor([0, 0, 0, 0, 0, 1.0]),
        "nan where a number": torch.tensor([float("nan"), 1, -2, float("nan"), float("inf"), 3]),
        "-inf for inf": torch.tensor([0, 1, -2, float("nan"), float("-inf"), 3]),
        "a number for nan": torch.tensor([0, 1, -2, 5, float("inf"), 3]),
    }
    for name, out in cases.items():
        full = verify.compare(out, ref, 1e-5, 1e-5)
        assert verify.passes(out, ref, 1e-5, 1e-5) is full.ok, name
    finite = torch.full((9,), 0.25, dtype=torch.float64)
    assert verify.passes(0.25, finite, 0.0, 0.0) and not verify.passes(0.0, finite, 1e-3, 1e-3)
    as_number = verify.compare(0.0, finite, 1e-3, 1e-3)
    as_tensor = verify.compare(torch.zeros(9), finite, 1e-3, 1e-3)
    assert (as_number.n_mismatched, as_number.max_abs_err, [m.got for m in as_number.mismatches]) == (
        as_tensor.n_mismatched, as_tensor.max_abs_err, [m.got for m in as_tensor.mismatches])
