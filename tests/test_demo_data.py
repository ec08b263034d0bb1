"""The demo's synthetic table: deterministic, realistic in shape, within documented ranges."""

from __future__ import annotations

import duckdb
import pyarrow as pa
import pytest

from veil.demo import DEMO_QUERIES, generate_visits
from veil.errors import InvalidArgumentError


@pytest.fixture(scope="module")
def visits() -> pa.Table:
    return generate_visits(5_000)


def one(table: pa.Table, sql: str) -> tuple[object, ...]:
    con = duckdb.connect()
    try:
        con.register("visits", table)
        rows = con.sql(sql).fetchall()
    finally:
        con.close()
    return tuple(rows[0])


def every(table: pa.Table, sql: str) -> list[tuple[object, ...]]:
    con = duckdb.connect()
    try:
        con.register("visits", table)
        return [tuple(r) for r in con.sql(sql).fetchall()]
    finally:
        con.close()


def test_the_table_is_the_same_on_every_call(visits: pa.Table) -> None:
    assert generate_visits(5_000).equals(visits)


def test_the_schema_is_as_documented(visits: pa.Table) -> None:
    assert visits.schema.names == [
        "visit_id",
        "patient_id",
        "region",
        "sex",
        "age",
        "year",
        "diagnosis",
        "length_of_stay",
        "cost",
    ]
    assert pa.types.is_integer(visits.schema.field("patient_id").type)
    assert pa.types.is_floating(visits.schema.field("cost").type)


def test_values_stay_in_their_documented_ranges(visits: pa.Table) -> None:
    row = one(
        visits,
        """SELECT min(age), max(age), min(year), max(year), min(length_of_stay),
                  max(length_of_stay), min(cost), max(cost), count(DISTINCT region),
                  count(DISTINCT diagnosis), count(DISTINCT sex), count(DISTINCT visit_id),
                  count(*)
           FROM visits""",
    )
    (a0, a1, y0, y1, s0, s1, c0, c1, regions, diagnoses, sexes, ids, n) = row
    assert 0 <= a0 <= a1 <= 95
    assert (y0, y1) == (2022, 2024)
    assert 0 <= s0 <= s1 <= 60
    assert 0 < c0 <= c1 <= 250_000
    assert (regions, diagnoses, sexes) == (8, 6, 2)
    assert ids == n


def test_each_patient_has_one_to_six_visits_and_a_fixed_region(visits: pa.Table) -> None:
    row = one(
        visits,
        """SELECT min(n), max(n), max(regions), count(*) FROM (
             SELECT patient_id, count(*) AS n, count(DISTINCT region) AS regions
             FROM visits GROUP BY patient_id)""",
    )
    assert row == (1, 6, 1, 5_000)


def test_categories_are_skewed_and_cost_is_right_skewed(visits: pa.Table) -> None:
    shares = every(visits, "SELECT count(*) FROM visits GROUP BY region ORDER BY 1 DESC")
    assert shares[0][0] > 4 * shares[-1][0]  # type: ignore[operator]
    mean, median = one(visits, "SELECT avg(cost), median(cost) FROM visits")
    assert mean > 1.2 * median  # type: ignore[operator]


@pytest.mark.parametrize("bad", [0, -3, 2.5, True, "100"])
def test_a_bad_patient_count_is_refused(bad: object) -> None:
    with pytest.raises(InvalidArgumentError, match="patients must be a positive integer"):
        generate_visits(bad)  # type: ignore[arg-type]


def test_the_demo_queries_fit_in_the_demo_budget() -> None:
    from veil.demo import DEMO_BUDGET_EPSILON

    assert sum(q.epsilon for q in DEMO_QUERIES) <= DEMO_BUDGET_EPSILON
