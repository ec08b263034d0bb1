from __future__ import annotations

import math
from decimal import Decimal
from fractions import Fraction
from typing import Any

import numpy as np
import pytest

import veil
import veil.mechanisms as mech
from support import SeededSource
from veil.errors import InvalidArgumentError
from veil.sensitivity import probe


def test_laplace_returns_a_release_with_exact_loss_and_grid_scale() -> None:
    r = mech.laplace(3.25, sensitivity=1, epsilon=0.1, source=SeededSource(1))
    assert isinstance(r.value, float)
    assert r.mechanism == "laplace"
    assert r.loss == veil.Budget(epsilon=Fraction(1, 10))
    assert r.grid is not None
    step = Fraction(2) ** r.grid
    # the scale is calibrated to Δ + one grid step (the rounding), in value units
    assert r.scale == (1 + step) / Fraction(1, 10)
    # the grid costs < 1% of the noise scale
    assert step < Fraction(1, 100)
    assert (Fraction(r.value) / step).denominator == 1


def test_laplace_keeps_the_input_shape() -> None:
    r = mech.laplace(np.zeros((2, 3)), sensitivity=2, epsilon=1, source=SeededSource(2))
    assert r.value.shape == (2, 3)
    assert r.value.dtype == np.float64


def test_vector_laplace_accounts_for_rounding_in_every_coordinate() -> None:
    r = mech.laplace([0.1, 0.2, 0.3, 0.4], sensitivity=1, epsilon=1, source=SeededSource(3))
    assert r.grid is not None
    step = Fraction(2) ** r.grid
    assert r.noise_scale == (1 / step + 4) / 1
    assert 4 * step * 100 < 1


def test_discrete_laplace_adds_integer_noise_to_integers() -> None:
    r = mech.discrete_laplace([10, 20, 30], sensitivity=1, epsilon=0.5, source=SeededSource(4))
    assert r.value.dtype == np.int64
    assert r.scale == 2
    assert r.grid is None


def test_discrete_laplace_accepts_integral_floats_and_rejects_fractions() -> None:
    assert isinstance(
        mech.discrete_laplace(5.0, sensitivity=1, epsilon=1, source=SeededSource(5)).value, int
    )
    with pytest.raises(
        InvalidArgumentError, match=r"needs integer values.*use veil\.noise\.mechanisms\.laplace"
    ):
        mech.discrete_laplace(5.5, sensitivity=1, epsilon=1)


def test_gaussian_from_rho_uses_sigma2_equal_to_delta_squared_over_two_rho() -> None:
    r = mech.discrete_gaussian(7, sensitivity=3, rho=Fraction(1, 8), source=SeededSource(6))
    assert r.noise_scale == Fraction(9) / (2 * Fraction(1, 8))
    assert r.loss == veil.Budget(rho=Fraction(1, 8))


def test_gaussian_from_epsilon_delta_is_tighter_than_the_classic_bound() -> None:
    eps, delta = Fraction(1, 2), Fraction(1, 10**6)
    r = mech.discrete_gaussian(0, sensitivity=1, epsilon=eps, delta=delta, source=SeededSource(7))
    classic = math.sqrt(2 * math.log(1.25 / 1e-6)) / 0.5
    assert r.scale < classic
    assert r.loss == veil.Budget(epsilon=eps, delta=delta)
    # and not below the continuous analytic Gaussian (Balle & Wang) by more than a hair
    assert r.scale > 0.95 * 7.6


def test_gaussian_real_values_land_on_the_grid() -> None:
    r = mech.gaussian([1.1, 2.2], sensitivity=1, rho=0.5, source=SeededSource(8))
    assert r.grid is not None
    for v in r.value:
        assert (Fraction(float(v)) / Fraction(2) ** r.grid).denominator == 1


def test_epsilon_is_read_as_its_decimal() -> None:
    r = mech.laplace(0.0, sensitivity=1, epsilon=0.1, source=SeededSource(9))
    assert r.loss.epsilon == Fraction(1, 10)


@pytest.mark.parametrize("value", [Fraction(1, 3), Decimal("2.5"), 7, np.float32(1.5), [1, 2]])
def test_laplace_accepts_ints_fractions_decimals_and_numpy_scalars(value: Any) -> None:
    mech.laplace(value, sensitivity=1, epsilon=1, source=SeededSource(10))


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 0}, "epsilon must be > 0, got 0"),
        ({"epsilon": -1}, "epsilon must be > 0, got -1"),
        ({"epsilon": float("nan")}, "epsilon must be a positive finite number, got nan"),
        ({"epsilon": float("inf")}, "epsilon must be finite, got inf"),
        ({"sensitivity": -1}, "sensitivity must be > 0, got -1"),
        ({"sensitivity": float("inf")}, "sensitivity must be finite, got inf"),
        ({"sensitivity": float("nan")}, "sensitivity must be a positive finite number, got nan"),
    ],
)
def test_bad_privacy_parameters_raise_a_user_error_naming_the_value(
    kwargs: dict[str, Any], match: str
) -> None:
    params: dict[str, Any] = {"sensitivity": 1, "epsilon": 1, **kwargs}
    with pytest.raises(InvalidArgumentError, match=match):
        mech.laplace(1.0, **params)


@pytest.mark.parametrize(
    ("values", "match"),
    [
        (float("nan"), "values must be finite, got nan; drop or impute"),
        ([1.0, float("inf")], "values must be finite, got inf"),
        (["a"], "numeric array .* got dtype <U1"),
        (True, "got the boolean True"),
        ([], "values is empty"),
        (np.array([1 + 2j]), "numeric array"),
    ],
)
def test_bad_data_raises_a_user_error(values: Any, match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        mech.laplace(values, sensitivity=1, epsilon=1)


@pytest.mark.parametrize(
    ("kwargs", "match"),
    [
        ({"epsilon": 1, "delta": 0}, r"delta must lie in \(0, 1\), got 0"),
        ({"epsilon": 1, "delta": 1}, r"delta must lie in \(0, 1\), got 1"),
        ({"epsilon": 1, "delta": float("nan")}, r"delta must lie in \(0, 1\), got nan"),
        ({"epsilon": 1}, "needs rho=… \\(zCDP\\) or both epsilon=… and delta=…"),
        ({"rho": 0}, "rho must be > 0, got 0"),
        ({"rho": 1, "epsilon": 1}, "not both"),
    ],
)
def test_bad_gaussian_parameters_raise(kwargs: dict[str, Any], match: str) -> None:
    with pytest.raises(InvalidArgumentError, match=match):
        mech.gaussian(1.0, sensitivity=1, **kwargs)


def test_mechanisms_refuse_an_observed_sensitivity() -> None:
    observed = probe(lambda d: sum(d), [([1, 2], [1, 2, 3])])
    with pytest.raises(InvalidArgumentError, match="only a lower bound and cannot calibrate noise"):
        mech.laplace(1.0, sensitivity=observed, epsilon=1)  # type: ignore[arg-type]
    with pytest.raises(InvalidArgumentError, match="lower bound"):
        mech.LaplaceMechanism(epsilon=0.5, sensitivity=observed)  # type: ignore[arg-type]


def test_object_form_matches_the_seed_usage() -> None:
    m = mech.LaplaceMechanism(epsilon=0.5, sensitivity=1)
    noisy = m.add_noise(np.array([120, 80, 90, 110]).sum(), source=SeededSource(11))
    assert isinstance(noisy, float)
    assert m.release(1.0, source=SeededSource(12)).loss == veil.Budget(epsilon=Fraction(1, 2))
    g = mech.GaussianMechanism(sensitivity=1, rho=0.5)
    assert g.release(1.0, source=SeededSource(13)).loss == veil.Budget(rho=Fraction(1, 2))


def test_object_form_needs_a_sensitivity() -> None:
    with pytest.raises(TypeError, match="sensitivity"):
        mech.LaplaceMechanism(epsilon=0.5)  # type: ignore[call-arg]


def test_exponential_rejects_an_empty_candidate_list() -> None:
    with pytest.raises(InvalidArgumentError, match="candidate list is empty"):
        mech.exponential([], sensitivity=1, epsilon=1)
    with pytest.raises(InvalidArgumentError, match="candidate list is empty"):
        mech.report_noisy_max({}, sensitivity=1, epsilon=1)


def test_exponential_returns_keys_for_a_mapping() -> None:
    choice = mech.exponential({"a": 0, "b": 100}, sensitivity=1, epsilon=1, source=SeededSource(14))
    assert choice == "b"


def test_exponential_rejects_non_finite_scores() -> None:
    with pytest.raises(InvalidArgumentError, match="score of candidate 1 must be finite, got nan"):
        mech.exponential([1.0, float("nan")], sensitivity=1, epsilon=1)


def test_randomized_response_rejects_unknown_values_and_bad_categories() -> None:
    with pytest.raises(InvalidArgumentError, match="'z' is not one of the categories"):
        mech.randomized_response(["a", "z"], categories=["a", "b"], epsilon=1)
    with pytest.raises(InvalidArgumentError, match="at least two distinct values"):
        mech.randomized_response(["a"], categories=["a", "a"], epsilon=1)


def test_randomized_response_keeps_shape_and_reports_loss() -> None:
    r = mech.randomized_response(
        [["a", "b"], ["c", "a"]], categories=["a", "b", "c"], epsilon=2, source=SeededSource(15)
    )
    assert r.value.shape == (2, 2)
    assert set(r.value.ravel()) <= {"a", "b", "c"}
    assert r.loss == veil.Budget(epsilon=2)
    with pytest.raises(InvalidArgumentError, match="no additive noise"):
        r.error_bar()


def test_error_bar_rejects_a_bad_level() -> None:
    r = mech.laplace(1.0, sensitivity=1, epsilon=1, source=SeededSource(16))
    with pytest.raises(InvalidArgumentError, match=r"level must lie in \(0, 1\)"):
        r.error_bar(1.5)


def test_values_too_large_for_the_grid_raise() -> None:
    with pytest.raises(InvalidArgumentError, match="too large for the noise grid"):
        mech.laplace(1e30, sensitivity=1e-6, epsilon=1)


def test_values_beyond_float_range_on_the_grid_raise_a_user_error() -> None:
    with pytest.raises(InvalidArgumentError, match="clamp the data to tighter bounds"):
        mech.laplace(1e308, sensitivity=Fraction(1, 10**300), epsilon=1)


def test_object_arrays_may_mix_numpy_and_python_numbers() -> None:
    values = np.array([np.int64(3), Fraction(1, 2), np.float32(0.25)], dtype=object)
    r = mech.laplace(values, sensitivity=1, epsilon=1, source=SeededSource(17))
    assert r.value.shape == (3,)


@pytest.mark.parametrize("value", [2**70, 2**62, 1e19])
def test_discrete_mechanisms_refuse_integers_that_could_overflow(value: Any) -> None:
    with pytest.raises(InvalidArgumentError, match="magnitude below 2\\^61"):
        mech.discrete_laplace(value, sensitivity=1, epsilon=1)


def test_exponential_accepts_numpy_scores() -> None:
    scores = list(np.array([0, 0, 1000], dtype=np.int64))
    assert mech.exponential(scores, sensitivity=1, epsilon=1, source=SeededSource(18)) == 2
    arr = np.array([0.5, 2000.25])
    assert mech.report_noisy_max(arr, sensitivity=1, epsilon=1, source=SeededSource(19)) == 1
