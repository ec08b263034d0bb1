"""The fast paths of the scalar mechanisms give exactly what the general paths give.

Plain int / float / Fraction parameters are read through caches, integer scores of the
exponential mechanism in bulk, and a small batch's sampler plan is looked up once per scale.
Each test draws from the same seeded source through the fast path and through a general one
(the same numbers as Decimal, str, numpy scalars or a Budget; scores as Fractions; a reference
implementation of the exact selection) and requires identical outputs and identical losses.
"""

from __future__ import annotations

from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

from support import SeededSource
from veil import Budget, BudgetExhaustedError, InvalidArgumentError
from veil import mechanisms as mech
from veil.accounting.scratch import ScratchLedger
from veil.noise import samplers
from veil.noise._exact import LazyUniform, draw_u32, exp_bounds, exp_neg_bounds, uniform_int

EPSILONS: list[Any] = [
    0.5,
    Fraction(1, 2),
    Decimal("0.5"),
    "0.5",
    "1/2",
    np.float64(0.5),
    Budget(epsilon=0.5),
]
SENSITIVITIES: list[Any] = [1, 1.0, Fraction(1), Decimal(1), "1"]
VALUES: list[Any] = [3, 3.0, Fraction(3), Decimal(3), np.int64(3), np.float64(3.0), np.int32(3)]


def _laplace_run(mechanism: str, value: Any, eps: Any, sens: Any, seed: int) -> tuple[Any, ...]:
    release = getattr(mech, mechanism)(
        value, sensitivity=sens, epsilon=eps, source=SeededSource(seed)
    )
    return release.value, release.loss, release.scale, release.noise_scale, release.grid


@pytest.mark.parametrize("mechanism", ["laplace", "discrete_laplace"])
def test_cached_parameters_give_the_outputs_and_losses_of_uncached_ones(mechanism: str) -> None:
    for seed in range(40):
        runs = {
            _laplace_run(mechanism, value, eps, sens, seed)
            for value in VALUES
            for eps in EPSILONS
            for sens in SENSITIVITIES
        }
        assert len(runs) == 1, runs


@pytest.mark.parametrize("value", [0.1, -2.5e-3, 1e9, 7, -(2**20), Fraction(1, 3)])
@pytest.mark.parametrize(("eps", "sens"), [(0.1, 1), (8, 100), (1e-6, 0.001), (3, 2**-20)])
def test_real_laplace_is_the_same_whatever_the_parameters_type(
    value: Any, eps: Any, sens: Any
) -> None:
    # scales from one grid step to 2^30 of them: direct tables and the split sampler
    for seed in range(10):
        fast = _laplace_run("laplace", value, eps, sens, seed)
        general = _laplace_run("laplace", value, str(eps), Decimal(repr(sens)), seed)
        assert fast == general


def test_gaussian_parameters_are_cached_without_changing_the_noise() -> None:
    for seed in range(20):
        runs = set()
        for rho in (0.125, Fraction(1, 8), "1/8", Decimal("0.125")):
            r = mech.gaussian(2.5, sensitivity=1, rho=rho, source=SeededSource(seed))
            runs.add((r.value, r.loss, r.noise_scale, r.grid))
        for eps, delta in ((0.5, 1e-6), (Fraction(1, 2), Fraction(1, 10**6))):
            src = SeededSource(seed)
            r = mech.gaussian(2.5, sensitivity=1, epsilon=eps, delta=delta, source=src)
            runs.add((r.value, r.loss, r.noise_scale, r.grid))
        assert len(runs) == 2, runs


def test_a_cached_epsilon_still_refuses_booleans_and_non_finite_values() -> None:
    mech.laplace(1.0, sensitivity=1, epsilon=1, source=SeededSource(1))  # 1 is cached now
    with pytest.raises(InvalidArgumentError, match="boolean"):
        mech.laplace(1.0, sensitivity=1, epsilon=True)
    with pytest.raises(InvalidArgumentError, match="boolean"):
        mech.laplace(1.0, sensitivity=True, epsilon=1)
    for bad in (float("nan"), float("inf"), -0.0, 0.0, -1.0):
        for _ in range(2):  # a refusal is not cached as a value
            with pytest.raises(InvalidArgumentError, match="epsilon"):
                mech.laplace(1.0, sensitivity=1, epsilon=bad)
    with pytest.raises(InvalidArgumentError, match=r"epsilon=100000 is outside the range"):
        mech.laplace(1.0, sensitivity=1, epsilon=1e5)


def test_a_refused_calibration_is_refused_again_not_cached() -> None:
    for _ in range(2):
        with pytest.raises(InvalidArgumentError, match="exact sampler"):
            mech.discrete_laplace(1, sensitivity=2**50, epsilon=1)
        with pytest.raises(InvalidArgumentError, match="grid 2\\^"):
            mech.laplace(1.0, sensitivity=1e300, epsilon=1)


def _same_plan(a: Any, b: Any) -> bool:
    if type(a) is not type(b):
        return False
    if isinstance(a, tuple):
        return a[0] == b[0] and _same_low(a[1], b[1]) and _same_plan(a[2], b[2])
    if a is None:
        return True
    return bool(a.size == b.size and np.array_equal(a.lo, b.lo) and np.array_equal(a.hi, b.hi))


def _same_low(a: Any, b: Any) -> bool:
    """The same low part's brackets: the same table, or bins computed one by one for the same
    scale, split and bins."""
    if isinstance(a, samplers._LowBins) or isinstance(b, samplers._LowBins):
        return type(a) is type(b) and (a.x, a.m, a.bits) == (b.x, b.m, b.bits)
    return all(np.array_equal(p, q) for p, q in zip(a, b, strict=True))


@pytest.mark.parametrize("scale", [Fraction(1, 3), Fraction(10), Fraction(258), Fraction(10**9)])
def test_small_batches_use_the_plan_of_a_batch_of_their_size(scale: Fraction) -> None:
    # every batch below the small-batch bound looks up one cached plan per scale: it must be
    # the plan computed for that batch size (same tables, same split), so the same draws
    x = 1 / scale
    for n in (1, 7, 1023):
        assert _same_plan(samplers._small_geometric_plan(x), samplers._geometric_plan(x, n))
        assert _same_plan(samplers._small_laplace_plan(x), samplers._laplace_plan(x, n))
    big = samplers._geometric_plan(x, 1 << 20)
    assert scale < 16 or not _same_plan(big, samplers._small_geometric_plan(x))


# -- the exponential mechanism ---------------------------------------------------------------


def _reference_exponential(scores: list[Fraction], eps: Fraction, sens: Fraction, seed: int) -> int:
    """The exponential mechanism as veil sampled it before its weights were vectorised: one
    exact Bernoulli(exp(-γ)) per trial on 32-bit integer brackets, γ a Fraction per candidate."""
    src = SeededSource(seed)
    top = max(scores)
    gammas = [eps * (top - s) / (2 * sens) for s in scores]
    n = len(scores)
    batch = max(64, min(4 * n, 1 << 16))
    while True:
        idx = uniform_int(n, batch, source=src)
        u = draw_u32(src, batch).astype(np.int64)
        for cand, word in zip(idx.tolist(), u.tolist(), strict=True):
            lo, hi = exp_neg_bounds(gammas[cand], 32)
            if word + 1 <= lo:
                return cand
            if word < hi and LazyUniform(word, 32, src).below(exp_bounds(gammas[cand])):
                return cand


@pytest.mark.parametrize(
    ("low", "high", "eps", "sens"),
    [(0, 5, 1, 1), (-1000, 1000, Fraction(1, 10), 3), (0, 40, 2, Fraction(1, 2)), (0, 1, 8, 1)],
)
def test_integer_scores_choose_what_exact_fractions_choose(
    low: int, high: int, eps: Any, sens: Any
) -> None:
    rng = np.random.default_rng(high)
    for seed in range(60):
        ints = rng.integers(low, high + 1, size=int(rng.integers(1, 300)))
        expected = _reference_exponential(
            [Fraction(int(s)) for s in ints], Fraction(eps), Fraction(sens), seed
        )
        forms: list[Any] = [
            ints,
            ints.astype(np.int32),
            ints.astype(np.float64),
            ints.tolist(),
            [Fraction(int(s)) for s in ints],  # the general (per-candidate Fraction) path
            [float(s) for s in ints],
        ]
        for scores in forms:
            got = mech.exponential(scores, sensitivity=sens, epsilon=eps, source=SeededSource(seed))
            assert got == expected


def test_non_integer_scores_choose_what_the_reference_chooses() -> None:
    rng = np.random.default_rng(3)
    for seed in range(60):
        raw = (rng.integers(0, 400, size=50) / 7).tolist()
        exact_scores = [Fraction(repr(s)) for s in raw]
        expected = _reference_exponential(exact_scores, Fraction(1), Fraction(1), seed)
        got = mech.exponential(raw, sensitivity=1, epsilon=1, source=SeededSource(seed))
        assert got == expected


def test_integer_scores_beyond_a_double_take_the_exact_path() -> None:
    big = 2**60
    scores = [big, big - 1, big - 3]
    expected = _reference_exponential([Fraction(s) for s in scores], Fraction(1), Fraction(1), 9)
    assert mech.exponential(scores, sensitivity=1, epsilon=1, source=SeededSource(9)) == expected
    arr = np.array(scores, dtype=np.int64)
    assert mech.exponential(arr, sensitivity=1, epsilon=1, source=SeededSource(9)) == expected


def test_far_scores_beyond_the_float_range_are_decided_exactly() -> None:
    # γ far past 2^20 (weights below e^-1e6): only the best candidate can be chosen
    scores = [0, -(10**12), 1e300, -1e300]
    choices = {
        mech.exponential(scores, sensitivity=1, epsilon=1, source=SeededSource(s))
        for s in range(20)
    }
    assert choices == {2}
    keyed = {"a": 5, "b": -(10**15)}
    assert mech.report_noisy_max(keyed, sensitivity=1, epsilon=1, source=SeededSource(2)) == "a"


def test_boolean_and_non_finite_scores_are_still_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="boolean"):
        mech.exponential(np.array([True, False]), sensitivity=1, epsilon=1)
    with pytest.raises(InvalidArgumentError, match="candidate 1 must be finite"):
        mech.exponential(np.array([1.0, np.inf]), sensitivity=1, epsilon=1)
    with pytest.raises(InvalidArgumentError, match="empty"):
        mech.exponential(np.array([], dtype=np.int64), sensitivity=1, epsilon=1)


# -- plain scalar values ---------------------------------------------------------------------

EDGE_FLOATS = [0.0, -0.0, 5e-324, -5e-324, 2.0**-8, 3 * 2.0**-8, -(2.0**-8), 0.1, 1e12, -7.5]
EDGE_INTS = [0, 1, -1, 3 * 2**12, 2**12, -(2**12), 5 * 2**12, 2**40, -(2**60), 2**60]


def _both(fn: Any, plain: Any, general: Any, **kwargs: Any) -> None:
    """``fn`` on the plain value and on the same number in a general type, from one seed:
    the same outcome (value, loss, grid) or the same refusal."""
    outcomes = []
    for v in (plain, general):
        try:
            r = fn(v, source=SeededSource(repr(plain)), **kwargs)
            outcomes.append((type(r.value), r.value, r.loss, r.grid))
        except InvalidArgumentError as exc:
            outcomes.append(("refused", str(exc)))
    assert outcomes[0] == outcomes[1], (plain, outcomes)


@pytest.mark.parametrize(("sens", "eps"), [(1, 0.5), (2**-20, 3), (10**6, 1), (1e-300, 1)])
def test_a_plain_float_or_int_is_released_as_its_numpy_form_is(sens: Any, eps: Any) -> None:
    # ties to even on the grid (2^-8 is half a step of 2^-7; 2^12 half of 2^13), subnormals,
    # values too large for the grid (the same refusal), on grids from 2^-1000 to 2^13
    for value in [*EDGE_FLOATS, 1e300, -1e300]:
        _both(mech.laplace, value, np.float64(value), sensitivity=sens, epsilon=eps)
    for value in EDGE_INTS:
        _both(mech.laplace, value, np.int64(value), sensitivity=sens, epsilon=eps)


def test_a_plain_int_gets_discrete_laplace_noise_as_its_numpy_form_does() -> None:
    for value in [*EDGE_INTS, 2**61 - 1, -(2**61) + 1, 2**61]:
        for eps in (0.5, 8):
            _both(mech.discrete_laplace, value, np.int64(value), sensitivity=3, epsilon=eps)
    for value in (2**61, 2**70, 1.5, float("inf"), True):
        with pytest.raises(InvalidArgumentError):
            mech.discrete_laplace(value, sensitivity=1, epsilon=1)


def test_cached_releases_charge_their_exact_loss_every_time_and_stop_at_the_grant() -> None:
    ledger = ScratchLedger()
    ledger.grant("alice", "people", Budget(epsilon=1))
    charged = {"ledger": ledger, "analyst": "alice", "dataset": "people"}
    for _ in range(3):  # 0.3 three times: 0.9, exactly (the same cached loss object each time)
        mech.laplace(2.5, sensitivity=1, epsilon=0.3, **charged)
    mech.discrete_laplace(2, sensitivity=1, epsilon=Fraction(1, 10), **charged)  # exactly 1.0
    assert ledger.remaining("alice", "people").eps == 0
    source = SeededSource(4)
    with pytest.raises(BudgetExhaustedError):
        mech.laplace(2.5, sensitivity=1, epsilon=0.3, source=source, **charged)
    with pytest.raises(BudgetExhaustedError):
        mech.exponential([1, 2], sensitivity=1, epsilon=1e-9, source=source, **charged)
    assert source.bytes_drawn == 0


@pytest.mark.parametrize(
    "sigma2",
    [Fraction(1, 10**6), Fraction(1, 3), Fraction(2), Fraction(16641), Fraction(10**12) + 1,
     Fraction(2**96), Fraction(1, 2**600)],
)  # fmt: skip
def test_the_gaussian_screen_decides_as_the_exact_comparison_does(sigma2: Fraction) -> None:
    # screening acceptances with doubles 2^-24 away from the word draws the same bytes and
    # accepts the same proposals as deciding every one on integer brackets
    for n in (1, 5, 100, 600):
        for seed in range(8 if n < 600 else 2):
            fast = samplers._discrete_gaussian(sigma2, n, SeededSource(seed))
            exact = samplers._discrete_gaussian(sigma2, n, SeededSource(seed), screen=False)
            assert np.array_equal(fast, exact)


def test_a_plain_value_gets_the_gaussian_noise_of_its_numpy_form() -> None:
    for value in [*EDGE_FLOATS, *EDGE_INTS, 1e300]:
        general = np.float64(value) if isinstance(value, float) else np.int64(value)
        for rho in (0.5, 1e-6):
            _both(mech.gaussian, value, general, sensitivity=1, rho=rho)
        _both(mech.gaussian, value, general, sensitivity=2**-30, epsilon=1, delta=1e-9)


def _wide_exp_table(x: Fraction, count: int) -> tuple[list[int], list[int]]:
    """Brackets of ``2^_PREC·exp(-x·m)`` for m = 0..count-1 by interval multiplication (the
    recurrence the samplers' tables round, written out whole)."""
    prec = samplers._PREC
    base_lo, base_hi = exp_neg_bounds(x, prec)
    lo, hi = [1 << prec], [1 << prec]
    for _ in range(count - 1):
        lo.append((lo[-1] * base_lo) >> prec)
        hi.append(-((-hi[-1] * base_hi) >> prec))
    return lo, hi


@pytest.mark.parametrize(
    "x",
    [Fraction(1, 17), Fraction(5, 3), Fraction(7, 3_000_003), Fraction(1, 2**40), Fraction(40)],
)
def test_the_32_bit_tables_round_the_wide_recurrence_entry_by_entry(x: Fraction) -> None:
    # the tables a new scale builds, rounded as they are made: exactly the wide table rounded
    shift = samplers._PREC - 32
    for count in (1, 2, 257, 4097):
        e_lo, e_hi = _wide_exp_table(x, count)
        lo, hi = samplers._exp_table_32(x, count)
        assert lo == [v >> shift for v in e_lo]
        assert hi == [-((-v) >> shift) for v in e_hi]


@pytest.mark.parametrize(
    "x",
    [
        Fraction(1),
        1 + Fraction(1, 4096),
        Fraction(1, 17),
        Fraction(5, 3),
        Fraction(40),
        Fraction(1, 4096),  # no entry reaches (0, 1) within 4096
        Fraction(7, 3_000_003),
        Fraction(1, 2**130),  # the upper bracket of 2^P·e^{-x} is 2^P or more
    ],
)
def test_the_laplace_table_stops_computing_at_its_first_zero_one_entry_with_the_same_values(
    x: Fraction,
) -> None:
    """Every entry after the first (0, 1) is (0, 1): the table written with them is the one
    computed entry by entry from the wide recurrence (2^31·2e^{-xm} over 1 + e^{-x})."""
    bits, one = 31, 1 << samplers._PREC
    for size in (1, 40, 4096):
        e_lo, e_hi = _wide_exp_table(x, size + 1)
        lo, hi = [1 << bits], [1 << bits]
        for m in range(1, size + 1):
            a, b = samplers._scaled(2 * e_lo[m], 2 * e_hi[m], one + e_lo[1], one + e_hi[1], bits)
            lo.append(a)
            hi.append(b)
        assert samplers._laplace_table(x, size, bits) == (lo, hi)
    if x >= 1:
        assert samplers._laplace_table(x, 4096, bits)[1][60:] == [1] * (4097 - 60)


# -- the low part's brackets, bin by bin ------------------------------------------------------

LOW_PARTS = [
    (Fraction(1, 2**10), 6),  # the small-batch split: x·2^m = 1/16
    (Fraction(1, 3 * 2**12), 7),
    (Fraction(7, 10**9 + 7), 23),
    (Fraction(1, 2**34), 30),
    (Fraction(182003571712, 2916903859375 * 2**27), 27),  # bench_query's SUM at ε = 1
    (Fraction(1, 2**10), 12),  # a strong tilt (x·2^m = 4): many words undecided
    (Fraction(1, 8), 5),  # one integer per bin, brackets reaching 0
    (Fraction(1, 8), 3),
]


@pytest.mark.parametrize(("x", "m"), LOW_PARTS)
def test_low_bins_are_the_low_part_table_entry_by_entry(x: Fraction, m: int) -> None:
    lo, hi = samplers._low_part_table(x, m, 8)
    bins = samplers._LowBins(x, m, 8)
    for j in range(lo.size):  # one by one: each from its bounds
        one_lo, one_hi = bins.brackets(np.array([j], dtype=np.int64))
        assert (int(one_lo[0]), int(one_hi[0])) == (int(lo[j]), int(hi[j]))
    assert len(bins._lowers) == len(bins._uppers) == lo.size  # each made once, remembered
    for j in reversed(range(lo.size)):  # again, in another order: as remembered, the same
        one_lo, one_hi = bins.brackets(np.array([j, j], dtype=np.int64))
        assert one_lo.tolist() == [int(lo[j])] * 2
        assert one_hi.tolist() == [int(hi[j])] * 2
    everything = np.arange(lo.size, dtype=np.int64)  # many: read from the table
    many_lo, many_hi = bins.brackets(everything)
    assert np.array_equal(many_lo, lo)
    assert np.array_equal(many_hi, hi)
    assert bins.least == int(lo.min()) == int(lo[-1])


def test_a_low_bin_left_undecided_by_its_bounds_is_read_from_the_table() -> None:
    x, m = LOW_PARTS[2]
    lo, hi = samplers._low_part_table(x, m, 8)
    bins = samplers._LowBins(x, m, 8)

    class Wide:  # bounds too wide to decide any entry
        def bounds(self, k: int) -> tuple[int, int]:
            return 0, 1 << 128

    bins.lower_powers = bins.upper_powers = Wide()  # type: ignore[assignment]
    for j in range(lo.size):
        one_lo, one_hi = bins.brackets(np.array([j], dtype=np.int64))
        assert (int(one_lo[0]), int(one_hi[0])) == (int(lo[j]), int(hi[j]))


@pytest.mark.parametrize(("x", "m"), LOW_PARTS)
def test_low_bins_draw_what_the_low_part_table_draws(x: Fraction, m: int) -> None:
    # the same decisions on the same words: the same values, the same bytes drawn
    table = samplers._low_part_table(x, m, 8)
    bins = samplers._LowBins(x, m, 8)
    by_table, by_bins = SeededSource(f"low{x}{m}"), SeededSource(f"low{x}{m}")
    for n in (1, 7, 50, 1023):
        for _ in range(5):
            want = samplers._low_part(x, m, n, by_table, table)
            assert np.array_equal(samplers._low_part(x, m, n, by_bins, bins), want)
    assert by_bins.bytes_drawn == by_table.bytes_drawn
