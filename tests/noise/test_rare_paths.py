"""The rare paths of the exact samplers, the grid and the mechanisms, driven on purpose.

A word that leaves a comparison undecided, a word deep in a table's tail, a random source that
misbehaves, an input of the wrong kind: each is reached with a deterministic source (scripted
bytes, then a ``SeededSource``) or a crafted argument, and the test states what must happen.
"""

from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest
from scipy import stats

import veil
from support import SeededSource
from veil import mechanisms as mech
from veil.errors import InternalError, InvalidArgumentError, RandomnessError
from veil.mechanisms.scores import read_scores
from veil.noise import discrete_gaussian, discrete_laplace, geometric
from veil.noise._exact import (
    below_const,
    draw_u32,
    draw_u64,
    draw_word,
    exp_neg_bounds,
    fraction_bounds,
)
from veil.noise.calibrate import _dg_delta_bound
from veil.noise.choice import first_accepted, uniform_permutation
from veil.noise.errorbars import gaussian_halfwidth
from veil.noise.grid import from_grid, grid_exponent, to_grid


class ScriptedSource:
    """``prefix`` first, then a seeded keystream: pins the first words a sampler reads."""

    def __init__(self, prefix: bytes, seed: int = 0) -> None:
        self._prefix = prefix
        self._rest = SeededSource(seed)

    def random_bytes(self, n: int) -> bytes:
        head, self._prefix = self._prefix[:n], self._prefix[n:]
        return head + self._rest.random_bytes(n - len(head))


class ShortSource:
    """A broken source that returns one byte fewer than asked."""

    def random_bytes(self, n: int) -> bytes:
        return bytes(max(n - 1, 0))


class FailingSource:
    """A source whose generator fails, as the OS CSPRNG can."""

    def random_bytes(self, n: int) -> bytes:
        raise RandomnessError("the operating system's random number generator failed (test)")


# -- _exact -----------------------------------------------------------------------------------


@pytest.mark.parametrize(("draw", "width"), [(draw_u32, 4), (draw_u64, 8)])
def test_a_source_that_returns_too_few_bytes_is_a_bug_not_a_sample(draw: Any, width: int) -> None:
    with pytest.raises(InternalError, match=rf"returned {3 * width - 1} bytes instead of"):
        draw(ShortSource(), 3)


def test_one_word_is_draw_u32s_word_and_a_short_read_is_a_bug() -> None:
    a, b = SeededSource("word"), SeededSource("word")
    assert [draw_word(a) for _ in range(5)] == draw_u32(b, 5).tolist()
    assert a.bytes_drawn == b.bytes_drawn == 20
    with pytest.raises(InternalError, match=r"returned 3 bytes instead of 4"):
        draw_word(ShortSource())


def test_a_short_source_fails_the_public_samplers_instead_of_reusing_bytes() -> None:
    with pytest.raises(InternalError, match=r"this is a bug"):
        discrete_laplace(3, 10, source=ShortSource())


def test_exp_neg_bounds_refuses_a_negative_exponent() -> None:
    with pytest.raises(InternalError, match=r"needs q ≥ 0, got -1/2"):
        exp_neg_bounds(Fraction(-1, 2), 32)


def test_below_const_refines_an_undecided_word_with_the_right_probability() -> None:
    # the word floor(2^32/3) is undecided against 1/3; given it, W < 1/3 has probability
    # frac(2^32/3) = 1/3: 3000 refinements, two-sided binomial p > 1e-4 at this fixed seed
    bounds = fraction_bounds(Fraction(1, 3))
    lo, _ = bounds(32)
    words = np.array([0, lo, 2**32 - 1] + [lo] * 2999, dtype=np.uint32)
    source = SeededSource("below-const")
    out = below_const(words, bounds, source)
    assert out[0]  # decided words keep their answer
    assert not out[2]
    assert source.bytes_drawn >= 8 * 3000  # every undecided word drew more bits
    hits = int(out[1:2].sum() + out[3:].sum())
    assert stats.binomtest(hits, 3000, 1 / 3).pvalue > 1e-4


# -- samplers ---------------------------------------------------------------------------------


def test_the_smallest_word_lands_in_the_laplace_tail_beyond_the_table() -> None:
    # 31 bits of magnitude word 0 (and a sign bit): W < S(m) for every tabulated m, so the
    # magnitude is at least the table size and is drawn from the geometric tail
    # (scale 15: the small-batch table of 256 entries holds all but e^-17 of the mass, and
    # word 0 is W < 2^-31)
    source = ScriptedSource(bytes(4), seed=1)
    value = discrete_laplace(15, 1, source=source)
    assert abs(int(value[0])) >= 256


def test_the_smallest_word_lands_in_the_geometric_tail_beyond_the_table() -> None:
    source = ScriptedSource(bytes(4), seed=2)
    assert int(geometric(15, 1, source=source)[0]) >= 256


def test_zero_draws_from_a_large_scale_read_no_randomness() -> None:
    source = SeededSource(3)
    assert geometric(10**12, 0, source=source).shape == (0,)
    assert source.bytes_drawn == 0


@pytest.mark.parametrize("scale", [Fraction(10**6, 3), Fraction(2**40 + 1, 7)])
def test_geometric_at_large_scales_has_the_declared_mean(scale: Fraction) -> None:
    # split sampling (low part + 2^m·high part); mean of P(g) ∝ e^{-g/s} is 1/(e^{1/s} − 1)
    # ≈ s − 1/2; 4000 draws, 6 standard errors (std ≈ s) at this fixed seed
    n = 4000
    draws = geometric(scale, n, source=SeededSource(f"geo{scale}")).astype(np.float64)
    s = float(scale)
    assert abs(draws.mean() - (s - 0.5)) < 6 * s / math.sqrt(n)
    assert draws.min() >= 0


def test_a_failing_source_fails_every_sampler() -> None:
    for sampler in (discrete_laplace, discrete_gaussian, geometric):
        with pytest.raises(RandomnessError):
            sampler(2, 5, source=FailingSource())


# -- calibrate --------------------------------------------------------------------------------


def _exact_dg_delta(sigma2: float, epsilon: float, shift: int) -> float:
    """CKS 2020 Theorem 7's δ for N_Z(0, σ²), summed over the pmf (σ small enough)."""
    k = np.arange(-4000, 4001, dtype=np.float64)
    p = np.exp(-(k * k) / (2 * sigma2))
    p /= p.sum()
    a = epsilon * sigma2 / shift - shift / 2
    return float(p[k > a].sum() - math.exp(epsilon) * p[k > a + shift].sum())


@pytest.mark.parametrize(
    ("sigma2", "epsilon", "shift"),
    [(400.0, 0.05, 60), (400.0, 0.5, 10), (2500.0, 0.01, 120), (900.0, 1.0, 3)],
)
def test_the_large_sigma_delta_bound_is_an_upper_bound_of_the_exact_delta(
    sigma2: float, epsilon: float, shift: int
) -> None:
    # the first and third cases put the threshold a = εσ²/Δ − Δ/2 below zero
    exact = _exact_dg_delta(sigma2, epsilon, shift)
    bound = _dg_delta_bound(sigma2, epsilon, float(shift))
    slack = (1 + math.exp(epsilon)) / math.sqrt(2 * math.pi * sigma2)  # one pmf term each side
    assert exact - 1e-12 <= bound <= exact + slack


# -- grid -------------------------------------------------------------------------------------


def test_grid_exponent_refuses_a_dimension_below_one() -> None:
    with pytest.raises(InvalidArgumentError, match=r"dimension must be ≥ 1, got 0"):
        grid_exponent(1, 0)


def test_an_object_that_is_not_a_number_cannot_go_on_the_grid() -> None:
    with pytest.raises(InvalidArgumentError, match=r"cannot put 'a' of type str on the noise"):
        to_grid(np.array([Fraction(1), "a"], dtype=object), 0)


def test_integers_scaled_onto_a_fine_grid_beyond_2_to_the_61_steps_are_refused() -> None:
    assert to_grid(np.array([3, -5], dtype=np.int64), -2).tolist() == [12, -20]
    with pytest.raises(InvalidArgumentError, match=r"too large for the noise grid 2\^-4"):
        to_grid(np.array([2**58], dtype=np.int64), -4)


def test_from_grid_far_from_one_is_exact() -> None:
    assert from_grid(np.array([3, -1], dtype=np.int64), -1074).tolist() == [
        3 * 2.0**-1074,
        -(2.0**-1074),
    ]
    assert from_grid(np.array([1], dtype=np.int64), 1001).tolist() == [2.0**1001]


# -- mechanisms -------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "match"),
    [
        (np.array([1, None], dtype=object), r"values must be numbers, got None of type NoneType"),
        (np.array([1, True], dtype=object), r"values must be numbers, got True of type bool"),
        (np.array([1, float("nan")], dtype=object), r"values must be finite, got nan"),
        (np.array([1, Decimal("Infinity")], dtype=object), r"values must be finite"),
    ],
)
def test_values_that_are_not_finite_numbers_are_refused_before_any_noise(
    values: Any, match: str
) -> None:
    source = SeededSource(4)
    with pytest.raises(InvalidArgumentError, match=match):
        mech.laplace(values, sensitivity=1, epsilon=1, source=source)
    assert source.bytes_drawn == 0


def test_a_ragged_list_is_refused_as_not_an_array() -> None:
    with pytest.raises(InvalidArgumentError, match=r"values must be numbers or an array"):
        mech.laplace([[1.0, 2.0], [3.0]], sensitivity=1, epsilon=1, source=SeededSource(4))


def test_discrete_laplace_takes_exact_integers_from_an_object_array() -> None:
    values = np.array([Fraction(4), Decimal(-3), 2**40], dtype=object)
    release = mech.discrete_laplace(values, sensitivity=1, epsilon=1, source=SeededSource(5))
    noisy = np.asarray(release.value)
    assert noisy.dtype == np.int64
    assert noisy.shape == (3,)
    # scale 1: the noise is tiny next to 2^40, and every output is an integer
    assert abs(int(noisy[2]) - 2**40) < 200


@pytest.mark.parametrize(
    ("value", "match"),
    [
        (Fraction(1, 2), r"needs integer values, got Fraction\(1, 2\)"),
        (2**61, r"supports integers of magnitude below 2\^61"),
    ],
)
def test_discrete_laplace_refuses_object_values_it_cannot_add_exactly(
    value: Any, match: str
) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        mech.discrete_laplace(
            np.array([value, 1], dtype=object), sensitivity=1, epsilon=1, source=SeededSource(6)
        )


def test_gaussian_refuses_a_nan_rho() -> None:
    with pytest.raises(
        InvalidArgumentError, match=r"rho must be a positive finite number, got nan"
    ):
        mech.gaussian(1.0, sensitivity=1, rho=float("nan"), source=SeededSource(7))


def test_charging_a_mechanism_needs_the_analyst_and_the_dataset() -> None:
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=1))
    with pytest.raises(InvalidArgumentError, match=r"needs the analyst and the dataset"):
        mech.laplace(1.0, sensitivity=1, epsilon=0.5, ledger=ledger, analyst="alice")
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=1)


def test_a_charged_mechanism_whose_noise_fails_is_refunded_and_releases_nothing() -> None:
    # drawing noise reads no private data, so a failure there refunds the reservation
    ledger = veil.Ledger("sqlite://")
    ledger.grant("alice", "people", veil.Budget(epsilon=1))
    with pytest.raises(RandomnessError):
        mech.laplace(
            1.0,
            sensitivity=1,
            epsilon=0.5,
            source=FailingSource(),
            ledger=ledger,
            analyst="alice",
            dataset="people",
        )
    assert ledger.remaining("alice", "people") == veil.Budget(epsilon=1)
    charges = [r for r in ledger.history("alice", "people") if r.event == "charge"]
    assert [r.status for r in charges] == ["refunded"]


def test_an_uncharged_mechanism_whose_noise_fails_releases_nothing() -> None:
    with pytest.raises(RandomnessError):
        mech.laplace([1.0, 2.0], sensitivity=1, epsilon=0.5, source=FailingSource())


def test_the_gaussian_object_form_adds_the_noise_of_its_release() -> None:
    gaussian = mech.GaussianMechanism(sensitivity=1, rho=0.5)
    noisy = gaussian.add_noise([10.0, 20.0], source=SeededSource(8))
    release = gaussian.release([10.0, 20.0], source=SeededSource(8))
    assert np.asarray(noisy).tolist() == np.asarray(release.value).tolist()
    assert release.loss == veil.Budget(rho=Fraction(1, 2))


def test_geometric_at_a_scale_for_the_big_direct_table_has_the_declared_mean() -> None:
    # 300 000 draws at scale 1000 take the 2^14-entry direct table; mean 1/(e^{1/s} − 1),
    # standard error ≈ s/√n ≈ 1.8, tolerance 6 standard errors at this fixed seed
    n, s = 300_000, 1000
    draws = geometric(s, n, source=SeededSource("big-table")).astype(np.float64)
    assert abs(draws.mean() - 1 / math.expm1(1 / s)) < 6 * s / math.sqrt(n)


def test_a_release_error_bar_is_the_noise_halfwidth_plus_half_a_grid_step() -> None:
    integer = mech.discrete_gaussian(5, sensitivity=1, rho=0.5, source=SeededSource(9))
    assert integer.grid is None
    assert integer.noise_scale is not None
    assert integer.error_bar(0.9) == gaussian_halfwidth(integer.noise_scale, 0.9)
    real = mech.gaussian(5.0, sensitivity=1, rho=0.5, source=SeededSource(10))
    assert real.grid is not None
    assert real.noise_scale is not None
    step = math.ldexp(1.0, real.grid)
    assert real.error_bar(0.9) == gaussian_halfwidth(real.noise_scale, 0.9) * step + step / 2


def test_naming_a_grant_without_a_ledger_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match=r"analyst= and dataset= name the grant"):
        mech.laplace(1.0, sensitivity=1, epsilon=1, analyst="alice", source=SeededSource(11))


def test_a_trial_with_an_undecided_word_is_accepted_with_its_exact_probability() -> None:
    # candidate 1 scores 2 below candidate 0: weight exp(-γ) with γ = ε·2/(2Δ) = 1; its word
    # lo (undecided: lo ≤ u < hi) is accepted with probability frac(2^32·e^-1) ≈ 0.96
    _, _, weights = read_scores([2, 0], Fraction(1), Fraction(1))
    assert [weights.exact(0), weights.exact(1)] == [Fraction(0), Fraction(1)]
    lo, hi = exp_neg_bounds(Fraction(1), 32)
    assert hi == lo + 1
    idx = np.array([1], dtype=np.int64)
    u = np.array([lo], dtype=np.uint32)
    n = 4000
    hits = sum(first_accepted(idx, u, weights, SeededSource(f"trial{i}")) == 1 for i in range(n))
    scaled = math.ldexp(math.exp(-1), 32)
    assert stats.binomtest(hits, n, scaled - math.floor(scaled)).pvalue > 1e-4


def test_trials_rejected_for_certain_accept_nobody_and_draw_nothing() -> None:
    _, _, weights = read_scores([2, 0], Fraction(1), Fraction(1))
    source = SeededSource(12)
    _, hi = exp_neg_bounds(Fraction(1), 32)
    idx = np.array([1, 1, 1], dtype=np.int64)
    # hi: just above the threshold (decided on the brackets); 2^32 − 1: far above (the double)
    u = np.array([hi, hi + 300, 2**32 - 1], dtype=np.uint32)
    assert first_accepted(idx, u, weights, source) is None
    assert source.bytes_drawn == 0


def test_a_word_near_the_threshold_is_decided_on_brackets_like_a_far_one() -> None:
    # words within 2^-24 of exp(-1) are not trusted to the double: they are decided on the
    # integer brackets, and agree with the exact comparison v + 1 ≤ lo / v ≥ hi
    _, _, weights = read_scores([2, 0], Fraction(1), Fraction(1))
    lo, hi = exp_neg_bounds(Fraction(1), 32)
    idx = np.array([1], dtype=np.int64)
    for v in (lo - 300, lo - 1, lo - 256, hi + 255, hi + 256):
        source = SeededSource(13)
        got = first_accepted(idx, np.array([v], dtype=np.uint32), weights, source)
        assert got == (1 if v + 1 <= lo else None)
        assert source.bytes_drawn == 0


def test_a_permutation_with_tied_keys_is_redrawn() -> None:
    # the first three 64-bit keys are all zero (a tie): the order is drawn again
    source = ScriptedSource(bytes(24), seed=13)
    order = uniform_permutation(3, source)
    assert sorted(order.tolist()) == [0, 1, 2]
    assert source._rest.bytes_drawn == 24
