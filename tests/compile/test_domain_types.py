"""Public domains are checked against the column types when compiling: refused, never charged."""

from __future__ import annotations

import pandas as pd
import pytest

import veil
from veil.accounting import Budget
from veil.compile.rules import Context, check_domains
from veil.errors import SchemaError
from veil.plan import Aggregate, AggregateCall, Field, GroupKey, Scan

TABLE = Scan(
    "t",
    (
        Field("age", "integer"),
        Field("state", "string"),
        Field("hours", "real"),
        Field("member", "boolean"),
        Field("day", "temporal"),
    ),
)
CTX = Context(budget=Budget(epsilon=1))


def grouped(column: str, domain: tuple[object, ...]) -> Aggregate:
    key = GroupKey(column, domain=domain)  # type: ignore[arg-type]
    return Aggregate(TABLE, keys=(key,), aggregates=(AggregateCall("n", "count"),))


@pytest.mark.parametrize(
    ("column", "domain"),
    [
        ("age", (18, 19.0, None)),
        ("age", (-(2**63), 0, 2**64 - 1)),
        ("state", ("CA", "NY")),
        ("hours", (1, 2.5)),
        ("member", (True, False)),
        ("day", ("2024-01-31", "2024-02-01 10:00:00")),
    ],
)
def test_keys_of_the_columns_type_pass_unchanged(column: str, domain: tuple[object, ...]) -> None:
    plan = grouped(column, domain)
    assert check_domains(plan, CTX) is plan


@pytest.mark.parametrize(
    ("column", "domain", "message"),
    [
        (
            "age",
            ("x",),
            r"'age' holds 'x' \(str\), but 'age' is an integer column; pass its keys "
            r"as integers",
        ),
        ("age", (1, 2.5), r"'age' holds 2.5 \(float\).*integer column"),
        ("age", (True,), r"'age' holds True \(bool\).*integer column"),
        # plain ints are checked in bulk: one beyond either end of 64 bits is still named
        ("age", (1, 2, 2**64), r"'age' holds 18446744073709551616 \(int\).*integer column"),
        ("age", (-(2**63) - 1, 0), r"'age' holds -9223372036854775809 \(int\)"),
        (
            "state",
            (1,),
            r"'state' holds 1 \(int\), but 'state' is a string column; pass its keys "
            r"as strings",
        ),
        (
            "hours",
            ("z",),
            r"'hours' holds 'z' \(str\).*real column; pass its keys as finite numbers",
        ),
        ("hours", (float("nan"),), r"'hours' holds nan"),
        ("member", ("no",), r"'member' holds 'no' \(str\).*boolean column; pass its keys as True"),
        ("day", ("yesterday",), r"'day' holds 'yesterday'.*temporal column; pass its keys as ISO"),
    ],
)
def test_a_key_of_another_type_is_a_schema_error_naming_column_value_and_fix(
    column: str, domain: tuple[object, ...], message: str
) -> None:
    with pytest.raises(SchemaError, match=message):
        check_domains(grouped(column, domain), CTX)


@pytest.fixture
def session() -> veil.Session:
    frame = pd.DataFrame({"age": [30, 40, 50] * 20, "state": ["CA", "NY", "WA"] * 20})
    return veil.Session.local(tables={"t": frame}, budget=veil.Budget(epsilon=5, delta=1e-6))


def test_a_wrong_type_domain_is_refused_before_anything_is_charged(
    session: veil.Session,
) -> None:
    before = session.remaining()
    with pytest.raises(SchemaError, match=r"'age' holds 'x' \(str\).*integer column"):
        session.sql(
            "SELECT age, COUNT(*) AS n FROM t GROUP BY age", epsilon=1, domains={"age": ["x"]}
        )
    with pytest.raises(SchemaError, match=r"'state' holds 7 \(int\).*string column"):
        session.query("t").group_by_keys("state", [7]).count().run(epsilon=1)
    with pytest.raises(SchemaError, match=r"'age' holds 'x'"):
        session.explain(
            "SELECT age, COUNT(*) AS n FROM t GROUP BY age", epsilon=1, domains={"age": ["x"]}
        )
    assert session.remaining() == before
    # the same query with well-typed keys runs and is charged
    session.sql("SELECT age, COUNT(*) AS n FROM t GROUP BY age", epsilon=1, domains={"age": [30]})
    assert session.remaining() != before
