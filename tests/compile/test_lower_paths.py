"""Lowering paths: PostgreSQL's pure conditions, exact sums, the salt and key transport."""

from __future__ import annotations

from fractions import Fraction
from functools import partial

import pytest

import support
from support import people
from veil.compile import dialect, lower, to_sql
from veil.errors import InternalError, UnsupportedQueryError
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    GroupKey,
)

PEOPLE = people("user_id", "state", "age", "income", "born")
POSTGRES = dialect("postgres")
AVG = (AggregateCall("m", "avg", "income"),)


compiled = partial(support.compiled, keys=(GroupKey("state", domain=("CA", "NY")),), table=PEOPLE)


def postgres_sql(agg: Aggregate, **options: bool) -> str:
    return to_sql(lower(agg, POSTGRES, salt=3, **options).main, "postgres")


# ── PostgreSQL: only conditions that cannot raise on any value ──────────────────────────────


@pytest.mark.parametrize(
    "predicate",
    [
        "age >= 18 AND state IN ('CA', 'NY')",
        "NOT (age BETWEEN 18 AND 65) OR age IS NULL",
        "LOWER(state) LIKE 'c%'",
        "CAST(income AS TEXT) = '1.5'",  # every value has a text form
        "age = user_id",  # two integer columns: no implicit cast
        "COALESCE(age, 0) > 3 - 1",  # a constant sub-tree is evaluated while planning
        "CASE WHEN age > 3 THEN 1 ELSE 0 END = 1",  # results are constants
    ],
)
def test_postgres_keeps_a_pure_condition_as_it_is(predicate: str) -> None:
    sql = postgres_sql(compiled(predicate=predicate))
    assert "TRY" not in sql
    where = sql[sql.index("WHERE") : sql.index("__bounded")]
    assert where.startswith("WHERE (")  # parenthesised, not rewritten


@pytest.mark.parametrize(
    ("predicate", "what"),
    [
        ("age + 1 > 3", r"ADD \(\"age\" \+ 1\)"),
        ("income / 2 > 3", "DIV"),
        ("CAST(state AS INT) = 3", "CAST"),
        ("age > ABS(-3)", r"ABS \(ABS\(-3\)\)"),
        ("state LIKE state", r'the pattern "state"'),
        ("state LIKE 'a!%' ESCAPE '!'", "ESCAPE"),
        ("state LIKE 'a\\'", "the pattern"),
        ("CASE WHEN age > 3 THEN age ELSE 0 END > 5", "a CASE whose result reads a column"),
        ("COALESCE(CASE WHEN age > 1 THEN state END, 'x') = 'y'", "a CASE whose result"),
        ("income > age", r"comparing two columns \(\"income\" > \"age\"\)"),
        ("state = CAST(age AS TEXT)", "comparing two columns"),
        ("born < born", "comparing two columns"),
    ],
)
def test_postgres_refuses_a_condition_that_could_raise_on_some_row(
    predicate: str, what: str
) -> None:
    agg = compiled(predicate=predicate)
    with pytest.raises(
        UnsupportedQueryError, match=rf"{what}.* in WHERE could fail on some rows on postgres"
    ):
        lower(agg, POSTGRES, salt=1)


def test_the_same_conditions_are_made_total_where_the_engine_has_try() -> None:
    sql = to_sql(lower(compiled(predicate="age + 1 > 3"), dialect("duckdb"), salt=1).main, "duckdb")
    assert 'TRY("age" + 1 > 3)' in sql


def test_spark_makes_casts_and_divisions_total_by_their_try_forms() -> None:
    agg = compiled(predicate="CAST(state AS INT) = 3 AND income / 2 > 3")
    sql = to_sql(lower(agg, dialect("spark"), salt=1).main, "spark")
    assert "TRY_CAST(`state` AS INT) = 3" in sql
    assert "TRY_DIVIDE(`income`, 2) > 3" in sql


# ── PostgreSQL: numbers ───────────────────────────────────────────────────────────────────────


def test_postgres_reads_a_real_column_without_a_cast_that_could_fail() -> None:
    sql = postgres_sql(compiled(aggregates=AVG))
    # every constant is an exact NUMERIC: the largest double and the smallest subnormal in
    # full (tests/engines/test_postgres_numeric_extremes.py runs the mapping on the server)
    top = str(2**1024 - 2**971)
    tiny = f"{5**1074}e-1074"
    assert (
        "CASE WHEN \"income\" = 'NaN' THEN CAST('NaN' AS DOUBLE PRECISION) "
        f'WHEN "income" > {top} THEN CASE WHEN "income" - {top} < {2**970} THEN '
        "CAST(\"income\" AS DOUBLE PRECISION) ELSE CAST('Infinity' AS DOUBLE PRECISION) END"
    ) in sql
    assert f'WHEN "income" > -{tiny} AND "income" < {tiny} AND "income" <> 0 THEN' in sql
    # NaN equals itself in PostgreSQL: the NULL rule compares with the NaN literal
    assert "= CAST('NaN' AS DOUBLE PRECISION))" in sql


def test_postgres_writes_a_centred_value_below_half_a_step_as_zero() -> None:
    sql = postgres_sql(compiled(aggregates=AVG))
    # width 50 → step 2^-24: |clamp(x) − 50| < 2^-25 is 0, never an underflowing product
    assert 'CASE WHEN ABS(LEAST(GREATEST("__x0", 0), 100) - 50) < 2.9802322387695312e-08' in sql


def test_exact_sums_accumulate_in_the_dialects_exact_type() -> None:
    agg = compiled(aggregates=AVG)
    # NUMERIC, which sqlglot writes as DECIMAL for PostgreSQL
    assert "AS DECIMAL))" not in postgres_sql(agg)
    assert "AS BIGINT) AS DECIMAL))" in postgres_sql(agg, exact_sums=True)
    spark = to_sql(lower(agg, dialect("spark"), salt=1, exact_sums=True).main, "spark")
    assert "AS DECIMAL(38, 0)))" in spark


def test_postgres_lowers_a_quantile_of_a_column_bounded_to_a_tenth() -> None:
    agg = compiled(
        aggregates=(AggregateCall("med", "quantile", "income", Fraction(1, 2)),),
        bounds=(ColumnBounds("income", 0, Fraction(1, 10)),),
    )
    lowered = lower(agg, POSTGRES, salt=1)
    assert len(lowered.quantiles) == 1


def test_a_quantile_with_a_dyadic_step_lowers_on_postgres() -> None:
    agg = compiled(aggregates=(AggregateCall("med", "quantile", "income", Fraction(1, 2)),))
    (name, tree), *_ = lower(agg, POSTGRES, salt=1).quantiles
    assert name == "quantile(income, 1/2)"
    assert 'AS BIGINT) AS "__b"' in to_sql(tree, "postgres")


# ── the salt and keys ────────────────────────────────────────────────────────────────────────


@pytest.mark.parametrize("salt", [-1, 2**63])
def test_a_salt_outside_63_bits_is_an_internal_error(salt: int) -> None:
    with pytest.raises(InternalError, match="the bounding salt must be a 63-bit"):
        lower(compiled(), dialect("duckdb"), salt=salt)


def test_the_largest_salt_is_written_exactly() -> None:
    sql = to_sql(lower(compiled(), dialect("duckdb"), salt=2**63 - 1).main, "duckdb")
    assert f"HASH({2**63 - 1}, " in sql


def test_without_a_salt_the_hash_reads_a_placeholder() -> None:
    sql = to_sql(lower(compiled(), POSTGRES, salt=None).main, "postgres")
    assert "HASHTEXTEXTENDED(CAST(ROW(" in sql
    assert "AS TEXT), %(salt)s)" in sql


def test_a_public_key_of_a_text_type_travels_as_its_index() -> None:
    agg = compiled(keys=(GroupKey("income", domain=(1.5, None)),))
    sql = to_sql(lower(agg, dialect("duckdb"), salt=1).main, "duckdb")
    assert 'CASE WHEN "income" = 1.5e0 THEN 0 WHEN "income" IS NULL THEN 1 END' in sql
    assert '("income" IN (1.5e0) OR "income" IS NULL)' in sql


def test_a_key_of_unknown_values_of_a_text_type_is_cast_before_grouping() -> None:
    agg = compiled(keys=(GroupKey("born"),))
    sql = to_sql(lower(agg, POSTGRES, salt=1).main, "postgres")
    assert 'CAST("born" AS TEXT) AS "__k0"' in sql
