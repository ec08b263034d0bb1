from __future__ import annotations

import math
from decimal import Decimal, localcontext
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats

from support import SeededSource
from veil.errors import InvalidArgumentError
from veil.noise import bernoulli, bernoulli_exp, exp_neg_bounds, uniform_int
from veil.noise._exact import LazyUniform, below_const, fraction_bounds


def _exp_neg_scaled(q: Fraction, prec: int) -> Decimal:
    with localcontext() as ctx:
        ctx.prec = 120
        return (-(Decimal(q.numerator) / Decimal(q.denominator))).exp() * Decimal(2) ** prec


@pytest.mark.parametrize(
    "q", [Fraction(0), Fraction(1, 3), Fraction(1), Fraction(7, 2), Fraction(50), Fraction(10**-9)]
)
@pytest.mark.parametrize("prec", [8, 32, 100, 200])
def test_exp_neg_bounds_bracket_the_true_value_tightly(q: Fraction, prec: int) -> None:
    lo, hi = exp_neg_bounds(q, prec)
    scaled = _exp_neg_scaled(q, prec)
    assert Decimal(lo) <= scaled <= Decimal(hi)
    assert hi - lo <= 2


def test_lazy_uniform_refines_an_ambiguous_word_with_the_right_probability() -> None:
    # 2^32/3 is not an integer: the word floor(2^32/3) leaves W < 1/3 undecided, and given that
    # word W < 1/3 holds with probability frac(2^32/3) = 1/3. Refinement must reproduce it.
    bounds = fraction_bounds(Fraction(1, 3))
    lo, hi = bounds(32)
    assert hi == lo + 1
    hits = sum(LazyUniform(lo, 32, SeededSource(i)).below(bounds) for i in range(3000))
    assert stats.binomtest(hits, 3000, 1 / 3).pvalue > 1e-4


def test_below_const_decides_certain_words_without_drawing_more_bits() -> None:
    src = SeededSource(1)
    bounds = fraction_bounds(Fraction(1, 2))
    out = below_const(np.array([0, 2**31 - 1, 2**31, 2**32 - 1], dtype=np.uint32), bounds, src)
    assert out.tolist() == [True, True, False, False]
    assert src.bytes_drawn == 0


@pytest.mark.parametrize("p", [Fraction(0), Fraction(1, 3), Fraction(1, 2**40), Fraction(1)])
def test_bernoulli_frequency_matches_p(p: Fraction) -> None:
    n = 200_000
    hits = int(bernoulli(p, n, source=SeededSource(f"bern{p}")).sum())
    if p in (0, 1):
        assert hits == n * p
    else:
        # two-sided binomial test, documented cut-off p-value > 1e-4 at a fixed seed
        assert stats.binomtest(hits, n, float(p)).pvalue > 1e-4


@pytest.mark.parametrize("gamma", [Fraction(0), Fraction(1, 2), Fraction(5), Fraction(1000)])
def test_bernoulli_exp_frequency_matches_exp_minus_gamma(gamma: Fraction) -> None:
    n = 200_000
    hits = int(bernoulli_exp(gamma, n, source=SeededSource(f"bexp{gamma}")).sum())
    if gamma == 0:
        assert hits == n
    else:
        assert stats.binomtest(hits, n, math.exp(-float(gamma))).pvalue > 1e-4


@pytest.mark.parametrize("bound", [1, 7, 1000, 2**32 + 3, 2**62 + 1])
def test_uniform_int_is_uniform_without_modulo_bias(bound: int) -> None:
    n = 100_000
    x = uniform_int(bound, n, source=SeededSource(f"uni{bound}"))
    assert x.min() >= 0
    assert x.max() < bound
    if bound == 1:
        return
    # 7 (or fewer) equal-probability bins of the range; chi-square p-value > 1e-4
    bins = min(bound, 7)
    edges = [bound * i // bins for i in range(bins + 1)]
    counts = np.histogram(x.astype(np.float64), bins=np.array(edges, dtype=np.float64))[0]
    expected = np.diff(np.array(edges, dtype=np.float64)) / bound * n
    assert stats.chisquare(counts, expected).pvalue > 1e-4


def test_uniform_int_bound_just_above_a_power_of_two_has_no_bias() -> None:
    # 3·2^30: with a plain "% bound" on 32-bit words the lowest third would be twice as likely
    bound = 3 * 2**30
    x = uniform_int(bound, 90_000, source=SeededSource("bias"))
    counts = np.bincount(x // 2**30, minlength=3)
    assert stats.chisquare(counts).pvalue > 1e-4


@pytest.mark.parametrize(
    ("call", "match"),
    [
        (
            lambda: bernoulli(Fraction(3, 2), 1),
            r"Bernoulli probability must lie in \[0, 1\], got 3/2",
        ),
        (lambda: bernoulli_exp(Fraction(-1), 1), "gamma must be ≥ 0"),
        (lambda: uniform_int(0, 1), "bound must be a positive integer, got 0"),
        (lambda: uniform_int(2**64, 1), "up to 2\\*\\*63"),
        (lambda: bernoulli(Fraction(1, 2), -1), "size must be a non-negative integer, got -1"),
    ],
)
def test_bad_sampler_arguments_raise_a_user_error(call: object, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        call()  # type: ignore[operator]
