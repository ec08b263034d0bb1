"""The statistics of ``veil audit query``: exact Clopper–Pearson bounds, the split-sample ε
lower bound (its false-alarm rate, and that it catches a mechanism with too little noise), the
power statement and the coverage rule.

Thresholds. Samples come from veil's exact discrete Laplace sampler with a seeded source, so
each outcome is fixed. False alarms: a correct mechanism audited 200 times at confidence 0.9
must FAIL at most 32 times (the bound guarantees a rate ≤ 0.1; P(Binomial(200, 0.1) > 32) ≈
0.002). Detection: Laplace at 70 % of the needed scale has true ε = 1/0.7 ≈ 1.43; with 20,000
releases per side the bound at confidence 0.95 must exceed the claimed 1 (measured at seed:
1.37; false alarms at seed: 6 of 200).
"""

from __future__ import annotations

import math
from fractions import Fraction

import numpy as np
import pytest
from scipy import stats as scipy_stats

from support import SeededSource
from veil.audit.query_stats import (
    binomial_lower,
    binomial_upper,
    detectable,
    epsilon_lower_bound,
    lowest_bit,
    significantly_below,
)
from veil.noise.samplers import discrete_laplace

pytestmark = pytest.mark.statistical


@pytest.mark.parametrize(
    ("k", "n", "confidence"),
    [
        (0, 10, 0.95),
        (3, 10, 0.95),
        (500, 1000, 0.99),
        (1, 100_000, 0.999),
        (10, 10, 0.9),
        (99_999, 100_000, 0.95),
        (7, 2000, 0.9999),
    ],
)
def test_clopper_pearson_bounds_are_the_beta_quantiles(k: int, n: int, confidence: float) -> None:
    lower = 0.0 if k == 0 else scipy_stats.beta.ppf(1 - confidence, k, n - k + 1)
    upper = 1.0 if k == n else scipy_stats.beta.ppf(confidence, k + 1, n - k)
    assert binomial_lower(k, n, confidence) == pytest.approx(lower, rel=1e-8, abs=1e-14)
    assert binomial_upper(k, n, confidence) == pytest.approx(upper, rel=1e-8, abs=1e-14)


@pytest.mark.parametrize("p", [0.01, 0.3, 0.5, 0.93])
def test_clopper_pearson_bounds_cover_at_least_their_confidence(p: float) -> None:
    """Exactly, over the binomial pmf: P(lower > p) ≤ 1 − confidence, P(upper < p) likewise."""
    n, confidence = 60, 0.9
    pmf = scipy_stats.binom.pmf(range(n + 1), n, p)
    miss_low = sum(w for k, w in enumerate(pmf) if binomial_lower(k, n, confidence) > p)
    miss_high = sum(w for k, w in enumerate(pmf) if binomial_upper(k, n, confidence) < p)
    assert miss_low <= 1 - confidence + 1e-12
    assert miss_high <= 1 - confidence + 1e-12


def _laplace(scale: Fraction, shift: int, n: int, seed: str) -> np.ndarray:
    return shift + discrete_laplace(scale, n, source=SeededSource(seed)).astype(float)


def test_a_correct_mechanism_fails_at_most_at_the_false_alarm_rate() -> None:
    confidence, runs = 0.9, 200
    alarms = 0
    for i in range(runs):
        a = _laplace(Fraction(1), 0, 400, f"fa-a-{i}")
        b = _laplace(Fraction(1), 1, 400, f"fa-b-{i}")
        bound = epsilon_lower_bound(a, b, epsilon=1.0, delta=0.0, confidence=confidence)
        alarms += bound.epsilon > 1.0
    assert alarms <= 32


def test_laplace_with_seventy_percent_of_the_scale_fails() -> None:
    a = _laplace(Fraction(7, 10), 0, 20_000, "low-a")
    b = _laplace(Fraction(7, 10), 1, 20_000, "low-b")
    bound = epsilon_lower_bound(a, b, epsilon=1.0, delta=0.0, confidence=0.95)
    assert bound.epsilon > 1.0
    assert bound.epsilon <= 1 / 0.7  # a lower bound: never above the truth here
    assert bound.samples == 20_000


def test_an_absence_that_depends_on_one_person_is_caught() -> None:
    """A group released half the time on D and never on D′ (a partition selection without
    noise would do this): the event "not released" gives a large ε lower bound."""
    rng = np.random.default_rng(0)  # the test's own data, not a sampler under test
    a = np.where(rng.random(2000) < 0.5, math.nan, 1.0)
    b = np.ones(2000)
    bound = epsilon_lower_bound(a, b, epsilon=1.0, delta=1e-6, confidence=0.95)
    assert bound.epsilon > 3
    assert bound.event.startswith("not released")
    assert bound.delta > 0.4


def test_a_bound_needs_a_few_releases() -> None:
    with pytest.raises(ValueError, match="at least 4 releases"):
        epsilon_lower_bound([1.0, 2.0], [1.0, 2.0, 3.0, 4.0], epsilon=1, delta=0, confidence=0.9)


def test_the_smallest_detectable_violation_shrinks_with_samples() -> None:
    small, large = detectable(1.0, 1000, 0.95), detectable(1.0, 100_000, 0.95)
    assert 1.0 < large < small < 2.0
    assert detectable(5.0, 100, 0.95) == math.inf  # too few releases to test ε = 5


def test_coverage_is_significantly_below_the_level_only_when_it_is() -> None:
    assert significantly_below(900, 1000, 0.95, 0.95)
    assert not significantly_below(945, 1000, 0.95, 0.95)  # within sampling error
    assert not significantly_below(0, 0, 0.95, 0.95)


def test_lowest_bit_is_the_grid_a_value_lies_on() -> None:
    values = np.array([1.0, 3.0, 0.5, 0.75, 6.0, 2.0**-1074, 1e300, 0.0, math.nan, math.inf])
    bits = lowest_bit(values)
    assert bits[:7].tolist() == [0, 0, -1, -2, 1, -1074, 946]
    assert bits[7] == math.inf
    assert np.isnan(bits[8:]).all()


def test_a_float_laplace_fails_by_reachability() -> None:
    """numpy's x + Laplace(1/ε) (the seeds' mechanism) with x = 0 against x = 1: outputs in
    (−1, 1) from x = 1 lie on the grid of 1 + y, coarser than those from x = 0 (Mironov 2012),
    which the grid events see though the values themselves are as close as ε allows."""
    rng = np.random.default_rng(2012)  # the flawed mechanism's own generator (the point)
    a = 0 + rng.laplace(0, 1, 4000)
    b = 1 + rng.laplace(0, 1, 4000)
    bound = epsilon_lower_bound(a, b, epsilon=1.0, delta=0.0, confidence=0.95)
    assert bound.epsilon > 3
    assert "grid" in bound.event


def test_discrete_laplace_on_a_grid_passes_the_grid_events() -> None:
    step = 2.0**-10  # veil's releases: integer noise in grid units, the same grid on both sides
    a = step * _laplace(Fraction(1, 1), 0, 4000, "grid-a")
    b = step * _laplace(Fraction(1, 1), 1, 4000, "grid-b")
    bound = epsilon_lower_bound(a, b, epsilon=1.0, delta=0.0, confidence=0.95)
    assert bound.epsilon <= 1.0
