"""SQL → plan: every supported form gives the same plan as the equivalent builder chain."""

from __future__ import annotations

from collections.abc import Callable
from fractions import Fraction

import pyarrow as pa
import pytest
from sqlglot import exp

from support import people
from veil.plan.builder import Query
from veil.plan.canonical import canonical, fingerprint
from veil.plan.nodes import (
    Aggregate,
    Contribution,
    Filter,
    GroupKey,
    Having,
    Limit,
    Plan,
    Project,
    Scan,
    Sort,
    SortKey,
)
from veil.sql import parse, parse_query

PEOPLE = people("user_id", "state", "sex", "age", "income", "hours").columns
TABLES = {"people": PEOPLE}
BOUNDS = {"income": (0, 1_000_000), "hours": (0, 80), "age": (0, 120)}
UNIT = "user_id"


def q() -> Query:
    return Query.over("people", PEOPLE)


def sql_plan(text: str) -> Plan:
    return parse(text, TABLES, privacy_unit=UNIT, bounds=BOUNDS)


def built(query: Query) -> Plan:
    return query.plan(privacy_unit=UNIT, bounds=BOUNDS)


CASES: list[tuple[str, Callable[[], Query]]] = [
    ("SELECT COUNT(*) FROM people", lambda: q().count()),
    ("select count(*) as n from people", lambda: q().count("n")),
    ("SELECT COUNT(1) AS n FROM people", lambda: q().count("n")),
    (
        "SELECT state, COUNT(*) AS n, AVG(income) AS avg_income FROM people GROUP BY state",
        lambda: q().group_by("state").count("n").avg("income", "avg_income"),
    ),
    (
        "SELECT COUNT(*) AS n, state FROM people GROUP BY state",
        lambda: q().group_by("state").count("n").select("n", "state"),
    ),
    (
        "SELECT COUNT(*) AS n FROM people GROUP BY state",
        lambda: q().group_by("state").count("n").select("n"),
    ),
    (
        "SELECT state, sex, SUM(income) FROM people GROUP BY state, sex",
        lambda: q().group_by("state", "sex").sum("income"),
    ),
    (
        "SELECT state AS s, COUNT(*) FROM people GROUP BY state",
        lambda: q().group_by(GroupKey("state", alias="s")).count(),
    ),
    (
        "SELECT COUNT(income), COUNT(DISTINCT user_id) AS users FROM people",
        lambda: q().count(column="income").count_distinct("user_id", "users"),
    ),
    (
        "SELECT SUM(income), AVG(income), VARIANCE(hours), VAR_SAMP(age), STDDEV(hours), "
        "STDDEV_SAMP(income) AS sd FROM people",
        lambda: (
            q()
            .sum("income")
            .avg("income")
            .variance("hours")
            .variance("age")
            .stddev("hours")
            .stddev("income", "sd")
        ),
    ),
    (
        "SELECT MEDIAN(age), MIN(income), MAX(income) FROM people",
        lambda: q().median("age").min("income").max("income"),
    ),
    (
        "SELECT QUANTILE_CONT(income, 0.9) AS p90, QUANTILE(age, 0.25) FROM people",
        lambda: q().quantile("income", Fraction(9, 10), "p90").quantile("age", 0.25),
    ),
    (
        "SELECT PERCENTILE_CONT(0.75) WITHIN GROUP (ORDER BY income) AS q3 FROM people",
        lambda: q().quantile("income", Fraction(3, 4), "q3"),
    ),
    (
        "SELECT PERCENTILE_CONT(0.75) WITHIN GROUP (ORDER BY income DESC) AS q1 FROM people",
        lambda: q().quantile("income", Fraction(1, 4), "q1"),
    ),
    (
        "SELECT BIN(age, 0, 18, 65, 120) AS band, COUNT(*) AS n FROM people GROUP BY band",
        lambda: q().group_by(GroupKey("age", edges=(0, 18, 65, 120), alias="band")).count("n"),
    ),
    (
        "SELECT BIN(age, 0, 18, 65, 120) AS band, COUNT(*) AS n FROM people GROUP BY 1",
        lambda: q().bin("age", 0, 18, 65, 120, alias="band").count("n"),
    ),
    (
        "SELECT BIN(age, 0, 18, 65, 120), COUNT(*) FROM people GROUP BY BIN(age, 0, 18, 65, 120)",
        lambda: q().group_by(GroupKey("age", edges=(0, 18, 65, 120))).count(),
    ),
    (
        "SELECT BIN(income, -10, 0.5, 100) AS b, COUNT(*) FROM people GROUP BY 1",
        lambda: (
            q().group_by(GroupKey("income", edges=(-10, Fraction(1, 2), 100), alias="b")).count()
        ),
    ),
    (
        "SELECT state, COUNT(*) AS n FROM people WHERE age >= 18 AND sex = 'F' GROUP BY 1",
        lambda: q().where("age >= 18 AND sex = 'F'").group_by("state").count("n"),
    ),
    (
        'SELECT COUNT(*) FROM people AS p WHERE p.AGE BETWEEN 18 AND 65 AND "income" IS NOT NULL',
        lambda: q().where("age BETWEEN 18 AND 65 AND income IS NOT NULL").count(),
    ),
    (
        "SELECT COUNT(*) FROM people WHERE state IN ('CA', 'NY') OR lower(sex) LIKE 'f%'",
        lambda: q().where("state IN ('CA', 'NY') OR LOWER(sex) LIKE 'f%'").count(),
    ),
    (
        "SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING COUNT(*) > 100",
        lambda: q().group_by("state").count("n").having("n > 100"),
    ),
    (
        "SELECT state, AVG(income) AS a FROM people GROUP BY state HAVING a > 10 AND state <> 'CA'",
        lambda: q().group_by("state").avg("income", "a").having("a > 10 AND state <> 'CA'"),
    ),
    (
        "SELECT state AS s, COUNT(*) AS n FROM people GROUP BY state HAVING state = 'CA'",
        lambda: q().group_by(GroupKey("state", alias="s")).count("n").having("s = 'CA'"),
    ),
    (
        "SELECT state, COUNT(*) AS n FROM people GROUP BY state ORDER BY n DESC, state",
        lambda: q().group_by("state").count("n").order_by(SortKey("n", descending=True), "state"),
    ),
    (
        "SELECT state, SUM(income) FROM people GROUP BY state ORDER BY SUM(income) DESC LIMIT 3",
        lambda: (
            q().group_by("state").sum("income").order_by("sum_income", descending=True).limit(3)
        ),
    ),
    (
        "SELECT state, COUNT(*) FROM people GROUP BY state ORDER BY 2 LIMIT 5 OFFSET 5",
        lambda: q().group_by("state").count().order_by("count").limit(5, 5),
    ),
    (
        "SELECT COUNT(*) AS n FROM people GROUP BY sex ORDER BY sex",
        lambda: q().group_by("sex").count("n").order_by("sex").select("n"),
    ),
    (
        "SELECT\n  state,\n  MEDIAN(hours) AS h\nFROM people\nWHERE age > 15\nGROUP BY state\n"
        "ORDER BY h DESC\nLIMIT 10;",
        lambda: (
            q()
            .where("age > 15")
            .group_by("state")
            .median("hours", "h")
            .order_by("h", descending=True)
            .limit(10)
        ),
    ),
]


@pytest.mark.parametrize(("text", "builder"), CASES, ids=[c[0][:60] for c in CASES])
def test_sql_and_builder_give_the_same_plan(text: str, builder: Callable[[], Query]) -> None:
    from_sql, from_builder = sql_plan(text), built(builder())
    assert canonical(from_sql) == canonical(from_builder)
    assert fingerprint(from_sql) == fingerprint(from_builder)
    assert from_sql == from_builder


def test_a_grouped_query_becomes_scan_filter_aggregate_having_sort_limit_project() -> None:
    plan = sql_plan(
        "SELECT COUNT(*) AS n, state FROM people WHERE age > 18 GROUP BY state "
        "HAVING n > 5 ORDER BY n DESC LIMIT 3"
    )
    assert isinstance(plan, Project)
    assert plan.columns == ("n", "state")
    limit = plan.child
    assert isinstance(limit, Limit)
    assert (limit.count, limit.offset) == (3, 0)
    sort = limit.child
    assert isinstance(sort, Sort)
    assert sort.keys == (SortKey("n", True),)
    having = sort.child
    assert isinstance(having, Having)
    assert having.predicate.sql() == '"n" > 5'
    agg = having.child
    assert isinstance(agg, Aggregate)
    assert agg.keys == (GroupKey("state"),)
    assert agg.privacy_unit == "user_id"
    assert agg.contribution == Contribution()
    filt = agg.child
    assert isinstance(filt, Filter)
    assert filt.predicate.sql() == '"age" > 18'
    assert isinstance(filt.child, Scan)
    assert filt.child.table == "people"


def test_output_columns_follow_the_select_list() -> None:
    plan = sql_plan("SELECT AVG(income) AS a, state, COUNT(*) FROM people GROUP BY state")
    assert plan.column_names() == ("a", "state", "count")


def test_unaliased_aggregates_get_readable_default_names() -> None:
    plan = sql_plan(
        "SELECT COUNT(*), COUNT(DISTINCT user_id), SUM(income), AVG(income), VARIANCE(income), "
        "STDDEV(income), MEDIAN(age), QUANTILE_CONT(age, 0.999), MIN(age), MAX(age) FROM people"
    )
    assert plan.column_names() == (
        "count",
        "count_distinct_user_id",
        "sum_income",
        "avg_income",
        "variance_income",
        "stddev_income",
        "median_age",
        "p99_9_age",
        "min_age",
        "max_age",
    )


def test_only_bounds_of_clamped_columns_enter_the_plan() -> None:
    plan = sql_plan("SELECT state, SUM(income) FROM people GROUP BY state")
    assert isinstance(plan, Aggregate)
    assert [b.column for b in plan.bounds] == ["income"]
    assert (plan.bounds[0].lower, plan.bounds[0].upper) == (0, 1_000_000)


def test_session_settings_reach_the_aggregate() -> None:
    plan = parse(
        "SELECT state, COUNT(*) FROM people GROUP BY state",
        TABLES,
        privacy_unit="USER_ID",
        contribution=Contribution(max_groups=3, max_rows_per_group=2),
        domains={"state": ["CA", "NY", "TX"]},
    )
    assert isinstance(plan, Aggregate)
    assert plan.privacy_unit == "user_id"
    assert plan.contribution == Contribution(3, 2)
    assert plan.keys == (GroupKey("state", domain=("CA", "NY", "TX")),)


def test_histogram_bins_are_public_keys() -> None:
    plan = sql_plan("SELECT BIN(age, 0, 18, 65, 120) AS band, COUNT(*) FROM people GROUP BY band")
    assert isinstance(plan, Aggregate)
    assert plan.public_keys
    assert plan.keys[0].labels() == ("[0, 18)", "[18, 65)", "[65, 120]")


def test_identifiers_resolve_case_insensitively_to_the_schema_names() -> None:
    plan = sql_plan("SELECT STATE, Avg(Income) FROM People WHERE AGE > 3 GROUP BY State")
    assert plan.column_names() == ("state", "avg_income")


def test_an_arrow_schema_can_describe_the_table() -> None:
    schema = pa.schema([("uid", pa.int64()), ("city", pa.string()), ("pay", pa.float64())])
    plan = parse(
        "SELECT city, SUM(pay) FROM t GROUP BY city", {"t": schema}, bounds={"pay": (0, 1)}
    )
    assert isinstance(plan, Aggregate)
    scan = plan.child
    assert isinstance(scan, Scan)
    assert [(f.name, f.type) for f in scan.columns] == [
        ("uid", "integer"),
        ("city", "string"),
        ("pay", "real"),
    ]


def test_parse_query_returns_the_equivalent_builder() -> None:
    query = parse_query("SELECT sex, COUNT(*) FROM people GROUP BY sex", TABLES)
    assert query == q().group_by("sex").count().select("sex", "count")


def test_where_predicates_are_stored_as_sqlglot_trees_with_quoted_columns() -> None:
    plan = sql_plan("SELECT COUNT(*) FROM people p WHERE p.age > 1")
    assert isinstance(plan, Aggregate)
    assert isinstance(plan.child, Filter)
    predicate = plan.child.predicate
    assert isinstance(predicate, exp.GT)
    assert predicate.sql(dialect="duckdb") == '"age" > 1'


# ── public domains declared by the WHERE condition ──────────────────────────────────────────


def keys_of(text: str) -> tuple[GroupKey, ...]:
    plan = sql_plan(text)
    while not isinstance(plan, Aggregate):
        plan = plan.children[0]
    return plan.keys


def test_a_where_in_list_declares_the_public_domain_of_a_grouped_column() -> None:
    keys = keys_of(
        "SELECT state, COUNT(*) FROM people WHERE state IN ('CA', 'NY', 'WA') AND age > 3 "
        "GROUP BY state"
    )
    assert keys == (GroupKey("state", domain=("CA", "NY", "WA")),)


def test_an_equality_declares_a_one_key_domain_and_two_restrictions_intersect() -> None:
    assert keys_of("SELECT sex, COUNT(*) FROM people WHERE 'F' = sex GROUP BY sex") == (
        GroupKey("sex", domain=("F",)),
    )
    assert keys_of(
        "SELECT age, COUNT(*) FROM people WHERE age IN (30, 40, 50) AND (age IN (40, 50, 60)) "
        "GROUP BY age"
    ) == (GroupKey("age", domain=(40, 50)),)


@pytest.mark.parametrize(
    "where",
    [
        "state IN ('CA', 'NY') OR age > 3",  # not a top-level AND term
        "NOT state IN ('CA', 'NY')",
        "state IN ('CA', NULL)",
        "state <> 'CA'",
        "age IN (1.5, 2)",  # not integer literals for an integer column
        "age IN ('1', '2')",  # strings for an integer column
        "sex IN ('F')",  # sex is not grouped
    ],
)
def test_other_conditions_declare_no_domain(where: str) -> None:
    keys = keys_of(f"SELECT state, age, COUNT(*) FROM people WHERE {where} GROUP BY state, age")
    assert all(not k.is_public for k in keys)


def test_the_builder_infers_the_same_domain_from_where() -> None:
    text = "SELECT state, COUNT(*) AS n FROM people WHERE state IN ('CA', 'NY') GROUP BY state"
    query = q().where("state IN ('CA', 'NY')").group_by("state").count("n")
    assert sql_plan(text) == built(query)
    assert keys_of(text)[0].domain == ("CA", "NY")


def test_an_explicit_session_domain_wins_over_the_where_list() -> None:
    plan = parse(
        "SELECT state, COUNT(*) FROM people WHERE state IN ('CA', 'NY') GROUP BY state",
        TABLES,
        domains={"state": ["CA", "NY", "TX"]},
    )
    assert isinstance(plan, Aggregate)
    assert plan.keys[0].domain == ("CA", "NY", "TX")
