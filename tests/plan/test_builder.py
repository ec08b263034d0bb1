"""The Python query builder: immutable, validating, and equal to the SQL it mirrors."""

from __future__ import annotations

from fractions import Fraction
from typing import Any

import pyarrow as pa
import pytest

from support import people
from veil.errors import (
    InvalidArgumentError,
    SchemaError,
    UnsupportedQueryError,
)
from veil.plan.builder import Query, default_alias
from veil.plan.canonical import fingerprint
from veil.plan.nodes import Aggregate, Field, Filter, GroupKey, Project
from veil.plan.tree import fields_from_arrow
from veil.sql import parse

PEOPLE = people().columns


def q() -> Query:
    return Query.over("people", PEOPLE)


def test_each_call_returns_a_new_query_and_leaves_the_old_one_unchanged() -> None:
    base = q()
    grouped = base.group_by("state")
    assert base.keys == ()
    assert grouped.keys == (GroupKey("state"),)
    assert grouped is not base


def test_two_where_calls_combine_with_and_like_one_sql_where() -> None:
    built = q().where("age > 18").where("income < 5").count().plan()
    text = "SELECT COUNT(*) FROM people WHERE age > 18 AND income < 5"
    assert built == parse(text, {"people": PEOPLE})


def test_two_having_calls_combine_with_and() -> None:
    built = q().group_by("state").count("n").having("n > 1").having("n < 9").plan()
    text = "SELECT state, COUNT(*) AS n FROM people GROUP BY state HAVING n > 1 AND n < 9"
    assert fingerprint(built) == fingerprint(parse(text, {"people": PEOPLE}))


def test_where_accepts_a_sqlglot_expression() -> None:
    import sqlglot

    built = q().where(sqlglot.parse_one("AGE > 18")).count().plan()
    assert isinstance(built, Aggregate)
    assert isinstance(built.child, Filter)
    assert built.child.predicate.sql() == '"age" > 18'


def test_where_refuses_an_unknown_column_with_a_suggestion() -> None:
    with pytest.raises(SchemaError, match=r"unknown column 'incme' .* did you mean 'income'\?"):
        q().where("incme > 3")


def test_where_refuses_functions_outside_the_safe_list_with_a_position() -> None:
    with pytest.raises(
        UnsupportedQueryError, match=r"function GETENV\(\) is not supported in WHERE"
    ) as info:
        q().where("age > 1 AND getenv('HOME') = 'x'")
    assert info.value.position == (1, 13)


def test_where_refuses_bad_syntax() -> None:
    with pytest.raises(UnsupportedQueryError, match="cannot parse where"):
        q().where("age >")


def test_where_refuses_a_query() -> None:
    with pytest.raises(UnsupportedQueryError, match="must be an expression, not a query"):
        q().where("SELECT 1")


def test_where_refuses_an_empty_predicate() -> None:
    with pytest.raises(InvalidArgumentError, match="where\\(\\) must be a non-empty SQL"):
        q().where("  ")


def test_having_may_only_name_released_columns() -> None:
    with pytest.raises(UnsupportedQueryError, match="'age' is not a released column"):
        q().group_by("state").count("n").having("age > 3")


def test_having_refuses_aggregates() -> None:
    with pytest.raises(UnsupportedQueryError, match="not supported in HAVING"):
        q().group_by("state").count("n").having("SUM(income) > 3")


def test_group_by_refuses_an_unknown_column() -> None:
    with pytest.raises(SchemaError, match=r"unknown column 'sate' .* did you mean 'state'"):
        q().group_by("sate")


def test_group_by_refuses_other_objects() -> None:
    with pytest.raises(InvalidArgumentError, match="group_by\\(\\) takes column names"):
        q().group_by(3)  # type: ignore[arg-type]


def test_aggregates_resolve_column_names_case_insensitively() -> None:
    assert q().sum("INCOME").aggregates[0].column == "income"
    assert q().sum("INCOME").aggregates[0].alias == "sum_income"


def test_public_domains_from_the_session_fill_undeclared_keys() -> None:
    plan = q().group_by("state").count().plan(domains={"state": ["CA", "NY"]})
    assert isinstance(plan, Aggregate)
    assert plan.keys[0].domain == ("CA", "NY")
    assert plan.public_keys


def test_bounds_on_unused_or_unclamped_columns_stay_out_of_the_plan() -> None:
    plan = q().count().sum("income").plan(bounds={"income": (0, 10), "age": (0, 99)})
    assert isinstance(plan, Aggregate)
    assert [(b.column, b.lower, b.upper) for b in plan.bounds] == [("income", 0, 10)]


def test_malformed_bounds_are_refused_with_an_example() -> None:
    with pytest.raises(InvalidArgumentError, match=r"must be a \(lower, upper\) pair"):
        q().sum("income").plan(bounds={"income": 5})  # type: ignore[dict-item]


def test_select_reorders_output_columns_through_a_project() -> None:
    plan = q().group_by("state").count("n").select("n", "state").plan()
    assert isinstance(plan, Project)
    assert plan.column_names() == ("n", "state")


def test_select_in_the_natural_order_adds_no_project() -> None:
    plan = q().group_by("state").count("n").select("state", "n").plan()
    assert isinstance(plan, Aggregate)


def test_running_without_a_session_says_how_to_get_one() -> None:
    with pytest.raises(InvalidArgumentError, match="not bound to a session"):
        q().count().run(epsilon=1)


class _Recorder:
    """A QueryRunner that records what it was asked (the session's side of the protocol)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Query, dict[str, Any]]] = []

    def run_query(self, query: Query, **options: Any) -> Any:
        self.calls.append(("run", query, options))
        return "result"

    def explain_query(self, query: Query, **options: Any) -> Any:
        self.calls.append(("explain", query, options))
        return "explanation"


def test_run_and_explain_go_to_the_session_that_made_the_query() -> None:
    runner = _Recorder()
    query = Query.over("people", PEOPLE, runner=runner).count()
    assert query.run(epsilon=0.5) == "result"
    assert query.explain(epsilon=0.5) == "explanation"
    assert [(kind, opts) for kind, _, opts in runner.calls] == [
        ("run", {"epsilon": 0.5}),
        ("explain", {"epsilon": 0.5}),
    ]
    assert runner.calls[0][1] == query


def test_the_runner_does_not_change_query_equality() -> None:
    assert Query.over("people", PEOPLE, runner=_Recorder()) == q()


def test_arrow_types_map_to_coarse_column_types() -> None:
    schema = pa.schema(
        [
            ("i", pa.int8()),
            ("u", pa.uint64()),
            ("f", pa.float32()),
            ("d", pa.decimal128(10, 2)),
            ("s", pa.string()),
            ("ls", pa.large_string()),
            ("b", pa.bool_()),
            ("t", pa.timestamp("us")),
            ("day", pa.date32()),
            ("cat", pa.dictionary(pa.int32(), pa.string())),
            ("l", pa.list_(pa.int64())),
        ]
    )
    assert [f.type for f in fields_from_arrow(schema)] == [
        "integer",
        "integer",
        "real",
        "real",
        "string",
        "string",
        "boolean",
        "temporal",
        "temporal",
        "string",
        "other",
    ]


@pytest.mark.parametrize(
    ("function", "column", "quantile", "name"),
    [
        ("count", None, None, "count"),
        ("count", "age", None, "count_age"),
        ("count_distinct", "user_id", None, "count_distinct_user_id"),
        ("sum", "income", None, "sum_income"),
        ("quantile", "age", Fraction(1, 2), "median_age"),
        ("quantile", "age", Fraction(9, 10), "p90_age"),
        ("quantile", "age", Fraction(1, 40), "p2_5_age"),
        ("min", "age", None, "min_age"),
    ],
)
def test_default_aliases_read_like_column_names(
    function: Any, column: str | None, quantile: Fraction | None, name: str
) -> None:
    assert default_alias(function, column, quantile) == name


@pytest.mark.parametrize("text", ["?[0-", "'unterminated"])
def test_a_predicate_that_trips_the_sql_parser_is_a_user_error(text: str) -> None:
    with pytest.raises(UnsupportedQueryError, match=r"cannot (parse|read) where"):
        q().where(text)


@pytest.mark.parametrize(
    "predicate",
    [
        "date_trunc('month', d) = DATE '2020-01-01'",
        "regexp_matches(name, 'a.*')",
        "d > current_date - INTERVAL 30 DAY",
        "nullif(age, 0) > 1 AND quarter(d) = 1 AND dayofweek(d) = 1",
        "left(name, 2) = 'ab' AND replace(name, 'a', 'b') = 'x'",
        "strftime(d, '%Y') = '2020' AND year(d) = 2020 AND month(d) = 1",
        "CASE WHEN age > 3 THEN TRUE ELSE FALSE END",
    ],
)
def test_common_row_functions_are_allowed_in_where(predicate: str) -> None:
    table = Query.over(
        "t", [Field("age", "integer"), Field("name", "string"), Field("d", "temporal")]
    )
    assert table.where(predicate).predicate is not None


def test_group_by_keys_declares_a_public_domain_like_a_where_in_list() -> None:
    from_keys = q().group_by_keys("state", ["CA", "NY"]).count("n").plan()
    assert isinstance(from_keys, Aggregate)
    assert from_keys.keys == (GroupKey("state", domain=("CA", "NY")),)
    assert from_keys.public_keys
