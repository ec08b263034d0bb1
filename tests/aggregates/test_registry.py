"""The aggregate registry: every kind is complete, and an unknown or incomplete aggregate fails
before anything is charged."""

from __future__ import annotations

from collections.abc import Iterator
from fractions import Fraction

import pandas as pd
import pytest

import veil.aggregates as registry
from veil import Budget, Session
from veil.aggregates.base import AggregateKind, Call, Expected, Group, Read
from veil.errors import InternalError, InvalidArgumentError, UnsupportedQueryError
from veil.noise.families import MECHANISMS, family, mechanism_of
from veil.plan.nodes import AggregateCall, Measurement


def test_every_registered_kind_reads_at_least_one_statistic_and_has_sql() -> None:
    names = [k.name for k in registry.kinds()]
    assert names[:2] == ["count", "count_distinct"]
    assert {"sum", "avg", "variance", "stddev", "var_pop", "stddev_pop", "quantile"} <= set(names)
    for k in registry.kinds():
        assert k.sql
        assert k.reads(Call("x", Fraction(1, 2), 1))


class _Half(AggregateKind):  # no estimate, no error bar: half-added
    name = "half"
    sql = ("HALF",)

    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("count", "count"),)


def test_a_half_added_kind_is_refused_when_it_is_registered() -> None:
    with pytest.raises(InternalError, match=r"_Half does not define .*estimate"):
        registry.register(_Half)
    with pytest.raises(UnsupportedQueryError, match="'half' is not supported"):
        registry.kind("half")


def test_two_kinds_cannot_claim_one_name() -> None:
    class Again(AggregateKind):
        name = "sum"
        sql = ("SUM",)

        def reads(self, call: Call) -> tuple[Read, ...]:
            return (Read("count", "count"),)

        def estimate(self, g: Group) -> int:
            return 0

        def halfwidth(self, g: Group, value: float, level: float) -> None:
            return None

        def expected(self, e: Expected, level: float) -> str:
            return ""

    with pytest.raises(InternalError, match="two aggregate kinds are called 'sum'"):
        registry.register(Again)


def test_an_unknown_aggregate_fails_when_the_plan_is_built_with_a_suggestion() -> None:
    with pytest.raises(UnsupportedQueryError, match="'varpop' is not supported; did you mean"):
        AggregateCall("v", "varpop", "x")


def test_an_unknown_aggregate_is_refused_before_anything_is_charged() -> None:
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0]})
    with Session.local({"t": df}, bounds={"x": (0, 5)}, budget=Budget(epsilon=1)) as s:
        before = s.remaining()
        with pytest.raises(UnsupportedQueryError):
            s.query("t").agg("kurtosis", "x").run(epsilon=0.5)
        with pytest.raises(UnsupportedQueryError, match="KURTOSIS is not supported"):
            s.sql("SELECT KURTOSIS(x) FROM t", epsilon=0.5)
        assert s.remaining() == before


def test_every_mechanism_name_has_exactly_one_family() -> None:
    assert {family(mechanism_of(m)).name for m in MECHANISMS} == set(MECHANISMS)
    with pytest.raises(InternalError, match="no noise family 'laplace'"):
        mechanism_of("laplace")


def test_a_measurement_with_an_unknown_mechanism_cannot_be_built() -> None:
    with pytest.raises(InvalidArgumentError, match="no mechanism 'gaussian'"):
        Measurement(
            name="count",
            statistic="count",
            mechanism="gaussian",  # type: ignore[arg-type]
            budget=Budget(epsilon=1),
            sensitivity=Fraction(1),
            scale=Fraction(1),
        )


def test_the_exponential_family_is_not_additive_noise() -> None:
    exp_family = family("exponential")
    assert not exp_family.additive
    with pytest.raises(InternalError):
        exp_family.halfwidth(Fraction(1), 0.95)
    with pytest.raises(InternalError):
        exp_family.threshold(Fraction(1), groups=1, rows=1, delta=Fraction(1, 10**6))


class _Inconsistent(AggregateKind):
    """Reads a sum of squares that its budget split never asks the compiler to measure."""

    name = "inconsistent_spread"
    sql = ("INCONSISTENT_SPREAD",)

    def reads(self, call: Call) -> tuple[Read, ...]:
        return (Read("squares", "sum_squares"), Read("sum", "sum"), Read("count", "count"))

    def split(self, call: Call, weight: float, moments: object) -> dict[str, float]:  # type: ignore[override]
        return {"sum": weight, "count": weight}

    def estimate(self, g: Group) -> float:
        return float(g.value("squares"))

    def halfwidth(self, g: Group, value: float, level: float) -> None:
        return None

    def expected(self, e: Expected, level: float) -> str:
        return ""


@pytest.fixture
def inconsistent() -> Iterator[None]:
    registry.register(_Inconsistent)
    try:
        yield
    finally:
        registry._KINDS.pop(_Inconsistent.name)


@pytest.mark.usefixtures("inconsistent")
def test_a_kind_reading_an_unmeasured_statistic_fails_before_the_charge() -> None:
    df = pd.DataFrame({"x": [1.0, 2.0, 3.0]})
    with Session.local({"t": df}, bounds={"x": (0, 5)}, budget=Budget(epsilon=1)) as s:
        with pytest.raises(InternalError, match="reads sum_squares, which is not measured"):
            s.query("t").agg("inconsistent_spread", "x").run(epsilon=0.5)
        with pytest.raises(InternalError, match="not measured"):
            s.query("t").agg("inconsistent_spread", "x").explain(epsilon=0.5)
        assert s.remaining() == Budget(epsilon=1)
