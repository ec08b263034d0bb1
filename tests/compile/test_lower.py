"""Lowering output: the SQL text for fixed plans and salt, per dialect."""

from __future__ import annotations

from fractions import Fraction
from functools import partial

import pytest
import sqlglot

import support
from support import PEOPLE
from veil.accounting import Budget
from veil.compile import Context, apply_rules, dialect, lower, to_sql
from veil.errors import InternalError, InvalidArgumentError
from veil.plan import (
    Aggregate,
    AggregateCall,
    ColumnBounds,
    Contribution,
    GroupKey,
    aggregate_of,
)

compiled = partial(support.compiled, keys=(GroupKey("state", domain=("CA", "NY")),))


def test_one_row_per_unit_lowers_to_a_single_row_number_window() -> None:
    sql = to_sql(lower(compiled(predicate="age >= 18"), dialect("duckdb"), salt=42).main, "duckdb")
    assert sql == (
        'WITH __rows AS (SELECT "user_id" AS "__unit", "state" AS "__k0" FROM "people" '
        "WHERE TRY(\"age\" >= 18) AND (\"state\" IN ('CA', 'NY'))), "
        '__bounded AS (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "__unit" '
        'ORDER BY HASH(42, HASH(42, "__unit", "__k0"))) AS "__rn" FROM __rows) AS __ranked '
        'WHERE "__rn" <= 1) '
        'SELECT "__k0", COUNT(*) AS "__n" FROM __bounded GROUP BY "__k0"'
    )


def test_general_limits_rank_rows_per_group_and_groups_per_unit() -> None:
    agg = compiled(keys=(GroupKey("state"), GroupKey("age")), contribution=Contribution(2, 3))
    sql = to_sql(lower(agg, dialect("duckdb"), salt=7).main, "duckdb")
    # each unit's first 3 rows per group, then its first 2 groups among those rows: DENSE_RANK
    # gives a group's rows one rank (no DISTINCT pairs, no join back)
    assert sql.startswith(
        'WITH __rows AS (SELECT "user_id" AS "__unit", "state" AS "__k0", "age" AS "__k1" '
        'FROM "people"), __bounded AS (SELECT * FROM (SELECT *, DENSE_RANK() OVER (PARTITION '
        'BY "__unit" ORDER BY HASH(7, HASH(7, "__unit", "__k0", "__k1")), "__k0", "__k1") AS '
        '"__gr" FROM (SELECT * FROM (SELECT *, ROW_NUMBER() OVER (PARTITION BY "__unit", '
        '"__k0", "__k1" ORDER BY HASH(7, HASH(7, "__unit", "__k0", "__k1"))) AS "__rn" FROM '
        '__rows) AS __ranked WHERE "__rn" <= 3) AS __group_rows) AS __groups_ranked '
        'WHERE "__gr" <= 2) '
    )
    assert "JOIN" not in sql


def test_one_row_per_group_ranks_the_groups_by_row_number() -> None:
    agg = compiled(keys=(GroupKey("state"), GroupKey("age")), contribution=Contribution(2, 1))
    sql = to_sql(lower(agg, dialect("duckdb"), salt=7).main, "duckdb")
    # one row per (unit, group) after the row bound: the rows' ROW_NUMBER is the groups' rank
    assert (
        'SELECT *, ROW_NUMBER() OVER (PARTITION BY "__unit" ORDER BY HASH(7, HASH(7, "__unit", '
        '"__k0", "__k1")), "__k0", "__k1") AS "__gr" FROM (SELECT * FROM (SELECT *, '
        'ROW_NUMBER() OVER (PARTITION BY "__unit", "__k0", "__k1" ORDER BY HASH(7, HASH(7, '
        '"__unit", "__k0", "__k1"))) AS "__rn" FROM __rows) AS __ranked WHERE "__rn" <= 1)'
    ) in sql
    assert "DENSE_RANK" not in sql


def test_no_group_rank_when_a_unit_cannot_exceed_max_groups_anyway() -> None:
    agg = compiled(contribution=Contribution(2, 3))  # only two public keys
    sql = to_sql(lower(agg, dialect("duckdb"), salt=7).main, "duckdb")
    assert "__gr" not in sql


def test_row_level_privacy_needs_no_window() -> None:
    sql = to_sql(lower(compiled(unit=None), dialect("duckdb"), salt=1).main, "duckdb")
    assert "ROW_NUMBER" not in sql
    assert "__bounded" not in sql
    # nothing is bounded: the declared states are kept after the grouping, one test per group
    # (the key read through COUNT(*), so that no optimizer moves the test back onto each row)
    assert sql == (
        'WITH __rows AS (SELECT "state" AS "__k0" FROM "people") SELECT "__k0", COUNT(*) AS '
        '"__n" FROM __rows GROUP BY "__k0" HAVING (CASE WHEN COUNT(*) > 0 THEN "__k0" END IN '
        "('CA', 'NY'))"
    )


def test_sums_are_clamped_scaled_by_a_power_of_two_and_clamped_again_before_the_cast() -> None:
    agg = compiled(aggregates=(AggregateCall("m", "avg", "income"),))
    sql = to_sql(lower(agg, dialect("spark"), salt=1).main, "spark")
    # width 50 → step 2^-24 (the smallest power of two with 50/step ≤ 2^30), limit 50·2^24
    assert (
        "SUM(CAST(LEAST(GREATEST(ROUND((LEAST(GREATEST(`__x0`, 0), 100) - 50) * 16777216), "
        "-838860800), 838860800) AS BIGINT))"
    ) in sql
    # DuckDB clamps a column by comparisons (``case_clamps``): the same doubles, fewer cycles
    sql = to_sql(lower(agg, dialect("duckdb"), salt=1).main, "duckdb")
    x = 'CASE WHEN "__x0" < 0 THEN 0 WHEN "__x0" > 100 THEN 100 ELSE "__x0" END'
    assert (
        f"SUM(CAST(LEAST(GREATEST(ROUND(({x} - 50) * 16777216), -838860800), 838860800) AS BIGINT))"
    ) in sql
    assert 'NOT "income" IS NULL AND NOT ISNAN(CAST("income" AS DOUBLE))' in sql


def test_histogram_keys_lower_to_a_bin_index_and_a_range_filter() -> None:
    agg = compiled(keys=(GroupKey("age", edges=(0, 18, 65, 120)),))
    sql = to_sql(lower(agg, dialect("duckdb"), salt=1).main, "duckdb")
    # a binary search over the inner edges: 18 first, then 65 above it (0 and 120: the filter)
    x = 'CAST("age" AS DOUBLE)'
    assert f"CASE WHEN {x} < 18 THEN 0 ELSE CASE WHEN {x} < 65 THEN 1 ELSE 2 END END" in sql
    assert 'CAST("age" AS DOUBLE) BETWEEN 0 AND 120' in sql


def test_quantiles_get_a_bucket_count_statement() -> None:
    agg = compiled(aggregates=(AggregateCall("med", "quantile", "income", Fraction(1, 2)),))
    low = lower(agg, dialect("duckdb"), salt=1)
    assert [name for name, _ in low.quantiles] == ["quantile(income, 1/2)"]
    sql = to_sql(low.quantiles[0][1], "duckdb")
    # the grid starts at the lower bound: the cell is never negative; the column is clamped
    # at the middle of the last cell (100 − 2^-33·100), so the cell needs no clamp of its own
    top = 100 - 100 / 2**33
    assert top == 99.99999998835847
    x = f'CASE WHEN "__x0" < 0 THEN 0 WHEN "__x0" > {top}e0 THEN {top}e0 ELSE "__x0" END'
    assert f"CAST(FLOOR(({x} - 0) * 42949672.96e0) AS BIGINT)" in sql
    assert "LEAST" not in sql
    assert sql.endswith('GROUP BY "__k0", 2')
    spark = to_sql(lower(agg, dialect("spark"), salt=1).quantiles[0][1], "spark")
    assert f"CAST(FLOOR((LEAST(GREATEST(`__x0`, 0), {top}e0) - 0) * 42949672.96e0) AS BIGINT)" in (
        spark
    )


def _ages_and_incomes(*aggregates: AggregateCall) -> Aggregate:
    """``aggregates`` per state, income and age both bounded to [0, 100]."""
    plan = Aggregate(
        PEOPLE,
        keys=(GroupKey("state", domain=("CA", "NY")),),
        aggregates=(AggregateCall("n", "count"), *aggregates),
        bounds=(ColumnBounds("income", 0, 100), ColumnBounds("age", 0, 100)),
    )
    return aggregate_of(
        apply_rules(plan, Context(budget=Budget(epsilon=1), privacy_unit="user_id"))
    )


@pytest.mark.parametrize(("buckets", "arrow"), [(1 << 32, "uint32"), ((1 << 32) + 1, "int64")])
def test_duckdb_lists_a_grid_of_at_most_2_32_cells_in_32_bits_exactly(
    buckets: int, arrow: str
) -> None:
    """The cells of a grid of at most 2^32 come as 32-bit unsigned integers, the last one
    (2^32 − 1, a row at or past the upper bound) included; a finer grid's as 64-bit ones."""
    import duckdb

    median = AggregateCall("med", "quantile", "income", Fraction(1, 2))
    plan = Aggregate(
        PEOPLE,
        keys=(GroupKey("state", domain=("CA", "NY")),),
        aggregates=(AggregateCall("n", "count"), median),
        bounds=(ColumnBounds("income", 0, 100),),
    )
    context = Context(budget=Budget(epsilon=1), privacy_unit="user_id", quantile_buckets=buckets)
    low = lower(aggregate_of(apply_rules(plan, context)), dialect("duckdb"), salt=1)
    assert low.listed == ("__q0",)
    assert low.together is not None
    con = duckdb.connect()
    con.execute(
        "CREATE TABLE people AS SELECT * FROM (VALUES (1, 'CA', 0.0, 30), (2, 'CA', 100.0, 40), "
        "(3, 'NY', 1e300, 50), (4, 'NY', -5.0, 60)) AS t(user_id, state, income, age)"
    )
    table = con.sql(to_sql(low.together, "duckdb")).to_arrow_table()
    assert str(table.schema.field("__q0").type.value_type) == arrow
    columns = table.to_pydict()
    got = {k: sorted(v) for k, v in zip(columns["__k0"], columns["__q0"], strict=True)}
    assert got == {"CA": [0, buckets - 1], "NY": [0, buckets - 1]}


def test_duckdb_lists_a_fine_grids_cells_beside_the_statistics_in_one_aggregation() -> None:
    """On DuckDB the one statement groups the bounded rows once: a fine grid's cells come as a
    list per group beside the statistics (no second branch over the rows); a coarse grid's
    counts per (group, cell) follow by UNION ALL, the list NULL in their rows."""
    median = AggregateCall("med", "quantile", "income", Fraction(1, 2))
    old = AggregateCall("old", "quantile", "age", Fraction(9, 10))
    low = lower(_ages_and_incomes(median, old), dialect("duckdb"), salt=1)
    assert low.cells == (("quantile(age, 9/10)", "__q0"), ("quantile(income, 1/2)", "__q1"))
    assert low.listed == ("__q1",)  # 2^32 cells of income; age's 101 are counted in SQL
    assert low.together is not None
    assert (
        'SELECT "__k0", COUNT(*) AS "__n", CAST(NULL AS BIGINT) AS "__q0", '
        'ARRAY_AGG("__q1") AS "__q1" FROM __celled GROUP BY "__k0" UNION ALL '
        'SELECT "__k0", COUNT(*) AS "__n", "__q0", NULL AS "__q1" FROM __celled '
        'GROUP BY "__k0", "__q0"'
    ) in to_sql(low.together, "duckdb")
    # the listed cells are cast once, from the floored double to 32-bit unsigned integers;
    # the counted ones keep the engine's integer type
    together = to_sql(low.together, "duckdb")
    assert together.count("AS UINTEGER)") == 1
    assert 'AS UINTEGER) AS "__q1"' in together
    assert 'AS BIGINT) AS "__q0"' in together
    alone = lower(_ages_and_incomes(median), dialect("duckdb"), salt=1).together
    assert isinstance(alone, sqlglot.exp.Select)  # one SELECT, one GROUP BY: no UNION ALL
    assert to_sql(alone, "duckdb").endswith(
        'SELECT "__k0", COUNT(*) AS "__n", ARRAY_AGG("__q0") AS "__q0" '
        'FROM __celled GROUP BY "__k0"'
    )
    coarse = lower(_ages_and_incomes(old), dialect("duckdb"), salt=1)
    assert coarse.listed == ()
    assert coarse.together is not None
    assert to_sql(coarse.together, "duckdb").endswith(
        'SELECT "__k0", COUNT(*) AS "__n", CAST(NULL AS BIGINT) AS "__q0" FROM __bounded '
        'GROUP BY "__k0" UNION ALL SELECT "__k0", COUNT(*) AS "__n", "__q0" FROM __celled '
        'GROUP BY "__k0", "__q0"'
    )
    # the GROUPING SETS dialects count every grid's cells in the engine: nothing is listed
    assert lower(_ages_and_incomes(median), dialect("postgres"), salt=1).listed == ()


def test_spark_gets_xxhash64_and_bigint_sums_certified_by_the_session() -> None:
    agg = compiled(
        aggregates=(AggregateCall("s", "sum", "income"),), contribution=Contribution(1, 2)
    )
    sql = to_sql(lower(agg, dialect("spark"), salt=5).main, "spark")
    assert "XXHASH64(5, `__unit`, `__k0`, `__x0`)" in sql
    assert "DECIMAL" not in sql  # BIGINT sums; the session certifies rows·limit < 2^63
    assert dialect("spark").sum_wraps
    assert not dialect("duckdb").sum_wraps  # SUM(BIGINT) is an exact HUGEINT there


def test_lowering_an_uncompiled_plan_is_an_internal_error() -> None:
    plan = Aggregate(PEOPLE, keys=(), aggregates=(AggregateCall("n", "count"),))
    with pytest.raises(InternalError, match="measurements are not built"):
        lower(plan, dialect("duckdb"), salt=1)


def test_unknown_dialect_is_refused() -> None:
    with pytest.raises(InvalidArgumentError, match="no SQL dialect 'oracle'"):
        dialect("oracle")


def test_count_of_a_string_column_only_drops_nulls_and_casts_nothing() -> None:
    agg = compiled(aggregates=(AggregateCall("n", "count", "state"),))
    sql = to_sql(lower(agg, dialect("duckdb"), salt=1).main, "duckdb")
    assert 'NOT "state" IS NULL' in sql
    assert "ISNAN" not in sql
    assert "CAST" not in sql


def test_integer_columns_need_no_nan_check() -> None:
    agg = aggregate_of(
        apply_rules(
            Aggregate(
                PEOPLE,
                keys=(),
                aggregates=(AggregateCall("m", "avg", "age"),),
                bounds=(ColumnBounds("age", 0, 100),),
            ),
            Context(budget=Budget(epsilon=1)),
        )
    )
    sql = to_sql(lower(agg, dialect("duckdb"), salt=1).main, "duckdb")
    assert 'NOT "age" IS NULL' in sql
    assert "ISNAN" not in sql


@pytest.mark.parametrize("before", [False, True])
def test_duckdb_exports_listed_cells_with_64_bit_offsets_and_restores_the_setting(
    before: bool,
) -> None:
    """A statement that lists cells runs with DuckDB's large Arrow buffers, so no number of
    rows can overflow the lists' 32-bit offsets after the data was read (an outcome that
    would depend on the data); the connection's own setting is restored after, on the first
    (bound) and the later (checked) runs alike, and a statement without lists is untouched."""
    import duckdb
    import pyarrow as pa

    from veil.engines.duckdb import DuckDBEngine

    people = pa.table(
        {
            "user_id": list(range(40)),
            "state": ["CA", "NY"] * 20,
            "age": [i % 90 for i in range(40)],
            "income": [float(i) * 2.5 for i in range(40)],
        }
    )
    con = duckdb.connect()
    con.execute(f"SET arrow_large_buffer_size = {'true' if before else 'false'}")
    engine = DuckDBEngine({"people": people}, connection=con)
    median = AggregateCall("med", "quantile", "income", Fraction(1, 2))
    low = lower(_ages_and_incomes(median), dialect("duckdb"), salt=1)
    assert low.listed == ("__q0",)
    assert low.together is not None

    def setting() -> bool:
        ((value,),) = con.execute("SELECT current_setting('arrow_large_buffer_size')").fetchall()
        return bool(value)

    for _ in range(2):
        table = engine.prepare(low.together, salt=1).run(None)
        assert pa.types.is_large_list(table.schema.field("__q0").type)
        assert sum(len(c or ()) for c in table.column("__q0").to_pylist()) == 40  # every row
        assert setting() is before
    plain = lower(_ages_and_incomes(), dialect("duckdb"), salt=1)
    assert engine.prepare(plain.main, salt=1).run(None).num_rows == 2
    assert setting() is before


@pytest.mark.parametrize("engine", ["duckdb", "spark", "postgres"])
def test_quantiles_of_one_column_on_one_grid_share_one_cell_column(engine: str) -> None:
    """MIN, MAX and MEDIAN of income have the same cells: one column, computed, grouped and
    (on DuckDB) listed once; age's quantile keeps its own. Each measurement still names its
    column, and its separate statement is still its own."""
    agg = _ages_and_incomes(
        AggregateCall("lo", "min", "income"),
        AggregateCall("hi", "max", "income"),
        AggregateCall("med", "quantile", "income", Fraction(1, 2)),
        AggregateCall("age_med", "quantile", "age", Fraction(1, 2)),
    )
    low = lower(agg, dialect(engine), salt=1)
    columns = dict(low.cells)
    income = {columns[m.name] for m in agg.measurements if m.column == "income" and m.limit}
    age = {columns[m.name] for m in agg.measurements if m.column == "age" and m.limit}
    assert len(columns) == 4
    assert len(income) == 1
    assert len(age) == 1
    assert income != age
    assert len(low.quantiles) == 4  # one separate statement per measurement, as before
    assert low.together is not None
    sql = to_sql(low.together, engine)
    assert sql.count("42949672.96e0") == 1  # income's cell (a grid of 2^32 over [0, 100]), once
    if engine == "duckdb":
        assert sql.count("ARRAY_AGG") == 1
    else:
        assert sql.count("GROUPING SETS") == 1


@pytest.mark.parametrize("engine", ["duckdb", "spark", "postgres"])
def test_a_modes_counts_ride_in_the_one_statement(engine: str) -> None:
    """A MODE's counts per (group, candidate) are in ``together`` beside the statistics (its
    rows outside the candidates with the cell −1): nothing runs apart, so no second scan."""
    agg = _ages_and_incomes(
        AggregateCall("common_age", "mode", "age"),
        AggregateCall("med", "quantile", "income", Fraction(1, 2)),
    )
    low = lower(agg, dialect(engine), salt=1)
    assert low.together is not None
    assert low.separate == ()
    columns = dict(low.cells)
    (mode,) = [m for m in agg.measurements if m.statistic == "mode"]
    assert low.modes == (columns[mode.name],)
    assert columns[mode.name] not in low.listed
    assert len(set(columns.values())) == 2  # the mode's column and the median's
    assert "COALESCE(" in to_sql(low.together, engine)
