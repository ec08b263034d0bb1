"""The privacy invariant refuses every tampered compiled aggregation (``veil.compile.verify``)."""

from __future__ import annotations

import dataclasses
from fractions import Fraction
from functools import partial

import pytest

import support
from support import DELTA, people
from veil.accounting import Budget
from veil.compile import check_loss, recompute_loss
from veil.errors import PrivacyInvariantError
from veil.plan import (
    Aggregate,
    AggregateCall,
    Contribution,
    GroupKey,
)

ONE = Contribution()
PUBLIC = (GroupKey("state", domain=("CA", "NY")),)
FIFTY = (GroupKey("state", domain=tuple(f"S{i}" for i in range(50))),)


compiled = partial(
    support.compiled,
    aggregates=(AggregateCall("n", "count"), AggregateCall("m", "avg", "income")),
    table=people("user_id", "state", "income"),
    contribution=ONE,
)


def charged(agg: Aggregate) -> Budget:
    if agg.budget is None:
        raise AssertionError("a compiled aggregation carries its charge")
    return agg.budget


def test_an_aggregation_without_measurements_is_refused() -> None:
    agg = dataclasses.replace(compiled(budget=Budget(epsilon=1, delta=DELTA)), measurements=())
    with pytest.raises(PrivacyInvariantError, match="no measurements to account for"):
        recompute_loss(agg, Budget(epsilon=1, delta=DELTA))


def test_a_tampered_sensitivity_is_refused_even_with_the_same_scale() -> None:
    agg = compiled(budget=Budget(epsilon=1, delta=DELTA))
    count = next(m for m in agg.measurements if m.name == "count")
    doubled = dataclasses.replace(count, sensitivity=count.sensitivity * 2)
    ms = tuple(doubled if m is count else m for m in agg.measurements)
    with pytest.raises(PrivacyInvariantError, match="'count' is calibrated to sensitivity 2"):
        recompute_loss(dataclasses.replace(agg, measurements=ms), charged(agg))


def test_selection_on_a_count_with_other_noise_is_refused() -> None:
    agg = compiled(budget=Budget(epsilon=1, delta=DELTA))
    assert agg.selection is not None
    quieter = dataclasses.replace(agg.selection, scale=agg.selection.scale / 2)
    with pytest.raises(PrivacyInvariantError, match="does not threshold the noisy count"):
        recompute_loss(dataclasses.replace(agg, selection=quieter), charged(agg))


def test_selection_with_another_mechanism_than_the_count_is_refused() -> None:
    agg = compiled(budget=Budget(epsilon=1, delta=DELTA))
    assert agg.selection is not None
    other = dataclasses.replace(agg.selection, mechanism="discrete_gaussian")
    with pytest.raises(PrivacyInvariantError, match="does not threshold the noisy count"):
        recompute_loss(dataclasses.replace(agg, selection=other), charged(agg))


def test_selection_without_any_count_measurement_is_refused() -> None:
    agg = compiled(budget=Budget(epsilon=1, delta=DELTA))
    sums = tuple(m for m in agg.measurements if m.statistic not in ("count", "count_units"))
    assert sums  # the avg's centred sum stays
    with pytest.raises(PrivacyInvariantError, match="does not threshold the noisy count"):
        recompute_loss(dataclasses.replace(agg, measurements=sums), charged(agg))


def test_a_threshold_just_below_what_delta_needs_is_refused() -> None:
    agg = compiled(budget=Budget(epsilon=1, delta=DELTA))
    assert agg.selection is not None
    lower = dataclasses.replace(agg.selection, threshold=agg.selection.threshold - 1)
    with pytest.raises(PrivacyInvariantError, match=r"is below the .* that δ=1e-06 requires"):
        recompute_loss(dataclasses.replace(agg, selection=lower), charged(agg))


def test_a_selection_delta_raised_after_compiling_is_refused() -> None:
    # more δ lowers the threshold δ needs, but the charge was for the compiled δ
    agg = compiled(budget=Budget(epsilon=1, delta=DELTA))
    assert agg.selection is not None
    smaller = dataclasses.replace(agg.selection, budget=Budget(epsilon=0, delta=DELTA / 10**6))
    with pytest.raises(PrivacyInvariantError, match="is below"):
        recompute_loss(dataclasses.replace(agg, selection=smaller), charged(agg))


def test_unknown_keys_released_without_selection_are_refused_under_zcdp_too() -> None:
    agg = compiled(budget=Budget(epsilon=1, delta=DELTA), contribution=Contribution(50, 1))
    with pytest.raises(PrivacyInvariantError, match="unknown group keys would be released"):
        recompute_loss(dataclasses.replace(agg, selection=None), Budget(rho=1))


def test_gaussian_noise_with_no_delta_left_after_selection_is_refused() -> None:
    agg = compiled(budget=Budget(epsilon=1, delta=DELTA), contribution=Contribution(50, 1))
    assert {m.mechanism for m in agg.measurements} == {"discrete_gaussian"}
    assert agg.selection is not None
    all_of_it = Budget(epsilon=1, delta=agg.selection.budget.delta)
    with pytest.raises(PrivacyInvariantError, match="no δ is left for the zCDP conversion"):
        recompute_loss(agg, all_of_it)


def test_gaussian_noise_charged_without_delta_is_refused() -> None:
    agg = compiled(
        budget=Budget(epsilon=1, delta=DELTA), contribution=Contribution(50, 1), keys=FIFTY
    )
    assert agg.selection is None
    assert {m.mechanism for m in agg.measurements} == {"discrete_gaussian"}
    with pytest.raises(PrivacyInvariantError, match="no δ is left"):
        recompute_loss(agg, Budget(epsilon=1))


def test_a_zcdp_charge_is_recomputed_as_rho() -> None:
    agg = compiled(budget=Budget(rho=Fraction(1, 2)), keys=PUBLIC)
    assert charged(agg) == Budget(rho=Fraction(1, 2))
    assert check_loss(agg, charged(agg)) == Budget(rho=Fraction(1, 2))


def test_a_pure_plan_with_public_keys_costs_no_delta() -> None:
    agg = compiled(budget=Budget(epsilon=1, delta=DELTA), keys=PUBLIC)
    assert {m.mechanism for m in agg.measurements} == {"discrete_laplace"}
    assert recompute_loss(agg, charged(agg)) == Budget(epsilon=1)


def test_a_pure_plan_with_selection_costs_its_delta() -> None:
    agg = compiled(budget=Budget(epsilon=1, delta=DELTA))
    assert recompute_loss(agg, charged(agg)) == Budget(epsilon=1, delta=DELTA)
