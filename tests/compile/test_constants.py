"""The numbers the lowering writes: the supported range, exact grids and exact literals."""

from __future__ import annotations

import math
from fractions import Fraction

import duckdb
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from veil.compile.constants import (
    MAX_MAGNITUDE,
    MIN_WIDTH,
    check_bounds,
    check_edges,
    fixed_point,
    literal,
    show,
)
from veil.errors import BoundsError, InternalError
from veil.plan import ColumnBounds, GroupKey


@pytest.mark.parametrize(
    ("lower", "upper", "message"),
    [
        (0, 1e-300, r"bounds for 'x' are \(0, 1e-300\): the upper bound must exceed"),
        (0, 5e-324, r"\(0, 5e-324\): the upper bound must exceed the lower one by at least 1e-100"),
        (5, 5, r"bounds for 'x' are \(5, 5\): the upper bound must exceed"),
        (1.0, 1.0 + 1e-17, r"be a different double"),
        (0, 1e300, r"\(0, 1e\+300\): veil supports bounds within ±1e100"),
        (-1e308, 1e308, r"veil supports bounds within ±1e100"),
    ],
)
def test_bounds_outside_the_supported_range_are_refused_naming_the_values(
    lower: float, upper: float, message: str
) -> None:
    with pytest.raises(BoundsError, match=message):
        check_bounds(ColumnBounds("x", lower, upper))


@pytest.mark.parametrize(
    ("lower", "upper"),
    [(0, 1), (-1e100, 1e100), (0, 1e-100), (1e16, 1e16 + 2), (1.0, math.nextafter(1.0, 2))],
)
def test_bounds_inside_the_range_are_accepted(lower: float, upper: float) -> None:
    check_bounds(ColumnBounds("x", lower, upper))


def test_histogram_edges_must_be_distinct_doubles_within_the_range() -> None:
    with pytest.raises(BoundsError, match="same double"):
        check_edges(GroupKey("x", edges=(0, Fraction(1), Fraction(1) + Fraction(1, 10**30))))
    with pytest.raises(BoundsError, match="outside the supported range ±1e100"):
        check_edges(GroupKey("x", edges=(0, 1e200)))
    check_edges(GroupKey("x", edges=(0, 18, 65, 120)))


widths = st.fractions(min_value=MIN_WIDTH, max_value=2 * MAX_MAGNITUDE).filter(lambda w: w > 0)


@given(width=widths, limit=st.sampled_from([1, 2, 3, 1000, 1 << 30]))
def test_the_fixed_point_grid_is_a_power_of_two_that_uses_the_whole_limit(
    width: Fraction, limit: int
) -> None:
    step, n = fixed_point(width, limit)
    assert step.numerator & (step.numerator - 1) == 0  # a power of two (or its inverse)
    assert step.denominator & (step.denominator - 1) == 0
    assert (n - 1) * step < width <= n * step
    assert n <= limit
    assert width / (step / 2) > limit  # the smallest such power
    assert math.isfinite(float(1 / step))
    assert Fraction(float(1 / step)) == 1 / step


def test_a_grid_for_a_non_positive_width_is_a_bug() -> None:
    with pytest.raises(InternalError, match="no fixed-point grid"):
        fixed_point(Fraction(0), 10)


finite = st.floats(allow_nan=False, allow_infinity=False)


@settings(max_examples=300)
@given(value=finite)
def test_every_double_literal_reads_back_in_duckdb_as_exactly_that_double(value: float) -> None:
    text = literal(value).sql(dialect="duckdb")
    ((kind, back),) = duckdb.sql(f"SELECT typeof({text}), {text}").fetchall()
    assert kind == "DOUBLE"
    assert back == value
    assert math.copysign(1, back) == math.copysign(1, value)


@given(value=st.integers(min_value=-(1 << 63), max_value=(1 << 63) - 1))
def test_64_bit_integers_are_integer_literals(value: int) -> None:
    ((back,),) = duckdb.sql(f"SELECT {literal(value).sql(dialect='duckdb')}").fetchall()
    assert back == value


@pytest.mark.parametrize("value", [2**64 - 1, -(2**100), 10**38 - 1])
def test_integers_up_to_10_to_the_38_are_written_exactly(value: int) -> None:
    text = literal(value).sql(dialect="duckdb")
    ((back, equal_to_neighbour),) = duckdb.sql(
        f"SELECT {text}, ({text}) = ({value - 1000})::HUGEINT"
    ).fetchall()
    assert back == value
    assert equal_to_neighbour is False  # a rounded double would equal it


def test_integers_beyond_10_to_the_38_and_fractions_become_the_nearest_double() -> None:
    assert literal(10**100).sql(dialect="duckdb") == "1e+100"
    assert literal(Fraction(1, 3)).sql(dialect="duckdb") == "0.3333333333333333e0"
    with pytest.raises(InternalError, match="beyond the double range"):
        literal(10**400)


@pytest.mark.parametrize(
    ("value", "text"),
    [
        (Fraction(5), "5"),
        (Fraction(1, 10), "0.1"),
        (Fraction("1e300"), "1e+300"),
        (Fraction(1, 3), "1/3"),
        (Fraction(10) ** 400, "≈1e400"),
        (Fraction(1, 10**400), "≈1e-400"),
    ],
)
def test_values_are_shown_as_a_person_wrote_them(value: Fraction, text: str) -> None:
    assert show(value) == text


@pytest.mark.spark
def test_double_literals_read_back_in_spark_as_exactly_those_doubles() -> None:
    from spark_support import spark_session

    spark = spark_session()
    values = [0.1, 1 / 3, 1e-300, 5e-324, 1.7976931348623157e308, -2.5e16, -0.0, 1e100, 16777216.0]
    exact = spark.sql(f"SELECT {literal(2**64 - 1).sql(dialect='spark')} AS u").first()
    assert int(exact[0]) == 2**64 - 1
    texts = [literal(v).sql(dialect="spark") for v in values]
    row = spark.sql("SELECT " + ", ".join(f"{t} AS c{i}" for i, t in enumerate(texts))).first()
    schema = spark.sql("SELECT " + ", ".join(f"{t} AS c{i}" for i, t in enumerate(texts))).schema
    assert {f.dataType.typeName() for f in schema.fields} == {"double"}
    for i, v in enumerate(values):
        assert row[i] == v, (texts[i], row[i])
        assert math.copysign(1, row[i]) == math.copysign(1, v), (texts[i], row[i])
