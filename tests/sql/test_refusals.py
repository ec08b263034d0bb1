"""SQL outside veil's subset is refused with the reason and the (line, column) of the construct."""

from __future__ import annotations

import re

import pytest

from support import people
from veil.errors import SchemaError, UnsupportedQueryError
from veil.sql import parse

PEOPLE = people("user_id", "state", "sex", "age", "income").columns
TABLES = {"people": PEOPLE}


def run(text: str, *, unit: str | None = "user_id") -> None:
    parse(text, TABLES, privacy_unit=unit, bounds={"income": (0, 100), "age": (0, 120)})


# (query, pinned message, the text where the error points: its first occurrence)
REFUSED: list[tuple[str, str, str]] = [
    (
        "SELECT state, COUNT(*) FROM people JOIN other ON people.a = other.b GROUP BY state",
        "joins are not supported: veil answers queries over one table",
        "JOIN",
    ),
    (
        "SELECT COUNT(*) FROM people, other",
        "joins are not supported",
        ", other",
    ),
    (
        "SELECT COUNT(*) FROM (SELECT state FROM people)",
        "sub-queries are not supported",
        "SELECT state",
    ),
    (
        "SELECT COUNT(*) FROM people WHERE age > (SELECT AVG(age) FROM people)",
        "sub-queries are not supported",
        "SELECT AVG",
    ),
    (
        "SELECT COUNT(*) FROM people WHERE state IN (SELECT state FROM people)",
        "sub-queries are not supported",
        "SELECT state",
    ),
    (
        "WITH p AS (SELECT * FROM people) SELECT COUNT(*) FROM p",
        r"WITH \(common table expressions\) are not supported; query the table directly",
        "WITH",
    ),
    (
        "SELECT state, ROW_NUMBER() OVER (PARTITION BY state) FROM people",
        r"window functions \(… OVER \(…\)\) are not supported",
        "ROW_NUMBER",
    ),
    (
        "SELECT state, COUNT(*) OVER () FROM people",
        "window functions",
        "COUNT",
    ),
    (
        "SELECT COUNT(*) FROM people UNION SELECT COUNT(*) FROM people",
        "UNION is not supported: veil answers one SELECT over one table; run the queries "
        "separately",
        "UNION",
    ),
    (
        "SELECT COUNT(*) FROM people INTERSECT SELECT COUNT(*) FROM people",
        "INTERSECT is not supported",
        "INTERSECT",
    ),
    (
        "SELECT state, age, COUNT(*) FROM people GROUP BY state",
        r"column 'age' is neither grouped nor aggregated; add it to GROUP BY or aggregate it",
        "age,",
    ),
    (
        "SELECT * FROM people",
        r"SELECT \* is not supported: list the group keys and aggregates to release",
        "*",
    ),
    (
        "SELECT people.* FROM people",
        r"SELECT \* is not supported",
        "people.*",
    ),
    (
        "SELECT SUM(income * 2) FROM people",
        r"SUM\(income \* 2\): aggregates of expressions are not supported; aggregate a column",
        "income *",
    ),
    (
        "SELECT COUNT(DISTINCT state) FROM people",
        r"COUNT\(DISTINCT state\) is only supported on the privacy unit \(privacy unit: "
        r"user_id\); use COUNT\(\*\), or declare privacy_unit='state'",
        "COUNT",
    ),
    (
        "SELECT SUM(DISTINCT income) FROM people",
        r"DISTINCT is only supported as COUNT\(DISTINCT <privacy unit>\), not in SUM",
        "SUM",
    ),
    (
        "SELECT DISTINCT state FROM people",
        "SELECT DISTINCT is not supported; use GROUP BY",
        "DISTINCT",
    ),
    (
        "SELECT SUM(income) / COUNT(*) FROM people",
        r"arithmetic on aggregates \(SUM\(income\) / COUNT\(\*\)\) is not supported",
        "SUM",
    ),
    (
        "SELECT COUNT(*) FILTER (WHERE age > 3) FROM people",
        r"FILTER \(WHERE …\) on an aggregate is not supported; put the condition in WHERE",
        "COUNT",
    ),
    (
        "SELECT state, KURTOSIS(income) FROM people GROUP BY state",
        r"aggregate KURTOSIS is not supported; use COUNT\(\*\)",
        "KURTOSIS",
    ),
    (
        "SELECT APPROX_QUANTILE(income, 0.5) FROM people",
        "aggregate APPROX_QUANTILE is not supported",
        "APPROX_QUANTILE",
    ),
    (
        "SELECT QUANTILE_CONT(income, 1.5) FROM people",
        r"the quantile q must lie in \[0, 1\], got 1.5",
        "1.5",
    ),
    (
        "SELECT QUANTILE_CONT(income, [0.1, 0.5]) FROM people",
        "one quantile per call",
        "0.1",
    ),
    (
        "SELECT PERCENTILE_DISC(0.5) WITHIN GROUP (ORDER BY income) FROM people",
        r"only PERCENTILE_CONT\(q\) WITHIN GROUP \(ORDER BY col\) is supported",
        "PERCENTILE_DISC",
    ),
    (
        "SELECT COUNT(*) FROM people WHERE COUNT(*) > 3",
        "WHERE may only use row values, not aggregates; use HAVING",
        "COUNT(*) >",
    ),
    (
        "SELECT state, COUNT(*) FROM people GROUP BY state HAVING SUM(income) > 3",
        r"HAVING may use only released values, and SUM\(income\) is not in the SELECT list",
        "SUM",
    ),
    (
        "SELECT state, COUNT(*) FROM people GROUP BY state HAVING age > 3",
        r"'age' is not a released column; conditions after aggregation may use only the "
        r"query's output columns \(state, count\)",
        "age >",
    ),
    (
        "SELECT state, COUNT(*) FROM people GROUP BY state ORDER BY age",
        r"ORDER BY 'age': not a released column \(columns: state, count\)",
        "age",
    ),
    (
        "SELECT state, COUNT(*) FROM people GROUP BY state ORDER BY 5",
        r"ORDER BY 5 does not name an output column \(1…2\)",
        "5",
    ),
    (
        "SELECT state, COUNT(*) FROM people GROUP BY state LIMIT x",
        "LIMIT takes a whole number ≥ 0, got x",
        "x",
    ),
    (
        "SELECT COUNT(*) FROM people ORDER BY 1 OFFSET 3",
        "OFFSET needs a LIMIT",
        "3",
    ),
    (
        "SELECT COUNT(*) FROM people GROUP BY age / 10",
        r"GROUP BY supports columns and BIN\(column, edges…\), not 'age / 10'",
        "age /",
    ),
    (
        "SELECT COUNT(*) FROM people GROUP BY ROLLUP (state)",
        "GROUP BY ROLLUP is not supported; list the columns",
        "ROLLUP",
    ),
    (
        "SELECT COUNT(*) FROM people GROUP BY CUBE (state)",
        "GROUP BY CUBE is not supported",
        "CUBE",
    ),
    (
        "SELECT COUNT(*) FROM people GROUP BY GROUPING SETS ((state), ())",
        "GROUP BY GROUPING SETS is not supported",
        "GROUPING",
    ),
    (
        "SELECT state, COUNT(*) FROM people GROUP BY ALL",
        "GROUP BY ALL is not supported",
        "ALL",
    ),
    (
        "SELECT MIN(income, age) FROM people",
        "MIN takes exactly one column",
        "MIN",
    ),
    (
        "SELECT COUNT(*) FROM people GROUP BY 3",
        r"GROUP BY 3 does not name an item of the SELECT list \(1…1\)",
        "3",
    ),
    (
        "SELECT COUNT(*) FROM people GROUP BY 1",
        r"cannot GROUP BY an aggregate \(COUNT\(\*\)\)",
        "1",
    ),
    (
        "SELECT 1 + 1 FROM people",
        "SELECT may list group keys and aggregates only; '1 \\+ 1' is neither",
        "1 + 1",
    ),
    (
        "SELECT COUNT(*) FROM people WHERE read_text('/etc/passwd') = 'x'",
        r"function READ_TEXT\(\) is not supported in WHERE",
        "read_text",
    ),
    (
        "SELECT COUNT(*) FROM people WHERE random() > 0.5",
        r"function RANDOM\(\) is not supported in WHERE",
        "random",
    ),
    (
        "SELECT COUNT(*) FROM db.people",
        r"name the table alone \('people'\), without a schema or catalog",
        "db.people",
    ),
    (
        "SELECT COUNT(*) FROM read_parquet('x.parquet')",
        "FROM must name one table",
        "read_parquet",
    ),
    (
        "SELECT COUNT(*) FROM people; SELECT 1",
        r"give exactly one SELECT statement \(found 2\)",
        ";",
    ),
    (
        "INSERT INTO people VALUES (1)",
        "only SELECT queries are supported, not INSERT",
        "INSERT",
    ),
    (
        "DROP TABLE people",
        "only SELECT queries are supported, not DROP",
        "DROP",
    ),
    (
        "SELECT COUNT(* FROM people",
        "cannot parse the query near 'FROM': Expecting \\)",
        "FROM",
    ),
    (
        "SELECT COUNT(*) FROM people GROUP BY user_id",
        "grouping by the privacy unit 'user_id' would release one group per unit",
        "user_id",
    ),
    (
        "SELECT COUNT(*) AS n, SUM(income) AS n FROM people",
        r"output column 'n' is used twice; give each aggregate its own alias \(AS …\)",
        "SUM",
    ),
    (
        "SELECT BIN(age, 0) FROM people GROUP BY 1",
        r"BIN takes a column and at least two edges: BIN\(age, 0, 18, 65, 120\)",
        "BIN",
    ),
    (
        "SELECT BIN(age, 10, 5) AS b, COUNT(*) FROM people GROUP BY b",
        "BIN edges must increase strictly, got 10, 5",
        "BIN",
    ),
    (
        "SELECT BIN(state, 1, 2) AS b, COUNT(*) FROM people GROUP BY b",
        r"BIN needs a numeric column; 'state' is string \(group by it directly\)",
        "BIN",
    ),
    (
        "SELECT BIN(age, 0, 10), COUNT(*) FROM people GROUP BY state",
        r"BIN\(age, 0, 10\) is selected but not grouped; add it to GROUP BY",
        "BIN",
    ),
    (
        "SELECT SUM(user_id) FROM people",
        "SUM of the privacy unit 'user_id' is not supported",
        "SUM",
    ),
    (
        "SELECT COUNT(*) FROM people QUALIFY 1",
        "QUALIFY is not supported in veil's SQL subset",
        "1",
    ),
]


@pytest.mark.parametrize(("text", "message", "marker"), REFUSED, ids=[r[0][:50] for r in REFUSED])
def test_sql_outside_the_subset_is_refused_with_its_position(
    text: str, message: str, marker: str
) -> None:
    expected = (1, text.index(marker) + 1)
    with pytest.raises(UnsupportedQueryError, match=message) as info:
        run(text)
    assert info.value.position == expected
    assert str(info.value).endswith(f"(at line {expected[0]}, column {expected[1]})")


def test_positions_count_lines_and_columns_from_one() -> None:
    text = "SELECT state,\n       COUNT(*)\nFROM people\n  JOIN other ON 1 = 1\nGROUP BY state"
    with pytest.raises(UnsupportedQueryError, match="joins are not supported") as info:
        run(text)
    assert info.value.position == (4, 3)


def test_a_parse_error_on_a_later_line_points_at_the_offending_token() -> None:
    with pytest.raises(UnsupportedQueryError, match="cannot parse the query near '='") as info:
        run("SELECT COUNT(*)\nFROM people\nWHERE age = = 1")
    assert info.value.position == (3, 13)


def test_count_distinct_without_a_privacy_unit_says_none_is_declared() -> None:
    with pytest.raises(UnsupportedQueryError, match=r"privacy unit: none declared"):
        run("SELECT COUNT(DISTINCT user_id) FROM people", unit=None)


def test_an_empty_query_is_refused() -> None:
    with pytest.raises(UnsupportedQueryError, match="the query is empty"):
        run("   ")


def test_a_query_without_from_is_refused() -> None:
    with pytest.raises(UnsupportedQueryError, match="the query needs FROM <table>"):
        run("SELECT COUNT(*)")


def test_an_unterminated_string_is_refused() -> None:
    with pytest.raises(UnsupportedQueryError, match="cannot read the query"):
        run("SELECT COUNT(*) FROM people WHERE state = 'CA")


# ── schema errors: a did-you-mean and the position ──────────────────────────────────────────


@pytest.mark.parametrize(
    ("text", "message", "marker"),
    [
        (
            "SELECT COUNT(*) FROM peple",
            r"unknown table 'peple'; did you mean 'people'\? \(tables: people\)",
            "peple",
        ),
        (
            "SELECT COUNT(*) FROM people WHERE agee > 3",
            r"unknown column 'agee' in table 'people'; did you mean 'age'\? \(columns: user_id, "
            r"state, sex, age, income\)",
            "agee",
        ),
        (
            "SELECT COUNT(*) FROM people GROUP BY stat",
            r"unknown column 'stat' in table 'people'; did you mean 'state'\?",
            "stat",
        ),
        (
            "SELECT AVG(incom) FROM people",
            r"unknown column 'incom' in table 'people'; did you mean 'income'\?",
            "incom",
        ),
        (
            "SELECT COUNT(*) FROM people p WHERE q.age > 3",
            r"unknown table or alias 'q' in 'q.age'; the query reads only 'people'",
            "q.age",
        ),
        (
            "SELECT MEDIAN(state) FROM people",
            r"MEDIAN\(state\) needs a numeric column, but 'state' is string",
            "MEDIAN",
        ),
        (
            "SELECT COUNT(*) FROM people WHERE zzz = 1",
            r"unknown column 'zzz' in table 'people' \(columns:",
            "zzz",
        ),
    ],
)
def test_unknown_names_raise_schema_errors_with_a_suggestion(
    text: str, message: str, marker: str
) -> None:
    where = text.index(marker) + 1
    with pytest.raises(SchemaError, match=message) as info:
        run(text)
    assert str(info.value).endswith(f"(at line 1, column {where})")


def test_messages_never_leak_a_python_class_name() -> None:
    with pytest.raises(UnsupportedQueryError) as info:
        run("SELECT a FROM people WHERE")
    assert "<class" not in str(info.value)
    assert re.search(r"incomplete WHERE", str(info.value))


@pytest.mark.parametrize("text", ["?[0-", "?[/", "SELECT ?[0- FROM people"])
def test_text_that_trips_the_sql_parser_itself_is_a_user_error(text: str) -> None:
    with pytest.raises(UnsupportedQueryError, match="cannot parse the query"):
        run(text)
