"""Partition-selection thresholds: the δ they promise, checked against exact tails."""

from __future__ import annotations

import math
from fractions import Fraction

import pytest

from veil.errors import InvalidArgumentError
from veil.noise.selection import (
    gaussian_tail_bound,
    gaussian_threshold,
    laplace_tail,
    laplace_threshold,
)


@pytest.mark.parametrize("scale", [Fraction(1, 2), Fraction(2), Fraction(191, 100), Fraction(40)])
@pytest.mark.parametrize("groups", [1, 5, 50])
@pytest.mark.parametrize("rows", [1, 3])
def test_the_laplace_threshold_keeps_the_union_bound_below_delta(
    scale: Fraction, groups: int, rows: int
) -> None:
    delta = Fraction(1, 10**6)
    tau = laplace_threshold(scale, groups=groups, rows=rows, delta=delta)
    assert groups * laplace_tail(scale, tau - rows) <= float(delta)
    # and it is the smallest such threshold: one step lower breaks the bound
    assert tau - rows == 1 or groups * laplace_tail(scale, tau - rows - 1) > float(delta)


def test_the_laplace_tail_matches_the_pmf_sum() -> None:
    scale = Fraction(3, 2)
    a = math.exp(-1 / 1.5)
    pmf = [(1 - a) / (1 + a) * a ** abs(z) for z in range(0, 200)]
    assert laplace_tail(scale, 4) == pytest.approx(sum(pmf[4:]), rel=1e-12)


@pytest.mark.parametrize("sigma2", [Fraction(1), Fraction(30), Fraction(1000)])
def test_the_gaussian_threshold_keeps_the_union_bound_below_delta(sigma2: Fraction) -> None:
    delta = Fraction(1, 10**7)
    tau = gaussian_threshold(sigma2, groups=10, rows=2, delta=delta)
    assert 10 * gaussian_tail_bound(sigma2, tau - 2) <= float(delta)
    assert 10 * gaussian_tail_bound(sigma2, tau - 3) > float(delta)
    # the bound really bounds the discrete Gaussian tail
    s2 = float(sigma2)
    zs = range(-int(60 * math.sqrt(s2)) - 5, int(60 * math.sqrt(s2)) + 5)
    weights = {z: math.exp(-z * z / (2 * s2)) for z in zs}
    norm = sum(weights.values())
    t = tau - 2 - 1
    assert sum(w for z, w in weights.items() if z >= t) / norm <= gaussian_tail_bound(sigma2, t)


def test_selection_needs_a_delta_in_the_open_unit_interval() -> None:
    with pytest.raises(InvalidArgumentError, match="0 < delta < 1"):
        laplace_threshold(Fraction(1), groups=1, rows=1, delta=Fraction(0))
