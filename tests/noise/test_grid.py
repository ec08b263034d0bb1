from __future__ import annotations

from decimal import Decimal
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from veil.errors import InvalidArgumentError
from veil.noise.grid import from_grid, grid_exponent, to_grid


@given(
    st.floats(allow_nan=False, allow_infinity=False, min_value=-1e12, max_value=1e12),
    st.integers(min_value=-40, max_value=20),
)
@settings(max_examples=300, deadline=None)
def test_to_grid_of_floats_is_the_exact_nearest_multiple(x: float, k: int) -> None:
    assume(abs(Fraction(x) / Fraction(2) ** k) < 2**60)
    m = int(to_grid(np.array([x]), k)[0])
    assert m == round(Fraction(x) / Fraction(2) ** k)  # Python rounds Fractions half to even


@given(st.integers(min_value=-(2**50), max_value=2**50), st.integers(min_value=-8, max_value=20))
@settings(max_examples=300, deadline=None)
def test_to_grid_of_integers_is_the_exact_nearest_multiple(x: int, k: int) -> None:
    m = int(to_grid(np.array([x], dtype=np.int64), k)[0])
    assert m == round(Fraction(x) / Fraction(2) ** k)


def test_to_grid_of_fractions_and_decimals_is_exact() -> None:
    values = np.array([Fraction(1, 3), Decimal("0.1"), Fraction(-5, 2)], dtype=object)
    assert to_grid(values, -2).tolist() == [1, 0, -10]


def test_ties_round_to_even() -> None:
    assert to_grid(np.array([0.5, 1.5, 2.5, -0.5]), 0).tolist() == [0, 2, 2, 0]
    assert to_grid(np.array([2, 6, 10]), 2).tolist() == [0, 2, 2]


@pytest.mark.parametrize(
    ("scale", "dimension"), [(Fraction(1), 1), (Fraction(10**6), 1), (Fraction(1, 1000), 5)]
)
def test_grid_exponent_is_the_largest_k_below_one_percent(scale: Fraction, dimension: int) -> None:
    k = grid_exponent(scale, dimension)
    assert 100 * dimension * Fraction(2) ** k < scale
    assert 100 * dimension * Fraction(2) ** (k + 1) >= scale


def test_from_grid_maps_back_exactly_for_moderate_values() -> None:
    m = np.array([-3, 0, 5], dtype=np.int64)
    assert from_grid(m, -3).tolist() == [-0.375, 0.0, 0.625]


def test_values_beyond_2_to_the_61_steps_are_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="too large for the noise grid 2\\^-25"):
        to_grid(np.array([2.0**37]), -25)
    with pytest.raises(InvalidArgumentError, match="too large for the noise grid"):
        to_grid(np.array([2**62], dtype=np.int64), 0)


def test_grid_exponent_rejects_a_non_positive_scale() -> None:
    with pytest.raises(InvalidArgumentError, match="grid scale must be > 0, got 0"):
        grid_exponent(Fraction(0))
