"""A PostgreSQL ``numeric`` of any magnitude reads totally (issue 33).

PostgreSQL casts a NUMERIC to double precision through ``strtod`` and refuses exactly the
magnitudes that round to ±inf (|v| ≥ 2^1024 − 2^970) or to ±0 (0 < |v| ≤ 2^-1075); a
subnormal is accepted. A value below the double range failed the cast after the charge, and
only when its row passed the WHERE: an exact yes/no oracle. The lowering maps every value, by
comparisons in the column's own type, to the double Python's correctly rounded
``float(Decimal(v))`` gives — the cast's own double wherever the cast succeeds, ±0 and ±inf
where it fails — and the same expression reads ``double precision`` and ``real`` columns as
their own values.
"""

from __future__ import annotations

import itertools
import math
import struct
from collections.abc import Iterator
from decimal import Decimal
from fractions import Fraction
from typing import Any

import pytest
from sqlglot import exp

import postgres_support
import veil
from veil.compile import Context as CompileContext
from veil.compile import apply_rules, dialect, lower
from veil.errors import QueryFailedError, UserError
from veil.plan import Aggregate, AggregateCall, ColumnBounds, Field, Scan, aggregate_of

pytestmark = pytest.mark.postgres

_TABLES = itertools.count()
HALF = Fraction(1, 2**1075)  # half the smallest subnormal: the cast refuses it (a tie → 0)
SUB = Fraction(1, 2**1074)
MAX = Fraction(2**1024 - 2**971)
TOP = MAX + 2**970  # the midpoint above the largest double: the cast refuses it (a tie → inf)


def _exact_text(x: Fraction) -> str:
    """``x`` (a dyadic rational) as an exact decimal text, ``n·5^k e-k`` for ``n / 2^k``."""
    k = x.denominator.bit_length() - 1
    assert x.denominator == 1 << k
    return f"{x.numerator * 5**k}e-{k}" if k else str(x.numerator)


EDGES = [HALF, HALF + Fraction(1, 2**1200), SUB, SUB - Fraction(1, 2**1200), 3 * HALF,
         TOP, TOP - 1, MAX, MAX + 1, MAX - 1, Fraction(10**400)]  # fmt: skip
NUMERIC_VALUES = [
    "0", "1", "-2.5", "1e-400", "-1e-400", "1e-330", "-1e-330", "2.5e-324", "5e-324", "1e-320",
    "1e-308", "1e308", "1.7976931348623157e308", "1.7976931348623159e308", "1e400", "-1e400",
    *(s + _exact_text(v) for v in EDGES for s in ("", "-")),
]  # fmt: skip


@pytest.fixture
def sql() -> Iterator[Any]:
    con = postgres_support.connection()
    con.execute(f'SET search_path = "{postgres_support.schema()}"')
    yield con
    con.execute("RESET search_path")


def _real_expression(column: str) -> exp.Expression:
    """The expression the PostgreSQL lowering reads ``column`` (a real column) through."""
    scan = Scan("t", (Field("uid", "integer"), Field(column, "real")))
    plan = Aggregate(
        scan, keys=(), aggregates=(AggregateCall("s", "sum", column),),
        bounds=(ColumnBounds(column, 0, 1),),
    )  # fmt: skip
    ctx = CompileContext(budget=veil.Budget(epsilon=1), privacy_unit="uid")
    lowered = lower(aggregate_of(apply_rules(plan, ctx)), dialect("postgres"), salt=1)
    return next(a.this for a in lowered.main.find_all(exp.Alias) if a.alias == "__x0")


def _doubles(sql: Any, column_type: str, values: list[str]) -> list[tuple[str, float]]:
    """Each value stored in a ``column_type`` column, and the double the lowering reads."""
    table = f"reals_{next(_TABLES)}"
    sql.execute(f"CREATE TABLE {table} (i integer, x {column_type})")
    for i, v in enumerate(values):
        sql.execute(f"INSERT INTO {table} VALUES ({i}, '{v}')")
    expression = _real_expression("x").sql(dialect="postgres")
    rows = sql.execute(
        f"SELECT i, x::text, float8send({expression}) FROM {table} ORDER BY i"
    ).fetchall()
    return [(text, struct.unpack(">d", bytes(raw))[0]) for _, text, raw in rows]


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or (
        a == b and math.copysign(1, a) == math.copysign(1, b)
    )


def test_every_numeric_magnitude_reads_as_its_correctly_rounded_double(sql: Any) -> None:
    values = [*NUMERIC_VALUES, "NaN", "Infinity", "-Infinity"]
    for text, got in _doubles(sql, "numeric", values):
        expected = float(Decimal(text))  # rounds to nearest; ±0 and ±inf past the range
        assert _same(got, expected), (text[:60], got, expected)


def test_the_cast_refuses_exactly_the_values_mapped_around_it(sql: Any) -> None:
    """The premise: PostgreSQL's own cast fails on exactly the magnitudes that round to ±0 or
    ±inf, and accepts the subnormals and the values that round to the largest double."""
    for v in NUMERIC_VALUES:
        rounded = float(Decimal(v))
        fails = Decimal(v) != 0 and (rounded == 0 or math.isinf(rounded))
        try:
            sql.execute(f"SELECT '{v}'::numeric::float8")
            failed = False
        except Exception:  # psycopg's out-of-range error
            failed = True
        assert failed == fails, v[:60]


@pytest.mark.parametrize("column_type", ["double precision", "real"])
def test_double_and_real_columns_read_as_their_own_values(sql: Any, column_type: str) -> None:
    values = ["0", "-0", "Infinity", "-Infinity", "NaN", "3.5", "1e-45", "-1e-45", "3.4e38"]
    if column_type == "double precision":
        values += ["5e-324", "-5e-324", "1e-310", "1.7976931348623157e308",
                   "-1.7976931348623157e308"]  # fmt: skip
    rows = _doubles(sql, column_type, values)
    table = f"own_{next(_TABLES)}"
    sql.execute(f"CREATE TABLE {table} (i integer, x {column_type})")
    for i, v in enumerate(values):
        sql.execute(f"INSERT INTO {table} VALUES ({i}, '{v}')")
    own = sql.execute(f"SELECT float8send(x::float8) FROM {table} ORDER BY i").fetchall()
    for (text, got), (raw,) in zip(rows, own, strict=True):
        assert _same(got, struct.unpack(">d", bytes(raw))[0]), text


def _outcome(session: veil.Session, query: str, **options: Any) -> str:
    before = session.remaining()
    try:
        session.sql(query, **options)
    except QueryFailedError:
        return "failed after the charge"
    except UserError as err:
        assert session.remaining() == before
        return f"refused free: {type(err).__name__}"
    finally:
        session.close()
    return "released"


@pytest.mark.parametrize("value", ["1e-400", "-1e-400", _exact_text(HALF), "1e400", "5e-324"])
@pytest.mark.parametrize(
    "query",
    [
        "SELECT SUM(n) FROM t WHERE w = 'target'",
        "SELECT AVG(n), MEDIAN(n) FROM t",
        "SELECT BIN(n, 0, 0.5, 1) AS b, COUNT(*) FROM t GROUP BY b",
        "SELECT COUNT(*) FROM t WHERE n > 0",
    ],
)
def test_a_numeric_beyond_the_double_range_gives_the_same_outcome_on_both_neighbours(
    sql: Any, value: str, query: str
) -> None:
    outcomes = []
    for with_target in (True, False):
        table = f"n_{next(_TABLES)}"
        sql.execute(f"CREATE TABLE {table} (uid bigint, n numeric, w text)")
        sql.execute(
            f"INSERT INTO {table} SELECT g, (g % 7) / 7.0, 'target' FROM generate_series(1, 40) g"
        )
        if with_target:
            sql.execute(f"INSERT INTO {table} VALUES (99, '{value}', 'target')")
        session = veil.Session.postgres(
            postgres_support.PG_URL, {"t": f"{postgres_support.schema()}.{table}"},
            privacy_unit="uid", budget=veil.Budget(epsilon=100, delta=1e-3),
        )  # fmt: skip
        options: dict[str, Any] = {"epsilon": 1}
        if "SUM" in query or "AVG" in query:
            options["bounds"] = {"n": (0, 1)}
        outcomes.append(_outcome(session, query, **options))
    assert outcomes == ["released", "released"], (value, query, outcomes)
