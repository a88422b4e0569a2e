"""Strict bench's timed calls (jobs/strict_bench.py rotation, runs/strict_bench.py set count): each call's input set
drawn at random when the call before it returned, nothing the impl can read that tells the next one, kept outputs
drawn after their call, and fewer sets only where memory says so."""

from __future__ import annotations

import random
from pathlib import Path

import torch

import kernelkit as kk
from kernelkit.jobs.strict_bench import rotation
from kernelkit.jobs.strict_worker import unpack
from kernelkit.results import Status
from kernelkit.runs import strict_bench

CHEATS = Path(__file__).parent / "cheats"
SETS = 8


def _order(calls: int, sets: int = SETS) -> list[int]:
    seen: list[int] = []
    timed, _ = rotation(lambda i: seen.append(i), [(i,) for i in range(sets)])
    for _ in range(calls):
        timed()
    return seen


def test_timed_calls_draw_every_set_in_no_fixed_order():
    order = _order(800)
    counts = [order.count(i) for i in range(SETS)]
    assert all(60 <= c <= 150 for c in counts), counts  # 100 each expected; a set left out or favoured fails
    for period in range(1, 17):  # not a cycle of any short period (n mod k)
        assert any(order[n] != order[n - period] for n in range(period, len(order))), period


def test_the_order_is_not_the_process_random_state():
    orders = []
    for _ in range(2):
        random.seed(0)
        torch.manual_seed(0)
        orders.append(_order(64))
    assert orders[0] != orders[1]  # equal once in 8^64


def _reachable(value, depth=0):
    """(ints, int sequences) reachable from ``value`` through lists, tuples and dicts: a snooping impl's view."""
    if depth > 4 or isinstance(value, bool):
        return [], []
    if isinstance(value, int):
        return [value], []
    if isinstance(value, dict):
        value = [*value.keys(), *value.values()]
    if not isinstance(value, (list, tuple)):
        return [], []
    ints, seqs = [], []
    if len(value) > 1 and all(isinstance(v, int) for v in value):
        seqs.append(value)
    for v in value:
        more_ints, more_seqs = _reachable(v, depth + 1)
        ints += more_ints
        seqs += more_seqs
    return ints, seqs


def _guesses(roots) -> list[int]:
    """Guesses of the next set: every reachable int, and every sequence read at every int and the one after it."""
    ints, seqs = _reachable(roots)
    found = [v % SETS for v in ints]
    for seq in seqs:
        found += [seq[k] % SETS if 0 <= k < len(seq) else -1 for v in ints for k in (v, v + 1)]
    return found


def best_guess_rate(make_rotation, calls: int = 600, settled: int = 200) -> float:
    """How often the best guess an impl can make, reading the timed callable's attributes and closure cells during
    each call, names the next call's set (calls after ``settled``: the kept picks grow until then)."""
    snapshots: list[list[int]] = []
    given: list[int] = []
    holder: dict[str, object] = {}

    def snooping(i):
        timed = holder["timed"]
        cells = [c.cell_contents for c in timed.__closure__ or () if not callable(c.cell_contents)]
        snapshots.append(_guesses([vars(timed), cells]))
        given.append(i)

    timed, _ = make_rotation(snooping, [(i,) for i in range(SETS)])
    holder["timed"] = timed
    for _ in range(calls):
        timed()
    width = min(len(s) for s in snapshots[settled:])
    scored = range(settled, calls - 1)
    return max(sum(snapshots[n][p] == given[n + 1] for n in scored) / len(scored) for p in range(width))


def _precomputed(fn, sets):
    # What the rotation must not be: an order drawn ahead, in a list the impl can read, and a position in it.
    order = [random.randrange(len(sets)) for _ in range(1_000)]
    position = [0]

    def timed():
        fn(*sets[order[position[0]]])
        position[0] += 1

    return timed, None


def test_nothing_the_impl_can_read_off_the_timed_callable_tells_its_next_set():
    # A precomputed order gives some guess a perfect score (checked below, so the probe is known to bite); a draw
    # made after the call, none better than chance (1/8).
    timed, _ = rotation(lambda i: None, [(i,) for i in range(SETS)])
    assert vars(timed) == {}
    assert best_guess_rate(_precomputed) > 0.95
    assert best_guess_rate(rotation) < 0.3


def test_kept_outputs_are_drawn_after_their_call_and_outnumber_the_sets():
    def kept_calls():
        timed, packed = rotation(lambda x: x * 2, [(torch.full((4,), float(i)),) for i in range(SETS)])
        for _ in range(1000):
            timed()
        return packed("cpu")

    first = kept_calls()
    numbers = [n for n, _, _, _ in first]
    assert len(numbers) == SETS + 1 and numbers[-1] == 999  # the last 8 ranges' picks, and the last call
    assert len({n.bit_length() for n in numbers[:-1]}) == SETS  # one pick per power-of-two range
    for _, which, data, _ptrs in first:
        (out,) = unpack(data)
        assert torch.equal(out, torch.full((4,), 2.0 * which))  # each kept with the set it ran on
    assert [n for n, _, _, _ in kept_calls()] != numbers  # drawn, not fixed (equal about once in 10^13)


def test_fewer_sets_only_where_memory_says_so():
    assert strict_bench.set_count(1 << 20, 1 << 40, "cuda") == (SETS, "")
    count, note = strict_bench.set_count(1 << 30, 10 << 30, "cuda")
    assert count == 5 and "5 input sets, not 8" in note and "GPU memory free" in note
    count, note = strict_bench.set_count(1 << 30, 2 << 30, "cpu")
    assert count == strict_bench.MIN_SETS and "host memory" in note


def test_a_strict_bench_short_of_memory_says_how_many_sets_it_drew_from(monkeypatch):
    # The judging process plans the sets: with room for five, five it is, and every result says why.
    monkeypatch.setattr(strict_bench, "free_bytes", lambda device: 10 * strict_bench._set_bytes(_cheat_set(), 1))
    report = kk.bench_op(str(CHEATS / "cheat_ops.py"), device="cpu", impls=["eager_honest"], baselines=False,
                         budget=0.05, strict=True)
    (result,) = report.results
    assert result.status is Status.PASSED, result.message
    assert any("5 input sets, not 8" in w for w in result.warnings), result.warnings


def _cheat_set():
    x = torch.ones(64, 48)
    return (x,), (x.double(),), (x,)
