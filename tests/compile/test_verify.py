"""The privacy invariant: the loss recomputed from the built mechanisms must equal the charge."""

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

ONE = Contribution(1, 1)
PUBLIC = (GroupKey("state", domain=("CA", "NY")),)


compiled = partial(
    support.compiled,
    aggregates=(AggregateCall("n", "count"), AggregateCall("m", "avg", "income")),
    table=people("user_id", "state", "income"),
    contribution=ONE,
)


def with_measurement(agg: Aggregate, name: str, **changes: object) -> Aggregate:
    ms = tuple(
        dataclasses.replace(m, **changes) if m.name == name else m  # type: ignore[arg-type]
        for m in agg.measurements
    )
    return dataclasses.replace(agg, measurements=ms)


def test_a_compiled_plan_passes_and_its_loss_is_the_charge() -> None:
    agg = compiled()
    assert agg.budget == Budget(epsilon=1, delta=DELTA)
    assert check_loss(agg, agg.budget) == agg.budget


def test_a_gaussian_plan_passes_too() -> None:
    agg = compiled(contribution=Contribution(50, 1))
    assert {m.mechanism for m in agg.measurements} == {"discrete_gaussian"}
    assert agg.budget is not None
    assert check_loss(agg, agg.budget) == agg.budget


def test_less_noise_than_budgeted_is_caught() -> None:
    agg = compiled(keys=PUBLIC)
    count = next(m for m in agg.measurements if m.name == "count")
    tampered = with_measurement(agg, "count", scale=count.scale / 2)
    assert agg.budget is not None
    with pytest.raises(PrivacyInvariantError, match="nothing is released"):
        check_loss(tampered, agg.budget)


def test_a_measurement_claiming_a_smaller_sensitivity_is_caught() -> None:
    agg = compiled()
    tampered = with_measurement(agg, "sum(income)", sensitivity=Fraction(1), scale=Fraction(1))
    assert agg.budget is not None
    with pytest.raises(PrivacyInvariantError, match="calibrated to sensitivity 1"):
        check_loss(tampered, agg.budget)


def test_loosening_contribution_limits_after_calibration_is_caught() -> None:
    agg = compiled()
    tampered = dataclasses.replace(agg, contribution=Contribution(1, 5))
    assert agg.budget is not None
    with pytest.raises(PrivacyInvariantError, match="bounds and contribution limits give"):
        check_loss(tampered, agg.budget)


def test_a_lowered_selection_threshold_is_caught() -> None:
    agg = compiled()
    assert agg.selection is not None
    tampered = dataclasses.replace(
        agg, selection=dataclasses.replace(agg.selection, threshold=Fraction(2))
    )
    assert agg.budget is not None
    with pytest.raises(PrivacyInvariantError, match="threshold 2 is below"):
        check_loss(tampered, agg.budget)


def test_unknown_keys_without_selection_are_caught() -> None:
    agg = compiled()
    tampered = dataclasses.replace(agg, selection=None)
    assert agg.budget is not None
    with pytest.raises(PrivacyInvariantError, match="without selection"):
        recompute_loss(tampered, agg.budget)


def test_a_charge_smaller_than_the_mechanisms_cost_is_caught() -> None:
    agg = compiled(keys=PUBLIC, budget=Budget(epsilon=1))
    with pytest.raises(PrivacyInvariantError, match=r"cost ε=1, but ε=0\.5 was charged"):
        check_loss(agg, Budget(epsilon="0.5"))
